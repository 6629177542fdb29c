"""Every limit gives its own status and a clear message, and the sandbox keeps working.

Three sandboxes with tight limits (64 MiB, so all share one compiled ``.cwasm``):

* ``tight``: 1,000 steps, 100 characters of stdout, reprs of 20 and outputs of 30 chars;
* ``slow``: a step limit too high to be reached, so runaway loops end in ``timeout``;
* ``roomy``: neither steps nor time (60 s) in reach, for deep recursion, which must end
  as RecursionError on any machine, however slow or busy.

Each test checks the job after the limit in the same Sandbox too.
"""

from __future__ import annotations

import gc
import re

import pytest

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

MEMORY_MB = 64
TIGHT = Limits(timeout_s=5.0, memory_mb=MEMORY_MB, max_steps=1000, max_stdout=100,
               max_repr=20, max_output=30)
SLOW = Limits(timeout_s=0.3, memory_mb=MEMORY_MB, max_steps=10**9)  # for jobs that must time out
# Deep recursion, traced: its end must be RecursionError however slow the machine is.
ROOMY = Limits(timeout_s=60.0, memory_mb=MEMORY_MB, max_steps=10**9)

OK_PROGRAM = "def f(a, b):\n    c = a + b\n    return c * 2\n"


@pytest.fixture(scope="module")
def tight():
    with Sandbox(TIGHT) as box:
        yield box


@pytest.fixture(scope="module")
def slow():
    with Sandbox(SLOW) as box:
        yield box


@pytest.fixture(scope="module")
def roomy():
    with Sandbox(ROOMY) as box:
        yield box


@pytest.fixture(autouse=True)
def _collect_trapped_instances():
    """Trapped instances are only freed by the cycle collector (see
    test_consecutive_timeouts_do_not_exhaust_instance_slots): collect between tests so
    one test's traps cannot leak into the next test's results."""
    gc.collect()
    yield
    gc.collect()


def run_in(box: Sandbox, code: str, input: str = "", expected: str | None = None,
           entry: str = "f") -> dict:
    return box.run({"code": code, "input": input, "expected": expected, "entry": entry}).result


def assert_still_works(box: Sandbox) -> None:
    """The next job in the same Sandbox runs normally."""
    result = run_in(box, OK_PROGRAM, "3, 4", expected="14")
    assert (result["status"], result["output"], result["output_matches"]) == ("ok", "14", True)
    assert result["exception_message"] is None


def status_message(result: dict) -> tuple:
    return result["status"], result.get("exception_type"), result["exception_message"]


# ---------------------------------------------------------------------------- timeout

TIMEOUT = ("timeout", None, "exceeded the 0.3 s time limit")


def test_python_busy_loop_times_out(slow):
    """`while True: i += 1` in f: epoch interruption stops it with status timeout. (Its
    state grows: `while True: pass` is proved to loop, status loops: test_loops.py.)"""
    result = run_in(slow, "def f():\n    i = 0\n    while True: i += 1\n")
    assert status_message(result) == TIMEOUT
    assert_still_works(slow)


def test_multiline_loop_times_out_when_steps_are_unlimited(slow):
    """A loop whose every iteration is traced also ends in timeout, not in another status."""
    result = run_in(slow, "def f():\n    i = 0\n    while True:\n        i += 1\n")
    assert status_message(result) == TIMEOUT
    assert_still_works(slow)


def test_c_level_loop_times_out(slow):
    """`sum(range(10**12))` never returns to Python code, and still times out."""
    result = run_in(slow, "def f():\n    return sum(range(10**12))\n")
    assert status_message(result) == TIMEOUT
    assert_still_works(slow)


def test_timeout_in_module_top_level(slow):
    """A runaway loop at the program's top level (before f exists) also times out."""
    result = run_in(slow, "i = 0\nwhile True:\n    i += 1\n\ndef f():\n    return 1\n")
    assert status_message(result) == TIMEOUT
    assert_still_works(slow)


