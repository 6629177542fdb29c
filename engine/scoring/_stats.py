"""Statistics for scores: pass@k, bootstrap intervals, paired comparison, trace distance.

The hot loops are numba kernels over flat numpy arrays: 10,000 bootstrap resamples of
800 samples, or edit distances between millions of predicted and true line sequences,
take milliseconds to seconds. Each kernel has a straightforward pure-Python twin in the
tests, checked on random inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator 1 − C(n−c, k)/C(n, k) (Chen et al. 2021), computed
    as a product so that large n do not overflow. Needs ``n >= k``."""
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n (n={n}, c={c})")
    if k < 1 or n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples per task (n={n})")
    return pass_at_k_product(n, c, k)


def pass_at_k_product(n: int, c: int, k: int) -> float:
    """1 − ∏ (1 − k/i) for i from n−c+1 to n, multiplied in that order (the arithmetic of
    the reference implementations, so results agree to the last bit); 1.0 when n − c < k,
    which also covers n < k, where the estimator is undefined (CRUXEval's harness says
    1.0). No argument checks: ``pass_at_k`` makes them."""
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


@numba.njit(cache=True)
def _pass_at_k_many(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    out = np.empty(n.shape[0])
    for i in range(n.shape[0]):
        if n[i] - c[i] < k:
            out[i] = 1.0
        else:
            product = 1.0
            for j in range(n[i] - c[i] + 1, n[i] + 1):
                product *= 1.0 - k / j
            out[i] = 1.0 - product
    return out


def pass_at_k_many(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """pass@k per task for arrays of sample counts ``n`` and correct counts ``c``."""
    n, c = np.asarray(n, np.int64), np.asarray(c, np.int64)
    if n.shape != c.shape:
        raise ValueError("n and c must have the same shape")
    if np.any(n < k) or np.any(c < 0) or np.any(c > n):
        raise ValueError(f"pass@{k} needs 0 <= c <= n and n >= {k} for every task")
    return _pass_at_k_many(n, c, k)


# ---------------------------------------------------------------- bootstrap
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True)
def _splitmix64(state: np.uint64) -> tuple:
    """One step of splitmix64: (new state, 64 random bits). A generator of our own, so
    that resamples are the same on every platform and the tests can replay them."""
    state = state + _GOLDEN
    z = state
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return state, z ^ (z >> np.uint64(31))


def _bootstrap_means(scores: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of ``resamples`` paired resamples of the rows of ``scores`` (samples ×
    models; ``_resampled_sums``, each sum divided by n once). Scores that are all small
    whole numbers (a 0/1 pass@1 of one sample per task: most of a report) are resampled
    as bytes and summed as integers: a fifth of the memory traffic, and the same means to
    the bit (whole numbers add up exactly either way)."""
    scores = np.ascontiguousarray(scores, dtype=np.float64)
    small = scores.size and np.all(scores == np.rint(scores)) and np.all(np.abs(scores) <= 127)
    if small:
        scores = scores.astype(np.int8)
    sums = np.empty((resamples, scores.shape[1]), np.int64 if small else np.float64)
    _resampled_sums(scores, seed, sums)
    return sums / scores.shape[0]


@numba.njit(cache=True, parallel=True)
def _resampled_sums(scores: np.ndarray, seed: int, sums: np.ndarray) -> None:
    """Fill ``sums`` (resamples × models, its dtype the accumulator's) with the sums of
    resamples (with replacement) of the rows of ``scores`` (samples × models): one
    resample draws the same sample indices for every model, so the models stay paired.
    Row ``i`` of a resample is ``bits % n`` of the next splitmix64 output. splitmix64's
    state is a counter (the k-th output mixes seed + k × the golden constant), so
    resample ``r`` starts at its own state, seed + r·n·golden, and the resamples run in
    parallel with the same draws as one after the other."""
    n, models = scores.shape
    un = np.uint64(n)
    for r in numba.prange(sums.shape[0]):
        state = np.uint64(seed) + np.uint64(r) * un * _GOLDEN
        total = np.zeros_like(sums[r])
        for _ in range(n):
            state, bits = _splitmix64(state)
            row = np.int64(bits % un)
            for m in range(models):
                total[m] += scores[row, m]
        sums[r] = total


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    level: float


def bootstrap_interval(scores: np.ndarray, resamples: int = 10_000, level: float = 0.95,
                       seed: int = 0) -> Interval:
    """Percentile bootstrap interval of the mean of per-sample ``scores`` (e.g. each
    sample's pass@1), resampling samples as CRUXEval §3.3 does."""
    values = np.asarray(scores, np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("bootstrap needs a non-empty 1-d array of per-sample scores")
    means = _bootstrap_means(values.reshape(-1, 1), resamples, seed)[:, 0]
    tail = (1.0 - level) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(float(values.mean()), float(low), float(high), level)


class BootstrapBatch:
    """Many bootstrap intervals at once, each the same as ``bootstrap_interval`` (and
    ``probability_a_beats_b``) of its values gives: the resamples of n values depend only
    on n and the seed, so every set of values of one length is resampled in one pass of
    the generator (``_bootstrap_means`` with a column per set), not one pass per set. A
    report of five experiments over 15,000 tasks asks ~1,000 intervals of a few dozen
    lengths: this is what makes it take seconds, not minutes.

    Use: ``handle = batch.add(values)`` for every set, then ``batch.run()``, then
    ``batch.interval(handle)`` (or ``batch.beats(a, b)`` for two sets added with
    ``keep=True``)."""

    def __init__(self, resamples: int = 10_000, level: float = 0.95, seed: int = 0) -> None:
        self.resamples, self.level, self.seed = resamples, level, seed
        self._values: list[np.ndarray] = []
        self._handles: dict[bytes, int] = {}
        self._differences: dict[int, tuple[int, int]] = {}
        self._keep: set[int] = set()
        self._intervals: dict[int, Interval] = {}
        self._means: dict[int, np.ndarray] = {}

    def add(self, values, keep: bool = False) -> int:
        """Queue one set of per-sample scores; ``keep``: keep its resampled means (for
        ``beats``). Returns its handle."""
        array = np.asarray(values, np.float64)
        if array.ndim != 1 or array.size == 0:
            raise ValueError("bootstrap needs a non-empty 1-d array of per-sample scores")
        # the same values again (one experiment's pass@1 in each of its comparisons):
        # the same handle, resampled once
        key = array.tobytes()
        handle = self._handles.setdefault(key, len(self._values))
        if handle == len(self._values):
            self._values.append(array)
        if keep:
            self._keep.add(handle)
        return handle

    def add_difference(self, a: int, b: int) -> int:
        """Queue the set ``values[a] − values[b]`` (two sets of one length added with
        ``keep=True``). When both are whole numbers (a 0/1 pass@1 of one sample) it is
        not resampled: each resample's sum of the differences is the difference of the
        two sums, exactly (whole numbers below 2^50 add up exactly in any order), so its
        means are derived from theirs to the bit; else it is resampled as any set."""
        va, vb = self._values[a], self._values[b]
        if va.size != vb.size:
            raise ValueError("a difference needs two sets of one length")
        queued = len(self._values)
        handle = self.add(va - vb)
        # derived only when new: the same values queued before (maybe a or b itself) are
        # resampled as they are
        if handle == queued and _whole(va) and _whole(vb):
            self._differences[handle] = (a, b)
            self._keep.update((a, b))
        return handle

    def run(self) -> None:
        """Resample every queued set: one pass of draws per distinct length; then the
        differences derived from their two sets' sums."""
        by_length: dict[int, list[int]] = {}
        for handle, values in enumerate(self._values):
            if handle not in self._intervals and handle not in self._differences:
                by_length.setdefault(values.size, []).append(handle)
        for handles in by_length.values():
            means = _bootstrap_means(np.stack([self._values[h] for h in handles], axis=1),
                                     self.resamples, self.seed)
            for column, handle in enumerate(handles):
                self._resampled(handle, means[:, column])
        for handle, (a, b) in self._differences.items():
            if handle not in self._intervals:
                n = self._values[handle].size
                sums = np.rint(self._means[a] * n) - np.rint(self._means[b] * n)
                self._resampled(handle, sums / n)

    def _resampled(self, handle: int, means: np.ndarray) -> None:
        tail = (1.0 - self.level) / 2
        low, high = np.quantile(means, [tail, 1.0 - tail])
        self._intervals[handle] = Interval(float(self._values[handle].mean()), float(low),
                                           float(high), self.level)
        if handle in self._keep:
            self._means[handle] = means.copy()

    def interval(self, handle: int) -> Interval:
        return self._intervals[handle]

    def beats(self, a: int, b: int) -> float:
        """``probability_a_beats_b`` of the sets ``a`` and ``b`` (of one length, both
        added with ``keep=True``)."""
        ma, mb = self._means[a], self._means[b]
        if ma.shape != mb.shape or self._values[a].size != self._values[b].size:
            raise ValueError("paired comparison needs two per-sample score arrays of one length")
        wins = np.count_nonzero(ma > mb)
        ties = np.count_nonzero(ma == mb)
        return float((wins + 0.5 * ties) / self.resamples)


def _whole(values: np.ndarray) -> bool:
    """Whole numbers whose sums stay exact in a float (below 2^50 in all)."""
    return bool(np.all(values == np.rint(values)) and np.abs(values).sum() < 2.0 ** 50)


def probability_a_beats_b(a: np.ndarray, b: np.ndarray, resamples: int = 10_000,
                          seed: int = 0) -> float:
    """Paired comparison (CRUXEval §4): the share of bootstrap resamples of the samples
    in which model A's mean score is higher than B's (ties count half)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError("paired comparison needs two per-sample score arrays of one length")
    means = _bootstrap_means(np.stack([a, b], axis=1), resamples, seed)
    wins = np.count_nonzero(means[:, 0] > means[:, 1])
    ties = np.count_nonzero(means[:, 0] == means[:, 1])
    return float((wins + 0.5 * ties) / resamples)


# ---------------------------------------------------------------- trace distance
@numba.njit(cache=True)
def _edit_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Levenshtein distance (unit insert, delete, substitute), two rows of DP."""
    if a.shape[0] < b.shape[0]:
        a, b = b, a
    previous = np.arange(b.shape[0] + 1)
    current = np.empty(b.shape[0] + 1, np.int64)
    for i in range(1, a.shape[0] + 1):
        current[0] = i
        for j in range(1, b.shape[0] + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
        previous, current = current, previous
    return previous[b.shape[0]]


@numba.njit(cache=True)
def _normalised_distances(a: np.ndarray, a_offsets: np.ndarray, b: np.ndarray,
                          b_offsets: np.ndarray) -> np.ndarray:
    pairs = a_offsets.shape[0] - 1
    out = np.empty(pairs)
    for p in range(pairs):
        x = a[a_offsets[p]:a_offsets[p + 1]]
        y = b[b_offsets[p]:b_offsets[p + 1]]
        longest = max(x.shape[0], y.shape[0])
        out[p] = 0.0 if longest == 0 else _edit_distance(x, y) / longest
    return out


def normalised_edit_distances(predicted: list[list[int]], actual: list[list[int]]) -> np.ndarray:
    """Per pair, the edit distance between two sequences divided by the longer one's
    length: 0 = identical, 1 = nothing in common (both empty: 0)."""
    if len(predicted) != len(actual):
        raise ValueError("as many predicted as actual sequences are needed")
    flat_a, offsets_a = _flatten(predicted)
    flat_b, offsets_b = _flatten(actual)
    return _normalised_distances(flat_a, offsets_a, flat_b, offsets_b)


def _flatten(sequences: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(sequences) + 1, np.int64)
    offsets[1:] = np.cumsum([len(s) for s in sequences])
    flat = np.fromiter((v for s in sequences for v in s), np.int64, count=int(offsets[-1]))
    return flat, offsets


# ---------------------------------------------------------------- consistency
# REval's weights of a chain (coverage, state, path, output) by how many of its answers
# are right from the first on, when every answer after them is wrong: evaluation.py,
# class Consistency, run() of github.com/r-eval/REval (commit 2f148b9).
def incremental_consistency(correct: list[bool]) -> float:
    """REval's incremental-consistency score of one question chain: its answers in order
    (coverage, state, path, output; steptrace's coverage, state, next_line, output). A
    chain is consistent when every right answer comes before every wrong one (a later,
    harder question is not right while an earlier one is wrong); a consistent chain with
    the first ``k`` of ``n`` right scores 2^-(n−k): for REval's four questions 1, 1/2, 1/4,
    1/8 for 4, 3, 2, 1 right (e.g. right, right, wrong, wrong → 1/4); an inconsistent
    chain, or one with nothing right, scores 0."""
    k = 0
    while k < len(correct) and correct[k]:
        k += 1
    if k == 0 or any(correct[k:]):
        return 0.0
    return 2.0 ** -(len(correct) - k)


# ---------------------------------------------------------------- bootstrap of ratios
def _quantiles(values: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval of ``values``, NaN (an undefined ratio in a resample) left
    out; (nan, nan) when every value is NaN."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return math.nan, math.nan
    tail = (1.0 - level) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1),
                        np.nan)


@dataclass(frozen=True)
class Confusion:
    """Coverage prediction as REval scores it: the positive class is "the line runs";
    ``precision``, ``recall``, ``f1`` with percentile bootstrap intervals over the
    questions (NaN where undefined: no positive prediction, no positive truth)."""

    tp: int
    fp: int
    fn: int
    tn: int
    precision: Interval
    recall: Interval
    f1: Interval

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn


def confusion(predicted: np.ndarray, actual: np.ndarray, resamples: int = 10_000,
              level: float = 0.95, seed: int = 0) -> Confusion:
    """Precision tp/(tp+fp), recall tp/(tp+fn) and F1 2tp/(2tp+fp+fn) of boolean
    predictions against boolean truths (REval's Coverage metrics; its F1 is 0 when
    precision and recall are 0, as 2tp/(2tp+fp+fn) is). The intervals resample the
    questions (paired: one resample draws the same questions for every count)."""
    p, a = np.asarray(predicted, bool), np.asarray(actual, bool)
    if p.shape != a.shape or p.ndim != 1 or p.size == 0:
        raise ValueError("confusion needs two non-empty boolean arrays of one length")
    columns = np.stack([p & a, p & ~a, ~p & a], axis=1).astype(np.float64)
    means = _bootstrap_means(columns, resamples, seed)
    tp, fp, fn = means[:, 0], means[:, 1], means[:, 2]
    counts = [int(c) for c in columns.sum(axis=0)]
    t, f_p, f_n = (float(c) for c in counts)

    def interval(value: float, draws: np.ndarray) -> Interval:
        return Interval(value, *_quantiles(draws, level), level)

    precision = t / (t + f_p) if t + f_p else math.nan
    recall = t / (t + f_n) if t + f_n else math.nan
    f1 = 2 * t / (2 * t + f_p + f_n) if t + f_p + f_n else math.nan
    return Confusion(counts[0], counts[1], counts[2], int(p.size - sum(counts)),
                     interval(precision, _ratio(tp, tp + fp)),
                     interval(recall, _ratio(tp, tp + fn)),
                     interval(f1, _ratio(2 * tp, 2 * tp + fp + fn)))


def pearson(x: np.ndarray, y: np.ndarray, resamples: int = 10_000, level: float = 0.95,
            seed: int = 0) -> Interval:
    """Pearson's correlation of paired per-sample values (e.g. a sample's pass@1 in input
    and in output mode: CRUXEval's input-output difficulty correlation) with a percentile
    bootstrap interval over the samples; NaN where a resample has no variance."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError("a correlation needs two 1-d arrays of one length, at least 2 values")
    moments = np.stack([x, y, x * x, y * y, x * y], axis=1)
    means = _bootstrap_means(moments, resamples, seed)

    def correlation(m: np.ndarray) -> np.ndarray:
        m = np.atleast_2d(m)
        cov = m[:, 4] - m[:, 0] * m[:, 1]
        var_x, var_y = m[:, 2] - m[:, 0] ** 2, m[:, 3] - m[:, 1] ** 2
        # a resample of one repeated value leaves a variance of rounding noise (about
        # 1e-16, maybe negative): no variance, no correlation
        varies = (var_x > 1e-12) & (var_y > 1e-12)
        r = _ratio(cov, np.sqrt(np.where(varies, var_x * var_y, 0.0)))
        return np.clip(r, -1.0, 1.0)

    value = (float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else math.nan)
    return Interval(value, *_quantiles(correlation(means), level), level)
