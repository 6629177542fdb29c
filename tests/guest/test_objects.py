"""Objects, attributes and globals in traces (tracer/sysmon_tracer.py, "Objects"): exact
rows from the real sandbox.

Every expected row below was checked by hand against Python semantics:

* ``states_of`` rows are ``(step, var, value, type, truncated, object_id)``: a tracked
  object (an instance of a program class, a list, dict, set, ...) carries its object id,
  so ``b = a`` shows ``b`` with ``a``'s id;
* ``objects_of`` rows are ``(object_id, type, step first seen)``, ids 1, 2, ... in the
  order the tracer first saw the objects;
* ``attributes_of`` rows are ``(step, object_id, attr, value, type, truncated, ref_id)``:
  an attribute whose value changed since the object was last seen (all of them at its
  first sight), recorded at the step it is seen: ``self.total += x`` on a method's last
  line shows at its ``return``; a deleted attribute has value and type None; an
  attribute holding an instance of a program class has a row when it comes to hold
  another object (``ref_id``), not when that object changes (its own rows say so);
* ``globals_of`` rows are ``(step, name, value, type, truncated, object_id)``: the
  program's globals its functions use, at the first step and at every change after
  (functions and classes only when bound again, modules never).
"""

from __future__ import annotations

import re

import pytest

from helpers.traces import attributes_of, globals_of, objects_of, steps_of
from helpers.traces import state_rows as states_of

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def no_addresses(result: dict) -> bool:
    texts = [result["output"] or ""]
    for table, column in (("states", "value"), ("attributes", "value"),
                          ("global_states", "value")):
        texts.extend(value for value in result[table][column] if value)
    return not [text for text in texts if ADDRESS.search(text)]


ALIAS = """\
class Acc:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x


def f(n):
    a = Acc()
    b = a
    b.total = n
    box = [a]
    box[0].total += 1
    a.add(2)
    return a.total
"""

LINKED = """\
class Node:
    def __init__(self, val, nxt=None):
        self.val = val
        self.next = nxt


def f(n):
    head = None
    for i in range(n):
        head = Node(i, head)
    prev = None
    while head:
        head.next, prev, head = prev, head, head.next
    return prev
"""

SLOTS = """\
class P:
    __slots__ = ("y", "x")

    def __init__(self, x):
        self.x = x


class Q(P):
    __slots__ = ("z",)


def f(k):
    q = Q(k)
    q.y = k + 1
    q.z = [k]
    del q.x
    return q
"""

PROPERTY = """\
from dataclasses import dataclass


class Temp:
    def __init__(self, c):
        self._c = c

    @property
    def f(self):
        return self._c * 9 // 5 + 32

    @f.setter
    def f(self, value):
        self._c = (value - 32) * 5 // 9


@dataclass
class Pt:
    x: int
    y: int


def f(c):
    t = Temp(c)
    t.f = 50
    p = Pt(1, 2)
    p.x += t._c
    return p
"""

GLOBALS = """\
import math

counter = 0
log = []
LIMIT = 3


def helper():
    return 1


def bump(k):
    global counter
    counter += k
    log.append(counter)


def f(n):
    global helper
    for i in range(n):
        bump(i)
    helper = len
    return counter
"""

CLOSURE = """\
def f(n):
    count = 0
    items = []
    def inc(k):
        nonlocal count
        count += k
        items.append(k)
    inc(n)
    b = items
    b.append(9)
    return count
"""

LIST_ALIAS = """\
def f(x):
    a = [x]
    b = a
    b.append(1)
    c = [x, 1]
    a = c
    return b
"""

NO_ADDRESSES = """\
class A:
    def m(self):
        return 1


def gen():
    yield 1


def f():
    g = lambda x: x
    h = A().m
    it = gen()
    o = object()
    fn = f
    it2 = iter([1])
    return [g, h, it, o, fn, it2]
"""


