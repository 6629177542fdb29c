"""Proved non-termination (tracer/loops.py): a cyclic infinite loop ends as ``loops`` at an
exact backward jump (and, traced, an exact step); programs that only look cyclic never
do; a hostile program can neither produce nor suppress the verdict.

The counts are exact: the detection is deterministic (its threshold, strides and Brent's
powers of two count backward jumps, never time)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

MAX_STEPS = 30_000
MESSAGE = ("the program loops forever: the complete state of {func} at line {line} repeated "
           "(proved at backward jump {jump} of the run)")


@pytest.fixture(scope="module")
def box():
    """Runs end by their status, the step limit, well before the time limit."""
    with Sandbox(Limits(timeout_s=20.0, max_steps=MAX_STEPS)) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def short():
    with Sandbox(Limits(timeout_s=0.5, max_steps=MAX_STEPS)) as sandbox:
        yield sandbox


def run(box, code: str, mode: str, input: str = "[3, 1, 2]", **request) -> dict:
    return box.run({"code": code, "input": input, "mode": mode, **request}, "job").result


ROTATE = "def f(xs):\n    while True:\n        xs.append(xs.pop(0))\n"
MODULO = "def f(xs):\n    i = 0\n    while xs[i] != 0:\n        i = (i + 1) % len(xs)\n    return i\n"
PASS = "def f(xs):\n    while True:\n        pass\n"
INSTANCE = ("class Light:\n    def __init__(self):\n        self.color = 'red'\n\n"
            "    def step(self):\n"
            "        self.color = {'red': 'green', 'green': 'amber', 'amber': 'red'}[self.color]\n\n"
            "def f(xs):\n    light = Light()\n    while light.color != 'blue':\n        light.step()\n")
MUTUAL = "def f(xs):\n    a, b = 1, 2\n    while a != b:\n        a, b = b, a\n"
SCRIPT = "n = 7\nwhile n:\n    n = n * 3 % 10\n"

# (code, function, line, backward jump of the proof, steps traced by then)
CYCLIC = {
    "while loop rotating a list": (ROTATE, "f", 2, 1456, 2913),
    "index cycling modulo a length": (MODULO, "f", 3, 1480, 2962),
    "while True: pass": (PASS, "f", 2, 1076, 2153),
    "program instance whose attribute cycles": (INSTANCE, "f", 10, 2320, 11605),
    "two variables swapping": (MUTUAL, "f", 3, 1084, 2170),
}


@pytest.mark.parametrize("name", CYCLIC)
def test_cyclic_loops_end_as_loops_at_an_exact_jump(box, name):
    code, func, line, jump, steps = CYCLIC[name]
    message = MESSAGE.format(func=func, line=line, jump=jump)
    ran = run(box, code, "run")
    assert (ran["status"], ran["exception_type"], ran["exception_message"]) == (
        "loops", None, message)
    traced = run(box, code, "trace")
    assert (traced["status"], traced["exception_message"]) == ("loops", message)
    assert len(traced["steps"]["event"]) == steps  # the trace up to the proof is kept


def test_the_proof_comes_at_an_exact_instruction(box):
    traced = run(box, ROTATE, "trace")
    assert (traced["status"], traced["line_steps"], traced["instruction_steps"]) == (
        "loops", 2912, 14560)


def test_a_function_rebound_each_iteration_is_the_same_state(box):
    """A new function at the address of the one it replaces, with the same code: the
    program cannot tell them apart (no id, repr or hash of it is taken). When the
    allocator gives the address back depends on the instance's str hash seed: the jump of
    the proof is not fixed."""
    code = "def f(xs):\n    global len\n    while True:\n        len = lambda x: 0\n"
    traced = run(box, code, "trace")
    assert traced["status"] == "loops"
    assert traced["exception_message"].startswith(
        "the program loops forever: the complete state of f at line 3 repeated")


def test_a_one_line_loop_jumps_to_itself(box):
    result = run(box, "def f(xs):\n    while True: pass\n", "run")
    assert (result["status"], result["exception_message"]) == (
        "loops", MESSAGE.format(func="f", line=2, jump=1076))


def test_checks_at_the_recursion_limit_change_nothing(box):
    """A loop checked at the program's deepest frame: the detection's own calls must not
    raise the program's RecursionError (it skips the check instead)."""
    code = ("def g(n):\n    if n:\n        return g(n - 1)\n    i = 0\n"
            "    while i < 3000:\n        i += 1\n    return i\n\n"
            "def f(xs):\n    return g(995)\n")
    result = run(box, code, "run")
    assert (result["status"], result["output"]) == ("ok", "3000")


def test_a_script_looping_at_its_top_level(box):
    message = MESSAGE.format(func="<module>", line=2, jump=1040)
    for mode, steps in (("run", None), ("trace", 2082)):
        result = run(box, SCRIPT, mode, input="", shape="script")
        assert (result["status"], result["exception_message"]) == ("loops", message)
        if steps is not None:
            assert len(result["steps"]["event"]) == steps


def test_a_class_with_its_own_repr_is_judged_alike_traced_or_not(box):
    """Recording never runs a program's ``__repr__`` (tracer/bounded_repr.py), so a class
    that defines one is judged as any other: ``loops`` at the same backward jump, traced
    or not (it was never judged traced, when the tracer ran it)."""
    code = INSTANCE.replace("    def step(self):", "    def __repr__(self):\n"
                            "        return 'Light()'\n\n    def step(self):")
    for mode in ("trace", "run"):
        result = run(box, code, mode)
        assert (result["status"], result["exception_message"]) == (
            "loops", MESSAGE.format(func="f", line=13, jump=2464))


