"""Proved non-termination (tracer/loops.py): a cyclic infinite loop ends as ``loops`` at an
exact backward jump (and, traced, an exact step); programs that only look cyclic never
do; a hostile program can neither produce nor suppress the verdict.

The counts are exact: the detection is deterministic (its threshold, strides and Brent's
powers of two count backward jumps, never time)."""

from __future__ import annotations

import pytest

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
