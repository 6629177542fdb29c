"""Proved non-termination: a deterministic program whose complete state repeats at the
same program point loops forever (status ``loops``).

The tracer calls ``on_jump`` at every backward jump of the program's code (a
sys.monitoring JUMP event, local to the program's code objects; the program never sees
sys.monitoring). Nothing is checked until ``THRESHOLD`` backward jumps have been taken in
the job; then, at a backward jump whose target is a *decision point*, the state is
serialised (``snapshot``) and compared, per frame, with Brent's cycle finding: the
snapshot kept (the "tortoise") is replaced at backward jumps 1, 2, 4, 8, ... of that
frame, and a later snapshot equal to it (a full comparison of the two serialisations,
plain tuples made here, not only a hash) proves the loop. Every refusal below is a
reason not to decide: the job then runs on as it would without detection.

Why a repeated snapshot is a proof. A decision point is the target of a backward jump
of a frame that is

* the innermost program frame (the one running the jump), of a code object that is not a
  generator or coroutine (their frames give control back to their callers) and has no
  cell or free variables (cells are shared with closures this frame cannot name);
* at an offset whose static value-stack depth is 0 (``_depths``, an abstract
  interpretation of the code's stack effects and exception table): nothing of the frame's
  state is on the value stack (a ``for`` loop's iterator, a ``with``'s ``__exit__``, an
  ``except``'s exception, a partial expression), so the frame's state is its instruction
  offset and its locals;
* while no caller handles an exception (a bare ``raise`` would raise it again: an object
  outside the snapshot, as ``sys.exception()`` says).

Until this frame returns or raises, its future depends on its locals, its globals (the
program's namespace), the builtins, every object reachable from them, and nothing of its
callers (their value stacks and locals are read only through frames, which the program
is refused, see ``_static_refusal``). The snapshot is all of it: the frame's locals (a
class body's only when its namespace is an exact dict: a metaclass's ``__prepare__`` may
make one whose methods keep state), the program's namespace, the builtins checked
unchanged from the build, and every object reachable from them, serialised structurally
with aliasing (objects numbered by first visit, a second visit is a back reference:
``is`` answers the same), restricted to types whose whole state is read here
(``_walk``): None, bool, int, float (its bits), str, bytes, bytearray, tuple, list, dict,
range (exact types: a subclass's instance keeps its base's part where its ``__dict__``
does not show it), the static built-in types and builtins functions, the program's
functions (defaults, keyword defaults, closure cells, each by number as two closures may
share one, ``__dict__``, ``__module__``), staticmethod and classmethod objects (function
and ``__dict__``), properties (accessors, doc, name), classes (metaclass ``type``, their
dicts, bases and names; none that defines ``__hash__``: dicts and tuples keep the hashes
they computed, which no snapshot shows) and instances (``__dict__`` only: no slots, no
built-in base). Objects whose identity a program can observe through an address (its
functions, classes and instances: a default repr, an identity hash) are also keyed by
their ``id``. Anything else reachable (iterators, generators, sets, modules, files, C
objects, exceptions, ...) refuses. The same frame at both snapshots is the same
activation: its ``id`` and the count of activations of its code started (a new
activation at a recycled address counts one more). Equal snapshots at the same point of
the same activation mean the run from the second is the run from the first: the frame
never returns.

Determinism is the other half, checked once per job on the program's code
(``_static_refusal``): no name or attribute that reads hidden or outside state (``id``,
``hash`` and ``__hash__``, ``print``, ``input``, ``open``, imports, ``eval``/``exec``,
``getattr``/``setattr``, frames and most dunder attributes (``__annotations__``: a dict
no snapshot reads), ``__del__`` finalizers, which run when the collector decides,
``getter``, which copies a property with state no getter shows, and builtins that are
objects of their own: ``__spec__``, ``__loader__``, ``exit``, ``license``, ...); and no
program that both can make objects whose repr or hash comes from their address
(``object()``, iterators, ``__iter__``, bound methods, closures, generators, instances of
classes without ``__repr__``) and can turn objects into text or sets (``str``, ``__repr__``,
f-strings, ``%``-formatting, ``set``): the address of a new object depends on the memory
allocator's state, which no snapshot shows; and no handler that could catch a MemoryError
(``_handlers_miss_memory_error``): whether an allocation fails depends on the allocator's
and the collector's state too (cyclic garbage freed by a collection ends a loop whose
visible state repeated); and no identity test but against None, True, False or ``...``
(``_identity_tests_safe``: a snapshot shows ints, strs and tuples by value, the code's
constants included, which ``is`` tells from equal values made at run time); and no NaN
constant (``_nan_constant``: ``in`` and ``index`` test identity first, and tell the code's
NaN from an equal NaN made at run time). Traced or not, a program is judged alike:
recording runs none of its code (bounded_repr renders instances from their attributes).

Reading never runs program code: type names, dicts and members are read with C getters
captured here, containers with the C functions of their exact types, and the snapshot is
a tuple of plain values this module made, compared with ``==`` on those values only.
Bytecode is read by ``_instructions`` with tables taken from ``dis`` when the guest is
built (``dis`` is a module a program can import and change), checked against ``dis``
then on a sample of code: a disagreement fails the build.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import dis as _dis  # noqa: E402  (read when the guest is built, never at job time)
from _opcode import stack_effect as _stack_effect  # noqa: E402
from _struct import pack as _pack  # noqa: E402
from sys import exception as _handled_exception  # noqa: E402
from types import (BuiltinFunctionType, CellType, CodeType, FunctionType,  # noqa: E402
                   GetSetDescriptorType, MemberDescriptorType, ModuleType)

import bounded_repr as _br  # noqa: E402
from bounded_repr import address as _address  # noqa: E402

THRESHOLD = 1_000        # backward jumps a job takes before anything is checked
WINDOW = 30_000          # ... and after which it gives up (every JUMP event disabled)
MAX_OBJECTS = 20_000     # objects serialised in one snapshot; more refuses (the job gives up)
MIN_STRIDE = 8           # backward jumps between two snapshots: at least this, and ...
JUMPS_PER_OBJECT = 4     # ... this many per object the last snapshot read (its cost)
MAX_FRAMES = 64          # frames followed at once (more: all forgotten, start again)
FILENAME = "<program>"

# ------------------------------------------------------------------ captured when built
# type's own getters (bounded_repr captures the ones both modules read) and two more
_TYPE_DICT, _TYPE_MRO, _TYPE_MODULE, _DICTOFFSET = _br._TYPE_DICT, _br._MRO, _br._MODULE, \
    _br._DICTOFFSET
_TYPE_BASES = type.__dict__["__bases__"].__get__
_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_HEAPTYPE = 1 << 9
_FUNC = FunctionType.__dict__
_F_CODE = _FUNC["__code__"].__get__
_F_GLOBALS = _FUNC["__globals__"].__get__
_F_DEFAULTS = _FUNC["__defaults__"].__get__
_F_KWDEFAULTS = _FUNC["__kwdefaults__"].__get__
_F_CLOSURE = _FUNC["__closure__"].__get__
_F_DICT = _FUNC["__dict__"].__get__
_F_MODULE = _FUNC["__module__"].__get__
_TYPE_NAME = type.__dict__["__name__"].__get__
_TYPE_QUALNAME = _br._QUALNAME
_CELL_CONTENTS = CellType.__dict__["cell_contents"].__get__
_BUILTIN_SELF = BuiltinFunctionType.__dict__["__self__"].__get__
_GETSET_GET, _GETSET_NAME = _br._GETSET_GET, _br._GETSET_NAME
_RANGE = range.__dict__
_R_START, _R_STOP, _R_STEP = (_RANGE["start"].__get__, _RANGE["stop"].__get__,
                              _RANGE["step"].__get__)
_SM_FUNC = staticmethod.__dict__["__func__"].__get__
_CM_FUNC = classmethod.__dict__["__func__"].__get__
_SM_DICT = staticmethod.__dict__["__dict__"].__get__
_CM_DICT = classmethod.__dict__["__dict__"].__get__
_P = property.__dict__
_P_GET, _P_SET, _P_DEL = _P["fget"].__get__, _P["fset"].__get__, _P["fdel"].__get__
_P_DOC = _P["__doc__"].__get__


def _no_name(value) -> None:
    """CPython 3.12's property keeps no name (``__name__`` is 3.13's)."""
    return None


_P_NAME = _P["__name__"].__get__ if "__name__" in _P else _no_name
_DICT_ITEMS = dict.items
_MAPPING_ITEMS = type(type.__dict__).items  # mappingproxy.items: the class dict's own (C)
_BYTES = bytes
_LIST = list
_BUILTINS = builtins
_BUILTINS_DICT = builtins.__dict__
_BUILTINS_STATE = dict(builtins.__dict__)
_OBJECT = object
_CO_GENERATORS = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coro., async gen.
_CO_OPTIMIZED = 0x1  # a function's code (its frame's locals are fast locals)
_SINGLETONS = {_address(None): "None", _address(True): "True",
               _address(False): "False", _address(...): "Ellipsis",
               _address(NotImplemented): "NotImplemented"}
# The builtins' types a snapshot shows by address: the static ones, which nothing can
# change (not ``__loader__``, a class of importlib's with a dict of its own).
_BUILTIN_TYPES = frozenset(_address(value) for value in builtins.__dict__.values()
                           if type(value) is type and not _TYPE_FLAGS(value) & _HEAPTYPE)
_BUILTIN_FUNCTIONS = frozenset(_address(value) for value in builtins.__dict__.values()
                               if type(value) is BuiltinFunctionType)
# Builtins whose state the snapshot does not read (the builtins module is shown as one
# name): ``__spec__``, ``__loader__``, and the site's ``copyright``, ``credits``,
# ``license`` (they print), ``exit``, ``quit`` and ``help``, objects with attributes a
# program can set. A program loading one of these names as a global is not judged.
_SHARED_BUILTINS = frozenset(
    name for name, value in builtins.__dict__.items()
    if not (_address(value) in _SINGLETONS or _address(value) in _BUILTIN_TYPES
            or _address(value) in _BUILTIN_FUNCTIONS or type(value) in (str, int)))

# ------------------------------------------------------------------ static refusal
# Names (globals, builtins, attributes) a program must not use for its loops to be judged.
_REFUSED_NAMES = frozenset({
    "id", "hash", "print", "input", "open", "exec", "eval", "compile", "__import__",
    "breakpoint", "getattr", "setattr", "delattr", "vars", "memoryview", "help",
    "globals", "locals", "format_map", "_getframe", "f_locals", "f_back", "tb_frame",
    "gi_frame", "cr_frame", "ag_frame", "f_globals", "getsizeof", "__builtins__"})
# Dunder attributes a program may read (any other dunder attribute refuses, and setting
# or deleting one refuses); dunder *names* (globals, a class body's methods) are its own
# variables, in the snapshot, but for those in _REFUSED_NAMES.
# Not ``__hash__`` (an address for most objects: ``hash``), nor ``__annotations__`` and
# ``__annotate__`` (a function's annotations are a dict the snapshot does not read, made by
# running its ``__annotate__``).
_ALLOWED_DUNDERS = frozenset({
    "__name__", "__module__", "__qualname__", "__doc__", "__firstlineno__",
    "__static_attributes__", "__classcell__", "__classdictcell__", "__init__", "__new__",
    "__repr__", "__str__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__len__", "__contains__", "__getitem__", "__setitem__", "__delitem__",
    "__iter__", "__next__", "__add__", "__sub__", "__mul__", "__bool__", "__call__",
    "__class__", "__conditional_annotations__"})
# Attributes a program must not read: ``getter`` copies a property keeping state the
# snapshot cannot read (whether its doc came from its getter, its own name).
_REFUSED_ATTRIBUTES = frozenset({"getter"})
# Names that make objects whose repr or hash can come from their address.
_ADDRESS_MAKERS = frozenset({
    "object", "iter", "map", "zip", "enumerate", "reversed", "filter", "super", "type",
    "property", "staticmethod", "classmethod", "aiter", "anext"})
# Names that turn objects into text, or order objects by their hash.
# (``keys``/``items``: dict views, whose ``&``, ``|``, ``-``, ``^`` make sets)
_TEXT_MAKERS = frozenset({"str", "repr", "ascii", "format", "set", "frozenset", "chr",
                          "union", "intersection", "difference", "symmetric_difference",
                          "issubset", "issuperset", "isdisjoint", "keys", "items"})
# ... and attributes that do (``x.__repr__()``: an address for an object without a repr)
_TEXT_ATTRIBUTES = frozenset({"__repr__", "__str__"})
# Dunder attributes that make objects whose repr comes from their address (an iterator)
_ADDRESS_ATTRIBUTES = frozenset({"__iter__"})
_TEXT_OPS = frozenset({"FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE", "BUILD_SET",
                       "SET_ADD", "SET_UPDATE"})
# Exception classes an ``except`` may name and still never catch a MemoryError (every
# built-in one but MemoryError and its bases, BaseException and Exception): whether an
# allocation fails depends on the allocator's and the collector's state, which no
# snapshot shows (a loop that catches MemoryError may end once the collector frees
# memory). Any other handler (a bare ``except``, ``except Exception``, a ``finally``, a
# ``with``, a class held in a variable) refuses the program.
_SAFE_EXCEPTIONS = frozenset(
    name for name, value in builtins.__dict__.items()
    if type(value) is type and issubclass(value, BaseException)
    and value not in MemoryError.__mro__)
_BINDING_OPS = frozenset({"STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"})
_GLOBAL_LOADS = frozenset({"LOAD_NAME", "LOAD_GLOBAL", "LOAD_FROM_DICT_OR_GLOBALS"})
_NAME_OPS = frozenset({"LOAD_NAME", "STORE_NAME", "DELETE_NAME", "LOAD_GLOBAL",
                       "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_ATTR", "STORE_ATTR",
                       "DELETE_ATTR", "LOAD_SUPER_ATTR", "LOAD_METHOD", "LOAD_FROM_DICT_OR_GLOBALS",
                       "IMPORT_NAME", "IMPORT_FROM"})
_ATTRIBUTE_OPS = frozenset({"LOAD_ATTR", "STORE_ATTR", "DELETE_ATTR", "LOAD_SUPER_ATTR",
                            "LOAD_METHOD"})
_STOPS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE",
                    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP",
                    "JUMP_NO_INTERRUPT"})
_BUILTIN_METHOD_NAMES = frozenset(
    name for kind in (list, dict, str, bytes, bytearray, tuple, int, float, set, frozenset,
                      range)
    for name in type.__dict__["__dict__"].__get__(kind) if not name.startswith("__"))

# ------------------------------------------------------------------ the bytecode reader
# dis and opcode are the program's to import and change (a hostile program could make
# them hide an import from the static check): they are read once, here, when the guest
# is built, into plain tables; a job reads bytecode with _instructions, which uses only
# these tables, the code object's C members and _opcode.stack_effect (C).
def _deopt(op: int) -> int:
    name = _dis._all_opname[op] if hasattr(_dis, "_all_opname") else _dis.opname[op]
    deopt = getattr(_dis, "deoptmap", {})
    return _dis._all_opmap[deopt[name]] if name in deopt else op


_OPNAMES = tuple(_dis.opname[_deopt(op)] for op in range(256))
_DEOPT = tuple(_deopt(op) for op in range(256))
_CACHE_ENTRIES = _dis._inline_cache_entries  # by name; by opcode in CPython 3.12
_CACHES = tuple(_CACHE_ENTRIES.get(_dis.opname[_deopt(op)], 0)
                if type(_CACHE_ENTRIES) is dict else _CACHE_ENTRIES[_deopt(op)]
                for op in range(256))
_HAS_ARG = frozenset(_dis.hasarg)
_HAS_NAME = frozenset(_dis.hasname)
_HAS_JUMP = frozenset(getattr(_dis, "hasjump", ()) or (_dis.hasjrel + _dis.hasjabs))
_EXTENDED_ARG = _dis.opmap["EXTENDED_ARG"]
_BACKWARD = frozenset(_dis.opmap[name] for name in ("JUMP_BACKWARD",
                                                    "JUMP_BACKWARD_NO_INTERRUPT",
                                                    "END_ASYNC_FOR")
                      if name in _dis.opmap and _dis.opmap[name] in _HAS_JUMP)
_NAME_SHIFT = {_dis.opmap["LOAD_GLOBAL"]: 1, _dis.opmap["LOAD_ATTR"]: 1,
               _dis.opmap["LOAD_SUPER_ATTR"]: 2}
_PERCENT_OPS = frozenset(index for index, (_, symbol) in enumerate(_dis._nb_ops)
                         if symbol in ("%", "%="))


def _instructions(code) -> list:
    """``(start offset, offset, opname, arg, name or None, jump target or None)`` of each
    instruction of ``code`` (EXTENDED_ARG prefixes folded in, inline caches skipped)."""
    raw = code.co_code
    names = code.co_names
    found = []
    extended = 0
    start = None
    caches = 0
    for offset in range(0, len(raw), 2):
        if caches:
            caches -= 1
            continue
        op = _DEOPT[raw[offset]]
        caches = _CACHES[op]
        if start is None:
            start = offset
        if op in _HAS_ARG:
            arg = raw[offset + 1] | extended
            extended = (arg << 8) if op == _EXTENDED_ARG else 0
        else:
            arg = None
            extended = 0
        if op == _EXTENDED_ARG:
            continue
        name = None
        if op in _HAS_NAME:
            name = names[arg >> _NAME_SHIFT.get(op, 0)]
        target = None
        if op in _HAS_JUMP:
            step = -arg if op in _BACKWARD else arg
            target = offset + 2 + 2 * _CACHES[op] + 2 * step
        found.append((start, offset, _OPNAMES[op], op, arg, name, target))
        start = None
    return found


def _exception_table(code) -> list:
    """``(target, depth, lasti)`` of each entry of the code's exception table."""
    table = code.co_exceptiontable
    entries = []
    position = 0

    def varint():
        nonlocal position
        byte = table[position]
        position += 1
        value = byte & 63
        while byte & 64:
            value <<= 6
            byte = table[position]
            position += 1
            value |= byte & 63
        return value

    while position < len(table):
        varint()  # start
        varint()  # length
        target = varint() * 2
        depth_lasti = varint()
        entries.append((target, depth_lasti >> 1, depth_lasti & 1))
    return entries


