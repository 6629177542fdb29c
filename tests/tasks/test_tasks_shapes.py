"""Tasks about programs that are not one call (program shapes, docs/guides/corpus.md): a
script's module-level lines are asked about as "the script's top level", a class driven
by a unittest test method (REval's ClassEval half) is asked about through `self`, and
each prompt says how the program is run. Exact answers, from a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tracing._trace import TraceOptions, trace_corpus

SCRIPT = """\
n = int(input())
total = 0
for i in range(n):
    total += i
print(total)
"""
CALC = """\
class Calc:
    def __init__(self):
        self.memory = 0
    def add(self, x):
        self.memory += x
        return self.memory
"""
CALC_TEST = """\
import unittest
class TestCalc(unittest.TestCase):
    def test_add(self):
        c = Calc()
        c.add(2)
        self.assertEqual(c.add(3), 5)
"""
RECORDS = [
    {"id": "script", "shape": "script", "code": SCRIPT, "input": "3\n", "output": "3\n"},
    {"id": "calc", "code": CALC, "entry": "TestCalc.test_add", "input": "", "test": CALC_TEST},
]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("shape_tasks")
    corpus = tmp / "shapes.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    db = tmp / "shapes.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert dict(summary.by_status) == {"ok": 2}
    generate_tasks(db, TaskOptions(per_run=1000, out=tmp / "tasks.jsonl", workers=0))
    return [json.loads(line) for line in (tmp / "tasks.jsonl").read_text().splitlines()]


def _answers(tasks: list[dict], sample: str, kind: str) -> dict:
    return {(t["line"], t["var"], t["occurrence"]): t["answer"] for t in tasks
            if t["sample_id"] == sample and t["kind"] == kind}


def test_a_scripts_top_level_lines_are_asked_about(tasks):
    kinds = {t["kind"] for t in tasks if t["sample_id"] == "script"}
    assert kinds == {"state", "state_any", "next_line", "next_line_any", "coverage",
                     "line_count", "steps", "trace", "exception", "stdout",
                     "instruction_steps"}  # no output, input or output_type
    assert _answers(tasks, "script", "stdout") == {(None, None, None): "3\n"}
    state = _answers(tasks, "script", "state")
    assert {key: state[key] for key in [(4, "total", 1), (4, "total", 2), (4, "total", 3),
                                        (3, "i", 3), (1, "n", 1)]} == {
        (4, "total", 1): "0", (4, "total", 2): "1", (4, "total", 3): "3", (3, "i", 3): "2",
        (1, "n", 1): "3"}
    # (a line that runs once is not asked: the prompt gives its count away)
    assert _answers(tasks, "script", "line_count") == {(3, None, None): "4",
                                                         (4, None, None): "3"}
    assert _answers(tasks, "script", "next_line")[(3, None, 4)] == "5"
    assert _answers(tasks, "script", "trace")[(None, None, None)] == json.dumps(
        [[1, 0], [2, 0], [3, 0], [4, 0], [3, 0], [4, 0], [3, 0], [4, 0], [3, 0], [5, 0]])
    prompt = next(t["prompt"] for t in tasks if t["sample_id"] == "script" and
                  t["kind"] == "state" and (t["line"], t["var"], t["occurrence"]) == (4, "total", 2))
    assert ("It is run as a script, with this standard input:\n\n```\n3\n```\n\n"
            "Count the executions of line 4 (`total += i`) by the script's top level during "
            "this call") in prompt
    assert ("What is the value of the global variable `total` of the script's top level "
            "right after the 2nd execution of line 4") in prompt


def test_a_class_driven_by_a_test_method(tasks):
    """REval-style: the test code runs the class (untraced); questions are about the
    class's own lines, through `self`."""
    calc = [t for t in tasks if t["sample_id"] == "calc"]
    assert not [t for t in calc if t["kind"] in ("output", "input")]
    assert _answers(tasks, "calc", "exception") == {(None, None, None): "none"}
    state = _answers(tasks, "calc", "state")
    assert {key: state[key] for key in [(3, "self.memory", 1), (5, "self.memory", 1),
                                        (5, "self.memory", 2), (6, "self", 2)]} == {
        (3, "self.memory", 1): "0", (5, "self.memory", 1): "2", (5, "self.memory", 2): "5",
        (6, "self", 2): "Calc(memory=5)"}
    assert _answers(tasks, "calc", "line_count") == {(5, None, None): "2",
                                                       (6, None, None): "2"}
    prompt = next(t["prompt"] for t in calc if t["kind"] == "state"
                  and t["var"] == "self.memory" and t["line"] == 5 and t["occurrence"] == 2)
    assert (f"It is run by the test `TestCalc.test_add` of this test code (the questions are "
            f"about the program above, not the test code):\n\n```\n{CALC_TEST}```\n") in prompt
    assert ("What is the value of `self.memory` (where `self` is the local variable of "
            "`Calc.add`) right after the 2nd execution of line 5") in prompt
