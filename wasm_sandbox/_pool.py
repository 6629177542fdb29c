"""Worker processes that run chunks of jobs, each loading the compiled component once.

The parent keeps ``IN_FLIGHT`` chunks in each worker's own inbox (one running, the next
queued, so a worker never waits for the parent while it stores results) and knows which
chunks a worker holds, in order: the first is the one running. If a worker process dies
(a host-side crash, ``kill -9``) its running chunk is run again in a replacement worker,
once, and the chunks queued behind it go back to the queue as if never handed out; a
chunk that kills a worker twice is reported as ``crashed`` for each of its jobs. Nothing
another worker finished is lost.

A job blocked in a host call past its time limit is ended by its worker's watchdog
(wasm_sandbox/_worker.py), which reports the outcomes of the chunk's jobs finished before
it, and the blocked job as ``timeout``, then exits. The parent kills what is left of that
worker, starts a replacement and hands out the chunk's remaining jobs (the ones after the
blocked job) as a *piece* of the chunk: ``_Piece(index, requests, offset)`` is a run of a
chunk's jobs starting at ``offset``. A chunk is yielded once every one of its jobs has an
outcome, in order, so callers see whole chunks as before. Pieces count as their chunk for
the dead-worker rule: a chunk whose pieces kill two workers has its remaining jobs
reported as ``crashed``. The queued chunk of a watchdog-ended worker goes back to the
queue, never having run; nobody's finished results are lost, and no job is run twice
unless a worker died while running it.

A worker is a plain interpreter running :mod:`steptrace.sandbox._worker` (not a
multiprocessing child, which would import the parent's main module too). Each worker
sends its results through a pipe of its own, which the parent waits on together with the
others: a worker that dies in the middle of sending leaves only its own pipe at
end-of-file (a shared queue would leave the parent blocked on a half-read message, or the
other workers on the queue's lock). Chunks go to a worker through its inbox pipe, written
by a thread of its own so the parent never blocks on a busy worker's full pipe. Workers
check between jobs that the parent is alive and exit without flushing anything when it
is not.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple

from steptrace.sandbox._build import GuestArtifacts, ensure_component, hold, is_verified
from steptrace.sandbox._build import artifacts as guest_artifacts
from steptrace.sandbox._files import make_root, remove_root
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import PackageLock
from steptrace.sandbox._runtime import JobOutcome, compiled_path, load_component, make_engine
from steptrace.sandbox._worker import WorkerSetup
from steptrace.errors import InputError, SandboxError

POLL_S = 0.5
IN_FLIGHT = 2  # chunks handed to a worker at once


class PoolError(SandboxError):
    """A worker could not start (the message says why)."""


class _Inbox:
    """A worker's inbox: ``put`` never blocks; a thread of its own writes the pipe, which
    blocks while the worker is busy and its pipe is full (a chunk of long programs is
    larger than a pipe holds) while the parent must go on reading results."""

    _STOP = object()

    def __init__(self, connection: mpc.Connection, name: str) -> None:
        self._connection = connection
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._feed, name=name, daemon=True)
        self._thread.start()

    def put(self, item: object) -> None:
        self._items.put(item)

    def _feed(self) -> None:
        while (item := self._items.get()) is not self._STOP:
            try:
                self._connection.send(item)
            except OSError:  # the worker died: the pool hands its chunks out again
                break
        self._connection.close()

    def close(self, timeout: float) -> None:
        """Send what is queued (within ``timeout``), then close the pipe."""
        self._items.put(self._STOP)
        self._thread.join(timeout)


class _Piece(NamedTuple):
    """Jobs ``offset`` onwards of chunk ``index`` (a whole chunk has offset 0)."""

    index: int
    requests: list[dict]
    offset: int = 0


@dataclass
class _Worker:
    process: subprocess.Popen
    inbox: _Inbox
    results: mpc.Connection
    files_root: str  # its jobs' files (wasm_sandbox/_files.py): removed once it is gone
    chunks: list[_Piece] = field(default_factory=list)  # first: running
    ready: bool = False
    ended: bool = False  # its results pipe was read to its end


class _Assembly:
    """Outcomes of the chunks that came back in more than one piece, until complete."""

    def __init__(self) -> None:
        self._slots: dict[int, list[JobOutcome | None]] = {}

    def add(self, piece: _Piece, outcomes: list[JobOutcome]) -> list[JobOutcome] | None:
        """Record the outcomes of ``piece``'s first ``len(outcomes)`` jobs; the chunk's
        outcomes, in order, once every job has one."""
        slots = self._slots.get(piece.index)
        if slots is None:
            if piece.offset == 0 and len(outcomes) == len(piece.requests):
                return outcomes  # the usual case: a whole chunk at once
            slots = self._slots[piece.index] = [None] * (piece.offset + len(piece.requests))
        slots[piece.offset:piece.offset + len(outcomes)] = outcomes
        if any(outcome is None for outcome in slots):
            return None
        del self._slots[piece.index]
        return slots  # type: ignore[return-value]


def prepare(limits: Limits, variant: str = "", packages: PackageLock | None = None
            ) -> GuestArtifacts:
    """A native lock's guest is the native backend's (``steptrace.native_sandbox.prepare``:
    the interpreter found, the packages installed, the runner written; a variant: another
    string-hash secret). Otherwise: build the component and compile its ``.cwasm`` in this process, so workers only
    deserialise (and never race to build). Checking the ``.cwasm`` here also stamps it
    (see ``build.is_verified``), so the workers' own checks need not hash it again. When
    it is valid the ``.wasm`` it was compiled from is not needed, nor hashed. The build is
    leased first (``build.hold``): no other process evicts it between the check and the
    end of this one."""
    if packages is not None and packages.native:
        from steptrace.native_sandbox._runtime import prepare as prepare_native
        return prepare_native(lock=packages, variant=variant)
    found = guest_artifacts(variant=variant, packages=packages)
    hold(found)
    if is_verified(compiled_path(found, limits)):
        return found
    found = ensure_component(variant=variant, packages=packages)
    if not is_verified(compiled_path(found, limits)):
        load_component(make_engine(limits)[0], limits, found)
    return found


def crashed_outcomes(count: int, message: str) -> list[JobOutcome]:
    return [JobOutcome({"status": "crashed", "exception_message": message}, 0)
            for _ in range(count)]


class WorkerPool:
    """``with WorkerPool(2, limits, "job") as pool: for chunk_id, outcomes in pool.run(chunks)``."""

    def __init__(self, workers: int, limits: Limits, isolation: str = "job",
                 artifacts: GuestArtifacts | None = None, variant: str = "",
                 packages: PackageLock | None = None) -> None:
        """Without ``artifacts`` the workers are started first and the component is
        prepared (:func:`prepare`: built if need be, its ``.cwasm`` hashed, ~25 ms) while
        their interpreters start; they get their set-up once it is ready."""
        if workers < 1:
            raise InputError("a pool needs at least one worker")
        self.limits = limits
        self.isolation = isolation
        self.artifacts = artifacts
        self._workers: dict[int, _Worker] = {}
        self._next_id = 0
        self._finished = False
        for _ in range(workers):
            self._start_worker()
        if self.artifacts is None:
            try:
                self.artifacts = prepare(limits, variant, packages)
            except BaseException:
                self.close()
                raise
            for worker_id, worker in self._workers.items():
                worker.inbox.put(self._setup(worker_id, worker.files_root))

    def _setup(self, worker_id: int, files_root: str) -> WorkerSetup:
        assert self.artifacts is not None
        return WorkerSetup(worker_id, self.limits, self.isolation, self.artifacts, files_root)

    def _start_worker(self) -> int:
        """Start a worker process; it gets its set-up now if the component is known."""
        worker_id = self._next_id
        self._next_id += 1
        # The worker's directory for its jobs' files is made and removed here, by the
        # parent: a worker may be killed (its watchdog, a crash) before it could remove it
        files_root = make_root()
        inbox_read, inbox_write = os.pipe()
        results_read, results_write = os.pipe()
        try:
            # the same interpreter finds the same installed steptrace; in a process group
            # of its own, so that a terminal's Ctrl-C reaches only the parent, which stops
            # the workers itself (each would otherwise print its own traceback)
            process = subprocess.Popen(
                [sys.executable, "-m", "steptrace.sandbox._worker", str(inbox_read),
                 str(results_write)], pass_fds=(inbox_read, results_write),
                stdin=subprocess.DEVNULL, process_group=0)
        except BaseException:
            remove_root(files_root)
            os.close(inbox_write)
            os.close(results_read)
            raise
        finally:
            # the worker holds the only other ends: its death means end-of-file here,
            # and the parent's death end-of-file in its inbox
            os.close(inbox_read)
            os.close(results_write)
        inbox = _Inbox(mpc.Connection(inbox_write, readable=False),
                       f"steptrace-inbox-{worker_id}")
        if self.artifacts is not None:
            inbox.put(self._setup(worker_id, files_root))
        results = mpc.Connection(results_read, writable=False)
        self._workers[worker_id] = _Worker(process, inbox, results, files_root)
        return worker_id

    def _receive(self) -> tuple | None:
        """The next message from any worker, or None after ``POLL_S`` or when a worker's
        pipe ended (it died; ``_reap_dead`` deals with it)."""
        readers = {worker.results: worker for worker in self._workers.values()}
        for connection in mpc.wait(list(readers), timeout=POLL_S):
            try:
                return connection.recv()
            except (EOFError, OSError):
                readers[connection].ended = True
                _wait(readers[connection].process, 1)
        return None

    def run(self, chunks: Iterable[list[dict]]) -> Iterator[tuple[int, list[JobOutcome]]]:
        """Yield ``(chunk index, outcomes)`` as chunks finish (not in order). ``chunks`` is
        read lazily: only a few chunks per worker are taken from it ahead of the work."""
        if self._finished:
            raise PoolError("the pool was told to finish: it takes no more chunks")
        source = iter(enumerate(chunks))
        pending: list[_Piece] = []  # next piece last; retried ones go last
        retried: set[int] = set()
        assembly = _Assembly()
        in_flight = 0
        exhausted = False
        while True:
            while not exhausted and len(pending) < (IN_FLIGHT + 1) * len(self._workers):
                item = next(source, None)
                if item is None:
                    exhausted = True
                else:
                    pending.insert(0, _Piece(*item))
            if not (pending or in_flight):
                break
            in_flight += self._hand_out(pending)
            message = self._receive()
            if message is None:
                for piece, retry in self._reap_dead(retried):
                    in_flight -= 1
                    if retry:
                        pending.append(piece)
                    elif (whole := assembly.add(piece, crashed_outcomes(
                            len(piece.requests),
                            "the worker process died twice running this chunk"))) is not None:
                        yield piece.index, whole
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
                index, outcomes = payload
                piece = next(c for c in worker.chunks if c.index == index)
                worker.chunks.remove(piece)
                in_flight -= 1
                if (whole := assembly.add(piece, outcomes)) is not None:
                    yield index, whole
            elif kind == "timeout":
                index, finished, blocked = payload
                running, *queued = worker.chunks
                assert running.index == index, (running.index, index)
                in_flight -= len(worker.chunks)
                self._replace(worker_id)
                pending += queued  # never ran
                after = len(finished) + 1  # the jobs after the blocked one run elsewhere
                if after < len(running.requests):
                    pending.append(_Piece(index, running.requests[after:],
                                          running.offset + after))
                if (whole := assembly.add(running, [*finished, blocked])) is not None:
                    yield index, whole

    def _hand_out(self, pending: list[_Piece]) -> int:
        """Give every ready worker without work a chunk, then queue one more behind the
        running one while more chunks wait than there are workers (near the end a
        queued chunk could wait for a busy worker while another one idles)."""
        handed = 0
        for queue_ahead in range(IN_FLIGHT):
            for worker in self._workers.values():
                if (worker.ready and len(worker.chunks) == queue_ahead and pending
                        and (queue_ahead == 0 or len(pending) > len(self._workers))):
                    piece = pending.pop()
                    worker.chunks.append(piece)
                    worker.inbox.put((piece.index, piece.requests))
                    handed += 1
        return handed

    def _replace(self, worker_id: int) -> None:
        """Kill worker ``worker_id`` (its watchdog ended a blocked job and is ending the
        process; the kill makes sure) and start a replacement."""
        worker = self._workers.pop(worker_id)
        worker.process.kill()
        worker.process.wait()
        worker.inbox.close(0)
        worker.results.close()
        remove_root(worker.files_root)
        self._start_worker()

    def _reap_dead(self, retried: set[int]) -> list[tuple[_Piece, bool]]:
        """Replace dead workers; return their pieces with whether to run them again (the
        running one once per chunk; the ones queued behind it, which never ran, always)."""
        lost = []
        for worker_id, worker in list(self._workers.items()):
            if worker.process.poll() is None:
                continue
            if not worker.ended and worker.results.poll(0):
                continue  # what it sent before dying (a chunk, a timeout) is read first
            del self._workers[worker_id]
            worker.inbox.close(0)
            worker.results.close()
            remove_root(worker.files_root)
            if not worker.ready:  # died while starting: a replacement would die too
                self.close()
                raise PoolError(f"sandbox worker exited while starting "
                                f"(exit code {worker.process.returncode})")
            self._start_worker()
            if worker.chunks:
                running, *queued = worker.chunks
                lost.append((running, running[0] not in retried))
                retried.add(running[0])
                lost += [(chunk, True) for chunk in queued]
        return lost

    def finish(self) -> None:
        """No more chunks: each worker exits once its work is done, while the caller goes
        on (storing the last results); ``close`` then only waits for them."""
        if not self._finished:
            self._finished = True
            for worker in self._workers.values():
                worker.inbox.put(None)  # finish the running chunk, then exit

    def close(self) -> None:
        self.finish()
        for worker in self._workers.values():
            worker.inbox.close(0)
        for worker in self._workers.values():
            if not _wait(worker.process, 5):
                worker.process.kill()
                worker.process.wait()
            worker.results.close()
            remove_root(worker.files_root)
        self._workers.clear()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _wait(process: subprocess.Popen, timeout: float) -> bool:
    """Whether ``process`` exited (and was reaped) within ``timeout`` seconds."""
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True
