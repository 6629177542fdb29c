"""The native backend through its real jail (bubblewrap, seccomp, rlimits) on the machine's
CPython 3.12 and 3.13: exact results, the host's statuses, what a model wrote refused,
and the run table's backend and interpreter columns."""

from __future__ import annotations

import json
import os

import duckdb
import pytest

from steptrace.native_sandbox import (InterpreterError, NativeSandbox, find_python,
                                      is_pure_literal, prepare)
from steptrace.sandbox._backends import choose
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import PackageError, PackageLock, parse_lock

PROGRAM = "def f(x):\n    y = x + 1\n    return y * 2\n"


@pytest.fixture(scope="module", params=["3.12", "3.13"])
def native(request):
    with NativeSandbox(Limits(timeout_s=3), prepare(find_python(None, request.param))) as box:
        yield box


def test_a_job_runs_exactly_as_traced(native):
    result = native.run({"code": PROGRAM, "input": "3", "expected": "8"}).result
    assert native.python.startswith(("3.12.", "3.13."))
    assert {k: result[k] for k in ("status", "output", "output_type", "output_matches",
                                   "line_steps", "calls", "max_depth")} == {
        "status": "ok", "output": "8", "output_type": "int", "output_matches": True,
        "line_steps": 2, "calls": 1, "max_depth": 0}
    # events are indices into result["events"] (call, line, return, ...), funcs into funcs
    assert result["funcs"] == ["f"]
    assert result["steps"] == {"event": [0, 1, 1, 2], "line": [1, 2, 3, 3],
                               "depth": [0, 0, 0, 0], "frame": [0, 0, 0, 0], "func": [0, 0, 0, 0]}
    assert list(zip(result["states"]["var"], result["states"]["value"])) == [
        ("x", "3"), ("y", "4"), ("<return>", "8")]


def test_statuses_decided_by_the_host(native):
    """Each status the host decides, and a good job after each. The step limit is reached
    with a time limit far past it (a busy machine must not turn it into a timeout); the
    timeout is a sleep ten times the 3 s limit."""
    patient = NativeSandbox(Limits(timeout_s=600), native.guest)
    cases = {
        "import time\ndef f():\n    time.sleep(30)\n": (
            native, "timeout", "exceeded the 3 s time limit"),
        "import os\ndef f():\n    os._exit(3)\n": (
            native, "exited", "the program ended the interpreter (exit status 3)"),
        "def f():\n    i = 0\n    while True:\n        i += 1\n": (patient, "step_limit", None),
        "def f():\n    return bytearray(2 << 30)\n": (patient, "memory_limit", None),
    }
    with patient:
        for code, (box, status, message) in cases.items():
            result = box.run({"code": code, "input": ""}).result
            assert result["status"] == status, (code, result)
            if message is not None:
                assert result["exception_message"] == message
            after = box.run({"code": PROGRAM, "input": "3", "expected": "8"}).result
            assert (after["status"], after["output"], after["output_matches"]) == (
                "ok", "8", True)


def test_what_a_model_wrote_is_refused_unless_pure_literal(native):
    written = native.run({"code": PROGRAM, "input": "3", "model_written": True}).result
    assert written["status"] == "refused"
    assert written["exception_message"].startswith(
        "the native backend does not run code a model wrote")
    for answer in ("__import__('os').getpid()", "[x for x in (1,)]", "*[1]", "f(1)",
                   "1 if True else 2", "(lambda: 1)()", "x"):
        result = native.run({"code": PROGRAM, "input": answer, "answer": True}).result
        assert result["status"] == "refused", answer
        assert "pure literals" in result["exception_message"]
    ok = native.run({"code": "def f(a, b=0):\n    return a[0] + b\n",
                     "input": "[3, 'x'], b=-2", "expected": "1", "answer": True}).result
    assert (ok["status"], ok["output"], ok["output_matches"]) == ("ok", "1", True)


