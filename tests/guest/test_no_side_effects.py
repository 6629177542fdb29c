"""Recording a run never changes what the program does (issue 32, item 2).

The tracer records a value without running any of the program's code (tracer/
bounded_repr.py, "The rendering rule"): no ``__repr__``/``__str__``/``__format__``, no
``__eq__``/``__hash__`` (of objects, or of classes through their metaclass), no
property, ``__getattr__``/``__getattribute__`` or descriptor, no ``__len__``/``__iter__``/
``__getitem__``/``items`` of a container subclass, no method of a class body's
``__prepare__`` namespace, no lookup in a dict holding a key of the program's; and it keeps
nothing alive (a finalizer runs where it runs untraced). So every test here runs the same
request traced and with ``"mode": "run"`` (untraced), in both isolations, and asserts that
status, output, output type, exception, stdout and the value the program returns (here
mostly the number of times its dunders ran: 0 unless the program itself ran them) are the
same, and pins the exact states recorded. The run's ``output`` is the value's own repr in
both modes, run once after the call (``test_the_output_is_the_values_own_repr``).

Finalizers of objects in reference cycles run when the cycle collector does, which CPython
starts by counting allocations; the tracer's own allocations count too, so such a
finalizer may run at another point of a traced run (docs/guides/runs.md, "What recording
cannot change"): not tested here as equal.
"""

from __future__ import annotations

import ast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.traces import attributes_of, globals_of, objects_of, outcome, steps_of
from helpers.traces import state_rows as states_of

ISOLATIONS = ["job", "batch"]
SAME = ("status", "output", "output_type", "output_truncated", "exception_type",
        "exception_message", "stdout", "output_matches")


def traced_and_run(sandbox, isolation: str, code: str, input: str = "", **request) -> dict:
    """The traced result, after asserting that its outcome is the untraced run's."""
    traced = sandbox.run({"code": code, "input": input, **request}, isolation).result
    plain = sandbox.run({"code": code, "input": input, "mode": "run", **request},
                        isolation).result
    assert {key: traced.get(key) for key in SAME} == {key: plain.get(key) for key in SAME}
    return traced


# ---------------------------------------------------------------- reprs
REPRS = """\
import threading
from collections import defaultdict, namedtuple
from dataclasses import dataclass

log = []


class Loud:
    def __init__(self, n):
        self.n = n

    def __repr__(self):
        log.append("repr")
        print("repr", self.n)
        threading.Thread(target=print).start()
        return "Loud!"

    def __str__(self):
        log.append("str")
        print("str")
        return "loud"

    def __format__(self, spec):
        log.append("format")
        return "F"


Pair = namedtuple("Pair", "a b")


@dataclass
class Box:
    item: object


def f(n):
    a = Loud(n)
    items = [a, (a,), {"k": a}, Pair(a, 1), Box(a), ValueError(a), defaultdict(list, k=[a])]
    return len(log)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_reprs_strs_and_formats_never_run(sandbox, isolation):
    """A class whose ``__repr__`` counts, prints and starts a thread (the traced run was
    ``unsupported``, the untraced ``ok``), ``__str__`` and ``__format__``, held in a list,
    a tuple, a dict, a namedtuple, a dataclass (whose own repr would call the item's), an
    exception's args and a defaultdict: rendered by its attributes, nothing of its runs."""
    result = traced_and_run(sandbox, isolation, REPRS, "3")
    assert outcome(result) == ("ok", None, None, "0", "")
    assert states_of(result) == [
        (0, "n", "3", "int", False, None),
        (2, "self", "Loud()", "Loud", False, 2),
        (2, "n", "3", "int", False, None),
        (4, "self", "Loud(n=3)", "Loud", False, 2),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "a", "Loud(n=3)", "Loud", False, 2),
        (6, "items", "[Loud(n=3), (Loud(n=3),), {'k': Loud(n=3)}, Pair(a=Loud(n=3), b=1), "
                     "Box(item=Loud(n=3)), ValueError(Loud(n=3)), "
                     "defaultdict(<class 'list'>, {'k': [Loud(n=3)]})]", "list", False, 3),
        (7, "<return>", "0", "int", False, None),
    ]
    assert objects_of(result) == [
        (1, "list", 0),
        (2, "Loud", 2),
        (3, "list", 6),
        (4, "dict", 6),
        (5, "Pair", 6),
        (6, "Box", 6),
        (7, "defaultdict", 6),
        (8, "list", 6),
    ]
    assert attributes_of(result) == [
        (4, 2, "n", "3", "int", False, None),
        (6, 6, "item", "Loud(n=3)", "Loud", False, 2),
    ]
    assert globals_of(result) == [
        (0, "log", "[]", "list", False, 1),
    ]


