"""``harvest`` of a native lock: numpy (native code, which the WASI guest cannot import)
scanned as any package, its functions' examples checked (traced, run twice more) and
traced by the native backend through its real jail, with inputs from the local test
server; the records say only their inputs are a model's (``model_written: "inputs"``), so
the native backend runs them when those are pure literals and refuses the rest.

Cost: numpy's wheel (~16 MB) from the package index once (pip's cache keeps it), ~40 MB
installed into the session's cache; the jail starts with numpy and the kept modules
preloaded in ~2 s; each job ~20-50 ms."""

from __future__ import annotations

import json

import pytest

from helpers.benchmark import function_of
from helpers.cli import ok, rows
from helpers.openai_stub import StubServer, answer
from steptrace.benchmark._harvest import CallReport, HarvestOptions, harvest
from steptrace.native_sandbox import find_python
from steptrace.native_sandbox._packages import site_dir
from steptrace.predictions._predict import PredictOptions
from steptrace.sandbox._packages import parse_lock, resolve

pytestmark = pytest.mark.slow  # numpy's wheel comes from the package index

SCRIPT = {
    # assert_equal(actual: object, desired: object, err_msg: str = '') -> None: its own
    # AssertionError is an error example; frozenset(...) is no pure literal: refused
    "numpy.ma.testutils.assert_equal": (
        "[CALLS]\nassert_equal(1, 1)\nassert_equal([1, 2], [1, 3])\n"
        "assert_equal(frozenset({1}), frozenset({1}))\n[/CALLS]"),
    # set_default_printstyle(style: Literal['ascii', 'unicode']) -> None: 'latex' is
    # against the annotation, never run
    "numpy.polynomial.set_default_printstyle": (
        "[CALLS]\nset_default_printstyle('ascii')\nset_default_printstyle('latex')\n"
        "set_default_printstyle(style='unicode')\n[/CALLS]"),
}
RUNS = [
    ("numpy.ma.testutils.assert_equal", "1, 1", "ok", "None", None),
    ("numpy.ma.testutils.assert_equal", "[1, 2], [1, 3]", "exception", None, "AssertionError"),
    ("numpy.polynomial.set_default_printstyle", "'ascii'", "ok", "None", None),
    ("numpy.polynomial.set_default_printstyle", "style='unicode'", "ok", "None", None),
]


@pytest.fixture(scope="module")
def numpy_lock():
    """The native lock ``build --backend native --with numpy==2.5.5`` writes on the
    machine's CPython 3.13 (numpy, as tests/native/test_native_packages.py pins it)."""
    return resolve(["numpy==2.5.5"], python=find_python(None, "3.13").minor)


def test_a_native_lock_is_harvested_checked_and_traced_natively(tmp_path, numpy_lock):
    out = tmp_path / "harvest"
    with StubServer({name: answer(text) for name, text in SCRIPT.items()},
                    default=answer("[CALLS]\n[/CALLS]"), key_of=function_of) as server:
        summary = harvest(out, numpy_lock, PredictOptions("stub-model",
                                                          base_url=server.base_url),
                          HarvestOptions(inputs=3, workers=1, released=None))
        assert sum(server.requests.values()) == 17
    assert (summary.modules, summary.found, summary.kept) == (156, 591, 17)
    assert summary.rejected == {"entry point": 1, "generator": 1, "decorated": 107,
                                "*args or **kwargs": 7, "no parameters": 9,
                                "annotation missing": 425,
                                "annotation not literal-able": 21, "I/O": 3}
    assert summary.calls == CallReport(lines=6, inputs=5, type_mismatch=1)
    # the frozenset input is refused by the native backend (not a pure literal)
    assert summary.checked == {"error": 1, "ok": 3, "status refused": 1}
    assert (summary.traced, summary.functions_ok, summary.functions_raising) == (
        {"exception": 1, "ok": 3}, 2, 1)
    assert summary.notes == ["the lock holds packages with native code (numpy): traced by "
                             "the native backend (CPython 3.13, jailed; "
                             "docs/guides/sandbox.md)"]
    written = json.loads((out / "harvest.json").read_text())
    assert [(d["function"], d["input"], d["verdict"]) for d in written["dropped_examples"]] == [
        ("numpy.ma.testutils.assert_equal", "frozenset({1}), frozenset({1})",
         "status refused")]
    lock = parse_lock((out / "guest.lock").read_text())
    assert (lock.python, lock.native_code, lock.packages) == ("3.13", ("numpy",),
                                                              numpy_lock.packages)
    # installed once: the guest lock's imports do not make another site of the same wheels
    assert site_dir(lock) == site_dir(numpy_lock) and (site_dir(lock) / "numpy").is_dir()
    records = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [(r["id"], r["distribution"], r["version"], r["model_written"])
            for r in records] == [
        ("numpy.ma.testutils.assert_equal", "numpy", "2.5.5", "inputs"),
        ("numpy.polynomial.set_default_printstyle", "numpy", "2.5.5", "inputs")]
    db = out / "store.duckdb"
    assert rows(db, "SELECT sample_id, input, status, output, exception_type FROM runs "
                    "ORDER BY run_id") == RUNS
    assert rows(db, "SELECT DISTINCT backend, python FROM runs") == [
        ("native", find_python(None, "3.13").version)]
    # every example ran twice more, natively: the analysis and the determinism check
    assert rows(out / "checks.duckdb", "SELECT count(*), count(deterministic) FROM runs "
                "JOIN analyses a USING (run_id) WHERE runs.status IN ('ok', 'exception')") == [
        (4, 4)]


def test_the_command_resolves_for_the_native_backend(tmp_path, numpy_lock):
    """``harvest --backend native --python 3.13 --with numpy==2.5.5``: the same lock as
    ``build --backend native`` writes, the same functions kept (not traced here)."""
    out = tmp_path / "h"
    with StubServer({name: answer(text) for name, text in SCRIPT.items()},
                    default=answer("[CALLS]\n[/CALLS]"), key_of=function_of) as server:
        done = json.loads(ok("harvest", "--backend", "native", "--python", "3.13", "--with",
                             "numpy==2.5.5", "--model", "stub-model", "--base-url",
                             server.base_url, "--inputs", 3, "--out", out, "--no-trace",
                             "--released", "none", "--quiet", "--format", "json"))
    assert (done["packages"], done["found"], done["kept"], done["calls"]["inputs"]) == (
        "numpy==2.5.5", 591, 17, 5)
    assert parse_lock((out / "guest.lock").read_text()).packages == numpy_lock.packages
