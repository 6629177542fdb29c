"""Scoring predictions against task answers (engine/scoring/_score.py, `steptrace score --tasks`).

The judges are checked kind by kind on hand-made answers; then the whole path runs on a
real store: a traced program, its tasks, predictions from two models collected by
`steptrace predict` from a real OpenAI-compatible server on 127.0.0.1, and `steptrace
score --tasks`, with exact pass@k, unparseable rates, trace distances, incremental
consistency and the scores table.
"""

from __future__ import annotations

import json
import re
from math import comb
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.scoring._judges import judge_traces
from steptrace.scoring._verdicts import ScoreOptions, judge
from steptrace.scoring._stats import probability_a_beats_b
from helpers.openai_stub import StubServer, answer
from helpers.programs import LOOP  # f([1, 2, 3]) == 3; f([3]) == 3 too

DEFAULT = ScoreOptions()
STRICT = ScoreOptions(type_strict=True)
LOOSE = ScoreOptions(float_tolerance=1e-6)


def task(kind: str, answer_text: str, answer_type: str = "repr") -> dict:
    return {"task_id": "t", "kind": kind, "answer": answer_text, "answer_type": answer_type}


# kind, answer, answer_type, options, prediction, correct
JUDGED = [
    ("output", "[1, 2]", "repr", DEFAULT, "[1, 2]", True),
    ("output", "[1, 2]", "repr", DEFAULT, "[1,2]", True),             # as values, not text
    ("output", "[1, 2]", "repr", DEFAULT, "(1, 2)", False),
    ("output", "[1, 2]", "repr", DEFAULT, "[1, 2.0]", True),          # Python: 2 == 2.0
    ("output", "[1, 2]", "repr", STRICT, "[1, 2.0]", False),
    ("output", "{'a': 0.1}", "repr", DEFAULT, "{'a': 0.1000000001}", False),
    ("output", "{'a': 0.1}", "repr", LOOSE, "{'a': 0.1000000001}", True),
    ("output", "<object>", "repr", DEFAULT, " <object> ", True),       # no literal: text
    ("output", "'abc'", "repr", DEFAULT, '"abc"', True),
    ("state", "0", "repr", DEFAULT, "False", True),                   # 0 == False
    ("state", "0", "repr", STRICT, "False", False),
    ("state", "unbound", "unbound", DEFAULT, "unbound", True),
    ("state", "unbound", "unbound", DEFAULT, "None", False),
    ("state_any", '["0", "1", "3"]', "set", DEFAULT, '["0", "3"]', True),   # members only
    ("state_any", '["0", "1", "3"]', "set", DEFAULT, '["3", "1", "0"]', True),
    ("state_any", '["0", "1", "3"]', "set", DEFAULT, '["0", "2"]', False),
    ("state_any", '["0", "1", "3"]', "set", DEFAULT, "1", True),              # one value
    ("state_any", '["0", "1", "3"]', "set", DEFAULT, "[]", False),            # names nothing
    ("state_any", '["\'a\'"]', "set", DEFAULT, "[\"'a'\"]", True),
    ("next_line", "4", "line", DEFAULT, "4", True),
    ("next_line", "4", "line", DEFAULT, "5", False),
    ("next_line", "return", "line", DEFAULT, "Return", True),
    ("next_line", "return", "line", DEFAULT, "4", False),
    ("next_line_any", "[4, 8]", "set", DEFAULT, "[8]", True),
    ("next_line_any", "[4, 8]", "set", DEFAULT, "[4, 8]", True),
    ("next_line_any", "[4, 8]", "set", DEFAULT, "[4, 9]", False),
    ("next_line_any", "[4, 8]", "set", DEFAULT, "8", True),
    ("next_line_any", '[3, "return"]', "set", DEFAULT, '["return"]', True),
    ("coverage", "true", "bool", DEFAULT, "true", True),
    ("coverage", "true", "bool", DEFAULT, "Yes", True),
    ("coverage", "true", "bool", DEFAULT, "false", False),
    ("coverage", "false", "bool", DEFAULT, "maybe", False),
    ("branch", "false", "bool", DEFAULT, "False", True),
    ("line_count", "3", "int", DEFAULT, "3", True),
    ("line_count", "3", "int", DEFAULT, "3.0", False),
    ("line_count", "0", "int", DEFAULT, "False", False),              # a bool is no count
    ("steps", "12", "int", DEFAULT, " 12 ", True),
    ("exception", "none", "exception", DEFAULT, "None", True),
    ("exception", "none", "exception", DEFAULT, "ValueError", False),
    ("exception", "KeyError", "exception", DEFAULT, "KeyError", True),
    ("exception", "KeyError", "exception", DEFAULT, "LookupError", False),
    ("trace", "[[2, 0], [3, 0]]", "trace", DEFAULT, "[[2, 0], [3, 0]]", True),
    ("trace", "[[2, 0], [3, 0]]", "trace", DEFAULT, "[(2, 0), (3, 0)]", True),
    ("trace", "[[2, 0], [3, 0]]", "trace", DEFAULT, "[[2, 0], [3, 1]]", False),
]


