"""Experiments (engine/predictions/_experiments.py): one model's predictions made with other settings
are kept, resumed, redone and scored apart, through the CLI against a real
OpenAI-compatible server on 127.0.0.1 (tests/helpers/openai_stub.py) and real DuckDB files; a
schema 2 store is upgraded in place; OPENAI_BASE_URL is honoured; and a store another
process holds is either waited for, read between predict's short transactions, or
refused in one line, with real second processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np
import pytest

from steptrace.predictions._predict import PredictOptions, RequestRun, Task, predict
from steptrace.scoring._score import ScoreOptions, score_predictions, store_verdicts
from steptrace.scoring._stats import probability_a_beats_b
from steptrace.store._store import SCHEMA_VERSION, StoreLockedError, connect
from helpers.openai_stub import Reply, StubServer, answer
from helpers.cli import assert_one_line_error, new_store, rows
from helpers.predict import MODEL, closed_port, invoke, prompt_of
from helpers.programs import LOOP

ROOT = Path(__file__).resolve().parents[2]
DIRECT, COT = "direct-t0.0-m2048", "cot-t0.0-m2048"  # the default labels of the two styles


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def block(text: str) -> Reply:
    return answer(f"[ANSWER]\n{text}\n[/ANSWER]")


def scorable_tasks(path: Path, ids: list[str], style: str = "direct",
                   prompt=prompt_of) -> Path:
    """Output tasks whose answer is 'abc', with every field predict and score read; they
    name no run (``run_id`` null: predict checks a named run against the store, and
    output tasks are judged without the program)."""
    path.write_text("".join(json.dumps({
        "task_id": t, "kind": "output", "run_id": None, "sample_id": "s", "answer": "'abc'",
        "answer_type": "repr", "line_steps": 3, "loop_nesting": 0, "question": None,
        "prompt": prompt(t), "prompt_style": style}) + "\n" for t in ids), encoding="utf-8")
    return path


def json_of(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------ direct and cot
def test_direct_and_cot_of_one_model_coexist_and_are_compared(tmp_path):
    """The issue's case end to end: `steptrace tasks` in the direct and the cot style
    (the same task ids), `steptrace predict` of one model for each, `steptrace score`.
    The cot run is not skipped as "already stored", re-running either resumes with no
    request, and score reports the two experiments apart and compares them, paired over
    their tasks, as it compares two models."""
    corpus, db = tmp_path / "loop.jsonl", tmp_path / "s.duckdb"
    corpus.write_text(json.dumps({"id": "loop", "code": LOOP, "input": "[1, 2, 3]"}) + "\n")
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    files = {}
    for style in ("direct", "cot"):
        files[style] = tmp_path / f"{style}.jsonl"
        made = invoke("tasks", "--db", db, "--kinds", "output,state,next_line,coverage",
                      "--per-run", 1, "--prompt", style, "--out", files[style])
        assert made.exit_code == 0, made.output
    tasks = {style: [json.loads(line) for line in path.read_text().splitlines()]
             for style, path in files.items()}
    assert [t["task_id"] for t in tasks["direct"]] == [t["task_id"] for t in tasks["cot"]]
    assert all(d["prompt"] != c["prompt"] for d, c in zip(tasks["direct"], tasks["cot"]))
    # direct: right on output and coverage only; cot: right on every kind
    wrong = {"state": "12345", "next_line": "99"}
    script = {f"direct:{t['task_id']}": block(wrong.get(t["kind"], t["answer"]))
              for t in tasks["direct"]}
    script.update({f"cot:{t['task_id']}": block(t["answer"]) for t in tasks["cot"]})
    key_of = {t["prompt"]: f"{style}:{t['task_id']}" for style in tasks for t in tasks[style]}

    with StubServer(script, key_of=key_of.get) as server:
        def run(style: str) -> dict:
            return json_of(invoke("predict", "--tasks", files[style], "--model", MODEL,
                                  "--base-url", server.base_url, "--db", db, "--quiet",
                                  "--format", "json"))
        first, second, again = run("direct"), run("cot"), run("direct")
        assert sorted(server.requests.values()) == [1] * 8  # the re-run asked nothing
    assert (first["label"], first["requests"], first["skipped"]) == (DIRECT, 4, 0)
    assert (second["label"], second["requests"], second["skipped"]) == (COT, 4, 0)
    assert (again["label"], again["requests"], again["skipped"]) == (DIRECT, 0, 4)

    assert rows(db, "SELECT model, label, prompt_style, system_prompt, temperature, top_p, "
                    "max_tokens FROM experiments ORDER BY label") == [
        (MODEL, COT, "cot", None, 0.0, None, 2048), (MODEL, DIRECT, "direct", None, 0.0, None, 2048)]
    assert rows(db, "SELECT task_id, label, prompt_style, prompt_sha256 FROM predictions "
                    "ORDER BY label, task_id") == sorted(
        [(t["task_id"], COT, "cot", sha(t["prompt"])) for t in tasks["cot"]]
        + [(t["task_id"], DIRECT, "direct", sha(t["prompt"])) for t in tasks["direct"]],
        key=lambda r: (r[1], r[0]))

    result = json_of(invoke("score", "--tasks", files["direct"], "--db", db, "--workers", 0,
                            "--format", "json"))
    overall = {(r["model"], r["label"]): (r["tasks"], r["samples"], r["pass@1"])
               for r in result["by_kind"] if r["kind"] == "all"}
    assert overall == {(MODEL, COT): (4, 4, 1.0), (MODEL, DIRECT): (4, 4, 0.5)}
    by_kind = {(r["label"], r["kind"]): r["pass@1"] for r in result["by_kind"]}
    assert by_kind[(DIRECT, "state")] == 0.0 and by_kind[(COT, "state")] == 1.0
    ids = sorted(t["task_id"] for t in tasks["direct"])
    kind_of = {t["task_id"]: t["kind"] for t in tasks["direct"]}
    direct = np.array([0.0 if kind_of[t] in wrong else 1.0 for t in ids])
    p = probability_a_beats_b(np.ones(4), direct, 10_000, seed=0)
    (comparison,) = result["paired_comparison"]
    assert {k: v for k, v in comparison.items() if k not in ("ci_low", "ci_high")} == {
        "model A": MODEL, "label A": COT, "model B": MODEL, "label B": DIRECT, "tasks": 4,
        "pass@1 A": 1.0, "pass@1 B": 0.5, "difference": 0.5, "P(A beats B)": round(p, 4)}
    assert comparison["ci_low"] <= 0.5 <= comparison["ci_high"] <= 1.0
    assert 0.5 < p < 1.0
    assert rows(db, "SELECT label, count(*), count(*) FILTER (WHERE correct) FROM scores "
                    "GROUP BY 1 ORDER BY 1") == [(COT, 4, 4), (DIRECT, 4, 2)]
    # the named query keeps the experiments apart as well
    query = invoke("query", "accuracy_by_kind", "--db", db, "--format", "json")
    assert query.exit_code == 0, query.output
    overall_rows = {(r["label"], r["kind"]): r["pass_at_1"] for r in json.loads(query.stdout)
                    if r["bucket_from"] is None}
    assert overall_rows == {(COT, k): 1.0 for k in kind_of.values()} | {
        (DIRECT, k): 0.0 if k in wrong else 1.0 for k in kind_of.values()}


# ------------------------------------------------------------------ labels
def test_labels_settings_and_conflicts(tmp_path):
    """A label names one set of settings: resumed by the same settings, refused with
    others; every setting is sent and spelled into the default label; the CLI option
    --label names a run."""
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a", "b"])
    db = new_store(tmp_path / "p.duckdb")
    script = {"a": block("'abc'"), "b": block("'x'")}
    with StubServer(script) as server:
        base = ("predict", "--tasks", tasks, "--model", MODEL, "--base-url", server.base_url,
                "--db", db, "--quiet", "--format", "json")
        named = json_of(invoke(*base, "--label", "baseline"))
        assert (named["label"], named["requests"]) == ("baseline", 2)
        assert json_of(invoke(*base, "--label", "baseline"))["skipped"] == 2
        assert_one_line_error(
            invoke(*base, "--label", "baseline", "--temperature", 0.5),
            f"label 'baseline' of model '{MODEL}' names an experiment with other settings "
            "(temperature 0.0, not 0.5): give another --label")
        assert server.requests == {"a": 1, "b": 1}
        warm = json_of(invoke(*base, "--temperature", 0.5))
        assert (warm["label"], warm["requests"]) == ("direct-t0.5-m2048", 2)
        system = "Answer briefly."
        nucleus = json_of(invoke(*base, "--top-p", 0.9, "--system-prompt", system,
                                 "--max-tokens", 64))
        assert nucleus["label"] == f"direct-t0.0-p0.9-m64-s{sha(system)[:8]}"
        body = server.bodies["a"]
        assert (body["top_p"], body["max_tokens"], body["messages"]) == (0.9, 64, [
            {"role": "system", "content": system}, {"role": "user", "content": prompt_of("a")}])
        assert_one_line_error(invoke(*base, "--label", " padded"),
                              "--label must be 1-100 printable characters without spaces "
                              "at the ends, not ' padded'")
    assert rows(db, "SELECT label, prompt_style, system_prompt, temperature, top_p, "
                    "max_tokens FROM experiments ORDER BY label") == [
        ("baseline", "direct", None, 0.0, None, 2048),
        (nucleus["label"], "direct", system, 0.0, 0.9, 64),
        ("direct-t0.5-m2048", "direct", None, 0.5, None, 2048)]
    assert rows(db, "SELECT label, count(*) FROM predictions GROUP BY 1 ORDER BY 1") == [
        ("baseline", 2), ("direct-t0.0-p0.9-m64-s" + sha(system)[:8], 2),
        ("direct-t0.5-m2048", 2)]


def test_top_p_is_sent_only_when_given(tmp_path):
    """Without --top-p the request carries no top_p: the server's default applies."""
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a"])
    with StubServer({"a": block("'abc'")}) as server:
        json_of(invoke("predict", "--tasks", tasks, "--model", MODEL, "--base-url",
                       server.base_url, "--db", new_store(tmp_path / "p.duckdb"), "--format", "json"))
    assert "top_p" not in server.bodies["a"] and server.bodies["a"]["temperature"] == 0.0


