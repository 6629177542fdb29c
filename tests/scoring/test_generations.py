"""A store's predictions exported as CRUXEval generations (engine/scoring/_generations.py,
``steptrace export-generations``): the exact JSON, the one-line errors, and the round
trip: ``score-cruxeval`` on the exported file gives each prediction the verdict
``score`` gave it in the store, on programs traced here and on real CRUXEval samples.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from helpers.openai_stub import Reply, answer
from helpers.predict import predict_with_stub
from helpers.programs import LOOP  # f([1, 2, 3]) == 3, f([2]) == -1, f([3]) == 3

MODEL = "m1"
LABEL = "direct-t0.0-m2048"  # predict's default label


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def block(text: str) -> Reply:
    return answer(f"[ANSWER]\n{text}\n[/ANSWER]")


NO_ANSWER = answer("no idea at all")  # no answer found: unparseable
FAILED = Reply(400, message="bad request")  # a request that fails: stored with its error


def traced_with_predictions(root: Path, records: list[dict], replies) -> tuple[Path, Path]:
    corpus, db, tasks_file = root / "corpus.jsonl", root / "s.duckdb", root / "tasks.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    traced = invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet")
    assert traced.exit_code == 0, traced.output
    made = invoke("tasks", "--db", db, "--kinds", "input,output", "--per-run", 1, "--out",
                  tasks_file)
    assert made.exit_code == 0, made.output
    predict_with_stub(tasks_file, db, replies, model=MODEL, samples=3)
    return db, tasks_file


def loop_replies(task: dict) -> list[Reply]:
    question = json.loads(task["question"])
    if task["kind"] == "input":
        return {"3": [block("[1, 2, 3]"), block("[2]"), NO_ANSWER],       # right, wrong, none
                # right, -, refused (not safe arguments: the harness would pass it)
                "-1": [block("[2]"), FAILED, block("[3]) or True or ([3]")]}[question["output"]]
    return {"[1, 2, 3]": [block("3"), block("4"), NO_ANSWER],            # right, wrong, none
            # right x2, refused (no literal: `assert f([2]) == 0 or -1` passes)
            "[2]": [block("-1"), block("-1"), block("0 or -1")]}[question["input"]]


@pytest.fixture(scope="module")
def loop_store(tmp_path_factory) -> tuple[Path, Path]:
    """LOOP traced as sample "loop3" on [1, 2, 3] and "loop2" on [2], an input and an
    output task of each, three predictions each (one request of them fails)."""
    root = tmp_path_factory.mktemp("generations")
    records = [{"id": "loop3", "code": LOOP, "input": "[1, 2, 3]"},
               {"id": "loop2", "code": LOOP, "input": "[2]"}]
    return traced_with_predictions(root, records, loop_replies)


EXPECTED = {
    "input": '{"loop3": ["f([1, 2, 3])", "f([2])", ""], "loop2": ["f([2])", ""]}',
    "output": '{"loop3": ["3", "4", ""], "loop2": ["-1", "-1", ""]}',
}


@pytest.mark.parametrize("mode", ["input", "output"])
def test_the_exported_file_is_the_official_format(loop_store, tmp_path, mode):
    db, _ = loop_store
    out = tmp_path / f"{mode}.json"
    result = invoke("export-generations", "--db", db, "--model", MODEL, "--mode", mode,
                    "--out", out, "--format", "json")
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == EXPECTED[mode]
    assert json.loads(result.stdout) == {
        "out": str(out), "model": MODEL, "label": LABEL, "mode": mode, "samples": 2,
        "generations": 5 if mode == "input" else 6, "unparseable": 1, "refused": 1,
        "failed_requests": 1 if mode == "input" else 0, "samples_left_out": 0}
    # the same with the label given, and the item/value table
    again = invoke("export-generations", "--db", db, "--model", MODEL, "--label", LABEL,
                   "--mode", mode, "--out", out)
    assert again.exit_code == 0, again.output
    assert "unparseable" in again.stdout and out.read_text(encoding="utf-8") == EXPECTED[mode]


def test_export_errors_are_one_line(loop_store, tmp_path):
    db, _ = loop_store
    out = tmp_path / "g.json"
    cases = [
        (("--model", "nobody", "--mode", "input", "--out", out),
         f"Error: no predictions of model nobody in {db}"),
        (("--model", MODEL, "--label", "other", "--mode", "input", "--out", out),
         f"Error: no predictions of model {MODEL} with label other in {db} (labels: {LABEL})"),
        (("--model", MODEL, "--mode", "input", "--out", tmp_path / "none" / "g.json"),
         f"Error: cannot write {tmp_path / 'none' / 'g.json'}: no directory "
         f"{tmp_path / 'none'}"),
    ]
    for args, message in cases:
        result = invoke("export-generations", "--db", db, *args)
        assert result.exit_code == 1, result.output
        assert result.stdout == "" and result.stderr.strip() == message
    assert not out.exists()


def test_two_runs_of_one_sample_cannot_be_written(tmp_path):
    """The format has one list per sample id: two runs (two inputs) of one id are refused."""
    records = [{"id": "twice", "code": LOOP, "inputs": ["[1, 2, 3]", "[2]"]}]
    db, _ = traced_with_predictions(tmp_path, records, loop_replies)
    result = invoke("export-generations", "--db", db, "--model", MODEL, "--mode", "output",
                    "--out", tmp_path / "g.json")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"Error: sample twice has more than one output task in {db} (several runs of one "
        "sample id): CRUXEval's generations format holds one task per sample")


def store_verdicts(db: Path, mode: str) -> dict[str, list[bool]]:
    """``score``'s verdicts of the mode's predictions, per sample id, by sample index (the
    failed requests have none)."""
    with duckdb.connect(str(db), read_only=True) as con:
        found = con.execute(
            "SELECT r.sample_id, s.sample_index, s.correct FROM scores s JOIN tasks t "
            "USING (task_id) JOIN runs r ON r.run_id = t.run_id WHERE t.kind = ? AND "
            "s.model = ? ORDER BY r.run_id, s.sample_index", [mode, MODEL]).fetchall()
    verdicts: dict[str, list[bool]] = {}
    for sample_id, _, correct in found:
        verdicts.setdefault(sample_id, []).append(correct)
    return verdicts


def round_trip(db: Path, tasks_file: Path, data: Path, tmp: Path) -> None:
    scored = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 0, "--quiet")
    assert scored.exit_code == 0, scored.output
    for mode in ("input", "output"):
        out = tmp / f"{mode}.json"
        exported = invoke("export-generations", "--db", db, "--model", MODEL, "--mode", mode,
                          "--out", out)
        assert exported.exit_code == 0, exported.output
        official = tmp / f"{mode}-scored.json"
        crux = invoke("score-cruxeval", out, "--mode", mode, "--data", data, "--workers", 0,
                      "--quiet", "--out", official, "--format", "json")
        assert crux.exit_code == 0, crux.output
        from steptrace.scoring._cruxeval import load_samples, score_samples
        samples = load_samples(data)
        result = score_samples(samples, json.loads(out.read_text()), mode, workers=0)
        per_generation = {s.sample_id: [o == "ok" for o in s.outcomes] for s in result.samples}
        assert per_generation == store_verdicts(db, mode), mode
        assert json.loads(official.read_text())["raw_generations"] == json.loads(out.read_text())


def test_round_trip_gives_score_verdicts(loop_store, tmp_path):
    db, tasks_file = loop_store
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "loop3", "code": LOOP, "input": "[1, 2, 3]",
                                "output": "3"}) + "\n" +
                    json.dumps({"id": "loop2", "code": LOOP, "input": "[2]",
                                "output": "-1"}) + "\n")
    round_trip(db, tasks_file, data, tmp_path)
    assert store_verdicts(db, "input") == {"loop3": [True, False, False],
                                           "loop2": [True, False]}


def test_round_trip_on_cruxeval_samples(tmp_path, cruxeval_path):
    """Six real CRUXEval samples: each one's own input/output is right, the next sample's
    is (almost always) wrong, and the round trip agrees on every prediction."""
    records = [json.loads(line) for line in cruxeval_path.read_text().splitlines()[:6]]
    by_input = {r["input"]: i for i, r in enumerate(records)}
    by_output = {r["output"]: i for i, r in enumerate(records)}

    def replies(task: dict) -> list[Reply]:
        question = json.loads(task["question"])
        if task["kind"] == "input":
            i = by_output[question["output"]]
            return [block(records[i]["input"]), block(records[(i + 1) % 6]["input"]), NO_ANSWER]
        i = by_input[question["input"]]
        return [block(records[i]["output"]), block(records[(i + 1) % 6]["output"]), NO_ANSWER]

    db, tasks_file = traced_with_predictions(tmp_path, records, replies)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    round_trip(db, tasks_file, data, tmp_path)
    verdicts = store_verdicts(db, "output")
    assert [v[0] for v in verdicts.values()] == [True] * 6
    assert [v[2] for v in verdicts.values()] == [False] * 6