def test_a_class_made_by_type_with_a_repr_is_judged_alike_traced_or_not(box):
    """The same for a class ``type()`` makes (no class body for the static check to see)
    and one the input made (never checked statically): recording runs neither's
    ``__repr__`` or ``__str__``, so each is ``loops`` at the same jump traced or not."""
    for method in ("__repr__", "__str__"):
        code = ("def text(self):\n    return 'Light()'\n\n\n"
                "def step(self):\n    self.color = {'red': 'green', 'green': 'red'}[self.color]\n\n\n"
                f"Light = type('Light', (), {{'{method}': text, 'step': step}})\n\n\n"
                "def f(xs):\n    light = Light()\n    light.color = 'red'\n"
                "    while light.color != 'blue':\n        light.step()\n")
        for mode in ("trace", "run"):
            result = run(box, code, mode)
            assert (result["status"], result["exception_message"]) == (
                "loops", MESSAGE.format(func="f", line=15, jump=1216)), (method, mode)
    code = ("def text(self):\n    return 'Light()'\n\n\n"
            "def step(self):\n    self.color = {'red': 'green', 'green': 'red'}[self.color]\n\n\n"
            "def f(cls):\n    light = cls()\n    light.color = 'red'\n"
            "    while light.color != 'blue':\n        light.step()\n")
    made = "type('Light', (), {'__repr__': text, 'step': step})"
    for mode in ("trace", "run"):
        result = run(box, code, mode, input=made)
        assert (result["status"], result["exception_message"]) == (
            "loops", MESSAGE.format(func="f", line=12, jump=1196)), mode


def test_detection_off_runs_to_the_limits(box, short):
    traced = run(box, ROTATE, "trace", loops=False)
    assert (traced["status"], len(traced["steps"]["event"])) == ("step_limit", MAX_STEPS)
    ran = run(short, PASS, "run", loops=False)
    assert ran["status"] == "timeout"


def test_a_terminating_cycle_detector_is_never_run_early(box):
    """Fewer than 1,000 backward jumps: nothing is checked (the counts are the tracer's)."""
    traced = run(box, MODULO, "trace", input="[3, 1, 0, 2]")
    assert (traced["status"], traced["output"], len(traced["steps"]["event"])) == ("ok", "2", 9)


# Programs that only look cyclic: never ``loops``.
LOOKS_CYCLIC = {
    # id() reads an address: refused by name (it would end when the address matches)
    "id-dependent break": (
        "def f(xs):\n    i = 0\n    while True:\n        i = (i + 1) % 3\n"
        "        if id([]) % 4096 == i:\n            return i\n", "step_limit", None),
    # the for loop's iterator is on the value stack: never a decision point
    "for over itertools.cycle breaking on a counter": (
        "import itertools\n\ndef f(xs):\n    c = 0\n    for x in itertools.cycle(xs):\n"
        "        c += 1\n        if c == 5000:\n            return x\n", "ok", "1"),
    "while over itertools.count": (
        "def f(xs):\n    it = iter(range(10**9))\n    i = 0\n"
        "    while next(it) < 5000:\n        i = (i + 1) % 3\n    return i\n", "ok", "2"),
    # the visible state repeats, the list iterator's position (on the stack) does not
    "for over a long list swapping two variables": (
        "def f(xs):\n    a, b = 1, 2\n    for x in [0] * 5000:\n        a, b = b, a\n"
        "    return a\n", "ok", "1"),
    "a while loop inside a for loop": (
        "def f(xs):\n    for k in range(2):\n        i = 0\n        while i < 3000:\n"
        "            i = (i + 1) if k or i < 2999 else 3000\n    return i\n", "ok", "3000"),
    "random": (
        "import random\n\ndef f(xs):\n    i = 0\n    while random.random() < 0.999:\n"
        "        i = (i + 1) % 3\n    return i\n", "ok", "2"),
    "stdin": (
        "import sys\n\ndef f(xs):\n    i = 0\n    while sys.stdin.readline():\n"
        "        i = (i + 1) % 3\n    return i\n", "ok", "0"),
    "a growing state": ("def f(xs):\n    n = 0\n    while True:\n        n += 1\n",
                        "step_limit", None),
    "Collatz (long, terminating)": (
        "def f(xs):\n    n, c = 27, 0\n    while n != 1:\n"
        "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        c += 1\n    return c\n",
        "ok", "111"),
    "a cycle of 3 under a counter": (
        "def f(xs):\n    i, c = 0, 0\n    while c < 4000:\n        i = (i + 1) % 3\n"
        "        c += 1\n    return i\n", "ok", "1"),
    "generator-driven": (
        "def g():\n    i = 0\n    while True:\n        i = (i + 1) % 3\n        yield i\n\n"
        "def f(xs):\n    c = 0\n    for v in g():\n        c += 1\n        if c == 3000:\n"
        "            return v\n", "ok", "0"),
    "a callee's loop under a caller's for loop": (
        "def g(k):\n    i = 0\n    while i < 2:\n        i += 1\n    return i\n\n"
        "def f(xs):\n    t = 0\n    for k in range(2000):\n        t += g(k)\n    return t\n",
        "ok", "4000"),
    "a function attribute counting": (
        "def f(xs):\n    f.n = 0\n    while f.n < 3000:\n        f.n += 1\n    return f.n\n",
        "ok", "3000"),
    "a default argument counting": (
        "def f(xs, seen=[0]):\n    while seen[0] < 3000:\n        seen[0] += 1\n"
        "    return seen[0]\n", "ok", "3000"),
    "a class attribute counting": (
        "class C:\n    n = 0\n\n    def __repr__(self):\n        return 'C()'\n\n"
        "def f(xs):\n    while C.n < 3000:\n        C.n += 1\n    return C.n\n", "ok", "3000"),
    "a closure's cell counting": (
        "def f(xs):\n    n = 0\n    def bump():\n        nonlocal n\n        n += 1\n"
        "    while n < 3000:\n        bump()\n    return n\n", "ok", "3000"),
    "a set of instances hashed by address": (
        "class A:\n    pass\n\ndef f(xs):\n    i = 0\n    while True:\n"
        "        s = {A(), A()}\n        i = (i + 1) % 2\n", "step_limit", None),
    "a finalizer": (
        "class A:\n    def __repr__(self):\n        return 'A()'\n\n"
        "    def __del__(self):\n        pass\n\ndef f(xs):\n    while True:\n        a = A()\n",
        "step_limit", None),
    "defaults changed through __defaults__": (
        "def g(x=0):\n    return x\n\ndef f(xs):\n    while g() < 3000:\n"
        "        g.__defaults__ = (g() + 1,)\n    return g()\n", "ok", "3000"),
    "an address in a repr": (
        "def f(xs):\n    i = 0\n    while True:\n        i = (i + 1) % 3\n"
        "        if str(object())[-3] == 'z':\n            return i\n", "step_limit", None),
    # the same through the dunder methods: __hash__ refuses as hash, __repr__ makes text
    # (no hash is -1: the loop never ends, and no proof can know it)
    "an address through __hash__": (
        "class A:\n    pass\n\ndef f(xs):\n    i = 0\n    while True:\n        i = (i + 1) % 3\n"
        "        if A().__hash__() == -1:\n            return i\n", "step_limit", None),
    "an address through __repr__": (
        "class A:\n    pass\n\ndef f(xs):\n    i = 0\n    while True:\n        i = (i + 1) % 3\n"
        "        if A().__repr__()[-3] == 'z':\n            return i\n", "step_limit", None),
    "an address through __iter__": (
        "def f(xs):\n    i = 0\n    while True:\n        i = (i + 1) % 3\n"
        "        if str(xs.__iter__())[-3] == 'z':\n            return i\n", "step_limit", None),
}


