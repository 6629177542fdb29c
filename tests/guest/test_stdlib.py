"""The preloaded standard library: all of it imports inside the sandbox, nothing else
does, and a realistic benchmark-style program using several modules runs and matches."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers.traces import steps_of

PRELOAD = Path(__file__).resolve().parents[2] / "tracer" / "stdlib_preload.py"

# The codecs stdlib_preload.py documents as absent from the WASI build (bz2) or
# Windows-only (mbcs, oem), with the reason the guest records for each.
UNLOADABLE_CODECS = {
    "encodings.bz2_codec": "ModuleNotFoundError: No module named '_bz2'",
    "encodings.mbcs": ("ImportError: cannot import name 'mbcs_encode' from 'codecs' "
                       "(/python/lib/python3.14/codecs.py)"),
    "encodings.oem": ("ImportError: cannot import name 'oem_encode' from 'codecs' "
                      "(/python/lib/python3.14/codecs.py)"),
}


def preload_modules() -> tuple[str, ...]:
    """MODULES from tracer/stdlib_preload.py, read without importing it on the host."""
    tree = ast.parse(PRELOAD.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "MODULES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("MODULES not found in stdlib_preload.py")


IMPORT_ALL = """
import importlib

def f(names):
    failures = []
    for name in names:
        try:
            module = importlib.import_module(name)
            if module.__name__ != name:
                failures.append((name, 'imported as ' + module.__name__))
        except BaseException as exc:
            failures.append((name, type(exc).__name__ + ': ' + str(exc)))
    return failures
"""


def test_every_preloaded_module_imports_in_the_sandbox(run):
    """A traced program imports each name of MODULES with importlib: no failure."""
    modules = preload_modules()
    assert len(modules) == 77
    result = run(IMPORT_ALL, repr(list(modules)), expected="[]")
    assert (result["status"], result["exception_message"]) == ("ok", None)
    assert (result["output"], result["output_matches"]) == ("[]", True)


def test_preloaded_modules_report(sandbox):
    """The guest's own report: every module of MODULES imported, and the only failures
    are the three documented codecs."""
    report = sandbox.preloaded_modules()
    assert report["failed"] == UNLOADABLE_CODECS
    assert set(preload_modules()) <= set(report["imported"])
    assert "encodings.utf_8" in report["imported"]
    assert "encodings.zlib_codec" in report["imported"]


def test_preloaded_codecs_work_at_run_time(run):
    """str.encode/bytes.decode and codecs.encode find preloaded codecs (cp1252, utf-16,
    zlib, rot13) at run time, when no new module could be imported."""
    code = ("import codecs\n\ndef f(text):\n"
            "    return (text.encode('cp1252'), text.encode('utf-16-le').decode('utf-16-le'),\n"
            "            codecs.encode(b'abc', 'zlib_codec')[:2], codecs.encode('abc', 'rot13'))\n")
    result = run(code, "'caf\\xe9'")
    assert (result["status"], result["output"]) == (
        "ok", "(b'caf\\xe9', 'café', b'x\\x9c', 'nop')")


@pytest.mark.parametrize("name", ["sqlite3", "tkinter", "ssl", "ctypes", "multiprocessing",
                                  "lzma", "bz2"])
def test_module_not_preloaded_is_missing_inside_f(run, name):
    """A module that is not in the snapshot is not found at run time: importing it in f
    ends the run with status missing_module, naming it."""
    result = run(f"def f():\n    import {name}\n    return 1\n")
    assert (result["status"], result["exception_type"], result["exception_message"]) == (
        "missing_module", "ModuleNotFoundError", f"No module named '{name}'")


@pytest.mark.parametrize("name", ["sqlite3", "tkinter"])
def test_module_not_preloaded_at_top_level_is_missing(run, name):
    """The same import at the program's top level: the same status, not invalid."""
    result = run(f"import {name}\n\ndef f():\n    return 1\n")
    assert (result["status"], result["exception_type"], result["exception_message"]) == (
        "missing_module", "ModuleNotFoundError", f"No module named '{name}'")


TOP_WORDS = '''
import collections
import heapq
import math
import re
from typing import List, Tuple


def f(text: str, k: int) -> List[Tuple[str, float]]:
    """Return the k highest-scoring words of text, best first.

    A word is a run of letters (an apostrophe inside a word is kept); case is ignored.
    The score of a word is count * log2(1 + total / count), rounded to 3 places: frequent
    words score higher, but a word that is everything scores less than its raw count.
    Ties are broken alphabetically.
    >>> f("a b a", 1)
    [('a', 2.644)]
    """
    words = re.findall(r"[a-z]+(?:'[a-z]+)?", text.lower())
    counts = collections.Counter(words)
    total = sum(counts.values())
    scored = [(-round(count * math.log2(1 + total / count), 3), word)
              for word, count in counts.items()]
    return [(word, -score) for score, word in heapq.nsmallest(k, scored)]
'''

