"""Prediction tasks (engine/tasks/_tasks.py, ``steptrace tasks``): exact answers for every kind
on hand-written programs traced in the real sandbox, including lines that a lambda or
generator expression shares with its caller (counted per function); each answer
re-derived a second way, from its prompt's words and the raw tables (SQL window
functions over ``steps``/``states``, written here, against the module's Python replay;
condition outcomes also against the step trace); the selection rules, determinism,
stable ids, the tasks table and files, templates, the CLI, and the counts and answers
on the 800 CRUXEval runs."""

from __future__ import annotations

import ast
import csv
import io
import json
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.store._store import StoreError, connect
from steptrace.tasks._kinds import KINDS, parse_kinds
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tasks._templates import load_templates, numbered, ordinal
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.programs import LOOP  # noqa: F401
from helpers.native import Native
from helpers.rederive import parse_question, rederive

REC = """\
def f(n):
    if n <= 1:
        return 1
    r = n * f(n - 1)
    return r
"""
GEN = """\
def squares(n):
    for i in range(n):
        yield i * i
    return

def f(n):
    out = []
    for v in squares(n):
        out.append(v)
    g = squares(5)
    first = next(g)
    return out, first
"""
EXC = """\
def check(x):
    if x < 0:
        raise ValueError(x)
    return x

def f(xs):
    seen = 0
    for x in xs:
        try:
            seen += check(x)
        except ValueError:
            seen -= 100
            del x
        if seen > 5:
            return seen
    return -1
"""
UNCAUGHT = """\
def f(d):
    k = 'a'
    v = d[k]
    return v
"""
WHILE_ELSE = """\
def f(n):
    i = 0
    while i < n:
        if i == 10:
            break
        i += 2
    else:
        i = -i
    return i
"""
BRANCHY = """\
def f(xs):
    ys = [x for x in xs if x > 1]
    label = 'many' if len(ys) > 1 else 'few'
    return label, ys
"""
COVER = """\
def helper(x):
    return x * 2

def f(x):
    if x > 0:
        y = helper(x)
    else:
        y = 0
    total = (y +
             1)
    return total
"""
IMPLICIT = """\
def add(xs, x):
    xs.append(x)

def f(n):
    out = []
    for i in range(n):
        add(out, i)
    return out
"""
OBJECTS = """\
class Acc:
    def __init__(self):
        self.total = 0
        self.seen = []
    def add(self, x):
        self.total += x
        self.seen.append(x)

def f(xs):
    a = Acc()
    b = a
    for x in xs:
        b.add(x)
        copy = list(a.seen)
        total = a.total
    return total
"""
RECORDS = [
    {"id": "loop", "code": LOOP, "input": "[1, 2, 3]"},
    {"id": "rec", "code": REC, "input": "3"},
    {"id": "gen", "code": GEN, "input": "2"},
    {"id": "exc", "code": EXC, "input": "[1, -2, 200, 7]"},
    {"id": "uncaught", "code": UNCAUGHT, "input": "{}"},
    {"id": "while", "code": WHILE_ELSE, "input": "3"},
    {"id": "branchy", "code": BRANCHY, "input": "[0, 2, 3]"},
    {"id": "cover", "code": COVER, "input": "-1"},
    {"id": "implicit", "code": IMPLICIT, "input": "2"},
    {"id": "objects", "code": OBJECTS, "input": "[2, 0.5]"},
]
ALL = 1000  # per_run large enough to take every question that is not trivial