@pytest.mark.parametrize("name", LOOKS_CYCLIC)
def test_programs_that_only_look_cyclic_are_not_loops(box, name):
    code, status, output = LOOKS_CYCLIC[name]
    traced = run(box, code, "trace")
    assert (traced["status"], traced["output"]) == (status, output)
    if status == "ok":
        assert run(box, code, "run")["status"] == "ok"


def test_str_hash_order_in_a_set_is_not_a_proof(box):
    """A set's order follows str hashes: refused (sets are not in the whitelist, and a
    program making sets is judged only when it cannot order objects by address)."""
    code = ("def f(xs):\n    s = {'a', 'b', 'c', 'd'}\n    i = 0\n    while True:\n"
            "        x = s.pop()\n        s.add(x)\n        i = (i + 1) % 2\n"
            "        if x == 'z':\n            return x\n")
    traced = run(box, code, "trace")
    assert traced["status"] == "step_limit"


# Programs that end, whose loop changes state the snapshot does not show while what it
# shows repeats (issue 32): whatever the snapshot cannot see must make the program
# ineligible, never count as equal. Each ends ``ok`` with its output, as with the
# detection off (the first ones were called ``loops`` before).
def _loop(setup: str, init: list, condition: str, bump: str) -> str:
    """A loop whose visible state (``i``, cycling) repeats while ``bump`` changes other
    state, until ``condition`` (which reads it) fails; returns ``i``."""
    return (setup + "def f(xs):\n" + "".join(f"    {line}\n" for line in init) +
            f"    i = 0\n    while {condition}:\n        {bump}\n        i = (i + 1) % 3\n"
            "    return i\n")


def _nan_counter(bits: int) -> str:
    """A binary counter kept in which NaN objects a list holds: bit j is set when slot j
    holds the constant of ``nan{j}()`` (the code's own NaN object), clear when it holds a
    NaN made at run time with the same bits; ``in`` tests identity first. The caller's
    state repeats at every round; it ends when the counter overflows."""
    lines = []
    for j in range(bits):
        lines += [f"def nan{j}():", "    return 1e999 - 1e999", "", ""]
    lines += [f"NANS = ({', '.join(f'nan{j}' for j in range(bits))})", "", "",
              "def increment(ys, x):", "    j = 0",
              f"    while j < {bits} and NANS[j]() in ys[j:j + 1]:",
              "        ys[j] = x - x", "        j += 1", f"    if j == {bits}:",
              "        return False", "    ys[j] = NANS[j]()", "    return True", "", "",
              "def f(xs):", "    x = 1e999", f"    ys = [x - x for _ in range({bits})]",
              "    while increment(ys, x):", "        pass", "    return 'ends'"]
    return "\n".join(lines) + "\n"


def _hash_counter(bits: int) -> str:
    """A binary counter kept in the hashes dicts stored for their keys: bit j is set when
    dict j's one key went in while its ``__hash__`` said 1, clear when 0; every key's own
    state is 0 between rounds. It ends when the counter overflows."""
    return ("class Key:\n    def __init__(self):\n        self.n = 0\n\n"
            "    def __hash__(self):\n        return self.n\n\n"
            "    def __eq__(self, other):\n        return False\n\n"
            "    def __repr__(self):\n        return 'Key()'\n\n\n"
            "def stored(k, d):\n    k.n = 1\n    found = k in d\n    k.n = 0\n    return found\n\n\n"
            "def store(k, d, old, new):\n    k.n = old\n    del d[k]\n    k.n = new\n"
            "    d[k] = 0\n    k.n = 0\n\n\n"
            f"def increment(ks, ds):\n    j = 0\n    while j < {bits} and stored(ks[j], ds[j]):\n"
            "        store(ks[j], ds[j], 1, 0)\n        j += 1\n"
            f"    if j == {bits}:\n        return False\n"
            "    store(ks[j], ds[j], 0, 1)\n    return True\n\n\n"
            f"def f(xs):\n    ks = [Key() for _ in range({bits})]\n    ds = [{{k: 0}} for k in ks]\n"
            "    while increment(ks, ds):\n        pass\n    return 'ends'\n")


