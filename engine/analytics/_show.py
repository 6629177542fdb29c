"""One run, step by step: the program, each step's line and the variables that changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from steptrace.corpus._formats import source_lines
from steptrace.store._store import StoreError, first_line, connect, shape_columns
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

    def changes_text(self) -> str:
        return ", ".join(f"{name}={'<unbound>' if value is None else value}"
                         + ("…" if truncated else "")
                         for name, value, _type, truncated in self.changes)


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


def _read_run(con, run_id: int | None, sample_id: str | None, input_index: int) -> RunView:
    rid = find_run_id(con, run_id, sample_id, input_index)
    cursor = con.execute(f"SELECT r.*, p.code, p.entry, p.source, {shape_columns(con)} "
                         "FROM runs r JOIN programs p USING (program_id) WHERE run_id = ?",
                         [rid])
    names = [d[0] for d in cursor.description]
    run = dict(zip(names, cursor.fetchone()))
    steps = con.execute("SELECT step, event, func, line, depth, frame FROM steps "
                        "WHERE run_id = ? ORDER BY step", [rid]).fetchall()
    states = con.execute("SELECT step, var, value, type, truncated FROM states "
                         "WHERE run_id = ? ORDER BY step, rowid", [rid]).fetchall()
    code = run.pop("code")
    lines = source_lines(code)
    views = {s[0]: StepView(*s, source=lines[s[3] - 1].strip() if 0 < s[3] <= len(lines) else "")
             for s in steps}
    for step, var, value, type_, truncated in states:
        views[step].changes.append((var, value, type_, truncated))
    return RunView(run, code, [views[k] for k in sorted(views)])
