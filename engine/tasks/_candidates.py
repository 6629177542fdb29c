"""The questions a finished run allows, per task kind, and which of them are asked.

Each kind's builder (``build_<kind>``, registered in engine/tasks/_kinds.py) turns the
facts of one run (its line executions replayed from the trace, the program's ast facts)
into every :class:`Candidate` question with its answer and a score; :func:`select` picks
the ones asked (README, "Selection").
"""

from __future__ import annotations

import ast
import json
import random
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from steptrace.store._runs import settrace_view
from steptrace.store._store import MEMORY_ADDRESS, OPAQUE_REPR
from steptrace.corpus._statements import MODULE
from steptrace.tasks._program import ANONYMOUS, ProgramInfo
from steptrace.tasks._runs import LineExec, RunData, replay

if TYPE_CHECKING:
    from steptrace.tasks._tasks import TaskOptions

UNBOUND = "unbound"


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
    arguments = {(value, type_) for step, var, value, type_, *_ in run.states
                 if step == first and not var.startswith("<")}
    return RunFacts(run, info, execs, by_line, by_func_line, arguments, options)


def settrace_facts(facts: RunFacts) -> RunFacts | None:
    """The facts of the run's settrace view (``tasks --lines settrace``), for the
    line-sequence kinds: its steps with the view's own line events in place
    (engine/store/_runs.py, ``settrace_view``), its line steps counted as settrace
    counts them; None when the run's view was not recorded (no question then). The
    view's own events carry no state: the state kinds keep the steps' facts."""
    run = facts.run
    if run.settrace_line_steps is None:
        return None
    viewed = replace(run, steps=settrace_view(run.steps, run.settrace_lines),
                     line_steps=run.settrace_line_steps)
    return run_facts(viewed, facts.info, facts.options)


def _bound(value: tuple) -> bool:
    """A deleted name is recorded with value and type NULL."""
    return value[1] is not None


def _answerable(value: tuple) -> bool:
    """A value a model could write exactly: bound, kept whole, free of memory addresses
    (and of the reprs that had one before schema 4: functions, generators, ...)."""
    return _bound(value) and not value[2] and not _opaque(value[0])


def _opaque(text: str | None) -> bool:
    return bool(text) and bool(MEMORY_ADDRESS.search(text) or OPAQUE_REPR.search(text))


def _plain_var(name: str) -> bool:
    """A local a prompt can name (not an event value, not a dunder), or an attribute path
    whose attributes are written as Python reads them anywhere: a private name
    (``self.__hidden``, a slot shown by its declared name) means another attribute
    outside its class's methods (name mangling), so it is not asked about."""
    root, *attrs = name.split(".")
    return (not root.startswith("<") and not (root.startswith("__") and root.endswith("__"))
            and not any(attr.startswith("__") and not attr.endswith("__") for attr in attrs))


def _asked(facts: RunFacts, execs: list[LineExec]) -> list[LineExec]:
    """The executions a k-th question may name: the first ``max_occurrence`` and the last."""
    limit = facts.options.max_occurrence
    return [e for e in execs if e.k <= limit or e is execs[-1]]


def build_state(facts: RunFacts) -> list[Candidate]:
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


def build_state_any(facts: RunFacts) -> list[Candidate]:
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


def build_type(facts: RunFacts) -> list[Candidate]:
    """The type of a local (or attribute path) right after the k-th execution of a line.
    Never asked where the type is one a repr shows at a glance (``_OBVIOUS_TYPES``) and
    the same after every execution of the line; first where it varies."""
    found = []
    for line, func, execs in _line_groups(facts, anonymous=True):
        if any(e.after is None for e in execs):
            continue
        kinds: dict[str, set] = {}
        for e in execs:
            for var, value in e.after.items():
                if _bound(value):
                    kinds.setdefault(var, set()).add(value[1])
        for e in _asked(facts, execs):
            for var, value in sorted(e.after.items()):
                if not _plain_var(var) or not _bound(value):
                    continue
                type_name = value[1]
                varies = len(kinds[var]) > 1
                score = 2 * varies + (var in e.changed)
                if type_name in _OBVIOUS_TYPES and not varies:
                    score = -1  # the repr says it, and it is the same every time
                found.append(Candidate(score, (line, func, var), type_name, "type", line, var,
                                       e.k, (("func", func),), type_name))
    return found


# Types a repr shows at a glance: asked only where the type varies over the executions.
_OBVIOUS_TYPES = frozenset({"int", "float", "str", "bytes", "list", "dict", "set", "tuple",
                            "bool", "NoneType", "function", "generator"})