ENDS = {
    # issue 32's two programs: a dict outside the snapshot; a list subclass's list
    "a function's __annotations__ grown to 5,000": (_loop(
        "def g():\n    pass\n\n\n", [], "len(g.__annotations__) < 5000",
        "g.__annotations__[len(g.__annotations__)] = i"), "2"),
    "a list subclass grown to 5,000": (_loop(
        "class Stack(list):\n    pass\n\n\n", ["s = Stack()"], "len(s) < 5000", "s.append(i)"),
        "2"),
    # instances of subclasses of built-in types: the base's part is state too
    "a dict subclass": (_loop("class Table(dict):\n    pass\n\n\n", ["t = Table()"],
                              "len(t) < 3000", "t[len(t)] = i"), "0"),
    "a bytearray subclass": (_loop("class Buffer(bytearray):\n    pass\n\n\n", ["b = Buffer()"],
                                   "len(b) < 3000", "b.append(i)"), "0"),
    "a list subclass with a repr and attributes": (_loop(
        "class Stack(list):\n    def __init__(self):\n        self.name = 'stack'\n\n"
        "    def __repr__(self):\n        return 'Stack()'\n\n\n", ["s = Stack()"],
        "len(s) < 3000", "s.append(i)"), "0"),
    "an int subclass made anew": (_loop("class Count(int):\n    pass\n\n\n", ["n = Count(0)"],
                                        "n < 3000", "n = Count(n + 1)"), "0"),
    "a float subclass made anew": (_loop("class Amount(float):\n    pass\n\n\n",
                                         ["x = Amount(0)"], "x < 3000", "x = Amount(x + 1)"),
                                   "0"),
    "a str subclass made anew": (_loop("class Text(str):\n    pass\n\n\n", ["s = Text()"],
                                       "len(s) < 3000", "s = Text(s + 'a')"), "0"),
    "an exception subclass's args": (_loop("class Fault(Exception):\n    pass\n\n\n",
                                           ["e = Fault(0)"], "e.args[0] < 3000",
                                           "e.args = (e.args[0] + 1,)"), "0"),
    "an exception's args": (_loop("", ["e = ValueError(0)"], "e.args[0] < 3000",
                                  "e.args = (e.args[0] + 1,)"), "0"),
    # builtins the snapshot shows as one name (the builtins module): objects of their own
    "__spec__'s attribute": (_loop("", ["__spec__.n = 0"], "__spec__.n < 3000",
                                   "__spec__.n += 1"), "0"),
    "__loader__'s attribute": (_loop("", ["__loader__.n = 0"], "__loader__.n < 3000",
                                     "__loader__.n += 1"), "0"),
    "exit's attribute": (_loop("", ["exit.n = 0"], "exit.n < 3000", "exit.n += 1"), "0"),
    "license's attribute": (_loop("", ["license.n = 0"], "license.n < 3000",
                                  "license.n += 1"), "0"),
    # objects whose state the snapshot read in part
    "a staticmethod's attribute": (_loop(
        "def g():\n    pass\n\n\nbox = staticmethod(g)\n\n\n", ["box.n = 0"], "box.n < 3000",
        "box.n += 1"), "0"),
    "a classmethod's attribute": (_loop(
        "def g(cls):\n    pass\n\n\nbox = classmethod(g)\n\n\n", ["box.n = 0"], "box.n < 3000",
        "box.n += 1"), "0"),
    "a property's doc": (_loop("", ["p = property(None, None, None, '')"],
                               "len(p.__doc__) < 3000",
                               "p = property(None, None, None, p.__doc__ + 'x')"), "0"),
    "a function's __module__ (the globals' __name__ when it was made)": (
        "__name__ = 0\n\n\ndef g():\n    pass\n\n\n__name__ = '__main__'\n\n\n"
        "def f(xs):\n    global __name__, g\n    i = 0\n    while True:\n"
        "        __name__ = g.__module__ + 1\n\n        def g():\n            pass\n\n"
        "        __name__ = '__main__'\n        if g.__module__ == 3000:\n            return i\n"
        "        i = (i + 1) % 3\n", "2"),
    "a class's __name__ (kept in the type)": (_loop(
        "def r(self):\n    return 'C()'\n\n\n", ["C = type('', (), {'__repr__': r})"],
        "len(C.__name__) < 3000", "C = type(C.__name__ + 'x', (), {'__repr__': r})"), "0"),
    # hashes dicts keep for their keys; identities of NaN constants
    "a dict's stored hashes of keys with a __hash__": (_hash_counter(11), "'ends'"),
    "which NaN objects a list holds": (_nan_counter(11), "'ends'"),
    # a class body's namespace made by a metaclass's __prepare__ (a dict subclass)
    "a class body's namespace from __prepare__": (
        "class Namespace(dict):\n    def __init__(self):\n        self.n = 0\n\n"
        "    def __setitem__(self, key, value):\n        self.n += 1\n        if self.n > 3000:\n"
        "            raise KeyError(key)\n        dict.__setitem__(self, key, value)\n\n\n"
        "class Meta(type):\n    @classmethod\n    def __prepare__(cls, name, bases):\n"
        "        return Namespace()\n\n\n"
        "def f(xs):\n    try:\n        class C(metaclass=Meta):\n            i = 0\n"
        "            while True:\n                i = (i + 1) % 3\n    except KeyError:\n"
        "        return 'ends'\n", "'ends'"),
    # the exception a caller handles, which a bare raise raises again
    "the exception a caller handles (a bare raise)": (
        "def inner():\n    i = 0\n    while True:\n        try:\n            raise\n"
        "        except ValueError as e:\n            e.args = (e.args[0] + 1,)\n"
        "            if e.args[0] > 3000:\n                return i\n        i = (i + 1) % 3\n\n\n"
        "def f(xs):\n    try:\n        raise ValueError(0)\n    except ValueError:\n"
        "        return inner()\n", "0"),
    # state never read, which refuses the program (statically or in the snapshot)
    "another module's global": (_loop("import string\n\n\n", ["string.n = 0"],
                                      "string.n < 3000", "string.n += 1"), "0"),
    "the recursion limit": (_loop("import sys\n\n\n", ["sys.setrecursionlimit(1000)"],
                                  "sys.getrecursionlimit() < 4000",
                                  "sys.setrecursionlimit(sys.getrecursionlimit() + 1)"), "0"),
    "random's state (2,118 rounds)": (_loop("import random\n\n\n", ["random.seed(5)"],
                                            "random.random() < 0.9995", "pass"), "0"),
    "a StringIO's position": (_loop("import io\n\n\n", ["s = io.StringIO()"],
                                    "s.tell() < 3000", "s.write('x')"), "0"),
    "a weak reference's referent": (_loop(
        "import weakref\n\n\nclass Box:\n    pass\n\n\nKEEP = Box()\nKEEP.n = 0\n\n\n",
        ["r = weakref.ref(KEEP)"], "r().n < 3000", "r().n += 1"), "0"),
    "a list iterator's position": (_loop("", ["it = iter([0] * 3000)"],
                                         "next(it, None) is not None", "pass"), "0"),
    "a range iterator's position": (_loop("", ["it = iter(range(3000))"],
                                          "next(it, -1) >= 0", "pass"), "0"),
    "itertools.count": (_loop("import itertools\n\n\n", ["c = itertools.count()"],
                              "next(c) < 3000", "pass"), "0"),
    "itertools.accumulate": (_loop("import itertools\n\n\n",
                                   ["a = itertools.accumulate(itertools.repeat(1))"],
                                   "next(a) <= 3000", "pass"), "0"),
    "itertools.cycle": (_loop("import itertools\n\n\n",
                              ["c = itertools.cycle([0, 1])", "n = 0"], "n < 3000",
                              "n += next(c) * 2"), "0"),
    "a generator's state": (_loop(
        "def gen():\n    n = 0\n    while True:\n        yield n\n        n += 1\n\n\n",
        ["g = gen()"], "next(g) < 3000", "pass"), "0"),
    "a coroutine's state": (
        "class Tick:\n    def __await__(self):\n        yield\n\n\n"
        "async def count():\n    n = 0\n    while n < 2000:\n        await Tick()\n"
        "        n += 1\n    return n\n\n\n"
        "def f(xs):\n    c = count()\n    i = 0\n    try:\n        while True:\n"
        "            c.send(None)\n            i = (i + 1) % 3\n"
        "    except StopIteration as stop:\n        return stop.value, i\n", "(2000, 2)"),
    "an instance with __slots__": (_loop("class Point:\n    __slots__ = ('n',)\n\n\n",
                                         ["p = Point()", "p.n = 0"], "p.n < 3000",
                                         "p.n += 1"), "0"),
    # state the snapshot shows (it differs each round): never equal
    "a keyword-only default": (_loop(
        "def g(*, box=[0]):\n    box[0] += 1\n    return box[0]\n\n\n", [], "g() < 3000",
        "pass"), "2"),
    "a closure made by a factory": (_loop(
        "def counter():\n    n = 0\n\n    def bump():\n        nonlocal n\n        n += 1\n"
        "        return n\n\n    return bump\n\n\n", ["bump = counter()"], "bump() < 3000",
        "pass"), "2"),
}
# traced too (the others trace slowly: the tracer renders a growing list subclass or
# counts every call of a Key's __hash__, up to the step limit)
TRACED = ("a function's __annotations__ grown to 5,000", "__spec__'s attribute",
          "exit's attribute", "a property's doc", "a function's __module__ (the globals' "
          "__name__ when it was made)", "a class body's namespace from __prepare__",
          "a staticmethod's attribute", "an int subclass made anew",
          "the exception a caller handles (a bare raise)")


