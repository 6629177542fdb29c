"""The trace store: a DuckDB file whose schema is a public contract (see README, "Schema").

Runs are written in batches through Arrow tables (never row-by-row INSERT), one
transaction per batch: a run's row, steps and states are committed together or not at
all, so a store never holds part of a run. ``run_key`` identifies a job (program, input
index, input and expected output): tracing the same corpus again skips stored keys, and
``force`` replaces them.

The results reaching the writer have been checked (wasm_sandbox/_result_schema.py). Their
names (a step's function and event, a state's variable and type) repeat on many rows:
the Arrow columns are dictionary-encoded, each distinct name held once per batch, and
DuckDB stores them as the schema's VARCHAR columns.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import math
import os
import re
import stat
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import duckdb
import pyarrow as pa

from steptrace.corpus._formats import Job, Program, stdout_matches
from steptrace.errors import StoreError
from steptrace.predictions._experiments import upgrade as upgrade_experiment_tables
from steptrace.corpus._text import file_kind
from steptrace.store._arrow import arrow_array
from steptrace.store._defaults import DEFAULT_DB  # noqa: F401  (re-exported)
from steptrace.store._ids import CorpusIds
from steptrace.sandbox._packages import PackageLock, parse_lock
from steptrace.store._tables import (ANALYSES, ATTRIBUTES, BRANCHES, CHECKS, CONNECT_TABLES,
                                     FILES, GLOBAL_STATES, GUESTS, OBJECTS, PROGRAMS,
                                     RUN_FEATURES, RUNS, SCORES, SETTRACE_LINES, STATES,
                                     STEPS, TASKS, Table)
from steptrace.store._transaction import transaction

SCHEMA_VERSION = "7"
# 7 added settrace_lines and runs.settrace_line_steps (the settrace view: docs/guides/
# runs.md), files (what a run left in its directories) and programs.environment (a
# record's files, argv and env, steptrace.corpus._environment), runs.backend and
# runs.python (which sandbox, WASI or native, and which CPython version ran a run; runs
# stored before are `wasi`, their version NULL), 6 added checks (the verdicts of sandboxed
# checks, engine/scoring/_checks.py: score makes the table when it is missing),
# scores.type_correct and scores.message_correct (an `error` verdict's
# parts) and programs.meta (a corpus record's metadata, steptrace.corpus._meta),
# 5 added runs.guest and guests (which guest build traced a run, with its packages), 4
# added program shapes (programs.shape, programs.test, runs.chain, runs.stdin) and objects
# (objects, attributes, global_states, states.object_id), 3 keyed predictions and scores
# by experiment (engine/predictions/_experiments.py), 2 added branches and analyses; older
# versions are read as they are and upgraded on write.
READABLE_VERSIONS = ("1", "2", "3", "4", "5", "6", "7")
LOCK_WAIT_ENV = "STEPTRACE_LOCK_WAIT"
DEFAULT_LOCK_WAIT_S = 10.0

# Every table is declared once, in engine/store/_tables.py; these are derived from them.
SCHEMA = "".join(t.ddl() for t in CONNECT_TABLES)
RUN_COLUMNS = RUNS.column_names
STEP_COLUMNS = STEPS.column_names
STATE_COLUMNS = STATES.column_names
RUN_TYPES = RUNS.arrow_types()
PROGRAM_TYPES = PROGRAMS.arrow_types()
# Tables keyed by run_id that describe a run: replaced with it (trace --force).
RUN_DETAIL_TABLES = tuple(t.name for t in (STEPS, STATES, OBJECTS, ATTRIBUTES, GLOBAL_STATES,
                                            SETTRACE_LINES, FILES, ANALYSES, BRANCHES))
# Made from a run by later commands, when they have been run: stale once it is replaced.
DERIVED_RUN_TABLES = (TASKS.name, RUN_FEATURES.name)


@dataclass
class TracedRun:
    """One finished job as the store receives it: the job and the guest/host result."""

    job: Job
    result: dict
    duration_us: int
    isolation: str
    guest: str | None = None  # the guest build's key (steptrace.sandbox._build.cache_key)
    backend: str = "wasi"     # the sandbox that ran it: "wasi" or "native"
    python: str | None = None  # the version of the CPython that ran it


# What a file must hold to be a store: the tables of schema version 1, exactly (programs,
# runs and states with or without the columns later versions added at their end); those
# version 2 added are checked when present (connect creates them in an older store).
EXPECTED_COLUMNS = {t.name: t.column_names for t in (PROGRAMS, RUNS, STEPS, STATES)}
ADDED_IN_2 = {t.name: t.column_names for t in (ANALYSES, BRANCHES)}
# Columns later versions added at the end of their tables (``ALTER TABLE ... ADD
# COLUMN``): (version, table, column, value of the rows stored before); the tables
# versions 4 and 5 added (checked when present).
ADDED_COLUMNS = ((4, PROGRAMS, "shape", "'call'"), (4, PROGRAMS, "test", None),
                 (4, RUNS, "chain", None), (4, RUNS, "stdin", None),
                 (4, STATES, "object_id", None), (5, RUNS, "guest", None),
                 (6, SCORES, "type_correct", None), (6, SCORES, "message_correct", None),
                 (6, PROGRAMS, "meta", None), (7, RUNS, "settrace_line_steps", None),
                 (7, PROGRAMS, "environment", None), (7, RUNS, "backend", "'wasi'"),
                 (7, RUNS, "python", None))


def _columns_before(table: Table, version: int) -> tuple[str, ...]:
    """``table``'s columns in a store made before ``version``."""
    later = {column for added, t, column, _ in ADDED_COLUMNS if t is table and added >= version}
    return tuple(c for c in table.column_names if c not in later)


