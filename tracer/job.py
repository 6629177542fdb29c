"""One traced job inside the sandbox: compile, evaluate the call's arguments, run, report.

The request and the result are plain dicts (JSON on the wire); the request's ``mode``
(see MODES) says whether the call is traced. Everything the program can get wrong becomes
a status with a message, never an exception out of ``run_job``:

``ok``            the call returned
``exception``     the call raised (``exception_type``/``exception_message`` say what)
``invalid``       syntax error, import-time failure, missing entry, input that does not parse
                  or evaluate, bad request
``step_limit``    more steps than ``max_steps``
``memory_limit``  ``MemoryError`` (the host caps linear memory; a trap is classified there)
``output_limit``  stdout/stderr above ``max_stdout`` characters, or variable states above
                  ``max_trace_chars``
``tampered``      the program freed or reconfigured the tracer's sys.monitoring tool
(``timeout`` and ``crashed`` are decided by the host: the guest cannot see its own trap.)
"""

from __future__ import annotations

import ast
import builtins
import opcode
import sys
import time
from types import CodeType
# Bound here, not looked up in builtins at each use: a program may rebind builtins.
from builtins import bool, callable, compile, dict, eval, exec, isinstance, list, str, type, zip  # noqa: A004

from analysis import Recorder, instrument
from guest_io import BoundedWriter, RecursionGuard, StopTracing, collect_arguments
from sysmon_tracer import EVENT_NAMES, Tracer, restore_monitoring

# trace: the traced call; analyse: the instrumented program, untraced (analysis.py);
# run: the program as it is, untraced (checks of predicted inputs)
MODES = ("trace", "analyse", "run")
PROGRAM_FILE = "<program>"
INPUT_FILE = "<input>"
EXPECTED_FILE = "<expected>"
ARGS_HELPER = "__steptrace_args__"

DEFAULT_LIMITS = {
    "max_steps": 100_000,
    "max_repr": 1_000,
    "max_stdout": 65_536,
    "max_output": 100_000,
    "max_trace_chars": 32_000_000,
}
# One tracer for the life of the interpreter, installed when the guest is pre-initialised
# (see Tracer.install); each job resets its recording state.
TRACER = Tracer(PROGRAM_FILE)


def python_depth() -> int:
    """Python frames on the stack below the caller."""
    depth, frame = 0, sys._getframe(1)
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _invalid(result: dict, message: str) -> dict:
    result["status"] = "invalid"
    result["exception_message"] = message
    return result


# What a program needs in order to rebind another module's state: an attribute store or
# delete (``math.pi = 3``), or one of these names. A job whose code has none of them cannot
# have changed shared state, so batch isolation skips the (costly) module comparison.
_STATE_OPCODES = bytes(opcode.opmap[name] for name in ("STORE_ATTR", "DELETE_ATTR"))
_STATE_NAMES = frozenset({
    "setattr", "delattr", "vars", "__dict__", "__setattr__", "__delattr__", "exec", "eval",
    "compile", "__import__", "importlib", "modules", "__builtins__", "builtins", "getattr",
    "globals", "reload", "__class__", "__getattribute__", "__globals__", "__code__",
})


def may_touch_shared_state(codes: list) -> bool:
    """Conservative: True if any code object (or one nested in it) could rebind state
    outside the program's own namespace."""
    stack = list(codes)
    while stack:
        code = stack.pop()
        operations = code.co_code[::2]
        if any(op in operations for op in _STATE_OPCODES):
            return True
        if not _STATE_NAMES.isdisjoint(code.co_names):
            return True
        stack.extend(const for const in code.co_consts if type(const) is CodeType)
    return False


def _out_of_memory(result: dict, message: str) -> None:
    result["status"] = "memory_limit"
    result["exception_type"] = "MemoryError"
    result["exception_message"] = message


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # a program exception whose __str__ fails
        return f"<{type(exc).__name__}: str() failed>"


def compile_call_arguments(input_text: str) -> CodeType:
    """Compile ``input_text`` as the inside of a call, exactly as ``f(<input>)`` would read it
    (trailing commas, keywords, ``*args``, comments): ``ARGS_HELPER(<input>)``. Raises
    SyntaxError or ValueError.

    Text without a ``)`` cannot close the helper's parenthesis early, so the expression is
    the helper's call and the text is compiled as it is. Otherwise (``1), g(2``) it is
    parsed first and refused unless its top level is that call: the round trip through
    Python's AST objects costs ~30 µs a job in the guest, so only the 4% of CRUXEval
    inputs with a ``)`` pay it."""
    source = f"{ARGS_HELPER}({input_text}\n)"
    if ")" not in input_text:
        return compile(source, INPUT_FILE, "eval")
    tree = ast.parse(source, INPUT_FILE, mode="eval")
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == ARGS_HELPER):
        raise ValueError("input is not a plain argument list")
    return compile(tree, INPUT_FILE, "eval")


