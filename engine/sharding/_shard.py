"""Run one shard of a plan into its Parquet files, and finish a shard directory.

A shard is written into a private folder under ``DIR/tmp/`` and renamed to
``DIR/shards/NNNNN`` once every table's file and ``done.json`` are complete: a reader
never sees part of a shard, a worker killed mid-shard leaves only its private folder, and
when two workers finish the same shard (a retry racing a slow first attempt) the first
rename wins and the other's copy is dropped, so a run is never stored twice. Rows are
streamed to the files (``ParquetWriter``, a row group per ``commit_bytes`` of results),
so a shard's memory does not grow with its size beyond a set of its programs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from steptrace.corpus._formats import Job
from steptrace.sharding._plan import (MANIFEST, FORMAT, FORMAT_VERSION, GuestMismatchError, Plan,
                                      ShardError, guest_path, program_id, read_plan,
                                      read_shard_jobs, shard_name, write_atomic)
from steptrace.store._store import SCHEMA_VERSION, RunRows, TracedRun, run_matches
from steptrace.tracing._trace import chunks
from steptrace.store._tables import (ATTRIBUTES, GLOBAL_STATES, GUESTS, OBJECTS, PROGRAMS, RUNS,
                                     SETTRACE_LINES, STATES, STEPS)

# the tables of a shard, in the order RunRows.tables() gives them, then guests
SHARD_TABLES = (RUNS, STEPS, STATES, PROGRAMS, OBJECTS, ATTRIBUTES, GLOBAL_STATES,
                SETTRACE_LINES, GUESTS)
DONE = "done.json"
CHUNK_SIZE = 16
COMMIT_BYTES = 32 << 20


@dataclass
class ShardResult:
    """What ``done.json`` holds: the shard's runs by status and its rows per table."""

    index: int
    runs: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    with_expected: int = 0
    matched: int = 0
    line_steps: int = 0
    steps: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: bool = False  # done before this call (not written by it)


def shard_path(directory: Path, index: int) -> Path:
    return directory / "shards" / shard_name(index)


def read_done(directory: Path, index: int) -> ShardResult | None:
    """The finished shard's ``done.json``, None when the shard is not done."""
    path = shard_path(directory, index) / DONE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ShardError(f"cannot read {path}: {exc}") from exc
    try:
        return ShardResult(**{**data, "skipped": True})
    except TypeError as exc:
        raise ShardError(f"{path} is not a shard's done marker ({exc})") from exc


# ---------------------------------------------------------------------- the guest
def install_guest(directory: Path, plan: Plan, payload: bytes | None = None):
    """The plan's guest in this machine's cache (``steptrace.sandbox._build.artifacts``),
    compiled for the plan's limits: installed from ``payload`` (the component's bytes, as
    a Ray driver ships them) or the copy in ``DIR/guest/`` when the cache lacks it.
    GuestMismatchError when the cache holds another build under the plan's key, when the
    bytes do not have the plan's digest, or when this process's wasm stack would not be
    the plan's (it depends on the stack limit: ``ulimit -s``)."""
    from steptrace.sandbox._build import artifacts, is_verified, sidecar, write_verified
    from steptrace.sandbox._runtime import (compiled_path, load_component, make_engine,
                                            wasm_stack_bytes)
    guest = plan.guest
    stack = wasm_stack_bytes()
    if stack != guest.stack_bytes:
        raise GuestMismatchError(
            f"this worker's wasm stack would be {stack:,} bytes, the plan's is "
            f"{guest.stack_bytes:,} (its stack limit, ulimit -s, is lower than the planner's)")
    found = artifacts(key=guest.key)
    if is_verified(found.wasm):
        digest = sidecar(found.wasm).read_text().strip()
        if digest != guest.digest:
            raise GuestMismatchError(
                f"guest {guest.key} in this worker's cache ({found.wasm}) has digest "
                f"{digest[:16]}..., the plan's is {guest.digest[:16]}...: a separate build "
                "(remove it, or point STEPTRACE_CACHE_DIR elsewhere, to run the plan's)")
    else:
        if payload is None:
            try:
                payload = guest_path(directory, guest).read_bytes()
            except OSError as exc:
                raise ShardError(f"cannot read the plan's guest: {exc}") from exc
        digest = hashlib.sha256(payload).hexdigest()
        if digest != guest.digest:
            raise GuestMismatchError(f"the guest component given has digest {digest[:16]}..., "
                                     f"the plan's is {guest.digest[:16]}...")
        write_verified(found.wasm, payload)
    if not is_verified(compiled_path(found, plan.limits)):
        load_component(make_engine(plan.limits)[0], plan.limits, found)
    return found


def offer_guest(directory: Path, plan: Plan) -> None:
    """Put the plan's guest component in this machine's cache if the cache has no build
    under its key (checked against the plan's digest; not compiled): a command that runs
    a directory's programs again (``score`` of predicted inputs, ``analyse``) then runs
    them in the guest that traced them. Quiet when it cannot: that command builds or
    refuses as it would for a store."""
    from steptrace.sandbox._build import artifacts, is_verified, write_verified
    found = artifacts(key=plan.guest.key)
    if is_verified(found.wasm):
        return
    try:
        payload = guest_path(directory, plan.guest).read_bytes()
        if hashlib.sha256(payload).hexdigest() == plan.guest.digest:
            write_verified(found.wasm, payload)
    except OSError:
        pass


