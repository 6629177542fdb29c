"""A plain CPython 3.14 for the tests that re-derive a task's answer from its prompt:
built into a WebAssembly component of its own (tests/helpers/native.py), it runs a
program as a prompt says it is run and reports what happened, by a ``sys.monitoring`` tool
of its own (not steptrace's tracer: none of tracer/ is in it but the list of standard
modules to preload) and with values written by the rule the prompts state (not
steptrace's rendering: :func:`render` is written here, from the prompt's words).

Request (JSON): ``code``; ``shape`` (``call``: ``call`` is the call's text, evaluated
after the module ran; ``script``: the module is the run); ``stdin``; ``watch`` (line ->
names and attribute paths to write down right after each execution of the line, in the
frame that ran it); ``conditions`` ([line, text] of conditions whose outcomes to record);
``expected`` (a value's text: whether the call's value equals it). Result (JSON): status,
output and its type, exception type and ``str()``, stdout, ``events`` ([event, function's
qualified name, line, frame, depth] of every event in the program's code), ``after``
(the event index of a watched line's execution -> the names' [rendering, type, id] or
null when unbound, or ``"yield"`` when its frame went on by yielding),
``instructions`` (bytecode instructions executed in the program's code), ``branches``
([line, text] -> each evaluation's truth) and ``equal``.
"""

import ast
import builtins
import io
import json
import re
import sys
from collections import OrderedDict, defaultdict, deque

import stdlib_preload  # noqa: F401  (the standard library a program may import)

PROGRAM = "<program>"
TOOL = 4
MAX_NESTING = 4  # instances written in full: the fifth nested one is Name(...)
HEAPTYPE, IMMUTABLETYPE = 1 << 9, 1 << 8  # Py_TPFLAGS_*: a class written in Python has the
# first and not the second
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
E = sys.monitoring.events
LOCAL = E.LINE | E.INSTRUCTION | E.PY_START | E.PY_RESUME | E.PY_RETURN | E.PY_YIELD
GLOBAL = E.PY_UNWIND | E.PY_THROW | E.RAISE


# ------------------------------------------------------------------ the prompts' rule
def render(value, active=None, nesting=0) -> str:
    """``value`` as the prompts say values are written: Python's repr(), except an
    instance of a class written in Python (a class made at run time whose attributes can
    be set: the program's or a library's), whatever its ``__repr__``:
    ``QualName(attr=value, ...)``, its ``__dict__`` in insertion order then its set slots
    (base classes first, each class's in declaration order), values by the same rule; one
    already being written or nested in four others is ``QualName(...)``; an exception as
    ``BaseException.__repr__`` writes it. Built-in containers are written as repr() writes
    them, with their items by this rule. (Not here: the value first of a class derived
    from a built-in type, and a namedtuple's fields: no corpus re-derived has them.)"""
    active = set() if active is None else active
    kind = type(value)
    if isinstance(value, BaseException):
        return BaseException.__repr__(value)
    if kind.__flags__ & HEAPTYPE and not kind.__flags__ & IMMUTABLETYPE:
        name = kind.__qualname__
        if id(value) in active or nesting >= MAX_NESTING:
            return f"{name}(...)"
        active.add(id(value))
        parts = [f"{attr}={render(item, active, nesting + 1)}"
                 for attr, item in attributes(value)]
        active.discard(id(value))
        return f"{name}({', '.join(parts)})"
    if kind in (list, tuple, dict, deque, defaultdict, OrderedDict):
        if id(value) in active:
            return {list: "[...]", tuple: "(...)", dict: "{...}", deque: "[...]"}.get(
                kind, "...")
        active.add(id(value))
        try:
            return _container(value, kind, active, nesting)
        finally:
            active.discard(id(value))
    if kind in (set, frozenset):
        if not value:
            return f"{kind.__name__}()"
        items = ", ".join(render(item, active, nesting) for item in value)
        return "{" + items + "}" if kind is set else "frozenset({" + items + "})"
    return _ADDRESS.sub("", repr(value))


