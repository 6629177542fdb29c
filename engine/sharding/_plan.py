"""The plan of a sharded trace: which jobs each shard runs, with which guest and limits.

A sharded trace (``steptrace trace CORPUS... --out DIR``) first writes its plan, then
runs shards in any order and on any machine that sees ``DIR``::

    DIR/plan.json                 the plan (written first, never changed)
    DIR/inputs/00000.jsonl        shard 0's jobs, one JSON object a line, in corpus order
    DIR/guest/guest-KEY.wasm      the guest component every worker must run (by digest)
    DIR/shards/00000/             a finished shard (renamed into place when complete):
        runs.parquet ... guests.parquet   one file per table
        done.json                 its counts
    DIR/tmp/                      shards being written (a dead worker's leftovers)
    DIR/steptrace_shards.json     the manifest, written once every shard is done

Shards are fixed ranges of the corpus's jobs in corpus order (a record with several
inputs is several jobs), after leaving out jobs listed earlier (the same key: a
duplicate in the same shard or another one is counted and not traced again, as ``trace``
does). Shard ``i`` holds positions ``i*S .. i*S+S-1`` of that sequence; a run's id is its
position + 1, so any run is addressable from ``(shard, position)`` and its id does not
depend on which worker ran it or when. A program's id is derived from its key (the first
60 bits of it): the same program gets the same id in every shard without coordination.

The plan names the guest by its build key and the SHA-256 of its component, and the wasm
stack size: separately built guests can behave differently (componentize-py draws each
build's string-hash secret), so every worker runs the one component the plan carries and
refuses to run a shard with another (``GuestMismatchError``). Which component a worker may
run, and from where, is _shard.py's ``plan_guest``.

A shard directory may come from anyone: everything in it is read as data. Its files are
read only where the layout puts them: nothing below ``DIR`` may be a symbolic link (one
could point at any file of this machine: a private store, a device), and each file is
read only if it is a regular file (``read_own``: a FIFO would block, ``/dev/zero`` never
end), of a bounded size where it is read whole.
"""

from __future__ import annotations

import hashlib
import json
from array import array
import os
import re
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

from steptrace.corpus._formats import (CorpusError, Job, Program, iter_corpus,
                                       refuse_not_a_corpus)
from steptrace.corpus._text import as_created
from steptrace.errors import InputError, SandboxError, StoreError
from steptrace.sandbox._limits import ISOLATIONS, Limits
from steptrace.sandbox._packages import PackageLock, parse_lock

FORMAT = "steptrace-shards"
FORMAT_VERSION = 1
PLAN = "plan.json"
MANIFEST = "steptrace_shards.json"
MAX_SHARDS = 10_000_000
INDEX_DIGITS = 5  # shard folder and file names: 00042 (wider past 99,999 shards)


class ShardError(StoreError):
    """A shard directory that cannot be planned, read or resumed; the message says why."""


class GuestMismatchError(SandboxError):
    """A worker whose guest is not the one the plan names (another build, or another
    wasm stack size)."""


def shard_name(index: int) -> str:
    return f"{index:0{INDEX_DIGITS}d}"


def program_id(program: Program) -> int:
    """A program's id in a shard directory: the first 60 bits of its key (SHA-256), the
    same in every shard. ``steptrace import`` renumbers programs as a store does."""
    return int(program.key[:15], 16)


# ---------------------------------------------------------------------- jobs as JSON
def job_record(job: Job, run_id: int) -> dict:
    """A job as a line of a shard's inputs: everything ``job_from_record`` needs to make
    the same job (and so the same key) again."""
    program = job.program
    return {"run_id": run_id, "source": program.source, "sample_id": program.sample_id,
            "code": program.code, "entry": program.entry, "shape": program.shape,
            "test": program.test, "input": job.input, "expected": job.expected,
            "input_index": job.input_index,
            "calls": None if job.calls is None else [list(call) for call in job.calls],
            "stdin": job.stdin,
            **({} if program.meta is None else {"meta": program.meta})}  # only when given


_TEXT = ("source", "sample_id", "code", "entry", "shape", "input")
_OPTIONAL_TEXT = ("test", "expected", "stdin", "meta")