def _check_reader() -> None:
    """When the guest is built: the reader agrees with dis on a sample of code."""
    sample = compile(_READER_SAMPLE, FILENAME, "exec")
    pending = [sample] + [value.__code__ for value in globals().values()
                          if type(value) is FunctionType]
    while pending:
        code = pending.pop()
        if type(code) is not CodeType:
            continue
        pending.extend(code.co_consts)
        expected = []
        for instruction in _dis.get_instructions(code):
            if instruction.opname == "EXTENDED_ARG":
                continue
            expected.append((instruction.offset, instruction.opname, instruction.arg,
                             instruction.argval if instruction.opcode in _HAS_NAME else None,
                             instruction.jump_target if hasattr(instruction, "jump_target")
                             else instruction.argval if instruction.opcode in _HAS_JUMP
                             else None))  # (3.12's Instruction has no jump_target)
        mine = [(offset, opname, arg, name, target)
                for _, offset, opname, _, arg, name, target in _instructions(code)]
        if mine != expected:
            wrong = [(a, b) for a, b in zip(mine, expected) if a != b][:1] or len(mine)
            raise RuntimeError(f"loops.py's bytecode reader disagrees with dis on "
                               f"{code.co_qualname}: {wrong}")
        table = [(entry.target, entry.depth, int(entry.lasti))
                 for entry in _dis._parse_exception_table(code)]
        if _exception_table(code) != table:
            raise RuntimeError(f"loops.py's exception table reader disagrees with dis on "
                               f"{code.co_qualname}")


