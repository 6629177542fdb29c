"""engine/scoring/_stats.py: exact pass@k values, and every numba kernel against a plain-Python
twin on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steptrace.scoring._stats import (_bootstrap_means, _resampled_sums, bootstrap_interval,
                                      incremental_consistency, normalised_edit_distances,
                                      pass_at_k, pass_at_k_many, probability_a_beats_b)
from helpers.splitmix import python_splitmix64  # noqa: F401

MASK = (1 << 64) - 1


def comb_pass_at_k(n: int, c: int, k: int) -> float:
    """The estimator as written: 1 − C(n−c, k) / C(n, k)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_pass_at_k_exact_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 5) == 1.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(1, 1, 1) == 1.0
    with pytest.raises(ValueError, match="at least 5 samples"):
        pass_at_k(3, 1, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 60)), min_size=1, max_size=30),
       st.integers(1, 10))
def test_pass_at_k_kernel_matches_the_combinatorial_formula(pairs, k):
    n = np.array([max(a, k) for a, _ in pairs])
    c = np.array([min(b, m) for (_, b), m in zip(pairs, n)])
    expected = [comb_pass_at_k(int(a), int(b), k) for a, b in zip(n, c)]
    assert pass_at_k_many(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert [pass_at_k(int(a), int(b), k) for a, b in zip(n, c)] == pytest.approx(expected, abs=1e-12)


def levenshtein(a: list[int], b: list[int]) -> int:
    """Textbook full-table dynamic programming."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        table[i][0] = i
    for j in range(len(b) + 1):
        table[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1,
                              table[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return table[len(a)][len(b)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(1, 6), max_size=25),
                          st.lists(st.integers(1, 6), max_size=25)), min_size=1, max_size=20))
def test_edit_distance_kernel_matches_textbook_dp(pairs):
    predicted, actual = [p for p, _ in pairs], [a for _, a in pairs]
    expected = [levenshtein(p, a) / max(len(p), len(a)) if (p or a) else 0.0
                for p, a in pairs]
    assert normalised_edit_distances(predicted, actual).tolist() == pytest.approx(expected)


def test_edit_distance_exact_values():
    assert normalised_edit_distances([[1, 2, 3], [], [4, 4], [1, 2]],
                                     [[1, 2, 3], [], [5, 5], [2, 1, 2]]).tolist() == [
        0.0, 0.0, 1.0, pytest.approx(1 / 3)]


def python_bootstrap_means(scores: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """The same resampling with splitmix64 in plain Python integers."""
    state = seed
    n, models = scores.shape
    out = np.empty((resamples, models))
    for r in range(resamples):
        total = [0.0] * models
        for _ in range(n):
            state, bits = python_splitmix64(state)
            row = bits % n
            for m in range(models):
                total[m] += scores[row, m]
        out[r] = [t / n for t in total]
    return out


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=40),
       st.integers(0, 2**32), st.integers(1, 50))
def test_bootstrap_kernel_matches_python_twin(rows, seed, resamples):
    scores = np.array(rows, np.float64)
    assert _bootstrap_means(scores, resamples, seed) == pytest.approx(
        python_bootstrap_means(scores, resamples, seed))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-127, 127), st.sampled_from([0, 1]), st.integers(-1, 1)),
                min_size=1, max_size=60),
       st.integers(0, 2**32), st.integers(1, 50))
def test_whole_scores_summed_as_integers_give_the_same_means_to_the_bit(rows, seed,
                                                                       resamples):
    """Small whole scores (0/1 pass@1, a difference of two) are summed as integers: the
    means are those of the float kernel and of the Python twin, exactly."""
    scores = np.array(rows, np.float64)
    means = _bootstrap_means(scores, resamples, seed)
    as_floats = np.empty((resamples, scores.shape[1]))
    _resampled_sums(scores, seed, as_floats)
    as_integers = np.empty((resamples, scores.shape[1]), np.int64)
    _resampled_sums(scores.astype(np.int8), seed, as_integers)
    assert np.array_equal(means, as_floats / len(rows))
    assert np.array_equal(means, as_integers / len(rows))
    assert np.array_equal(means, python_bootstrap_means(scores, resamples, seed))


def test_scores_past_a_byte_or_not_whole_are_summed_as_floats():
    for scores in (np.array([[128.0], [0.0], [1.0]]), np.array([[0.5], [1.0], [0.0]])):
        assert np.array_equal(_bootstrap_means(scores, 40, 3),
                              python_bootstrap_means(scores, 40, 3))


def test_bootstrap_interval_and_paired_comparison():
    constant = bootstrap_interval(np.full(50, 0.5))
    assert (constant.mean, constant.low, constant.high) == (0.5, 0.5, 0.5)
    scores = np.array([1.0] * 30 + [0.0] * 70)
    interval = bootstrap_interval(scores, resamples=2000, seed=7)
    assert interval.mean == 0.3 and interval.low < 0.3 < interval.high
    assert bootstrap_interval(scores, resamples=2000, seed=7) == interval  # seeded
    better = scores.copy()
    better[50] = 1.0  # A is never worse than B on any sample, better on one
    twin = python_bootstrap_means(np.stack([better, scores], axis=1), 2000, 0)
    wins, ties = (twin[:, 0] > twin[:, 1]).sum(), (twin[:, 0] == twin[:, 1]).sum()
    assert ties > 0 and wins > 0  # tied exactly when sample 50 is not drawn
    assert probability_a_beats_b(better, scores, resamples=2000) == (wins + ties / 2) / 2000
    assert probability_a_beats_b(scores, scores, resamples=500) == 0.5  # always tied
    with pytest.raises(ValueError, match="one length"):
        probability_a_beats_b(scores, scores[:-1])


@pytest.mark.parametrize("correct, score", [
    ([True, True, True, True], 1.0),
    ([True, True, True, False], 0.5),
    ([True, True, False, False], 0.25),
    ([True, False, False, False], 0.125),
    ([False, False, False, False], 0.0),
    ([True, False, True, False], 0.0),
    ([False, True, True, True], 0.0),
])
def test_incremental_consistency(correct, score):
    assert incremental_consistency(correct) == score


def test_a_batch_gives_each_interval_as_alone():
    """BootstrapBatch resamples every set of one length in one pass (and the same values
    once): each interval, and P(A beats B), is the one bootstrap_interval (and
    probability_a_beats_b) gives the set alone, to the last bit."""
    from steptrace.scoring._stats import BootstrapBatch
    rng = np.random.default_rng(7)
    sets = [rng.random(n) for n in (1, 2, 5, 5, 13, 13, 13, 40)]
    sets += [(rng.random(13) < 0.5).astype(float), np.zeros(5), np.zeros(5), sets[0].copy()]
    batch = BootstrapBatch(300, seed=11)
    handles = [batch.add(values, keep=True) for values in sets]
    assert handles[9] == handles[10] and handles[11] == handles[0]  # the same values: one
    batch.run()
    for values, handle in zip(sets, handles):
        assert batch.interval(handle) == bootstrap_interval(values, 300, seed=11)
    assert batch.beats(handles[4], handles[5]) == probability_a_beats_b(sets[4], sets[5], 300,
                                                                        seed=11)
    assert batch.beats(handles[9], handles[10]) == 0.5  # equal in every resample: ties
    with pytest.raises(ValueError):
        batch.beats(handles[2], handles[4])  # of two lengths
    with pytest.raises(ValueError):
        batch.add([])


def test_a_difference_of_whole_numbers_is_derived_to_the_bit():
    """The interval of xa − xb derived from the resampled sums of xa and xb (both 0/1,
    or whole) is the one bootstrap_interval gives xa − xb resampled itself; fractions
    are resampled as any set (and give the same too)."""
    from steptrace.scoring._stats import BootstrapBatch
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 500, 3000):
        for whole in (True, False):
            xa = (rng.random(n) < 0.6).astype(float) if whole else rng.integers(0, 4, n) / 3
            xb = (rng.random(n) < 0.4).astype(float) if whole else rng.integers(0, 4, n) / 3
            if not whole:
                xa[0] = 1 / 3  # a fraction: never whole
            batch = BootstrapBatch(400, seed=5)
            ha, hb = batch.add(xa, keep=True), batch.add(xb, keep=True)
            hd = batch.add_difference(ha, hb)
            assert (hd in batch._differences) == (whole and hd not in (ha, hb))
            batch.run()
            assert batch.interval(hd) == bootstrap_interval(xa - xb, 400, seed=5), (n, whole)