# every column list programs, runs, steps and states have had: now, before 7, 6, 5 and 4
ACCEPTED_COLUMNS = {table.name: {table.column_names, *(_columns_before(table, version)
                                                       for version in (4, 5, 6, 7))}
                    for table in (PROGRAMS, RUNS, STATES, STEPS)}
TABLES_ADDED = {t.name: t.column_names for t in (OBJECTS, ATTRIBUTES, GLOBAL_STATES, GUESTS,
                                                 CHECKS, SETTRACE_LINES, FILES)}


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) a store, with a one-line error for every failure: a
    missing directory, a file that is not DuckDB, a DuckDB file that is not a store, a
    store another process holds."""
    path = Path(path)
    if path.is_dir():
        from steptrace.sharding._plan import is_shard_directory
        if is_shard_directory(path):  # its runs in Parquet files: steptrace.sharding._store
            from steptrace.sharding._store import open_shard_store
            return open_shard_store(path, read_only)
    if read_only:
        require_store(path)
    if not read_only and not path.parent.exists():
        raise StoreError(f"cannot create database {path}: directory {path.parent} does not exist")
    check_database_file(path)
    existed = path.exists()
    try:
        con, waited = _open_waiting(path, read_only)
    except duckdb.Error as exc:
        if not existed and path.exists() and path.stat().st_size == 0:
            path.unlink()  # a failed create (full disk) must not leave an unusable file
        raise _open_error(path, exc) from exc
    try:
        if not read_only:
            # a file this call created holds nothing to check (reading the catalogue costs
            # ~12 ms); one another process held while this one waited may hold anything
            fresh = not existed and not waited
            found = {} if fresh else _check_schema(con, path, allow_missing=True)
            # what is missing (a new file, or versions 1-3's upgrade), in one commit
            with transaction(con):
                con.execute(SCHEMA)
            if found:  # an older store's tables (a new file's are made as declared)
                upgrade_experiment_tables(con)  # version 2's predictions and scores
                upgrade_columns(con, found)  # versions 4 to 7's columns
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
        else:
            _check_schema(con, path, allow_missing=False)
    except duckdb.Error as exc:
        con.close()
        raise StoreError(f"cannot initialise database {path}: {first_line(exc)}") from exc
    except StoreError:
        con.close()
        raise
    except BaseException:  # Ctrl-C while this call made a new store: leave no half of one
        con.close()
        if not existed and not waited:
            for made in (path, path.with_name(path.name + ".wal")):
                made.unlink(missing_ok=True)
        raise
    return con


def upgrade_columns(con: duckdb.DuckDBPyConnection,
                    found: dict[str, list[str]] | None = None) -> None:
    """A store made before schema 7: add the columns it lacks (``ADDED_COLUMNS``: schema
    4's programs.shape, ``call`` for the programs it holds, programs.test, runs.chain,
    runs.stdin and states.object_id; schema 5's runs.guest; schema 6's
    scores.type_correct, scores.message_correct and programs.meta; schema 7's
    runs.settrace_line_steps, programs.environment, runs.backend, ``wasi`` for the runs it
    holds, and runs.python; NULL unless said), at
    the end of their tables as the declarations put them. ``found``: the store's columns per table
    (``_check_schema``'s), else read here."""
    if found is None:
        found = _columns(con)
    for _, table, column, before in ADDED_COLUMNS:
        if column in found.get(table.name, (column,)):
            continue  # present, or the table is new (made as declared)
        declared = table.column(column)
        if before is None:  # IF NOT EXISTS: schema 2's scores are remade as declared first
            con.execute(f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {column} "
                        f"{declared.type}")
            continue
        con.execute(f"ALTER TABLE {table.name} ADD COLUMN {column} {declared.type} "
                    f"DEFAULT {before}")
        con.execute(f"ALTER TABLE {table.name} ALTER COLUMN {column} DROP DEFAULT")
        if not declared.nullable:
            con.execute(f"ALTER TABLE {table.name} ALTER COLUMN {column} SET NOT NULL")


def shape_columns(con: duckdb.DuckDBPyConnection, alias: str = "p",
                  runs: str | None = None) -> str:
    """``{alias}.shape, {alias}.test`` for a query joining programs as ``alias`` (and
    ``{runs}.chain, {runs}.stdin`` with ``runs``, the alias of runs); in a store made
    before schema 4 (read without upgrading it) their values: ``'call'`` and NULLs."""
    present = con.execute("SELECT count(*) FROM information_schema.columns WHERE "
                          "table_schema = 'main' AND table_name = 'programs' AND "
                          "column_name = 'shape'").fetchall()[0][0]
    if present:
        columns = f"{alias}.shape, {alias}.test"
        return columns + (f", {runs}.chain, {runs}.stdin" if runs else "")
    columns = "'call' AS shape, CAST(NULL AS VARCHAR) AS test"
    return columns + (", CAST(NULL AS VARCHAR) AS chain, CAST(NULL AS VARCHAR) AS stdin"
                      if runs else "")


class StoreLockedError(StoreError):
    """Another process has the store open in a way that excludes this one."""


def lock_wait_s() -> float:
    """Seconds to wait for a store another process has open: $STEPTRACE_LOCK_WAIT, or 10."""
    text = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_LOCK_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise StoreError(f"${LOCK_WAIT_ENV} must be a number of seconds >= 0, not {text!r}")
    return value


def _is_lock_error(exc: duckdb.Error) -> bool:
    return isinstance(exc, duckdb.IOException) and "Could not set lock on file" in str(exc)


def _open_waiting(path: Path, read_only: bool) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """``duckdb.connect``, trying again for up to ``lock_wait_s()`` while another process
    holds the file's lock; the connection, and whether it had to wait. DuckDB lets one process open a file for writing, or any
    number for reading only, and a connection keeps its lock until it is closed;
    steptrace's writers (trace, predict, score) hold theirs only for short transactions,
    so a wait of a few seconds lets commands take turns instead of failing."""
    deadline = time.monotonic() + lock_wait_s()
    pause = 0.01
    waited = False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only), waited
        except duckdb.Error as exc:
            left = deadline - time.monotonic()
            if not _is_lock_error(exc) or left <= 0:
                raise
            time.sleep(min(pause, left))
            waited = True
            pause = min(pause * 2, 0.2)