# ---------------------------------------------------------------- attributes
def test_attribute_mutation_through_self_an_alias_and_a_container(run):
    """``b = a`` binds ``b`` to object 1 too; ``b.total = n``, ``box[0].total += 1`` and
    ``self.total += x`` (in ``add``) each show as an attributes row of object 1 at the
    next step that sees it (the method's ``return`` for ``add``), and in the rendering
    of every name bound to it."""
    result = run(ALIAS, "5")
    assert (result["status"], result["output"], result["note"]) == ("ok", "8", None)
    assert steps_of(result) == [
        ("call", "f", 9, 0, 0), ("line", "f", 10, 0, 0),
        ("call", "Acc.__init__", 2, 1, 1), ("line", "Acc.__init__", 3, 1, 1),
        ("return", "Acc.__init__", 3, 1, 1),
        ("line", "f", 11, 0, 0), ("line", "f", 12, 0, 0), ("line", "f", 13, 0, 0),
        ("line", "f", 14, 0, 0), ("line", "f", 15, 0, 0),
        ("call", "Acc.add", 5, 1, 2), ("line", "Acc.add", 6, 1, 2),
        ("return", "Acc.add", 6, 1, 2),
        ("line", "f", 16, 0, 0), ("return", "f", 16, 0, 0),
    ]
    assert states_of(result) == [
        (0, "n", "5", "int", False, None),
        (2, "self", "Acc()", "Acc", False, 1),
        (4, "self", "Acc(total=0)", "Acc", False, 1),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "a", "Acc(total=0)", "Acc", False, 1),
        (6, "b", "Acc(total=0)", "Acc", False, 1),
        (7, "a", "Acc(total=5)", "Acc", False, 1),
        (7, "b", "Acc(total=5)", "Acc", False, 1),
        (8, "box", "[Acc(total=5)]", "list", False, 2),
        (9, "a", "Acc(total=6)", "Acc", False, 1),
        (9, "b", "Acc(total=6)", "Acc", False, 1),
        (9, "box", "[Acc(total=6)]", "list", False, 2),
        (10, "self", "Acc(total=6)", "Acc", False, 1),
        (10, "x", "2", "int", False, None),
        (12, "self", "Acc(total=8)", "Acc", False, 1),
        (12, "<return>", "None", "NoneType", False, None),
        (13, "a", "Acc(total=8)", "Acc", False, 1),
        (13, "b", "Acc(total=8)", "Acc", False, 1),
        (13, "box", "[Acc(total=8)]", "list", False, 2),
        (14, "<return>", "8", "int", False, None),
    ]
    assert objects_of(result) == [(1, "Acc", 2), (2, "list", 8)]
    assert attributes_of(result) == [
        (4, 1, "total", "0", "int", False, None),
        (7, 1, "total", "5", "int", False, None),
        (9, 1, "total", "6", "int", False, None),
        (12, 1, "total", "8", "int", False, None),
    ]
    assert globals_of(result) == []  # Acc is a class: not recorded unless bound again


