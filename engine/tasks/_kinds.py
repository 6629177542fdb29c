"""The task kinds: one :class:`TaskKind` per kind, holding everything that differs between
kinds, so that nothing else in steptrace dispatches on a kind's name.

A kind says how its questions are made from a run (``build``, and what that needs: the
program's ast, the run's detail tables), what its prompt templates may and must name
(``fields``, ``required``), how a model's answer is taken out of a CRUXEval-style
assertion (``assertion``), and how a prediction is judged (``judge``, from
engine/scoring/_judges.py). :data:`TASK_KINDS` holds them in the order tasks are listed
and stored (:data:`KINDS`), as engine/benchmark/_filters.py's ``Rule`` and
engine/analytics/_report.py's ``Section`` hold filters and report sections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from steptrace.errors import InputError
from steptrace.scoring import _judges as judges
from steptrace.scoring._judges import Judge
from steptrace.tasks import _candidates as questions
from steptrace.tasks._candidates import Candidate, RunFacts
from steptrace.tasks._names import KINDS

# Template placeholders (README, "Prompts"): every kind's prompt can show the program
# and the call; kinds about a line can name it, its text and the function asked about.
CODE = frozenset({"code", "numbered_code"})
CALL = frozenset({"input", "call", "invocation"})
COMMON_FIELDS = CODE | CALL | {"entry"}
LINE_FIELDS = frozenset({"line", "line_text", "func", "function"})
# The kinds whose answers are made of the run's line events (``line_view``) may say how
# those are counted, which the line view decides (engine/tasks/_templates.py).
LINE_RULE = frozenset({"line_rule", "line_counting"})
K = frozenset({"k", "kth"})
LINE = frozenset({"line"})
VAR = frozenset({"var", "what"})
OTHER = frozenset({"other"})
VALUES = frozenset({"values"})  # how a value answer is written (engine/tasks/_templates.py)


@dataclass(frozen=True)
class TaskKind:
    """One task kind.

    ``build`` gives every question a run allows (engine/tasks/_candidates.py);
    ``needs_ast`` kinds ask about lines, so a program the host cannot parse gets none;
    ``reads`` names the run's detail tables the builder reads (``branches`` also means
    the store must be analysed first). ``fields`` are the placeholders a template of the
    kind may use and ``required`` the groups it must use one of each of. ``assertion``
    is the part of ``assert f(ARGS) == VALUE`` that is the answer (``"value"`` or
    ``"args"``), None for a kind whose answer never comes as one. A ``verbatim`` kind's
    answer is text whose leading whitespace counts (``stdout``): answer extraction keeps
    it (engine/tasks/_answers.py). A ``line_view`` kind's answer is made of the run's line
    events alone (whether, how often, in what order lines run): ``tasks --lines
    settrace`` asks it of the settrace view's line events (docs/guides/runs.md)."""

    name: str
    build: Callable[[RunFacts], list[Candidate]]
    fields: frozenset[str]
    required: tuple[frozenset[str], ...]
    judge: Judge
    needs_ast: bool = False
    reads: frozenset[str] = frozenset()
    assertion: str | None = None
    verbatim: bool = False
    line_view: bool = False

    def candidates(self, facts: RunFacts) -> list[Candidate]:
        """Every question of this kind the run allows, unranked."""
        if self.needs_ast and facts.info is None:
            return []
        return self.build(facts)


_STEPS = frozenset({"steps"})
_STATES = frozenset({"steps", "states", "attributes"})

