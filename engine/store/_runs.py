"""One run as typed records: ``Run`` with its ``Step``s and ``State``s, the
``Object``s, ``Attribute``s and ``GlobalState``s of its object state (schema 4), and the
``SettraceLine``s of its settrace view (schema 7; ``settrace_view`` merges them into the
steps, for every reader of the view).

A run is read into these from the store's rows: the ``runs`` row, the program's code and
entry, and the ``steps``, ``states``, ``objects``, ``attributes`` and ``global_states``
rows (``Store.run``), or from the same rows made
for a run that was never stored (``steptrace.trace_one``, through
``steptrace.store._store.run_rows``, the writer's own decoding of the guest's result).
Both go through ``Run.from_rows``, so a run traced in memory and the same job read back
from a store are equal records.

Equality is about what the program did: two runs are equal when the same code, entry,
input and expected output gave the same result, counts, steps, states and object state
(objects, attributes, globals). Where a run
sits in a store (run id, sample id, input index) and what was measured while it ran
(durations, isolation, time traced) are kept but not compared.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from steptrace.corpus._formats import source_lines

if TYPE_CHECKING:
    import polars as pl

# Steps printed by ``str(run)``; the frames hold them all.
SHOWN_STEPS = 100
# Characters of an input or output in ``repr(run)``.
REPR_TEXT = 60


@dataclass(frozen=True)
class Step:
    """One trace step: ``event`` (call, line, return, exception, ...) in function ``func``
    at ``line``, ``depth`` calls deep, in frame number ``frame`` (one per call)."""

    step: int
    event: str
    func: str
    line: int
    depth: int
    frame: int


@dataclass(frozen=True)
class State:
    """A variable that changed at ``step``: its ``value`` as a repr (None: unbound, e.g.
    deleted), its ``type`` name, and whether the repr was cut to the ``max_repr``
    limit (``truncated``); ``object_id`` is the ``Object`` the name is bound to when the
    value is a tracked object (None otherwise, and in runs traced before schema 4)."""

    step: int
    var: str
    value: str | None
    type: str | None
    truncated: bool
    object_id: int | None = None


@dataclass(frozen=True)
class Object:
    """A tracked object of the run (an instance of a program class or a mutable built-in
    container): its ``object_id`` (1, 2, ... in the order the tracer first saw the
    objects, never an address), its ``type`` name, and the ``step`` it was first seen at."""

    object_id: int
    type: str
    step: int


@dataclass(frozen=True)
class Attribute:
    """An attribute ``attr`` of program instance ``object_id`` whose value changed since
    the object was last seen, seen at ``step`` (all its attributes at its first sight):
    its ``value`` rendered (None: deleted), its ``type`` name, whether the rendering was
    cut (``truncated``), and ``ref_id``, the value's object id when it is a tracked
    object."""

    step: int
    object_id: int
    attr: str
    value: str | None
    type: str | None
    truncated: bool
    ref_id: int | None


@dataclass(frozen=True)
class GlobalState:
    """A program global its code uses, ``name``, that changed at ``step`` (the first
    step: the value the call started with): its ``value`` rendered (None: unbound), its
    ``type`` name, whether the rendering was cut (``truncated``), and ``object_id``, the
    value's object id when it is a tracked object."""

    step: int
    name: str
    value: str | None
    type: str | None
    truncated: bool
    object_id: int | None


@dataclass(frozen=True)
class SettraceLine:
    """A line event of the run's settrace view that is not a ``line`` step: a backward
    jump that stays on its line, which ``sys.settrace`` reports and sys.monitoring does
    not (docs/guides/runs.md, "The settrace view"), in function ``func`` at ``line``,
    ``depth`` calls deep, in frame ``frame``, right after step ``step``."""

    step: int
    func: str
    line: int
    depth: int
    frame: int


def settrace_view(steps: Iterable[tuple], own: Iterable[tuple]) -> list[tuple]:
    """A run's steps with its settrace view's own line events in place. ``steps``:
    (step, event, func, line, depth, frame) tuples in step order; ``own``: its
    ``settrace_lines`` rows as (step, func, line, depth, frame) in the store's order.
    Each of those becomes a (step, "line", func, line, depth, frame) tuple right after
    the step it follows, with that step's number (it is no step of its own, and has no
    state). The ``line`` tuples of the result are the line events ``sys.settrace``
    reports for the run, in order."""
    after: dict[int, list[tuple]] = {}
    for step, func, line, depth, frame in own:
        after.setdefault(step, []).append((step, "line", func, line, depth, frame))
    if not after:
        return list(steps)
    found = []
    for row in steps:
        found.append(row)
        extra = after.get(row[0])
        if extra:
            found += extra
    return found


