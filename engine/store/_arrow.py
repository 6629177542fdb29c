"""Python lists to Arrow arrays without pyarrow's pandas probe.

``pa.array(values, type)`` asks first whether ``values`` is a pandas object, and to ask
it imports pandas (pyarrow's ``_PandasAPIShim``: every path through ``pa.array``, numpy
arrays included, calls it). Where pandas is installed, the first Arrow array a process
builds therefore costs 0.5-0.7 s on this project's machine, paid by every command that
writes the store (``trace``'s main process among them) although no value it converts is
a pandas object. :func:`arrow_array` builds the column types the store's tables use from
buffers instead (``pa.Array.from_buffers``, the route pyarrow's maintainers give for
buffer-backed values in apache/arrow#38137), which never reaches the probe; any other
type, or values it does not take as they are, go to ``pa.array`` as before, and so does
everything once pandas is imported anyway (the probe then costs nothing, and pyarrow's
converter, one C++ pass, is faster than these few passes over a list), and once this
process has built ``BUFFER_VALUES`` values here: by then the buffers' extra passes
(~0.1-0.25 µs a value) have cost about what the import costs once, so a long trace pays
at most about twice the cheaper of the two.

The arrays are equal to ``pa.array``'s (tests/store/test_arrow.py compares them), and a
value ``pa.array`` refuses is refused here too: each fast path either takes every value
as pyarrow would or gives up and lets ``pa.array`` decide.
"""

from __future__ import annotations

import datetime as dt
import operator
import sys
from array import array as _buffer
from functools import partial
from itertools import compress, repeat
from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa

__all__ = ["arrow_array", "from_buffers"]

_TIMESTAMP_US = pa.timestamp("us")
BUFFER_VALUES = 4_000_000
_built = 0  # values this process has built from buffers
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.timezone.utc)
_MICROSECOND = dt.timedelta(microseconds=1)
_INT32_MAX = (1 << 31) - 1


class _Refused(Exception):
    """A value this module does not convert as pyarrow would: let ``pa.array`` decide."""


def arrow_array(values: Sequence, kind: pa.DataType) -> pa.Array:
    """``pa.array(values, kind)`` (``None`` a null) without importing pandas, for int64,
    int32, float64, bool, string, binary and timestamp[us]; other types through
    ``pa.array``."""
    if not isinstance(values, (list, tuple, range)):
        values = list(values)
    global _built
    if "pandas" not in sys.modules and _built < BUFFER_VALUES:
        built = from_buffers(values, kind)
        if built is not None:
            _built += len(values)
            return built
    return pa.array(values, kind)


def from_buffers(values: Sequence, kind: pa.DataType) -> pa.Array | None:
    """``values`` (a list, tuple or range) as an array of ``kind`` built from buffers,
    equal to ``pa.array(values, kind)``; None for a type or a value it does not take as
    pyarrow would (which includes every value ``pa.array`` refuses)."""
    try:
        return _build(values, kind)
    except _Refused:
        return None


def _build(values: Sequence, kind: pa.DataType) -> pa.Array:
    build = _BUILDERS.get(kind)
    if build is None:
        raise _Refused
    return build(values, kind)


class _Nulls(NamedTuple):
    """Where a column's nulls are: their count, Arrow's validity bitmap and the non-null
    values (``None`` and the values themselves when nothing is null), and a mask of the
    non-null places (numpy bools) to put per-value items back in their rows."""

    count: int
    validity: pa.Buffer | None
    present: Sequence
    mask: np.ndarray | None


def _nulls(values: Sequence) -> _Nulls:
    count = values.count(None)
    if not count:
        return _Nulls(0, None, values, None)
    flags = bytes(map(operator.is_not, values, repeat(None)))
    mask = np.frombuffer(flags, dtype=bool)
    return _Nulls(count, pa.py_buffer(np.packbits(mask, bitorder="little")),
                  list(compress(values, flags)), mask)


def _in_rows(items: np.ndarray, nulls: _Nulls) -> np.ndarray:
    """``items`` of the non-null values, with zeros in the null rows."""
    if nulls.mask is None:
        return items
    full = np.zeros(len(nulls.mask), dtype=items.dtype)
    full[nulls.mask] = items
    return full


def _fixed(values: Sequence, kind: pa.DataType, code: str) -> pa.Array:
    nulls = _nulls(values)
    present = nulls.present
    # ``array`` takes exactly what pyarrow takes here, bar bools (pyarrow refuses them as
    # numbers) and, for float64, ints beyond 2**53 (pyarrow refuses what it cannot hold).
    if not set(map(type, present)) <= ({float, int} if code == "d" else {int}):
        raise _Refused
    if code == "d" and any(abs(v) > 1 << 53 for v in present if type(v) is int):
        raise _Refused
    try:
        items = np.frombuffer(_buffer(code, present), dtype=code)
    except OverflowError:
        raise _Refused from None
    return pa.Array.from_buffers(kind, len(values),
                                 [nulls.validity, pa.py_buffer(_in_rows(items, nulls))],
                                 nulls.count)


def _booleans(values: Sequence) -> pa.Array:
    nulls = _nulls(values)
    if not set(map(type, nulls.present)) <= {bool}:
        raise _Refused
    bits = np.packbits(np.frombuffer(bytes(map(operator.is_, values, repeat(True))),
                                     dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [nulls.validity, pa.py_buffer(bits)],
                                 nulls.count)


def _text(values: Sequence, kind: pa.DataType, item: type) -> pa.Array:
    nulls = _nulls(values)
    present = nulls.present
    if not set(map(type, present)) <= {item}:
        raise _Refused
    pieces = present
    if item is str:
        joined = "".join(present)
        if joined.isascii():  # a character is a byte: the lengths are the characters
            data = joined.encode("ascii")
        else:
            try:
                pieces = list(map(str.encode, present))
            except UnicodeEncodeError:  # a lone surrogate: pyarrow's error, not this one
                raise _Refused from None
            data = b"".join(pieces)
    else:
        data = b"".join(present)
    if len(data) > _INT32_MAX:  # pyarrow splits it into chunks: let it
        raise _Refused
    # (no sum overflows: the lengths add up to len(data))
    sizes = _in_rows(np.fromiter(map(len, pieces), dtype=np.int32, count=len(pieces)), nulls)
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(kind, len(values), [nulls.validity, pa.py_buffer(offsets),
                                                     pa.py_buffer(data)], nulls.count)


def _timestamps(values: Sequence) -> pa.Array:
    nulls = _nulls(values)
    micros = []
    for value in values:
        if value is None:
            micros.append(0)
        elif type(value) is dt.datetime:
            # pyarrow stores an aware time as its UTC instant, a naive one as it reads
            micros.append((value - _EPOCH) // _MICROSECOND if value.tzinfo is None
                          else (value - _EPOCH_UTC) // _MICROSECOND)
        else:
            raise _Refused
    return pa.Array.from_buffers(_TIMESTAMP_US, len(values),
                                 [nulls.validity, pa.py_buffer(_buffer("q", micros))],
                                 nulls.count)


# Each type the store's tables use, and how its array is built (a fixed-width type with
# the ``array`` type code whose items have its width and meaning).
_BUILDERS = {
    pa.int64(): partial(_fixed, code="q"),
    pa.int32(): partial(_fixed, code="i"),
    pa.float64(): partial(_fixed, code="d"),
    pa.string(): partial(_text, item=str),
    pa.binary(): partial(_text, item=bytes),
    pa.bool_(): lambda values, kind: _booleans(values),
    _TIMESTAMP_US: lambda values, kind: _timestamps(values),
}