def test_another_template_under_the_same_label_is_refused_or_redone(tmp_path):
    """Tasks remade from another template keep their ids but not their prompts: resuming
    the label would take the old answers for the new prompts, so it is refused; --redo
    replaces the label's rows of these tasks (and their scores), nothing else."""
    db = new_store(tmp_path / "p.duckdb")
    old = scorable_tasks(tmp_path / "old.jsonl", ["a", "b"])
    new = scorable_tasks(tmp_path / "new.jsonl", ["a", "b"],
                         prompt=lambda t: f"[[{t}]] Which value is returned?")
    other = scorable_tasks(tmp_path / "other.jsonl", ["c"])
    script = {"a": block("'abc'"), "b": block("'abc'"), "c": block("'abc'")}
    with StubServer(script) as server:
        def run(path: Path, *extra) -> dict:
            return json_of(invoke("predict", "--tasks", path, "--model", MODEL, "--base-url",
                                  server.base_url, "--db", db, "--label", "L", "--samples", 2,
                                  "--quiet", "--format", "json", *extra))
        run(old)
        run(other)
        json_of(invoke("predict", "--tasks", old, "--model", MODEL, "--base-url",
                       server.base_url, "--db", db, "--label", "M", "--format", "json"))
        json_of(invoke("score", "--tasks", old, "--db", db, "--workers", 0, "--format", "json"))
        json_of(invoke("score", "--tasks", other, "--db", db, "--workers", 0, "--format", "json"))
        before = dict(server.requests)
        assert_one_line_error(
            invoke("predict", "--tasks", new, "--model", MODEL, "--base-url", server.base_url,
                   "--db", db, "--label", "L"),
            f"label 'L' of model '{MODEL}' holds predictions of 2 of these tasks asked with "
            "other prompts or request settings (task a): the tasks were made from another "
            "template, or the endpoint, stop sequences or extra body differ; give another "
            "--label, or --redo to replace them")
        assert server.requests == before
        redone = run(new, "--samples", 1, "--redo")
    assert (redone["deleted"], redone["skipped"], redone["requests"]) == (4, 0, 2)
    # L's a and b: one new sample each (the second samples went with --redo); L's c and
    # M's rows untouched, with their scores; L's a and b scores deleted with their rows
    new_prompt = {t: sha(f"[[{t}]] Which value is returned?") for t in "ab"}
    old_prompt = {t: sha(prompt_of(t)) for t in "abc"}
    assert rows(db, "SELECT label, task_id, sample_index, prompt_sha256 FROM predictions "
                    "ORDER BY ALL") == [
        ("L", "a", 0, new_prompt["a"]), ("L", "b", 0, new_prompt["b"]),
        ("L", "c", 0, old_prompt["c"]), ("L", "c", 1, old_prompt["c"]),
        ("M", "a", 0, old_prompt["a"]), ("M", "b", 0, old_prompt["b"])]
    assert rows(db, "SELECT label, task_id, sample_index FROM scores ORDER BY ALL") == [
        ("L", "c", 0), ("L", "c", 1), ("M", "a", 0), ("M", "b", 0)]


