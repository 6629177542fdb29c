"""A sharded trace from start to end: plan, run the shards not done, write the manifest.

``trace_shards`` is what ``steptrace trace CORPUS... --out DIR`` calls. The engines run
the same ``run_shard`` and so write the same files: ``local`` with the built-in worker
pool (one pool for every shard), ``ray`` with an actor per worker on a Ray cluster
(``_ray.py``); a batch scheduler runs ``steptrace trace-shard DIR --index I`` (``run_one``)
once per shard index. Re-running the same command resumes: shards with a done marker are
skipped.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from steptrace.errors import InputError
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import PackageLock
from steptrace.sharding._defaults import DEFAULT_SHARD_SIZE, ENGINES
from steptrace.sharding._plan import Plan, plan_directory, read_plan
from steptrace.sharding._shard import (PlanGuest, ShardResult, check_trust, describe_guest,
                                       finish_directory, guest_trust, plan_guest, read_done,
                                       run_shard)



@dataclass(frozen=True)
class ShardOptions:
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int | None = None  # default: one per CPU (of this machine, or the Ray cluster)
    limits: Limits = field(default_factory=Limits)
    isolation: str = "job"
    packages: PackageLock | None = None
    engine: str = "local"
    address: str | None = None  # a Ray cluster's address (engine ray)
    plan_only: bool = False  # write the plan and stop (a batch scheduler runs the shards)
    # the SHA-256 of a plan's guest this machine did not build, to run it all the same
    # (``_shard.guest_trust``: a directory planned elsewhere, resumed here)
    trust_guest: str | None = None


@dataclass
class ShardSummary:
    """What a sharded trace did, in the terms of ``trace``'s summary."""

    corpora: list[str]
    out: str
    engine: str
    jobs: int = 0
    duplicates: int = 0
    cross_shard_duplicates: int = 0
    shards: int = 0
    shards_done_before: int = 0
    shards_traced: int = 0
    runs: int = 0  # every run the directory holds once all shards are done
    traced: int = 0
    by_status: Counter = field(default_factory=Counter)
    with_expected: int = 0
    matched: int = 0
    line_steps: int = 0
    steps: int = 0
    seconds: float = 0.0
    complete: bool = False
    corpus_errors: list[str] = field(default_factory=list)
    guest: str = ""  # the guest that ran the shards traced now (``describe_guest``)

    @property
    def runs_per_second(self) -> float:
        return self.traced / self.seconds if self.seconds > 0 else 0.0

    def add(self, result: ShardResult) -> None:
        self.shards_traced += 1
        self.traced += result.runs
        self.by_status.update(result.by_status)
        self.with_expected += result.with_expected
        self.matched += result.matched
        self.line_steps += result.line_steps
        self.steps += result.steps

    def as_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            ("corpora", ", ".join(self.corpora)), ("out", self.out), ("engine", self.engine),
            *([("guest", self.guest)] if self.guest else []),
            ("jobs in corpora", self.jobs), ("duplicate jobs", self.duplicates),
            ("  of them in another shard", self.cross_shard_duplicates),
            ("shards", self.shards), ("shards done before (skipped)", self.shards_done_before),
            ("shards traced now", self.shards_traced), ("runs traced now", self.traced)]
        rows += [(f"  status {status}", count) for status, count in sorted(self.by_status.items())]
        if self.with_expected:
            rows.append(("outputs matching expected", f"{self.matched} / {self.with_expected}"))
        rows += [("line steps", self.line_steps), ("trace steps", self.steps),
                 ("seconds", f"{self.seconds:.2f}"), ("runs/s", f"{self.runs_per_second:.1f}"),
                 ("corpus records skipped as bad", len(self.corpus_errors)),
                 ("runs in directory", self.runs), ("complete", self.complete)]
        return rows

    def as_dict(self) -> dict:
        return {"corpora": self.corpora, "out": self.out, "engine": self.engine,
                "jobs": self.jobs, "duplicates": self.duplicates,
                "cross_shard_duplicates": self.cross_shard_duplicates, "shards": self.shards,
                "shards_done_before": self.shards_done_before,
                "shards_traced": self.shards_traced, "runs": self.runs, "traced": self.traced,
                "by_status": dict(sorted(self.by_status.items())),
                "with_expected": self.with_expected, "matched": self.matched,
                "line_steps": self.line_steps, "steps": self.steps,
                "seconds": round(self.seconds, 3),
                "runs_per_second": round(self.runs_per_second, 1), "complete": self.complete,
                "corpus_errors": self.corpus_errors, "guest": self.guest}