_DECLARED = (
    TaskKind("output", questions.build_output, COMMON_FIELDS | VALUES, (CODE, CALL),
             judges.VALUE, assertion="value"),
    TaskKind("input", questions.build_input, CODE | {"entry", "output"},
             (CODE, frozenset({"output"})), judges.RUN_IN_SANDBOX, assertion="args"),
    TaskKind("state", questions.build_state, COMMON_FIELDS | LINE_FIELDS | VAR | K | VALUES,
             (CODE, CALL, LINE, VAR, K), judges.STATE, needs_ast=True, reads=_STATES),
    TaskKind("state_any", questions.build_state_any, COMMON_FIELDS | LINE_FIELDS | VAR | VALUES,
             (CODE, CALL, LINE, VAR), judges.VALUE_SET, needs_ast=True, reads=_STATES),
    TaskKind("next_line", questions.build_next_line,
             COMMON_FIELDS | LINE_FIELDS | K | LINE_RULE, (CODE, CALL, LINE, K), judges.LINE,
             needs_ast=True, reads=_STEPS, line_view=True),
    TaskKind("next_line_any", questions.build_next_line_any,
             COMMON_FIELDS | LINE_FIELDS | LINE_RULE, (CODE, CALL, LINE), judges.LINE_SET,
             needs_ast=True, reads=_STEPS, line_view=True),
    TaskKind("coverage", questions.build_coverage,
             COMMON_FIELDS | {"line", "line_text"} | LINE_RULE, (CODE, CALL, LINE),
             judges.TRUTH, needs_ast=True, reads=_STEPS, line_view=True),
    TaskKind("line_count", questions.build_line_count,
             COMMON_FIELDS | LINE_FIELDS | LINE_RULE, (CODE, CALL, LINE), judges.COUNT,
             needs_ast=True, reads=_STEPS, line_view=True),
    TaskKind("branch", questions.build_branch,
             COMMON_FIELDS | {"line", "line_text", "k", "kth", "condition", "col",
                              "condition_kind"},
             (CODE, CALL, LINE, K, frozenset({"condition", "col"})), judges.TRUTH,
             needs_ast=True, reads=frozenset({"branches"})),
    TaskKind("steps", questions.build_steps, COMMON_FIELDS | LINE_RULE, (CODE, CALL),
             judges.COUNT, line_view=True),
    TaskKind("trace", questions.build_trace, COMMON_FIELDS | LINE_RULE, (CODE, CALL),
             judges.TRACE, reads=_STEPS, line_view=True),
    TaskKind("exception", questions.build_exception, COMMON_FIELDS, (CODE, CALL),
             judges.EXCEPTION),
    TaskKind("error", questions.build_error, COMMON_FIELDS, (CODE, CALL), judges.ERROR),
    TaskKind("type", questions.build_type, COMMON_FIELDS | LINE_FIELDS | VAR | K,
             (CODE, CALL, LINE, VAR, K), judges.TYPE, needs_ast=True, reads=_STATES),
    TaskKind("alias", questions.build_alias, COMMON_FIELDS | LINE_FIELDS | VAR | K | OTHER,
             (CODE, CALL, LINE, VAR, K, OTHER), judges.TRUTH, needs_ast=True, reads=_STATES),
    TaskKind("output_type", questions.build_output_type, COMMON_FIELDS, (CODE, CALL),
             judges.TYPE),
    TaskKind("stdout", questions.build_stdout, COMMON_FIELDS, (CODE, CALL), judges.STDOUT,
             verbatim=True),
    TaskKind("instruction_steps", questions.build_instruction_steps, COMMON_FIELDS,
             (CODE, CALL), judges.COUNT),
)
TASK_KINDS: dict[str, TaskKind] = {kind.name: kind for kind in _DECLARED}
if tuple(TASK_KINDS) != KINDS:  # the names are declared once, in _names.py
    raise AssertionError(f"the registry's kinds {tuple(TASK_KINDS)} are not {KINDS}")


def task_kind(name: str) -> TaskKind | None:
    """The kind called ``name``, or None for a name that is no kind."""
    return TASK_KINDS.get(name)


def parse_kinds(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"all"`` or a comma-separated list of kinds, in KINDS order, without repeats."""
    names = [k.strip() for k in (text.split(",") if isinstance(text, str) else text)]
    names = [k for k in names if k]
    if not names:
        raise InputError(f"no task kinds given; use 'all' or any of {', '.join(KINDS)}")
    if "all" in names:
        return KINDS
    unknown = [k for k in names if k not in KINDS]
    if unknown:
        raise InputError(f"unknown task kind {unknown[0]!r}; use 'all' or any of "
                         f"{', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in names)


def tables_read(kinds: Iterable[str], lines: str = "monitoring") -> frozenset[str]:
    """The detail tables the questions of ``kinds`` read (``lines``: the line view the
    line-sequence kinds are asked of; the settrace view's own events are read with it)."""
    kinds = tuple(kinds)
    found = frozenset().union(*(TASK_KINDS[kind].reads for kind in kinds))
    if lines == "settrace" and any(TASK_KINDS[kind].line_view for kind in kinds):
        found |= {"steps", "settrace_lines"}
    return found
