"""How a prediction is judged against a task's answer, kind by kind (README, "Scoring").

Each task kind's :class:`Judge` is registered with the kind (engine/tasks/_kinds.py);
scoring looks it up there. A judge compares one parsed answer at a time, or a whole batch
at once (``trace``: the edit distances are a numba kernel), or says that the prediction
is checked by running it in the sandbox (``input``).

* ``output``, ``state``: both texts are parsed with ``ast.literal_eval`` and compared as
  Python compares them (``==``); ``type_strict`` also requires the same types, all the
  way down; ``float_tolerance`` compares floats with ``math.isclose``. A text that is no
  literal (an object's repr) is compared as text, whitespace at the ends aside. A state
  whose answer is ``unbound`` needs the word ``unbound``.
* ``state_any``, ``next_line_any``: membership (REval): the prediction, one value or a
  list of them, is right when it names at least one value and every value it names is in
  the answer set.
* ``next_line``: a line number, or ``return`` / ``raise``. ``coverage``, ``branch``:
  true/false (yes/no). ``line_count``, ``steps``: an integer. ``exception``: the type name,
  or ``none``. ``error``: ``TypeName: message``, type and message exact (EXE; a module
  prefix of the type and whitespace around each part aside), and each part on its own
  (``Judge.parts``). ``type``, ``output_type``: the type's name (``int``, ``Node``;
  ``<class 'int'>`` and a module prefix are accepted). ``alias``: true/false.
  ``instruction_steps``: an integer. ``stdout``: the printed text, line by line as a
  script's expected output is compared (trailing whitespace of each line and empty lines
  at the end aside).
* ``trace``: exact match of the ``[line, depth]`` list; the normalised edit distance to
  the true trace is stored too (1.0 for a prediction that is no such list).
* ``input``: ``f(predicted input)`` runs in the sandbox (engine/scoring/_inputs.py).

This module is imported with the task registry (which ``predict`` reads for answer
extraction), so it loads numba only when a batch of traces is judged.
"""

from __future__ import annotations

import ast
import functools
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from steptrace.corpus._formats import stdout_matches

NO_LITERAL = object()


class Comparison(Protocol):
    """How values are compared (steptrace.scoring.ScoreOptions has these)."""

    type_strict: bool
    float_tolerance: float


# One answer against one prediction: (correct, distance or None).
JudgeOne = Callable[[dict, str, Comparison], tuple[bool, float | None]]
# Many answers against their predictions at once: (correct, distance) each.
JudgeMany = Callable[[list[str], list[str]], list[tuple[bool, float]]]


@dataclass(frozen=True)
class Judge:
    """How the parsed predictions of one task kind are judged: one at a time (``one``),
    as a batch (``many``, which also judges one), or by running them in the sandbox
    (``in_sandbox``: scoring collects them and checks them with the store closed).
    ``unparsed_distance`` is the distance stored for an unparseable prediction of a kind
    that has distances."""

    one: JudgeOne | None = None
    many: JudgeMany | None = None
    in_sandbox: bool = False
    unparsed_distance: float | None = None
    # (type right, message right) of an ``error`` answer: scoring stores them as
    # scores.type_correct and scores.message_correct
    parts: Callable[[dict, str], tuple[bool, bool]] | None = None

    def __call__(self, task: dict, predicted: str, options: Comparison) -> tuple[bool, float | None]:
        if self.one is not None:
            return self.one(task, predicted, options)
        if self.many is not None:
            return self.many([task["answer"]], [predicted])[0]
        raise ValueError("a prediction checked in the sandbox has no judge here")


CACHED_CHARS = 1_000  # texts up to this long are parsed once (their values are small)


def literal(text: str) -> Any:
    """``text`` as a Python literal, or NO_LITERAL. A short text's value is parsed once
    and kept (``_short_literal``): scoring compares one task's answer with every sample
    of every experiment, and a state_any answer's values with every value named. The
    judges only compare values, never change them, so one value can serve every call."""
    if len(text) <= CACHED_CHARS:
        return _short_literal(text)
    return _parse_literal(text)


