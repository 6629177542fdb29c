"""The step tracer: a PEP 669 (``sys.monitoring``) tool that records what a program did.

Runs inside the sandbox (CPython 3.12+ for WASI); pure standard library.

Design, after coverage.py's ``sysmon.py``:

* ``PY_START`` is the only global local-event. Its callback decides once per code object
  whether the code belongs to the traced program (by its ``co_filename``). Foreign code
  (the standard library, this tracer, the job runner) gets ``DISABLE`` back and never
  fires again; program code gets its local events switched on with
  ``sys.monitoring.set_local_events``. Untraced code therefore pays nothing.
* Exception events (RAISE, PY_UNWIND, PY_THROW) cannot be set
  per code object, so they are global and filtered by a set lookup; exceptions are rare.
* Callbacks are small: append to flat column lists, one dict lookup for the frame id.

Step kinds (the ``event`` column of the ``steps`` table):

=============  ============================================================================
``call``       a program function starts a new activation (PY_START); line = ``def`` line
``line``       a line is about to run (LINE); the state recorded is the one *before* it runs
``return``     the activation returns (PY_RETURN); carries ``<return>``
``yield``      a generator/coroutine suspends (PY_YIELD); carries ``<yield>``
``resume``     a suspended generator/coroutine resumes (PY_RESUME)
``throw``      an exception is thrown into a suspended generator (PY_THROW); thrown into
               one that never started, its activation's ``call`` step comes first
``raise``      an exception is raised in, or propagates into, the frame (RAISE); ``<exception>``
``unwind``     the activation ends by an exception (PY_UNWIND); carries ``<exception>``
=============  ============================================================================

A ``line`` step is a LINE event, and LINE events are CPython 3.11-3.13's: where CPython
3.14 makes none for the statement after a loop (see "lines CPython 3.14 loses" below),
the tracer records it from the loop's exit. Beside the steps the tracer keeps the
*settrace view*'s own line events (``settrace_*``, the result's ``settrace_lines``): the
backward jumps that stay on their line, at which ``sys.settrace`` reports a line event
and sys.monitoring does not (``_settrace_line``). The steps' line events with those are
the line events ``sys.settrace`` reports (docs/guides/runs.md, "The settrace view").

CPython's EXCEPTION_HANDLED and RERAISE events are not steps: they also fire for the
handlers the compiler adds itself (an ``except`` clause that does not match, ``as e``
cleanup, the StopIteration guard of every generator), so they do not say what the source
did. An exception caught in a frame shows as its ``raise`` step followed by a ``line``
step of the same frame; one that escapes shows as ``unwind``.

A generator abandoned by a finished activation is closed when it is freed, after the
activation's ``return``; when no program activation is running at that moment, its
clean-up is not recorded (it is not part of what the call did).

Variable states are delta-encoded per frame: a step lists the locals of its frame whose
value (``repr`` and type) differs from that frame's previous step, and names that became
unbound (value ``None``). Names in angle brackets are event values, not locals.

Objects (see docs/guides/runs.md, "Objects"): instances of classes the program defined and
the built-in mutable containers (``_TRACKED``) get a per-run object id, 1, 2, ... in the
order the tracer first sees them (``objects``); a state row carries its value's id. At
every step the objects reachable from the frame's locals (through containers and
instance attributes, within ``MAX_WALK_DEPTH``/``MAX_WALK_OBJECTS``) are visited, and the
attributes of program instances that changed since the object was last seen are recorded
(``attributes``). The tracer keeps no program object, class or frame beyond a step: the
object's address (``bounded_repr.address``, not ``id``: see there) maps to the object id,
checked by a weak reference where the type allows one (a dead referent at the address
means a new object); a type is kept as its address; a suspended generator's frame is
found again by its address (``suspended``), since holding it would keep the generator
alive. The program's globals that its code names are recorded at the first step and
whenever they change (``global_states``).

Recording never runs the program's code, so a traced run does what the untraced one does
(docs/guides/runs.md, "What recording cannot change"): values are rendered by
bounded_repr.py's rule; a type is put in a set or dict only when its metaclass is
``type`` itself (a metaclass's ``__hash__`` would run: ``type(kind) is type and kind in
...``); a namespace is read with dict's own iteration, its plain ``str`` keys only
(``_namespace_items``), and looked up only when all its keys are plain strings.

Trust: the tracer shares its interpreter with the program, so it keeps no state where the
program can reach it. It is a module (no classes: a class is reachable through
``object.__subclasses__()``, and through its methods' ``__globals__`` everything its module
holds); the module is removed from ``sys.modules`` once the guest is built, its callbacks
are held only by sys.monitoring (whose namespace the program cannot see while it runs,
see job.py), and its functions see a private copy of the builtins, so rebinding
``builtins.len`` changes only the program.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: see the docstring

import sys  # noqa: E402

from _collections import OrderedDict, defaultdict, deque  # noqa: E402
from _operator import is_ as _is  # noqa: E402
from _weakref import ref as _weakref  # noqa: E402
from collections import Counter  # noqa: E402
from itertools import islice as _islice  # noqa: E402
from types import (BuiltinFunctionType, CodeType, FrameType, FunctionType,  # noqa: E402
                   ModuleType)
from opcode import opmap as _OPMAP  # noqa: E402  (read when the guest is built)

import bounded_repr as _br  # noqa: E402
import loops as _loops  # noqa: E402
from bounded_repr import address as _address  # noqa: E402
from bounded_repr import bounded_repr as _bounded_repr  # noqa: E402
from exposed import StopTracing  # noqa: E402

TOOL_ID = 3  # not one of the reserved ids (debugger 0, coverage 1, profiler 2, optimizer 5)
TOOL_NAME = "steptrace"

EVENT_NAMES = ("call", "line", "return", "yield", "resume", "throw", "raise", "unwind")
CALL, LINE, RETURN, YIELD, RESUME, THROW, RAISE, UNWIND = range(8)

# Objects of these types never change while the same object is bound: if a local still
# holds the very same object, its repr cannot have changed and is not recomputed.
_ATOMIC_TYPES = frozenset(
    {int, float, complex, str, bytes, bool, type(None), range, type(...)}
)

# Objects that get an object id: the built-in mutable containers (exact types) and
# instances of the program's classes (bounded_repr.layout).
_TRACKED = frozenset({list, dict, set, bytearray, deque, defaultdict, OrderedDict, Counter})
_NO_WEAKREF = frozenset({list, dict, bytearray, defaultdict})  # cannot be weakly referenced
# Containers whose items the object walk follows.
_WALKED = frozenset({list, tuple, dict, set, frozenset, deque, defaultdict, OrderedDict,
                     Counter})
_MAPPINGS = frozenset({dict, defaultdict, OrderedDict, Counter})
_FLAT = _ATOMIC_TYPES  # items that hold no objects
MAX_WALK_DEPTH = 6        # containers/attributes followed from a local
MAX_WALK_OBJECTS = 200    # tracked objects visited per step
MAX_WALK_ITEMS = 1000     # items looked at in one container
_DICT_KEYS, _DICT_VALUES, _DICT_ITEMS = dict.keys, dict.values, dict.items
# _FLAT_SAME. A list or dict local whose repr was flat (its items ints, strings and the
# like: bounded_repr.flat) is not rendered again while it is the object at the same
# address holding the very same items (compared by identity, in order, at C speed): its
# repr cannot have changed. The tracer keeps those items (they have no finalizers), never
# the container; a flat tuple is kept itself (immutable).
_issubclass = issubclass
_MISSING = object()  # not a program object: made by the runner, never handed out

_getframe = sys._getframe
_FRAME_LOCALS = type((lambda: _getframe(0).f_locals)())  # a function frame's: FrameLocalsProxy
_GENERATOR = FrameType.__dict__.get("f_generator")  # Python 3.14: the frame's generator


def _generator_of(frame):
    """The generator or coroutine whose frame this is (None where frames do not say)."""
    return None if _GENERATOR is None else _GENERATOR.__get__(frame)
# sys.monitoring's functions, bound once (the program never sees the namespace itself).
_MONITORING = sys.monitoring
_get_tool = _MONITORING.get_tool
_use_tool_id = _MONITORING.use_tool_id
_free_tool_id = _MONITORING.free_tool_id
_register_callback = _MONITORING.register_callback
_set_events = _MONITORING.set_events
_get_events = _MONITORING.get_events
_set_local_events = _MONITORING.set_local_events
_get_local_events = _MONITORING.get_local_events
_EVENTS = _MONITORING.events
_DISABLE = _MONITORING.DISABLE
GLOBAL_EVENTS = _EVENTS.PY_START | _EVENTS.PY_THROW | _EVENTS.RAISE | _EVENTS.PY_UNWIND
_LOCAL_EVENTS = _EVENTS.PY_RESUME | _EVENTS.LINE | _EVENTS.PY_RETURN | _EVENTS.PY_YIELD
_JUMP = _EVENTS.JUMP  # loop detection (loops.py) and the settrace view: program code only
# CPython 3.14 only (a loop's exit: FOR_ITER's BRANCH_RIGHT fires at the POP_ITER after it)
_BRANCH_RIGHT = getattr(_EVENTS, "BRANCH_RIGHT", 0)
# BaseException.__new__/__init__, not StopTracing(...): the class is the program's to see
# (and to change), its constructor must not run program code inside the tracer.
_new_exception = BaseException.__new__
_init_exception = BaseException.__init__

FILENAME = "<program>"  # the traced program's code objects are compiled under this name

# ------------------------------------------------------------------ state (one job)
own = False               # the tracer itself is calling an audited function (job.py's hook)
active = False            # recording
stop = None               # the StopTracing this job was stopped with, or None
stop_status = None        # ... and its status and message (never read from the exception)
stop_message = None
recursion_limit = 1000    # the program's recursion limit (sys.setrecursionlimit, job.py)
base_frame = None         # the runner's frame that calls the entry function
top_levels = 1            # frames the base frame stands for: a script's top level (1);
                          # 0 when the traced code is the module itself (a script)
callbacks: dict = {}      # sys.monitoring event -> callback, as registered
max_steps = max_repr = trace_chars_left = 0
count_instructions = True
full_locals = False       # tests: also record complete locals per step
# the step columns, one entry per step: event (index into EVENT_NAMES), line, depth,
# frame id, function (index into funcs)
step_events: list = []
step_lines: list = []
step_depths: list = []
step_frames: list = []
step_funcs: list = []
states: list = []         # (step, name, repr or None, type name or None, truncated,
                          #  object id or None)
object_index: dict = {}   # address -> (object id, weak reference or None, address of its type)
object_types: list = []   # per object id (from 1): its type name ...
object_steps: list = []   # ... and the step it was first seen at
attr_prev: dict = {}      # object id -> {attribute: (atomic value, repr, type's address,
                          #                 ref id)}
attributes: list = []     # (step, object id, attribute, repr or None, type, truncated, ref id)
namespace = None          # the program's module namespace (its globals)
global_names: frozenset = frozenset()  # names the program's functions use (co_names)
watched: list = []        # those in the namespace (recomputed when its size changes)
watched_size = -1
global_prev: dict = {}    # name -> (atomic value or _MISSING, repr, type's address,
                          #         object id, weak reference)
global_rows: list = []    # (step, name, repr or None, type, truncated, object id)
walk_cut = False          # objects were beyond the walk's bounds
snapshots: list = []      # full_locals mode: (step, {name: repr})
funcs: list = []
code_index: dict = {}     # traced code object -> index into funcs
offset_lines: dict = {}   # code object -> {offset: line}
frame_ids: dict = {}      # running program frame object -> frame id
suspended: dict = {}      # address of a suspended generator's frame -> (frame id, code,
                          #   yield offset, (weak reference to, address of) its generator)
frame_depths: dict = {}   # running program frame -> Python depth above base
prev: dict = {}           # frame id -> {name: (kept value or _MISSING, repr, type's
                          #   address, object id, (type, address, flat items): _FLAT_SAME)}
stack: list = []          # (frame id, frame) of active program frames
next_frame = 0
line_steps = instructions = calls = 0
max_depth = -1
quiet = 0                 # > 0 while the tracer itself runs program code (a __repr__)
MAX_NAME = 1000           # characters kept of a function's qualified name or a type's name
cuts: dict = {}           # field -> [texts cut, longest length]: said in the run's note
loop_events = False       # this job judges loops (loops.py): program code gets JUMP events
loop_codes: dict = {}     # program code object -> True once its JUMP events are on
lost_lines: dict = {}     # traced code object -> {offset: line}: LINE events CPython 3.14
                          # loses (_lost_lines), recorded at its BRANCH_RIGHT events
# the settrace view's own line events (see _settrace_line), one entry each: the step they
# follow, their line, depth, frame id and function (index into funcs)
settrace_steps: list = []
settrace_lines: list = []
settrace_depths: list = []
settrace_frames: list = []
settrace_funcs: list = []
settrace_cut = False      # more of them than max_steps: the view is not recorded


def begin(steps_limit: int, repr_limit: int, trace_chars: int,
          instructions_on: bool = True, locals_on: bool = False,
          program_namespace: dict | None = None, program_code=None) -> None:
    """Forget the previous job and record from now on. ``program_namespace`` is the
    program's globals, ``program_code`` its compiled module (the names its code uses)."""
    global max_steps, max_repr, trace_chars_left, count_instructions, full_locals
    global step_events, step_lines, step_depths, step_frames, step_funcs
    global states, snapshots, funcs, code_index, offset_lines
    global frame_ids, frame_depths, prev, stack, next_frame, line_steps, instructions
    global calls, max_depth, quiet, active, top_levels
    global object_index, object_types, object_steps, attr_prev, attributes
    global namespace, global_names, watched, watched_size, global_prev, global_rows, walk_cut
    global lost_lines, settrace_cut
    global settrace_steps, settrace_lines, settrace_depths, settrace_frames, settrace_funcs
    lost_lines, settrace_cut = {}, False
    settrace_steps, settrace_lines, settrace_depths, settrace_frames, settrace_funcs = (
        [], [], [], [], [])
    max_steps, max_repr, trace_chars_left = steps_limit, repr_limit, trace_chars
    top_levels = 1
    count_instructions, full_locals = instructions_on, locals_on
    step_events, step_lines, step_depths, step_frames, step_funcs = [], [], [], [], []
    states, snapshots, funcs = [], [], []
    code_index, offset_lines, frame_ids, frame_depths, prev = {}, {}, {}, {}, {}
    suspended.clear()
    stack = []
    next_frame = line_steps = instructions = calls = quiet = 0
    max_depth = -1
    object_index, object_types, object_steps, attr_prev, attributes = {}, [], [], {}, []
    global_prev, global_rows, watched, watched_size, walk_cut = {}, [], [], -1, False
    _br.reset()
    namespace = program_namespace if type(program_namespace) is dict else None
    global_names = _code_names(program_code) if namespace is not None else frozenset()
    active = True


