"""Worker processes that run chunks of jobs, each loading the compiled component once.

The parent hands one chunk at a time to each idle worker (its own inbox), so it always
knows which chunk a worker holds: if a worker process dies (a host-side crash, ``kill -9``)
its chunk is run again in a replacement worker, once; a chunk that kills a worker twice is
reported as ``crashed`` for each of its jobs. Nothing another worker finished is lost.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from dataclasses import dataclass
from typing import Iterable, Iterator

from wasm_sandbox.build import GuestArtifacts, ensure_component, is_verified
from wasm_sandbox.limits import Limits
from wasm_sandbox.runtime import (JobOutcome, Sandbox, compiled_path, load_component,
                                  make_engine)

POLL_S = 0.5


class PoolError(RuntimeError):
    """A worker could not start (the message says why)."""


@dataclass
class _Worker:
    process: mp.Process
    inbox: mp.Queue
    chunk: tuple[int, list[dict]] | None = None
    ready: bool = False


def prepare(limits: Limits) -> GuestArtifacts:
    """Build the component and compile its ``.cwasm`` in this process, so workers only
    deserialise (and never race to build)."""
    found = ensure_component()
    if not is_verified(compiled_path(found, limits)):
        load_component(make_engine(limits), limits, found)
    return found


def _worker_main(limits: Limits, isolation: str, artifacts: GuestArtifacts,
                 inbox: mp.Queue, outbox: mp.Queue, worker_id: int) -> None:
    try:
        sandbox = Sandbox(limits, artifacts)
    except BaseException as exc:  # reported to the parent, which fails the whole run
        outbox.put(("failed", worker_id, f"{type(exc).__name__}: {exc}"))
        return
    outbox.put(("ready", worker_id, None))
    parent = mp.parent_process()
    while True:
        try:
            item = inbox.get(timeout=POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                break  # the parent was killed (kill -9): nobody will read our results
            continue
        if item is None:
            break
        chunk_id, requests = item
        outcomes = [sandbox.run(request, isolation) for request in requests]
        outbox.put(("done", worker_id, (chunk_id, outcomes)))
    sandbox.close()


def crashed_outcomes(count: int, message: str) -> list[JobOutcome]:
    return [JobOutcome({"status": "crashed", "exception_message": message}, 0)
            for _ in range(count)]


class WorkerPool:
    """``with WorkerPool(2, limits, "job") as pool: for chunk_id, outcomes in pool.run(chunks)``."""

    def __init__(self, workers: int, limits: Limits, isolation: str = "job",
                 artifacts: GuestArtifacts | None = None) -> None:
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self.limits = limits
        self.isolation = isolation
        self.artifacts = artifacts or prepare(limits)
        self._ctx = mp.get_context("spawn")
        self._outbox: mp.Queue = self._ctx.Queue()
        self._workers: dict[int, _Worker] = {}
        self._next_id = 0
        for _ in range(workers):
            self._start_worker()

    def _start_worker(self) -> int:
        worker_id = self._next_id
        self._next_id += 1
        inbox = self._ctx.Queue()
        process = self._ctx.Process(
            target=_worker_main, name=f"steptrace-worker-{worker_id}", daemon=True,
            args=(self.limits, self.isolation, self.artifacts, inbox, self._outbox, worker_id))
        process.start()
        self._workers[worker_id] = _Worker(process, inbox)
        return worker_id

    def run(self, chunks: Iterable[list[dict]]) -> Iterator[tuple[int, list[JobOutcome]]]:
        """Yield ``(chunk index, outcomes)`` as chunks finish (not in order)."""
        pending = list(enumerate(chunks))
        pending.reverse()
        retried: set[int] = set()
        in_flight = 0
        while pending or in_flight:
            for worker in self._workers.values():
                if worker.ready and worker.chunk is None and pending:
                    worker.chunk = pending.pop()
                    worker.inbox.put(worker.chunk)
                    in_flight += 1
            try:
                kind, worker_id, payload = self._outbox.get(timeout=POLL_S)
            except queue.Empty:
                for chunk, retry in self._reap_dead(retried):
                    in_flight -= 1
                    if retry:
                        pending.append(chunk)
                    else:
                        yield chunk[0], crashed_outcomes(
                            len(chunk[1]), "the worker process died twice running this chunk")
                continue
            worker = self._workers.get(worker_id)
            if kind == "failed":
                self.close()
                raise PoolError(f"sandbox worker failed to start: {payload}")
            if worker is None:
                continue
            if kind == "ready":
                worker.ready = True
            elif kind == "done":
                worker.chunk = None
                in_flight -= 1
                yield payload

    def _reap_dead(self, retried: set[int]) -> list[tuple[tuple[int, list[dict]], bool]]:
        """Replace dead workers; return their chunks with whether to retry them."""
        lost = []
        for worker_id, worker in list(self._workers.items()):
            if worker.process.is_alive():
                continue
            del self._workers[worker_id]
            if not worker.ready:  # died while starting: a replacement would die too
                self.close()
                raise PoolError(f"sandbox worker exited while starting "
                                f"(exit code {worker.process.exitcode})")
            self._start_worker()
            if worker.chunk is not None:
                chunk_id = worker.chunk[0]
                lost.append((worker.chunk, chunk_id not in retried))
                retried.add(chunk_id)
        return lost

    def close(self) -> None:
        for worker in self._workers.values():
            if worker.process.is_alive():
                worker.inbox.put(None)
        for worker in self._workers.values():
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
        self._workers.clear()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
