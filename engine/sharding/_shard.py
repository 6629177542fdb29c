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
import re
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
from steptrace.errors import InputError
from steptrace.sharding._check import DONE
from steptrace.sharding._plan import (MANIFEST, FORMAT, FORMAT_VERSION, MAX_DONE_BYTES,
                                      GuestMismatchError, Plan, ShardError, guest_path,
                                      own_path, program_id, read_guest, read_own, read_plan,
                                      read_shard_jobs, shard_name, write_atomic)
from steptrace.store._arrow import arrow_array
from steptrace.store._store import SCHEMA_VERSION, RunRows, TracedRun, run_matches
from steptrace.sandbox._backends import identity
from steptrace.tracing._trace import chunks, job_request
from steptrace.store._tables import (ATTRIBUTES, FILES, GLOBAL_STATES, GUESTS, OBJECTS,
                                     PROGRAMS, RUNS, SETTRACE_LINES, STATES, STEPS)

# the tables of a shard, in the order RunRows.tables() gives them, then guests
SHARD_TABLES = (RUNS, STEPS, STATES, PROGRAMS, OBJECTS, ATTRIBUTES, GLOBAL_STATES,
                SETTRACE_LINES, FILES, GUESTS)
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
    guest: str = ""  # the guest that ran it, as describe_guest says (not in done.json)


# what done.json holds: ShardResult's fields but skipped and guest, with their types
_DONE_FIELDS = {"index": int, "runs": int, "by_status": dict, "with_expected": int,
                "matched": int, "line_steps": int, "steps": int, "rows": dict,
                "seconds": (int, float)}


def shard_path(directory: Path, index: int) -> Path:
    return directory / "shards" / shard_name(index)