@pytest.mark.parametrize("name", ENDS)
def test_programs_that_end_are_never_loops(box, name):
    code, output = ENDS[name]
    for mode in ("run", "trace") if name in TRACED else ("run",):
        result = run(box, code, mode)
        assert (result["status"], result["exception_message"], result["output"]) == (
            "ok", None, output)


# Adversarial: a hostile program cannot produce or suppress the verdict.
def test_a_handler_that_could_catch_the_stop_is_never_judged(box, short):
    """Only a handler of BaseException (or a bare except, a finally) could catch the
    tracer's stop: such a program may catch a MemoryError too, and is never judged."""
    code = ("def f(xs):\n    try:\n        while True:\n            pass\n"
            "    except BaseException:\n        return 'escaped'\n")
    traced = run(box, code, "trace")
    assert (traced["status"], traced["output"]) == ("step_limit", None)
    assert run(short, code, "run")["status"] == "timeout"


# Whether an allocation fails depends on the allocator's and the collector's state, which
# no snapshot shows: a program able to catch a MemoryError is never judged.
HANDLED = "def f(xs):\n    i = 0\n    while True:\n        try:\n            i = (i + 1) % 3\n{handler}"
JUMP_HANDLED = 1480  # the backward jump that proves HANDLED's loop with a judged handler
CATCHES_MEMORY_ERROR = {
    "except Exception": "        except Exception:\n            pass\n",
    "bare except": "        except:\n            pass\n",
    "finally": "        finally:\n            pass\n",
    "a tuple naming MemoryError": "        except (ValueError, MemoryError):\n            pass\n",
    "a class in a variable": "        except xs.__class__:\n            pass\n",
}