@pytest.mark.parametrize("kind, answer_text, answer_type, options, predicted, correct", JUDGED)
def test_judges_kind_by_kind(kind, answer_text, answer_type, options, predicted, correct):
    assert judge(task(kind, answer_text, answer_type), predicted, options)[0] is correct


def test_trace_distances():
    """Normalised edit distance over [line, depth] pairs; 1.0 for what is no trace."""
    truth = "[[2, 0], [3, 0], [4, 1], [3, 0]]"
    judged = judge_traces([truth] * 4, [truth, "[[2, 0], [3, 0]]", "[[2, 0], [3, 0], [4, 0], [3, 0]]",
                                        "no idea"])
    assert judged == [(True, 0.0), (False, 0.5), (False, 0.25), (False, 1.0)]


# ------------------------------------------------------------------ end to end
KINDS = ("output", "input", "state", "next_line", "coverage", "trace")
LABEL = "direct-t0.0-m2048"  # the default label of the fixture's predict runs


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def block(text: str):
    return answer(f"[ANSWER]\n{text}\n[/ANSWER]")


def replies_m1(t: dict) -> list:
    """Three samples per task; which are right is written next to each kind."""
    right = block(t["answer"])
    return {
        "output": [right, block("4"), answer("I think it is three")],     # 1 right, 1 unparseable
        # f([3]) also returns 3: any input giving the output is right, checked by running it
        "input": [block("[1, 2, 3]"), block("[3]"), block("[2]")],       # 2 right
        "state": [right, right, block("12345")],                          # 2 right
        "next_line": [block("99"), block("raise"), right],               # 1 right
        "coverage": [right, right, right],                                # 3 right
        "trace": [right, block("[[2, 0]]"), answer("no idea")],           # 1 right, 1 unparseable
    }[t["kind"]]


def replies_m2(t: dict) -> list:
    """The second model gets only the output right."""
    if t["kind"] == "output":
        return [block(t["answer"])] * 3
    wrong = {"input": "[2]", "state": "12345", "next_line": "99", "trace": "[[1, 0]]",
             "coverage": "false" if t["answer"] == "true" else "true"}[t["kind"]]
    return [block(wrong)] * 3


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scoring")
    corpus, db, tasks_file = tmp / "loop.jsonl", tmp / "s.duckdb", tmp / "tasks.jsonl"
    corpus.write_text(json.dumps({"id": "loop", "code": LOOP, "input": "[1, 2, 3]"}) + "\n")
    assert invoke("trace", corpus, "--db", db, "--workers", 0).exit_code == 0
    made = invoke("tasks", "--db", db, "--kinds", ",".join(KINDS), "--per-run", 1,
                  "--out", tasks_file)
    assert made.exit_code == 0, made.output
    tasks = [json.loads(line) for line in tasks_file.read_text().splitlines()]
    assert sorted(t["kind"] for t in tasks) == sorted(KINDS)
    by_prompt = {t["prompt"]: t["task_id"] for t in tasks}
    for model, replies in (("m1", replies_m1), ("m2", replies_m2)):
        script = {t["task_id"]: replies(t) for t in tasks}
        with StubServer(script, models=(model,), key_of=by_prompt.get) as server:
            asked = invoke("predict", "--tasks", tasks_file, "--model", model, "--base-url",
                           server.base_url, "--samples", 3, "--concurrency", 1, "--db", db,
                           "--quiet")
            assert asked.exit_code == 0, asked.output
    result = invoke("score", "--tasks", tasks_file, "--db", db, "--k", "1,2", "--workers", 0,
                    "--format", "json")
    assert result.exit_code == 0, result.output
    return db, {t["kind"]: t for t in tasks}, json.loads(result.stdout)


