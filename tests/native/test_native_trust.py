"""What a model wrote runs natively only as a pure literal checked on the host (status
``refused`` otherwise), wherever it would reach the native backend: ``trace`` of records
marked ``model_written``, ``score``'s input checks of native runs and the reward service's;
``repair``, which runs the code a model writes, refuses a native lock whole; ``harvest``
runs a package's own code with a model's literal inputs, and takes one
(tests/native/test_native_harvest.py)."""

from __future__ import annotations

import json

import duckdb
import pytest

import steptrace as st
from helpers.cli import assert_one_line_error, invoke, ok, rows
from helpers.openai_stub import answer
from helpers.predict import predict_with_stub
from steptrace.native_sandbox import find_python
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import resolve
from steptrace.scoring._reward import RewardJudge, RewardLimits

PROGRAM = "def f(xs, k=1):\n    out = [x * k for x in xs]\n    return sum(out)\n"
WRITTEN = ("the native backend does not run code a model wrote (its trust boundary is the "
           "kernel's, not WebAssembly's): trace it with --backend wasi")
NOT_LITERAL = ("a model's answer runs natively only as pure literals (what ast.literal_eval "
               "reads: numbers, strings, bytes, True, False, None and containers of them), "
               "and this one is not")


def test_trace_refuses_model_written_records_natively(tmp_path):
    corpus = tmp_path / "mixed.jsonl"
    records = [{"id": "given", "code": PROGRAM, "input": "[1, 2]", "output": "3"},
               {"id": "written", "code": PROGRAM, "input": "[1, 2]", "model_written": True},
               {"id": "written-text", "code": PROGRAM, "input": "[3]",
                "model_written": "generate"},
               {"id": "not-written", "code": PROGRAM, "input": "[4]", "model_written": False},
               # harvest's: the code is given, only the inputs are a model's
               {"id": "inputs", "code": PROGRAM, "inputs": ["[5]", "[6] * 2", "[1], k=frozenset()"],
                "model_written": "inputs"}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    native = tmp_path / "native.duckdb"
    summary = st.trace(corpus, native, workers=1, backend="native", python="3.13")
    assert dict(summary.by_status) == {"ok": 3, "refused": 4}
    assert rows(native, "SELECT sample_id, input, status, output, exception_message, "
                        "line_steps, backend FROM runs ORDER BY sample_id, input") == [
        ("given", "[1, 2]", "ok", "3", None, 2, "native"),
        ("inputs", "[1], k=frozenset()", "refused", None, NOT_LITERAL, None, "native"),
        ("inputs", "[5]", "ok", "5", None, 2, "native"),
        ("inputs", "[6] * 2", "refused", None, NOT_LITERAL, None, "native"),
        ("not-written", "[4]", "ok", "4", None, 2, "native"),
        ("written", "[1, 2]", "refused", None, WRITTEN, None, "native"),
        ("written-text", "[3]", "refused", None, WRITTEN, None, "native")]
    assert rows(native, "SELECT count(*) FROM steps JOIN runs USING (run_id) "
                        "WHERE status = 'refused'") == [(0,)]
    # the same records under WASI: a model's code runs there (job isolation)
    wasi = tmp_path / "wasi.duckdb"
    assert dict(st.trace(corpus, wasi, workers=1).by_status) == {"exception": 1, "ok": 6}
    # the CLI says it on its summary, as any status
    cli = tmp_path / "cli.duckdb"
    out = ok("trace", corpus, "--db", cli, "--backend", "native", "--python", "3.13",
             "--workers", 1, "--format", "json", "--quiet")
    assert (json.loads(out)["by_status"], json.loads(out)["store"]) == (
        {"ok": 3, "refused": 4}, {"ok": 3, "refused": 4})


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A store traced natively, its input task, answers predicted and scored."""
    tmp = tmp_path_factory.mktemp("trust")
    corpus, db, tasks_file = tmp / "corpus.jsonl", tmp / "t.duckdb", tmp / "tasks.jsonl"
    corpus.write_text(json.dumps({"id": "id", "code": PROGRAM, "input": "[1, 2], k=2"}) + "\n")
    st.trace(corpus, db, workers=1, backend="native", python="3.13")
    made = invoke("tasks", "--db", db, "--kinds", "input", "--out", tasks_file)
    assert made.exit_code == 0, made.output
    tasks = predict_with_stub(tasks_file, db, lambda task: [
        answer(f"[ANSWER]\n{text}\n[/ANSWER]") for text in ANSWERS], samples=len(ANSWERS))
    done = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 1, "--timeout", 10,
                  "--format", "json")
    assert done.exit_code == 0, done.output
    return db, tasks[0]


# answer -> (correct, score's note, the reward service's status)
VERDICTS = {
    "[6], k=1": (True, None, "ok"),                            # pure literals, right
    "[1, 2], 2": (True, None, "ok"),
    "[1, 2], k=3": (False, "returned 9", "ok"),                # pure literals, wrong
    "[-1.5, 7.5]": (True, None, "ok"),
    "[3] * 2": (False, f"refused: {NOT_LITERAL}", "refused"),  # safe, but not literals
    "list(range(3)), k=2": (False, f"refused: {NOT_LITERAL}", "refused"),
    "[x for x in (6,)]": (False, f"refused: {NOT_LITERAL}", "refused"),
    "*[[6]]": (False, f"refused: {NOT_LITERAL}", "refused"),
    "__import__('os').getcwd()": (False, "unsafe_input: the input is not made of literals, "
                                         "safe builtins and the program's names",
                                  "unsafe_input"),            # never run anywhere
}
ANSWERS = list(VERDICTS)


def test_score_checks_native_inputs_only_as_pure_literals(scored):
    db, _task = scored
    with duckdb.connect(str(db), read_only=True) as con:
        found = con.execute("SELECT p.answer, s.correct, s.note FROM scores s JOIN predictions "
                            "p USING (task_id, model, label, sample_index)").fetchall()
    assert {answer: (correct, note) for answer, correct, note in found} == {
        answer: verdict[:2] for answer, verdict in VERDICTS.items()}


def test_the_reward_service_refuses_them_as_score(scored):
    db, task = scored
    with RewardJudge(db, workers=1, limits=RewardLimits(sandbox=Limits(timeout_s=10))) as judge:
        results = judge.judge_batch([{"task_id": task["task_id"], "answer": a} for a in ANSWERS])
    assert {a: (r["correct"], r["status"]) for a, r in zip(ANSWERS, results)} == {
        a: (verdict[0], verdict[2]) for a, verdict in VERDICTS.items()}
    refused = results[ANSWERS.index("[3] * 2")]
    assert refused["detail"] == f"refused: {NOT_LITERAL}"


def test_repair_refuses_a_native_lock(tmp_path):
    lock = tmp_path / "native.lock"
    lock.write_text(resolve(["toolz==1.0.0"], python=find_python(None, "3.13").minor).text)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "code": PROGRAM, "input": "[1]", "output": "1"})
                      + "\n")
    assert_one_line_error(
        invoke("repair", corpus, "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
               "--out", tmp_path / "out.jsonl", "--packages", lock),
        "repair runs the code a model writes, which the native backend refuses "
        "(docs/guides/sandbox.md): repair with a lock for the WASI guest (steptrace build "
        "--with ... --lock FILE)")
