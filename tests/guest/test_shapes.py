"""Programs that are not ``f(args)``: scripts with stdin, method chains, dotted entries,
unittest test drivers, asyncio, threads — exact steps and states in the real sandbox.

Steps are ``(event, func, line, depth, frame)`` and states ``(step, var, repr, type)``,
as in test_tracer_exact.py, every expected value checked by hand against CPython's
semantics. A script's module frame's locals are the module's globals; its dunder names
(``__name__``, ``__builtins__``, ...) are never recorded (``script_states`` checks).
"""

from __future__ import annotations

import pytest

from helpers.traces import KNOWN, assert_next_job_exact, job, outcome, states_of, steps_of

THREADS = "the program starts a thread; the sandbox (WASI) has no threads"


def script_states(result: dict) -> list[tuple]:
    """The state rows, which hold none of the module's dunder names."""
    rows = states_of(result)
    assert not [row for row in rows if row[1].startswith("__") and row[1].endswith("__")]
    return rows


# ====================================================================== scripts
READ_STDIN = """\
n = int(input())
total = 0
from sys import stdin
for line in stdin:
    total += int(line)
print(n, total)
"""
STDIN_REPR = "<_io.TextIOWrapper name='<stdin>' mode='r' encoding='utf-8'>"


def test_script_reads_stdin_with_input_and_a_loop(sandbox):
    """The module is traced from its first line (depth 0, ``<module>``); input() and
    iterating sys.stdin read the job's stdin with universal newlines (``\\r\\n`` and a
    last line without a newline); the output is stdout."""
    result = job(sandbox, code=READ_STDIN, input="2\r\n3\n4", shape="script")
    assert outcome(result) == ("ok", None, None, None, "2 7\n")
    assert result["output_type"] is None
    assert steps_of(result) == [
        ("call", "<module>", 1, 0, 0), ("line", "<module>", 1, 0, 0),
        ("line", "<module>", 2, 0, 0), ("line", "<module>", 3, 0, 0),
        ("line", "<module>", 4, 0, 0), ("line", "<module>", 5, 0, 0),
        ("line", "<module>", 4, 0, 0), ("line", "<module>", 5, 0, 0),
        ("line", "<module>", 4, 0, 0), ("line", "<module>", 6, 0, 0),
        ("return", "<module>", 6, 0, 0)]
    assert script_states(result) == [
        (2, "n", "2", "int"), (3, "total", "0", "int"), (4, "stdin", STDIN_REPR, "TextIOWrapper"),
        (5, "line", "'3\\n'", "str"), (6, "total", "3", "int"), (7, "line", "'4'", "str"),
        (8, "total", "7", "int"), (10, "<return>", "None", "NoneType")]
    assert (result["line_steps"], result["calls"], result["max_depth"]) == (9, 1, 0)


def test_script_stdin_read_readline_buffer_and_eof(sandbox):
    """sys.stdin.read() reads it all (newlines translated), then '' as a real stdin at
    EOF; .buffer has the bytes as given; input() past the end raises EOFError."""
    code = ("import sys\nprint(repr(sys.stdin.read()), repr(sys.stdin.read()), "
            "repr(sys.stdin.readline()))\n")
    result = job(sandbox, code=code, input="a\r\nb\rc", shape="script")
    assert outcome(result) == ("ok", None, None, None, "'a\\nb\\nc' '' ''\n")
    code = "import sys\nprint(sys.stdin.buffer.read())\n"
    result = job(sandbox, code=code, input="a\r\nb", shape="script")
    assert outcome(result) == ("ok", None, None, None, "b'a\\r\\nb'\n")
    result = job(sandbox, code="a = input()\nb = input()\n", input="x", shape="script")
    assert outcome(result) == ("exception", "EOFError", "EOF when reading a line", None, "")
    assert steps_of(result) == [
        ("call", "<module>", 1, 0, 0), ("line", "<module>", 1, 0, 0),
        ("line", "<module>", 2, 0, 0), ("raise", "<module>", 2, 0, 0),
        ("unwind", "<module>", 2, 0, 0)]
    assert script_states(result) == [
        (2, "a", "'x'", "str"), (3, "<exception>", "EOFError('EOF when reading a line')",
                                 "EOFError"),
        (4, "<exception>", "EOFError('EOF when reading a line')", "EOFError")]


