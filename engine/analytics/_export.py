"""A store as Hive-partitioned Parquet, and a DuckDB connection that reads it back.

Layout of an export directory::

    DIR/steptrace_export.json               manifest, written last
    DIR/programs/data_0.parquet             tables without run_id: one file
    DIR/meta/data_0.parquet
    DIR/runs/run_bucket=0/data_0.parquet    tables with run_id: one folder per bucket
    DIR/steps/run_bucket=0/data_0.parquet   of ``runs_per_bucket`` consecutive run ids
    DIR/steps/run_bucket=1/data_0.parquet   (run_bucket = run_id // runs_per_bucket)
    ...

Why range buckets of run ids (default 10,000 runs) rather than ``run_id % 64``: run ids
are dense and increasing, so buckets fill evenly and the file count grows with the data
(1M runs: 100 folders a table, about 1M step rows a file at ~100 steps a run — a good
Parquet file size; a store of a few thousand runs: one folder, not 64 slivers). Every
run-keyed table (runs, steps, states, analyses, branches, tasks, ...) uses the same
buckets, so bucket k of each holds the same runs: any engine can process the export a
bucket at a time with bounded memory, a run's rows sit in one file of each table (row
group statistics on run_id prune the rest), and runs traced later land in new buckets
instead of touching every file. A modulo split would scatter every run range over all 64
files and rewrite all of them on each new export. Programs and other tables without
run_id are small and stay one file each.

The manifest lists the tables, their row counts and partitioning; it is written after
every table, so an interrupted export is not mistaken for a complete one. ``open_parquet``
creates a view per table, named as in the store and with the store's columns (the
partition column left out), so the named queries run over Parquet unchanged.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb

from steptrace.store._store import StoreError, connect, first_line
from steptrace.errors import InputError
from steptrace.corpus._text import user_file
from steptrace.analytics._defaults import DEFAULT_RUNS_PER_BUCKET

MANIFEST = "steptrace_export.json"
FORMAT = "steptrace-parquet"
FORMAT_VERSION = 1
BUCKET_COLUMN = "run_bucket"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ExportedTable:
    name: str
    rows: int
    files: int
    partition_by: str | None


@dataclass
class ExportSummary:
    directory: str
    runs_per_bucket: int
    schema_version: str | None = None
    tables: list[ExportedTable] = field(default_factory=list)
    seconds: float = 0.0

    def as_rows(self) -> list[tuple]:
        return [(t.name, t.rows, t.files, t.partition_by or "-") for t in self.tables]

    def manifest(self) -> dict:
        return {"format": FORMAT, "version": FORMAT_VERSION,
                "schema_version": self.schema_version, "runs_per_bucket": self.runs_per_bucket,
                "tables": [asdict(t) for t in self.tables]}


def sql_literal(text: str | Path) -> str:
    """A SQL string literal (COPY and read_parquet take paths only as literals)."""
    return "'" + str(text).replace("'", "''") + "'"


def _store_tables(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Every table and view of the store's main schema with its columns, in order."""
    tables: dict[str, list[str]] = {}
    for table, column in con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall():
        if column == "rowid":  # a shard directory's views carry the rowid a store has unlisted
            continue
        tables.setdefault(table, []).append(column)
    for name in tables:
        if not _IDENTIFIER.match(name):
            raise InputError(f"cannot export table {name!r}: not a plain identifier")
    return tables


def _prepare_directory(directory: Path, force: bool) -> None:
    """Refuse a non-empty directory unless ``force``; with it, remove an earlier export's
    table folders and manifest (the store's table names too) and nothing else."""
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory} exists and is not a directory")
    if directory.exists() and any(directory.iterdir()):
        if not force:
            raise InputError(f"{directory} is not empty: use --force to replace an export there")
        return
    if not directory.parent.exists():
        raise InputError(f"cannot export to {directory}: directory {directory.parent} "
                         "does not exist")
    directory.mkdir(exist_ok=True)


def _clear(directory: Path, names: set[str]) -> None:
    manifest = directory / MANIFEST
    if manifest.exists():
        try:
            names |= {t["name"] for t in json.loads(manifest.read_text())["tables"]}
        except (ValueError, KeyError, TypeError):
            pass  # not ours after all: remove only what this export writes
        manifest.unlink()
    for name in names:
        target = directory / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()


def row_order(name: str, columns: list[str]) -> str:
    """The order a table's rows are written in, so that two stores holding the same rows
    give the same files, whatever order their rows were inserted in (a trace commits
    runs as they finish): a declared table's primary key; else, for a declared run-keyed
    table (steps, states, ...), the run and the order its rows were stored in (``rowid``:
    a run's rows go in together, in the guest's order; a shard directory's views carry
    it); else (a table or view of the user's) every column."""
    from steptrace.store._tables import table
    try:
        declared = table(name)
    except KeyError:
        return "ALL"
    if declared.primary_key:
        return ", ".join('"' + column + '"' for column in declared.primary_key)
    return "run_id, rowid" if "run_id" in columns else "ALL"