def test_a_verdict_of_a_prediction_made_again_while_scoring_is_not_stored(tmp_path):
    """score reads predictions, judges them with the store closed, then writes: a verdict
    whose prediction was redone in between is left out rather than stored for the new
    answer."""
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a", "b"])
    db = new_store(tmp_path / "p.duckdb")
    with StubServer({"a": block("'abc'"), "b": block("'x'")}) as server:
        options = PredictOptions(MODEL, server.base_url, label="L", concurrency=1)
        predict(tasks, db, options)
        summary = score_predictions(db, tasks, ScoreOptions(workers=0))
        predict(scorable_tasks(tmp_path / "only_a.jsonl", ["a"]), db,
                PredictOptions(MODEL, server.base_url, label="L", redo=True))
    assert [(v.task_id, v.correct) for v in summary.verdicts] == [("a", True), ("b", False)]
    assert rows(db, "SELECT task_id FROM scores") == [("b",)]  # a's went with --redo
    assert store_verdicts(db, summary.verdicts) == 1           # b's again; a's is stale
    assert rows(db, "SELECT task_id, correct FROM scores") == [("b", False)]


# ------------------------------------------------------------------ schema 2 stores
V2_PREDICTIONS = """CREATE TABLE predictions (task_id VARCHAR NOT NULL, model VARCHAR NOT NULL,
    sample_index INTEGER NOT NULL, kind VARCHAR NOT NULL, raw_text VARCHAR, answer VARCHAR,
    parsed BOOLEAN NOT NULL, prompt_tokens BIGINT, completion_tokens BIGINT,
    latency_ms DOUBLE, error VARCHAR, finish_reason VARCHAR, created_at TIMESTAMP,
    PRIMARY KEY (task_id, model, sample_index))"""
