"""Training-data exports of stored traces (``steptrace export-traces``): every selected run
as one JSON line in one of the formats of ``steptrace.analytics._trace_formats.FORMATS``
(jsonl, pythontutor, cwm, scratchpad; docs/guides/exports.md).

Streaming: runs are read in batches of consecutive run ids (keyset pagination: the next
batch starts after the last run id written), each batch's steps, states, objects,
attributes and globals in one query per table bounded by the batch's run ids. A batch
holds at most ``batch_runs`` runs and, past its first run, at most ``batch_steps`` steps,
so memory is bounded by the batch, never by the store; the output is written as it is
made. Runs come in run id order, so an export is deterministic.

Selection: the runs of ``statuses`` (default the finished ones, ``ok`` and ``exception``,
the runs ``steptrace tasks`` asks about), with at most ``max_steps`` steps and at most
``max_trace_lines`` line steps (``tasks --max-trace-lines``) when given. With the
settrace view (``lines="settrace"``, format ``lines`` only) the line steps are the view's
(``runs.settrace_line_steps``), and a run whose view was not recorded is left out.

Replay: ``replay(run)`` walks a run's steps and keeps what the delta encoding implies at
each step: every active frame's full locals, the call stack, the attributes of every
object seen so far, the globals, and the latest rendering of every tracked object
(docs/guides/runs.md: a state, attribute or global row carrying an object id renders
that object at that step).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import duckdb

from steptrace.corpus._text import as_created
from steptrace.errors import InputError
from steptrace.sandbox._result_schema import STATUSES
from steptrace.store._store import (FINISHED_STATUSES, StoreError, connect, first_line,
                                    has_table, shape_columns)
from steptrace.tasks._names import LINE_VIEWS

# Runs per batch, and steps per batch past its first run.
DEFAULT_BATCH_RUNS = 256
DEFAULT_BATCH_STEPS = 200_000
# Names of a step's event value, not locals (docs/guides/runs.md).
EVENT_VALUES = ("<return>", "<yield>", "<exception>")

# A value as stored: (value repr or None when unbound, type name, truncated, object id).
Value = tuple


@dataclass
class RunTrace:
    """One run read for export: its ``runs`` columns with the program's (``run``: code,
    entry, shape, test, chain, stdin, ...) and its rows, each in the store's order:
    steps (step, event, func, line, depth, frame), states (step, var, value, type,
    truncated, object_id), objects (object_id, type, step), attributes (step,
    object_id, attr, value, type, truncated, ref_id), globals (step, name, value, type,
    truncated, object_id), settrace_lines (step, func, line, depth, frame: the settrace
    view's own line events). ``view``: the line view an export asked for (``lines``)."""
    run: dict
    steps: list[tuple] = field(default_factory=list)
    states: list[tuple] = field(default_factory=list)
    objects: list[tuple] = field(default_factory=list)
    attributes: list[tuple] = field(default_factory=list)
    globals: list[tuple] = field(default_factory=list)
    settrace_lines: list[tuple] = field(default_factory=list)
    view: str = "monitoring"


@dataclass
class Selection:
    """Which runs an export takes (the selection of ``steptrace tasks``): their statuses,
    and at most this many steps (``n_steps``) and line steps (``line_steps``)."""
    statuses: tuple[str, ...] = FINISHED_STATUSES
    max_steps: int | None = None
    max_trace_lines: int | None = None
    lines: str = "monitoring"  # the line view: settrace counts its line steps, needs it

    def __post_init__(self) -> None:
        unknown = [status for status in self.statuses if status not in STATUSES]
        if unknown or not self.statuses:
            raise InputError(f"unknown status {', '.join(unknown) or '(none given)'}: "
                             f"choose from {', '.join(STATUSES)}")
        for name in ("max_steps", "max_trace_lines"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InputError(f"{name} must be at least 0, not {value}")
        if self.lines not in LINE_VIEWS:
            raise InputError(f"unknown line view {self.lines!r}: choose from "
                             f"{', '.join(LINE_VIEWS)}")

    def where(self, settrace: str = "r.settrace_line_steps") -> tuple[str, list]:
        """The SQL condition on ``runs r`` and its parameters (``settrace``: the view's
        line steps, as the store has them: ``_settrace_steps``)."""
        clauses = ["list_contains(?, r.status)"]
        params: list = [list(self.statuses)]
        if self.max_steps is not None:
            clauses.append("coalesce(r.n_steps, 0) <= ?")
            params.append(self.max_steps)
        line_steps = "r.line_steps"
        if self.lines == "settrace":
            line_steps = settrace
            clauses.append(f"{settrace} IS NOT NULL")
        if self.max_trace_lines is not None:
            clauses.append(f"coalesce({line_steps}, 0) <= ?")
            params.append(self.max_trace_lines)
        return " AND ".join(clauses), params


@dataclass
class TraceExportSummary:
    """What ``export_traces`` wrote: the format, the file, how many runs and steps, and
    how many batches it read them in."""
    format: str
    out: Path
    runs: int = 0
    steps: int = 0
    batches: int = 0

    def as_rows(self) -> list[tuple[str, object]]:
        return [("format", self.format), ("out", str(self.out)), ("runs", self.runs),
                ("steps", self.steps), ("batches", self.batches)]


# ====================================================================== reading
_RUN_COLUMNS = ("r.run_id, r.sample_id, r.input_index, r.input, r.status, r.output, "
                "r.output_type, r.output_truncated, r.exception_type, r.exception_message, "
                "r.expected, r.output_matches, r.note, r.stdout, r.line_steps, "
                "r.instruction_steps, r.calls, r.max_depth, r.n_steps")


def _batches_of_rows(con: duckdb.DuckDBPyConnection, selection: Selection, batch_runs: int,
                     batch_steps: int) -> Iterator[list[dict]]:
    """The selected runs' rows (with their program's), in batches by run id: at most
    ``batch_runs`` runs, and past the first at most ``batch_steps`` steps."""
    settrace = _settrace_steps(con)
    condition, params = selection.where(settrace)
    query = (f"SELECT {_RUN_COLUMNS}, {settrace} AS settrace_line_steps, p.code, p.entry, "
             f"{shape_columns(con, 'p', 'r')} "
             "FROM runs r JOIN programs p USING (program_id) "
             f"WHERE r.run_id > ? AND {condition} ORDER BY r.run_id LIMIT ?")
    last = -(2 ** 63)
    while True:
        cursor = con.execute(query, [last, *params, batch_runs])
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row)) for row in cursor.fetchall()]
        if not rows:
            return
        batch, steps = [], 0
        for row in rows:
            steps += row["n_steps"] or 0
            if batch and steps > batch_steps:
                break
            batch.append(row)
        yield batch
        last = batch[-1]["run_id"]


