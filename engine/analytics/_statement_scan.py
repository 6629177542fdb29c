"""Statement lines of many programs at once: a numba scanner over the programs' UTF-8
bytes for the plain ones, ``ast`` for the rest.

The definition of a program's statement lines is engine/corpus/_statements.py's
``statement_lines`` (from ``ast``); ``ast.parse`` takes about a millisecond a program,
too slow for a million programs, so :func:`statement_lines` scans every program's text
with a numba kernel that gives the same lines for plain programs, and sends to ``ast``
anything unusual (classes, decorators, f-strings, semicolons, string statements,
module-level blocks, programs whose run was ``invalid``). The tests check the two
against each other on CRUXEval, synthetic programs and hand-made tricky ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numba import njit, prange

from steptrace.corpus._statements import statement_lines as statement_lines_ast


# Byte codes the scanner needs (numba freezes module-level arrays as constants).
_NL, _CR, _SP, _TAB, _FF, _HASH, _BSL = 10, 13, 32, 9, 12, 35, 92
_SQ, _DQ, _COLON, _SEMI, _AT = 39, 34, 58, 59, 64
_KW_DEF = np.frombuffer(b"def", np.uint8)
_KW_ASYNC = np.frombuffer(b"async", np.uint8)
_KW_CLASS = np.frombuffer(b"class", np.uint8)
_KW_ELSE = np.frombuffer(b"else", np.uint8)
_KW_FINALLY = np.frombuffer(b"finally", np.uint8)
_KW_GLOBAL = np.frombuffer(b"global", np.uint8)
_KW_NONLOCAL = np.frombuffer(b"nonlocal", np.uint8)
_OTHER, _DEF, _CLASS, _ELSE, _GLOBAL, _STRING, _DECORATOR = range(7)


@njit(cache=True)
def _is_word_byte(c):
    return (c >= 97 and c <= 122) or (c >= 65 and c <= 90) or (c >= 48 and c <= 57) \
        or c == 95 or c >= 128


@njit(cache=True)
def _word_end(data, i, end):
    while i < end and _is_word_byte(data[i]):
        i += 1
    return i


@njit(cache=True)
def _equals(data, a, b, word):
    if b - a != word.shape[0]:
        return False
    for k in range(b - a):
        if data[a + k] != word[k]:
            return False
    return True


@njit(cache=True)
def _is_prefix(data, a, b):
    """A string prefix (r, b, u, f, t and their pairs); -1 not one, 1 f/t (unsupported)."""
    if b - a > 2:
        return -1
    special = 0
    for k in range(a, b):
        c = data[k] | 32  # lower case
        if c == 102 or c == 116:  # f, t
            special = 1
        elif c != 114 and c != 98 and c != 117:  # r, b, u
            return -1
    return special


@njit(cache=True)
def _head(data, j, end):
    """What kind of statement starts at data[j]."""
    c = data[j]
    if c == _AT:
        return _DECORATOR
    if c == _SQ or c == _DQ:
        return _STRING
    w = _word_end(data, j, end)
    if w < end and (data[w] == _SQ or data[w] == _DQ) and _is_prefix(data, j, w) >= 0:
        return _STRING
    if _equals(data, j, w, _KW_DEF):
        return _DEF
    if _equals(data, j, w, _KW_ASYNC):
        k = w
        while k < end and (data[k] == _SP or data[k] == _TAB):
            k += 1
        if _equals(data, k, _word_end(data, k, end), _KW_DEF):
            return _DEF
    if _equals(data, j, w, _KW_CLASS):
        return _CLASS
    if _equals(data, j, w, _KW_ELSE) or _equals(data, j, w, _KW_FINALLY):
        return _ELSE
    if _equals(data, j, w, _KW_GLOBAL) or _equals(data, j, w, _KW_NONLOCAL):
        return _GLOBAL
    return _OTHER


@njit(cache=True)
def _skip_string(data, k, end, line):
    """From the opening quote at data[k]: (index after the string, line), or (-1, line)
    for an unterminated string."""
    quote = data[k]
    triple = k + 2 < end and data[k + 1] == quote and data[k + 2] == quote
    k += 3 if triple else 1
    while k < end:
        c = data[k]
        if c == _BSL:
            if k + 1 < end and data[k + 1] == _NL:
                line += 1
            k += 2
            continue
        if c == _NL:
            if not triple:
                return -1, line
            line += 1
        elif c == quote:
            if not triple:
                return k + 1, line
            if k + 2 < end and data[k + 1] == quote and data[k + 2] == quote:
                return k + 3, line
        k += 1
    return -1, line


@njit(cache=True)
def _scan_program(data, start, end, out, at):
    """Statement lines of one program (written to out[at:]) by a small lexer; their
    count, or -1 when the program uses something the scanner leaves to ``ast``."""
    i = start
    line = 1
    count = 0
    top_is_def = False
    while i < end:
        j = i
        while j < end and (data[j] == _SP or data[j] == _TAB or data[j] == _FF):
            j += 1
        if j >= end:
            break
        c = data[j]
        if c == _CR:
            return -1
        if c == _NL or c == _HASH:
            while j < end and data[j] != _NL:
                j += 1
            line += 1
            i = j + 1
            continue
        indent = j > i
        head = _head(data, j, end)
        if head == _DECORATOR or head == _CLASS or head == _STRING:
            return -1
        if not indent:
            top_is_def = head == _DEF
            counted = False
        elif not top_is_def:
            return -1  # a module-level block
        else:
            counted = head != _ELSE and head != _GLOBAL
        # an inline body after a top-level def or an else/finally would be missed
        watch_colon = (head == _DEF and not indent) or head == _ELSE
        first = line
        depth = 0
        k = j
        ended = False
        while k < end and not ended:
            c = data[k]
            if c == _HASH:
                while k < end and data[k] != _NL:
                    k += 1
                continue
            if c == _SQ or c == _DQ:
                k, line = _skip_string(data, k, end, line)
                if k < 0:
                    return -1
                continue
            if _is_word_byte(c):
                w = _word_end(data, k, end)
                if w < end and (data[w] == _SQ or data[w] == _DQ):
                    kind = _is_prefix(data, k, w)
                    if kind == 1:
                        return -1  # f-strings (nested quotes since 3.12) go to ast
                k = w
                continue
            if c == 40 or c == 91 or c == 123:  # ( [ {
                depth += 1
            elif c == 41 or c == 93 or c == 125:
                depth -= 1
                if depth < 0:
                    return -1
            elif c == _SEMI and depth == 0:
                return -1
            elif c == _CR:
                return -1
            elif c == _BSL:
                if k + 1 < end and data[k + 1] == _NL:
                    line += 1
                    k += 2
                    continue
                return -1
            elif c == _COLON and depth == 0 and watch_colon:
                watch_colon = False
                r = k + 1
                while r < end and (data[r] == _SP or data[r] == _TAB):
                    r += 1
                if r < end and data[r] != _NL and data[r] != _HASH:
                    return -1
            elif c == _NL:
                line += 1
                if depth == 0:
                    ended = True
            k += 1
        if depth != 0:
            return -1
        if counted:
            out[at + count] = first
            count += 1
        i = k
    return count


@njit(cache=True, parallel=True)
def scan_statement_lines(data, offsets, capacity_offsets, out):
    """``_scan_program`` over every program (program p writes at capacity_offsets[p])."""
    n = offsets.shape[0] - 1
    counts = np.empty(n, np.int64)
    for p in prange(n):
        counts[p] = _scan_program(data, offsets[p], offsets[p + 1], out, capacity_offsets[p])
    return counts


@njit(cache=True, parallel=True)
def _line_capacity(data, offsets):
    n = offsets.shape[0] - 1
    capacity = np.empty(n, np.int64)
    for p in prange(n):
        count = 1
        for k in range(offsets[p], offsets[p + 1]):
            if data[k] == _NL:
                count += 1
        capacity[p] = count
    return capacity


@njit(cache=True)
def _compact(counts, capacity_offsets, buffer, offsets):
    out = np.empty(offsets[-1], np.int32)
    for p in range(counts.shape[0]):
        for k in range(counts[p]):
            out[offsets[p] + k] = buffer[capacity_offsets[p] + k]
    return out


@dataclass
class StatementLines:
    """Statement lines of every program as CSR arrays, and how they were obtained."""

    offsets: np.ndarray  # int64, programs + 1
    lines: np.ndarray  # int32, sorted within each program
    known: np.ndarray  # bool: False where the host could not parse the program
    scanned: int = 0
    parsed: int = 0


def _string_buffers(codes: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes and int64 offsets of an Arrow string array (zero copy)."""
    codes = codes.cast(pa.large_string()) if codes.type != pa.large_string() else codes
    validity, offsets, data = codes.buffers()
    offsets = np.frombuffer(offsets, np.int64)[codes.offset: codes.offset + len(codes) + 1]
    values = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return values, offsets


