"""Which jobs batch isolation compares the interpreter's shared state after.

``shared_state.reaches_shared_state`` decides, from a job's code objects, whether the job
could have changed a module, a class or the runner's streams for the next job; the
namespace comparison (~12 ms a job in the guest) and guard.wind_down/leave's checks run
only then. It must say yes for every way out of the program's own objects (an import, a
library that sets attributes for the program, a dunder or frame attribute, a constant
naming one) and no for code that holds only its own objects and the builtins' values, or
batch isolation would cost every CRUXEval job a comparison.

The guest's own modules are imported by CPython 3.13 (the guest is 3.14, which only adds
``__annotate__`` and friends, allowed in both) and asked about programs compiled as job.py
compiles them. tests/guest/test_after_job.py shows in the guest that the attacks it
lists are caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NATIVE = Path("/root/.pyenv/versions/3.13.0/bin/python")

# the child: reads [[program, input], ...] and prints whether each reaches shared state
CHILD = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import job, shared_state
answers = []
for program, arguments in json.load(sys.stdin):
    codes = [compile(program, job.PROGRAM_FILE, "exec", dont_inherit=True)]
    if arguments is not None:
        codes.append(job.compile_call_arguments(arguments))
    answers.append(shared_state.reaches_shared_state(codes))
print(json.dumps(answers))
'''


def reaches(jobs: list[tuple[str, str | None]]) -> list[bool]:
    assert NATIVE.is_file(), f"CPython 3.13 is needed at {NATIVE} (pyenv)"
    done = subprocess.run([str(NATIVE), "-I", "-c", CHILD, str(ROOT / "tracer")],
                          input=json.dumps(jobs), capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


REACHING = {
    "import": "import json\ndef f():\n    return 1\n",
    "from import": "from json import dumps\ndef f():\n    return 1\n",
    "import in a function": "def f():\n    import pickle\n    return 1\n",
    "attribute store": "def f(o):\n    o.x = 1\n",
    "a builtin's __self__": "def f():\n    return len.__self__\n",
    "class pattern keywords": ("def f():\n    match len:\n"
                               "        case object(__self__=s):\n            return s\n"),
    "a nested constant": "def f():\n    return ((1, ('__globals__',)),)\n",
    "frames": ("def f():\n    try:\n        1 / 0\n    except Exception as e:\n"
               "        return e.__traceback__\n"),
    "tb_frame by name": "def f(t):\n    return t.tb_frame\n",
    "a generator's frame": "def f(g):\n    return g.gi_frame\n",
    "exit closes stdin": "def f():\n    exit()\n",
    "getattr": "def f(o, n):\n    return getattr(o, n)\n",
    "an unlisted dunder": "def f(c):\n    return c.__subclasses__()\n",
    "a class's bases": "def f(c):\n    return c.__mro__\n",
    "mro": "def f(c):\n    return c.mro()\n",
    "in a lambda": "def f():\n    return (lambda: vars())()\n",
    "in a comprehension": "def f(xs):\n    return [x.__class__ for x in xs]\n",
}

NOT_REACHING = {
    "plain": "def f(xs):\n    return sorted(xs)[::-1]\n",
    "a class of its own": ("class A:\n    __slots__ = ('v',)\n"
                           "    def __init__(self, v):\n        object.__init__(self)\n"
                           "    def __repr__(self):\n        return 'A'\n"
                           "    def __eq__(self, o):\n        return True\n"
                           "    def __hash__(self):\n        return 1\n"
                           "def f():\n    return A(1) == A(2), len([A(1)])\n"),
    "operators": ("class V:\n    def __add__(self, o):\n        return self\n"
                  "    __radd__ = __add__\n    def __iadd__(self, o):\n        return self\n"
                  "def f():\n    v = V()\n    v += 1\n    return 1 + v\n"),
    "a dunder-like string": "def f(s):\n    return s.strip('_') + '__' + '___' + '_____'\n",
    "input": "def f():\n    return input()\n",
    "the module's name": "def f():\n    return __name__\n",
}


def test_every_way_out_is_seen():
    answers = reaches([(program, None) for program in REACHING.values()])
    assert dict(zip(REACHING, answers)) == {name: True for name in REACHING}


def test_code_with_only_its_own_objects_is_not():
    answers = reaches([(program, "") for program in NOT_REACHING.values()])
    assert dict(zip(NOT_REACHING, answers)) == {name: False for name in NOT_REACHING}


def test_the_input_is_read_as_the_programs():
    assert reaches([("def f(x):\n    return x\n", "1, 2"),
                    ("def f(x):\n    return x\n", "__import__('os')"),
                    ("def f(x):\n    return x\n", "x=[1].__class__")]) == [False, True, True]


def test_no_cruxeval_job_is_compared(cruxeval_path):
    """CRUXEval's programs import nothing and store no attribute: none is compared (batch
    isolation's cost there is what it was before the check was made sound)."""
    records = [json.loads(line) for line in cruxeval_path.read_text().splitlines()]
    answers = reaches([(record["code"], record["input"]) for record in records]
                      + [(record["code"], record["output"]) for record in records])
    assert len(answers) == 1600 and not any(answers)
