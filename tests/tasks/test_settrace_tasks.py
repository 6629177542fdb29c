"""``tasks --lines settrace``: the line-sequence kinds asked of the settrace view
(docs/guides/tasks.md, "Line views") on programs traced in the real sandbox: exact
answers in both views, ids and questions that tell them apart, the prompt's counting
rule, runs without a recorded view, the kinds that stay the steps', the CLI and the
errors; every settrace answer re-derived from native ``sys.settrace`` (CPython 3.13)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.errors import InputError
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tasks._templates import LINE_COUNTING, LINE_RULES
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.native_tracer import PYTHONS, NativeSettrace, native_python
from helpers.programs import CALLS_IN_COMPREHENSION, ONE_LINE_LOOPS

VIEW, CALLS = ONE_LINE_LOOPS, CALLS_IN_COMPREHENSION
RECORDS = [{"id": "view", "code": VIEW, "input": "[1, 2, 3]"},
           {"id": "calls", "code": CALLS, "input": "[1, 2]"}]
LINE_KINDS = ("next_line", "next_line_any", "coverage", "line_count", "steps", "trace")
COUNTING_KINDS = ("steps", "line_count", "trace")  # whose whole counting rule is the view's


def rule(kind: str) -> str:
    """What a settrace task's prompt of ``kind`` says of how lines are counted."""
    return LINE_COUNTING["settrace"] if kind in COUNTING_KINDS else LINE_RULES["settrace"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("settrace-tasks")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    db = tmp / "store.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0))
    return db


def made(db: Path, lines: str, kinds=LINE_KINDS + ("state",), per_run: int = 50) -> dict:
    """{(sample, kind, line, occurrence, var): task} of one generation."""
    summary = generate_tasks(db, TaskOptions(kinds=kinds, per_run=per_run, lines=lines))
    found = {}
    for task in summary.tasks.iter_rows(named=True):
        key = (task["sample_id"], task["kind"], task["line"], task["occurrence"], task["var"])
        assert key not in found
        found[key] = task
    return found


def answers(found: dict, sample: str, kind: str) -> dict:
    return {(line, k): task["answer"] for (s, kd, line, k, _), task in found.items()
            if s == sample and kd == kind}


def every_answer(db: Path, lines: str) -> dict:
    """{(sample, kind): {(line, occurrence): answer}} of every question the line kinds
    allow (trivial ones included), of the steps or of the settrace view."""
    from steptrace.tasks._candidates import run_facts, settrace_facts
    from steptrace.tasks._kinds import TASK_KINDS, tables_read
    from steptrace.tasks._program import program_info
    from steptrace.tasks._runs import load_runs
    options = TaskOptions(lines=lines)
    with duckdb.connect(str(db), read_only=True) as con:
        runs = load_runs(con, tables_read(LINE_KINDS, lines))
    found = {}
    for run in runs:
        facts = run_facts(run, program_info(run.code, run.entry), options)
        if lines == "settrace":
            facts = settrace_facts(facts)
        for kind in LINE_KINDS:
            found[(run.sample_id, kind)] = {(c.line, c.occurrence): c.answer
                                            for c in TASK_KINDS[kind].candidates(facts)}
    return found


def test_line_kinds_count_the_views_line_events(store):
    """The one-line loop (line 4) and the comprehension (line 2) run once each as steps,
    four times each in the settrace view (three items, and the jump that finds the
    end); lines 3 and 5 once in both."""
    monitoring, settrace = every_answer(store, "monitoring"), every_answer(store, "settrace")
    assert monitoring[("view", "line_count")] == {(2, None): "1", (3, None): "1",
                                                  (4, None): "1", (5, None): "1"}
    assert settrace[("view", "line_count")] == {(2, None): "4", (3, None): "1",
                                                (4, None): "4", (5, None): "1"}
    assert monitoring[("view", "steps")] == {(None, None): "4"}
    assert settrace[("view", "steps")] == {(None, None): "10"}
    assert monitoring[("view", "trace")] == {(None, None): "[[2, 0], [3, 0], [4, 0], [5, 0]]"}
    assert settrace[("view", "trace")] == {(None, None): json.dumps(
        [[2, 0]] * 4 + [[3, 0]] + [[4, 0]] * 4 + [[5, 0]])}
    assert monitoring[("view", "next_line")] == {(2, 1): "3", (3, 1): "4", (4, 1): "5"}
    assert settrace[("view", "next_line")] == {
        (2, 1): "2", (2, 2): "2", (2, 3): "2", (2, 4): "3", (3, 1): "4",
        (4, 1): "4", (4, 2): "4", (4, 3): "4", (4, 4): "5"}
    assert monitoring[("view", "next_line_any")] == {}  # (lines run once: not asked)
    assert settrace[("view", "next_line_any")] == {(2, None): "[2, 3]", (4, None): "[4, 5]"}
    assert monitoring[("view", "coverage")] == settrace[("view", "coverage")] == {
        (2, None): "true", (3, None): "true", (4, None): "true", (5, None): "true"}
    # a callee between: the comprehension's line comes back after each call of double
    # (double's `return` line, always followed by its return, is never asked)
    assert monitoring[("calls", "next_line")] == {(5, 1): "6"}
    assert settrace[("calls", "next_line")] == {(5, 1): "5", (5, 2): "5", (5, 3): "6"}
    assert settrace[("calls", "line_count")] == {(2, None): "2", (5, None): "3",
                                                 (6, None): "1"}
    assert (monitoring[("calls", "steps")], settrace[("calls", "steps")]) == (
        {(None, None): "4"}, {(None, None): "6"})


def test_settrace_tasks_say_so_and_keep_their_own_ids(store):
    monitoring, settrace = made(store, "monitoring"), made(store, "settrace")
    for key, task in settrace.items():
        question = json.loads(task["question"]) if task["question"] else {}
        if task["kind"] in LINE_KINDS:
            assert question["lines"] == "settrace", key
            # the same whether a line runs: coverage's prompt has no counting rule
            assert (rule(task["kind"]) in task["prompt"]) == (task["kind"] != "coverage"), key
            twin = monitoring.get(key)
            assert twin is None or twin["task_id"] != task["task_id"], key
        else:  # the state kinds ask about the steps' executions, as without the view
            assert "lines" not in question and "sys.settrace" not in task["prompt"], key
            assert task["task_id"] == monitoring[key]["task_id"]
            assert task["answer"] == monitoring[key]["answer"]
    for task in monitoring.values():
        assert "settrace" not in (task["question"] or "") and "sys.settrace" not in task["prompt"]
    prompt = settrace[("view", "line_count", 4, None, None)]["prompt"]
    assert ("(Lines are counted as sys.settrace reports them: a line counts each time a call "
            "comes to it from another line or starts there, so a line in a loop counts once "
            "each time round, and a `for` or `while` line each time its loop comes back to "
            "it, including the last check that ends the loop; a line also counts again each "
            "time execution jumps back to its start without leaving it (a loop, "
            "comprehension or generator expression written on that line going round for its "
            "next item, or to find it has none).)") in prompt


def test_runs_without_a_recorded_view_get_no_line_questions(store, tmp_path):
    """A run stored before schema 7 (settrace_line_steps NULL) has no view: no question
    of the line kinds with --lines settrace; its other kinds are asked as before."""
    db = tmp_path / "old.duckdb"
    db.write_bytes(store.read_bytes())
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE runs SET settrace_line_steps = NULL WHERE sample_id = 'view'")
        con.execute("DELETE FROM settrace_lines WHERE run_id IN (SELECT run_id FROM runs "
                    "WHERE sample_id = 'view')")
    found = made(db, "settrace")
    assert {kind for sample, kind, *_ in found if sample == "view"} == {"state"}
    assert {kind for sample, kind, *_ in found if sample == "calls"} == set(LINE_KINDS) | {
        "state"}


def test_the_cli_and_its_errors(store, tmp_path):
    out = tmp_path / "tasks.jsonl"
    result = CliRunner().invoke(main, ["tasks", "--db", str(store), "--kinds", "steps",
                                       "--lines", "settrace", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted((t["sample_id"], t["answer"], t["question"])
                  for t in map(json.loads, out.read_text().splitlines())) == [
        ("calls", "6", '{"lines": "settrace"}'), ("view", "10", '{"lines": "settrace"}')]
    result = CliRunner().invoke(main, ["tasks", "--db", str(store), "--lines", "sys"])
    assert result.exit_code == 2 and "Invalid value for '--lines'" in result.output
    with pytest.raises(InputError) as raised:
        generate_tasks(store, TaskOptions(kinds=("steps",), lines="sys"))
    assert str(raised.value) == "unknown line view 'sys': choose from monitoring, settrace"


@pytest.mark.skipif(native_python("3.13") is None,
                    reason=f"CPython 3.13 is not installed at {PYTHONS['3.13']}")
def test_settrace_answers_are_native_settraces(store):
    """Each settrace line_count, steps and trace answer is what a plain sys.settrace
    function counts in CPython 3.13 for the same call."""
    found = made(store, "settrace")
    with NativeSettrace("3.13") as native:
        for record in RECORDS:
            events = native.run(record["code"], record["input"])["events"]
            lines = [(line, depth) for event, _, line, depth in events if event == "line"]
            own = [(line, depth) for event, func, line, depth in events
                   if event == "line" and func == "f"]
            assert answers(found, record["id"], "steps") == {(None, None): str(len(lines))}
            assert answers(found, record["id"], "trace") == {
                (None, None): json.dumps([list(pair) for pair in lines])}
            for (line, _), count in answers(found, record["id"], "line_count").items():
                if line in {l for l, _ in own}:
                    assert count == str(sum(1 for l, _ in own if l == line)), (record, line)
