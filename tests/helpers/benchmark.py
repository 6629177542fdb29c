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


def installed_site(root, dist: str, files: dict[str, str], entry_points: str | None = None):
    """A directory as pip --target leaves it: ``files`` (relative path -> text) and the
    distribution's ``DIST.dist-info`` (its RECORD naming them, its entry_points.txt)."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    info = root / f"{dist}.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("".join(f"{name},sha256=x,1\n" for name in files))
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)
    return root


def function_of(prompt: str) -> str | None:
    """The stub's key for a harvest prompt: the id of the function it asks calls of."""
    found = re.search(r"the function `([^`]+)`", prompt)
    return found.group(1) if found else None
