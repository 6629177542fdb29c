"""Exact step and state traces of small hand-written programs.

Every expected value below was checked by hand against Python semantics (CPython 3.14,
PEP 669 events), not just copied from the tracer:

* steps are ``(event, func qualname, line, depth, frame id)`` (``steps_of``);
* states are ``(step, name, repr, type name)`` deltas per frame (``states_of``). A LINE
  step records the state *before* its line runs, so line L's effect shows at the frame's
  next step. ``None``/``None`` means the name became unbound.
* there are no ``handled``/``reraise`` steps (CPython's EXCEPTION_HANDLED and RERAISE
  events also fire for compiler-generated handlers and are not recorded): an exception
  caught in a frame is its ``raise`` step followed by a ``line`` step of that frame; one
  that escapes is ``unwind`` there and ``raise`` in the caller;
* recording ends with the entry function's activation (frame 0): generators it abandoned
  are finalised afterwards and their clean-up leaves no steps.

Reprs never contain a memory address (functions, generators and iterators are shown
without it, instances of the program's classes as ``QualName(attr=value, ...)``):
:func:`deltas` checks that no value has one.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from helpers.programs import CALLS_IN_COMPREHENSION, ONE_LINE_LOOPS_AND_ANY
from helpers.traces import job, states_of, steps_of
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

_ADDRESS = re.compile(r" at 0x[0-9a-f]+>")


def deltas(result: dict) -> list[tuple]:
    """``states_of``, checked to hold no memory address."""
    rows = states_of(result)
    assert not [value for _, _, value, _ in rows if value and _ADDRESS.search(value)]
    return rows


def counts(result: dict) -> tuple:
    return result["line_steps"], result["calls"], result["max_depth"]


def outcome(result: dict) -> tuple:
    return (result["status"], result["exception_type"], result["exception_message"],
            result["output"], result["output_type"], result["output_matches"])


ZDE = "ZeroDivisionError('division by zero')"

# ---------------------------------------------------------------- programs
FOR_IF = """\
def f(xs):
    out = []
    for x in xs:
        if x % 2:
            out.append(x)
        else:
            out.append(-x)
    return out
"""

WHILE_ELSE = """\
def f(n):
    i = 0
    while i < n:
        if i == 2:
            break
        i += 1
    else:
        i = -1
    return i
"""

FACTORIAL = """\
def f(n):
    if n <= 1:
        return 1
    return n * f(n - 1)
"""

FIB = """\
def f(n):
    if n < 2:
        return n
    return f(n - 1) + f(n - 2)
"""

CLOSURE = """\
def f(n):
    count = 0
    def inc(k):
        nonlocal count
        count += k
        return count
    inc(n)
    inc(1)
    return count
"""

GENERATOR = """\
def gen(n):
    for i in range(n):
        yield i * 10

def f(n):
    total = 0
    for v in gen(n):
        total += v
    return total
"""

YIELD_FROM = """\
def inner():
    yield 1
    yield 2

def outer():
    yield from inner()

def f():
    return list(outer())
"""

SEND = """\
def acc():
    total = 0
    while True:
        x = yield total
        total += x

def f(xs):
    a = acc()
    next(a)
    for x in xs:
        r = a.send(x)
    return r
"""

GENEXPR = """\
def f(xs):
    total = sum(x * x for x in xs)
    return total
"""

COMPREHENSIONS = """\
def f(xs):
    sq = [x * x for x in xs]
    d = {x: x + 1 for x in xs}
    s = {x % 2 for x in xs}
    return sq, d, s
"""

MULTILINE_COMPREHENSION = """\
def f(xs):
    x = 'outer'
    sq = [x * 2
          for x in xs
          if x > 1]
    return sq, x
"""

LAMBDA_KEY = """\
def f(words):
    return sorted(words, key=lambda w: len(w))
"""

CLASS = """\
class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)

    def pop(self):
        return self.items.pop()

def f(a, b):
    s = Stack()
    s.push(a)
    s.push(b)
    return s.pop()
"""

CAUGHT_OPERATION = """\
def f(x):
    try:
        y = 10 // x
    except ZeroDivisionError:
        y = -1
    return y
"""

CAUGHT_RAISE_AS = """\
def f(x):
    try:
        if x < 0:
            raise ValueError("neg")
        y = x
    except ValueError as e:
        y = str(e)
    return y
"""

CALLEE_RAISES = """\
def check(x):
    if x < 0:
        raise ValueError("negative")
    return x

def f(x):
    try:
        return check(x)
    except ValueError:
        return 0
"""

UNCAUGHT = """\
def g(d):
    return d["missing"]

def f(d):
    v = g(d)
    return v
"""

ARGS = """\
def f(s, *args, sep='-', n=2):
    parts = [s * n]
    parts.extend(args)
    return sep.join(parts)
"""

DEL = """\
def f(x):
    y = x + 1
    del x
    x = y * 2
    del y
    return x
"""

IDENTITY = """\
def f(x):
    return x
"""

UNMATCHED_EXCEPT = """\
def f(x):
    try:
        return {}[x]
    except ValueError:
        return -1
"""

BARE_RERAISE = """\
def f(x):
    try:
        y = 10 // x
    except ZeroDivisionError:
        raise
    return y
"""

FINALLY = """\
def f(x):
    try:
        y = 10 // x
    finally:
        x = -1
    return y
"""

RAISE_IN_EXCEPT = """\
def f(x):
    try:
        return 10 // x
    except ZeroDivisionError as e:
        raise ValueError(x)
"""

GENERATOR_RAISES = """\
def gen():
    yield 1
    raise KeyError(2)

def f():
    out = []
    try:
        for v in gen():
            out.append(v)
    except KeyError:
        out.append(-1)
    return out
"""

ABANDONED_IN_FINALLY = """\
def gen():
    try:
        yield 1
        yield 2
    finally:
        print('cleanup')

def f():
    g = gen()
    first = next(g)
    return first
"""

ABANDONED_IN_EXCEPT = """\
def gen():
    try:
        yield 1
        yield 2
    except GeneratorExit:
        print('closed')
        raise

def f():
    g = gen()
    return next(g)
"""

CLASS_ENTRY = """\
class f:
    def __new__(cls, x):
        return object.__new__(cls)

    def __init__(self, x):
        self.x = x

    def __repr__(self):
        return 'f()'