@pytest.mark.parametrize("code, want", [
    ("print('a')\nraise SystemExit(0)\nprint('b')\n", ("ok", None, None, None, "a\n")),
    ("print('a')\nraise SystemExit\n", ("ok", None, None, None, "a\n")),
    ("import sys\nsys.exit(False)\n", ("ok", None, None, None, "")),
    ("print('a')\nraise SystemExit(3)\n", ("exception", "SystemExit", "3", None, "a\n")),
    ("import sys\nsys.exit('bad input')\n",
     ("exception", "SystemExit", "bad input", None, "")),
    # a subclass's ``code`` property is not what CPython's exit status reads
    ("class E(SystemExit):\n    code = property(lambda self: 0)\nraise E(1)\n",
     ("exception", "E", "1", None, "")),
])
def test_script_exit_status(sandbox, code, want):
    """SystemExit with code 0/None (or False) is a clean end (``ok``); any other code is
    ``exception`` SystemExit, as the process's exit status would be nonzero."""
    assert outcome(job(sandbox, code=code, shape="script")) == want


def test_script_system_exit_steps(sandbox):
    result = job(sandbox, code="x = 1\nraise SystemExit(x)\n", shape="script")
    assert outcome(result) == ("exception", "SystemExit", "1", None, "")
    assert steps_of(result) == [
        ("call", "<module>", 1, 0, 0), ("line", "<module>", 1, 0, 0),
        ("line", "<module>", 2, 0, 0), ("raise", "<module>", 2, 0, 0),
        ("unwind", "<module>", 2, 0, 0)]
    assert script_states(result) == [
        (2, "x", "1", "int"), (3, "<exception>", "SystemExit(1)", "SystemExit"),
        (4, "<exception>", "SystemExit(1)", "SystemExit")]


def test_script_functions_are_one_deeper_and_recursion_fails_where_cpython_does(sandbox):
    """A function called from the module is depth 1; the module frame is the script's
    top level, so a recursive function reaches the depth plain CPython allows."""
    code = "def g(n):\n    return n\ny = g(5)\n"
    result = job(sandbox, code=code, shape="script")
    assert steps_of(result) == [
        ("call", "<module>", 1, 0, 0), ("line", "<module>", 1, 0, 0),
        ("line", "<module>", 3, 0, 0), ("call", "g", 1, 1, 1), ("line", "g", 2, 1, 1),
        ("return", "g", 2, 1, 1), ("return", "<module>", 3, 0, 0)]
    code = ("import sys\nsys.setrecursionlimit(60)\ndepth = 0\ndef down():\n"
            "    global depth\n    depth += 1\n    down()\n"
            "try:\n    down()\nexcept RecursionError:\n    print(depth)\n")
    # CPython 3.14 running this file: the module frame is 1 deep, down() 2 to 60
    result = job(sandbox, code=code, shape="script")
    assert outcome(result) == ("ok", None, None, None, "59\n")


def test_stdin_of_a_call_and_empty_stdin(sandbox):
    """``stdin`` gives a call-shaped program its standard input; without it stdin is
    empty (input() raises EOFError, as before)."""
    code = "import sys\ndef f():\n    return sys.stdin.readline(), sys.stdin.read()\n"
    result = job(sandbox, code=code, stdin="one\ntwo\n")
    assert outcome(result) == ("ok", None, None, "('one\\n', 'two\\n')", "")
    result = job(sandbox, code="def f():\n    return input()\n")
    assert outcome(result) == ("exception", "EOFError", "EOF when reading a line", None, "")


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_a_script_that_replaces_stdin_and_input_leaves_the_next_job_its_own(sandbox,
                                                                               isolation):
    """Rebinding sys.stdin and builtins.input works for the program (as in CPython) and
    is undone for the next job, which reads its own stdin."""
    code = ("import sys, io, builtins\nsys.stdin = io.StringIO('mine\\n')\nprint(input())\n"
            "builtins.input = lambda *a: 'fake'\nprint(input())\nsys.__dict__['stdin'] = 3\n")
    result = job(sandbox, isolation, code=code, input="real\n", shape="script")
    assert outcome(result) == ("ok", None, None, None, "mine\nfake\n")
    result = job(sandbox, isolation, code="print(input(), input())\n", input="a\nb\n",
                 shape="script")
    assert outcome(result) == ("ok", None, None, None, "a b\n")
    code = "import sys\nsys.stdin.close()\nsys.stdin.buffer.close()\n"
    assert outcome(job(sandbox, isolation, code=code, input="x", shape="script"))[0] == "ok"
    result = job(sandbox, isolation, code="import sys\ndef f():\n    return sys.stdin.read()\n",
                 stdin="fresh")
    assert outcome(result) == ("ok", None, None, "'fresh'", "")
    assert_next_job_exact(sandbox, isolation)