_CO_OPTIMIZED = 1  # a function's code (not a module's or a class body's)


def _code_names(code) -> frozenset:
    """The global names the program's functions use (the ``co_names`` of every function
    code object in the module, nested ones included; the module's and class bodies' own
    code ran before the call). Dunders are left out where they are watched
    (``_check_globals``)."""
    names: set = set()
    pending = [code] if type(code) is CodeType else []
    while pending:
        current = pending.pop()
        if current.co_flags & _CO_OPTIMIZED:
            names.update(current.co_names)
        pending.extend([const for const in current.co_consts if type(const) is CodeType])
    return frozenset(names)


def reset_stop() -> None:
    global stop, stop_status, stop_message
    stop = stop_status = stop_message = None


def halt(status: str, message: str):
    """Stop the job: from now on every event of the program raises the same StopTracing."""
    global stop, stop_status, stop_message
    if stop is None:
        exc = _new_exception(StopTracing)
        _init_exception(exc, message)
        stop, stop_status, stop_message = exc, status, message
    raise stop


def finish() -> None:
    """Stop recording; drop references to the program's frames and values."""
    global active, base_frame, namespace
    active = False
    base_frame = namespace = None
    _loops.finish()
    frame_ids.clear()
    suspended.clear()
    frame_depths.clear()
    prev.clear()
    stack.clear()
    object_index.clear()
    attr_prev.clear()
    global_prev.clear()
    watched.clear()
    _br.reset(job=False)


