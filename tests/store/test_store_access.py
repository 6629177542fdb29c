"""Working with a store while a long command runs: ``steptrace sql`` and ``show`` read it
while a real ``steptrace trace`` process writes it (the trace opens it only for each
commit), a second trace of it is refused in one line, and Ctrl-C (SIGINT to the trace's
process group, as a terminal sends it) stops the trace with one line saying what was kept;
the same command resumes."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from helpers.cli import assert_one_line_error, invoke
from helpers.processes import (HANG_GUARD_S, ctrl_c, spawn_workers, steptrace_process,
                               wait_until_gone, write_jsonl)

QUICK = "def f(x):\n    return x + 1\n"
# runs until its job's time limit: the trace is under way for as long as the test needs
HANG = "def f(x):\n    i = 0\n    while True:\n        i += 1\n"
QUICK_JOBS = 16  # one chunk of jobs (TraceOptions.chunk_size): committed before HANG ends


def corpus(path: Path) -> Path:
    records = [{"id": f"q{i}", "code": QUICK, "input": str(i), "output": str(i + 1)}
               for i in range(QUICK_JOBS)]
    return write_jsonl(path, records + [{"id": "hang", "code": HANG, "input": "0"}])


def trace_args(corpus_path: Path, db: Path, timeout: int) -> list[str]:
    return ["trace", str(corpus_path), "--db", str(db), "--workers", "1", "--timeout",
            str(timeout), "--max-steps", "1000000000", "--quiet"]


def wait_for_runs(db: Path, count: int, process: subprocess.Popen) -> str:
    """``steptrace sql`` of the runs, asked until it shows ``count`` of them (the trace
    creates the store, then commits its first runs); every answer while the trace runs
    must be a result, never 'in use'. Returns the last answer."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if db.exists():
            result = invoke("sql", "SELECT count(*) AS runs FROM runs", "--db", db,
                            "--format", "csv")
            assert result.exit_code == 0, result.output
            if result.stdout == f"runs\n{count}\n":
                return result.stdout
        time.sleep(0.1)
    raise AssertionError(f"the trace did not store {count} runs in {HANG_GUARD_S} s")


def test_reads_while_trace_writes_then_ctrl_c_and_resume(tmp_path, monkeypatch):
    db = tmp_path / "store.duckdb"
    path = corpus(tmp_path / "hang.jsonl")
    with steptrace_process(*trace_args(path, db, timeout=600)) as process:
        assert wait_for_runs(db, QUICK_JOBS, process) == f"runs\n{QUICK_JOBS}\n"
        workers = spawn_workers(process.pid)
        assert len(workers) == 1
        # a reader sees the committed runs whole while the trace runs on (HANG is running)
        shown = invoke("show", "1", "--db", db, "--format", "json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["run"]["output"] == "1"
        assert invoke("sql", "SELECT sample_id, output FROM runs WHERE run_id IN (1, 16) "
                      "ORDER BY run_id", "--db", db, "--format", "csv").stdout == (
            "sample_id,output\nq0,1\nq15,16\n")
        # a second trace of the store is refused, in one line, and changes nothing
        monkeypatch.setenv("STEPTRACE_LOCK_WAIT", "0")
        other = write_jsonl(tmp_path / "other.jsonl", [{"id": "o", "code": QUICK, "input": "9"}])
        assert_one_line_error(
            invoke("trace", other, "--db", db, "--workers", 0),
            f"database {db} is being traced into by another process: one trace writes a "
            "store at a time (waited 0 s; $STEPTRACE_LOCK_WAIT sets how long)")
        assert process.poll() is None
        stdout, stderr = ctrl_c(process)
    assert (process.returncode, stdout, stderr) == (
        130, "", f"interrupted: {QUICK_JOBS} runs stored; run the same command to resume\n")
    assert wait_until_gone(workers) == []
    monkeypatch.delenv("STEPTRACE_LOCK_WAIT")
    # the same command resumes (with a time limit that ends HANG now): the 16 are kept
    resumed = invoke(*trace_args(path, db, timeout=1), "--format", "json")
    summary = json.loads(resumed.stdout)
    assert (summary["jobs"], summary["skipped"], summary["traced"], summary["by_status"],
            summary["store"]) == (17, 16, 1, {"timeout": 1}, {"ok": 16, "timeout": 1})
    assert invoke("sql", "SELECT run_id, sample_id, status FROM runs WHERE run_id >= 16 "
                  "ORDER BY run_id", "--db", db, "--format", "csv").stdout == (
        "run_id,sample_id,status\n16,q15,ok\n17,hang,timeout\n")


def test_ctrl_c_before_the_first_run_is_stored(tmp_path):
    """Interrupted while the only job runs: nothing is stored, and the one line says so
    (0 runs); the store holds no run."""
    db = tmp_path / "store.duckdb"
    path = write_jsonl(tmp_path / "hang.jsonl", [{"id": "hang", "code": HANG, "input": "0"}])
    with steptrace_process(*trace_args(path, db, timeout=600)) as process:
        # the store is made (and readable) before the job is handed out
        assert wait_for_runs(db, 0, process) == "runs\n0\n"
        stdout, stderr = ctrl_c(process)
    assert (process.returncode, stdout, stderr) == (
        130, "", "interrupted: 0 runs stored; run the same command to resume\n")
    result = invoke("sql", "SELECT count(*) AS runs FROM runs", "--db", db, "--format", "csv")
    assert (result.exit_code, result.output) == (0, "runs\n0\n")


def test_ctrl_c_while_a_new_store_is_made_leaves_no_file(tmp_path, monkeypatch):
    """An interrupt between DuckDB making the file and the store's tables being committed
    removes the file: a later command finds no store rather than a DuckDB file that is
    not one."""
    import steptrace.store._store as store

    def interrupted(con):
        raise KeyboardInterrupt
    monkeypatch.setattr(store, "transaction", interrupted)
    db = tmp_path / "new.duckdb"
    try:
        store.connect(db)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("connect did not see the interrupt")
    assert sorted(tmp_path.iterdir()) == []
