"""Python lists to Arrow arrays without pyarrow's pandas probe.

``pa.array(values, type)`` asks first whether ``values`` is a pandas object, and to ask
it imports pandas (pyarrow's ``_PandasAPIShim``: every path through ``pa.array``, numpy
arrays included, calls it). Where pandas is installed, the first Arrow array a process
builds therefore costs 0.5-0.7 s on this project's machine, paid by every command that
writes the store (``trace``'s main process among them) although no value it converts is
a pandas object. :func:`arrow_array` builds the column types the store's tables use from
buffers instead (``pa.Array.from_buffers``, the route pyarrow's maintainers give for
buffer-backed values in apache/arrow#38137), which never reaches the probe; any other
type, or values it does not take as they are, go to ``pa.array`` as before.

The arrays are equal to ``pa.array``'s (tests/store/test_arrow.py compares them), and a
value ``pa.array`` refuses is refused here too: each fast path either takes every value
as pyarrow would or gives up and lets ``pa.array`` decide.
"""

from __future__ import annotations

import datetime as dt
from array import array as _buffer
from itertools import accumulate, compress
from typing import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["arrow_array"]

# Fixed-width types and the ``array`` type code whose items have their width and meaning.
_FIXED = {pa.int64(): "q", pa.int32(): "i", pa.float64(): "d"}
_TEXT = {pa.string(): str, pa.binary(): bytes}
_TIMESTAMP_US = pa.timestamp("us")
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
    try:
        return _build(values, kind)
    except _Refused:
        return pa.array(values, kind)


def _build(values: Sequence, kind: pa.DataType) -> pa.Array:
    if kind in _FIXED:
        return _fixed(values, kind, _FIXED[kind])
    if kind in _TEXT:
        return _text(values, kind, _TEXT[kind])
    if kind == pa.bool_():
        return _booleans(values)
    if kind == _TIMESTAMP_US:
        return _timestamps(values)
    raise _Refused


def _validity(values: Sequence) -> tuple[int, pa.Buffer | None]:
    """The null count and the validity bitmap (``None`` when nothing is null)."""
    nulls = values.count(None)
    if not nulls:
        return 0, None
    present = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    return nulls, pa.py_buffer(np.packbits(present, bitorder="little"))


def _fixed(values: Sequence, kind: pa.DataType, code: str) -> pa.Array:
    nulls, validity = _validity(values)
    present = [0 if v is None else v for v in values] if nulls else values
    # ``array`` takes exactly what pyarrow takes here, bar bools (pyarrow refuses them as
    # numbers) and, for float64, ints beyond 2**53 (pyarrow refuses what it cannot hold).
    if not set(map(type, present)) <= ({float, int} if code == "d" else {int}):
        raise _Refused
    if code == "d" and any(abs(v) > 1 << 53 for v in present if type(v) is int):
        raise _Refused
    try:
        data = _buffer(code, present)
    except OverflowError:
        raise _Refused from None
    return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(data)], nulls)


def _booleans(values: Sequence) -> pa.Array:
    nulls, validity = _validity(values)
    if not set(map(type, values)) <= {bool, type(None)}:
        raise _Refused
    bits = np.packbits(np.fromiter((v is True for v in values), dtype=bool,
                                   count=len(values)), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [validity, pa.py_buffer(bits)],
                                 nulls)


def _text(values: Sequence, kind: pa.DataType, item: type) -> pa.Array:
    nulls, validity = _validity(values)
    present = list(compress(values, (v is not None for v in values))) if nulls else values
    if not set(map(type, present)) <= {item}:
        raise _Refused
    if item is str:
        joined = "".join(present)
        if joined.isascii():  # a character is a byte: the offsets are the lengths
            data, sizes = joined.encode("ascii"), map(len, values if not nulls else
                                                       (v or "" for v in values))
        else:
            try:
                encoded = [b"" if v is None else v.encode("utf-8") for v in values]
            except UnicodeEncodeError:  # a lone surrogate: pyarrow's error, not this one
                raise _Refused from None
            data, sizes = b"".join(encoded), map(len, encoded)
    else:
        data, sizes = b"".join(present), map(len, (v or b"" for v in values))
    if len(data) > _INT32_MAX:  # pyarrow splits it into chunks: let it
        raise _Refused
    offsets = _buffer("i", accumulate(sizes, initial=0))
    return pa.Array.from_buffers(kind, len(values),
                                 [validity, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)


def _timestamps(values: Sequence) -> pa.Array:
    nulls, validity = _validity(values)
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
                                 [validity, pa.py_buffer(_buffer("q", micros))], nulls)