def new_result() -> dict:
    return {
        "status": None, "exception_type": None, "exception_message": None,
        "output": None, "output_type": None, "output_truncated": False,
        "output_matches": None, "note": None, "stdout": "",
        "line_steps": 0, "instruction_steps": 0, "calls": 0, "max_depth": -1,
        "call_us": 0, "events": list(EVENT_NAMES), "funcs": [],
        "steps": {"event": [], "line": [], "depth": [], "frame": [], "func": []},
        "states": {"step": [], "var": [], "value": [], "type": [], "truncated": []},
    }


def run_job(request: dict) -> dict:
    """Run one job; return the result dict. Never raises (but MemoryError may escape if the
    guest cannot even build a result; the host turns the trap into ``memory_limit``)."""
    result = new_result()
    limits = dict(DEFAULT_LIMITS)
    limits.update(request.get("limits") or {})
    code_text = request.get("code")
    input_text = request.get("input", "")
    entry = request.get("entry") or "f"
    if not isinstance(code_text, str) or not isinstance(input_text, str):
        return _invalid(result, "request needs string 'code' and 'input'")
    stdout = BoundedWriter(limits["max_stdout"], "stdout")
    stderr = BoundedWriter(limits["max_stdout"], "stderr")
    saved = (sys.stdout, sys.stderr, dict(builtins.__dict__))
    sys.stdout, sys.stderr = stdout, stderr
    restore_monitoring()  # a previous job (batch isolation) may have rebound it
    guard = RecursionGuard()
    # The program's top level runs two levels above this frame (_run, then exec's entry
    # into the interpreter from C), as a script's top level runs above the interpreter's
    # own entry: calibrated so that top-level recursion fails where plain CPython's does.
    guard.install(python_depth() + 2)
    TRACER.refused = []
    TRACER.guarding = True  # from here on program code may run
    try:
        _run(request, result, limits, code_text, input_text, entry, stdout, stderr, guard)
        if TRACER.refused and result["status"] != "tampered":
            result["status"] = "tampered"
            result["exception_message"] = ("the program tried to reach interpreter internals ("
                                           + ", ".join(sorted(set(TRACER.refused))) + ")")
    finally:
        TRACER.guarding = False
        guard.restore()
        sys.stdout, sys.stderr = saved[0], saved[1]
        builtins.__dict__.clear()
        builtins.__dict__.update(saved[2])
        result["stdout"] = stdout.getvalue()
    return result