# ---------------------------------------------------------------------- one shard
class _ShardFiles:
    """The Parquet files of a shard being written: one writer per table, rows appended
    as they come, cast to the table's declared columns."""

    def __init__(self, folder: Path) -> None:
        self.writers = {t.name: pq.ParquetWriter(folder / f"{t.name}.parquet", t.arrow_schema())
                        for t in SHARD_TABLES}
        self.schemas = {t.name: t.arrow_schema() for t in SHARD_TABLES}
        self.rows: Counter = Counter()

    def write(self, name: str, table: pa.Table) -> None:
        if table.num_rows:
            self.writers[name].write_table(table.cast(self.schemas[name]))
            self.rows[name] += table.num_rows

    def write_rows(self, rows: RunRows) -> None:
        for t, table in zip(SHARD_TABLES, rows.tables()):
            self.write(t.name, table)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def run_shard(directory: str | Path, index: int, pool, plan: Plan | None = None,
              chunk_size: int = CHUNK_SIZE, commit_bytes: int = COMMIT_BYTES) -> ShardResult:
    """Run shard ``index`` of the plan in ``directory`` with ``pool`` (a
    ``steptrace.sandbox.WorkerPool`` running the plan's guest: ``install_guest``) unless
    it is done; return its counts."""
    directory = Path(directory)
    plan = plan or read_plan(directory)
    if not 0 <= index < len(plan.shards):
        raise ShardError(f"shard index {index} is out of range: the plan has "
                         f"{len(plan.shards)} shards (0..{len(plan.shards) - 1})")
    done = read_done(directory, index)
    if done is not None:
        return done
    started = time.perf_counter()
    (directory / "tmp").mkdir(exist_ok=True)
    (directory / "shards").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=directory / "tmp", prefix=f"{shard_name(index)}-"))
    try:
        result = _write_shard(directory, plan, index, pool, work, chunk_size, commit_bytes)
        result.seconds = round(time.perf_counter() - started, 3)
        write_atomic(work / DONE, json.dumps({k: v for k, v in asdict(result).items()
                                              if k != "skipped"}, indent=1) + "\n")
        try:
            work.rename(shard_path(directory, index))
        except OSError:
            # another worker finished this shard first: its copy stands, this one goes
            if read_done(directory, index) is None:
                raise
            return read_done(directory, index)  # type: ignore[return-value]
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_shard(directory: Path, plan: Plan, index: int, pool, work: Path, chunk_size: int,
                 commit_bytes: int) -> ShardResult:
    result = ShardResult(index)
    statuses: Counter = Counter()
    files = _ShardFiles(work)
    try:
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        files.write("guests", pa.table({"guest": [plan.guest.key], "lock": [plan.guest.lock],
                                        "first_used": pa.array([now], pa.timestamp("us"))}))
        seen_programs: set[str] = set()
        held: dict[int, list[tuple[int, Job]]] = {}

        def requests() -> Iterator[list[dict]]:
            jobs = read_shard_jobs(directory, plan, index)
            for number, chunk in enumerate(chunks(jobs, chunk_size)):
                held[number] = chunk
                yield [job.request() for _, job in chunk]

        rows = RunRows(now)
        for number, outcomes in pool.run(requests()):
            for (run_id, job), outcome in zip(held.pop(number), outcomes):
                traced = TracedRun(job, outcome.take_result(), outcome.duration_us,
                                   plan.isolation, plan.guest.key)
                program = job.program
                if program.key not in seen_programs:
                    seen_programs.add(program.key)
                    rows.add_program(program, program_id(program))
                rows.add(traced, run_id, program_id(program))
                r = traced.result
                statuses[r.get("status") or "crashed"] += 1
                if job.expected is not None:
                    result.with_expected += 1
                    result.matched += bool(run_matches(r, job))
                result.line_steps += r.get("line_steps") or 0
                result.steps += len((r.get("steps") or {}).get("event") or ())
                if rows.nbytes >= commit_bytes:
                    files.write_rows(rows)
                    rows = RunRows(now)
        if rows.count or rows.programs["program_id"]:
            files.write_rows(rows)
    finally:
        files.close()
    result.runs = sum(statuses.values())
    result.by_status = dict(sorted(statuses.items()))
    result.rows = {t.name: files.rows[t.name] for t in SHARD_TABLES}
    if result.runs != plan.shards[index].jobs:
        raise ShardError(f"shard {index}: {result.runs} runs came back for "
                         f"{plan.shards[index].jobs} jobs")
    return result


# ---------------------------------------------------------------------- the directory
def shard_progress(directory: Path, plan: Plan) -> list[ShardResult | None]:
    """Each shard's done marker (None: not done)."""
    return [read_done(directory, spec.index) for spec in plan.shards]


def finish_directory(directory: str | Path, plan: Plan | None = None) -> dict | None:
    """Once every shard is done: write the manifest (its tables' row counts, the runs by
    status, the plan's duplicates) and clear ``tmp/``; return it. None while shards are
    missing. Idempotent: any process that sees the last shard done may call it."""
    directory = Path(directory)
    plan = plan or read_plan(directory)
    done = shard_progress(directory, plan)
    if any(d is None for d in done):
        return None
    rows: Counter = Counter()
    statuses: Counter = Counter()
    for d in done:
        rows.update(d.rows)  # type: ignore[union-attr]
        statuses.update(d.by_status)  # type: ignore[union-attr]
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION,
                "shards": len(plan.shards), "runs": sum(statuses.values()),
                "by_status": dict(sorted(statuses.items())), "jobs": plan.jobs,
                "duplicates": plan.duplicates,
                "cross_shard_duplicates": plan.cross_shard_duplicates,
                "corpus_errors": len(plan.corpus_errors),
                "tables": [{"name": t.name, "rows": rows[t.name]} for t in SHARD_TABLES]}
    write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(directory / "tmp", ignore_errors=True)
    return manifest