def read_done(directory: Path, index: int) -> ShardResult | None:
    """The finished shard's ``done.json``, None when the shard is not done; ShardError when
    it is not one ``run_shard`` wrote (read as data: a field of another type, or another
    shard's index, is refused rather than summed)."""
    path = shard_path(directory, index) / DONE
    try:
        data = json.loads(read_own(directory, "shards", shard_name(index), DONE,
                                   limit=MAX_DONE_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ShardError(f"cannot read {path}: {exc}") from exc
    if not (isinstance(data, dict) and set(data) == set(_DONE_FIELDS) and all(
            isinstance(data[name], kind) and not isinstance(data[name], bool)
            for name, kind in _DONE_FIELDS.items())
            and all(isinstance(k, str) and type(v) is int
                    for name in ("by_status", "rows") for k, v in data[name].items())):
        raise ShardError(f"{path} is not a shard's done marker (its fields: "
                         f"{', '.join(_DONE_FIELDS)}, numbers and counts by name)")
    if data["index"] != index:
        raise ShardError(f"{path} is the done marker of shard {data['index']}, not {index}")
    return ShardResult(**data, skipped=True)


# ---------------------------------------------------------------------- the guest
# Whose component the plan's guest is, as this machine runs it (PlanGuest.source).
THIS_MACHINE = "this machine's build"
MADE_HERE = "the directory's copy of a build this machine made, no longer in its cache"
TRUSTED = "the directory's copy, trusted with --trust-guest"


@dataclass(frozen=True)
class PlanGuest:
    """The plan's guest as this machine runs it: its artifacts, and whose component it is
    (``THIS_MACHINE``, ``MADE_HERE`` or ``TRUSTED``)."""

    artifacts: object  # steptrace.sandbox._build.GuestArtifacts
    source: str


def describe_guest(plan: Plan, source: str) -> str:
    """The guest a command ran, as its summary says it."""
    return f"{plan.guest.key} sha256 {plan.guest.digest[:16]}... ({source})"


def check_trust(trust: str | None) -> str | None:
    """``--trust-guest``'s value: a SHA-256 (64 hex digits, any case); InputError else."""
    if trust is None:
        return None
    text = trust.strip().lower()
    if re.fullmatch(r"[0-9a-f]{64}", text) is None:
        raise InputError(f"--trust-guest takes the SHA-256 of a guest component (64 hex "
                         f"digits), not {trust!r}")
    return text


def _local_digest(found) -> str | None:
    """The digest of the verified component ``found`` holds, None when there is none."""
    from steptrace.sandbox._build import is_verified, sidecar
    try:
        return sidecar(found.wasm).read_text().strip() if is_verified(found.wasm) else None
    except OSError:
        return None


def guest_trust(directory: Path, plan: Plan, trust: str | None = None) -> str:
    """Whose component the plan's guest is, if this machine may run it: this machine's
    build of the plan's key with the plan's digest (``THIS_MACHINE``), a build this machine
    made (its build log names the key and digest: ``MADE_HERE``), or the digest the user
    gave (``--trust-guest``: ``TRUSTED``). Anything else is a component someone else made,
    which would produce every output, status and trace of the shards it ran:
    GuestMismatchError in one line, saying how to trust it."""
    from steptrace.sandbox._build import artifacts, cache_dir, hold
    from steptrace.sandbox._cache import made_here
    guest = plan.guest
    if guest.native:
        _native_guest(plan)
        return THIS_MACHINE
    local = artifacts(key=guest.key)
    if local.wasm.exists():
        hold(local)  # before it is looked at: no other process evicts it meanwhile
    local_digest = _local_digest(local)
    if local_digest == guest.digest:
        return THIS_MACHINE
    if made_here(cache_dir(), guest.key, guest.digest):
        return MADE_HERE
    if trust == guest.digest:
        return TRUSTED
    if trust is not None:
        raise GuestMismatchError(f"--trust-guest {trust[:16]}... is not the plan's guest: its "
                                 f"component has sha256 {guest.digest}")
    here = (f"this machine's build of that key has sha256 {local_digest[:16]}..."
            if local_digest else "this machine has no build of that key")
    raise GuestMismatchError(
        f"the plan's guest {guest.key} (sha256 {guest.digest[:16]}...) is not a build made on "
        f"this machine ({here}); to run the component {guest_path(directory, guest)} anyway, "
        f"if you trust where it came from: --trust-guest {guest.digest}")


def _native_guest(plan: Plan):
    """This machine's native guest for the plan's lock, if it is the plan's (the same key:
    tracer sources, interpreter and lock); GuestMismatchError otherwise. A native guest is
    never taken from elsewhere: there is nothing to trust by digest."""
    from steptrace.native_sandbox._runtime import prepare as prepare_native
    native = prepare_native(lock=plan.guest.packages)
    if (native.key, hashlib.sha256(native.manifest).hexdigest()) != (plan.guest.key,
                                                                      plan.guest.digest):
        raise GuestMismatchError(
            f"the plan's native guest {plan.guest.key} is not this machine's ({native.key}, "
            f"Python {native.python.version} at {native.python.executable}): another tracer, "
            "interpreter or lock would make other runs; plan the directory on this machine")
    return native


def guest_on_hand(plan: Plan) -> bool:
    """Whether this machine's cache holds the plan's component (its build, or a copy from
    elsewhere in ``foreign/``): a Ray actor then need not fetch the driver's copy. A
    native guest is always prepared here (nothing is fetched)."""
    from steptrace.sandbox._build import artifacts, foreign_artifacts
    if plan.guest.native:
        return True
    return plan.guest.digest in (_local_digest(artifacts(key=plan.guest.key)),
                                 _local_digest(foreign_artifacts(plan.guest.digest)))


def plan_guest(directory: Path, plan: Plan, trust: str | None = None,
               payload: bytes | None = None) -> PlanGuest:
    """The plan's guest, ready to run here and compiled for the plan's limits, if this
    machine may run it (``guest_trust``). This machine's build runs from its place in the
    cache; any other component (``payload``, its bytes as a Ray driver ships them, or the
    directory's copy) is checked against the plan's digest and run from the cache's
    ``foreign/`` folder, named by that digest, never under a build key: a later ``trace``
    looks up builds by key and so never runs it. GuestMismatchError when this process's
    wasm stack would not be the plan's (it depends on the stack limit: ``ulimit -s``),
    when the guest is not trusted, or when the bytes do not have the plan's digest."""
    from steptrace.sandbox._build import (artifacts, foreign_artifacts, hold, install_foreign,
                                          is_verified)
    from steptrace.sandbox._runtime import (compiled_path, load_component, make_engine,
                                            wasm_stack_bytes)
    guest = plan.guest
    if guest.native:
        return PlanGuest(_native_guest(plan), THIS_MACHINE)
    stack = wasm_stack_bytes()
    if stack != guest.stack_bytes:
        raise GuestMismatchError(
            f"this worker's wasm stack would be {stack:,} bytes, the plan's is "
            f"{guest.stack_bytes:,} (its stack limit, ulimit -s, is lower than the planner's)")
    source = guest_trust(directory, plan, trust)
    if source == THIS_MACHINE:
        found = artifacts(key=guest.key)
    else:
        found = foreign_artifacts(guest.digest)
        installed = False
        if payload is None and found.wasm.exists():  # from an earlier run: not read again
            hold(found)
            installed = _local_digest(found) == guest.digest
        if not installed:
            if payload is None:
                payload = read_guest(directory, guest)
            try:
                found = install_foreign(payload, guest.digest)
            except ValueError:
                digest = hashlib.sha256(payload).hexdigest()
                raise GuestMismatchError(f"the guest component given has digest "
                                         f"{digest[:16]}..., the plan's is "
                                         f"{guest.digest[:16]}...") from None
    if not is_verified(compiled_path(found, plan.limits)):
        load_component(make_engine(plan.limits)[0], plan.limits, found)
    return PlanGuest(found, source)


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
    ``steptrace.sandbox.WorkerPool`` running the plan's guest: ``plan_guest``) unless
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
    own_path(directory, "tmp").mkdir(exist_ok=True)
    own_path(directory, "shards").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=directory / "tmp", prefix=f"{shard_name(index)}-"))
    try:
        result = _write_shard(directory, plan, index, pool, work, chunk_size, commit_bytes)
        result.seconds = round(time.perf_counter() - started, 3)
        write_atomic(work / DONE, json.dumps({k: v for k, v in asdict(result).items()
                                              if k in _DONE_FIELDS}, indent=1) + "\n")
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
                                        "first_used": arrow_array([now], pa.timestamp("us"))}))
        seen_programs: set[str] = set()
        held: dict[int, list[tuple[int, Job]]] = {}

        def requests() -> Iterator[list[dict]]:
            jobs = read_shard_jobs(directory, plan, index)
            for number, chunk in enumerate(chunks(jobs, chunk_size)):
                held[number] = chunk
                yield [job_request(job) for _, job in chunk]

        rows = RunRows(now)
        # the backend and interpreter version of the pool's guest (a Ray actor's pool too)
        made_by = identity(pool.artifacts)[1:]
        for number, outcomes in pool.run(requests()):
            for (run_id, job), outcome in zip(held.pop(number), outcomes):
                traced = TracedRun(job, outcome.take_result(), outcome.duration_us,
                                   plan.isolation, plan.guest.key, *made_by)
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
