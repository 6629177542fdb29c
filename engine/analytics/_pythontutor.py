"""A run as Python Tutor's execution trace JSON (the format its frontend renders,
documented in OnlinePythonTutor's v3/docs/opt-trace-format.md): ``code`` and ``trace``, a
list of execution points, each self-contained (``event``, ``line``, ``func_name``,
``stack_to_render``, ``globals``, ``ordered_globals``, ``heap``, ``stdout``). What maps to
what, and what steptrace cannot supply: docs/guides/exports.md, "pythontutor".

Values: steptrace stores a value as its ``repr`` (and a tracked object's id). A repr that
``ast.literal_eval`` reads back as a value of the recorded type is encoded as Python
Tutor encodes that value: ``int``, ``str``, ``bool``, ``None`` and finite non-integral
``float``s as themselves, other floats as ``["SPECIAL_FLOAT", repr]``, and ``list``,
``tuple``, ``set``, ``frozenset`` (as SET) and ``dict`` as heap objects (``["LIST", ...]``,
``["TUPLE", ...]``, ``["SET", ...]``, ``["DICT", [key, value], ...]``) referred to by
``["REF", id]``. Anything else (a cut repr, a ``deque``, an instance's rendering, a
function) is the heap object ``["HEAP_PRIMITIVE", type, repr]``, Python Tutor's own
encoding of objects it does not model. Tracked objects (docs/guides/runs.md, "Objects")
keep steptrace's object id as their heap id: a program instance is ``["INSTANCE", Cls,
[attr, value], ...]`` from its replayed attributes, a container its latest rendering.
Values inside a repr have no object ids: they get heap ids above the run's highest
object id, numbered afresh at every execution point.
"""

from __future__ import annotations

import ast
import math

from steptrace.analytics._trace_export import RunTrace, StepState, replay
from steptrace.analytics._trace_formats import _dumps, run_fields
from steptrace.store._runs import call_text

# steptrace's events as Python Tutor's (bdb's) events: a generator's yield returns and
# its resumption (or a throw into it) is a call, as bdb sees them; an exception raised
# in or propagating into a frame is ``exception``, and so is the frame's unwinding by it
# (steptrace records the exception there; bdb would report a return of None).
EVENTS = {"call": "call", "resume": "call", "throw": "call", "line": "step_line",
          "return": "return", "yield": "return", "raise": "exception",
          "unwind": "exception"}
# The mutable built-in containers steptrace tracks (docs/guides/runs.md, "Objects").
CONTAINER_TYPES = frozenset({"list", "dict", "set", "bytearray", "deque", "defaultdict",
                             "OrderedDict", "Counter"})
_PRIMITIVES = (bool, int, float, str, type(None))
_SEQUENCES = {list: "LIST", tuple: "TUPLE", set: "SET", frozenset: "SET"}
# The reprs of empty sets, which literal_eval does not read.
_EMPTY = {("set()", "set"): set(), ("frozenset()", "frozenset"): frozenset()}
# Parsed reprs kept per run (a cache, emptied when full).
_CACHE_SIZE = 4096
_UNPARSED = object()


def short_name(func: str) -> str:
    """The code object's name Python Tutor shows (``co_name``): the last part of the
    qualified name (``Stack.push`` -> ``push``, ``f.<locals>.<lambda>`` -> ``<lambda>``)."""
    return func.rsplit(".", 1)[-1]


class _Point:
    """One execution point's heap, filled as its values are encoded."""

    def __init__(self, state: StepState | None, first_free: int, parsed: dict) -> None:
        self.state = state
        self.heap: dict[str, list] = {}
        self.next_id = first_free
        self.parsed = parsed

    def _new(self, encoding: list) -> list:
        heap_id = self.next_id
        self.next_id += 1
        self.heap[str(heap_id)] = encoding
        return ["REF", heap_id]

    def value(self, value: str, type_: str | None, truncated: bool, object_id: int | None):
        """The encoding of a stored value (a tracked object: a reference to it)."""
        if object_id is not None:
            self.tracked(object_id)
            return ["REF", object_id]
        return self.rendering(value, type_, truncated)

    def rendering(self, value: str, type_: str | None, truncated: bool):
        if not truncated:
            parsed = self._parse(value, type_)
            if parsed is not _UNPARSED:
                return self.python(parsed)
            if type_ == "float" and value in ("inf", "-inf", "nan"):
                return ["SPECIAL_FLOAT", value]
        return self._new(["HEAP_PRIMITIVE", type_ or "?", value + ("…" if truncated else "")])

    def _parse(self, value: str, type_: str | None):
        key = (value, type_)
        found = self.parsed.get(key, None)
        if found is not None:
            return found[0]
        parsed = _EMPTY.get(key, _UNPARSED)
        if parsed is _UNPARSED:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                parsed = _UNPARSED
        if parsed is not _UNPARSED and type(parsed).__name__ != type_:
            parsed = _UNPARSED  # a repr that reads back as another type (a program class)
        if len(self.parsed) >= _CACHE_SIZE:
            self.parsed.clear()
        self.parsed[key] = (parsed,)
        return parsed

    def python(self, value):
        """A value read back from a repr, encoded as Python Tutor encodes it."""
        kind = type(value)
        if kind is float:
            if math.isfinite(value) and value != int(value):
                return value
            return ["SPECIAL_FLOAT", repr(value)]
        if kind in _PRIMITIVES:
            return value
        if kind in _SEQUENCES:
            items = sorted(value, key=repr) if kind in (set, frozenset) else value
            return self._new([_SEQUENCES[kind], *(self.python(item) for item in items)])
        if kind is dict:
            return self._new(["DICT", *([self.python(k), self.python(v)]
                                        for k, v in value.items())])
        return self._new(["HEAP_PRIMITIVE", kind.__name__, repr(value)])

    def tracked(self, object_id: int) -> None:
        """Put tracked object ``object_id`` on the heap (once), and what it refers to."""
        key = str(object_id)
        if key in self.heap:
            return
        state = self.state
        type_ = state.object_types.get(object_id, "object")
        attributes = state.attributes.get(object_id)
        if attributes is not None or type_ not in CONTAINER_TYPES:
            encoding = ["INSTANCE", type_]
            self.heap[key] = encoding  # before its attributes: a cycle refers back to it
            for attr, (value, attr_type, truncated, ref_id) in (attributes or {}).items():
                encoding.append([attr, self.value(value, attr_type, truncated, ref_id)])
            return
        rendering = state.renderings.get(object_id)
        if rendering is None:
            self.heap[key] = ["HEAP_PRIMITIVE", type_, "?"]
            return
        value, rendered_type, truncated = rendering
        parsed = _UNPARSED if truncated else self._parse(value, rendered_type)
        if parsed is _UNPARSED or type(parsed) not in _SEQUENCES and type(parsed) is not dict:
            self.heap[key] = ["HEAP_PRIMITIVE", type_, value + ("…" if truncated else "")]
            return
        self.heap[key] = []  # reserved: its items get the ids after it
        reference = self.python(parsed)
        self.heap[key] = self.heap.pop(str(reference[1]))


