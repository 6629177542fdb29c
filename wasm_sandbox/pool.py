"""Worker processes that run chunks of jobs, each loading the compiled component once.

The parent keeps ``IN_FLIGHT`` chunks in each worker's own inbox (one running, the next
queued, so a worker never waits for the parent while it stores results) and knows which
chunks a worker holds, in order: the first is the one running. If a worker process dies
(a host-side crash, ``kill -9``) its running chunk is run again in a replacement worker,
once, and the chunks queued behind it go back to the queue as if never handed out; a
chunk that kills a worker twice is reported as ``crashed`` for each of its jobs. Nothing
another worker finished is lost.

Each worker sends its results through a pipe of its own, which the parent waits on
together with the others: a worker that dies in the middle of sending leaves only its own
pipe at end-of-file (a shared queue would leave the parent blocked on a half-read message,
or the other workers on the queue's lock). Workers check between jobs that the parent is
alive and exit without flushing anything when it is not.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import queue
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from wasm_sandbox.build import GuestArtifacts, ensure_component, is_verified
from wasm_sandbox.build import artifacts as guest_artifacts
from wasm_sandbox.limits import Limits
from wasm_sandbox.runtime import (JobOutcome, Sandbox, compiled_path, load_component,
                                  make_engine)

POLL_S = 0.5
IN_FLIGHT = 2  # chunks handed to a worker at once


class PoolError(RuntimeError):
    """A worker could not start (the message says why)."""


@dataclass
class _Worker:
    process: mp.Process
    inbox: mp.Queue
    results: mpc.Connection
    chunks: list[tuple[int, list[dict]]] = field(default_factory=list)  # first: running
    ready: bool = False


def prepare(limits: Limits, variant: str = "") -> GuestArtifacts:
    """Build the component and compile its ``.cwasm`` in this process, so workers only
    deserialise (and never race to build). The ``.cwasm`` is checked against its digest
    here, once: the workers started next trust it (``Sandbox(verified=True)``). When it
    is valid the ``.wasm`` it was compiled from is not needed, nor hashed."""
    found = guest_artifacts(variant=variant)
    if is_verified(compiled_path(found, limits)):
        return found
    found = ensure_component(variant=variant)
    if not is_verified(compiled_path(found, limits)):
        load_component(make_engine(limits), limits, found)
    return found


def _worker_main(limits: Limits, isolation: str, artifacts: GuestArtifacts, verified: bool,
                 inbox: mp.Queue, results: mpc.Connection, worker_id: int) -> None:
    try:
        sandbox = Sandbox(limits, artifacts, verified)
    except BaseException as exc:  # reported to the parent, which fails the whole run
        results.send(("failed", worker_id, f"{type(exc).__name__}: {exc}"))
        return
    results.send(("ready", worker_id, None))
    parent = mp.parent_process()

    def orphaned() -> bool:
        return parent is not None and not parent.is_alive()

    while not orphaned():
        try:
            item = inbox.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if item is None:
            break
        chunk_id, requests = item
        outcomes = []
        for request in requests:
            if orphaned():
                break
            outcomes.append(sandbox.run(request, isolation))
        else:
            try:
                results.send(("done", worker_id, (chunk_id, outcomes)))
            except OSError:  # the parent closed its end: it is gone
                break
    sandbox.close()
    if orphaned():
        os._exit(0)  # nothing to flush for a parent that no longer reads


def crashed_outcomes(count: int, message: str) -> list[JobOutcome]:
    return [JobOutcome({"status": "crashed", "exception_message": message}, 0)
            for _ in range(count)]


class WorkerPool:
    """``with WorkerPool(2, limits, "job") as pool: for chunk_id, outcomes in pool.run(chunks)``."""

    def __init__(self, workers: int, limits: Limits, isolation: str = "job",
                 artifacts: GuestArtifacts | None = None, verified: bool = False) -> None:
        """``verified``: ``artifacts`` come from :func:`prepare` just now, so the workers
        need not hash the ``.cwasm`` again."""
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self.limits = limits
        self.isolation = isolation
        self.verified = verified or artifacts is None
        self.artifacts = artifacts or prepare(limits)
        self._ctx = mp.get_context("spawn")
        self._workers: dict[int, _Worker] = {}
        self._next_id = 0
        for _ in range(workers):
            self._start_worker()

    def _start_worker(self) -> int:
        worker_id = self._next_id
        self._next_id += 1
        inbox = self._ctx.Queue()
        reader, writer = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=_worker_main, name=f"steptrace-worker-{worker_id}", daemon=True,
            args=(self.limits, self.isolation, self.artifacts, self.verified, inbox, writer,
                  worker_id))
        process.start()
        writer.close()  # the worker holds the only write end: its death means end-of-file
        self._workers[worker_id] = _Worker(process, inbox, reader)
        return worker_id

    def _receive(self) -> tuple | None:
        """The next message from any worker, or None after ``POLL_S`` or when a worker's
        pipe ended (it died; ``_reap_dead`` deals with it)."""
        readers = {worker.results: worker for worker in self._workers.values()}
        for connection in mpc.wait(list(readers), timeout=POLL_S):
            try:
                return connection.recv()
            except (EOFError, OSError):
                readers[connection].process.join(1)
        return None

    def run(self, chunks: Iterable[list[dict]]) -> Iterator[tuple[int, list[JobOutcome]]]:
        """Yield ``(chunk index, outcomes)`` as chunks finish (not in order). ``chunks`` is
        read lazily: only a few chunks per worker are taken from it ahead of the work."""
        source = iter(enumerate(chunks))
        pending: list[tuple[int, list[dict]]] = []  # next chunk last; retried ones go last
        retried: set[int] = set()
        in_flight = 0
        exhausted = False
        while True:
            while not exhausted and len(pending) < (IN_FLIGHT + 1) * len(self._workers):
                item = next(source, None)
                if item is None:
                    exhausted = True
                else:
                    pending.insert(0, item)
            if not (pending or in_flight):
                break
            in_flight += self._hand_out(pending)
            message = self._receive()
            if message is None:
                for chunk, retry in self._reap_dead(retried):
                    in_flight -= 1
                    if retry:
                        pending.append(chunk)
                    else:
                        yield chunk[0], crashed_outcomes(
                            len(chunk[1]), "the worker process died twice running this chunk")
                continue
            kind, worker_id, payload = message
            worker = self._workers.get(worker_id)
            if kind == "failed":
                self.close()
                raise PoolError(f"sandbox worker failed to start: {payload}")
            if worker is None:
                continue
            if kind == "ready":
                worker.ready = True
            elif kind == "done":
                worker.chunks = [c for c in worker.chunks if c[0] != payload[0]]
                in_flight -= 1
                yield payload

    def _hand_out(self, pending: list[tuple[int, list[dict]]]) -> int:
        """Give every ready worker without work a chunk, then queue one more behind the
        running one while more chunks wait than there are workers (near the end a
        queued chunk could wait for a busy worker while another one idles)."""
        handed = 0
        for queue_ahead in range(IN_FLIGHT):
            for worker in self._workers.values():
                if (worker.ready and len(worker.chunks) == queue_ahead and pending
                        and (queue_ahead == 0 or len(pending) > len(self._workers))):
                    worker.chunks.append(pending.pop())
                    worker.inbox.put(worker.chunks[-1])
                    handed += 1
        return handed

    def _reap_dead(self, retried: set[int]) -> list[tuple[tuple[int, list[dict]], bool]]:
        """Replace dead workers; return their chunks with whether to run them again (the
        running chunk once; the ones queued behind it, which never ran, always)."""
        lost = []
        for worker_id, worker in list(self._workers.items()):
            if worker.process.is_alive():
                continue
            del self._workers[worker_id]
            worker.results.close()
            if not worker.ready:  # died while starting: a replacement would die too
                self.close()
                raise PoolError(f"sandbox worker exited while starting "
                                f"(exit code {worker.process.exitcode})")
            self._start_worker()
            if worker.chunks:
                running, *queued = worker.chunks
                lost.append((running, running[0] not in retried))
                retried.add(running[0])
                lost += [(chunk, True) for chunk in queued]
        return lost

    def close(self) -> None:
        for worker in self._workers.values():
            if worker.process.is_alive():
                worker.inbox.put(None)
        for worker in self._workers.values():
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
            worker.results.close()
        self._workers.clear()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
