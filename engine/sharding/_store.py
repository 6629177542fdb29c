"""A shard directory read as a store, and loaded into one.

Every command that takes ``--db`` takes a shard directory too: ``connect`` hands it
here. The trace's tables (runs, steps, states, programs, objects, attributes,
global_states, guests) are views over the finished shards' Parquet files
(``DIR/shards/*/TABLE.parquet``: a shard being written is not there yet); what later
commands make (tasks, predictions, scores, features, analyses) goes into a small DuckDB
file beside them, ``DIR/store.duckdb``, which holds those tables and the views. So
``tasks``, ``predict``, ``score``, ``features``, ``report``, ``show`` and ``sql`` work on a
shard directory as on a store, without copying the traces. The views are made again at
every open for writing (with the directory's current absolute path, so a moved directory
still reads); a read-only open makes them in memory and attaches ``store.duckdb`` read-only.

In a shard directory a program appears in each shard that runs it (the same row: its id
is derived from its key), so the ``programs`` view is ``DISTINCT``; ``guests`` takes a
guest's earliest ``first_used``.

``import_shards`` copies a shard directory into a DuckDB store (``steptrace import``),
keeping the runs the store does not hold yet (by run key; ``force`` replaces them, under
the same ids). Run and program ids are those ``trace --db`` gives the same corpora
(engine/store/_ids.py): a shard's run id is the job's place in the corpus order, so into
a new store the ids are the shards' own, and a store holding other runs places the
directory's after them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from steptrace.analytics._export import sql_literal
from steptrace.errors import StoreError
from steptrace.sharding._check import check_shard_files
from steptrace.sharding._plan import (COMPANION, check_path, is_shard_directory, read_plan,
                                      shard_name)
from steptrace.sharding._shard import SHARD_TABLES
from steptrace.store._arrow import arrow_array
from steptrace.store._ids import block_base, held_between, place, stored_ids, top_id
from steptrace.store._tables import CONNECT_TABLES, PROGRAMS, RUNS, Table

TRACE_TABLES = frozenset(t.name for t in SHARD_TABLES)
# tables whose rows within a step keep the guest's order (a store orders them by rowid)
ORDERED = frozenset({"steps", "states", "objects", "attributes", "global_states",
                     "settrace_lines", "files"})


def _files(directory: Path, table: Table, shard: int | None = None) -> str:
    folder = "*" if shard is None else shard_name(shard)
    return sql_literal(directory / "shards" / folder / f"{table.name}.parquet")


def _view_sql(directory: Path, table: Table, any_done: bool, shard: int | None = None) -> str:
    """The view of ``table`` over the finished shards, or over shard ``shard`` only (typed
    and empty before any is)."""
    columns = ", ".join(c.name for c in table.columns)
    if any_done and not _has_files(directory, table, shard):
        any_done = False  # a table later schemas added: shards written before have none
    if not any_done:
        nulls = ", ".join(f"CAST(NULL AS {c.type}) AS {c.name}" for c in table.columns)
        if table.name in ORDERED:
            nulls += ", CAST(NULL AS BIGINT) AS rowid"
        body = f"SELECT {nulls} WHERE false"
    elif table.name in ("programs", "runs"):
        # union_by_name: a shard written before a column was added (programs.meta, schema
        # 6; runs.settrace_line_steps, runs.backend, runs.python and programs.environment,
        # schema 7) reads it as NULL (backend: 'wasi', _BEFORE)
        files = f"read_parquet({_files(directory, table, shard)}, union_by_name = true)"
        present = _parquet_columns(files)
        columns = ", ".join(c.name if c.name in present else
                            f"CAST({_BEFORE.get(c.name, 'NULL')} AS {c.type}) AS {c.name}"
                            for c in table.columns)
        distinct = "DISTINCT " if table.name == "programs" else ""
        body = f"SELECT {distinct}{columns} FROM {files}"
    elif table.name == "guests":
        body = (f"SELECT guest, any_value(lock) AS lock, min(first_used) AS first_used "
                f"FROM read_parquet({_files(directory, table, shard)}) GROUP BY guest")
    elif table.name in ORDERED:
        # a run's rows are in one file, in the order the guest gave them: file_row_number
        # is the rowid a store's queries order them by within a step
        body = (f"SELECT {columns}, file_row_number AS rowid FROM "
                f"read_parquet({_files(directory, table, shard)}, file_row_number = true)")
    else:
        body = f"SELECT {columns} FROM read_parquet({_files(directory, table, shard)})"
    return f'CREATE OR REPLACE VIEW "{table.name}" AS {body}'


# what a column a shard was written without reads as (else NULL)
_BEFORE = {"backend": "'wasi'"}


def _parquet_columns(files: str) -> set[str]:
    """The columns any of the files has (``files``: a ``read_parquet`` over them)."""
    with duckdb.connect() as con:
        return {name for name, *_ in con.execute(f"DESCRIBE SELECT * FROM {files}").fetchall()}


def _has_files(directory: Path, table: Table, shard: int | None) -> bool:
    folder = "*" if shard is None else shard_name(shard)
    return any((directory / "shards").glob(f"{folder}/{table.name}.parquet"))


def _any_done(directory: Path) -> bool:
    return any((directory / "shards").glob("*/done.json"))


def open_shard_store(directory: str | Path, read_only: bool = False,
                     shard: int | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection over the shard directory ``directory`` (see the module doc);
    with ``shard`` (read-only), its trace tables hold that finished shard's runs only."""
    from steptrace.store._store import SCHEMA_VERSION, _open_error, _open_waiting, first_line
    directory = Path(directory).resolve()
    read_plan(directory)  # a broken plan is refused here, with its own message
    check_path(directory)
    check_shard_files(directory, shard)
    any_done = _any_done(directory)
    if shard is not None:
        if not read_only:
            raise ValueError("a connection to one shard is read-only")
        any_done = (directory / "shards" / shard_name(shard) / "done.json").is_file()
    companion = directory / COMPANION
    others = [t for t in CONNECT_TABLES if t.name not in TRACE_TABLES]
    try:
        if read_only:
            con = duckdb.connect()
            if companion.exists():
                try:
                    con.execute(f"ATTACH {sql_literal(companion)} AS derived (READ_ONLY)")
                except duckdb.Error as exc:
                    con.close()
                    raise _open_error(companion, exc) from exc
                names = [n for (n,) in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = 'derived'"
                ).fetchall()]
                for name in names:
                    if name in TRACE_TABLES or name == "meta":
                        continue  # the trace's views are made below, meta here
                    con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM derived."{name}"')
            present = {n for (n,) in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND table_catalog = current_database()"
            ).fetchall()}
            for table in others:
                if table.name not in present:
                    con.execute(table.ddl())
        else:
            try:
                con, _ = _open_waiting(companion, False)
            except duckdb.Error as exc:
                raise _open_error(companion, exc) from exc
            for table in others:
                con.execute(table.ddl())
        for table in SHARD_TABLES:
            con.execute(_view_sql(directory, table, any_done, shard))
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
    except duckdb.Error as exc:
        raise StoreError(f"cannot open shard directory {directory}: {first_line(exc)}") from exc
    return con


