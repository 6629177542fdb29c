"""One job inside the sandbox: compile, evaluate the call's arguments, run, report.

The request and the result are JSON objects (see ``handle``); the request's ``mode`` (see
MODES) says whether the call is traced. Its ``shape`` says what the program is:

``call`` (default)  the program's top level runs untraced, then ``entry`` (a name, or a
                    dotted path ``A.b`` of attribute lookups from the module namespace) is
                    called with ``input`` (the text inside the call's parentheses), traced.
                    ``calls`` (a list of ``{"method", "input"}``) makes it a method chain:
                    each method is called, in order, on what the entry returned, in the
                    same traced run (the output is the last call's value). ``test`` is
                    test code, compiled as ``<test>`` (never traced) and run after the
                    program in its namespace: an entry ``Case.test_x`` whose ``Case`` is a
                    ``unittest.TestCase`` runs that test (``setUpClass``, then
                    ``Case("test_x").debug()``, then ``tearDownClass``). ``stdin`` is the
                    text ``sys.stdin`` reads (empty without it).
``script``          the module is the program, traced from its first line (its frame is
                    the depth-0 activation, ``<module>``); ``input`` is its stdin. It is
                    ``ok`` when it runs to the end or exits with ``SystemExit`` of 0 or
                    None; its output is its stdout (the host compares it with the expected
                    text).

Everything the program can get wrong becomes a status with a message, never an exception
out of ``handle``:

``ok``            the call returned
``exception``     the call raised (``exception_type``/``exception_message`` say what)
``invalid``       syntax error, import-time failure, missing entry, input that does not parse
                  or evaluate, a method chain that names no method, bad request
``unsupported``   the program started a thread (WASI has none): stopped there
``missing_module`` a ModuleNotFoundError escaped the program (its top level, its test code,
                  the call or a script) naming a module this guest does not have
                  (``AVAILABLE_MODULES``); ``exception_message`` is ``No module named
                  'NAME'`` (see ``_missing_module``)
``step_limit``    more steps than ``max_steps``
``loops``         proved to loop forever: its complete state repeated at the same point
                  (loops.py; ``exception_message`` says where). The request's ``loops``
                  (default true) false turns the detection off
``memory_limit``  ``MemoryError`` (the host caps linear memory; a trap is classified there)
``output_limit``  stdout/stderr above ``max_stdout`` characters, or variable states above
                  ``max_trace_chars``
``tampered``      after the job, the tracer's sys.monitoring tool, or one of the objects the
                  runner hands to programs (exposed.py), was not as built
(``timeout`` and ``crashed`` are decided by the host: the guest cannot see its own trap.)

Trust boundary. The program runs in this interpreter, and Python has no private state;
so nothing the runner, the tracer or the result writer uses after the program started is
where the program can reach it:

* This module, the tracer and the other runner modules define no classes (every class is
  reachable through ``object.__subclasses__()``, and through its methods' ``__globals__``
  its module's state), are removed from ``sys.modules`` when the guest is built, and see a
  private copy of the builtins. Their functions are held only by the audit hook (which
  Python cannot list or remove), by sys.monitoring (hidden from programs, below) and by the
  entry object componentize-py keeps (guest.py). What a program is handed (its stdout,
  recursion-limit functions, ...) is in exposed.py and reaches the runner only through
  ``sys.audit("steptrace.*", ...)``, handled by the hook.
* Frames would lead to all of it (a program frame's ``f_back`` is the runner's frame), so
  none is handed out while a job runs: ``sys._getframe`` gives copies (exposed.FrameView,
  guard.py) whose chain ends above the runner's frames, and ``tb_frame``,
  ``gi_frame``/``cr_frame``/``ag_frame``, ``sys._current_frames`` are refused; so are the garbage
  collector's object lists, ``gc.set_debug`` (``DEBUG_SAVEALL`` would put the runner's
  garbage in ``gc.garbage``), ``sys.settrace``/``setprofile``/``addaudithook``, and
  ``sys.monitoring``, which is replaced for the job by an object that refuses every use:
  a program that could switch the tracer's events off and on again would hide steps from
  the trace, which no check at the end could see. A refusal is an ordinary RuntimeError in
  the program (``traceback.clear_frames`` and unittest's ``assertRaises`` go on without
  it) and is named in the run's note.
* Every value the runner keeps is a plain ``str``/``int``/``bool`` it made itself: reprs,
  type names (read with type's own getter, so no metaclass answers), the exception message
  (``str()`` runs while the job is still guarded). The status of a stopped job is kept
  here, never read back from the StopTracing the program saw. Program code (``__repr__``,
  ``__eq__``, ``__str__``, finalizers) runs only while the job is guarded and before the
  checks; the result is then encoded by the C JSON encoder captured when the guest was
  built, from these values alone.
* After the job the tracer's tool, events and callbacks, and exposed.py's objects, are
  compared (by identity) with the build and put back; a difference is ``tampered``.
  Nothing of the program runs then: what it left behind is taken back while the job is
  guarded (guard.wind_down), then the collector is off, namespaces are read only when
  their keys are exact strings, and what is put back is kept alive (shared_state.bury).
* A unittest test runs by unittest's own ``debug`` and only while unittest is as built
  (unittest_driver.py); a model's input answer may build only values whose behaviour it
  cannot define (request ``answer``, answer_values.py).

This is defence in depth inside one interpreter. The hard wall is WebAssembly: whatever a
program does here, it cannot reach the host, another job's instance (job isolation), or
anything but the result text of its own job, which the host validates.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import ast  # noqa: E402
import gc  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402
from types import CodeType  # noqa: E402

import analysis  # noqa: E402
import answer_values  # noqa: E402
import exposed  # noqa: E402
import guard  # noqa: E402
import shared_state  # noqa: E402
import sysmon_tracer as _tracer  # noqa: E402
import unittest_driver  # noqa: E402
import wire  # noqa: E402

# trace: the traced call; analyse: the instrumented program, untraced (analysis.py);
# run: the program as it is, untraced (checks of predicted inputs)
MODES = ("trace", "analyse", "run")
PROGRAM_FILE = _tracer.FILENAME
INPUT_FILE = "<input>"
EXPECTED_FILE = "<expected>"
TEST_FILE = "<test>"  # test code: not "<program>", so never traced
ARGS_HELPER = "__steptrace_args__"
# the message's start when a model's answer (request "answer": true) builds a value whose
# behaviour it defined (answer_values.py)
ANSWER_REFUSED = "unsafe_input"
SHAPES = ("call", "script")
MAX_CALLS = 1_000         # methods in one chain
MAX_STDIN = 16 * 1024 * 1024  # characters of stdin text
PRELOADED: dict = {}  # the standard library imported at build time (set by guest.py)

DEFAULT_LIMITS = {
    "max_steps": 100_000,
    "max_repr": 1_000,
    "max_stdout": 65_536,
    "max_output": 100_000,
    "max_trace_chars": 16_000_000,
}
_perf_ns = time.perf_counter_ns
_collect = gc.collect
_AST_ONLY = ast.PyCF_ONLY_AST
_AST_CALL, _AST_NAME = ast.Call, ast.Name
_TYPE_NAME = _tracer.type_name
_TYPE_MRO = type.__dict__["__mro__"].__get__  # type's own getter: no metaclass answers
_TEST_CASE = unittest.TestCase
_EXIT_CODE = SystemExit.__dict__["code"].__get__  # the C member: no property answers
_INT_VALUE = int.__index__
_IMPORT_NAME = ImportError.__dict__["name"].__get__  # the C member: no property answers
# The modules this guest has: sys.modules and the built-in modules when the guest is built
# (set by guest.py's WitWorld; componentize-py's snapshot cannot load another one).
AVAILABLE_MODULES: frozenset = frozenset()
namespace_held = None  # the program's namespace, cleared after a batch job


# ------------------------------------------------------------------ one job
def _invalid(result: dict, message: str) -> dict:
    result["status"] = "invalid"
    result["exception_message"] = wire.text(message)
    return result


def _limits(requested) -> dict | None:
    limits = dict(DEFAULT_LIMITS)
    if requested is None:
        return limits
    if type(requested) is not dict:
        return None
    for name, value in requested.items():
        if name not in limits or type(value) is not int or value <= 0:
            return None
        limits[name] = value
    return limits


def handle(request_text: str) -> str:
    """The WIT export ``run``: one JSON request in, one JSON result out."""
    guard.guarding = True
    try:
        request = wire.decode(request_text)
        if type(request) is not dict:
            return wire.encode(wire.crashed("the request is not a JSON object"))
        command = request.get("command")
        if command == "noop":
            return "{}"
        if command == "preloaded":
            return wire.encode(PRELOADED)
        if command is not None:
            return wire.encode(wire.crashed("unknown command"))
        return wire.encode(run_job(request))
    except MemoryError:
        return wire.OUT_OF_MEMORY
    except BaseException as exc:  # never trap on a guest bug: report it
        return wire.encode(wire.crashed(f"guest error: {_TYPE_NAME(type(exc), None)}"))
    finally:
        guard.guarding = False


def run_job(request: dict) -> dict:
    """Run one job; return the result (plain values this module made). Never raises (but
    MemoryError may escape if the guest cannot even build a result; the host turns the trap
    into ``memory_limit``)."""
    global namespace_held
    result = wire.new_result()
    limits = _limits(request.get("limits"))
    code_text = request.get("code")
    input_text = request.get("input", "")
    entry = request.get("entry") or "f"
    batch = request.get("check_shared_state") is True
    if limits is None:
        return _invalid(result, "request has bad limits")
    if type(code_text) is not str or type(input_text) is not str or type(entry) is not str:
        return _invalid(result, "request needs string 'code' and 'input'")
    shape = _shape(request, input_text, entry)
    if type(shape) is str:
        return _invalid(result, shape)
    guard.enter(limits, request.get("seed", guard.RANDOM_SEED), shape[1])
    ended = False
    reaches = True  # whether the job's code can reach shared state (until its codes say)
    try:
        try:
            _run(request, result, limits, code_text, input_text, entry, shape[0])
        finally:
            _tracer.finish()
        result["stdout"] = guard.stdout_text()
        _tracer.reset_stop()  # its traceback holds the program's frames
        namespace, namespace_held = namespace_held, None
        if batch and namespace is not None:
            namespace.clear()
        namespace = None
        # What the program left behind goes now, while the job is guarded (its
        # finalizers write nowhere): not in the runner's checks below, nor in a later
        # job. In job isolation the instance goes instead, uncollected.
        if batch:
            reaches = shared_state.reaches_shared_state(result.get("codes") or [])
            guard.wind_down(reaches)
            shared_state.restore_cheap()
            _collect()
        ended = True
    finally:
        namespace_held = None
        left = guard.leave(batch, reaches)
    # From here on no program code runs (guard.leave): every check reads by identity and
    # exact type, and what is put back is kept alive, never freed.
    codes = result.pop("codes", None) or []
    reasons = _tracer.tamper_reasons() + guard.exposed_changed()
    if reasons and result["status"] != "tampered":
        result["status"] = "tampered"
        result["exception_type"] = None
        result["exception_message"] = wire.text("; ".join(reasons))
    if batch:
        changed = (left + shared_state.cheap_changed()
                   + shared_state.changed(codes, reaches))
        if not ended:
            changed.append("the job did not end normally")
        if changed:
            result["shared_state_changed"] = [wire.text(name, 200) for name in changed]
    if guard.refused:
        wire.add_note(result, "refused to the program: " + ", ".join(sorted(set(guard.refused))))
    cut_note = wire.cut_note(result)
    if cut_note is not None:
        wire.add_note(result, cut_note)
    return result


def _shape(request: dict, input_text: str, entry: str):
    """The request's shape fields checked: ``(plan, stdin text)``, or a message saying
    what is wrong. ``plan`` is None for a script, else ``(entry parts, test code text,
    [(method, input text), ...])``."""
    shape = request.get("shape") or "call"
    stdin = request.get("stdin")
    test = request.get("test")
    chain = request.get("calls")
    if shape not in SHAPES:
        return "unknown 'shape'; use one of " + ", ".join(SHAPES)
    if stdin is not None and type(stdin) is not str:
        return "'stdin' must be a string"
    if test is not None and type(test) is not str:
        return "'test' must be a string"
    if shape == "script":
        if stdin is not None or test is not None or chain is not None:
            return "a script takes no 'stdin', 'test' or 'calls' (its 'input' is its stdin)"
        stdin = input_text
    if stdin is not None and len(stdin) > MAX_STDIN:
        return f"stdin is longer than {MAX_STDIN:,} characters"
    if shape == "script":
        return None, stdin
    parts = entry.split(".")
    for part in parts:
        if not part.isidentifier():
            return "'entry' must be a name or a dotted path of names"
    calls = []
    if chain is not None:
        if type(chain) is not list:
            return "'calls' must be a list"
        if len(chain) > MAX_CALLS:
            return f"'calls' has more than {MAX_CALLS:,} methods"
        for item in chain:
            method = item.get("method") if type(item) is dict else None
            text = item.get("input", "") if type(item) is dict else None
            if (type(method) is not str or not method.isidentifier() or type(text) is not str
                    or len(item) > 2 or len(item) == 2 and "input" not in item):
                return "'calls' entries must be {\"method\": name, \"input\": arguments}"
            calls.append((method, text))
    return (parts, test, calls), stdin or ""


def _out_of_memory(result: dict, message: str) -> None:
    result["status"] = "memory_limit"
    result["exception_type"] = "MemoryError"
    result["exception_message"] = message


def _describe(exc: BaseException) -> str:
    """``str(exc)``, run while the job is guarded (a program's ``__str__``), as a plain
    capped ``str``."""
    try:
        text = str(exc)
    except BaseException:  # a program exception whose __str__ fails
        return f"<{_TYPE_NAME(type(exc), None)}: str() failed>"
    return wire.text(text, wire.MAX_MESSAGE, "exception_message")


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
        return compile(source, INPUT_FILE, "eval", dont_inherit=True)
    tree = compile(source, INPUT_FILE, "eval", _AST_ONLY, dont_inherit=True)
    call = tree.body
    if not (type(call) is _AST_CALL and type(call.func) is _AST_NAME
            and call.func.id == ARGS_HELPER):
        raise ValueError("input is not a plain argument list")
    return compile(tree, INPUT_FILE, "eval", dont_inherit=True)


def _compile_error(result: dict, exc, what: str) -> None:
    line = exc.lineno if issubclass(type(exc), SyntaxError) else None
    where = f" (line {line})" if type(line) is int else ""
    message = exc.msg if issubclass(type(exc), SyntaxError) else None
    _invalid(result, f"{what}: {wire.text(message or _describe(exc))}{where}")
    result["exception_type"] = _TYPE_NAME(type(exc), "exception_type")


def _run(request, result, limits, code_text, input_text, entry, plan) -> None:
    """Compile (program, test code, inputs: all before any program code runs), run the
    top level (a script: the program), evaluate the inputs, call. Every program object
    this frame holds is gone when it returns."""
    global namespace_held
    mode = request.get("mode") or "trace"
    if mode not in MODES:
        shown = repr(mode) if type(mode) is str and len(mode) <= 50 else "?"
        _invalid(result, f"unknown mode {shown}; use one of {', '.join(MODES)}")
        return
    analysed = mode == "analyse"
    conditions: list = []
    try:
        if analysed:
            program, conditions = analysis.instrument(code_text, PROGRAM_FILE)
        else:
            program = compile(code_text, PROGRAM_FILE, "exec", dont_inherit=True)
    except MemoryError:
        _out_of_memory(result, "MemoryError while compiling the program")
        return
    except (SyntaxError, ValueError) as exc:
        _compile_error(result, exc, "syntax error")
        return
    result["codes"] = [program]
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    namespace_held = namespace
    _tracer.loops_begin(not analysed and request.get("loops", True) is not False,
                        namespace, program)
    recorder = None  # analyse: (active, counts, outcomes), the lists the runner reads
    if analysed:
        helpers, *recorder = analysis.recorder(len(conditions))
        namespace.update(helpers)
        helpers = None
    if plan is None:
        _script(request, result, limits, mode, program, namespace, recorder,
                conditions if analysed else None)
        return
    parts, test_text, chain = plan
    test_code = None
    if test_text is not None:
        try:
            test_code = compile(test_text, TEST_FILE, "exec", dont_inherit=True)
            result["codes"].append(test_code)
        except MemoryError:
            _out_of_memory(result, "MemoryError while compiling the test code")
            return
        except (SyntaxError, ValueError) as exc:
            _compile_error(result, exc, "syntax error in the test code")
            return
    # The inputs are compiled now, before any program code runs (the top level could
    # otherwise change what compiling them means); a failure is reported where it was
    # when the top level ran first, after the entry is found.
    input_code = input_error = None
    chain_codes = []
    try:
        input_code = compile_call_arguments(input_text)
        result["codes"].append(input_code)
        for index, (method, text) in enumerate(chain):
            try:
                chain_codes.append((method, compile_call_arguments(text)))
            except (SyntaxError, ValueError) as exc:
                message = exc.msg if issubclass(type(exc), SyntaxError) else _describe(exc)
                input_error = (f"calls[{index}] ({method}): input does not parse as call "
                               f"arguments: {wire.text(message)}")
                break
        result["codes"].extend([code for _, code in chain_codes])
    except MemoryError:
        _out_of_memory(result, "MemoryError while parsing the input")
        return
    except (SyntaxError, ValueError) as exc:
        message = exc.msg if issubclass(type(exc), SyntaxError) else _describe(exc)
        input_error = f"input does not parse as call arguments: {wire.text(message)}"
    classes_before = None  # with test code: the classes there were before it ran
    for code, what in ((program, "program failed at top level"),
                       (test_code, "test code failed at top level")):
        if code is None:
            continue
        if code is test_code:
            classes_before = shared_state.all_classes()
        try:
            exec(code, namespace)
        except MemoryError:
            _out_of_memory(result, "MemoryError while running the program's top level")
            return
        except BaseException as exc:
            if _stopped(result, exc) or _missing_module(result, exc):
                return
            _invalid(result, f"{what}: {_TYPE_NAME(type(exc), None)}: {_describe(exc)}")
            result["exception_type"] = _TYPE_NAME(type(exc), "exception_type")
            return
    function, case = _entry(result, namespace, parts, input_text, classes_before)
    classes_before = None
    if function is None:
        return
    if input_error is not None:
        _invalid(result, input_error)
        return
    # a model's answer: the classes there are before it runs (answer_values.py)
    answer = shared_state.all_classes() if request.get("answer") is True else None
    namespace[ARGS_HELPER] = exposed.collect_arguments
    try:
        args, kwargs = _arguments(input_code, namespace)
        calls = []
        for index, (method, code) in enumerate(chain_codes):
            input_error = f"calls[{index}] ({method}): "
            calls.append((method,) + _arguments(code, namespace))
    except MemoryError:
        _out_of_memory(result, "MemoryError while evaluating the input")
        return
    except BaseException as exc:
        if _stopped(result, exc):
            return
        _invalid(result, f"{input_error or ''}input does not evaluate: "
                         f"{_TYPE_NAME(type(exc), None)}: {_describe(exc)}")
        return
    finally:
        namespace.pop(ARGS_HELPER, None)
    if answer is not None:
        problem = answer_values.foreign((args, kwargs, calls), answer, False)
        if problem is not None:
            _invalid(result, f"{ANSWER_REFUSED}: the input builds {problem}")
            return
    plan = (function, args, kwargs, calls, case, answer)
    function = args = kwargs = calls = case = answer = None
    _call(request, result, limits, plan, namespace, recorder,
          conditions if analysed else None, mode == "trace")


def _arguments(code, namespace: dict) -> tuple:
    arguments = eval(code, namespace)
    if not (type(arguments) is tuple and len(arguments) == 2 and type(arguments[0]) is tuple
            and type(arguments[1]) is dict):
        raise TypeError("the argument helper was replaced")
    return arguments


def _entry(result: dict, namespace: dict, parts: list, input_text: str,
           classes_before: set | None) -> tuple:
    """What the entry names, looked up from the module namespace (attribute by
    attribute, untraced: a class's ``__getattr__`` may run), as ``(callable, test case
    class or None)``; ``(None, None)`` with the result ``invalid`` if there is none. An
    entry ``Case.test_x`` whose ``Case`` is a unittest.TestCase subclass is that test:
    the callable runs ``Case("test_x")`` by unittest's own ``debug``, and only when
    unittest is as built and (with test code: ``classes_before`` the classes there were
    before it ran) the test class's bases are the test code's or unittest's
    (unittest_driver.py)."""
    entry = wire.text(".".join(parts), 200)
    target = namespace.get(parts[0])
    if target is None:
        what = "entry function" if len(parts) == 1 else "entry"
        _invalid(result, f"{what} {entry!r} is not defined by the program")
        return None, None
    case = None
    if (len(parts) == 2 and issubclass(type(target), type)
            and any(kind is _TEST_CASE for kind in _TYPE_MRO(target))):
        case = target
        if input_text.strip():
            _invalid(result, f"entry {entry!r} is a test method: it takes no input")
            return None, None
    if case is not None:
        changes = unittest_driver.changed()
        if changes:
            _invalid(result, unittest_driver.message(changes, "before"))
            return None, None
        foreign = [] if classes_before is None else unittest_driver.foreign_bases(
            case, classes_before)
        if foreign:
            _invalid(result, f"test class {parts[0]!r} is made from {wire.text(', '.join(foreign), 200)}, "
                             "which the test code did not make: the test's verdict would not "
                             "be unittest's")
            return None, None
    try:
        if case is not None:
            target = unittest_driver.test_runner(target, parts[1])
        else:
            for part in parts[1:]:
                target = getattr(target, part)
    except BaseException as exc:
        if _stopped(result, exc):
            return None, None
        _invalid(result, f"entry {entry!r} cannot be looked up: "
                         f"{_TYPE_NAME(type(exc), None)}: {_describe(exc)}")
        return None, None
    if not callable(target):
        _invalid(result, f"entry {entry!r} is not callable")
        return None, None
    return target, case


def _stopped(result: dict, raised) -> bool:
    """If the job was stopped by a limit (whatever exception reached the runner): its
    status, from the runner's own record."""
    if _tracer.stop is None:
        return False
    result["status"] = _tracer.stop_status
    result["exception_message"] = _tracer.stop_message
    return True


def _begin_trace(request, result, limits, namespace) -> None:
    """Start recording (the request's tracer options; the program's namespace and module
    code, for its globals)."""
    options = request.get("options")
    options = options if type(options) is dict else {}
    _tracer.begin(limits["max_steps"], limits["max_repr"], limits["max_trace_chars"],
                  instructions_on=options.get("instructions", True) is not False,
                  locals_on=options.get("full_locals", False) is True,
                  program_namespace=namespace, program_code=result["codes"][0])


def _call(request, result, limits, plan, namespace, recorder, conditions, traced) -> None:
    """The call, traced (``trace``) or not: of the instrumented program (``analyse``, see
    analysis.py), or of the program as it is (``run``: checking a predicted input). A
    method chain's methods are looked up and called here, in the same run; a test's
    class set up and torn down around it."""
    function, args, kwargs, calls, case, answer = plan
    plan = None
    is_test = case is not None
    value = obj = raised = failure = None
    started = _perf_ns()
    if traced:
        _begin_trace(request, result, limits, namespace)
        _tracer.base_frame = _tracer.frame_at(0)
        guard.set_tracing(True)
    elif recorder is not None:
        recorder[0][0] = True
    try:
        if case is not None:
            case.setUpClass()
            try:
                value = function(*args, **kwargs)
            finally:
                case.tearDownClass()
        else:
            value = obj = function(*args, **kwargs)
        index = 0
        for method, call_args, call_kwargs in calls:
            try:
                bound = getattr(obj, method)
            except BaseException as exc:  # a program's __getattr__ may raise anything
                if _tracer.stop is not None:
                    raise
                failure = (index, method, exc)
                break
            if not callable(bound):
                failure = (index, method, None)
                break
            bound = value = bound(*call_args, **call_kwargs)
            index += 1
    except BaseException as exc:  # everything the program can raise, SystemExit included
        raised = exc
    finally:
        if traced:
            _tracer.finish()
            guard.set_tracing(False)
        elif recorder is not None:
            recorder[0][0] = False
        result["call_us"] = (_perf_ns() - started) // 1000
    args = kwargs = calls = bound = function = case = None
    if failure is not None and raised is None and not _stopped(result, None):
        index, method, exc = failure
        failure = None
        kind = _TYPE_NAME(type(obj), None)
        if exc is None:
            _invalid(result, f"calls[{index}]: {kind}.{method} is not callable")
        elif issubclass(type(exc), AttributeError):
            _invalid(result, f"calls[{index}]: {kind} has no method {method!r}")
        else:
            _invalid(result, f"calls[{index}]: looking up {kind}.{method} raised "
                             f"{_TYPE_NAME(type(exc), None)}: {_describe(exc)}")
        exc = None
    else:
        _set_outcome(result, limits, value, raised)
        if answer is not None and result["status"] == "ok":
            problem = answer_values.foreign(value, answer, True)
            if problem is not None:
                _invalid(result, f"{ANSWER_REFUSED}: the call returned {problem}")
                result["output"] = result["output_type"] = None
        if request.get("plain_output") is True and result["status"] == "ok":
            result["output_plain"] = answer_values.plain(value)
        if is_test and result["status"] in ("ok", "exception"):
            changes = unittest_driver.changed()
            if changes:
                _invalid(result, unittest_driver.message(changes, "while"))
                result["output"] = result["output_type"] = result["exception_type"] = None
    obj = raised = failure = None
    if traced:
        _fill_trace(result)
    if conditions is not None:
        result["analysis"] = _analysis_report(recorder, conditions)
    expected = request.get("expected")
    if expected is not None:
        _compare(result, value, expected, namespace)


def _script(request, result, limits, mode, program, namespace, recorder, conditions) -> None:
    """A script: the module is the program, traced from its first line (``trace``), or
    run as it is or instrumented (``analyse``). Its output is its stdout."""
    raised = None
    traced = mode == "trace"
    # This frame is one more below the module than the calibrated top level (guard.enter)
    guard.base_depth += 1
    started = _perf_ns()
    if traced:
        _begin_trace(request, result, limits, namespace)
        _tracer.top_levels = 0  # the module frame is the top level itself
        _tracer.base_frame = _tracer.frame_at(0)
        guard.set_tracing(True)
    else:
        guard.apply_recursion()
        if recorder is not None:
            recorder[0][0] = True
    try:
        exec(program, namespace)
    except BaseException as exc:  # everything the program can raise, SystemExit included
        raised = exc
    finally:
        if traced:
            _tracer.finish()
            guard.set_tracing(False)
        elif recorder is not None:
            recorder[0][0] = False
        result["call_us"] = (_perf_ns() - started) // 1000
    if not _stopped(result, raised):
        if raised is None or _exits_cleanly(raised):
            result["status"] = "ok"
        elif issubclass(type(raised), MemoryError):
            _out_of_memory(result, "MemoryError: the program ran out of memory")
        elif not _missing_module(result, raised):
            result["status"] = "exception"
            result["exception_type"] = _TYPE_NAME(type(raised), "exception_type")
            result["exception_message"] = _describe(raised)
    raised = None
    if traced:
        _fill_trace(result)
    if conditions is not None:
        result["analysis"] = _analysis_report(recorder, conditions)


def _missing_module(result: dict, raised) -> bool:
    """If ``raised`` (what ended the job) is a ModuleNotFoundError whose ``name`` is a
    module this guest does not have: status ``missing_module``, the exception's type, and
    the message ``No module named 'NAME'`` made here from the name (not the program's own
    message, so that the name can be read back from it: queries/missing_modules.sql), the
    name cut at ``MAX_NAME`` characters (said in the note). The name is read from the
    exception's C member (no property of a subclass answers) and taken only as an exact
    ``str``; it is compared with ``AVAILABLE_MODULES``, computed when the guest was built,
    so a program raising the exception itself gets the status only for a module that is
    in fact missing. Otherwise False: the ordinary status."""
    if raised is None or not issubclass(type(raised), ModuleNotFoundError):
        return False
    try:
        name = _IMPORT_NAME(raised)
    except BaseException:  # not an ImportError after all: never the program's code
        return False
    if type(name) is not str or not name or name in AVAILABLE_MODULES:
        return False
    name = wire.text(name, _tracer.MAX_NAME, "missing_module")
    result["status"] = "missing_module"
    result["exception_type"] = _TYPE_NAME(type(raised), "exception_type")
    result["exception_message"] = f"No module named '{name}'"
    return True


def _exits_cleanly(raised) -> bool:
    """``SystemExit`` whose code is None or 0, as CPython's exit status says: the code
    is read from the exception's own slot (no property of a subclass answers)."""
    if not issubclass(type(raised), SystemExit):
        return False
    code = _EXIT_CODE(raised)
    return code is None or issubclass(type(code), int) and _INT_VALUE(code) == 0


def _set_outcome(result, limits, value, raised) -> None:
    """``status`` and output or exception of a call that returned or raised."""
    if _stopped(result, raised):
        return
    if raised is not None and issubclass(type(raised), MemoryError):
        _out_of_memory(result, "MemoryError: the program ran out of memory")
    elif raised is not None and _missing_module(result, raised):
        pass
    elif raised is not None:
        result["status"] = "exception"
        result["exception_type"] = _TYPE_NAME(type(raised), "exception_type")
        result["exception_message"] = _describe(raised)
    else:
        result["status"] = "ok"
        # the value's own repr (program code), at this same point in every mode
        try:
            text, truncated = _tracer.value_repr(value, limits["max_output"], program_reprs=True)
        except BaseException as exc:  # the job was stopped in it (a thread started)
            if _stopped(result, exc):
                return
            raise
        if _stopped(result, None):  # the value's __repr__ printed past the limit
            return
        result["output"], result["output_truncated"] = text, truncated
        result["output_type"] = _TYPE_NAME(type(value), "output_type")


def _fill_trace(result: dict) -> None:
    tracer = _tracer
    result["line_steps"] = tracer.line_steps
    result["instruction_steps"] = tracer.instructions
    result["calls"] = tracer.calls
    result["max_depth"] = tracer.max_depth
    result["funcs"] = tracer.funcs
    result["steps"] = {"event": tracer.step_events, "line": tracer.step_lines,
                       "depth": tracer.step_depths, "frame": tracer.step_frames,
                       "func": tracer.step_funcs}
    result["states"] = _columns(tracer.states, wire.STATE_COLUMNS)
    if tracer.object_types:  # tables without rows are left out (wire.new_result)
        result["objects"] = {"type": tracer.object_types, "step": tracer.object_steps}
    if tracer.attributes:
        result["attributes"] = _columns(tracer.attributes, wire.ATTRIBUTE_COLUMNS)
    if tracer.global_rows:
        result["global_states"] = _columns(tracer.global_rows, wire.GLOBAL_COLUMNS)
    if tracer.settrace_cut:  # left out: the view is not complete
        wire.add_note(result, f"the settrace view has more than {tracer.max_steps} line "
                      "events of its own: it is not recorded")
    else:
        result["settrace_lines"] = {
            "step": tracer.settrace_steps, "line": tracer.settrace_lines,
            "depth": tracer.settrace_depths, "frame": tracer.settrace_frames,
            "func": tracer.settrace_funcs}
    if tracer.walk_cut or _tracer._br.attributes_cut:
        wire.add_note(result, "objects beyond the tracer's bounds (depth "
                      f"{tracer.MAX_WALK_DEPTH}, {tracer.MAX_WALK_OBJECTS} objects a step, "
                      f"{tracer.MAX_WALK_ITEMS} items a container, "
                      f"{tracer._br.MAX_ATTRIBUTES} attributes an instance) are not recorded")
    if tracer.full_locals:
        result["snapshots"] = tracer.snapshots


def _columns(rows: list, names: tuple) -> dict:
    """Row tuples as the result's column lists."""
    columns = list(zip(*rows)) if rows else [()] * len(names)
    return {name: list(column) for name, column in zip(names, columns)}


def _compare(result: dict, value, expected_text, namespace: dict) -> None:
    """``output_matches``: ``value == <expected>`` evaluated as the benchmark's assert does
    (the program's ``__eq__`` runs, while the job is guarded)."""
    if result["status"] != "ok":
        result["output_matches"] = False
        return
    if type(expected_text) is not str:
        result["output_matches"] = False
        result["note"] = "expected output is not a string"
        return
    try:
        expected_code = compile(expected_text, EXPECTED_FILE, "eval", dont_inherit=True)
        result["codes"].append(expected_code)
        expected = eval(expected_code, namespace)
    except BaseException as exc:
        result["output_matches"] = False
        if _stopped(result, exc):
            result["output_matches"] = False
            return
        result["note"] = (f"expected output does not evaluate: {_TYPE_NAME(type(exc), None)}: "
                          f"{_describe(exc)}")
        return
    try:
        matches = True if (value == expected) else False
    except BaseException as exc:
        matches = False
        if not _stopped(result, exc):
            result["note"] = f"comparing with the expected output raised {_TYPE_NAME(type(exc), None)}"
    if _stopped(result, None):
        result["output"] = result["output_type"] = None
        matches = False
    result["output_matches"] = matches


def _analysis_report(recorder: list, conditions: list) -> dict:
    """What the instrumented run recorded, read as plain values. The recorder's lists are
    the program's to see (its helpers sit in the program's namespace and their globals
    hold them), so a program can only change its own analysis; every value is read here
    by exact type (no program code runs) and bounded."""
    _active, counts, outcomes = recorder

    def count(position: int) -> int:
        value = counts[position] if type(counts) is list and len(counts) > position else 0
        return value if type(value) is int and value >= 0 else 0

    if type(outcomes) is not list or len(outcomes) != len(conditions):
        outcomes = [[] for _ in conditions]
    rows = []
    kept = 0
    for (line, col, kind), seen in zip(conditions, outcomes):
        if type(seen) is not list or not seen:
            continue
        seen = seen[:max(0, analysis.MAX_EVALUATIONS - kept)]
        kept += len(seen)
        rows.append({"line": line, "col": col, "kind": kind,
                     "outcomes": "".join(["T" if item is True else "F" for item in seen])})
    found = {name: count(position) for position, name in enumerate(analysis.COUNTS)}
    evaluations = found["evaluations"]
    return {"conditions": rows, **found,
            "evaluations_truncated": evaluations > analysis.MAX_EVALUATIONS}
