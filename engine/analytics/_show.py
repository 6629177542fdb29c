"""One run, step by step: the program, each step's line, the variables that changed, and
the attributes of objects and the globals that changed (schema 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from steptrace.corpus._formats import source_lines
from steptrace.store._store import StoreError, connect, first_line, has_table, shape_columns
from steptrace.errors import InputError


@dataclass
class StepView:
    step: int
    event: str
    func: str
    line: int
    depth: int
    frame: int
    source: str
    changes: list[tuple[str, str | None, str | None, bool]] = field(default_factory=list)
    # the object id of each change's value (None: not a tracked object), in their order
    object_ids: list[int | None] = field(default_factory=list)
    # (object id, attribute, value, type, truncated, ref id) and (name, value, type,
    # truncated, object id): the attributes and globals that changed at this step
    attributes: list[tuple] = field(default_factory=list)
    globals: list[tuple] = field(default_factory=list)

    def changes_text(self) -> str:
        """``name=value`` per changed local, ``#3.attr=value`` per changed attribute of
        object 3, ``global name=value`` per changed global."""
        def shown(value, truncated) -> str:
            return ("<unbound>" if value is None else value) + ("…" if truncated else "")
        parts = [f"{name}={shown(value, truncated)}"
                 for name, value, _type, truncated in self.changes]
        parts += [f"#{oid}.{attr}={shown(value, truncated)}"
                  for oid, attr, value, _type, truncated, _ref in self.attributes]
        parts += [f"global {name}={shown(value, truncated)}"
                  for name, value, _type, truncated, _oid in self.globals]
        return ", ".join(parts)


@dataclass
class RunView:
    run: dict
    code: str
    steps: list[StepView]


def find_run_id(con, run_id: int | None, sample_id: str | None, input_index: int) -> int:
    """The run asked for; for a sample id, its most recent run (the newest trace)."""
    if run_id is not None:
        found = con.execute("SELECT run_id FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if found is None:
            raise StoreError(f"no run with run_id {run_id}")
        return run_id
    found = con.execute("SELECT run_id FROM runs WHERE sample_id = ? AND input_index = ? "
                        "ORDER BY run_id DESC LIMIT 1", [sample_id, input_index]).fetchone()
    if found is None:
        raise StoreError(f"no run for sample_id {sample_id!r} (input {input_index})")
    return found[0]


def load_run(db: str | Path, run_id: int | None = None, sample_id: str | None = None,
             input_index: int = 0) -> RunView:
    """Read a run, its program, steps and state deltas from the store."""
    if run_id is None and sample_id is None:
        raise InputError("give a run id or a sample id")
    con = connect(db, read_only=True)
    try:
        return _read_run(con, run_id, sample_id, input_index)
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()


def run_rows(con, rid: int) -> tuple[dict, list, list, list, list, list]:
    """Run ``rid`` as stored: its runs row with the program's code, entry, source and
    shape columns, and its steps, states, objects, attributes and global_states rows in
    step order (``show`` and the viewer read a run through this)."""
    cursor = con.execute(f"SELECT r.*, p.code, p.entry, p.source, {shape_columns(con)} "
                         "FROM runs r JOIN programs p USING (program_id) WHERE run_id = ?",
                         [rid])
    names = [d[0] for d in cursor.description]
    run = dict(zip(names, cursor.fetchone()))
    steps = con.execute("SELECT step, event, func, line, depth, frame FROM steps "
                        "WHERE run_id = ? ORDER BY step", [rid]).fetchall()
    object_id = "object_id" if _has_column(con, "states", "object_id") else "NULL"
    states = con.execute(f"SELECT step, var, value, type, truncated, {object_id} FROM states "
                         "WHERE run_id = ? ORDER BY step, rowid", [rid]).fetchall()
    objects = attributes = globals_ = []
    if has_table(con, "attributes"):  # a store before schema 4 has none of these
        objects = con.execute("SELECT object_id, type, step FROM objects WHERE run_id = ? "
                              "ORDER BY object_id", [rid]).fetchall()
        attributes = con.execute("SELECT step, object_id, attr, value, type, truncated, ref_id "
                                 "FROM attributes WHERE run_id = ? ORDER BY step, rowid",
                                 [rid]).fetchall()
        globals_ = con.execute("SELECT step, name, value, type, truncated, object_id "
                               "FROM global_states WHERE run_id = ? ORDER BY step, rowid",
                               [rid]).fetchall()
    return run, steps, states, objects, attributes, globals_


def _read_run(con, run_id: int | None, sample_id: str | None, input_index: int) -> RunView:
    run, steps, states, _, attributes, globals_ = run_rows(
        con, find_run_id(con, run_id, sample_id, input_index))
    code = run.pop("code")
    lines = source_lines(code)
    views = {s[0]: StepView(*s, source=lines[s[3] - 1].strip() if 0 < s[3] <= len(lines) else "")
             for s in steps}
    for step, var, value, type_, truncated, oid in states:
        views[step].changes.append((var, value, type_, truncated))
        views[step].object_ids.append(oid)
    for step, *row in attributes:
        views[step].attributes.append(tuple(row))
    for step, *row in globals_:
        views[step].globals.append(tuple(row))
    return RunView(run, code, [views[k] for k in sorted(views)])


def _has_column(con, table: str, column: str) -> bool:
    return con.execute("SELECT count(*) FROM information_schema.columns WHERE "
                       "table_schema = 'main' AND table_name = ? AND column_name = ?",
                       [table, column]).fetchall()[0][0] > 0