# ---------------------------------------------------------------- __eq__, __hash__, metaclass
HASHING = """\
from collections import OrderedDict, Counter

log = []


class Meta(type):
    def __repr__(cls):
        log.append("meta repr")
        return "META"

    def __hash__(cls):
        log.append("meta hash")
        return 1

    def __eq__(cls, other):
        log.append("meta eq")
        return cls is other

    def __getattribute__(cls, name):
        if not name.startswith("__"):
            log.append("meta " + name)
        return type.__getattribute__(cls, name)


class Key(metaclass=Meta):
    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        log.append("eq")
        return False

    def __hash__(self):
        log.append("hash")
        return 7

    def __lt__(self, other):
        log.append("lt")
        return True


K1, K2 = Key(1), Key(2)
TABLE = {K1: "one"}
ORDERED = OrderedDict([(K1, 1), (K2, 2)])
COUNTS = Counter({"x": K1, "y": K2})


def f(n):
    keys = [K1, Key, (K2, Key)]
    table = TABLE
    ordered = ORDERED
    counts = COUNTS
    shelf = {K2, K1}
    return len(log) + n
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_eq_hash_lt_and_the_metaclass_never_run(sandbox, isolation):
    """Keys with a counting ``__eq__``/``__hash__``/``__lt__`` whose class has a metaclass
    with its own ``__repr__``, ``__hash__``, ``__eq__`` and ``__getattribute__``: in a dict,
    an OrderedDict (shown in insertion order: its own order is read by hashing), a
    Counter (counts that are no numbers: insertion order, no ``__lt__``), a set, a
    list with the class itself (``type.__repr__``'s form). The 5 calls logged before the
    call and the 3 in ``{K2, K1}`` (traced) are the program's own."""
    result = traced_and_run(sandbox, isolation, HASHING, "0")
    assert outcome(result) == ("ok", None, None, "8", "")
    assert states_of(result) == [
        (0, "n", "0", "int", False, None),
        (2, "keys", "[Key(k=1), <class '__main__.Key'>, (Key(k=2), <class '__main__.Key'>)]",
         "list", False, 7),
        (3, "table", "{Key(k=1): 'one'}", "dict", False, 5),
        (4, "ordered", "OrderedDict({Key(k=1): 1, Key(k=2): 2})", "OrderedDict", False, 4),
        (5, "counts", "Counter({'x': Key(k=1), 'y': Key(k=2)})", "Counter", False, 1),
        (6, "self", "Key(k=2)", "Key", False, 3),
        (9, "<return>", "7", "int", False, None),
        (10, "self", "Key(k=1)", "Key", False, 2),
        (13, "<return>", "7", "int", False, None),
        (14, "self", "Key(k=2)", "Key", False, 3),
        (14, "other", "Key(k=1)", "Key", False, 2),
        (17, "<return>", "False", "bool", False, None),
        (18, "shelf", "{Key(k=1), Key(k=2)}", "set", False, 9),
        (19, "<return>", "8", "int", False, None),
    ]
    assert objects_of(result) == [
        (1, "Counter", 0),
        (2, "Key", 0),
        (3, "Key", 0),
        (4, "OrderedDict", 0),
        (5, "dict", 0),
        (6, "list", 0),
        (7, "list", 2),
        (8, "Meta", 2),
        (9, "set", 18),
    ]
    assert attributes_of(result) == [
        (2, 2, "k", "1", "int", False, None),
        (2, 3, "k", "2", "int", False, None),
    ]
    assert globals_of(result) == [
        (0, "COUNTS", "Counter({'x': Key(k=1), 'y': Key(k=2)})", "Counter", False, 1),
        (0, "K1", "Key(k=1)", "Key", False, 2),
        (0, "K2", "Key(k=2)", "Key", False, 3),
        (0, "ORDERED", "OrderedDict({Key(k=1): 1, Key(k=2): 2})", "OrderedDict", False, 4),
        (0, "TABLE", "{Key(k=1): 'one'}", "dict", False, 5),
        (0, "log", "['hash', 'hash', 'hash', 'eq', 'eq']", "list", False, 6),
        (8, "log", "['hash', 'hash', 'hash', 'eq', 'eq', 'hash']", "list", False, 6),
        (12, "log", "['hash', 'hash', 'hash', 'eq', 'eq', 'hash', 'hash']", "list", False, 6),
        (16, "log", "['hash', 'hash', 'hash', 'eq', 'eq', 'hash', 'hash', 'eq']", "list", False, 6),
    ]


# ---------------------------------------------------------------- attributes
ATTRIBUTES = """\
log = []


class Spy:
    # A data descriptor and a non-data one: each access is logged.

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, owner=None):
        log.append("get " + self.name)
        return 0

    def __set__(self, obj, value):
        log.append("set " + self.name)


class Lazy:
    def __get__(self, obj, owner=None):
        log.append("lazy")
        return 1


class Shifty:
    spied = Spy("spied")
    lazy = Lazy()

    def __init__(self):
        object.__setattr__(self, "seen", 1)

    @property
    def total(self):
        log.append("property")
        return 2

    @property
    def __class__(self):
        log.append("__class__")
        return int

    def __getattr__(self, name):
        log.append("getattr " + name)
        return 3

    def __getattribute__(self, name):
        log.append("getattribute " + name)
        return object.__getattribute__(self, name)

    def __len__(self):
        log.append("len")
        return 4

    def __bool__(self):
        log.append("bool")
        return True

    def __iter__(self):
        log.append("iter")
        return iter(())

    def __dir__(self):
        log.append("dir")
        return []

    def __sizeof__(self):
        log.append("sizeof")
        return 5


class Slotted:
    __slots__ = ("a", "b")


Slotted.b = Spy("b")  # the slot's member descriptor replaced: never read


def f(n):
    s = Shifty()
    object.__setattr__(s, "extra", n)
    t = Slotted()
    t.a = [s]
    return len(log)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_properties_getattr_and_descriptors_never_run(sandbox, isolation):
    """An instance read through its ``__dict__`` only: its property, ``__getattr__``,
    ``__getattribute__``, a lying ``__class__``, data and non-data descriptors on the
    class, ``__len__``/``__bool__``/``__iter__``/``__dir__``/``__sizeof__`` never run; a slot
    whose member descriptor was replaced by the program's descriptor is not read."""
    result = traced_and_run(sandbox, isolation, ATTRIBUTES, "5")
    assert outcome(result) == ("ok", None, None, "0", "")
    assert states_of(result) == [
        (0, "n", "5", "int", False, None),
        (2, "self", "Shifty()", "Shifty", False, 2),
        (4, "self", "Shifty(seen=1)", "Shifty", False, 2),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "s", "Shifty(seen=1)", "Shifty", False, 2),
        (6, "s", "Shifty(seen=1, extra=5)", "Shifty", False, 2),
        (7, "t", "Slotted()", "Slotted", False, 3),
        (8, "t", "Slotted(a=[Shifty(seen=1, extra=5)])", "Slotted", False, 3),
        (9, "<return>", "0", "int", False, None),
    ]
    assert objects_of(result) == [
        (1, "list", 0),
        (2, "Shifty", 2),
        (3, "Slotted", 7),
        (4, "list", 8),
    ]
    assert attributes_of(result) == [
        (4, 2, "seen", "1", "int", False, None),
        (6, 2, "extra", "5", "int", False, None),
        (8, 3, "a", "[Shifty(seen=1, extra=5)]", "list", False, 4),
    ]
    assert globals_of(result) == [
        (0, "log", "[]", "list", False, 1),
    ]