def test_consecutive_timeouts_do_not_exhaust_instance_slots(slow):
    """Six timeouts in a row, then a normal job: each trapped instance must be released.
    The pooling allocator has 4 component-instance slots; a trapped store must not keep
    one (a worker's chunk can hold several timeouts in a row)."""
    gc.collect()
    gc.disable()  # as in a worker between collections: no cycle collection happens
    try:
        statuses = [run_in(slow, "def f():\n    i = 0\n    while True: i += 1\n")["status"]
                    for _ in range(6)]
        after = run_in(slow, OK_PROGRAM, "3, 4")
    finally:
        gc.enable()
    assert statuses == ["timeout"] * 6
    assert (after["status"], after["output"], after["exception_message"]) == ("ok", "14", None)


# ---------------------------------------------------------------------------- step limit

STEP_LIMIT = ("step_limit", None, "trace exceeds 1000 steps")


def test_step_limit(tight):
    """An endless traced loop stops at exactly max_steps recorded steps."""
    result = run_in(tight, "def f():\n    i = 0\n    while True:\n        i += 1\n")
    assert status_message(result) == STEP_LIMIT
    assert len(result["steps"]["event"]) == 1000
    assert result["output"] is None
    assert_still_works(tight)


def test_step_limit_survives_except_base_exception_in_a_loop(tight):
    """A program that catches BaseException around the loop and loops again cannot
    outlive the stop: the tracer re-raises at its next event."""
    code = ("def f():\n"
            "    survived = 0\n"
            "    while True:\n"
            "        try:\n"
            "            while True:\n"
            "                survived += 1\n"
            "        except BaseException:\n"
            "            survived += 1\n")
    result = run_in(tight, code)
    assert status_message(result) == STEP_LIMIT
    assert len(result["steps"]["event"]) == 1000
    assert_still_works(tight)


def test_step_limit_wins_over_a_normal_return_after_catching(tight):
    """Catching the stop and returning a value still reports step_limit, with no output."""
    code = ("def f():\n"
            "    try:\n"
            "        while True:\n"
            "            pass\n"
            "    except BaseException:\n"
            "        return 'survived'\n")
    result = run_in(tight, code, expected="'survived'")
    assert status_message(result) == STEP_LIMIT
    assert (result["output"], result["output_matches"]) == (None, False)
    assert_still_works(tight)


# ---------------------------------------------------------------------------- memory

MEMORY_IN_CALL = ("memory_limit", "MemoryError", "MemoryError: the program ran out of memory")


def test_unbounded_allocation_hits_memory_limit(tight):
    """Appending 1 MB strings forever ends in memory_limit (64 MiB), not a crash."""
    code = "def f():\n    kept = []\n    while True:\n        kept.append('x' * (1 << 20))\n"
    result = run_in(tight, code)
    assert status_message(result) == MEMORY_IN_CALL
    assert_still_works(tight)


@pytest.mark.parametrize("expression", ["'x' * 10**9", "[0] * 10**8", "[0] * 10**9",
                                        "bytearray(10**9)"])
def test_one_huge_allocation_hits_memory_limit(tight, expression):
    """One allocation far above 64 MiB (but addressable in wasm32) is a MemoryError."""
    result = run_in(tight, f"def f():\n    return len({expression})\n")
    assert status_message(result) == MEMORY_IN_CALL
    assert_still_works(tight)


@pytest.mark.parametrize("expression", ["'x' * 10**10", "[0] * 10**10"])
def test_allocation_beyond_the_wasm32_address_space_is_overflow_error(tight, expression):
    """10**10 items do not fit wasm32's 32-bit Py_ssize_t: CPython (as on any 32-bit build)
    raises OverflowError before allocating, so the status is exception, not memory_limit."""
    result = run_in(tight, f"def f():\n    return len({expression})\n")
    assert status_message(result) == ("exception", "OverflowError",
                                      "cannot fit 'int' into an index-sized integer")
    assert_still_works(tight)


