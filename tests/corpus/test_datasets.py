"""Hugging Face datasets and pandas: a corpus read from a Dataset saved with
save_to_disk, from Parquet in the Hub's layout, from a pandas DataFrame and a Dataset in
memory, each the same jobs as the JSONL file; tasks read from their Parquet file and a
saved Dataset; the store written back as a dataset with its card (export-dataset), loaded
with datasets.load_dataset and traced again: the same runs."""

from __future__ import annotations

import json

import datasets
import pandas as pd
import pytest

import steptrace as st
from helpers.cli import assert_one_line_error, invoke
from helpers.processes import write_jsonl
from helpers.sample_corpus import ADD, BOOM, SQUARE

RECORDS = [{"id": "add", "code": ADD, "input": "1, 2", "output": "3"},
           {"id": "sq", "code": SQUARE, "input": "3", "output": "9"},
           {"id": "sq4", "code": SQUARE, "input": "4", "output": None},
           {"id": "boom", "code": BOOM, "input": "0", "output": "1"}]
RUNS = "SELECT run_id, sample_id, input, status, output, expected, n_steps, run_key FROM runs ORDER BY run_id"


def runs(db) -> list:
    return json.loads(invoke("sql", RUNS, "--db", db, "--format", "json").stdout)


def content(rows: list) -> list:
    """The runs without their key (which holds the corpus's name)."""
    return [{k: v for k, v in row.items() if k != "run_key"} for row in rows]