# ------------------------------------------------------------------ helpers
def write_corpus(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def copy_db(source: Path, target_dir: Path) -> Path:
    target = target_dir / "copy.duckdb"
    shutil.copyfile(source, target)
    return target


def key_of(task: dict):
    """The question's identity within one run and kind, as the expected tables write it."""
    kind = task["kind"]
    if kind in ("state", "type"):
        return task["line"], task["var"], task["occurrence"]
    if kind == "alias":
        return task["line"], task["var"], json.loads(task["question"])["other"], task["occurrence"]
    if kind == "state_any":
        return task["line"], task["var"]
    if kind in ("next_line", "branch"):
        return task["line"], task["occurrence"]
    if kind in ("next_line_any", "coverage", "line_count"):
        return task["line"]
    return None


def answers(tasks: list[dict], sample: str) -> dict[str, object]:
    """kind -> {question key: answer} (whole-run kinds: the answer) for one sample."""
    found: dict[str, dict] = defaultdict(dict)
    for task in tasks:
        if task["sample_id"] == sample:
            key = key_of(task)
            assert key not in found[task["kind"]], f"duplicate question {task}"
            found[task["kind"]][key] = task["answer"]
    return {kind: (values[None] if None in values else values) for kind, values in found.items()}


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Path:
    """The hand-written programs traced in-process into a fresh store (no tasks yet)."""
    tmp = tmp_path_factory.mktemp("tasks_traced")
    db = tmp / "hand.duckdb"
    summary = trace_corpus(write_corpus(tmp / "hand.jsonl", RECORDS), db,
                           TraceOptions(workers=0))
    assert summary.traced == len(RECORDS)
    return db


@pytest.fixture(scope="module")
def generated(traced, tmp_path_factory) -> tuple[Path, list[dict]]:
    """Every kind, every question that is not trivial: (store, JSONL records)."""
    tmp = tmp_path_factory.mktemp("tasks_all")
    db = copy_db(traced, tmp)
    generate_tasks(db, TaskOptions(per_run=ALL, out=tmp / "tasks.jsonl", workers=0))
    return db, read_jsonl(tmp / "tasks.jsonl")


# ------------------------------------------------------------------ exact answers by hand
EXPECTED = {
    # f([1, 2, 3]): line steps 2 3 4 5 | 3 4 7 | 3 4 5 | 3 8. The 4th run of the `for`
    # line is the check that ends the loop (x keeps 3, next line 8).
    "loop": {
        "output_type": "int", "instruction_steps": "44",
        "output": "3", "input": "[1, 2, 3]", "steps": "12", "exception": "none",
        "trace": json.dumps([[2, 0], [3, 0], [4, 0], [5, 0], [3, 0], [4, 0], [7, 0], [3, 0],
                             [4, 0], [5, 0], [3, 0], [8, 0]]),
        "state": {
            (2, "total", 1): "0",
            (3, "total", 1): "0", (3, "x", 1): "1", (3, "total", 2): "1", (3, "x", 2): "2",
            (3, "total", 3): "0", (3, "x", 3): "3", (3, "total", 4): "3", (3, "x", 4): "3",
            (4, "total", 1): "0", (4, "x", 1): "1", (4, "total", 2): "1", (4, "x", 2): "2",
            (4, "total", 3): "0", (4, "x", 3): "3",
            (5, "total", 1): "1", (5, "x", 1): "1", (5, "total", 2): "3", (5, "x", 2): "3",
            (7, "total", 1): "0", (7, "x", 1): "2",
            (8, "total", 1): "3", (8, "x", 1): "3",
        },
        "state_any": {(3, "total"): '["0", "1", "3"]', (3, "x"): '["1", "2", "3"]',
                      (4, "total"): '["0", "1"]', (4, "x"): '["1", "2", "3"]',
                      (5, "total"): '["1", "3"]', (5, "x"): '["1", "3"]'},
        "next_line": {(3, 1): "4", (3, 2): "4", (3, 3): "4", (3, 4): "8",
                      (4, 1): "5", (4, 2): "7", (4, 3): "5", (5, 1): "3", (5, 2): "3",
                      (7, 1): "3"},  # once, but back to the loop: not the line below
        "next_line_any": {3: "[4, 8]", 4: "[5, 7]", 5: "[3]"},
        "coverage": {4: "true", 5: "true", 7: "true"},
        "line_count": {3: "4", 4: "3", 5: "2"},
        "branch": {(4, 1): "true", (4, 2): "false", (4, 3): "true"},
    },
    # f(3) recurses to f(2), f(1): line 4 runs first in f(3) (k=1, r=6 once it finishes)
    # and then in f(2) (k=2, r=2), though f(2)'s finishes first.
    "rec": {
        "output_type": "int", "instruction_steps": "35",
        "output": "6", "input": "3", "steps": "8", "exception": "none",
        "trace": json.dumps([[2, 0], [4, 0], [2, 1], [4, 1], [2, 2], [3, 2], [5, 1], [5, 0]]),
        "state": {(2, "n", 2): "2", (2, "n", 3): "1", (3, "n", 1): "1",
                  (4, "r", 1): "6", (4, "n", 2): "2", (4, "r", 2): "2",
                  (5, "n", 1): "2", (5, "r", 1): "2", (5, "r", 2): "6"},
        "state_any": {(2, "n"): '["1", "2", "3"]', (4, "n"): '["2", "3"]',
                      (4, "r"): '["2", "6"]', (5, "n"): '["2", "3"]', (5, "r"): '["2", "6"]'},
        "next_line": {(2, 1): "4", (2, 2): "4", (2, 3): "3", (4, 1): "5", (4, 2): "5"},
        "next_line_any": {2: "[3, 4]", 4: "[5]"},
        "coverage": {3: "true"},
        "line_count": {2: "3", 4: "2", 5: "2"},
        "branch": {(2, 1): "false", (2, 2): "false", (2, 3): "true"},
    },
    # A generator consumed by a for loop, and one abandoned after its first yield: the
    # yield line has no state question (it has not finished) and its last execution no
    # next line (the frame never went on); resumed, the next line is the `for` line.
    "gen": {
        "output_type": "tuple", "instruction_steps": "66",
        "output": "([0, 1], 0)", "input": "2", "steps": "17", "exception": "none",
        "trace": json.dumps([[7, 0], [8, 0], [2, 1], [3, 1], [9, 0], [8, 0], [2, 1], [3, 1],
                             [9, 0], [8, 0], [2, 1], [4, 1], [10, 0], [11, 0], [2, 1],
                             [3, 1], [12, 0]]),
        "state": {
            (2, "i", 1): "0", (2, "i", 2): "1", (2, "i", 3): "1", (2, "i", 4): "0",
            (2, "n", 4): "5", (4, "i", 1): "1", (7, "out", 1): "[]",
            (8, "out", 1): "[]", (8, "v", 1): "0", (8, "out", 2): "[0]", (8, "v", 2): "1",
            (8, "out", 3): "[0, 1]", (8, "v", 3): "1",
            (9, "out", 1): "[0]", (9, "v", 1): "0", (9, "out", 2): "[0, 1]", (9, "v", 2): "1",
            (10, "out", 1): "[0, 1]", (10, "v", 1): "1",
            (11, "first", 1): "0", (11, "out", 1): "[0, 1]", (11, "v", 1): "1",
            (12, "first", 1): "0", (12, "out", 1): "[0, 1]", (12, "v", 1): "1",
        },
        "state_any": {(2, "i"): '["0", "1"]', (2, "n"): '["2", "5"]',
                      (8, "out"): '["[0, 1]", "[0]", "[]"]', (8, "v"): '["0", "1"]',
                      (9, "out"): '["[0, 1]", "[0]"]', (9, "v"): '["0", "1"]'},
        "next_line": {(2, 1): "3", (2, 2): "3", (2, 3): "4", (2, 4): "3", (3, 1): "2",
                      (3, 2): "2", (8, 1): "9", (8, 2): "9", (8, 3): "10", (9, 1): "8",
                      (9, 2): "8"},
        "next_line_any": {2: "[3, 4]", 8: "[9, 10]", 9: "[8]"},
        "coverage": {2: "true", 3: "true", 4: "true", 9: "true"},
        "line_count": {2: "4", 3: "3", 8: "3", 9: "2"},
    },
    # check(-2) raises, caught in f: `del x` leaves x unbound until the loop binds it
    # again; f returns early at 101 (line 16 never runs); check's raise line ends its
    # frame ("raise").
    "exc": {
        "output_type": "int", "instruction_steps": "83",
        "output": "101", "input": "[1, -2, 200, 7]", "steps": "23", "exception": "none",
        "trace": json.dumps([[7, 0], [8, 0], [9, 0], [10, 0], [2, 1], [4, 1], [14, 0], [8, 0],
                             [9, 0], [10, 0], [2, 1], [3, 1], [11, 0], [12, 0], [13, 0],
                             [14, 0], [8, 0], [9, 0], [10, 0], [2, 1], [4, 1], [14, 0],
                             [15, 0]]),
        "state": {
            (2, "x", 1): "1", (2, "x", 2): "-2", (2, "x", 3): "200", (3, "x", 1): "-2",
            (4, "x", 1): "1", (4, "x", 2): "200", (7, "seen", 1): "0",
            (8, "seen", 1): "0", (8, "x", 1): "1", (8, "seen", 2): "1", (8, "x", 2): "-2",
            (8, "seen", 3): "-99", (8, "x", 3): "200",
            (9, "seen", 1): "0", (9, "x", 1): "1", (9, "seen", 2): "1", (9, "x", 2): "-2",
            (9, "seen", 3): "-99", (9, "x", 3): "200",
            (10, "seen", 1): "1", (10, "x", 1): "1", (10, "seen", 2): "1", (10, "x", 2): "-2",
            (10, "seen", 3): "101", (10, "x", 3): "200",
            (11, "seen", 1): "1", (11, "x", 1): "-2",
            (12, "seen", 1): "-99", (12, "x", 1): "-2",
            (13, "seen", 1): "-99", (13, "x", 1): "unbound",
            (14, "seen", 1): "1", (14, "x", 1): "1", (14, "seen", 2): "-99",
            (14, "x", 2): "unbound", (14, "seen", 3): "101", (14, "x", 3): "200",
            (15, "seen", 1): "101", (15, "x", 1): "200",
        },
        "state_any": {(2, "x"): '["-2", "1", "200"]', (4, "x"): '["1", "200"]',
                      (8, "seen"): '["-99", "0", "1"]', (8, "x"): '["-2", "1", "200"]',
                      (9, "seen"): '["-99", "0", "1"]', (9, "x"): '["-2", "1", "200"]',
                      (10, "seen"): '["1", "101"]', (10, "x"): '["-2", "1", "200"]',
                      (14, "seen"): '["-99", "1", "101"]'},
        "next_line": {(2, 1): "4", (2, 2): "3", (2, 3): "4", (3, 1): "raise",
                      (8, 1): "9", (8, 2): "9", (8, 3): "9", (9, 1): "10", (9, 2): "10",
                      (9, 3): "10", (10, 1): "14", (10, 2): "11", (10, 3): "14",
                      (14, 1): "8", (14, 2): "8", (14, 3): "15"},
        "next_line_any": {2: "[3, 4]", 8: "[9]", 9: "[10]", 10: "[11, 14]", 14: "[8, 15]"},
        "coverage": {2: "true", 3: "true", 4: "true", 9: "true", 10: "true", 11: "true",
                     12: "true", 13: "true", 14: "true", 15: "true", 16: "false"},
        "line_count": {2: "3", 4: "2", 8: "3", 9: "3", 10: "3", 14: "3", 16: "0"},
        "branch": {(2, 1): "false", (2, 2): "true", (2, 3): "false",
                   (14, 1): "false", (14, 2): "false", (14, 3): "true"},
    },
    # d['a'] raises KeyError out of f: line 3 ends the frame by an exception.
    "uncaught": {
        "instruction_steps": "4",
        "steps": "2", "exception": "KeyError", "error": "KeyError: 'a'",
        "trace": "[[2, 0], [3, 0]]",
        "state": {(2, "k", 1): "'a'", (3, "k", 1): "'a'"},
        "next_line": {(3, 1): "raise"},
        "coverage": {4: "false"},
        "line_count": {4: "0"},
    },
    # i = 0, 2, 4: the while test is true twice, then false, so the else clause runs.
    "while": {
        "output_type": "int", "instruction_steps": "36",
        "output": "-4", "input": "3", "steps": "10", "exception": "none",
        "trace": json.dumps([[2, 0], [3, 0], [4, 0], [6, 0], [3, 0], [4, 0], [6, 0], [3, 0],
                             [8, 0], [9, 0]]),
        "state": {(2, "i", 1): "0", (3, "i", 1): "0", (3, "i", 2): "2", (3, "i", 3): "4",
                  (4, "i", 1): "0", (4, "i", 2): "2", (6, "i", 1): "2", (6, "i", 2): "4",
                  (8, "i", 1): "-4", (9, "i", 1): "-4"},
        "state_any": {(3, "i"): '["0", "2", "4"]', (4, "i"): '["0", "2"]',
                      (6, "i"): '["2", "4"]'},
        "next_line": {(3, 1): "4", (3, 2): "4", (3, 3): "8", (4, 1): "6", (4, 2): "6",
                      (6, 1): "3", (6, 2): "3"},
        "next_line_any": {3: "[4, 8]", 4: "[6]", 6: "[3]"},
        "coverage": {4: "true", 5: "false", 6: "true", 8: "true"},
        "line_count": {3: "3", 4: "2", 5: "0", 6: "2"},
        "branch": {(3, 1): "true", (3, 2): "true", (3, 3): "false",
                   (4, 1): "false", (4, 2): "false"},
    },
    # Straight-line code: every line runs once and goes on to the next, so there is no
    # coverage, line-count or next-line question (the prompt gives those away). The
    # filter sees 0, 2, 3; the conditional expression is true.
    "branchy": {
        "output_type": "tuple", "instruction_steps": "46",
        "output": "('many', [2, 3])", "input": "[0, 2, 3]", "steps": "3",
        "exception": "none", "trace": "[[2, 0], [3, 0], [4, 0]]",
        "state": {(2, "ys", 1): "[2, 3]", (3, "label", 1): "'many'", (3, "ys", 1): "[2, 3]",
                  (4, "label", 1): "'many'", (4, "ys", 1): "[2, 3]"},
        "branch": {(2, 1): "false", (2, 2): "true", (2, 3): "true", (3, 1): "true"},
    },
    # helper is never called, the if is false: lines 2 and 6 never run. The two-line
    # statement (lines 9-10) is never a question, nor a next line.
    "cover": {
        "output_type": "int", "instruction_steps": "12",
        "output": "1", "input": "-1", "steps": "6", "exception": "none",
        "trace": "[[5, 0], [8, 0], [9, 0], [10, 0], [9, 0], [11, 0]]",
        "state": {(8, "y", 1): "0", (11, "total", 1): "1", (11, "y", 1): "0"},
        "next_line": {(5, 1): "8"},
        "coverage": {2: "false", 6: "false", 8: "true"},
        "line_count": {2: "0", 6: "0"},
        "branch": {(5, 1): "false"},
    },
    # add() ends without a return statement: after its line 2 the frame returns. Its
    # list argument is the caller's, mutated: [0] after the first call, [0, 1] after the
    # second.
    "implicit": {
        "output_type": "list", "instruction_steps": "38",
        "output": "[0, 1]", "input": "2", "steps": "9", "exception": "none",
        "trace": json.dumps([[5, 0], [6, 0], [7, 0], [2, 1], [6, 0], [7, 0], [2, 1], [6, 0],
                             [8, 0]]),
        "state": {(5, "out", 1): "[]",
                  (6, "out", 1): "[]", (6, "i", 1): "0", (6, "out", 2): "[0]",
                  (6, "i", 2): "1", (6, "out", 3): "[0, 1]", (6, "i", 3): "1",
                  (7, "out", 1): "[0]", (7, "i", 1): "0", (7, "out", 2): "[0, 1]",
                  (7, "i", 2): "1",
                  (2, "xs", 1): "[0]", (2, "x", 1): "0", (2, "xs", 2): "[0, 1]",
                  (2, "x", 2): "1",
                  (8, "out", 1): "[0, 1]", (8, "i", 1): "1"},
        "state_any": {(2, "xs"): '["[0, 1]", "[0]"]', (2, "x"): '["0", "1"]',
                      (6, "out"): '["[0, 1]", "[0]", "[]"]', (6, "i"): '["0", "1"]',
                      (7, "out"): '["[0, 1]", "[0]"]', (7, "i"): '["0", "1"]'},
        "next_line": {(2, 1): "return", (2, 2): "return", (6, 1): "7", (6, 2): "7",
                      (6, 3): "8", (7, 1): "6", (7, 2): "6"},
        "next_line_any": {2: '["return"]', 6: "[7, 8]", 7: "[6]"},
        "coverage": {2: "true", 7: "true"},
        "line_count": {2: "2", 6: "3", 7: "2"},
    },
}


@pytest.mark.parametrize("sample", list(EXPECTED))
def test_exact_answers_for_every_kind(generated, sample):
    """Every question generated for the program and its exact answer, kind by kind (a
    kind missing from the table has no question for this run)."""
    _, tasks = generated
    assert answers(tasks, sample) == EXPECTED[sample]


def test_questions_about_objects(generated):
    """The objects program: attribute paths through `self` and through both names of one
    Acc, the type where it changes (int, then float after adding 0.5), and whether two
    names are one object (a and b, a.seen and b.seen) or two equal ones (a.seen and the
    argument xs, both [2, 0.5], after the second add; the copy)."""
    _, tasks = generated
    found = answers(tasks, "objects")
    assert {key: found["state"][key] for key in [
        (3, "self.total", 1), (4, "self.seen", 1), (6, "self.total", 2), (6, "self.seen", 2),
        (7, "self.seen", 1), (11, "b.total", 1), (13, "a.total", 2), (16, "b.total", 1)]} == {
        (3, "self.total", 1): "0", (4, "self.seen", 1): "[]", (6, "self.total", 2): "2.5",
        (6, "self.seen", 2): "[2]", (7, "self.seen", 1): "[2]", (11, "b.total", 1): "0",
        (13, "a.total", 2): "2.5", (16, "b.total", 1): "2.5"}
    assert found["state"][(4, "self", 1)] == "Acc(total=0, seen=[])"
    assert (7, "self.seen", 2) not in found["state"]  # [2, 0.5]: the argument's own value
    assert {key: found["type"][key] for key in [
        (6, "self.total", 1), (6, "self.total", 2), (12, "x", 2), (15, "total", 2),
        (10, "a", 1)]} == {(6, "self.total", 1): "int", (6, "self.total", 2): "float",
                           (12, "x", 2): "float", (15, "total", 2): "float", (10, "a", 1): "Acc"}
    assert not [key for key in found["type"] if key[1] in ("copy", "a.seen")]  # lists always
    alias = found["alias"]
    assert {key: alias[key] for key in [
        (11, "a", "b", 1), (11, "a.seen", "b.seen", 1), (16, "a.seen", "xs", 1),
        (14, "a.seen", "copy", 1), (12, "copy", "xs", 3)]} == {
        (11, "a", "b", 1): "true", (11, "a.seen", "b.seen", 1): "true",
        (16, "a.seen", "xs", 1): "false", (14, "a.seen", "copy", 1): "false",
        (12, "copy", "xs", 3): "false"}
    assert (13, "a.seen", "xs", 1) not in alias  # [2] and [2, 0.5]: the values say so
    assert set(alias.values()) == {"true", "false"}


# ------------------------------------------------------------------ lines two functions run
# A lambda or generator expression runs in a frame of its own, on the line of the
# statement that uses it, so one line has executions by two functions. A question names
# one of them and counts only its executions (README, Kinds).
SHARED = """\
def f(xs):
    ys = sorted(xs, key=lambda x: -x)
    total = sum(y * 2 for y in ys if y > 1)
    zs = [z + 1 for z in ys]
    for k in filter(lambda v: v % 2, xs):
        total += k
    both = list(map(lambda a: a + 1, filter(lambda b: b > 1, xs)))
    return total, zs, both
"""
NESTED = """\
def f(n):
    def double(a): return a * 2
    out = [double(i) for i in range(n)]
    return out
"""
LAMBDA = "f.<locals>.<lambda>"
DOUBLE = "f.<locals>.double"
SHARED_EXPECTED = {
    # f([3, 1, 2]). Line 2: f once, then its lambda once per item (x = 3, 1, 2). Line 3:
    # the generator expression stops at a yield after each line step, so it gets no state
    # question, and f's own execution is asked about. Line 4's list comprehension runs
    # inside f (PEP 709). Line 5: f's `for` check and the filter's lambda take turns, f
    # first: counted over both functions, f's 2nd check was the 3rd execution and its
    # 3rd the 5th. Line 7 holds two lambdas, so "the lambda on line 7" would not say
    # which: neither is asked about. A line f runs once is no *_any, line-count or
    # next-line question however often its lambda runs (line 2 ran 4 times in all).
    "shared": {
        "state": {
            (LAMBDA, 2, "x", 1): "3", (LAMBDA, 2, "x", 2): "1", (LAMBDA, 2, "x", 3): "2",
            ("f", 2, "ys", 1): "[3, 2, 1]",
            ("f", 3, "total", 1): "10", ("f", 3, "ys", 1): "[3, 2, 1]",
            ("f", 4, "total", 1): "10", ("f", 4, "ys", 1): "[3, 2, 1]",
            ("f", 4, "zs", 1): "[4, 3, 2]",
            **{("f", 5, "ys", k): "[3, 2, 1]" for k in (1, 2, 3)},
            **{("f", 5, "zs", k): "[4, 3, 2]" for k in (1, 2, 3)},
            ("f", 5, "k", 1): "3", ("f", 5, "total", 1): "10",
            ("f", 5, "k", 2): "1", ("f", 5, "total", 2): "13",
            ("f", 5, "k", 3): "1", ("f", 5, "total", 3): "14",
            (LAMBDA, 5, "v", 1): "3", (LAMBDA, 5, "v", 2): "1", (LAMBDA, 5, "v", 3): "2",
            ("f", 6, "k", 1): "3", ("f", 6, "total", 1): "13",
            ("f", 6, "k", 2): "1", ("f", 6, "total", 2): "14",
            ("f", 6, "ys", 1): "[3, 2, 1]", ("f", 6, "zs", 1): "[4, 3, 2]",
            ("f", 6, "ys", 2): "[3, 2, 1]", ("f", 6, "zs", 2): "[4, 3, 2]",
            **{("f", line, var, 1): value for line in (7, 8) for var, value in (
                ("both", "[4, 3]"), ("k", "1"), ("total", "14"), ("ys", "[3, 2, 1]"),
                ("zs", "[4, 3, 2]"))},
        },
        "state_any": {
            (LAMBDA, 2, "x", None): '["1", "2", "3"]', (LAMBDA, 5, "v", None): '["1", "2", "3"]',
            ("f", 5, "k", None): '["1", "3"]', ("f", 5, "total", None): '["10", "13", "14"]',
            ("f", 5, "ys", None): '["[3, 2, 1]"]', ("f", 5, "zs", None): '["[4, 3, 2]"]',
            ("f", 6, "k", None): '["1", "3"]', ("f", 6, "total", None): '["13", "14"]',
            ("f", 6, "ys", None): '["[3, 2, 1]"]', ("f", 6, "zs", None): '["[4, 3, 2]"]',
        },
        "next_line": {("f", 5, None, 1): "6", ("f", 5, None, 2): "6", ("f", 5, None, 3): "7",
                      ("f", 6, None, 1): "5", ("f", 6, None, 2): "5"},
        "next_line_any": {("f", 5, None, None): "[6, 7]", ("f", 6, None, None): "[5]"},
        "coverage": {(None, 6, None, None): "true"},
        "line_count": {(None, 5, None, None): "3", (None, 6, None, None): "2"},
        "branch": {(None, 3, None, 1): "true", (None, 3, None, 2): "true",
                   (None, 3, None, 3): "false"},
    },
    # f(3): line 2 is f's `def` (once) and double's `return a * 2` (three calls, a = 0, 1,
    # 2). double's next line is always `return` (a return statement: not asked), and f
    # runs every line once, straight down.
    "nested": {
        "state": {(DOUBLE, 2, "a", 1): "0", (DOUBLE, 2, "a", 2): "1", (DOUBLE, 2, "a", 3): "2",
                  ("f", 3, "out", 1): "[0, 2, 4]", ("f", 4, "out", 1): "[0, 2, 4]"},
        "state_any": {(DOUBLE, 2, "a", None): '["0", "1", "2"]'},
    },
}


@pytest.fixture(scope="module")
def shared_generated(tmp_path_factory) -> tuple[Path, list[dict]]:
    """SHARED and NESTED traced and every question that is not trivial asked."""
    tmp = tmp_path_factory.mktemp("tasks_shared")
    db = tmp / "shared.duckdb"
    records = [{"id": "shared", "code": SHARED, "input": "[3, 1, 2]"},
               {"id": "nested", "code": NESTED, "input": "3"}]
    assert trace_corpus(write_corpus(tmp / "shared.jsonl", records), db,
                        TraceOptions(workers=0)).traced == 2
    generate_tasks(db, TaskOptions(per_run=ALL, out=tmp / "tasks.jsonl", workers=0))
    return db, read_jsonl(tmp / "tasks.jsonl")


def by_function(tasks: list[dict], sample: str) -> dict[str, dict]:
    """kind -> {(func, line, var, k): answer} for the line kinds of one sample."""
    found: dict[str, dict] = defaultdict(dict)
    for task in tasks:
        if task["sample_id"] == sample and task["line"] is not None:
            func = json.loads(task["question"]).get("func") if task["question"] else None
            key = (func, task["line"], task["var"], task["occurrence"])
            assert key not in found[task["kind"]], f"duplicate question {task}"
            found[task["kind"]][key] = task["answer"]
    return dict(found)


@pytest.mark.parametrize("sample", list(SHARED_EXPECTED))
def test_a_line_two_functions_run_is_counted_per_function(shared_generated, sample):
    _, tasks = shared_generated
    assert by_function(tasks, sample) == SHARED_EXPECTED[sample]


def test_prompts_name_the_function_whose_executions_count(shared_generated):
    """A named function by its qualified name, a lambda by its line; each prompt says
    that only that function's executions count. line_count names the line's own
    function (its question and id do not carry it)."""
    _, tasks = shared_generated
    by = {(t["sample_id"], t["kind"], t["question"] and json.loads(t["question"]).get("func"),
           t["line"], t["var"], t["occurrence"]): t for t in tasks}
    question = by[("shared", "state", LAMBDA, 5, "v", 2)]["prompt"].rpartition("```")[2]
    assert ("Count the executions of line 5 (`for k in filter(lambda v: v % 2, xs):`) by the "
            "lambda on line 5 during this call, in the order they happen, over every call of "
            "the lambda on line 5 (recursive calls included). Only executions by the lambda on "
            "line 5 itself count: a lambda or generator expression is a function of its own. "
            "What is the value of the local variable `v` of the lambda on line 5 right after "
            "the 2nd execution of line 5, in the call of the lambda on line 5 that executed "
            "it?") in question
    assert "by `f` during this call" in by[("shared", "next_line", "f", 5, None, 3)]["prompt"]
    assert ("Line 2 (`def double(a): return a * 2`) is run several times by "
            "`f.<locals>.double` during this call.") in by[
        ("nested", "state_any", DOUBLE, 2, "a", None)]["prompt"]
    line_count = by[("shared", "line_count", None, 5, None, None)]
    assert line_count["question"] is None
    assert ("How many times does `f` run line 5 (`for k in filter(lambda v: v % 2, xs):`) "
            "during this call, counting every call of `f`? Only executions by `f` itself "
            "count") in line_count["prompt"]


def test_shared_line_answers_agree_with_their_prompts(shared_generated):
    """The second path on these programs: every task re-derived from its prompt."""
    db, tasks = shared_generated
    assert check_against_sql(db) == Counter(t["kind"] for t in tasks)


@pytest.fixture(scope="module")
def native():
    runner = Native()
    yield runner
    runner.close()


@pytest.mark.slow
def test_every_answer_follows_from_its_prompt_alone(generated, shared_generated, native):
    """The third path (tests/helpers/rederive.py): every task of these programs (a
    recursion, generators, exceptions caught and not, ``del``, ``while``-``else``,
    comprehensions and conditional expressions, a lambda and a generator expression on
    the line that uses them, objects), re-derived from its prompt and the program alone,
    run in a CPython 3.14 of the tests' own."""
    tasks = generated[1] + shared_generated[1]
    assert rederive(tasks, native) == Counter(t["kind"] for t in tasks)


def test_answer_and_value_types(generated):
    """answer_type says how to read the answer; value_type is the Python type of a
    returned value or variable (NULL for unbound)."""
    _, tasks = generated
    types = {(t["sample_id"], t["kind"], key_of(t)): (t["answer_type"], t["value_type"])
             for t in tasks}
    assert types[("exc", "state", (13, "x", 1))] == ("unbound", None)
    assert types[("exc", "state", (12, "x", 1))] == ("repr", "int")
    assert types[("gen", "state", (8, "out", 2))] == ("repr", "list")
    assert types[("uncaught", "state", (2, "k", 1))] == ("repr", "str")
    assert types[("gen", "output", None)] == ("repr", "tuple")
    assert types[("loop", "input", None)] == ("input", None)
    assert types[("loop", "state_any", (3, "x"))] == ("set", None)
    assert types[("uncaught", "next_line", (3, 1))] == ("line", None)
    assert types[("loop", "next_line_any", 3)] == ("set", None)
    assert types[("cover", "coverage", 2)] == ("bool", None)
    assert types[("loop", "branch", (4, 1))] == ("bool", None)
    assert types[("loop", "line_count", 3)] == ("int", None)
    assert types[("loop", "steps", None)] == ("int", None)
    assert types[("loop", "trace", None)] == ("trace", None)
    assert types[("uncaught", "exception", None)] == ("exception", None)


def test_difficulty_features(generated):
    """line_steps, distinct_lines, branch_count per run; loop_nesting of the line (for,
    while and comprehensions around it; 0 for whole-run kinds); occurrence = k."""
    _, tasks = generated
    by = {(t["sample_id"], t["kind"], key_of(t)): t for t in tasks}
    task = by[("loop", "state", (5, "total", 2))]
    assert (task["line_steps"], task["distinct_lines"], task["branch_count"],
            task["loop_nesting"], task["occurrence"]) == (12, 6, 3, 1, 2)
    assert by[("loop", "next_line", (3, 4))]["loop_nesting"] == 0  # the header is not inside
    assert by[("loop", "steps", None)]["loop_nesting"] == 0
    assert by[("loop", "steps", None)]["occurrence"] is None
    assert by[("branchy", "branch", (2, 1))]["loop_nesting"] == 1  # inside the comprehension
    assert by[("branchy", "branch", (3, 1))]["loop_nesting"] == 0
    assert by[("exc", "coverage", 12)]["loop_nesting"] == 1
    assert (by[("exc", "output", None)]["branch_count"],
            by[("gen", "output", None)]["branch_count"]) == (6, None)  # gen has no conditions
    assert {(t["sample_id"], t["line_steps"], t["distinct_lines"]) for t in tasks
            if t["kind"] == "steps"} == {
        ("loop", 12, 6), ("rec", 8, 4), ("gen", 17, 9), ("exc", 23, 12), ("uncaught", 2, 2),
        ("while", 10, 6), ("branchy", 3, 3), ("cover", 6, 5), ("implicit", 9, 5),
        ("objects", 18, 11)}


def test_question_fields_and_ids(generated):
    """question JSON carries what the columns do not (function, condition); task_id is
    the sha256 of run key, kind and question."""
    db, tasks = generated
    by = {(t["sample_id"], t["kind"], key_of(t)): t for t in tasks}
    assert json.loads(by[("gen", "state", (2, "i", 1))]["question"]) == {"func": "squares"}
    assert json.loads(by[("branchy", "branch", (2, 1))]["question"]) == {
        "col": 27, "condition": "x > 1", "condition_kind": "filter"}
    assert json.loads(by[("branchy", "branch", (3, 1))]["question"]) == {
        "col": 22, "condition": "len(ys) > 1", "condition_kind": "ifexp"}
    assert json.loads(by[("while", "branch", (3, 1))]["question"])["condition_kind"] == "while"
    assert json.loads(by[("loop", "output", None)]["question"]) == {"input": "[1, 2, 3]"}
    assert by[("loop", "steps", None)]["question"] is None
    assert len({t["task_id"] for t in tasks}) == len(tasks)
    assert all(len(t["task_id"]) == 64 for t in tasks)


# ------------------------------------------------------------------ the second path
# Every task is re-derived from the words of its prompt alone (function, line, k,
# variable, condition: helpers.rederive.parse_question) and the raw tables (steps, states,
# branches, runs), by code written here: SQL window functions instead of
# steptrace.tasks._tasks' Python replay, the prompt parsed instead of the task's columns. A
# task whose answer does not follow from what its prompt says fails, whatever the columns
# hold. (The third path, tests/tasks/test_prompt_answers.py, needs no store: it runs the
# program as the prompt says, in a CPython 3.14 of the tests' own.)
ANONYMOUS_WORDS = {"lambda": (ast.Lambda, "<lambda>"),
                   "generator expression": (ast.GeneratorExp, "<genexpr>")}
EXECUTIONS = """
WITH frame_steps AS (
    SELECT run_id, step, event, func, line,
           lead(step) OVER (PARTITION BY run_id, frame ORDER BY step) AS after_step,
           lead(event) OVER (PARTITION BY run_id, frame ORDER BY step) AS after_event
    FROM steps),
ends AS (
    SELECT run_id, step, lead(event) OVER w AS next_event, lead(line) OVER w AS next_line
    FROM steps WHERE event IN ('line', 'return', 'unwind')
    WINDOW w AS (PARTITION BY run_id, frame ORDER BY step))
SELECT f.run_id, f.func, f.line, f.step, f.after_step, f.after_event,
       CASE e.next_event WHEN 'line' THEN CAST(e.next_line AS VARCHAR)
                         WHEN 'return' THEN 'return' WHEN 'unwind' THEN 'raise' END
FROM frame_steps f JOIN ends e USING (run_id, step)
WHERE f.event = 'line'
ORDER BY f.run_id, f.step
"""
# The frame's locals at the step after a line: each variable's last delta in that frame
# up to that step (a deleted name has value and type NULL).
AFTER = """
WITH nxt AS (
    SELECT run_id, step, event, line, frame,
           lead(step) OVER (PARTITION BY run_id, frame ORDER BY step) AS after_step
    FROM steps)
SELECT ls.run_id, ls.step, st.var,
       arg_max({'value': st.value, 'type': st.type, 'object_id': st.object_id}, st.step)
FROM nxt ls
JOIN asked_lines USING (run_id, line)
JOIN steps fs ON fs.run_id = ls.run_id AND fs.frame = ls.frame AND fs.step <= ls.after_step
JOIN states st ON st.run_id = fs.run_id AND st.step = fs.step
WHERE ls.event = 'line'
GROUP BY ALL
"""


def function_named(words: str, line: int, code: str, funcs_on_line: set[str]) -> str:
    """The qualified name of the function the prompt's words name: `` `f.<locals>.g` ``
    as written (each of its names a def around the line, outermost first), "the lambda on
    line 3" the one lambda written on that line (the words must not fit two)."""
    tree = ast.parse(code)
    if words.startswith("`"):
        qualname = words.strip("`")
        around = sorted((node.lineno, node.name) for node in ast.walk(tree)
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                             ast.ClassDef))
                        and node.lineno <= line <= node.end_lineno)
        names = [part for part in qualname.split(".") if part != "<locals>"]
        assert names == [name for _, name in around][:len(names)], (qualname, line)
        return qualname
    match = re.fullmatch(r"the (lambda|generator expression) on line (\d+)", words)
    assert match and int(match[2]) == line, words
    node_type, tag = ANONYMOUS_WORDS[match[1]]
    assert sum(isinstance(node, node_type) and node.lineno <= line <= node.end_lineno
               for node in ast.walk(tree)) == 1, (words, code)
    named = {func for func in funcs_on_line if func.rsplit(".", 1)[-1] == tag}
    assert len(named) == 1, (words, named)
    return named.pop()