_READER_SAMPLE = """
import os
class A(object):
    n = 0
    def __init__(self, x):
        super().__init__()
        self.x = x
    def m(self):
        return self.x.y.z, A.n
def f(xs, k=1):
    global g
    total = 0
    for i, x in enumerate(xs):
        while x > 0 and total < 10**9:
            x -= 1
            total += (x % 3) + len(str(x))
            if x == 7:
                break
        else:
            continue
        try:
            g = {a: b for a, b in zip(xs, xs)}
        except (KeyError, ValueError) as e:
            raise RuntimeError("x") from e
        finally:
            total += 1
    with open("x") as handle:
        pass
    return [y for y in xs if y] if k else lambda: total
async def h():
    async for z in q():
        await z
"""


# ------------------------------------------------------------------ state (one job)
enabled = False
namespace = None          # the program's module namespace
program = None            # the program's module code
jumps = 0                 # backward jumps taken this job
refusal = None            # why this job is not judged (a str), once decided
next_check = THRESHOLD    # the backward jump at which the next snapshot is taken
frame_at = None           # sysmon_tracer.frame_at (set by the tracer: no import cycle)
checked = False           # the static check ran
starts: dict = {}         # code object -> activations started this job
frames: dict = {}         # address of a frame -> [code, starts, tortoise snapshot, power, lam]
depths: dict = {}         # code object -> {offset: static stack depth} (None: unknown)


