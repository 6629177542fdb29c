"""Two stores of the same corpus compared table by table, ids included.

A run's id is its place in the corpus (engine/store/_ids.py), so two traces of a corpus
hold the same rows under the same ids; only the columns in ``VARYING`` may differ: they
measure one trace (wall and guest time, when it ran, when its guest was first used).
``runs.isolation`` also differs between a ``job`` and a ``batch`` trace
(``BETWEEN_ISOLATIONS``), and ``runs.guest`` between traces made by two builds of the guest
(another machine or toolchain: it is the build's key); neither differs here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from steptrace.store._tables import (ATTRIBUTES, GLOBAL_STATES, GUESTS, OBJECTS, PROGRAMS,
                                     RUNS, SETTRACE_LINES, STATES, STEPS)

VARYING = {"runs": {"duration_us", "call_us", "traced_at"}, "guests": {"first_used"}}
BETWEEN_ISOLATIONS = {"runs": {"isolation"}}
# every table a trace writes, and the order its rows are compared in
TRACE_TABLES = ((PROGRAMS, "program_id"), (RUNS, "run_id"), (STEPS, "run_id, step"),
                (STATES, "run_id, rowid"), (OBJECTS, "run_id, object_id"),
                (ATTRIBUTES, "run_id, rowid"), (GLOBAL_STATES, "run_id, rowid"),
                (SETTRACE_LINES, "run_id, step, rowid"), (GUESTS, "guest"))


def trace_rows(db: str | Path, leave_out: dict[str, set[str]] = VARYING
               ) -> dict[str, tuple[list[str], list[tuple]]]:
    """Each trace table's columns (less ``leave_out``'s) and rows, in id order."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        found = {}
        for table, order in TRACE_TABLES:
            columns = [c.name for c in table.columns
                       if c.name not in leave_out.get(table.name, set())]
            found[table.name] = (columns, con.execute(
                f"SELECT {', '.join(columns)} FROM {table.name} ORDER BY {order}").fetchall())
        return found
    finally:
        con.close()


def assert_identical(first: str | Path, second: str | Path,
                     leave_out: dict[str, set[str]] = VARYING) -> dict[str, int]:
    """The two stores hold the same trace rows under the same ids (``leave_out`` aside);
    the row count of each table."""
    a, b = trace_rows(first, leave_out), trace_rows(second, leave_out)
    for name, (columns, rows) in a.items():
        other = b[name][1]
        assert len(other) == len(rows), (name, len(rows), len(other))
        for want, have in zip(rows, other):
            assert have == want, (name, dict(zip(columns, want)), dict(zip(columns, have)))
    return {name: len(rows) for name, (_, rows) in a.items()}


def differing_columns(first: str | Path, second: str | Path) -> dict[str, list[str]]:
    """The columns of each trace table whose values differ between the stores (rows in
    id order)."""
    a, b = trace_rows(first, {}), trace_rows(second, {})
    found = {}
    for name, (columns, rows) in a.items():
        other = b[name][1]
        differ = [column for index, column in enumerate(columns)
                  if [row[index] for row in rows] != [row[index] for row in other]]
        if differ:
            found[name] = differ
    return found


def settled_copy(db: Path, target: Path) -> Path:
    """A copy of ``db`` whose ``VARYING`` columns hold fixed values: two traces' copies
    hold the same bytes' worth of rows, for comparing their exports byte for byte."""
    shutil.copyfile(db, target)
    con = duckdb.connect(str(target))
    try:
        con.execute("UPDATE runs SET duration_us = 0, call_us = 0, "
                    "traced_at = TIMESTAMP '2000-01-01'")
        con.execute("UPDATE guests SET first_used = TIMESTAMP '2000-01-01'")
    finally:
        con.close()
    return target