"""


# ---------------------------------------------------------------- control flow
def test_for_loop_with_if_else(run):
    """A for loop visits its header once per item plus once at exhaustion; the if/else
    branch taken shows as line 5 (odd) or 7 (even); list mutations show one step later."""
    result = run(FOR_IF, "[1, 2]", expected="[1, -2]")
    assert outcome(result) == ("ok", None, None, "[1, -2]", "list", True)
    assert counts(result) == (9, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 7, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 8, 0, 0),
        ("return", "f", 8, 0, 0),
    ]
    assert deltas(result) == [
        (0, "xs", "[1, 2]", "list"),
        (2, "out", "[]", "list"),
        (3, "x", "1", "int"),
        (5, "out", "[1]", "list"),
        (6, "x", "2", "int"),
        (8, "out", "[1, -2]", "list"),
        (10, "<return>", "[1, -2]", "list"),
    ]


def test_while_else_break_skips_else(run):
    """``break`` at i == 2 leaves the loop without running the ``else`` (line 8)."""
    result = run(WHILE_ELSE, "5")
    assert outcome(result) == ("ok", None, None, "2", "int", None)
    assert counts(result) == (11, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("line", "f", 9, 0, 0),
        ("return", "f", 9, 0, 0),
    ]
    assert deltas(result) == [
        (0, "n", "5", "int"),
        (2, "i", "0", "int"),
        (5, "i", "1", "int"),
        (8, "i", "2", "int"),
        (12, "<return>", "2", "int"),
    ]


def test_while_else_no_break_runs_else(run):
    """When the condition becomes false the ``else`` clause (line 8) runs."""
    result = run(WHILE_ELSE, "1")
    assert outcome(result) == ("ok", None, None, "-1", "int", None)
    assert counts(result) == (7, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("return", "f", 9, 0, 0),
    ]
    assert deltas(result) == [
        (0, "n", "1", "int"),
        (2, "i", "0", "int"),
        (5, "i", "1", "int"),
        (7, "i", "-1", "int"),
        (8, "<return>", "-1", "int"),
    ]


# ---------------------------------------------------------------- calls
def test_recursion_factorial(run):
    """Each recursive activation gets a new frame id and depth + 1; returns unwind in
    reverse order, the outer ones on the line of the recursive call (4)."""
    result = run(FACTORIAL, "3")
    assert outcome(result) == ("ok", None, None, "6", "int", None)
    assert counts(result) == (6, 3, 2)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 4, 0, 0),
        ("call", "f", 1, 1, 1),
        ("line", "f", 2, 1, 1),
        ("line", "f", 4, 1, 1),
        ("call", "f", 1, 2, 2),
        ("line", "f", 2, 2, 2),
        ("line", "f", 3, 2, 2),
        ("return", "f", 3, 2, 2),
        ("return", "f", 4, 1, 1),
        ("return", "f", 4, 0, 0),
    ]
    assert deltas(result) == [
        (0, "n", "3", "int"),
        (3, "n", "2", "int"),
        (6, "n", "1", "int"),
        (9, "<return>", "1", "int"),
        (10, "<return>", "2", "int"),
        (11, "<return>", "6", "int"),
    ]


def test_recursion_fib_sibling_frames(run):
    """Two recursive calls per activation: siblings at the same depth get distinct frame
    ids (1 and 4 at depth 1; 2 and 3 at depth 2), numbered in call order."""
    result = run(FIB, "3")
    assert outcome(result) == ("ok", None, None, "2", "int", None)
    assert counts(result) == (10, 5, 2)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 4, 0, 0),
        ("call", "f", 1, 1, 1),
        ("line", "f", 2, 1, 1),
        ("line", "f", 4, 1, 1),
        ("call", "f", 1, 2, 2),
        ("line", "f", 2, 2, 2),
        ("line", "f", 3, 2, 2),
        ("return", "f", 3, 2, 2),
        ("call", "f", 1, 2, 3),
        ("line", "f", 2, 2, 3),
        ("line", "f", 3, 2, 3),
        ("return", "f", 3, 2, 3),
        ("return", "f", 4, 1, 1),
        ("call", "f", 1, 1, 4),
        ("line", "f", 2, 1, 4),
        ("line", "f", 3, 1, 4),
        ("return", "f", 3, 1, 4),
        ("return", "f", 4, 0, 0),
    ]
    assert deltas(result) == [
        (0, "n", "3", "int"),
        (3, "n", "2", "int"),
        (6, "n", "1", "int"),
        (9, "<return>", "1", "int"),
        (10, "n", "0", "int"),
        (13, "<return>", "0", "int"),
        (14, "<return>", "1", "int"),
        (15, "n", "1", "int"),
        (18, "<return>", "1", "int"),
        (19, "<return>", "2", "int"),
    ]


def test_closure_nonlocal(run):
    """A nested function's qualname is ``f.<locals>.inc``; its frame sees the free
    variable ``count``; the outer frame sees the cell change at its next step (8, 13)."""
    result = run(CLOSURE, "2")
    assert outcome(result) == ("ok", None, None, "3", "int", None)
    assert counts(result) == (9, 3, 1)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 7, 0, 0),
        ("call", "f.<locals>.inc", 3, 1, 1),
        ("line", "f.<locals>.inc", 5, 1, 1),
        ("line", "f.<locals>.inc", 6, 1, 1),
        ("return", "f.<locals>.inc", 6, 1, 1),
        ("line", "f", 8, 0, 0),
        ("call", "f.<locals>.inc", 3, 1, 2),
        ("line", "f.<locals>.inc", 5, 1, 2),
        ("line", "f.<locals>.inc", 6, 1, 2),
        ("return", "f.<locals>.inc", 6, 1, 2),
        ("line", "f", 9, 0, 0),
        ("return", "f", 9, 0, 0),
    ]
    assert deltas(result) == [
        (0, "n", "2", "int"),
        (2, "count", "0", "int"),
        (3, "inc", "<function f.<locals>.inc>", "function"),
        (4, "k", "2", "int"),
        (4, "count", "0", "int"),
        (6, "count", "2", "int"),
        (7, "<return>", "2", "int"),
        (8, "count", "2", "int"),
        (9, "k", "1", "int"),
        (9, "count", "2", "int"),
        (11, "count", "3", "int"),
        (12, "<return>", "3", "int"),
        (13, "count", "3", "int"),
        (14, "<return>", "3", "int"),
    ]


def test_lambda_sort_key(run):
    """``sorted(key=lambda ...)`` calls the lambda once per item, each a new frame
    ``f.<locals>.<lambda>`` at depth 1 whose call and line are both the def line (2)."""
    result = run(LAMBDA_KEY, "['ccc', 'a', 'bb']", expected="['a', 'bb', 'ccc']")
    assert outcome(result) == ("ok", None, None, "['a', 'bb', 'ccc']", "list", True)
    assert counts(result) == (4, 4, 1)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("call", "f.<locals>.<lambda>", 2, 1, 1),
        ("line", "f.<locals>.<lambda>", 2, 1, 1),
        ("return", "f.<locals>.<lambda>", 2, 1, 1),
        ("call", "f.<locals>.<lambda>", 2, 1, 2),
        ("line", "f.<locals>.<lambda>", 2, 1, 2),
        ("return", "f.<locals>.<lambda>", 2, 1, 2),
        ("call", "f.<locals>.<lambda>", 2, 1, 3),
        ("line", "f.<locals>.<lambda>", 2, 1, 3),
        ("return", "f.<locals>.<lambda>", 2, 1, 3),
        ("return", "f", 2, 0, 0),
    ]
    assert deltas(result) == [
        (0, "words", "['ccc', 'a', 'bb']", "list"),
        (2, "w", "'ccc'", "str"),
        (4, "<return>", "3", "int"),
        (5, "w", "'a'", "str"),
        (7, "<return>", "1", "int"),
        (8, "w", "'bb'", "str"),
        (10, "<return>", "2", "int"),
        (11, "<return>", "['a', 'bb', 'ccc']", "list"),
    ]


def test_class_methods(run):
    """Methods are traced under their qualnames (``Stack.__init__``, ``Stack.push``,
    ``Stack.pop``); ``Stack()`` runs ``__init__``; the class body itself ran at import
    time, before tracing, so it has no steps."""
    result = run(CLASS, "1, 2")
    assert outcome(result) == ("ok", None, None, "2", "int", None)
    assert counts(result) == (8, 5, 1)
    assert result["funcs"] == ["f", "Stack.__init__", "Stack.push", "Stack.pop"]
    assert steps_of(result) == [
        ("call", "f", 11, 0, 0),
        ("line", "f", 12, 0, 0),
        ("call", "Stack.__init__", 2, 1, 1),
        ("line", "Stack.__init__", 3, 1, 1),
        ("return", "Stack.__init__", 3, 1, 1),
        ("line", "f", 13, 0, 0),
        ("call", "Stack.push", 5, 1, 2),
        ("line", "Stack.push", 6, 1, 2),
        ("return", "Stack.push", 6, 1, 2),
        ("line", "f", 14, 0, 0),
        ("call", "Stack.push", 5, 1, 3),
        ("line", "Stack.push", 6, 1, 3),
        ("return", "Stack.push", 6, 1, 3),
        ("line", "f", 15, 0, 0),
        ("call", "Stack.pop", 8, 1, 4),
        ("line", "Stack.pop", 9, 1, 4),
        ("return", "Stack.pop", 9, 1, 4),
        ("return", "f", 15, 0, 0),
    ]
    # an instance of the program's class is shown by its attributes: the effect of
    # ``self.items.append(x)`` shows at the method's ``return`` and in ``s`` after it
    assert deltas(result) == [
        (0, "a", "1", "int"),
        (0, "b", "2", "int"),
        (2, "self", "Stack()", "Stack"),
        (4, "self", "Stack(items=[])", "Stack"),
        (4, "<return>", "None", "NoneType"),
        (5, "s", "Stack(items=[])", "Stack"),
        (6, "self", "Stack(items=[])", "Stack"),
        (6, "x", "1", "int"),
        (8, "self", "Stack(items=[1])", "Stack"),
        (8, "<return>", "None", "NoneType"),
        (9, "s", "Stack(items=[1])", "Stack"),
        (10, "self", "Stack(items=[1])", "Stack"),
        (10, "x", "2", "int"),
        (12, "self", "Stack(items=[1, 2])", "Stack"),
        (12, "<return>", "None", "NoneType"),
        (13, "s", "Stack(items=[1, 2])", "Stack"),
        (14, "self", "Stack(items=[1, 2])", "Stack"),
        (16, "self", "Stack(items=[1])", "Stack"),
        (16, "<return>", "2", "int"),
        (17, "s", "Stack(items=[1])", "Stack"),
        (17, "<return>", "2", "int"),
    ]


def test_keyword_default_and_star_args(run):
    """CRUXEval-style input with a trailing comma: defaults fill ``sep``/``n``, ``args``
    is ``()``; locals appear in ``co_varnames`` order (positional, keyword-only, *args)."""
    result = run(ARGS, "'l000*', ", expected="'l000*l000*'")
    assert outcome(result) == ("ok", None, None, "'l000*l000*'", "str", True)
    assert counts(result) == (3, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("return", "f", 4, 0, 0),
    ]
    assert deltas(result) == [
        (0, "s", "'l000*'", "str"),
        (0, "sep", "'-'", "str"),
        (0, "n", "2", "int"),
        (0, "args", "()", "tuple"),
        (2, "parts", "['l000*l000*']", "list"),  # extend(()) changes nothing at step 3
        (4, "<return>", "'l000*l000*'", "str"),
    ]


def test_explicit_keywords_and_unpacked_star_args(run):
    """Input ``'ab', *['c', 'd'], n=1, sep='+',`` binds ``args == ('c', 'd')`` and both
    keyword-only parameters, in any keyword order."""
    result = run(ARGS, "'ab', *['c', 'd'], n=1, sep='+',", expected="'ab+c+d'")
    assert outcome(result) == ("ok", None, None, "'ab+c+d'", "str", True)
    assert deltas(result) == [
        (0, "s", "'ab'", "str"),
        (0, "sep", "'+'", "str"),
        (0, "n", "1", "int"),
        (0, "args", "('c', 'd')", "tuple"),
        (2, "parts", "['ab']", "list"),
        (3, "parts", "['ab', 'c', 'd']", "list"),
        (4, "<return>", "'ab+c+d'", "str"),
    ]


# ---------------------------------------------------------------- generators, comprehensions
def test_generator_consumed_by_for(run):
    """The generator's ``call`` happens at the first ``next`` (not at ``gen(n)``); it
    keeps frame id 1 across yield/resume; a resume is on the line of the yield (3); the
    final return (None) is on the ``for`` line (2) where the loop is exhausted."""
    result = run(GENERATOR, "2")
    assert outcome(result) == ("ok", None, None, "10", "int", None)
    assert counts(result) == (12, 2, 1)
    assert steps_of(result) == [
        ("call", "f", 5, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 7, 0, 0),
        ("call", "gen", 1, 1, 1),
        ("line", "gen", 2, 1, 1),
        ("line", "gen", 3, 1, 1),
        ("yield", "gen", 3, 1, 1),
        ("line", "f", 8, 0, 0),
        ("line", "f", 7, 0, 0),
        ("resume", "gen", 3, 1, 1),
        ("line", "gen", 2, 1, 1),
        ("line", "gen", 3, 1, 1),
        ("yield", "gen", 3, 1, 1),
        ("line", "f", 8, 0, 0),
        ("line", "f", 7, 0, 0),
        ("resume", "gen", 3, 1, 1),
        ("line", "gen", 2, 1, 1),
        ("return", "gen", 2, 1, 1),
        ("line", "f", 9, 0, 0),
        ("return", "f", 9, 0, 0),
    ]
    assert deltas(result) == [
        (0, "n", "2", "int"),
        (2, "total", "0", "int"),
        (3, "n", "2", "int"),
        (5, "i", "0", "int"),
        (6, "<yield>", "0", "int"),
        (7, "v", "0", "int"),
        (11, "i", "1", "int"),
        (12, "<yield>", "10", "int"),
        (13, "v", "10", "int"),
        (14, "total", "10", "int"),
        (17, "<return>", "None", "NoneType"),
        (19, "<return>", "10", "int"),
    ]


def test_generator_send(run):
    """``x = yield total``: the value sent in is bound in the generator's frame after the
    resume (visible at its next step, line 5); the sender sees the next yielded value."""
    result = run(SEND, "[1, 2]")
    assert outcome(result) == ("ok", None, None, "3", "int", None)
    assert counts(result) == (17, 2, 1)
    assert steps_of(result) == [
        ("call", "f", 7, 0, 0),
        ("line", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("call", "acc", 1, 1, 1),
        ("line", "acc", 2, 1, 1),
        ("line", "acc", 3, 1, 1),
        ("line", "acc", 4, 1, 1),
        ("yield", "acc", 4, 1, 1),
        ("line", "f", 10, 0, 0),
        ("line", "f", 11, 0, 0),
        ("resume", "acc", 4, 1, 1),
        ("line", "acc", 5, 1, 1),
        ("line", "acc", 3, 1, 1),
        ("line", "acc", 4, 1, 1),
        ("yield", "acc", 4, 1, 1),
        ("line", "f", 10, 0, 0),
        ("line", "f", 11, 0, 0),
        ("resume", "acc", 4, 1, 1),
        ("line", "acc", 5, 1, 1),
        ("line", "acc", 3, 1, 1),
        ("line", "acc", 4, 1, 1),
        ("yield", "acc", 4, 1, 1),
        ("line", "f", 10, 0, 0),
        ("line", "f", 12, 0, 0),
        ("return", "f", 12, 0, 0),
    ]
    assert deltas(result) == [
        (0, "xs", "[1, 2]", "list"),
        (2, "a", "<generator object acc>", "generator"),
        (5, "total", "0", "int"),
        (7, "<yield>", "0", "int"),
        (9, "x", "1", "int"),
        (11, "x", "1", "int"),
        (12, "total", "1", "int"),
        (14, "<yield>", "1", "int"),
        (15, "r", "1", "int"),
        (16, "x", "2", "int"),
        (18, "x", "2", "int"),
        (19, "total", "3", "int"),
        (21, "<yield>", "3", "int"),
        (22, "r", "3", "int"),
        (24, "<return>", "3", "int"),
    ]


def test_yield_from_nesting(run):
    """``yield from``: the inner generator (depth 2) yields, then the delegating one
    (depth 1) yields the same value; on resume the outer resumes first, then the inner."""
    result = run(YIELD_FROM, "")
    assert outcome(result) == ("ok", None, None, "[1, 2]", "list", None)
    assert counts(result) == (4, 3, 2)
    assert steps_of(result) == [
        ("call", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("call", "outer", 5, 1, 1),
        ("line", "outer", 6, 1, 1),
        ("call", "inner", 1, 2, 2),
        ("line", "inner", 2, 2, 2),
        ("yield", "inner", 2, 2, 2),
        ("yield", "outer", 6, 1, 1),
        ("resume", "outer", 6, 1, 1),
        ("resume", "inner", 2, 2, 2),
        ("line", "inner", 3, 2, 2),
        ("yield", "inner", 3, 2, 2),
        ("yield", "outer", 6, 1, 1),
        ("resume", "outer", 6, 1, 1),
        ("resume", "inner", 3, 2, 2),
        ("return", "inner", 3, 2, 2),
        ("return", "outer", 6, 1, 1),
        ("return", "f", 9, 0, 0),
    ]
    assert deltas(result) == [
        (6, "<yield>", "1", "int"),
        (7, "<yield>", "1", "int"),
        (11, "<yield>", "2", "int"),
        (12, "<yield>", "2", "int"),
        (15, "<return>", "None", "NoneType"),
        (16, "<return>", "None", "NoneType"),
        (17, "<return>", "[1, 2]", "list"),
    ]


def test_generator_expression(run):
    """A generator expression is its own frame ``f.<locals>.<genexpr>`` (depth 1, one
    frame id for all resumes) whose locals are the hidden iterator ``.0`` and ``x``. All of
    it is on line 2, so after the first LINE no further LINE events fire in it (PEP 669
    LINE only fires when the line changes)."""
    result = run(GENEXPR, "[1, 2]")
    assert outcome(result) == ("ok", None, None, "5", "int", None)
    assert counts(result) == (3, 2, 1)
    g = "f.<locals>.<genexpr>"
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("call", g, 2, 1, 1),
        ("line", g, 2, 1, 1),
        ("yield", g, 2, 1, 1),
        ("resume", g, 2, 1, 1),
        ("yield", g, 2, 1, 1),
        ("resume", g, 2, 1, 1),
        ("return", g, 2, 1, 1),
        ("line", "f", 3, 0, 0),
        ("return", "f", 3, 0, 0),
    ]
    assert deltas(result) == [
        (0, "xs", "[1, 2]", "list"),
        (2, ".0", "<list_iterator object>", "list_iterator"),
        (4, "x", "1", "int"),
        (4, "<yield>", "1", "int"),
        (6, "x", "2", "int"),
        (6, "<yield>", "4", "int"),
        (8, "<return>", "None", "NoneType"),
        (9, "total", "5", "int"),
        (10, "<return>", "5", "int"),
    ]


def test_comprehensions_are_inlined(run):
    """List/dict/set comprehensions are inlined (PEP 709): no call steps, no frames of
    their own, one LINE per comprehension, and the iteration variable ``x`` never shows
    in ``f``'s locals (it only exists while the one-line comprehension runs)."""
    result = run(COMPREHENSIONS, "[1, 2]")
    assert outcome(result) == ("ok", None, None, "([1, 4], {1: 2, 2: 3}, {0, 1})", "tuple",
                               None)
    assert counts(result) == (4, 1, 0)
    assert result["funcs"] == ["f"]
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("return", "f", 5, 0, 0),
    ]
    assert deltas(result) == [
        (0, "xs", "[1, 2]", "list"),
        (2, "sq", "[1, 4]", "list"),
        (3, "d", "{1: 2, 2: 3}", "dict"),
        (4, "s", "{0, 1}", "set"),
        (5, "<return>", "([1, 4], {1: 2, 2: 3}, {0, 1})", "tuple"),
    ]