def test_a_linked_list_built_and_reversed(run):
    """Each node is an object (1, 2, 3 in creation order); ``next`` holds the next node's
    id in ``ref_id``; reversing rewires ``next`` one node per iteration, each change
    seen at the next step (through ``head`` or ``prev``). Nested nodes render to four
    levels."""
    result = run(LINKED, "3")
    assert (result["status"], result["output"]) == (
        "ok", "Node(val=0, next=Node(val=1, next=Node(val=2, next=None)))")
    assert [step[:3] for step in steps_of(result)][20:] == [
        ("line", "f", 9), ("line", "f", 11), ("line", "f", 12), ("line", "f", 13),
        ("line", "f", 12), ("line", "f", 13), ("line", "f", 12), ("line", "f", 13),
        ("line", "f", 12), ("line", "f", 14), ("return", "f", 14)]
    chain = "Node(val=2, next=Node(val=1, next=Node(val=0, next=None)))"
    assert states_of(result) == [
        (0, "n", "3", "int", False, None),
        (2, "head", "None", "NoneType", False, None),
        (3, "i", "0", "int", False, None),
        (4, "self", "Node()", "Node", False, 1),
        (4, "val", "0", "int", False, None),
        (4, "nxt", "None", "NoneType", False, None),
        (6, "self", "Node(val=0)", "Node", False, 1),
        (7, "self", "Node(val=0, next=None)", "Node", False, 1),
        (7, "<return>", "None", "NoneType", False, None),
        (8, "head", "Node(val=0, next=None)", "Node", False, 1),
        (9, "i", "1", "int", False, None),
        (10, "self", "Node()", "Node", False, 2),
        (10, "val", "1", "int", False, None),
        (10, "nxt", "Node(val=0, next=None)", "Node", False, 1),
        (12, "self", "Node(val=1)", "Node", False, 2),
        (13, "self", "Node(val=1, next=Node(val=0, next=None))", "Node", False, 2),
        (13, "<return>", "None", "NoneType", False, None),
        (14, "head", "Node(val=1, next=Node(val=0, next=None))", "Node", False, 2),
        (15, "i", "2", "int", False, None),
        (16, "self", "Node()", "Node", False, 3),
        (16, "val", "2", "int", False, None),
        (16, "nxt", "Node(val=1, next=Node(val=0, next=None))", "Node", False, 2),
        (18, "self", "Node(val=2)", "Node", False, 3),
        (19, "self", chain, "Node", False, 3),
        (19, "<return>", "None", "NoneType", False, None),
        (20, "head", chain, "Node", False, 3),
        (22, "prev", "None", "NoneType", False, None),
        (24, "head", "Node(val=1, next=Node(val=0, next=None))", "Node", False, 2),
        (24, "prev", "Node(val=2, next=None)", "Node", False, 3),
        (26, "head", "Node(val=0, next=None)", "Node", False, 1),
        (26, "prev", "Node(val=1, next=Node(val=2, next=None))", "Node", False, 2),
        (28, "head", "None", "NoneType", False, None),
        (28, "prev", result["output"], "Node", False, 1),
        (30, "<return>", result["output"], "Node", False, 1),
    ]
    assert objects_of(result) == [(1, "Node", 4), (2, "Node", 10), (3, "Node", 16)]
    assert attributes_of(result) == [
        (6, 1, "val", "0", "int", False, None),
        (7, 1, "next", "None", "NoneType", False, None),
        (12, 2, "val", "1", "int", False, None),
        (13, 2, "next", "Node(val=0, next=None)", "Node", False, 1),
        (18, 3, "val", "2", "int", False, None),
        (19, 3, "next", "Node(val=1, next=Node(val=0, next=None))", "Node", False, 2),
        (24, 3, "next", "None", "NoneType", False, None),
        (26, 2, "next", "Node(val=2, next=None)", "Node", False, 3),
        (28, 1, "next", "Node(val=1, next=Node(val=2, next=None))", "Node", False, 2),
    ]


def test_slots_in_declaration_order_base_classes_first(run):
    """Set slots only, the base class's first, each class's in its ``__slots__`` order
    (CPython itself lays them out sorted); ``del q.x`` is a row with value None."""
    result = run(SLOTS, "4")
    assert (result["status"], result["output"]) == ("ok", "Q(y=5, z=[4])")
    assert states_of(result) == [
        (0, "k", "4", "int", False, None),
        (2, "self", "Q()", "Q", False, 1),
        (2, "x", "4", "int", False, None),
        (4, "self", "Q(x=4)", "Q", False, 1),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "q", "Q(x=4)", "Q", False, 1),
        (6, "q", "Q(y=5, x=4)", "Q", False, 1),
        (7, "q", "Q(y=5, x=4, z=[4])", "Q", False, 1),
        (8, "q", "Q(y=5, z=[4])", "Q", False, 1),
        (9, "<return>", "Q(y=5, z=[4])", "Q", False, 1),
    ]
    assert objects_of(result) == [(1, "Q", 2), (2, "list", 7)]
    assert attributes_of(result) == [
        (4, 1, "x", "4", "int", False, None),
        (6, 1, "y", "5", "int", False, None),
        (7, 1, "z", "[4]", "list", False, 2),
        (8, 1, "x", None, None, False, None),
    ]