def build_alias(facts: RunFacts) -> list[Candidate]:
    """Whether two names (locals or attribute paths) refer to the same object right after
    the k-th execution of a line: pairs of names bound to tracked objects (docs/guides/
    runs.md, "Objects") whose values do not give the answer away: the same object under
    two names (true), or two objects with equal values (false)."""
    found = []
    for line, func, execs in _line_groups(facts, anonymous=True):
        if any(e.after is None for e in execs):
            continue
        for e in _asked(facts, execs):
            named = sorted((var, value) for var, value in e.after.items()
                           if _plain_var(var) and _bound(value) and value[3] is not None)
            for index, (first, a) in enumerate(named[:_MAX_ALIAS_NAMES]):
                for second, b in named[index + 1:_MAX_ALIAS_NAMES]:
                    same = a[3] == b[3]
                    equal_text = a[0] == b[0] and a[1] == b[1] and not a[2]
                    if not same and not equal_text:
                        continue  # two objects with different values: the values say so
                    score = (3 if not same else 2) + (first in e.changed
                                                      or second in e.changed)
                    found.append(Candidate(score, (line, func, first, second),
                                           json.dumps(same), "bool", line, first, e.k,
                                           (("func", func), ("other", second))))
    return found


_MAX_ALIAS_NAMES = 12  # names considered per execution: at most 66 pairs


def _askable_next(facts: RunFacts, answer: int | str | None) -> bool:
    """A next line the trace knows (the frame went on) and a prompt can name: ``return``,
    ``raise`` or a statement line (not the middle of a multi-line statement)."""
    return answer is not None and (isinstance(answer, str)
                                   or answer in facts.info.question_lines)


def build_next_line(facts: RunFacts) -> list[Candidate]:
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


def build_next_line_any(facts: RunFacts) -> list[Candidate]:
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


MODULE_WORDS = "the script's top level"  # how a prompt names a script's module code


def anonymous_tag(func: str) -> str | None:
    """``<lambda>``, ``<genexpr>``, ...: the last part of an anonymous function's qualified
    name; None for a function with a name (a def, or a class body) and for a script's
    top level (``<module>``)."""
    last = func.rsplit(".", 1)[-1]
    return last if last.startswith("<") and func != MODULE else None


def function_words(func: str, line: int, info: ProgramInfo) -> str | None:
    """How a prompt names ``func``: a named function by its qualified name in backticks
    (`` `f` ``, `` `f.<locals>.helper` ``), an anonymous one by its kind and line ("the
    lambda on line 3"), None when that would not say which (the line holds two lambdas,
    or the host's ``ast`` does not see the syntax the trace names)."""
    if func == MODULE:
        return MODULE_WORDS
    tag = anonymous_tag(func)
    if tag is None:
        return f"`{func}`"
    if tag not in ANONYMOUS or info.anonymous.get(line, Counter())[tag] != 1:
        return None
    return f"the {ANONYMOUS[tag][1]} on line {line}"


def build_coverage(facts: RunFacts) -> list[Candidate]:
    found = []
    for line in sorted(facts.info.question_lines):
        ran = line in facts.by_line
        score = 2 if not ran else (-1 if line in facts.info.unconditional else 1)
        found.append(Candidate(score, (ran,), json.dumps(ran), "bool", line))
    return found


def build_line_count(facts: RunFacts) -> list[Candidate]:
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


def build_branch(facts: RunFacts) -> list[Candidate]:
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


def build_output(facts: RunFacts) -> list[Candidate]:
    """The call's return value: not asked of a script (it returns nothing; what it prints
    is its output), of a test method (it returns None; whether it passes is the
    ``exception`` question) or of a call given stdin (the output prompts show no stdin).
    The ``cruxeval`` prompt asks for a Python literal that makes ``assert CALL == ??``
    pass: asked only where the value is one (:func:`python_literal`)."""
    run = facts.run
    if (run.status != "ok" or run.output_truncated or _opaque(run.output)
            or run.shape == "script" or run.test is not None or run.stdin is not None):
        return []
    if facts.options.prompt_style == "cruxeval" and not python_literal(run.output):
        return []
    return [Candidate(0, (), run.output, "repr", question=(("input", run.input),),
                      value_type=run.output_type)]


