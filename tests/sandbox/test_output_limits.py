"""A script's stdout is its answer: its cap is ``max_script_stdout`` (16 MiB by default,
settable per run), a call's stays ``max_stdout``; over either, ``output_limit`` with the
output kept up to the cap."""

from __future__ import annotations

import pytest

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

BIG = "print('\\n'.join(map(str, range(200_000))))\n"  # 1,288,890 characters, no Python loop
BIG_TEXT = "\n".join(str(i) for i in range(200_000)) + "\n"


@pytest.fixture(scope="module")
def box():
    with Sandbox(Limits(timeout_s=60.0)) as sandbox:
        yield sandbox


def test_the_defaults():
    limits = Limits()
    assert (limits.max_stdout, limits.max_script_stdout) == (65_536, 16 * 1024 * 1024)
    assert limits.for_shape("script").max_stdout == 16 * 1024 * 1024
    assert limits.for_shape("call") is limits


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_a_judge_sized_answer_is_kept_whole(box, isolation):
    """A script printing 200,000 numbers (1.3 MB, the size of a Codeforces answer) is
    ok with all of it; the same print in a call is cut at the call's 65,536."""
    result = box.run({"code": BIG, "input": "", "shape": "script"}, isolation).result
    assert (result["status"], len(result["stdout"]), result["stdout"] == BIG_TEXT) == (
        "ok", len(BIG_TEXT), True)
    call = box.run({"code": "def f():\n    " + BIG, "input": "", "entry": "f"}, isolation).result
    assert (call["status"], call["exception_message"], call["stdout"]) == (
        "output_limit", "stdout exceeds 65536 characters", BIG_TEXT[:65_536])


def test_the_scripts_cap_is_set_per_run():
    with Sandbox(Limits(timeout_s=60.0, max_script_stdout=1000)) as small:
        result = small.run({"code": BIG, "input": "", "shape": "script"}).result
        assert (result["status"], result["exception_message"], result["stdout"]) == (
            "output_limit", "stdout exceeds 1000 characters", BIG_TEXT[:1000])
        stderr = small.run({"code": "import sys\nsys.stderr.write('e' * 1001)\n", "input": "",
                            "shape": "script"}).result
        assert (stderr["status"], stderr["exception_message"]) == (
            "output_limit", "stderr exceeds 1000 characters")
        call = small.run({"code": "def f():\n    print('x' * 5000)\n", "input": ""}).result
        assert (call["status"], len(call["stdout"])) == ("ok", 5001)
