"""The benchmark size check (CRUXEval §3.3): reversal probabilities against an exact
hypergeometric answer, the numba kernel against a pure-Python twin, loading scores from a
store and a CSV, the CLI, and every refusal."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.benchmark._sizecheck import (SizeCheck, _reversal_counts, load_pool_scores,
                              load_scores_csv, parse_sizes, size_check)
from steptrace.predictions._experiments import SCORES_DDL
from steptrace.store._store import StoreError, connect
from helpers.cli import assert_one_line_error
from helpers.splitmix import python_splitmix64

POOL = 20
A_ONLY, B_ONLY = 3, 1   # samples only A gets right, only B gets right; equal elsewhere


def known_pool() -> np.ndarray:
    """A right on 3 samples B gets wrong, B right on 1 that A gets wrong, both right on 6,
    both wrong on 10: A's pool mean 0.45, B's 0.35."""
    a = [1] * A_ONLY + [0] * B_ONLY + [1] * 6 + [0] * 10
    b = [0] * A_ONLY + [1] * B_ONLY + [1] * 6 + [0] * 10
    return np.array([a, b], np.float64).T


def exact_reversal(n: int) -> float:
    """P(#A-only < #B-only) + ½ P(equal) for a uniform n-subset of the pool."""
    rest = POOL - A_ONLY - B_ONLY
    total = 0.0
    for x in range(A_ONLY + 1):
        for y in range(B_ONLY + 1):
            if x + y > n or n - x - y > rest:
                continue
            p = math.comb(A_ONLY, x) * math.comb(B_ONLY, y) * math.comb(rest, n - x - y)
            total += p * (1.0 if x < y else 0.5 if x == y else 0.0)
    return total / math.comb(POOL, n)


def test_reversal_probability_matches_the_hypergeometric_answer():
    sizes = [1, 2, 5, 10, 19, 20]
    resamples = 40_000
    result = size_check(known_pool(), ["A", "B"], sizes, resamples=resamples, seed=11)
    assert result.pairs == (("A", "B"),)
    assert result.pool_means == (0.45, 0.35)
    for row, n in enumerate(sizes):
        expected = exact_reversal(n)
        error = math.sqrt(expected * (1 - expected) / resamples)
        assert abs(result.probability[row, 0] - expected) <= 5 * error + 1e-12, n
    # one sample: B's own 1/20, a tie 16/20 (counted half): 0.05 + 0.4
    assert exact_reversal(1) == pytest.approx(0.45)
    assert result.probability[-1, 0] == 0.0             # the whole pool: no reversal
    assert result.probability[-2, 0] == 0.0             # 19 of 20 keep A ahead as well
    again = size_check(known_pool(), ["A", "B"], sizes, resamples=resamples, seed=11)
    assert np.array_equal(again.probability, result.probability)


def test_smallest_n():
    result = size_check(known_pool(), ["A", "B"], [1, 5, 10, 15, 19, 20], level=0.1,
                        resamples=20_000, seed=3)
    exact = {n: exact_reversal(n) for n in (10, 15)}
    assert exact[10] > 0.1 > exact[15]        # 0.188 and 0.062: the answer is 15
    assert result.smallest_n == 15
    assert size_check(known_pool(), ["A", "B"], [1, 2], level=0.1, resamples=100).smallest_n is None


def test_pairs_are_ordered_by_pool_mean_and_identical_means_refused():
    scores = np.column_stack([known_pool()[:, 1], known_pool()[:, 0], np.ones(POOL)])
    result = size_check(scores, ["B", "A", "C"], [20], resamples=10)
    assert result.pairs == (("A", "B"), ("C", "B"), ("C", "A"))
    assert result.columns() == ["n", "A > B", "C > B", "C > A"]
    assert result.as_rows() == [(20, 0.0, 0.0, 0.0)]
    with pytest.raises(ValueError, match=r"^models A and B have the same mean score on the "
                                         r"pool \(0\.5\): their order is undefined$"):
        size_check(np.array([[1.0, 0.0], [0.0, 1.0]]), ["A", "B"], [1])


def python_reversal_counts(scores, sizes, better, worse, resamples, seed):
    """The kernel written out plainly, with the same generator."""
    pool, models = scores.shape
    reversals = [[0] * len(better) for _ in sizes]
    ties = [[0] * len(better) for _ in sizes]
    index = list(range(pool))
    state = seed
    for _ in range(resamples):
        totals = [0.0] * models
        for k in range(max(sizes)):
            state, bits = python_splitmix64(state)
            j = k + bits % (pool - k)
            index[k], index[j] = index[j], index[k]
            for m in range(models):
                totals[m] += scores[index[k], m]
            if k + 1 in sizes:
                row = sizes.index(k + 1)
                for p, (a, b) in enumerate(zip(better, worse)):
                    difference = totals[a] - totals[b]
                    if abs(difference) <= 1e-9 * (k + 1):
                        ties[row][p] += 1
                    elif difference < 0:
                        reversals[row][p] += 1
    return reversals, ties


def test_kernel_equals_its_pure_python_twin_on_random_inputs():
    generator = np.random.default_rng(5)
    for trial in range(4):
        pool, models = int(generator.integers(5, 30)), int(generator.integers(2, 4))
        scores = generator.integers(0, 5, (pool, models)) / 4.0
        sizes = sorted({int(n) for n in generator.integers(1, pool + 1, 3)})
        better = np.array([0, 1] if models == 3 else [0], np.int64)
        worse = np.array([1, 2] if models == 3 else [1], np.int64)
        fast = _reversal_counts(scores, np.array(sizes, np.int64), better, worse, 300, trial)
        slow = python_reversal_counts(scores, sizes, list(better), list(worse), 300, trial)
        assert fast[0].tolist() == slow[0] and fast[1].tolist() == slow[1]


def test_a_tie_counts_exactly_half_a_reversal():
    """Replayed with the twin: probability = (reversals + ties / 2) / resamples, to the bit.
    At n = 1 most draws tie (16 of the 20 samples are equal), so the rule matters."""
    sizes, resamples, seed = [1, 4, 20], 500, 7
    result = size_check(known_pool(), ["A", "B"], sizes, resamples=resamples, seed=seed)
    reversals, ties = python_reversal_counts(known_pool(), sizes, [0], [1], resamples, seed)
    assert ties[0][0] > reversals[0][0] > 0
    assert ties[2][0] == reversals[2][0] == 0
    assert result.probability[:, 0].tolist() == [(r[0] + 0.5 * t[0]) / resamples
                                                 for r, t in zip(reversals, ties)]
    assert result.probability[:, 0].tolist() == [0.432, 0.324, 0.0]


def check_with(probabilities: list[float], level: float = 0.05) -> SizeCheck:
    return SizeCheck(("A", "B"), (("A", "B"),), (0.6, 0.4), 100, (10, 20, 30, 40),
                     np.array(probabilities).reshape(-1, 1), 100, 0, level)


def test_smallest_n_is_the_size_from_which_every_larger_size_passes():
    assert check_with([0.2, 0.01, 0.3, 0.0]).smallest_n == 40    # 20 passes, 30 does not
    assert check_with([0.2, 0.04, 0.01, 0.0]).smallest_n == 20
    assert check_with([0.01, 0.01, 0.01, 0.05]).smallest_n is None  # below, not equal
    assert check_with([0.01, 0.01, 0.01, 0.049]).smallest_n == 10


@pytest.mark.parametrize("args, message", [
    ((np.ones((5, 1)), ["A"], [1]), "a size check needs at least two models, got 1"),
    ((known_pool(), ["A", "B"], [21]), "size 21 is larger than the pool (20 samples)"),
    ((known_pool(), ["A", "B"], []), "sizes must be a non-empty list of sizes >= 1"),
    ((np.array([[np.nan, 1.0]]), ["A", "B"], [1]), "scores hold NaN"),
    ((known_pool(), ["A"], [1]), "scores must be a samples x models matrix, one column per model"),
])
def test_refusals(args, message):
    with pytest.raises(ValueError) as caught:
        size_check(*args)
    assert str(caught.value) == message


def test_level_and_sizes_parsing():
    with pytest.raises(ValueError, match=r"^level must be between 0 and 1, got 1\.0$"):
        size_check(known_pool(), ["A", "B"], [5], level=1.0)
    assert parse_sizes("100:300:100") == [100, 200, 300]
    assert parse_sizes("800, 50,50") == [50, 800]
    for bad in ("1:5:0", "a,b", "0:4:2", ""):
        with pytest.raises(ValueError):
            parse_sizes(bad)


# ---------------------------------------------------------------- loading
def scores_store(path, rows, label="l"):
    """A real (empty) steptrace store with a scores table as `steptrace score` makes it,
    every row of one experiment per model (``label``) unless a row names its own."""
    con = connect(path)
    con.execute(SCORES_DDL)
    con.executemany("INSERT INTO scores (task_id, model, label, sample_index, kind, parsed, "
                    "correct, distance, note, scored_at) "
                    "VALUES (?, ?, ?, ?, ?, true, ?, NULL, NULL, now())",
                    [(r[0], r[1], r[5] if len(r) > 5 else label, *r[2:5]) for r in rows])
    con.close()
    return path


def test_load_pool_scores_pass_at_1_per_task(tmp_path):
    rows = [("t1", "m1", 0, "output", True), ("t1", "m1", 1, "output", False),
            ("t1", "m2", 0, "output", True), ("t2", "m1", 0, "output", False),
            ("t2", "m2", 0, "output", True), ("t3", "m1", 0, "output", True),
            ("t4", "m1", 0, "input", True), ("t4", "m2", 0, "input", False)]
    db = scores_store(tmp_path / "s.duckdb", rows)
    pool = load_pool_scores(db)
    assert pool.models == ("m1 [l]", "m2 [l]") and pool.samples == ("t1", "t2", "t4")
    assert pool.scores.tolist() == [[0.5, 1.0], [0.0, 1.0], [1.0, 0.0]]
    assert pool.dropped == 1   # t3: m2 has no score for it
    output = load_pool_scores(db, ["m2", "m1"], kind="output")
    assert output.samples == ("t1", "t2") and output.scores.tolist() == [[1.0, 0.5], [1.0, 0.0]]
    with pytest.raises(ValueError, match=r"^no scores for model 'm3' in "):
        load_pool_scores(db, ["m1", "m3"])
    assert load_pool_scores(db, None).scores.tolist() == pool.scores.tolist()
    disjoint = scores_store(tmp_path / "d.duckdb", [("t1", "m1", 0, "output", True),
                                                    ("t2", "m2", 0, "output", True)])
    with pytest.raises(ValueError, match=r"^no task in .*d\.duckdb is scored for every model "
                                         r"of m1 \[l\], m2 \[l\]$"):
        load_pool_scores(disjoint)
    # two experiments of one model are two columns, never averaged together
    styles = scores_store(tmp_path / "x.duckdb", [
        ("t1", "m1", 0, "output", True, "cot"), ("t1", "m1", 0, "output", False, "direct"),
        ("t2", "m1", 0, "output", True, "cot"), ("t2", "m1", 0, "output", True, "direct"),
        ("t2", "m2", 0, "output", False)])
    both = load_pool_scores(styles, ["m1"])
    assert both.models == ("m1 [cot]", "m1 [direct]") and both.samples == ("t1", "t2")
    assert both.scores.tolist() == [[1.0, 0.0], [1.0, 1.0]] and both.dropped == 0
    connect(tmp_path / "empty.duckdb").close()
    with pytest.raises(StoreError, match="has no scores table: run steptrace score --tasks first"):
        load_pool_scores(tmp_path / "empty.duckdb")


def write_csv(path, pool: np.ndarray) -> str:
    lines = ["sample_id,A,B"] + [f"s{i},{a:g},{b:g}" for i, (a, b) in enumerate(pool)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_load_scores_csv(tmp_path):
    pool = load_scores_csv(write_csv(tmp_path / "s.csv", known_pool()))
    assert pool.models == ("A", "B") and len(pool.samples) == POOL
    assert np.array_equal(pool.scores, known_pool())
    (tmp_path / "bad.csv").write_text("id,A\nx,1\n")
    with pytest.raises(ValueError, match=r"the header must be sample_id,<model>,<model>,...$"):
        load_scores_csv(tmp_path / "bad.csv")
    (tmp_path / "text.csv").write_text("sample_id,A,B\nx,1,yes\n")
    with pytest.raises(ValueError, match=r"every score must be a number$"):
        load_scores_csv(tmp_path / "text.csv")


def test_cli_json_and_table(tmp_path):
    csv = write_csv(tmp_path / "s.csv", known_pool())
    args = ["size-check", "--scores", csv, "--sizes", "5:20:5", "--level", "0.1",
            "--resamples", "20000", "--seed", "3"]
    result = CliRunner().invoke(main, args + ["--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert (payload["pool"], payload["smallest_n"], payload["dropped"]) == (20, 15, 0)
    assert payload["pairs"] == [["A", "B"]]
    assert payload["reversal_probability"]["20"] == {"A > B": 0.0}
    expected = size_check(known_pool(), ["A", "B"], [5, 10, 15, 20], 0.1, 20_000, 3)
    assert payload["reversal_probability"]["10"]["A > B"] == expected.probability[1, 0]
    assert payload["reversal_probability"]["5"]["A > B"] == 0.3131       # exact: 0.3124
    assert payload["reversal_probability"]["15"]["A > B"] == 0.06315     # exact: 0.0624
    table = CliRunner().invoke(main, args)
    assert table.exit_code == 0
    assert table.stdout.splitlines()[-1] == "smallest n with every reversal below 0.1: 15"


def test_cli_bad_inputs(tmp_path):
    csv = write_csv(tmp_path / "s.csv", known_pool())
    assert_one_line_error(CliRunner().invoke(main, ["size-check", "--scores", csv,
                                                    "--sizes", "10:40:10"]),
                          "size 40 is larger than the pool (20 samples)")
    assert_one_line_error(CliRunner().invoke(main, ["size-check", "--db",
                                                    str(tmp_path / "none.duckdb")]),
                          f"database not found: {tmp_path / 'none.duckdb'}")
    both = CliRunner().invoke(main, ["size-check", "--scores", csv, "--db", "x.duckdb"])
    assert both.exit_code == 2 and "give exactly one of --db and --scores" in both.stderr


def test_cli_from_a_store(tmp_path):
    """--db with --model and --kind: per-task pass@1, the dropped task counted."""
    rows = [(f"t{i:02d}", model, j, "output", correct)
            for i in range(20) for model, column in (("A", 0), ("B", 1))
            for j, correct in enumerate([bool(known_pool()[i, column])] * 2)]
    rows += [("t20", "A", 0, "output", True), ("t21", "A", 0, "input", False),
             ("t21", "B", 0, "input", True)]
    db = scores_store(tmp_path / "s.duckdb", rows)
    args = ["size-check", "--db", str(db), "--model", "B", "--model", "A", "--kind", "output",
            "--sizes", "5,10,15,20", "--level", "0.1", "--resamples", "20000", "--seed", "3"]
    result = CliRunner().invoke(main, args + ["--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert (payload["pool"], payload["dropped"], payload["smallest_n"]) == (20, 1, 15)
    assert payload["models"] == ["B [l]", "A [l]"] and payload["pairs"] == [["A [l]", "B [l]"]]
    assert payload["pool_means"] == {"B [l]": 0.35, "A [l]": 0.45}
    # tasks in the CSV test's order: the same draws, the same figure, columns swapped or not
    assert payload["reversal_probability"]["10"] == {"A [l] > B [l]": 0.19}
    table = CliRunner().invoke(main, args)
    assert table.stdout.splitlines()[-2:] == [
        "samples scored for some models only (left out): 1",
        "smallest n with every reversal below 0.1: 15"]
