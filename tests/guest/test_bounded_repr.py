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


# Every dunder rendering could be tempted to run, on instances and (through a metaclass)
# on classes: each logs its call.
_DUNDERS = ("__repr__", "__str__", "__format__", "__eq__", "__hash__", "__lt__", "__len__",
            "__bool__", "__iter__", "__getitem__", "__contains__", "__sizeof__", "__getattr__",
            "__getattribute__", "__dir__", "__index__", "items", "keys", "values")
_RESULTS = {"__repr__": "R", "__str__": "S", "__format__": "F", "__eq__": False, "__hash__": 7,
            "__lt__": True, "__len__": 0, "__bool__": True, "__sizeof__": 8, "__index__": 1,
            "__contains__": False, "__getitem__": 0, "__getattr__": 0, "__dir__": [],
            "items": [], "keys": [], "values": []}


def _logging(calls: list, name: str):
    def method(self, *args):
        calls.append(name)
        if name == "__getattribute__":
            return object.__getattribute__(self, *args)
        if name == "__iter__":
            return iter(())
        if name == "meta __eq__":
            return self is args[0]
        return _RESULTS[name.rpartition(" ")[2]]
    return method


@st.composite
def _hostile_values(draw, calls: list):
    """An instance of a generated class (a built-in base or none, a metaclass with its own
    dunders or none, any of ``_DUNDERS``), alone or inside containers of every kind the
    renderer knows."""
    import functools
    from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
    from types import SimpleNamespace
    base = draw(st.sampled_from([object, list, dict, str, int, tuple, set]))
    names = draw(st.lists(st.sampled_from(_DUNDERS), unique=True, max_size=8))
    if base in (str, int, tuple):  # their __getattribute__ would be asked by the constructor
        names = [name for name in names if name != "__getattribute__"]
    meta = type
    meta_names = draw(st.lists(st.sampled_from(["__repr__", "__hash__", "__eq__"]), unique=True))
    if meta_names:
        meta = type("Meta", (type,), {name: _logging(calls, "meta " + name)
                                      for name in meta_names})
    klass = meta("Hostile", (base,), {name: _logging(calls, name) for name in names})
    made = {object: lambda: klass(), list: lambda: klass([1]), dict: lambda: klass(k=1),
            str: lambda: klass("s"), int: lambda: klass(3), tuple: lambda: klass((1,)),
            set: lambda: klass({1})}[base]()
    if base is object:
        object.__setattr__(made, "attr", [1, "x"])
    pair = namedtuple("Pair", "a b")
    wrap = draw(st.sampled_from(["bare", "list", "tuple", "dict value", "set", "deque",
                                 "ordered", "counter", "defaultdict", "namedtuple",
                                 "exception", "namespace", "slice", "view", "class",
                                 "partial"]))
    keyed = {made: 1} if wrap in ("set", "ordered", "counter") and (
        "__hash__" in names or "__eq__" not in names) and base not in (list, dict, set) else None
    return {
        "bare": lambda: made, "list": lambda: [made, [made]], "tuple": lambda: (made,),
        "dict value": lambda: {"k": made}, "set": lambda: set(keyed) if keyed else [made],
        "deque": lambda: deque([made]), "ordered": lambda: OrderedDict(keyed or {"k": made}),
        "counter": lambda: Counter(keyed or {"k": 1}),
        "defaultdict": lambda: defaultdict(klass, {"k": made}),
        "namedtuple": lambda: pair(made, 1), "exception": lambda: ValueError(made),
        "namespace": lambda: SimpleNamespace(a=made), "slice": lambda: slice(made),
        "view": lambda: {"k": made}.values(), "class": lambda: [klass, made],
        "partial": lambda: functools.partial(klass, made, k=made),
    }[wrap]()


@settings(max_examples=400, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=300))
def test_rendering_runs_no_dunder_of_a_generated_class(data, limit):
    """Whatever dunders a class (and its metaclass) defines, rendering its instances, alone
    or in any container, calls none of them and never fails."""
    calls: list = []
    value = data.draw(_hostile_values(calls))
    calls.clear()  # what making the value ran
    text, truncated = bounded.bounded_repr(value, limit)
    assert calls == []
    assert type(text) is str and len(text) <= limit and "repr failed" not in text