def statement_lines(codes: pa.Array, use_ast: np.ndarray | None = None) -> StatementLines:
    """Statement lines of every program in ``codes``: the scanner where it is sure (and
    ``use_ast`` is not set), ``ast`` otherwise."""
    data, offsets = _string_buffers(codes)
    capacity = _line_capacity(data, offsets)
    capacity_offsets = np.zeros(len(capacity) + 1, np.int64)
    np.cumsum(capacity, out=capacity_offsets[1:])
    buffer = np.empty(capacity_offsets[-1], np.int32)
    counts = scan_statement_lines(data, offsets, capacity_offsets, buffer)
    if use_ast is not None:
        counts[use_ast] = -1
    known = np.ones(len(counts), np.bool_)
    fallback = np.flatnonzero(counts < 0)
    parsed: dict[int, list[int]] = {}
    for p in fallback.tolist():
        found = statement_lines_ast(codes[p].as_py())
        if found is None:
            known[p] = False
        parsed[p] = found or []
        counts[p] = 0
    final_offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=final_offsets[1:])
    lines = _compact(counts, capacity_offsets, buffer, final_offsets)
    if parsed:
        lines = _splice(lines, final_offsets, parsed)
        sizes = np.diff(final_offsets)
        for p, found in parsed.items():
            sizes[p] = len(found)
        final_offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(sizes, out=final_offsets[1:])
    return StatementLines(final_offsets, lines, known, len(counts) - len(fallback), len(fallback))


def _splice(lines: np.ndarray, offsets: np.ndarray, parsed: dict[int, list[int]]) -> np.ndarray:
    """Insert the ast results of the (few) fallback programs, which have 0 lines so far."""
    pieces, cursor = [], 0
    for p in sorted(parsed):
        at = int(offsets[p])
        pieces += [lines[cursor:at], np.asarray(parsed[p], np.int32)]
        cursor = at
    pieces.append(lines[cursor:])
    return np.concatenate(pieces).astype(np.int32, copy=False)