def begin(on: bool, program_namespace, program_code) -> None:
    """A job starts: forget the last one; judge loops if ``on``."""
    global enabled, namespace, program, jumps, refusal, checked, next_check
    next_check = THRESHOLD
    enabled = on and type(program_namespace) is dict and type(program_code) is CodeType
    namespace = program_namespace if enabled else None
    program = program_code if enabled else None
    jumps = 0
    refusal = None
    checked = False
    starts.clear()
    frames.clear()
    depths.clear()


def finish() -> None:
    """Drop every reference to the program's objects."""
    global enabled, namespace, program
    enabled = False  # (the tracer keeps the job's JUMP events: sysmon_tracer.loop_events)
    namespace = program = None
    starts.clear()
    frames.clear()
    depths.clear()


def on_jump(code, destination: int):
    """A backward jump of the program's ``code`` to ``destination``, at or after
    ``next_check`` (the tracer counts ``jumps`` and calls this only then), in the
    innermost program frame (``frame_at(2)``). Returns None (go on), ``False`` (never
    report this jump again), or the ``loops`` message."""
    global refusal, checked, next_check, enabled
    if refusal is not None or jumps > THRESHOLD + WINDOW:
        enabled = False  # given up: no more bookkeeping at calls; each jump comes to
        return False     # the tracer once more, to be disabled
    if not checked:
        checked = True
        refusal = _static_refusal(program)
        if refusal is None and _builtins_changed():
            refusal = "the builtins were changed"
        if refusal is not None:
            frames.clear()
            enabled = False
            return False
    if (code.co_flags & _CO_GENERATORS or code.co_cellvars or code.co_freevars):
        return False
    table = depths.get(code, 0)
    if table == 0:
        table = depths[code] = _depths(code)
    if table is None or table.get(destination) != 0:
        return False
    frame = frame_at(2)
    if frame.f_globals is not namespace or frame.f_code is not code:
        return False
    if _handled_exception() is not None:
        # a caller is handling an exception: a bare ``raise`` here raises it again, an
        # object no snapshot shows (its attributes, its traceback); the same for the
        # whole activation (its callers wait), so each check stops here
        frame = None
        next_check = jumps + MIN_STRIDE
        return None
    snapshot, cost = _snapshot(code, destination, frame)
    frame = None
    next_check = jumps + max(MIN_STRIDE, JUMPS_PER_OBJECT * cost)
    if snapshot is None:
        if cost >= MAX_OBJECTS:
            refusal = "the program's state is too large"
        frames.clear()
        return None
    key = snapshot[0]  # the frame's id
    entry = frames.get(key)
    count = starts.get(code, 0)
    if entry is None or entry[0] is not code or entry[1] != count:
        if len(frames) >= MAX_FRAMES:
            frames.clear()
        frames[key] = [code, count, snapshot, 1, 1]
        return None
    if entry[2] == snapshot:
        if _builtins_changed():  # (the static check makes it impossible: defence in depth)
            refusal = "the builtins were changed"
            return None
        line = _line(code, destination)
        return (f"the program loops forever: the complete state of {code.co_qualname} at "
                f"line {line} repeated (proved at backward jump {jumps} of the run)")
    if entry[3] == entry[4]:
        entry[2] = snapshot
        entry[3] *= 2
        entry[4] = 0
    entry[4] += 1
    return None