def condition_col(code: str, line: int, condition: str) -> int:
    """The column of the one condition on ``line`` whose text (whitespace collapsed) is
    the prompt's."""
    tree = ast.parse(code)
    tests = [test for node in ast.walk(tree)
             for test in ([node.test] if isinstance(node, (ast.If, ast.While, ast.IfExp))
                          else node.ifs if isinstance(node, ast.comprehension) else [])]
    cols = [test.col_offset for test in tests if test.lineno == line
            and " ".join(ast.get_source_segment(code, test).split()) == condition]
    assert len(cols) == 1, (line, condition, cols)
    return cols[0]


VALUE_KINDS = ("state", "state_any", "type", "alias")  # questions about a name's value


def check_prompts(db: Path) -> Counter:
    """Assert that every stored task of a kind about a line (state, state_any, next_line,
    next_line_any, line_count, coverage, branch) has the answer its prompt's words give,
    re-derived from the raw tables; count them by kind."""
    tasks = rows(db, "SELECT t.kind, t.run_id, t.prompt, t.answer, p.code FROM tasks t "
                     "JOIN runs r USING (run_id) JOIN programs p USING (program_id)")
    asked = [(kind, run, parse_question(kind, prompt), answer, code)
             for kind, run, prompt, answer, code in tasks]
    asked = [item for item in asked if item[2] is not None]
    with duckdb.connect(str(db), read_only=True) as con:
        con.execute("CREATE TEMP TABLE asked_lines (run_id BIGINT, line INTEGER)")
        con.executemany("INSERT INTO asked_lines VALUES (?, ?)", sorted(
            {(run, q["line"]) for kind, run, q, _, _ in asked if kind in VALUE_KINDS}))
        execs: dict[tuple, list[tuple]] = defaultdict(list)   # (run, func, line) -> steps
        on_line: dict[tuple, set[str]] = defaultdict(set)     # (run, line) -> funcs
        for run, func, line, step, after_step, after_event, following in con.execute(
                EXECUTIONS).fetchall():
            execs[(run, func, line)].append((step, after_step, after_event, following))
            on_line[(run, line)].add(func)
        after: dict[tuple, dict[str, tuple]] = defaultdict(dict)  # (run, step) -> locals
        for run, step, var, last in con.execute(AFTER).fetchall():
            after[(run, step)][var] = (last["value"], last["type"], last["object_id"])
        # (run, object, attribute) -> its rows (step, value, type, ref_id), in step order
        history: dict[tuple, list[tuple]] = defaultdict(list)
        for run, step, obj, attr, value, type_, ref in con.execute(
                "SELECT run_id, step, object_id, attr, value, type, ref_id FROM attributes "
                "ORDER BY run_id, step, rowid").fetchall():
            history[(run, obj, attr)].append((step, value, type_, ref))
        branches = {(run, line, col, k): taken for run, line, col, k, taken in con.execute(
            "SELECT run_id, line, col, evaluation, taken FROM branches").fetchall()}

    def named(run: int, step: int, after_step: int, name: str) -> tuple:
        """(value, type, object id) of a local or an attribute path right after the line
        step ``step``, at the frame's next step ``after_step``: the local's last state row
        in its frame, then each attribute's last row at or before that step, followed
        through ref_id."""
        root, *attrs = name.split(".")
        value, type_, obj = after[(run, step)][root]
        for attr in attrs:
            rows_ = [row for row in history[(run, obj, attr)] if row[0] <= after_step]
            assert rows_, (run, step, name)
            _, value, type_, obj = rows_[-1]
        return value, type_, obj

    checked: Counter = Counter()
    for kind, run, q, answer, code in asked:
        line = q["line"]
        assert q["text"] == source_line(code, line), (kind, run, line)
        if "function" in q:
            func = function_named(q["function"], line, code, on_line[(run, line)])
            mine = execs[(run, func, line)]
            assert q.get("k") is None or q["k"] <= len(mine), (kind, run, q, len(mine))
        if kind in VALUE_KINDS:
            var = q["var"] or q["path"]
            assert q.get("root") is None or var.partition(".")[0] == q["root"]
        if kind in ("state", "type", "alias"):
            step, after_step, after_event, _ = mine[q["k"] - 1]
            assert after_step is not None and after_event != "yield"  # the line finished
            value, type_, obj = named(run, step, after_step, var)
        if kind == "state":
            expected = value if type_ is not None else "unbound"
        elif kind == "type":
            expected = type_
        elif kind == "alias":
            other = named(run, step, after_step, q["other"])
            assert obj is not None and other[2] is not None
            expected = json.dumps(obj == other[2])
        elif kind == "state_any":
            values = [named(run, step, after_step, var) for step, after_step, _, _ in mine]
            assert all(type_ is not None for _, type_, _ in values)
            expected = json.dumps(sorted({value for value, _, _ in values}), ensure_ascii=False)
        elif kind == "next_line":
            expected = mine[q["k"] - 1][3]
        elif kind == "next_line_any":
            found = {following for _, _, _, following in mine}
            expected = json.dumps(sorted(int(a) for a in found if a.isdigit())
                                  + sorted(a for a in found if not a.isdigit()))
        elif kind == "line_count":
            expected = str(len(mine))
        elif kind == "coverage":
            expected = json.dumps(bool(on_line[(run, line)]))
        else:  # branch
            col = condition_col(code, line, q["condition"])
            expected = json.dumps(branches[(run, line, col, q["k"])])
        assert answer == expected, (kind, run, q)
        checked[kind] += 1
    return checked