def pass_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator written out, independently of steptrace.scoring._stats."""
    return 1 - comb(n - c, k) / comb(n, k)


def test_pass_at_k_by_kind(scored):
    _, _, result = scored
    correct_m1 = {"output": 1, "input": 2, "state": 2, "next_line": 1, "coverage": 3, "trace": 1}
    # every share a fraction (4 decimals), as the queries give theirs
    got = {(r["model"], r["kind"]): (r["tasks"], r["samples"], r["pass@1"], r["pass@2"],
                                     r["unparseable"]) for r in result["by_kind"]}
    want = {("m1", kind): (1, 3, round(c / 3, 4), round(pass_k(3, c, 2), 4),
                           0.3333 if kind in ("output", "trace") else 0.0)
            for kind, c in correct_m1.items()}
    want[("m1", "all")] = (6, 18, 0.5556, 0.8333, 0.1111)
    want.update({("m2", kind): (1, 3, 1.0 if kind == "output" else 0.0,
                                1.0 if kind == "output" else 0.0, 0.0) for kind in KINDS})
    want[("m2", "all")] = (6, 18, 0.1667, 0.1667, 0.0)
    assert got == want
    # one task per kind: its interval is the point; over six tasks two numbers around it
    m1_all = next(r for r in result["by_kind"] if r["model"] == "m1" and r["kind"] == "all")
    assert m1_all["ci_low"] < 0.5556 < m1_all["ci_high"]
    assert [(r["ci_low"], r["ci_high"]) for r in result["by_kind"]
            if r["model"] == "m2" and r["kind"] == "output"] == [(1.0, 1.0)]
    # fully solved: m1's coverage (3 of 3 right); unsolved: none right (none of m1's)
    assert [(r["kind"], r["fully solved"], r["unsolved"]) for r in result["by_kind"]
            if r["model"] == "m1" and r["kind"] in ("coverage", "all")] == [
        ("coverage", 1.0, 0.0), ("all", 0.1667, 0.0)]
    trace_rows = {r["model"]: r["trace distance"] for r in result["by_kind"] if r["kind"] == "trace"}
    # m1: exact (0), one pair of the 12 (11/12), unparseable (1); m2: [[1, 0]] vs 12 pairs
    assert trace_rows == {"m1": round((0 + 11 / 12 + 1) / 3, 4), "m2": 1.0}


def test_scores_table_and_input_checks(scored):
    db, tasks, result = scored
    assert rows(db, "SELECT model, kind, count(*), count(*) FILTER (WHERE correct), "
                    "count(*) FILTER (WHERE NOT parsed) FROM scores GROUP BY ALL ORDER BY ALL") == [
        ("m1", "coverage", 3, 3, 0), ("m1", "input", 3, 2, 0), ("m1", "next_line", 3, 1, 0),
        ("m1", "output", 3, 1, 1), ("m1", "state", 3, 2, 0), ("m1", "trace", 3, 1, 1),
        ("m2", "coverage", 3, 0, 0), ("m2", "input", 3, 0, 0), ("m2", "next_line", 3, 0, 0),
        ("m2", "output", 3, 3, 0), ("m2", "state", 3, 0, 0), ("m2", "trace", 3, 0, 0)]
    assert rows(db, "SELECT sample_index, correct, note FROM scores WHERE model = 'm1' "
                    "AND kind = 'input' ORDER BY sample_index") == [
        (0, True, None), (1, True, None), (2, False, "returned -1")]
    # [1, 2, 3], [3], [2] (m1) and [2] again (m2): three distinct checks
    assert result["input_checks"] == 3 and result["scored"] == 36 and result["errors_skipped"] == 0


def test_consistency_coverage_and_comparison(scored):
    _, tasks, result = scored
    # REval's chains are questions about one line: here coverage asks about line 4, state
    # and next_line about line 3, so there is no chain (tasks --chains makes them: see
    # test_reval_chains_end_to_end in test_metrics.py)
    assert (tasks["coverage"]["line"], tasks["state"]["line"], tasks["next_line"]["line"]) == (
        4, 3, 3)
    assert result["incremental_consistency"] == []
    # coverage: the line runs ("true"); m1 says yes 3 times, m2 no 3 times
    assert [(r["model"], r["questions"], r["tp"], r["fp"], r["fn"], r["tn"], r["precision"],
             r["recall"], r["f1"]) for r in result["coverage"]] == [
        ("m1", 3, 3, 0, 0, 0, 1.0, 1.0, 1.0), ("m2", 3, 0, 0, 3, 0, None, 0.0, 0.0)]
    m1 = {"output": 1 / 3, "input": 2 / 3, "state": 2 / 3, "next_line": 1 / 3, "coverage": 1.0,
          "trace": 1 / 3}
    m2 = {k: 1.0 if k == "output" else 0.0 for k in KINDS}
    (row,) = result["paired_comparison"]
    assert (row["model A"], row["label A"], row["model B"], row["label B"], row["tasks"],
            row["pass@1 A"], row["pass@1 B"], row["difference"]) == (
        "m1", LABEL, "m2", LABEL, 6, 0.5556, 0.1667, 0.3889)
    assert row["ci_low"] < 0.3889 < row["ci_high"]
    ids = sorted((t["task_id"], t["kind"]) for t in scored[1].values())
    expected = probability_a_beats_b(np.array([m1[k] for _, k in ids]),
                                     np.array([m2[k] for _, k in ids]), 10_000, seed=0)
    assert row["P(A beats B)"] == round(expected, 4) and row["P(A beats B)"] > 0.95


def test_by_difficulty(scored):
    _, _, result = scored
    steps = [r for r in result["by_difficulty"] if r["feature"] == "line_steps"]
    # f([1, 2, 3]) takes 12 line steps: the doubling bucket 8-15 (engine/scoring/_buckets.py)
    m1 = next(r for r in result["by_kind"] if r["model"] == "m1" and r["kind"] == "all")
    m2 = next(r for r in result["by_kind"] if r["model"] == "m2" and r["kind"] == "all")
    assert steps == [{"model": "m1", "label": LABEL, "feature": "line_steps", "bucket": "8-15",
                      "tasks": 6, "samples": 18, "pass@1": 0.5556,
                      "ci_low": m1["ci_low"], "ci_high": m1["ci_high"]},
                     {"model": "m2", "label": LABEL, "feature": "line_steps", "bucket": "8-15",
                      "tasks": 6, "samples": 18, "pass@1": 0.1667, "ci_low": 0.0,
                      "ci_high": 0.5}]
    nesting = [r for r in result["by_difficulty"] if r["feature"] == "loop_nesting"]
    assert sum(r["tasks"] for r in nesting if r["model"] == "m1") == 6


def test_model_filter_table_output_and_errors(scored, tmp_path):
    db, _, _ = scored
    tasks_file = db.parent / "tasks.jsonl"
    only = invoke("score", "--tasks", tasks_file, "--db", db, "--model", "m2", "--k", "1",
                  "--table", "kind", "--format", "csv", "--workers", 0)
    assert only.exit_code == 0, only.output
    lines = only.stdout.splitlines()
    assert lines[0] == ("model,label,kind,tasks,samples,pass@1,ci_low,ci_high,unparseable,"
                        "fully solved,unsolved,trace distance,trivial")
    assert lines[-1] == f"m2,{LABEL},all,6,18,0.1667,0.0,0.5,0.0,0.1667,0.8333,,"
    # by default one table: the summary, the "by kind" rows in fewer columns (pass@5 only
    # where a task has 5 samples: none here)
    summary = invoke("score", "--tasks", tasks_file, "--db", db, "--model", "m2",
                     "--format", "csv", "--workers", 0)
    assert summary.exit_code == 0, summary.output
    table = summary.stdout.splitlines()
    assert table[0] == "model,label,kind,tasks,pass@1,ci_low,ci_high,unparseable"
    assert table[1:] == [",".join(line.split(",")[i] for i in (0, 1, 2, 3, 5, 6, 7, 8))
                         for line in lines[1:]]
    # an empty table asked for by name: no table, a line saying why
    none = invoke("score", "--tasks", tasks_file, "--db", db, "--model", "m2",
                  "--table", "error", "--workers", 0)
    assert none.exit_code == 0 and none.stdout == ""
    assert "no error parts rows: no error tasks scored" in none.stderr
    every = invoke("score", "--tasks", tasks_file, "--db", db, "--table", "all", "--workers", 0)
    assert every.exit_code == 0
    titles = [t.strip() for t in re.findall(r"steptrace score: ([a-z ]+)", every.stdout)]
    # consistency (no chains), correlation and error parts have no rows: not printed
    assert titles == ["by kind", "by difficulty", "coverage", "paired comparison"]
    coverage = invoke("score", "--tasks", tasks_file, "--db", db, "--model", "m1", "--k", "1",
                      "--table", "coverage", "--format", "csv", "--workers", 0)
    assert coverage.exit_code == 0, coverage.output
    assert coverage.stdout.splitlines() == [
        "model,label,questions,tp,fp,fn,tn,precision,precision ci_low,precision ci_high,"
        "recall,recall ci_low,recall ci_high,f1,f1 ci_low,f1 ci_high",
        f"m1,{LABEL},3,3,0,0,0,1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.0"]
    missing = invoke("score", "--tasks", tasks_file, "--db", db, "--model", "m3")
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"Error: no predictions of model m3 for these tasks in {db}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x"}\n')
    broken = invoke("score", "--tasks", bad, "--db", db)
    assert broken.exit_code == 1 and broken.stderr.startswith(f"Error: {bad}:1: not a task record")
    neither = invoke("score", "--db", db)
    assert neither.exit_code == 2 and "give one of --tasks, --cruxeval" in neither.stderr