def test_a_property_and_a_dataclass(run):
    """A property setter is a traced method whose effect on ``_c`` shows at its
    ``return``; the property itself is not an attribute (it lives on the class). A
    dataclass keeps its own ``__repr__``; its fields are attributes all the same."""
    result = run(PROPERTY, "100")
    assert (result["status"], result["output"]) == ("ok", "Pt(x=11, y=2)")
    assert [step[:2] for step in steps_of(result)][5:9] == [
        ("line", "f"), ("call", "Temp.f"), ("line", "Temp.f"), ("return", "Temp.f")]
    assert states_of(result) == [
        (0, "c", "100", "int", False, None),
        (2, "self", "Temp()", "Temp", False, 1),
        (2, "c", "100", "int", False, None),
        (4, "self", "Temp(_c=100)", "Temp", False, 1),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "t", "Temp(_c=100)", "Temp", False, 1),
        (6, "self", "Temp(_c=100)", "Temp", False, 1),
        (6, "value", "50", "int", False, None),
        (8, "self", "Temp(_c=10)", "Temp", False, 1),
        (8, "<return>", "None", "NoneType", False, None),
        (9, "t", "Temp(_c=10)", "Temp", False, 1),
        (10, "p", "Pt(x=1, y=2)", "Pt", False, 2),
        (11, "p", "Pt(x=11, y=2)", "Pt", False, 2),
        (12, "<return>", "Pt(x=11, y=2)", "Pt", False, 2),
    ]
    assert objects_of(result) == [(1, "Temp", 2), (2, "Pt", 10)]
    assert attributes_of(result) == [
        (4, 1, "_c", "100", "int", False, None),
        (8, 1, "_c", "10", "int", False, None),
        (10, 2, "x", "1", "int", False, None),
        (10, 2, "y", "2", "int", False, None),
        (11, 2, "x", "11", "int", False, None),
    ]


# ---------------------------------------------------------------- globals, closures, aliases
def test_global_updates(run):
    """``counter`` and ``log`` (names the functions use) at the first step, then each
    change at the next step of whichever frame runs: ``log.append`` in ``bump`` shows at
    its ``return``. ``bump`` (a function) and ``math`` (a module, unused by the
    functions anyway) are not recorded; ``helper`` is, once bound again; ``LIMIT`` is
    not used by any function."""
    result = run(GLOBALS, "3")
    assert (result["status"], result["output"]) == ("ok", "3")
    assert states_of(result) == [
        (0, "n", "3", "int", False, None),
        (2, "i", "0", "int", False, None),
        (3, "k", "0", "int", False, None),
        (6, "<return>", "None", "NoneType", False, None),
        (8, "i", "1", "int", False, None),
        (9, "k", "1", "int", False, None),
        (12, "<return>", "None", "NoneType", False, None),
        (14, "i", "2", "int", False, None),
        (15, "k", "2", "int", False, None),
        (18, "<return>", "None", "NoneType", False, None),
        (22, "<return>", "3", "int", False, None),
    ]
    assert objects_of(result) == [(1, "list", 0)]
    assert globals_of(result) == [
        (0, "counter", "0", "int", False, None),
        (0, "log", "[]", "list", False, 1),
        (6, "log", "[0]", "list", False, 1),
        (11, "counter", "1", "int", False, None),
        (12, "log", "[0, 1]", "list", False, 1),
        (17, "counter", "3", "int", False, None),
        (18, "log", "[0, 1, 3]", "list", False, 1),
        (21, "helper", "<built-in function len>", "builtin_function_or_method", False, None),
    ]


