"""Fault tolerance: killed workers, a killed CLI, read-only and full disks, corrupted
stores and a corrupted compiled-component cache.

Processes are killed with SIGKILL and found through /proc; the disk faults use a tmpfs
mounted for the test (``mount -t tmpfs``, as root). Where this process may not mount, a
``RLIMIT_FSIZE`` on the CLI process stands in for it (a write past the limit fails with
EFBIG, like a full disk with ENOSPC; the expected error names that cause instead).
Nothing asserts on durations: jobs sleep only to be still running when something is
killed, and every wait for a condition has a generous upper bound that is a hang guard.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from steptrace.store._store import StoreError, query as store_query
from steptrace.tracing._trace import TraceOptions, trace_corpus
from steptrace.sandbox import _build as build
from steptrace.sandbox import _pool as pool_module
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import compiled_path
from helpers.processes import HANG_GUARD_S, assert_store_whole, children_of, kill_processes, proc_stat, spawn_workers, still_running, wait_until_gone, write_jsonl  # noqa: F401

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

STEPTRACE = Path(sys.executable).with_name("steptrace")
CLI_TIMEOUT = 300

# A job that is still running when a kill arrives; returns its input.
SLOW = "def f(x):\n    import time\n    time.sleep(0.2)\n    return x\n"
SLOW_STEPS = 5  # call, line 2, line 3, line 4, return
# The same, with a trace large enough that a chunk's results outgrow a pipe (~64 KiB a job).
SLOW_LONG_TRACE = ("def f(x):\n    import time\n    time.sleep(0.2)\n    total = 0\n"
                   "    for i in range(1000):\n        total += i\n    return x\n")
SLOW_LONG_TRACE_STEPS = 2007
# Waits until the wall-clock time `gate` (the guest reads the host's clock), then makes a
# result of ~330 KB (five times a pipe's capacity).
GATED_BIG_RESULT = ("def f(gate):\n    import time\n    while time.time() < gate:\n"
                    "        time.sleep(0.01)\n    total = 0\n    for i in range(5000):\n"
                    "        total += i\n    return total\n")
# About 130 KB of trace a run: one run alone overflows 64 KiB of free space.
BIG_TRACE = ("def f(n):\n    total = 0\n    for i in range(n):\n        total += i\n"
             "    return total\n")
SMALL = "def f(x):\n    return x + 1\n"


# ------------------------------------------------------------------ helpers


def slow_records(count: int, code: str = SLOW) -> list[dict]:
    return [{"id": f"j{i:02d}", "code": code, "input": str(i), "output": str(i)}
            for i in range(count)]


def small_records(count: int = 5) -> list[dict]:
    return [{"id": f"s{i}", "code": SMALL, "input": str(i), "output": str(i + 1)}
            for i in range(count)]


def run_cli(*args, timeout: float = CLI_TIMEOUT, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(STEPTRACE), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit status 1, nothing on stdout, one stderr line ``Error: ...`` holding every
    fragment (and no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def query(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# ------------------------------------------------------------------ processes via /proc


@pytest.fixture
def reap():
    """Processes a test started (directly or through a CLI it killed): SIGKILLed at
    teardown if still running, so a failing test leaves nothing behind."""
    processes: dict[int, tuple[int, str]] = {}
    yield processes
    kill_processes(processes)


WRITE_SYSCALL = {"x86_64": "1", "aarch64": "64", "arm64": "64"}.get(platform.machine(), "1")


def blocked_in_write(pid: int) -> bool:
    """True while a thread of ``pid`` is inside write(2) (from /proc/PID/task/*/syscall)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            fields = (task / "syscall").read_text().split()
        except OSError:
            continue
        if fields and fields[0] == WRITE_SYSCALL:
            return True
    return False


# ------------------------------------------------------------------ 1. killed workers
@pytest.fixture
def pool_spy(monkeypatch):
    """Records every WorkerPool created and each chunk a dead worker lost, with whether
    it was retried (``(chunk index, retry)``). Observes only: behaviour is unchanged."""
    pools: list = []
    lost: list[tuple[int, bool]] = []
    original_init = pool_module.WorkerPool.__init__
    original_reap = pool_module.WorkerPool._reap_dead

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        pools.append(self)

    def reap_dead(self, retried):
        found = original_reap(self, retried)
        lost.extend((chunk[0], retry) for chunk, retry in found)
        return found

    monkeypatch.setattr(pool_module.WorkerPool, "__init__", init)
    monkeypatch.setattr(pool_module.WorkerPool, "_reap_dead", reap_dead)
    return pools, lost


class ChunkKiller(threading.Thread):
    """SIGKILLs the worker holding chunk ``target`` as soon as the pool hands it out,
    ``times`` times (each time a different worker process)."""

    def __init__(self, pools: list, target: int, times: int) -> None:
        super().__init__(daemon=True)
        self.pools, self.target, self.times = pools, target, times
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and len(self.killed) < self.times:
            for pool in list(self.pools):
                for worker in list(pool._workers.values()):
                    chunk = worker.chunks[0] if worker.chunks else None  # the running one
                    pid = worker.process.pid
                    if chunk is not None and chunk[0] == self.target and pid not in self.killed:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            continue
                        self.killed.append(pid)
            self.stop.wait(0.005)


def trace_with_killer(tmp_path: Path, pools: list, target: int, times: int):
    corpus = write_jsonl(tmp_path / "slow.jsonl", slow_records(18))
    db = tmp_path / "killed.duckdb"
    before = spawn_workers(os.getpid())
    killer = ChunkKiller(pools, target, times)
    killer.start()
    try:
        summary = trace_corpus(corpus, db, TraceOptions(
            workers=2, limits=Limits(timeout_s=30), chunk_size=3, commit_every=3,
            commit_seconds=3600))
    finally:
        killer.stop.set()
        killer.join()
    leftover = {p: v for p, v in spawn_workers(os.getpid()).items() if p not in before}
    return summary, db, killer, leftover


def test_worker_killed_mid_chunk_has_its_chunk_rerun_and_nothing_is_lost(tmp_path, pool_spy):
    """18 slow jobs in 6 chunks of 3 on 2 workers; the worker running chunk 2 is SIGKILLed
    while it runs it. Chunk 2 is re-run once (its jobs are ``ok``), every other worker's
    results are kept, and the store holds exactly one whole run per job, run ids 1..18,
    no duplicates; no worker process outlives the run."""
    pools, lost = pool_spy
    summary, db, killer, leftover = trace_with_killer(tmp_path, pools, target=2, times=1)
    assert len(killer.killed) == 1
    # the killed worker really ran chunk 2, which is retried; a chunk queued behind it
    # (if the pool had queued one there yet) goes back unrun, not counted as a retry
    assert lost[0] == (2, True) and all(retry for _, retry in lost[1:]), lost
    assert len(lost) <= pool_module.IN_FLIGHT
    assert (summary.traced, dict(summary.by_status), summary.matched) == (18, {"ok": 18}, 18)
    runs = assert_store_whole(db)
    assert [r[0] for r in runs] == list(range(1, 19))
    assert sorted(r[1:] for r in runs) == [(f"j{i:02d}", "ok", str(i), SLOW_STEPS, None)
                                           for i in range(18)]
    assert leftover == {}


def test_chunk_that_kills_two_workers_is_crashed(tmp_path, pool_spy):
    """The worker running chunk 1 is SIGKILLed, and so is the worker that runs it again:
    each of chunk 1's 3 jobs is stored as ``crashed`` (message says the worker died
    twice), the other 15 jobs are ``ok``, every job has exactly one whole run."""
    pools, lost = pool_spy
    summary, db, killer, leftover = trace_with_killer(tmp_path, pools, target=1, times=2)
    assert len(set(killer.killed)) == 2
    assert [entry for entry in lost if entry[0] == 1] == [(1, True), (1, False)], lost
    assert all(retry for chunk, retry in lost if chunk != 1), lost  # queued ones: unrun
    assert (summary.traced, dict(summary.by_status)) == (18, {"crashed": 3, "ok": 15})
    runs = assert_store_whole(db)
    assert [r[0] for r in runs] == list(range(1, 19))
    crashed = ("crashed", None, 0, "the worker process died twice running this chunk")
    assert sorted(r[1:] for r in runs) == [
        (f"j{i:02d}", *(crashed if i in (3, 4, 5) else ("ok", str(i), SLOW_STEPS, None)))
        for i in range(18)]
    assert leftover == {}


def test_worker_killed_while_sending_its_results_does_not_hang_the_pool():
    """A worker SIGKILLed half-way through sending a large result (the parent is busy,
    e.g. committing, so the pipe is full) must not hang the pool: its chunk is re-run and
    delivered like any chunk of a dead worker.

    Deterministic set-up: both chunks wait for wall-clock gates; chunk 0 (small result)
    comes back first and the test holds the pool's generator there, so nothing reads
    results; chunk 1's worker then blocks in write(2) on a full pipe (~64 KiB of its
    ~330 KB result sent) and is killed there."""
    gate = time.time() + 3.0
    small = {"code": GATED_BIG_RESULT.replace("range(5000)", "range(1)"), "input": repr(gate)}
    big = {"code": GATED_BIG_RESULT, "input": repr(gate + 1.0)}
    pool = pool_module.WorkerPool(2, Limits(timeout_s=60))
    started: dict[int, tuple[int, str]] = {}
    delivered: list = []
    consumer = None
    hung = False
    try:
        results = pool.run([[small], [big]])
        first_id, first = next(results)
        assert (first_id, first[0].result["status"]) == (0, "ok")
        holders = [w for w in pool._workers.values() if w.chunks and w.chunks[0][0] == 1]
        assert len(holders) == 1, "set-up: the other worker should be running chunk 1"
        sender = holders[0].process
        deadline, blocked_since = time.monotonic() + HANG_GUARD_S, None
        while time.monotonic() < deadline:
            if not blocked_in_write(sender.pid):
                blocked_since = None
            elif blocked_since is None:
                blocked_since = time.monotonic()
            elif time.monotonic() - blocked_since > 0.5:
                break
            time.sleep(0.02)
        assert blocked_since is not None, "set-up: chunk 1's worker should block sending"
        os.kill(sender.pid, signal.SIGKILL)
        sender.wait(10)

        def consume():
            try:
                delivered.extend(results)
            except Exception as exc:  # only when unblocked by the clean-up below
                delivered.append(("error", repr(exc)))
        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        consumer.join(HANG_GUARD_S)
        hung = consumer.is_alive()
    finally:
        for worker in list(pool._workers.values()):
            stat = proc_stat(worker.process.pid)
            if stat is not None:
                started[worker.process.pid] = (stat[2], "worker")
        if hung:  # unblock the reader: once every write end is closed it reads EOF
            kill_processes(started)
            outbox = getattr(pool, "_outbox", None)
            if outbox is not None:
                outbox._writer.close()
            consumer.join(10)
        pool.close()
        kill_processes(started)
    assert not hung, "the pool hung reading the partial message of a killed worker"
    assert [(i, [o.result["status"] for o in outcomes], [o.result["output"] for o in outcomes])
            for i, outcomes in delivered] == [(1, ["ok"], [str(sum(range(5000)))])]


def test_chunks_and_results_larger_than_a_pipe_do_not_deadlock_one_worker():
    """One worker, three chunks whose requests (~200 KB of program text each) and results
    (~130 KB of trace each) both outgrow a pipe. The pool queues the second chunk while
    the first runs: were that write made by the pool's own thread, it would block on the
    worker's full inbox while the worker blocks sending its results to the pool, which is
    not reading them. Every chunk comes back, each with its own sum."""
    code = "# " + "x" * 200_000 + "\n" + BIG_TRACE
    chunks = [[{"code": code, "input": str(2000 + i)}] for i in range(3)]
    pool = pool_module.WorkerPool(1, Limits(timeout_s=60))
    delivered: list = []
    runner = threading.Thread(target=lambda: delivered.extend(pool.run(chunks)), daemon=True)
    try:
        runner.start()
        runner.join(HANG_GUARD_S)
        hung = runner.is_alive()
    finally:
        if runner.is_alive():
            kill_processes({w.process.pid: (proc_stat(w.process.pid)[2], "worker")
                            for w in pool._workers.values() if proc_stat(w.process.pid)})
        pool.close()
    assert not hung, "the pool and its worker blocked on each other's pipes"
    assert sorted((i, o[0].result["status"], o[0].result["output"]) for i, o in delivered) == [
        (i, "ok", str(sum(range(2000 + i)))) for i in range(3)]


def test_a_worker_that_cannot_load_the_component_fails_the_pool_with_its_reason(tmp_path):
    """Artifacts that do not exist: the worker reports why it could not start, and the
    pool raises that as one PoolError (no retry: a replacement would fail the same way)."""
    missing = build.GuestArtifacts("missing", tmp_path / "none.wasm", tmp_path / "none.cwasm")
    pool = pool_module.WorkerPool(1, Limits(), artifacts=missing)
    with pytest.raises(pool_module.PoolError) as raised:
        list(pool.run([[{"code": SMALL, "input": "1"}]]))
    pool.close()
    message = str(raised.value)
    assert message.startswith("sandbox worker failed to start: "), message
    assert "none.wasm" in message, message


def test_workers_load_the_sandbox_only_not_the_parents_modules():
    """A worker is a fresh interpreter running steptrace.sandbox._worker: wasmtime's library is
    mapped into it, DuckDB's (which this test process has loaded) is not."""
    assert any("duckdb" in line for line in Path("/proc/self/maps").read_text().splitlines())
    pool = pool_module.WorkerPool(1, Limits())
    try:
        [(_, outcomes)] = list(pool.run([[{"code": SMALL, "input": "1"}]]))
        assert outcomes[0].result["output"] == "2"
        [worker] = pool._workers.values()
        maps = Path(f"/proc/{worker.process.pid}/maps").read_text()
        command = Path(f"/proc/{worker.process.pid}/cmdline").read_bytes().split(b"\0")
    finally:
        pool.close()
    assert "wasmtime" in maps and "duckdb" not in maps
    assert command[1:3] == [b"-m", b"steptrace.sandbox._worker"]


# ------------------------------------------------------------------ 2. killed CLI
def stored_runs(db: Path) -> int:
    """The runs a store holds, read as any reader reads it while a trace writes (0 while
    it is not a store yet)."""
    if not db.exists():
        return 0
    try:
        return store_query(db, "SELECT count(*) FROM runs").rows[0][0]
    except StoreError:  # made by DuckDB, its tables not yet committed
        return 0


@pytest.mark.parametrize("code, steps", [(SLOW, SLOW_STEPS),
                                         (SLOW_LONG_TRACE, SLOW_LONG_TRACE_STEPS)],
                         ids=["small-results", "large-results"])
def test_cli_killed_mid_run_keeps_whole_batches_resumes_and_leaves_no_orphans(
        tmp_path, reap, code, steps):
    """``steptrace trace`` (2 workers, 60 slow jobs, chunks of 16) is SIGKILLed once its
    first batch is committed (seen by reading the store, which the trace opens only for
    its commits). Then: the store
    opens; it holds whole chunks only (>= 1 chunk, < 60 runs), every run whole; running
    the same command again traces exactly the rest (one run per job, no duplicate
    run_key); and the killed CLI's worker processes all exit (they poll their parent)
    -- also when their chunk's results are larger than a pipe holds."""
    count, chunk = 60, TraceOptions().chunk_size
    corpus = write_jsonl(tmp_path / "slow.jsonl", slow_records(count, code))
    db = tmp_path / "kill.duckdb"
    command = [str(STEPTRACE), "trace", str(corpus), "--db", str(db), "--workers", "2",
               "--quiet", "--format", "json"]
    with open(tmp_path / "first.out", "wb") as out, open(tmp_path / "first.err", "wb") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err)
    try:
        deadline, stored = time.monotonic() + CLI_TIMEOUT, 0
        while time.monotonic() < deadline and proc.poll() is None and not stored:
            stored = stored_runs(db)
            time.sleep(0.02)
        assert proc.poll() is None, "set-up: the CLI ended before it could be killed"
        assert stored > 0, "set-up: no batch was committed"
        workers = children_of(proc.pid)
        reap.update(workers)
        assert len(spawn_workers(proc.pid)) == 2
        proc.kill()
    finally:
        if proc.poll() is None:
            reap.update(children_of(proc.pid))
            proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    runs = assert_store_whole(db)
    stored = {r[1] for r in runs}
    chunks = [{f"j{i:02d}" for i in range(start, min(start + chunk, count))}
              for start in range(0, count, chunk)]
    assert all(c <= stored or not c & stored for c in chunks), "a batch holds part of a chunk"
    assert chunk <= len(stored) < count
    assert sorted(r[1:5] for r in runs) == [(s, "ok", str(int(s[1:])), steps) for s in sorted(stored)]

    again = run_cli(*command[1:])
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["skipped"], summary["traced"], summary["by_status"]) == (
        len(stored), count - len(stored), {"ok": count - len(stored)})
    runs = assert_store_whole(db)
    assert sorted(r[1:5] for r in runs) == [(f"j{i:02d}", "ok", str(i), steps)
                                            for i in range(count)]
    assert [r[0] for r in runs] == list(range(1, count + 1))

    assert wait_until_gone(workers) == []


# ------------------------------------------------------------------ 3. read-only / full disk
ENOSPC, EROFS, EFBIG = (os.strerror(e) for e in (errno.ENOSPC, errno.EROFS, errno.EFBIG))


FILLER = ".filler"


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, timeout=60).returncode == 0


class SmallDisk:
    """A directory on its own tmpfs whose free space and writability the test sets.

    Without the right to mount, it is a plain directory and the CLI runs under
    ``RLIMIT_FSIZE`` instead: a file may not grow past the limit (EFBIG); ``full(n)``
    allows ``n`` bytes, ``read_only()`` none (the file can then still be opened for
    writing, so the error comes at the first write instead of at open).
    ``STEPTRACE_TEST_NO_MOUNT=1`` forces that fallback, to check it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        self.mounted = (not os.environ.get("STEPTRACE_TEST_NO_MOUNT")
                        and _mount("-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(path)))
        self.fsize: int | None = None

    def full(self, free: int) -> None:
        """Leave ``free`` bytes of room (a filler file takes the rest of a small tmpfs)."""
        if not self.mounted:
            self.fsize = free
            return
        st = os.statvfs(self.path)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        assert _mount("-o", f"remount,size={used + free + 65536}", str(self.path))
        with open(self.path / FILLER, "wb") as filler:
            while self.free() > free:
                try:
                    filler.write(b"\0" * min(4096, self.free() - free))
                    filler.flush()
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
        assert self.free() == free

    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def grow(self) -> None:
        if self.mounted:
            assert _mount("-o", "remount,rw,size=64m", str(self.path))
            (self.path / FILLER).unlink(missing_ok=True)
        self.fsize = None

    def read_only(self) -> None:
        if self.mounted:
            assert _mount("-o", "remount,ro", str(self.path))
        else:
            self.fsize = 0

    @property
    def full_cause(self) -> str:
        return ENOSPC if self.mounted else EFBIG

    @property
    def read_only_cause(self) -> str:
        return EROFS if self.mounted else EFBIG

    def cli(self, *args) -> subprocess.CompletedProcess:
        limit = self.fsize
        preexec = None if limit is None else (
            lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
        return run_cli(*args, preexec_fn=preexec)

    def unmount(self) -> None:
        for command in (["umount", str(self.path)], ["umount", "-l", str(self.path)]):
            if not self.mounted or subprocess.run(command, capture_output=True,
                                                  timeout=60).returncode == 0:
                return


@pytest.fixture
def small_disk(tmp_path):
    disk = SmallDisk(tmp_path / "disk")
    try:
        yield disk
    finally:
        disk.unmount()


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Path:
    """A checkpointed store of 5 small runs, traced through the CLI."""
    root = tmp_path_factory.mktemp("small_store")
    corpus = write_jsonl(root / "small.jsonl", small_records())
    db = root / "small.duckdb"
    result = run_cli("trace", corpus, "--db", db, "--workers", 0, "--quiet")
    assert result.returncode == 0, result.stderr
    assert not Path(f"{db}.wal").exists()
    return db


SMALL_RUNS = [(i + 1, f"s{i}", "ok", str(i + 1), 3, None) for i in range(5)]


def test_store_on_a_read_only_filesystem(tmp_path, small_disk, small_store):
    """On a read-only filesystem: tracing into an existing store or creating a new one
    fails with one line naming the file and the cause, exit 1, nothing created or
    changed; reading the existing store (sql, show) still works."""
    db = small_disk.path / "store.duckdb"
    shutil.copyfile(small_store, db)
    corpus = write_jsonl(tmp_path / "new.jsonl", [{"id": "n", "code": SMALL, "input": "7"}])
    small_disk.read_only()
    into_existing = small_disk.cli("trace", corpus, "--db", db, "--workers", 0, "--quiet")
    fresh = small_disk.path / "fresh.duckdb"
    into_new = small_disk.cli("trace", corpus, "--db", fresh, "--workers", 0, "--quiet")
    if small_disk.mounted:
        assert sorted(p.name for p in small_disk.path.iterdir()) == ["store.duckdb"]
    result = small_disk.cli("sql", "SELECT sample_id, output FROM runs ORDER BY run_id",
                            "--db", db, "--format", "csv")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == ["sample_id,output"] + [f"s{i},{i + 1}" for i in range(5)]
    result = small_disk.cli("show", 1, "--db", db, "--format", "csv")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[0] == "step,event,func,line,depth,frame,code,changed"
    assert assert_store_whole(db) == SMALL_RUNS
    assert_one_line_error(into_existing, str(db), small_disk.read_only_cause)
    assert_one_line_error(into_new, str(fresh), small_disk.read_only_cause)


def test_store_cannot_be_created_where_no_file_can_be(tmp_path):
    """Creating a store in a directory where even root cannot create a file (/proc) is
    one line naming the file, exit 1."""
    corpus = write_jsonl(tmp_path / "new.jsonl", [{"id": "n", "code": SMALL, "input": "7"}])
    db = Path("/proc") / f"steptrace-{os.getpid()}.duckdb"
    result = run_cli("trace", corpus, "--db", db, "--workers", 0, "--quiet")
    assert_one_line_error(result, f"cannot open database {db}: ")
    assert not db.exists()


def test_full_disk_mid_trace_is_one_line_and_keeps_the_store(tmp_path, small_disk, small_store):
    """A store with 5 runs on a disk with 64 KiB free; tracing 12 jobs of ~130 KB of trace
    each fills the disk: one line ``Error: ...`` naming the file and the cause (no space),
    exit 1, no traceback. The store still opens with its 5 runs whole and nothing partial;
    with room again, the same command traces the 12 jobs (17 runs, no duplicates)."""
    db = small_disk.path / "store.duckdb"
    shutil.copyfile(small_store, db)
    corpus = write_jsonl(tmp_path / "big.jsonl", [
        {"id": f"b{i:02d}", "code": BIG_TRACE, "input": str(2000 + i)} for i in range(12)])
    small_disk.full(64 * 1024)
    failed = small_disk.cli("trace", corpus, "--db", db, "--workers", 0, "--quiet")
    assert (failed.returncode, failed.stdout) == (1, "")
    assert assert_store_whole(db) == SMALL_RUNS

    small_disk.grow()
    result = small_disk.cli("trace", corpus, "--db", db, "--workers", 0, "--quiet",
                            "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["store"] == {"ok": 17}
    runs = assert_store_whole(db)
    assert runs[:5] == SMALL_RUNS
    assert sorted(r[1:4] for r in runs[5:]) == [
        (f"b{i:02d}", "ok", str(sum(range(2000 + i)))) for i in range(12)]
    assert_one_line_error(failed, str(db), small_disk.full_cause)


def test_new_store_on_a_full_disk_fails_cleanly_and_can_be_retried(tmp_path, small_disk):
    """Creating a store on a full disk is one line naming the file and the cause, exit 1;
    once there is room, the same command works (the failed attempt must not leave a file
    that is then refused as "not a valid DuckDB database")."""
    corpus = write_jsonl(tmp_path / "small.jsonl", small_records())
    db = small_disk.path / "new.duckdb"
    small_disk.full(0)
    result = small_disk.cli("trace", corpus, "--db", db, "--workers", 0, "--quiet")
    assert_one_line_error(result, str(db), small_disk.full_cause)
    small_disk.grow()
    result = small_disk.cli("trace", corpus, "--db", db, "--workers", 0, "--quiet",
                            "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["store"] == {"ok": 5}
    assert assert_store_whole(db) == SMALL_RUNS


# ------------------------------------------------------------------ 4. corrupted store
def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _overwrite_second_half(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size // 2)
        handle.write(b"\xa5" * (size - size // 2))


def _overwrite_headers(path: Path) -> None:
    with open(path, "r+b") as handle:  # DuckDB's two database headers: bytes 4096..12287
        handle.seek(4096)
        handle.write(b"\xab" * 8192)


READ_EVERYTHING = ("SELECT count(*) FROM (SELECT CAST(r AS VARCHAR) FROM runs r UNION ALL "
                   "SELECT CAST(s AS VARCHAR) FROM steps s UNION ALL "
                   "SELECT CAST(t AS VARCHAR) FROM states t UNION ALL "
                   "SELECT CAST(p AS VARCHAR) FROM programs p)")


@pytest.mark.parametrize("corrupt", [_truncate, _overwrite_second_half, _overwrite_headers],
                         ids=["truncated-to-half", "second-half-overwritten", "headers-overwritten"])
@pytest.mark.parametrize("command", ["sql", "show", "trace"])
def test_corrupted_store_is_one_line_naming_the_file(tmp_path, small_store, corrupt, command):
    """A store truncated to half its size, or with bytes overwritten (its second half, or
    its headers): ``sql`` (a query reading every table), ``show 1`` and ``trace`` print
    one line ``Error: ...`` naming the file, exit 1, no traceback."""
    db = tmp_path / "corrupt.duckdb"
    shutil.copyfile(small_store, db)
    assert query(db, READ_EVERYTHING) == [(5 + 15 + 10 + 5,)]  # intact before
    corrupt(db)
    args = {"sql": ["sql", READ_EVERYTHING],
            "show": ["show", 1],
            "trace": ["trace", write_jsonl(tmp_path / "one.jsonl", small_records(1)),
                      "--workers", 0, "--quiet"]}[command]
    assert_one_line_error(run_cli(*args, "--db", db), str(db))


# ------------------------------------------------------------------ 5. corrupted .cwasm
def test_corrupted_compiled_cache_is_rebuilt_by_the_cli(tmp_path):
    """A copy of the real cache whose .cwasm has bytes flipped (its digest sidecar kept):
    ``steptrace trace`` with ``STEPTRACE_CACHE_DIR`` on the copy traces a job correctly,
    and the .cwasm is verified again, byte-identical to the real one. The real cache is
    not touched."""
    real = build.ensure_component()
    real_cwasm = compiled_path(real, Limits())
    if not build.is_verified(real_cwasm):  # compile it once, as any first run would
        pool_module.prepare(Limits())
    real_stat = real_cwasm.stat()
    cache = tmp_path / "cache"
    cache.mkdir()
    for path in (real.wasm, real_cwasm):
        for source in (path, build.sidecar(path)):
            shutil.copyfile(source, cache / source.name)
    cwasm = cache / real_cwasm.name
    with open(cwasm, "r+b") as handle:
        handle.seek(cwasm.stat().st_size // 2)
        handle.write(b"\xde\xad\xbe\xef" * 1024)
    assert not build.is_verified(cwasm)
    corpus = write_jsonl(tmp_path / "one.jsonl", [
        {"id": "double", "code": "def f(x):\n    return x * 2\n", "input": "21", "output": "42"}])
    db = tmp_path / "one.duckdb"
    result = run_cli("trace", corpus, "--db", db, "--workers", 1, "--quiet", "--format", "json",
                     env={**os.environ, build.CACHE_ENV: str(cache)})
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["traced"], summary["by_status"], summary["matched"]) == (1, {"ok": 1}, 1)
    assert query(db, "SELECT status, output FROM runs") == [("ok", "42")]
    assert build.is_verified(cwasm)
    assert build.file_digest(cwasm) == build.sidecar(real_cwasm).read_text().strip()
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [p.name for path in (real.wasm, real_cwasm) for p in (path, build.sidecar(path))]
        + ["libwasmtime.checked",  # wasmtime's library, hashed once (memory_reset.py)
           f"guest-{real.key}.lock"])  # the trace's lease on the build (sandbox/_cache.py)
    after = real_cwasm.stat()
    assert (after.st_mtime_ns, after.st_size) == (real_stat.st_mtime_ns, real_stat.st_size)
    assert build.is_verified(real_cwasm)


def test_a_finished_pool_lets_its_workers_exit_and_takes_no_more_chunks():
    """``finish`` after the last chunk: the workers exit on their own (while the caller
    would be storing results), before ``close``; a later ``run`` is refused."""
    pool = pool_module.WorkerPool(2, Limits())
    try:
        delivered = sorted((i, o[0].result["output"]) for i, o in pool.run(
            [[{"code": SMALL, "input": str(n)}] for n in range(4)]))
        pool.finish()
        processes = [worker.process for worker in pool._workers.values()]
        exit_codes = [process.wait(HANG_GUARD_S) for process in processes]
        with pytest.raises(pool_module.PoolError, match="told to finish"):
            list(pool.run([[{"code": SMALL, "input": "1"}]]))
    finally:
        pool.close()
    assert delivered == [(n, str(n + 1)) for n in range(4)]
    assert exit_codes == [0, 0]


def test_workers_started_before_a_failing_preparation_exit_quietly(monkeypatch, capfd):
    """The pool starts its workers before preparing the component; when preparing fails
    the error reaches the caller, and the workers, still waiting for their set-up, exit
    without a traceback."""
    started: list[subprocess.Popen] = []
    real_popen = pool_module.subprocess.Popen

    def recording_popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    def failing_prepare(limits, variant="", packages=None):
        raise build.BuildError("componentize-py is not installed")

    monkeypatch.setattr(pool_module.subprocess, "Popen", recording_popen)
    monkeypatch.setattr(pool_module, "prepare", failing_prepare)
    with pytest.raises(build.BuildError, match="componentize-py is not installed"):
        pool_module.WorkerPool(2, Limits())
    assert [process.wait(HANG_GUARD_S) for process in started] == [0, 0]
    assert "Traceback" not in capfd.readouterr().err
