"""Extracting the answer text from a model's response: one rule per answer form, the
same whatever prompt style asked the question, in ``predict`` and in the reward service
(docs/guides/predictions-and-scoring.md, "Answer parsing").

Models wrap their answers in many ways: the delimited block the project's templates ask
for, a CRUXEval-style completed assertion, a fenced code block, or nothing at all. This
module finds the answer *text*; whether it is right is decided later by scoring, so
nothing here evaluates or normalises values beyond stripping whitespace at the ends. A
response whose answer is not where the rule looks, or does not have its form, has none
(unparsed): nothing is guessed.
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
from dataclasses import dataclass

from steptrace.tasks._kinds import task_kind

OPEN_TAG = re.compile(r"\[\s*ANSWER\s*\]", re.IGNORECASE)
CLOSE_TAG = re.compile(r"\[\s*/\s*ANSWER\s*\]", re.IGNORECASE)
FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$", re.MULTILINE)
ASSERT_WORD = re.compile(r"\bassert\b")
MAX_ASSERT_LINES = 50  # how far an assertion may continue over lines


def extract_answer(text: str | None, kind: str, *, entry: str | None = None) -> str | None:
    """The answer in ``text`` by the one rule of ``kind``'s answer form (the same in every
    prompt style, in ``predict`` and in the reward service), stripped at both ends; None
    when none is found (unparsed: never guessed). ``entry``: what the task's program
    calls (its run's ``programs.entry``, ``f`` in CRUXEval), None for a task that names
    no run.

    The forms (:func:`answer_form`): ``value`` (``output``), ``arguments`` (``input``),
    ``verbatim`` (``stdout``) and ``text`` (every other kind). The first source present
    decides:

    1. **Answer block**: the last ``[ANSWER] … [/ANSWER]`` block whose content is not
       blank (tags are case-insensitive; a close tag closes the nearest open tag before
       it, so an open tag inside an open block starts it again; a close tag with no
       open tag is ignored; an open tag left open runs to the end of the text). A fenced
       code block inside it is unwrapped. Its content is reduced by the form (below); a
       content that does not reduce is no answer, whatever earlier blocks or the rest of
       the text hold.
    2. **Assertion** (``value`` and ``arguments`` only): the last ``assert CALL == X`` (or
       ``X == CALL``) in the text whose CALL calls the entry (any plain or dotted name
       when it is not known): ``value`` takes ``X``, ``arguments`` the text inside the
       call's parentheses, exactly as written (``assert f('a', k=1) == 3`` gives ``'a',
       k=1``). Parsed with ``ast``; an assertion that does not parse as a whole (``assert
       f(x) == ??``) is split with Python's tokenizer, and the wanted part must parse on
       its own.
    3. **Fenced code**: the last fenced block's content (```` ``` ```` lines; an unclosed
       fence runs to the end), reduced as in 1.
    4. **Bare text**: the whole text, when it is one Python expression or a single
       keyword (``return``) for ``text``; reduced as in 1 for ``value`` and
       ``arguments`` (where it must parse).

    The reductions: ``text`` keeps the content as it is. ``value`` reduces an assertion or
    a comparison ``CALL == X`` to ``X`` (a CALL of another name than the entry gives no
    answer), and the result must be one Python expression. ``arguments`` reduces them to the call's argument text, and a
    whole call of the entry, ``ENTRY(ARGS)``, to ``ARGS`` (a call of another name is an
    argument: ``g(1)`` is the one argument ``g(1)``); the result must parse as a call's
    arguments. ``verbatim`` answers (``stdout``: printed text, whose leading whitespace
    counts) come only from 1 or 3 and are not stripped at their start: see
    :func:`verbatim_text`.
    """
    if not text or not text.strip():
        return None
    form = answer_form(kind)
    if form == VERBATIM:
        return _verbatim_answer(text)
    reduce = _Reducer(form, entry)
    block = _last_block(text)
    if block is not None:
        return reduce(block)
    if form in (VALUE, ARGUMENTS):
        for match in reversed(list(ASSERT_WORD.finditer(text))):
            answer = reduce.assertion(text[match.start():])
            if answer:
                return answer
    fenced = _last_fence(text)
    if fenced is not None and fenced.strip():
        return reduce(fenced)
    stripped = text.strip()
    if form == TEXT:
        return stripped if keyword.iskeyword(stripped) or _is_expression(stripped) else None
    return reduce(stripped)


VALUE, ARGUMENTS, VERBATIM, TEXT = "value", "arguments", "verbatim", "text"


def answer_form(kind: str) -> str:
    """``kind``'s answer form: ``value`` and ``arguments`` for the kinds whose answer may
    come as a CRUXEval assertion's part (``TaskKind.assertion``), ``verbatim`` for a
    kind whose leading whitespace counts, ``text`` for the rest (and for a name that is
    no kind)."""
    known = task_kind(kind)
    if known is None:
        return TEXT
    if known.verbatim:
        return VERBATIM
    return {"value": VALUE, "args": ARGUMENTS}.get(known.assertion or "", TEXT)


class _Reducer:
    """A content reduced to the answer of one form (``extract_answer``'s reductions),
    for a task whose program calls ``entry`` (None: not known)."""

    def __init__(self, form: str, entry: str | None) -> None:
        self.form = form
        self.entry = entry

    def __call__(self, content: str) -> str | None:
        fenced = _last_fence(content)
        if fenced is not None and fenced.strip():
            content = fenced
        content = content.strip()
        if not content:
            return None
        if self.form == TEXT:
            return content
        if ASSERT_WORD.match(content):
            return self.assertion(content)
        try:
            node = ast.parse(content, mode="eval").body
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            node = None
        if node is not None and _split_compare(content, node, None) is not None:
            # CALL == X: an answer when CALL calls the entry, else none (a value written
            # as a comparison of another function's call is no value of this one's)
            split = _split_compare(content, node, self.entry)
            return split.take(self.form) if split is not None else None
        if node is not None:
            if self.form == ARGUMENTS and _is_call_of(node, self.entry, known_only=True):
                return _checked(_call_args(content, node), ARGUMENTS)
        return _checked(content, self.form)

    def assertion(self, text: str) -> str | None:
        """The wanted part of the assertion that starts ``text``: parsed with ``ast`` over
        a growing number of lines; a token scan of its first line when it never parses."""
        lines = text.splitlines()
        for end in range(1, min(len(lines), MAX_ASSERT_LINES) + 1):
            source = "\n".join(lines[:end])
            try:
                module = ast.parse(source)
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                continue
            if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
                return None
            split = _split_compare(source, module.body[0].test, self.entry)
            return split.take(self.form) if split is not None else None
        split = _split_scanned(lines[0] if lines else "", self.entry)
        return split.take(self.form) if split else None


def _checked(text: str | None, form: str) -> str | None:
    """``text`` stripped when it parses as the form's answer: one expression (``value``),
    a call's arguments (``arguments``); else None."""
    if text is None:
        return None
    text = text.strip()
    if form == ARGUMENTS:
        return text if _is_expression(f"_({text})") else None
    return text if _is_expression(text) else None


def _last_block(text: str) -> str | None:
    """The content of the last answer block that is not blank, None if there is none."""
    for content in reversed(_answer_blocks(text)):
        if content.strip():
            return content
    return None


# ------------------------------------------------------------------ verbatim answers
def _verbatim_answer(text: str) -> str | None:
    """The last answer block with a non-blank answer, else the last fenced block, as
    :func:`verbatim_text`; never the bare text (a response without either is reasoning
    or a bare answer, and which is which cannot be told)."""
    for content in reversed(_answer_blocks(text)):
        answer = verbatim_text(content)
        if answer:
            return answer
    content = _last_fence(text)
    return None if content is None else verbatim_text(content)


def writable_verbatim(text: str) -> bool:
    """Whether ``text`` can come back verbatim from a response: it holds no answer tag and
    no fence line, which would end or unwrap the block it is written in."""
    return not (OPEN_TAG.search(text) or CLOSE_TAG.search(text) or FENCE.search(text))


def verbatim_text(content: str) -> str | None:
    """A block's text as a verbatim answer: a fenced block inside it unwrapped; when the
    text starts on a line of its own (the tag or fence ends its line) that first line
    break is dropped and the text is kept as written, leading spaces and empty lines
    included; when it starts on the tag's line (``[ANSWER] 42``) the spaces before it
    are dropped; trailing whitespace is dropped. None if nothing but whitespace is left."""
    fenced = _last_fence(content)
    if fenced is not None and fenced.strip():
        content = fenced
    first, newline, rest = content.partition("\n")
    content = rest if newline and not first.strip() else content.lstrip(" \t")
    content = content.rstrip()
    return content if content.strip() else None


# ------------------------------------------------------------------ blocks and fences
def _answer_blocks(text: str) -> list[str]:
    """Contents of the answer blocks in order; a close tag pairs with the nearest open
    tag before it, and an open tag left unclosed at the end runs to the end of text."""
    tags = sorted([(m.start(), m.end(), True) for m in OPEN_TAG.finditer(text)]
                  + [(m.start(), m.end(), False) for m in CLOSE_TAG.finditer(text)])
    blocks: list[str] = []
    content_start: int | None = None
    for start, end, is_open in tags:
        if is_open:
            content_start = end
        elif content_start is not None:
            blocks.append(text[content_start:start])
            content_start = None
    if content_start is not None:
        blocks.append(text[content_start:])
    return blocks


def _last_fence(text: str) -> str | None:
    """Content of the last fenced code block (an unclosed last fence runs to the end)."""
    marks = list(FENCE.finditer(text))
    if not marks:
        return None
    pairs = [(marks[i], marks[i + 1] if i + 1 < len(marks) else None)
             for i in range(0, len(marks), 2)]
    opening, closing = pairs[-1]
    return text[opening.end():closing.start() if closing else len(text)]


# ------------------------------------------------------------------ assertions
@dataclass(frozen=True)
class _Split:
    """An assertion ``CALL == VALUE`` cut into the call's argument text and the value text."""

    args: str
    value: str

    def take(self, form: str) -> str | None:
        """The ``arguments`` or the ``value`` of the assertion, if it parses."""
        return _checked(self.args if form == ARGUMENTS else self.value, form)


def _split_compare(source: str, node: ast.expr, entry: str | None) -> _Split | None:
    """``CALL == VALUE`` or ``VALUE == CALL`` (CALL calling the entry) cut into its parts."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq)):
        return None
    left, right = node.left, node.comparators[0]
    call, value = (left, right) if _is_call_of(left, entry) else (right, left)
    if not _is_call_of(call, entry):
        return None
    args = _call_args(source, call)
    value_text = ast.get_source_segment(source, value)
    if args is None or value_text is None:
        return None
    return _Split(args, value_text)


def _is_call_of(node: ast.expr, entry: str | None, known_only: bool = False) -> bool:
    """Whether ``node`` calls the entry (by its name, dotted for a method: ``Stack.push``);
    with no entry known, any plain or dotted name (none when ``known_only``)."""
    if not isinstance(node, ast.Call):
        return False
    name = _dotted(node.func)
    if entry is None:
        return name is not None and not known_only
    return name == entry


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a name or a chain of attributes of a name, else None."""
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return None
    name = ast.unparse(node)
    return name if all(part.isidentifier() for part in name.split(".")) else None


def _call_args(source: str, call: ast.Call) -> str | None:
    """The text between a call's parentheses, as written (trailing comma and all)."""
    whole = ast.get_source_segment(source, call)
    func = ast.get_source_segment(source, call.func)
    if whole is None or func is None:
        return None
    inner = whole[len(func):].strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        return None
    return inner[1:-1].strip()


def _split_scanned(line: str, entry: str | None) -> _Split | None:
    """Split ``assert NAME(ARGS) == VALUE`` (NAME: the entry, dotted or not; any name when
    it is not known) with Python's tokenizer, which knows strings and brackets, for
    assertions that do not parse as a whole (``== ??``, cut text)."""
    tokens = _tokens(line)
    if len(tokens) < 4 or tokens[0].string != "assert" or tokens[1].type != tokenize.NAME:
        return None
    start = 2
    name = tokens[1].string
    while (start + 1 < len(tokens) and tokens[start].string == "."
           and tokens[start + 1].type == tokenize.NAME):
        name += "." + tokens[start + 1].string
        start += 2
    if start >= len(tokens) or tokens[start].string != "(":
        return None
    if entry is not None and name != entry:
        return None
    depth, close = 0, None
    for index in range(start, len(tokens)):
        if tokens[index].string in {"(", "[", "{"} and tokens[index].type == tokenize.OP:
            depth += 1
        elif tokens[index].string in {")", "]", "}"} and tokens[index].type == tokenize.OP:
            depth -= 1
            if depth == 0:
                close = index
                break
    if close is None or close + 1 >= len(tokens) or tokens[close + 1].string != "==":
        return None
    args = line[tokens[start].end[1]:tokens[close].start[1]]
    value = line[tokens[close + 1].end[1]:]
    comment = next((t for t in tokens[close + 2:] if t.type == tokenize.COMMENT), None)
    if comment is not None:
        value = line[tokens[close + 1].end[1]:comment.start[1]]
    return _Split(args, value)


def _tokens(line: str) -> list[tokenize.TokenInfo]:
    """The tokens of one line, as many as the tokenizer gives before it fails."""
    found: list[tokenize.TokenInfo] = []
    skip = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type not in skip:
                found.append(token)
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def _is_expression(text: str) -> bool:
    """Whether ``text`` is one Python expression (a response nested past the parser's
    limits is none)."""
    if not text.strip():
        return False
    try:
        ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True