@pytest.mark.parametrize("name", CATCHES_MEMORY_ERROR)
def test_a_handler_that_may_catch_memory_error_is_never_judged(box, name):
    code = HANDLED.format(handler=CATCHES_MEMORY_ERROR[name])
    assert run(box, code, "trace")["status"] == "step_limit"


def test_a_loop_ended_by_the_collector_freeing_memory_is_not_loops(box):
    """Its visible state repeats while 300 MiB of cyclic garbage keep each allocation
    failing; it ends when the collector frees them (traced: after ~3,800 rounds)."""
    code = ("def f(n):\n    x = [bytearray(n * 2**20)]\n    x.append(x)\n    del x\n"
            "    while True:\n        try:\n            b = bytearray(n * 2**20)\n"
            "            return 'done'\n        except MemoryError:\n            pass\n")
    traced = run(box, code, "trace", input="300")
    assert (traced["status"], traced["output"]) == ("ok", "'done'")


def test_handlers_of_other_exceptions_are_judged_unless_rebound(box):
    for handler, jump in (("        except ValueError:\n            pass\n", JUMP_HANDLED),
                          ("        except (ValueError, KeyError) as e:\n            pass\n",
                           JUMP_HANDLED)):
        result = run(box, HANDLED.format(handler=handler), "run")
        assert (result["status"], result["exception_message"]) == (
            "loops", MESSAGE.format(func="f", line=3, jump=jump))
    shadowed = "ValueError = BaseException\n\n" + HANDLED.format(
        handler="        except ValueError:\n            pass\n")
    assert run(box, shadowed, "trace")["status"] == "step_limit"
    walrus = HANDLED.format(handler="        except ValueError:\n            pass\n")
    bound = run(box, walrus, "trace", input="(ValueError := BaseException)")
    assert bound["status"] == "step_limit"


def test_a_lying_eq_neither_proves_nor_hides_a_loop(box):
    liar = ("class Liar:\n    def __init__(self):\n        self.n = 0\n\n"
            "    def __repr__(self):\n        return 'Liar()'\n\n"
            "    def __eq__(self, other):\n        return {answer}\n\n    __hash__ = None\n\n")
    grows = liar.format(answer="True") + (
        "def f(xs):\n    a, b = Liar(), Liar()\n    while a == b:\n        a.n += 1\n"
        "        if a.n == 3000:\n            return a.n\n")
    assert run(box, grows, "run")["status"] == "ok"
    cycles = liar.format(answer="False") + (
        "def f(xs):\n    a, b = Liar(), Liar()\n    while a != b:\n        a.n = (a.n + 1) % 4\n")
    result = run(box, cycles, "run")
    assert (result["status"], result["exception_message"]) == (
        "loops", MESSAGE.format(func="f", line=15, jump=1272))


def test_sys_monitoring_and_builtins_cannot_switch_it(box):
    """The program's sys.monitoring refuses every use (the JUMP events stay on: not
    tampered); builtins changed by the program refuse the verdict (never a false one)."""
    tamper = ("import sys\n\ndef f(xs):\n    for call in (lambda: sys.monitoring.free_tool_id(3),\n"
              "                 lambda: sys.monitoring.set_events(3, 0),\n"
              "                 lambda: sys.monitoring.set_local_events(3, f.__code__, 0)):\n"
              "        try:\n            call()\n        except RuntimeError:\n            pass\n"
              "    n = 0\n    while n < 3000:\n        n += 1\n    return n\n")
    result = run(box, tamper, "trace")
    assert (result["status"], result["output"]) == ("ok", "3000")
    assert "sys.monitoring" in result["note"]
    hidden = ("import builtins\n\ndef f(xs):\n    builtins.counter = 0\n    i = 0\n"
              "    while builtins.counter < 3000:\n        builtins.counter += 1\n"
              "        i = (i + 1) % 3\n    return i\n")
    assert (run(box, hidden, "run")["status"], run(box, hidden, "trace")["output"]) == ("ok", "0")
    rebound = ("def f(xs):\n    i = 0\n    while len(xs) < 3000:\n        i = (i + 1) % 3\n"
               "        xs.append(i) if i == 5 else None\n        len = None\n")
    assert run(box, rebound, "trace")["status"] == "exception"  # UnboundLocalError: ordinary


def test_changing_dis_hides_nothing_from_the_static_check(box):
    """The guest reads bytecode with tables it took from dis when it was built: a
    program emptying dis's disassembler still has its import (and its random) seen."""
    code = ("import dis, random\n\ndis.get_instructions = lambda *a, **k: iter(())\n"
            "dis._parse_exception_table = lambda code: []\ndis.opname[:] = ['NOP'] * 256\n\n"
            "def f(xs):\n    i = 0\n    while random.random() < 2:\n        i = (i + 1) % 3\n")
    traced = run(box, code, "trace")
    assert traced["status"] == "step_limit"


def test_the_next_job_after_a_proof_is_exact(box):
    assert run(box, PASS, "run")["status"] == "loops"
    result = box.run({"code": "def f(n):\n    return n + 1\n", "input": "1"}, "batch").result
    assert (result["status"], result["output"]) == ("ok", "2")


def _identity_counter(bits: int) -> str:
    """A binary counter kept in the identities of equal ints: each variable holds the
    code's constant or an equal int computed at run time (``-(-v)``), which only ``is``
    tells apart; it returns after 2**bits rounds of a loop whose visible state (by value)
    repeats every round."""
    lines = ["def f(xs):"] + [f"    v{k} = {1000001 + k}" for k in range(bits)]
    lines += ["    i = 0", "    while True:", "        i = (i + 1) % 3", "        if i == 0:"]
    indent = "            "
    for k in range(bits):
        lines += [f"{indent}if v{k} is {1000001 + k}:", f"{indent}    v{k} = -(-v{k})",
                  f"{indent}else:", f"{indent}    v{k} = {1000001 + k}"]
        indent += "    "
    return "\n".join(lines + [f"{indent}return 'ends'"]) + "\n"


