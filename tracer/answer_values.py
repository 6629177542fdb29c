"""What a model's answer may build, and what counts as a plain value.

An ``input`` prediction is checked by running ``f(answer)`` and comparing what it returns
with the task's output (job.py, ``run`` mode). An answer that could define the behaviour
of the values it passes would be judged right without the program computing anything:
a class whose ``__eq__`` is always true and whose ``__getattr__`` returns itself, made by
a factory the program happens to import (``abc.ABCMeta(...)``, ``types.new_class``,
``dataclasses.make_dataclass``, ``enum.Enum(...)``, ``collections.namedtuple`` with a
method slipped in) or by a lambda the program calls later. The host lets through only
expressions of literals, safe builtins and the program's names (engine/scoring/
_inputs.py); here, in the guest, the values themselves are checked, before the call (the
arguments) and after it (the returned value):

* a class that existed before the answer began is the program's or the standard
  library's: its behaviour is theirs (but for ``unittest.mock``'s, whose objects answer
  anything);
* no class may be made while the answer itself is evaluated (the arguments): a factory
  there makes the answer's own class, whatever code it holds;
* a class made during the call is the program's when everything callable in it (and in
  its bases and metaclass made since) is code, and not the answer's (``<input>``): a class
  holding the answer's lambda, or a callable that is not code (``slice`` as its
  ``__eq__``: the call's result is a true object), was made to answer for the answer;
* functions are values (a lambda the program calls is what CRUXEval's inputs hold).

``plain`` is the stricter test of a code check's returned value (the reward service): only
the built-in value types, all the way down, so that its text is the runner's own repr and
never a ``__repr__`` of the program's.

The walks read with C getters and compare types by identity: no program code runs.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

from types import (BuiltinFunctionType, BuiltinMethodType, ClassMethodDescriptorType,  # noqa: E402
                   FunctionType, GetSetDescriptorType, MemberDescriptorType, MethodType,
                   MethodWrapperType, WrapperDescriptorType, MethodDescriptorType)

import shared_state  # noqa: E402
from bounded_repr import address as _address  # noqa: E402

MAX_OBJECTS = 100_000  # objects looked at in one walk; a larger value is refused
INPUT_FILE = "<input>"  # the answer's code (job.py compiles the input under this name)
_PLAIN_KINDS = frozenset(_address(kind) for kind in (
    type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
    frozenset, range, slice, type(...)))
_SEQUENCES = frozenset(_address(kind) for kind in (list, tuple, set, frozenset))
_CALLABLE_KINDS = frozenset(_address(kind) for kind in (
    BuiltinFunctionType, BuiltinMethodType, MethodDescriptorType, WrapperDescriptorType,
    ClassMethodDescriptorType, MethodWrapperType))
_TYPE_GET = type.__dict__
_MRO = _TYPE_GET["__mro__"].__get__
_TYPE_DICT = _TYPE_GET["__dict__"].__get__
_MODULE_OF = _TYPE_GET["__module__"].__get__
_QUALNAME = _TYPE_GET["__qualname__"].__get__
_CODE = FunctionType.__dict__["__code__"].__get__
_METHOD_FUNC = MethodType.__dict__["__func__"].__get__
_METHOD_SELF = MethodType.__dict__["__self__"].__get__
_STATIC_FUNC = staticmethod.__dict__["__func__"].__get__
_CLASS_FUNC = classmethod.__dict__["__func__"].__get__
_PROPERTY_PARTS = tuple(property.__dict__[name].__get__ for name in ("fget", "fset", "fdel"))
_GETSET_GET = GetSetDescriptorType.__get__
_MEMBER_GET = MemberDescriptorType.__get__
_DICT_ITEMS = dict.items
_FILENAME = type(_CODE(shared_state.settle)).__dict__["co_filename"].__get__
_DENIED_MODULE = "unittest.mock"  # its objects (ANY, Mock) answer anything they are asked


def _name(kind) -> str:
    name = _QUALNAME(kind)
    return name if type(name) is str else "?"


def _own_parts(value, kind) -> list | str:
    """The instance's ``__dict__`` values and set slots, read with CPython's own
    descriptors (a ``__dict__`` property of the program's is not asked); or, as a str,
    why they cannot be read without running the program's code."""
    found = []
    for klass in _MRO(kind):
        namespace = _TYPE_DICT(klass)
        if not shared_state.plain(namespace):
            return f"{_name(kind)} (a class whose attribute names are not str)"
        for key, item in namespace.items():
            item_kind = type(item)
            try:
                if item_kind is GetSetDescriptorType and key == "__dict__":
                    own = _GETSET_GET(item, value, kind)
                    if type(own) is dict:
                        for pair in _DICT_ITEMS(own):
                            found.extend(pair)
                elif item_kind is MemberDescriptorType:
                    found.append(_MEMBER_GET(item, value, kind))
            except (AttributeError, TypeError):  # an unset slot; a descriptor of another class
                pass
    return found


def _judge_class(kind, before: set, during_call: bool, depth: int = 0) -> str | None:
    """Why the class ``kind`` answers for the answer, or None (see the module doc).
    ``during_call``: the value comes from the call (a class the program's code made while
    it ran is the program's), else from the answer's own evaluation (no new class at all)."""
    if _address(kind) in before:
        module = _MODULE_OF(kind)
        if type(module) is str and (module == _DENIED_MODULE
                                    or module.startswith(_DENIED_MODULE + ".")):
            return f"{_name(kind)} (unittest.mock's objects answer anything)"
        return None
    if not during_call:
        return f"{_name(kind)}, a class made while the answer was evaluated"
    if depth > 8:
        return f"{_name(kind)} (classes nested too deep to check)"
    for klass in _MRO(kind) + _MRO(type(kind)):
        if _address(klass) in before:
            continue
        namespace = _TYPE_DICT(klass)
        if not shared_state.plain(namespace):
            return f"{_name(klass)} (a class whose attribute names are not str)"
        for item in namespace.values():
            problem = _foreign_code(item, before, depth)
            if problem is not None:
                return f"{_name(klass)}, made while the answer ran, holding {problem}"
    return None


def _foreign_code(item, before: set, depth: int) -> str | None:
    """None when ``item``, found in a class made after the answer began, is data or code
    that is not the answer's; else what it is. Code is a function whose code is not from
    ``<input>`` (the program's, or the standard library's: a namedtuple's methods);
    anything else that can be called (a class, a built-in, a ``functools.partial``) was put
    there to answer for the class, and data whose class is new is judged as a class."""
    kind = type(item)
    if kind is staticmethod:
        return _foreign_code(_STATIC_FUNC(item), before, depth)
    if kind is classmethod:
        return _foreign_code(_CLASS_FUNC(item), before, depth)
    if kind is property:
        for get in _PROPERTY_PARTS:
            part = get(item)
            if part is not None:
                problem = _foreign_code(part, before, depth)
                if problem is not None:
                    return problem
        return None
    if kind is FunctionType:
        filename = _FILENAME(_CODE(item))
        return f"code from {filename}" if filename == INPUT_FILE else None
    if kind is type or issubclass(kind, type):
        return f"the class {_name(item)} as code"
    if callable(item):
        return f"a {_name(kind)} as code"
    return _judge_class(kind, before, True, depth + 1)


def foreign(value, before: set, during_call: bool) -> str | None:
    """None when everything reachable from ``value`` (containers, instances' attributes,
    bound methods' objects) is of a class the answer did not make (``before``: the
    addresses of the classes that existed before the answer began; ``during_call``: see
    ``_judge_class``); else the first such class, described."""
    seen: set = set()
    pending = [value]
    while pending:
        obj = pending.pop()
        where = _address(obj)
        if where in seen:
            continue
        seen.add(where)
        if len(seen) > MAX_OBJECTS:
            return f"more than {MAX_OBJECTS:,} objects (too many to check)"
        kind = type(obj)
        if _address(kind) in _PLAIN_KINDS:
            if _address(kind) in _SEQUENCES:
                pending.extend(obj)
            elif kind is dict:
                for pair in _DICT_ITEMS(obj):
                    pending.extend(pair)
            continue
        if kind is FunctionType or _address(kind) in _CALLABLE_KINDS:
            continue  # a function is a value; its results are checked where they land
        if kind is MethodType:
            pending.append(_METHOD_FUNC(obj))
            pending.append(_METHOD_SELF(obj))
            continue
        if kind is type or issubclass(kind, type):
            problem = _judge_class(obj, before, during_call)
            if problem is not None:
                return problem
            continue
        problem = _judge_class(kind, before, during_call)
        if problem is not None:
            return problem
        parts = _own_parts(obj, kind)
        if type(parts) is str:
            return parts
        pending.extend(parts)
    return None


def plain(value) -> bool:
    """Whether ``value`` is built-in data all the way down (exact built-in value types:
    None, bools, numbers, strings, bytes, lists, tuples, dicts, sets, ranges, slices), at
    most MAX_OBJECTS objects."""
    seen: set = set()
    pending = [value]
    while pending:
        obj = pending.pop()
        kind = type(obj)
        if _address(kind) not in _PLAIN_KINDS:
            return False
        where = _address(obj)
        if where in seen:
            continue
        seen.add(where)
        if len(seen) > MAX_OBJECTS:
            return False
        if _address(kind) in _SEQUENCES:
            pending.extend(obj)
        elif kind is dict:
            for pair in _DICT_ITEMS(obj):
                pending.extend(pair)
    return True