ANNOTATED = "def f(x: int, y: 'str' = '') -> list:\n    return f.__annotations__\n"
ANNOTATIONS = "{'x': <class 'int'>, 'y': 'str', 'return': <class 'list'>}"


@pytest.mark.parametrize("mode", ["trace", "analyse", "run"])
def test_annotations_are_the_programs_own_not_the_runners_future_import(sandbox, mode):
    """A program is compiled with only its own future imports: the runner's modules use
    ``from __future__ import annotations``, which compile() would otherwise pass on (the
    annotations of a plain 3.14 program would read back as strings)."""
    result = job(sandbox, code=ANNOTATED, input="1", mode=mode)
    assert outcome(result) == ("ok", None, None, ANNOTATIONS, "")
    script = ANNOTATED + "print(f(1))\n"
    result = job(sandbox, code=script, shape="script", mode=mode)
    assert outcome(result) == ("ok", None, None, None, ANNOTATIONS + "\n")
    test = ("import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
            "        def g(z: float): pass\n"
            "        self.assertEqual(g.__annotations__, {'z': float})\n")
    result = job(sandbox, code=ANNOTATED, entry="T.test_a", test=test, mode=mode)
    assert outcome(result)[:2] == ("ok", None)
    own = "from __future__ import annotations\n" + ANNOTATED
    result = job(sandbox, code=own, input="1", mode=mode)
    assert outcome(result) == ("ok", None, None,
                               "{'x': 'int', 'y': \"'str'\", 'return': 'list'}", "")


# What a job can do to the empty stdin that jobs without stdin text share (guard.py), and
# what the next job must not see of it.
STDIN_CHANGES = [
    "sys.stdin.write('x'); sys.stdin.seek(0)",
    "sys.stdin.buffer.write(b'x'); sys.stdin.buffer.seek(0)",
    "sys.stdin.buffer.truncate(0); sys.stdin.buffer.write(b'ab'); sys.stdin.buffer.seek(0)",
    "sys.stdin.close()",
    "sys.stdin.buffer.close()",
    "sys.stdin.detach()",
    "sys.stdin.foo = 1",
    "sys.stdin.mode = 'w'",
    "sys.stdin.buffer.name = 'other'",
    "sys.stdin.buffer.__setstate__((b'ab', 0, None))",
    "sys.stdin.reconfigure(encoding='latin-1')",
    "sys.stdin.reconfigure(errors='strict')",
    "sys.stdin.reconfigure(line_buffering=True)",
    "sys.stdin.reconfigure(write_through=True)",
    "sys.stdin._CHUNK_SIZE = 1",
    "weakref.finalize(sys.stdin, sys.stdout.write, 'late')",
    "weakref.finalize(sys.stdin.buffer, print, 'late')",
    "sys.stdin.read(); sys.stdin.readline(); list(sys.stdin)",
]
STDIN_PROBE = ("import sys\ndef f():\n    s = sys.stdin\n"
               "    return (s.read(), s.closed, s.encoding, s.errors, s.line_buffering,\n"
               "            s.write_through, s._CHUNK_SIZE, vars(s), vars(s.buffer),\n"
               "            s.buffer.tell(), s.buffer.getvalue(), s.writable())\n")
STDIN_AS_MADE = ("('', False, 'utf-8', 'surrogatepass', False, False, 8192, {'mode': 'r'}, "
                 "{'name': '<stdin>'}, 0, b'', True)")


def test_jobs_without_stdin_text_share_one_stream(sandbox):
    """Jobs that leave it as made (reading it to its end included) get the very same
    stream: a new one would be made while the old still exists, at another address."""
    code = "import sys\ndef f():\n    sys.stdin.read()\n    return id(sys.stdin)\n"
    first = job(sandbox, "batch", code=code)
    second = job(sandbox, "batch", code=code)
    assert outcome(first)[:2] == ("ok", None)
    assert outcome(second) == outcome(first)


