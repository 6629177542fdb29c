"""Prediction tasks with exact answers, generated from stored traces (README, "Tasks").

Every task asks one question about one finished run (``ok`` or ``exception``): its
return value or input, a variable's value after a line, the next line, whether and how
often a line runs, a condition's outcome, the number of line steps, the whole line trace
or the exception. The answer is read from the trace (steps, state deltas, the
``branches`` table), never from running the program again.

All runs are loaded in a few bulk queries and processed in memory, so generating every
kind for a thousand runs takes seconds. Question selection is deterministic: each (run,
kind) gets its own ``random.Random(f"{seed}:{run_key}:{kind}")``, so adding runs to a
store does not change the questions of the others. ``task_id`` hashes the run key, the
kind and the question, so re-running gives the same ids and the ``tasks`` table keeps one
row per task.
"""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import json
import random
import string
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

import duckdb
import polars as pl
import pyarrow as pa

from steptrace.corpus._formats import source_lines
from steptrace.tracing._analysis import ensure_analysed
from steptrace.store._store import FINISHED_STATUSES, MEMORY_ADDRESS, StoreError, connect, first_line
from steptrace.store._tables import TASKS
from steptrace.corpus._text import read_utf8

KINDS = ("output", "input", "state", "state_any", "next_line", "next_line_any", "coverage",
         "line_count", "branch", "steps", "trace", "exception")
STYLES = ("direct", "cot", "cruxeval")
STEP_KINDS = {"state", "state_any", "next_line", "next_line_any", "coverage", "line_count",
              "trace"}
STATE_KINDS = {"state", "state_any"}
UNBOUND = "unbound"
_CODE_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")

TASKS_DDL = TASKS.ddl()  # the table's one declaration is in engine/store/_tables.py
TASK_TYPES = TASKS.arrow_types()
TASK_COLUMNS = TASKS.column_names


# ====================================================================== options, records
@dataclass(frozen=True)
class TaskOptions:
    kinds: tuple[str, ...] = KINDS
    per_run: int = 3                  # at most this many questions of a kind per run
    seed: int = 0
    prompt_style: str = "direct"
    template_dir: Path | None = None  # user templates; missing files fall back to the bundled
    out: Path | None = None           # JSONL file; the Parquet file goes next to it
    max_trace_lines: int = 200        # no `trace` task for longer runs (the answer is the list)
    max_occurrence: int = 100         # k-th questions only for k <= this, or the last k
    workers: int | None = None        # analysis workers when `branch` needs analyse_store


@dataclass
class TaskSummary:
    db: str
    kinds: tuple[str, ...]
    runs: int = 0                                         # finished runs considered
    by_kind: Counter = field(default_factory=Counter)     # tasks per kind
    runs_by_kind: Counter = field(default_factory=Counter)  # runs with >= 1 task of a kind
    unparsed: int = 0          # runs whose program the host's ast cannot parse (no line kinds)
    out: str | None = None
    parquet: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def rows(self) -> list[tuple[str, int, int]]:
        """(kind, tasks, runs) for every requested kind, then the total."""
        rows = [(kind, self.by_kind[kind], self.runs_by_kind[kind]) for kind in self.kinds]
        return rows + [("total", self.total, self.runs)]

    def timing_text(self) -> str:
        parts = ", ".join(f"{name} {secs:.2f}" for name, secs in self.seconds.items()
                          if name != "total")
        return (f"{self.total} tasks from {self.runs} runs in "
                f"{self.seconds.get('total', 0.0):.2f} s ({parts})")


@dataclass(frozen=True)
class Candidate:
    """One possible question and its answer; ``score`` ranks informativeness (< 0: trivial,
    used only when nothing better exists) and ``group`` spreads choices over lines/vars."""
    score: int
    group: tuple
    answer: str
    answer_type: str
    line: int | None = None
    var: str | None = None
    occurrence: int | None = None
    question: tuple[tuple[str, object], ...] = ()   # extra question fields (JSON object)
    value_type: str | None = None


@dataclass
class Task:
    task_id: str
    kind: str
    run_id: int
    sample_id: str
    line: int | None
    var: str | None
    occurrence: int | None
    question: str | None
    answer: str
    answer_type: str
    value_type: str | None
    line_steps: int | None
    loop_nesting: int
    distinct_lines: int | None
    branch_count: int | None
    prompt_style: str
    prompt: str
    seed: int
    created_at: dt.datetime


