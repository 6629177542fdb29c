"""``repr`` with a character budget, exact up to the cut; the rendering of values that runs
none of the program's code.

``repr`` of a large value costs time and memory in proportion to the whole value; the
tracer only keeps the first ``max_repr`` characters, and does so at every step. For the
built-in containers and ``str`` this module builds just that prefix, producing the same
characters CPython's ``repr`` would (same element order, same quoting rules, ``[...]`` for
self-reference).

The rendering rule (states, attributes, globals and event values; docs/guides/runs.md,
"Rendering", says it to users and prompts). Only the exact types named are meant; a
subclass of one is a class written in Python (rule 2):

1. ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``,
   ``bytearray``, ``range``, ``...`` and the containers ``list``, ``tuple``, ``dict``,
   ``set``, ``frozenset``, ``deque``, ``defaultdict``, ``OrderedDict``, ``Counter`` print
   as ``repr`` prints them, their items by this rule. (A ``Counter`` lists its items by
   count, largest first, when its counts are numbers or strings, else in insertion order;
   an ``OrderedDict`` whose keys are not all of the types above but containers lists them
   in insertion order: its own order can only be read by hashing its keys.)
2. An instance of a class written in Python (the program's, whatever its ``__repr__``, and
   the standard library's) is ``QualName(attr=value, ...)``: its ``__dict__`` in insertion
   order (string keys), then its set ``__slots__`` (base classes first, each class's in
   declaration order). A class derived from a type of rule 1 shows that value first, as
   rule 1 prints it (``Stack([1, 2], limit=5)``, ``Name('ada')``); a namedtuple (a tuple
   class with ``_fields``) is ``Point(x=1, y=2)``, then any attributes. An instance
   nested five levels deep, or met again inside itself, is ``QualName(...)``.
3. An enum member is ``<Color.RED: 1>`` (its class's ``__name__``, ``_name_``, ``_value_``).
4. An exception is ``Name(args)`` as ``BaseException.__repr__`` writes it
   (``ValueError('bad')``, ``KeyError()``, ``OSError(2, 'x')``), whatever its class defines.
5. A class is ``<class 'module.QualName'>`` (``<class 'int'>`` for builtins), whatever its
   metaclass defines; a bound method ``<bound method QualName>``; a module ``<module
   'name'>``, with `` (built-in)`` or `` from 'path'`` as for a module made by ``import``.
6. Any other object (of a type written in C) prints as ``repr`` does, memory addresses
   removed, where that repr reads nothing but the object itself (``<function f>``,
   ``<generator object gen>``, ``<built-in function len>``, ``Decimal('1.5')``,
   ``datetime.date(2024, 1, 2)``, ``re.compile('a+')``), or the parts it reads are
   rendered here by this rule (``slice(1, None, None)``, ``dict_keys(['a'])``,
   ``namespace(a=1)``, ``functools.partial(<function f>, 1)``, a ``datetime``'s
   ``tzinfo``, ``sys.stdin``'s name); any other is what ``object.__repr__`` prints:
   ``<itertools.count object>``, ``<list_iterator object>``. In the native backend,
   numpy's arrays and scalars print as numpy prints them (package_values.py).

No program code runs for any of it, so recording a run never changes what it does: no
``__repr__``/``__str__``/``__format__``, ``__eq__``/``__hash__`` (of an object, or of a
class through its metaclass: types are compared by identity, or by address, unless their
metaclass is ``type`` itself), ``__len__``/``__iter__``/``__getitem__`` (containers and
subclass values are read with the C functions of the built-in type), properties,
``__getattr__``/``__getattribute__`` or descriptors (instance dicts through the
``__dict__`` descriptor CPython made, a ``__dict__`` of the program's own being passed
over; slots through their member descriptors; class names, modules, MROs and dicts with
type's own C getters). A class dict, a module's dict or a namespace may hold a key of a
``str`` subclass, whose ``__eq__`` a lookup would run: such a dict is looked into by
scanning it (only exact ``str`` keys count). A text of a ``str`` subclass (a class's
``__qualname__``) is copied to a plain ``str`` before use.

``bounded_repr(..., program_reprs=True)`` is for the run's ``output``, computed once after
the call in every mode (so it may run program code, the same in all of them): Python's
own ``repr``, except that an instance of a program class (its ``__module__`` is
``PROGRAM_MODULE``) whose class does not define ``__repr__`` is rendered by rule 2, and a
bound method as in rule 5. Either way memory addresses (`` at 0x...``) are removed from
reprs of objects, never from strings (their texts are built here).
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import sys as _sys  # noqa: E402
from _collections import OrderedDict, defaultdict, deque  # noqa: E402
from _io import BytesIO as _BytesIO  # noqa: E402
from _io import TextIOWrapper as _TextIOWrapper  # noqa: E402
from _io import _IOBase  # noqa: E402
from _operator import is_ as _is  # noqa: E402
from _operator import itemgetter as _itemgetter  # noqa: E402
from _weakref import ref as _weakref  # noqa: E402
from array import array as _array  # noqa: E402
from collections import Counter  # noqa: E402
from datetime import date as _date  # noqa: E402
from datetime import datetime as _datetime  # noqa: E402
from datetime import time as _time  # noqa: E402
from datetime import timedelta as _timedelta  # noqa: E402
from datetime import timezone as _timezone  # noqa: E402
from decimal import Decimal as _Decimal  # noqa: E402
from enum import EnumType as _EnumType  # noqa: E402
from functools import partial as _partial  # noqa: E402
from itertools import repeat as _repeat  # noqa: E402
from re import Match as _Match  # noqa: E402
from re import Pattern as _Pattern  # noqa: E402
from re import compile as _compile  # noqa: E402
from sys import getsizeof  # noqa: E402
from types import (AsyncGeneratorType, BuiltinFunctionType, CellType,  # noqa: E402
                   ClassMethodDescriptorType, CodeType, CoroutineType, FunctionType,
                   GeneratorType, GetSetDescriptorType, MemberDescriptorType,
                   MethodDescriptorType, MethodType, MethodWrapperType, ModuleType,
                   SimpleNamespace, WrapperDescriptorType)

# An object's address as a number, what ``id`` gives without its audit event
# ("builtins.id", Python 3.13+), which would run the runner's audit hook (a Python function)
# at every call: object's own hash is CPython's pointer hash, the address rotated, so one
# number per live object, and no program code runs (a class's __hash__ is not asked).
address = object.__hash__

_SCALARS = frozenset({int, float, complex, bool, type(None), bytes, range, type(...)})
_SEQUENCES = {list: ("[", "]"), tuple: ("(", ")")}


# Elements of a "flat" container, whose repr cost the size check below can bound.
_FLAT = frozenset(_SCALARS | {str})
_SMALL = frozenset(_SCALARS - {bytes})  # reprs of a bounded length (ints up to 4,300 digits)
_TEXT = frozenset({str, bytes})
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})
# the programs' module name: classes whose __module__ is this are the program's
PROGRAM_MODULE = "__main__"
MAX_NESTING = 4       # nested instances rendered; deeper ones are ``QualName(...)``
MAX_ATTRIBUTES = 100  # attributes read of one instance
flat = False          # the last bounded_repr was a flat built-in container (no objects in it)
attributes_cut = 0    # instances with more attributes than MAX_ATTRIBUTES seen this job
_program_reprs = False  # the current bounded_repr is the run's output (see the docstring)

# C getters captured when built: no metaclass, descriptor or __getattribute__ of the
# program runs when the tracer reads a type's name, module, MRO, flags or dict.
_TYPE_GET = type.__dict__
_QUALNAME = _TYPE_GET["__qualname__"].__get__
_NAME = _TYPE_GET["__name__"].__get__
_MODULE = _TYPE_GET["__module__"].__get__  # a dict lookup for a heap type: see module_of
_MRO = _TYPE_GET["__mro__"].__get__
_TYPE_DICT = _TYPE_GET["__dict__"].__get__  # a mappingproxy over the class's exact dict
_DICTOFFSET = _TYPE_GET["__dictoffset__"].__get__
_FLAGS = _TYPE_GET["__flags__"].__get__
_HEAPTYPE, _IMMUTABLETYPE = 1 << 9, 1 << 8  # Py_TPFLAGS_*: a class made at run time, and
                                            # one whose attributes cannot be set
_OBJECT_REPR = object.__dict__["__repr__"]
_GETSET_GET = GetSetDescriptorType.__get__
_GETSET_NAME = GetSetDescriptorType.__dict__["__name__"].__get__
_MEMBER_GET = MemberDescriptorType.__get__
_MEMBER_CLASS = MemberDescriptorType.__dict__["__objclass__"].__get__
_FUNC_QUALNAME = FunctionType.__dict__["__qualname__"].__get__
_METHOD_FUNC = MethodType.__dict__["__func__"].__get__
_DEQUE_MAXLEN = deque.__dict__["maxlen"].__get__
_FACTORY = defaultdict.__dict__["default_factory"].__get__
_EXC_ARGS = BaseException.__dict__["args"].__get__
_DICT_ITEMS = dict.items
_DICT_KEYS = dict.keys
_DICT_VALUES = dict.values
_DICT_LEN = dict.__len__
_ODICT_ITEMS = OrderedDict.items  # hashes every key: only for keys of _HASH_SAFE types
_LIST_ITER, _TUPLE_ITER, _TUPLE_LEN = list.__iter__, tuple.__iter__, tuple.__len__
_SET_ITER, _SET_LEN = set.__iter__, set.__len__
_FROZENSET_ITER, _FROZENSET_LEN = frozenset.__iter__, frozenset.__len__
_DEQUE_ITER = deque.__iter__
# a subclass instance's own value as the exact type (C: no override of the program's runs)
_EXACT = {str: str.__str__, int: int.__index__, float: float.__float__,
          complex: complex.__complex__, bytes: bytes.__bytes__}
_BYTEARRAY_COPY = bytearray.__getitem__
_ALL = slice(None)
_SLICE = slice.__dict__
_SLICE_PARTS = (_SLICE["start"].__get__, _SLICE["stop"].__get__, _SLICE["step"].__get__)
_VIEWS = {type({}.keys()): "dict_keys", type({}.values()): "dict_values",
          type({}.items()): "dict_items"}
_MODULE_DICT = ModuleType.__dict__["__dict__"].__get__
_SPEC_CLASS = type(_sys.__spec__)  # importlib's ModuleSpec
_SPEC_DICT = _SPEC_CLASS.__dict__["__dict__"]
_NAMESPACE_DICT = SimpleNamespace.__dict__["__dict__"].__get__
_GEN_QUALNAMES = {kind: (kind.__dict__["__qualname__"].__get__, word) for kind, word in (
    (GeneratorType, "generator"), (CoroutineType, "coroutine"),
    (AsyncGeneratorType, "async_generator"))}
_TZINFO = {_time: _time.__dict__["tzinfo"].__get__, _datetime: _datetime.__dict__["tzinfo"].__get__}
_NO_TZINFO = {_time: _time.replace, _datetime: _datetime.replace}
_TZNAME, _UTCOFFSET = _timezone.tzname, _timezone.utcoffset
_PARTIAL = tuple(_partial.__dict__[name].__get__ for name in ("func", "args", "keywords"))
_PATTERN_TEXT = _Pattern.__dict__["pattern"].__get__
_MATCH_TEXT = _Match.__dict__["string"].__get__
_STREAM = _TextIOWrapper.__dict__
_STREAM_BUFFER, _STREAM_ENCODING = _STREAM["buffer"].__get__, _STREAM["encoding"].__get__
_IO_DICT = _IOBase.__dict__["__dict__"].__get__  # both streams' attributes
_ADDRESS = _compile(r" at 0x[0-9a-fA-F]+")
_SCRUB = _ADDRESS.sub
_JOIN = "".join
_TYPES = _repeat(type)  # endless: ``map`` stops at its other iterable
_STRS = _repeat(str)
_issubclass = issubclass

# Rendering forms (a class's ``_layouts`` entry says which one its instances take).
_INSTANCE, _NAMEDTUPLE, _ENUM, _EXCEPTION, _CLASS, _OWN_REPR, _OBJECT, _SPECIAL, _PACKAGE = \
    range(9)
# rule 1's types a class written in Python may derive from (its value shown first)
_BASES = (list, tuple, dict, set, frozenset, str, bytes, bytearray, int, float, complex,
          deque, defaultdict, OrderedDict, Counter)
# C types whose repr reads nothing but the object (descriptors' and builtins' names, a
# function's qualified name, the bytes of a bytearray, ...)
_OWN_REPRS = (FunctionType, BuiltinFunctionType, MethodWrapperType, WrapperDescriptorType,
              MethodDescriptorType, ClassMethodDescriptorType, GetSetDescriptorType,
              MemberDescriptorType, CodeType, CellType, bytearray, memoryview, _date,
              _timedelta, _Decimal, _array, type(NotImplemented))
# keys whose hash is the C hash of the exact type (no program code)
_HASH_SAFE = frozenset(_FLAT)
_SORTABLE = frozenset(_SMALL | _TEXT)  # counts a Counter is ordered by (C comparisons)

# C types of packages with native code rendered as the package prints them (rule 6; the
# native backend: package_values.py registers them when the interpreter is set up, never
# while a program runs): (type, render), ``render(value)`` giving the text, or None for
# ``object.__repr__``'s
package_renderers: list = []

# per job: address(type) -> (weak reference to the type, its layout if it is a program
# class else None, its rendering)
_layouts: dict = {}


def reset(job: bool = True) -> None:
    """Forget the classes seen (and, for a new ``job``, the count of cut instances)."""
    global attributes_cut
    _layouts.clear()
    if job:
        attributes_cut = 0


def plain_text(text) -> str | None:
    """``text`` as a plain ``str`` (a ``str`` subclass copied without running its code),
    None if it is no string at all."""
    if type(text) is str:
        return text
    if _issubclass(type(text), str):
        return _JOIN((text,))
    return None


def kinds(part) -> set | None:
    """The set of the types of the items of ``part`` (a list, tuple, set or dict view), or
    None when an item's class has a metaclass other than ``type``: putting that class in a
    set would run its metaclass's ``__hash__``. The items' types are compared by identity
    first (the common case: all alike)."""
    for first in part:
        break
    else:
        return set()
    first = type(first)
    if type(first) is not type:
        return None
    if all(map(_is, map(type, part), _repeat(first))):
        return {first}
    if all(map(_is, map(type, map(type, part)), _TYPES)):
        return set(map(type, part))
    return None


def exact_keys(mapping) -> bool:
    """Whether every key of ``mapping`` (a dict or a class's mappingproxy) is an exact
    ``str``: then a lookup with a ``str`` never runs a key's ``__eq__``."""
    return all(map(_is, map(type, mapping), _STRS))


def item(mapping, key: str, plain: bool, default=None):
    """``mapping.get(key, default)`` for an exact ``str`` key, without running a key's
    ``__eq__``: looked up when every key is a plain string (``plain``), else scanned."""
    if plain:
        return mapping.get(key, default)
    for name, found in mapping.items():
        if type(name) is str and name == key:
            return found
    return default


def _mutable(klass) -> bool:
    """A class made at run time whose attributes can be set (a class written in Python):
    its dict may hold what a program put there."""
    flags = _FLAGS(klass)
    return bool(flags & _HEAPTYPE) and not flags & _IMMUTABLETYPE


def module_of(kind, plain: bool | None = None) -> str | None:
    """The ``__module__`` of a class as a plain ``str`` (None if it is not a string), read
    from its own dict without running a key's ``__eq__`` (type's getter does a lookup);
    ``plain``: the class dict is known to hold exact ``str`` keys only."""
    if not _mutable(kind):
        return plain_text(_MODULE(kind))  # C types: their dicts hold C-made keys only
    members = _TYPE_DICT(kind)
    if plain is None:
        plain = exact_keys(members)
    return plain_text(item(members, "__module__", plain))


def layout(kind):
    """None unless ``kind`` is a class the program defined (its ``__module__`` is
    ``PROGRAM_MODULE``); else its record (``_describe``). Decided once per class and job
    (a ``__repr__`` added to the class later is not seen)."""
    return _entry(kind)[1]


def _entry(kind):
    entry = _layouts.get(address(kind))
    if entry is not None and entry[0]() is kind:
        return entry
    try:
        record, program = _describe(kind)
    except (RecursionError, MemoryError):
        raise
    except BaseException:  # no program code runs here; a guest bug is no reason to fail
        record, program = (False, "?", (), None, True, _OBJECT, None), False
    entry = (_weakref(kind), record if program else None, record)
    _layouts[address(kind)] = entry
    return entry


def _describe(kind):
    """``(record, program)``: whether the class is the program's, and the record
    ``(default_repr, qualname, slots, dict_at, plain, form, extra)``: whether its repr is
    ``object.__repr__`` (output mode), its ``__qualname__`` as a plain str, its slots as
    (shown name, defining class index in the MRO, key in that class's dict), the MRO
    index of its ``__dict__`` descriptor, whether every class dict of its MRO holds exact
    ``str`` keys only, and how its instances are rendered (``form``, with ``extra``)."""
    mro = _MRO(kind)
    if type(mro) is not tuple:
        mro = (kind, object)
    plain = all([exact_keys(_TYPE_DICT(klass)) for klass in mro if _mutable(klass)])
    program = module_of(kind, plain) == PROGRAM_MODULE
    name = plain_text(_QUALNAME(kind)) or "?"
    python = _mutable(kind)
    default = False
    for klass in mro:
        method = item(_TYPE_DICT(klass), "__repr__", plain)
        if method is not None:
            default = method is _OBJECT_REPR
            break
    dict_at = _dict_descriptor(mro, plain)
    if _DICTOFFSET(kind) and dict_at is None:
        # a class that replaced its __dict__ descriptor (a property of its own): its
        # instance dict cannot be read without running it
        default = False
    slots = _slots(mro, plain) if python else ()
    extra = None
    if _issubclass(kind, BaseException):
        form = _EXCEPTION
        extra = plain_text(_NAME(kind)) or "?"
        extra = extra.rpartition(".")[2]  # BaseException.__repr__ prints tp_name's tail
    elif _issubclass(kind, type):
        form = _CLASS
    elif python and _issubclass(type(kind), _EnumType):
        form = _ENUM
    elif python:
        form = _INSTANCE
        for klass in mro:
            for base in _BASES:
                if klass is base:
                    extra = base
                    break
            if extra is not None:
                break
        if extra is tuple:
            fields = _fields(mro, plain)
            if fields is not None:
                form, extra = _NAMEDTUPLE, fields
    else:
        form, extra = _c_form(kind)
    return (default, name, tuple(slots), dict_at, plain, form, extra), program


def _c_form(kind):
    """How an object of a C type renders (rule 6): its own repr, a rendering of the parts
    it reads, or ``object.__repr__``'s."""
    for own in _OWN_REPRS:
        if kind is own:
            return _OWN_REPR, None
    for special, how in _SPECIALS:
        if kind is special:
            return _SPECIAL, how
    for package_type, render in package_renderers:
        if kind is package_type:
            return _PACKAGE, render
    return _OBJECT, None


def _fields(mro, plain):
    """A namedtuple's ``_fields`` (a tuple of plain strings in a class dict of its MRO),
    or None."""
    for klass in mro:
        found = item(_TYPE_DICT(klass), "_fields", plain)
        if found is not None:
            if type(found) is tuple and all(map(_is, map(type, found), _STRS)):
                return found
            return None
    return None


def _slots(mro, plain) -> list:
    slots = []
    for position in range(len(mro) - 1, -1, -1):  # base classes first
        klass = mro[position]
        if not _mutable(klass):  # a C type's members are its own fields, not slots
            continue
        members = _TYPE_DICT(klass)
        declared = item(members, "__slots__", plain)
        if type(declared) is str:
            declared = (declared,)
        order = []
        if type(declared) in (tuple, list):
            owner = plain_text(_QUALNAME(klass))
            owner = owner.lstrip("_") if owner is not None else ""
            for slot in declared:
                if type(slot) is str:
                    key = (f"_{owner}{slot}" if slot[:2] == "__" and slot[-2:] != "__"
                           and owner else slot)
                    order.append((slot, key))
        known = {key for _, key in order}
        for key, member in members.items():  # slots missing from __slots__'s order: last
            if (type(key) is str and key not in known
                    and type(member) is MemberDescriptorType):
                order.append((key, key))
        for shown, key in order:
            member = item(members, key, plain)
            if type(member) is MemberDescriptorType and _MEMBER_CLASS(member) is klass:
                slots.append((shown, position, key))
    return slots


def _dict_descriptor(mro, plain):
    """The position in the MRO of the getset descriptor CPython made for instances'
    ``__dict__`` (the first one), or None; a ``__dict__`` the program defined itself is
    passed over. (The position, not the descriptor: the layout holds nothing of the
    program's.)"""
    for position, klass in enumerate(mro):
        descriptor = item(_TYPE_DICT(klass), "__dict__", plain)
        if type(descriptor) is GetSetDescriptorType and _GETSET_NAME(descriptor) == "__dict__":
            return position
    return None


def instance_dict(value, kind, shape):
    """The instance's own ``__dict__`` (a dict) or None."""
    position = shape[3]
    if position is None:
        return None
    mro = _MRO(kind)
    if position >= len(mro):
        return None
    descriptor = item(_TYPE_DICT(mro[position]), "__dict__", shape[4])
    if type(descriptor) is not GetSetDescriptorType:  # the class was changed since
        return None
    try:
        found = _GETSET_GET(descriptor, value, kind)
    except (TypeError, AttributeError):
        return None
    return found if type(found) is dict else None


def attributes(value, kind, shape) -> list:
    """``(name, value)`` of an instance of a class written in Python (``shape`` its
    record): the ``__dict__``'s str keys in insertion order, then the set slots; at most
    ``MAX_ATTRIBUTES``."""
    global attributes_cut
    found = []
    own = instance_dict(value, kind, shape)
    if own is not None:
        for name, entry in _DICT_ITEMS(own):
            if type(name) is str:
                if len(found) >= MAX_ATTRIBUTES:
                    attributes_cut += 1
                    return found
                found.append((name, entry))
    slots = shape[2]
    if slots:
        mro = _MRO(kind)
        for shown, position, key in slots:
            if position >= len(mro):
                continue
            member = item(_TYPE_DICT(mro[position]), key, shape[4])
            if type(member) is not MemberDescriptorType:
                continue
            try:
                entry = _MEMBER_GET(member, value, kind)
            except (AttributeError, TypeError):  # unset
                continue
            if len(found) >= MAX_ATTRIBUTES:
                attributes_cut += 1
                return found
            found.append((shown, entry))
    return found


def _fits(value, limit: int) -> bool:
    """True for a flat built-in container small enough that C ``repr`` is cheap: the
    common case, done at C speed without building the repr piece by piece. Checks are
    C-speed too (``kinds``, ``sum(map(len, ...))``)."""
    parts = (value.keys(), value.values()) if type(value) is dict else (value,)
    for part in parts:
        if len(part) > limit:  # its repr is longer than the budget: build the prefix only
            return False
        found = kinds(part)
        if found is None:
            return False
        if found <= _SMALL:
            continue
        if found <= _TEXT:
            if sum(map(len, part)) > 4 * limit:
                return False
            continue
        if not found <= _FLAT or sum(map(getsizeof, part)) > 8 * limit + 1024:
            return False
    return True


# Raised internally when the prefix is long enough. An instance of a built-in exception,
# not a class of this module's: every class is reachable (object.__subclasses__()) and
# could be changed to run program code when raised.
_BUDGET = LookupError("steptrace: repr budget reached")


def str_prefix_repr(text: str, chars: int) -> str:
    """The first characters of ``repr(text)`` from only ``text[:chars]``: the quote is the one
    CPython picks for the whole string (``"`` only when it has ``'`` and no ``"``)."""
    head = text[:chars]
    if "'" in text and '"' not in text:
        return repr(head + "'")[:-2]
    return repr(head + '"')[:-2]


def bounded_repr(value, limit: int, program_reprs: bool = False) -> tuple[str, bool]:
    """``(rendering[:limit], truncated)``, computed in O(limit) for built-in containers;
    the rendering is the module docstring's rule (``program_reprs``: the run's output).
    Sets ``flat`` when ``value`` is a built-in container of scalars and strings only."""
    global flat, _program_reprs
    kind = type(value)
    flat = False
    if type(kind) is not type:  # a class with a metaclass of its own: never hashed
        text = _rendered(value, limit, program_reprs)
    elif kind in _SCALARS:
        text = repr(value)
    elif kind is str:
        text = repr(value) if len(value) <= limit else str_prefix_repr(value, limit)
    elif kind in _CONTAINERS and _fits(value, limit):
        text = repr(value)
        flat = True
    else:
        text = _rendered(value, limit, program_reprs)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def _rendered(value, limit: int, program_reprs: bool) -> str:
    global _program_reprs
    parts: list[str] = []
    _program_reprs = program_reprs
    try:
        _emit(value, parts, [0, limit + 1], set(), 0)
    except LookupError as exc:
        if exc is not _BUDGET:
            raise
        # raised again next time: its traceback would grow and keep frames alive
        exc.__traceback__ = exc.__context__ = None
    finally:
        _program_reprs = False
    return _JOIN(parts)


def _add(parts: list[str], budget: list[int], piece: str) -> None:
    parts.append(piece)
    budget[0] += len(piece)
    if budget[0] >= budget[1]:
        raise _BUDGET


def _emit(value, parts: list[str], budget: list[int], active: set, nesting: int) -> None:
    kind = type(value)
    if type(kind) is type:  # only then may the type be hashed (a set or dict lookup)
        if kind is str:
            room = budget[1] - budget[0]
            _add(parts, budget, repr(value) if len(value) <= room else str_prefix_repr(value, room))
            return
        if kind in _SCALARS:
            _add(parts, budget, repr(value))
            return
        if kind in _CONTAINERS and _fits(value, budget[1] - budget[0]):
            _add(parts, budget, repr(value))
            return
        if kind in _SEQUENCES:
            open_, close = _SEQUENCES[kind]
            _emit_sequence(value, value, open_, close, kind is tuple and len(value) == 1,
                           parts, budget, active, nesting)
            return
        if kind is dict:
            _emit_mapping(value, _DICT_ITEMS(value), "{", "}", parts, budget, active, nesting)
            return
        if kind is set or kind is frozenset:
            _emit_set(value, kind, parts, budget, active, nesting)
            return
        if kind is deque or kind is defaultdict or kind is OrderedDict or (
                kind is Counter and not _program_reprs):
            _emit_collection(value, kind, parts, budget, active, nesting)
            return
    record = _entry(kind)[2]
    if _program_reprs:
        if record[0] and _layouts[address(kind)][1] is not None:
            _emit_instance(value, kind, record, parts, budget, active, nesting)
        else:
            _add(parts, budget, foreign_repr(value, kind))
        return
    form = record[5]
    if form == _INSTANCE or form == _NAMEDTUPLE:
        _emit_instance(value, kind, record, parts, budget, active, nesting)
    elif form == _OWN_REPR:
        _add(parts, budget, _scrubbed(repr(value)))
    elif form == _OBJECT:
        _add(parts, budget, _object_repr(value, kind))
    elif form == _EXCEPTION:
        _emit_exception(value, record[6], parts, budget, active, nesting)
    elif form == _CLASS:
        _add(parts, budget, class_repr(value))
    elif form == _ENUM:
        _emit_member(value, kind, record, parts, budget, active, nesting)
    elif form == _PACKAGE:
        text = record[6](value)
        _add(parts, budget, text if type(text) is str else _object_repr(value, kind))
    else:
        record[6](value, kind, parts, budget, active, nesting)


def _scrubbed(text: str) -> str:
    return _SCRUB("", text) if " at 0x" in text else text


def _object_repr(value, kind) -> str:
    """What ``object.__repr__`` prints, without the address: ``<module.Name object>``
    (``<Name object>`` for builtins)."""
    module = module_of(kind)
    name = plain_text(_QUALNAME(kind)) or "?"
    if module is not None and module != "builtins":
        return f"<{module}.{name} object>"
    return f"<{name} object>"


def class_repr(kind) -> str:
    """``repr`` of a class as ``type.__repr__`` prints it (a metaclass's ``__repr__`` is
    not asked)."""
    module = module_of(kind)
    name = plain_text(_QUALNAME(kind)) or "?"
    if module is not None and module != "builtins":
        return f"<class '{module}.{name}'>"
    return f"<class '{name}'>"


def foreign_repr(value, kind) -> str:
    """The object's own repr (output mode), without memory addresses; a bound method by
    its function's qualified name (its repr would run the instance's)."""
    if kind is MethodType:
        return _method_repr(value)
    text = repr(value)
    if type(text) is not str:
        text = _JOIN((text,)) if isinstance(text, str) else "<repr returned a non-string>"
    return _scrubbed(text)


def _method_repr(value) -> str:
    function = _METHOD_FUNC(value)
    if type(function) is FunctionType:
        name = plain_text(_FUNC_QUALNAME(function))
        if name is not None:
            return f"<bound method {name}>"
    return "<bound method ?>"


def _emit_sequence(value, items, open_, close, single, parts, budget, active, nesting) -> None:
    """A list's or tuple's items (``items`` iterates them with the built-in type's C
    iterator); ``single``: a one-item tuple (``(x,)``)."""
    if address(value) in active:
        _add(parts, budget, open_ + "..." + close)
        return
    active.add(address(value))
    _add(parts, budget, open_)
    for index, entry in enumerate(items):
        if index:
            _add(parts, budget, ", ")
        _emit(entry, parts, budget, active, nesting)
    _add(parts, budget, ",)" if single else close)
    active.discard(address(value))


def _emit_mapping(value, pairs, open_, close, parts, budget, active, nesting) -> None:
    """``open_`` key: value, ... ``close`` from ``pairs`` (C iteration of the dict); a
    mapping met again inside itself is ``{...}`` (``...`` for the collections)."""
    if address(value) in active:
        _add(parts, budget, "{...}" if open_ == "{" else "...")
        return
    active.add(address(value))
    _add(parts, budget, open_)
    for index, (key, entry) in enumerate(pairs):
        if index:
            _add(parts, budget, ", ")
        _emit(key, parts, budget, active, nesting)
        _add(parts, budget, ": ")
        _emit(entry, parts, budget, active, nesting)
    _add(parts, budget, close)
    active.discard(address(value))


def _emit_set(value, kind, parts, budget, active, nesting) -> None:
    """A set's or frozenset's items (``kind``: which of the two its value is)."""
    size = (_SET_LEN if kind is set else _FROZENSET_LEN)(value)
    if not size:
        _add(parts, budget, "set()" if kind is set else "frozenset()")
        return
    _add(parts, budget, "{" if kind is set else "frozenset({")
    for index, entry in enumerate((_SET_ITER if kind is set else _FROZENSET_ITER)(value)):
        if index:
            _add(parts, budget, ", ")
        _emit(entry, parts, budget, active, nesting)
    _add(parts, budget, "}" if kind is set else "})")


def _emit_collection(value, kind, parts, budget, active, nesting) -> None:
    """deque, defaultdict, OrderedDict and Counter as CPython 3.12+ prints them, their
    elements rendered here; ``kind`` is which of them ``value`` is (it may be a subclass
    instance's own value)."""
    if kind is deque:
        if address(value) in active:
            _add(parts, budget, "[...]")
            return
        active.add(address(value))
        _add(parts, budget, "deque([")
        for index, entry in enumerate(_DEQUE_ITER(value)):
            if index:
                _add(parts, budget, ", ")
            _emit(entry, parts, budget, active, nesting)
        maxlen = _DEQUE_MAXLEN(value)
        _add(parts, budget, "])" if maxlen is None else f"], maxlen={maxlen})")
        active.discard(address(value))
        return
    if kind is defaultdict:
        _add(parts, budget, "defaultdict(")
        factory = _FACTORY(value)
        if address(factory) in active:
            _add(parts, budget, "...")
        else:
            _emit(factory, parts, budget, active, nesting)
        _add(parts, budget, ", ")
        _emit_mapping(value, _DICT_ITEMS(value), "{", "}", parts, budget, active, nesting)
        _add(parts, budget, ")")
        return
    if not _DICT_LEN(value):
        _add(parts, budget, "OrderedDict()" if kind is OrderedDict else "Counter()")
        return
    if kind is OrderedDict:
        # its own order is read by hashing each key: only keys whose hash is C's
        found = kinds(_DICT_KEYS(value))
        safe = found is not None and found <= _HASH_SAFE
        pairs = _ODICT_ITEMS(value) if safe else _DICT_ITEMS(value)
        _emit_mapping(value, pairs, "OrderedDict({", "})", parts, budget, active, nesting)
        return
    pairs = _DICT_ITEMS(value)  # a Counter: by count, largest first, as most_common()
    found = kinds(_DICT_VALUES(value))
    if found is not None and found <= _SORTABLE:
        try:
            pairs = sorted(pairs, key=_itemgetter(1), reverse=True)
        except TypeError:  # counts that do not compare: CPython shows them as they are
            pairs = _DICT_ITEMS(value)
    _emit_mapping(value, pairs, "Counter({", "})", parts, budget, active, nesting)


def _emit_instance(value, kind, record, parts, budget, active, nesting) -> None:
    """``QualName(value, attr=value, ...)`` (rule 2); ``QualName(...)`` met again inside
    itself or nested ``MAX_NESTING`` deep."""
    name = record[1]
    if address(value) in active or nesting >= MAX_NESTING:
        _add(parts, budget, name + "(...)")
        return
    active.add(address(value))
    _add(parts, budget, name + "(")
    first = True
    if not _program_reprs:
        if record[5] == _NAMEDTUPLE:
            for field, entry in zip(record[6], _TUPLE_ITER(value)):
                _add(parts, budget, f"{field}=" if first else f", {field}=")
                _emit(entry, parts, budget, active, nesting + 1)
                first = False
        elif record[6] is not None:
            _emit_base(value, record[6], parts, budget, active, nesting + 1)
            first = False
    for attr, entry in attributes(value, kind, record):
        _add(parts, budget, f"{attr}=" if first else f", {attr}=")
        _emit(entry, parts, budget, active, nesting + 1)
        first = False
    _add(parts, budget, ")")
    active.discard(address(value))


def _emit_base(value, base, parts, budget, active, nesting) -> None:
    """The value of an instance of a class derived from ``base`` (a type of rule 1) as
    rule 1 prints it, read with ``base``'s own C functions (the class's overrides of
    ``__iter__``, ``__len__``, ``items``, ... are not asked). ``value`` is already on
    ``active``: a container holding itself shows as ``[...]``/``{...}``."""
    exact = _EXACT.get(base)
    if exact is not None:
        _add(parts, budget, repr(exact(value)))
    elif base is list:
        _emit_items_of(value, _LIST_ITER(value), "[", "]", False, parts, budget, active, nesting)
    elif base is tuple:
        _emit_items_of(value, _TUPLE_ITER(value), "(", ")", _TUPLE_LEN(value) == 1,
                       parts, budget, active, nesting)
    elif base is dict:
        _emit_items_of(value, _DICT_ITEMS(value), "{", "}", None, parts, budget, active, nesting)
    elif base is set or base is frozenset:
        _emit_set(value, base, parts, budget, active, nesting)
    elif base is bytearray:
        _add(parts, budget, repr(_BYTEARRAY_COPY(value, _ALL)))
    else:  # deque, defaultdict, OrderedDict, Counter
        active.discard(address(value))
        _emit_collection(value, base, parts, budget, active, nesting)
        active.add(address(value))


def _emit_items_of(value, items, open_, close, single, parts, budget, active, nesting) -> None:
    """A subclass instance's list, tuple (``single``: one item) or dict (``single`` None)
    items; the instance itself met inside them is ``[...]``/``(...)``/``{...}``."""
    _add(parts, budget, open_)
    for index, entry in enumerate(items):
        if index:
            _add(parts, budget, ", ")
        if single is None:
            key, entry = entry
            _emit_or_cycle(key, value, open_, close, parts, budget, active, nesting)
            _add(parts, budget, ": ")
        _emit_or_cycle(entry, value, open_, close, parts, budget, active, nesting)
    _add(parts, budget, ",)" if single else close)


def _emit_or_cycle(entry, value, open_, close, parts, budget, active, nesting) -> None:
    if entry is value:
        _add(parts, budget, open_ + "..." + close)
    else:
        _emit(entry, parts, budget, active, nesting)


def _emit_exception(value, name, parts, budget, active, nesting) -> None:
    """``Name(arg)`` or ``Name(arg, ...)``/``Name()``, BaseException.__repr__'s form, the
    args rendered by the rule; met again inside its own args: ``Name(...)``."""
    if address(value) in active or nesting >= MAX_NESTING:
        _add(parts, budget, name + "(...)")
        return
    args = _EXC_ARGS(value)
    active.add(address(value))
    if type(args) is tuple and len(args) == 1:
        _add(parts, budget, name + "(")
        _emit(args[0], parts, budget, active, nesting + 1)
        _add(parts, budget, ")")
    else:
        _add(parts, budget, name)
        _emit(args if type(args) is tuple else (), parts, budget, active, nesting + 1)
    active.discard(address(value))


def _emit_member(value, kind, record, parts, budget, active, nesting) -> None:
    """An enum member, ``<Color.RED: 1>``, from its ``_name_`` and ``_value_`` (its
    instance dict; ``<Perm: 0>`` for a flag value without a name); rendered as an
    instance (rule 2) when it has no such entries."""
    own = instance_dict(value, kind, record)
    if own is None or address(value) in active or nesting >= MAX_NESTING:
        _emit_instance(value, kind, record, parts, budget, active, nesting)
        return
    plain = exact_keys(own)
    name = item(own, "_name_", plain, _BUDGET)
    member = item(own, "_value_", plain, _BUDGET)
    if name is _BUDGET or member is _BUDGET:
        _emit_instance(value, kind, record, parts, budget, active, nesting)
        return
    owner = plain_text(_NAME(kind)) or "?"
    active.add(address(value))
    if name is None:  # a Flag's value that no member names (Flag(0)): Flag's own form
        _add(parts, budget, f"<{owner}: ")
    else:
        _add(parts, budget, f"<{owner}.{plain_text(name) or '?'}: ")
    _emit(member, parts, budget, active, nesting + 1)
    _add(parts, budget, ">")
    active.discard(address(value))


# ------------------------------------------------------------------ rule 6's special cases
def _emit_method(value, kind, parts, budget, active, nesting) -> None:
    _add(parts, budget, _method_repr(value))


def _emit_generator(value, kind, parts, budget, active, nesting) -> None:
    """``<generator object QualName>``: CPython formats the qualified name with ``str()``,
    which a ``str`` subclass set as ``__qualname__`` would answer."""
    getter, word = _GEN_QUALNAMES[kind]
    _add(parts, budget, f"<{word} object {plain_text(getter(value)) or '?'}>")


def _emit_slice(value, kind, parts, budget, active, nesting) -> None:
    _add(parts, budget, "slice(")
    for index, part in enumerate(_SLICE_PARTS):
        if index:
            _add(parts, budget, ", ")
        _emit(part(value), parts, budget, active, nesting)
    _add(parts, budget, ")")


def _emit_view(value, kind, parts, budget, active, nesting) -> None:
    """``dict_keys([...])`` and its kin: the view iterated in C, items by the rule."""
    _add(parts, budget, _VIEWS[kind] + "(")
    _emit_sequence(value, value, "[", "]", False, parts, budget, active, nesting)
    _add(parts, budget, ")")


def _emit_module(value, kind, parts, budget, active, nesting) -> None:
    """importlib's ``_module_repr`` for a module made by import (its ``__spec__`` a
    ModuleSpec of plain strings), else ``<module 'name'>`` from its ``__name__``."""
    members = _MODULE_DICT(value)
    plain = exact_keys(members)
    spec = item(members, "__spec__", plain)
    fields = _GETSET_GET(_SPEC_DICT, spec, _SPEC_CLASS) if type(spec) is _SPEC_CLASS else None
    if type(fields) is dict:  # (a dict subclass set as its __dict__ would run its methods)
        plain_fields = exact_keys(fields)
        name = item(fields, "name", plain_fields)
        origin = item(fields, "origin", plain_fields)
        located = item(fields, "_set_fileattr", plain_fields)
        if type(name) is str and type(origin) is str and type(located) is bool:
            text = (f"<module {name!r} from {origin!r}>" if located
                    else f"<module {name!r} ({origin})>")
            _add(parts, budget, text)
            return
    name = item(members, "__name__", plain)
    _add(parts, budget, f"<module {name!r}>" if type(name) is str else "<module '?'>")


def _emit_namespace(value, kind, parts, budget, active, nesting) -> None:
    """``namespace(a=1, b=[2])``: its non-empty string keys in insertion order."""
    if address(value) in active:
        _add(parts, budget, "namespace(...)")
        return
    active.add(address(value))
    _add(parts, budget, "namespace(")
    first = True
    members = _NAMESPACE_DICT(value)
    for key, entry in (_DICT_ITEMS(members) if type(members) is dict else ()):
        if type(key) is str and key:
            _add(parts, budget, f"{key}=" if first else f", {key}=")
            _emit(entry, parts, budget, active, nesting)
            first = False
    _add(parts, budget, ")")
    active.discard(address(value))


def _emit_clock(value, kind, parts, budget, active, nesting) -> None:
    """A ``time`` or ``datetime``: its C repr, its ``tzinfo`` rendered by the rule."""
    zone = _TZINFO[kind](value)
    if zone is None:
        _add(parts, budget, repr(value))
        return
    text = repr(_NO_TZINFO[kind](value, tzinfo=None))
    _add(parts, budget, text[:-1] + ", tzinfo=")
    _emit(zone, parts, budget, active, nesting)
    _add(parts, budget, ")")


def _emit_timezone(value, kind, parts, budget, active, nesting) -> None:
    """Its repr when its name and offset are plain (a timedelta subclass or a str
    subclass given to ``timezone()`` would answer ``repr`` with the program's code)."""
    name, offset = _TZNAME(value, None), _UTCOFFSET(value, None)
    plain = type(name) is str and type(offset) is _timedelta
    _add(parts, budget, repr(value) if plain else _object_repr(value, kind))


def _emit_pattern(value, kind, parts, budget, active, nesting) -> None:
    """``re.compile(...)`` / ``<re.Match object; ...>`` when the text matched is a plain
    ``str`` or ``bytes`` (the repr shows a part of it)."""
    text = (_PATTERN_TEXT if kind is _Pattern else _MATCH_TEXT)(value)
    if type(text) is str or type(text) is bytes:
        _add(parts, budget, repr(value))
    else:
        _add(parts, budget, _object_repr(value, kind))


def _emit_stream(value, kind, parts, budget, active, nesting) -> None:
    """``<_io.TextIOWrapper name=... mode=... encoding=...>`` over an ``io.BytesIO`` (a
    job's stdin): its name (the buffer's attribute) and mode (its own) by the rule."""
    _add(parts, budget, "<_io.TextIOWrapper")
    buffer = _STREAM_BUFFER(value)
    for source, key in ((buffer, "name"), (value, "mode")):
        if source is buffer and type(buffer) is not _BytesIO:
            continue
        members = _IO_DICT(source)
        if type(members) is dict:
            found = item(members, key, exact_keys(members), _BUDGET)
            if found is not _BUDGET:
                _add(parts, budget, f" {key}=")
                _emit(found, parts, budget, active, nesting)
    encoding = _STREAM_ENCODING(value)
    _add(parts, budget, f" encoding={plain_text(encoding)!r}>" if plain_text(encoding) is not None
         else ">")


def _emit_partial(value, kind, parts, budget, active, nesting) -> None:
    """``functools.partial(func, arg, key=value)``: its parts by the rule."""
    if address(value) in active:
        _add(parts, budget, "...")
        return
    active.add(address(value))
    function, args, keywords = (get(value) for get in _PARTIAL)
    _add(parts, budget, "functools.partial(")
    _emit(function, parts, budget, active, nesting)
    for entry in (args if type(args) is tuple else ()):
        _add(parts, budget, ", ")
        _emit(entry, parts, budget, active, nesting)
    for key, entry in (_DICT_ITEMS(keywords) if type(keywords) is dict else ()):
        _add(parts, budget, f", {plain_text(key) or '?'}=")
        _emit(entry, parts, budget, active, nesting)
    _add(parts, budget, ")")
    active.discard(address(value))


_SPECIALS = ((MethodType, _emit_method), (_partial, _emit_partial),
             (GeneratorType, _emit_generator),
             (CoroutineType, _emit_generator), (AsyncGeneratorType, _emit_generator),
             (slice, _emit_slice), (ModuleType, _emit_module),
             (SimpleNamespace, _emit_namespace), (_time, _emit_clock),
             (_datetime, _emit_clock), (_timezone, _emit_timezone), (_Pattern, _emit_pattern),
             (_Match, _emit_pattern), (_TextIOWrapper, _emit_stream)) + tuple(
                 (view, _emit_view) for view in _VIEWS)
