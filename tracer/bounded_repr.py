"""``repr`` with a character budget, exact up to the cut.

``repr`` of a large value costs time and memory in proportion to the whole value; the
tracer only keeps the first ``max_repr`` characters, and does so at every step. For the
built-in containers and ``str`` this module builds just that prefix, producing the same
characters CPython's ``repr`` would (same element order, same quoting rules, ``[...]`` for
self-reference). Other objects use their own ``__repr__``.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

from sys import getsizeof  # noqa: E402

_SCALARS = frozenset({int, float, complex, bool, type(None), bytes, range, type(...)})
_SEQUENCES = {list: ("[", "]"), tuple: ("(", ")")}


# Elements of a "flat" container, whose repr cost the size check below can bound.
_FLAT = frozenset(_SCALARS | {str})
_SMALL = frozenset(_SCALARS - {bytes})  # reprs of a bounded length (ints up to 4,300 digits)
_TEXT = frozenset({str, bytes})
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})


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
    """``(repr(value)[:limit], truncated)``, computed in O(limit) for built-in containers."""
    kind = type(value)
    if kind in _SCALARS:
        text = repr(value)
    elif kind is str:
        text = repr(value) if len(value) <= limit else str_prefix_repr(value, limit)
    elif kind in _CONTAINERS and _fits(value, limit):
        text = repr(value)
    elif kind in _CONTAINERS:
        parts: list[str] = []
        try:
            _emit(value, parts, [0, limit + 1], set())
        except LookupError as exc:
            if exc is not _BUDGET:
                raise
            # raised again next time: its traceback would grow and keep frames alive
            exc.__traceback__ = exc.__context__ = None
        text = "".join(parts)
    else:
        text = repr(value)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def _add(parts: list[str], budget: list[int], piece: str) -> None:
    parts.append(piece)
    budget[0] += len(piece)
    if budget[0] >= budget[1]:
        raise _BUDGET


def _emit(value, parts: list[str], budget: list[int], active: set) -> None:
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
        if id(value) in active:
            _add(parts, budget, open_ + "..." + close)
            return
        active.add(id(value))
        _add(parts, budget, open_)
        for index, item in enumerate(value):
            if index:
                _add(parts, budget, ", ")
            _emit(item, parts, budget, active)
        _add(parts, budget, ",)" if kind is tuple and len(value) == 1 else close)
        active.discard(id(value))
        return
    if kind is dict:
        if id(value) in active:
            _add(parts, budget, "{...}")
            return
        active.add(id(value))
        _add(parts, budget, "{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                _add(parts, budget, ", ")
            _emit(key, parts, budget, active)
            _add(parts, budget, ": ")
            _emit(item, parts, budget, active)
        _add(parts, budget, "}")
        active.discard(id(value))
        return
    if kind is set or kind is frozenset:
        if not value:
            _add(parts, budget, "set()" if kind is set else "frozenset()")
            return
        _add(parts, budget, "{" if kind is set else "frozenset({")
        for index, item in enumerate(value):
            if index:
                _add(parts, budget, ", ")
            _emit(item, parts, budget, active)
        _add(parts, budget, "}" if kind is set else "})")
        return
    _add(parts, budget, repr(value))
