"""Predictions end to end against a real OpenAI-compatible HTTP server on 127.0.0.1
(tests/helpers/openai_stub.py): stored rows and parsed answers, the client's retries, timeouts,
fatal errors as one line, a server killed mid-run and the resumed run, samples, and
answer extraction."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from steptrace.tasks._answers import extract_answer
from steptrace.cli._main import main
from steptrace.predictions._predict import PredictOptions, predict
from helpers.openai_stub import Reply, StubServer, answer
from helpers.cli import assert_one_line_error, new_store, rows
from helpers.predict import MODEL, closed_port, invoke, prompt_of  # noqa: F401

# Short client timeout vs a 2 s slow reply; one retry keeps the retried cases quick.
FAST = {"timeout_s": 0.5, "max_retries": 1, "concurrency": 4}


def write_tasks(path: Path, tasks: list[tuple[str, str, str]]) -> Path:
    """(task_id, kind, prompt_style) → a tasks JSONL with the fields predict reads."""
    path.write_text("".join(json.dumps({"task_id": t, "kind": k, "prompt": prompt_of(t),
                                        "prompt_style": s, "answer": "unused"}) + "\n"
                            for t, k, s in tasks), encoding="utf-8")
    return path


# ------------------------------------------------------------------ the table of replies
# task_id: (kind, prompt style, scripted replies,
#           expected (answer, parsed, error prefix, finish_reason, completion tokens), requests)
TABLE = {
    "right": ("output", "direct", answer("I think so.\n[ANSWER]\n'abc'\n[/ANSWER]"),
              ("'abc'", True, None, "stop", 6), 1),
    "wrong": ("state", "cot", answer("[ANSWER] 41 [/ANSWER]"),
              ("41", True, None, "stop", 3), 1),
    "garbage": ("output", "direct", answer("I cannot tell what this returns."),
                (None, False, None, "stop", 6), 1),
    "crux_out": ("output", "cruxeval", answer("assert f('a)', [1, 2]) == 'x == y'"),
                 ("'x == y'", True, None, "stop", 8), 1),
    "crux_in": ("input", "cruxeval", answer("[ANSWER]\nassert f(g(1, (2, 3)), k='))') == 5\n"
                                            "[/ANSWER]"),
                ("g(1, (2, 3)), k='))'", True, None, "stop", 9), 1),
    "fenced": ("trace", "direct", answer("```python\n[(1, 0), (2, 0)]\n```"),
               ("[(1, 0), (2, 0)]", True, None, "stop", 6), 1),
    "cut": ("next_line", "cot", answer("so it leaves. [ANSWER] return", finish_reason="length"),
            ("return", True, None, "length", 5), 1),
    "rate": ("coverage", "direct",
             [Reply(429, headers={"Retry-After": "0.2"}), answer("[ANSWER] yes [/ANSWER]")],
             ("yes", True, None, "stop", 3), 2),
    "flaky": ("line_count", "direct", [Reply(500), answer("[ANSWER] 3 [/ANSWER]")],
              ("3", True, None, "stop", 3), 2),
    "slow": ("output", "direct", answer("[ANSWER] 1 [/ANSWER]", delay_s=2.0),
             (None, False, "APITimeoutError: Request timed out.", None, None), 2),
}
SCRIPT = {task_id: entry[2] for task_id, entry in TABLE.items()}
TASKS = [(task_id, entry[0], entry[1]) for task_id, entry in TABLE.items()]
ROWS_SQL = ("SELECT task_id, sample_index, kind, answer, parsed, error, finish_reason, "
            "prompt_tokens, completion_tokens FROM predictions ORDER BY task_id, sample_index")


def expected_row(task_id: str) -> tuple:
    kind, _, _, (answer_text, parsed, error, finish, completion), _ = TABLE[task_id]
    return (task_id, 0, kind, answer_text, parsed, error, finish,
            None if error else 5, completion)


def test_predict_stores_every_reply_of_the_table(tmp_path):
    """Each scripted reply gives exactly the expected row; 429 and 500 are retried by the
    client (2 requests each); the slow reply times out twice and is stored as an error."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS)
    db = tmp_path / "p.duckdb"
    with StubServer(SCRIPT) as server:
        summary = predict(tasks, db, PredictOptions(MODEL, server.base_url, temperature=0.7,
                                                    max_tokens=64, **FAST))
    assert rows(db, ROWS_SQL) == [expected_row(t) for t in sorted(TABLE)]
    assert dict(server.requests) == {t: entry[4] for t, entry in TABLE.items()}
    body = server.bodies["right"]
    assert (body["model"], body["temperature"], body["max_tokens"], body["messages"]) == (
        MODEL, 0.7, 64, [{"role": "user", "content": prompt_of("right")}])
    assert rows(db, "SELECT DISTINCT model FROM predictions") == [(MODEL,)]
    assert rows(db, "SELECT count(*) FROM predictions WHERE latency_ms > 0 "
                    "AND created_at IS NOT NULL") == [(10,)]
    assert rows(db, "SELECT raw_text FROM predictions WHERE task_id = 'garbage'") == [
        ("I cannot tell what this returns.",)]
    result = summary.as_dict()
    assert isinstance(result.pop("seconds"), float)
    assert result == {"tasks_file": str(tasks), "db": str(db), "model": MODEL,
                      "label": "cot+cruxeval+direct-t0.7-m64", "tasks": 10, "samples": 1,
                      "pairs": 10, "deleted": 0, "skipped": 0, "requests": 10, "errors": 1,
                      "unparseable": 1, "prompt_tokens": 45, "completion_tokens": 49,
                      "not_asked": 0}


