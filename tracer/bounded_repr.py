"""``repr`` with a character budget, exact up to the cut; the stable rendering of objects.

``repr`` of a large value costs time and memory in proportion to the whole value; the
tracer only keeps the first ``max_repr`` characters, and does so at every step. For the
built-in containers and ``str`` this module builds just that prefix, producing the same
characters CPython's ``repr`` would (same element order, same quoting rules, ``[...]`` for
self-reference).

An instance of a class the program defined (its ``__module__``, read with type's own
getter, is ``PROGRAM_MODULE``) whose class does not define ``__repr__`` (the MRO's type
dicts, read with C getters, lead to ``object.__repr__``) renders as
``QualName(attr=value, ...)``: its ``__dict__`` in insertion order, then its set
``__slots__`` (base classes first, each class's in declaration order), nested instances
alike, a cycle or a fifth nested level as ``QualName(...)``. No program code runs for it:
the instance dict is read by the ``__dict__`` getset descriptor CPython made (a
``__dict__`` property of the program is skipped), slots by their member descriptors.
Other objects use their own ``__repr__``; what it returns has every memory address
(`` at 0x...``) removed, and a bound method is ``<bound method QualName>`` (its repr
would call the instance's). Strings are never scrubbed: the texts of ``str`` values are
built here.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

from _collections import OrderedDict, defaultdict, deque  # noqa: E402
from _weakref import ref as _weakref  # noqa: E402
from re import compile as _compile  # noqa: E402
from sys import getsizeof  # noqa: E402
from types import (FunctionType, GetSetDescriptorType, MemberDescriptorType,  # noqa: E402
                   MethodType)

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
MAX_NESTING = 4       # nested program instances rendered; deeper ones are ``QualName(...)``
MAX_ATTRIBUTES = 100  # attributes read of one instance
flat = False          # the last bounded_repr was a flat built-in container (no objects in it)
attributes_cut = 0    # instances with more attributes than MAX_ATTRIBUTES seen this job

# C getters captured when built: no metaclass, descriptor or __getattribute__ of the
# program runs when the tracer reads a type's name, module, MRO or dict.
_TYPE_GET = type.__dict__
_QUALNAME = _TYPE_GET["__qualname__"].__get__
_MODULE = _TYPE_GET["__module__"].__get__
_MRO = _TYPE_GET["__mro__"].__get__
_TYPE_DICT = _TYPE_GET["__dict__"].__get__
_DICTOFFSET = _TYPE_GET["__dictoffset__"].__get__
_OBJECT_REPR = object.__dict__["__repr__"]
_GETSET_GET = GetSetDescriptorType.__get__
_GETSET_NAME = GetSetDescriptorType.__dict__["__name__"].__get__
_MEMBER_GET = MemberDescriptorType.__get__
_MEMBER_CLASS = MemberDescriptorType.__dict__["__objclass__"].__get__
_FUNC_QUALNAME = FunctionType.__dict__["__qualname__"].__get__
_METHOD_FUNC = MethodType.__dict__["__func__"].__get__
_DEQUE_MAXLEN = deque.__dict__["maxlen"].__get__
_FACTORY = defaultdict.__dict__["default_factory"].__get__
_DICT_ITEMS = dict.items
_ODICT_ITEMS = OrderedDict.items
_ADDRESS = _compile(r" at 0x[0-9a-fA-F]+")
_SCRUB = _ADDRESS.sub
_JOIN = "".join
# per job: address(type) -> (weak reference to the type, its layout or None)
_layouts: dict = {}


def reset(job: bool = True) -> None:
    """Forget the classes seen (and, for a new ``job``, the count of cut instances)."""
    global attributes_cut
    _layouts.clear()
    if job:
        attributes_cut = 0


def layout(kind):
    """None unless ``kind`` is a class the program defined; else ``(default_repr,
    qualname, slots)``: whether its repr is ``object.__repr__`` (rendered here), its
    ``__qualname__`` as a plain str, and its slots as (shown name, defining class index
    in the MRO, key in that class's dict). Decided once per class and job (a ``__repr__``
    added to the class later is not seen); only type's own C getters run, but the type
    dicts' lookups may meet a program's str subclass keys: the caller is quiet."""
    entry = _layouts.get(address(kind))
    if entry is not None and entry[0]() is kind:
        return entry[1]
    found = None
    module = _MODULE(kind)
    if type(module) is str and module == PROGRAM_MODULE:
        try:
            found = _program_layout(kind)
        except BaseException:  # a program's key in a class dict raised in a lookup:
            found = None       # the class is shown by its own repr, not read
    _layouts[address(kind)] = (_weakref(kind), found)
    return found


def _program_layout(kind):
    mro = _MRO(kind)
    if type(mro) is not tuple:
        return None
    default = False
    for klass in mro:
        method = _TYPE_DICT(klass).get("__repr__")
        if method is not None:
            default = method is _OBJECT_REPR
            break
    dict_at = _dict_descriptor(mro)
    if _DICTOFFSET(kind) and dict_at is None:
        # a class that replaced its __dict__ descriptor (a property of its own): its
        # instance dict cannot be read without running it; its own repr is used
        default = False
    name = _QUALNAME(kind)
    name = name if type(name) is str else "?"
    slots = []
    for position in range(len(mro) - 1, -1, -1):  # base classes first
        klass = mro[position]
        members = _TYPE_DICT(klass)
        declared = members.get("__slots__")
        if type(declared) is str:
            declared = (declared,)
        order = []
        if type(declared) in (tuple, list):
            owner = _QUALNAME(klass)
            owner = owner.lstrip("_") if type(owner) is str else ""
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
            member = members.get(key)
            if type(member) is MemberDescriptorType and _MEMBER_CLASS(member) is klass:
                slots.append((shown, position, key))
    return (default, name, tuple(slots), dict_at)


def _dict_descriptor(mro):
    """The position in the MRO of the getset descriptor CPython made for instances'
    ``__dict__`` (the first one), or None; a ``__dict__`` the program defined itself is
    passed over. (The position, not the descriptor: the layout holds nothing of the
    program's.)"""
    for position, klass in enumerate(mro):
        descriptor = _TYPE_DICT(klass).get("__dict__")
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
    descriptor = _TYPE_DICT(mro[position]).get("__dict__")
    if type(descriptor) is not GetSetDescriptorType:  # the class was changed since
        return None
    try:
        found = _GETSET_GET(descriptor, value, kind)
    except (TypeError, AttributeError):
        return None
    return found if type(found) is dict else None


def attributes(value, kind, shape) -> list:
    """``(name, value)`` of an instance of a program class (``shape`` its layout): the
    ``__dict__``'s str keys in insertion order, then the set slots; at most
    ``MAX_ATTRIBUTES``."""
    global attributes_cut
    found = []
    own = instance_dict(value, kind, shape)
    if own is not None:
        for name, item in _DICT_ITEMS(own):
            if type(name) is str:
                if len(found) >= MAX_ATTRIBUTES:
                    attributes_cut += 1
                    return found
                found.append((name, item))
    slots = shape[2]
    if slots:
        mro = _MRO(kind)
        for shown, position, key in slots:
            if position >= len(mro):
                continue
            member = _TYPE_DICT(mro[position]).get(key)
            if type(member) is not MemberDescriptorType:
                continue
            try:
                item = _MEMBER_GET(member, value, kind)
            except (AttributeError, TypeError):  # unset
                continue
            if len(found) >= MAX_ATTRIBUTES:
                attributes_cut += 1
                return found
            found.append((shown, item))
    return found


def _fits(value, limit: int) -> bool:
    """True for a flat built-in container small enough that C ``repr`` is cheap: the
    common case, done at C speed without building the repr piece by piece. Checks are
    C-speed too (``set(map(type, ...))``, ``sum(map(len, ...))``)."""
    parts = (value.keys(), value.values()) if type(value) is dict else (value,)
    for part in parts:
        if len(part) > limit:  # its repr is longer than the budget: build the prefix only
            return False
        kinds = set(map(type, part))
        if kinds <= _SMALL:
            continue
        if kinds <= _TEXT:
            if sum(map(len, part)) > 4 * limit:
                return False
            continue
        if not kinds <= _FLAT or sum(map(getsizeof, part)) > 8 * limit + 1024:
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


def bounded_repr(value, limit: int) -> tuple[str, bool]:
    """``(repr(value)[:limit], truncated)``, computed in O(limit) for built-in containers;
    program instances and foreign objects rendered as the module docstring says. Sets
    ``flat`` when ``value`` is a built-in container of scalars and strings only."""
    global flat
    kind = type(value)
    flat = False
    if kind in _SCALARS:
        text = repr(value)
    elif kind is str:
        text = repr(value) if len(value) <= limit else str_prefix_repr(value, limit)
    elif kind in _CONTAINERS and _fits(value, limit):
        text = repr(value)
        flat = True
    else:
        parts: list[str] = []
        try:
            _emit(value, parts, [0, limit + 1], set(), 0)
        except LookupError as exc:
            if exc is not _BUDGET:
                raise
            # raised again next time: its traceback would grow and keep frames alive
            exc.__traceback__ = exc.__context__ = None
        text = _JOIN(parts)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def _add(parts: list[str], budget: list[int], piece: str) -> None:
    parts.append(piece)
    budget[0] += len(piece)
    if budget[0] >= budget[1]:
        raise _BUDGET


def _emit(value, parts: list[str], budget: list[int], active: set, nesting: int) -> None:
    kind = type(value)
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
        if address(value) in active:
            _add(parts, budget, open_ + "..." + close)
            return
        active.add(address(value))
        _add(parts, budget, open_)
        for index, item in enumerate(value):
            if index:
                _add(parts, budget, ", ")
            _emit(item, parts, budget, active, nesting)
        _add(parts, budget, ",)" if kind is tuple and len(value) == 1 else close)
        active.discard(address(value))
        return
    if kind is dict:
        if address(value) in active:
            _add(parts, budget, "{...}")
            return
        active.add(address(value))
        _add(parts, budget, "{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                _add(parts, budget, ", ")
            _emit(key, parts, budget, active, nesting)
            _add(parts, budget, ": ")
            _emit(item, parts, budget, active, nesting)
        _add(parts, budget, "}")
        active.discard(address(value))
        return
    if kind is set or kind is frozenset:
        if not value:
            _add(parts, budget, "set()" if kind is set else "frozenset()")
            return
        _add(parts, budget, "{" if kind is set else "frozenset({")
        for index, item in enumerate(value):
            if index:
                _add(parts, budget, ", ")
            _emit(item, parts, budget, active, nesting)
        _add(parts, budget, "}" if kind is set else "})")
        return
    if kind is deque or kind is defaultdict or kind is OrderedDict:
        _emit_collection(value, kind, parts, budget, active, nesting)
        return
    shape = layout(kind)
    if shape is not None and shape[0]:
        _emit_instance(value, kind, shape, parts, budget, active, nesting)
        return
    _add(parts, budget, foreign_repr(value, kind))


def foreign_repr(value, kind) -> str:
    """The object's own repr, without memory addresses; a bound method by its function's
    qualified name (its repr would run the instance's)."""
    if kind is MethodType:
        function = _METHOD_FUNC(value)
        if type(function) is FunctionType:
            name = _FUNC_QUALNAME(function)
            if type(name) is str:
                return f"<bound method {name}>"
    text = repr(value)
    if type(text) is not str:
        text = _JOIN((text,)) if isinstance(text, str) else "<repr returned a non-string>"
    if " at 0x" in text:
        text = _SCRUB("", text)
    return text


def _emit_instance(value, kind, shape, parts, budget, active, nesting) -> None:
    name = shape[1]
    if address(value) in active or nesting >= MAX_NESTING:
        _add(parts, budget, name + "(...)")
        return
    active.add(address(value))
    _add(parts, budget, name + "(")
    for index, (attr, item) in enumerate(attributes(value, kind, shape)):
        _add(parts, budget, f", {attr}=" if index else f"{attr}=")
        _emit(item, parts, budget, active, nesting + 1)
    _add(parts, budget, ")")
    active.discard(address(value))


def _emit_collection(value, kind, parts, budget, active, nesting) -> None:
    """deque, defaultdict, OrderedDict as CPython 3.12+ prints them, elements rendered
    here (a program instance in them is rendered as everywhere else)."""
    if address(value) in active:
        _add(parts, budget, "[...]" if kind is deque else "...")
        return
    active.add(address(value))
    if kind is deque:
        _add(parts, budget, "deque([")
        for index, item in enumerate(value):
            if index:
                _add(parts, budget, ", ")
            _emit(item, parts, budget, active, nesting)
        maxlen = _DEQUE_MAXLEN(value)
        _add(parts, budget, "])" if maxlen is None else f"], maxlen={maxlen})")
    else:
        if kind is defaultdict:
            _add(parts, budget, "defaultdict(")
            _emit(_FACTORY(value), parts, budget, active, nesting)
            _add(parts, budget, ", {")
        elif not value:
            _add(parts, budget, "OrderedDict()")
            active.discard(address(value))
            return
        else:
            _add(parts, budget, "OrderedDict({")
        for index, (key, item) in enumerate((_ODICT_ITEMS if kind is OrderedDict else _DICT_ITEMS)(value)):
            if index:
                _add(parts, budget, ", ")
            _emit(key, parts, budget, active, nesting)
            _add(parts, budget, ": ")
            _emit(item, parts, budget, active, nesting)
        _add(parts, budget, "})")
    active.discard(address(value))
