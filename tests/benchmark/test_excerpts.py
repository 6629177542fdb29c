"""Excerpts of real package functions (steptrace.benchmark._excerpts) and the repair loop
over them: a package made here, read as pip leaves it; the function as it sits in its
module, its project's names left missing and listed; repair against the real HTTP test
server standing in for a model that reads the package (tests/helpers/repair_model.py),
run in the real sandbox; hostile package files counted, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from steptrace.benchmark._excerpts import (ID_TAKEN, METHOD, NOT_A_RECORD, TOO_LONG,
                                           excerpts_of_site, write_excerpts)
from steptrace.benchmark._repair import RepairOptions, repair
from steptrace.benchmark._scan import (NOT_READ_NESTED, NOT_READ_OS, NOT_READ_SIZE,
                                       NOT_READ_SYNTAX, NOT_READ_UTF8, ScanReport,
                                       read_distributions)
from steptrace.cli._main import main
from steptrace.predictions._options import PredictOptions

from helpers.benchmark import installed_site
from helpers.repair_model import ContextModel

PROJECT = {
    "proj/__init__.py": "from .text import title\nfrom .util import Box\n",
    "proj/consts.py": "SEP = '-'\n",
    "proj/util.py": ("import re\n\n\ndef helper(word):\n"
                     "    return re.sub('[^a-z]', '', word.lower())\n\n\n"
                     "class Box:\n    @staticmethod\n    def wrap(x: int) -> list:\n"
                     "        return [x]\n"),
    "proj/text.py": ("import re\nimport os.path\nfrom .consts import SEP\n"
                     "from .util import helper\n\nSUFFIX = '!'\n\n\n"
                     "def title(words: list) -> str:\n"
                     "    \"\"\"Join the cleaned words.\"\"\"\n"
                     "    return SEP.join(helper(w) for w in words) + SUFFIX\n\n\n"
                     "def shout(word: str) -> str:\n    return word.upper() + '!'\n"),
}
TITLE_CODE = ("from proj.consts import SEP\nfrom proj.util import helper\n\n\n"
              "def title(words: list) -> str:\n    \"\"\"Join the cleaned words.\"\"\"\n"
              "    return SEP.join(helper(w) for w in words) + SUFFIX\n")


def site(tmp_path: Path, files: dict[str, str] = PROJECT) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    return installed_site(root, "proj-1.2", files)


def by_id(records: list[dict]) -> dict[str, dict]:
    return {record["id"]: record for record in records}


def test_an_excerpt_is_the_function_as_it_sits_with_its_project_names(tmp_path):
    summary = excerpts_of_site(site(tmp_path))
    records = by_id(summary.records)
    assert sorted(records) == ["proj.text.shout", "proj.title", "proj.util.helper"]
    title = records["proj.title"]
    assert {k: v for k, v in title.items() if k != "source_digest"} == {
        "id": "proj.title", "code": TITLE_CODE, "entry": "title", "input": "",
        "module": "proj", "defined_in": "proj.text", "distribution": "proj",
        "version": "1.2",
        "project_names": {"SEP": "proj.consts.SEP", "SUFFIX": "proj.text.SUFFIX",
                          "helper": "proj.util.helper"}}
    assert len(title["source_digest"]) == 64
    # the module's unused imports (re, os.path) are not the excerpt's; a function using
    # nothing of its project has no project names
    assert records["proj.util.helper"]["code"] == (
        "import re\n\n\ndef helper(word):\n    return re.sub('[^a-z]', '', word.lower())\n")
    assert records["proj.util.helper"]["project_names"] == {}
    assert (summary.found, summary.written, summary.skipped, summary.with_project_names,
            summary.project_names, summary.distributions) == (
        4, 3, {METHOD: 1}, 1, 3, {"proj": 3})


def test_count_limits_the_excerpts_of_a_distribution_and_the_command_writes_them(tmp_path):
    root = site(tmp_path)
    out = tmp_path / "excerpts.jsonl"
    result = CliRunner().invoke(main, ["excerpts", "--site", str(root), "--count", "2",
                                       "--out", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["found"], summary["written"], summary["beyond_count"]) == (4, 2, 1)
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [
        "proj.text.shout", "proj.title"]
    result = CliRunner().invoke(main, ["excerpts", "--site", str(root), "--lock", "x.lock",
                                       "--out", str(out)])
    assert result.exit_code == 2 and "one of them" in result.output
    result = CliRunner().invoke(main, ["excerpts", "--site", str(tmp_path / "none"),
                                       "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: site not found: ")


def modules_of(root: Path) -> dict:
    (_, exports, _), = read_distributions(root, None, ScanReport())
    return exports.modules


def calls(signature: str, n: int) -> list[str]:
    """The test server's calls: one for each function of the package made here."""
    return {"def title(words: list) -> str": ["title(['Ab', 'c1D'])"],
            "def shout(word: str) -> str": ["shout('hey')"]}.get(signature, [])