# ---------------------------------------------------------------- container subclasses
SUBCLASSES = """\
from collections import OrderedDict, deque

log = []


class Hoard(list):
    def __len__(self):
        log.append("len")
        return 0

    def __iter__(self):
        log.append("iter")
        return iter(())

    def __getitem__(self, index):
        log.append("getitem")
        return None

    def __repr__(self):
        log.append("repr")
        return "Hoard"


class Ledger(dict):
    def items(self):
        log.append("items")
        return []

    def keys(self):
        log.append("keys")
        return []

    def __iter__(self):
        log.append("iter")
        return iter(())

    def __len__(self):
        log.append("len")
        return 0

    def __getitem__(self, key):
        log.append("getitem")
        return None


class Bag(set):
    def __iter__(self):
        log.append("iter")
        return iter(())


class Word(str):
    def __repr__(self):
        log.append("repr")
        return "W"

    def __str__(self):
        log.append("str")
        return "w"

    def __len__(self):
        log.append("len")
        return 0

    def __getitem__(self, index):
        log.append("getitem")
        return "?"

    def __format__(self, spec):
        log.append("format")
        return "?"


class Count(int):
    def __repr__(self):
        log.append("repr")
        return "C"

    def __index__(self):
        log.append("index")
        return 0


class Queue(deque):
    def __iter__(self):
        log.append("iter")
        return iter(())


class Recent(OrderedDict):
    def items(self):
        log.append("items")
        return []


def f(n):
    h = Hoard([1, 2])
    h.append(h)
    g = Ledger(a=1)
    g["me"] = g
    b = Bag({n})
    w = Word("ab")
    c = Count(7)
    q = Queue([w], maxlen=3)
    r = Recent(k=c)
    return len(log)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_container_subclasses_are_read_with_the_builtin_types_own_functions(sandbox, isolation):
    """Subclasses of list, dict, set, str, int, deque and OrderedDict overriding
    ``__len__``, ``__iter__``, ``__getitem__``, ``items``, ``keys``, ``__repr__``, ``__str__``,
    ``__format__`` and ``__index__``: each is ``Class(value)``, its value read with the
    built-in type's C functions (a list holding itself: ``[...]``)."""
    result = traced_and_run(sandbox, isolation, SUBCLASSES, "5")
    assert outcome(result) == ("ok", None, None, "0", "")
    assert states_of(result) == [
        (0, "n", "5", "int", False, None),
        (2, "h", "Hoard([1, 2])", "Hoard", False, 2),
        (3, "h", "Hoard([1, 2, [...]])", "Hoard", False, 2),
        (4, "g", "Ledger({'a': 1})", "Ledger", False, 3),
        (5, "g", "Ledger({'a': 1, 'me': {...}})", "Ledger", False, 3),
        (6, "b", "Bag({5})", "Bag", False, 4),
        (7, "w", "Word('ab')", "Word", False, 5),
        (8, "c", "Count(7)", "Count", False, 6),
        (9, "q", "Queue(deque([Word('ab')], maxlen=3))", "Queue", False, 7),
        (10, "r", "Recent(OrderedDict({'k': Count(7)}))", "Recent", False, 8),
        (11, "<return>", "0", "int", False, None),
    ]
    assert objects_of(result) == [
        (1, "list", 0),
        (2, "Hoard", 2),
        (3, "Ledger", 4),
        (4, "Bag", 6),
        (5, "Word", 7),
        (6, "Count", 8),
        (7, "Queue", 9),
        (8, "Recent", 10),
    ]
    assert attributes_of(result) == [
    ]
    assert globals_of(result) == [
        (0, "log", "[]", "list", False, 1),
    ]