@pytest.mark.parametrize("change", STDIN_CHANGES)
def test_the_shared_empty_stdin_is_as_made_for_the_next_job(sandbox, change):
    """Jobs without stdin text share one empty stream (made again when a job changed
    it): whatever a job did to it, the next job's stdin is the one a fresh instance has,
    and a finalizer the program put on it writes into no job's output."""
    assert outcome(job(sandbox, "batch", code=STDIN_PROBE)) == ("ok", None, None,
                                                                 STDIN_AS_MADE, "")
    code = f"import sys, weakref\ndef f():\n    {change}\n"
    assert outcome(job(sandbox, "batch", code=code))[:2] == ("ok", None)
    assert outcome(job(sandbox, "batch", code=STDIN_PROBE)) == ("ok", None, None,
                                                                 STDIN_AS_MADE, "")
    assert_next_job_exact(sandbox, "batch")


# ====================================================================== entries
STACK = """\
class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)

    def pop(self):
        return self.items.pop()

    def __repr__(self):
        return f'Stack({self.items})'
"""


def test_method_chain_push_push_pop(sandbox):
    """The entry (the class) is called with ``input``, then each method on the object,
    all in one traced run: each call a depth-0 activation; the output is the last
    call's value, compared with ``expected``."""
    calls = [{"method": "push", "input": "1"}, {"method": "push", "input": "x=2"},
             {"method": "pop", "input": ""}]
    result = job(sandbox, code=STACK, entry="Stack", calls=calls, expected="2")
    assert (result["status"], result["output"], result["output_type"],
            result["output_matches"]) == ("ok", "2", "int", True)
    assert steps_of(result) == [
        ("call", "Stack.__init__", 2, 0, 0), ("line", "Stack.__init__", 3, 0, 0),
        ("return", "Stack.__init__", 3, 0, 0),
        ("call", "Stack.push", 5, 0, 1), ("line", "Stack.push", 6, 0, 1),
        ("return", "Stack.push", 6, 0, 1),
        ("call", "Stack.push", 5, 0, 2), ("line", "Stack.push", 6, 0, 2),
        ("return", "Stack.push", 6, 0, 2),
        ("call", "Stack.pop", 8, 0, 3), ("line", "Stack.pop", 9, 0, 3),
        ("return", "Stack.pop", 9, 0, 3)]
    assert states_of(result) == [
        # rendered by its attributes (its __repr__ never runs while recording): none yet
        (0, "self", "Stack()", "Stack"),
        (2, "self", "Stack(items=[])", "Stack"), (2, "<return>", "None", "NoneType"),
        (3, "self", "Stack(items=[])", "Stack"), (3, "x", "1", "int"),
        (5, "self", "Stack(items=[1])", "Stack"), (5, "<return>", "None", "NoneType"),
        (6, "self", "Stack(items=[1])", "Stack"), (6, "x", "2", "int"),
        (8, "self", "Stack(items=[1, 2])", "Stack"), (8, "<return>", "None", "NoneType"),
        (9, "self", "Stack(items=[1, 2])", "Stack"), (11, "self", "Stack(items=[1])", "Stack"),
        (11, "<return>", "2", "int")]
    assert (result["calls"], result["max_depth"]) == (4, 0)


def test_dotted_entry(sandbox):
    """``Math.square`` (a staticmethod) and an unbound ``Stack.pop`` called on an object
    the input makes."""
    code = "class Math:\n    @staticmethod\n    def square(x):\n        return x * x\n"
    result = job(sandbox, code=code, entry="Math.square", input="3", expected="9")
    assert (result["status"], result["output"], result["output_matches"]) == ("ok", "9", True)
    assert steps_of(result) == [("call", "Math.square", 2, 0, 0),
                                ("line", "Math.square", 4, 0, 0),
                                ("return", "Math.square", 4, 0, 0)]
    result = job(sandbox, code=STACK, entry="Stack.__repr__", input="Stack()")
    assert (result["status"], result["output"]) == ("ok", "'Stack([])'")
    result = job(sandbox, code=STACK, entry="Stack.nope", input="")
    assert outcome(result) == (
        "invalid", None, "entry 'Stack.nope' cannot be looked up: AttributeError: type "
        "object 'Stack' has no attribute 'nope'", None, "")
    result = job(sandbox, code=STACK, entry="Queue.push", input="")
    assert outcome(result) == ("invalid", None, "entry 'Queue.push' is not defined by the "
                                                 "program", None, "")
    result = job(sandbox, code=STACK + "LIMIT = 3\n", entry="LIMIT.real", input="")
    assert outcome(result) == ("invalid", None, "entry 'LIMIT.real' is not callable", None, "")