def test_identity_tests_of_values_are_never_judged(box):
    """A snapshot shows an int by value, so ``x is CONSTANT`` is state it does not see:
    such a program is never judged (it ends); ``is None`` is judged."""
    result = run(box, _identity_counter(10), "run")
    assert (result["status"], result["output"]) == ("ok", "'ends'")
    none_test = "def f(xs):\n    i = 0\n    while i is not None:\n        i = (i + 1) % 3\n"
    proved = run(box, none_test, "run")
    assert proved["status"] == "loops"
    assert proved["exception_message"].startswith(
        "the program loops forever: the complete state of f at line 3 repeated")


# Property: a program that ends is never called ``loops``. Generated programs: a loop (in
# a function, a helper it calls, one called while f handles an exception, or a method)
# changes one piece of state of a kind drawn below while what else it changes cycles (or
# nothing else changes), and ends after at most a few thousand rounds; with the detection
# on each ends ``ok`` with the same output as with it off.
@dataclass(frozen=True)
class _State:
    """A piece of state a loop changes: module-level ``setup``, lines run before the loop
    (``init``), an int expression reading it (``read``) and a statement adding 1 to it
    (``bump``; ``pass`` where reading it moves it on); ``handled``: it is the exception
    a caller handles, so the loop runs under a handler."""
    setup: str
    init: tuple
    read: str
    bump: str
    handled: bool = False


def _class(name: str, base: str, slots: bool, repr_: bool, attribute: bool) -> str:
    body = ["    __slots__ = ()"] if slots else []
    if attribute and not slots:
        body += ["    def __init__(self, *args):", "        self.name = 'box'"]
    if repr_:
        body += ["    def __repr__(self):", f"        return '{name}()'"]
    return f"class {name}({base}):\n" + "\n".join(body or ["    pass"]) + "\n\n\n"


# containers of a built-in base: (base, setup of an import or "", how it grows)
_GROWING = {"list": ("", "s.append(0)"), "dict": ("", "s[len(s)] = 0"),
            "bytearray": ("", "s.append(0)"), "set": ("", "s.add(len(s))"),
            "collections.deque": ("import collections\n\n\n", "s.append(0)"),
            "collections.OrderedDict": ("import collections\n\n\n", "s[len(s)] = 0"),
            "array.array": ("import array\n\n\n", "s.append(0)")}
# immutable values of a built-in base, made anew: (base, start, next, read)
_REMADE = {"int": ("0", "S(s + 1)", "s"), "float": ("0.0", "S(s + 1)", "int(s)"),
           "str": ("''", "S(s + 'a')", "len(s)"), "tuple": ("()", "S(s + (0,))", "len(s)"),
           "bytes": ("b''", "S(s + b'a')", "len(s)"), "complex": ("0j", "S(s + 1)", "int(s.real)")}
# objects of the builtins module with attributes of their own
_BUILTIN_OBJECTS = ("__spec__", "__loader__", "exit", "quit", "license", "credits",
                    "copyright")
_FIXED_STATES = (
    _State("def g():\n    pass\n\n\n", (), "len(g.__annotations__)",
           "g.__annotations__[len(g.__annotations__)] = 0"),
    _State("class C:\n    x: int = 0\n\n\n", (), "len(C.__annotations__)",
           "C.__annotations__[len(C.__annotations__)] = 0"),
    _State("def g():\n    pass\n\n\n", ("g.n = 0",), "g.n", "g.n += 1"),
    _State("class C:\n    n = 0\n\n\n", (), "C.n", "C.n += 1"),
    _State("class C:\n    def __init__(self):\n        self.n = 0\n\n\n", ("o = C()",), "o.n",
           "o.n += 1"),
    _State("class C:\n    __slots__ = ('n',)\n\n\n", ("o = C()", "o.n = 0"), "o.n", "o.n += 1"),
    _State("def g(box=[0]):\n    return box\n\n\n", (), "g()[0]", "g()[0] += 1"),
    _State("def g(*, box=[0]):\n    return box\n\n\n", (), "g()[0]", "g()[0] += 1"),
    _State("def counter():\n    n = 0\n\n    def bump():\n        nonlocal n\n        n += 1\n"
           "\n    def get():\n        return n\n\n    return bump, get\n\n\n",
           ("bump, get = counter()",), "get()", "bump()"),
    _State("def g():\n    pass\n\n\nbox = staticmethod(g)\n\n\n", ("box.n = 0",), "box.n",
           "box.n += 1"),
    _State("def g(cls):\n    pass\n\n\nbox = classmethod(g)\n\n\n", ("box.n = 0",), "box.n",
           "box.n += 1"),
    _State("", ("p = property(None, None, None, '')",), "len(p.__doc__)",
           "p = property(None, None, None, p.__doc__ + 'x')"),
    _State("", ("e = ValueError(0)",), "e.args[0]", "e.args = (e.args[0] + 1,)"),
    _State("class Fault(Exception):\n    pass\n\n\n", ("e = Fault()", "e.n = 0"), "e.n",
           "e.n += 1"),
    _State("import string\n\n\n", ("string.n = 0",), "string.n", "string.n += 1"),
    _State("import sys\n\n\n", ("sys.setrecursionlimit(1000)",),
           "sys.getrecursionlimit() - 1000",
           "sys.setrecursionlimit(sys.getrecursionlimit() + 1)"),
    _State("import io\n\n\n", ("s = io.StringIO()",), "s.tell()", "s.write('x')"),
    _State("import weakref\n\n\nclass Box:\n    pass\n\n\nKEEP = Box()\n\n\n",
           ("KEEP.n = 0", "r = weakref.ref(KEEP)"), "r().n", "r().n += 1"),
    _State("", ("it = iter(list(range(10000)))",), "next(it)", "pass"),
    _State("", ("it = iter(range(10000))",), "next(it)", "pass"),
    _State("import itertools\n\n\n", ("it = itertools.count()",), "next(it)", "pass"),
    _State("import itertools\n\n\n", ("it = itertools.accumulate(itertools.repeat(1))",),
           "next(it) - 1", "pass"),
    _State("import itertools\n\n\n", ("it = itertools.cycle(range(10000))",), "next(it)",
           "pass"),
    _State("def gen():\n    n = 0\n    while True:\n        yield n\n        n += 1\n\n\n",
           ("it = gen()",), "next(it)", "pass"),
    _State("def gen():\n    n = 0\n    while True:\n        n += yield n\n\n\n",
           ("it = gen()", "next(it)"), "it.send(1)", "pass"),
    _State("def count():\n    try:\n        raise\n    except ValueError as e:\n"
           "        return e.args[0]\n\n\ndef bump():\n    try:\n        raise\n"
           "    except ValueError as e:\n        e.args = (e.args[0] + 1,)\n\n\n", (),
           "count()", "bump()", handled=True),
)