# ---------------------------------------------------------------- finalizers
FINALIZERS = """\
class Noisy:
    def __init__(self, name):
        self.name = name

    def __del__(self):
        print("del", self.name)


def gen():
    x = Noisy("gen")
    yield 1
    yield x


def f(n):
    a = Noisy("a")
    a = Noisy("b")
    print("rebound")
    b = [Noisy("c")]
    b.clear()
    print("cleared")
    d = Noisy("d")
    del d
    print("deleted")
    g = gen()
    next(g)
    g = None
    print("closed")
    e = Noisy("e")
    return n
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_finalizers_run_where_they_run_untraced(sandbox, isolation):
    """``__del__`` prints: on an object rebound, on one a list drops, on one ``del``-ed, on
    one held by a suspended generator the program drops (the tracer kept the
    generator's frame, so its ``del gen`` came after the call), and at the call's end.
    Each ``__del__`` run inside the call is a traced activation."""
    result = traced_and_run(sandbox, isolation, FINALIZERS, "5")
    assert outcome(result) == ("ok", None, None, "5", "del a\nrebound\ndel c\ncleared\ndel d\n"
                               "deleted\ndel gen\nclosed\ndel e\ndel b\n")
    assert states_of(result) == [
        (0, "n", "5", "int", False, None),
        (2, "self", "Noisy()", "Noisy", False, 1),
        (2, "name", "'a'", "str", False, None),
        (4, "self", "Noisy(name='a')", "Noisy", False, 1),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "a", "Noisy(name='a')", "Noisy", False, 1),
        (6, "self", "Noisy()", "Noisy", False, 2),
        (6, "name", "'b'", "str", False, None),
        (8, "self", "Noisy(name='b')", "Noisy", False, 2),
        (8, "<return>", "None", "NoneType", False, None),
        (9, "self", "Noisy(name='a')", "Noisy", False, 1),
        (11, "<return>", "None", "NoneType", False, None),
        (12, "a", "Noisy(name='b')", "Noisy", False, 2),
        (14, "self", "Noisy()", "Noisy", False, 3),
        (14, "name", "'c'", "str", False, None),
        (16, "self", "Noisy(name='c')", "Noisy", False, 3),
        (16, "<return>", "None", "NoneType", False, None),
        (17, "b", "[Noisy(name='c')]", "list", False, 4),
        (18, "self", "Noisy(name='c')", "Noisy", False, 3),
        (20, "<return>", "None", "NoneType", False, None),
        (21, "b", "[]", "list", False, 4),
        (23, "self", "Noisy()", "Noisy", False, 5),
        (23, "name", "'d'", "str", False, None),
        (25, "self", "Noisy(name='d')", "Noisy", False, 5),
        (25, "<return>", "None", "NoneType", False, None),
        (26, "d", "Noisy(name='d')", "Noisy", False, 5),
        (27, "self", "Noisy(name='d')", "Noisy", False, 5),
        (29, "<return>", "None", "NoneType", False, None),
        (30, "d", None, None, False, None),
        (32, "g", "<generator object gen>", "generator", False, None),
        (35, "self", "Noisy()", "Noisy", False, 6),
        (35, "name", "'gen'", "str", False, None),
        (37, "self", "Noisy(name='gen')", "Noisy", False, 6),
        (37, "<return>", "None", "NoneType", False, None),
        (38, "x", "Noisy(name='gen')", "Noisy", False, 6),
        (39, "<yield>", "1", "int", False, None),
        (41, "self", "Noisy(name='gen')", "Noisy", False, 6),
        (43, "<return>", "None", "NoneType", False, None),
        (44, "g", "None", "NoneType", False, None),
        (46, "self", "Noisy()", "Noisy", False, 7),
        (46, "name", "'e'", "str", False, None),
        (48, "self", "Noisy(name='e')", "Noisy", False, 7),
        (48, "<return>", "None", "NoneType", False, None),
        (49, "e", "Noisy(name='e')", "Noisy", False, 7),
        (50, "<return>", "5", "int", False, None),
    ]
    assert objects_of(result) == [
        (1, "Noisy", 2),
        (2, "Noisy", 6),
        (3, "Noisy", 14),
        (4, "list", 17),
        (5, "Noisy", 23),
        (6, "Noisy", 35),
        (7, "Noisy", 46),
    ]
    assert attributes_of(result) == [
        (4, 1, "name", "'a'", "str", False, None),
        (8, 2, "name", "'b'", "str", False, None),
        (16, 3, "name", "'c'", "str", False, None),
        (25, 5, "name", "'d'", "str", False, None),
        (37, 6, "name", "'gen'", "str", False, None),
        (48, 7, "name", "'e'", "str", False, None),
    ]
    assert globals_of(result) == [
    ]


# ---------------------------------------------------------------- keys of the program's
KEYS = """\
log = []


class Twin(str):
    # Equal in hash to the plain string of its text, never equal to it: a lookup of that
    # string meets it and runs its __eq__.

    __hash__ = str.__hash__

    def __eq__(self, other):
        log.append("eq " + self)
        return False


Odd = type("Odd", (), {Twin(name): 0 for name in (
    "__repr__", "__module__", "__dict__", "__slots__", "_fields", "__qualname__", "v")})
globals()[Twin("count")] = 0
count = 0
log.clear()  # the top level's own lookups (how many follows the build's hash secret)


def f(n):
    global count
    o = Odd()
    o.v = n
    count += 1
    return len(log)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_keys_of_the_programs_own_in_class_dicts_and_globals(sandbox, isolation):
    """A class dict and the program's globals holding ``str`` subclass keys that collide
    with every name the tracer reads (``__repr__``, ``__module__``, ``__dict__``, ...,
    the global ``count``): the tracer scans such dicts for plain keys, so the only
    ``__eq__`` calls are the program's own lookups in ``f``, of ``v`` (once) and of
    ``count`` (its load and store, and as many more as the interpreter's own lookups make:
    how many follows the build, as the untraced run's does), traced as it runs them."""
    result = traced_and_run(sandbox, isolation, KEYS.replace("len(log)", "tuple(log)"), "5")
    assert outcome(result)[:3] == ("ok", None, None) and result["stdout"] == ""
    log = ast.literal_eval(result["output"])
    # CPython's own lookups of a colliding key call __eq__ once or twice, as the build's
    # string-hash secret falls (native CPython 3.13 does too, by PYTHONHASHSEED): the
    # untraced run's count is the reference (traced_and_run), the order is exact
    log = list(log)
    looked_up_v = log.count("eq v")
    assert log == ["eq v"] * looked_up_v + ["eq count"] * (len(log) - looked_up_v)
    assert looked_up_v >= 1 and len(log) - looked_up_v >= 2
    calls = [(name, value) for _, name, value, *_ in states_of(result)
             if name in ("self", "other")]
    assert calls == [("self", "Twin('v')"), ("other", "'v'")] * looked_up_v + [
        ("self", "Twin('count')"), ("other", "'count'")] * (len(log) - looked_up_v)
    assert objects_of(result)[:3] == [(1, "list", 0), (2, "Odd", 2), (3, "Twin", 3)]
    assert objects_of(result)[3][:2] == (4, "Twin") and len(objects_of(result)) == 4
    assert attributes_of(result) == [
        (7, 2, "v", "5", "int", False, None),
    ]
    rows = globals_of(result)
    assert rows[:2] == [(0, "count", "0", "int", False, None),
                        (0, "log", "[]", "list", False, 1)]
    assert [value for _, name, value, *_ in rows if name == "log"][1:] == [
        repr(list(log[:i])) for i in range(1, len(log) + 1)]
    assert [value for _, name, value, *_ in rows if name == "count"] == ["0", "1"]


# ---------------------------------------------------------------- exceptions, output
EXCEPTIONS = """\
log = []


class Oops(Exception):
    def __init__(self, code):
        super().__init__("bad", code)
        self.code = code

    def __repr__(self):
        log.append("repr")
        return "OOPS"

    def __str__(self):
        log.append("str")
        print("str of Oops")
        return "oops!"


class Shown:
    def __repr__(self):
        print("repr of Shown")
        return "Shown()"


def f(n):
    try:
        raise Oops(n)
    except Oops as e:
        caught = e
    if n > 1:
        raise Oops(len(log))
    return Shown()
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_output_is_the_values_own_repr(sandbox, isolation):
    """An exception with its own ``__repr__``/``__str__`` is ``Name(args)`` in the trace
    (neither runs: ``__str__`` would print); the returned object's own ``__repr__``
    runs once, after the call, in both modes: the output and its print."""
    result = traced_and_run(sandbox, isolation, EXCEPTIONS, "1")
    assert outcome(result) == ("ok", None, None, "Shown()", "repr of Shown\n")
    assert states_of(result) == [
        (0, "n", "1", "int", False, None),
        (3, "self", "Oops(1)", "Oops", False, 2),
        (3, "code", "1", "int", False, None),
        (3, "__class__", "<class '__main__.Oops'>", "type", False, None),
        (5, "self", "Oops('bad', 1)", "Oops", False, 2),
        (6, "<return>", "None", "NoneType", False, None),
        (7, "<exception>", "Oops('bad', 1)", "Oops", False, 2),
        (9, "e", "Oops('bad', 1)", "Oops", False, 2),
        (10, "caught", "Oops('bad', 1)", "Oops", False, 2),
        (10, "e", None, None, False, None),
        (12, "<return>", "Shown()", "Shown", False, 3),
    ]
    assert objects_of(result) == [
        (1, "list", 0),
        (2, "Oops", 3),
        (3, "Shown", 12),
    ]
    assert attributes_of(result) == [
        (6, 2, "code", "1", "int", False, None),
    ]
    assert globals_of(result) == [
        (0, "log", "[]", "list", False, 1),
    ]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_an_escaping_exceptions_message_is_its_str_in_both_modes(sandbox, isolation):
    """The exception that escapes is described by its ``__str__`` after the call, in both
    modes (one print); while recording, neither its ``__repr__`` nor its ``__str__`` runs."""
    result = traced_and_run(sandbox, isolation, EXCEPTIONS, "2")
    assert outcome(result) == ("exception", "Oops", "oops!", None, "str of Oops\n")
    assert states_of(result) == [
        (0, "n", "2", "int", False, None),
        (3, "self", "Oops(2)", "Oops", False, 2),
        (3, "code", "2", "int", False, None),
        (3, "__class__", "<class '__main__.Oops'>", "type", False, None),
        (5, "self", "Oops('bad', 2)", "Oops", False, 2),
        (6, "<return>", "None", "NoneType", False, None),
        (7, "<exception>", "Oops('bad', 2)", "Oops", False, 2),
        (9, "e", "Oops('bad', 2)", "Oops", False, 2),
        (10, "caught", "Oops('bad', 2)", "Oops", False, 2),
        (10, "e", None, None, False, None),
        (12, "self", "Oops(0)", "Oops", False, 3),
        (12, "code", "0", "int", False, None),
        (12, "__class__", "<class '__main__.Oops'>", "type", False, None),
        (14, "self", "Oops('bad', 0)", "Oops", False, 3),
        (15, "<return>", "None", "NoneType", False, None),
        (16, "<exception>", "Oops('bad', 0)", "Oops", False, 3),
        (17, "<exception>", "Oops('bad', 0)", "Oops", False, 3),
    ]
    assert objects_of(result) == [
        (1, "list", 0),
        (2, "Oops", 3),
        (3, "Oops", 12),
    ]
    assert attributes_of(result) == [
        (6, 2, "code", "2", "int", False, None),
        (15, 3, "code", "0", "int", False, None),
    ]
    assert globals_of(result) == [
        (0, "log", "[]", "list", False, 1),
    ]


THREADED_OUTPUT = """\
import threading


class Busy:
    def __init__(self):
        self.n = 1

    def __repr__(self):
        print("repr of Busy")
        threading.Thread(target=print).start()
        return "Busy()"


def f():
    b = Busy()
    return b
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_an_output_repr_that_starts_a_thread_is_unsupported_in_both_modes(sandbox, isolation):
    """The returned object's ``__repr__`` (the output) starts a thread: both modes stop
    there with ``unsupported`` (it was ``crashed``, the runner's StopTracing escaping);
    while recording, the ``__repr__`` never ran."""
    result = traced_and_run(sandbox, isolation, THREADED_OUTPUT)
    assert outcome(result) == ("unsupported", None,
                               "the program starts a thread; the sandbox (WASI) has no threads",
                               None, "repr of Busy\n")
    assert states_of(result) == [
        (2, "self", "Busy()", "Busy", False, 1),
        (4, "self", "Busy(n=1)", "Busy", False, 1),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "b", "Busy(n=1)", "Busy", False, 1),
        (6, "<return>", "Busy(n=1)", "Busy", False, 1)]


