"""``steptrace trace`` ends a run the guest proves to loop forever with status ``loops``
(stored with its trace up to there); ``--no-loop-detection`` lets it run to the step
limit; the flag goes with --db only."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from click.testing import CliRunner

from steptrace.cli._main import main

CYCLIC = "def f(xs):\n    while True:\n        xs.append(xs.pop(0))\n"


def test_trace_stores_loops_and_the_switch_turns_it_off(tmp_path: Path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "rotate", "code": CYCLIC, "input": "[1, 2, 3]"}) + "\n")
    found = {}
    for flags in ((), ("--no-loop-detection",)):
        db = tmp_path / f"store{len(flags)}.duckdb"
        result = CliRunner().invoke(main, ["trace", str(corpus), "--db", str(db), "--workers",
                                           "0", "--max-steps", "5000", "--quiet", *flags])
        assert result.exit_code == 0, result.output
        with duckdb.connect(str(db), read_only=True) as con:
            found[flags] = con.execute(
                "SELECT status, exception_message, line_steps FROM runs").fetchall()
    assert found[()] == [("loops", "the program loops forever: the complete state of f at "
                          "line 2 repeated (proved at backward jump 1456 of the run)", 2912)]
    assert found[("--no-loop-detection",)] == [("step_limit", "trace exceeds 5000 steps", 5000)]


def test_the_switch_goes_with_db(tmp_path: Path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "rotate", "code": CYCLIC, "input": "[1, 2, 3]"}) + "\n")
    result = CliRunner().invoke(main, ["trace", str(corpus), "--out", str(tmp_path / "shards"),
                                       "--no-loop-detection"])
    assert result.exit_code == 2
    assert "--no-loop-detection goes with --db" in result.output