def _settrace_steps(con: duckdb.DuckDBPyConnection) -> str:
    """``r.settrace_line_steps``, or NULL in a store made before schema 7 (read-only)."""
    present = con.execute("SELECT count(*) FROM information_schema.columns WHERE "
                          "table_schema = 'main' AND table_name = 'runs' AND "
                          "column_name = 'settrace_line_steps'").fetchall()[0][0]
    return "r.settrace_line_steps" if present else "CAST(NULL AS BIGINT)"


def _detail_queries(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """One query per detail table for a batch (``?``: the lowest and highest run id and
    the list of run ids), ordered by run id and then as a store reads a run back."""
    object_id = ("object_id" if con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'main' AND "
        "table_name = 'states' AND column_name = 'object_id'").fetchall()[0][0]
        else "CAST(NULL AS INTEGER)")
    within = "run_id BETWEEN ? AND ? AND list_contains(?, run_id)"
    queries = {
        "steps": f"SELECT run_id, step, event, func, line, depth, frame FROM steps "
                 f"WHERE {within} ORDER BY run_id, step",
        "states": f"SELECT run_id, step, var, value, type, truncated, {object_id} FROM states "
                  f"WHERE {within} ORDER BY run_id, step, rowid"}
    if has_table(con, "objects"):  # a version 3 store read without upgrading has none
        queries["objects"] = ("SELECT run_id, object_id, type, step FROM objects "
                              f"WHERE {within} ORDER BY run_id, object_id")
        queries["attributes"] = ("SELECT run_id, step, object_id, attr, value, type, "
                                 f"truncated, ref_id FROM attributes WHERE {within} "
                                 "ORDER BY run_id, step, rowid")
        queries["globals"] = ("SELECT run_id, step, name, value, type, truncated, object_id "
                              f"FROM global_states WHERE {within} ORDER BY run_id, step, rowid")
    if has_table(con, "settrace_lines"):  # schema 7
        queries["settrace_lines"] = ("SELECT run_id, step, func, line, depth, frame FROM "
                                     f"settrace_lines WHERE {within} ORDER BY run_id, step, "
                                     "rowid")
    return queries