def test_memory_limit_at_top_level(tight):
    """A huge allocation at the program's top level is memory_limit, with its own message."""
    result = run_in(tight, "data = 'x' * 10**9\n\ndef f():\n    return 1\n")
    assert status_message(result) == ("memory_limit", "MemoryError",
                                      "MemoryError while running the program's top level")
    assert_still_works(tight)


def test_memory_limit_while_evaluating_input(tight):
    """An input whose evaluation exhausts memory is memory_limit, not invalid."""
    result = run_in(tight, "def f(x):\n    return len(x)\n", "'x' * 10**9")
    assert status_message(result) == ("memory_limit", "MemoryError",
                                      "MemoryError while evaluating the input")
    assert_still_works(tight)


# ---------------------------------------------------------------------------- output

def test_unbounded_print_hits_output_limit(tight):
    """Printing forever stops with output_limit; stdout keeps exactly max_stdout chars."""
    result = run_in(tight, "def f():\n    while True: print('hello')\n")
    assert status_message(result) == ("output_limit", None, "stdout exceeds 100 characters")
    assert result["stdout"] == ("hello\n" * 17)[:100]
    assert len(result["stdout"]) == 100
    assert_still_works(tight)


def test_one_huge_print_hits_output_limit(tight):
    """A single print above the limit is cut at exactly max_stdout characters."""
    result = run_in(tight, "def f():\n    print('y' * 1000)\n    return 1\n")
    assert status_message(result) == ("output_limit", None, "stdout exceeds 100 characters")
    assert result["stdout"] == "y" * 100
    assert result["output"] is None
    assert_still_works(tight)


def test_output_limit_survives_catching(tight):
    """Catching the output stop and printing again still ends in output_limit."""
    code = ("def f():\n"
            "    for _ in range(10):\n"
            "        try:\n"
            "            print('x' * 1000)\n"
            "        except BaseException:\n"
            "            pass\n"
            "    return 'survived'\n")
    result = run_in(tight, code)
    assert status_message(result) == ("output_limit", None, "stdout exceeds 100 characters")
    assert (result["stdout"], result["output"]) == ("x" * 100, None)
    assert_still_works(tight)


def test_stderr_has_the_same_limit(tight):
    """Writing to stderr is bounded the same way and the message names stderr."""
    result = run_in(tight, "import sys\n\ndef f():\n    sys.stderr.write('z' * 1000)\n")
    assert status_message(result) == ("output_limit", None, "stderr exceeds 100 characters")
    assert_still_works(tight)


def test_trace_size_limit():
    """max_trace_chars: variable states above the budget stop the run with output_limit."""
    with Sandbox(Limits(memory_mb=MEMORY_MB, max_trace_chars=100)) as box:
        code = "def f():\n    s = 'a' * 50\n    t = 'b' * 50\n    return 1\n"
        result = run_in(box, code)
        assert status_message(result) == ("output_limit", None,
                                          "trace exceeds its size limit (variable states)")
        assert_still_works(box)


def test_result_size_limit():
    """max_result_bytes: a guest result above the budget becomes output_limit on the host."""
    with Sandbox(Limits(memory_mb=MEMORY_MB, max_result_bytes=3000)) as box:
        result = run_in(box, "def f():\n    return 'x' * 5000\n")
        assert result == {"status": "output_limit",
                          "exception_message": "trace result exceeds 3000 bytes"}
        assert_still_works(box)


# ---------------------------------------------------------------------------- recursion

def test_unbounded_recursion_is_recursion_error(roomy):
    """Recursion without bound ends as the program's own RecursionError (status
    exception), not a crash, a timeout or a step limit."""
    result = run_in(roomy, "def f(n=0):\n    return f(n + 1)\n")
    assert status_message(result) == ("exception", "RecursionError",
                                      "maximum recursion depth exceeded")
    assert_still_works(roomy)


RECURSIVE = "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n"


