"""Per-run trace features (``steptrace features``): numba kernels over the steps arrays,
assembled with polars into a ``run_features`` table.

A run's **line sequence of a frame** is the ``line`` column of that frame's ``line``
steps (``event = 'line'``), in step order; ``call``/``return``/... steps are left out
because they repeat a line without a new line of code running. Frames are taken apart
(a callee's lines never join the caller's sequence), so recursion is not a loop and a
call is not a transition. Features, one row per run (every run of the store):

``transitions``
    line → next-line transitions within frames: Σ over frames of (line steps − 1).
``distinct_transitions``
    distinct ``(line, next line)`` pairs among them, over the whole run.
``loop_depth``
    the deepest loop nesting observed. A *backward jump* is a transition to a smaller
    line number; its target ``h`` is a loop header and the loop's range is ``[h, e]``
    with ``e`` the largest line that jumped back to ``h`` in that frame. ``loop_depth``
    is the largest number of a frame's loop ranges sharing one line (closed ranges;
    the maximum over frames), 0 without backward jumps. Nested ``for`` loops give 2 (the
    inner header jumps back to the outer one when it is exhausted: ranges [2, 3] and
    [3, 4] share line 3). A ``for`` loop over one item is observed (the header is
    revisited when the iterator is exhausted); a loop on one line is not (it has one
    line step); a multi-line expression evaluated out of line order (a ``return`` of
    a tuple spread over two lines steps its lines 1, 2, 1) also counts as one.
``longest_cycle``
    the longest period ``p`` of a line cycle repeated immediately: the largest ``p``
    such that some frame's line sequence has ``L[i:i+p] == L[i+p:i+2p]``; 0 if none.
    ``k`` identical consecutive iterations of an ``m``-line loop body give at least
    ``m * (k // 2)`` (a cycle may span several iterations).
``distinct_lines``
    distinct lines with a ``line`` step in the run.
``statement_lines``
    the program's statement lines (engine/corpus/_statements.py, the definition the
    tasks' question lines use too): lines on which a statement inside a function body
    starts (at any depth, nested functions and classes included; docstrings, ``global``
    and ``nonlocal`` left out: they never get a line step), plus ``except`` and ``case``
    lines. Defined by ``ast`` on the host; NULL if the host's Python cannot parse the
    program. A fast scanner (``scan_statement_lines``, checked against ``ast`` by the
    tests) computes it for plain programs and leaves anything unusual (classes,
    decorators, f-strings, semicolons, string statements, module-level blocks,
    programs whose run was ``invalid``) to ``ast``.
``coverage``
    (distinct lines executed ∩ statement lines) / statement_lines; NULL when
    ``statement_lines`` is NULL or 0.
``conditions``, ``branch_entropy``
    from ``branches`` (see ``steptrace analyse``): the number of distinct conditions
    ``(line, col)`` evaluated, and the mean over them of the Shannon entropy (bits) of
    their outcomes, ``-p log2 p - (1-p) log2 (1-p)`` with ``p`` the fraction of its
    evaluations that were true. 0 for an analysed run without conditions; NULL for a
    run without an ``analyses`` row.

Steps are read set-wise, ``ORDER BY run_id, frame, step``, in slices of whole runs
(bounded memory), as numpy arrays with run offsets; each kernel is one
``prange`` over runs (no Python loop per run). Kernels are compiled with
``cache=True``: the first call in a fresh checkout compiles them (seconds, see
bench/README.md); later processes load the cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
from numba import njit, prange

from steptrace.store._store import StoreError, connect, first_line
from steptrace.corpus._statements import statement_lines as statement_lines_ast
from steptrace.store._tables import RUN_FEATURES

FEATURES_TABLE = RUN_FEATURES.name  # declared, with its columns, in engine/store/_tables.py
FEATURE_TYPES = {column.name: column.type for column in RUN_FEATURES.columns}
POLARS_TYPES = {"BIGINT": pl.Int64, "INTEGER": pl.Int32, "DOUBLE": pl.Float64}
DEFAULT_CHUNK_RUNS = 250_000


# ====================================================================== step kernels
@njit(cache=True, parallel=True)
def transition_counts(run_offsets, frames, lines):
    """Per run: (transitions within frames, distinct (line, next line) pairs)."""
    runs = run_offsets.shape[0] - 1
    total = np.zeros(runs, np.int64)
    distinct = np.zeros(runs, np.int32)
    for r in prange(runs):
        a, b = run_offsets[r], run_offsets[r + 1]
        if b - a < 2:
            continue
        codes = np.empty(b - a - 1, np.int64)
        m = 0
        for i in range(a, b - 1):
            if frames[i] == frames[i + 1]:
                codes[m] = (np.int64(lines[i]) << 32) | np.int64(lines[i + 1])
                m += 1
        total[r] = m
        if m:
            ordered = np.sort(codes[:m])
            count = 1
            for k in range(1, m):
                if ordered[k] != ordered[k - 1]:
                    count += 1
            distinct[r] = count
    return total, distinct


@njit(cache=True)
def _frame_loop_depth(lines, a, b):
    """Largest number of loop ranges [header, furthest back-jump source] of the frame
    lines[a:b] sharing a line (see the module docstring)."""
    heads = np.empty(max(b - a - 1, 0), np.int64)
    m = 0
    for i in range(a, b - 1):
        if lines[i + 1] < lines[i]:
            heads[m] = (np.int64(lines[i + 1]) << 32) | np.int64(lines[i])
            m += 1
    if m == 0:
        return 0
    ordered = np.sort(heads[:m])  # by header, then source: the last of a header is its end
    starts = np.empty(m, np.int64)
    ends = np.empty(m, np.int64)
    k = 0
    for j in range(m):
        if j + 1 == m or (ordered[j + 1] >> 32) != (ordered[j] >> 32):
            starts[k] = ordered[j] >> 32
            ends[k] = ordered[j] & 0xFFFFFFFF
            k += 1
    starts = starts[:k]  # already sorted
    ends = np.sort(ends[:k])
    best = 0
    active = 0
    i = 0
    j = 0
    while i < k:
        if starts[i] <= ends[j]:  # closed ranges: touching counts as sharing a line
            active += 1
            i += 1
            if active > best:
                best = active
        else:
            active -= 1
            j += 1
    return best


@njit(cache=True)
def _frame_longest_square(lines, a, b):
    """Largest p with lines[i:i+p] == lines[i+p:i+2p] for some i in the frame lines[a:b].

    For each p (largest first) only the positions q = 0, p, 2p, ... are tried: every
    square of period p contains exactly one of them in its first half, and it exists
    around q iff the run of positions j with L[j] == L[j+p] through q is p long."""
    n = b - a
    for p in range(n // 2, 0, -1):
        q = 0
        while q + p < n:
            forward = 0
            while forward < p and q + forward + p < n and \
                    lines[a + q + forward] == lines[a + q + forward + p]:
                forward += 1
            if forward:
                back = 0
                while forward + back < p and q - back - 1 >= 0 and \
                        lines[a + q - back - 1] == lines[a + q - back - 1 + p]:
                    back += 1
                if forward + back >= p:
                    return p
            q += p
    return 0


@njit(cache=True, parallel=True)
def loop_depths(run_offsets, frames, lines):
    """Per run: the deepest observed loop nesting over its frames."""
    runs = run_offsets.shape[0] - 1
    out = np.zeros(runs, np.int32)
    for r in prange(runs):
        a, b = run_offsets[r], run_offsets[r + 1]
        start = a
        for i in range(a + 1, b + 1):
            if i == b or frames[i] != frames[start]:
                depth = _frame_loop_depth(lines, start, i)
                if depth > out[r]:
                    out[r] = depth
                start = i
    return out


@njit(cache=True, parallel=True)
def longest_cycles(run_offsets, frames, lines):
    """Per run: the longest immediately repeated line cycle over its frames."""
    runs = run_offsets.shape[0] - 1
    out = np.zeros(runs, np.int32)
    for r in prange(runs):
        a, b = run_offsets[r], run_offsets[r + 1]
        start = a
        for i in range(a + 1, b + 1):
            if i == b or frames[i] != frames[start]:
                if (i - start) // 2 > out[r]:
                    cycle = _frame_longest_square(lines, start, i)
                    if cycle > out[r]:
                        out[r] = cycle
                start = i
    return out


@njit(cache=True, parallel=True)
def line_coverage(run_offsets, lines, run_program, stmt_offsets, stmt_lines):
    """Per run: (distinct lines stepped, of them statement lines of its program).
    ``stmt_lines[stmt_offsets[p]:stmt_offsets[p + 1]]`` is program p's, sorted."""
    runs = run_offsets.shape[0] - 1
    distinct = np.zeros(runs, np.int32)
    covered = np.zeros(runs, np.int32)
    for r in prange(runs):
        a, b = run_offsets[r], run_offsets[r + 1]
        if b == a:
            continue
        ordered = np.sort(lines[a:b])
        p = run_program[r]
        lo, hi = stmt_offsets[p], stmt_offsets[p + 1]
        count = 0
        hits = 0
        for k in range(b - a):
            if k == 0 or ordered[k] != ordered[k - 1]:
                count += 1
                at = lo + np.searchsorted(stmt_lines[lo:hi], ordered[k])
                if at < hi and stmt_lines[at] == ordered[k]:
                    hits += 1
        distinct[r] = count
        covered[r] = hits
    return distinct, covered