# The polars schemas of the frames: the store's column types (DuckDB INTEGER is Int32).
STEP_SCHEMA = {"step": "Int32", "event": "String", "func": "String", "line": "Int32",
               "depth": "Int32", "frame": "Int32"}
STATE_SCHEMA = {"step": "Int32", "var": "String", "value": "String", "type": "String",
                "truncated": "Boolean", "object_id": "Int32"}
OBJECT_SCHEMA = {"object_id": "Int32", "type": "String", "step": "Int32"}
ATTRIBUTE_SCHEMA = {"step": "Int32", "object_id": "Int32", "attr": "String", "value": "String",
                    "type": "String", "truncated": "Boolean", "ref_id": "Int32"}
GLOBAL_SCHEMA = {"step": "Int32", "name": "String", "value": "String", "type": "String",
                 "truncated": "Boolean", "object_id": "Int32"}


def _frame(rows: Iterable[tuple], schema: dict[str, str]) -> "pl.DataFrame":
    import polars as pl
    return pl.DataFrame(list(rows), schema={name: getattr(pl, kind) for name, kind in schema.items()},
                        orient="row")


@dataclass(frozen=True)
class Run:
    """One job's run, decoded: the program and input, how the call ended, its counts,
    and its trace as ``steps`` and ``states`` (tuples of records; ``steps_frame()`` and
    ``states_frame()`` give them as polars DataFrames with the store's columns), and its
    object state as ``objects``, ``attributes`` and ``globals`` (``objects_frame()``,
    ``attributes_frame()``, ``globals_frame()``; empty for a run traced before schema 4).

    ``status`` is one of ok, exception, invalid, timeout, step_limit, memory_limit,
    output_limit, unsupported, missing_module, exited, tampered, crashed, loops; ``output`` is
    the return value's repr (for ``ok``), ``output_matches`` whether it equals
    ``expected`` (None without one)."""

    code: str
    entry: str
    input: str
    expected: str | None
    status: str
    output: str | None
    output_type: str | None
    output_truncated: bool | None
    exception_type: str | None
    exception_message: str | None
    output_matches: bool | None
    note: str | None
    stdout: str | None
    line_steps: int | None
    instruction_steps: int | None
    calls: int | None
    max_depth: int | None
    steps: tuple[Step, ...] = ()
    states: tuple[State, ...] = ()
    # The program's shape (docs/guides/corpus.md): ``call`` or ``script``, the test code,
    # the method chain (the JSON text of runs.chain) and a call's stdin; None if none.
    shape: str = "call"
    test: str | None = None
    chain: str | None = None
    stdin: str | None = None
    # The object state (docs/guides/runs.md, "Objects"): compared, like the states.
    objects: tuple[Object, ...] = ()
    attributes: tuple[Attribute, ...] = ()
    globals: tuple[GlobalState, ...] = ()
    # The settrace view (docs/guides/runs.md): its own line events, and its line events
    # in all (None: not recorded, as runs.settrace_line_steps).
    settrace_lines: tuple[SettraceLine, ...] = ()
    settrace_line_steps: int | None = None
    # Where the run is stored and what was measured: kept, not compared.
    run_id: int | None = field(default=None, compare=False)
    sample_id: str | None = field(default=None, compare=False)
    input_index: int | None = field(default=None, compare=False)
    duration_us: int | None = field(default=None, compare=False)
    call_us: int | None = field(default=None, compare=False)
    isolation: str | None = field(default=None, compare=False)
    traced_at: dt.datetime | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_rows(cls, run: Mapping[str, Any], code: str, entry: str,
                  steps: Iterable[Mapping[str, Any]], states: Iterable[Mapping[str, Any]],
                  stored: bool = True, *, objects: Iterable[Mapping[str, Any]] = (),
                  attributes: Iterable[Mapping[str, Any]] = (),
                  globals: Iterable[Mapping[str, Any]] = (),
                  settrace_lines: Iterable[Mapping[str, Any]] = ()) -> "Run":
        """The run of a ``runs`` row (a mapping of its columns), its program's ``code`` and
        ``entry``, and its ``steps`` and ``states`` rows (mappings of their columns, a
        ``run_id`` column ignored). States are ordered by step, keeping their recorded
        order within one, as a store reads them back. ``stored=False``: a run that was
        never stored, without a run id or sample.

        objects, attributes, globals: its ``objects``, ``attributes`` and
        ``global_states`` rows (none: a run traced before schema 4); a states row without
        ``object_id`` has None. Objects are ordered by object id, attributes and globals
        by step as states are.

        settrace_lines: its ``settrace_lines`` rows (none: a run traced before schema 7),
        ordered by step as states are."""
        state_rows = sorted(states, key=lambda row: row["step"])  # stable: recorded order
        return cls(
            code=code, entry=entry, input=run["input"], expected=run["expected"],
            status=run["status"], output=run["output"], output_type=run["output_type"],
            output_truncated=run["output_truncated"], exception_type=run["exception_type"],
            exception_message=run["exception_message"], output_matches=run["output_matches"],
            note=run["note"], stdout=run["stdout"], line_steps=run["line_steps"],
            instruction_steps=run["instruction_steps"], calls=run["calls"],
            max_depth=run["max_depth"],
            steps=tuple(Step(r["step"], r["event"], r["func"], r["line"], r["depth"], r["frame"])
                        for r in steps),
            states=tuple(State(r["step"], r["var"], r["value"], r["type"], r["truncated"],
                               r.get("object_id")) for r in state_rows),
            shape=run.get("shape") or "call", test=run.get("test"), chain=run.get("chain"),
            stdin=run.get("stdin"),
            objects=tuple(Object(r["object_id"], r["type"], r["step"])
                          for r in sorted(objects, key=lambda row: row["object_id"])),
            attributes=tuple(Attribute(r["step"], r["object_id"], r["attr"], r["value"],
                                       r["type"], r["truncated"], r["ref_id"])
                             for r in sorted(attributes, key=lambda row: row["step"])),
            globals=tuple(GlobalState(r["step"], r["name"], r["value"], r["type"],
                                      r["truncated"], r["object_id"])
                          for r in sorted(globals, key=lambda row: row["step"])),
            settrace_lines=tuple(SettraceLine(r["step"], r["func"], r["line"], r["depth"],
                                              r["frame"])
                                 for r in sorted(settrace_lines, key=lambda row: row["step"])),
            settrace_line_steps=run.get("settrace_line_steps"),
            run_id=run["run_id"] if stored else None,
            sample_id=run["sample_id"] if stored else None,
            input_index=run["input_index"] if stored else None,
            duration_us=run["duration_us"], call_us=run["call_us"], isolation=run["isolation"],
            traced_at=run["traced_at"] if stored else None)

    # ------------------------------------------------------------------ as frames
    def steps_frame(self) -> "pl.DataFrame":
        """The steps as a polars DataFrame: step, event, func, line, depth, frame (the
        store's ``steps`` columns without run_id)."""
        return _frame(((s.step, s.event, s.func, s.line, s.depth, s.frame) for s in self.steps),
                      STEP_SCHEMA)

    def states_frame(self) -> "pl.DataFrame":
        """The state changes as a polars DataFrame: step, var, value, type, truncated,
        object_id (the store's ``states`` columns without run_id)."""
        return _frame(((s.step, s.var, s.value, s.type, s.truncated, s.object_id)
                       for s in self.states), STATE_SCHEMA)

    def objects_frame(self) -> "pl.DataFrame":
        """The tracked objects as a polars DataFrame: object_id, type, step (the store's
        ``objects`` columns without run_id)."""
        return _frame(((o.object_id, o.type, o.step) for o in self.objects), OBJECT_SCHEMA)

    def attributes_frame(self) -> "pl.DataFrame":
        """The attribute changes as a polars DataFrame: step, object_id, attr, value,
        type, truncated, ref_id (the store's ``attributes`` columns without run_id)."""
        return _frame(((a.step, a.object_id, a.attr, a.value, a.type, a.truncated, a.ref_id)
                       for a in self.attributes), ATTRIBUTE_SCHEMA)

    def globals_frame(self) -> "pl.DataFrame":
        """The global changes as a polars DataFrame: step, name, value, type, truncated,
        object_id (the store's ``global_states`` columns without run_id)."""
        return _frame(((g.step, g.name, g.value, g.type, g.truncated, g.object_id)
                       for g in self.globals), GLOBAL_SCHEMA)

    def settrace_steps(self) -> tuple[Step, ...]:
        """The steps with the settrace view's own line events in place (``settrace_view``):
        their ``line`` steps are the line events ``sys.settrace`` reports for the run.
        Meaningful only when the view was recorded (``settrace_line_steps`` is not None)."""
        merged = settrace_view(((s.step, s.event, s.func, s.line, s.depth, s.frame)
                                for s in self.steps),
                               ((x.step, x.func, x.line, x.depth, x.frame)
                                for x in self.settrace_lines))
        return tuple(Step(*row) for row in merged)

    # ------------------------------------------------------------------ as text
    def call_text(self) -> str:
        """``entry(input)``, as the program was called (a method chain:
        ``Stack().push(1).pop()``; a script: ``script`` and its stdin)."""
        return call_text(self.entry, self.input, self.shape, self.chain)

    def outcome_text(self) -> str:
        """How the call ended, in a few words: ``-> 42``, ``raised KeyError: 'a'``, or
        the status and its message."""
        if self.status == "ok":
            return f"-> {self.output}" + (" (cut)" if self.output_truncated else "")
        if self.status == "exception":
            return f"raised {self.exception_type}: {self.exception_message}"
        message = self.exception_message or self.note
        return f"{self.status}" + (f": {message}" if message else "")

    def changes(self) -> dict[int, list[State]]:
        """The state changes grouped by step."""
        grouped: dict[int, list[State]] = {}
        for state in self.states:
            grouped.setdefault(state.step, []).append(state)
        return grouped

    def __str__(self) -> str:
        """The call and its outcome, the numbered code, and the trace a step a line with
        the variables each step changed (the first ``SHOWN_STEPS`` steps), then the
        attributes (``#3.total=1``: of object 3) and globals (``global n=2``) it changed,
        as ``steptrace show`` writes them."""
        where = f"run {self.run_id}: " if self.run_id is not None else ""
        lines = [f"{where}{self.call_text()} {self.outcome_text()}  [{self.status}]"]
        if self.expected is not None:
            lines.append(f"expected {self.expected}: "
                         + ("matches" if self.output_matches else "does not match"))
        if self.stdout:
            lines.append("stdout: " + self.stdout.rstrip("\n").replace("\n", "\n        "))
        if self.note:
            lines.append(f"note: {self.note}")
        code = source_lines(self.code)
        lines += [f"{number:>4} | {text}" for number, text in enumerate(code, start=1)]
        counts = ("" if self.line_steps is None else
                  f" ({self.line_steps} line, {self.instruction_steps} instruction)")
        more = "".join(f", {count} {what} changes" for count, what in (
            (len(self.attributes), "attribute"), (len(self.globals), "global")) if count)
        lines.append(f"{len(self.steps)} steps{counts}, {len(self.states)} state changes{more}")
        if not self.steps:
            return "\n".join(lines)
        changes = self.changes()
        attributes: dict[int, list[Attribute]] = {}
        for attribute in self.attributes:
            attributes.setdefault(attribute.step, []).append(attribute)
        globals_: dict[int, list[GlobalState]] = {}
        for state in self.globals:
            globals_.setdefault(state.step, []).append(state)
        rows = [("step", "event", "line", "depth", "func", "changed")]
        rows += [(str(s.step), s.event, str(s.line), str(s.depth), s.func,
                  _changes_text(changes.get(s.step, ()), attributes.get(s.step, ()),
                                globals_.get(s.step, ())))
                 for s in self.steps[:SHOWN_STEPS]]
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        for row in rows:
            cells = [row[0].rjust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]),
                     row[3].rjust(widths[3]), row[4].ljust(widths[4]), row[5]]
            lines.append("  ".join(cells).rstrip())
        if len(self.steps) > SHOWN_STEPS:
            lines.append(f"... {len(self.steps) - SHOWN_STEPS:,} more steps "
                         "(steps_frame() has them all)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        where = f"run_id={self.run_id}, " if self.run_id is not None else ""
        return (f"Run({where}{_short(self.call_text())} {_short(self.outcome_text())}, "
                f"status={self.status!r}, {len(self.steps)} steps, {len(self.states)} states)")


def call_text(entry: str, input: str, shape: str = "call", chain: str | None = None) -> str:
    """How a run was called, in one line: ``entry(input)``, with a method chain's calls
    after it (``Stack().push(1).pop()``); a script as ``script < 'its stdin'``."""
    if shape == "script":
        return f"script < {input!r}"
    text = f"{entry}({input})"
    if chain:
        text += "".join(f".{call['method']}({call['input']})" for call in json.loads(chain))
    return text


def _changes_text(states: Iterable[State], attributes: Iterable[Attribute] = (),
                  globals: Iterable[GlobalState] = ()) -> str:
    """``x=1, y=<unbound>, #1.total=3, global n=2``; a cut repr ends with an ellipsis (as
    ``steptrace show``)."""
    parts = [f"{s.var}={_shown(s.value, s.truncated)}" for s in states]
    parts += [f"#{a.object_id}.{a.attr}={_shown(a.value, a.truncated)}" for a in attributes]
    parts += [f"global {g.name}={_shown(g.value, g.truncated)}" for g in globals]
    return ", ".join(parts)


def _shown(value: str | None, truncated: bool) -> str:
    return ("<unbound>" if value is None else value) + ("…" if truncated else "")


def _short(text: str) -> str:
    return text if len(text) <= REPR_TEXT else text[:REPR_TEXT] + "…"