# ------------------------------------------------------------------ lifecycle
def install() -> None:
    """Register the tool and its global events, for the life of the interpreter.

    Done while the guest is pre-initialised, so the snapshot already has it: foreign code
    run during the warm-up job has answered ``DISABLE`` and stays disabled in every
    instance. Switching events on and off per job instead would make CPython re-instrument
    every code object twice per job."""
    global own
    own = True
    try:
        if _get_tool(TOOL_ID) is not None:
            _free_tool_id(TOOL_ID)
        _use_tool_id(TOOL_ID, TOOL_NAME)
        _set_events(TOOL_ID, GLOBAL_EVENTS)
        callbacks.clear()
        for name, callback in (("PY_START", _on_start), ("PY_RESUME", _on_resume),
                               ("PY_THROW", _on_throw), ("LINE", _on_line),
                               ("PY_RETURN", _on_return), ("PY_YIELD", _on_yield),
                               ("RAISE", _on_raise), ("PY_UNWIND", _on_unwind),
                               ("INSTRUCTION", _on_instruction), ("JUMP", _on_jump),
                               ("BRANCH_RIGHT", _on_branch)):
            event = getattr(_EVENTS, name, 0)
            if not event:  # BRANCH_RIGHT: CPython 3.14 and later
                continue
            callbacks[event] = callback
            _register_callback(TOOL_ID, event, callback)
    finally:
        own = False


def local_events(code=None) -> int:
    """The local events of a traced code object (``code``: with those only it needs).
    JUMP always: backward jumps to the same line are the settrace view's own line events
    (``_settrace_line``), and loops.py judges loops by the backward ones."""
    return (_LOCAL_EVENTS | _JUMP | (_EVENTS.INSTRUCTION if count_instructions else 0)
            | (_BRANCH_RIGHT if code in lost_lines else 0))


def loops_begin(on: bool, program_namespace, program_code) -> None:
    """A job starts (any mode): judge loops (``on``) in the program whose namespace and
    module code these are, from its first line (its top level included)."""
    global loop_events
    loop_events = bool(on)
    loop_codes.clear()
    _loops.begin(loop_events, program_namespace, program_code)


def tamper_reasons() -> list[str]:
    """After a job: what no longer holds of the tool as installed (the program never sees
    sys.monitoring, so this is defence in depth). Reinstalls what was changed."""
    global own
    own = True
    try:
        reasons = []
        if _get_tool(TOOL_ID) != TOOL_NAME:
            reasons.append("the tracer's sys.monitoring tool id was freed or taken over")
        else:
            if _get_events(TOOL_ID) != GLOBAL_EVENTS:
                reasons.append("the tracer's sys.monitoring events were changed")
            replaced = False
            for event, callback in callbacks.items():
                if _register_callback(TOOL_ID, event, callback) is not callback:
                    replaced = True
            if replaced:
                reasons.append("the tracer's sys.monitoring callbacks were replaced")
            for code in code_index:
                if _get_local_events(TOOL_ID, code) != local_events(code):
                    reasons.append("the tracer's local events were changed")
                    break
            for code in loop_codes:
                if code not in code_index and _get_local_events(TOOL_ID, code) != _JUMP:
                    reasons.append("the tracer's local events were changed")
                    break
    finally:
        own = False
    if reasons:
        install()
    return reasons