def job_from_record(record: object, where: str) -> tuple[int, Job]:
    """``(run_id, job)`` of a shard's input line; ShardError naming ``where`` when it is
    not one ``job_record`` wrote."""
    def bad(what: str) -> ShardError:
        return ShardError(f"{where}: not a shard input line ({what})")

    if not isinstance(record, dict):
        raise bad("not a JSON object")
    for name in _TEXT:
        if type(record.get(name)) is not str:
            raise bad(f"{name!r} must be a string")
    for name in _OPTIONAL_TEXT:
        if record.get(name) is not None and type(record[name]) is not str:
            raise bad(f"{name!r} must be a string or null")
    for name in ("run_id", "input_index"):
        if type(record.get(name)) is not int or record[name] < 0:
            raise bad(f"{name!r} must be an integer >= 0")
    calls = record.get("calls")
    if calls is not None:
        if not (isinstance(calls, list) and all(
                isinstance(c, list) and len(c) == 2 and all(type(p) is str for p in c)
                for c in calls)):
            raise bad("'calls' must be a list of [method, input] pairs")
        calls = tuple((method, text) for method, text in calls)
    program = Program(source=record["source"], sample_id=record["sample_id"],
                      code=record["code"], entry=record["entry"], shape=record["shape"],
                      test=record["test"], meta=record.get("meta"))
    return record["run_id"], Job(program, record["input"], record["expected"],
                                 record["input_index"], calls, record["stdin"])


# ---------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class ShardSpec:
    """One shard: its jobs are runs ``first_run_id .. first_run_id + jobs - 1``."""

    index: int
    jobs: int
    first_run_id: int


@dataclass(frozen=True)
class GuestSpec:
    """The guest every worker must run: its build key, the SHA-256 of its component, the
    wasm stack size and the package lock it bundles (None: the standard guest)."""

    key: str
    digest: str
    stack_bytes: int
    lock: str | None = None

    @property
    def packages(self) -> PackageLock | None:
        return None if self.lock is None else parse_lock(self.lock, "the plan's guest lock")

    @property
    def native(self) -> bool:
        """Whether the native backend runs it (its lock is a native lock)."""
        return self.lock is not None and self.packages.native


@dataclass(frozen=True)
class Plan:
    """What ``plan.json`` holds. ``jobs_digest`` is the SHA-256 of the planned jobs' keys
    in order: a re-run over the same corpora and options finds the same plan and resumes."""

    corpora: tuple[str, ...]
    shard_size: int
    shards: tuple[ShardSpec, ...]
    limits: Limits
    isolation: str
    guest: GuestSpec
    jobs: int
    duplicates: int
    cross_shard_duplicates: int
    corpus_errors: tuple[str, ...]
    jobs_digest: str
    format: str = FORMAT
    version: int = FORMAT_VERSION

    @property
    def runs(self) -> int:
        """The runs the shards make (jobs less duplicates)."""
        return sum(shard.jobs for shard in self.shards)

    def same_work(self, other: "Plan") -> bool:
        """Whether ``other`` plans the same runs with the same options (a resume)."""
        return (self.jobs_digest, self.shard_size, self.limits, self.isolation,
                self.guest.lock) == (other.jobs_digest, other.shard_size, other.limits,
                                     other.isolation, other.guest.lock)

    def as_json(self) -> dict:
        data = asdict(self)
        data["corpora"] = list(self.corpora)
        data["corpus_errors"] = list(self.corpus_errors)
        return data