def _open_error(path: Path, exc: duckdb.Error) -> StoreError:
    """One line for a failed open; for a lock held elsewhere, who holds it, without the
    DuckDB message's paths and links."""
    if not _is_lock_error(exc):
        return StoreError(f"cannot open database {path}: {first_line(exc)}")
    holder = re.search(r"\(PID (\d+)\)", str(exc))
    who = f"another process (PID {holder.group(1)})" if holder else "another process"
    return StoreLockedError(
        f"database {path} is in use by {who}: a store is open to one writing process or to "
        f"reading processes only (waited {lock_wait_s():g} s; ${LOCK_WAIT_ENV} sets how long)")


@contextmanager
def single_trace(path: str | Path) -> Iterator[None]:
    """Held by a ``trace`` into ``path`` for its whole run: a second trace of the store
    waits ``lock_wait_s()`` for it, then stops with one line. A trace opens the store
    only for each commit (``TraceWriter``), so DuckDB's own lock no longer keeps a second
    trace out, and two traces would hand out the same run ids. The lock is ``flock`` on
    the store file, which Linux keeps apart from the ``fcntl`` locks DuckDB takes (and it
    goes with the process: a killed trace leaves none behind)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {exc.strerror or exc}") from exc
    try:
        deadline = time.monotonic() + lock_wait_s()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f"database {path} is being traced into by another process: one "
                        f"trace writes a store at a time (waited {lock_wait_s():g} s; "
                        f"${LOCK_WAIT_ENV} sets how long)") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def require_store(path: str | Path) -> None:
    """Refuse a store that does not exist, where opening it for writing would create an
    empty one: every command but ``trace`` needs a store that ``trace`` made, and after a
    typo in --db it would otherwise work on a new, empty store without a word."""
    if not Path(path).exists():
        raise StoreError(f"database not found: {path}")


# Bytes 8-11 of every DuckDB database file, after an 8-byte checksum.
DUCKDB_MAGIC = b"DUCK"


def check_database_file(path: Path) -> None:
    """Refuse, before DuckDB sees it, an existing ``path`` that is not a DuckDB file,
    saying what it is. DuckDB opens an existing CSV or JSON file as an in-memory database
    over it: writes would vanish without an error, and a read-only open fails with
    "Cannot launch in-memory database in read-only mode", which says nothing about the
    file; an empty file gets "not a valid DuckDB database file"; a FIFO would block."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return  # a new store
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        raise StoreError(f"{path} is {file_kind(mode)}, not a DuckDB database")
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {exc.strerror or exc}") from exc
    if not head:
        raise StoreError(f"{path} is an empty file, not a DuckDB database")
    if head[8:12] == DUCKDB_MAGIC:
        return
    if b"\0" not in head:
        raise StoreError(f"{path} is a text file (such as JSONL or CSV), not a DuckDB database")
    raise StoreError(f"{path} is not a DuckDB database file")


def _columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """The columns of each table of the store, in order."""
    found: dict[str, list[str]] = {}
    for table, column in con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall():
        found.setdefault(table, []).append(column)
    return found


def _check_schema(con: duckdb.DuckDBPyConnection, path: Path,
                  allow_missing: bool) -> dict[str, list[str]]:
    """Refuse a DuckDB file whose tables are not steptrace's (or of another version);
    return its columns per table (none: a new, empty file)."""
    found = _columns(con)
    if not found and allow_missing:
        return found  # a new, empty file
    for table, columns in EXPECTED_COLUMNS.items():
        if table not in found:
            if allow_missing and not any(t in found for t in EXPECTED_COLUMNS):
                continue
            raise StoreError(f"{path} is not a steptrace store (no table {table})")
        if tuple(found[table]) not in ACCEPTED_COLUMNS[table]:
            raise StoreError(f"{path} is not a steptrace store (table {table} has other columns)")
    for table, columns in {**ADDED_IN_2, **TABLES_ADDED}.items():
        if table in found and tuple(found[table]) != tuple(columns):
            raise StoreError(f"{path} is not a steptrace store (table {table} has other columns)")
    if "meta" in found:
        # fetchall, not fetchone: a result left unread would keep the connection busy for
        # the caller's con.sql() (DuckDB refuses new work on a connection mid-result)
        found_version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                                    ).fetchall()
        version = found_version[0] if found_version else None
        if version is not None and version[0] not in READABLE_VERSIONS:
            raise StoreError(f"{path} has store schema version {version[0]}; this steptrace "
                             f"reads versions {', '.join(READABLE_VERSIONS)}")
    return found


