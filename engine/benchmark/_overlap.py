"""Code tokens and token n-grams: what near-duplicate matching (``dedupe --against``) and
the n-gram overlap report (``steptrace overlap``) compare.

A text is split into tokens by one rule, whatever it is (a program, a training-data
dump): an identifier or word (``[A-Za-z_][A-Za-z0-9_]*``), a number (``\\d+``), or any
other single non-space character. Whitespace and line breaks separate tokens and are
never tokens themselves, so formatting does not change the tokens. ``renamed_tokens``
also renames every identifier that is not a keyword or builtin to ``v0, v1, ...`` by order
of first appearance, so a renamed copy of a program has the renamed tokens of the
original.
"""

from __future__ import annotations

import builtins
import keyword
import re
from typing import Iterable, Iterator

TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|\S")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEPT = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))


def tokens(text: str) -> list[str]:
    """The tokens of ``text`` (see the module docstring)."""
    return TOKEN.findall(text)


def renamed_tokens(text: str) -> list[str]:
    """``tokens`` with every identifier but keywords and builtins renamed ``v0, v1, ...``
    by order of first appearance (words inside strings and comments too: they are tokens
    like any other)."""
    names: dict[str, str] = {}
    out = []
    for token in tokens(text):
        if _IDENTIFIER.fullmatch(token) and token not in _KEPT:
            token = names.setdefault(token, f"v{len(names)}")
        out.append(token)
    return out


def ngrams(items: list[str], n: int) -> set[tuple[str, ...]]:
    """The distinct n-grams of ``items``; a sequence shorter than ``n`` is one n-gram of
    itself (none if empty)."""
    if len(items) < n:
        return {tuple(items)} if items else set()
    return {tuple(items[i:i + n]) for i in range(len(items) - n + 1)}


def stream_ngrams(chunks: Iterable[str], n: int) -> Iterator[tuple[str, ...]]:
    """Every n-gram of the tokens of a text read in ``chunks``, holding ``n`` tokens at a
    time; the chunks must not split a token (a split after a character other than a
    letter, digit or underscore never does)."""
    window: list[str] = []
    for chunk in chunks:
        for token in TOKEN.findall(chunk):
            window.append(token)
            if len(window) > n:
                del window[0]
            if len(window) == n:
                yield tuple(window)
