"""What ``predict`` refuses before its first request, and what a failed run leaves: tasks
made from another store's runs are refused in one line before anything is asked or
stored (the real stub server on 127.0.0.1 counts the requests); a run the server stops
(unreachable, 404) leaves no experiment that holds no prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steptrace.errors import InputError, PredictError
from steptrace.predictions._predict import PredictOptions, predict
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.cli import assert_one_line_error, rows
from helpers.openai_stub import StubServer, answer
from helpers.predict import MODEL, closed_port, invoke
from helpers.sample_corpus import RECORDS

OTHER = [{"id": f"o{i}", "code": "def f(x):\n    y = x * 3\n    return y + 1\n",
          "input": str(i)} for i in range(8)]
FAST = {"timeout_s": 2.0, "max_retries": 0, "concurrency": 2}


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The sample corpus traced into ``mine`` (and its tasks written), the same corpus
    file traced into ``twin``, another corpus (more runs, other jobs) into ``other``."""
    tmp = tmp_path_factory.mktemp("checks")
    corpus = write(tmp / "small.jsonl", RECORDS)
    found = {}
    for name, source in (("mine", corpus), ("twin", corpus),
                         ("other", write(tmp / "other.jsonl", OTHER))):
        found[name] = tmp / f"{name}.duckdb"
        trace_corpus(source, found[name], TraceOptions(workers=0))
    out = tmp / "tasks.jsonl"
    generate_tasks(found["mine"], TaskOptions(kinds=("output", "state", "steps"), out=out))
    found["tasks"] = out
    return found


def tasks_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def right_answers(tasks: list[dict]) -> dict:
    return {t["task_id"]: answer(f"[ANSWER]\n{t['answer']}\n[/ANSWER]") for t in tasks}


def serve(tasks: list[dict]) -> StubServer:
    return StubServer(right_answers(tasks), key_of={t["prompt"]: t["task_id"]
                                                    for t in tasks}.get)


def copy_of(db: Path, target: Path) -> Path:
    target.write_bytes(db.read_bytes())
    return target


def test_tasks_of_another_store_are_refused_before_any_request(stores, tmp_path):
    tasks = tasks_of(stores["tasks"])
    first = tasks[0]
    db = copy_of(stores["other"], tmp_path / "other.duckdb")
    with serve(tasks) as server:
        result = invoke("predict", "--tasks", stores["tasks"], "--model", MODEL,
                        "--base-url", server.base_url, "--db", db)
    assert_one_line_error(result, f"task {first['task_id']} is not about run "
                                  f"{first['run_id']} of {db} (that run is another job): the "
                                  "tasks were made from another store (predict with the --db "
                                  "they were made from)")
    assert server.requests == {}
    assert rows(db, "SELECT count(*) FROM information_schema.tables WHERE table_name IN "
                    "('predictions', 'experiments')") == [(0,)]


def test_a_run_the_store_lacks_is_refused(stores, tmp_path):
    tasks = tasks_of(stores["tasks"])
    last = max(tasks, key=lambda t: t["run_id"])
    db = tmp_path / "part.duckdb"
    trace_corpus(write(tmp_path / "small.jsonl", RECORDS[:2]), db, TraceOptions(workers=0))
    assert rows(db, "SELECT max(run_id) FROM runs") == [(3,)]
    late = [t for t in tasks if t["run_id"] > 3]
    assert late and last["run_id"] == 6
    with serve(tasks) as server, pytest.raises(InputError) as caught:
        predict(stores["tasks"], db, PredictOptions(MODEL, server.base_url, **FAST))
    assert str(caught.value) == (
        f"task {late[0]['task_id']} is about run {late[0]['run_id']}, which {db} does not "
        "hold: the tasks were made from another store (predict with the --db they were "
        "made from)")
    assert server.requests == {}


def test_no_store_is_refused_and_none_is_made(stores, tmp_path):
    db = tmp_path / "missing.duckdb"
    first = tasks_of(stores["tasks"])[0]
    with pytest.raises(InputError) as caught:
        predict(stores["tasks"], db, PredictOptions(MODEL, "http://127.0.0.1:9/v1", **FAST))
    assert str(caught.value) == (f"task {first['task_id']} is about run {first['run_id']}, "
                                 f"but there is no store {db}: predict with the --db the "
                                 "tasks were made from")
    assert not db.exists()


@pytest.mark.parametrize("field,value", [("run_id", 4), ("line", 99), ("var", "zz"),
                                         ("occurrence", 2), ("kind", "steps"),
                                         ("question", '{"func": "g"}')])