def parse_kinds(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"all"`` or a comma-separated list of kinds, in KINDS order, without repeats."""
    names = [k.strip() for k in (text.split(",") if isinstance(text, str) else text)]
    names = [k for k in names if k]
    if not names:
        raise ValueError(f"no task kinds given; use 'all' or any of {', '.join(KINDS)}")
    if "all" in names:
        return KINDS
    unknown = [k for k in names if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown task kind {unknown[0]!r}; use 'all' or any of "
                         f"{', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in names)


# ====================================================================== static facts (ast)
@dataclass
class ProgramInfo:
    """What the host's ``ast`` says about a program: the lines a question may name."""
    lines: list[str]
    # one-line statement headers inside functions, and those of them in the entry's body
    # outside any branch or loop (they run whenever the call does)
    question_lines: set[int] = field(default_factory=set)
    unconditional: set[int] = field(default_factory=set)
    return_lines: set[int] = field(default_factory=set)
    loops: list[tuple[int, int]] = field(default_factory=list)  # line spans inside a loop
    conditions: dict[tuple[int, int], str] = field(default_factory=dict)  # (line, col) -> text
    # question line -> qualified name of the function whose statement it is (the outermost
    # one if a one-line nested def puts a second function's statement on the line)
    owners: dict[int, str] = field(default_factory=dict)
    # line -> how many lambdas, generator expressions, ... (by qualname tag) it holds: a
    # prompt can name "the lambda on line 3" only if there is one
    anonymous: dict[int, Counter] = field(default_factory=dict)

    def loop_nesting(self, line: int | None) -> int:
        if line is None:
            return 0
        return sum(first <= line <= last for first, last in self.loops)

    def text(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""


_TRIES = (ast.Try, getattr(ast, "TryStar", ast.Try))
_BRANCHING = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Match, *_TRIES)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# The last part of an anonymous code object's qualified name, the syntax that makes it and
# the words a prompt names it with. List, set and dict comprehensions have no frame of
# their own since CPython 3.12 (PEP 709), so the guest never shows them; they are here for
# a guest that does.
ANONYMOUS = {"<lambda>": (ast.Lambda, "lambda"),
             "<genexpr>": (ast.GeneratorExp, "generator expression"),
             "<listcomp>": (ast.ListComp, "list comprehension"),
             "<setcomp>": (ast.SetComp, "set comprehension"),
             "<dictcomp>": (ast.DictComp, "dict comprehension")}


def program_info(code: str, entry: str) -> ProgramInfo | None:
    """Statement lines, loop spans and condition texts; None if the host cannot parse the
    program (the guest is a newer CPython)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    info = ProgramInfo(source_lines(code))
    _visit(tree.body, info, in_function=False, conditional=True, entry=entry, top=True)
    anonymous = {node_type: tag for tag, (node_type, _) in ANONYMOUS.items()}
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            info.loops.append((node.body[0].lineno, _last_line(node.body)))
        elif isinstance(node, _COMPREHENSIONS):
            info.loops.append((node.lineno, node.end_lineno))
        if type(node) in anonymous:
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                info.anonymous.setdefault(line, Counter())[anonymous[type(node)]] += 1
        _add_conditions(node, code, info)
    return info


def _visit(body: list[ast.stmt], info: ProgramInfo, in_function: bool, conditional: bool,
           entry: str, scope_body: bool = False, top: bool = False,
           scope: str | None = None, scope_is_function: bool = False) -> None:
    """Record the statement lines of ``body`` that get line steps (those inside
    functions), whether each may be skipped when its function runs, and the qualified
    name of that function (``scope``: Python's ``__qualname__`` rules, ``f.<locals>.g``
    for a def inside a function, ``C.m`` for a method)."""
    for index, node in enumerate(body):
        docstring = scope_body and index == 0 and _is_string(node)
        if in_function and not docstring and not isinstance(node, (ast.Global, ast.Nonlocal)):
            _add_header(info, _header_span(node), conditional, scope)
            if isinstance(node, ast.Return):
                info.return_lines.add(node.lineno)
        if isinstance(node, _SCOPES):
            inner = in_function or not isinstance(node, ast.ClassDef)
            is_entry = top and isinstance(node, ast.FunctionDef) and node.name == entry
            qualname = (node.name if scope is None
                        else f"{scope}.<locals>.{node.name}" if scope_is_function
                        else f"{scope}.{node.name}")
            _visit(node.body, info, inner, not is_entry, entry, scope_body=True,
                   scope=qualname, scope_is_function=not isinstance(node, ast.ClassDef))
            continue
        for name in _CODE_STATEMENT_LISTS:
            children = getattr(node, name, None) or []
            for child in children:
                if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    if in_function:
                        _add_header(info, _header_span(child), True, scope)
                    _visit(child.body, info, in_function, True, entry, scope=scope,
                           scope_is_function=scope_is_function)
            statements = [child for child in children if isinstance(child, ast.stmt)]
            _visit(statements, info, in_function, conditional or _runs_sometimes(node, name),
                   entry, scope=scope, scope_is_function=scope_is_function)


def _is_string(node: ast.stmt) -> bool:
    """A docstring: no line step (the compiler keeps it as the code object's doc)."""
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def _runs_sometimes(node: ast.stmt, name: str) -> bool:
    """Whether the statements in ``node.<name>`` may be skipped when ``node`` runs."""
    if isinstance(node, _TRIES):
        return name not in ("body", "finalbody")
    return isinstance(node, _BRANCHING)


def _header_span(node: ast.AST) -> tuple[int, int]:
    """First and last line of a statement's own text: the whole of a simple statement,
    the header (decorators to colon) of a compound one."""
    first = getattr(node, "lineno", None) or node.pattern.lineno
    compound = any(hasattr(node, name) for name in _CODE_STATEMENT_LISTS)
    last = first if compound else node.end_lineno or first
    for name, value in ast.iter_fields(node):
        if name in _CODE_STATEMENT_LISTS:
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                for sub in ast.walk(child):
                    if getattr(sub, "lineno", None):
                        first = min(first, sub.lineno)
                        last = max(last, sub.end_lineno or sub.lineno)
    return first, last


def _add_header(info: ProgramInfo, span: tuple[int, int], conditional: bool,
                scope: str | None) -> None:
    first, last = span
    if first == last:  # a multi-line statement's steps land on several of its lines
        info.question_lines.add(first)
        if scope is not None:
            info.owners.setdefault(first, scope)  # statements are visited outer first
        if not conditional:
            info.unconditional.add(first)


def _last_line(body: list[ast.stmt]) -> int:
    return max(node.end_lineno or node.lineno for node in body)


def _add_conditions(node: ast.AST, code: str, info: ProgramInfo) -> None:
    tests = ([node.test] if isinstance(node, (ast.If, ast.While, ast.IfExp))
             else list(node.ifs) if isinstance(node, ast.comprehension) else [])
    for test in tests:
        text = ast.get_source_segment(code, test)
        if text:
            info.conditions[(test.lineno, test.col_offset)] = " ".join(text.split())


# ====================================================================== runs in memory
@dataclass
class LineExec:
    """One ``line`` step: its occurrence k (per function and line, whole run, step order:
    a lambda on the line counts its own executions, not its caller's) and what the trace
    says happened right after it in its frame."""
    k: int
    line: int
    frame: int
    func: str
    after: dict[str, tuple] | None = None    # frame locals at the frame's next step
    changed: frozenset[str] = frozenset()    # names changed at that step
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
    steps: list[tuple] = field(default_factory=list)    # (step, event, func, line, depth, frame)
    states: list[tuple] = field(default_factory=list)   # (step, var, value, type, truncated)
    branches: list[tuple] = field(default_factory=list)  # (line, col, kind, evaluation, taken)


_RUNS_SQL = """
SELECT r.run_id, r.sample_id, r.run_key, r.status, r.input, r.output, r.output_type,
       r.output_truncated, r.exception_type, r.line_steps, p.code, p.entry,
       coalesce(d.distinct_lines, 0), b.branch_count, a.agrees
FROM runs r JOIN programs p USING (program_id)
LEFT JOIN (SELECT run_id, count(DISTINCT line) AS distinct_lines FROM steps
           WHERE event = 'line' GROUP BY run_id) d USING (run_id)
LEFT JOIN (SELECT run_id, count(*) AS branch_count FROM branches GROUP BY run_id) b USING (run_id)
LEFT JOIN analyses a USING (run_id)
WHERE r.status IN ('ok', 'exception')
ORDER BY r.run_id
"""
_FINISHED = ("run_id IN (SELECT run_id FROM runs WHERE status IN ("
             + ", ".join(f"'{status}'" for status in FINISHED_STATUSES) + "))")


def load_runs(con: duckdb.DuckDBPyConnection, kinds: Iterable[str]) -> list[RunData]:
    """Every finished run with the detail rows ``kinds`` need, in one query per table."""
    kinds = set(kinds)
    runs = [RunData(*row) for row in con.execute(_RUNS_SQL).fetchall()]
    by_id = {run.run_id: run for run in runs}
    if kinds & STEP_KINDS:
        _attach(by_id, con, "SELECT run_id, step, event, func, line, depth, frame FROM steps "
                            f"WHERE {_FINISHED} ORDER BY run_id, step", "steps")
    if kinds & STATE_KINDS:
        _attach(by_id, con, "SELECT run_id, step, var, value, type, truncated FROM states "
                            f"WHERE {_FINISHED} ORDER BY run_id, step, rowid", "states")
    if "branch" in kinds:
        _attach(by_id, con, "SELECT run_id, line, col, kind, evaluation, taken FROM branches "
                            f"WHERE {_FINISHED} ORDER BY run_id, line, col, evaluation",
                "branches")
    return runs


def _attach(by_id: dict[int, RunData], con, sql: str, name: str) -> None:
    frame = con.sql(sql).pl()
    if frame.is_empty():
        return
    for (run_id,), part in frame.partition_by("run_id", as_dict=True,
                                              maintain_order=True).items():
        setattr(by_id[run_id], name, part.drop("run_id").rows())


def replay(run: RunData) -> list[LineExec]:
    """The run's line steps with the state and next line that follow each in its frame.

    A frame's locals are its state deltas applied in step order; the state "after" a line
    is the one at the frame's next step (none when that step is a ``yield``: the line has
    not finished). The next line skips ``yield``/``resume``/``raise``/``throw`` steps and
    is ``return``/``raise`` when the frame's next such step is ``return``/``unwind``.
    ``k`` counts per (function, line): a question names one function, and a line can
    hold code of several (a lambda or generator expression runs in a frame of its own)."""
    deltas: dict[int, list[tuple]] = {}
    for step, var, value, type_, truncated in run.states:
        deltas.setdefault(step, []).append((var, value, type_, truncated))
    frames: dict[int, dict[str, tuple]] = {}
    waiting_state: dict[int, LineExec] = {}
    waiting_next: dict[int, LineExec] = {}
    counts: Counter = Counter()
    execs: list[LineExec] = []
    for step, event, func, line, _depth, frame in run.steps:
        local = frames.setdefault(frame, {})
        changes = deltas.get(step, ())
        for var, value, type_, truncated in changes:
            local[var] = (value, type_, truncated)
        previous = waiting_state.pop(frame, None)
        if previous is not None and event != "yield":
            previous.after = dict(local)
            previous.changed = frozenset(change[0] for change in changes)
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


# ====================================================================== candidates per kind
@dataclass
class RunFacts:
    """Derived once per run, shared by the kinds' candidate builders."""
    run: RunData
    info: ProgramInfo | None
    execs: list[LineExec]
    by_line: dict[int, list[LineExec]]              # every function's executions of a line
    by_func_line: dict[tuple[int, str], list[LineExec]]  # (line, func) -> its executions
    arguments: set[tuple[str | None, str | None]]   # (repr, type) of the entry's arguments
    options: TaskOptions


def run_facts(run: RunData, info: ProgramInfo | None, options: TaskOptions) -> RunFacts:
    execs = replay(run) if run.steps else []
    by_line: dict[int, list[LineExec]] = {}
    by_func_line: dict[tuple[int, str], list[LineExec]] = {}
    for item in execs:
        by_line.setdefault(item.line, []).append(item)
        by_func_line.setdefault((item.line, item.func), []).append(item)
    first = run.steps[0][0] if run.steps else None
    arguments = {(value, type_) for step, var, value, type_, _ in run.states
                 if step == first and not var.startswith("<")}
    return RunFacts(run, info, execs, by_line, by_func_line, arguments, options)


def _bound(value: tuple) -> bool:
    """A deleted name is recorded with value and type NULL."""
    return value[1] is not None


def _answerable(value: tuple) -> bool:
    """A value a model could write exactly: bound, kept whole, free of memory addresses."""
    return _bound(value) and not value[2] and not MEMORY_ADDRESS.search(value[0] or "")


def _plain_var(name: str) -> bool:
    return not name.startswith("<") and not (name.startswith("__") and name.endswith("__"))


def _asked(facts: RunFacts, execs: list[LineExec]) -> list[LineExec]:
    """The executions a k-th question may name: the first ``max_occurrence`` and the last."""
    limit = facts.options.max_occurrence
    return [e for e in execs if e.k <= limit or e is execs[-1]]


def _state(facts: RunFacts) -> list[Candidate]:
    found = []
    for line, func, execs in _line_groups(facts, anonymous=True):
        if any(e.after is None for e in execs):
            continue  # a yield line (not finished) or a frame that never went on
        values: dict[str, set] = {}
        for e in execs:
            for var, value in e.after.items():
                values.setdefault(var, set()).add(value[:2])
        for e in _asked(facts, execs):
            for var, value in sorted(e.after.items()):
                bound = _bound(value)
                if not _plain_var(var) or (bound and not _answerable(value)):
                    continue
                if value[:2] in facts.arguments:
                    continue  # the prompt's own input gives it away
                score = (2 * (var in e.changed) + (len(execs) > 1)
                         + (len(values[var]) > 1))
                found.append(Candidate(
                    score, (line, func, var), value[0] if bound else UNBOUND,
                    "repr" if bound else UNBOUND, line, var, e.k, (("func", func),),
                    value[1] if bound else None))
    return found


def _state_any(facts: RunFacts) -> list[Candidate]:
    found = []
    for line, func, execs in _line_groups(facts, anonymous=True):
        if len(execs) < 2 or any(e.after is None for e in execs):
            continue
        names = set.intersection(*(set(e.after) for e in execs))
        for var in sorted(filter(_plain_var, names)):
            values = [e.after[var] for e in execs]
            if not all(_answerable(v) for v in values):
                continue  # unbound after some execution, cut, or an address
            reprs = sorted({v[0] for v in values})
            if {v[:2] for v in values} <= facts.arguments:
                continue
            score = 2 * (len(reprs) > 1) + any(var in e.changed for e in execs)
            found.append(Candidate(score, (line, func), json.dumps(reprs, ensure_ascii=False),
                                   "set", line, var, None, (("func", func),)))
    return found


def _askable_next(facts: RunFacts, answer: int | str | None) -> bool:
    """A next line the trace knows (the frame went on) and a prompt can name: ``return``,
    ``raise`` or a statement line (not the middle of a multi-line statement)."""
    return answer is not None and (isinstance(answer, str)
                                   or answer in facts.info.question_lines)


def _next_line(facts: RunFacts) -> list[Candidate]:
    found = []
    for line, func, execs in _line_groups(facts, anonymous=False):
        answers = [e.next_line for e in execs if _askable_next(facts, e.next_line)]
        if not answers or _returns_trivially(facts, line, answers):
            continue
        common = Counter(answers).most_common(1)[0][0]
        for e in _asked(facts, execs):
            if not _askable_next(facts, e.next_line):
                continue
            if len(execs) == 1:  # once, on to the line below it: the prompt gives it away
                score = -1 if e.next_line == _line_below(facts, line) else 1
            else:
                score = 1 + 2 * (len(set(answers)) > 1) + (e.next_line != common)
            found.append(Candidate(score, (line, func), str(e.next_line), "line", line, None,
                                   e.k, (("func", func),)))
    return found


def _line_below(facts: RunFacts, line: int) -> int | None:
    """The first statement line after ``line`` in the text (where control falls through)."""
    return min((other for other in facts.info.question_lines if other > line), default=None)


def _next_line_any(facts: RunFacts) -> list[Candidate]:
    found = []
    for line, func, execs in _line_groups(facts, anonymous=False):
        answers = [e.next_line for e in execs]
        if (len(execs) < 2 or not all(_askable_next(facts, a) for a in answers)
                or _returns_trivially(facts, line, answers)):
            continue
        unique = sorted(set(answers), key=lambda a: (isinstance(a, str), a))
        found.append(Candidate(2 * (len(unique) > 1), (line, func), json.dumps(unique), "set",
                               line, None, None, (("func", func),)))
    return found


def _returns_trivially(facts: RunFacts, line: int, answers: list) -> bool:
    return line in facts.info.return_lines and set(answers) == {"return"}


def _line_groups(facts: RunFacts, anonymous: bool) -> list[tuple[int, str, list[LineExec]]]:
    """(line, function, its executions of the line) for each question line and each
    function that ran it, in line order: a question names one function and counts only
    its executions. A lambda or generator expression (``anonymous``: state kinds only)
    is named by its kind and line, so only when the line holds one of its kind; the
    next-line kinds never ask about one (its code is one expression on the line: the next
    line is that line again or ``return``)."""
    lines = facts.info.question_lines
    return [(line, func, execs) for (line, func), execs in sorted(facts.by_func_line.items())
            if line in lines and function_words(func, line, facts.info) is not None
            and (anonymous or not anonymous_tag(func))]


def anonymous_tag(func: str) -> str | None:
    """``<lambda>``, ``<genexpr>``, ...: the last part of an anonymous function's qualified
    name; None for a function with a name (a def, or a class body)."""
    last = func.rsplit(".", 1)[-1]
    return last if last.startswith("<") else None


def function_words(func: str, line: int, info: ProgramInfo) -> str | None:
    """How a prompt names ``func``: a named function by its qualified name in backticks
    (`` `f` ``, `` `f.<locals>.helper` ``), an anonymous one by its kind and line ("the
    lambda on line 3"), None when that would not say which (the line holds two lambdas,
    or the host's ``ast`` does not see the syntax the trace names)."""
    tag = anonymous_tag(func)
    if tag is None:
        return f"`{func}`"
    if tag not in ANONYMOUS or info.anonymous.get(line, Counter())[tag] != 1:
        return None
    return f"the {ANONYMOUS[tag][1]} on line {line}"


def _coverage(facts: RunFacts) -> list[Candidate]:
    found = []
    for line in sorted(facts.info.question_lines):
        ran = line in facts.by_line
        score = 2 if not ran else (-1 if line in facts.info.unconditional else 1)
        found.append(Candidate(score, (ran,), json.dumps(ran), "bool", line))
    return found


def _line_count(facts: RunFacts) -> list[Candidate]:
    """How often the line's own function (``info.owners``) runs it; executions by a
    lambda or generator expression on the line are that function's, not the line's
    owner's, and do not count."""
    found = []
    for line in sorted(facts.info.question_lines):
        owner = facts.info.owners.get(line)
        count = len(facts.by_func_line.get((line, owner), ()))
        if owner is None or (count == 0 and line in facts.by_line):
            continue  # ran, but never under the name the host's ast gives its function
        score = 2 + (count > 2) if count > 1 else (1 if count == 0 else -1)
        found.append(Candidate(score, (line,), str(count), "int", line))
    return found


def _branch(facts: RunFacts) -> list[Candidate]:
    if facts.run.agrees is False:
        return []  # the analysis run went another way than the trace
    conditions: dict[tuple[int, int], list[tuple]] = {}
    for line, col, kind, evaluation, taken in facts.run.branches:
        conditions.setdefault((line, col), []).append((kind, evaluation, taken))
    texts = Counter((line, text) for (line, _), text in facts.info.conditions.items())
    found = []
    for (line, col), evaluations in sorted(conditions.items()):
        text = facts.info.conditions.get((line, col))
        if text is None or texts[(line, text)] > 1:
            continue  # the prompt could not say which condition it means
        outcomes = Counter(taken for _, _, taken in evaluations)
        last = evaluations[-1][1]
        for kind, k, taken in evaluations:
            if k > facts.options.max_occurrence and k != last:
                continue
            score = 2 * (len(outcomes) > 1) + (outcomes[taken] < outcomes[not taken])
            found.append(Candidate(score, (line, col), json.dumps(taken), "bool", line, None, k,
                                   (("col", col), ("condition", text),
                                    ("condition_kind", kind))))
    return found


def _output(facts: RunFacts) -> list[Candidate]:
    run = facts.run
    if run.status != "ok" or run.output_truncated or MEMORY_ADDRESS.search(run.output or ""):
        return []
    return [Candidate(0, (), run.output, "repr", question=(("input", run.input),),
                      value_type=run.output_type)]


def _input(facts: RunFacts) -> list[Candidate]:
    return ([Candidate(0, (), facts.run.input, "input", question=(("output", facts.run.output),))]
            if _output(facts) else [])


def _steps(facts: RunFacts) -> list[Candidate]:
    return [Candidate(0, (), str(facts.run.line_steps), "int")]


def _trace(facts: RunFacts) -> list[Candidate]:
    lines = [[line, depth] for _, event, _, line, depth, _ in facts.run.steps if event == "line"]
    if not lines or len(lines) > facts.options.max_trace_lines:
        return []
    return [Candidate(0, (), json.dumps(lines), "trace")]


def _exception(facts: RunFacts) -> list[Candidate]:
    return [Candidate(0, (), facts.run.exception_type or "none", "exception")]


BUILDERS: dict[str, Callable[[RunFacts], list[Candidate]]] = {
    "output": _output, "input": _input, "state": _state, "state_any": _state_any,
    "next_line": _next_line, "next_line_any": _next_line_any, "coverage": _coverage,
    "line_count": _line_count, "branch": _branch, "steps": _steps, "trace": _trace,
    "exception": _exception,
}
NEEDS_AST = {"state", "state_any", "next_line", "next_line_any", "coverage", "line_count",
             "branch"}


def candidates(facts: RunFacts, kind: str) -> list[Candidate]:
    """Every question of ``kind`` the run allows, unranked."""
    if kind in NEEDS_AST and facts.info is None:
        return []
    return BUILDERS[kind](facts)


def select(found: list[Candidate], limit: int, rng: random.Random) -> list[Candidate]:
    """Up to ``limit`` candidates: highest score first (ties in ``rng`` order), one per
    group before any group gets a second. Trivial ones (score < 0: a line that runs once
    and goes on to the next, a line that runs whenever the call does) are never asked:
    the prompt gives their answer away."""
    pool = [c for c in found if c.score >= 0]
    rng.shuffle(pool)
    pool.sort(key=lambda c: -c.score)
    chosen: list[Candidate] = []
    groups: set[tuple] = set()
    for candidate in pool:
        if len(chosen) < limit and candidate.group not in groups:
            chosen.append(candidate)
            groups.add(candidate.group)
    for candidate in pool:
        if len(chosen) >= limit:
            break
        if not any(candidate is c for c in chosen):
            chosen.append(candidate)
    return chosen


# ====================================================================== prompts
COMMON_FIELDS = {"code", "numbered_code", "entry", "input", "call"}
LINE_FIELDS = {"line", "line_text", "func", "function"}
FIELDS: dict[str, set[str]] = {
    "output": COMMON_FIELDS,
    "input": {"code", "numbered_code", "entry", "output"},
    "state": COMMON_FIELDS | LINE_FIELDS | {"var", "k", "kth"},
    "state_any": COMMON_FIELDS | LINE_FIELDS | {"var"},
    "next_line": COMMON_FIELDS | LINE_FIELDS | {"k", "kth"},
    "next_line_any": COMMON_FIELDS | LINE_FIELDS,
    "coverage": COMMON_FIELDS | {"line", "line_text"},
    "line_count": COMMON_FIELDS | LINE_FIELDS,
    "branch": COMMON_FIELDS | {"line", "line_text", "k", "kth", "condition", "col",
                               "condition_kind"},
    "steps": COMMON_FIELDS,
    "trace": COMMON_FIELDS,
    "exception": COMMON_FIELDS,
}
# Each inner set: the template must use at least one of its placeholders.
REQUIRED: dict[str, list[set[str]]] = {
    "output": [{"code", "numbered_code"}, {"input", "call"}],
    "input": [{"code", "numbered_code"}, {"output"}],
    "state": [{"code", "numbered_code"}, {"input", "call"}, {"line"}, {"var"}, {"k", "kth"}],
    "state_any": [{"code", "numbered_code"}, {"input", "call"}, {"line"}, {"var"}],
    "next_line": [{"code", "numbered_code"}, {"input", "call"}, {"line"}, {"k", "kth"}],
    "next_line_any": [{"code", "numbered_code"}, {"input", "call"}, {"line"}],
    "coverage": [{"code", "numbered_code"}, {"input", "call"}, {"line"}],
    "line_count": [{"code", "numbered_code"}, {"input", "call"}, {"line"}],
    "branch": [{"code", "numbered_code"}, {"input", "call"}, {"line"}, {"k", "kth"},
               {"condition", "col"}],
    "steps": [{"code", "numbered_code"}, {"input", "call"}],
    "trace": [{"code", "numbered_code"}, {"input", "call"}],
    "exception": [{"code", "numbered_code"}, {"input", "call"}],
}


def bundled_template_dir() -> Path:
    return Path(str(resources.files("steptrace.tasks") / "prompts"))


def load_templates(kinds: Iterable[str], style: str,
                   template_dir: Path | None = None) -> dict[str, string.Template]:
    """``<kind>.<style>.txt`` for each kind, from ``template_dir`` if it has the file,
    else the bundled one; each checked for unknown and missing placeholders."""
    if style not in STYLES:
        raise ValueError(f"unknown prompt style {style!r}; use one of {', '.join(STYLES)}")
    if template_dir is not None and not Path(template_dir).is_dir():
        raise ValueError(f"template directory not found: {template_dir}")
    templates = {}
    for kind in kinds:
        name = f"{kind}.{style}.txt"
        path = Path(template_dir) / name if template_dir is not None else None
        if path is None or not path.is_file():
            path = bundled_template_dir() / name
        if not path.is_file():
            raise ValueError(f"no {style} prompt template for kind {kind!r} "
                             f"(no {name}); the cruxeval style exists for output and input")
        templates[kind] = _checked(path, kind)
    return templates


def _checked(path: Path, kind: str) -> string.Template:
    template = string.Template(read_utf8(path))
    if not template.is_valid():
        raise ValueError(f"template {path}: a '$' that is not a placeholder (write $$ for '$')")
    used = set(template.get_identifiers())
    unknown = sorted(used - FIELDS[kind])
    if unknown:
        raise ValueError(f"template {path}: unknown placeholder ${unknown[0]} for kind {kind} "
                         f"(known: {', '.join('$' + f for f in sorted(FIELDS[kind]))})")
    for group in REQUIRED[kind]:
        if not used & group:
            raise ValueError(f"template {path}: missing placeholder "
                             f"{' or '.join('$' + f for f in sorted(group))}")
    return template


def numbered(code: str) -> str:
    lines = source_lines(code)
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}} | {text}".rstrip() for i, text in enumerate(lines, start=1))


def ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def render(template: string.Template, facts: RunFacts, candidate: Candidate) -> str:
    run = facts.run
    values = {"code": run.code, "numbered_code": numbered(run.code), "entry": run.entry,
              "input": run.input, "call": f"{run.entry}({run.input})",
              "output": run.output or ""}
    if candidate.line is not None:
        values.update(line=candidate.line,
                      line_text=facts.info.text(candidate.line) if facts.info else "")
    if candidate.var is not None:
        values["var"] = candidate.var
    if candidate.occurrence is not None:
        values.update(k=candidate.occurrence, kth=ordinal(candidate.occurrence))
    values.update(dict(candidate.question))
    if candidate.line is not None and facts.info is not None:
        # the function whose executions are counted: the question's (state and next-line
        # kinds), else the line's own (line_count; its question and id stay without it)
        func = values.get("func") or facts.info.owners.get(candidate.line)
        if func is not None:
            values.update(func=func, function=function_words(func, candidate.line, facts.info))
    return template.substitute(values)


# ====================================================================== generation
def task_id(run_key: str, kind: str, candidate: Candidate) -> str:
    """Stable identity: the run, the kind and the question (not the prompt or seed)."""
    key = json.dumps([run_key, kind, candidate.line, candidate.var, candidate.occurrence,
                      dict(candidate.question)], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()


def tasks_for_run(run: RunData, info: ProgramInfo | None, options: TaskOptions,
                  templates: dict[str, string.Template], now: dt.datetime) -> list[Task]:
    facts = run_facts(run, info, options)
    tasks = []
    for kind in options.kinds:
        rng = random.Random(f"{options.seed}:{run.run_key}:{kind}")
        for c in select(candidates(facts, kind), options.per_run, rng):
            tasks.append(Task(
                task_id(run.run_key, kind, c), kind, run.run_id, run.sample_id, c.line, c.var,
                c.occurrence,
                json.dumps(dict(c.question), ensure_ascii=False) if c.question else None,
                c.answer, c.answer_type, c.value_type, run.line_steps,
                info.loop_nesting(c.line) if info else 0, run.distinct_lines, run.branch_count,
                options.prompt_style, render(templates[kind], facts, c), options.seed, now))
    return tasks


def generate_tasks(db: str | Path, options: TaskOptions | None = None) -> TaskSummary:
    """Make tasks for every finished run of ``db``, store them in its ``tasks`` table and,
    with ``options.out``, write them as JSONL and Parquet."""
    options = options or TaskOptions()
    started = time.perf_counter()
    _check(db, options)
    options = replace(options, kinds=parse_kinds(options.kinds))
    summary = TaskSummary(db=str(db), kinds=options.kinds)
    templates = load_templates(options.kinds, options.prompt_style, options.template_dir)
    if "branch" in options.kinds:
        summary.seconds["analyse"] = _analyse(db, options)
    con = connect(db)
    try:
        mark = time.perf_counter()
        runs = _load(con, db, options.kinds)
        summary.seconds["load"] = time.perf_counter() - mark
        mark = time.perf_counter()
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        infos: dict[tuple[str, str], ProgramInfo | None] = {}
        tasks: list[Task] = []
        for run in runs:
            key = (run.code, run.entry)
            if key not in infos:
                infos[key] = program_info(run.code, run.entry)
            summary.unparsed += infos[key] is None
            made = tasks_for_run(run, infos[key], options, templates, now)
            summary.by_kind.update(t.kind for t in made)
            summary.runs_by_kind.update({t.kind for t in made})
            tasks.extend(made)
        summary.runs = len(runs)
        summary.seconds["generate"] = time.perf_counter() - mark
        mark = time.perf_counter()
        frame = store_tasks(con, db, tasks)
        if options.out is not None:
            summary.out, summary.parquet = write_tasks(frame, Path(options.out))
        summary.seconds["store"] = time.perf_counter() - mark
    finally:
        con.close()
    summary.seconds["total"] = time.perf_counter() - started
    return summary


def _check(db: str | Path, options: TaskOptions) -> None:
    """Refuse bad arguments before any work (and before creating a file)."""
    if not Path(db).is_file():
        raise StoreError(f"database not found: {db}")
    parse_kinds(options.kinds)
    if options.per_run < 1:
        raise ValueError("--per-run must be at least 1")
    if options.out is not None:
        out = Path(options.out)
        if not out.parent.is_dir():
            raise ValueError(f"cannot write {out}: directory {out.parent} does not exist")
        if out.suffix == ".parquet":
            raise ValueError(f"--out names the JSONL file ({out}); the Parquet file is "
                             "written next to it")


def _analyse(db: str | Path, options: TaskOptions) -> float:
    """Condition outcomes come from the analysis run; make sure every run has one."""
    mark = time.perf_counter()
    ensure_analysed(db, workers=options.workers)
    return time.perf_counter() - mark


def _load(con, db, kinds) -> list[RunData]:
    try:
        runs = load_runs(con, kinds)
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    if not runs:
        raise ValueError(f"no finished (ok or exception) runs in {db}: nothing to ask about")
    return runs


def _sort_key(task: Task) -> tuple:
    return (task.run_id, KINDS.index(task.kind), task.line or 0, task.occurrence or 0,
            task.var or "", task.question or "")


def store_tasks(con: duckdb.DuckDBPyConnection, db: str | Path,
                tasks: list[Task]) -> pl.DataFrame:
    """Upsert ``tasks`` (one row per task_id; ``created_at`` kept from the first time) and
    return them as stored, in a stable order."""
    tasks = sorted(tasks, key=_sort_key)
    # getattr, not dataclasses.asdict: asdict deep-copies every field of every task
    incoming = pa.table({name: pa.array([getattr(task, name) for task in tasks], TASK_TYPES[name])
                         for name in TASK_COLUMNS})
    order = pa.table({"task_id": incoming.column("task_id"),
                      "ord": pa.array(range(len(tasks)), pa.int64())})
    updates = ", ".join(f"{c} = excluded.{c}" for c in TASK_COLUMNS[1:] if c != "created_at")
    try:
        con.execute(TASKS_DDL)
        con.register("incoming_tasks", incoming)
        con.register("task_order", order)
        con.execute("BEGIN TRANSACTION")
        if tasks:
            con.execute(f"INSERT INTO tasks SELECT * FROM incoming_tasks "
                        f"ON CONFLICT (task_id) DO UPDATE SET {updates}")
        con.execute("COMMIT")
        return con.sql("SELECT t.* FROM tasks t JOIN task_order o USING (task_id) "
                           "ORDER BY o.ord").pl()
    except duckdb.Error as exc:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        raise StoreError(f"cannot write tasks to database {db}: {first_line(exc)}") from exc
    finally:
        con.unregister("incoming_tasks")
        con.unregister("task_order")


def write_tasks(frame: pl.DataFrame, out: Path) -> tuple[str, str]:
    """JSONL (one object per task, the table's columns) and Parquet next to it."""
    parquet = out.with_suffix(".parquet")
    frame.write_ndjson(out)
    frame.write_parquet(parquet)
    return str(out), str(parquet)