def plan_from_json(data: object, where: Path) -> Plan:
    """A ``Plan`` from ``plan.json``'s content; ShardError when it is not one."""
    try:
        if data.get("format") != FORMAT:  # type: ignore[union-attr]
            raise ShardError(f"{where} is not a steptrace shard plan")
        if data.get("version") != FORMAT_VERSION:  # type: ignore[union-attr]
            raise ShardError(f"{where} has shard format version {data.get('version')}; this "  # type: ignore[union-attr]
                             f"steptrace reads version {FORMAT_VERSION}")
        shards = tuple(ShardSpec(**s) for s in data["shards"])  # type: ignore[index]
        plan = Plan(corpora=tuple(data["corpora"]), shard_size=data["shard_size"],  # type: ignore[index]
                    shards=shards, limits=Limits(**data["limits"]),  # type: ignore[index]
                    isolation=data["isolation"], guest=GuestSpec(**data["guest"]),  # type: ignore[index]
                    jobs=data["jobs"], duplicates=data["duplicates"],  # type: ignore[index]
                    cross_shard_duplicates=data["cross_shard_duplicates"],  # type: ignore[index]
                    corpus_errors=tuple(data["corpus_errors"]),  # type: ignore[index]
                    jobs_digest=data["jobs_digest"])  # type: ignore[index]
    except ShardError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ShardError(f"{where} is not a readable shard plan ({exc})") from exc
    if plan.isolation not in ISOLATIONS:
        raise ShardError(f"{where}: unknown isolation {plan.isolation!r}")
    if not all(type(n) is int for n in (plan.shard_size, *(
            v for s in plan.shards for v in (s.index, s.jobs, s.first_run_id)))):
        raise ShardError(f"{where}: the shard size and the shards' ranges must be integers")
    guest = plan.guest
    if not (type(guest.key) is str and re.fullmatch(r"[0-9a-f]{24}", guest.key) is not None
            and type(guest.digest) is str
            and re.fullmatch(r"[0-9a-f]{64}", guest.digest) is not None
            and type(guest.stack_bytes) is int and guest.stack_bytes > 0
            and (guest.lock is None or type(guest.lock) is str)):
        # (the key names files in DIR/guest and in the cache: never a path)
        raise ShardError(f"{where}: the guest must be a build key (24 hex digits), a SHA-256 "
                         "digest (64 hex digits), a wasm stack size and a package lock or null")
    for number, shard in enumerate(plan.shards):
        if (shard.index != number or shard.jobs < 1 or shard.jobs > plan.shard_size
                or shard.first_run_id != number * plan.shard_size + 1):
            raise ShardError(f"{where}: shard {number} is not where the plan's ranges put it")
    return plan


# the most a file read whole may hold: plan.json (its shards' ranges and the corpus's bad
# records: ~60 bytes a shard at the most shards), a shard's done.json, the guest component
MAX_PLAN_BYTES = 1 << 30
MAX_DONE_BYTES = 1 << 20
MAX_GUEST_BYTES = 1 << 30


def own_path(directory: Path, *parts: str) -> Path:
    """``DIR/parts...``; ShardError when any of it below ``DIR`` is a symbolic link (``DIR``
    itself may be one: the user named it). A missing part is not checked here."""
    path = directory
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise ShardError(f"{path} is a symbolic link: a shard directory's files must be "
                             "its own (a link may point at any file on this machine)")
    return path


def read_own(directory: Path, *parts: str, limit: int) -> bytes:
    """The bytes of the file ``DIR/parts...`` (``own_path``), if it is a regular file of at
    most ``limit`` bytes (``corpus._text.read_regular``); ShardError in one line otherwise,
    FileNotFoundError when it is missing."""
    from steptrace.corpus._text import read_regular
    path = own_path(directory, *parts)
    try:
        return read_regular(path, limit, follow=False)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ShardError(f"cannot read {path}: {exc.strerror or exc}") from exc


def check_layout(directory: Path) -> None:
    """Refuse a shard directory whose own entries (``plan.json``, ``inputs``, ``guest``,
    ``shards``, ``tmp``, the manifest, ``store.duckdb``) are symbolic links: what steptrace
    reads and writes there would be elsewhere."""
    for name in sorted(_OURS | {COMPANION}):
        own_path(directory, name)