@pytest.mark.parametrize("calls, message", [
    ([{"method": "peek", "input": ""}], "calls[0]: Stack has no method 'peek'"),
    ([{"method": "push", "input": "1"}, {"method": "items", "input": ""}],
     "calls[1]: Stack.items is not callable"),
    ([{"method": "push", "input": "1), (2"}],
     "calls[0] (push): input does not parse as call arguments: input is not a plain "
     "argument list"),
    ([{"method": "push", "input": "undefined_name"}],
     "calls[0] (push): input does not evaluate: NameError: name 'undefined_name' is not "
     "defined"),
    ([{"method": "push"}] * 10_000, "'calls' has more than 1,000 methods"),
    ([{"method": "push()", "input": ""}],
     "'calls' entries must be {\"method\": name, \"input\": arguments}"),
])
def test_a_bad_chain_is_invalid(sandbox, calls, message):
    result = job(sandbox, "batch", code=STACK, entry="Stack", calls=calls)
    assert outcome(result) == ("invalid", None, message, None, "")
    assert_next_job_exact(sandbox, "batch")


HOSTILE_GETATTR = """\
class Weird:
    def __getattr__(self, name):
        if name == 'boom':
            raise KeyError(name)
        if name == 'deep':
            return self.deep
        if name == 'loud':
            print('x' * 70_000)
        return 42
"""


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("method, want", [
    ("boom", ("invalid", None, "calls[0]: looking up Weird.boom raised KeyError: 'boom'",
              None, "")),
    ("deep", ("invalid", None, "calls[0]: looking up Weird.deep raised RecursionError: "
                               "maximum recursion depth exceeded", None, "")),
    ("other", ("invalid", None, "calls[0]: Weird.other is not callable", None, "")),
])
def test_a_chain_whose_getattr_misbehaves(sandbox, isolation, method, want):
    """The lookup is program code (traced); what it raises or returns makes the chain
    invalid with a clear message, and the next job is exact."""
    result = job(sandbox, isolation, code=HOSTILE_GETATTR, entry="Weird",
                 calls=[{"method": method, "input": ""}])
    assert outcome(result) == want
    assert_next_job_exact(sandbox, isolation)


def test_a_getattr_that_floods_stdout_is_output_limit(sandbox):
    """A limit hit inside the lookup is that limit's status, not ``invalid``."""
    result = job(sandbox, "batch", code=HOSTILE_GETATTR, entry="Weird",
                 calls=[{"method": "loud", "input": ""}])
    assert (result["status"], result["exception_message"], len(result["stdout"])) == (
        "output_limit", "stdout exceeds 65536 characters", 65_536)
    assert_next_job_exact(sandbox, "batch")


# ====================================================================== test drivers
CALC = "class Calc:\n    def add(self, a, b):\n        return a + b\n"
CALC_TESTS = """\
import unittest

class TestCalc(unittest.TestCase):
    def setUp(self):
        self.calc = Calc()

    def test_add(self):
        self.assertEqual(self.calc.add(1, 2), 3)

    def test_wrong(self):
        self.assertEqual(self.calc.add(2, 2), 5)

    def test_escape(self):
        import sys
        view = sys._getframe(0)
        chain = []
        while view is not None:
            chain.append((view.f_code.co_name, view.f_globals.get("__name__")))
            view = view.f_back
        raise ValueError(chain)

def helper(x):
    return Calc().add(x, x)
"""
CALC_STEPS = [("call", "Calc.add", 2, 0, 0), ("line", "Calc.add", 3, 0, 0),
              ("return", "Calc.add", 3, 0, 0)]


