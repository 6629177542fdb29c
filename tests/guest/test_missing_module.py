"""Status ``missing_module``: a program that imports a module the guest does not have —
exact status, message, steps and states in the real sandbox, and the next job exact.

The guest decides: a ModuleNotFoundError that ends the job (the program's top level, its
test code, the call, a script) whose ``name`` (the exception's C member, an exact
``str``) is not among the modules the guest was built with. Steps are ``(event, func,
line, depth, frame)`` and states ``(step, var, repr, type)``, as in test_shapes.py.
"""

from __future__ import annotations

import pytest

from helpers.traces import assert_next_job_exact as next_job_exact
from helpers.traces import job, outcome, states_of, steps_of

NUMPY = "No module named 'numpy'"
NUMPY_REPR = 'ModuleNotFoundError("No module named \'numpy\'")'
def missing(name: str, stdout: str = "", kind: str = "ModuleNotFoundError") -> tuple:
    return ("missing_module", kind, f"No module named '{name}'", None, stdout)


def assert_next_job_exact(sandbox, isolation: str) -> None:
    """The next job in the same sandbox is exact, with no note (nothing was left changed)."""
    result = next_job_exact(sandbox, isolation)
    assert result["note"] is None and "shared_state_changed" not in result


ISOLATIONS = pytest.mark.parametrize("isolation", ["job", "batch"])


# ====================================================================== where it is imported
@ISOLATIONS
def test_top_level_import(sandbox, isolation):
    """At the program's top level (``invalid`` before this status): nothing is traced,
    the call never ran, so the guest compared nothing (the store's ``output_matches`` is
    false for every run that did not return)."""
    result = job(sandbox, isolation, code="import numpy\n\ndef f():\n    return 1\n",
                 expected="1")
    assert outcome(result) == missing("numpy")
    assert (result["note"], result["output_matches"]) == (None, None)
    assert steps_of(result) == [] and states_of(result) == []
    assert_next_job_exact(sandbox, isolation)


@ISOLATIONS
def test_import_inside_the_call(sandbox, isolation):
    """In the traced call: the trace up to the import is kept, the exception's raise and
    unwind included."""
    code = "def f(x):\n    y = x + 1\n    import numpy\n    return y\n"
    result = job(sandbox, isolation, code=code, input="1")
    assert outcome(result) == missing("numpy")
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0), ("line", "f", 2, 0, 0), ("line", "f", 3, 0, 0),
        ("raise", "f", 3, 0, 0), ("unwind", "f", 3, 0, 0)]
    assert states_of(result) == [
        (0, "x", "1", "int"), (2, "y", "2", "int"), (3, "<exception>", NUMPY_REPR,
                                                     "ModuleNotFoundError"),
        (4, "<exception>", NUMPY_REPR, "ModuleNotFoundError")]
    assert_next_job_exact(sandbox, isolation)


def test_import_made_by_library_code(sandbox):
    """The import happens in the standard library's frames (importlib called through
    functools.partial in map), not in the program's: the same status."""
    code = ("import functools, importlib\ndef f():\n"
            "    load = functools.partial(importlib.import_module)\n"
            "    return list(map(load, ['json', 'numpy']))\n")
    result = job(sandbox, code=code)
    assert outcome(result) == missing("numpy")
    assert steps_of(result) == [
        ("call", "f", 2, 0, 0), ("line", "f", 3, 0, 0), ("line", "f", 4, 0, 0),
        ("raise", "f", 4, 0, 0), ("unwind", "f", 4, 0, 0)]
    assert states_of(result) == [
        (2, "load", "functools.partial(<function import_module>)", "partial"),
        (3, "<exception>", NUMPY_REPR, "ModuleNotFoundError"),
        (4, "<exception>", NUMPY_REPR, "ModuleNotFoundError")]