# ---------------------------------------------------------------- namespaces
SCRIPT = """\
log = []


class Twin(str):
    __hash__ = str.__hash__

    def __eq__(self, other):
        log.append("eq")
        return False


globals()[Twin("total")] = 1
total = 0
for i in range(2):
    total += i
print(total, len(log))
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_scripts_namespace_with_a_key_of_the_programs(sandbox, isolation):
    """A script's top level is recorded from its namespace's plain ``str`` keys (dunders
    left out): the ``Twin('total')`` key is not a local, and the ``__eq__`` calls are the
    program's own name lookups (6, traced)."""
    result = traced_and_run(sandbox, isolation, SCRIPT, "", shape="script")
    # six lookups of ``total`` (its store, two loads and stores, the print's load), each
    # calling __eq__ once or twice as the build's string-hash secret falls (native CPython
    # 3.13 does too, by PYTHONHASHSEED): the untraced run's count is the reference
    # (traced_and_run), and the trace has exactly that many __eq__ calls
    total, calls = map(int, result["stdout"].split())
    assert outcome(result)[:4] == ("ok", None, None, None) and total == 1 and 6 <= calls <= 12
    states = states_of(result)
    equals = [row[1:] for row in states if row[1] in ("self", "other")
              or row[1:3] == ("<return>", "False")]
    assert equals == [("self", "Twin('total')", "Twin", False, 2),
                      ("other", "'total'", "str", False, None),
                      ("<return>", "False", "bool", False, None)] * calls
    # the rest, step by step, with the log's growth counted rather than spelled out
    rest = [(row[1], row[2] if row[1] != "log" else row[2].count("'eq'")) + row[3:]
            for row in states if row[1:] not in equals]
    assert [row for row in rest if row[0] != "log"] == [
        ("__module__", "'__main__'", "str", False, None),
        ("__qualname__", "'Twin'", "str", False, None),
        ("__firstlineno__", "4", "int", False, None),
        ("__hash__", "<slot wrapper '__hash__' of 'str' objects>", "wrapper_descriptor", False,
         None),
        ("__eq__", "<function Twin.__eq__>", "function", False, None),
        ("__static_attributes__", "()", "tuple", False, None),
        ("__classdictcell__", "<cell: dict object>", "cell", False, None),
        ("<return>", "None", "NoneType", False, None),
        ("Twin", "<class '__main__.Twin'>", "type", False, None),
        ("total", "0", "int", False, None),
        ("i", "0", "int", False, None),
        ("i", "1", "int", False, None),
        ("total", "1", "int", False, None),
        ("<return>", "None", "NoneType", False, None),
    ]
    logged = [row[1] for row in rest if row[0] == "log"]
    assert logged[0] == 0 and logged == sorted(logged) and logged[-1] == calls
    assert objects_of(result) == [
        (1, "list", 2),
        (2, "Twin", 10),
    ]
    assert attributes_of(result) == [
    ]
    # the global log after each __eq__ call: one more 'eq' each time
    assert [row[1:] for row in globals_of(result)] == [
        ("log", repr(["eq"] * count), "list", False, 1) for count in range(calls + 1)]