def iter_run_batches(db: str | os.PathLike, selection: Selection | None = None,
                     batch_runs: int = DEFAULT_BATCH_RUNS,
                     batch_steps: int = DEFAULT_BATCH_STEPS) -> Iterator[list[RunTrace]]:
    """The selected runs of the store (or shard directory) ``db`` as lists of
    ``RunTrace``s, a list per batch, in run id order (see the module docstring)."""
    selection = selection or Selection()
    if batch_runs < 1 or batch_steps < 1:
        raise InputError("batch_runs and batch_steps must be at least 1")
    con = connect(db, read_only=True)
    try:
        queries = _detail_queries(con)
        for rows in _batches_of_rows(con, selection, batch_runs, batch_steps):
            traces = {row["run_id"]: RunTrace(row) for row in rows}
            ids = list(traces)
            for table, query in queries.items():
                for row in con.execute(query, [ids[0], ids[-1], ids]).fetchall():
                    getattr(traces[row[0]], table).append(row[1:])
            yield list(traces.values())
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()


# ====================================================================== replay
@dataclass
class Frame:
    """One activation during replay: its frame number, its function, and its locals now
    (name -> Value, in the order the names were bound)."""
    frame: int
    func: str
    locals: dict[str, Value] = field(default_factory=dict)


@dataclass
class StepState:
    """What holds at one step of a replay (the replay's own mutable state: read it before
    the next step). ``stack``: the active frames, outermost first, the step's own last;
    (None where no step showed a frame at that depth); ``changes``: the states rows of this step (var, value, type, truncated, object_id)
    in recorded order; ``value``: the step's event value (``<return>``, ``<yield>``,
    ``<exception>``) or None; ``attributes``: object id -> attribute -> (value, type,
    truncated, ref_id); ``globals``: name -> Value; ``renderings``: object id -> the
    latest (value, type, truncated) it was rendered as; ``object_types``: object id ->
    type name (every object of the run)."""
    step: tuple
    stack: list[Frame | None]
    changes: list[tuple]
    attribute_changes: list[tuple]
    global_changes: list[tuple]
    value: Value | None
    attributes: dict[int, dict[str, tuple]]
    globals: dict[str, Value]
    renderings: dict[int, tuple]
    object_types: dict[int, str]

    @property
    def frame(self) -> Frame:
        return self.stack[-1]


def _grouped(rows: Sequence[tuple]) -> dict[int, list[tuple]]:
    grouped: dict[int, list[tuple]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row[1:])
    return grouped


def replay(trace: RunTrace) -> Iterator[StepState]:
    """Walk the run's steps in order, applying the deltas: see ``StepState``. A frame's
    locals at a step are every state row of that frame up to and including the step
    (the locals as the step found them: a ``line`` step is recorded before its line
    runs), less the unbound names and the event values."""
    states, attributes = _grouped(trace.states), _grouped(trace.attributes)
    globals_ = _grouped(trace.globals)
    frames: dict[int, Frame] = {}
    stack: list[Frame] = []
    objects: dict[int, dict[str, tuple]] = {}
    global_values: dict[str, Value] = {}
    renderings: dict[int, tuple] = {}
    object_types = {object_id: type_ for object_id, type_, _step in trace.objects}
    for step in trace.steps:
        number, _event, func, _line, depth, frame_id = step
        frame = frames.get(frame_id)
        if frame is None:
            frame = frames[frame_id] = Frame(frame_id, func)
        del stack[depth:]
        stack.extend([None] * (depth - len(stack)))  # a depth no step showed: a gap
        stack.append(frame)
        value = None
        changes = states.get(number, [])
        for var, val, type_, truncated, object_id in changes:
            if object_id is not None and val is not None:
                renderings[object_id] = (val, type_, truncated)
            if var in EVENT_VALUES:
                value = (val, type_, truncated, object_id)
            elif val is None:
                frame.locals.pop(var, None)
            else:
                frame.locals[var] = (val, type_, truncated, object_id)
        attribute_changes = attributes.get(number, [])
        for object_id, attr, val, type_, truncated, ref_id in attribute_changes:
            held = objects.setdefault(object_id, {})
            if val is None:
                held.pop(attr, None)
            else:
                held[attr] = (val, type_, truncated, ref_id)
                if ref_id is not None:
                    renderings[ref_id] = (val, type_, truncated)
        global_changes = globals_.get(number, [])
        for name, val, type_, truncated, object_id in global_changes:
            if val is None:
                global_values.pop(name, None)
            else:
                global_values[name] = (val, type_, truncated, object_id)
                if object_id is not None:
                    renderings[object_id] = (val, type_, truncated)
        yield StepState(step, stack, changes, attribute_changes, global_changes, value,
                        objects, global_values, renderings, object_types)