def test_rerun_retries_only_the_error_rows_and_replaces_them(tmp_path):
    """A re-run asks again only for the pair stored with an error, and replaces its row."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS)
    db = tmp_path / "p.duckdb"
    with StubServer(SCRIPT) as server:
        predict(tasks, db, PredictOptions(MODEL, server.base_url, **FAST))
    with StubServer({**SCRIPT, "slow": answer("[ANSWER] 1 [/ANSWER]")}) as server:
        summary = predict(tasks, db, PredictOptions(MODEL, server.base_url, **FAST))
    assert dict(server.requests) == {"slow": 1}
    assert (summary.skipped, summary.requests, summary.errors) == (9, 1, 0)
    assert rows(db, ROWS_SQL) == [
        ("slow", 0, "output", "1", True, None, "stop", 5, 3) if t == "slow" else expected_row(t)
        for t in sorted(TABLE)]


def test_predictions_table_schema(tmp_path):
    """The predictions and experiments tables' columns and types (a public contract, like
    the store's)."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [("right", "output", "direct")])
    db = tmp_path / "p.duckdb"
    with StubServer(SCRIPT) as server:
        predict(tasks, db, PredictOptions(MODEL, server.base_url, **FAST))
    assert rows(db, "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = 'predictions' ORDER BY ordinal_position") == [
        ("task_id", "VARCHAR"), ("model", "VARCHAR"), ("label", "VARCHAR"),
        ("sample_index", "INTEGER"), ("kind", "VARCHAR"), ("prompt_style", "VARCHAR"),
        ("prompt_sha256", "VARCHAR"), ("raw_text", "VARCHAR"), ("answer", "VARCHAR"),
        ("parsed", "BOOLEAN"), ("prompt_tokens", "BIGINT"), ("completion_tokens", "BIGINT"),
        ("latency_ms", "DOUBLE"), ("error", "VARCHAR"), ("finish_reason", "VARCHAR"),
        ("created_at", "TIMESTAMP")]
    assert rows(db, "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = 'experiments' ORDER BY ordinal_position") == [
        ("model", "VARCHAR"), ("label", "VARCHAR"), ("prompt_style", "VARCHAR"),
        ("system_prompt", "VARCHAR"), ("temperature", "DOUBLE"), ("top_p", "DOUBLE"),
        ("max_tokens", "INTEGER"), ("created_at", "TIMESTAMP")]
    assert rows(db, "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
                    "WHERE constraint_type = 'PRIMARY KEY' AND table_name IN ('predictions', "
                    "'experiments') ORDER BY table_name") == [
        ("experiments", ["model", "label"]),
        ("predictions", ["task_id", "model", "label", "sample_index"])]