def test_a_passing_test_method(sandbox):
    """``TestCalc.test_add`` runs setUp and the test (test code untraced): only the code
    under test shows, at depth 0."""
    result = job(sandbox, code=CALC, test=CALC_TESTS, entry="TestCalc.test_add")
    assert outcome(result) == ("ok", None, None, "None", "")
    assert steps_of(result) == CALC_STEPS
    assert states_of(result) == [(0, "self", "Calc()", "Calc"), (0, "a", "1", "int"),
                                 (0, "b", "2", "int"), (2, "<return>", "3", "int")]
    assert result["states"]["object_id"] == [1, None, None, None]
    assert result["objects"] == {"type": ["Calc"], "step": [0]}  # made by setUp, untraced


def test_a_failing_test_method(sandbox):
    result = job(sandbox, code=CALC, test=CALC_TESTS, entry="TestCalc.test_wrong")
    assert outcome(result) == ("exception", "AssertionError", "4 != 5", None, "")
    assert steps_of(result) == CALC_STEPS


def test_a_plain_function_of_the_test_code_is_called(sandbox):
    result = job(sandbox, code=CALC, test=CALC_TESTS, entry="helper", input="4")
    assert outcome(result) == ("ok", None, None, "8", "")
    assert steps_of(result) == CALC_STEPS


def test_a_test_driver_cannot_reach_the_runner(sandbox):
    """Test code runs guarded like the program: ``sys._getframe`` gives frame views of
    the test method and unittest's frames below it, and none of the runner's."""
    result = job(sandbox, code=CALC, test=CALC_TESTS, entry="TestCalc.test_escape")
    assert outcome(result) == (
        "exception", "ValueError", "[('test_escape', '__main__'), ('_callTestMethod', "
        "'unittest.case'), ('debug', 'unittest.case')]", None, "")
    assert result["note"] is None
    assert steps_of(result) == []
    assert_next_job_exact(sandbox, "batch")


@pytest.mark.parametrize("request_fields, message", [
    ({"entry": "TestCalc.test_nope"},
     "entry 'TestCalc.test_nope' cannot be looked up: ValueError: no such test method in "
     "<class '__main__.TestCalc'>: test_nope"),
    ({"entry": "TestCalc.test_add", "input": "1"},
     "entry 'TestCalc.test_add' is a test method: it takes no input"),
    ({"entry": "helper", "test": "def helper(:\n"}, "syntax error in the test code: "
     "invalid syntax (line 1)"),
    ({"entry": "helper", "test": "raise ValueError('no')\n"},
     "test code failed at top level: ValueError: no"),
])
def test_bad_test_drivers_are_invalid(sandbox, request_fields, message):
    result = job(sandbox, **{"code": CALC, "test": CALC_TESTS, **request_fields})
    assert outcome(result)[:3] == ("invalid", result["exception_type"], message)


# ====================================================================== asyncio, threads
ASYNC = """\
import asyncio

async def tick(name, n):
    for i in range(n):
        await asyncio.sleep(0)
    return name * n

async def main():
    return await asyncio.gather(tick('a', 2), tick('b', 1))

def f():
    return asyncio.run(main())
"""


USES_ASYNCIO = "import asyncio\nasync def g():\n    return 2\ndef f():\n    return asyncio.run(g())\n"
CHANGES_THE_LOOP_CLASS = ("import asyncio\ndef f():\n    asyncio.SelectorEventLoop.x = 1\n"
                          "    return asyncio.SelectorEventLoop.x\n")
CHANGES_THE_SELECTOR_CLASS = ("import asyncio\ndef f():\n    loop = asyncio.new_event_loop()\n"
                              "    type(loop._selector).select = lambda self, t=None: 1 / 0\n"
                              "    loop.close()\n    return 1\n")


@pytest.mark.parametrize("code, changed", [(CHANGES_THE_LOOP_CLASS, "SandboxEventLoop"),
                                           (CHANGES_THE_SELECTOR_CLASS, "NoSelector")])
def test_a_program_may_change_asyncios_loop_classes(sandbox, code, changed):
    """The sandbox's event loop is asyncio's as a program sees it: changing its class
    (or its selector's) is the program's business, as changing any standard library
    class is (not ``tampered``); batch isolation puts it back and gives the next job a
    fresh instance, whose asyncio works as built."""
    result = job(sandbox, code=code)
    assert outcome(result) == ("ok", None, None, "1", "")
    assert result["note"] is None
    result = job(sandbox, "batch", code=code)
    assert outcome(result) == ("ok", None, None, "1", "")
    assert result["note"] == (f"changed shared interpreter state (exposed.{changed}); later "
                              "jobs ran in a fresh instance")
    assert outcome(job(sandbox, "batch", code=USES_ASYNCIO)) == ("ok", None, None, "2", "")
    assert_next_job_exact(sandbox, "batch")