def test_a_models_inputs_to_given_code_run_only_as_pure_literals(native):
    """``model_written: "inputs"`` (harvest's records: a package's function, a model's
    inputs) runs as an answer does: pure literals only, never a script."""
    for mark in (True, "true", "code", 1):  # any other value: the whole record a model's
        result = native.run({"code": PROGRAM, "input": "3", "model_written": mark}).result
        assert result["status"] == "refused", mark
    for text in ("__import__('os').getpid()", "frozenset({1})", "[1] * 2", "*[1]", "x"):
        result = native.run({"code": PROGRAM, "input": text, "model_written": "inputs"}).result
        assert result["status"] == "refused", text
        assert "pure literals" in result["exception_message"]
    script = native.run({"code": "print(1)\n", "shape": "script", "input": "",
                         "model_written": "inputs"}).result
    assert script["status"] == "refused"
    ok = native.run({"code": PROGRAM, "input": "x=3", "expected": "8",
                     "model_written": "inputs"}).result
    assert (ok["status"], ok["output"], ok["output_matches"]) == ("ok", "8", True)


SET_ORDER = "def f():\n    return [c for c in {'a', 'b', 'c', 'd'}], hash('a') & 7\n"


def test_the_variant_guest_hashes_strings_with_another_secret(native):
    """The determinism check's variant jail (``prepare(..., variant=...)``) has another
    PYTHONHASHSEED: a set of single characters iterates in another order there."""
    base = native.run({"code": SET_ORDER, "input": ""}).result["output"]
    guest = prepare(find_python(native.guest.python.executable), variant="reseeded")
    assert guest.hash_seed == "2" and native.guest.hash_seed == "0"
    with NativeSandbox(Limits(timeout_s=3), guest) as variant:
        other = variant.run({"code": SET_ORDER, "input": ""}).result["output"]
    assert (base, other) == ("(['d', 'c', 'a', 'b'], 3)", "(['c', 'b', 'a', 'd'], 5)")


def test_the_determinism_check_of_native_runs_sees_hash_order(tmp_path):
    """analyse --determinism over natively traced runs: the variant runs natively with
    another string-hash secret, so a run whose result is a set's order is not
    deterministic, and one that is not is."""
    from steptrace import trace
    from steptrace.tracing._analysis import AnalysisOptions, analyse_store
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "set", "code": SET_ORDER, "input": ""}) + "\n"
                      + json.dumps({"id": "plain", "code": PROGRAM, "input": "3"}) + "\n")
    db = tmp_path / "n.duckdb"
    trace(corpus, db, workers=1, backend="native", python=find_python(None, "3.13").executable)
    analyse_store(db, AnalysisOptions(workers=1, determinism=True))
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT sample_id, deterministic, determinism_note FROM runs "
                           "JOIN analyses USING (run_id) ORDER BY sample_id").fetchall() == [
            ("plain", True, None), ("set", False, "return value differs")]


@pytest.mark.parametrize("text, pure", [
    ("1, 'a', b=[2, (3,)], c={'k': {1, 2}}", True), ("-1.5, 2+3j, b'x', None", True),
    ("", True), ("a", False), ("1, *b", False), ("**{'a': 1}", False), ("(1).real", False),
    ("[1] * 3", False), ("print(1)", False), ("1)\n(2", False)])
def test_pure_literal_check(text, pure):
    assert is_pure_literal(text) is pure


def test_the_backend_follows_the_lock():
    wasi = parse_lock("toolz==1.0.0 --hash=sha256:" + "a" * 64)
    assert choose(None, None) == (None, None)
    assert choose(None, wasi) == (wasi, None)  # a pure-Python lock: WASI, unchanged
    native = PackageLock(wasi.packages, python="3.13", native_code=("numpy",))
    lock, note = choose(None, native)
    assert lock is native
    assert note == ("the lock holds packages with native code (numpy): traced by the native "
                    "backend (CPython 3.13, jailed; docs/guides/sandbox.md)")
    with pytest.raises(PackageError, match=r"native code \(numpy\): they cannot run under WASI"):
        choose("wasi", native)
    pure_native = PackageLock(wasi.packages, python="3.13")
    assert choose("wasi", pure_native) == (wasi, None)
    lock, note = choose("native", None)
    assert (lock.packages, note) == ((), None) and lock.python in ("3.12", "3.13")
    assert parse_lock(native.text) == native