# ------------------------------------------------------------------ CLI
def test_cli_samples_and_a_finished_rerun_makes_no_requests(tmp_path):
    """--samples 3 stores sample indexes 0..2 per task; running it again sends nothing;
    --samples 4 then asks only for index 3."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [("right", "output", "direct"),
                                                  ("wrong", "state", "cot")])
    db = new_store(tmp_path / "p.duckdb")
    with StubServer(SCRIPT) as server:
        args = ("predict", "--tasks", tasks, "--model", MODEL, "--base-url", server.base_url,
                "--db", db, "--format", "json")
        first = invoke(*args, "--samples", 3)
        assert first.exit_code == 0, first.output
        assert dict(server.requests) == {"right": 3, "wrong": 3}
        assert rows(db, "SELECT task_id, sample_index, answer FROM predictions "
                        "ORDER BY 1, 2") == [("right", 0, "'abc'"), ("right", 1, "'abc'"),
                                             ("right", 2, "'abc'"), ("wrong", 0, "41"),
                                             ("wrong", 1, "41"), ("wrong", 2, "41")]
        summary = json.loads(first.stdout)
        assert (summary["pairs"], summary["skipped"], summary["requests"]) == (6, 0, 6)

        again = invoke(*args, "--samples", 3)
        assert again.exit_code == 0, again.output
        assert dict(server.requests) == {"right": 3, "wrong": 3}  # nothing new
        summary = json.loads(again.stdout)
        assert (summary["pairs"], summary["skipped"], summary["requests"]) == (6, 6, 0)

        more = invoke(*args, "--samples", 4)
        assert more.exit_code == 0, more.output
        assert dict(server.requests) == {"right": 4, "wrong": 4}
    assert rows(db, "SELECT sample_index, count(*) FROM predictions GROUP BY 1 ORDER BY 1") == [
        (0, 2), (1, 2), (2, 2), (3, 2)]


def test_cli_table_summary(tmp_path):
    """The default output is the summary table with the counts of the run."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [("right", "output", "direct"),
                                                  ("garbage", "output", "direct")])
    db = new_store(tmp_path / "p.duckdb")
    with StubServer(SCRIPT) as server:
        result = invoke("predict", "--tasks", tasks, "--model", MODEL, "--base-url",
                        server.base_url, "--db", db, "--quiet")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    items = {}
    for line in result.stdout.splitlines():
        if line.startswith("│"):
            _, item, value, _ = line.split("│")
            items[item.strip()] = value.strip()
    for timing in ("seconds", "requests/s"):
        assert float(items.pop(timing)) >= 0
    assert items == {"tasks file": str(tasks), "db": str(db), "model": MODEL,
                     "label": "direct-t0.0-m2048", "tasks": "2",
                     "samples per task": "1", "pairs (task × sample)": "2",
                     "deleted for --redo": "0", "already stored (skipped)": "0", "requests made": "2", "errors": "0",
                     "unparseable": "1", "prompt tokens": "10", "completion tokens": "12"}