def test_entry_recursion_depth_matches_plain_cpython(roomy):
    """RECURSION_HEADROOM promises the program's own depth equals plain CPython's: with
    `assert f(n) == ...` at module level, CPython 3.12+ (limit 1000) runs f(998) and
    raises RecursionError for f(999)."""
    deepest_ok = run_in(roomy, RECURSIVE, "998")
    assert (deepest_ok["status"], deepest_ok["output"]) == ("ok", "998")
    too_deep = run_in(roomy, RECURSIVE, "999")
    assert status_message(too_deep) == ("exception", "RecursionError",
                                        "maximum recursion depth exceeded")


def test_top_level_recursion_depth_matches_plain_cpython(roomy):
    """Top-level code gets the same depth as a plain CPython script: f(998) called at
    module level works there (module frame + 999 frames of f = the limit of 1000)."""
    result = run_in(roomy, RECURSIVE + "\nDEPTH = f(998)\n\ndef g():\n    return DEPTH\n",
                    entry="g")
    assert (result["status"], result["exception_message"], result["output"]) == ("ok", None, "998")


def test_deepest_frame_locals_are_recorded_truthfully(roomy):
    """The tracer's callbacks must not fail near the recursion limit: every recorded value
    of n is its real repr, never '<repr failed: RecursionError>'."""
    result = run_in(roomy, "def f(n=0):\n    return f(n + 1)\n")
    states = result["states"]
    values = [value for var, value in zip(states["var"], states["value"]) if var == "n"]
    assert len(values) >= 999
    assert values == [str(i) for i in range(len(values))]


# ---------------------------------------------------------------------------- invalid

@pytest.mark.parametrize(("code", "message"), [
    ("def f(:\n    pass\n", "syntax error: invalid syntax (line 1)"),
    ("x = 1\n\ndef f(\n", "syntax error: '(' was never closed (line 3)"),
    ("x = 1\ny = )\n", "syntax error: unmatched ')' (line 2)"),
])
def test_syntax_error_is_invalid_and_names_the_line(tight, code, message):
    """A program that does not compile is invalid; the message gives the line."""
    result = run_in(tight, code)
    assert status_message(result) == ("invalid", "SyntaxError", message)
    assert result["line_steps"] == 0
    assert_still_works(tight)


def test_missing_entry_is_invalid(tight):
    """No function named like the entry: invalid, naming the entry."""
    result = run_in(tight, "def g():\n    return 1\n")
    assert status_message(result) == ("invalid", None,
                                      "entry function 'f' is not defined by the program")
    result = run_in(tight, "def f():\n    return 1\n", entry="solve")
    assert status_message(result) == ("invalid", None,
                                      "entry function 'solve' is not defined by the program")
    assert_still_works(tight)


def test_entry_not_callable_is_invalid(tight):
    """An entry that is bound to a non-callable is invalid."""
    result = run_in(tight, "f = 3\n")
    assert status_message(result) == ("invalid", None, "entry 'f' is not callable")
    assert_still_works(tight)


@pytest.mark.parametrize(("input_text", "message"), [
    ("1, 2)", "input does not parse as call arguments: unmatched ')'"),
    (")", "input does not parse as call arguments: unmatched ')'"),
    ("1; 2", "input does not parse as call arguments: invalid syntax"),
    ("1), (2", "input does not parse as call arguments: input is not a plain argument list"),
    # no ")": compiled as it is; the compiler's own refusals read the same either way
    ("await x", "input does not parse as call arguments: 'await' outside function"),
    ("(await x)", "input does not parse as call arguments: 'await' outside function"),
    ("[1, 2", "input does not parse as call arguments: closing parenthesis ')' does not "
              "match opening parenthesis '[' on line 1"),
])
def test_input_that_does_not_parse_is_invalid(tight, input_text, message):
    """Input text that is not an argument list (including one that closes the call early
    and opens another expression) is invalid, and f never runs."""
    result = run_in(tight, "def f(*args):\n    return args\n", input_text)
    assert status_message(result) == ("invalid", None, message)
    assert result["calls"] == 0
    assert_still_works(tight)