def run(tmp_path: Path, records: list[dict], root: Path, rounds: int = 3, wrong=()):
    model = ContextModel(by_id(records), modules_of(root), calls,
                         wrong=lambda ident: ident in wrong)
    with model as server:
        summary = repair(records, tmp_path / "out.jsonl",
                         PredictOptions(model="stub-model", base_url=server.base_url,
                                        concurrency=1, max_retries=0),
                         RepairOptions(rounds=rounds, workers=0))
    log = [json.loads(line) for line in (tmp_path / "out.log.jsonl").read_text().splitlines()]
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return summary, log, by_id(out)


def test_repair_names_what_an_excerpt_lacks_and_keeps_it_once_its_tests_pass(tmp_path):
    root = site(tmp_path)
    records = [by_id(excerpts_of_site(root).records)["proj.title"]]
    summary, log, out = run(tmp_path, records, root)
    assert [(line["round"], line["outcome"]["status"], line["outcome"]["passed"])
            for line in log] == [(0, "missing_module", False), (1, "ok", True)]
    assert log[0]["outcome"]["feedback"] == (
        "Run 1 of 1: title() ended with status missing_module.\n"
        "  ModuleNotFoundError: No module named 'proj'\n"
        "Names the program uses but never defines or imports: `SUFFIX` (its project "
        "defines them elsewhere: define them in the program, or import them from a module "
        "the guest has).\n"
        "Modules the guest does not have: `proj` (put what the program needs from them "
        "into the program).\n"
        "Names the program imports from them: `SEP` from `proj.consts`, `helper` from "
        "`proj.util`.")
    repaired = out["proj.title"]
    assert repaired["code"] == (
        "import re\n\n\n# from proj.consts\nSEP = '-'\n\n\n# from proj.util\n"
        "def helper(word):\n    return re.sub('[^a-z]', '', word.lower())\n\n\n"
        "# from proj.text\nSUFFIX = '!'\n\n\n# the excerpt\n"
        "def title(words: list) -> str:\n    \"\"\"Join the cleaned words.\"\"\"\n"
        "    return SEP.join(helper(w) for w in words) + SUFFIX\n")
    assert (repaired["entry"], repaired["input"], repaired["rounds"],
            repaired["model_written"], repaired["project_names"]["SEP"]) == (
        "TestExample.test_example", "", 1, True, "proj.consts.SEP")
    assert "result = title(['Ab', 'c1D'])" in repaired["test"]
    assert log[1]["outcome"]["runs"][0]["line_steps"] > 0
    assert (summary.done, summary.as_given, summary.fixed, summary.given_up) == (1, 0, {1: 1}, 0)


def test_a_test_that_does_not_call_the_function_is_not_kept(tmp_path):
    """The server's round-1 test for `shout` asserts a constant: it passes but runs no
    line of the program, so the example is not done; given one round only it is given up
    and not in the output, given two its round-2 test calls it and it is kept."""
    root = site(tmp_path)
    records = [by_id(excerpts_of_site(root).records)["proj.text.shout"]]
    summary, log, out = run(tmp_path, records, root, rounds=1, wrong={"proj.text.shout"})
    assert [(line["round"], line["outcome"]["status"], line["outcome"]["problem"])
            for line in log] == [
        (0, "exception", "ended with status exception"),
        (1, "failed_tests", "the test passed without running a single line of the "
                            "program: it must call the program and check what it returns")]
    assert out == {} and (summary.done, summary.given_up) == (0, 1)
    summary, log, out = run(tmp_path, records, root, rounds=2, wrong={"proj.text.shout"})
    assert [line["round"] for line in log][-1] == 2 and out["proj.text.shout"]["rounds"] == 2
    assert (summary.done, summary.fixed) == (1, {2: 1})