def source_line(code: str, line: int) -> str:
    """Line ``line`` of the program as Python numbers lines, stripped."""
    return numbered(code).splitlines()[line - 1].partition(" | ")[2].strip()


def check_whole_runs(db: Path) -> Counter:
    """The whole-run kinds (output, input, steps, trace, exception, error, output_type,
    stdout, instruction_steps) against the runs
    and steps tables; count them by kind."""
    runs = {r[0]: r[1:] for r in rows(
        db, "SELECT r.run_id, r.output, r.input, coalesce(r.exception_type, 'none'), "
            "CASE WHEN r.status = 'exception' AND r.exception_message = '' "
            "THEN r.exception_type WHEN r.status = 'exception' "
            "THEN r.exception_type || ': ' || r.exception_message END, "
            "(SELECT count(*) FROM steps s WHERE s.run_id = r.run_id AND s.event = 'line'), "
            "r.line_steps, (SELECT to_json(list([s.line, s.depth] ORDER BY s.step)) "
            "FROM steps s WHERE s.run_id = r.run_id AND s.event = 'line'), r.output_type, "
            "r.stdout, CAST(r.instruction_steps AS VARCHAR) FROM runs r")}
    checked: Counter = Counter()
    for kind, run, answer in rows(db, "SELECT kind, run_id, answer FROM tasks WHERE kind IN "
                                      "('output', 'input', 'steps', 'trace', 'exception', "
                                      "'error', 'output_type', 'stdout', 'instruction_steps')"):
        (output, input_, exception, error, line_events, line_steps, trace, output_type,
         stdout, instructions) = runs[run]
        assert line_events == line_steps
        expected = {"output": output, "input": input_, "steps": str(line_steps),
                    "trace": json.dumps(json.loads(trace)) if trace else None,
                    "exception": exception, "error": error, "output_type": output_type,
                    "stdout": stdout, "instruction_steps": instructions}[kind]
        assert answer == expected, (kind, run)
        checked[kind] += 1
    return checked