def register_guest(con: duckdb.DuckDBPyConnection, key: str, lock: PackageLock | None) -> None:
    """Record the guest build ``key`` (and the package lock it bundles) in ``guests``, once
    (in the caller's transaction): later commands (``analyse``, ``score`` of predicted
    inputs) run a run's program again in the guest that traced it."""
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    con.execute("INSERT INTO guests VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [key, lock.text if lock is not None else None, now])


def guest_locks(con: duckdb.DuckDBPyConnection) -> dict[str, PackageLock | None]:
    """Each recorded guest's package lock (None: the standard guest), from a store opened
    for writing (``connect`` gives an older store its ``guests`` table, empty)."""
    return {key: parse_lock(text, f"guests row {key}") if text is not None else None
            for key, text in con.execute("SELECT guest, lock FROM guests").fetchall()}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# DuckDB's own memory while the writer inserts (its default is 80% of the machine's RAM,
# which it fills with cached blocks as a long trace is written): beyond it, DuckDB writes
# blocks out and spills to a temporary directory beside the store. What cannot spill is
# the indexes of the primary and unique keys, which a commit must hold, and they grow
# with the store: a commit of 1,000 synthetic runs into a store of 495,000 runs, as many
# programs and 925,000 objects failed under 128 MB ("could not allocate block") and
# passed under 160 MB. So the cap is the 128 MB a small store always had (what bounds the
# host's memory for one corpus line: bench/host_memory.py) plus room per key held: about
# twice what that store needed for a text key (runs.run_key, programs.program_key) and
# for an integer pair (objects, files).
WRITER_MEMORY_BASE = 128 << 20
WRITER_MEMORY_PER_TEXT_KEY = 256
WRITER_MEMORY_PER_PAIR_KEY = 64
_KEYS_HELD = ("SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM programs), "
              "(SELECT count(*) FROM objects) + (SELECT count(*) FROM files)")


def writer_memory_limit(text_keys: int, pair_keys: int) -> str:
    """DuckDB's ``memory_limit`` for a writer of a store whose key indexes hold
    ``text_keys`` text keys and ``pair_keys`` integer pairs."""
    needed = (WRITER_MEMORY_BASE + WRITER_MEMORY_PER_TEXT_KEY * max(text_keys, 0)
              + WRITER_MEMORY_PER_PAIR_KEY * max(pair_keys, 0))
    return f"{needed >> 20}MiB"


# Held Arrow rows up to this size are combined into one chunk per table before the insert.
COMBINE_BYTES = 8 << 20


class TraceWriter:
    """Appends batches of traced runs to a store; assigns run and program ids. Sets the
    DuckDB instance's ``memory_limit`` to ``writer_memory_limit`` of the keys the store
    holds (when it opens the store itself).

    Given a connection, it writes through it; given ``con=None`` it opens the store at
    ``path`` for each transaction and closes it after (``trace``): DuckDB lets one process
    hold a file for writing and no other process open it meanwhile, not even to read, so
    a connection held for a whole trace would lock ``sql``, ``show`` and every other
    command out for hours. Between commits the store is free, and a reader waits at most
    for one commit (``$STEPTRACE_LOCK_WAIT``)."""

    def __init__(self, con: duckdb.DuckDBPyConnection | None, force: bool = False,
                 path: str | Path = "", guest: tuple[str, PackageLock | None] | None = None,
                 ids: CorpusIds | None = None) -> None:
        """``guest``: the key and package lock of the guest build the runs come from,
        recorded in ``guests`` with the first commit. ``ids``: the run and program ids of
        the corpus's jobs, given before they run (engine/store/_ids.py: ``trace`` gives
        them, so that ids follow the corpus order whatever order runs finish in); without
        them the runs of each batch get the next free ids in the order they are added."""
        self.con = con
        self.force = force
        self.path = path
        self._guest = guest
        self._ids = ids
        self._held: list[tuple] = []  # (runs, steps, states, programs, objects, attributes,
        #                               global_states, settrace_lines, files) tables per add
        self._held_ids: list[int] = []  # the run ids of the held runs
        self._saved: tuple | None = None  # the ids' state before the first held add
        self.held_bytes = 0  # Arrow bytes of the held tables
        self.stored = 0  # runs committed by this writer
        try:
            with self._open() as con:
                self.next_run_id = con.execute(
                    "SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchone()[0]
                self.next_program_id = con.execute(
                    "SELECT coalesce(max(program_id), 0) + 1 FROM programs").fetchone()[0]
                self.program_ids: dict[str, int] = dict(
                    con.execute("SELECT program_key, program_id FROM programs").fetchall())
        except duckdb.Error as exc:
            raise StoreError(f"cannot read database {path}: {first_line(exc)}") from exc

    @contextmanager
    def _open(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The writer's connection, or the store opened for one transaction and closed
        after it (``con=None``), waiting ``lock_wait_s()`` for another process's hold."""
        if self.con is not None:
            yield self.con
            return
        con = connect(self.path)
        try:
            text_keys, pair_keys = con.execute(_KEYS_HELD).fetchone()
            con.execute(f"SET memory_limit = '{writer_memory_limit(text_keys, pair_keys)}'")
            yield con
        finally:
            con.close()

    def detach(self) -> None:
        """From now on open the store for each transaction and close it after, as with
        ``con=None`` (the connection given stays the caller's to close): ``trace`` reads
        the ids and records the guest through the connection it has open already."""
        self.con = None

    def register_guest(self) -> None:
        """Record the guest build now, in a transaction of its own, instead of with the
        first commit: a trace does it while its workers start, so that its last commit,
        which it waits for, only inserts runs."""
        if self._guest is None:
            return
        try:
            with self._open() as con, transaction(con):
                register_guest(con, *self._guest)
        except duckdb.Error as exc:
            raise StoreError(f"cannot write to database {self.path}: {first_line(exc)}") from exc
        self._guest = None

    def write(self, batch: Iterable[TracedRun]) -> list[int]:
        """Commit ``batch`` (and any runs added before) in one transaction; return the run
        ids given."""
        self.add(batch)
        return self.commit()

    @property
    def held(self) -> int:
        """Runs added and not yet committed."""
        return len(self._held_ids)

    def add(self, batch: Iterable[TracedRun], most_bytes: int | None = None) -> int:
        """Turn ``batch`` into Arrow rows now (giving run and program ids) and hold them for
        the next :meth:`commit`; return how many runs were taken. ``trace_corpus`` adds each
        chunk as it comes back, while the workers run on, so that its last commit only
        inserts. ``batch`` is read once, a run at a time: an iterator that makes each
        run's result as it is reached holds one large result at a time. With
        ``most_bytes`` the runs taken stop once their Arrow rows reach it (counted every
        ``_Rows.FLUSH_ROWS`` rows): the rest of an iterator is left for the next call."""
        saved = self._saved
        if saved is None:
            self._saved = (self.next_run_id, self.next_program_id, dict(self.program_ids))
        count, tables = self._tables(batch, most_bytes)
        if not count:
            self._saved = saved
            return 0
        self._held.append(tables)
        self.held_bytes += sum(table.get_total_buffer_size() for table in tables)
        return count

    def commit(self, keep_if_busy: bool = False) -> list[int] | None:
        """Store the held runs in one transaction; return their run ids. When it fails
        nothing of them is stored and their ids are given again. With ``con=None`` and a
        store another process holds past ``lock_wait_s()``: with ``keep_if_busy`` (a
        commit that can come later) None, the runs staying held for the next commit,
        else StoreLockedError."""
        if not self._held:
            return []
        with ExitStack() as stack:
            try:
                con = stack.enter_context(self._open())
            except StoreLockedError:
                if not keep_if_busy:
                    raise
                return None
            return self._commit(con)

    def _commit(self, con: duckdb.DuckDBPyConnection) -> list[int]:
        # Many small pieces are combined first (DuckDB inserts one Arrow chunk faster than
        # fifty: 20 ms for CRUXEval's 800 runs); large held rows are inserted as they are,
        # since combining copies every one of them at the moment the most is held.
        combine = self.held_bytes <= COMBINE_BYTES
        tables = [pa.concat_tables(parts).combine_chunks() if combine else pa.concat_tables(parts)
                  for parts in zip(*self._held)]
        saved = self._saved
        run_ids = self._held_ids
        self._held, self._held_ids, self._saved, self.held_bytes = [], [], None, 0
        try:
            with transaction(con):
                if self._guest is not None:
                    register_guest(con, *self._guest)
                self._insert(con, *tables)
            self._guest = None
            self.stored += len(run_ids)
        except BaseException as exc:
            # nothing of these runs is stored: forget the ids handed out for them
            self.next_run_id, self.next_program_id, self.program_ids = saved
            if isinstance(exc, duckdb.Error):
                raise StoreError(f"cannot write to database {self.path}: {first_line(exc)}") from exc
            raise
        return run_ids

    def _insert(self, con: duckdb.DuckDBPyConnection, runs: pa.Table, steps: pa.Table,
                states: pa.Table, programs: pa.Table, objects: pa.Table, attributes: pa.Table,
                global_states: pa.Table, settrace_lines: pa.Table, files: pa.Table) -> None:
        if self.force:
            con.register("replaced", pa.table({"run_key": runs.column("run_key")}))
            present = {name for (name,) in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
            ).fetchall()}
            for table in RUN_DETAIL_TABLES + tuple(t for t in DERIVED_RUN_TABLES if t in present):
                con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM runs "
                            "WHERE run_key IN (SELECT run_key FROM replaced))")
            con.execute("DELETE FROM runs WHERE run_key IN (SELECT run_key FROM replaced)")
            con.unregister("replaced")
        for name, table in (("programs", programs), ("runs", runs), ("steps", steps),
                            ("states", states), ("objects", objects),
                            ("attributes", attributes), ("global_states", global_states),
                            ("settrace_lines", settrace_lines), ("files", files)):
            if table.num_rows:
                con.register("incoming", table)
                con.execute(f"INSERT INTO {name} SELECT * FROM incoming")
                con.unregister("incoming")

    # ------------------------------------------------------------------ arrow building
    def _program_id(self, program: Program, rows: "RunRows") -> int:
        """The program's id; a program not yet stored gets its planned one (or the next
        free one) and a row in ``rows``."""
        key = program.key
        pid = self.program_ids.get(key)
        if pid is None:
            if self._ids is not None:
                pid = self._ids.programs[key]
            else:
                pid = self.next_program_id
                self.next_program_id += 1
            self.program_ids[key] = pid
            rows.add_program(program, pid)
        return pid

    def _run_id(self, traced: TracedRun) -> int:
        """The run's planned id, or the next free one."""
        if self._ids is not None:
            return self._ids.runs[traced.job.key]
        self.next_run_id += 1
        return self.next_run_id - 1

    def _tables(self, batch: Iterable[TracedRun], most_bytes: int | None = None
                ) -> tuple[int, tuple[pa.Table, ...]]:
        """The number of runs taken from ``batch`` and their (runs, steps, states,
        programs, objects, attributes, global_states, settrace_lines, files) (none if no
        run was), giving each run its id (``_run_id``, noted in ``_held_ids``) and new
        programs theirs."""
        rows = RunRows()
        for traced in batch:
            program_id = self._program_id(traced.job.program, rows)
            run_id = self._run_id(traced)
            self._held_ids.append(run_id)
            rows.add(traced, run_id, program_id)
            if most_bytes is not None and rows.nbytes >= most_bytes:
                break
        if not rows.count:
            return 0, ()
        return rows.count, rows.tables()


class RunRows:
    """The Arrow rows of a batch of traced runs under the ids the caller gives them: the
    store's writer gives the next free ones, a shard (steptrace.sharding) ids from the
    runs' places in its plan. ``tables()``: (runs, steps, states, programs, objects,
    attributes, global_states, settrace_lines, files), each with its table's columns in
    order."""

    def __init__(self, now: dt.datetime | None = None) -> None:
        self.now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        self.programs: dict[str, list] = {name: [] for name in PROGRAM_TYPES}
        self.runs: dict[str, list] = {name: [] for name in RUN_COLUMNS}
        self.steps, self.states = _StepRows(), _StateRows()
        self.details = (_ObjectRows(), _AttributeRows(), _GlobalRows(), _SettraceRows(),
                        _FileRows())
        self.count = 0

    def add_program(self, program: Program, program_id: int) -> None:
        """A ``programs`` row for ``program``."""
        for name, value in (("program_id", program_id), ("source", program.source),
                            ("sample_id", program.sample_id), ("code", program.code),
                            ("entry", program.entry), ("code_sha256", program.code_sha256),
                            ("program_key", program.key), ("shape", program.shape),
                            ("test", program.test), ("meta", program.meta),
                            ("environment", program.environment)):
            self.programs[name].append(value)

    def add(self, traced: TracedRun, run_id: int, program_id: int) -> None:
        """The run's rows (its program's row is the caller's: ``add_program``)."""
        _append_run(self.runs, traced, run_id, program_id, self.now)
        self.steps.add(traced.result, run_id)
        self.states.add(traced.result, run_id)
        for rows in self.details:
            rows.add(traced.result, run_id)
        self.count += 1

    @property
    def nbytes(self) -> int:
        """Arrow bytes of the step, state and object rows made so far (counted every
        ``_Rows.FLUSH_ROWS`` rows)."""
        return (self.steps.nbytes + self.states.nbytes
                + sum(rows.nbytes for rows in self.details))

    def tables(self) -> tuple[pa.Table, ...]:
        return (_arrow(self.runs, RUN_TYPES), self.steps.table(), self.states.table(),
                _arrow(self.programs, PROGRAM_TYPES), *(rows.table() for rows in self.details))


def run_rows(traced: TracedRun, run_id: int = 0, program_id: int = 0,
             now: dt.datetime | None = None) -> tuple[dict, pa.Table, ...]:
    """One traced run as the store holds it: its ``runs`` row (a dict of ``RUN_COLUMNS``),
    and its ``steps``, ``states``, ``objects``, ``attributes``, ``global_states``,
    ``settrace_lines`` and ``files`` rows (Arrow tables of those tables' columns). Made by
    the code ``TraceWriter`` makes a batch's rows with, the one reading of the guest's
    wire format (name tables and the indices into them), so that a run decoded without a
    store (``steptrace.trace_one``) is the run a store would hold."""
    runs: dict[str, list] = {name: [] for name in RUN_COLUMNS}
    _append_run(runs, traced, run_id, program_id, now)
    tables = (_StepRows(), _StateRows(), _ObjectRows(), _AttributeRows(), _GlobalRows(),
              _SettraceRows(), _FileRows())
    for rows in tables:
        rows.add(traced.result, run_id)
    return ({name: values[0] for name, values in runs.items()},
            *(rows.table() for rows in tables))


def _append_run(runs: dict, traced: TracedRun, run_id: int, program_id: int, now) -> None:
    r = traced.result
    job = traced.job
    n_steps = len((r.get("steps") or {}).get("event") or ())
    values = {
        "run_id": run_id, "program_id": program_id, "sample_id": job.program.sample_id,
        "input_index": job.input_index, "input": job.input, "status": r.get("status") or "crashed",
        "output": r.get("output"), "output_type": r.get("output_type"),
        "output_truncated": r.get("output_truncated"), "exception_type": r.get("exception_type"),
        "exception_message": r.get("exception_message"), "expected": job.expected,
        "output_matches": run_matches(r, job), "note": r.get("note"), "stdout": r.get("stdout"),
        "line_steps": r.get("line_steps"), "instruction_steps": r.get("instruction_steps"),
        "calls": r.get("calls"), "max_depth": r.get("max_depth"), "n_steps": n_steps,
        "duration_us": traced.duration_us, "call_us": r.get("call_us"),
        "isolation": traced.isolation, "run_key": job.key, "traced_at": now,
        "chain": job.calls_json, "stdin": job.stdin, "guest": traced.guest,
        "settrace_line_steps": _settrace_line_steps(r),
        "backend": traced.backend, "python": traced.python,
    }
    for name in RUN_COLUMNS:
        runs[name].append(values[name])


def _settrace_line_steps(result: dict) -> int | None:
    """The settrace view's line events: the line steps and the view's own events; None
    when the guest did not record the view (more of them than the step limit, or no
    trace)."""
    own = result.get("settrace_lines")
    if own is None or result.get("line_steps") is None:
        return None
    return result["line_steps"] + len(own["step"])


def run_matches(result: dict, job: Job) -> bool | None:
    """NULL without an expected output; False for every run that did not return. A
    script's stdout is compared here (``stdout_matches``), the guest compares a call's
    return value."""
    if job.expected is None:
        return None
    if job.program.shape == "script":
        return result.get("status") == "ok" and stdout_matches(result.get("stdout"),
                                                                job.expected)
    return bool(result.get("output_matches"))


class _Names:
    """A dictionary-encoded text column under construction: each distinct text once,
    each row an index into them."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.indices: list[int | None] = []

    def add(self, values: list, nullable: bool = False) -> None:
        codes = self.codes
        if nullable:
            self.indices.extend([None if v is None else codes.setdefault(v, len(codes))
                                 for v in values])
        else:
            self.indices.extend([codes.setdefault(v, len(codes)) for v in values])

    def add_indexed(self, table: list[str], indices: list[int]) -> None:
        """Rows given as indices into a run's own name table (``funcs``, ``events``)."""
        codes = self.codes
        local = [codes.setdefault(name, len(codes)) for name in table]
        self.indices.extend(map(local.__getitem__, indices))

    def array(self) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(arrow_array(self.indices, pa.int32()),
                                              _strings(list(self.codes)))


class _Rows:
    """The rows of one table for a batch, built as Python lists and turned into Arrow
    every ``FLUSH_ROWS`` rows: a large run is then not held as lists and as Arrow at
    once, while small runs still share one conversion."""

    FLUSH_ROWS = 1 << 16
    COLUMNS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.pieces: list[pa.Table] = []
        self.rows = 0
        self.start()

    def start(self) -> None:
        raise NotImplementedError

    def arrays(self) -> list[pa.Array]:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Arrow bytes of the rows turned into Arrow so far."""
        return sum(piece.get_total_buffer_size() for piece in self.pieces)

    def added(self, count: int) -> None:
        self.rows += count
        if self.rows >= self.FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        self.pieces.append(pa.Table.from_arrays(self.arrays(), names=list(self.COLUMNS)))
        self.rows = 0
        self.start()

    def table(self) -> pa.Table:
        if not self.rows and not self.pieces:
            # no rows (most batches have no attributes or globals): one empty table per
            # kind of rows, made once (Arrow tables are immutable)
            empty = _EMPTY_TABLES.get(type(self))
            if empty is None:
                self.flush()
                empty = _EMPTY_TABLES[type(self)] = self.pieces.pop()
            return empty
        if self.rows:
            self.flush()
        return self.pieces[0] if len(self.pieces) == 1 else pa.concat_tables(self.pieces)


_EMPTY_TABLES: dict[type, pa.Table] = {}


class _StepRows(_Rows):
    """The steps rows of a batch."""

    COLUMNS = STEP_COLUMNS

    def start(self) -> None:
        self.run_id: list[int] = []
        self.step: list[int] = []
        self.event, self.func = _Names(), _Names()
        self.line: list[int] = []
        self.depth: list[int] = []
        self.frame: list[int] = []

    def add(self, result: dict, run_id: int) -> None:
        trace = result.get("steps")
        if not trace or not trace["event"]:
            return
        count = len(trace["event"])
        self.run_id.extend([run_id] * count)
        self.step.extend(range(count))
        self.event.add_indexed(result["events"], trace["event"])
        self.func.add_indexed(result["funcs"], trace["func"])
        self.line.extend(trace["line"])
        self.depth.extend(trace["depth"])
        self.frame.extend(trace["frame"])
        self.added(count)

    def arrays(self) -> list[pa.Array]:
        types = _STEP_TYPES  # event and func: dictionary-encoded names (DuckDB: VARCHAR)
        return [arrow_array(self.run_id, types["run_id"]),
                arrow_array(self.step, types["step"]), self.event.array(), self.func.array(),
                arrow_array(self.line, types["line"]), arrow_array(self.depth, types["depth"]),
                arrow_array(self.frame, types["frame"])]


class _StateRows(_Rows):
    """The states rows of a batch."""

    COLUMNS = STATE_COLUMNS

    def start(self) -> None:
        self.run_id: list[int] = []
        self.step: list[int] = []
        self.var, self.type = _Names(), _Names()
        self.value: list[str | None] = []
        self.truncated: list[bool] = []
        self.object_id: list[int | None] = []

    def add(self, result: dict, run_id: int) -> None:
        rows = result.get("states")
        if not rows or not rows["step"]:
            return
        count = len(rows["step"])
        self.run_id.extend([run_id] * count)
        self.step.extend(rows["step"])
        self.var.add(rows["var"])
        self.value.extend(rows["value"])
        self.type.add(rows["type"], nullable=True)
        self.truncated.extend(rows["truncated"])
        self.object_id.extend(rows["object_id"])
        self.added(count)

    def arrays(self) -> list[pa.Array]:
        types = _STATE_TYPES  # var and type: dictionary-encoded names (DuckDB: VARCHAR)
        return [arrow_array(self.run_id, types["run_id"]),
                arrow_array(self.step, types["step"]), self.var.array(), _strings(self.value),
                self.type.array(),
                arrow_array(self.truncated, types["truncated"]),
                arrow_array(self.object_id, types["object_id"])]


class _TableRows(_Rows):
    """The rows of a run-keyed table whose columns the result holds as they are (``KEY``:
    the result's key), names dictionary-encoded; ``objects`` numbers its rows."""

    TABLE: Table = OBJECTS
    KEY = ""
    NAMES: frozenset = frozenset()
    COUNTED = "step"  # the column whose length is the rows'

    def start(self) -> None:
        self.columns = {column.name: _Names() if column.name in self.NAMES else []
                        for column in self.TABLE.columns}

    def add(self, result: dict, run_id: int) -> None:
        rows = result.get(self.KEY)
        if not rows or not rows[self.COUNTED]:
            return
        count = len(rows[self.COUNTED])
        for column in self.TABLE.columns:
            name = column.name
            if name == "run_id":
                values = [run_id] * count
            elif name not in rows:  # objects: the object id is the row's number
                values = range(1, count + 1)
            else:
                values = rows[name]
            target = self.columns[name]
            if name in self.NAMES:
                target.add(values, nullable=column.nullable)
            else:
                target.extend(values)
        self.added(count)

    def arrays(self) -> list[pa.Array]:
        return [values.array() if isinstance(values, _Names)
                else _strings(values) if column.arrow == pa.string()
                else arrow_array(values, column.arrow)
                for column, values in zip(self.TABLE.columns, self.columns.values())]


class _ObjectRows(_TableRows):
    TABLE, KEY, NAMES, COLUMNS = OBJECTS, "objects", frozenset({"type"}), OBJECTS.column_names


class _AttributeRows(_TableRows):
    TABLE, KEY, NAMES = ATTRIBUTES, "attributes", frozenset({"attr", "type"})
    COLUMNS = ATTRIBUTES.column_names


class _GlobalRows(_TableRows):
    TABLE, KEY, NAMES = GLOBAL_STATES, "global_states", frozenset({"name", "type"})
    COLUMNS = GLOBAL_STATES.column_names


class _SettraceRows(_TableRows):
    """The settrace view's own line events; the guest names their function by its index
    into the run's ``funcs``, as in its steps."""

    TABLE, KEY, NAMES = SETTRACE_LINES, "settrace_lines", frozenset({"func"})
    COLUMNS = SETTRACE_LINES.column_names

    def add(self, result: dict, run_id: int) -> None:
        rows = result.get(self.KEY)
        if not rows or not rows["step"]:
            return
        funcs = result["funcs"]
        super().add({self.KEY: {**rows, "func": [funcs[index] for index in rows["func"]]}},
                    run_id)


class _FileRows(_TableRows):
    """What a run left in its directories (the host's ``files``: wasm_sandbox/_files.py)."""

    TABLE, KEY, NAMES, COUNTED = FILES, "files", frozenset({"kind"}), "path"
    COLUMNS = FILES.column_names


_STEP_TYPES = STEPS.arrow_types()
_STATE_TYPES = STATES.arrow_types()


def _arrow(columns: dict, types: dict) -> pa.Table:
    return pa.Table.from_arrays([_strings(columns[name]) if kind == pa.string()
                                 else arrow_array(columns[name], kind)
                                 for name, kind in types.items()], names=list(types))


def _strings(values: list) -> pa.Array:
    """Text from the guest may hold lone surrogates (a program can print one; the checked
    result keeps them): store them escaped (``\\ud800``) rather than lose the run."""
    try:
        return arrow_array(values, pa.string())
    except (pa.ArrowException, UnicodeEncodeError):
        return arrow_array([None if v is None else v.encode("utf-8", "backslashreplace")
                            .decode("utf-8") for v in values], pa.string())


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]


def query(db: str | Path, sql: str, params: list | None = None) -> QueryResult:
    """Run one SQL statement read-only against a store."""
    con = connect(db, read_only=True)
    try:
        cursor = con.execute(sql, params or [])
        if cursor.description is None:
            return QueryResult([], [])
        return QueryResult([d[0] for d in cursor.description], cursor.fetchall())
    except duckdb.Error as exc:
        raise StoreError(f"query failed on {db}: {first_line(exc)}") from exc
    finally:
        con.close()


def status_counts(db: str | Path) -> dict[str, int]:
    """Runs in the store by status."""
    result = query(db, "SELECT status, count(*) FROM runs GROUP BY status ORDER BY status")
    return dict(result.rows)


# Runs whose call finished (returned or raised): the ones with a whole trace to analyse.
FINISHED_STATUSES = ("ok", "exception")
# A memory address in a repr (``<object at 0x7f…>``): differs between runs by nature.
MEMORY_ADDRESS = re.compile(r" at 0x[0-9a-f]+", re.IGNORECASE)
# What such a repr looks like since schema 4, which leaves the address out (``<function
# f>``, ``<generator object g>``, ``<__main__.D object>``): it names an object, not a
# value one could write down.
OPAQUE_REPR = re.compile(r"<(?:function |bound method |built-in |method-wrapper |[\w.]+ object\b)")


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    found = con.execute("SELECT count(*) FROM information_schema.tables "
                        "WHERE table_schema = 'main' AND table_name = ?", [name]).fetchall()
    return found[0][0] > 0


def analysis_missing(db: str | Path, determinism: bool = False) -> bool:
    """Whether a finished run lacks its analysis (or, with ``determinism``, its
    determinism verdict): a read-only look, so that callers start the sandbox only
    when there is work for it."""
    con = connect(db, read_only=True)
    try:
        if not has_table(con, "analyses"):
            return True  # a version 1 store: analyse_store upgrades it
        check = "a.run_id IS NULL" + (" OR a.deterministic IS NULL" if determinism else "")
        statuses = ", ".join(f"'{status}'" for status in FINISHED_STATUSES)
        return con.execute(
            "SELECT count(*) FROM runs r LEFT JOIN analyses a USING (run_id) "
            f"WHERE r.status IN ({statuses}) AND ({check})").fetchall()[0][0] > 0
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()