def test_a_closures_nonlocal_and_a_shared_list(run):
    """Cell variables of ``f`` are locals of ``inc`` too (the same object id for
    ``items``); ``b = items; b.append(9)`` changes both names at the next step."""
    result = run(CLOSURE, "2")
    assert (result["status"], result["output"]) == ("ok", "2")
    assert states_of(result) == [
        (0, "n", "2", "int", False, None),
        (2, "count", "0", "int", False, None),
        (3, "items", "[]", "list", False, 1),
        (4, "inc", "<function f.<locals>.inc>", "function", False, None),
        (5, "k", "2", "int", False, None),
        (5, "count", "0", "int", False, None),
        (5, "items", "[]", "list", False, 1),
        (7, "count", "2", "int", False, None),
        (8, "items", "[2]", "list", False, 1),
        (8, "<return>", "None", "NoneType", False, None),
        (9, "count", "2", "int", False, None),
        (9, "items", "[2]", "list", False, 1),
        (10, "b", "[2]", "list", False, 1),
        (11, "b", "[2, 9]", "list", False, 1),
        (11, "items", "[2, 9]", "list", False, 1),
        (12, "<return>", "2", "int", False, None),
    ]
    assert objects_of(result) == [(1, "list", 3)]
    assert attributes_of(result) == globals_of(result) == []


def test_aliasing_and_rebinding_to_an_equal_object(run):
    """``b = a; b.append(1)`` changes ``a`` and ``b`` (object 1) at the next step;
    ``a = c`` binds ``a`` to another list with the same rendering: a change, with
    object id 2."""
    result = run(LIST_ALIAS, "7")
    assert states_of(result) == [
        (0, "x", "7", "int", False, None),
        (2, "a", "[7]", "list", False, 1),
        (3, "b", "[7]", "list", False, 1),
        (4, "a", "[7, 1]", "list", False, 1),
        (4, "b", "[7, 1]", "list", False, 1),
        (5, "c", "[7, 1]", "list", False, 2),
        (6, "a", "[7, 1]", "list", False, 2),
        (7, "<return>", "[7, 1]", "list", False, 1),
    ]
    assert objects_of(result) == [(1, "list", 2), (2, "list", 5)]


FLAT = """\
def f():
    a = [1, 2]
    a[0] = 1
    a[0] = 3
    b = list(a)
    a.append([0])
    d = {'k': 1}
    d['k'] = 'v'
    del d['k']; d['j'] = 'v'
    t = (1, 'x')
    t = t[:]
    return len(a)
"""
CALLEE_APPENDS = "def g(x):\n    x.append(5)\n\ndef f():\n    a = [1]\n    g(a)\n    return a\n"


def test_flat_containers_are_followed_by_their_items(run):
    """A list or dict of ints and strings is not rendered again while it holds the very
    same items (sysmon_tracer._FLAT_SAME): storing the same object again (``a[0] = 1``)
    and taking a tuple whole (``t[:]``) leave no row; a changed item, a changed key of
    the same length, an equal list that is another object (``list(a)``: its own id), an
    item that is not flat, and a change made by a callee through an alias all do."""
    result = run(FLAT, "")
    assert states_of(result) == [
        (2, "a", "[1, 2]", "list", False, 1),
        (4, "a", "[3, 2]", "list", False, 1),
        (5, "b", "[3, 2]", "list", False, 2),
        (6, "a", "[3, 2, [0]]", "list", False, 1),
        (7, "d", "{'k': 1}", "dict", False, 4),
        (8, "d", "{'k': 'v'}", "dict", False, 4),
        (9, "d", "{'j': 'v'}", "dict", False, 4),
        (10, "t", "(1, 'x')", "tuple", False, None),
        (12, "<return>", "3", "int", False, None),
    ]
    assert objects_of(result) == [(1, "list", 2), (2, "list", 5), (3, "list", 6),
                                  (4, "dict", 7)]
    result = run(CALLEE_APPENDS, "")
    assert states_of(result) == [
        (2, "a", "[1]", "list", False, 1),
        (3, "x", "[1]", "list", False, 1),
        (5, "x", "[1, 5]", "list", False, 1),
        (5, "<return>", "None", "NoneType", False, None),
        (6, "a", "[1, 5]", "list", False, 1),
        (7, "<return>", "[1, 5]", "list", False, 1),
    ]


