"""Answer extraction (engine/tasks/_answers.py): one rule per answer form, with the exact
answer (or none: unparsed) of each response, adversarial ones included (several answer
blocks, nested and stray tags, fenced blocks, calls of another name, unbalanced
brackets); the same answers from ``predict`` for tasks of every prompt style (a real stub
server on 127.0.0.1) and from the reward service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steptrace.predictions._predict import PredictOptions, predict
from steptrace.scoring._reward import RewardJudge, RewardLimits
from steptrace.sandbox._limits import Limits
from steptrace.tasks._answers import answer_form, extract_answer
from steptrace.tasks._kinds import KINDS
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.cli import rows
from helpers.openai_stub import StubServer, answer
from helpers.predict import MODEL
from helpers.sample_corpus import RECORDS

# (response, the answer extracted from it) for a task whose program's entry is f
FORMS = {
    "value": [
        ("[ANSWER]\n[1, 2]\n[/ANSWER]", "[1, 2]"),
        ("[answer] 'a' [/Answer]", "'a'"),
        ("[ANSWER]1[/ANSWER] or rather [ANSWER]2[/ANSWER]", "2"),           # the last block
        ("[ANSWER]1[/ANSWER] then [ANSWER] \n [/ANSWER]", "1"),              # a blank one skipped
        ("[ANSWER]1[/ANSWER] then [ANSWER]maybe 2[/ANSWER]", None),          # the last decides
        ("[ANSWER] a [ANSWER] 2 [/ANSWER] b [/ANSWER]", "2"),                # nested: the inner
        ("[ANSWER] 3 [/ANSWER] [/ANSWER]", "3"),                             # a stray close
        ("[/ANSWER] 3", None),
        ("[ANSWER]\n{'k': (1,)}", "{'k': (1,)}"),                            # left open
        ("assert f(1) == 5\n[ANSWER]6[/ANSWER]", "6"),                       # a block first
        ("[ANSWER]\n```python\n'x'\n```\n[/ANSWER]", "'x'"),
        ("```\n(1, 2)\n```", "(1, 2)"),
        ("```\n1\n```\nand\n```python\n2\n```", "2"),                        # the last fence
        ("```\n[3,\n", None),                                               # unclosed, unbalanced
        ("[ANSWER]f(1)[/ANSWER]", "f(1)"),                                   # a value that calls f
        ("[ANSWER]f(1) == 5[/ANSWER]", "5"),
        ("[ANSWER]5 == f(1)[/ANSWER]", "5"),
        ("[ANSWER]g(1) == 5[/ANSWER]", None),                                # no value: a comparison
        ("[ANSWER]assert f('x') == 'xx'[/ANSWER]", "'xx'"),
        ("[ANSWER]assert g('x') == 'xx'[/ANSWER]", None),                    # another function
        ("assert g(1) == 5", None),
        ("assert f(1) == 5\nassert f(2) == 6", "6"),
        ("assert f(1) == ??", None),
        ("assert f(1) == [1, 2", None),                                      # unbalanced
        ("[ANSWER][1, 2[/ANSWER]", None),
        ("[ANSWER]Node(v=7)[/ANSWER]", "Node(v=7)"),
        ("  'abc'  ", "'abc'"),
        ("f('abc') == 'cba'", "'cba'"),
        ("The answer is 5.", None),
        ("(" * 300 + ")" * 300, None),                                       # past the parser
    ],
    "arguments": [
        ("[ANSWER]'abc', 2[/ANSWER]", "'abc', 2"),
        ("[ANSWER]f('abc', 2)[/ANSWER]", "'abc', 2"),                        # the whole call
        ("[ANSWER]g('abc', 2)[/ANSWER]", "g('abc', 2)"),                     # an argument
        ("[ANSWER]f(f(1))[/ANSWER]", "f(1)"),
        ("[ANSWER]f('abc', 2[/ANSWER]", None),                               # unbalanced
        ("[ANSWER]f('abc', 2))[/ANSWER]", None),
        ("[ANSWER]'a', 'b'[/ANSWER] [ANSWER]f('c')[/ANSWER]", "'c'"),
        ("[ANSWER]assert f('abc', 2) == 'x'[/ANSWER]", "'abc', 2"),
        ("[ANSWER]assert g('abc') == 'x'[/ANSWER]", None),
        ("assert f('a)b', k=[1]) == 3", "'a)b', k=[1]"),
        ("assert f(x == 1) == ??", "x == 1"),
        ("assert 3 == f(4)", "4"),
        ("f(1) == 2", "1"),
        ("[ANSWER]x=1, *ys[/ANSWER]", "x=1, *ys"),
        ("```python\nf([1])\n```", "[1]"),
        ("```python\nassert f([1]) == 1\n```", "[1]"),
        ("[ANSWER]\n```\nf(2)\n```\n[/ANSWER]", "2"),
        ("[ANSWER]1, 2 are the arguments[/ANSWER]", None),
        ("I would call f(3).", None),
    ],
    "text": [
        ("[ANSWER]\nKeyError: 'a'\n[/ANSWER]", "KeyError: 'a'"),
        ("KeyError: 'a'", None),                                             # bare: no expression
        ("[ANSWER]f(1)[/ANSWER]", "f(1)"),                                   # as it is
        ("[ANSWER]assert f(1) == 2[/ANSWER]", "assert f(1) == 2"),
        ("assert f(1) == 2", None),
        ("[ANSWER]1[/ANSWER][ANSWER]2[/ANSWER]", "2"),
        ("[ANSWER] a [ANSWER] 2 [/ANSWER] [/ANSWER]", "2"),
        ("[ANSWER]\n```\n[[1, 0]]\n```\n[/ANSWER]", "[[1, 0]]"),
        ("```\nreturn\n```", "return"),
        ("return", "return"),
        ("  true ", "true"),
        ("It is true.", None),
    ],
    "verbatim": [
        ("[ANSWER]\n  *\n *\n[/ANSWER]", "  *\n *"),
        ("[ANSWER] 42 [/ANSWER]", "42"),
        ("[ANSWER]\na\n[/ANSWER]\n[ANSWER]\nb\n[/ANSWER]", "b"),
        ("```\n x\n```", " x"),
        ("x", None),                                                         # bare: never
    ],
}
KIND_OF_FORM = {"value": "output", "arguments": "input", "text": "error",
                "verbatim": "stdout"}
CASES = [(form, response, expected) for form, cases in FORMS.items()
         for response, expected in cases]


def test_each_kind_has_its_form():
    assert {kind: answer_form(kind) for kind in KINDS} == {
        **{kind: "text" for kind in KINDS}, "output": "value", "input": "arguments",
        "stdout": "verbatim"}
    assert answer_form("no-such-kind") == "text"


@pytest.mark.parametrize("form, response, expected", CASES)
def test_the_answer_of_each_response(form, response, expected):
    kind = KIND_OF_FORM[form]
    assert extract_answer(response, kind, entry="f") == expected
    if form == "text":  # every text kind alike
        for other in ("state", "next_line", "type", "trace", "coverage"):
            assert extract_answer(response, other, entry="f") == expected


@pytest.mark.parametrize("response, entry, expected", [
    ("[ANSWER]Stack.push(1)[/ANSWER]", "Stack.push", "1"),
    ("[ANSWER]push(1)[/ANSWER]", "Stack.push", "push(1)"),
    ("assert Stack.push(1) == None", "Stack.push", "1"),
    ("assert Stack.push(1) == ??", "Stack.push", "1"),
    ("assert push(1) == ??", "Stack.push", None),
    ("[ANSWER]f(1)[/ANSWER]", None, "f(1)"),          # no entry known: not reduced
    ("assert g(1) == ??", None, "1"),                  # ... any name's assertion
    ("assert a.b(1) == 2", None, "1"),
])
def test_the_entry_names_the_call(response, entry, expected):
    assert extract_answer(response, "input", entry=entry) == expected


# ------------------------------------------------------------------ end to end
STYLE_KINDS = {"direct": ("output", "input", "error", "stdout"),
               "cot": ("output", "input", "error", "stdout"),
               "cruxeval": ("output", "input")}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("answers")
    corpus = tmp / "small.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    db = tmp / "s.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0))
    return tmp, db


def test_every_style_gets_the_same_answers(store):
    """Each task of each style asked once per response of its form (one sample each):
    every stored answer is the table's, whatever the style, and ``parsed`` says whether
    there is one."""
    tmp, db = store
    checked = {}
    for style, kinds in STYLE_KINDS.items():
        out = tmp / f"{style}.jsonl"
        generate_tasks(db, TaskOptions(kinds=kinds, per_run=1, prompt_style=style, out=out))
        tasks = [json.loads(line) for line in out.read_text().splitlines()]
        form_of = {t["task_id"]: answer_form(t["kind"]) for t in tasks}
        script = {t["task_id"]: [answer(response) for response, _ in FORMS[form_of[t["task_id"]]]]
                  for t in tasks}
        samples = max(len(cases) for cases in FORMS.values())
        for task_id, replies in script.items():  # every task gets `samples` replies
            replies += [answer("padding")] * (samples - len(replies))
        with StubServer(script, key_of={t["prompt"]: t["task_id"] for t in tasks}.get) as server:
            predict(out, db, PredictOptions(MODEL, server.base_url, samples=samples,
                                            concurrency=1, label=style, max_retries=0))
        stored = {(task_id, sample): (found, parsed) for task_id, sample, found, parsed in rows(
            db, f"SELECT task_id, sample_index, answer, parsed FROM predictions "
                f"WHERE label = '{style}'")}
        for t in tasks:
            for sample, (_, expected) in enumerate(FORMS[form_of[t["task_id"]]]):
                assert stored[(t["task_id"], sample)] == (expected, expected is not None), (
                    style, t["kind"], sample)
        checked[style] = sorted({t["kind"] for t in tasks})
    assert checked == {"direct": ["error", "input", "output", "stdout"],
                       "cot": ["error", "input", "output", "stdout"],
                       "cruxeval": ["input", "output"]}


def test_the_reward_service_extracts_alike(store):
    """A response judged by the reward service gives the result its extracted answer
    (as the table has it) gives: the same verdict, status and detail."""
    _, db = store
    generate_tasks(db, TaskOptions(kinds=("output", "input", "error"), per_run=1))
    tasks = {kind: task_id for task_id, kind in rows(
        db, "SELECT task_id, kind FROM tasks WHERE sample_id = 'add'")}
    tasks["error"] = rows(db, "SELECT task_id FROM tasks WHERE kind = 'error'")[0][0]
    items, expected_items = [], []
    for form, kind in (("value", "output"), ("arguments", "input"), ("text", "error")):
        for response, expected in FORMS[form]:
            items.append({"task_id": tasks[kind], "response": response})
            expected_items.append({"task_id": tasks[kind], "answer": expected})
    with RewardJudge(db, workers=1, limits=RewardLimits(sandbox=Limits(timeout_s=5.0))) as judge:
        got, want = judge.judge_batch(items), judge.judge_batch(expected_items)
    assert got == want
    # judged without running (output, error), run in the sandbox (input: f(a, b) adds),
    # refused unrun (g(...): not safe arguments), and unparsed
    assert {r["status"] for r in got} == {"judged", "exception", "invalid", "unsafe_input",
                                          "unparseable"}