def test_multiline_comprehension_shadows_outer_variable(run):
    """An inlined comprehension spanning lines 3-5 produces LINE steps in ``f`` itself.
    While it runs, CPython stashes the outer ``x`` (LOAD_FAST_AND_CLEAR): ``x`` is unbound
    (step 4), then holds the comprehension's values 1 and 2, and the outer ``'outer'`` is
    back after the comprehension (step 12), as ``frame.f_locals`` really shows it. The
    loop's end (step 10, line 4) goes back to line 3 to store ``sq`` (step 11, ``x``
    still 2): a line CPython 3.14 loses (its jump back is on line 3 too) and 3.13
    reports."""
    result = run(MULTILINE_COMPREHENSION, "[1, 2]")
    assert outcome(result) == ("ok", None, None, "([4], 'outer')", "tuple", None)
    assert counts(result) == (12, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 6, 0, 0),
        ("return", "f", 6, 0, 0),
    ]
    assert deltas(result) == [
        (0, "xs", "[1, 2]", "list"),
        (2, "x", "'outer'", "str"),
        (4, "x", None, None),
        (5, "x", "1", "int"),
        (8, "x", "2", "int"),
        (12, "x", "'outer'", "str"),
        (12, "sq", "[4]", "list"),
        (13, "<return>", "([4], 'outer')", "tuple"),
    ]