PREPARED = """\
log = []


class Book(dict):
    # A class body's namespace of the program's own (a metaclass's __prepare__).

    def __contains__(self, key):
        log.append("contains")
        return dict.__contains__(self, key)

    def items(self):
        log.append("items")
        return dict.items(self)

    def __iter__(self):
        log.append("iter")
        return dict.__iter__(self)

    def __len__(self):
        log.append("len")
        return dict.__len__(self)


class Ledger:
    # Not a dict at all.

    def __init__(self):
        self.data = {}

    def __getitem__(self, key):
        return self.data[key]

    def __setitem__(self, key, value):
        self.data[key] = value

    def __delitem__(self, key):
        del self.data[key]

    def keys(self):
        log.append("ledger keys")
        return self.data.keys()


class Meta(type):
    @classmethod
    def __prepare__(mcs, name, bases, book=True):
        return Book() if book else Ledger()

    def __new__(mcs, name, bases, namespace, book=True):
        return type.__new__(mcs, name, bases, dict(namespace.data) if not book else namespace)


def f(n):
    class A(metaclass=Meta):
        x = n

    class B(metaclass=Meta, book=False):
        y = n

    return len(log)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_class_bodys_namespace_of_the_programs_own(sandbox, isolation):
    """A class body runs in what its metaclass's ``__prepare__`` returned: a dict subclass
    overriding ``items``, ``__iter__``, ``__len__``, ``__contains__`` is read with dict's own C
    iteration (its names recorded); a mapping that is no dict records nothing (reading it
    would run its methods). None of the overrides runs."""
    result = traced_and_run(sandbox, isolation, PREPARED, "5")
    assert outcome(result) == ("ok", None, None, "0", "")
    funcs = [result["funcs"][index] for index in result["steps"]["func"]]
    assert [row for row in states_of(result) if funcs[row[0]] != "Ledger.__setitem__"
            and funcs[row[0]] != "Ledger.__getitem__" and funcs[row[0]] != "Meta.__new__"] == [
        (0, "n", "5", "int", False, None),
        (2, "mcs", "<class '__main__.Meta'>", "type", False, None),
        (2, "name", "'A'", "str", False, None),
        (2, "bases", "()", "tuple", False, None),
        (2, "book", "True", "bool", False, None),
        (4, "<return>", "Book({})", "Book", False, 2),
        (7, "__module__", "'__main__'", "str", False, None),
        (7, "__qualname__", "'f.<locals>.A'", "str", False, None),
        (7, "__firstlineno__", "54", "int", False, None),
        (8, "x", "5", "int", False, None),
        (8, "__static_attributes__", "()", "tuple", False, None),
        (8, "<return>", "None", "NoneType", False, None),
        (12, "A", "<class '__main__.f.<locals>.A'>", "Meta", False, 3),
        (13, "mcs", "<class '__main__.Meta'>", "type", False, None),
        (13, "name", "'B'", "str", False, None),
        (13, "bases", "()", "tuple", False, None),
        (13, "book", "False", "bool", False, None),
        (15, "self", "Ledger()", "Ledger", False, 4),
        (17, "self", "Ledger(data={})", "Ledger", False, 4),
        (17, "<return>", "None", "NoneType", False, None),
        (18, "<return>", "Ledger(data={})", "Ledger", False, 4),
        (45, "<return>", "None", "NoneType", False, None),  # B's body: no names
        (49, "B", "<class '__main__.f.<locals>.B'>", "Meta", False, 6),
        (50, "<return>", "0", "int", False, None)]
    assert [step[:2] for step in steps_of(result)][19:21] == [("call", "f.<locals>.B"),
                                                               ("line", "f.<locals>.B")]
    assert globals_of(result) == [(0, "log", "[]", "list", False, 1)]


# ---------------------------------------------------------------- generated classes
# Every dunder the tracer could be tempted to run, each logging and printing its call. A
# body returns a value of the right type so that the program's own uses of it work.
DUNDERS = {
    "__repr__": "return {name!r}", "__str__": "return 's'", "__format__": "return 'F'",
    "__eq__": "return False", "__hash__": "return 7", "__lt__": "return True",
    "__len__": "return 1", "__bool__": "return True", "__iter__": "return iter(())",
    "__getitem__": "return 0", "__contains__": "return False", "__sizeof__": "return 8",
    "__getattr__": "return 0", "__dir__": "return []", "__index__": "return 1",
    "__getattribute__": "return object.__getattribute__(self, args[0])",
    "__del__": "return None",
}
META_DUNDERS = {"__repr__": "return 'M'", "__hash__": "return 5", "__eq__": "return cls is args[0]",
                "__getattribute__": "return type.__getattribute__(cls, args[0])"}
BASES = {"": "{v}", "list": "[{v}]", "dict": "{{'k': {v}}}", "str": "'{v}'", "int": "{v}",
         "tuple": "({v},)"}
# a thread started in a __repr__: the run stops as ``unsupported`` where the program's own
# code runs it (in both modes), never because the tracer did
THREAD = "threading.Thread(target=len, args=((),)).start(); "


@st.composite
def programs(draw) -> str:
    """A program of 1-3 classes with side-effecting dunders (some with a metaclass of
    their own, some derived from a built-in type) and an ``f`` that makes instances,
    stores them in containers, attributes and a global, rebinds and deletes them, and
    returns what its dunders logged (or an instance: the output's own repr)."""
    lines = ["import threading", "log = []", "G = None", ""]
    classes = []
    for index in range(draw(st.integers(1, 3))):
        name = f"C{index}"
        meta = draw(st.lists(st.sampled_from(sorted(META_DUNDERS)), unique=True, max_size=3))
        if meta:
            lines.append(f"class M{index}(type):")
            for dunder in meta:
                lines += [f"    def {dunder}(cls, *args):",
                          f"        log.append('M{index}.{dunder}'); print('M{index}.{dunder}')",
                          f"        {META_DUNDERS[dunder]}"]
            lines.append("")
        base = draw(st.sampled_from(sorted(BASES)))
        header = ", ".join(([base] if base else []) + ([f"metaclass=M{index}"] if meta else []))
        lines.append(f"class {name}({header}):")
        lines.append("    pass")
        for dunder in draw(st.lists(st.sampled_from(sorted(DUNDERS)), unique=True, max_size=6)):
            body = DUNDERS[dunder].format(name=name)
            thread = THREAD if dunder == "__repr__" and draw(st.booleans()) else ""
            lines += [f"    def {dunder}(self, *args):",
                      f"        log.append('{name}.{dunder}'); print('{name}.{dunder}')",
                      f"        {thread}{body}"]
        lines.append("")
        classes.append((name, base))
    body = []
    names: list[str] = []
    for step in range(draw(st.integers(1, 8))):
        action = draw(st.integers(0, 6))
        if action <= 1 or not names:
            name, base = draw(st.sampled_from(classes))
            var = f"x{step}"
            body.append(f"{var} = {name}({BASES[base].format(v=step)})")
            names.append(var)
        elif action == 2:
            body.append(f"{draw(st.sampled_from(names))}.a = [{step}, 'v']")
        elif action == 3:
            chosen = draw(st.sampled_from(names))
            body.append(f"box{step} = [{chosen}, ({chosen}, 1), {{'k': {chosen}}}]")
        elif action == 4:
            body.append(f"{draw(st.sampled_from(names))} = None")
        elif action == 5:
            chosen = draw(st.sampled_from(names))
            body.append(f"del {chosen}")
            names.remove(chosen)
        else:
            body.append(f"G = {draw(st.sampled_from(names))}")
    result = draw(st.sampled_from(["log[:]"] + names))
    lines += ["def f():", "    global G"] + [f"    {line}" for line in body]
    lines += [f"    return {result}", ""]
    return "\n".join(lines)


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(code=programs(), isolation=st.sampled_from(ISOLATIONS))
def test_generated_classes_with_side_effecting_dunders(sandbox, code, isolation):
    """Whatever dunders a class defines, the traced run's status, output, exception,
    stdout and returned log are the untraced run's; every value is recorded (no repr
    failed or was cut short by a dunder)."""
    result = traced_and_run(sandbox, isolation, code)
    assert result["status"] in ("ok", "exception", "unsupported"), result
    values = [value for value in result["states"]["value"] if value is not None]
    assert not [value for value in values if "repr failed" in value]