def _parse_literal(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NO_LITERAL


@functools.lru_cache(maxsize=1 << 16)
def _short_literal(text: str) -> Any:
    return _parse_literal(text)


def values_equal(a: Any, b: Any, type_strict: bool = False, tolerance: float = 0.0) -> bool:
    """Python's ``==``, optionally with the same types throughout and floats compared
    within ``tolerance`` (relative and absolute)."""
    if type_strict and type(a) is not type(b):
        return False
    if tolerance and _is_number(a) and _is_number(b) and (isinstance(a, float) or isinstance(b, float)):
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)
    if type_strict or tolerance:
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(values_equal(x, y, type_strict, tolerance)
                                            for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(values_equal(a[k], b[k], type_strict, tolerance)
                                                for k in a)
    try:
        return bool(a == b)
    except Exception:  # a comparison of literals does not raise; be safe anyway
        return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same_value(answer: str, predicted: str, options: Comparison) -> bool:
    """Two repr texts: equal as values when both are literals, else equal as text."""
    a, p = literal(answer), literal(predicted)
    if a is NO_LITERAL or p is NO_LITERAL:
        return answer.strip() == predicted.strip()
    return values_equal(a, p, options.type_strict, options.float_tolerance)


def _word(text: str) -> str:
    return text.strip().strip("'\"`").strip().lower()


def _boolean(text: str) -> bool | None:
    return {"true": True, "yes": True, "false": False, "no": False}.get(_word(text))


def _integer(text: str) -> int | None:
    value = literal(text)
    return value if type(value) is int else None


def _next_line(text: str) -> int | str | None:
    word = _word(text)
    if word in ("return", "raise"):
        return word
    return _integer(text)


def _listed(text: str) -> list | None:
    """A JSON or Python list (or tuple/set) as a list; None if the text is none of them."""
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text.strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, (list, tuple, set)):
            return list(value)
        return None
    return None


def _members(predicted: str) -> list[str]:
    """The values a set prediction names, as texts: a list's elements (strings as they
    are, other elements as their repr), or the prediction itself."""
    items = _listed(predicted)
    if items is None:
        return [predicted]
    return [item if isinstance(item, str) else repr(item) for item in items]


def judge_state_any(answer: str, predicted: str, options: Comparison) -> bool:
    allowed = json.loads(answer)
    named = _members(predicted)
    return bool(named) and all(any(same_value(a, p, options) for a in allowed) for p in named)


def judge_next_line_any(answer: str, predicted: str) -> bool:
    allowed = set(json.loads(answer))
    items = _listed(predicted)
    named = [_next_line(str(item)) for item in items] if items is not None else [_next_line(predicted)]
    return bool(named) and all(item is not None and item in allowed for item in named)


def trace_pairs(text: str) -> list[tuple[int, int]] | None:
    items = _listed(text)
    if items is None:
        return None
    pairs = []
    for item in items:
        if (not isinstance(item, (list, tuple)) or len(item) != 2
                or not all(type(v) is int for v in item)):
            return None
        pairs.append((item[0], item[1]))
    return pairs