def test_trace_records_backend_and_python(tmp_path):
    from steptrace import trace
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "code": PROGRAM, "input": "3", "output": "8"})
                      + "\n" + json.dumps({"id": "m", "code": PROGRAM, "input": "1",
                                           "model_written": True}) + "\n")
    db = tmp_path / "n.duckdb"
    summary = trace(corpus, db, workers=1, backend="native",
                    python=find_python(None, "3.13").executable)
    assert summary.by_status == {"ok": 1, "refused": 1}
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT sample_id, status, output, backend, python FROM runs "
                           "ORDER BY sample_id").fetchall() == [
            ("a", "ok", "8", "native", find_python(None, "3.13").version),
            ("m", "refused", None, "native", find_python(None, "3.13").version)]
        assert con.execute("SELECT lock FROM guests").fetchall() == [
            ("# steptrace native packages (wheels for the native backend's CPython)\n"
             "# python: 3.13\n",)]


def test_the_interpreter_is_named_by_path_or_version(monkeypatch):
    monkeypatch.delenv("STEPTRACE_PYTHON", raising=False)
    by_version = find_python("3.12")
    assert by_version.minor == "3.12" and by_version == find_python(by_version.executable)
    assert find_python("3.13", "3.13").minor == "3.13"
    with pytest.raises(InterpreterError) as caught:
        find_python("3.12", "3.13")
    assert str(caught.value) == ("Python 3.12 was asked for, but the lock was resolved for "
                                 "Python 3.13: use a 3.13 interpreter")
    with pytest.raises(InterpreterError) as caught:
        find_python("3.11")
    assert str(caught.value) == ("no CPython 3.11 found for the native backend (looked on "
                                 "PATH and in pyenv's versions): name one with --python PATH "
                                 "or $STEPTRACE_PYTHON")
    monkeypatch.setenv("STEPTRACE_PYTHON", "3.12")
    assert find_python().minor == "3.12"


def test_trace_leaves_the_environment_as_it_was(tmp_path, monkeypatch):
    """--python holds for one trace (its workers find it in $STEPTRACE_PYTHON), and the
    variable is put back after it: a later trace is not changed by an earlier one's."""
    from steptrace import trace
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "code": PROGRAM, "input": "3"}) + "\n")
    monkeypatch.delenv("STEPTRACE_PYTHON", raising=False)
    for minor in ("3.12", "3.13"):
        db = tmp_path / f"{minor}.duckdb"
        trace(corpus, db, workers=1, backend="native", python=minor)
        assert "STEPTRACE_PYTHON" not in os.environ
        with duckdb.connect(str(db), read_only=True) as con:
            assert con.execute("SELECT python FROM runs").fetchall() == [
                (find_python(minor).version,)]
    monkeypatch.setenv("STEPTRACE_PYTHON", "3.13")
    trace(corpus, tmp_path / "again.duckdb", workers=1, backend="native", python="3.12")
    assert os.environ["STEPTRACE_PYTHON"] == "3.13"


FILES_PROGRAM = '''
import argparse, os, sys
def f(x):
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int)
    n = parser.parse_args().n
    with open("data/in.txt") as handle:
        text = handle.read()
    with open("out.txt", "w") as handle:
        handle.write(text * n)
    return sys.argv, os.environ.get("K"), text, sorted(os.listdir(".")), os.path.getsize("out.txt")
'''


def test_a_records_files_argv_and_env_and_nothing_left_for_the_next_job(native):
    request = {"code": FILES_PROGRAM, "entry": "f", "input": "1",
               "files": {"data/in.txt": "hi"}, "argv": ["--n", "3"], "env": {"K": "v"}}
    result = native.run(request).result
    assert (result["status"], result["output"]) == (
        "ok", "(['main.py', '--n', '3'], 'v', 'hi', ['data', 'out.txt'], 6)")
    after = native.run({"code": "import os, sys\ndef f(x):\n    return sorted(os.listdir('.')), "
                        "sys.argv, 'K' in os.environ\n", "entry": "f", "input": "1"}).result
    assert (after["status"], after["output"]) == ("ok", "([], ['main.py'], False)")
    bad = native.run({**request, "files": {"../escape": "x"}}).result
    assert bad == {"status": "invalid", "exception_message":
                   "file path '../escape' may not have an empty, '.' or '..' part"}
    # files larger than the job's scratch space: said before the program runs
    big = native.run({**request, "files": {"big.txt": "x" * (65 << 20)}}).result
    assert (big["status"], big["exception_message"]) == (
        "crashed", "cannot write the record's file 'big.txt': File too large")
    assert native.run(request).result["output"] == result["output"]
