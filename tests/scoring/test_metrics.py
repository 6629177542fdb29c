"""The evaluation metrics with exact expected values (engine/scoring/_stats.py,
_summary.py, _analyses.py): REval's incremental consistency per question chain against a
hand-computed example from its definition, coverage precision/recall/F1 on a hand-made
confusion, CRUXEval's analyses (fully solved, unsolved, diversity, input-output
correlation) on a small generations file, every interval checked against a plain-Python
twin of the bootstrap, and the number formats (fractions, ci_low/ci_high)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from helpers.splitmix import python_splitmix64
from steptrace.errors import InputError
from steptrace.scoring._analyses import (difficulty_correlation, generation_analyses,
                                         load_scored, measure_rows)
from steptrace.scoring._stats import confusion, incremental_consistency, pearson
from steptrace.scoring._summary import ScoreSummary, fraction
from steptrace.scoring._verdicts import Verdict


def resampled_rows(n: int, resamples: int, seed: int = 0) -> list[list[int]]:
    """The rows each bootstrap resample draws, replayed in plain Python."""
    state, out = seed, []
    for _ in range(resamples):
        rows = []
        for _ in range(n):
            state, bits = python_splitmix64(state)
            rows.append(bits % n)
        out.append(rows)
    return out


def percentile(values: list[float], level: float = 0.95) -> tuple[float, float]:
    values = [v for v in values if not math.isnan(v)]
    tail = (1 - level) / 2
    low, high = np.quantile(np.array(values), [tail, 1 - tail])
    return float(low), float(high)


# ---------------------------------------------------------------- coverage P/R/F1
# A hand-made confusion: 3 true positives, 1 false positive, 2 false negatives, 4 true
# negatives: precision 3/4, recall 3/5, F1 2*3/(2*3+1+2) = 2/3.
PREDICTED = [True, True, True, True, False, False, False, False, False, False]
ACTUAL = [True, True, True, False, True, True, False, False, False, False]


def test_confusion_hand_made():
    c = confusion(np.array(PREDICTED), np.array(ACTUAL), resamples=300)
    assert (c.tp, c.fp, c.fn, c.tn, c.n) == (3, 1, 2, 4, 10)
    assert (c.precision.mean, c.recall.mean, c.f1.mean) == (0.75, 0.6, 2 / 3)
    # the intervals: the same resamples replayed in Python, the ratios of their counts
    draws = {"p": [], "r": [], "f": []}
    for rows in resampled_rows(10, 300):
        tp = sum(PREDICTED[i] and ACTUAL[i] for i in rows)
        fp = sum(PREDICTED[i] and not ACTUAL[i] for i in rows)
        fn = sum(not PREDICTED[i] and ACTUAL[i] for i in rows)
        draws["p"].append(tp / (tp + fp) if tp + fp else math.nan)
        draws["r"].append(tp / (tp + fn) if tp + fn else math.nan)
        draws["f"].append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else math.nan)
    for interval, key in ((c.precision, "p"), (c.recall, "r"), (c.f1, "f")):
        assert (interval.low, interval.high) == pytest.approx(percentile(draws[key]))
        assert interval.low <= interval.mean <= interval.high


def test_confusion_undefined_ratios():
    none_positive = confusion(np.array([False, False]), np.array([False, False]), resamples=10)
    assert math.isnan(none_positive.precision.mean) and math.isnan(none_positive.recall.mean)
    assert math.isnan(none_positive.f1.low) and fraction(none_positive.f1.mean) is None
    with pytest.raises(ValueError, match="one length"):
        confusion(np.array([True]), np.array([True, False]))


# ---------------------------------------------------------------- correlation
def test_pearson_exact_and_twin():
    x = [0.0, 0.2, 0.4, 1.0, 0.6, 0.0]
    y = [0.1, 0.1, 0.5, 0.9, 0.4, 0.3]
    r = pearson(np.array(x), np.array(y), resamples=200)
    mx, my = sum(x) / 6, sum(y) / 6
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    expected = cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert r.mean == pytest.approx(expected, abs=1e-12)
    draws = []
    for rows in resampled_rows(6, 200):
        xs, ys = [x[i] for i in rows], [y[i] for i in rows]
        if len(set(xs)) < 2 or len(set(ys)) < 2:
            draws.append(math.nan)
        else:
            draws.append(float(np.corrcoef(xs, ys)[0, 1]))
    assert (r.low, r.high) == pytest.approx(percentile(draws), abs=1e-9)
    assert math.isnan(pearson(np.array([1.0, 1.0]), np.array([0.0, 1.0])).mean)


def test_pearson_resamples_of_one_repeated_value_have_no_correlation():
    """A resample drawing only 1/3 (not a binary fraction) has a variance of rounding
    noise, not a correlation: left out as the twin leaves it out."""
    x = [1 / 3, 1 / 3, 1 / 3, 2 / 3]
    y = [0.1, 0.7, 0.3, 0.9]
    r = pearson(np.array(x), np.array(y), resamples=300)
    draws = []
    for rows in resampled_rows(4, 300):
        xs, ys = [x[i] for i in rows], [y[i] for i in rows]
        draws.append(math.nan if len(set(xs)) < 2 or len(set(ys)) < 2
                     else float(np.corrcoef(xs, ys)[0, 1]))
    assert sum(math.isnan(d) for d in draws) > 0
    assert (r.low, r.high) == pytest.approx(percentile(draws), abs=1e-9)


# ---------------------------------------------------------------- REval IC per chain
def chain_tasks() -> dict[str, dict]:
    """One run (run_id 1): coverage, state and next_line questions about lines 2 and 3,
    a second state question at line 2 (a later occurrence: not in the chain, REval asks
    one variable per line), a coverage question about line 5 (not run: no state question,
    no chain) and the run's output question; a second run (2) with only an output and a
    coverage question (no chain)."""
    def t(task_id, kind, line=None, occurrence=None, var=None, answer="true", run_id=1):
        return {"task_id": task_id, "kind": kind, "run_id": run_id, "line": line,
                "occurrence": occurrence, "var": var, "answer": answer, "line_steps": 12,
                "loop_nesting": 0}
    tasks = [t("cov2", "coverage", 2), t("cov3", "coverage", 3), t("cov5", "coverage", 5,
                                                                   answer="false"),
             t("st2", "state", 2, 1, "x", "1"), t("st2b", "state", 2, 2, "x", "2"),
             t("st3", "state", 3, 1, "y", "3"), t("nl2", "next_line", 2, 1, None, "3"),
             t("nl3", "next_line", 3, 1, None, "4"), t("out", "output", None, None, None, "5"),
             t("out2", "output", run_id=2), t("cov9", "coverage", 1, run_id=2)]
    return {task["task_id"]: task for task in tasks}


# Per sample: which tasks are right (the rest are wrong).
RIGHT = {0: {"cov2", "st2", "cov3", "st3", "nl3", "cov5"},
         1: {"cov2", "st2", "nl2", "out", "st3", "nl3", "st2b"}}


def verdicts(model: str, right: dict[int, set[str]], tasks: dict[str, dict]) -> list[Verdict]:
    return [Verdict(task_id, model, "l", sample, task["kind"], True, task_id in right[sample])
            for sample in right for task_id, task in tasks.items()]


def test_reval_incremental_consistency_hand_computed():
    """REval (evaluation.py, class Consistency): a chain is (coverage, state, path,
    output) of one line and one input; it scores 1 when all four are right, 1/2 when
    only the output is wrong, 1/4 when path and output are wrong, 1/8 when only coverage
    is right, 0 otherwise; IC is the mean over the chains. By hand:

    sample 0, line 2: cov right, state right, next wrong, output wrong → 1/4
    sample 0, line 3: right, right, right, output wrong               → 1/2
    sample 1, line 2: right, right, right, right                      → 1
    sample 1, line 3: cov wrong, state right, next right, output right → 0 (inconsistent)
    IC = (1/4 + 1/2 + 1 + 0) / 4 = 0.4375.

    The old per-run rule (a kind right when its pass@1 >= 0.5, one chain per run) would
    say 1.0 here: coverage 4/6, state 5/6, next_line 3/4, output 1/2."""
    tasks = chain_tasks()
    summary = ScoreSummary((1,), tasks, verdicts("m", RIGHT, tasks), resamples=200)
    chains = summary.chains()[("m", "l")]
    assert chains == [(True, True, False, False), (True, True, True, True),   # line 2
                      (True, True, True, False), (False, True, True, True)]   # line 3
    assert [incremental_consistency(list(c)) for c in chains] == [0.25, 1.0, 0.5, 0.0]
    columns, rows = summary.consistency()
    assert columns == ["model", "label", "chains", "IC", "ci_low", "ci_high", "score 1",
                       "score 0.5", "score 0.25", "score 0.125", "score 0"]
    (row,) = rows
    draws = [sum([0.25, 1.0, 0.5, 0.0][i] for i in r) / 4 for r in resampled_rows(4, 200)]
    low, high = percentile(draws)
    assert row == ["m", "l", 4, 0.4375, round(low, 4), round(high, 4), 1, 1, 1, 0, 1]


def test_coverage_table_from_verdicts():
    """Coverage verdicts → predictions: a right "true" answer is a true positive, a wrong
    one a false negative, a wrong "false" a false positive; an unparseable one is "no"."""
    tasks = chain_tasks()
    vs = verdicts("m", RIGHT, tasks)
    vs.append(Verdict("cov2", "m", "l", 2, "coverage", False, False))  # unparseable: "no"
    summary = ScoreSummary((1,), tasks, vs, resamples=200)
    columns, rows = summary.coverage()
    assert columns[:7] == ["model", "label", "questions", "tp", "fp", "fn", "tn"]
    (row,) = rows
    # sample 0: cov2 tp, cov3 tp, cov5 ("false", right) tn, cov9 fn; sample 1: cov2 tp,
    # cov3 fn, cov5 (wrong) fp, cov9 fn; the unparseable cov2: fn
    assert row[:7] == ["m", "l", 9, 3, 1, 4, 1]
    assert row[7] == 0.75 and row[10] == round(3 / 7, 4) and row[13] == round(6 / 11, 4)
    assert all(row[i] <= row[i + 1] for i in (8, 11, 14))  # ci_low <= ci_high


def test_by_kind_fractions_intervals_and_solved_shares():
    tasks = chain_tasks()
    summary = ScoreSummary((1,), tasks, verdicts("m", RIGHT, tasks), resamples=200)
    columns, rows = summary.by_kind()
    assert columns == ["model", "label", "kind", "tasks", "samples", "pass@1", "ci_low",
                       "ci_high", "unparseable", "fully solved", "unsolved", "trace distance",
                       "trivial"]
    state = next(r for r in rows if r[2] == "state")
    # st2 right twice, st2b once, st3 twice: pass@1 (1 + 1/2 + 1)/3; solved 2 of 3
    assert state[3:6] == [3, 6, round(2.5 / 3, 4)] and state[8:11] == [0.0, 0.6667, 0.0]
    low, high = percentile([sum([1.0, 0.5, 1.0][i] for i in r) / 3
                            for r in resampled_rows(3, 200)])
    assert state[6:8] == [round(low, 4), round(high, 4)]
    output = next(r for r in rows if r[2] == "output")
    assert output[5] == 0.25 and output[9:11] == [0.0, 0.5]  # out 1 of 2; out2 never
    as_json = json.loads(json.dumps(summary.as_dict()))
    assert all(isinstance(r["ci_low"], float) for r in as_json["by_kind"])


def test_paired_comparison_difference_interval():
    tasks = chain_tasks()
    worse = {0: set(), 1: {"cov2"}}
    summary = ScoreSummary((1,), tasks, verdicts("a", RIGHT, tasks) + verdicts("b", worse, tasks),
                           resamples=200)
    columns, (row,) = summary.comparisons()
    assert columns == ["model A", "label A", "model B", "label B", "tasks", "pass@1 A",
                       "pass@1 B", "difference", "ci_low", "ci_high", "P(A beats B)"]
    ids = sorted(tasks)
    a = [len([s for s in RIGHT if t in RIGHT[s]]) / 2 for t in ids]
    b = [len([s for s in worse if t in worse[s]]) / 2 for t in ids]
    diff = [x - y for x, y in zip(a, b)]
    low, high = percentile([sum(diff[i] for i in r) / len(ids)
                            for r in resampled_rows(len(ids), 200)])
    assert row[:10] == ["a", "l", "b", "l", 11, round(sum(a) / 11, 4), round(sum(b) / 11, 4),
                        round(sum(diff) / 11, 4), round(low, 4), round(high, 4)]


# ---------------------------------------------------------------- CRUXEval analyses
# A small generations file of four samples, four generations each, and its scored lists
# (as score-cruxeval's --out writes them).
GENERATIONS = {"s0": ["1", "1", " 1", "1"], "s1": ["2", "3", "4", "5"],
               "s2": ["[]", "[] ", "[0]", "[]"], "s3": ["'a'", "'b'", "'a'", "'c'"]}
SCORED = {"s0": [True, True, True, True], "s1": [False, False, False, False],
          "s2": [True, True, False, True], "s3": [True, False, True, False]}
OTHER_MODE = {"s0": [True, True], "s1": [False, True], "s2": [True, False],
              "s3": [False, False]}


def test_cruxeval_analyses_exact():
    measures = {m.name: m for m in generation_analyses(SCORED, GENERATIONS, resamples=200)}
    assert [(m.name, m.value, m.n) for m in measures.values()] == [
        ("pass@1 fraction", 0.5625, 4),             # (1 + 0 + 3/4 + 1/2) / 4
        ("pass@5 fraction", 1.0, 4),                # n = 4 < 5: 1.0 for every sample, as the harness
        ("fully solved", 0.25, 4),         # s0 only
        ("unsolved", 0.25, 4),             # s1 only
        ("distinct generations", 2.5, 4),  # 1, 4, 2, 3 (whitespace at the ends aside)
        ("distinct share", 0.625, 4)]      # 1/4, 4/4, 2/4, 3/4
    draws = [sum([1.0, 0.0, 0.0, 0.0][i] for i in r) / 4 for r in resampled_rows(4, 200)]
    low, high = percentile(draws)
    assert (measures["fully solved"].ci_low, measures["fully solved"].ci_high) == (
        round(low, 4), round(high, 4))
    rows = dict(measure_rows(list(measures.values())))
    assert rows["unsolved"] == 0.25 and rows["unsolved n"] == 4 and "unsolved ci_low" in rows


def test_cruxeval_pass5_below_n_and_fully_solved_counts_dropped():
    """pass@5 of n < 5 is 1.0 when anything passed (the harness); fully solved counts a
    dropped generation (``passed`` False) as failed."""
    measures = generation_analyses({"a": [True]}, None, {"a": [True, False]}, resamples=10)
    assert [(m.name, m.value) for m in measures] == [
        ("pass@1 fraction", 1.0), ("pass@5 fraction", 1.0), ("fully solved", 0.0), ("unsolved", 0.0)]


def test_input_output_correlation_exact(tmp_path):
    r = difficulty_correlation(SCORED, OTHER_MODE, resamples=200)
    x, y = [1.0, 0.0, 0.75, 0.5], [1.0, 0.5, 0.5, 0.0]
    assert r.name == "input-output pass@1 correlation" and r.n == 4
    # by hand: deviations (7/16, -9/16, 3/16, -1/16) and (1/2, 0, 0, -1/2): covariance sum
    # 1/4, squares 35/64 and 1/2: r = (1/4) / sqrt(35/128) = 0.4781
    assert r.value == round(0.25 / math.sqrt(35 / 128), 4) == 0.4781
    assert r.value == round(float(np.corrcoef(x, y)[0, 1]), 4)
    scored = tmp_path / "scored.json"
    scored.write_text(json.dumps({"raw_scored_generations": OTHER_MODE, "pass_at_1": 1}))
    assert load_scored(scored) == OTHER_MODE
    scored.write_text(json.dumps({"raw_scored_generations": {"s0": [1]}}))
    with pytest.raises(InputError, match="not an official scored file"):
        load_scored(scored)
    with pytest.raises(InputError, match="at least 2 samples"):
        difficulty_correlation({"s0": [True]}, {"s0": [True]})


# ---------------------------------------------------------------- chains end to end
@pytest.mark.slow
def test_reval_chains_end_to_end(tmp_path):
    """``tasks --chains 2`` asks coverage, state and next_line questions about the same
    lines of a run; ``score`` forms REval's chains from them and the run's output
    question. The model (the stub server) answers coverage and state right everywhere,
    next_line right on the first chained line only, and the output wrong: that line's
    chain scores 1/2, the other's 1/4."""
    from click.testing import CliRunner

    from helpers.openai_stub import StubServer, answer
    from helpers.programs import LOOP
    from steptrace.cli._main import main

    def invoke(*args):
        result = CliRunner().invoke(main, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result

    corpus, db, tasks_file = tmp_path / "loop.jsonl", tmp_path / "s.duckdb", tmp_path / "t.jsonl"
    corpus.write_text(json.dumps({"id": "loop", "code": LOOP, "input": "[1, 2, 3]"}) + "\n")
    invoke("trace", corpus, "--db", db, "--workers", 0)
    invoke("tasks", "--db", db, "--kinds", "coverage,state,next_line,output", "--per-run", 1,
           "--chains", 2, "--out", tasks_file)
    tasks = [json.loads(line) for line in tasks_file.read_text().splitlines()]
    lines = {kind: sorted(t["line"] for t in tasks if t["kind"] == kind)
             for kind in ("coverage", "state", "next_line")}
    chained = sorted(set(lines["coverage"]) & set(lines["state"]) & set(lines["next_line"]))
    assert len(chained) == 2, lines
    first = chained[0]

    def reply(t: dict) -> list:
        right = f"[ANSWER]\n{t['answer']}\n[/ANSWER]"
        wrong = "[ANSWER]\n-12345\n[/ANSWER]"
        good = t["kind"] in ("coverage", "state") or (t["kind"] == "next_line"
                                                       and t["line"] == first)
        return [answer(right if good else wrong)]

    script = {t["task_id"]: reply(t) for t in tasks}
    by_prompt = {t["prompt"]: t["task_id"] for t in tasks}
    with StubServer(script, models=("m",), key_of=by_prompt.get) as server:
        invoke("predict", "--tasks", tasks_file, "--model", "m", "--base-url", server.base_url,
               "--concurrency", 1, "--db", db, "--quiet")
    result = json.loads(invoke("score", "--tasks", tasks_file, "--db", db, "--k", 1,
                               "--workers", 0, "--format", "json").stdout)
    (row,) = result["incremental_consistency"]
    assert (row["chains"], row["IC"], row["score 0.5"], row["score 0.25"]) == (2, 0.375, 1, 1)
    assert (row["ci_low"], row["ci_high"]) == (0.25, 0.5)


@pytest.mark.slow
def test_score_cruxeval_analyses_on_a_small_generations_file(tmp_path):
    """score-cruxeval on four samples of our own (--data), sixteen checks in the sandbox,
    with the other mode's scored file: the analyses as fractions with ci_low/ci_high."""
    from click.testing import CliRunner

    from steptrace.cli._main import main

    samples = [("s0", "def f(x):\n    return x + 1", "1", "2"),
               ("s1", "def f(s):\n    return s.upper()", "'a'", "'A'"),
               ("s2", "def f(x):\n    return [x]", "1", "[1]"),
               ("s3", "def f(s):\n    return s * 2", "'a'", "'aa'")]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": i, "code": c, "input": x, "output": o}) + "\n"
                            for i, c, x, o in samples))
    generations = {"s0": ["2", "2", " 2", "2"], "s1": ["'a'", "'b'", "'c'", "'d'"],
                   "s2": ["[1]", "[1] ", "[0]", "[1]"],
                   "s3": ["'aa'", "'b'", "f('a')", "'c'"]}  # f('a'): dropped by the rules
    gens, other, out = tmp_path / "g.json", tmp_path / "other.json", tmp_path / "scored.json"
    gens.write_text(json.dumps(generations))
    other.write_text(json.dumps({"raw_scored_generations": OTHER_MODE}))
    result = CliRunner().invoke(main, ["score-cruxeval", str(gens), "--mode", "output",
                                       "--data", str(data), "--other-mode", str(other),
                                       "--out", str(out), "--workers", "0", "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # the official numbers stay the harness's percentages
    assert summary["pass_at_1"] == pytest.approx((1 + 0 + 0.75 + 1 / 3) / 4 * 100)
    assert json.loads(out.read_text())["raw_scored_generations"]["s3"] == [True, False, False]
    analyses = {m["measure"]: m for m in summary["analyses"]}
    x, y = [1.0, 0.0, 0.75, 1 / 3], [1.0, 0.5, 0.5, 0.0]
    assert {name: (m["value"], m["n"]) for name, m in analyses.items()} == {
        "pass@1 fraction": (0.5208, 4), "pass@5 fraction": (1.0, 4), "fully solved": (0.25, 4),
        "unsolved": (0.25, 4), "distinct generations": (2.75, 4), "distinct share": (0.6875, 4),
        "input-output pass@1 correlation": (round(float(np.corrcoef(y, x)[0, 1]), 4), 4)}
    for m in analyses.values():
        assert isinstance(m["ci_low"], float) and m["ci_low"] <= m["value"] <= m["ci_high"]
    csv = CliRunner().invoke(main, ["score-cruxeval", str(gens), "--mode", "output", "--data",
                                    str(data), "--workers", "0", "--format", "csv"])
    assert csv.exit_code == 0, csv.output
    lines = csv.stdout.splitlines()
    assert "fully solved,0.25" in lines and "fully solved n,4" in lines
    assert any(line.startswith("fully solved ci_low,") for line in lines)


# ---------------------------------------------------------------- the report's bucket rule
@pytest.mark.parametrize("counts, groups", [
    # (low, high, tasks) of the buckets with tasks → the merged [low, high) groups
    ([(1, 2, 12), (2, 4, 30)], [(1, 2), (2, 4)]),                  # none short
    ([(1, 2, 3), (2, 4, 4), (4, 8, 5), (8, 16, 20)], [(1, 8), (8, 16)]),  # 3+4+5 = 12
    ([(1, 2, 15), (2, 4, 2)], [(1, 4)]),                           # a short last group joins
    ([(4, 8, 2), (16, 32, 3)], [(4, 32)]),                         # all short: one group
    ([(2, 4, 10), (4, 8, 9), (8, 16, 1)], [(2, 4), (4, 16)]),
    ([], []),
])
def test_report_merges_buckets_of_few_tasks(counts, groups):
    from steptrace.analytics._report import MIN_TASKS, merged_buckets
    assert MIN_TASKS == 10
    assert merged_buckets(counts) == groups


def test_store_input_output_correlation():
    """Per run, pass@1 of its input task against its output task: runs 1-4 with input
    pass@1 1, 0, 1/2, 1/2 and output pass@1 1, 1/2, 1/2, 0 (two samples each)."""
    right = {1: ((True, True), (True, True)), 2: ((False, False), (True, False)),
             3: ((True, False), (False, True)), 4: ((False, True), (False, False))}
    tasks, vs = {}, []
    for run, (inputs, outputs) in right.items():
        for kind, answers in (("input", inputs), ("output", outputs)):
            task_id = f"{kind}{run}"
            tasks[task_id] = {"task_id": task_id, "kind": kind, "run_id": run, "answer": "1"}
            vs += [Verdict(task_id, "m", "l", s, kind, True, ok) for s, ok in enumerate(answers)]
    tasks["lone"] = {"task_id": "lone", "kind": "input", "run_id": 9, "answer": "1"}
    vs.append(Verdict("lone", "m", "l", 0, "input", True, True))  # no output task: left out
    columns, (row,) = ScoreSummary((1,), tasks, vs, resamples=200).difficulty_correlation()
    x, y = [1.0, 0.0, 0.5, 0.5], [1.0, 0.5, 0.5, 0.0]
    assert columns == ["model", "label", "runs", "r", "ci_low", "ci_high"]
    # by hand: deviations (1/2, -1/2, 0, 0) and (1/2, 0, 0, -1/2): r = (1/4) / (1/2) = 0.5
    assert row[:4] == ["m", "l", 4, round(float(np.corrcoef(x, y)[0, 1]), 4)] == ["m", "l", 4, 0.5]
    draws = []
    for rows in resampled_rows(4, 200):
        xs, ys = [x[i] for i in rows], [y[i] for i in rows]
        draws.append(math.nan if len(set(xs)) < 2 or len(set(ys)) < 2
                     else float(np.corrcoef(xs, ys)[0, 1]))
    low, high = percentile(draws)
    assert row[4:] == [round(low, 4), round(high, 4)]


def test_a_trivial_kind_is_apart_from_all_and_the_summary_says_so():
    """12 exception tasks that all answer "none" (CRUXEval's 800 do) are a trivial kind:
    listed after all, left out of it; 9 such tasks are too few to call it trivial."""
    def task(i: int, kind: str, answer: str) -> dict:
        return {"task_id": f"{kind}{i:02d}", "kind": kind, "run_id": i, "answer": answer,
                "line_steps": 3, "loop_nesting": 0}
    outputs = {t["task_id"]: t for t in (task(i, "output", str(i)) for i in range(4))}
    for count, trivial in ((12, True), (9, False)):
        tasks = dict(outputs)
        tasks.update({t["task_id"]: t for t in (task(i, "exception", "none")
                                                 for i in range(count))})
        # the outputs: 1 of 4 right; the exceptions: every one right
        verdicts = [Verdict(t, "m", "l", 0, tasks[t]["kind"], True,
                            t == "output00" or tasks[t]["kind"] == "exception")
                    for t in sorted(tasks)]
        summary = ScoreSummary((1,), tasks, verdicts, resamples=50)
        columns, rows = summary.by_kind()
        got = [(r[2], r[3], r[5], r[-1]) for r in rows]
        if trivial:
            assert summary.trivial_kinds == {"exception": "none"}
            assert got == [("output", 4, 0.25, None), ("all", 4, 0.25, None),
                           ("exception", 12, 1.0, "every answer none")]
            head, table = summary.summary()
            assert head == ["model", "label", "kind", "tasks", "pass@1", "ci_low", "ci_high",
                            "unparseable"]
            assert [r[2:5] for r in table] == [["output", 4, 0.25], ["all", 4, 0.25],
                                               ["exception (trivial)", 12, 1.0]]
        else:
            assert summary.trivial_kinds == {}
            assert got == [("exception", 9, 1.0, None), ("output", 4, 0.25, None),
                           ("all", 13, round(10 / 13, 4), None)]
