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
    first: int = 0  # the steps shown: first .. first + len(steps) - 1 of run["n_steps"]

    @property
    def omitted(self) -> str | None:
        """The line saying which steps are shown when not all of them are, else None."""
        total = self.run.get("n_steps") or 0
        if not self.steps and not total:
            return None
        if self.first == 0 and len(self.steps) >= total:
            return None
        if not self.steps:
            return f"no steps from step {self.first:,} (the run has {total:,})"
        last = self.first + len(self.steps) - 1
        more = (f"; --steps {last + 1}: shows the next" if last + 1 < total else "")
        return f"steps {self.first:,} to {last:,} of {total:,} shown{more}"


@dataclass(frozen=True)
class StepRange:
    """The steps of a run to show: ``first`` up to, not including, ``stop`` (None: to the
    end), at most ``limit`` of them (None: all). ``show`` reads only these from the store:
    a run of 100,000 steps prints what was asked, not 100,000 lines."""

    first: int = 0
    stop: int | None = None
    limit: int | None = None

    @classmethod
    def parse(cls, text: str | None, limit: int | None) -> "StepRange":
        """``A:B`` (steps A to B-1, as a Python slice), ``A:`` or ``:B``; InputError else."""
        if text is None:
            return cls(0, None, limit)
        first, colon, stop = text.partition(":")
        try:
            low = int(first) if first.strip() else 0
            high = int(stop) if colon and stop.strip() else None
        except ValueError:
            low = -1
            high = None
        if not colon or low < 0 or (high is not None and high < low):
            raise InputError(f"--steps takes FIRST:STOP (steps FIRST to STOP-1; either may be "
                             f"left out), FIRST >= 0 and STOP >= FIRST, not {text!r}")
        return cls(low, high, limit)

    @property
    def last(self) -> int | None:
        """The last step to read (inclusive), None for no end."""
        ends = []
        if self.stop is not None:
            ends.append(self.stop - 1)
        if self.limit is not None:
            ends.append(self.first + self.limit - 1)
        return min(ends) if ends else None


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
             input_index: int = 0, steps: StepRange | None = None) -> RunView:
    """Read a run, its program, steps and state deltas from the store (the ``steps``
    asked for, default all)."""
    if run_id is None and sample_id is None:
        raise InputError("give a run id or a sample id")
    con = connect(db, read_only=True)
    try:
        return _read_run(con, run_id, sample_id, input_index, steps or StepRange())
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()


def run_rows(con, rid: int, steps: StepRange | None = None
             ) -> tuple[dict, list, list, list, list, list]:
    """Run ``rid`` as stored: its runs row with the program's code, entry, source and
    shape columns, and its steps, states, objects, attributes and global_states rows in
    step order (``show`` and the viewer read a run through this); of the ``steps`` asked
    for (default all: objects are all of them, whatever the range)."""
    if steps is None:
        steps = StepRange()
    first, last = steps.first, steps.last
    # the steps' condition, for every table keyed by (run_id, step)
    within = "run_id = ? AND step >= ?" + ("" if last is None else " AND step <= ?")
    args = [rid, first] + ([] if last is None else [last])
    cursor = con.execute(f"SELECT r.*, p.code, p.entry, p.source, {shape_columns(con)} "
                         "FROM runs r JOIN programs p USING (program_id) WHERE run_id = ?",
                         [rid])
    names = [d[0] for d in cursor.description]
    run = dict(zip(names, cursor.fetchone()))
    step_rows = con.execute("SELECT step, event, func, line, depth, frame FROM steps "
                            f"WHERE {within} ORDER BY step", args).fetchall()
    object_id = "object_id" if _has_column(con, "states", "object_id") else "NULL"
    states = con.execute(f"SELECT step, var, value, type, truncated, {object_id} FROM states "
                         f"WHERE {within} ORDER BY step, rowid", args).fetchall()
    objects = attributes = globals_ = []
    if has_table(con, "attributes"):  # a store before schema 4 has none of these
        objects = con.execute("SELECT object_id, type, step FROM objects WHERE run_id = ? "
                              "ORDER BY object_id", [rid]).fetchall()
        attributes = con.execute("SELECT step, object_id, attr, value, type, truncated, ref_id "
                                 f"FROM attributes WHERE {within} ORDER BY step, rowid",
                                 args).fetchall()
        globals_ = con.execute("SELECT step, name, value, type, truncated, object_id "
                               f"FROM global_states WHERE {within} ORDER BY step, rowid",
                               args).fetchall()
    return run, step_rows, states, objects, attributes, globals_


def _read_run(con, run_id: int | None, sample_id: str | None, input_index: int,
              asked: StepRange) -> RunView:
    run, steps, states, _, attributes, globals_ = run_rows(
        con, find_run_id(con, run_id, sample_id, input_index), asked)
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
    return RunView(run, code, [views[k] for k in sorted(views)], asked.first)


def _has_column(con, table: str, column: str) -> bool:
    return con.execute("SELECT count(*) FROM information_schema.columns WHERE "
                       "table_schema = 'main' AND table_name = ? AND column_name = ?",
                       [table, column]).fetchall()[0][0] > 0