TEXT = ("The cat sat on the mat. The dog didn't sit; the dog ran! "
        "A cat and a dog: that's the story of the cat, the dog and the mat.")
TOP_WORDS_EXPECTED = ("[('the', 17.676), ('dog', 12.178), ('cat', 10.245), ('a', 7.908), "
                      "('and', 7.908), ('mat', 7.908)]")


def test_humaneval_style_program_with_several_modules(run):
    """typing, re, collections, math and heapq together: the exact ranking (with ties
    broken alphabetically), output_matches True, and the call traced."""
    result = run(TOP_WORDS, f"{TEXT!r}, 6", expected=TOP_WORDS_EXPECTED)
    assert (result["status"], result["exception_message"]) == ("ok", None)
    assert result["output"] == TOP_WORDS_EXPECTED
    assert (result["output_type"], result["output_matches"]) == ("list", True)
    assert (result["funcs"], result["calls"], result["max_depth"]) == (["f"], 1, 0)
    steps = steps_of(result)
    assert steps[:4] == [("call", "f", 9, 0, 0), ("line", "f", 19, 0, 0),
                         ("line", "f", 20, 0, 0), ("line", "f", 21, 0, 0)]
    assert steps[-2:] == [("line", "f", 24, 0, 0), ("return", "f", 24, 0, 0)]
    # 19, 20, 21, then the comprehension on lines 22-23 (23 and 22 to start it, 23 and 22
    # for each of the 14 distinct words, 23 once more at its end and 22 to store `scored`:
    # the line CPython 3.14 loses), then 24: 36, as CPython 3.13 has it
    assert result["line_steps"] == 36
    states = result["states"]
    traced = dict(zip(states["var"], states["value"]))
    assert traced["total"] == "29"
    assert traced["k"] == "6"


def test_humaneval_style_program_edge_cases(run):
    """The same program on its docstring example and on empty text."""
    result = run(TOP_WORDS, "'a b a', 1", expected="[('a', 2.644)]")
    assert (result["status"], result["output"], result["output_matches"]) == (
        "ok", "[('a', 2.644)]", True)
    result = run(TOP_WORDS, "'', 3", expected="[]")
    assert (result["status"], result["output"], result["output_matches"]) == ("ok", "[]", True)


def test_strptime_and_assert_raises_run_as_in_cpython(run):
    """``_strptime`` (imported lazily by ``time.strptime`` and ``datetime.strptime``) is
    preloaded, and unittest's ``assertRaises`` works: it clears the traceback's frames,
    which the guest refuses with a RuntimeError that ``traceback.clear_frames`` expects
    (the run's note names it)."""
    code = ("import datetime, io, time, unittest\n"
            "class T(unittest.TestCase):\n    def runTest(self):\n"
            "        with self.assertRaises(ValueError):\n            int('x')\n"
            "def f():\n    d = datetime.datetime.strptime('2024-03-05 17:04', '%Y-%m-%d %H:%M')\n"
            "    t = time.strptime('05/03/24', '%d/%m/%y')\n"
            "    r = unittest.TextTestRunner(stream=io.StringIO()).run(T())\n"
            "    return d.isoformat(), t.tm_yday, r.wasSuccessful()\n")
    result = run(code)
    assert (result["status"], result["output"]) == ("ok", "('2024-03-05T17:04:00', 65, True)")
    assert result["note"] == "refused to the program: object.__getattr__ tb_frame"


@pytest.mark.parametrize(("code", "want"), [
    ("import sys\ndef f():\n    sys.setrecursionlimit(1)\n",
     ("exception", "RecursionError",
      "cannot set the recursion limit to 1 at the recursion depth 2: the limit is too low")),
    ("import sys\ndef f():\n    sys.setrecursionlimit(2)\n",
     ("exception", "RecursionError",
      "cannot set the recursion limit to 2 at the recursion depth 2: the limit is too low")),
    ("import sys\ndef f():\n    sys.setrecursionlimit(0)\n",
     ("exception", "ValueError", "recursion limit must be greater or equal than 1")),
    ("import sys\ndef f():\n    sys.setrecursionlimit(2.5)\n",
     ("exception", "TypeError", "'float' object cannot be interpreted as an integer")),
    ("import sys\nsys.setrecursionlimit(1)\ndef f():\n    return 1\n",
     ("invalid", "RecursionError", "program failed at top level: RecursionError: cannot set "
      "the recursion limit to 1 at the recursion depth 1: the limit is too low")),
    ("import sys\ndef f():\n    sys.setrecursionlimit(3)\n    return sys.getrecursionlimit()\n",
     ("ok", None, None)),
])
def test_setrecursionlimit_fails_as_in_cpython(run, code, want):
    """A limit at or below the current depth is CPython's RecursionError (its message and
    depth counted as CPython counts it), not a crash of the guest."""
    result = run(code)
    assert (result["status"], result["exception_type"], result["exception_message"]) == want