def _copy_table(con: duckdb.DuckDBPyConnection, name: str, columns: list[str],
                target: Path, runs_per_bucket: int) -> ExportedTable:
    """One table to Parquet, its rows in ``row_order``; a run-keyed table partitioned by
    run bucket. An empty partitioned table still gets one (empty) file in bucket 0, so
    it keeps its columns."""
    quoted = '"' + name + '"'
    listed = ", ".join('"' + column + '"' for column in columns)
    ordered = f"ORDER BY {row_order(name, columns)}"
    rows = con.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0]
    partitioned = "run_id" in columns and BUCKET_COLUMN not in columns
    if not partitioned:
        target.mkdir()
        con.execute(f"COPY (SELECT {listed} FROM {quoted} {ordered}) TO "
                    f"{sql_literal(target / 'data_0.parquet')} (FORMAT PARQUET)")
    elif rows == 0:
        bucket = target / f"{BUCKET_COLUMN}=0"
        bucket.mkdir(parents=True)
        con.execute(f"COPY (SELECT {listed} FROM {quoted}) TO {sql_literal(bucket / 'data_0.parquet')} "
                    "(FORMAT PARQUET)")
    else:
        con.execute(f"COPY (SELECT {listed}, run_id // {int(runs_per_bucket)} AS {BUCKET_COLUMN} "
                    f"FROM {quoted} {ordered}) TO {sql_literal(target)} "
                    f"(FORMAT PARQUET, PARTITION_BY ({BUCKET_COLUMN}))")
    files = sum(1 for _ in target.rglob("*.parquet"))
    return ExportedTable(name, rows, files, BUCKET_COLUMN if partitioned else None)


def export_parquet(db: str | Path, directory: str | Path, force: bool = False,
                   runs_per_bucket: int = DEFAULT_RUNS_PER_BUCKET) -> ExportSummary:
    """Write every table of the store ``db`` under ``directory`` (see the module doc)."""
    if runs_per_bucket < 1:
        raise InputError("runs per bucket must be at least 1")
    started = time.perf_counter()
    directory = Path(directory)
    con = connect(db, read_only=True)
    try:
        tables = _store_tables(con)
        with user_file(directory):
            _prepare_directory(directory, force)
            _clear(directory, set(tables))
        summary = ExportSummary(str(directory), runs_per_bucket)
        if "meta" in tables:
            found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            summary.schema_version = found[0] if found else None
        # the files hold each table's rows in row_order: the same rows give the same bytes
        con.execute("SET preserve_insertion_order = true")
        for name, columns in tables.items():
            with user_file(directory):
                summary.tables.append(_copy_table(con, name, columns, directory / name,
                                                  runs_per_bucket))
    except duckdb.Error as exc:
        raise StoreError(f"cannot export {db} to {directory}: {first_line(exc)}") from exc
    finally:
        con.close()
    with user_file(directory / MANIFEST):
        (directory / MANIFEST).write_text(json.dumps(summary.manifest(), indent=2) + "\n")
    summary.seconds = time.perf_counter() - started
    return summary


def read_manifest(directory: str | Path) -> dict:
    """The manifest of an export, or a one-line error saying why it is not one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise StoreError(f"Parquet directory not found: {directory}")
    path = directory / MANIFEST
    if not path.is_file():
        raise StoreError(f"{directory} is not a steptrace Parquet export (no {MANIFEST}; "
                         "write one with steptrace export)")
    try:
        manifest = json.loads(path.read_text())
        ok = manifest.get("format") == FORMAT and isinstance(manifest.get("tables"), list)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise StoreError(f"{path} is not a steptrace export manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise StoreError(f"{path} has export format version {manifest.get('version')}; "
                         f"this steptrace reads version {FORMAT_VERSION}")
    return manifest


def _view_sql(directory: Path, table: dict) -> str:
    name = table["name"]
    if not _IDENTIFIER.match(str(name)):
        raise StoreError(f"{directory / MANIFEST} names a bad table {name!r}")
    if table.get("partition_by") == BUCKET_COLUMN:
        files = sql_literal(directory / name / "**" / "*.parquet")
        return (f'CREATE VIEW "{name}" AS SELECT * EXCLUDE ({BUCKET_COLUMN}) '
                f"FROM read_parquet({files}, hive_partitioning = true)")
    files = sql_literal(directory / name / "*.parquet")
    return f'CREATE VIEW "{name}" AS SELECT * FROM read_parquet({files})'


def open_parquet(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per exported table, named as in the
    store, so SQL written for a store runs unchanged over the export."""
    directory = Path(directory).resolve()
    from steptrace.sharding._plan import is_shard_directory
    if is_shard_directory(directory):  # a sharded trace's directory reads as a store too
        from steptrace.sharding._store import open_shard_store
        return open_shard_store(directory, read_only=True)
    manifest = read_manifest(directory)
    con = duckdb.connect()
    try:
        for table in manifest["tables"]:
            con.execute(_view_sql(directory, table))
    except duckdb.Error as exc:
        con.close()
        raise StoreError(f"cannot read Parquet export {directory}: {first_line(exc)}") from exc
    return con
