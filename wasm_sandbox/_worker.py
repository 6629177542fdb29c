"""One sandbox worker process: ``python -m steptrace.sandbox._worker INBOX_FD RESULTS_FD``.

Started by :class:`steptrace.sandbox._pool.WorkerPool` as a plain interpreter running this
module, so it imports only the sandbox (wasmtime and this package, ~0.1 s), never the
parent's main module: multiprocessing's spawn would import that in every worker too
(``steptrace``'s CLI pulls in DuckDB, polars and matplotlib, ~0.4 s per worker).

The first message on the inbox is the worker's set-up; then chunks ``(chunk id,
requests)`` until ``None``. Each finished chunk goes back whole on the results pipe, with
``("ready" | "failed" | "done" | "timeout", worker id, payload)`` messages. When the parent
dies the inbox ends (or the worker is re-parented, checked between jobs) and the worker
exits without sending anything more.

**Watchdog.** Epoch interruption cannot stop a guest blocked in a host call
(``time.sleep(60)``, ``select`` with a timeout: WASI's ``poll`` on a clock), and nothing in
this process can end that call. A watchdog thread therefore watches the guest call in
progress (``Sandbox.busy_since``); once it has lasted ``timeout_s + WATCHDOG_GRACE_S``
the watchdog sends ``("timeout", worker id, (chunk id, outcomes of the chunk's jobs
finished before it, the blocked job's timeout outcome))`` and ends the process
(``os._exit``). The pool replaces the worker and runs the rest of the chunk in another
one (wasm_sandbox/_pool.py). The watchdog is here rather than in the parent because the
parent's loop is a generator that pauses while its caller stores results (a commit can
take seconds): a clock kept there would let a blocked job overrun by as long; this
thread sees the job's own start and is not held up by the parent. It sleeps until the
deadline of the call it last saw (any call begun since ends later), or ``WATCH_S`` while no
call is in progress, so it costs nothing per job and wakes about once per ``timeout_s``;
a blocked job ends ``timeout_s + WATCHDOG_GRACE_S`` after it began, give or take the
scheduler.

The chunk's progress is shared with the watchdog under a lock, which the main thread
also holds to record an outcome or send a chunk: once the watchdog has decided, the main
thread can neither record nor send anything for the job, so a job is reported once.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import resource
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

from steptrace.sandbox._backends import open_sandbox
from steptrace.sandbox._build import GuestArtifacts
from steptrace.sandbox._limits import WATCHDOG_GRACE_S, Limits
from steptrace.sandbox._outcome import JobOutcome

POLL_S = 0.5  # how often an idle worker checks that its parent is alive
WATCH_S = 0.05  # how often the watchdog looks for a guest call while there is none
EXIT_WATCHDOG = 3  # exit status after the watchdog reported a blocked job
EXIT_WATCHDOG_FAILED = 4  # the watchdog itself failed: the pool treats it as a death


def blocked_message(timeout_s: float) -> str:
    """The ``exception_message`` of a job the watchdog ended; it begins like the epoch's
    ``exceeded the N s time limit`` and says why this one needed the watchdog."""
    return (f"exceeded the {timeout_s:g} s time limit: blocked in a host call (a sleep or "
            "a wait) past it, so its worker process was replaced")


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs before its first chunk (the inbox's first message)."""

    worker_id: int
    limits: Limits
    isolation: str
    # the WASI guest's build, or a native guest (steptrace.native_sandbox.NativeGuest)
    artifacts: GuestArtifacts | object
    files_root: str | None = None  # the jobs' files (the pool's: removed when the worker is gone)


def serve(inbox: mpc.Connection, results: mpc.Connection) -> None:
    """Run chunks from ``inbox`` until told to stop or orphaned."""
    parent = os.getppid()

    def orphaned() -> bool:
        return os.getppid() != parent

    try:
        setup: WorkerSetup | None = inbox.recv()
    except (EOFError, OSError):
        return
    if setup is None:  # the pool closed before the component was ready
        return
    try:
        sandbox = open_sandbox(setup.artifacts, setup.limits, setup.files_root)
        limit_file_size(setup.limits.max_file_bytes)
    except BaseException as exc:  # reported to the parent, which fails the whole run
        _send(results, ("failed", setup.worker_id, f"{type(exc).__name__}: {exc}"))
        return
    if not _send(results, ("ready", setup.worker_id, None)):
        return
    _run_chunks(sandbox, setup, inbox, results, orphaned)