def _container(value, kind, active, nesting) -> str:
    def each(items):
        return ", ".join(render(item, active, nesting) for item in items)

    def pairs(items):
        return ", ".join(f"{render(k, active, nesting)}: {render(v, active, nesting)}"
                         for k, v in items)

    if kind is list:
        return f"[{each(value)}]"
    if kind is tuple:
        return f"({each(value)},)" if len(value) == 1 else f"({each(value)})"
    if kind is dict:
        return "{" + pairs(value.items()) + "}"
    if kind is deque:
        tail = "" if value.maxlen is None else f", maxlen={value.maxlen}"
        return f"deque([{each(value)}]{tail})"
    if kind is defaultdict:
        return (f"defaultdict({render(value.default_factory, active, nesting)}, "
                "{" + pairs(value.items()) + "})")
    if not value:
        return "OrderedDict()"
    return "OrderedDict({" + pairs(value.items()) + "})"


def attributes(value) -> list:
    """(name, value) of an instance: its ``__dict__``'s string keys in insertion order,
    then its slots that hold a value, base classes first, each class's in the order its
    ``__slots__`` names them."""
    found = [(k, v) for k, v in getattr(value, "__dict__", {}).items() if type(k) is str]
    for klass in reversed(type(value).__mro__):
        declared = klass.__dict__.get("__slots__", ())
        for slot in ((declared,) if isinstance(declared, str) else declared):
            key = (f"_{klass.__name__.lstrip('_')}{slot}"
                   if slot.startswith("__") and not slot.endswith("__") else slot)
            member = klass.__dict__.get(key)
            if type(member).__name__ != "member_descriptor":
                continue
            try:
                found.append((slot, member.__get__(value, type(value))))
            except AttributeError:  # not set
                pass
    return found


def described(value) -> list:
    return [render(value), type(value).__name__, id(value)]


# ------------------------------------------------------------------ the run
class Recorder:
    """The events of the program's code while the run is on."""

    def __init__(self, watch: dict) -> None:
        self.watch = {int(line): names for line, names in watch.items()}
        self.events: list = []
        self.after: dict = {}
        self.frames: dict = {}    # id(frame) -> (frame number, frame): kept while it lives
        self.pending: dict = {}   # frame number -> (event index, watched names)
        self.next_frame = 0
        self.instructions = 0
        self.on = False

    def frame_of(self, frame) -> int:
        known = self.frames.get(id(frame))
        if known is None or known[1] is not frame:
            known = self.frames[id(frame)] = (self.next_frame, frame)
            self.next_frame += 1
        return known[0]

    def depth(self, frame) -> int:
        depth, current = 0, frame.f_back
        while current is not None:
            depth += current.f_code.co_filename == PROGRAM
            current = current.f_back
        return depth

    def event(self, name: str, code, line, frame) -> None:
        number = self.frame_of(frame)
        waiting = self.pending.pop(number, None)
        if waiting is not None:
            index, names = waiting
            self.after[index] = ("yield" if name == "yield" else
                                 {path: self.look(frame, path) for path in names})
        self.events.append([name, code.co_qualname, line, number, self.depth(frame)])
        if name == "line" and line in self.watch:
            self.pending[number] = (len(self.events) - 1, self.watch[line])
        if name in ("return", "unwind"):
            self.frames.pop(id(frame), None)

    @staticmethod
    def look(frame, path: str):
        root, *attrs = path.split(".")
        scope = frame.f_locals
        if root not in scope:
            return None
        value = scope[root]
        for attr in attrs:
            try:
                value = getattr(value, attr)
            except AttributeError:
                return None
        return described(value)


def _codes(code) -> list:
    found = [code]
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            found += _codes(const)
    return found


def _line_of(code, offset: int):
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return None