def test_import_in_a_lambda_through_map_names_the_first_missing_package(sandbox):
    """``numpy.linalg``: the package is the first module not found, so the name is
    ``numpy``; json was imported by the first call."""
    code = ("import importlib\ndef f():\n    return [m.__name__ for m in map("
            "lambda n: importlib.import_module(n), ['json', 'numpy.linalg'])]\n")
    result = job(sandbox, code=code)
    assert outcome(result) == missing("numpy")
    lam = "f.<locals>.<lambda>"
    assert steps_of(result) == [
        ("call", "f", 2, 0, 0), ("line", "f", 3, 0, 0),
        ("call", lam, 3, 1, 1), ("line", lam, 3, 1, 1), ("return", lam, 3, 1, 1),
        ("call", lam, 3, 1, 2), ("line", lam, 3, 1, 2), ("raise", lam, 3, 1, 2),
        ("unwind", lam, 3, 1, 2), ("raise", "f", 3, 0, 0), ("line", "f", 3, 0, 0),
        ("unwind", "f", 3, 0, 0)]


@ISOLATIONS
def test_submodule_of_an_available_package(sandbox, isolation):
    """``import json.nothere``: json is there, the submodule is not; the name is the full
    dotted one. ``from json import nothere`` is an ImportError (a name, not a module):
    the ordinary status."""
    result = job(sandbox, isolation, code="def f():\n    import json.nothere\n")
    assert outcome(result) == missing("json.nothere")
    assert_next_job_exact(sandbox, isolation)
    result = job(sandbox, isolation, code="def f():\n    from json import nothere\n")
    assert outcome(result) == (
        "exception", "ImportError",
        "cannot import name 'nothere' from 'json' (/python/json/__init__.py)", None, "")


@ISOLATIONS
def test_script(sandbox, isolation):
    """A script: traced from its first line up to the import; its stdout is kept."""
    result = job(sandbox, isolation, code="print('start')\nimport numpy\nprint('never')\n",
                 shape="script")
    assert outcome(result) == missing("numpy", stdout="start\n")
    assert steps_of(result) == [
        ("call", "<module>", 1, 0, 0), ("line", "<module>", 1, 0, 0),
        ("line", "<module>", 2, 0, 0), ("raise", "<module>", 2, 0, 0),
        ("unwind", "<module>", 2, 0, 0)]
    assert_next_job_exact(sandbox, isolation)


TEST_CODE = {
    "top_level": "import unittest\nimport numpy\nclass T(unittest.TestCase):\n"
                 "    def test_a(self):\n        pass\n",
    "test_method": "import unittest\nclass T(unittest.TestCase):\n"
                   "    def test_a(self):\n        import numpy\n",
}


@pytest.mark.parametrize("where", TEST_CODE)
def test_test_driver_code(sandbox, where):
    """A test driver's code (compiled as ``<test>``, never traced) importing a missing
    module at its top level or in the test method."""
    result = job(sandbox, code="def f():\n    return 1\n", entry="T.test_a",
                 test=TEST_CODE[where])
    assert outcome(result) == missing("numpy")
    assert steps_of(result) == []


@pytest.mark.parametrize("mode", ["run", "analyse"])
def test_untraced_modes(sandbox, mode):
    """Checking a predicted input (``run``) and the analysis run see the same status."""
    result = job(sandbox, code="def f():\n    import numpy\n", mode=mode)
    assert outcome(result) == missing("numpy")


@pytest.mark.parametrize("name", ["job", "guest", "sysmon_tracer"])
def test_the_runners_modules_are_missing_to_programs(sandbox, name):
    """The runner's modules are removed before the guest's modules are recorded."""
    result = job(sandbox, code=f"def f():\n    import {name}\n")
    assert outcome(result) == missing(name)


# ====================================================================== not missing_module
@ISOLATIONS
def test_caught_and_going_on_is_ok(sandbox, isolation):
    code = ("def f():\n    try:\n        import numpy\n    except ImportError:\n"
            "        return 'no numpy'\n    return 'numpy'\n")
    result = job(sandbox, isolation, code=code, expected="'no numpy'")
    assert outcome(result) == ("ok", None, None, "'no numpy'", "")
    assert result["output_matches"] is True
    assert_next_job_exact(sandbox, isolation)