def test_the_rendering_rule_case_by_case():
    """Each case of the rule (bounded_repr's docstring) on the host, exact: what Python
    prints where the rule says so, the rule's own form elsewhere."""
    import datetime
    import decimal
    import enum
    import functools
    import re
    import types
    from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
    from dataclasses import dataclass

    def show(value):
        return bounded.bounded_repr(value, 10_000)[0]

    class Stack(list):
        def __repr__(self):
            return "nope"

    class Name(str):
        pass

    class Span(datetime.timedelta):
        def __repr__(self):
            raise AssertionError("run")

    class Count(int):
        pass

    class Plain:
        __slots__ = ("a", "b")

    class Sub(Plain):
        __slots__ = ("c",)

    @dataclass
    class Pt:
        x: int
        y: list

    class Color(enum.Enum):
        RED = 1

    class Perm(enum.Flag):
        R = 4
        W = 2

    class Oops(Exception):
        def __repr__(self):
            return "nope"

    class Meta(type):
        def __repr__(cls):
            return "nope"

    class Shown(metaclass=Meta):
        def m(self):
            return 1

    stack = Stack([1, 2])
    stack.limit = 5
    stack.append(stack)
    sub = Sub()
    sub.c, sub.a = 3, 1
    point = namedtuple("Point", "x y")(1, [2])
    nested = Pt(0, [])
    for _ in range(6):
        nested = Pt(1, [nested])
    looped = Pt(1, [])
    looped.y.append(looped)
    counted = Counter("abracadabra")
    odd_counts = Counter({"a": 1, "b": Pt(1, [])})
    keyed = OrderedDict([("x", 1), ("y", 2)])
    keyed.move_to_end("x")
    zone = datetime.timezone(datetime.timedelta(hours=1))
    shuffled = OrderedDict([(Name("b"), 1), ("a", 2)])
    shuffled.move_to_end(Name("b"))
    prefix = "test_the_rendering_rule_case_by_case.<locals>."
    cases = [
        (counted, "Counter({'a': 5, 'b': 2, 'r': 2, 'c': 1, 'd': 1})"),
        (odd_counts, f"Counter({{'a': 1, 'b': {prefix}Pt(x=1, y=[])}})"),
        (keyed, "OrderedDict({'y': 2, 'x': 1})"),
        # keys that are not plain values: insertion order (its own order is read by hashing)
        (shuffled, f"OrderedDict({{{prefix}Name('b'): 1, 'a': 2}})"),
        (deque([1], maxlen=2), "deque([1], maxlen=2)"),
        (defaultdict(list, a=[1]), "defaultdict(<class 'list'>, {'a': [1]})"),
        (stack, f"{prefix}Stack([1, 2, [...]], limit=5)"),
        (Name("ab"), f"{prefix}Name('ab')"),
        (Count(3), f"{prefix}Count(3)"),
        (sub, f"{prefix}Sub(a=1, c=3)"),
        (point, "Point(x=1, y=[2])"),
        (nested, (f"{prefix}Pt(x=1, y=[" * 4 + f"{prefix}Pt(...)" + "])" * 4)),
        (looped, f"{prefix}Pt(x=1, y=[{prefix}Pt(...)])"),
        (Color.RED, "<Color.RED: 1>"),
        (Perm.R | Perm.W, "<Perm.R|W: 6>"),
        (Oops("bad", 2), "Oops('bad', 2)"),
        (ValueError(Pt(1, [])), f"ValueError({prefix}Pt(x=1, y=[]))"),
        (KeyError(), "KeyError()"),
        (int, "<class 'int'>"),
        (Shown().m, f"<bound method {prefix}Shown.m>"),
        (len, "<built-in function len>"),
        (re, f"<module 're' from {re.__spec__.origin!r}>"),
        (types.ModuleType("m"), "<module 'm'>"),
        (decimal.Decimal("1.50"), "Decimal('1.50')"),
        (datetime.date(2024, 1, 2), "datetime.date(2024, 1, 2)"),
        (datetime.datetime(2024, 1, 2, tzinfo=zone),
         "datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.timezone(datetime.timedelta("
         "seconds=3600)))"),
        (re.compile("a+"), "re.compile('a+')"),
        (slice(1, Count(2)), f"slice(1, {prefix}Count(2), None)"),
        ({"k": Name("v")}.values(), f"dict_values([{prefix}Name('v')])"),
        (types.SimpleNamespace(a=Name("v")), f"namespace(a={prefix}Name('v'))"),
        (datetime.timezone(Span(hours=1)), "<datetime.timezone object>"),  # repr asks Span
        (NotImplemented, "NotImplemented"),
        (functools.partial(len, Name("v"), key=[1]),
         f"functools.partial(<built-in function len>, {prefix}Name('v'), key=[1])"),
        (iter([1]), "<list_iterator object>"),
        (object(), "<object object>"),
    ]
    for value, expected in cases:
        assert show(value) == expected
    assert show(Shown).startswith("<class '") and show(Shown).endswith(f".{prefix}Shown'>")