def test_no_memory_address_anywhere_in_a_trace(run):
    """Functions, lambdas, bound methods, generators, iterators and ``object()`` are
    shown without their address, in states and in the output."""
    result = run(NO_ADDRESSES, "")
    shown = ("[<function f.<locals>.<lambda>>, <bound method A.m>, <generator object gen>, "
             "<object object>, <function f>, <list_iterator object>]")
    assert (result["status"], result["output"]) == ("ok", shown)
    assert states_of(result) == [
        (2, "g", "<function f.<locals>.<lambda>>", "function", False, None),
        (3, "h", "<bound method A.m>", "method", False, None),
        (4, "it", "<generator object gen>", "generator", False, None),
        (5, "o", "<object object>", "object", False, None),
        (6, "fn", "<function f>", "function", False, None),
        (7, "it2", "<list_iterator object>", "list_iterator", False, None),
        (8, "<return>", shown, "list", False, 1),
    ]
    assert no_addresses(result)
    # a string that looks like an address is a value, and is kept as it is
    text = run("def f(s):\n    t = [s, len]\n    return s\n", "'x at 0x1f'")
    assert states_of(text)[1:] == [
        (2, "t", "['x at 0x1f', <built-in function len>]", "list", False, 1),
        (3, "<return>", "'x at 0x1f'", "str", False, None)]


# ---------------------------------------------------------------- adversarial
HOSTILE = """\
class Meta(type):
    def __getattribute__(cls, name):
        raise RuntimeError("meta " + name)


class Loud:
    def __getattribute__(self, name):
        raise RuntimeError("getattribute " + name)

    def __getattr__(self, name):
        raise RuntimeError("getattr " + name)


class DictProp:
    @property
    def __dict__(self):
        raise RuntimeError("dict")


class SlotLie:
    __slots__ = ("a",)


SlotLie.a = property(lambda self: 1 / 0)


class Liar:
    @property
    def __class__(self):
        raise RuntimeError("class")


class M(metaclass=Meta):
    pass


class Huge:
    pass


def f(n):
    loud = Loud()
    object.__setattr__(loud, "x", 1)
    dp = DictProp()
    object.__setattr__(dp, "y", 2)
    sl = SlotLie()
    liar = Liar()
    liar.z = 3
    m = M()
    h = Huge()
    for i in range(n):
        object.__setattr__(h, "a" + str(i), i)
    ring = Huge()
    ring.me = ring
    ring.pair = [ring, {"r": ring}]
    return len(object.__getattribute__(h, "__dict__"))
"""
CLEAN = "class C:\n    pass\n\ndef f(x):\n    c = C()\n    c.v = x\n    return c\n"