def test_input_that_does_not_evaluate_is_invalid(tight):
    """Input that parses but raises (NameError) is invalid with the exception named."""
    result = run_in(tight, "def f(*args):\n    return args\n", "undefined_name")
    assert status_message(result) == (
        "invalid", None, "input does not evaluate: NameError: name 'undefined_name' is not defined")
    assert result["calls"] == 0
    assert_still_works(tight)


def test_top_level_exception_is_invalid(tight):
    """A program whose top level raises is invalid; type and message are reported."""
    result = run_in(tight, "raise ValueError('boom')\n\ndef f():\n    return 1\n")
    assert status_message(result) == ("invalid", "ValueError",
                                      "program failed at top level: ValueError: boom")
    assert_still_works(tight)


def test_expected_that_does_not_evaluate(tight):
    """The call itself is fine (ok, output kept); a bad expected gives output_matches
    False and a note saying why."""
    result = run_in(tight, "def f(x):\n    return x + 1\n", "1", expected="undefined_name")
    assert (result["status"], result["output"], result["output_matches"]) == ("ok", "2", False)
    assert result["note"] == ("expected output does not evaluate: "
                              "NameError: name 'undefined_name' is not defined")
    result = run_in(tight, "def f(x):\n    return x + 1\n", "1", expected="(2,")
    assert (result["status"], result["output_matches"]) == ("ok", False)
    assert result["note"] == ("expected output does not evaluate: "
                              "SyntaxError: '(' was never closed (<expected>, line 1)")
    assert_still_works(tight)


# ---------------------------------------------------------------------------- truncation

def test_max_repr_truncates_variable_states(tight):
    """A local whose repr is longer than max_repr (20) is cut to exactly 20 characters
    and flagged; short values are not flagged."""
    code = "def f():\n    s = 'a' * 100\n    l = list(range(100))\n    n = 7\n    return n\n"
    result = run_in(tight, code)
    assert result["status"] == "ok"
    states = result["states"]
    rows = list(zip(states["var"], states["value"], states["type"], states["truncated"]))
    assert rows == [
        ("s", "'" + "a" * 19, "str", True),
        ("l", "[0, 1, 2, 3, 4, 5, 6", "list", True),
        ("n", "7", "int", False),
        ("<return>", "7", "int", False),
    ]
    assert all(len(value) == 20 for _, value, _, cut in rows if cut)


def test_max_output_truncates_the_return_value(tight):
    """A return value whose repr is longer than max_output (30) is cut to exactly 30
    characters with output_truncated; the <return> state obeys max_repr (20)."""
    result = run_in(tight, "def f():\n    return 'a' * 100\n")
    assert (result["status"], result["output_type"], result["output_truncated"]) == ("ok", "str", True)
    assert result["output"] == "'" + "a" * 29
    result = run_in(tight, "def f():\n    return list(range(100))\n")
    assert result["output"] == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9,"
    assert len(result["output"]) == 30 and result["output_truncated"] is True
    assert result["states"]["value"][-1] == "[0, 1, 2, 3, 4, 5, 6"
    assert result["states"]["truncated"][-1] is True


def test_short_output_is_not_truncated(tight):
    """An output within max_output is whole and not flagged."""
    result = run_in(tight, "def f():\n    return 'a' * 10\n")
    assert (result["output"], result["output_truncated"]) == ("'" + "a" * 10 + "'", False)


def test_limits_reject_non_positive_values():
    """A zero or negative limit is refused when the Limits are made, naming the limit."""
    with pytest.raises(ValueError, match=re.escape("limit max_steps must be positive, got 0")):
        Limits(max_steps=0)
    with pytest.raises(ValueError, match=re.escape("limit timeout_s must be positive, got -1")):
        Limits(timeout_s=-1)
