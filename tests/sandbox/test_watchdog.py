"""Jobs blocked in a host call past their time limit (the wall-clock watchdog).

Epoch interruption stops guest code that runs, not a guest waiting in a host call:
``time.sleep(60)`` or ``select.select([], [], [], 60)`` under a 1 s limit blocks in WASI's
``poll`` until the wait ends. In worker processes a watchdog thread ends such a job
``WATCHDOG_GRACE_S`` after its limit (wasm_sandbox/_worker.py): the job is ``timeout`` with
its own message, the worker is replaced, and the rest of its chunk runs in another worker
(wasm_sandbox/_pool.py). These tests run real workers on the real guest, in job and batch
isolation, through the pool, ``trace_corpus`` into DuckDB, and the CLI: every blocking
job is ``timeout``, every other job of the same chunks is exactly what it is when traced
alone, and the store holds each job once.

Nothing asserts how long anything took, except one lower bound (an in-process sleep
cannot end before it is over). A job that blocks for 60 s under a 1 s limit is told
apart from one the watchdog ended by its message; ``HANG_GUARD_S`` only stops a broken
watchdog from hanging the suite.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.sandbox._runner import run_chunks
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.processes import assert_store_whole, kill_processes, spawn_workers, write_jsonl
from steptrace.sandbox import _pool as pool_module
from steptrace.sandbox._limits import WATCHDOG_GRACE_S, Limits
from steptrace.sandbox._runtime import Sandbox
from steptrace.sandbox._worker import blocked_message

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

LIMITS = Limits(timeout_s=1)
HANG_GUARD_S = 180.0  # the runs below take ~10-30 s; a broken watchdog, minutes
BLOCKED = {"status": "timeout", "exception_message":
           "exceeded the 1 s time limit: blocked in a host call (a sleep or a wait) past it, "
           "so its worker process was replaced"}

# Jobs that block in a host call for 60 s: (code, input, expected output).
BLOCKING: dict[str, tuple[str, str, str | None]] = {
    "sleep": ("import time\ndef f():\n    time.sleep(60)\n    return 1\n", "", "1"),
    "select": ("import select\ndef f():\n    return select.select([], [], [], 60)\n", "", None),
    "poll": ("import select\ndef f():\n    return select.poll().poll(60_000)\n", "", None),
    "selectors": ("import selectors\ndef f():\n"
                  "    return selectors.DefaultSelector().select(60)\n", "", None),
    # every sleep outlasts the grace, so it is the watchdog that ends it
    "sleep_in_loop": ("import time\ndef f():\n    n = 0\n    while True:\n"
                      "        time.sleep(60)\n        n += 1\n", "", None),
    # the output's repr runs the program's __repr__ (recording never does)
    "sleep_in_repr": ("import time\nclass A:\n    def __repr__(self):\n"
                      "        time.sleep(60)\n        return 'A'\n"
                      "def f():\n    a = A()\n    return a\n", "", None),
    "sleep_in_del": ("import time\nclass A:\n    def __del__(self):\n        time.sleep(60)\n"
                     "def f():\n    a = A()\n    del a\n    return 1\n", "", "1"),
    "sleep_at_top_level": ("import time\ntime.sleep(60)\ndef f():\n    return 1\n", "", "1"),
    "sleep_in_input": ("def f(x):\n    return x\n", "__import__('time').sleep(60)", None),
    "sleep_in_expected": ("def f():\n    return 1\n", "", "__import__('time').sleep(60)"),
    "sleep_in_eq": ("import time\nclass A:\n    def __eq__(self, other):\n"
                    "        time.sleep(60)\n        return True\n"
                    "def f():\n    return A()\n", "", "1"),
}
# Short sleeps in a loop: the epoch trap ends it at the first check after the limit (the
# watchdog would, were the machine slow enough); either way a timeout.
SHORT_SLEEPS = ("import time\ndef f():\n    while True:\n        time.sleep(0.05)\n", "", None)

# Chunk-mates: (code, input, expected output); one sleeps briefly and finishes in time.
CLEAN: dict[str, tuple[str, str, str | None]] = {
    "sum": ("def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n",
            "5", "10"),
    "reverse": ("def f(s):\n    t = s[::-1]\n    return t.upper()\n", "'abc'", "'CBA'"),
    "divide": ("def f(x):\n    return 1 // x\n", "0", None),
    "odd_squares": ("def f(n):\n    return [i * i for i in range(n) if i % 2]\n", "6", "[1, 9, 25]"),
    "short_sleep": ("import time\ndef f(x):\n    time.sleep(0.1)\n    y = x + 1\n    return y\n",
                    "1", "2"),
}


def request(job: tuple[str, str, str | None]) -> dict:
    code, input, expected = job
    return {"code": code, "input": input, "expected": expected}


def without_timing(result: dict) -> dict:
    """A guest result without its duration (the one field that varies between runs)."""
    return {key: value for key, value in result.items() if key != "call_us"}


@pytest.fixture(scope="module")
def alone() -> dict[str, dict]:
    """Each clean job traced alone, in a fresh instance in this process."""
    with Sandbox(LIMITS) as sandbox:
        return {name: without_timing(sandbox.run(request(job)).result)
                for name, job in CLEAN.items()}


def guarded(fn: Callable[[], object], bound: float = HANG_GUARD_S) -> object:
    """``fn()`` in a thread; if it has not returned after ``bound`` seconds (a broken
    watchdog), the worker processes started meanwhile are killed and the test fails."""
    before = spawn_workers(os.getpid())
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        kill_processes({pid: value for pid, value in spawn_workers(os.getpid()).items()
                        if pid not in before})
        thread.join(30)
        pytest.fail(f"still running after {bound:g} s: the watchdog did not end a blocked job")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


# Chunks of 4 with blocking jobs first, in the middle, last, twice in a row, and a chunk
# of blocking jobs only.
LAYOUT = [
    ["clean:sum", "block:sleep", "clean:reverse", "block:select"],
    ["block:poll", "clean:divide", "clean:short_sleep", "block:sleep_in_repr"],
    ["block:sleep_in_del", "block:sleep_at_top_level", "clean:odd_squares", "block:sleep_in_input"],
    ["block:sleep_in_expected", "block:sleep_in_eq", "block:selectors", "block:sleep_in_loop"],
    ["short_sleeps", "clean:sum", "clean:reverse"],
]


def job_of(name: str) -> tuple[str, str, str | None]:
    if name == "short_sleeps":
        return SHORT_SLEEPS
    kind, key = name.split(":")
    return (CLEAN if kind == "clean" else BLOCKING)[key]


def assert_outcome(name: str, result: dict, alone: dict[str, dict]) -> None:
    if name == "short_sleeps":
        assert result["status"] == "timeout", result
        assert result["exception_message"] in (BLOCKED["exception_message"],
                                               "exceeded the 1 s time limit"), result
    elif name.startswith("block:"):
        assert result == BLOCKED, (name, result)
    else:
        assert without_timing(result) == alone[name.split(":")[1]], name


def test_blocked_message_is_the_documented_one():
    """The message the tests and the README quote is the one the worker writes."""
    assert blocked_message(1.0) == BLOCKED["exception_message"]
    assert WATCHDOG_GRACE_S == 0.5


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_blocked_jobs_end_as_timeout_and_chunk_mates_are_traced_exactly(alone, isolation):
    """Every way found to block in a host call for 60 s (sleep, select, poll, selectors,
    a sleep in a loop, in __repr__, __del__, __eq__, at the top level, in the input and
    in the expected output) under a 1 s limit, in chunks with ordinary jobs, through 2
    workers: each blocking job is ``timeout`` with the watchdog's message after at least
    its limit plus the grace (and far less than its 60 s wait), each other job's result
    equals its result traced alone, every chunk comes back whole and in order, and no
    worker process outlives the pool."""
    chunks = [[request(job_of(name)) for name in chunk] for chunk in LAYOUT]
    before = spawn_workers(os.getpid())
    delivered = guarded(lambda: list(run_chunks(chunks, 2, LIMITS, isolation)))
    assert sorted(index for index, _ in delivered) == list(range(len(LAYOUT)))
    for index, outcomes in delivered:
        assert len(outcomes) == len(LAYOUT[index])
        for name, outcome in zip(LAYOUT[index], outcomes):
            assert_outcome(name, outcome.result, alone)
            if name.startswith("block:"):  # never before limit + grace; never the whole wait
                assert (LIMITS.timeout_s + WATCHDOG_GRACE_S) * 1e6 <= outcome.duration_us < 30e6
    leftover = {p: v for p, v in spawn_workers(os.getpid()).items() if p not in before}
    assert leftover == {}


def test_queued_chunk_behind_a_blocked_job_runs_and_is_not_a_retry(alone, monkeypatch):
    """One worker, three chunks: while the first blocks, the second is already queued in
    the worker's inbox. The watchdog ends the first; the queued chunk goes back to the
    pool unrun (not counted as a dead worker's retry) and runs in the replacement."""
    reaped: list = []
    original = pool_module.WorkerPool._reap_dead

    def reap_dead(self, retried):
        found = original(self, retried)
        reaped.extend(found)
        return found

    monkeypatch.setattr(pool_module.WorkerPool, "_reap_dead", reap_dead)
    chunks = [[request(BLOCKING["sleep"])], [request(CLEAN["sum"])], [request(CLEAN["reverse"])]]
    delivered = dict(guarded(lambda: list(run_chunks(chunks, 1, LIMITS, "job"))))
    assert [delivered[0][0].result] == [BLOCKED]
    assert without_timing(delivered[1][0].result) == alone["sum"]
    assert without_timing(delivered[2][0].result) == alone["reverse"]
    assert reaped == []


class PieceKiller(threading.Thread):
    """SIGKILLs each worker that is handed the rest of a chunk after a blocked job (a
    piece with offset > 0), ``times`` times."""

    def __init__(self, pool: pool_module.WorkerPool, times: int) -> None:
        super().__init__(daemon=True)
        self.pool, self.times = pool, times
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and len(self.killed) < self.times:
            for worker in list(self.pool._workers.values()):
                piece = worker.chunks[0] if worker.chunks else None
                pid = worker.process.pid
                if piece is not None and piece.offset > 0 and pid not in self.killed:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    self.killed.append(pid)
            self.stop.wait(0.005)


SLOW = ("import time\ndef f(x):\n    time.sleep(0.3)\n    return x\n", "7", "7")


@pytest.mark.parametrize("deaths", [1, 2])
def test_rest_of_a_chunk_after_a_blocked_job_keeps_the_dead_worker_rules(alone, deaths):
    """Chunk [sum, sleep(60), slow, slow] on one worker: the watchdog ends the sleep, and
    the worker handed the two remaining jobs is SIGKILLed. Killed once, the rest is run
    again and is ``ok``; killed twice, those two jobs are ``crashed`` (the chunk killed two
    workers) while the jobs before them keep their outcomes."""
    chunk = [request(CLEAN["sum"]), request(BLOCKING["sleep"]), request(SLOW), request(SLOW)]
    pool = pool_module.WorkerPool(1, LIMITS)
    killer = PieceKiller(pool, deaths)
    killer.start()
    try:
        delivered = guarded(lambda: list(pool.run([chunk])))
    finally:
        killer.stop.set()
        killer.join()
        pool.close()
    assert len(killer.killed) == deaths
    [(index, outcomes)] = delivered
    results = [outcome.result for outcome in outcomes]
    assert index == 0
    assert without_timing(results[0]) == alone["sum"]
    assert results[1] == BLOCKED
    if deaths == 1:
        assert [(r["status"], r["output"]) for r in results[2:]] == [("ok", "7")] * 2
    else:
        assert results[2:] == [{"status": "crashed", "exception_message":
                                "the worker process died twice running this chunk"}] * 2


def corpus_records() -> list[dict]:
    """The LAYOUT's jobs in order as a corpus. The CLI's chunks are 16 jobs: the first
    holds all 11 blocking jobs and 5 others, the second the short sleeps and two more."""
    records = []
    for position, name in enumerate(n for chunk in LAYOUT for n in chunk):
        code, input, expected = job_of(name)
        records.append({"id": f"{position:02d}-{name.replace(':', '-')}", "code": code,
                        "input": input, **({} if expected is None else {"output": expected})})
    return records


def store_trace(db: Path, sample_id: str) -> tuple[list, list]:
    """A run's steps and states, without its run id."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        [run_id] = con.execute("SELECT run_id FROM runs WHERE sample_id = ?", [sample_id]).fetchone()
        steps = con.execute("SELECT step, event, func, line, depth, frame FROM steps "
                            "WHERE run_id = ? ORDER BY step", [run_id]).fetchall()
        states = con.execute("SELECT step, var, value, type, truncated FROM states "
                             "WHERE run_id = ? ORDER BY step, var", [run_id]).fetchall()
    finally:
        con.close()
    return steps, states


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_cli_trace_stores_blocked_jobs_as_timeout_once_each(tmp_path, isolation):
    """``steptrace trace --timeout 1 --workers 2`` (click's CliRunner) on the LAYOUT's
    jobs as a corpus: exit 0, the summary counts every blocking job as ``timeout``; the
    store holds one whole run per job (run ids 1..N, no duplicates), the blocking ones
    with the watchdog's message and no steps, and every other run has exactly the steps
    and states it has when its job is traced alone."""
    records = corpus_records()
    corpus = write_jsonl(tmp_path / "blocking.jsonl", records)
    db = tmp_path / "blocking.duckdb"
    result = guarded(lambda: CliRunner().invoke(main, [
        "trace", str(corpus), "--db", str(db), "--timeout", "1", "--workers", "2",
        "--isolation", isolation, "--quiet", "--format", "json"]))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    blocking = [r["id"] for r in records if "-block-" in r["id"]]
    clean = [r["id"] for r in records if "-clean-" in r["id"]]
    assert summary["traced"] == len(records)
    assert summary["by_status"] == {"ok": len(clean) - 1, "exception": 1,
                                    "timeout": len(blocking) + 1}

    runs = assert_store_whole(db)
    assert [r[0] for r in runs] == list(range(1, len(records) + 1))
    by_sample = {r[1]: r[2:] for r in runs}
    assert sorted(by_sample) == sorted(r["id"] for r in records)
    for sample in blocking:
        assert by_sample[sample] == ("timeout", None, 0, BLOCKED["exception_message"]), sample

    # alone: each in a fresh instance (job isolation), in this process
    alone_db = tmp_path / "alone.duckdb"
    trace_corpus(write_jsonl(tmp_path / "clean.jsonl", [r for r in records if r["id"] in clean]),
                 alone_db, TraceOptions(workers=0, limits=LIMITS))
    alone_runs = {r[1]: r[2:] for r in assert_store_whole(alone_db)}
    for sample in clean:
        assert by_sample[sample] == alone_runs[sample], sample
        assert store_trace(db, sample) == store_trace(alone_db, sample), sample


def test_in_process_sandbox_has_no_watchdog():
    """What ``--workers 0`` and a Sandbox used directly do not guarantee: a job blocked
    in a host call is still ``timeout`` (the epoch trap fires once the wait is over),
    but only after the whole wait, here 2 s under a 0.5 s limit."""
    with Sandbox(Limits(timeout_s=0.5)) as sandbox:
        started = time.monotonic()
        result = sandbox.run({"code": "import time\ndef f():\n    time.sleep(2)\n    return 1\n",
                              "input": ""}).result
        waited = time.monotonic() - started
    assert result == {"status": "timeout", "exception_message": "exceeded the 0.5 s time limit"}
    assert waited >= 2.0
    assert sandbox.busy_since is None
