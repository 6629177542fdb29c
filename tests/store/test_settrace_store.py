"""The settrace view in a real store (docs/guides/runs.md, "The settrace view"): the
``settrace_lines`` rows and ``runs.settrace_line_steps`` a trace writes, read back as the
``Run`` record ``trace_one`` makes, replaced by ``--force``, and a store of schema 6
(no view) read as it is and upgraded in place."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

import steptrace
from steptrace.store._reader import open_store
from steptrace.store._runs import SettraceLine, Step
from steptrace.store._store import SCHEMA_VERSION, connect
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.programs import ONE_LINE_LOOPS_AND_ANY

VIEW = ONE_LINE_LOOPS_AND_ANY
PLAIN = "def f(x):\n    y = x + 1\n    return y\n"
RECORDS = [{"id": "view", "code": VIEW, "input": "[1, 2, 3]"},
           {"id": "plain", "code": PLAIN, "input": "1"}]
GENEXPR = "f.<locals>.<genexpr>"
# (step it follows, func, line, depth, frame): the comprehension's and the one-line loop's
# jumps back to their lines, three each, and the generator expression's after each resume
VIEW_ROWS = [(1, 1, "f", 2, 0, 0), (1, 1, "f", 2, 0, 0), (1, 1, "f", 2, 0, 0),
             (1, 3, "f", 4, 0, 0), (1, 3, "f", 4, 0, 0), (1, 3, "f", 4, 0, 0),
             (1, 8, GENEXPR, 5, 1, 1), (1, 10, GENEXPR, 5, 1, 1), (1, 12, GENEXPR, 5, 1, 1)]


def trace(tmp_path: Path, name: str = "view.duckdb", force: bool = False,
          records: list[dict] = RECORDS) -> Path:
    corpus = tmp_path / f"{name}.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = tmp_path / name
    trace_corpus(corpus, db, TraceOptions(workers=0, force=force))
    return db


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_a_trace_stores_the_view_and_reads_it_back_as_trace_one_makes_it(tmp_path):
    db = trace(tmp_path)
    assert rows(db, "SELECT run_id, line_steps, settrace_line_steps FROM runs ORDER BY run_id"
                ) == [(1, 6, 15), (2, 2, 2)]
    assert rows(db, "SELECT run_id, step, func, line, depth, frame FROM settrace_lines "
                    "ORDER BY run_id, step, rowid") == VIEW_ROWS
    with open_store(db) as store:
        run = store.run(1)
    assert run == steptrace.trace_one(VIEW, "[1, 2, 3]")
    assert run.settrace_line_steps == 15
    assert run.settrace_lines == tuple(SettraceLine(*row[1:]) for row in VIEW_ROWS)
    lines = [(s.func, s.line, s.depth) for s in run.settrace_steps() if s.event == "line"]
    assert lines == ([("f", 2, 0)] * 4 + [("f", 3, 0)] + [("f", 4, 0)] * 4 + [("f", 5, 0)]
                     + [(GENEXPR, 5, 1)] * 4 + [("f", 6, 0)])
    assert run.settrace_steps()[:4] == (
        Step(0, "call", "f", 1, 0, 0), Step(1, "line", "f", 2, 0, 0),
        Step(1, "line", "f", 2, 0, 0), Step(1, "line", "f", 2, 0, 0))
    with open_store(db) as store:
        plain = store.run(2)
    assert (plain.settrace_lines, plain.settrace_line_steps) == ((), 2)
    assert plain.settrace_steps() == plain.steps


def test_force_replaces_the_view_rows_with_the_run(tmp_path):
    """The retraced run keeps its id (its place in the corpus) and its view rows are the
    new run's alone: none of the old ones are left beside them."""
    db = trace(tmp_path)
    trace(tmp_path, force=True)
    assert rows(db, "SELECT run_id, step, func, line, depth, frame FROM settrace_lines "
                    "ORDER BY run_id, step, rowid") == VIEW_ROWS


def test_a_schema_6_store_reads_without_a_view_and_is_upgraded_in_place(tmp_path):
    """A store made before schema 7 (no settrace_lines, no runs.settrace_line_steps,
    runs.backend or runs.python) reads read-only as it is (no view: None and none; its runs
    WASI's); the first write adds the table and the columns (NULL for its runs, backend
    `wasi`) and sets version 7; new runs get their view."""
    db = trace(tmp_path)
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE settrace_lines")
        for column in ("python", "backend", "settrace_line_steps"):
            con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    with open_store(db) as store:
        run = store.run(1)
    assert (run.settrace_line_steps, run.settrace_lines) == (None, ())
    assert run.line_steps == 6
    connect(db).close()
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [
        (SCHEMA_VERSION,)] == [("7",)]
    assert rows(db, "SELECT run_id, settrace_line_steps, backend, python FROM runs "
                    "ORDER BY run_id") == [(1, None, "wasi", None), (2, None, "wasi", None)]
    assert rows(db, "SELECT count(*) FROM settrace_lines") == [(0,)]
    trace(tmp_path, records=[{"id": "more", "code": VIEW, "input": "[4]"}])
    # one item: 6 line steps, and one jump back each for the comprehension, the one-line
    # loop and the generator expression (to find them finished)
    assert rows(db, "SELECT run_id, settrace_line_steps, backend, python FROM runs "
                    "ORDER BY run_id") == [(1, None, "wasi", None), (2, None, "wasi", None),
                                           (3, 9, "wasi", "3.14.0")]
    assert rows(db, "SELECT run_id, step, line FROM settrace_lines ORDER BY step, rowid") == [
        (3, 1, 2), (3, 3, 4), (3, 8, 5)]