def check_against_sql(db: Path) -> Counter:
    """Every stored task re-derived a second way (line kinds from their prompts' words);
    the count by kind."""
    return check_prompts(db) + check_whole_runs(db)


def test_every_answer_agrees_with_sql(generated):
    """All hand-program tasks, every kind, re-derived from their prompts and the tables."""
    db, tasks = generated
    checked = check_against_sql(db)
    assert checked == Counter(t["kind"] for t in tasks)
    # none of these programs prints: stdout's answers are checked against the runs table
    # in tests/tasks/test_run_kinds.py
    assert set(checked) == set(KINDS) - {"stdout"}


NEXT_TRUTH = """
WITH m AS (
    SELECT run_id, step, event, line,
           lead(event) OVER w AS next_event, lead(line) OVER w AS next_line
    FROM steps WHERE event IN ('line', 'return', 'unwind')
    WINDOW w AS (PARTITION BY run_id, frame ORDER BY step))
SELECT run_id, line, row_number() OVER (PARTITION BY run_id, line ORDER BY step) AS k,
       CASE next_event WHEN 'line' THEN CAST(next_line AS VARCHAR)
                       WHEN 'return' THEN 'return' WHEN 'unwind' THEN 'raise' END
FROM m WHERE event = 'line'
"""


def branch_check(db: Path) -> int:
    """A condition alone on an if/elif/while line is evaluated once per execution of the
    line, and is true exactly when the next line is its body's first line: check each
    such branch task against the step trace (SQL), not the branches table."""
    nexts = {(r, line, k): a for r, line, k, a in rows(db, NEXT_TRUTH)}
    counts = dict(((r, line), n) for r, line, n in rows(
        db, "SELECT run_id, line, count(*) FROM steps WHERE event = 'line' GROUP BY ALL"))
    evaluations = dict(((r, line), n) for r, line, n in rows(
        db, "SELECT run_id, line, count(*) FROM branches GROUP BY ALL"))
    tasks = rows(db, "SELECT t.run_id, t.line, t.occurrence, t.answer, t.question, p.code "
                     "FROM tasks t JOIN runs r USING (run_id) JOIN programs p USING "
                     "(program_id) WHERE t.kind = 'branch'")
    checked = 0
    for run, line, k, answer, question, code in tasks:
        col = json.loads(question)["col"]
        node = next((n for n in ast.walk(ast.parse(code)) if isinstance(n, (ast.If, ast.While))
                     and (n.test.lineno, n.test.col_offset) == (line, col)), None)
        if (node is None or node.body[0].lineno == line or node.test.end_lineno != line
                or counts.get((run, line)) != evaluations[(run, line)]):
            continue
        assert answer == json.dumps(nexts[(run, line, k)] == str(node.body[0].lineno)), (run, line, k)
        checked += 1
    return checked