# ---------------------------------------------------------------------- import
@dataclass
class ImportSummary:
    directory: str
    db: str
    shards: int = 0
    runs_in_shards: int = 0
    already_stored: int = 0
    imported: int = 0
    programs_added: int = 0
    seconds: float = 0.0

    def as_rows(self) -> list[tuple[str, object]]:
        return [("shard directory", self.directory), ("db", self.db),
                ("shards done", self.shards), ("runs in shards", self.runs_in_shards),
                ("already stored (skipped)", self.already_stored),
                ("runs imported", self.imported), ("programs added", self.programs_added),
                ("seconds", f"{self.seconds:.2f}")]


def _select(table: Table, replace: dict[str, str]) -> str:
    return ", ".join(replace.get(c.name, f"s.{c.name}") for c in table.columns)


def import_shards(directory: str | Path, db: str | Path, force: bool = False) -> ImportSummary:
    """Copy the finished shards of ``directory`` into the store ``db`` in one transaction
    (see the module doc)."""
    from steptrace.store._store import (DERIVED_RUN_TABLES, RUN_DETAIL_TABLES, connect,
                                        first_line)
    from steptrace.store._transaction import transaction
    started = time.perf_counter()
    directory = Path(directory).resolve()
    plan = read_plan(directory)  # refuses a directory that is not a shard directory
    check_path(directory)
    check_shard_files(directory)
    if is_shard_directory(db):  # its trace tables are views: nothing can be inserted
        raise StoreError(f"{db} is a shard directory: import into a store (--db FILE)")
    summary = ImportSummary(str(directory), str(db))
    summary.shards = sum(1 for _ in (directory / "shards").glob("*/done.json"))
    if not summary.shards:
        raise StoreError(f"{directory} has no finished shard to import")
    con = connect(db)
    try:
        src = {t.name: f"src_{t.name}" for t in SHARD_TABLES}
        for table in SHARD_TABLES:
            con.execute(_view_sql(directory, table, True).replace(
                f'VIEW "{table.name}"', f'TEMP VIEW "{src[table.name]}"'))
        summary.runs_in_shards = con.execute("SELECT count(*) FROM src_runs").fetchall()[0][0]
        with transaction(con):
            # ids before --force deletes anything: a run imported again keeps its id
            _map_runs(con, plan.runs, force)
            summary.imported = con.execute("SELECT count(*) FROM run_map").fetchall()[0][0]
            summary.already_stored = summary.runs_in_shards - summary.imported
            if force:
                present = {n for (n,) in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = "
                    "current_database()").fetchall()}
                for name in RUN_DETAIL_TABLES + tuple(t for t in DERIVED_RUN_TABLES
                                                      if t in present):
                    con.execute(f"DELETE FROM {name} WHERE run_id IN (SELECT run_id FROM runs "
                                "WHERE run_key IN (SELECT run_key FROM src_runs))")
                con.execute("DELETE FROM runs WHERE run_key IN (SELECT run_key FROM src_runs)")
            old_ids, new_ids, added = _map_programs(con)
            if len(set(old_ids)) != len(old_ids):
                raise StoreError(f"{directory}: two programs share an id (a key collision); "
                                 "trace them into a store instead")
            fresh = set(added)
            con.register("program_map", pa.table({"old_id": arrow_array(old_ids, pa.int64()),
                                                  "new_id": arrow_array(new_ids, pa.int64()),
                                                  "added": [o in fresh for o in old_ids]}))
            summary.programs_added = len(added)
            con.execute(f"INSERT INTO programs SELECT {_select(PROGRAMS, {'program_id': 'm.new_id'})} "
                        "FROM src_programs s JOIN program_map m ON s.program_id = m.old_id "
                        "WHERE m.added")
            con.execute(f"INSERT INTO runs SELECT "
                        f"{_select(RUNS, {'run_id': 'r.new_id', 'program_id': 'm.new_id'})} "
                        "FROM src_runs s JOIN run_map r ON s.run_id = r.old_id "
                        "JOIN program_map m ON s.program_id = m.old_id ORDER BY r.new_id")
            for table in SHARD_TABLES:
                if table.name in ("runs", "programs", "guests"):
                    continue
                con.execute(f"INSERT INTO {table.name} SELECT "
                            f"{_select(table, {'run_id': 'r.new_id'})} FROM src_{table.name} s "
                            "JOIN run_map r ON s.run_id = r.old_id ORDER BY r.new_id, s.rowid")
            con.execute("INSERT INTO guests SELECT * FROM src_guests ON CONFLICT DO NOTHING")
            con.unregister("program_map")
    except duckdb.Error as exc:
        raise StoreError(f"cannot import {directory} into {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _map_runs(con: duckdb.DuckDBPyConnection, planned: int, force: bool) -> None:
    """``run_map`` (old_id: the shard's run id, new_id: the store's) of the runs to import:
    those the store lacks, and with ``force`` also those it holds (which keep their ids).
    A shard's run id is the job's place in the plan's corpus order, so the store's ids are
    those ``trace --db`` gives the same corpora (engine/store/_ids.py): ``base + place``,
    or, when the stored runs of the directory do not sit in one free block, the stored
    keep theirs and the rest follow the store's highest id in plan order. ``planned``:
    the plan's runs (the block's size, finished shards or not)."""
    stored, distinct, low, high = con.execute(
        "SELECT count(*), count(DISTINCT r.run_id - s.run_id), min(r.run_id - s.run_id), "
        "max(r.run_id - s.run_id) FROM src_runs s JOIN runs r USING (run_key)").fetchall()[0]
    offsets = {low} if distinct == 1 else {low, high} if distinct else set()
    base = block_base(offsets, stored, planned, top_id(con, "runs", "run_id"),
                      held_between(con, "runs", "run_id"))
    wanted = "" if force else "WHERE r.run_id IS NULL"
    if base is not None:
        new_id = f"{int(base)} + s.run_id"
    else:
        top = top_id(con, "runs", "run_id")
        new_id = (f"coalesce(r.run_id, {int(top)} + row_number() OVER (PARTITION BY "
                  "r.run_id IS NULL ORDER BY s.run_id))")
    con.execute(f"CREATE TEMP TABLE run_map AS SELECT s.run_id AS old_id, {new_id} AS new_id "
                f"FROM src_runs s LEFT JOIN runs r USING (run_key) {wanted}")


def _map_programs(con: duckdb.DuckDBPyConnection) -> tuple[list[int], list[int], list[int]]:
    """(shard program ids, store program ids, the shard ids of the programs to add) of the
    programs of ``run_map``'s runs: each program's id by engine/store/_ids.py's rule, its
    place in the order of the directory's first run of it (so a directory imported into
    a new store numbers its programs as ``trace --db`` does)."""
    order = con.execute("SELECT p.program_id, p.program_key, min(s.run_id) AS first "
                        "FROM src_programs p JOIN src_runs s USING (program_id) "
                        "GROUP BY ALL ORDER BY first").fetchall()
    keys = {key: old_id for old_id, key, _ in order}
    stored = stored_ids(con, "programs", "program_key", "program_id", keys)
    ids = place(dict.fromkeys(keys), stored, top_id(con, "programs", "program_id"),
                held_between(con, "programs", "program_id"))
    wanted = {old_id for (old_id,) in con.execute(
        "SELECT DISTINCT s.program_id FROM src_runs s JOIN run_map m ON s.run_id = m.old_id"
    ).fetchall()}
    old_ids = [old_id for old_id, _, _ in order if old_id in wanted]
    by_old = {old_id: key for key, old_id in keys.items()}
    new_ids = [ids[by_old[old_id]] for old_id in old_ids]
    added = [old_id for old_id in old_ids if by_old[old_id] not in stored]
    return old_ids, new_ids, added