# ------------------------------------------------------------------ recording
def _record(kind: int, code, line: int, frame, fid: int) -> int:
    """Append one step; enforce the step limit. Returns the step index."""
    global max_depth
    index = len(step_events)
    if index >= max_steps:
        halt("step_limit", f"trace exceeds {max_steps} steps")
    depth = len(stack) - 1
    if depth > max_depth:
        max_depth = depth
    step_events.append(kind)
    step_lines.append(line)
    step_depths.append(depth)
    step_frames.append(fid)
    step_funcs.append(code_index[code])
    _delta(frame, fid, index)
    return index


def _delta(frame, fid: int, index: int) -> None:
    """Record the locals of ``frame`` that changed since its previous step, the objects
    reachable from them, and the program's globals that changed."""
    old_values = prev[fid]
    local_vars = frame.f_locals
    module = False
    if type(local_vars) is _FRAME_LOCALS:  # a function's: its names are the code's
        items = local_vars.items()
        names = local_vars
    else:  # a module's or a class body's namespace: what the program put there
        module = local_vars is namespace and namespace is not None
        items = _namespace_items(local_vars, module)
        names = None
    roots = None
    seen = 0
    for name, value in items:
        seen += 1
        old = old_values.get(name)
        kind = type(value)
        if old is not None:
            if old[0] is value:
                continue  # the very atomic value (or flat tuple) it held: unchanged
            same = old[4]
            if same is not None and same[0] is kind and same[1] == _address(value) and len(
                    value) == len(same[2]) and all(map(_is, value, same[2])) and (
                    kind is list or all(map(_is, _DICT_VALUES(value), same[3]))):
                continue  # the same flat list or dict, holding the very same items
        text, truncated = value_repr(value)
        oid = same = None
        kept = _MISSING
        plain = type(kind) is type  # only then may the type be hashed (set lookups)
        if plain and kind in _ATOMIC_TYPES:
            kept = value
        else:
            # Only values without finalizers are kept: immutable atomic ones, and tuples
            # and the items of lists and dicts that hold nothing else (a repr ``flat``, see
            # _FLAT_SAME). Holding any other object (or its class: the tuple keeps the
            # type's address) would delay its __del__ past the line that drops it.
            flat = _br.flat
            if flat:
                if kind is tuple:
                    kept = value
                elif kind is list:
                    same = (list, _address(value), tuple(value))
                elif kind is dict:
                    same = (dict, _address(value), tuple(value), tuple(_DICT_VALUES(value)))
            if plain and kind in _TRACKED:
                entry = object_index.get(_address(value))
                if entry is not None and entry[1] is None and entry[2] == _address(kind):
                    oid = entry[0]  # a list or dict seen before (no weak reference to check)
                else:
                    oid = _object_id(value, kind, index)
                if not flat and kind in _WALKED:
                    roots = [value] if roots is None else roots + [value]
            elif plain and kind in _WALKED:
                if not flat:
                    roots = [value] if roots is None else roots + [value]
            elif _shape(kind) is not None:
                oid = _object_id(value, kind, index)
                roots = [value] if roots is None else roots + [value]
        mark = _address(kind)
        if old is not None and old[1] == text and old[2] == mark and old[3] == oid:
            old_values[name] = (kept, text, mark, oid, same)
            continue
        old_values[name] = (kept, text, mark, oid, same)
        _state(index, name, text, type_name(kind), truncated, oid)
    if seen != len(old_values):
        if names is None:
            names = {name for name, _ in items}
        for name in [n for n in old_values if n not in names]:
            del old_values[name]
            states.append((index, name, None, None, False, None))
    if roots is not None:
        _walk(roots, index)
    if global_names and not module and (watched or len(namespace) != watched_size):
        _globals(index)
    if full_locals:  # computed afresh, independently of the deltas' bookkeeping
        snapshots.append((index, {n: value_repr(v)[0] for n, v in items}))


def _namespace_items(mapping, module: bool) -> list:
    """``(name, value)`` of a module's or class body's namespace: its plain ``str`` keys
    (a program may put any key there, whose ``__hash__`` or ``__eq__`` the tracer's own
    dicts would run), dunders left out for a module (a script's top level), read with
    dict's own C iteration; a namespace that is not a dict (a metaclass's ``__prepare__``
    mapping, ``exec``'s locals) shows nothing (reading it would run its methods)."""
    if not _issubclass(type(mapping), dict):
        return []
    if module:
        return [(n, v) for n, v in list(_DICT_ITEMS(mapping))
                if type(n) is str and not (n[:2] == "__" and n[-2:] == "__")]
    return [(n, v) for n, v in list(_DICT_ITEMS(mapping)) if type(n) is str]


def _state(index: int, name: str, text: str, kind_name: str, truncated: bool,
           oid: int | None = None) -> None:
    global trace_chars_left
    trace_chars_left -= len(text) + len(name)
    if trace_chars_left < 0:
        halt("output_limit", "trace exceeds its size limit (variable states)")
    states.append((index, name, text, kind_name, truncated, oid))


def _spend(chars: int, what: str) -> None:
    global trace_chars_left
    trace_chars_left -= chars
    if trace_chars_left < 0:
        halt("output_limit", f"trace exceeds its size limit ({what})")


# ------------------------------------------------------------------ objects
def _shape(kind):
    """The layout of a program class (bounded_repr.layout), None for other types. Quiet,
    and a failure taken as "not a program class", as a safety net: no program code runs
    there."""
    global quiet
    entry = _br._layouts.get(_address(kind))
    if entry is not None and entry[0]() is kind:
        return entry[1]
    quiet += 1
    try:
        return _br.layout(kind)
    except BaseException as exc:
        if exc is stop and stop is not None:
            raise
        return None
    finally:
        quiet -= 1


def _object_id(value, kind, index: int) -> int:
    """The object's id; an object not seen before (or at the address of a dead one) gets
    the next id and an ``objects`` row."""
    key = _address(value)
    entry = object_index.get(key)
    if entry is not None and entry[2] == _address(kind):
        ref = entry[1]
        if ref is None or ref() is value:
            return entry[0]
    ref = None
    if type(kind) is not type or kind not in _NO_WEAKREF:  # (a type hashed: see _delta)
        try:
            ref = _weakref(value)
        except TypeError:  # a class with __slots__ and no __weakref__
            ref = None
    name = type_name(kind, "objects.type")
    _spend(len(name) + 8, "objects")
    object_types.append(name)
    object_steps.append(index)
    oid = len(object_types)
    object_index[key] = (oid, ref, _address(kind))
    return oid