@pytest.fixture
def reference(tmp_path):
    """The records as a JSONL corpus named corpus.jsonl, traced."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {k: v for k, v in r.items() if v is not None} for r in RECORDS])
    db = tmp_path / "reference.duckdb"
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    return runs(db)


def test_a_corpus_from_datasets_and_pandas(tmp_path, reference):
    dataset = datasets.Dataset.from_list(RECORDS)
    saved = tmp_path / "saved"
    dataset.save_to_disk(str(saved))
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    dataset.to_parquet(str(hub / "data" / "test-00000-of-00001.parquet"))
    found = {}
    for name, corpus in (("saved", saved), ("hub", hub),
                         ("parquet", hub / "data" / "test-00000-of-00001.parquet")):
        db = tmp_path / f"{name}.duckdb"
        traced = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "json")
        assert traced.exit_code == 0, traced.output
        assert json.loads(traced.stdout)["jobs"] == 4
        found[name] = runs(db)
    for name, corpus in (("pandas", pd.DataFrame(RECORDS)), ("dataset", dataset)):
        db = tmp_path / f"{name}.duckdb"
        summary = st.trace(corpus, db, workers=0, name="corpus.jsonl")
        assert (summary.jobs, summary.traced, summary.corpus_errors) == (4, 4, [])
        found[name] = runs(db)
    # in memory under the file's name: the very jobs (keys too); on disk, the same runs
    assert found["pandas"] == found["dataset"] == reference
    assert {name: content(rows) for name, rows in found.items()} == {
        name: content(reference) for name in found}
    assert [row["output"] for row in reference] == ["3", "9", "16", None]


def test_what_is_not_one_corpus(tmp_path):
    """A DatasetDict (in memory or saved), a Hub directory of two splits: one line each,
    naming the splits; a DataFrame of other columns is a file that is not a corpus."""
    splits = datasets.DatasetDict({"test": datasets.Dataset.from_list(RECORDS),
                                   "train": datasets.Dataset.from_list(RECORDS)})
    db = tmp_path / "s.duckdb"
    with pytest.raises(st.InputError) as info:
        st.trace(splits, db, workers=0)
    assert str(info.value) == ("a DatasetDict holds the splits test, train: give one of them "
                               "(dataset['test'])")
    splits.save_to_disk(str(tmp_path / "dict"))
    assert_one_line_error(invoke("trace", tmp_path / "dict", "--db", db), (
        f"{tmp_path / 'dict'} is a DatasetDict saved with save_to_disk (splits test, train): "
        f"give one split's directory ({tmp_path / 'dict' / 'test'})"))
    (tmp_path / "hub" / "data").mkdir(parents=True)
    for split in ("test", "train"):
        splits[split].to_parquet(str(tmp_path / "hub" / "data" / f"{split}-00000-of-00001.parquet"))
    assert_one_line_error(invoke("trace", tmp_path / "hub", "--db", db), (
        f"{tmp_path / 'hub' / 'data'} holds the splits test, train: give one split's file "
        f"({tmp_path / 'hub' / 'data' / 'test-00000-of-00001.parquet'})"))
    with pytest.raises(st.InputError) as info:
        st.trace(pd.DataFrame([{"task_id": "t", "prompt": "p"}] * 6), db, workers=0)
    assert str(info.value).startswith("<memory>: none of its first 5 records is a corpus "
                                      "record (<memory> record 1: missing 'code')")
    assert not db.exists()


def test_tasks_and_the_store_as_a_dataset_round_trip(tmp_path, reference):
    """load (a saved Dataset), trace, tasks, save (export-dataset), load again: the corpus
    config traces to the same runs, the tasks config is the tasks table, and a tasks
    Parquet file and a saved Dataset of tasks are predicted as the JSONL is."""
    source = tmp_path / "source"
    datasets.Dataset.from_list(RECORDS).save_to_disk(str(source))
    db = tmp_path / "s.duckdb"
    assert invoke("trace", source, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    tasks = tmp_path / "tasks.jsonl"
    made = invoke("tasks", "--db", db, "--kinds", "output,steps", "--out", tasks)
    assert made.exit_code == 0, made.output
    out = tmp_path / "dataset"
    exported = invoke("export-dataset", "--db", db, "--out", out, "--tables",
                      "corpus,tasks,runs", "--name", "demo", "--format", "csv")
    assert (exported.exit_code, exported.stdout) == (0, (
        "config,rows\ncorpus,4\ntasks,7\nruns,4\nruns left out of corpus,0\n"))
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\nconfigs:\n- config_name: corpus\n  data_files:\n  - split: "
                             "train\n    path: corpus/*.parquet\n- config_name: tasks\n")
    assert "# demo" in readme and "| `tasks` | 7 |" in readme
    corpus = datasets.load_dataset(str(out), "corpus", split="train")
    assert corpus.to_list() == [{"id": r["id"], "code": r["code"], "entry": "f",
                                 "input": r["input"], "output": r["output"]} for r in RECORDS]
    again = tmp_path / "again.duckdb"
    st.trace(corpus, again, workers=0, name="corpus.jsonl")
    assert runs(again) == reference
    loaded = datasets.load_dataset(str(out), "tasks", split="train")
    table = json.loads(invoke("sql", "SELECT task_id, kind, answer, prompt FROM tasks ORDER BY "
                              "run_id, task_id", "--db", db, "--format", "json").stdout)
    assert [{k: row[k] for k in ("task_id", "kind", "answer", "prompt")}
            for row in loaded.to_list()] == table
    # predict reads tasks from their Parquet file (tasks --out) and from a saved Dataset
    lines = [json.loads(line) for line in tasks.read_text().splitlines()]
    loaded.save_to_disk(str(tmp_path / "saved-tasks"))
    from helpers.openai_stub import StubServer, answer
    with StubServer({}, default=answer("[ANSWER]3[/ANSWER]"),
                    key_of=lambda prompt: "x") as server:
        for given in (tasks, tasks.with_suffix(".parquet"), tmp_path / "saved-tasks"):
            asked = invoke("predict", "--tasks", given, "--model", "stub-model", "--base-url",
                           server.base_url, "--db", db, "--label", given.name, "--quiet",
                           "--format", "json")
            assert asked.exit_code == 0, asked.output
            assert json.loads(asked.stdout)["tasks"] == len(lines) == 7
    scored = invoke("score", "--tasks", tasks.with_suffix(".parquet"), "--db", db,
                    "--workers", 0, "--format", "json")
    assert scored.exit_code == 0, scored.output
    # the three experiments asked the same prompts: the same verdicts
    by_label = json.loads(invoke("sql", "SELECT label, count(*) FILTER (WHERE correct) AS right "
                                 "FROM scores GROUP BY label ORDER BY label", "--db", db,
                                 "--format", "json").stdout)
    assert len({row["right"] for row in by_label}) == 1 and len(by_label) == 3


def test_tasks_in_a_pandas_frame(tmp_path, reference):
    """st.predict takes the tasks as a pandas DataFrame (a missing cell is None, as in the
    JSONL): the same tasks as the file."""
    db = tmp_path / "s.duckdb"
    corpus = write_jsonl(tmp_path / "c.jsonl", [{k: v for k, v in r.items() if v is not None}
                                                for r in RECORDS])
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    tasks = tmp_path / "tasks.jsonl"
    assert invoke("tasks", "--db", db, "--kinds", "output", "--out", tasks).exit_code == 0
    frame = pd.read_json(tasks, lines=True, dtype=False)
    from steptrace.predictions._predict import load_tasks
    assert load_tasks(frame) == load_tasks(tasks)