V2_SCORES = """CREATE TABLE scores (task_id VARCHAR NOT NULL, model VARCHAR NOT NULL,
    sample_index INTEGER NOT NULL, kind VARCHAR NOT NULL, parsed BOOLEAN NOT NULL,
    correct BOOLEAN NOT NULL, distance DOUBLE, note VARCHAR, scored_at TIMESTAMP NOT NULL,
    PRIMARY KEY (task_id, model, sample_index))"""


def schema_2_store(path: Path) -> Path:
    """A store as steptrace wrote it before experiments: schema version 2, predictions and
    scores keyed by (task, model, sample)."""
    connect(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.execute(V2_PREDICTIONS)
    con.execute(V2_SCORES)
    con.execute(f"INSERT INTO predictions VALUES ('a', '{MODEL}', 0, 'output', "
                "'[ANSWER] ''abc'' [/ANSWER]', '''abc''', true, 5, 3, 1.5, NULL, 'stop', "
                "TIMESTAMP '2024-01-01 00:00:00'), ('a', 'old', 0, 'output', NULL, NULL, "
                "false, NULL, NULL, 2.0, 'APITimeoutError: x', NULL, NULL)")
    con.execute(f"INSERT INTO scores VALUES ('a', '{MODEL}', 0, 'output', true, true, NULL, "
                "NULL, TIMESTAMP '2024-01-02 00:00:00')")
    con.close()
    return path


def test_a_schema_2_store_is_upgraded_in_place(tmp_path):
    """The next command that writes brings predictions and scores to schema 3: every old
    row kept, labelled 'legacy', with a legacy experiment of unknown settings per model.
    A new run is another experiment (legacy rows are not taken for its answers), the
    label 'legacy' cannot be resumed, and score reports both."""
    db = schema_2_store(tmp_path / "v2.duckdb")
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a"])
    with StubServer({"a": block("'zzz'")}) as server:
        base = ("predict", "--tasks", tasks, "--model", MODEL, "--base-url", server.base_url,
                "--db", db, "--quiet", "--format", "json")
        ran = json_of(invoke(*base))
        assert_one_line_error(invoke(*base, "--label", "legacy"),
                              f"label 'legacy' of model '{MODEL}' holds the predictions stored "
                              "before experiments were recorded (settings unknown): give "
                              "another --label")
    assert (ran["label"], ran["skipped"], ran["requests"]) == (DIRECT, 0, 1)
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert rows(db, "SELECT task_id, model, label, sample_index, answer, error, prompt_style, "
                    "prompt_sha256, created_at IS NULL FROM predictions ORDER BY model, label") == [
        ("a", "old", "legacy", 0, None, "APITimeoutError: x", None, None, True),
        ("a", MODEL, DIRECT, 0, "'zzz'", None, "direct", sha(prompt_of("a")), False),
        ("a", MODEL, "legacy", 0, "'abc'", None, None, None, False)]
    assert rows(db, "SELECT model, label, prompt_style, temperature FROM experiments "
                    "ORDER BY ALL") == [("old", "legacy", None, None),
                                        (MODEL, DIRECT, "direct", 0.0),
                                        (MODEL, "legacy", None, None)]
    assert rows(db, "SELECT task_id, model, label, correct FROM scores") == [
        ("a", MODEL, "legacy", True)]
    result = json_of(invoke("score", "--tasks", tasks, "--db", db, "--workers", 0,
                            "--format", "json"))
    assert [(r["label"], r["pass@1"]) for r in result["by_kind"] if r["kind"] == "all"] == [
        (DIRECT, 0.0), ("legacy", 1.0)]
    assert result["errors_skipped"] == 1  # old's timeout


def test_score_upgrades_a_schema_2_store_too(tmp_path):
    """score on a schema 2 store (no predict since): upgraded, legacy rows scored."""
    db = schema_2_store(tmp_path / "v2.duckdb")
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a"])
    result = json_of(invoke("score", "--tasks", tasks, "--db", db, "--workers", 0,
                            "--model", MODEL, "--label", "legacy", "--format", "json"))
    assert [(r["model"], r["label"], r["kind"], r["pass@1"]) for r in result["by_kind"]] == [
        (MODEL, "legacy", "output", 1.0), (MODEL, "legacy", "all", 1.0)]
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    missing = invoke("score", "--tasks", tasks, "--db", db, "--label", "nope")
    assert_one_line_error(missing, f"no predictions of label nope for these tasks in {db}")


# ------------------------------------------------------------------ OPENAI_BASE_URL
def test_openai_base_url_is_honoured_and_base_url_wins(tmp_path):
    """Without --base-url the openai client's default applies: $OPENAI_BASE_URL (errors
    name it); --base-url still wins over it."""
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a"])
    closed = f"http://127.0.0.1:{closed_port()}/v1"
    with StubServer({"a": block("'abc'")}) as server:
        base = ("predict", "--tasks", tasks, "--model", MODEL, "--quiet", "--format", "json",
                "--max-retries", 0)
        from_env = json_of(invoke(*base, "--db", new_store(tmp_path / "a.duckdb"),
                                  env={"OPENAI_BASE_URL": server.base_url}))
        explicit = json_of(invoke(*base, "--db", new_store(tmp_path / "b.duckdb"),
                                  "--base-url", server.base_url,
                                  env={"OPENAI_BASE_URL": closed}))
    assert from_env["requests"] == explicit["requests"] == 1 and server.requests == {"a": 2}
    assert_one_line_error(
        invoke(*base, "--db", new_store(tmp_path / "c.duckdb"), env={"OPENAI_BASE_URL": closed}),
        f"cannot reach {closed}: connection refused; stopped with 0 new predictions stored "
        "(run again to resume)")


# ------------------------------------------------------------------ another process
HOLD = ("import duckdb, sys\n"
        "con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == 'read')\n"
        "print('holding', flush=True)\n"
        "sys.stdin.readline()\n")


class Holder:
    """A second process that opens the store (for writing, or for reading only) and keeps
    it open until ``release()``."""

    def __init__(self, db: Path, mode: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLD, str(db), mode],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout.readline() == "holding\n"

    @property
    def pid(self) -> int:
        return self.process.pid

    def release(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
            assert self.process.wait(timeout=60) == 0

    def __enter__(self) -> "Holder":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def locked(db: Path, pid: int, wait: str = "0") -> str:
    return (f"database {db} is in use by another process (PID {pid}): a store is open to one "
            f"writing process or to reading processes only (waited {wait} s; "
            "$STEPTRACE_LOCK_WAIT sets how long)")


def test_a_store_held_by_another_process_is_a_one_line_error(tmp_path):
    """While another process writes to the store, no command can open it (DuckDB): each
    says so in one line naming the file and the process, with no request sent. While
    other processes only read it, reading commands work and writing ones are refused."""
    db = new_store(tmp_path / "p.duckdb")
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a"])
    with StubServer({"a": block("'abc'")}) as server:
        json_of(invoke("predict", "--tasks", tasks, "--model", MODEL, "--base-url",
                       server.base_url, "--db", db, "--label", "first", "--format", "json"))
        no_wait = {"STEPTRACE_LOCK_WAIT": "0"}
        predict_args = ("predict", "--tasks", tasks, "--model", MODEL, "--base-url",
                        server.base_url, "--db", db, "--label", "second")
        with Holder(db, "write") as holder:
            assert_one_line_error(invoke(*predict_args, env=no_wait), locked(db, holder.pid))
            assert_one_line_error(invoke("score", "--tasks", tasks, "--db", db, env=no_wait),
                                  locked(db, holder.pid))
            assert_one_line_error(invoke("sql", "SELECT count(*) FROM predictions", "--db", db,
                                         env=no_wait), locked(db, holder.pid))
        with Holder(db, "read") as reader:
            read = invoke("sql", "SELECT label FROM predictions", "--db", db, "--format",
                          "csv", env=no_wait)
            assert (read.exit_code, read.stdout) == (0, "label\nfirst\n")
            assert_one_line_error(invoke(*predict_args, env=no_wait), locked(db, reader.pid))
        assert server.requests == {"a": 1}
    assert_one_line_error(invoke("sql", "SELECT 1", "--db", db,
                                 env={"STEPTRACE_LOCK_WAIT": "soon"}),
                          "$STEPTRACE_LOCK_WAIT must be a number of seconds >= 0, not 'soon'")


def test_opening_waits_for_a_store_another_process_releases(tmp_path, monkeypatch):
    """connect tries again while the lock is held elsewhere: the holder lets go only
    after the first refused attempt (an event, not a delay), and the open then succeeds."""
    db = new_store(tmp_path / "p.duckdb")
    connect(db).close()
    refused = threading.Event()
    attempts = []
    real_connect = duckdb.connect

    def counting_connect(*args, **kwargs):
        attempts.append(args)
        try:
            return real_connect(*args, **kwargs)
        except duckdb.IOException:
            refused.set()
            raise

    monkeypatch.setattr(duckdb, "connect", counting_connect)
    monkeypatch.setenv("STEPTRACE_LOCK_WAIT", "300")
    opened: list = []
    with Holder(db, "write") as holder:
        reader = threading.Thread(target=lambda: opened.append(connect(db, read_only=True)))
        reader.start()
        assert refused.wait(timeout=120)
        holder.release()
        reader.join(timeout=120)
    assert len(opened) == 1 and len(attempts) >= 2
    assert opened[0].execute("SELECT value FROM meta").fetchall() == [(str(SCHEMA_VERSION),)]
    opened[0].close()


@pytest.mark.slow  # a predict process held mid-run by the server
def test_score_and_sql_read_the_store_while_predict_runs(tmp_path):
    """`steptrace predict` in a second process, one of its requests held by the server:
    while it runs, its first answers are in the store and `score` and `sql` in this
    process read (and score writes) the store between predict's short transactions;
    then predict finishes and stores the held answer too."""
    db = new_store(tmp_path / "p.duckdb")
    tasks = scorable_tasks(tmp_path / "t.jsonl", ["a", "b", "c"])
    gate = threading.Event()
    script = {"a": block("'abc'"), "b": block("'x'"), "c": Reply(content="'abc'", gate=gate)}
    patient = {"STEPTRACE_LOCK_WAIT": "120"}  # a loaded machine must not fail the test
    with StubServer(script) as server:
        env = {**os.environ, **patient, "STEPTRACE_CACHE_DIR": os.environ.get(
            "STEPTRACE_CACHE_DIR", str(tmp_path / "cache"))}
        child = subprocess.Popen(
            [sys.executable, "-m", "steptrace.cli", "predict", "--tasks", str(tasks), "--model",
             MODEL, "--base-url", server.base_url, "--db", str(db), "--concurrency", "3",
             "--timeout", "600", "--quiet", "--format", "json"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # a and b committed by the child, and c's request held by the server
            stored = _wait_for(db, 2, child, lambda: server.requests["c"] == 1)
            assert stored == [("a", "'abc'"), ("b", "'x'")]
            scored = json_of(invoke("score", "--tasks", tasks, "--db", db, "--workers", 0,
                                    "--format", "json", env=patient))
            assert (scored["scored"], [r["pass@1"] for r in scored["by_kind"]]) == (
                2, [0.5, 0.5])
            counted = invoke("sql", "SELECT count(*) AS n FROM scores", "--db", db,
                             "--format", "csv", env=patient)
            assert (counted.exit_code, counted.stdout) == (0, "n\n2\n")
            assert child.poll() is None  # still waiting for c's answer
        finally:
            gate.set()
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert (json.loads(out)["requests"], err) == (3, "")
    assert rows(db, "SELECT task_id, answer FROM predictions ORDER BY 1") == [
        ("a", "'abc'"), ("b", "'x'"), ("c", "'abc'")]
    again = json_of(invoke("score", "--tasks", tasks, "--db", db, "--workers", 0,
                           "--format", "json"))
    assert again["scored"] == 3


def _wait_for(db: Path, count: int, child: subprocess.Popen,
              also: Callable[[], bool]) -> list[tuple]:
    """The predictions once ``count`` are stored and ``also()`` holds, read with the
    store's own connect (which waits while the child holds the store); fails if the child
    ends first. The deadline only guards against a hang: the test measures no time."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert child.poll() is None, child.communicate()
        if db.exists() and also():
            try:
                con = connect(db, read_only=True)
            except StoreLockedError:
                continue
            try:
                found = con.execute("SELECT task_id, answer FROM predictions ORDER BY 1"
                                    ).fetchall() if _has_predictions(con) else []
            finally:
                con.close()
            if len(found) >= count:
                return found
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} predictions stored in time")


def _has_predictions(con: duckdb.DuckDBPyConnection) -> bool:
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'predictions'"
                       ).fetchall() == [(1,)]


# ------------------------------------------------------------------ the writer
class FlakyStore:
    """A RowSink that refuses its first ``refusals`` writes as a held store would."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.batches: list[list[str]] = []
        self.refused: list[list[str]] = []

    def write(self, rows) -> None:
        ids = [row.task_id for row in rows]
        if self.refusals:
            self.refusals -= 1
            self.refused.append(ids)
            raise StoreLockedError("database x is in use by another process (PID 1)")
        self.batches.append(ids)


class Counted:
    def __init__(self) -> None:
        self.rows = 0

    def count(self, row) -> None:
        self.rows += 1


@pytest.mark.parametrize("refusals", [1, 1000])
def test_a_batch_the_store_refuses_is_kept_for_the_next_flush(tmp_path, refusals):
    """A refused batch is not lost: it is written, whole, with later rows at a later
    flush. Refused to the end, the last flush is a fatal error saying how many answers
    were not stored."""
    import asyncio
    ids = ["a", "b", "c", "d"]
    sink, counted = FlakyStore(refusals), Counted()
    with StubServer({t: block("'abc'") for t in ids}) as server:
        options = PredictOptions(MODEL, server.base_url, concurrency=1, flush_rows=1,
                                 flush_every_s=0.01)
        run = RequestRun(options, sink, counted, lambda done, total: None, label="L")
        fatal = asyncio.run(run.execute([(Task(t, "output", prompt_of(t)), 0) for t in ids]))
    if refusals == 1:
        assert fatal is None and counted.rows == 4
        assert sorted(t for batch in sink.batches for t in batch) == ids
        assert set(sink.refused[0]) <= set(sink.batches[0])  # kept, written with more
    else:
        assert sink.batches == [] and counted.rows == 0
        assert fatal == "database x is in use by another process (PID 1); 4 answers not stored"