def test_a_record_whose_id_is_not_its_question_is_refused(stores, tmp_path, field, value):
    """A record whose run, line, variable, occurrence, kind or question was changed no
    longer has the id the store's run gives it."""
    task = next(t for t in tasks_of(stores["tasks"]) if t["kind"] == "state")
    forged = {**task, field: value}
    path = write(tmp_path / "forged.jsonl", [forged])
    with pytest.raises(InputError) as caught:
        predict(path, stores["mine"], PredictOptions(MODEL, "http://127.0.0.1:9/v1", **FAST))
    assert str(caught.value) == (
        f"task {task['task_id']} is not about run {forged['run_id']} of {stores['mine']} "
        "(that run is another job): the tasks were made from another store (predict with "
        "the --db they were made from)")


@pytest.mark.parametrize("field,value,message", [
    ("run_id", "1", "field 'run_id' must be an integer >= 0"),
    ("run_id", True, "field 'run_id' must be an integer >= 0"),
    ("line", -1, "field 'line' must be an integer >= 0"),
    ("var", 3, "field 'var' must be a string"),
    ("question", "[1]", "field 'question' must be the JSON text of an object"),
    ("question", "{", "field 'question' must be the JSON text of an object"),
])
def test_bad_run_fields_are_refused(stores, tmp_path, field, value, message):
    task = tasks_of(stores["tasks"])[0]
    path = write(tmp_path / "bad.jsonl", [{**task, field: value}])
    with pytest.raises(InputError) as caught:
        predict(path, stores["mine"], PredictOptions(MODEL, "http://127.0.0.1:9/v1", **FAST))
    assert str(caught.value) == f"{path}:1: {message}"


def test_the_same_corpus_traced_again_is_the_same_runs(stores, tmp_path):
    """Another store of the same corpus file holds the same jobs under the same ids: its
    runs are the tasks' runs, and they are asked."""
    tasks = tasks_of(stores["tasks"])
    db = copy_of(stores["twin"], tmp_path / "twin.duckdb")
    with serve(tasks) as server:
        summary = predict(stores["tasks"], db, PredictOptions(MODEL, server.base_url, **FAST))
    assert (summary.requests, summary.unparseable) == (len(tasks), 0)
    assert rows(db, "SELECT count(*) FROM predictions") == [(len(tasks),)]


def test_records_naming_no_run_are_not_checked(tmp_path):
    """Prompts written by hand (no run_id) name no run of any store: asked as they are."""
    path = write(tmp_path / "hand.jsonl", [{"task_id": "h1", "kind": "output",
                                            "prompt": "What is 1 + 1?"}])
    db = tmp_path / "hand.duckdb"
    with StubServer({"h1": answer("[ANSWER] 2 [/ANSWER]")},
                    key_of={"What is 1 + 1?": "h1"}.get) as server:
        summary = predict(path, db, PredictOptions(MODEL, server.base_url, **FAST))
    assert summary.requests == 1
    assert rows(db, "SELECT task_id, answer FROM predictions") == [("h1", "2")]


def experiments(db: Path) -> list[tuple]:
    return rows(db, "SELECT model, label FROM experiments ORDER BY ALL")


@pytest.mark.parametrize("case", ["unreachable", "404"])
def test_a_failed_run_leaves_no_experiment(stores, tmp_path, case):
    tasks = tasks_of(stores["tasks"])
    db = copy_of(stores["mine"], tmp_path / "mine.duckdb")
    if case == "unreachable":
        url = f"http://127.0.0.1:{closed_port()}/v1"
        with pytest.raises(PredictError) as caught:
            predict(stores["tasks"], db, PredictOptions(MODEL, url, **FAST))
        assert str(caught.value) == (f"cannot reach {url}: connection refused; stopped with 0 "
                                     "new predictions stored (run again to resume)")
    else:
        with serve(tasks) as server, pytest.raises(PredictError) as caught:
            predict(stores["tasks"], db, PredictOptions("no-such-model", server.base_url,
                                                        **FAST))
        assert str(caught.value).startswith("model 'no-such-model' not found at ")
    assert experiments(db) == []
    assert rows(db, "SELECT count(*) FROM predictions") == [(0,)]


def test_experiments_that_hold_predictions_stay(stores, tmp_path):
    """A run stores its experiment with its first answers; a later run of it that fails
    keeps it; a --redo run that deleted its predictions and then failed leaves none."""
    tasks = tasks_of(stores["tasks"])
    db = copy_of(stores["mine"], tmp_path / "mine.duckdb")
    with serve(tasks) as server:
        predict(stores["tasks"], db, PredictOptions(MODEL, server.base_url, label="run",
                                                    **FAST))
    assert experiments(db) == [(MODEL, "run")]
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(PredictError):
        predict(stores["tasks"], db, PredictOptions(MODEL, url, label="run", samples=2, **FAST))
    assert experiments(db) == [(MODEL, "run")]
    assert rows(db, "SELECT count(*) FROM predictions") == [(len(tasks),)]
    with pytest.raises(PredictError):
        predict(stores["tasks"], db, PredictOptions(MODEL, url, label="run", redo=True,
                                                    **FAST))
    assert experiments(db) == []
    assert rows(db, "SELECT count(*) FROM predictions") == [(0,)]