def test_branch_answers_agree_with_the_steps(generated):
    db, tasks = generated
    # loop 3, rec 3, exc 6, while 5, cover 1: every if/while task (not branchy's two kinds)
    assert branch_check(db) == 18


# ------------------------------------------------------------------ selection
def test_selection_skips_what_the_prompt_gives_away(generated):
    """No state equal to an argument (xs, n, d never asked as they came in), no variable
    holding a memory address (the generator object g), no state after a yield line, no
    entry def line, no *_any question about a line run once, no return line asked for
    its next line."""
    db, tasks = generated
    states = [t for t in tasks if t["kind"] == "state"]
    assert not [t for t in states if t["var"] in ("xs", "d") and t["sample_id"] != "implicit"]
    assert not [t for t in states if t["sample_id"] in ("loop", "while") and t["var"] == "n"]
    assert not [t for t in states if t["var"] == "g"]
    assert not [t for t in states if t["sample_id"] == "gen" and t["line"] == 3]
    assert not [t for t in tasks if t["line"] == 1]  # every program's line 1 is a def
    counts = dict(((r, line), n) for r, line, n in rows(
        db, "SELECT run_id, line, count(*) FROM steps WHERE event = 'line' GROUP BY ALL"))
    any_kinds = [t for t in tasks if t["kind"] in ("state_any", "next_line_any")]
    assert any_kinds and all(counts[(t["run_id"], t["line"])] >= 2 for t in any_kinds)
    assert not [t for t in tasks if t["kind"].startswith("next_line")
                and (t["sample_id"], t["line"]) in {("loop", 8), ("rec", 3), ("rec", 5),
                                                    ("exc", 4), ("exc", 15), ("gen", 4)}]


def test_per_run_limit_prefers_informative_questions(traced, tmp_path):
    """--per-run 1: one question of each kind per run; a run's best question wins (the
    loop's exit for next_line, a branch taken both ways in its minority outcome, a line
    that never runs for coverage, the most-run line for line_count)."""
    db = copy_db(traced, tmp_path)
    generate_tasks(db, TaskOptions(per_run=1, seed=0, out=tmp_path / "t.jsonl", workers=0))
    tasks = read_jsonl(tmp_path / "t.jsonl")
    per = Counter((t["run_id"], t["kind"]) for t in tasks)
    assert set(per.values()) == {1}
    by = {(t["sample_id"], t["kind"]): t for t in tasks}
    assert (by[("loop", "next_line")]["line"], by[("loop", "next_line")]["answer"]) in {
        (3, "8"), (4, "7")}
    assert (by[("loop", "branch")]["occurrence"], by[("loop", "branch")]["answer"]) == (2, "false")
    assert (by[("exc", "coverage")]["line"], by[("exc", "coverage")]["answer"]) == (16, "false")
    assert (by[("while", "line_count")]["line"], by[("while", "line_count")]["answer"]) == (3, "3")
    assert by[("uncaught", "next_line")]["answer"] == "raise"


def test_same_seed_same_tasks_other_seed_other_choice(traced, tmp_path):
    """A seed fixes the selection; another seed picks other questions among equals."""
    def make(name: str, seed: int) -> list[dict]:
        folder = tmp_path / name
        folder.mkdir()
        generate_tasks(copy_db(traced, folder),
                       TaskOptions(per_run=2, seed=seed, out=folder / "t.jsonl", workers=0))
        return [{k: v for k, v in t.items() if k != "created_at"}
                for t in read_jsonl(folder / "t.jsonl")]
    first, again, other = make("a", 5), make("b", 5), make("c", 6)
    assert first == again
    assert {t["task_id"] for t in first} != {t["task_id"] for t in other}
    assert [t["seed"] for t in first] == [5] * len(first)