def build_input(facts: RunFacts) -> list[Candidate]:
    """The call's input from its output: not asked of a method chain (its input is the
    constructor's, and a predicted one could not be checked by calling the entry) or of a
    call given stdin (the check calls the entry without it). The prompt shows the output
    and an answer is right when the call returns a value equal to it (``==``, in the
    guest): asked only where the output is a Python literal (:func:`python_literal`),
    whose value is that (an instance's rendering, ``Node(v=7)``, is no value a call could
    be compared with)."""
    if facts.run.chain is not None or facts.run.stdin is not None:
        return []
    if not build_output(facts) or not python_literal(facts.run.output):
        return []
    return [Candidate(0, (), facts.run.input, "input", question=(("output", facts.run.output),))]


def python_literal(text: str | None) -> bool:
    """Whether ``text`` is a Python literal that calls nothing: ``ast.literal_eval`` reads
    it, and it holds no call (``set()``, ``frozenset({1})``, an instance's ``Node(v=7)``
    are calls; ``nan`` and ``inf`` are names)."""
    if not text:
        return False
    try:
        tree = ast.parse(text, mode="eval")
        ast.literal_eval(tree)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return False
    return not any(isinstance(node, ast.Call) for node in ast.walk(tree))


def build_steps(facts: RunFacts) -> list[Candidate]:
    return [Candidate(0, (), str(facts.run.line_steps), "int")]


def build_trace(facts: RunFacts) -> list[Candidate]:
    lines = [[line, depth] for _, event, _, line, depth, _ in facts.run.steps if event == "line"]
    if not lines or len(lines) > facts.options.max_trace_lines:
        return []
    return [Candidate(0, (), json.dumps(lines), "trace")]


def build_exception(facts: RunFacts) -> list[Candidate]:
    return [Candidate(0, (), facts.run.exception_type or "none", "exception")]


MAX_ERROR_MESSAGE = 1_000  # a longer message is not asked for (nor one the store cut)


def build_error(facts: RunFacts) -> list[Candidate]:
    """EXE's error question: what the call raises, type and message, as the last line of
    its traceback says it (``KeyError: 'a'``; the type alone for an empty message). Asked
    only of a run that raised (status ``exception``), with a message a model could write:
    at most ``MAX_ERROR_MESSAGE`` characters, no memory address."""
    run = facts.run
    if run.status != "exception" or run.exception_type is None:
        return []
    message = run.exception_message or ""
    if (len(message) > MAX_ERROR_MESSAGE or _opaque(message)
            or message == f"<{run.exception_type}: str() failed>"):
        return []  # (the last: what the guest says when the exception's str() raised)
    answer = f"{run.exception_type}: {message}" if message else run.exception_type
    return [Candidate(0, (), answer, "error")]


def build_output_type(facts: RunFacts) -> list[Candidate]:
    """The type of what the call returns (REval asks a value's type besides its value):
    ``runs.output_type``, the return value's ``type(value).__name__``. Asked of the runs
    ``output`` asks about, and also where the return value's repr is cut or shows a
    memory address (its type is known all the same); one question per run."""
    run = facts.run
    if (run.status != "ok" or run.output_type is None or run.shape == "script"
            or run.test is not None or run.stdin is not None):
        return []
    return [Candidate(0, (), run.output_type, "type", value_type=run.output_type)]


MAX_STDOUT_ANSWER = 2_000  # a longer stdout is not asked for


def build_stdout(facts: RunFacts) -> list[Candidate]:
    """What the run printed: ``runs.stdout`` as it is (the judge compares it with
    ``stdout_matches``, engine/corpus/_formats.py). Asked of a finished run (``ok``, or
    ``exception``: what it printed before it raised) of any shape whose stdout has a
    line that is not blank, at most ``MAX_STDOUT_ANSWER`` characters, no memory address,
    not cut by the host, and no answer tag or fence line (``[/ANSWER]``, a line starting
    with three backticks: an answer could not hold it); one question per run."""
    from steptrace.tasks._answers import writable_verbatim  # it imports the registry
    run = facts.run
    text = run.stdout or ""
    if (not text.strip() or run.stdout_cut or len(text) > MAX_STDOUT_ANSWER
            or _opaque(text) or not writable_verbatim(text)):
        return []
    return [Candidate(0, (), text, "stdout")]


def build_instruction_steps(facts: RunFacts) -> list[Candidate]:
    """The bytecode instructions the run executed in the program's code
    (``runs.instruction_steps``, CRUXEval's ``numsteps``); not asked of a run stored
    without it."""
    steps = facts.run.instruction_steps
    return [] if steps is None else [Candidate(0, (), str(steps), "int")]


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
