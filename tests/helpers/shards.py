"""Comparing a shard directory (steptrace trace --out) with a store traced by trace --db.

Every table the trace writes is compared row by row, each run's rows identified by its run
key rather than its run id, programs by their program key: both number runs by their
place in the corpus, but a shard directory's program ids are derived from the program
keys (docs/guides/shards.md), and a store may hold other corpora's runs first. Columns that measure time (``duration_us``, ``call_us``,
``traced_at``, ``first_used``) differ between any two traces and are left out.
"""

from __future__ import annotations

from pathlib import Path

from steptrace.store._store import connect
from steptrace.store._tables import (ATTRIBUTES, GLOBAL_STATES, OBJECTS, PROGRAMS, RUNS,
                                     SETTRACE_LINES, STATES, STEPS)

TIMING = {"duration_us", "call_us", "traced_at", "first_used"}
IDS = {"run_id", "program_id"}
DETAIL_TABLES = (STEPS, STATES, OBJECTS, ATTRIBUTES, GLOBAL_STATES, SETTRACE_LINES)


def _columns(table, leave_out: set[str]) -> list[str]:
    return [c.name for c in table.columns if c.name not in leave_out]


def trace_tables(db: str | Path) -> dict[str, list[tuple]]:
    """Every trace table of a store or shard directory, ids and timings left out, sorted:
    runs and their detail rows keyed by run key, programs by program key. Rows of a run
    within a step keep their order (``rowid``)."""
    con = connect(db, read_only=True)
    try:
        out: dict[str, list[tuple]] = {}
        cols = _columns(PROGRAMS, IDS)
        out["programs"] = sorted(con.execute(f"SELECT {', '.join(cols)} FROM programs").fetchall())
        cols = _columns(RUNS, IDS | TIMING)
        out["runs"] = sorted(con.execute(
            f"SELECT p.program_key, {', '.join('r.' + c for c in cols)} FROM runs r "
            "JOIN programs p USING (program_id)").fetchall())
        for table in DETAIL_TABLES:
            cols = _columns(table, IDS | TIMING)
            rows = con.execute(
                f"SELECT r.run_key, {', '.join('t.' + c for c in cols)} FROM {table.name} t "
                "JOIN runs r USING (run_id) ORDER BY r.run_key, t.step, t.rowid").fetchall()
            out[table.name] = rows
        out["guests"] = sorted(con.execute("SELECT guest, lock FROM guests").fetchall())
        return out
    finally:
        con.close()


def assert_same_trace(store: str | Path, shards: str | Path) -> dict[str, int]:
    """The store and the shard directory hold the same runs, row for row; returns the row
    count of each table (so a test can say how much was compared)."""
    expected, got = trace_tables(store), trace_tables(shards)
    assert list(got) == list(expected)
    for name in expected:
        assert len(got[name]) == len(expected[name]), name
        for want, have in zip(expected[name], got[name]):
            assert have == want, (name, want, have)
    return {name: len(rows) for name, rows in expected.items()}
