"""The part of a store a report is about: ``report --model``, ``--label``, ``--kinds`` and
``--where``.

The report's queries run unchanged on one read-only connection whose ``runs``, ``tasks``,
``predictions`` and ``scores`` are temporary views of the store's tables restricted to
the filter (DuckDB finds a temporary view before the table of the same name), so every
section, its table and the numbers ``steptrace score`` would give for the same selection
agree: runs by the runs ``--where`` selects (store/_where.py), programs by those runs,
tasks by their runs and kinds, predictions and scores by their tasks, models and labels.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from steptrace.errors import InputError
from steptrace.store._arrow import arrow_array
from steptrace.store._store import connect


@dataclass(frozen=True)
class ReportFilter:
    """What a report keeps; empty tuples and None keep everything."""

    models: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    where: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.models or self.labels or self.kinds or self.where is not None)

    def describe(self) -> str:
        """The filter as the page states it, e.g. ``model model-a; kinds output, input``."""
        parts = [f"{name} {', '.join(values)}" for name, values in
                 (("model", self.models), ("label", self.labels), ("kinds", self.kinds))
                 if values]
        if self.where is not None:
            parts.append(f"where {self.where}")
        return "; ".join(parts)


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {name for (name,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND NOT temporary"
    ).fetchall()}


@contextmanager
def open_filtered(db: str | Path, selection: ReportFilter) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to ``db`` whose tables are restricted to ``selection``."""
    if selection.kinds:
        from steptrace.tasks._kinds import parse_kinds
        # an unknown kind is a one-line error; "all" is every kind
        selection = replace(selection, kinds=parse_kinds(selection.kinds))
    runs = None
    if selection.where is not None:
        from steptrace.store._where import select_runs
        runs = select_runs(db, selection.where)
    con = connect(db, read_only=True)
    try:
        catalog = con.execute("SELECT current_database()").fetchall()[0][0]
        source = f'"{catalog.replace(chr(34), chr(34) * 2)}".main'
        present = _tables(con)
        if not selection.empty:
            _views(con, source, present, selection, runs)
        yield con
    finally:
        con.close()


def _views(con: duckdb.DuckDBPyConnection, source: str, present: set[str],
           selection: ReportFilter, runs: list[int] | None) -> None:
    conditions: dict[str, list[str]] = {"runs": [], "programs": [], "tasks": [],
                                        "predictions": [], "scores": []}
    if runs is not None:
        con.register("report_runs", pa.table({"run_id": arrow_array(runs, pa.int64())}))
        conditions["runs"].append("run_id IN (SELECT run_id FROM report_runs)")
        conditions["programs"].append("program_id IN (SELECT program_id FROM runs)")
        conditions["tasks"].append("run_id IN (SELECT run_id FROM report_runs)")
    if selection.kinds:
        con.register("report_kinds", pa.table({"kind": list(selection.kinds)}))
        conditions["tasks"].append("kind IN (SELECT kind FROM report_kinds)")
    for column, values in (("model", selection.models), ("label", selection.labels)):
        if values:
            con.register(f"report_{column}s", pa.table({column: list(values)}))
            for table in ("predictions", "scores"):
                conditions[table].append(f"{column} IN (SELECT {column} FROM report_{column}s)")
    if conditions["tasks"] and "tasks" in present:
        for table in ("predictions", "scores"):
            conditions[table].append("task_id IN (SELECT task_id FROM tasks)")
    for table, where in conditions.items():
        if where and table in present:
            try:
                con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM {source}.{table} "
                            f"WHERE {' AND '.join(where)}")
            except duckdb.Error as exc:  # the store's own tables: not the user's text
                raise InputError(f"cannot filter {table}: {str(exc).splitlines()[0]}") from None