def test_caught_and_another_exception_raised(sandbox):
    """What ends the job is the RuntimeError: its cause is not looked at."""
    code = ("def f():\n    try:\n        import numpy\n    except ImportError as e:\n"
            "        raise RuntimeError('needs numpy') from e\n")
    result = job(sandbox, code=code)
    assert outcome(result) == ("exception", "RuntimeError", "needs numpy", None, "")


# ====================================================================== raised by the program
@ISOLATIONS
def test_raised_for_a_module_that_is_missing(sandbox, isolation):
    """A program raising the error itself for a module the guest does not have: the
    status is true, so it is given; the message is the guest's, made from the name."""
    code = "def f():\n    raise ModuleNotFoundError('install it', name='numpy')\n"
    result = job(sandbox, isolation, code=code)
    assert outcome(result) == missing("numpy")
    assert_next_job_exact(sandbox, isolation)


@ISOLATIONS
def test_raised_for_a_module_the_guest_has(sandbox, isolation):
    """``name='json'``: json is in the guest, so this is the program's own exception (in
    the call ``exception``, at the top level ``invalid``, as before)."""
    code = "def f():\n    raise ModuleNotFoundError('x', name='json')\n"
    assert outcome(job(sandbox, isolation, code=code)) == (
        "exception", "ModuleNotFoundError", "x", None, "")
    code = "raise ModuleNotFoundError('x', name='json')\ndef f():\n    return 1\n"
    assert outcome(job(sandbox, isolation, code=code)) == (
        "invalid", "ModuleNotFoundError",
        "program failed at top level: ModuleNotFoundError: x", None, "")
    assert_next_job_exact(sandbox, isolation)


HOSTILE_NAMES = {
    # a str subclass whose hash and equality print: never run (stdout stays empty)
    "str_subclass": "class S(str):\n    def __hash__(self):\n        print('hash')\n"
                    "        return 0\n    def __eq__(self, other):\n        print('eq')\n"
                    "        return False\nNAME = S('numpy')\n",
    "int": "NAME = 7\n",
    "empty": "NAME = ''\n",
    "none": "NAME = None\n",
}


@ISOLATIONS
@pytest.mark.parametrize("kind", HOSTILE_NAMES)
def test_a_name_that_is_not_an_exact_str_is_the_ordinary_status(sandbox, isolation, kind):
    code = HOSTILE_NAMES[kind] + "def f():\n    raise ModuleNotFoundError('x', name=NAME)\n"
    result = job(sandbox, isolation, code=code)
    assert outcome(result) == ("exception", "ModuleNotFoundError", "x", None, "")
    assert_next_job_exact(sandbox, isolation)


@ISOLATIONS
def test_the_name_is_read_from_the_c_member(sandbox, isolation):
    """A subclass whose ``name`` property says ``json`` and whose ``__str__`` raises: the
    name is the one the exception holds (numpy), the message the guest's; no program
    code runs for either."""
    code = ("class E(ModuleNotFoundError):\n    name = property(lambda self: 'json')\n"
            "    def __str__(self):\n        raise ValueError('no str')\n"
            "def f():\n    raise E('x', name='numpy')\n")
    result = job(sandbox, isolation, code=code)
    assert outcome(result) == missing("numpy", kind="E")
    assert result["note"] is None
    assert_next_job_exact(sandbox, isolation)


@ISOLATIONS
def test_a_ten_megabyte_name_is_cut(sandbox, isolation):
    """A name of 10,000,000 characters: missing (no such module), cut to 1,000
    characters in the message, the cut said in the note; no crash, next job exact."""
    code = "def f():\n    raise ModuleNotFoundError('x', name='n' * 10_000_000)\n"
    result = job(sandbox, isolation, code=code)
    assert outcome(result) == missing("n" * 1000)
    assert result["note"] == ("cut to the guest's caps: missing_module (10,000,000 "
                              "characters) to 1,000")
    assert_next_job_exact(sandbox, isolation)
