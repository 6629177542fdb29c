"""Extracting the answer text from a model's response.

Models wrap their answers in many ways: the delimited block the project's templates ask
for, a CRUXEval-style completed assertion, a fenced code block, or nothing at all. This
module finds the answer *text*; whether it is right is decided later by scoring, so
nothing here evaluates or normalises values beyond stripping whitespace at the ends.
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


def extract_answer(text: str | None, kind: str, prompt_style: str | None = None) -> str | None:
    """The answer in ``text``, stripped at both ends, or None if none is found.

    Precedence (the first that yields a non-empty answer wins):

    1. **Answer block**: the last non-empty ``[ANSWER] … [/ANSWER]`` block (tags are
       case-insensitive; an ``[ANSWER]`` left open at the end of the text runs to the
       end). Its content is taken as it is, except that a fenced code block inside it is
       unwrapped and, for ``output``/``input`` tasks, an assertion inside it is reduced
       as in 2.
    2. **CRUXEval-style assertion** (``output`` and ``input`` tasks only: the kinds with
       an ``assertion`` part, engine/tasks/_kinds.py): the last
       ``assert CALL == X`` (or ``X == CALL``) anywhere in the text, where CALL calls a
       plain name. ``output`` takes ``X``; ``input`` takes the argument text inside the
       call's parentheses, exactly as written (``assert f('a', k=1) == 3`` gives
       ``'a', k=1``). The assertion is parsed with ``ast``; if the whole statement does
       not parse (``assert f(x) == ??``), a string-aware token scan splits it and the
       wanted part must parse on its own.
    3. **Fenced code**: the content of the last fenced block (```` ```python … ``` ````;
       an unclosed fence runs to the end), reduced as in 1.
    4. **Bare answer**: the whole text, if it is one Python expression
       (``ast.parse(..., mode="eval")``), a single keyword such as ``return``, or, for
       ``output`` / ``input``, a bare comparison or call as in 1.

    With the ``cruxeval`` prompt style an ``input`` answer written as a whole call
    ``f(ARGS)`` (the official generation format) gives ``ARGS``.

    A ``verbatim`` kind's answer (``stdout``: printed text, whose leading whitespace
    counts) comes only from 1 or 3, and is not stripped at its start: see
    :func:`verbatim_text`.
    """
    if not text or not text.strip():
        return None
    known = task_kind(kind)
    if known is not None and known.verbatim:
        return _verbatim_answer(text)
    part = known.assertion if known is not None else None
    for finder in (_from_answer_block, _from_assertion, _from_fence, _from_bare_text):
        answer = finder(text, part, prompt_style)
        if answer:
            return answer
    return None


# ------------------------------------------------------------------ the four sources
def _from_answer_block(text: str, part: str | None, style: str | None) -> str | None:
    for content in reversed(_answer_blocks(text)):
        answer = _reduce(content, part, style)
        if answer:
            return answer
    return None


def _from_assertion(text: str, part: str | None, style: str | None) -> str | None:
    if part is None:
        return None
    for match in reversed(list(ASSERT_WORD.finditer(text))):
        answer = _assertion_at(text[match.start():], part)
        if answer:
            return answer
    return None


def _from_fence(text: str, part: str | None, style: str | None) -> str | None:
    content = _last_fence(text)
    return None if content is None else _reduce(content, part, style)


def _from_bare_text(text: str, part: str | None, style: str | None) -> str | None:
    stripped = text.strip()
    if part is not None:
        reduced = _reduce_expression(stripped, part, style)
        if reduced:
            return reduced
    if keyword.iskeyword(stripped) or _is_expression(stripped):
        return stripped
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


def _reduce(content: str, part: str | None, style: str | None) -> str | None:
    """The answer inside a block's or fence's content."""
    fenced = _last_fence(content)
    if fenced is not None and fenced.strip():
        content = fenced
    content = content.strip()
    if not content:
        return None
    if part is not None:
        if ASSERT_WORD.match(content):
            reduced = _assertion_at(content, part)
            if reduced:
                return reduced
        reduced = _reduce_expression(content, part, style)
        if reduced:
            return reduced
    return content


# ------------------------------------------------------------------ assertions
@dataclass(frozen=True)
class _Split:
    """An assertion ``CALL == VALUE`` cut into the call's argument text and the value text."""

    args: str
    value: str

    def take(self, part: str) -> str | None:
        """The ``"args"`` or the ``"value"`` of the assertion, if it parses."""
        text = (self.args if part == "args" else self.value).strip()
        if part == "args":
            return text if _is_expression(f"_({text})") else None
        return text if _is_expression(text) else None


def _assertion_at(text: str, part: str) -> str | None:
    """The wanted part of the assertion that starts ``text``: parsed with ``ast`` over a
    growing number of lines; a token scan of its first line when it never parses."""
    lines = text.splitlines()
    for end in range(1, min(len(lines), MAX_ASSERT_LINES) + 1):
        source = "\n".join(lines[:end])
        split = _split_parsed(source)
        if split is not None:
            return split.take(part)
    split = _split_scanned(lines[0] if lines else "")
    return split.take(part) if split else None


def _split_parsed(source: str) -> _Split | None:
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
        return None
    return _split_compare(source, module.body[0].test)


def _reduce_expression(text: str, part: str | None, style: str | None) -> str | None:
    """``CALL == X`` written without ``assert``; for a cruxeval input, a bare ``f(ARGS)``."""
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    split = _split_compare(text, node)
    if split is not None:
        return split.take(part)
    if part == "args" and style == "cruxeval" and _is_named_call(node, "f"):
        return _call_args(text, node)
    return None


def _split_compare(source: str, node: ast.expr) -> _Split | None:
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq)):
        return None
    left, right = node.left, node.comparators[0]
    call, value = (left, right) if _is_named_call(left) else (right, left)
    if not _is_named_call(call):
        return None
    args = _call_args(source, call)
    value_text = ast.get_source_segment(source, value)
    if args is None or value_text is None:
        return None
    return _Split(args, value_text)


def _is_named_call(node: ast.expr, name: str | None = None) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and (name is None or node.func.id == name))


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


def _split_scanned(line: str) -> _Split | None:
    """Split ``assert NAME(ARGS) == VALUE`` with Python's tokenizer, which knows strings
    and brackets, for assertions that do not parse as a whole (``== ??``, cut text)."""
    tokens = _tokens(line)
    if len(tokens) < 4 or tokens[0].string != "assert" or tokens[1].type != tokenize.NAME:
        return None
    if tokens[2].string != "(":
        return None
    depth, close = 0, None
    for index in range(2, len(tokens)):
        if tokens[index].string in {"(", "[", "{"} and tokens[index].type == tokenize.OP:
            depth += 1
        elif tokens[index].string in {")", "]", "}"} and tokens[index].type == tokenize.OP:
            depth -= 1
            if depth == 0:
                close = index
                break
    if close is None or close + 1 >= len(tokens) or tokens[close + 1].string != "==":
        return None
    args = line[tokens[2].end[1]:tokens[close].start[1]]
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
    if not text.strip():
        return False
    try:
        ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return False
    return True