# ====================================================================== writing
def export_traces(store: str | os.PathLike, out: str | os.PathLike, format: str = "jsonl", *,
                  statuses: Iterable[str] = FINISHED_STATUSES, max_steps: int | None = None,
                  max_trace_lines: int | None = None, batch_runs: int = DEFAULT_BATCH_RUNS,
                  batch_steps: int = DEFAULT_BATCH_STEPS,
                  on_batch: Callable[[list[RunTrace]], None] | None = None,
                  lines: str = "monitoring") -> TraceExportSummary:
    """Write the store's runs as training data, one JSON object a line, in run id order
    (``steptrace export-traces``; the formats: docs/guides/exports.md).

    store: a store (a path or an opened ``Store``) or a shard directory (``trace --out``).
    out: the file to write (replaced when the export is complete; a failed export
        leaves no partial file).
    format: jsonl (steptrace's own record, lossless), pythontutor (Python Tutor's trace
        JSON), cwm (Meta CWM's execution-trace frames), scratchpad (Nye et al. 2021),
        lines (the run's line events alone).
    statuses: only runs of these statuses (default ok and exception, as ``tasks``).
    max_steps, max_trace_lines: only runs with at most this many steps, line steps.
    batch_runs, batch_steps: runs read at once, and steps a batch holds past its first
        run (memory is bounded by one batch).
    on_batch: called with each batch's runs before they are written (for tests).
    lines: the line view, ``"monitoring"`` (the steps' line events) or ``"settrace"``
        (those ``sys.settrace`` reports: docs/guides/runs.md, "The settrace view"), for
        the ``lines`` format; the view's own events have no recorded state, so the
        formats of states take the steps (jsonl holds the view's events besides).
    InputError for an unknown format, status or line view, the settrace view with
    another format than ``lines``, or an unwritable ``out``; StoreError for a missing or
    unreadable store."""
    from steptrace.analytics._trace_formats import FORMATS
    if format not in FORMATS:
        raise InputError(f"unknown export format {format!r}: choose from "
                         f"{', '.join(FORMATS)}")
    selection = Selection(tuple(statuses), max_steps, max_trace_lines, lines)
    if lines != "monitoring" and not FORMATS[format].line_views:
        raise InputError(f"--lines {lines} goes with --trace-format lines: the settrace view's own "
                         f"line events have no recorded state for {format} (jsonl holds "
                         "them as settrace_lines)")
    render = FORMATS[format].render
    out = Path(out)
    db_path = Path(store)
    if not db_path.exists():
        raise StoreError(f"database not found: {db_path}")
    if out.is_dir():
        raise InputError(f"cannot write {out}: it is a directory")
    try:
        handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=out.parent or ".",
                                             prefix=f".{out.name}.", suffix=".part",
                                             delete=False)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from exc
    summary = TraceExportSummary(format, out)
    try:
        as_created(handle.fileno())
        with handle:
            for batch in iter_run_batches(db_path, selection, batch_runs, batch_steps):
                summary.batches += 1
                if on_batch is not None:
                    on_batch(batch)
                for trace in batch:
                    trace.view = lines
                    handle.write(render(trace))
                    handle.write("\n")
                    summary.runs += 1
                    summary.steps += len(trace.steps)
        os.replace(handle.name, out)
    except OSError as exc:
        Path(handle.name).unlink(missing_ok=True)
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from exc
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return summary