# ====================================================================== statement lines
# The definition is engine/corpus/_statements.py's statement_lines, from ast (imported here
# as statement_lines_ast); the scanner below computes the same for plain programs.


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


# ====================================================================== assembly
@dataclass
class FeatureSummary:
    db: str
    runs: int = 0
    line_steps: int = 0
    programs: int = 0
    programs_scanned: int = 0
    programs_parsed: int = 0
    runs_with_branches: int = 0
    means: dict[str, float | None] = field(default_factory=dict)
    maxima: dict[str, float | None] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            ("db", self.db), ("table", FEATURES_TABLE), ("runs", self.runs),
            ("line steps read", self.line_steps), ("programs", self.programs),
            ("  statement lines by scanner", self.programs_scanned),
            ("  statement lines by ast", self.programs_parsed),
            ("runs with branch data", self.runs_with_branches)]
        for name in FEATURE_TYPES:
            if name != "run_id":
                rows.append((f"{name} mean / max",
                             f"{_fmt(self.means.get(name))} / {_fmt(self.maxima.get(name))}"))
        rows += [(f"seconds {stage}", f"{value:.2f}") for stage, value in self.seconds.items()]
        return rows


def _fmt(value: float | None) -> str:
    return "NULL" if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


def _arrow(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pa.Table:
    """A query's result as an Arrow table (``to_arrow_table`` since DuckDB 1.4, before
    that ``fetch_arrow_table``)."""
    relation = con.sql(sql, params=params) if params else con.sql(sql)
    fetch = getattr(relation, "to_arrow_table", None) or relation.arrow
    return fetch()


def _numpy(table: pa.Table, column: str, dtype) -> np.ndarray:
    return table.column(column).to_numpy().astype(dtype, copy=False)


def _chunk_features(con: duckdb.DuckDBPyConnection, run_ids: np.ndarray, run_program: np.ndarray,
                    stmts: StatementLines) -> dict[str, np.ndarray]:
    """Step features of the runs ``run_ids`` (sorted, consecutive in the store's order)."""
    steps = _arrow(con, "SELECT run_id, frame, line FROM steps WHERE event = 'line' "
                        "AND run_id BETWEEN ? AND ? ORDER BY run_id, frame, step",
                   [int(run_ids[0]), int(run_ids[-1])])
    step_runs = _numpy(steps, "run_id", np.int64)
    frames = _numpy(steps, "frame", np.int32)
    lines = _numpy(steps, "line", np.int32)
    run_offsets = np.empty(len(run_ids) + 1, np.int64)
    run_offsets[:-1] = np.searchsorted(step_runs, run_ids, "left")
    run_offsets[-1] = len(step_runs)
    transitions, distinct_transitions = transition_counts(run_offsets, frames, lines)
    distinct, covered = line_coverage(run_offsets, lines, run_program, stmts.offsets, stmts.lines)
    return {"transitions": transitions, "distinct_transitions": distinct_transitions,
            "loop_depth": loop_depths(run_offsets, frames, lines),
            "longest_cycle": longest_cycles(run_offsets, frames, lines),
            "distinct_lines": distinct, "covered": covered, "line_steps": len(lines)}


def branch_entropy(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """``run_id, conditions, branch_entropy`` for every analysed run (0/0.0 without
    conditions). DuckDB reduces evaluations to one row per condition; polars does the
    rest."""
    per_condition = pl.from_arrow(_arrow(
        con, "SELECT run_id, avg(CASE WHEN taken THEN 1.0 ELSE 0.0 END) AS p "
             "FROM branches GROUP BY run_id, line, col"))
    p = pl.col("p")
    entropy = (pl.when((p > 0) & (p < 1))
               .then(-(p * p.log(2) + (1 - p) * (1 - p).log(2)))
               .otherwise(0.0))
    per_run = (per_condition.with_columns(h=entropy)
               .group_by("run_id")
               .agg(conditions=pl.len().cast(pl.Int32), branch_entropy=pl.col("h").mean()))
    analysed = pl.from_arrow(_arrow(con, "SELECT run_id FROM analyses"))
    return (analysed.join(per_run, on="run_id", how="left")
            .with_columns(pl.col("conditions").fill_null(0),
                          pl.col("branch_entropy").fill_null(0.0)))


def compute_features(con: duckdb.DuckDBPyConnection, summary: FeatureSummary,
                     chunk_runs: int = DEFAULT_CHUNK_RUNS) -> pl.DataFrame:
    """The ``run_features`` rows of every run in the store, as a polars frame."""
    clock = time.perf_counter()
    runs = _arrow(con, "SELECT run_id, program_id FROM runs ORDER BY run_id")
    programs = _arrow(con, "SELECT p.program_id, p.code, p.program_id IN (SELECT program_id "
                           "FROM runs WHERE status = 'invalid') AS invalid "
                           "FROM programs p ORDER BY p.program_id")
    program_ids = _numpy(programs, "program_id", np.int64)
    # a program that did not compile in the guest gets ast's verdict, not the scanner's
    stmts = statement_lines(programs.column("code").combine_chunks(),
                            _numpy(programs, "invalid", np.bool_))
    summary.programs, summary.programs_scanned, summary.programs_parsed = (
        len(program_ids), stmts.scanned, stmts.parsed)
    run_ids = _numpy(runs, "run_id", np.int64)
    run_program = np.searchsorted(program_ids, _numpy(runs, "program_id", np.int64))
    summary.seconds["statement lines"] = time.perf_counter() - clock
    clock = time.perf_counter()
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, len(run_ids), chunk_runs):
        window = slice(start, start + chunk_runs)
        part = _chunk_features(con, run_ids[window], run_program[window], stmts)
        summary.line_steps += part.pop("line_steps")
        parts.append(part)
    frame = _assemble(run_ids, run_program, stmts, parts)
    summary.seconds["steps and kernels"] = time.perf_counter() - clock
    clock = time.perf_counter()
    branches = branch_entropy(con)
    summary.runs_with_branches = branches.height
    frame = (frame.join(branches, on="run_id", how="left")
             .select([pl.col(name).cast(POLARS_TYPES[kind]) for name, kind in FEATURE_TYPES.items()]))
    summary.seconds["branch entropy"] = time.perf_counter() - clock
    return frame


def _assemble(run_ids: np.ndarray, run_program: np.ndarray, stmts: StatementLines,
              parts: list[dict[str, np.ndarray]]) -> pl.DataFrame:
    def column(name: str) -> np.ndarray:
        return (np.concatenate([part[name] for part in parts]) if parts
                else np.zeros(0, np.int64))
    sizes = np.diff(stmts.offsets)[run_program].astype(np.int32)
    known = stmts.known[run_program]
    frame = pl.DataFrame({
        "run_id": run_ids, "transitions": column("transitions"),
        "distinct_transitions": column("distinct_transitions"),
        "loop_depth": column("loop_depth"), "longest_cycle": column("longest_cycle"),
        "distinct_lines": column("distinct_lines"), "covered": column("covered"),
        "statement_lines": sizes, "known": known})
    return frame.with_columns(
        statement_lines=pl.when(pl.col("known")).then(pl.col("statement_lines")),
        coverage=pl.when(pl.col("known") & (pl.col("statement_lines") > 0))
        .then(pl.col("covered") / pl.col("statement_lines"))).drop("covered", "known")


def write_features(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame) -> None:
    """Replace ``run_features`` with ``frame`` in one transaction."""
    table = frame.to_arrow()
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(RUN_FEATURES.ddl(replace=True))
        con.register("incoming_features", table)
        con.execute(f"INSERT INTO {FEATURES_TABLE} SELECT * FROM incoming_features")
        con.unregister("incoming_features")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def warm_up() -> float:
    """Compile (first use in a checkout) or load from numba's cache every kernel; the
    seconds it took."""
    started = time.perf_counter()
    offsets = np.array([0, 3], np.int64)
    frames = np.zeros(3, np.int32)
    lines = np.array([2, 3, 2], np.int32)
    transition_counts(offsets, frames, lines)
    loop_depths(offsets, frames, lines)
    longest_cycles(offsets, frames, lines)
    statement_lines(pa.array(["def f(x):\n    return x\n"]))
    line_coverage(offsets, lines, np.zeros(1, np.int64), np.array([0, 1], np.int64),
                  np.array([2], np.int32))
    return time.perf_counter() - started


def run_features(db: str | Path, chunk_runs: int = DEFAULT_CHUNK_RUNS) -> FeatureSummary:
    """Compute the features of every run in ``db`` and replace its ``run_features``."""
    if not Path(db).exists():
        raise StoreError(f"database not found: {db}")
    connect(db, read_only=True).close()  # refuses a DuckDB file that is not a store
    summary = FeatureSummary(db=str(db))
    summary.seconds["jit or cache load"] = warm_up()
    con = connect(db)
    try:
        frame = compute_features(con, summary, chunk_runs)
        clock = time.perf_counter()
        write_features(con, frame)
        summary.seconds["write"] = time.perf_counter() - clock
    except duckdb.Error as exc:
        raise StoreError(f"cannot compute features in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    summary.runs = frame.height
    for name in FEATURE_TYPES:
        if name != "run_id" and frame.height:
            summary.means[name] = frame[name].mean()
            summary.maxima[name] = frame[name].max()
    summary.seconds["total"] = sum(summary.seconds.values())
    return summary