def _walk(roots: list, index: int) -> None:
    """Visit the objects reachable from ``roots`` (breadth first, within the bounds) and
    record the attributes of program instances that changed. Quiet: the walk reads the
    program's class dicts; an exception a program's key raises there ends the walk."""
    global quiet
    quiet += 1
    try:
        _visit(roots, index)
    except BaseException as exc:
        if exc is stop and stop is not None:
            raise
    finally:
        quiet -= 1


def _visit(level: list, index: int) -> None:
    global walk_cut
    layouts_get = _br._layouts.get
    index_get = object_index.get
    seen = set()
    count = 0
    for _ in range(MAX_WALK_DEPTH + 1):
        following: list = []
        for value in level:
            key = _address(value)
            if key in seen:
                continue
            seen.add(key)
            kind = type(value)
            tracked = type(kind) is type and kind in _TRACKED  # (a type hashed: see _delta)
            if tracked:
                shape = None
            else:
                entry = layouts_get(_address(kind))
                shape = entry[1] if entry is not None and entry[0]() is kind else _shape(kind)
            if shape is not None or tracked:
                count += 1
                if count > MAX_WALK_OBJECTS:
                    walk_cut = True
                    return
                entry = index_get(key)
                if entry is not None and entry[2] == _address(kind) and (
                        entry[1] is None or entry[1]() is value):
                    oid = entry[0]  # seen before (what _object_id checks first)
                else:
                    oid = _object_id(value, kind, index)
                if shape is not None:
                    _attributes(value, kind, shape, oid, index, following)
                    continue
            if type(kind) is type and kind in _WALKED:
                _children(value, kind, following)
        if not following:
            return
        level = following
    walk_cut = True


def _children(value, kind, following: list) -> None:
    """The items of a container that may hold objects (not ints, strings, ...)."""
    global walk_cut
    parts = (_DICT_KEYS(value), _DICT_VALUES(value)) if kind in _MAPPINGS else (value,)
    for part in parts:
        if len(part) > MAX_WALK_ITEMS:
            walk_cut = True
            part = list(_islice(part, MAX_WALK_ITEMS))
        else:
            found = _br.kinds(part)  # the items' types, unless hashing one runs program code
            if found is not None and found <= _FLAT:
                continue
        for item in part:
            kind = type(item)
            if type(kind) is not type or kind not in _FLAT:
                following.append(item)


def _attributes(value, kind, shape, oid: int, index: int, following: list) -> None:
    """Record the attributes of a program instance that changed since it was last seen
    (all of them the first time); deleted ones with value None."""
    pairs = _br.attributes(value, kind, shape)
    old_attrs = attr_prev.get(oid)
    if old_attrs is None:
        old_attrs = attr_prev[oid] = {}
    for name, item in pairs:
        item_kind = type(item)
        old = old_attrs.get(name)
        ref = None
        tracked = type(item_kind) is type and item_kind in _TRACKED  # (see _delta)
        if type(item_kind) is type and item_kind in _ATOMIC_TYPES:
            if old is not None and old[0] is item and old[2] == _address(item_kind):
                continue
            kept = item
        else:
            kept = None
            following.append(item)
            entry = object_index.get(_address(item))
            if entry is not None and entry[2] == _address(item_kind) and (
                    entry[1]() is item if entry[1] is not None else tracked):
                ref = entry[0]  # an object seen before (what _object_id checks first)
                if old is not None and old[3] == ref and not tracked:
                    continue  # the same instance (see below)
            elif tracked:
                ref = _object_id(item, item_kind, index)
            elif _shape(item_kind) is not None:
                ref = _object_id(item, item_kind, index)
                if old is not None and old[3] == ref:
                    # the same instance: its own changes are its own rows (rendering it
                    # again at every step would repeat them up the graph, and cost the most)
                    continue
        text, truncated = value_repr(item)
        if old is not None and old[1] == text and old[2] == _address(item_kind) and old[3] == ref:
            old_attrs[name] = (kept, text, _address(item_kind), ref)
            continue
        old_attrs[name] = (kept, text, _address(item_kind), ref)
        kind_name = type_name(item_kind, "attributes.type")
        _spend(len(text) + len(name) + 8, "attributes")
        attributes.append((index, oid, name, text, kind_name, truncated, ref))
    if len(pairs) != len(old_attrs):
        present = {name for name, _ in pairs}
        for name in [n for n in old_attrs if n not in present]:
            del old_attrs[name]
            _spend(len(name) + 8, "attributes")
            attributes.append((index, oid, name, None, None, False, None))


# ------------------------------------------------------------------ globals
def _globals(index: int) -> None:
    """Record the program's globals (names its code uses) that changed: their values at
    the first step, then every change. Modules are left out; functions and classes only
    when they are bound again after the first step. Quiet, as a safety net: no program
    code runs here."""
    global quiet
    quiet += 1
    try:
        _check_globals(index)
    except BaseException as exc:
        if exc is stop and stop is not None:
            raise
    finally:
        quiet -= 1


def _check_globals(index: int) -> None:
    global watched, watched_size
    ns = namespace
    if len(ns) != watched_size:
        watched_size = len(ns)
        # sorted: the order of a set of names would follow the hash secret
        watched = sorted([name for name in ns if type(name) is str and name in global_names
                          and not (name[:2] == "__" and name[-2:] == "__")])
    first = not global_prev and index == 0
    # a key of the program's (a str subclass, any object) may compare equal to a name and
    # run its __eq__ in a lookup: then the names are read from the plain str keys only
    found = ns if _br.exact_keys(ns) else {n: v for n, v in _DICT_ITEMS(ns) if type(n) is str}
    for name in watched:
        value = found.get(name, _MISSING)
        old = global_prev.get(name)
        if value is _MISSING:
            if old is not None and old[1] is not None:
                global_prev[name] = (_MISSING, None, None, None, None)
                _spend(len(name) + 8, "global states")
                global_rows.append((index, name, None, None, False, None))
            continue
        kind = type(value)
        if old is not None:
            if old[0] is value:
                continue  # the very atomic value it held
            weak = old[4]
            if weak is not None and weak() is value:
                continue
        weak = None
        mark = _address(kind)  # the type's address: the tracer keeps no class alive
        if kind is ModuleType or kind is FunctionType or kind is BuiltinFunctionType \
                or _issubclass(kind, type):
            weak = _weakref(value)
            if kind is ModuleType or (old is None and first):
                global_prev[name] = (_MISSING, "", mark, None, weak)
                continue
        text, truncated = value_repr(value)
        oid = None
        plain = type(kind) is type  # (see _delta)
        kept = value if plain and kind in _ATOMIC_TYPES else _MISSING
        if kept is _MISSING and ((plain and kind in _TRACKED) or _shape(kind) is not None):
            oid = _object_id(value, kind, index)
        if old is not None and old[1] == text and old[2] == mark and old[3] == oid:
            global_prev[name] = (kept, text, mark, oid, weak)
            continue
        global_prev[name] = (kept, text, mark, oid, weak)
        _spend(len(text) + len(name), "global states")
        global_rows.append((index, name, text, type_name(kind, "global_states.type"),
                            truncated, oid))