def run(request: dict) -> dict:
    recorder = Recorder(request.get("watch") or {})
    code = compile(request["code"], PROGRAM, "exec")
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    monitoring = sys.monitoring
    monitoring.use_tool_id(TOOL, "native")

    def frame():
        return sys._getframe(2)

    def program(code) -> bool:
        return recorder.on and code.co_filename == PROGRAM

    callbacks = {
        E.LINE: lambda code, line: program(code) and recorder.event(
            "line", code, line, frame()),
        E.PY_START: lambda code, offset: program(code) and recorder.event(
            "call", code, code.co_firstlineno, frame()),
        E.PY_RESUME: lambda code, offset: program(code) and recorder.event(
            "resume", code, _line_of(code, offset), frame()),
        E.PY_RETURN: lambda code, offset, value: program(code) and recorder.event(
            "return", code, _line_of(code, offset), frame()),
        E.PY_YIELD: lambda code, offset, value: program(code) and recorder.event(
            "yield", code, _line_of(code, offset), frame()),
        E.PY_UNWIND: lambda code, offset, exc: program(code) and recorder.event(
            "unwind", code, _line_of(code, offset), frame()),
        E.PY_THROW: lambda code, offset, exc: program(code) and recorder.event(
            "throw", code, _line_of(code, offset), frame()),
        E.RAISE: lambda code, offset, exc: program(code) and recorder.event(
            "raise", code, _line_of(code, offset), frame()),
    }

    def count(code, offset):
        if recorder.on:
            recorder.instructions += 1

    for event, callback in callbacks.items():
        monitoring.register_callback(TOOL, event, callback)
    monitoring.register_callback(TOOL, E.INSTRUCTION, count)
    for each in _codes(code):
        monitoring.set_local_events(TOOL, each, LOCAL)
    monitoring.set_events(TOOL, GLOBAL)
    result = {"status": "ok", "output": None, "output_type": None, "exception_type": None,
              "exception_message": None}
    out = io.StringIO()
    sys.stdout, sys.stdin = out, io.StringIO(request.get("stdin") or "")
    value = None
    try:
        if request["shape"] == "call":
            exec(code, namespace)
            call = compile(request["call"], "<call>", "eval")
            recorder.on = True
            value = eval(call, namespace)
        else:
            recorder.on = True
            exec(code, namespace)
    except BaseException as exc:  # the program's own exception: its result
        recorder.on = False
        result.update(status="exception", exception_type=type(exc).__name__,
                      exception_message=str(exc))
    else:
        recorder.on = False
        if request["shape"] == "call":
            result.update(output=render(value), output_type=type(value).__name__)
    finally:
        recorder.on = False
        sys.stdout, sys.stdin = sys.__stdout__, sys.__stdin__
        monitoring.set_events(TOOL, 0)
        for each in _codes(code):
            monitoring.set_local_events(TOOL, each, 0)
        monitoring.free_tool_id(TOOL)
    if request.get("expected") is not None and result["status"] == "ok":
        result["equal"] = bool(value == eval(request["expected"], namespace))
    result.update(stdout=out.getvalue(), events=recorder.events,
                  after={str(k): v for k, v in recorder.after.items()},
                  instructions=recorder.instructions)
    if request.get("conditions"):
        result["branches"] = outcomes(request)
    return result


def outcomes(request: dict) -> dict:
    """Each asked condition's truth at each of its evaluations: the program run again
    with the condition, found on its line by its text (whitespace collapsed), wrapped in
    a call that records ``bool()`` of it and gives it back."""
    wanted = {(line, text) for line, text in request["conditions"]}
    source = request["code"]
    found = {f"{line}:{text}": [] for line, text in wanted}

    class Wrap(ast.NodeTransformer):
        def wrap(self, test):
            key = (test.lineno, " ".join((ast.get_source_segment(source, test) or "").split()))
            if key not in wanted:
                return test
            call = ast.Call(ast.Name("__outcome__", ast.Load()),
                            [ast.Constant(f"{key[0]}:{key[1]}"), test], [])
            return ast.copy_location(call, test)

        def generic_visit(self, node):
            super().generic_visit(node)
            if isinstance(node, (ast.If, ast.While, ast.IfExp)):
                node.test = self.wrap(node.test)
            elif isinstance(node, ast.comprehension):
                node.ifs = [self.wrap(test) for test in node.ifs]
            return node

    def outcome(key, value):
        found[key].append(bool(value))
        return value

    tree = ast.fix_missing_locations(Wrap().visit(ast.parse(source)))
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__outcome__": outcome}
    sys.stdout, sys.stdin = io.StringIO(), io.StringIO(request.get("stdin") or "")
    try:
        exec(compile(tree, PROGRAM, "exec"), namespace)
        if request["shape"] == "call":
            eval(compile(request["call"], "<call>", "eval"), namespace)
    except BaseException:
        pass
    finally:
        sys.stdout, sys.stdin = sys.__stdout__, sys.__stdin__
    return found


class _Entry:
    def run(self, request: str) -> str:
        try:
            request = json.loads(request)
            if "command" in request:  # the sandbox's questions to steptrace's own guest
                # (its package files: wasm_sandbox/_package_files.py), as a guest without them
                return json.dumps({"status": "crashed", "exception_message": "unknown command"})
            return json.dumps(run(request))
        except BaseException as exc:  # the harness's own failure: said, not a trap
            return json.dumps({"status": "harness_error",
                               "exception_message": f"{type(exc).__name__}: {exc}"})


def WitWorld():  # noqa: N802 (the name componentize-py looks for)
    return _Entry()
