"""A failing unittest test stays failing whatever the program does to unittest.

The program runs in the interpreter that then runs its test (job.py, test shapes), so it
could rebind what unittest decides a verdict with. Each program here tries one way
(before or while its test runs) to turn the failing test ``assertEqual(f(2), 5)`` into a
pass: the job is ``invalid`` with a message naming what changed, in both isolation
modes, and the next job is exact. unittest.py's own checks are in tracer/unittest_driver.py."""

from __future__ import annotations

import pytest

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

pytestmark = pytest.mark.slow  # a sandbox per module: left out by make test-fast

TEST = "import unittest\nclass T(unittest.TestCase):\n    def test_x(self):\n        self.assertEqual(f(2), 5)\n"
# name -> (program, test code)
PROGRAMS = {
 "plain_fail": ("def f(x):\n    return x * 2\n", TEST),
 "plain_pass": ("def f(x):\n    return x + 3\n", TEST),
 "debug": ("import unittest\nunittest.TestCase.debug = lambda self: None\ndef f(x):\n    return x * 2\n", TEST),
 "assert_equal": ("import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\ndef f(x):\n    return x * 2\n", TEST),
 "module_attr": ("import unittest\nclass Fake(unittest.TestCase):\n    def assertEqual(self, *a):\n        pass\nunittest.TestCase = Fake\ndef f(x):\n    return x * 2\n", TEST),
 "sys_modules": ("import sys, types, unittest\nfake = types.ModuleType('unittest')\nclass Fake(unittest.TestCase):\n    def assertEqual(self, *a):\n        pass\nfake.TestCase = Fake\nsys.modules['unittest'] = fake\ndef f(x):\n    return x * 2\n", TEST),
 "mixin": ("class Base:\n    def assertEqual(self, *a):\n        pass\ndef f(x):\n    return x * 2\n", "import unittest\nclass T(Base, unittest.TestCase):\n    def test_x(self):\n        self.assertEqual(f(2), 5)\n"),
 "shadow_name": ("import unittest as _u, types\nclass Fake(_u.TestCase):\n    def assertEqual(self, *a):\n        pass\nunittest = types.SimpleNamespace(TestCase=Fake)\ndef f(x):\n    return x * 2\n", "class T(unittest.TestCase):\n    def test_x(self):\n        self.assertEqual(f(2), 5)\n"),
 "builtins": ("import builtins\nbuiltins.isinstance = lambda *a: True\ndef f(x):\n    return x * 2\n", TEST),
 "during": ("import unittest\ndef f(x):\n    unittest.TestCase.assertEqual = lambda *a, **k: None\n    return x * 2\n", "import unittest\nclass T(unittest.TestCase):\n    def test_x(self):\n        v = f(2)\n        self.assertEqual(v, 5)\n"),
 "raises_ctx": ("import unittest.case\nunittest.case._AssertRaisesContext.__exit__ = lambda *a: True\ndef f(x):\n    return x\n", "import unittest\nclass T(unittest.TestCase):\n    def test_x(self):\n        with self.assertRaises(ValueError):\n            f(2)\n"),
 "metaclass": ("class Meta(type):\n    def __call__(cls, *a, **k):\n        o = super().__call__(*a, **k)\n        o.assertEqual = lambda *a: None\n        return o\ndef f(x):\n    return x * 2\n", "import unittest\nclass T(unittest.TestCase, metaclass=Meta):\n    def test_x(self):\n        self.assertEqual(f(2), 5)\n"),
 "own_maxdiff": ("def f(x):\n    return x + 3\n", "import unittest\nclass B(unittest.TestCase):\n    maxDiff = None\nclass T(B):\n    def test_x(self):\n        self.assertEqual(f(2), 5)\n"),
 "failure_exc": ("import unittest\nunittest.TestCase.failureException = type('X', (BaseException,), {})\ndef f(x):\n    return x * 2\n", TEST),
}


def verdict(what: str, when: str = "before") -> tuple:
    return ("invalid", None, f"the program changed {what} {when} its test ran: the test's "
                             f"verdict would not be unittest's")


def made_from(base: str) -> tuple:
    return ("invalid", None, f"test class 'T' is made from {base}, which the test code did "
                             f"not make: the test's verdict would not be unittest's")


WANTED = {
    "plain_fail": ("exception", "AssertionError", "4 != 5"),
    "plain_pass": ("ok", None, None),
    "own_maxdiff": ("ok", None, None),  # the test code's own base class is its own
    "debug": verdict("unittest.case.TestCase"),
    "assert_equal": verdict("unittest.case.TestCase"),
    "failure_exc": verdict("unittest.case.TestCase"),
    "module_attr": verdict("unittest"),
    "sys_modules": verdict("sys.modules['unittest']"),
    "raises_ctx": verdict("unittest.case._AssertRaisesContext"),
    "builtins": verdict("builtins"),
    "during": verdict("unittest.case.TestCase", "while"),
    "mixin": made_from("Base"),
    "shadow_name": made_from("Fake"),
    "metaclass": made_from("Meta"),
}
KNOWN = "def f(n=3):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n"


@pytest.fixture(scope="module")
def box():
    with Sandbox(Limits(timeout_s=60.0)) as sandbox:
        yield sandbox


def test_every_program_is_judged():
    assert set(WANTED) == set(PROGRAMS)


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_a_failing_test_stays_failing(box, name, isolation):
    code, test = PROGRAMS[name]
    clean = box.run({"code": KNOWN, "input": ""}, "job").result
    if isolation == "batch":
        box.run({"code": KNOWN, "input": ""}, "batch")
    result = box.run({"code": code, "input": "", "entry": "T.test_x", "test": test},
                     isolation).result
    assert (result["status"], result["exception_type"],
            result["exception_message"]) == WANTED[name]
    if result["status"] == "invalid":
        assert result["output"] is None
    after = box.run({"code": KNOWN, "input": ""}, isolation).result
    for field in ("status", "output", "steps", "states", "instruction_steps"):
        assert after[field] == clean[field], field