def test_asyncio_two_coroutines(sandbox):
    """asyncio.run runs on the sandbox's event loop; coroutines are traced across their
    awaits (``yield``/``resume``), each at depth 1 (run by the loop, below f). Awaiting
    the finished gather raises StopIteration in main (CPython's RAISE event, from the
    future's iterator) before main returns."""
    result = job(sandbox, code=ASYNC)
    assert outcome(result) == ("ok", None, None, "['aa', 'b']", "")
    assert steps_of(result) == [
        ("call", "f", 11, 0, 0), ("line", "f", 12, 0, 0),
        ("call", "main", 8, 1, 1), ("line", "main", 9, 1, 1), ("yield", "main", 9, 1, 1),
        ("call", "tick", 3, 1, 2), ("line", "tick", 4, 1, 2), ("line", "tick", 5, 1, 2),
        ("yield", "tick", 5, 1, 2),
        ("call", "tick", 3, 1, 3), ("line", "tick", 4, 1, 3), ("line", "tick", 5, 1, 3),
        ("yield", "tick", 5, 1, 3),
        ("resume", "tick", 5, 1, 2), ("line", "tick", 4, 1, 2), ("line", "tick", 5, 1, 2),
        ("yield", "tick", 5, 1, 2),
        ("resume", "tick", 5, 1, 3), ("line", "tick", 4, 1, 3), ("line", "tick", 6, 1, 3),
        ("return", "tick", 6, 1, 3),
        ("resume", "tick", 5, 1, 2), ("line", "tick", 4, 1, 2), ("line", "tick", 6, 1, 2),
        ("return", "tick", 6, 1, 2),
        ("resume", "main", 9, 1, 1), ("raise", "main", 9, 1, 1), ("return", "main", 9, 1, 1),
        ("return", "f", 12, 0, 0)]
    assert states_of(result) == [
        # asyncio's Future subclass (a class written in Python) whose attributes are in
        # an instance dict no C descriptor reads: rendered without them
        (4, "<yield>", "_GatheringFuture()", "_GatheringFuture"),
        (5, "name", "'a'", "str"), (5, "n", "2", "int"), (7, "i", "0", "int"),
        (8, "<yield>", "None", "NoneType"),
        (9, "name", "'b'", "str"), (9, "n", "1", "int"), (11, "i", "0", "int"),
        (12, "<yield>", "None", "NoneType"),
        (15, "i", "1", "int"), (16, "<yield>", "None", "NoneType"),
        (20, "<return>", "'b'", "str"), (24, "<return>", "'aa'", "str"),
        (26, "<exception>", "StopIteration(['aa', 'b'])", "StopIteration"),
        (27, "<return>", "['aa', 'b']", "list"), (28, "<return>", "['aa', 'b']", "list")]


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_asyncio_leaves_the_next_job_exact(sandbox, isolation):
    """A job that leaves an event loop set and running state behind: the next job finds
    no current loop, runs asyncio again the same way, and is exact."""
    code = ("import asyncio\nasync def m():\n    return 1\ndef f():\n"
            "    loop = asyncio.new_event_loop()\n    asyncio.set_event_loop(loop)\n"
            "    asyncio.events._set_running_loop(loop)\n    return 1\n")
    assert outcome(job(sandbox, isolation, code=code)) == ("ok", None, None, "1", "")
    assert outcome(job(sandbox, isolation, code=ASYNC)) == ("ok", None, None, "['aa', 'b']", "")
    assert_next_job_exact(sandbox, isolation)


