"""``--where CONDITION``: which runs a condition on their run, program and metadata selects.

``steptrace tasks --where`` and ``steptrace score --where`` keep the runs (and the tasks of
the runs) a condition selects, e.g. ``--where "meta.release_date >= '2025-01-01'"`` (a
time window, LiveCodeBench's defence against contamination). The condition is a DuckDB
SQL expression over one row per run with

* every column of ``runs`` (``run_id``, ``sample_id``, ``status``, ``input``, ...),
* the program's ``source``, ``code``, ``entry``, ``code_sha256``, ``program_key``,
  ``shape`` and ``test``,
* ``meta``: the program's metadata (``programs.meta``, steptrace.corpus._meta) as a
  STRUCT with one VARCHAR field per metadata key of the store (and per ``meta.KEY`` the
  condition names; only those when the store has more than ``MAX_META_FIELDS`` keys): a string value as it is, any other value as its JSON text
  (``meta.difficulty`` of ``3`` is ``'3'``: cast it, ``meta.difficulty::INT >= 3``). A key
  a program lacks is NULL there, so a comparison with it selects nothing. DuckDB's field
  names ignore case: of two keys that differ only in case the first (in sorted order)
  is the field. ``meta_json`` is the metadata's JSON text itself.

A hostile condition cannot reach the store: the rows are copied into a private
in-memory database, which then forbids every file access (``enable_external_access``
off, the configuration locked), and the condition is run there inside the one
``SELECT``; it must leave a single SELECT statement (``1; DROP TABLE runs`` is refused).
A condition that does not run is an InputError of one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa

from steptrace.corpus._meta import meta_values
from steptrace.errors import InputError
from steptrace.store._arrow import arrow_array

# ``meta.KEY`` or ``meta."KEY"`` in a condition: the key is a field of ``meta`` even when
# no program has it (then NULL everywhere, not an unknown field).
_META_REFERENCE = re.compile(r'\bmeta\s*\.\s*(?:"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_]*))',
                             re.IGNORECASE)
MAX_WHERE_CHARS = 10_000
# a store with more distinct metadata keys gives ``meta`` only the fields the condition names
MAX_META_FIELDS = 1_000


class WhereError(InputError):
    """A ``--where`` condition that cannot select runs."""


def select_runs(db: str | Path, where: str) -> list[int]:
    """The ids of the runs of store ``db`` that ``where`` selects, in order (see the
    module docstring). WhereError (one line) for a condition that does not run."""
    from steptrace.store._store import connect
    where = _checked(where)
    con = connect(db, read_only=True)
    try:
        return select_runs_of(con, where, db)
    finally:
        con.close()


def select_runs_of(con: duckdb.DuckDBPyConnection, where: str, db: str | Path) -> list[int]:
    """``select_runs`` over an open connection (a shard's, for its tasks)."""
    from steptrace.store._store import first_line
    where = _checked(where)
    try:
        relation = con.sql(_rows_sql(con))
        rows = (getattr(relation, "to_arrow_table", None) or relation.arrow)()
    except duckdb.Error as exc:
        raise WhereError(f"cannot read the runs of {db}: {first_line(exc)}") from exc
    return _evaluate(rows, where)


def _checked(where: str) -> str:
    if not isinstance(where, str) or not where.strip():
        raise WhereError("--where needs a condition, e.g. \"meta.release_date >= '2025-01-01'\"")
    if len(where) > MAX_WHERE_CHARS:
        raise WhereError(f"--where condition is {len(where):,} characters; at most "
                         f"{MAX_WHERE_CHARS:,}")
    return where


def _rows_sql(con: duckdb.DuckDBPyConnection) -> str:
    columns = {name for (name,) in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
        "AND table_name = 'programs'").fetchall()}
    program = [name for name in ("source", "code", "entry", "code_sha256", "program_key",
                                 "shape", "test") if name in columns]
    meta = "p.meta" if "meta" in columns else "CAST(NULL AS VARCHAR)"
    picked = "".join(f", p.{name}" for name in program)
    return (f"SELECT r.*{picked}, {meta} AS meta_json FROM runs r "
            "JOIN programs p USING (program_id) ORDER BY r.run_id")


def _meta_keys(texts: list[str | None], where: str) -> list[str]:
    """The struct's fields: the store's keys and the condition's, one per case-folded
    name (DuckDB's field names ignore case), sorted."""
    keys: set[str] = set()
    for text in texts:
        keys.update(meta_values(text))
    if len(keys) > MAX_META_FIELDS:  # only the keys the condition names
        keys = set()
    for quoted, plain in _META_REFERENCE.findall(where):
        keys.add(quoted.replace('""', '"') if quoted else plain)
    chosen: dict[str, str] = {}
    for key in sorted(keys):
        if key:
            chosen.setdefault(key.casefold(), key)
    return sorted(chosen.values())


def meta_column(texts: list[str | None], where: str) -> pa.Array:
    """The ``meta`` column of rows whose metadata JSON texts are ``texts``: a STRUCT of
    VARCHAR fields (see the module docstring), or NULL VARCHARs when there is no key."""
    keys = _meta_keys(texts, where)
    if not keys:
        return pa.nulls(len(texts), pa.string())
    values = [meta_values(text) for text in texts]
    return pa.StructArray.from_arrays(
        [arrow_array([v.get(key) for v in values], pa.string()) for key in keys], names=keys)


def run_meta(con: duckdb.DuckDBPyConnection, where: str) -> pa.Table:
    """``(run_id, meta)`` of every run of the store ``con`` reads, ``meta`` as a condition
    reads it (for a query over the store itself: ``steptrace filter --where``)."""
    relation = con.sql(_rows_sql(con))
    rows = (getattr(relation, "to_arrow_table", None) or relation.arrow)()
    return pa.table({"run_id": rows.column("run_id"),
                     "meta": meta_column(rows.column("meta_json").to_pylist(), where)})


def _evaluate(rows: pa.Table, where: str) -> list[int]:
    rows = rows.append_column("meta", meta_column(rows.column("meta_json").to_pylist(), where))
    sql = f"SELECT run_id FROM candidates WHERE ({where}) ORDER BY run_id"
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise WhereError(f"bad --where condition: {_line(exc)}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise WhereError("bad --where condition: it must be one SQL expression (no ';', "
                         "no other statement)")
    with duckdb.connect() as con:
        con.register("incoming", rows)
        con.execute("CREATE TABLE candidates AS SELECT * FROM incoming")
        con.unregister("incoming")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        try:
            return [run_id for (run_id,) in con.execute(sql).fetchall()]
        except duckdb.Error as exc:
            raise WhereError(f"bad --where condition: {_line(exc)}") from None


def _line(exc: BaseException) -> str:
    from steptrace.store._store import first_line
    return first_line(exc)


def select_tasks(db: str | Path, tasks: dict[str, dict], where: str) -> dict[str, dict]:
    """The tasks (by task id, as scoring reads them) of the runs of ``db`` that ``where``
    selects; WhereError when it selects none of them."""
    selected = set(select_runs(db, where))
    kept = {task_id: task for task_id, task in tasks.items() if task.get("run_id") in selected}
    if not kept:
        raise WhereError(f"no task is of a run of {db} that meets --where")
    return kept
