"""Finished runs in memory: loaded in a few bulk queries (one per table), and replayed
into line executions with the state and next line that follow each.

The state after a line holds the frame's locals and, for a local bound to an instance of
a program-defined class, its attributes by path (``self.total``, ``node.next.val``): the
``attributes`` rows replayed in step order, followed through ``ref_id`` from each local's
``object_id`` (see docs/guides/runs.md, "Objects")."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import duckdb

from steptrace.store._store import FINISHED_STATUSES

# The detail tables a kind's questions may read, besides the run's own row.
DETAIL_TABLES = ("steps", "states", "attributes", "branches", "settrace_lines")
# How far a state question follows attributes from a local (``node.next.next.val`` is
# three hops), and how many attribute paths one frame's state holds at most.
MAX_PATH_HOPS = 3
MAX_PATHS = 64
# Tracked built-in containers: an attribute holding one is recorded again whenever its
# rendering changes (docs/guides/runs.md, "Objects"), so its value is current; an
# attribute holding a program instance is recorded only when it refers to another object.
CONTAINER_TYPES = frozenset({"list", "dict", "set", "bytearray", "deque", "defaultdict",
                             "OrderedDict", "Counter"})


@dataclass
class LineExec:
    """One ``line`` step: its occurrence k (per function and line, whole run, step order:
    a lambda on the line counts its own executions, not its caller's) and what the trace
    says happened right after it in its frame."""
    k: int
    line: int
    frame: int
    func: str
    # frame locals (and attribute paths) at the frame's next step: name ->
    # (value, type, truncated, object_id)
    after: dict[str, tuple] | None = None
    changed: frozenset[str] = frozenset()    # names (and paths) changed at that step
    next_line: int | str | None = None       # next line/return/raise of the frame


@dataclass
class RunData:
    run_id: int
    sample_id: str
    run_key: str
    status: str
    input: str
    output: str | None
    output_type: str | None
    output_truncated: bool | None
    exception_type: str | None
    line_steps: int
    code: str
    entry: str
    distinct_lines: int
    branch_count: int | None
    agrees: bool | None
    chain: str | None = None  # a method chain's JSON (runs.chain), None for a plain call
    shape: str = "call"       # programs.shape: call or script
    test: str | None = None   # programs.test: the test code that drives the call
    stdin: str | None = None  # runs.stdin of a call (a script's stdin is its input)
    exception_message: str | None = None  # runs.exception_message (of an exception run)
    stdout: str | None = None  # runs.stdout: what the run printed
    stdout_cut: bool = False   # the host cut stdout to its cap (runs.note says so)
    instruction_steps: int | None = None  # runs.instruction_steps
    # runs.settrace_line_steps: the settrace view's line events; None: not recorded
    settrace_line_steps: int | None = None
    steps: list[tuple] = field(default_factory=list)    # (step, event, func, line, depth, frame)
    # (step, var, value, type, truncated, object_id)
    states: list[tuple] = field(default_factory=list)
    # (step, object_id, attr, value, type, truncated, ref_id)
    attributes: list[tuple] = field(default_factory=list)
    branches: list[tuple] = field(default_factory=list)  # (line, col, kind, evaluation, taken)
    # the settrace view's own line events: (step, func, line, depth, frame)
    settrace_lines: list[tuple] = field(default_factory=list)


_RUNS_SQL = """
SELECT r.run_id, r.sample_id, r.run_key, r.status, r.input, r.output, r.output_type,
       r.output_truncated, r.exception_type, r.line_steps, p.code, p.entry,
       coalesce(d.distinct_lines, 0), b.branch_count, a.agrees, r.chain, p.shape,
       p.test, r.stdin, r.exception_message, r.stdout,
       coalesce(r.note LIKE '%cut to the host''s caps: %stdout (%', false), r.instruction_steps,
       r.settrace_line_steps
FROM runs r JOIN programs p USING (program_id)
LEFT JOIN (SELECT run_id, count(DISTINCT line) AS distinct_lines FROM steps
           WHERE event = 'line' GROUP BY run_id) d USING (run_id)
LEFT JOIN (SELECT run_id, count(*) AS branch_count FROM branches GROUP BY run_id) b USING (run_id)
LEFT JOIN analyses a USING (run_id)
WHERE r.status IN ('ok', 'exception') AND a.deterministic IS NOT FALSE
ORDER BY r.run_id
"""
# Every finished run can be asked about, but one that ``analyse --determinism`` found to
# depend on the hash seed (a set of strings' order): its answers are not the prompt's to
# give. A prompt shows the program and how it was run
# (a call, a method chain, a script and its stdin, the test code that drives it: see
# engine/tasks/_templates.py, ``invocation``); which kinds fit which shape is each
# kind's builder's to say (engine/tasks/_candidates.py).
_FINISHED = ("run_id IN (SELECT run_id FROM runs WHERE status IN ("
             + ", ".join(f"'{status}'" for status in FINISHED_STATUSES) + "))")
_DETAIL_SQL = {
    "steps": "SELECT run_id, step, event, func, line, depth, frame FROM steps "
             f"WHERE {_FINISHED} ORDER BY run_id, step",
    "states": "SELECT run_id, step, var, value, type, truncated, object_id FROM states "
              f"WHERE {_FINISHED} ORDER BY run_id, step, rowid",
    "attributes": "SELECT run_id, step, object_id, attr, value, type, truncated, ref_id "
                  f"FROM attributes WHERE {_FINISHED} ORDER BY run_id, step, rowid",
    "branches": "SELECT run_id, line, col, kind, evaluation, taken FROM branches "
                f"WHERE {_FINISHED} ORDER BY run_id, line, col, evaluation",
    "settrace_lines": "SELECT run_id, step, func, line, depth, frame FROM settrace_lines "
                      f"WHERE {_FINISHED} ORDER BY run_id, step, rowid",
}


def load_runs(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> list[RunData]:
    """Every finished run with the detail rows of ``tables`` (of DETAIL_TABLES), in one
    query per table."""
    runs = [RunData(*row) for row in con.execute(_RUNS_SQL).fetchall()]
    by_id = {run.run_id: run for run in runs}
    for name in DETAIL_TABLES:
        if name in tables:
            _attach(by_id, con, _DETAIL_SQL[name], name)
    return runs


def _attach(by_id: dict[int, RunData], con, sql: str, name: str) -> None:
    frame = con.sql(sql).pl()
    if frame.is_empty():
        return
    for (run_id,), part in frame.partition_by("run_id", as_dict=True,
                                              maintain_order=True).items():
        if run_id in by_id:  # (not a run asked about: see _RUNS_SQL)
            setattr(by_id[run_id], name, part.drop("run_id").rows())


def replay(run: RunData) -> list[LineExec]:
    """The run's line steps with the state and next line that follow each in its frame.

    A frame's locals are its state deltas applied in step order; the state "after" a line
    is the one at the frame's next step (none when that step is a ``yield``: the line has
    not finished), with the attribute paths reached from those locals at that step (see
    ``attribute_paths``). The next line skips ``yield``/``resume``/``raise``/``throw``
    steps and is ``return``/``raise`` when the frame's next such step is
    ``return``/``unwind``. ``k`` counts per (function, line): a question names one
    function, and a line can hold code of several (a lambda or generator expression runs
    in a frame of its own)."""
    deltas: dict[int, list[tuple]] = {}
    for step, var, value, type_, truncated, object_id in run.states:
        deltas.setdefault(step, []).append((var, value, type_, truncated, object_id))
    attribute_rows: dict[int, list[tuple]] = {}
    for step, object_id, attr, value, type_, truncated, ref_id in run.attributes:
        attribute_rows.setdefault(step, []).append((object_id, attr, value, type_, truncated,
                                                    ref_id))
    heap: dict[int, dict[str, tuple]] = {}   # object id -> attr -> (value, type, cut, ref)
    frames: dict[int, dict[str, tuple]] = {}
    waiting_state: dict[int, LineExec] = {}
    waiting_next: dict[int, LineExec] = {}
    counts: Counter = Counter()
    execs: list[LineExec] = []
    for step, event, func, line, _depth, frame in run.steps:
        local = frames.setdefault(frame, {})
        changes = deltas.get(step, ())
        for var, value, type_, truncated, object_id in changes:
            local[var] = (value, type_, truncated, object_id)
        touched = attribute_rows.get(step, ())
        for object_id, attr, value, type_, truncated, ref_id in touched:
            attrs = heap.setdefault(object_id, {})
            if value is None and type_ is None:
                attrs.pop(attr, None)  # deleted
            else:
                attrs[attr] = (value, type_, truncated, ref_id)
        previous = waiting_state.pop(frame, None)
        if previous is not None and event != "yield":
            changed_attrs = {(object_id, attr) for object_id, attr, *_ in touched}
            paths, changed_paths = attribute_paths(local, heap, changed_attrs)
            previous.after = {**local, **paths}
            previous.changed = frozenset([change[0] for change in changes] + changed_paths)
        if event in ("line", "return", "unwind"):
            previous = waiting_next.pop(frame, None)
            if previous is not None:
                previous.next_line = line if event == "line" else (
                    "return" if event == "return" else "raise")
        if event == "line":
            counts[(func, line)] += 1
            execs.append(LineExec(counts[(func, line)], line, frame, func))
            waiting_state[frame] = waiting_next[frame] = execs[-1]
    return execs


def attribute_paths(local: dict[str, tuple], heap: dict[int, dict[str, tuple]],
                    changed: set[tuple[int, str]] = frozenset()
                    ) -> tuple[dict[str, tuple], list[str]]:
    """The attributes reachable from a frame's locals: ``{"self.total": (value, type,
    truncated, object_id)}`` (object_id: the attribute value's own object, if tracked; an
    attribute holding a program instance is marked truncated: its stored rendering is the
    one from when the reference was made, not its value now),
    breadth first, in local then attribute order, at most ``MAX_PATH_HOPS`` attributes
    deep and ``MAX_PATHS`` paths; a path that would revisit an object is not followed (a
    cycle, or an alias of a shorter path). Also the paths whose attribute is in
    ``changed`` ((object id, attribute) pairs)."""
    paths: dict[str, tuple] = {}
    changed_paths: list[str] = []
    frontier = [(var, value[3]) for var, value in local.items()
                if value[3] is not None and value[3] in heap and not var.startswith("<")]
    seen = {object_id for _, object_id in frontier}
    for _hop in range(MAX_PATH_HOPS):
        following = []
        for prefix, object_id in frontier:
            for attr, (value, type_, truncated, ref_id) in heap[object_id].items():
                if len(paths) >= MAX_PATHS:
                    return paths, changed_paths
                path = f"{prefix}.{attr}"
                if ref_id is not None and type_ not in CONTAINER_TYPES:
                    # an instance's rendering as it was when the reference was made: its
                    # later changes are its own rows, so the text is no answer (cut)
                    truncated = True
                paths[path] = (value, type_, truncated, ref_id)
                if (object_id, attr) in changed:
                    changed_paths.append(path)
                if ref_id is not None and ref_id in heap and ref_id not in seen:
                    seen.add(ref_id)
                    following.append((path, ref_id))
        frontier = following
    return paths, changed_paths