_TYPE_NAME = type.__dict__["__name__"].__get__  # the C getter: no metaclass code runs
_JOIN = "".join


def cut(field: str, length: int) -> None:
    """Remember that a text of ``field`` (``length`` characters) was cut."""
    seen = cuts.get(field)
    if seen is None:
        cuts[field] = [1, length]
    else:
        seen[0] += 1
        seen[1] = max(seen[1], length)


def type_name(kind, field: str | None = "states.type") -> str:
    """A type's ``__name__`` as a plain ``str``, cut to ``MAX_NAME`` characters (``field``
    says where it goes, for the note), read by type's own getter (a program's metaclass
    cannot answer instead)."""
    name = _TYPE_NAME(kind)
    if type(name) is not str:
        name = _JOIN((name,))
    if len(name) <= MAX_NAME:
        return name
    if field is not None:
        cut(field, len(name))
    return name[:MAX_NAME]


def value_repr(value, limit: int | None = None, program_reprs: bool = False) -> tuple[str, bool]:
    """The rendering (bounded_repr.py) cut to ``max_repr`` (or ``limit``) characters,
    computed within that budget for built-in types. It runs no program code, but for the
    run's output (``program_reprs``), whose program ``__repr__`` runs untraced
    (``quiet``)."""
    global quiet
    quiet += 1
    try:
        text, truncated = _bounded_repr(value, max_repr if limit is None else limit,
                                        program_reprs)
    except BaseException as exc:  # a program's __repr__ may raise anything
        if exc is stop and stop is not None:
            raise
        text, truncated = f"<repr failed: {type_name(type(exc), None)}>", False
    finally:
        quiet -= 1
    if type(text) is not str:
        return "<repr returned a non-string>", False
    return text, truncated


def line_of(code, offset: int, default: int | None = -1) -> int | None:
    """The line of the instruction at ``offset``; ``default`` (-1: the ``def`` line) for
    instructions that have none."""
    line = (offset_lines.get(code) or _line_table(code)).get(offset)
    if line is None:
        return code.co_firstlineno if default == -1 else default
    return line


def _line_table(code) -> dict:
    """``{offset: line}`` of ``code``'s instructions that have a line (made once a job)."""
    table = {}
    for start, end, line in code.co_lines():
        if line is not None:
            for off in range(start, end, 2):
                table[off] = line
    offset_lines[code] = table
    return table


def _check_depth(frame, enforce: bool = True) -> None:
    """Raise RecursionError where plain CPython would: the entry function stands for a
    function called from a script's top level (depth 2; a script's module frame is its
    top level, depth 1: ``top_levels``), and every Python frame between counts, program
    or not. A resumed generator is not checked: CPython refuses to resume
    it in the caller, which a callback (already inside the generator's frame) cannot
    reproduce; it may run one level deeper instead."""
    depth = 0
    current = frame
    while current is not None:
        known = frame_depths.get(current)
        if known is not None:
            depth += known
            break
        if current is base_frame:
            break
        depth += 1
        current = current.f_back
    frame_depths[frame] = depth
    if enforce and depth + top_levels > recursion_limit:
        del frame_depths[frame]
        raise RecursionError("maximum recursion depth exceeded")


def frame_at(depth: int):
    """``sys._getframe(depth + 1)`` as the tracer's own call, which the audit hook allows."""
    global own
    own = True
    try:
        return _getframe(depth + 1)
    finally:
        own = False


# ------------------------------------------------------------------ callbacks
def _on_start(code, offset):
    global next_frame, calls, own
    if code.co_filename != FILENAME:
        return _DISABLE
    recording = active and not quiet
    if _loops.enabled:
        # inline, no call of a Python function: a program at its recursion limit must
        # not get a RecursionError from the loop detection's bookkeeping
        starts = _loops.starts
        starts[code] = starts.get(code, 0) + 1
        if code not in loop_codes:
            loop_codes[code] = True
            # code about to be recorded gets its JUMP events with the others (_register):
            # switching them on twice would instrument the code twice
            if code not in code_index and not (recording and stop is None):
                own = True
                try:
                    _set_local_events(TOOL_ID, code, _get_local_events(TOOL_ID, code) | _JUMP)
                finally:
                    own = False
    if not recording:
        return None
    if stop is not None:
        raise stop
    if not stack and code.co_name == "__del__":
        # a finalizer run while no program activation is running (an object freed as the
        # call's frames are torn down) is not part of the call
        _unrecorded(code)
        return None
    frame = frame_at(1)
    caller = frame.f_back
    if (caller is not None and caller.f_code.co_filename == FILENAME
            and caller not in frame_ids):
        # called from a program frame that is not traced: the clean-up of a generator
        # abandoned by a finished activation (see _on_throw) is not part of the call
        _unrecorded(code)
        return None
    _register(code)
    _check_depth(frame)
    fid = next_frame
    next_frame += 1
    frame_ids[frame] = fid
    prev[fid] = {}
    stack.append((fid, frame))
    calls += 1
    _record(CALL, code, code.co_firstlineno, frame, fid)
    return None


def _unrecorded(code) -> None:
    """Program code that starts while recording but is not recorded: the JUMP events the
    loop detection gave up on switching on above (``_register`` does it for recorded
    code) are switched on now."""
    global own
    if code in loop_codes and code not in code_index and _loops.enabled:
        own = True
        try:
            _set_local_events(TOOL_ID, code, _get_local_events(TOOL_ID, code) | _JUMP)
        finally:
            own = False


def _register(code) -> None:
    """First sight of a program code object: give it an index and turn its local events
    on (only program code pays for them)."""
    global own
    if code not in code_index:
        code_index[code] = len(funcs)
        name = code.co_qualname
        if type(name) is not str:
            name = _JOIN((name,))
        if len(name) > MAX_NAME:
            cut("funcs", len(name))
            name = name[:MAX_NAME]
        funcs.append(name)
        lost = _lost_lines(code)
        if lost is not None:
            lost_lines[code] = lost
        own = True
        try:
            _set_local_events(TOOL_ID, code, local_events(code))
        finally:
            own = False