def test_other_runs_do_not_change_a_runs_tasks(tmp_path):
    """Seeding per (seed, run key, kind): a store with more runs gives the shared runs
    exactly the same tasks."""
    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    small = tmp_path / "small" / "t.duckdb"
    large = tmp_path / "large" / "t.duckdb"
    # the same corpus file name: a run key includes it
    trace_corpus(write_corpus(tmp_path / "small" / "c.jsonl", RECORDS[:2]), small,
                 TraceOptions(workers=0))
    trace_corpus(write_corpus(tmp_path / "large" / "c.jsonl", RECORDS[:2] + RECORDS[5:6]),
                 large, TraceOptions(workers=0))
    kinds = ("state", "next_line", "coverage", "line_count")
    for db in (small, large):
        generate_tasks(db, TaskOptions(kinds=kinds, per_run=2, seed=3))
    query = ("SELECT sample_id, task_id, answer, prompt FROM tasks "
             "WHERE sample_id IN ('loop', 'rec') ORDER BY task_id")
    assert rows(small, query) == rows(large, query)
    assert rows(large, "SELECT count(DISTINCT sample_id) FROM tasks") == [(3,)]


def test_rerun_keeps_ids_rows_and_creation_time(traced, tmp_path):
    """Running again with the same arguments stores the same rows (no duplicates) and
    keeps each task's created_at; another prompt style replaces the prompt in place."""
    db = copy_db(traced, tmp_path)
    options = TaskOptions(per_run=2, seed=1, out=tmp_path / "t.jsonl", workers=0)
    first = generate_tasks(db, options)
    before = rows(db, "SELECT task_id, created_at, prompt FROM tasks ORDER BY task_id")
    second = generate_tasks(db, options)
    assert rows(db, "SELECT task_id, created_at, prompt FROM tasks ORDER BY task_id") == before
    assert first.by_kind == second.by_kind
    assert len(before) == first.total
    generate_tasks(db, TaskOptions(per_run=2, seed=1, prompt_style="cot", workers=0))
    after = rows(db, "SELECT task_id, created_at, prompt_style FROM tasks ORDER BY task_id")
    assert [(i, c) for i, c, _ in after] == [(i, c) for i, c, _ in before]
    assert {style for _, _, style in after} == {"cot"}


def test_jsonl_parquet_and_table_hold_the_same_tasks(generated):
    db, tasks = generated
    folder = Path(str(db)).parent
    parquet = pl.read_parquet(folder / "tasks.parquet")
    with duckdb.connect(str(db), read_only=True) as con:
        table = con.sql("SELECT * FROM tasks").pl()
    assert parquet.columns == table.columns == list(tasks[0])
    assert parquet.height == table.height == len(tasks)
    assert (parquet.drop("created_at").sort("task_id").to_dicts()
            == table.drop("created_at").sort("task_id").to_dicts())
    assert parquet["task_id"].to_list() == [t["task_id"] for t in tasks]
    assert parquet.drop("created_at").to_dicts() == [
        {k: v for k, v in t.items() if k != "created_at"} for t in tasks]


# ------------------------------------------------------------------ prompts and templates
def test_prompts_show_numbered_code_and_the_question(generated):
    _, tasks = generated
    by = {(t["sample_id"], t["kind"], key_of(t)): t["prompt"] for t in tasks}
    prompt = by[("exc", "state", (13, "x", 1))]
    assert numbered(EXC) in prompt
    assert "13 |             del x" in prompt
    assert "`f([1, -2, 200, 7])`" in prompt
    assert "line 13 (`del x`)" in prompt and "1st execution" in prompt and "`x`" in prompt
    assert "[ANSWER]" in prompt and "[/ANSWER]" in prompt and "unbound" in prompt
    assert "$" not in prompt
    assert "`x > 1`" in by[("branchy", "branch", (2, 3))]
    assert "3rd evaluation" in by[("branchy", "branch", (2, 3))]
    output_prompt = by[("loop", "output", None)]
    assert LOOP.rstrip("\n") in output_prompt and "f([1, 2, 3])" in output_prompt
    input_prompt = by[("loop", "input", None)]
    assert "[1, 2, 3]" not in input_prompt and "\n3\n" in input_prompt