def _line(code, offset: int):
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return code.co_firstlineno


# ------------------------------------------------------------------ the static check
def _codes(code) -> list:
    found, pending = [], [code]
    while pending:
        current = pending.pop()
        if type(current) is not CodeType:
            continue
        found.append(current)
        pending.extend(current.co_consts)
    return found


def _static_refusal(code):
    """Why the program cannot be judged (a str), or None."""
    if type(code) is not CodeType:
        return "no program code"
    makes_addresses = makes_text = False
    percent = None        # whether a % may format text (read at the first %)
    handled: set = set()  # the exception names the program's handlers match
    bound: set = set()    # the names its code binds in a namespace
    try:
        for current in _codes(code):
            if current.co_filename != FILENAME:
                return "code from elsewhere"
            if current.co_flags & _CO_GENERATORS:
                makes_addresses = True
            is_module = current is code
            instructions = _instructions(current)
            loops = [] if not is_module else _loop_ranges(instructions)
            if not _handlers_miss_memory_error(instructions, handled):
                return "the program may catch a MemoryError (a handler that can match it)"
            if not _identity_tests_safe(instructions, current.co_consts):
                return "the program compares identities (is) of values a snapshot shows by value"
            if _nan_constant(current.co_consts):
                return "the program has a NaN constant (containers compare it by identity)"
            for _, offset, name, _, arg, target, _ in instructions:
                if name in _BINDING_OPS:
                    bound.add(target)
                if name in _TEXT_OPS:
                    makes_text = True
                if name in ("MAKE_FUNCTION", "LOAD_BUILD_CLASS"):
                    if not is_module or any(a <= offset <= b for a, b in loops):
                        makes_addresses = True
                if name == "BINARY_OP" and arg in _PERCENT_OPS:  # % and %=
                    if percent is None:  # (once: it reads every code object's constants)
                        percent = _percent_text(code)
                    makes_text = makes_text or percent
                if name in ("IMPORT_NAME", "IMPORT_FROM"):
                    return "the program imports modules"
                if name not in _NAME_OPS:
                    continue
                if type(target) is not str:
                    return "an unreadable name"
                if target in _REFUSED_NAMES:
                    return f"the program uses {target!r}"
                if target == "__del__":
                    return "the program defines a finalizer"
                if target in _SHARED_BUILTINS and name in _GLOBAL_LOADS:
                    return f"the program uses {target!r}, a builtin the snapshot does not read"
                if name in _ATTRIBUTE_OPS:
                    if target[:2] == "__" and target[-2:] == "__":
                        if target not in _ALLOWED_DUNDERS:
                            return f"the program uses {target!r}"
                        if name in ("STORE_ATTR", "DELETE_ATTR"):
                            return f"the program sets {target!r}"
                        if target in _TEXT_ATTRIBUTES:
                            makes_text = True
                        if target in _ADDRESS_ATTRIBUTES:
                            makes_addresses = True
                    elif target in _REFUSED_ATTRIBUTES:
                        return f"the program uses {target!r}"
                if target in _ADDRESS_MAKERS:
                    makes_addresses = True
                if target in _TEXT_MAKERS:
                    makes_text = True
                if name == "LOAD_ATTR" and not (arg & 1) and (
                        target in _BUILTIN_METHOD_NAMES or target[:2] == "__"):
                    makes_addresses = True  # a bound method object, not a call
            if _class_body(current):
                names = current.co_names
                if "__repr__" not in names or not ("__eq__" in names or "__hash__" in names):
                    makes_addresses = True  # an address in its repr, or its hash
    except Exception:  # a code object this module cannot read: not judged
        return "unreadable code"
    defined = set(bound)
    if namespace is not None:  # (the input may bind names too: a walrus)
        defined.update(key for key in _LIST(namespace) if type(key) is str)
    shadowed = [n for n in handled if n in defined]
    if shadowed:
        return f"the program binds {shadowed[0]!r}, a name its handlers match"
    if makes_addresses and makes_text:
        return "objects with address-based reprs or hashes may become text or set order"
    return None