def _on_jump(code, offset, destination):
    """A jump in the program's code: a backward one to its own line is a line event of
    the settrace view (``_settrace_line``); while a job judges loops, a backward one may
    prove that the program loops forever (loops.py). Until the next check is due this
    costs a counter."""
    if destination > offset:
        return _DISABLE  # forward jumps are never decision points (a jump to itself is
                         # a loop: ``while True: pass`` on one line)
    if quiet:
        return None
    if stop is not None:
        raise stop
    lines = offset_lines.get(code) or _line_table(code)
    line = lines.get(offset)
    same = line is not None and line == lines.get(destination)
    if same and active:
        _settrace_line(code, line, destination)
    if not _loops.enabled:
        # judging ended (or never began): this jump never comes again, unless settrace
        # reports it and the view is still recorded
        return None if same and not settrace_cut else _DISABLE
    loops = _loops
    loops.jumps += 1
    if loops.jumps < loops.next_check:
        return None
    try:
        verdict = loops.on_jump(code, destination)
    except RecursionError:  # the program is near its recursion limit: no check here,
        return None         # and the program never sees an error of the detection's
    except MemoryError:
        loops.refusal = "no memory left for a snapshot"
        loops.next_check = 0
        return None
    if verdict is None:
        return None
    if verdict is False:
        return None if same else _DISABLE
    halt("loops", verdict)


def _settrace_line(code, line: int, destination: int) -> None:
    """A backward jump to ``destination`` that stays on ``line``: a line event of the
    settrace view, in the running program frame. ``sys.settrace`` reports a line event
    for every backward jump whose source and target are on the same line (CPython's
    Python/legacy_tracing.c, ``sys_trace_jump_func``), which sys.monitoring's LINE does
    not: each further item of a comprehension or generator expression, each further
    iteration of a loop written on one line. Not the loop CPython 3.14 compiles a call of
    the builtin ``any``, ``all`` or ``tuple`` on a generator expression into (gh-131738):
    3.12 and 3.13 run that loop in the builtin, where settrace sees nothing, and the
    view is theirs (docs/guides/cpython-differences.md). Kept beside the steps (a view,
    not steps): at most ``max_steps`` of them, else none (``settrace_cut``)."""
    global settrace_cut
    if not stack or settrace_cut:
        return
    fid, frame = stack[-1]
    func = code_index.get(code)
    if func is None or frame.f_code is not code:
        return  # not a frame the trace follows
    if _CALL_BEFORE and destination >= _CALL_BEFORE and \
            code.co_code[destination - _CALL_BEFORE] == _CALL:
        return  # 3.14's loop for any/all/tuple (see _CALL_BEFORE)
    if len(settrace_steps) >= max_steps:
        settrace_cut = True
        return
    settrace_steps.append(len(step_events) - 1)  # the step it follows (the frame's call
                                                 # step came first: never -1)
    settrace_lines.append(line)
    settrace_depths.append(len(stack) - 1)
    settrace_frames.append(fid)
    settrace_funcs.append(func)


def _on_branch(code, offset, destination):
    """CPython 3.14's BRANCH_RIGHT, on only in code objects with lines it loses
    (``_lost_lines``): the loop exit whose LINE event CPython does not emit is recorded
    here, as ``_on_line`` records the others. Every other branch never matters."""
    lost = lost_lines.get(code)
    line = None if lost is None else lost.get(destination)
    if line is None:
        return _DISABLE
    return _on_line(code, line)


_POP_ITER = _OPMAP.get("POP_ITER")  # (CPython 3.14 and later)
# The loop CPython 3.14 compiles ``any``, ``all`` and ``tuple`` of a generator expression
# into (gh-131738) is the only loop whose head (a FOR_ITER, maybe after an EXTENDED_ARG)
# follows a CALL at once: the generator the CALL makes is its own iterator, every other
# loop gets its iterator from GET_ITER. Its jump back goes to the head, so the CALL's
# opcode is this many bytes before the jump's destination (the CALL and its inline
# caches; 0 before 3.14, where no such loop exists).
_CALL = _OPMAP["CALL"]
_CALL_BEFORE = 0 if _POP_ITER is None else 2 + 2 * _loops._CACHES[_CALL]


# ------------------------------------------------------------------ lines CPython 3.14 loses
# CPython 3.14 decides once per code object which instructions start a line (LINE events
# fire there: Python/instrumentation.c, initialize_lines). Walking the bytecode in order,
# an instruction starts a line when its line differs from the current one, which every
# instruction sets except END_FOR, POP_ITER, END_SEND, END_ASYNC_FOR and RESUME; jump
# targets (past END_FOR for FOR_ITER, never a POP_ITER) and exception handlers start one
# too. 3.14 added POP_ITER to that list and ends every for loop with END_FOR, POP_ITER
# (3.13: END_FOR, POP_TOP), so the instruction after a loop's exit is not a line start
# when its line is the one of the instruction before the END_FOR: a loop whose body ends
# with a jump to a copy of the statement after the loop (``if c: break`` then ``return
# x``, which the compiler duplicates into the break path). CPython 3.11-3.13 report that
# line, and so does the LINE event's definition (an instruction about to run whose line
# differs from the previous one's): it is recorded from FOR_ITER's BRANCH_RIGHT event,
# which 3.14 fires at that POP_ITER with the lost instruction as its destination.
_LOOP_END = None if _POP_ITER is None else bytes((_OPMAP["END_FOR"], 0, _POP_ITER, 0))
_NO_LINE_STARTS = frozenset(_OPMAP[name] for name in (
    "END_ASYNC_FOR", "END_FOR", "END_SEND", "RESUME", "POP_ITER") if name in _OPMAP)
_LINE_JUMPS = frozenset({"POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE",
                         "POP_JUMP_IF_NOT_NONE", "JUMP_FORWARD", "JUMP_BACKWARD",
                         "JUMP_BACKWARD_NO_INTERRUPT", "FOR_ITER", "SEND"})


def _lost_lines(code) -> dict | None:
    """``{offset: line}`` of the instructions after a for loop's exit (END_FOR, POP_ITER)
    that CPython 3.14 does not make line starts although their line differs from the
    POP_ITER's; None when there is none (always before 3.14). The bytecode is searched at
    C speed; it is read instruction by instruction only where such a loop end is found."""
    if _LOOP_END is None:
        return None
    raw = code.co_code
    at = raw.find(_LOOP_END)
    lost = None
    while at > 0:
        after = at + 4
        if not at & 1:
            line = line_of(code, after, None)
            if line is not None and line != line_of(code, at + 2, None):
                before = at - 2  # the line in force: the last instruction that sets it
                while before > 0 and raw[before] in _NO_LINE_STARTS:
                    before -= 2
                if line_of(code, before, None) == line and not _jumped_to(code, after):
                    if lost is None:
                        lost = {}
                    lost[after] = line
        at = raw.find(_LOOP_END, at + 1)
    return lost


