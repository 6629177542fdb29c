"""Prompt templates: ``<kind>.<style>.txt`` files (bundled, or a user's ``--template-dir``),
checked against the kind's placeholders, and rendered for one question (README,
"Prompts")."""

from __future__ import annotations

import string
from importlib import resources
from pathlib import Path
from typing import Iterable

from steptrace.corpus._formats import source_lines
from steptrace.store._runs import call_text
from steptrace.corpus._text import read_utf8
from steptrace.errors import InputError
from steptrace.tasks._candidates import MODULE_WORDS, Candidate, RunFacts, function_words
from steptrace.tasks._runs import RunData
from steptrace.tasks._kinds import TASK_KINDS
from steptrace.tasks._names import STYLES


# How the answers' values are written (the store's rendering: tracer/bounded_repr.py), said
# in every prompt whose answer is a value (``$values``): Python's repr(), but an instance
# of a class written in Python is written from its attributes, never by its __repr__
# (docs/guides/runs.md, "Rendering", rules 2 and 4).
VALUES = ("Values are written as Python's repr() writes them, with these exceptions: an "
          "instance of a class written in Python (the program's or a library's), whatever "
          "its `__repr__`, is written `Name(attr=value, ...)`, where Name is its class's "
          "`__qualname__` and the attributes are those of its `__dict__` in insertion "
          "order, then its slots that hold a value (base classes first, each class's in the "
          "order of its `__slots__`, by the names it gives them), each value written by this "
          "same rule (also inside lists, dicts and other containers); if the class derives "
          "from a built-in type, that value comes first (`Stack([1, 2], limit=5)`), and a "
          "namedtuple is `Point(x=1, y=2)`; an instance met again while it is being written "
          "(a reference back to it), or nested inside four other instances, is written "
          "`Name(...)`; an exception is written as BaseException's repr() writes it "
          "(`ValueError('bad')`), whatever its class defines.")


def bundled_template_dir() -> Path:
    return Path(str(resources.files("steptrace.tasks") / "prompts"))


def load_templates(kinds: Iterable[str], style: str,
                   template_dir: Path | None = None) -> dict[str, string.Template]:
    """``<kind>.<style>.txt`` for each kind, from ``template_dir`` if it has the file,
    else the bundled one; each checked for unknown and missing placeholders."""
    if style not in STYLES:
        raise InputError(f"unknown prompt style {style!r}; use one of {', '.join(STYLES)}")
    if template_dir is not None and not Path(template_dir).is_dir():
        raise InputError(f"template directory not found: {template_dir}")
    templates = {}
    for kind in kinds:
        name = f"{kind}.{style}.txt"
        path = Path(template_dir) / name if template_dir is not None else None
        if path is None or not path.is_file():
            path = bundled_template_dir() / name
        if not path.is_file():
            raise InputError(f"no {style} prompt template for kind {kind!r} "
                             f"(no {name}); the cruxeval style exists for output and input")
        templates[kind] = _checked(path, kind)
    return templates


def _checked(path: Path, kind: str) -> string.Template:
    template = string.Template(read_utf8(path))
    if not template.is_valid():
        raise InputError(f"template {path}: a '$' that is not a placeholder (write $$ for '$')")
    used = set(template.get_identifiers())
    fields = TASK_KINDS[kind].fields
    unknown = sorted(used - fields)
    if unknown:
        raise InputError(f"template {path}: unknown placeholder ${unknown[0]} for kind {kind} "
                         f"(known: {', '.join('$' + f for f in sorted(fields))})")
    for group in TASK_KINDS[kind].required:
        if not used & group:
            raise InputError(f"template {path}: missing placeholder "
                             f"{' or '.join('$' + f for f in sorted(group))}")
    return template


def numbered(code: str) -> str:
    lines = source_lines(code)
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}} | {text}".rstrip() for i, text in enumerate(lines, start=1))


def ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


# ``$line_rule``: how the line events a line-sequence kind counts are counted, by line
# view (docs/guides/runs.md, "The settrace view"); the monitoring view's rule is the
# templates' own sentence, which the settrace view adds to. ``$line_counting`` (below):
# the whole rule of the counting kinds (steps, line_count, trace), one per view.
LINE_RULES = {
    "monitoring": "",
    "settrace": (" Lines are counted as sys.settrace reports them: a line also counts again "
                 "each time execution jumps back to its start without leaving it (a loop, "
                 "comprehension or generator expression written on that line going round "
                 "for its next item, or to find it has none)."),
}
_COUNTED = ("a line counts each time a call comes to it from another line or starts there, "
            "so a line in a loop counts once each time round, and a `for` or `while` line "
            "each time its loop comes back to it, including the last check that ends the loop")
LINE_COUNTING = {
    "monitoring": (f"(Lines are counted as CPython 3.14 reports them: {_COUNTED}; a loop or "
                   "comprehension written on one line counts once each time it is reached, "
                   "however often it goes round.)"),
    "settrace": (f"(Lines are counted as sys.settrace reports them: {_COUNTED}; a line also "
                 "counts again each time execution jumps back to its start without leaving it "
                 "(a loop, comprehension or generator expression written on that line going "
                 "round for its next item, or to find it has none).)"),
}


def render(template: string.Template, facts: RunFacts, candidate: Candidate,
           lines: str = "monitoring") -> str:
    """The prompt of ``candidate`` (``lines``: the line view its line events are of)."""
    run = facts.run
    values = {"code": run.code, "numbered_code": numbered(run.code), "entry": run.entry,
              "input": run.input, "call": call_text(run.entry, run.input, run.shape, run.chain),
              "invocation": invocation(run), "output": run.output or "", "values": VALUES,
              "line_rule": LINE_RULES[lines], "line_counting": LINE_COUNTING[lines]}
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
    if candidate.var is not None:
        values["what"] = what_words(candidate.var, values.get("function") or "the function")
    return template.substitute(values)


def what_words(var: str, function: str) -> str:
    """How a prompt names what a state question asks about: "the local variable `x` of
    `f`", or for an attribute path "`self.total` (where `self` is the local variable of
    `Acc.add`)"."""
    root, dot, _ = var.partition(".")
    scope = "global variable" if function == MODULE_WORDS else "local variable"
    if not dot:
        return f"the {scope} `{var}` of {function}"
    return f"`{var}` (where `{root}` is the {scope} of {function})"


def invocation(run: RunData) -> str:
    """The prompt's sentence on how the program is run: "It is called as `f(1)`." (a
    method chain as `Stack().push(1).pop()`), or run as a script with its standard input,
    or by test code (shown, not traced); a call's standard input follows."""
    if run.shape == "script":
        return "It is run as a script" + _stdin_words(run.input)
    call = call_text(run.entry, run.input, "call", run.chain)
    if run.test is not None:
        text = (f"It is run by the test `{run.entry}` of this test code (the questions are "
                f"about the program above, not the test code):\n\n```\n"
                f"{run.test.rstrip()}\n```")
    else:
        text = f"It is called as `{call}`."
    if run.stdin is not None:
        text = text.removesuffix(".") + _stdin_words(run.stdin)
    return text


def _stdin_words(stdin: str) -> str:
    if not stdin:
        return ", with an empty standard input."
    return f", with this standard input:\n\n```\n{stdin.rstrip(chr(10))}\n```"