# ------------------------------------------------------------------ the judges of the kinds
def judge_value(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``output``: equal as Python values (or as text when either is no literal)."""
    return same_value(task["answer"], predicted, options), None


def judge_state(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``state``: a value as ``output``, or the word ``unbound`` for a deleted name."""
    if task["answer_type"] == "unbound":
        return _word(predicted) == "unbound", None
    return same_value(task["answer"], predicted, options), None


def judge_value_set(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``state_any``: membership in the answer's values."""
    return judge_state_any(task["answer"], predicted, options), None


def judge_line(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``next_line``: the same line number, or ``return`` / ``raise``."""
    return _next_line(predicted) == _next_line(task["answer"]), None


def judge_line_set(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``next_line_any``: membership in the answer's lines."""
    return judge_next_line_any(task["answer"], predicted), None


def judge_truth(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``coverage``, ``branch``, ``alias``: the same truth value (true/false, yes/no)."""
    said = _boolean(predicted)
    return said is not None and said == _boolean(task["answer"]), None


def judge_count(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``line_count``, ``steps``: the same integer (a bool is no count)."""
    said = _integer(predicted)
    return said is not None and said == int(task["answer"]), None


def judge_exception(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``exception``: the same type name, or ``none``."""
    answer = task["answer"]
    return (_word(predicted) == "none" if answer == "none" else predicted.strip() == answer), None


def error_parts(text: str) -> tuple[str, str]:
    """``TypeName: message`` → (type name, message): the type before the first ``:``, a
    module prefix dropped (``roman.OutOfRangeError`` → ``OutOfRangeError``), the message
    after it; both stripped of whitespace, the whole stripped of backticks first."""
    word = text.strip().strip("`").strip()
    name, _, message = word.partition(":")
    name = name.strip()
    return name.rpartition(".")[2], message.strip()


def judge_error(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``error`` (EXE): the same exception type and the same message, exactly (see
    :func:`error_parts`: whitespace around each part and a module prefix of the type
    aside); a type that is no identifier is never right."""
    type_right, message_right = judge_error_parts(task, predicted)
    return type_right and message_right, None


def judge_error_parts(task: dict, predicted: str) -> tuple[bool, bool]:
    """``error``'s two parts judged apart (EXE scores the type and the message each on
    its own, and both together as :func:`judge_error`): (the same type name, an
    identifier; the same message). ``ValueError: `` against ``ValueError: bad input`` is
    (True, False); ``KeyError: 'a'`` against ``IndexError: 'a'`` is (False, True)."""
    name, message = error_parts(predicted)
    answer_name, answer_message = error_parts(task["answer"])
    return name.isidentifier() and name == answer_name, message == answer_message


def judge_stdout(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``stdout``: the printed text, compared as a script's stdout is compared with its
    expected output (``stdout_matches``, engine/corpus/_formats.py: line by line, each
    line's trailing whitespace and empty lines at the end ignored; leading whitespace
    and empty lines in between count)."""
    return stdout_matches(predicted, task["answer"]), None


def type_word(text: str) -> str:
    """A type name as a model may write it: ``int``, `` `int` ``, ``<class 'int'>``,
    ``builtins.int``, ``__main__.Node``, ``type: Node`` -> ``int`` / ``Node``."""
    word = text.strip().strip("`").strip()
    if word.startswith("<class ") and word.endswith(">"):
        word = word[len("<class "):-1].strip()
    word = word.strip("'\"").strip()
    return word.rpartition(".")[2] if "." in word else word


def judge_type(task: dict, predicted: str, options: Comparison) -> tuple[bool, None]:
    """``type``: the same type name (its ``__name__``; a module prefix or ``<class
    '...'>`` around it is ignored, case counts)."""
    return type_word(predicted) == task["answer"], None


def judge_traces(answers: list[str], predictions: list[str]) -> list[tuple[bool, float]]:
    """Exact match and normalised edit distance of each predicted trace (numba kernel)."""
    from steptrace.scoring._stats import normalised_edit_distances  # numba: only when judging
    actual = [trace_pairs(a) or [] for a in answers]
    guessed = [trace_pairs(p) for p in predictions]
    encode = lambda pairs: [line * (1 << 20) + depth for line, depth in pairs]  # noqa: E731
    distances = normalised_edit_distances([encode(g or []) for g in guessed],
                                          [encode(a) for a in actual])
    return [(g is not None and g == a, 1.0 if g is None else float(d))
            for g, a, d in zip(guessed, actual, distances)]


VALUE = Judge(judge_value)
STATE = Judge(judge_state)
VALUE_SET = Judge(judge_value_set)
LINE = Judge(judge_line)
LINE_SET = Judge(judge_line_set)
TRUTH = Judge(judge_truth)
COUNT = Judge(judge_count)
EXCEPTION = Judge(judge_exception)
ERROR = Judge(judge_error, parts=judge_error_parts)
TYPE = Judge(judge_type)
STDOUT = Judge(judge_stdout)
TRACE = Judge(many=judge_traces, unparsed_distance=1.0)
RUN_IN_SANDBOX = Judge(in_sandbox=True)
