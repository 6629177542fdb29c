"""Every command that reads a store works on runs of every program shape and on object
state (issue: real programs): a script with stdin, a method chain, a test driver, a call
given stdin, an asyncio program, a class whose instances change through aliases. Each
command exits 0 and shows what the store holds."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from helpers.predict import invoke

SCRIPT = "n = int(input())\nfor i in range(n):\n    print(i * i)\n"
STACK = ("class Stack:\n    def __init__(self):\n        self.items = []\n"
         "    def push(self, x):\n        self.items.append(x)\n"
         "    def pop(self):\n        return self.items.pop()\n")
CALC = "class Calc:\n    def add(self, a, b):\n        return a + b\n"
CALC_TEST = ("import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n"
             "        self.assertEqual(Calc().add(1, 2), 3)\n")
ASYNC = ("import asyncio\nasync def twice(x):\n    await asyncio.sleep(0)\n    return 2 * x\n"
         "def f(x):\n    return asyncio.run(twice(x))\n")
NODES = ("class Node:\n    def __init__(self, val, nxt=None):\n        self.val = val\n"
         "        self.next = nxt\n\ndef f(n):\n    head = None\n    for i in range(n):\n"
         "        head = Node(i, head)\n    alias = head\n    alias.val = -1\n"
         "    return head.val\n")
RECORDS = [
    {"id": "script", "shape": "script", "code": SCRIPT, "input": "3\n", "output": "0\n1\n4\n"},
    {"id": "chain", "code": STACK, "entry": "Stack", "input": "",
     "calls": [{"method": "push", "input": "1"}, {"method": "pop"}], "output": "1"},
    {"id": "test", "code": CALC, "entry": "T.test_add", "input": "", "test": CALC_TEST},
    {"id": "stdin", "code": "import sys\ndef f():\n    return sys.stdin.readline()\n",
     "input": "", "stdin": "hi\n", "output": "'hi\\n'"},
    {"id": "async", "code": ASYNC, "input": "21", "output": "42"},
    {"id": "nodes", "code": NODES, "input": "3", "output": "-1"},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("every_shape")
    corpus = tmp / "shapes.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    db = tmp / "shapes.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0)
    assert result.exit_code == 0, result.output
    return db


def _json(*args) -> object:
    result = invoke(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_store_holds_every_shape(store):
    with duckdb.connect(str(store), read_only=True) as con:
        assert con.execute("SELECT sample_id, status, output_matches FROM runs "
                           "ORDER BY run_id").fetchall() == [
            ("script", "ok", True), ("chain", "ok", True), ("test", "ok", None),
            ("stdin", "ok", True), ("async", "ok", True), ("nodes", "ok", True)]
        # the nodes: three objects, the head's val set through its alias
        assert con.execute(
            "SELECT a.attr, a.value FROM attributes a JOIN runs r USING (run_id) "
            "WHERE r.sample_id = 'nodes' AND a.object_id = (SELECT DISTINCT object_id FROM "
            "states s WHERE s.run_id = r.run_id AND s.var = 'alias') ORDER BY a.step, a.attr"
        ).fetchall() == [("val", "2"), ("next", "Node(val=1, next=Node(val=0, next=None))"),
                         ("val", "-1")]


def test_every_named_query_runs(store):
    """Every named query but those over predictions (none here)."""
    assert invoke("tasks", "--db", store, "--workers", 0).exit_code == 0
    names = [row["name"] for row in _json("query", "--list")
             if not row["name"].startswith("accuracy_") and row["name"] != "scored_samples"]
    assert {"runs_by_status", "hottest_lines", "changing_variables"} <= set(names)
    for name in names:
        result = invoke("query", name, "--db", store, "--format", "json")
        assert result.exit_code == 0, (name, result.output)
    assert _json("query", "runs_by_status", "--db", store)[0]["runs"] == 6


def test_analyse_features_filter_tasks_report_export_show(store, tmp_path):
    assert invoke("analyse", "--db", store, "--workers", 0).exit_code == 0
    assert invoke("features", "--db", store).exit_code == 0
    filtered = _json("filter", "--db", store, "--workers", 0)
    assert filtered[-1]["rule"] == "kept"
    tasks = _json("tasks", "--db", store, "--workers", 0)
    made = {row["kind"]: row["runs"] for row in tasks}
    assert made["steps"] == 6 and made["exception"] == 6 and made["total"] == 6
    # the script's, the chain's and the nodes' lines (the test's one line runs once, on
    # the arguments its prompt shows)
    assert (made["state"], made["type"], made["alias"]) == (3, 3, 1)
    report = invoke("report", "--db", store, "--out", tmp_path / "r.html")
    assert report.exit_code == 0, report.output
    assert (tmp_path / "r.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    exported = invoke("export", "--db", store, "--out", tmp_path / "pq")
    assert exported.exit_code == 0, exported.output
    assert {p.name for p in (tmp_path / "pq").iterdir()} >= {"attributes", "objects",
                                                             "global_states", "runs"}
    for run_id in range(1, 7):
        shown = invoke("show", run_id, "--db", store)
        assert shown.exit_code == 0, (run_id, shown.output)