# ---------------------------------------------------------------- exceptions
def test_exception_from_operation_caught(run):
    """``10 // 0`` raises on line 3; the ``except`` catches it: the ``raise`` step (on the
    raising line) is followed directly by the except clause (4) and its body (5) in the
    same frame."""
    result = run(CAUGHT_OPERATION, "0")
    assert outcome(result) == ("ok", None, None, "-1", "int", None)
    assert counts(result) == (5, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("raise", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("line", "f", 6, 0, 0),
        ("return", "f", 6, 0, 0),
    ]
    assert deltas(result) == [
        (0, "x", "0", "int"),
        (3, "<exception>", ZDE, "ZeroDivisionError"),
        (6, "y", "-1", "int"),
        (7, "<return>", "-1", "int"),
    ]


def test_raise_statement_caught_with_as(run):
    """A ``raise`` statement on line 4 caught by ``except ValueError as e``: the ``raise``
    step is followed by the except clause (6), which binds ``e`` (shown at the next step,
    line 7); Python deletes ``e`` at the end of the handler, so at step 7 (line 8) ``y`` is
    bound and ``e`` unbound."""
    result = run(CAUGHT_RAISE_AS, "-1")
    assert outcome(result) == ("ok", None, None, "'neg'", "str", None)
    assert counts(result) == (6, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("raise", "f", 4, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 7, 0, 0),
        ("line", "f", 8, 0, 0),
        ("return", "f", 8, 0, 0),
    ]
    assert deltas(result) == [
        (0, "x", "-1", "int"),
        (4, "<exception>", "ValueError('neg')", "ValueError"),
        (6, "e", "ValueError('neg')", "ValueError"),
        (7, "y", "'neg'", "str"),
        (7, "e", None, None),
        (8, "<return>", "'neg'", "str"),
    ]


def test_exception_from_callee_caught_in_caller(run):
    """The callee raises (line 3) and ends with ``unwind`` at depth 1; the exception then
    propagates into the caller (``raise`` on the call line 8, depth 0), which catches it:
    its next step is the except clause (9)."""
    result = run(CALLEE_RAISES, "-5")
    assert outcome(result) == ("ok", None, None, "0", "int", None)
    assert counts(result) == (6, 2, 1)
    assert steps_of(result) == [
        ("call", "f", 6, 0, 0),
        ("line", "f", 7, 0, 0),
        ("line", "f", 8, 0, 0),
        ("call", "check", 1, 1, 1),
        ("line", "check", 2, 1, 1),
        ("line", "check", 3, 1, 1),
        ("raise", "check", 3, 1, 1),
        ("unwind", "check", 3, 1, 1),
        ("raise", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("line", "f", 10, 0, 0),
        ("return", "f", 10, 0, 0),
    ]
    exc = "ValueError('negative')"
    assert deltas(result) == [
        (0, "x", "-5", "int"),
        (3, "x", "-5", "int"),
        (6, "<exception>", exc, "ValueError"),
        (7, "<exception>", exc, "ValueError"),
        (8, "<exception>", exc, "ValueError"),
        (11, "<return>", "0", "int"),
    ]


def test_uncaught_exception(run):
    """A KeyError nobody catches: both frames end with ``unwind`` (the entry frame on its
    call line 5); status ``exception`` with the type and ``str(exc)``; no output, and an
    expected value never matches."""
    result = run(UNCAUGHT, "{'a': 1}", expected="None")
    assert outcome(result) == ("exception", "KeyError", "'missing'", None, None, False)
    assert counts(result) == (2, 2, 1)
    assert steps_of(result) == [
        ("call", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("call", "g", 1, 1, 1),
        ("line", "g", 2, 1, 1),
        ("raise", "g", 2, 1, 1),
        ("unwind", "g", 2, 1, 1),
        ("raise", "f", 5, 0, 0),
        ("unwind", "f", 5, 0, 0),
    ]
    exc = "KeyError('missing')"
    assert deltas(result) == [
        (0, "d", "{'a': 1}", "dict"),
        (2, "d", "{'a': 1}", "dict"),
        (4, "<exception>", exc, "KeyError"),
        (5, "<exception>", exc, "KeyError"),
        (6, "<exception>", exc, "KeyError"),
        (7, "<exception>", exc, "KeyError"),
    ]


# CPython routes exceptions through compiler-generated handlers (the no-match re-raise of
# an ``except``, the cleanup that pops the exception state, the generator's StopIteration
# guard, the ``as e`` cleanup) and fires EXCEPTION_HANDLED/RERAISE for them as well as for
# real except clauses, bare ``raise`` and the end of a ``finally``. Neither event is a step
# any more: an exception that is caught is its ``raise`` followed by a ``line`` step of the
# same frame; one that is re-raised (bare ``raise``, end of ``finally``, unmatched
# ``except``) and escapes shows only as the frame's ``unwind`` (RERAISE is not RAISE, so
# no second ``raise`` step); a new exception raised in a handler is a ``raise`` step.
_NO_SPURIOUS_HANDLED = {
    "unmatched_except": (UNMATCHED_EXCEPT, "1", [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("raise", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),      # `except ValueError:` is tested, does not match
        ("unwind", "f", 4, 0, 0),
    ]),
    "bare_reraise": (BARE_RERAISE, "0", [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("raise", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),      # the except clause catches it
        ("line", "f", 5, 0, 0),      # the bare raise: a re-raise, no new raise step
        ("unwind", "f", 5, 0, 0),
    ]),
    "finally": (FINALLY, "0", [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("raise", "f", 3, 0, 0),
        ("line", "f", 5, 0, 0),      # the finally body runs; nothing catches
        ("unwind", "f", 5, 0, 0),    # re-raised at the end of the finally
    ]),
    "raise_in_except": (RAISE_IN_EXCEPT, "0", [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("raise", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),      # the except clause catches it
        ("line", "f", 5, 0, 0),
        ("raise", "f", 5, 0, 0),     # the new ValueError escapes the except clause
        ("unwind", "f", 5, 0, 0),
    ]),
    "generator_raises": (GENERATOR_RAISES, "", [
        ("call", "f", 5, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 7, 0, 0),
        ("line", "f", 8, 0, 0),
        ("call", "gen", 1, 1, 1),
        ("line", "gen", 2, 1, 1),
        ("yield", "gen", 2, 1, 1),
        ("line", "f", 9, 0, 0),
        ("line", "f", 8, 0, 0),
        ("resume", "gen", 2, 1, 1),
        ("line", "gen", 3, 1, 1),
        ("raise", "gen", 3, 1, 1),   # gen has no try: the KeyError just leaves it
        ("unwind", "gen", 3, 1, 1),
        ("raise", "f", 8, 0, 0),
        ("line", "f", 10, 0, 0),     # the except clause catches it
        ("line", "f", 11, 0, 0),
        ("line", "f", 12, 0, 0),
        ("return", "f", 12, 0, 0),
    ]),
}


@pytest.mark.parametrize("name", list(_NO_SPURIOUS_HANDLED))
def test_no_handled_or_reraise_from_compiler_generated_handlers(run, name):
    """No ``handled``/``reraise`` steps: neither the source's handlers (except clauses,
    bare ``raise``, ``finally``) nor the interpreter's internal cleanup handlers leave steps
    of their own (see the comment above for the semantics)."""
    code, input_text, expected_steps = _NO_SPURIOUS_HANDLED[name]
    result = run(code, input_text)
    assert steps_of(result) == expected_steps


def test_local_changes_before_an_escaping_exception_show_at_unwind(run):
    """Local changes made while an exception is on its way out (the ``finally`` body's
    ``x = -1``; the ``as e`` cleanup, which sets ``e = None`` and deletes it, before the
    new ValueError leaves the handler) show at the frame's next recorded step: its
    ``unwind``. ``e`` is bound from line 5 on, including at the ``raise`` step there."""
    result = run(FINALLY, "0")
    assert outcome(result) == ("exception", "ZeroDivisionError", "division by zero",
                               None, None, None)
    assert deltas(result) == [
        (0, "x", "0", "int"),
        (3, "<exception>", ZDE, "ZeroDivisionError"),
        (5, "x", "-1", "int"),
        (5, "<exception>", ZDE, "ZeroDivisionError"),
    ]
    result = run(RAISE_IN_EXCEPT, "0")
    assert outcome(result) == ("exception", "ValueError", "0", None, None, None)
    assert deltas(result) == [
        (0, "x", "0", "int"),
        (3, "<exception>", ZDE, "ZeroDivisionError"),
        (5, "e", ZDE, "ZeroDivisionError"),
        (6, "<exception>", "ValueError(0)", "ValueError"),
        (7, "e", None, None),
        (7, "<exception>", "ValueError(0)", "ValueError"),
    ]


# ---------------------------------------------------------------- end of recording
_ABANDONED = {
    "finally": (ABANDONED_IN_FINALLY, "cleanup\n", (5, 2, 1), [
        ("call", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("line", "f", 10, 0, 0),
        ("call", "gen", 1, 1, 1),
        ("line", "gen", 2, 1, 1),
        ("line", "gen", 3, 1, 1),
        ("yield", "gen", 3, 1, 1),
        ("line", "f", 11, 0, 0),
        ("return", "f", 11, 0, 0),
    ], [
        (2, "g", "<generator object gen>", "generator"),
        (6, "<yield>", "1", "int"),
        (7, "first", "1", "int"),
        (8, "<return>", "1", "int"),
    ]),
    "except": (ABANDONED_IN_EXCEPT, "closed\n", (4, 2, 1), [
        ("call", "f", 9, 0, 0),
        ("line", "f", 10, 0, 0),
        ("line", "f", 11, 0, 0),
        ("call", "gen", 1, 1, 1),
        ("line", "gen", 2, 1, 1),
        ("line", "gen", 3, 1, 1),
        ("yield", "gen", 3, 1, 1),
        ("return", "f", 11, 0, 0),
    ], [
        (2, "g", "<generator object gen>", "generator"),
        (6, "<yield>", "1", "int"),
        (7, "<return>", "1", "int"),
    ]),
}


@pytest.mark.parametrize("name", list(_ABANDONED))
def test_abandoned_generator_cleanup_after_entry_return_is_not_recorded(run, name):
    """``f`` leaves generator ``g`` paused at ``yield 1`` inside a try. When ``f``'s frame
    is cleared after its ``return``, ``g`` is finalised: GeneratorExit is thrown in at
    line 3 and the ``finally`` / ``except GeneratorExit`` body runs (its print reaches
    stdout). That clean-up happens after the entry activation (frame 0) ended, so the
    trace ends with ``f``'s ``return``: no throw/raise/line/unwind steps of ``gen`` (the
    old tracer recorded them at depth 0 after the return), and ``line_steps`` does not
    count the clean-up's lines."""
    code, stdout, expected_counts, expected_steps, expected_deltas = _ABANDONED[name]
    result = run(code, "", expected="1")
    assert outcome(result) == ("ok", None, None, "1", "int", True)
    assert result["stdout"] == stdout
    assert counts(result) == expected_counts
    assert steps_of(result) == expected_steps
    assert deltas(result) == expected_deltas


def test_entry_call_with_two_program_activations_is_fully_recorded(run):
    """Calling a class runs two program activations side by side at depth 0: ``__new__``
    (frame 0) and then ``__init__`` (frame 1, called by ``type.__call__`` after
    ``__new__`` returned). Both are part of the entry call ``f(1)``, so both must be
    recorded; the end of recording is the end of the call, not of whichever activation
    happened to get frame id 0. The states render the instance by its attributes (the
    class's ``__repr__`` never runs while recording); the output is its own repr, run
    untraced after the call."""
    result = run(CLASS_ENTRY, "1")
    assert outcome(result) == ("ok", None, None, "f()", "f", None)
    assert steps_of(result) == [
        ("call", "f.__new__", 2, 0, 0),
        ("line", "f.__new__", 3, 0, 0),
        ("return", "f.__new__", 3, 0, 0),
        ("call", "f.__init__", 5, 0, 1),
        ("line", "f.__init__", 6, 0, 1),
        ("return", "f.__init__", 6, 0, 1),
    ]
    assert deltas(result) == [
        (0, "cls", "<class '__main__.f'>", "type"),
        (0, "x", "1", "int"),
        (2, "<return>", "f()", "f"),
        (3, "self", "f()", "f"),
        (3, "x", "1", "int"),
        (5, "self", "f(x=1)", "f"),
        (5, "<return>", "None", "NoneType"),
    ]
    assert counts(result) == (2, 2, 0)


FINALIZERS = """\
class D:
    def __del__(self):
        print('freed')

def f():
    d = D()
    d = None; print('after')
    last = D()
    return 0
"""


def test_finalizers_run_when_plain_cpython_runs_them(run):
    """The tracer keeps no reference to a program's objects between steps (only immutable
    atomic values, which have no finalisers): ``d = None`` frees the first ``D`` on line
    7 itself, so its ``__del__`` runs there, traced as a call at depth 1, and prints
    before ``after`` as in plain CPython; ``d``'s new value shows at the next step. The
    second ``D`` is freed with ``f``'s frame after its ``return``: that finaliser runs
    while no program activation does, and leaves no steps."""
    result = run(FINALIZERS, "")
    assert outcome(result) == ("ok", None, None, "0", "int", None)
    assert result["stdout"] == "freed\nafter\nfreed\n"
    assert counts(result) == (5, 2, 1)
    assert steps_of(result) == [
        ("call", "f", 5, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 7, 0, 0),
        ("call", "D.__del__", 2, 1, 1),
        ("line", "D.__del__", 3, 1, 1),
        ("return", "D.__del__", 3, 1, 1),
        ("line", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("return", "f", 9, 0, 0),
    ]
    assert deltas(result) == [
        (2, "d", "D()", "D"),
        (3, "self", "D()", "D"),
        (5, "<return>", "None", "NoneType"),
        (6, "d", "None", "NoneType"),
        (7, "last", "D()", "D"),
        (8, "<return>", "0", "int"),
    ]

# ---------------------------------------------------------------- states and results
def test_del_unbinds_names(run):
    """``del x`` shows as (x, None, None) at the next step; re-binding ``x`` shows its new
    value; a deleted name is never reported again until it is re-bound."""
    result = run(DEL, "1")
    assert outcome(result) == ("ok", None, None, "4", "int", None)
    assert counts(result) == (5, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 5, 0, 0),
        ("line", "f", 6, 0, 0),
        ("return", "f", 6, 0, 0),
    ]
    assert deltas(result) == [
        (0, "x", "1", "int"),
        (2, "y", "2", "int"),
        (3, "x", None, None),
        (4, "x", "4", "int"),
        (5, "y", None, None),
        (6, "<return>", "4", "int"),
    ]


@pytest.mark.parametrize("input_text, expected, output, output_type, matches, note", [
    ("[1, 2]", "[1, 2]", "[1, 2]", "list", True, None),
    ("[1, 2]", "[2, 1]", "[1, 2]", "list", False, None),
    ("1", "(1.0)", "1", "int", True, None),              # different text, 1 == 1.0
    ("(1, 'a')", "(1.0, 'a')", "(1, 'a')", "tuple", True, None),
    ("1", None, "1", "int", None, None),                 # no expected: not compared
    ("1", "[1,", "1", "int", False,
     "expected output does not evaluate: SyntaxError: '[' was never closed (<expected>, line 1)"),
], ids=["equal", "unequal", "int_vs_float", "tuple_int_vs_float", "no_expected",
        "expected_unparsable"])
def test_output_and_matching(run, input_text, expected, output, output_type, matches, note):
    """``output`` is the repr of the return value, ``output_type`` its type name, and
    ``output_matches`` is ``value == eval(expected)`` in the guest (None if no expected;
    False with a note if the expected text does not evaluate)."""
    result = run(IDENTITY, input_text, expected=expected)
    assert outcome(result) == ("ok", None, None, output, output_type, matches)
    assert result["note"] == note


# ---------------------------------------------------------------- delta replay
REPLAY_PROGRAMS = {
    "for_if": (FOR_IF, "[1, 2]"),
    "while_break": (WHILE_ELSE, "5"),
    "while_no_break": (WHILE_ELSE, "1"),
    "factorial": (FACTORIAL, "3"),
    "fib": (FIB, "4"),
    "closure": (CLOSURE, "2"),
    "generator": (GENERATOR, "3"),
    "send": (SEND, "[1, 2]"),
    "yield_from": (YIELD_FROM, ""),
    "genexpr": (GENEXPR, "[1, 2]"),
    "comprehensions": (COMPREHENSIONS, "[1, 2]"),
    "multiline_comprehension": (MULTILINE_COMPREHENSION, "[1, 2]"),
    "lambda_key": (LAMBDA_KEY, "['ccc', 'a', 'bb']"),
    "class": (CLASS, "1, 2"),
    "caught_operation": (CAUGHT_OPERATION, "0"),
    "caught_raise_as": (CAUGHT_RAISE_AS, "-1"),
    "callee_raises": (CALLEE_RAISES, "-5"),
    "uncaught": (UNCAUGHT, "{'a': 1}"),
    "raise_in_except": (RAISE_IN_EXCEPT, "0"),
    "unmatched_except": (UNMATCHED_EXCEPT, "1"),
    "bare_reraise": (BARE_RERAISE, "0"),
    "finally": (FINALLY, "0"),
    "generator_raises": (GENERATOR_RAISES, ""),
    "abandoned_in_finally": (ABANDONED_IN_FINALLY, ""),
    "abandoned_in_except": (ABANDONED_IN_EXCEPT, ""),
    "args": (ARGS, "'l000*', "),
    "del": (DEL, "1"),
    "finalizers": (FINALIZERS, ""),
}


@pytest.mark.parametrize("name", list(REPLAY_PROGRAMS))
def test_delta_replay_matches_full_locals(run, name):
    """Replaying each frame's deltas in step order (event values in angle brackets
    skipped, ``None`` = unbind) reproduces the frame's complete locals at every step, as
    recorded by ``full_locals=True``; an unbind row only ever names a bound variable."""
    code, input_text = REPLAY_PROGRAMS[name]
    result = run(code, input_text, full_locals=True)
    steps = steps_of(result)
    snapshots = result["snapshots"]
    assert [index for index, _ in snapshots] == list(range(len(steps)))
    rows = defaultdict(list)
    for step, var, value, _type in states_of(result):
        rows[step].append((var, value))
    replayed: dict[int, dict[str, str]] = defaultdict(dict)
    for index, (_event, _func, _line, _depth, frame) in enumerate(steps):
        local = replayed[frame]
        for var, value in rows[index]:
            if var.startswith("<"):
                continue
            if value is None:
                assert var in local, (index, var)
                del local[var]
            else:
                local[var] = value
        assert local == snapshots[index][1], index


THROW_UNSTARTED = """\
def h(n):
    try:
        yield n
    finally:
        n = 0

def f():
    g = h(1)
    try:
        g.throw(ValueError('t'))
    except ValueError:
        return 'caught'
"""


def test_throw_into_a_generator_that_never_started(run):
    """No PY_START fires for a generator thrown into before it ran: its activation begins
    with a `call` step (its arguments) and then the `throw`; the exception is raised at
    its first line, before the `try`, so the `finally` does not run. (Found by fuzzing:
    such a frame used to start with `throw`, or, when the function had never run before,
    to have no steps at all.)"""
    result = run(THROW_UNSTARTED, "")
    assert outcome(result) == ("ok", None, None, "'caught'", "str", None)
    assert counts(result) == (5, 2, 1)
    assert steps_of(result) == [
        ("call", "f", 7, 0, 0),
        ("line", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("line", "f", 10, 0, 0),
        ("call", "h", 1, 1, 1),
        ("throw", "h", 1, 1, 1),
        ("raise", "h", 1, 1, 1),
        ("unwind", "h", 1, 1, 1),
        ("raise", "f", 10, 0, 0),
        ("line", "f", 11, 0, 0),
        ("line", "f", 12, 0, 0),
        ("return", "f", 12, 0, 0),
    ]
    assert deltas(result) == [
        (2, "g", "<generator object h>", "generator"),
        (4, "n", "1", "int"),
        (6, "<exception>", "ValueError('t')", "ValueError"),
        (7, "<exception>", "ValueError('t')", "ValueError"),
        (8, "<exception>", "ValueError('t')", "ValueError"),
        (11, "<return>", "'caught'", "str"),
    ]


# ---------------------------------------------------------------- the line after a loop
# CPython 3.14 makes no LINE event for the statement after a for loop when the loop ends
# by its iterator and the compiler copied that statement into a jump out of the loop body
# (a ``break``, ``continue`` or ``return`` path right before the loop's end): see
# tracer/sysmon_tracer.py, "lines CPython 3.14 loses". CPython 3.11-3.13 (settrace and
# sys.monitoring) report it, and so does the trace.
BREAK_THEN_RETURN = """\
def f(evs, n):
    up = []
    for e in evs:
        if e >= 5:
            up.append(e)
        if len(up) == n:
            break
    return up
"""

CONTINUE_THEN_RETURN = """\
def f(xs):
    total = 0
    for x in xs:
        total += x
        if x > 1:
            continue
    return total
"""

RETURN_IN_LOOP_THEN_RETURN = """\
def f(xs):
    for x in xs:
        if x < 0:
            return x
    return 0
"""

GENERATOR_BREAK_THEN_RETURN = """\
def g(xs):
    for x in xs:
        yield x
        if x > 5:
            break
    return len(xs)

def f(xs):
    return list(g(xs))
"""


@pytest.mark.parametrize("loops", [True, False])
def test_return_after_a_loop_with_an_untaken_break_is_a_line_step(sandbox, loops):
    """Issue 32's program: ``[1], 1`` runs lines 2 3 4 6 3 and then the ``return`` on
    line 8, whose line step (state before it: ``up`` still ``[]``) was missing. The
    same with the loop detection off (no JUMP events judging loops)."""
    result = job(sandbox, code=BREAK_THEN_RETURN, input="[1], 1", loops=loops)
    assert outcome(result) == ("ok", None, None, "[]", "list", None)
    assert counts(result) == (6, 1, 0)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0),
        ("line", "f", 6, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 8, 0, 0),
        ("return", "f", 8, 0, 0),
    ]
    assert deltas(result) == [
        (0, "evs", "[1]", "list"),
        (0, "n", "1", "int"),
        (2, "up", "[]", "list"),
        (3, "e", "1", "int"),
        (7, "<return>", "[]", "list"),
    ]


def test_return_after_a_loop_ending_in_continue_is_a_line_step(run):
    result = run(CONTINUE_THEN_RETURN, "[1, 2]")
    assert outcome(result) == ("ok", None, None, "3", "int", None)
    assert [line for event, _, line, _, _ in steps_of(result) if event == "line"] == [
        2, 3, 4, 5, 3, 4, 5, 6, 3, 7]
    assert steps_of(result)[-2:] == [("line", "f", 7, 0, 0), ("return", "f", 7, 0, 0)]
    assert deltas(result)[-2:] == [(7, "total", "3", "int"), (11, "<return>", "3", "int")]


def test_return_after_a_loop_with_an_untaken_return_is_a_line_step(run):
    result = run(RETURN_IN_LOOP_THEN_RETURN, "[3]")
    assert outcome(result) == ("ok", None, None, "0", "int", None)
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 3, 0, 0),
        ("line", "f", 2, 0, 0),
        ("line", "f", 5, 0, 0),
        ("return", "f", 5, 0, 0),
    ]


def test_return_after_a_loop_in_a_generator_is_a_line_step(run):
    result = run(GENERATOR_BREAK_THEN_RETURN, "[1, 2]")
    assert outcome(result) == ("ok", None, None, "[1, 2]", "list", None)
    assert steps_of(result) == [
        ("call", "f", 8, 0, 0),
        ("line", "f", 9, 0, 0),
        ("call", "g", 1, 1, 1),
        ("line", "g", 2, 1, 1),
        ("line", "g", 3, 1, 1),
        ("yield", "g", 3, 1, 1),
        ("resume", "g", 3, 1, 1),
        ("line", "g", 4, 1, 1),
        ("line", "g", 2, 1, 1),
        ("line", "g", 3, 1, 1),
        ("yield", "g", 3, 1, 1),
        ("resume", "g", 3, 1, 1),
        ("line", "g", 4, 1, 1),
        ("line", "g", 2, 1, 1),
        ("line", "g", 6, 1, 1),
        ("return", "g", 6, 1, 1),
        ("return", "f", 9, 0, 0),
    ]
    assert deltas(result)[-3:] == [(10, "<yield>", "2", "int"), (15, "<return>", "2", "int"),
                                   (16, "<return>", "[1, 2]", "list")]


# ---------------------------------------------------------------- the settrace view
# sys.settrace reports a line event at every backward jump that stays on its line (a
# comprehension's next item, a loop written on one line, a generator expression resumed
# for its next item); sys.monitoring's LINE does not. The trace keeps those beside the
# steps (``settrace_lines``: the step each follows, its line, depth, frame, function).
def settrace_view(result: dict) -> list[tuple]:
    """(function, line, depth) of each line step and of the view's own events after it."""
    own, funcs = result["settrace_lines"], result["funcs"]
    after: dict = {}
    for step, line, depth, func in zip(own["step"], own["line"], own["depth"], own["func"]):
        after.setdefault(step, []).append((funcs[func], line, depth))
    found = []
    for index, (event, func, line, depth, _) in enumerate(steps_of(result)):
        if event == "line":
            found.append((func, line, depth))
        found += after.get(index, [])
    return found


def test_settrace_view_repeats_lines_at_backward_jumps_to_themselves(run):
    """Three items: the comprehension (line 2) and the one-line loop (line 4) jump back
    to their line twice while running and once more to find the end: three events each
    after their line step; the generator expression jumps back after each of its
    resumes. The loop CPython 3.14 runs for ``any`` in ``f`` itself (gh-131738) is not
    settrace's in 3.12/3.13 (``any`` runs it in C) and is left out: the view is what
    sys.settrace reports on CPython 3.13 for this program, line for line."""
    result = run(ONE_LINE_LOOPS_AND_ANY, "[1, 2, 3]")
    assert outcome(result) == ("ok", None, None, "([1, 4, 9], 6, False)", "tuple", None)
    assert counts(result) == (6, 2, 1)
    g = "f.<locals>.<genexpr>"
    assert [(event, func, line) for event, func, line, _, _ in steps_of(result)] == [
        ("call", "f", 1), ("line", "f", 2), ("line", "f", 3), ("line", "f", 4),
        ("line", "f", 5), ("call", g, 5), ("line", g, 5), ("yield", g, 5), ("resume", g, 5),
        ("yield", g, 5), ("resume", g, 5), ("yield", g, 5), ("resume", g, 5),
        ("return", g, 5), ("line", "f", 6), ("return", "f", 6)]
    assert result["settrace_lines"] == {
        "step": [1, 1, 1, 3, 3, 3, 8, 10, 12], "line": [2, 2, 2, 4, 4, 4, 5, 5, 5],
        "depth": [0, 0, 0, 0, 0, 0, 1, 1, 1], "frame": [0, 0, 0, 0, 0, 0, 1, 1, 1],
        "func": [0, 0, 0, 0, 0, 0, 1, 1, 1]}
    assert settrace_view(result) == (
        [("f", 2, 0)] * 4 + [("f", 3, 0)] + [("f", 4, 0)] * 4 + [("f", 5, 0)]
        + [(g, 5, 1)] * 4 + [("f", 6, 0)])


def test_settrace_view_events_fall_between_the_callees_steps(run):
    """A comprehension calling a function: its jump back to line 5 comes after each
    callee's ``return`` step (steps 4 and 7), in ``f``'s frame at depth 0."""
    result = run(CALLS_IN_COMPREHENSION, "[1, 2]")
    assert outcome(result) == ("ok", None, None, "[2, 4]", "list", None)
    assert result["settrace_lines"] == {"step": [4, 7], "line": [5, 5], "depth": [0, 0],
                                        "frame": [0, 0], "func": [0, 0]}
    assert settrace_view(result) == [("f", 5, 0), ("double", 2, 1), ("f", 5, 0),
                                     ("double", 2, 1), ("f", 5, 0), ("f", 6, 0)]


def test_the_line_after_a_loop_and_plain_code_have_no_settrace_events_of_their_own(run):
    result = run(BREAK_THEN_RETURN, "[1], 1")
    assert result["settrace_lines"] == {"step": [], "line": [], "depth": [], "frame": [],
                                        "func": []}


def test_settrace_view_beyond_the_step_limit_is_not_recorded():
    """More events of its own than ``max_steps`` (a comprehension over 60 items, at most
    50 steps): the run keeps its status and steps, and says the view is not recorded."""
    with Sandbox(Limits(timeout_s=30.0, max_steps=50)) as small:
        result = job(small, code="def f(n):\n    return len([x for x in range(n)])\n",
                     input="60")
        assert outcome(result) == ("ok", None, None, "60", "int", None)
        assert "settrace_lines" not in result
        assert result["note"] == ("the settrace view has more than 50 line events of its "
                                  "own: it is not recorded")
        result = job(small, code="def f(n):\n    return len([x for x in range(n)])\n",
                     input="49")
        assert result["settrace_lines"]["step"] == [1] * 49
        assert result["note"] is None