@pytest.mark.parametrize("case", ["model", "key"])
def test_cli_fatal_server_answers_are_one_line_errors(tmp_path, case):
    """A wrong model (404) or a wrong key (401) stops the run: one line, exit 1, no rows."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [("right", "output", "direct")])
    db = new_store(tmp_path / "p.duckdb")
    with StubServer(SCRIPT, api_key="sk-right") as server:
        url = server.base_url
        model = "no-such-model" if case == "model" else MODEL
        key = "sk-right" if case == "model" else "sk-wrong"
        result = invoke("predict", "--tasks", tasks, "--model", model, "--base-url", url,
                        "--db", db, "--api-key-env", "STUB_KEY", env={"STUB_KEY": key})
    stopped = "stopped with 0 new predictions stored (run again to resume)"
    if case == "model":
        assert_one_line_error(result, f"model 'no-such-model' not found at {url} (404: The "
                                      "model `no-such-model` does not exist.); check the model "
                                      f"name and that the base URL ends in /v1; {stopped}")
    else:
        assert_one_line_error(result, f"{url} refused the API key from $STUB_KEY (401: "
                                      f"Incorrect API key provided.); {stopped}")
    assert server.requests == {"right": 1}  # not retried
    assert rows(db, "SELECT count(*) FROM predictions") == [(0,)]


def test_cli_wrong_url_is_a_one_line_error(tmp_path):
    """Nothing listening at --base-url: one line, exit 1, no rows."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [("right", "output", "direct")])
    db = new_store(tmp_path / "p.duckdb")
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = invoke("predict", "--tasks", tasks, "--model", MODEL, "--base-url", url,
                    "--db", db, "--max-retries", 0)
    assert_one_line_error(result, f"cannot reach {url}: connection refused; stopped with 0 "
                                  "new predictions stored (run again to resume)")
    assert rows(db, "SELECT count(*) FROM predictions") == [(0,)]


def test_server_killed_mid_run_then_resumed_without_duplicates(tmp_path):
    """The server dies after 3 responses: the run stops with one line, the store holds
    exactly those 3 rows; a re-run against a new server asks for the other 5 only."""
    ids = [f"k{i}" for i in range(8)]
    tasks = write_tasks(tmp_path / "tasks.jsonl", [(t, "output", "direct") for t in ids])
    script = {t: answer(f"[ANSWER] {i} [/ANSWER]") for i, t in enumerate(ids)}
    db = new_store(tmp_path / "p.duckdb")
    with StubServer(script, kill_after=3) as server:
        args = ("predict", "--tasks", tasks, "--model", MODEL, "--db", db,
                "--concurrency", 2, "--max-retries", 1, "--timeout", 5)
        result = invoke(*args, "--base-url", server.base_url)
    assert result.exit_code == 1
    error = result.stderr.splitlines()
    assert len(error) == 1 and error[0].startswith(f"Error: cannot reach {server.base_url}: ")
    assert error[0].endswith("; stopped with 3 new predictions stored (run again to resume)")
    assert len(server.answered) == 3
    assert rows(db, "SELECT task_id, answer FROM predictions ORDER BY 1") == sorted(
        (t, str(ids.index(t))) for t in server.answered)

    with StubServer(script) as again:
        resumed = invoke(*args, "--base-url", again.base_url, "--format", "json")
    assert resumed.exit_code == 0, resumed.output
    assert sorted(again.requests.elements()) == sorted(set(ids) - set(server.answered))
    assert json.loads(resumed.stdout)["skipped"] == 3
    assert rows(db, "SELECT count(*), count(DISTINCT (task_id, model, sample_index)) "
                    "FROM predictions") == [(8, 8)]
    assert rows(db, "SELECT task_id, answer FROM predictions ORDER BY 1") == [
        (t, str(i)) for i, t in enumerate(ids)]