def _handlers_miss_memory_error(instructions: list, handled: set) -> bool:
    """Whether no handler of this code can catch a MemoryError: each (PUSH_EXC_INFO, a
    handler's first instruction; only ``try`` and ``with`` make one) goes on to load one
    or a tuple of ``_SAFE_EXCEPTIONS`` by name and match it (CHECK_EXC_MATCH). The names
    are added to ``handled`` (they must keep their built-in meaning)."""
    count = len(instructions)
    for index in range(count):
        if instructions[index][2] != "PUSH_EXC_INFO":
            continue
        names = []
        at = index + 1
        while at < count and instructions[at][2] in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.append(instructions[at][5])
            at += 1
        if names and len(names) > 1 and at < count and instructions[at][2] == "BUILD_TUPLE":
            at += 1
        if not names or at >= count or instructions[at][2] != "CHECK_EXC_MATCH":
            return False
        for name in names:
            if type(name) is not str or name not in _SAFE_EXCEPTIONS:
                return False
            handled.add(name)
    return True


def _loop_ranges(instructions: list) -> list:
    return [(target, offset) for _, offset, name, _, _, _, target in instructions
            if name in ("JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")]


_SIMPLE_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_BORROW", "LOAD_FAST_CHECK", "LOAD_NAME",
                           "LOAD_GLOBAL", "LOAD_DEREF"})


def _identity_tests_safe(instructions: list, consts: tuple) -> bool:
    """Whether every ``is``/``is not`` (IS_OP) of this code tests against None, True,
    False or ``...`` loaded as a constant just before it (``x is None``, ``None is x``).
    Any other identity test refuses: a snapshot shows an int, str or tuple by value, yet
    ``x is 1000001`` tells the code's constant from an equal value computed at run time."""
    for index, instruction in enumerate(instructions):
        if instruction[2] != "IS_OP":
            continue
        previous = instructions[index - 1] if index >= 1 else None
        before = instructions[index - 2] if index >= 2 else None
        if not (_singleton_const(previous, consts) or (
                previous is not None and previous[2] in _SIMPLE_LOADS
                and _singleton_const(before, consts))):
            return False
    return True


def _singleton_const(instruction, consts: tuple) -> bool:
    if instruction is None or instruction[2] != "LOAD_CONST":
        return False
    arg = instruction[4]
    return type(arg) is int and 0 <= arg < len(consts) and _address(consts[arg]) in _SINGLETONS


def _nan_constant(consts: tuple) -> bool:
    """Whether a float or complex NaN is among ``consts`` (or in a tuple or frozenset of
    them). ``in``, ``count``, ``index`` and ``==`` of containers test identity before
    equality, and a NaN equals nothing, not even itself: whether a list holds the code's
    NaN constant or another NaN object with the same bits (which the snapshot shows
    alike) changes what they answer."""
    pending = _LIST(consts)
    while pending:
        constant = pending.pop()
        kind = type(constant)
        if (kind is float or kind is complex) and constant != constant:
            return True
        if kind is tuple or kind is frozenset:
            pending.extend(constant)
    return False


def _class_body(code) -> bool:
    """A class body (it stores ``__module__`` and ``__qualname__``)."""
    names = code.co_names
    return "__qualname__" in names and "__module__" in names


