"""The numba kernels over the steps arrays behind the run features (definitions in
engine/analytics/_features.py's docstring).

Each kernel takes a slice of runs as flat arrays with run offsets (``run_offsets[r]`` to
``run_offsets[r + 1]`` are run r's ``line`` steps, ordered by frame, then step) and is
one ``prange`` over the runs. Compiled with ``cache=True``: the first call in a fresh
checkout compiles them; later processes load the cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


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
