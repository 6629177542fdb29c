"""The tracer's budgeted repr is exactly ``repr(value)[:limit]`` for every built-in value.

``tracer/bounded_repr.py`` is pure Python and runs unchanged on the host, so it is checked
here directly against CPython's own ``repr`` on generated values (the guest's repr rules
for these types are the same in 3.11 and 3.14).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_SPEC = importlib.util.spec_from_file_location(
    "guest_bounded_repr", Path(__file__).resolve().parents[2] / "tracer" / "bounded_repr.py")
bounded = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bounded)

scalars = (st.integers() | st.floats(allow_nan=True) | st.booleans() | st.none()
           | st.text(max_size=40) | st.binary(max_size=10)
           | st.sampled_from(["'", '"', "'\"", "a'b", 'a"b', "\\", "\x00\n\t", "é\U0001f600"]))
hashables = st.integers() | st.text(max_size=8) | st.booleans() | st.none()
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=6) | st.tuples(inner) | st.tuples(inner, inner)
                   | st.dictionaries(hashables, inner, max_size=5)
                   | st.sets(hashables, max_size=5) | st.frozensets(hashables, max_size=4)),
    max_leaves=30)


@settings(max_examples=600, deadline=None)
@given(values, st.integers(min_value=1, max_value=300))
def test_prefix_is_exact(value, limit):
    """Every built-in value: same characters as repr, cut at ``limit``, flag iff cut."""
    full = repr(value)
    assert bounded.bounded_repr(value, limit) == (full[:limit], len(full) > limit)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=3000), st.integers(min_value=1, max_value=200))
def test_long_strings_keep_the_quote_of_the_whole_string(text, limit):
    """CPython picks the quote from the whole string; the prefix must agree."""
    assert bounded.bounded_repr(text, limit)[0] == repr(text)[:limit]


def test_self_reference_and_nesting():
    """Self-referencing containers print ``[...]``/``{...}`` as CPython does."""
    loop = [1]
    loop.append(loop)
    table: dict = {"k": 1}
    table["self"] = table
    nested = [[["x" * 50] * 3] * 3] * 3
    for value in (loop, table, nested, (loop, table), {1: loop}):
        for limit in (1, 7, 40, 1000, 10_000):
            assert bounded.bounded_repr(value, limit) == (repr(value)[:limit], len(repr(value)) > limit)


def test_huge_values_are_cut_exactly():
    """A list of a hundred 1 MB strings, 10**6-element containers, 300-deep nesting: exact
    1,000-character prefixes."""
    big_strings = ["ab'c" * 250_000 for _ in range(100)]
    many_ints = list(range(1_000_000))
    deep: list = []
    for _ in range(300):
        deep = [deep]
    for value in (big_strings, many_ints, tuple(many_ints), set(range(5000)), deep):
        text, truncated = bounded.bounded_repr(value, 1000)
        full = repr(value)
        assert (text, truncated) == (full[:1000], len(full) > 1000)
        assert len(text) == min(1000, len(full))


def test_nesting_deeper_than_the_recursion_limit_fails_like_repr():
    """CPython's repr raises RecursionError on a 100,000-deep list; so does this (the
    tracer then records ``<repr failed: RecursionError>``)."""
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        repr(deep)
    with pytest.raises(RecursionError):
        bounded.bounded_repr(deep, 10**6)


def test_objects_with_their_own_repr_are_rendered_by_their_attributes():
    """An instance of a class written in Python is ``QualName(attr=value, ...)`` whatever
    its ``__repr__`` says, which never runs; the run's output (``program_reprs``) is the
    object's own repr."""
    calls = []

    class Point:
        def __init__(self):
            self.x = 1

        def __repr__(self):
            calls.append("repr")
            return "Point(1, 2)"

    name = Point.__qualname__
    assert bounded.bounded_repr([Point(), Point()], 200) == (f"[{name}(x=1), {name}(x=1)]", False)
    assert bounded.bounded_repr(Point(), 5) == (name[:5], True)
    assert calls == []
    assert bounded.bounded_repr([Point()], 100, program_reprs=True) == ("[Point(1, 2)]", False)
    assert calls == ["repr"]
