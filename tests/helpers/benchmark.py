"""Helpers for the benchmark-construction tests (the stub generation server)."""

from __future__ import annotations

import re


GOOD_STRIP = """[PYTHON]
def f(text, chars):
    stripped = text.strip(chars)
    if stripped == text:
        return 'same'
    return stripped
[/PYTHON]
[TEST]
assert f('xxaxb', 'x') == ??
assert f('m', 'q') == ??
[/TEST]
"""


_TARGET = re.compile(r"\[TASK\]\n(.*)\n\[/TASK\]\s*$")


def method_of(prompt: str) -> str | None:
    """The stub's key: the method the prompt asks about (its last [TASK] block; the
    few-shot examples before it have their own)."""
    found = _TARGET.search(prompt)
    return found.group(1) if found else None