def _jumped_to(code, offset: int) -> bool:
    """Whether CPython 3.14 makes ``offset`` a line start as a jump target or handler."""
    for _, _, name, _, _, _, target in _loops._instructions(code):
        if target is not None and name in _LINE_JUMPS:
            if name == "FOR_ITER" or name == "SEND":
                target += 2  # past the END_FOR / END_SEND (dis names that one)
            if target == offset:
                return True
    return any(target == offset for target, _, _ in _loops._exception_table(code))


def _enter(kind: int, code, offset: int) -> None:
    global next_frame, calls
    frame = frame_at(2)
    fid = frame_ids.get(frame)
    if fid is None:  # a suspended generator's frame, known by its address (see _leave)
        known = suspended.pop(_address(frame), None)
        if known is not None and _resumes(known, frame, code, offset):
            fid = frame_ids[frame] = known[0]
    adopted = fid is None
    if adopted:
        # A generator frame the trace has not seen start: one thrown into before it ever
        # ran (no PY_START fires then), or one started before tracing began. Its
        # activation begins here for the trace: a `call` step (with its arguments) comes
        # first, so every frame starts with `call`.
        fid = next_frame
        next_frame += 1
        frame_ids[frame] = fid
        prev[fid] = {}
    stack.append((fid, frame))
    frame_depths.pop(frame, None)  # a generator may resume elsewhere
    _check_depth(frame, enforce=False)
    if adopted:
        calls += 1
        _record(CALL, code, code.co_firstlineno, frame, fid)
    _record(kind, code, line_of(code, offset), frame, fid)


def _resumes(known: tuple, frame, code, offset: int) -> bool:
    """Whether ``frame``, resumed or thrown into at ``offset``, is the suspended activation
    ``known`` (``suspended``): the same code, at a yield (a generator that never ran is at
    its start, before any yield), of the same generator. Finalizing a generator clears the
    weak references to it first: then its address says."""
    if known[1] is not code or offset < known[2]:
        return False
    if known[3] is None:
        return True
    owner = _generator_of(frame)
    alive = known[3][0]()
    return alive is owner if alive is not None else known[3][1] == _address(owner)


def _on_resume(code, offset):
    if quiet or not active:
        return None
    if stop is not None:
        raise stop
    _enter(RESUME, code, offset)
    return None


def _on_throw(code, offset, exc):
    if quiet or not active or code.co_filename != FILENAME or stop is not None:
        return None
    if not stack:
        # No program activation is running: this is a generator that a finished
        # activation abandoned, being closed as it is freed. Its clean-up is not part of
        # the call; forgetting the frame drops its later events too.
        frame = frame_at(1)
        frame_ids.pop(frame, None)
        suspended.pop(_address(frame), None)
        return None
    _register(code)  # a generator function thrown into before any of its runs
    _enter(THROW, code, offset)
    return None


def _on_line(code, line):
    global line_steps
    if quiet or not active:
        return None
    if stop is not None:
        raise stop
    if stack:
        # The running frame is the innermost one the trace follows: every program frame
        # that runs while the trace is on and not quiet entered it through PY_START,
        # PY_RESUME or PY_THROW, which push it here (or, started from an untraced program
        # frame, only while nothing is on this stack). Asking the interpreter
        # (sys._getframe, an audit event each: ~11 a job) is needed only where a frame
        # begins or ends. With an empty stack the line is not the call's (a frame begun
        # in a quiet section, or being finalised after the call).
        fid, frame = stack[-1]
        line_steps += 1
        _record(LINE, code, line, frame, fid)
    return None


def _on_instruction(code, offset):
    global instructions
    if active and stack and not quiet:
        instructions += 1
    return None


def _leave(kind: int, code, offset: int, key: str, value) -> None:
    frame = frame_at(2)
    fid = frame_ids.get(frame)
    if fid is None:  # a frame begun inside a quiet section
        return
    line = line_of(code, offset, None)
    if line is None:
        line = _last_line(fid, code)
    index = _record(kind, code, line, frame, fid)
    text, truncated = value_repr(value)
    value_kind = type(value)
    _state(index, key, text, type_name(value_kind), truncated, _event_object(value, index))
    stack.pop()
    frame_depths.pop(frame, None)
    del frame_ids[frame]
    if kind == YIELD:
        # The frame object is not kept while its generator is suspended: it would keep the
        # generator alive (and its locals, whose finalizers would run late) after the
        # program dropped it. Its address (stable while the generator lives) and code say
        # which activation a resume continues.
        owner = _generator_of(frame)
        suspended[_address(frame)] = (fid, code, offset, None if owner is None else (
            _weakref(owner), _address(owner)))
    else:
        del prev[fid]


def _on_return(code, offset, value):
    if quiet or not active:
        return None
    if stop is not None:
        raise stop
    _leave(RETURN, code, offset, "<return>", value)
    return None


def _on_yield(code, offset, value):
    if quiet or not active:
        return None
    if stop is not None:
        raise stop
    _leave(YIELD, code, offset, "<yield>", value)
    return None


def _on_unwind(code, offset, exc):
    if quiet or not active or code not in code_index or stop is not None:
        return None
    _leave(UNWIND, code, offset, "<exception>", exc)
    return None


def _exception_step(kind: int, code, offset: int, exc) -> None:
    frame = frame_at(2)
    fid = frame_ids.get(frame)
    if fid is None:
        return
    line = line_of(code, offset, None)
    if line is None:  # a handler's first instruction has no line: use the raising one
        line = _last_line(fid, code)
    index = _record(kind, code, line, frame, fid)
    text, truncated = value_repr(exc)
    _state(index, "<exception>", text, type_name(type(exc)), truncated,
           _event_object(exc, index))


def _event_object(value, index: int) -> int | None:
    """The object id of an event's value (``<return>``, ...), if it is a tracked object."""
    kind = type(value)
    if type(kind) is type and kind in _ATOMIC_TYPES:  # (a type hashed: see _delta)
        return None
    if (type(kind) is type and kind in _TRACKED) or _shape(kind) is not None:
        return _object_id(value, kind, index)
    return None


def _last_line(fid: int, code) -> int:
    for index in range(len(step_frames) - 1, -1, -1):
        if step_frames[index] == fid:
            return step_lines[index]
    return code.co_firstlineno


def _on_raise(code, offset, exc):
    if quiet or not active or code not in code_index or stop is not None:
        return None
    _exception_step(RAISE, code, offset, exc)
    return None


_loops.frame_at = frame_at  # loops.py reads the program frame with the tracer's access
