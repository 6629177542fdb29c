"""Program shapes in a real store: the programs/runs columns of schema 4, a schema-3
store read as it is and upgraded in place (its jobs keep their keys, so tracing resumes),
and every later step (show, Store.run, trace_one, analyse, tasks, features) on scripts,
method chains and test drivers."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import steptrace as st
from steptrace.analytics._features import run_features
from steptrace.corpus._formats import load_corpus
from steptrace.store._store import connect
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.cli import rows
from helpers.predict import invoke

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_3_COMMIT = "6a8f17b3a7f8d4644806c963833f1f8b7adfe77e"  # the last commit of schema version 3
SCRIPT = "n = int(input())\nprint(n * 2)\n"
STACK = ("class Stack:\n    def __init__(self):\n        self.items = []\n"
         "    def push(self, x):\n        self.items.append(x)\n"
         "    def pop(self):\n        return self.items.pop()\n"
         "    def __repr__(self):\n        return f'Stack({self.items})'\n")
CALC = "def add(a, b):\n    return a + b\n"
CALC_TEST = ("import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n"
             "        self.assertEqual(add(1, 2), 3)\n")
PLAIN = "def f(x):\n    return x + 1\n"
CHAIN = [{"method": "push", "input": "1"}, {"method": "pop"}]
RECORDS = [
    {"id": "script", "shape": "script", "code": SCRIPT, "inputs": ["3\n", "5\n"],
     "outputs": ["6  \n\n", "11\n"]},
    {"id": "chain", "code": STACK, "entry": "Stack", "input": "", "calls": CHAIN,
     "output": "1"},
    {"id": "test", "code": CALC, "entry": "T.test_add", "input": "", "test": CALC_TEST},
    {"id": "stdin", "code": "import sys\ndef f():\n    return sys.stdin.read()\n",
     "input": "", "stdin": "hi\n", "output": "'hi\\n'"},
    {"id": "plain", "code": PLAIN, "input": "1", "output": "2"},
]
CHAIN_JSON = '[{"method": "push", "input": "1"}, {"method": "pop", "input": ""}]'


def write(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def traced(tmp_path):
    corpus = write(tmp_path / "shapes.jsonl", RECORDS)
    db = tmp_path / "store.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    return corpus, db, summary


def test_programs_and_runs_columns(traced):
    corpus, db, summary = traced
    assert (summary.traced, dict(summary.by_status), summary.with_expected,
            summary.matched) == (6, {"ok": 6}, 5, 4)
    assert rows(db, "SELECT sample_id, entry, shape, test FROM programs ORDER BY program_id") == [
        ("script", "<module>", "script", None), ("chain", "Stack", "call", None),
        ("test", "T.test_add", "call", CALC_TEST), ("stdin", "f", "call", None),
        ("plain", "f", "call", None)]
    assert rows(db, "SELECT sample_id, input, status, output, output_type, expected, "
                    "output_matches, stdout, chain, stdin, calls, max_depth FROM runs "
                    "ORDER BY run_id") == [
        ("script", "3\n", "ok", None, None, "6  \n\n", True, "6\n", None, None, 1, 0),
        ("script", "5\n", "ok", None, None, "11\n", False, "10\n", None, None, 1, 0),
        ("chain", "", "ok", "1", "int", "1", True, "", CHAIN_JSON, None, 3, 0),
        ("test", "", "ok", "None", "NoneType", None, None, "", None, None, 1, 0),
        ("stdin", "", "ok", "'hi\\n'", "str", "'hi\\n'", True, "", None, "hi\n", 1, 0),
        ("plain", "1", "ok", "2", "int", "2", True, "", None, None, 1, 0)]
    keys = [job.key for job in load_corpus(corpus).jobs]
    assert [key for (key,) in rows(db, "SELECT run_key FROM runs ORDER BY run_id")] == keys
    assert rows(db, "SELECT value FROM meta") == [("7",)]


def test_a_run_read_back_equals_trace_one(traced):
    _, db, _ = traced
    with st.open_store(db) as store:
        chain = store.run(3)
        script = store.run(1)
    assert (chain.shape, chain.chain, chain.call_text()) == ("call", CHAIN_JSON,
                                                              "Stack().push(1).pop()")
    assert (script.shape, script.call_text(), script.stdout) == ("script", "script < '3\\n'",
                                                                 "6\n")
    assert chain == st.trace_one(STACK, "", entry="Stack", expected="1", calls=CHAIN)
    assert script == st.trace_one(SCRIPT, "3\n", expected="6  \n\n", shape="script")
    assert [s.func for s in script.steps] == ["<module>"] * 4


def test_show_analyse_tasks_and_features_take_every_shape(traced, tmp_path):
    """Nothing downstream assumes ``input`` is call arguments: show prints each run,
    analysis runs agree with the traced runs, tasks are made for every run, each kind
    where it is defined (output only of a call that returns what it computes: not of a
    script, a test method or a call reading stdin the output prompt does not show; input
    only of a plain call), every prompt saying how the program is run, features are
    computed for every run."""
    _, db, _ = traced
    for run_id, header in ((1, "script < '3\\n'"), (3, "Stack().push(1).pop()"),
                           (4, "T.test_add()")):
        shown = invoke("show", run_id, "--db", db)
        assert shown.exit_code == 0, shown.output
        assert shown.stdout.splitlines()[0].endswith(header)
    summary = analyse_store(db, AnalysisOptions(workers=0))
    assert (summary.analysed, summary.agreed) == (6, 6)
    tasks = generate_tasks(db, TaskOptions(kinds=("output", "input", "steps")))
    made = sorted(tasks.tasks.select("run_id", "kind").rows())
    assert made == [(1, "steps"), (2, "steps"), (3, "output"), (3, "steps"), (4, "steps"),
                    (5, "steps"), (6, "input"), (6, "output"), (6, "steps")]
    prompt = tasks.tasks.filter(run_id=3, kind="output")["prompt"][0]
    assert "What does the call `Stack().push(1).pop()` return?" in prompt
    steps = dict(tasks.tasks.filter(kind="steps").select("run_id", "prompt").rows())
    assert "```\n\nIt is run as a script, with this standard input:\n\n```\n3\n```\n" in steps[1]
    assert "It is called as `Stack().push(1).pop()`.\n" in steps[3]
    assert ("It is run by the test `T.test_add` of this test code (the questions are about "
            f"the program above, not the test code):\n\n```\n{CALC_TEST}```\n") in steps[4]
    assert "It is called as `f()`, with this standard input:\n\n```\nhi\n```\n" in steps[5]
    assert "It is called as `f(1)`.\n" in steps[6]
    features = run_features(db)
    assert rows(db, "SELECT count(*) FROM run_features") == [(6,)]
    assert features is not None


def _main_tables(tmp_path: Path):
    """engine/store/_tables.py of the last schema-3 commit: the schema-3 tables."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{SCHEMA_3_COMMIT}:engine/store/_tables.py"],
                          capture_output=True, text=True)
    if text.returncode != 0:
        pytest.skip("the schema-3 commit is not in this checkout's history")
    path = tmp_path / "v3_tables.py"
    path.write_text(text.stdout, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("v3_tables", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["v3_tables"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["v3_tables"]
    assert "shape" not in module.table("programs").column_names
    return module


def schema_3_store(tmp_path: Path, corpus: Path) -> Path:
    """The plain-call records traced, then copied into a store made with schema 3's
    declarations (as a steptrace of that version would have written it)."""
    traced = tmp_path / "v4.duckdb"
    trace_corpus(corpus, traced, TraceOptions(workers=0))
    old = tmp_path / "v3.duckdb"
    tables = _main_tables(tmp_path)
    con = duckdb.connect(str(old))
    con.execute("".join(t.ddl() for t in tables.CONNECT_TABLES))
    con.execute(f"ATTACH '{traced}' AS new (READ_ONLY)")
    for table in ("programs", "runs", "steps", "states"):
        columns = ", ".join(tables.table(table).column_names)
        con.execute(f"INSERT INTO {table} SELECT {columns} FROM new.{table}")
    con.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    con.execute("DETACH new")
    con.close()
    return old


def test_a_schema_3_store_is_read_as_it_is_and_upgraded_on_write(tmp_path):
    corpus = write(tmp_path / "plain.jsonl", [RECORDS[-1], {**RECORDS[-1], "id": "p2",
                                                            "input": "2", "output": "3"}])
    db = schema_3_store(tmp_path, corpus)
    assert [c for (c,) in rows(db, "SELECT column_name FROM information_schema.columns "
                                   "WHERE table_name = 'programs'")][-1] == "program_key"
    with st.open_store(db) as store:  # read-only: not upgraded
        run = store.run(1)
    assert (run.shape, run.test, run.chain, run.stdin, run.output) == ("call", None, None,
                                                                       None, "2")
    assert rows(db, "SELECT value FROM meta") == [("3",)]
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))  # opens it for writing
    assert (summary.skipped, summary.traced) == (2, 0)  # the old keys are the keys
    assert rows(db, "SELECT value FROM meta") == [("7",)]
    assert rows(db, "SELECT program_id, shape, test FROM programs ORDER BY 1") == [
        (1, "call", None), (2, "call", None)]
    assert rows(db, "SELECT run_id, chain, stdin FROM runs ORDER BY 1") == [
        (1, None, None), (2, None, None)]
    con = connect(db)  # the upgraded store is a schema-4 store: new shapes go in
    con.close()
    summary = trace_corpus(write(tmp_path / "more.jsonl", RECORDS[:1]), db,
                           TraceOptions(workers=0))
    assert summary.traced == 2
    assert rows(db, "SELECT shape FROM programs ORDER BY program_id") == [
        ("call",), ("call",), ("script",)]
    with pytest.raises(duckdb.ConstraintException):
        with duckdb.connect(str(db)) as raw:  # shape is NOT NULL, as declared
            raw.execute("UPDATE programs SET shape = NULL")


def test_kept_runs_are_written_back_as_the_records_they_came_from(traced, tmp_path):
    """benchmark's write_kept gives every shape's keys back: tracing what it wrote makes
    the same jobs (the expected outputs now the runs' own)."""
    from steptrace.benchmark._filters import write_kept
    _, db, _ = traced
    out = tmp_path / "kept.jsonl"
    assert write_kept(db, [1, 3, 4, 5], out) == 4
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records == [
        {"id": "script", "shape": "script", "code": SCRIPT, "input": "3\n", "output": "6\n"},
        {"id": "chain", "code": STACK, "input": "", "output": "1", "entry": "Stack",
         "calls": [{"method": "push", "input": "1"}, {"method": "pop", "input": ""}]},
        {"id": "test", "code": CALC, "input": "", "output": "None", "entry": "T.test_add",
         "test": CALC_TEST},
        {"id": "stdin", "code": RECORDS[3]["code"], "input": "", "output": "'hi\\n'",
         "stdin": "hi\n"}]
    again = trace_corpus(out, tmp_path / "again.duckdb", TraceOptions(workers=0))
    assert (again.traced, again.matched, dict(again.by_status)) == (4, 4, {"ok": 4})