def _frame_view(point: _Point, frame, highlighted: bool, value, event: str) -> dict:
    name = short_name(frame.func)
    encoded = {var: point.value(*held) for var, held in frame.locals.items()}
    ordered = list(frame.locals)
    if highlighted and event in ("return", "yield"):
        encoded["__return__"] = point.value(*value) if value is not None else None
        ordered.append("__return__")
    return {"func_name": name, "frame_id": frame.frame + 1, "unique_hash":
            f"{name}_f{frame.frame + 1}", "is_highlighted": highlighted, "is_parent": False,
            "is_zombie": False, "parent_frame_id_list": [], "encoded_locals": encoded,
            "ordered_varnames": ordered}


def pythontutor_trace(trace: RunTrace) -> dict:
    """The run as Python Tutor's trace object: ``code`` and ``trace`` (see the module
    docstring), and ``steptrace``: the run's id, sample, call and status."""
    run = trace.run
    script = run["shape"] == "script"
    first_free = max((row[0] for row in trace.objects), default=0) + 1
    parsed: dict = {}
    points: list[dict] = []
    seen_globals: dict[str, None] = {}
    globals_now: dict[str, tuple] = {}
    last = None
    for state in replay(trace):
        _number, event, func, line, _depth, _frame = state.step
        point = _Point(state, first_free, parsed)
        module = state.stack[0] if script and state.stack and state.stack[0] is not None \
            and state.stack[0].func == "<module>" else None
        globals_now = dict(state.globals)
        if module is not None:
            globals_now.update(module.locals)
        for name in globals_now:
            seen_globals.setdefault(name, None)
        ordered_globals = [name for name in seen_globals if name in globals_now]
        encoded_globals = {name: point.value(*globals_now[name]) for name in ordered_globals}
        stack = [_frame_view(point, frame, frame is state.frame, state.value, event)
                 for frame in state.stack if frame is not None and frame is not module]
        entry = {"event": EVENTS.get(event, "step_line"), "line": line,
                 "func_name": short_name(func), "globals": encoded_globals,
                 "ordered_globals": ordered_globals, "stack_to_render": stack,
                 "heap": point.heap, "stdout": ""}
        if entry["event"] == "exception":
            entry["exception_msg"] = state.value[0] if state.value is not None else ""
        points.append(entry)
        last = state
    if run["status"] == "exception":
        point = _Point(last, first_free, parsed)
        ordered_globals = [name for name in seen_globals if name in globals_now]
        encoded_globals = ({name: point.value(*globals_now[name]) for name in ordered_globals}
                           if last is not None else {})
        points.append({
            "event": "uncaught_exception", "line": last.step[3] if last else 1,
            "func_name": short_name(last.step[2]) if last else "<module>",
            "globals": encoded_globals, "ordered_globals": ordered_globals if last else [],
            "stack_to_render": [], "heap": point.heap, "stdout": "",
            "exception_msg": f"{run['exception_type']}: {run['exception_message']}"})
    if points:
        points[-1]["stdout"] = run["stdout"] or ""
    return {"code": run["code"], "trace": points,
            "steptrace": {**run_fields(run), "call": call_text(run["entry"], run["input"],
                                                                run["shape"], run["chain"])}}


def render_pythontutor(trace: RunTrace) -> str:
    """A run as one line of Python Tutor trace JSON (docs/guides/exports.md)."""
    return _dumps(pythontutor_trace(trace))