def test_cli_missing_key_variable(tmp_path):
    """A missing API key variable sends a placeholder key; only a variable named with
    --api-key-env draws a warning."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", [("right", "output", "direct")])
    with StubServer(SCRIPT, api_key="steptrace-no-key") as server:
        base = ("predict", "--tasks", tasks, "--model", MODEL, "--base-url", server.base_url,
                "--quiet")
        named = invoke(*base, "--db", new_store(tmp_path / "a.duckdb"), "--api-key-env",
                       "NO_SUCH_VAR", env={"NO_SUCH_VAR": None})
        default = invoke(*base, "--db", new_store(tmp_path / "b.duckdb"),
                         env={"OPENAI_API_KEY": None})
    assert named.exit_code == 0 and default.exit_code == 0, named.output + default.output
    assert named.stderr == "warning: $NO_SUCH_VAR is not set; sending a placeholder API key\n"
    assert default.stderr == ""
    assert server.requests == {"right": 2}


def test_cli_bad_tasks_files(tmp_path):
    """A missing file, bad JSON, a record without a prompt, a duplicate id: one line
    naming file and line, exit 1, no request and nothing written to the store."""
    db = new_store(tmp_path / "p.duckdb")
    missing = tmp_path / "missing.jsonl"
    good = json.dumps({"task_id": "a", "kind": "output", "prompt": "[[a]] x"})
    cases = {
        "bad_json.jsonl": (f"{good}\n{{\"task_id\": \n",
                           "{}:2: not valid JSON (Expecting value at column 13)"),
        "no_prompt.jsonl": (f"{good}\n\n" + json.dumps({"task_id": "b", "kind": "output"}),
                            "{}:3: field 'prompt' must be a non-empty string"),
        "duplicate.jsonl": (f"{good}\n{good}\n", "{}:2: duplicate task_id 'a' (first on line 1)"),
        "not_object.jsonl": ("[1, 2]\n", "{}:1: a task record must be a JSON object"),
    }
    with StubServer(SCRIPT) as server:
        base = ("predict", "--model", MODEL, "--base-url", server.base_url, "--db", db)
        assert_one_line_error(invoke(*base, "--tasks", missing),
                              f"tasks file not found: {missing}")
        for name, (text, message) in cases.items():
            path = tmp_path / name
            path.write_text(text, encoding="utf-8")
            assert_one_line_error(invoke(*base, "--tasks", path), message.format(path))
    assert server.requests == {}
    assert rows(db, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'predictions'"
                ) == [(0,)]


# ------------------------------------------------------------------ answer extraction
# The rule per answer form, with every case, is in tests/tasks/test_answers.py; these are
# the responses the table above and the generated tasks below send.
EXTRACTION = [
    # (response text, kind, the task's entry (None: the task names no run), expected)
    ("[ANSWER]\n  42 \n[/ANSWER]", "output", "f", "42"),
    ("[answer] 'a' [/answer]", "output", None, "'a'"),
    ("Thinking: [ANSWER] 1 [/ANSWER] no wait [ANSWER] 2 [/ANSWER] done", "state", "f", "2"),
    ("Steps...\n[ANSWER]\n[1, 2, 3]", "output", "f", "[1, 2, 3]"),
    ("[ANSWER] 5 [/ANSWER] and then [ANSWER]", "output", "f", "5"),
    ("[ANSWER][/ANSWER]", "output", "f", None),
    ("[ANSWER]\n```python\n{'a': 1}\n```\n[/ANSWER]", "output", "f", "{'a': 1}"),
    ("[ANSWER]\nassert f('x') == 'xx'\n[/ANSWER]", "output", "f", "'xx'"),
    ("[ANSWER]\nassert f('x') == 'xx'\n[/ANSWER]", "input", "f", "'x'"),
    ("[ANSWER] raise [/ANSWER]", "next_line", "f", "raise"),
    ("[ANSWER] ValueError [/ANSWER]", "exception", "f", "ValueError"),
    ("[ANSWER] x = 3 [/ANSWER]", "state", "f", "x = 3"),  # a block is taken as it is
    # CRUXEval assertions: nested parentheses, strings holding ')' and '=='
    ("assert f(g(1, (2, 3)), 'a)b') == [1, (2,)]", "output", "f", "[1, (2,)]"),
    ("assert f(g(1, (2, 3)), 'a)b') == [1, (2,)]", "input", "f", "g(1, (2, 3)), 'a)b'"),
    ("assert f('==', \"(\") == 'x == y'  # checked", "output", "f", "'x == y'"),
    ("assert f('==', \"(\") == 'x == y'  # checked", "input", "f", "'==', \"(\""),
    ("assert f([1, 2], key=3,) == ??", "input", "f", "[1, 2], key=3,"),
    ("assert f(1) == ??", "output", "f", None),
    ("The call gives:\nassert f(1) == {\n  'a': 1,\n}\nDone.", "output", "f",
     "{\n  'a': 1,\n}"),
    ("assert f(0) == 1\nassert f(2) == 3", "output", "f", "3"),
    ("assert 'ab' == f('a')", "output", "f", "'ab'"),
    ("assert f('a') == 'ab', 'message'", "output", "f", "'ab'"),
    ("f('abc') == 'cba'", "output", "f", "'cba'"),
    ("f('abc')", "input", "f", "'abc'"),
    ("f('abc')", "input", None, "f('abc')"),  # no entry known: an argument
    ("assert f(1) == 2", "state", "f", None),  # not a value answer for a state
    # fenced code and bare literals
    ("Here:\n```python\n[(1, 0), (2, 1)]\n```\nThat is all.", "trace", "f",
     "[(1, 0), (2, 1)]"),
    ("```\n'only'\n", "output", "f", "'only'"),
    ("```py\nassert f(3) == 9\n```", "output", "f", "9"),
    ("  (1, 'a')  \n", "output", "f", "(1, 'a')"),
    ("True", "branch", "f", "True"),
    ("return", "next_line", "f", "return"),
    ("-3.5e2", "output", "f", "-3.5e2"),
    # nothing usable
    ("I don't know.", "output", "f", None),
    ("The answer is 42.", "output", "f", None),
    ("", "output", "f", None),
    ("   \n", "state", "f", None),
    (None, "output", "f", None),
]


@pytest.mark.parametrize("text, kind, entry, expected", EXTRACTION)
def test_extract_answer(text, kind, entry, expected):
    assert extract_answer(text, kind, entry=entry) == expected


# ------------------------------------------------------------------ with generated tasks
def test_predict_tasks_generated_by_steptrace_tasks(tmp_path):
    """End to end: trace the small corpus, `steptrace tasks` (CRUXEval-style output/input
    prompts, and direct prompts of the other kinds), then `steptrace predict` against a
    server that answers every prompt correctly, the CRUXEval ones by completing the
    prompt's own assertion. Every parsed answer equals the task's canonical answer."""
    from helpers.sample_corpus import RECORDS
    corpus = tmp_path / "small.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    db = tmp_path / "store.duckdb"
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    files = {"cruxeval": (tmp_path / "crux.jsonl", "output,input"),
             "direct": (tmp_path / "direct.jsonl", "state,state_any,next_line,next_line_any,"
                                                   "coverage,line_count,steps,trace,exception")}
    for style, (path, kinds) in files.items():
        made = invoke("tasks", "--db", db, "--kinds", kinds, "--prompt", style, "--out", path)
        assert made.exit_code == 0, made.output

    expected: Counter[str] = Counter()
    for style, (path, _) in files.items():
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        expected.update(r["kind"] for r in records)
        by_prompt = {r["prompt"]: r["task_id"] for r in records}
        script = {r["task_id"]: answer(_correct_response(r)) for r in records}
        with StubServer(script, key_of=by_prompt.get) as server:
            result = invoke("predict", "--tasks", path, "--model", MODEL, "--base-url",
                            server.base_url, "--db", db, "--format", "json",
                            env={"OPENAI_API_KEY": None})
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert (summary["requests"], summary["errors"], summary["unparseable"]) == (
            len(records), 0, 0)
        assert sum(server.requests.values()) == len(records)
    assert rows(db, "SELECT count(*), count(*) FILTER (WHERE p.answer = t.answer) "
                    "FROM predictions p JOIN tasks t USING (task_id)") == [
        (expected.total(), expected.total())]
    assert rows(db, "SELECT kind, count(*) FROM predictions GROUP BY 1 ORDER BY 1") == sorted(
        expected.items())
    assert set(expected) == set(files["cruxeval"][1].split(",") + files["direct"][1].split(","))


def _correct_response(record: dict) -> str:
    """What a right model says: the completed assertion for a CRUXEval-style prompt,
    an answer block otherwise."""
    if record["prompt_style"] != "cruxeval":
        return f"Sure.\n[ANSWER]\n{record['answer']}\n[/ANSWER]"
    line = next(text for text in record["prompt"].splitlines() if text.startswith("assert "))
    return line.replace("??", record["answer"])