@st.composite
def _states(draw) -> _State:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        base = draw(st.sampled_from(sorted(_GROWING)))
        setup, grow = _GROWING[base]
        cls = _class("S", base, draw(st.booleans()), draw(st.booleans()), draw(st.booleans()))
        start = "'i'" if base == "array.array" else ""
        return _State(setup + cls, (f"s = S({start})",), "len(s)", grow)
    if kind == 1:
        base = draw(st.sampled_from(sorted(_REMADE)))
        start, remade, read = _REMADE[base]
        cls = _class("S", base, draw(st.booleans()), draw(st.booleans()), False)
        return _State(cls, (f"s = S({start})",), read, f"s = {remade}")
    if kind == 2:
        name = draw(st.sampled_from(_BUILTIN_OBJECTS))
        return _State("", (f"{name}.n = 0",), f"{name}.n", f"{name}.n += 1")
    return draw(st.sampled_from(_FIXED_STATES))


# what else the loop changes, cycling: (lines before the loop, a statement, the result)
_CYCLES = (((), "pass", "'done'"), (("i = 0",), "i = (i + 1) % 3", "i"),
           (("a, b = 1, 2",), "a, b = b, a", "(a, b)"),
           (("ys = [0, 1, 2]",), "ys.append(ys.pop(0))", "ys"),
           (("d = {'on': True}",), "d['on'] = not d['on']", "d"),
           (("t = (1, 'x', 2.5)",), "t = t[1:] + t[:1]", "t"))


@st.composite
def _ending_programs(draw) -> str:
    state = draw(_states())
    before, step, result = draw(st.sampled_from(_CYCLES))
    every = draw(st.sampled_from([1, 1, 2, 3]))
    bound = draw(st.integers(1100, 3000)) // every
    form = draw(st.sampled_from(["while", "while True", "every", "for", "nested"]))
    bump = [state.bump]
    if form == "every" and every > 1:
        bump = ["c = (c + 1) % " + str(every), "if c == 0:", "    " + state.bump]
        before = before + ("c = 0",)
    if form in ("while", "every"):
        head, body = f"while {state.read} < {bound}:", bump + [step]
    elif form == "while True":
        head, body = "while True:", [step] + bump + [f"if {state.read} >= {bound}:", "    break"]
    elif form == "for":  # the loop's iterator is on the value stack
        head, body = "for _ in range(10 ** 6):", [step] + bump + [
            f"if {state.read} >= {bound}:", "    break"]
    else:  # an inner loop of a few rounds under the loop that changes the state
        head, body = f"while {state.read} < {bound}:", [
            "j = 0", "while j < 2:", "    j += 1", "    " + step] + bump
    loop = [*state.init, *before, head] + ["    " + line for line in body] + [
        f"return {result}"]
    where = "handler" if state.handled else draw(
        st.sampled_from(["f", "helper", "method", "handler"]))
    if where == "handler":  # a helper called while f handles an exception
        return (state.setup + "def run(n):\n" + "".join(f"    {line}\n" for line in loop) +
                "\n\ndef f(xs):\n    try:\n        raise ValueError(0)\n"
                "    except ValueError:\n        return run(len(xs))\n")
    if where == "f":
        return state.setup + "def f(xs):\n" + "".join(f"    {line}\n" for line in loop)
    if where == "helper":
        return (state.setup + "def run(n):\n" + "".join(f"    {line}\n" for line in loop) +
                "\n\ndef f(xs):\n    return run(len(xs))\n")
    return (state.setup + "class Runner:\n    def __repr__(self):\n        return 'Runner()'\n\n"
            "    def go(self):\n" + "".join(f"        {line}\n" for line in loop) +
            "\n\ndef f(xs):\n    return Runner().go()\n")


@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_ending_programs())
@example(ENDS["a function's __annotations__ grown to 5,000"][0])
@example(ENDS["a list subclass grown to 5,000"][0])
@example(_hash_counter(11))
@example(_nan_counter(11))
def test_a_program_that_ends_is_never_loops(box, code):
    off = run(box, code, "run", loops=False)
    assert off["status"] == "ok", (code, off)  # the programs drawn end
    on = run(box, code, "run")
    assert (on["status"], on["exception_message"], on["output"]) == (
        "ok", None, off["output"]), code
