"""inspect_ai over steptrace tasks: ``inspect_ai.eval`` of steptrace_tasks with inspect's
openai-api provider pointed at a real server on 127.0.0.1, each sample judged by
steptrace's judges (an input answer run in the sandbox): the same verdicts as ``predict``
and ``score`` give the same responses."""

from __future__ import annotations

import json

from inspect_ai import eval as inspect_eval

from helpers.cli import invoke
from helpers.openai_stub import StubServer, answer
from helpers.processes import write_jsonl
from steptrace.scoring._inspect import steptrace_tasks

ADD = "def f(a, b):\n    return a + b\n"
DOUBLE = "def f(x):\n    return x * 2\n"


def test_inspect_eval_over_steptrace_tasks(tmp_path, monkeypatch):
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "add", "code": ADD, "input": "1, 2", "output": "3"},
        {"id": "double", "code": DOUBLE, "input": "4", "output": "8"}])
    db = tmp_path / "s.duckdb"
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    tasks = tmp_path / "tasks.jsonl"
    assert invoke("tasks", "--db", db, "--kinds", "output,input", "--out", tasks).exit_code == 0
    records = [json.loads(line) for line in tasks.read_text().splitlines()]
    assert sorted((r["sample_id"], r["kind"]) for r in records) == [
        ("add", "input"), ("add", "output"), ("double", "input"), ("double", "output")]
    # right: add's output, double's input (any input giving 8: 4); wrong: the others
    responses = {("add", "output"): "[ANSWER]3[/ANSWER]",
                 ("add", "input"): "[ANSWER]0, 0[/ANSWER]",
                 ("double", "output"): "[ANSWER]9[/ANSWER]",
                 ("double", "input"): "It is f(4).\n[ANSWER]4[/ANSWER]"}
    by_prompt = {r["prompt"]: r["task_id"] for r in records}
    script = {r["task_id"]: answer(responses[r["sample_id"], r["kind"]]) for r in records}

    def key_of(prompt: str) -> str | None:
        return next((task_id for text, task_id in by_prompt.items() if text in prompt), None)

    with StubServer(script, key_of=key_of) as server:
        monkeypatch.setenv("STUB_BASE_URL", server.base_url)
        monkeypatch.setenv("STUB_API_KEY", "none")
        logs = inspect_eval(steptrace_tasks(tasks=str(tasks), db=str(db)),
                            model="openai-api/stub/stub-model", log_dir=str(tmp_path / "logs"),
                            display="none", max_connections=1)
        log, = logs
        assert log.status == "success", log.error
        assert sorted(server.requests.values()) == [1, 1, 1, 1]
        # the same responses through predict and score
        asked = invoke("predict", "--tasks", tasks, "--model", "stub-model", "--base-url",
                       server.base_url, "--db", db, "--quiet")
        assert asked.exit_code == 0, asked.output
    verdicts = {(sample.metadata["kind"], sample.id): sample.scores["steptrace_judge"]
                for sample in log.samples}
    by_task = {r["task_id"]: (r["sample_id"], r["kind"]) for r in records}
    assert {by_task[task_id]: score.value for (_, task_id), score in verdicts.items()} == {
        ("add", "output"): "C", ("add", "input"): "I", ("double", "output"): "I",
        ("double", "input"): "C"}
    assert log.results.scores[0].metrics["accuracy"].value == 0.5
    scored = invoke("score", "--tasks", tasks, "--db", db, "--workers", 0, "--format", "json")
    assert scored.exit_code == 0, scored.output
    stored = {row["task_id"]: row["correct"] for row in json.loads(invoke(
        "sql", "SELECT task_id, correct FROM scores", "--db", db, "--format", "json").stdout)}
    assert {by_task[task_id]: ("C" if correct else "I") for task_id, correct in stored.items()
            } == {by_task[task_id]: score.value for (_, task_id), score in verdicts.items()}
    # each score carries the judge's result: the task's kind among it
    assert {by_task[task_id]: score.metadata["kind"] for (_, task_id), score
            in verdicts.items()} == {key: key[1] for key in responses}