def read_plan(directory: str | Path) -> Plan:
    """The plan of a shard directory; ShardError when there is none or it is broken (or
    its layout is: ``check_layout``)."""
    directory = Path(directory)
    path = directory / PLAN
    if not os.path.lexists(path):
        raise ShardError(f"{directory} is not a shard directory (no {PLAN}; "
                         "make one with steptrace trace CORPUS --out DIR)")
    check_layout(directory)
    try:
        data = json.loads(read_own(directory, PLAN, limit=MAX_PLAN_BYTES).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise ShardError(f"cannot read {path}: {exc}") from exc
    return plan_from_json(data, path)


GLOB_CHARACTERS = frozenset("*?[]{}")


def check_path(directory: Path) -> None:
    """Refuse a directory whose absolute path has a glob character: readers find a
    directory's shards with a glob (``DIR/shards/*/runs.parquet``), which such a path
    would change."""
    found = sorted(GLOB_CHARACTERS & set(str(directory.resolve())))
    if found:
        raise ShardError(f"a shard directory's path must not contain {' '.join(found)} "
                         f"(its files are found by a glob): {directory}")


def is_shard_directory(path: str | Path) -> bool:
    """A directory with a ``plan.json`` (whatever that is: ``read_plan`` says what is
    wrong with it)."""
    return Path(path).is_dir() and os.path.lexists(Path(path) / PLAN)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        as_created(fd)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def input_path(directory: Path, index: int) -> Path:
    return directory / "inputs" / f"{shard_name(index)}.jsonl"


def guest_path(directory: Path, guest: GuestSpec) -> Path:
    """The plan's copy of its guest: the component, or a native guest's manifest."""
    suffix = "native" if guest.native else "wasm"
    return directory / "guest" / f"guest-{guest.key}.{suffix}"


def read_guest(directory: Path, guest: GuestSpec) -> bytes:
    """The bytes of the plan's copy of its guest (``read_own``); ShardError when it
    cannot be read."""
    try:
        return read_own(directory, "guest", guest_path(directory, guest).name,
                        limit=MAX_GUEST_BYTES)
    except OSError as exc:
        raise ShardError(f"cannot read the plan's guest: {exc}") from exc


def read_shard_jobs(directory: Path, plan: Plan, index: int) -> Iterator[tuple[int, Job]]:
    """``(run_id, job)`` of shard ``index``'s input file, checked against the plan."""
    spec = plan.shards[index]
    path = input_path(directory, index)
    count = 0
    try:
        with open_own(directory, "inputs", path.name) as handle:
            for lineno, line in enumerate(handle, start=1):
                where = f"{path}:{lineno}"
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise ShardError(f"{where}: not JSON ({exc})") from exc
                run_id, job = job_from_record(record, where)
                if run_id != spec.first_run_id + count:
                    raise ShardError(f"{where}: run id {run_id} is not the plan's "
                                     f"{spec.first_run_id + count}")
                count += 1
                yield run_id, job
    except OSError as exc:
        raise ShardError(f"cannot read shard input {path}: {exc.strerror or exc}") from exc
    if count != spec.jobs:
        raise ShardError(f"{path} holds {count} jobs; the plan says {spec.jobs}")


def open_own(directory: Path, *parts: str):
    """The file ``DIR/parts...`` opened for reading as UTF-8 text, line by line, if it is a
    regular file and no link (``own_path``; opened without blocking, checked on the open
    descriptor): a shard's inputs, read as they are used. ShardError otherwise."""
    from steptrace.corpus._text import NO_WAIT, file_kind
    path = own_path(directory, *parts)
    fd = os.open(path, os.O_RDONLY | NO_WAIT | getattr(os, "O_NOFOLLOW", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ShardError(f"cannot read {path}: {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return open(fd, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


class _Planner:
    """Plans the job sequence in two passes over a spool, so that the planner's memory is
    a few numbers a job (about 40 bytes at the peak), not a set of keys (~125 bytes a
    job: 12 GB for 100,000,000 jobs).

    First pass (``add``): each job's key and input line go to a spool file, and the
    first 128 bits of its key to two arrays. ``finish``: one stable sort of the keys finds
    each key's first job (numpy), so which jobs are duplicates, and of them which would
    have fallen in another shard than their first copy. Second pass: the spool's lines
    of the kept jobs go to their shards' input files, each with its run id."""

    def __init__(self, directory: Path, shard_size: int, write_inputs: bool = True) -> None:
        """``write_inputs=False``: only the counts and the digest (a resume's check of
        the plan already there), no input lines spooled or written."""
        self.directory = directory
        self.write_inputs = write_inputs
        self.shard_size = shard_size
        self.shards: list[ShardSpec] = []
        self.jobs = 0
        self.duplicates = 0
        self.cross_shard_duplicates = 0
        self.errors: list[str] = []
        self.digest = hashlib.sha256()
        self.high, self.low = array("Q"), array("Q")  # the key's first 128 bits, a job each
        self.spool_path = directory / "jobs.spool"
        self.spool = open(self.spool_path, "w", encoding="utf-8")

    def add(self, item: Job | str) -> None:
        if isinstance(item, str):
            self.errors.append(item)
            return
        self.jobs += 1
        key = item.key
        self.high.append(int(key[:16], 16))
        self.low.append(int(key[16:32], 16))
        # the input line without its run id (given in the second pass: '{"run_id": N, ...')
        line = (_input_line(job_record(item, None))[len('{"run_id": null, '):]
                if self.write_inputs else "\n")
        self.spool.write(key + "\t" + line)

    def finish(self) -> None:
        """Find the duplicates and write the shards' input files (see the class doc)."""
        import numpy as np
        self.close()
        count = self.jobs
        if not count:
            return
        size = self.shard_size
        high = np.frombuffer(self.high, dtype=np.uint64)
        low = np.frombuffer(self.low, dtype=np.uint64)
        order = np.lexsort((low, high))  # stable: equal keys keep their corpus order
        sorted_high, sorted_low = high[order], low[order]
        starts = np.ones(count, dtype=bool)  # a sorted position that begins a key's group
        starts[1:] = (sorted_high[1:] != sorted_high[:-1]) | (sorted_low[1:] != sorted_low[:-1])
        del sorted_high, sorted_low, high, low
        self.high = self.low = array("Q")
        keep = np.zeros(count, dtype=bool)
        keep[order[starts]] = True  # each key's first job
        kept_before = np.cumsum(keep) - keep  # jobs kept before each one: its place
        if count > int(keep.sum()):
            # for each duplicate (sorted position not a group start) its group's first job
            group_start = np.maximum.accumulate(np.where(starts, np.arange(count), 0))
            duplicates = order[~starts]
            firsts = order[group_start[~starts]]
            self.duplicates = len(duplicates)
            # the shard a duplicate would have fallen in is the one being filled: its place // size
            self.cross_shard_duplicates = int(np.count_nonzero(
                kept_before[duplicates] // size != kept_before[firsts] // size))
            del group_start, duplicates, firsts
        del order, starts, kept_before
        kept = iter(keep.tolist()) if count <= 1_000_000 else (bool(k) for k in keep)
        handle = None
        place = 0
        try:
            with open(self.spool_path, encoding="utf-8") as spool:
                for line in spool:
                    if not next(kept):
                        continue
                    key, _, rest = line.partition("\t")
                    if place % size == 0:
                        index = place // size
                        if index >= MAX_SHARDS:
                            raise InputError(f"more than {MAX_SHARDS:,} shards: use a larger "
                                             "--shard-size")
                        if handle is not None:
                            handle.close()
                        if self.write_inputs:
                            handle = open(input_path(self.directory, index), "w",
                                          encoding="utf-8")
                        self.shards.append(ShardSpec(index, 0, index * size + 1))
                    place += 1
                    self.digest.update(key.encode() + b"\n")
                    if handle is not None:
                        handle.write(f'{{"run_id": {place}, {rest}')
                    spec = self.shards[-1]
                    self.shards[-1] = ShardSpec(spec.index, spec.jobs + 1, spec.first_run_id)
        finally:
            if handle is not None:
                handle.close()
            self.spool_path.unlink(missing_ok=True)

    def close(self) -> None:
        if not self.spool.closed:
            self.spool.close()


def _input_line(record: dict) -> str:
    """A shard input line: UTF-8 JSON, with ``\\u`` escapes when the text has a lone
    surrogate (a corpus may spell one, as JSON ``"\\ud800"``: UTF-8 cannot hold it)."""
    line = json.dumps(record, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(record)
    return line + "\n"


def plan_directory(corpora: Iterable[str | Path], directory: str | Path, shard_size: int,
                   limits: Limits, isolation: str, packages: PackageLock | None = None
                   ) -> tuple[Plan, bool]:
    """The plan of a sharded trace of ``corpora`` into ``directory`` and whether it was
    there already (a resume). A new plan is written whole: the shards' inputs and the
    guest into a temporary folder renamed into place, ``plan.json`` last. A directory
    that holds a plan of other work (other jobs, shard size, limits, isolation or
    packages) is refused rather than mixed."""
    from steptrace.sandbox._build import ensure_component, file_digest
    from steptrace.sandbox._runtime import wasm_stack_bytes
    directory = Path(directory)
    corpora = [str(c) for c in corpora]
    if not corpora:
        raise InputError("give at least one corpus")
    if shard_size < 1:
        raise InputError(f"shard size must be at least 1, not {shard_size}")
    if isolation not in ISOLATIONS:
        raise InputError(f"isolation must be one of {', '.join(ISOLATIONS)}, not {isolation!r}")
    if directory.exists() and not directory.is_dir():
        raise ShardError(f"{directory} is not a directory")
    check_path(directory)
    old = read_plan(directory) if (directory / PLAN).exists() else None
    if old is None and directory.is_dir() and any(p.name not in _OURS and not p.name.startswith(".plan-")
                                              for p in directory.iterdir()):
        raise ShardError(f"{directory} is not empty and holds no shard plan: give a new or empty "
                         "directory")
    for corpus in corpora:  # a missing corpus is refused before anything is made
        if not Path(corpus).exists():
            raise CorpusError(f"corpus not found: {corpus}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ShardError(f"cannot create {directory}: {exc.strerror or exc}") from exc
    staging = Path(tempfile.mkdtemp(dir=directory, prefix=".plan-"))
    try:
        (staging / "inputs").mkdir()
        # a resume only checks that the corpora still hold the plan's jobs: no inputs written
        planner = _Planner(staging, shard_size, write_inputs=old is None)
        try:
            for corpus in corpora:
                _add_corpus(planner, corpus)
            planner.finish()
        finally:
            planner.close()
        if not planner.shards:
            raise InputError("the corpora hold no jobs to trace"
                             + (f" ({len(planner.errors)} bad records)" if planner.errors else ""))
        lock = None if packages is None else packages.text
        if old is not None:
            probe = GuestSpec(old.guest.key, old.guest.digest, old.guest.stack_bytes, lock)
            new = _plan(corpora, shard_size, limits, isolation, probe, planner)
            if not old.same_work(new):
                raise ShardError(f"{directory} holds the plan of other work (other jobs, shard "
                                 "size, limits, isolation or packages): give a new directory")
            return old, True
        (staging / "guest").mkdir()
        if packages is not None and packages.native:  # the native backend: its manifest
            from steptrace.native_sandbox._runtime import prepare as prepare_native
            native = prepare_native(lock=packages)
            guest = GuestSpec(native.key, hashlib.sha256(native.manifest).hexdigest(),
                              wasm_stack_bytes(), lock)
            guest_path(staging, guest).write_bytes(native.manifest)
        else:
            found = ensure_component(packages=packages)
            guest = GuestSpec(found.key, file_digest(found.wasm), wasm_stack_bytes(), lock)
            shutil.copyfile(found.wasm, guest_path(staging, guest))
        plan = _plan(corpora, shard_size, limits, isolation, guest, planner)
        for name in ("inputs", "guest"):
            target = directory / name
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging / name, target)
        write_atomic(directory / PLAN, json.dumps(plan.as_json(), indent=1) + "\n")
        return plan, False
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _add_corpus(planner: _Planner, corpus: str) -> None:
    """The corpus's jobs and bad records into the plan; a file that is not a corpus (a
    tasks file given by mistake) stops the plan, as it stops ``trace``."""
    jobs, errors = planner.jobs, len(planner.errors)
    for item in iter_corpus(corpus):
        planner.add(item)
        if isinstance(item, str):
            refuse_not_a_corpus(corpus, corpus, planner.jobs - jobs, planner.errors[errors:],
                                False, "nothing was planned")
    refuse_not_a_corpus(corpus, corpus, planner.jobs - jobs, planner.errors[errors:], True,
                        "nothing was planned")


# what a shard directory holds (a directory with only these is one being planned)
_OURS = frozenset({PLAN, MANIFEST, "inputs", "guest", "shards", "tmp"})
COMPANION = "store.duckdb"  # what later commands make, beside the shards (_store.py)


def _plan(corpora: list[str], shard_size: int, limits: Limits, isolation: str,
          guest: GuestSpec, planner: _Planner) -> Plan:
    return Plan(corpora=tuple(corpora), shard_size=shard_size, shards=tuple(planner.shards),
                limits=limits, isolation=isolation, guest=guest, jobs=planner.jobs,
                duplicates=planner.duplicates,
                cross_shard_duplicates=planner.cross_shard_duplicates,
                corpus_errors=tuple(planner.errors), jobs_digest=planner.digest.hexdigest())