def _run(request, result, limits, code_text, input_text, entry, stdout, stderr,
         guard: RecursionGuard) -> None:
    mode = request.get("mode") or "trace"
    if mode not in MODES:
        _invalid(result, f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        return
    analysed = mode == "analyse"
    conditions: list = []
    try:
        if analysed:
            program, conditions = instrument(code_text, PROGRAM_FILE)
        else:
            program = compile(code_text, PROGRAM_FILE, "exec")
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        _invalid(result, f"syntax error: {getattr(exc, 'msg', None) or exc}{where}")
        result["exception_type"] = type(exc).__name__
        return
    result["codes"] = [program]
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    recorder = Recorder(len(conditions))
    if analysed:
        namespace.update(recorder.names())
    try:
        exec(program, namespace)
    except MemoryError:
        _out_of_memory(result, "MemoryError while running the program's top level")
        return
    except StopTracing as stop:
        result["status"], result["exception_message"] = stop.status, stop.message
        return
    except BaseException as exc:
        _invalid(result, f"program failed at top level: {type(exc).__name__}: {_describe(exc)}")
        result["exception_type"] = type(exc).__name__
        return
    function = namespace.get(entry)
    if function is None:
        _invalid(result, f"entry function {entry!r} is not defined by the program")
        return
    if not callable(function):
        _invalid(result, f"entry {entry!r} is not callable")
        return
    try:
        input_code = compile_call_arguments(input_text)
    except MemoryError:
        _out_of_memory(result, "MemoryError while parsing the input")
        return
    except (SyntaxError, ValueError) as exc:
        _invalid(result, f"input does not parse as call arguments: {getattr(exc, 'msg', exc)}")
        return
    result["codes"].append(input_code)
    namespace[ARGS_HELPER] = collect_arguments
    try:
        args, kwargs = eval(input_code, namespace)
    except MemoryError:
        _out_of_memory(result, "MemoryError while evaluating the input")
        return
    except BaseException as exc:
        _invalid(result, f"input does not evaluate: {type(exc).__name__}: {_describe(exc)}")
        return
    finally:
        namespace.pop(ARGS_HELPER, None)
    if mode != "trace":
        _untraced_call(request, result, limits, function, args, kwargs, namespace, recorder,
                       conditions, stdout, stderr)
        if not analysed:
            result.pop("analysis")
    else:
        _traced_call(request, result, limits, function, args, kwargs, namespace, stdout,
                     stderr, guard)


def _untraced_call(request, result, limits, function, args, kwargs, namespace,
                   recorder: Recorder, conditions: list, stdout, stderr) -> None:
    """The call without the tracer: of the instrumented program (``analyse``, see
    analysis.py), or of the program as it is (``run``: checking a predicted input)."""
    value = None
    raised: BaseException | None = None
    started = time.perf_counter_ns()
    recorder.active = True
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:
        raised = exc
    finally:
        recorder.active = False
        result["call_us"] = (time.perf_counter_ns() - started) // 1000
    args = kwargs = None
    _set_outcome(result, limits, value, raised, stdout, stderr)
    raised = None
    result["analysis"] = recorder.report(conditions)
    expected = request.get("expected")
    if expected is not None:
        _compare(result, value, expected, namespace)


def _set_outcome(result, limits, value, raised, stdout, stderr) -> None:
    """``status`` and output or exception of a call that returned or raised."""
    if stdout.overflow or stderr.overflow:
        result["status"] = "output_limit"
        result["exception_message"] = stdout.overflow or stderr.overflow
    elif isinstance(raised, MemoryError):
        _out_of_memory(result, "MemoryError: the program ran out of memory")
    elif isinstance(raised, StopTracing):
        result["status"], result["exception_message"] = raised.status, raised.message
    elif raised is not None:
        result["status"] = "exception"
        result["exception_type"] = type(raised).__name__
        result["exception_message"] = _describe(raised)
    else:
        result["status"] = "ok"
        text, truncated = _bounded(TRACER, value, limits["max_output"])
        result["output"], result["output_truncated"] = text, truncated
        result["output_type"] = type(value).__name__


def _traced_call(request, result, limits, function, args, kwargs, namespace,
                 stdout, stderr, guard: RecursionGuard) -> None:
    options = request.get("options") or {}
    tracer = TRACER
    if not tracer.installed or not tracer.intact():
        tracer.install()  # first use, or a previous job (batch isolation) freed the tool
    tracer.writers = (stdout, stderr)
    value = None
    raised: BaseException | None = None
    started = time.perf_counter_ns()
    tracer.begin_state(limits["max_steps"], limits["max_repr"], limits["max_trace_chars"],
                       count_instructions=options.get("instructions", True),
                       full_locals=options.get("full_locals", False))
    tracer.recursion = guard
    tracer.base_frame = tracer._frame(1)
    guard.trace_mode(True)
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:  # everything the program can raise, SystemExit included
        raised = exc
    finally:
        tracer.finish()
        tracer.base_frame = None
        guard.trace_mode(False)
        result["call_us"] = (time.perf_counter_ns() - started) // 1000
    tampered = tracer.tamper_report()
    args = kwargs = None
    if tampered is not None:
        result["status"] = "tampered"
        result["exception_message"] = tampered
    elif tracer.stop is not None:
        result["status"] = tracer.stop.status
        result["exception_message"] = tracer.stop.message
    else:
        _set_outcome(result, limits, value, raised, stdout, stderr)
    raised = None
    _fill_trace(result, tracer)
    expected = request.get("expected")
    if expected is not None:
        _compare(result, value, expected, namespace)


def _bounded(tracer: Tracer, value, limit: int) -> tuple[str, bool]:
    saved = tracer.max_repr
    tracer.max_repr = limit
    try:
        return tracer.bounded_repr(value)
    finally:
        tracer.max_repr = saved


def _fill_trace(result: dict, tracer: Tracer) -> None:
    result["line_steps"] = tracer.line_steps
    result["instruction_steps"] = tracer.instructions
    result["calls"] = tracer.calls
    result["max_depth"] = tracer.max_depth
    result["funcs"] = tracer.funcs
    result["steps"] = {"event": tracer.ev, "line": tracer.ln, "depth": tracer.dp,
                       "frame": tracer.fr, "func": tracer.fn}
    columns = list(zip(*tracer.states)) if tracer.states else [(), (), (), (), ()]
    result["states"] = {name: list(col) for name, col in
                        zip(("step", "var", "value", "type", "truncated"), columns)}
    if tracer.full_locals:
        result["snapshots"] = tracer.snapshots


def _compare(result: dict, value, expected_text: str, namespace: dict) -> None:
    """``output_matches``: ``value == <expected>`` evaluated as the benchmark's assert does."""
    if result["status"] != "ok":
        result["output_matches"] = False
        return
    try:
        expected_code = compile(expected_text, EXPECTED_FILE, "eval")
        result["codes"].append(expected_code)
        expected = eval(expected_code, namespace)
    except BaseException as exc:
        result["output_matches"] = False
        result["note"] = f"expected output does not evaluate: {type(exc).__name__}: {_describe(exc)}"
        return
    try:
        result["output_matches"] = bool(value == expected)
    except BaseException as exc:
        result["output_matches"] = False
        result["note"] = f"comparing with the expected output raised {type(exc).__name__}"
