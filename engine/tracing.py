"""Job orchestration: corpus → sandbox workers → store.

``trace_corpus`` loads a corpus, leaves out jobs the store already holds (resume), runs
the rest in chunks across worker processes (or in this process with ``workers=0``) and
commits finished runs in batches, so an interrupted run keeps every committed batch and a
re-run finishes the rest.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from engine.corpus import Corpus, Job, load_corpus
from engine.store import TracedRun, TraceWriter, connect
from wasm_sandbox.limits import Limits
from wasm_sandbox.pool import WorkerPool, prepare
from wasm_sandbox.runtime import JobOutcome, Sandbox

STATUSES = ("ok", "exception", "invalid", "timeout", "step_limit", "memory_limit",
            "output_limit", "exited", "tampered", "crashed")


@dataclass(frozen=True)
class TraceOptions:
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    limits: Limits = field(default_factory=Limits)
    isolation: str = "job"
    force: bool = False
    chunk_size: int = 16
    commit_every: int = 1000
    commit_seconds: float = 2.0


@dataclass
class TraceSummary:
    corpus: str
    db: str
    jobs: int = 0
    duplicates: int = 0
    skipped: int = 0
    traced: int = 0
    by_status: Counter = field(default_factory=Counter)
    with_expected: int = 0
    matched: int = 0
    line_steps: int = 0
    instruction_steps: int = 0
    steps: int = 0
    seconds: float = 0.0
    corpus_errors: list[str] = field(default_factory=list)

    @property
    def runs_per_second(self) -> float:
        return self.traced / self.seconds if self.seconds > 0 else 0.0

    def add(self, traced: TracedRun) -> None:
        result = traced.result
        self.traced += 1
        self.by_status[result.get("status") or "crashed"] += 1
        if traced.job.expected is not None:
            self.with_expected += 1
            self.matched += bool(result.get("output_matches"))
        self.line_steps += result.get("line_steps") or 0
        self.instruction_steps += result.get("instruction_steps") or 0
        self.steps += len((result.get("steps") or {}).get("event") or ())

    def as_dict(self) -> dict:
        return {"corpus": self.corpus, "db": self.db, "jobs": self.jobs,
                "duplicates": self.duplicates, "skipped": self.skipped, "traced": self.traced,
                "by_status": dict(sorted(self.by_status.items())),
                "with_expected": self.with_expected, "matched": self.matched,
                "line_steps": self.line_steps, "instruction_steps": self.instruction_steps,
                "steps": self.steps, "seconds": round(self.seconds, 3),
                "runs_per_second": round(self.runs_per_second, 1),
                "corpus_errors": self.corpus_errors}


def _chunks(jobs: list[Job], size: int) -> list[list[Job]]:
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


def run_chunks(chunks: list[list[dict]], workers: int, limits: Limits, isolation: str = "job",
               variant: str = "", pool: WorkerPool | None = None
               ) -> Iterator[tuple[int, list[JobOutcome]]]:
    """Run chunks of guest requests (in worker processes, or here with ``workers=0``);
    yield ``(chunk index, outcomes)`` as chunks finish, in any order. ``variant`` names
    a separately initialised build of the guest (see wasm_sandbox.build). A ``pool``
    started earlier (``start_pool``) is used as it is."""
    if pool is not None:
        yield from pool.run(chunks)
        return
    artifacts = prepare(limits, variant)
    if workers == 0:
        with Sandbox(limits, artifacts) as sandbox:
            for index, chunk in enumerate(chunks):
                yield index, [sandbox.run(request, isolation) for request in chunk]
        return
    with WorkerPool(min(workers, max(1, len(chunks))), limits, isolation, artifacts,
                    verified=True) as pool:
        yield from pool.run(chunks)


def start_pool(options: TraceOptions) -> WorkerPool | None:
    """Workers started now, so that they boot (~0.1 s: interpreter, imports, deserialising
    the component) while this process loads the corpus and reads the store; None for
    ``workers=0``."""
    if options.workers == 0:
        return None
    artifacts = prepare(options.limits)
    return WorkerPool(options.workers, options.limits, options.isolation, artifacts,
                      verified=True)


def run_jobs(jobs: list[Job], options: TraceOptions,
             pool: WorkerPool | None = None) -> Iterator[list[TracedRun]]:
    """Run ``jobs`` in the sandbox; yield finished runs chunk by chunk (any order)."""
    chunks = _chunks(jobs, options.chunk_size)
    requests = [[job.request() for job in chunk] for chunk in chunks]
    for index, outcomes in run_chunks(requests, options.workers, options.limits,
                                      options.isolation, pool=pool):
        yield [TracedRun(job, *_unpack(outcome), options.isolation)
               for job, outcome in zip(chunks[index], outcomes)]


def _unpack(outcome: JobOutcome) -> tuple[dict, int]:
    return outcome.result, outcome.duration_us


def trace_corpus(corpus: str | Path | Corpus, db: str | Path, options: TraceOptions,
                 progress: Callable[[int, int], None] | None = None,
                 corpus_name: str | None = None) -> TraceSummary:
    """Trace every job of ``corpus`` not yet in ``db``; ``progress(done, total)``."""
    started = time.perf_counter()
    with ExitStack() as stack:
        pool = start_pool(options)
        if pool is not None:
            stack.enter_context(pool)
        summary = _trace(corpus, db, options, progress, corpus_name, pool)
    summary.seconds = time.perf_counter() - started
    return summary


def _trace(corpus: str | Path | Corpus, db: str | Path, options: TraceOptions,
           progress: Callable[[int, int], None] | None, corpus_name: str | None,
           pool: WorkerPool | None) -> TraceSummary:
    loaded = corpus if isinstance(corpus, Corpus) else load_corpus(corpus)
    summary = TraceSummary(corpus=corpus_name or str(corpus), db=str(db),
                           jobs=len(loaded.jobs), corpus_errors=list(loaded.errors))
    con = connect(db)
    try:
        writer = TraceWriter(con, force=options.force, path=db)
        jobs = _deduplicated(loaded.jobs)
        summary.duplicates = summary.jobs - len(jobs)
        if not options.force:
            stored = writer.stored_keys(job.key for job in jobs)
            jobs = [job for job in jobs if job.key not in stored]
        summary.skipped = summary.jobs - summary.duplicates - len(jobs)
        if progress:
            progress(0, len(jobs))
        pending: list[TracedRun] = []
        last_commit = time.perf_counter()
        done = 0
        for finished in run_jobs(jobs, options, pool) if jobs else ():
            pending.extend(finished)
            for traced in finished:
                summary.add(traced)
            done += len(finished)
            if progress:
                progress(done, len(jobs))
            if (len(pending) >= options.commit_every
                    or time.perf_counter() - last_commit >= options.commit_seconds):
                writer.write(pending)
                pending, last_commit = [], time.perf_counter()
        writer.write(pending)
    finally:
        con.close()
    return summary


def _deduplicated(jobs: list[Job]) -> list[Job]:
    """A corpus may list the same job twice; it is one run."""
    seen: set[str] = set()
    unique = []
    for job in jobs:
        key = job.key
        if key not in seen:
            seen.add(key)
            unique.append(job)
    return unique