def _percent_text(code) -> bool:
    """A ``%`` may format text: some str or bytes constant of the program has a ``%``."""
    for current in _codes(code):
        for constant in current.co_consts:
            kind = type(constant)
            if kind is str and "%" in constant or kind is bytes and b"%" in constant:
                return True
    return False


# ------------------------------------------------------------------ stack depths
def _depths(code):
    """``{offset: value-stack depth}`` of the code's reachable instructions, or None if
    they cannot be computed consistently."""
    try:
        instructions = _instructions(code)
        at = {}
        for index, instruction in enumerate(instructions):
            at[instruction[0]] = at[instruction[1]] = index
        found = {}
        pending = [(instructions[0][0], 0)]
        for target, depth, lasti in _exception_table(code):
            pending.append((target, depth + 1 + lasti))
        while pending:
            offset, depth = pending.pop()
            while True:
                known = found.get(offset)
                if known is not None:
                    if known != depth:
                        return None
                    break
                if depth < 0 or offset not in at:
                    return None
                index = at[offset]
                start, real, opname, opcode, arg, _, target = instructions[index]
                found[start] = found[real] = depth
                if target is not None:
                    jumped = depth + (_stack_effect(opcode, arg, jump=True)
                                      if arg is not None
                                      else _stack_effect(opcode, jump=True))
                    pending.append((target, jumped))
                if opname in _STOPS:
                    break
                depth += (_stack_effect(opcode, arg, jump=False) if arg is not None
                          else _stack_effect(opcode, jump=False))
                if index + 1 >= len(instructions):
                    break
                offset = instructions[index + 1][0]
        return found
    except Exception:
        return None


# ------------------------------------------------------------------ the snapshot
def _builtins_changed() -> bool:
    if len(_BUILTINS_DICT) != len(_BUILTINS_STATE):
        return True
    get = _BUILTINS_DICT.get
    for name, value in _DICT_ITEMS(_BUILTINS_STATE):
        if get(name, _BUILTINS_STATE) is not value:
            return True
    return False


def _snapshot(code, offset: int, frame):
    """The frame's complete state as a tuple of plain values (the frame's address first), or
    None (refused); and the number of objects read."""
    out = [_address(frame), _address(code), offset]
    memo: dict = {}
    local_vars = frame.f_locals
    if local_vars is namespace:  # a module frame: its locals are the globals
        roots = [namespace]
    else:
        if code.co_flags & _CO_OPTIMIZED:  # a function's: a FrameLocalsProxy (C)
            pairs = local_vars.items()
        elif type(local_vars) is dict:  # a class body's namespace
            pairs = _DICT_ITEMS(local_vars)
        else:  # a metaclass's __prepare__ made it: its methods are the program's
            return None, 1
        names, values = [], []
        for name, value in pairs:
            if type(name) is not str:
                return None, 1
            names.append(name)
            values.append(value)
        out.append(tuple(names))
        roots = values + [namespace]
    keep = []  # the objects serialised, alive until the comparison is made
    for root in roots:
        refused = _walk(root, out, memo, keep)
        if refused:
            return None, MAX_OBJECTS if refused == _TOO_LARGE else len(out)
    keep = None
    return tuple(out), len(out)


_REFUSED, _TOO_LARGE = 1, 2


