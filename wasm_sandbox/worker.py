"""One sandbox worker process: ``python -m wasm_sandbox.worker INBOX_FD RESULTS_FD``.

Started by :class:`wasm_sandbox.pool.WorkerPool` as a plain interpreter running this
module, so it imports only the sandbox (wasmtime and this package, ~0.1 s), never the
parent's main module: multiprocessing's spawn would import that in every worker too
(``steptrace``'s CLI pulls in DuckDB, polars and matplotlib, ~0.4 s per worker).

The first message on the inbox is the worker's set-up; then chunks ``(chunk id,
requests)`` until ``None``. Each finished chunk goes back whole on the results pipe, with
``("ready" | "failed" | "done", worker id, payload)`` messages. When the parent dies the
inbox ends (or the worker is re-parented, checked between jobs) and the worker exits
without sending anything more.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import sys
from dataclasses import dataclass

from wasm_sandbox.build import GuestArtifacts
from wasm_sandbox.limits import Limits
from wasm_sandbox.runtime import Sandbox

POLL_S = 0.5  # how often an idle worker checks that its parent is alive


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs before its first chunk (the inbox's first message)."""

    worker_id: int
    limits: Limits
    isolation: str
    artifacts: GuestArtifacts


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
        sandbox = Sandbox(setup.limits, setup.artifacts)
    except BaseException as exc:  # reported to the parent, which fails the whole run
        _send(results, ("failed", setup.worker_id, f"{type(exc).__name__}: {exc}"))
        return
    if not _send(results, ("ready", setup.worker_id, None)):
        return
    _run_chunks(sandbox, setup, inbox, results, orphaned)


def _send(results: mpc.Connection, message: tuple) -> bool:
    """Send ``message``; False when the parent has closed its end (it is gone)."""
    try:
        results.send(message)
    except OSError:
        return False
    return True


def _run_chunks(sandbox: Sandbox, setup: WorkerSetup, inbox: mpc.Connection,
                results: mpc.Connection, orphaned) -> None:
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
        outcomes = []
        for request in requests:
            if orphaned():
                return
            outcomes.append(sandbox.run(request, setup.isolation))
        if not _send(results, ("done", setup.worker_id, (chunk_id, outcomes))):
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