def test_numbered_and_ordinal():
    assert numbered("a\n\nb") == "1 | a\n2 |\n3 | b"
    assert numbered("\n".join("x" * 10)).splitlines()[9] == "10 | x"
    assert [ordinal(k) for k in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


def test_cot_and_cruxeval_styles(traced, tmp_path):
    db = copy_db(traced, tmp_path)
    generate_tasks(db, TaskOptions(kinds=("output", "input"), prompt_style="cruxeval"))
    prompts = dict(((s, k), p) for s, k, p in rows(
        db, "SELECT sample_id, kind, prompt FROM tasks WHERE prompt_style = 'cruxeval'"))
    assert "assert f([1, 2, 3]) == ??" in prompts[("loop", "output")]
    assert "assert f(??) == 3\n" in prompts[("loop", "input")]
    assert "[ANSWER]" in prompts[("loop", "input")]
    generate_tasks(db, TaskOptions(kinds=("state",), prompt_style="cot", per_run=1))
    cot = rows(db, "SELECT prompt FROM tasks WHERE prompt_style = 'cot' LIMIT 1")[0][0]
    assert "step by step" in cot and "[ANSWER]" in cot
    with pytest.raises(ValueError, match="no cruxeval prompt template for kind 'state'"):
        generate_tasks(db, TaskOptions(kinds=("state",), prompt_style="cruxeval"))


def test_custom_template_dir(traced, tmp_path):
    """A user's template replaces the bundled one of its kind and style; kinds without a
    file in the directory use the bundled templates."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "steps.direct.txt").write_text(
        "Steps of $call?\n$numbered_code\n[ANSWER] [/ANSWER]", encoding="utf-8")
    (templates / "state.direct.txt").write_text(
        "$var after line $line ($line_text), time $k in $func, $entry($input)?\n$code",
        encoding="utf-8")
    db = copy_db(traced, tmp_path)
    generate_tasks(db, TaskOptions(kinds=("steps", "state", "exception"),
                                   template_dir=templates, per_run=100))
    prompts = {(s, k, line, var, occ): p for s, k, line, var, occ, p in rows(
        db, "SELECT sample_id, kind, line, var, occurrence, prompt FROM tasks")}
    assert prompts[("rec", "steps", None, None, None)] == (
        "Steps of f(3)?\n" + numbered(REC) + "\n[ANSWER] [/ANSWER]")
    assert prompts[("rec", "state", 4, "r", 2)] == (
        "r after line 4 (r = n * f(n - 1)), time 2 in f, f(3)?\n" + REC)
    assert prompts[("rec", "exception", None, None, None)].startswith("Here is a Python program")


@pytest.mark.parametrize("text, message", [
    ("$code $call $nope", "unknown placeholder $nope for kind output"),
    ("$code $call $output", "unknown placeholder $output for kind output"),
    ("$code only", "missing placeholder $call or $input"),
    ("$call and 5$ dollars", "a '$' that is not a placeholder"),
])
def test_bad_templates_are_refused(tmp_path, text, message):
    (tmp_path / "output.direct.txt").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r".*output\.direct\.txt: .*" + _escape(message)):
        load_templates(("output",), "direct", tmp_path)


def _escape(text: str) -> str:
    return re.escape(text)


def test_every_bundled_template_is_valid():
    """Each kind has direct and cot templates (output and input also cruxeval), each
    using only known placeholders and all required ones."""
    for style in ("direct", "cot"):
        assert set(load_templates(KINDS, style)) == set(KINDS)
    assert set(load_templates(("output", "input"), "cruxeval")) == {"output", "input"}


# ------------------------------------------------------------------ library errors
def test_bad_arguments(traced, tmp_path):
    with pytest.raises(ValueError, match="unknown task kind 'stats'"):
        parse_kinds("state,stats")
    with pytest.raises(ValueError, match="no task kinds given"):
        parse_kinds(" , ")
    assert parse_kinds("trace, state,state") == ("state", "trace")
    assert parse_kinds("all") == KINDS
    with pytest.raises(StoreError, match="database not found"):
        generate_tasks(tmp_path / "missing.duckdb")
    assert not (tmp_path / "missing.duckdb").exists()
    empty = tmp_path / "empty.duckdb"
    connect(empty).close()
    with pytest.raises(ValueError, match="no finished \\(ok or exception\\) runs"):
        generate_tasks(empty, TaskOptions(kinds=("steps",)))
    with pytest.raises(ValueError, match="template directory not found"):
        generate_tasks(traced, TaskOptions(template_dir=tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="does not exist"):
        generate_tasks(traced, TaskOptions(out=tmp_path / "no" / "t.jsonl"))


# ------------------------------------------------------------------ CLI
def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.stderr


def test_cli_json(traced, tmp_path):
    db = copy_db(traced, tmp_path)
    out = tmp_path / "tasks.jsonl"
    result = invoke("tasks", "--db", db, "--kinds", "state,branch", "--per-run", 2,
                    "--seed", 0, "--out", out, "--workers", 0, "--format", "json")
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)
    expected = _cli_counts(db)
    assert counts == [{"kind": k, "tasks": n, "runs": r} for k, n, r in expected]
    assert result.stderr.startswith(f"{expected[-1][1]} tasks from 10 runs in ")
    assert len(read_jsonl(out)) == expected[-1][1]
    assert pl.read_parquet(tmp_path / "tasks.parquet").height == expected[-1][1]


def _cli_counts(db: Path) -> list[tuple[str, int, int]]:
    """Per-kind counts from the stored tasks (the second path for the printed table)."""
    found = dict((k, (n, r)) for k, n, r in rows(
        db, "SELECT kind, count(*), count(DISTINCT run_id) FROM tasks GROUP BY kind"))
    return [("state", *found["state"]), ("branch", *found["branch"]),
            ("total", found["state"][0] + found["branch"][0], 10)]


def test_cli_csv_and_table(traced, tmp_path):
    db = copy_db(traced, tmp_path)
    result = invoke("tasks", "--db", db, "--kinds", "steps,exception", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert list(csv.reader(io.StringIO(result.stdout))) == [
        ["kind", "tasks", "runs"], ["steps", "10", "10"], ["exception", "10", "10"],
        ["total", "20", "10"]]
    result = invoke("tasks", "--db", db, "--kinds", "output")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "steptrace tasks" in lines[0]
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    assert cells == [["output", "9", "9"], ["total", "9", "10"]]  # the header row is "┃"
    assert rows(db, "SELECT count(*) FROM tasks") == [(29,)]


@pytest.mark.parametrize("args, message", [
    (("--kinds", "state,nope"), "unknown task kind 'nope'"),
    (("--template-dir", "{tmp}/none"), "template directory not found"),
    (("--out", "{tmp}/none/t.jsonl"), "does not exist"),
    (("--kinds", "state", "--prompt", "cruxeval"), "no cruxeval prompt template"),
    (("--out", "{tmp}/t.parquet"), "--out names the JSONL file"),
])
def test_cli_bad_arguments_are_one_line_errors(traced, tmp_path, args, message):
    db = copy_db(traced, tmp_path)
    result = invoke("tasks", "--db", db, *[a.format(tmp=tmp_path) for a in args])
    assert_one_line_error(result, message)
    assert rows(db, "SELECT count(*) FROM information_schema.tables "
                    "WHERE table_name = 'tasks'") == [(0,)]


def test_cli_missing_or_empty_db_and_bad_template(tmp_path):
    assert_one_line_error(invoke("tasks", "--db", tmp_path / "no.duckdb"),
                          f"database not found: {tmp_path / 'no.duckdb'}")
    empty = tmp_path / "empty.duckdb"
    connect(empty).close()
    assert_one_line_error(invoke("tasks", "--db", empty), "no finished (ok or exception) runs")
    (tmp_path / "trace.cot.txt").write_text("$code $call $line", encoding="utf-8")
    assert_one_line_error(invoke("tasks", "--db", empty, "--prompt", "cot",
                                 "--template-dir", tmp_path),
                          "unknown placeholder $line for kind trace")


# ------------------------------------------------------------------ CRUXEval
# 799 runs: sample_736's values depend on the hash seed (analyse --determinism finds it),
# so it is asked nothing (engine/tasks/_runs.py)
CRUXEVAL_COUNTS = {
    "output": (799, 799), "input": (799, 799), "state": (1623, 575), "state_any": (877, 316),
    "next_line": (1126, 482), "next_line_any": (740, 312), "coverage": (1166, 557),
    "line_count": (1145, 542), "branch": (880, 437), "steps": (799, 799),
    "trace": (797, 797), "exception": (799, 799), "error": (0, 0), "type": (35, 13),
    "alias": (164, 64), "output_type": (799, 799), "stdout": (0, 0),
    "instruction_steps": (799, 799),
}
ASKED = "run_id IN (SELECT run_id FROM analyses WHERE deterministic)"
LINE_KINDS = ("state", "state_any", "next_line", "next_line_any", "coverage", "line_count",
              "branch", "type", "alias")
SHARED_LINES = """
WITH shared AS (SELECT run_id, line FROM steps WHERE event = 'line'
                GROUP BY ALL HAVING count(DISTINCT func) > 1)
SELECT kind, count(*), count(*) FILTER (WHERE prompt LIKE '%by the lambda on line%')
FROM tasks JOIN shared USING (run_id, line) GROUP BY kind
"""


@pytest.fixture(scope="module")
def cruxeval_tasks(cruxeval_db, tmp_path_factory) -> tuple[Path, dict]:
    """``steptrace tasks`` with its defaults (all kinds, three per run, seed 0, direct
    prompts) on a copy of the 800 CRUXEval runs: (store, printed counts by kind)."""
    tmp = tmp_path_factory.mktemp("crux_tasks")
    db = copy_db(cruxeval_db, tmp)
    result = invoke("tasks", "--db", db, "--format", "json", "--out", tmp / "crux.jsonl")
    assert result.exit_code == 0, result.output
    return db, {row["kind"]: (row["tasks"], row["runs"]) for row in json.loads(result.stdout)}


def test_cruxeval_counts_by_kind_and_answers(cruxeval_tasks):
    """The exact counts per kind (the line kinds' changed when k and the *_any kinds
    became per function: see README, Kinds); the whole-run kinds also counted in SQL;
    every answer re-derived a second way, the if/while branch answers also checked
    against the steps."""
    db, printed = cruxeval_tasks
    # type: where a name's type changes over a line's executions, or is no built-in one
    # (35); alias: two names for one list or dict, or two equal ones (164); no program
    # prints (stdout)
    assert printed == {**CRUXEVAL_COUNTS, "total": (13347, 799)}
    (ok,), = rows(db, "SELECT count(*) FROM runs WHERE status = 'ok' AND NOT output_truncated "
                      f"AND output NOT LIKE '% at 0x%' AND {ASKED}")
    (finished,), = rows(db, "SELECT count(*) FROM runs WHERE status IN ('ok', 'exception') "
                            f"AND {ASKED}")
    (short,), = rows(db, "SELECT count(*) FROM runs WHERE status IN ('ok', 'exception') "
                         f"AND line_steps BETWEEN 1 AND 200 AND {ASKED}")
    assert (printed["output"][0], printed["input"][0]) == (ok, ok)
    assert (printed["steps"][0], printed["exception"][0], printed["trace"][0]) == (
        finished, finished, short)
    assert rows(db, "SELECT max(c) FROM (SELECT count(*) c FROM tasks GROUP BY run_id, kind)") == [(3,)]
    assert dict(check_whole_runs(db)) == {k: n for k, (n, _) in CRUXEVAL_COUNTS.items()
                                          if k not in LINE_KINDS and n}  # no run raises
    assert branch_check(db) == 791


def test_every_cruxeval_task_agrees_with_its_prompt(cruxeval_tasks):
    """Every task about a line, of every kind, on the CRUXEval store with the default
    settings: its answer is the one its prompt's words (function, line, k, variable,
    condition) give when re-derived from the raw tables. Among them the tasks on a line
    that two functions run (a lambda or generator expression on the line that uses it):
    before answers were counted per function, 7 state, 12 next_line and 11 next_line_any
    tasks asked about another execution than their prompt named."""
    db, _ = cruxeval_tasks
    assert dict(check_prompts(db)) == {k: CRUXEVAL_COUNTS[k][0] for k in LINE_KINDS}
    shared = {kind: (n, lambdas) for kind, n, lambdas in rows(db, SHARED_LINES)}
    assert shared == {"state": (15, 6), "state_any": (8, 7), "next_line": (2, 0),
                      "next_line_any": (1, 0), "line_count": (1, 0), "coverage": (1, 0),
                      "branch": (13, 0), "type": (1, 0)}


def test_numbered_code_breaks_lines_where_python_does():
    """A string literal may hold characters that str.splitlines breaks at (\\u2028, \\x1c,
    form feed); Python does not, so neither does the numbered code a prompt shows."""
    code = "def f():\n    s = '\u2028\x1c\x0c'\n    return s\n"
    assert numbered(code) == ("1 | def f():\n2 |     s = '\u2028\x1c\x0c'\n3 |     return s")


def test_trace_force_drops_the_tasks_of_replaced_runs(generated, tmp_path):
    """trace --force replaces runs (under their ids): their tasks (answers derived from
    the old trace) go with them, and tasks of runs not replaced stay."""
    db = copy_db(generated[0], tmp_path)
    before = dict(rows(db, "SELECT sample_id, count(*) FROM tasks GROUP BY sample_id"))
    one = tmp_path / "hand.jsonl"  # the corpus's name is part of a run's identity
    write_corpus(one, [r for r in RECORDS if r["id"] == "loop"])
    trace_corpus(one, db, TraceOptions(workers=0, force=True))
    after = dict(rows(db, "SELECT sample_id, count(*) FROM tasks GROUP BY sample_id"))
    assert before["loop"] > 0 and "loop" not in after
    assert after == {sample: n for sample, n in before.items() if sample != "loop"}
    assert rows(db, "SELECT count(*) FROM tasks WHERE run_id NOT IN (SELECT run_id FROM runs)") == [(0,)]