def _walk(root, out: list, memo: dict, keep: list) -> int:
    """Serialise ``root`` and what it reaches onto ``out`` (depth first; ``memo``: address ->
    number by first visit). 0, or ``_REFUSED`` if anything reached is outside the
    whitelist, ``_TOO_LARGE`` if ``out`` would grow past ``MAX_OBJECTS`` entries."""
    stack = [root]
    append = out.append
    while stack:
        if len(out) + len(stack) >= MAX_OBJECTS:
            return _TOO_LARGE
        value = stack.pop()
        key = _address(value)
        single = _SINGLETONS.get(key)
        if single is not None:
            append(single)
            continue
        if value is _EMPTY:  # (before tuples: it is one, made here)
            append(("E",))
            continue
        number = memo.get(key)
        if number is not None:
            append(("@", number))
            continue
        memo[key] = len(memo)
        keep.append(value)
        kind = type(value)
        if kind is int or kind is str or kind is bytes:
            append((kind is int and "i" or kind is str and "s" or "b", value))
        elif kind is float:
            append(("f", _pack("<d", value)))
        elif kind is tuple or kind is list:
            if len(value) >= MAX_OBJECTS:
                return _TOO_LARGE
            append(("t" if kind is tuple else "l", len(value)))
            stack.extend(_LIST(value)[::-1])
        elif kind is dict:
            if len(value) >= MAX_OBJECTS:
                return _TOO_LARGE
            pairs = _LIST(_DICT_ITEMS(value))
            append(("d", len(pairs)))
            for pair in pairs[::-1]:
                stack.append(pair[1])
                stack.append(pair[0])
        elif kind is bytearray:
            append(("B", _BYTES(value)))
        elif kind is range:
            append(("r",))
            stack.extend((_R_STEP(value), _R_STOP(value), _R_START(value)))
        elif kind is ModuleType:
            if value is not _BUILTINS:
                return _REFUSED
            append(("M",))
        elif kind is BuiltinFunctionType:
            if key not in _BUILTIN_FUNCTIONS or _BUILTIN_SELF(value) is not _BUILTINS:
                return _REFUSED
            append(("F", key))
        elif kind is type:
            if key in _BUILTIN_TYPES or value is _OBJECT:
                append(("T", key))
            elif not _program_class(value, stack):
                return _REFUSED
            else:  # with its names, kept in the type, not in its dict
                name, qualname = _TYPE_NAME(value), _TYPE_QUALNAME(value)
                if type(name) is not str or type(qualname) is not str:
                    return _REFUSED
                append(("C", key, name, qualname))
        elif kind is FunctionType:
            function_code = _F_CODE(value)
            if (function_code.co_filename != FILENAME
                    or _F_GLOBALS(value) is not namespace):
                return _REFUSED
            closure = _F_CLOSURE(value)
            cells = None
            if closure is not None:  # each cell by number (two closures may share one)
                numbers, cells = [], []
                for cell in closure:
                    cell_key = _address(cell)
                    number = memo.get(cell_key)
                    if number is None:
                        number = memo[cell_key] = len(memo)
                        keep.append(cell)
                    numbers.append(number)
                    try:
                        cells.append(_CELL_CONTENTS(cell))
                    except ValueError:  # an empty cell
                        cells.append(_EMPTY)
                closure = tuple(numbers)
                cells = tuple(cells)
            module = _F_MODULE(value)  # the globals' __name__ when the function was made
            if type(module) is str:
                append(("P", key, _address(function_code), module, closure))
            else:
                append(("P", key, _address(function_code), closure))
                stack.append(module)
            stack.append(cells)
            stack.append(_F_DICT(value))
            stack.append(_F_KWDEFAULTS(value))
            stack.append(_F_DEFAULTS(value))
        elif kind is staticmethod or kind is classmethod:
            append(("m", kind is staticmethod))
            # its __dict__: the function's names and doc copied, and any attribute set
            stack.append(_SM_DICT(value) if kind is staticmethod else _CM_DICT(value))
            stack.append(_SM_FUNC(value) if kind is staticmethod else _CM_FUNC(value))
        elif kind is property:
            getter = _P_GET(value)
            if getter is not None and type(getter) is not FunctionType:
                return _REFUSED  # its name would be read from the getter's __name__
            try:  # the name a class body gave it (__set_name__), else its getter's
                name = _P_NAME(value)
            except AttributeError:
                name = None
            doc = _P_DOC(value)
            if type(name) is not str and name is not None or (
                    type(doc) is not str and doc is not None):
                return _REFUSED
            append(("p", name, doc))
            stack.extend((_P_DEL(value), _P_SET(value), getter))
        elif kind is GetSetDescriptorType:
            if _GETSET_NAME(value) not in ("__dict__", "__weakref__"):
                return _REFUSED
            append(("G", key))
        else:
            instance_dict = _instance_dict(value, kind)
            if instance_dict is None:
                return _REFUSED
            append(("o", key))
            stack.append(instance_dict)
            stack.append(kind)
    return 0


_EMPTY = ("<empty cell>",)  # made here: never a program object


def _program_class(cls, stack: list) -> bool:
    """A class the program defined, metaclass ``type``, whose state is its dict and its
    bases (pushed onto ``stack``); False for any other class."""
    if not _TYPE_FLAGS(cls) & _HEAPTYPE:
        return False
    module = _TYPE_MODULE(cls)
    if type(module) is not str or module != "__main__":
        return False
    items = _LIST(_MAPPING_ITEMS(_TYPE_DICT(cls)))
    names = []
    for name, item in items:
        if type(name) is not str or name == "__del__" or name == "__slots__":
            return False
        if type(item) is MemberDescriptorType:
            return False
        if name == "__hash__" and item is not None:
            return False  # dicts and tuples keep the hashes they computed (hidden state)
        names.append(name)
    stack.append(_TYPE_BASES(cls))
    stack.append(tuple(names))
    stack.append(tuple([item for _, item in items]))
    return True


def _instance_dict(value, kind):
    """The ``__dict__`` of an instance of a program class (read by the getset descriptor
    CPython made), or None: not such an instance, slots, or no dict."""
    if type(kind) is not type or not _TYPE_FLAGS(kind) & _HEAPTYPE:
        return None
    module = _TYPE_MODULE(kind)
    if type(module) is not str or module != "__main__" or not _DICTOFFSET(kind):
        return None
    mro = _TYPE_MRO(kind)
    for klass in mro:  # every base before the dict is looked for: a list subclass's own
        if klass is not _OBJECT and (  # class dict holds the __dict__ descriptor
                not _TYPE_FLAGS(klass) & _HEAPTYPE or type(klass) is not type):
            return None  # a built-in base (int, list, Exception, ...) holds hidden state
    for klass in mro:
        if klass is _OBJECT:
            continue
        descriptor = None
        for name, item in _MAPPING_ITEMS(_TYPE_DICT(klass)):
            if type(name) is not str:
                return None
            if name == "__dict__":
                descriptor = item
        if descriptor is not None:
            if (type(descriptor) is not GetSetDescriptorType
                    or _GETSET_NAME(descriptor) != "__dict__"):
                return None
            try:
                found = _GETSET_GET(descriptor, value, kind)
            except (TypeError, AttributeError):
                return None
            return found if type(found) is dict else None
    return None


_check_reader()  # when the guest is built: a disagreement fails the build
