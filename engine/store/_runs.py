"""One run as typed records: ``Run`` with its ``Step``s and ``State``s.

A run is read into these from the store's rows: the ``runs`` row, the program's code and
entry, and the ``steps`` and ``states`` rows (``Store.run``), or from the same rows made
for a run that was never stored (``steptrace.trace_one``, through
``steptrace.store._store.run_rows``, the writer's own decoding of the guest's result).
Both go through ``Run.from_rows``, so a run traced in memory and the same job read back
from a store are equal records.

Equality is about what the program did: two runs are equal when the same code, entry,
input and expected output gave the same result, counts, steps and states. Where a run
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
    limit (``truncated``)."""

    step: int
    var: str
    value: str | None
    type: str | None
    truncated: bool


# The polars schemas of the frames: the store's column types (DuckDB INTEGER is Int32).
STEP_SCHEMA = {"step": "Int32", "event": "String", "func": "String", "line": "Int32",
               "depth": "Int32", "frame": "Int32"}
STATE_SCHEMA = {"step": "Int32", "var": "String", "value": "String", "type": "String",
                "truncated": "Boolean"}


def _frame(rows: Iterable[tuple], schema: dict[str, str]) -> "pl.DataFrame":
    import polars as pl
    return pl.DataFrame(list(rows), schema={name: getattr(pl, kind) for name, kind in schema.items()},
                        orient="row")


@dataclass(frozen=True)
class Run:
    """One job's run, decoded: the program and input, how the call ended, its counts,
    and its trace as ``steps`` and ``states`` (tuples of records; ``steps_frame()`` and
    ``states_frame()`` give them as polars DataFrames with the store's columns).

    ``status`` is one of ok, exception, invalid, timeout, step_limit, memory_limit,
    output_limit, unsupported, exited, tampered, crashed; ``output`` is the return value's repr (for
    ``ok``), ``output_matches`` whether it equals ``expected`` (None without one)."""

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
                  stored: bool = True) -> "Run":
        """The run of a ``runs`` row (a mapping of its columns), its program's ``code`` and
        ``entry``, and its ``steps`` and ``states`` rows (mappings of their columns, a
        ``run_id`` column ignored). States are ordered by step, keeping their recorded
        order within one, as a store reads them back. ``stored=False``: a run that was
        never stored, without a run id or sample."""
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
            states=tuple(State(r["step"], r["var"], r["value"], r["type"], r["truncated"])
                         for r in state_rows),
            shape=run.get("shape") or "call", test=run.get("test"), chain=run.get("chain"),
            stdin=run.get("stdin"),
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
        """The state changes as a polars DataFrame: step, var, value, type, truncated (the
        store's ``states`` columns without run_id)."""
        return _frame(((s.step, s.var, s.value, s.type, s.truncated) for s in self.states),
                      STATE_SCHEMA)

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
        the variables each step changed (the first ``SHOWN_STEPS`` steps)."""
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
        lines.append(f"{len(self.steps)} steps{counts}, {len(self.states)} state changes")
        if not self.steps:
            return "\n".join(lines)
        changes = self.changes()
        rows = [("step", "event", "line", "depth", "func", "changed")]
        rows += [(str(s.step), s.event, str(s.line), str(s.depth), s.func,
                  _changes_text(changes.get(s.step, ()))) for s in self.steps[:SHOWN_STEPS]]
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


def _changes_text(states: Iterable[State]) -> str:
    """``x=1, y=<unbound>``; a cut repr ends with an ellipsis (as ``steptrace show``)."""
    return ", ".join(f"{s.var}={'<unbound>' if s.value is None else s.value}"
                     + ("…" if s.truncated else "") for s in states)


def _short(text: str) -> str:
    return text if len(text) <= REPR_TEXT else text[:REPR_TEXT] + "…"