def test_hostile_package_files_are_counted_not_a_crash(tmp_path):
    files = {
        "bad/__init__.py": "def fine(x: int) -> int:\n    return x\n",
        "bad/broken.py": "def f(:\n",
        "bad/latin.py": "# caf\xe9\ndef g(x):\n    return x\n",
        "bad/huge.py": "X = 1\n" + "#" * (4 * 1024 * 1024) + "\n",
        "bad/deep.py": "def deep(x):\n    return " + "+".join(["x"] * 5000) + "\n",
        "bad/long.py": "def long(x):\n" + "    x += 1\n" * 2000 + "    return x\n",
    }
    root = tmp_path / "site"
    root.mkdir()
    installed_site(root, "bad-0.1", {k: v for k, v in files.items() if k != "bad/latin.py"})
    (root / "bad" / "latin.py").write_bytes(files["bad/latin.py"].encode("latin-1"))
    record = root / "bad-0.1.dist-info" / "RECORD"
    record.write_text(record.read_text() + "bad/latin.py,sha256=x,1\n")
    summary = write_excerpts(tmp_path / "out.jsonl", site=root)
    assert summary.modules_not_read == {NOT_READ_NESTED: 1, NOT_READ_SIZE: 1,
                                        NOT_READ_SYNTAX: 1, NOT_READ_UTF8: 1}
    assert [r["id"] for r in summary.records] == ["bad.fine"]
    assert summary.skipped == {TOO_LONG: 1}
    assert (summary.found, summary.modules) == (2, 2)
    assert [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text()
            .splitlines()] == ["bad.fine"]


def test_files_that_are_no_regular_files_and_a_bad_record_are_never_read(tmp_path):
    """A module that is a FIFO (reading it would wait forever) or a link to /dev/zero
    (endless) is counted as not read; a RECORD that is not UTF-8 is no crash."""
    import os
    root = tmp_path / "site"
    root.mkdir()
    installed_site(root, "odd-1.0", {"odd/__init__.py": "def f(x: int) -> int:\n    return x\n"})
    os.mkfifo(root / "odd" / "fifo.py")
    (root / "odd" / "zero.py").symlink_to("/dev/zero")
    record = root / "odd-1.0.dist-info" / "RECORD"
    record.write_bytes(record.read_bytes() + b"odd/fifo.py,,\nodd/zero.py,,\nodd/\xff.py,,\n")
    summary = excerpts_of_site(root)
    assert summary.modules_not_read == {NOT_READ_OS: 2}
    assert [r["id"] for r in summary.records] == ["odd.f"]


def test_lines_are_cut_where_python_numbers_them(tmp_path):
    """A form feed between functions and U+2028 in a string are no line breaks to Python:
    the excerpt is the function's lines, not its neighbour's."""
    text = ("def a():\n    return 1\n\x0c\ndef b(s: str) -> str:\n"
            "    return s + '\u2028' + a()\n\n\ndef c():\n    return 2\n")
    summary = excerpts_of_site(site(tmp_path, {"lines/__init__.py": text}))
    records = by_id(summary.records)
    assert records["lines.b"]["code"] == (
        "def b(s: str) -> str:\n    return s + '\u2028' + a()\n")
    assert records["lines.b"]["project_names"] == {"a": "lines.a"}
    assert records["lines.c"]["code"] == "def c():\n    return 2\n"


def test_an_id_taken_and_metadata_too_large_are_counted(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    long_module = "m" * 200
    names = [f"n{i}" for i in range(400)]
    body = "".join(f"{n} = {i}\n" for i, n in enumerate(names))
    body += "\n\ndef f():\n    return [" + ", ".join(names) + "]\n"
    installed_site(root, "big-1.0", {f"big/{long_module}.py": body,
                                     "shared/__init__.py": "def g(x: int) -> int:\n    return x\n"})
    other = root / "twin-1.0.dist-info"
    other.mkdir()
    (other / "RECORD").write_text("shared/__init__.py,,\n")
    summary = excerpts_of_site(root)
    assert [r["id"] for r in summary.records] == ["shared.g"]
    assert summary.skipped == {NOT_A_RECORD: 1, ID_TAKEN: 1}
    assert summary.distributions == {"big": 1}