@pytest.mark.parametrize("code, want", [
    # no loop is current in a job (the interpreter's own, componentize-py's, is hidden)
    ("import asyncio\ndef f():\n    try:\n        asyncio.get_event_loop()\n"
     "    except RuntimeError as e:\n        return str(e)\n",
     ("ok", None, None, "\"There is no current event loop in thread 'MainThread'.\"", "")),
    ("import asyncio\nasync def m():\n    await asyncio.sleep(0.001)\n    return 5\n"
     "def f():\n    loop = asyncio.new_event_loop()\n"
     "    return loop.run_until_complete(m()), asyncio.run(m(), loop_factory=asyncio.EventLoop)\n",
     ("ok", None, None, "(5, 5)", "")),
    ("import asyncio\nasync def m():\n    await asyncio.Event().wait()\n"
     "def f():\n    asyncio.run(m())\n",
     ("exception", "RuntimeError", "the event loop would wait forever: no task is ready and "
                                   "no timer is set", None, "")),
    ("import asyncio\nasync def m():\n    await asyncio.open_connection('127.0.0.1', 80)\n"
     "def f():\n    asyncio.run(m())\n",
     ("exception", "PermissionError", "[Errno 2] Permission denied", None, "")),
])
def test_asyncio_in_the_sandbox(sandbox, code, want):
    assert outcome(job(sandbox, code=code)) == want


THREAD_STARTS = {
    "threading": "import threading\ndef f():\n    t = threading.Thread(target=print)\n"
                 "    try:\n        t.start()\n    except BaseException:\n        pass\n"
                 "    return 1\n",
    "_thread": "import _thread\ndef f():\n    _thread.start_new_thread(print, ())\n",
    "executor": "from concurrent.futures import ThreadPoolExecutor\ndef f():\n"
                "    with ThreadPoolExecutor() as pool:\n        return pool.submit(int).result()\n",
    "to_thread": "import asyncio\nasync def m():\n    return await asyncio.to_thread(int)\n"
                 "def f():\n    return asyncio.run(m())\n",
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", THREAD_STARTS)
def test_starting_a_thread_is_unsupported(sandbox, isolation, name):
    """Every way to start a thread stops the job there (the program cannot catch it and
    go on), and the next job is exact."""
    result = job(sandbox, isolation, code=THREAD_STARTS[name])
    assert outcome(result) == ("unsupported", None, THREADS, None, "")
    assert_next_job_exact(sandbox, isolation)


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_raising_the_thread_event_itself_is_a_thread_start(sandbox, isolation):
    """The guard sees a thread start by its audit event, which a program can also raise
    itself (``sys.audit``): that is the same request, and gets the same status as a
    thread actually started, caught or not. Nothing more: the run is never ``ok``, its
    output never matches, and the next job is exact."""
    code = ("import sys\ndef f():\n    try:\n        sys.audit('_thread.start_new_thread', "
            "print, (), {})\n    except BaseException:\n        pass\n    return 1\n")
    result = job(sandbox, isolation, code=code, expected="1")
    assert outcome(result) == ("unsupported", None, THREADS, None, "")
    assert result["output_matches"] is False
    assert_next_job_exact(sandbox, isolation)


def test_thread_start_steps(sandbox):
    result = job(sandbox, code=THREAD_STARTS["threading"])
    assert steps_of(result) == [("call", "f", 2, 0, 0), ("line", "f", 3, 0, 0),
                                ("line", "f", 4, 0, 0), ("line", "f", 5, 0, 0)]


# ====================================================================== bounds
def test_huge_stdin_is_refused_and_the_next_job_is_exact(sandbox):
    text = "x" * (16 * 1024 * 1024 + 1)
    result = job(sandbox, "batch", code="print(len(input()))\n", input=text, shape="script")
    assert outcome(result) == ("invalid", None, "stdin is longer than 16,777,216 characters",
                               None, "")
    assert_next_job_exact(sandbox, "batch")


@pytest.mark.parametrize("request_fields, message", [
    ({"shape": "module"}, "unknown 'shape'; use one of call, script"),
    ({"shape": "script", "stdin": "x"},
     "a script takes no 'stdin', 'test' or 'calls' (its 'input' is its stdin)"),
    ({"stdin": 3}, "'stdin' must be a string"),
    ({"test": ["x"]}, "'test' must be a string"),
    ({"calls": {"method": "f"}}, "'calls' must be a list"),
    ({"entry": "a..b"}, "'entry' must be a name or a dotted path of names"),
])
def test_bad_shape_fields_are_invalid(sandbox, request_fields, message):
    result = job(sandbox, **{"code": KNOWN, "input": "1", **request_fields})
    assert outcome(result) == ("invalid", None, message, None, "")