def _local(directory: Path, plan: Plan, pending: list[int], workers: int | None,
           guest: PlanGuest) -> Iterator[ShardResult]:
    from steptrace.sandbox._pool import WorkerPool
    size = workers or os.cpu_count() or 1
    with WorkerPool(size, plan.limits, plan.isolation, artifacts=guest.artifacts) as pool:
        for index in pending:
            yield run_shard(directory, index, pool, plan)


def trace_shards(corpora: list[str | Path], out: str | Path, options: ShardOptions,
                 progress: Callable[[int, int], None] | None = None,
                 shard_progress: Callable[[int, int], None] | None = None) -> ShardSummary:
    """Trace ``corpora`` into the shard directory ``out`` (see ``_plan.py`` for its
    layout): plan (or find the plan of an earlier, interrupted run), run every shard not
    done on ``options.engine``, and write the manifest once all are. ``progress(runs
    done, runs planned)`` after each shard."""
    if options.engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, not {options.engine!r}")
    if options.workers is not None and options.workers < 1:
        raise InputError(f"a sharded trace needs at least one worker, not {options.workers}")
    trust = check_trust(options.trust_guest)
    if options.engine == "ray" and not options.plan_only:
        from steptrace.sharding._ray import require_ray
        require_ray()  # before planning: a missing Ray is one line, with nothing written
    started = time.perf_counter()
    directory = Path(out)
    plan, _resumed = plan_directory(corpora, directory, options.shard_size, options.limits,
                                    options.isolation, options.packages)
    summary = ShardSummary(corpora=[str(c) for c in corpora], out=str(directory),
                           engine=options.engine, jobs=plan.jobs, duplicates=plan.duplicates,
                           cross_shard_duplicates=plan.cross_shard_duplicates,
                           shards=len(plan.shards), corpus_errors=list(plan.corpus_errors))
    done_runs = 0
    pending = []
    for spec in plan.shards:
        if read_done(directory, spec.index) is not None:
            summary.shards_done_before += 1
            done_runs += spec.jobs
        else:
            pending.append(spec.index)
    done_shards = summary.shards_done_before
    if shard_progress:
        shard_progress(done_shards, len(plan.shards))
    if progress:
        progress(done_runs, plan.runs)
    if pending and not options.plan_only:
        if options.engine == "ray":
            from steptrace.sharding._ray import run_shards
            # decided here, for every actor: they run the plan's digest and no other
            source = guest_trust(directory, plan, trust)
            results = run_shards(directory, plan, pending, options.workers, options.address,
                                 plan.guest.digest)
        else:
            guest = plan_guest(directory, plan, trust)
            source = guest.source
            results = _local(directory, plan, pending, options.workers, guest)
        summary.guest = describe_guest(plan, source)
        for result in results:
            summary.add(result)
            done_runs += result.runs
            done_shards += 1
            if shard_progress:
                shard_progress(done_shards, len(plan.shards))
            if progress:
                progress(done_runs, plan.runs)
    manifest = finish_directory(directory, plan)
    summary.complete = manifest is not None
    summary.runs = manifest["runs"] if manifest else done_runs
    summary.seconds = time.perf_counter() - started
    return summary


def run_one(directory: str | Path, index: int, workers: int | None = None,
            trust_guest: str | None = None) -> ShardResult:
    """Run shard ``index`` of the plan in ``directory`` here (``steptrace trace-shard``), with
    a pool of ``workers`` processes; write the manifest if it was the last one.
    ``trust_guest``: as ``ShardOptions.trust_guest``."""
    from steptrace.sandbox._pool import WorkerPool
    trust = check_trust(trust_guest)
    directory = Path(directory)
    plan = read_plan(directory)
    if not 0 <= index < len(plan.shards):
        raise InputError(f"shard index {index} is out of range: the plan has "
                         f"{len(plan.shards)} shards (0..{len(plan.shards) - 1})")
    done = read_done(directory, index)
    if done is None:
        guest = plan_guest(directory, plan, trust)
        size = workers or os.cpu_count() or 1
        with WorkerPool(size, plan.limits, plan.isolation, artifacts=guest.artifacts) as pool:
            done = run_shard(directory, index, pool, plan)
        done.guest = describe_guest(plan, guest.source)
    finish_directory(directory, plan)
    return done