def assert_clean(result: dict, x: int) -> None:
    assert (result["status"], result["output"], result["note"]) == ("ok", f"C(v={x})", None)
    assert states_of(result) == [
        (0, "x", str(x), "int", False, None), (2, "c", "C()", "C", False, 1),
        (3, "c", f"C(v={x})", "C", False, 1), (4, "<return>", f"C(v={x})", "C", False, 1)]
    assert objects_of(result) == [(1, "C", 2)]
    assert attributes_of(result) == [(3, 1, "v", str(x), "int", False, None)]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_hostile_classes_run_no_code_and_stay_bounded(run, isolation):
    """Reading objects runs none of the program's code: not ``__getattribute__``/
    ``__getattr__``, a metaclass's ``__getattribute__``, a ``__dict__`` property (its
    instance is shown without its dict's attributes), a property put where a slot
    was, a lying ``__class__``. 120 attributes: 100 are read, and the note says so; a
    self-referencing graph renders with ``...``. Only ``f`` is traced, and the next job
    is exact."""
    result = run(HOSTILE, "120", isolation=isolation)
    assert (result["status"], result["output"], result["funcs"]) == ("ok", "120", ["f"])
    assert result["note"] == ("objects beyond the tracer's bounds (depth 6, 200 objects a "
                              "step, 1000 items a container, 100 attributes an instance) "
                              "are not recorded")
    rows = states_of(result)
    first = {}
    for row in rows:
        first.setdefault(row[1], []).append(row)
    assert first["loud"] == [(2, "loud", "Loud()", "Loud", False, 1),
                             (3, "loud", "Loud(x=1)", "Loud", False, 1)]
    assert first["dp"] == [(4, "dp", "DictProp()", "DictProp", False, 2)]
    assert first["sl"] == [(6, "sl", "SlotLie()", "SlotLie", False, 3)]
    assert first["liar"] == [(7, "liar", "Liar()", "Liar", False, 4),
                             (8, "liar", "Liar(z=3)", "Liar", False, 4)]
    assert first["m"] == [(9, "m", "M()", "M", False, 5)]
    huge = first["h"][-1]
    assert huge[2] == "Huge(" + ", ".join(f"a{i}={i}" for i in range(100)) + ")"
    assert first["ring"][-1][2:] == ("Huge(me=Huge(...), pair=[Huge(...), {'r': Huge(...)}])",
                                     "Huge", False, 7)
    assert objects_of(result) == [(1, "Loud", 2), (2, "DictProp", 4), (3, "SlotLie", 6),
                                  (4, "Liar", 7), (5, "M", 9), (6, "Huge", 10),
                                  (7, "Huge", 252), (8, "list", 254), (9, "dict", 254)]
    attributes = attributes_of(result)
    assert [row for row in attributes if row[1] != 6] == [
        (3, 1, "x", "1", "int", False, None),
        (8, 4, "z", "3", "int", False, None),
        (253, 7, "me", "Huge(me=Huge(...))", "Huge", False, 7),
        # ``me`` still holds object 7: no row, though its rendering grew
        (254, 7, "pair", "[Huge(me=Huge(...), pair=[...]), {'r': Huge(me=Huge(...), "
         "pair=[...])}]", "list", False, 8),
    ]
    assert [(row[2], row[3]) for row in attributes if row[1] == 6] == [
        (f"a{i}", str(i)) for i in range(100)]
    assert no_addresses(result)
    assert_clean(run(CLEAN, "5", isolation=isolation), 5)


@pytest.mark.slow
def test_a_class_body_that_raises_in_a_key_comparison_does_not_break_the_tracer(run):
    """A class dict whose key is a str subclass with a raising ``__eq__`` and the hash of
    ``"__repr__"``: the tracer never looks that dict up (it scans it for plain ``str``
    keys), so the ``__eq__`` never runs and the class is the program's like any other."""
    code = ("class K(str):\n    def __hash__(self):\n        return hash('__repr__')\n"
            "    def __eq__(self, other):\n        raise RuntimeError('eq')\n\n"
            "Odd = type('Odd', (), {K('x'): 1})\n\n"
            "def f():\n    o = Odd()\n    o.v = 1\n    return 2\n")
    result = run(code, "")
    assert (result["status"], result["output"], result["funcs"]) == ("ok", "2", ["f"])
    assert states_of(result) == [(2, "o", "Odd()", "Odd", False, 1),
                                 (3, "o", "Odd(v=1)", "Odd", False, 1),
                                 (4, "<return>", "2", "int", False, None)]
    assert objects_of(result) == [(1, "Odd", 2)]
    assert attributes_of(result) == [(3, 1, "v", "1", "int", False, None)]
    assert_clean(run(CLEAN, "6"), 6)