def limit_file_size(max_file_bytes: int) -> None:
    """No file this process writes may grow past ``max_file_bytes`` + 1 bytes (the
    kernel's ``RLIMIT_FSIZE``; a write past it fails with ``EFBIG`` instead of the
    ``SIGXFSZ`` that would kill the process): a job's single file cannot outrun the
    ticker's measurement (wasm_sandbox/_files.py), and one byte over the bound is over it.
    Set after the component is loaded (its ``.cwasm`` may be written then); the worker
    writes no other file. Not lowered below what the process's hard limit allows."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    wanted = max_file_bytes + 1
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (wanted, hard))


def _send(results: mpc.Connection, message: tuple) -> bool:
    """Send ``message``; False when the parent has closed its end (it is gone)."""
    try:
        results.send(message)
    except OSError:
        return False
    return True


@dataclass
class _Progress:
    """The chunk being run and the outcomes of its jobs finished so far; read by the
    watchdog, changed only under ``lock``."""

    chunk_id: int | None = None
    outcomes: list[JobOutcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _watch(sandbox, setup: WorkerSetup, progress: _Progress,
           results: mpc.Connection) -> None:
    """The watchdog thread's loop (see the module docstring); never returns."""
    limit_s = setup.limits.timeout_s + WATCHDOG_GRACE_S
    try:
        while True:
            since = sandbox.busy_since
            if since is None:
                time.sleep(WATCH_S)
                continue
            left = since + limit_s - time.monotonic()
            if left > 0:
                time.sleep(left)  # the call seen may end and others start: theirs end later
                continue
            with progress.lock:
                # looked at again under the lock: the call may have returned meanwhile
                since = sandbox.busy_since
                elapsed = time.monotonic() - since if since is not None else 0.0
                if since is None or elapsed < limit_s:
                    continue
                over = sandbox.files_over  # the ticker found it over a file bound first
                blocked = JobOutcome({"status": "file_limit", "exception_message": over}
                                     if over is not None else
                                     {"status": "timeout", "exception_message":
                                      blocked_message(setup.limits.timeout_s)},
                                     int(elapsed * 1_000_000))
                _send(results, ("timeout", setup.worker_id,
                                (progress.chunk_id, list(progress.outcomes), blocked)))
                _exit(EXIT_WATCHDOG)
    except BaseException:  # a bug here must not leave a blocked job running unwatched
        traceback.print_exc()
        _exit(EXIT_WATCHDOG_FAILED)


def _exit(status: int) -> None:
    sys.stderr.flush()
    os._exit(status)


def _run_chunks(sandbox, setup: WorkerSetup, inbox: mpc.Connection,
                results: mpc.Connection, orphaned) -> None:
    progress = _Progress()
    threading.Thread(target=_watch, args=(sandbox, setup, progress, results),
                     name="steptrace-watchdog", daemon=True).start()
    while not orphaned():
        try:
            if not inbox.poll(POLL_S):
                continue
            item = inbox.recv()
        except (EOFError, OSError):  # the parent closed the inbox or died
            return
        if item is None:
            return
        chunk_id, requests = item
        with progress.lock:
            progress.chunk_id, progress.outcomes = chunk_id, []
        for request in requests:
            if orphaned():
                return
            outcome = sandbox.run(request, setup.isolation)
            with progress.lock:
                progress.outcomes.append(outcome)
        with progress.lock:
            if not _send(results, ("done", setup.worker_id, (chunk_id, progress.outcomes))):
                return


def main(argv: list[str]) -> None:
    inbox_fd, results_fd = (int(arg) for arg in argv)
    serve(mpc.Connection(inbox_fd, writable=False), mpc.Connection(results_fd, readable=False))
    # Every result is sent: exit without the interpreter's and wasmtime's tear-down (the
    # store, the instance slots, the engine: 30-60 ms the parent would wait for), which
    # the kernel does faster when it frees the whole process.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
