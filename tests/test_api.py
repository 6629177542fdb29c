"""The library API (``import steptrace as st``) with real components: the sandbox, DuckDB
files, the CLI through click's CliRunner, and an OpenAI-compatible server on 127.0.0.1
(tests/helpers/openai_stub.py).

* ``trace_one`` decodes one run exactly, and equals the same job traced by the CLI (in a
  worker process) and read back from the store;
* ``open_store`` reads a store as polars DataFrames and Run records, read-only, without
  locking writers out;
* ``trace`` of a list of dicts and of a polars frame makes the store the file makes;
* a notebook's loop, trace -> make_tasks -> predict -> score, through the API alone;
* the error hierarchy: user errors are SteptraceErrors and one CLI line, bugs keep their
  traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

import steptrace as st
from steptrace.cli._main import main
from steptrace.corpus import load_corpus
from helpers.openai_stub import StubServer, answer
from helpers.sample_corpus import RECORDS
from helpers.programs import LOOP  # test_scoring's program: f([1, 2, 3]) == 3, and f([3]) == 3

SUM = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"
KEY_ERROR = "def f(x):\n    print('hi')\n    return {}[x]\n"


def invoke(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


# ------------------------------------------------------------------ the package
def test_import_steptrace_is_light_and_names_its_api():
    """``import steptrace`` loads none of the heavy libraries; every public name resolves
    on first use (lazily) and is documented."""
    code = ("import sys, steptrace\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('duckdb', 'polars', 'pyarrow', 'wasmtime', 'numpy', 'openai', 'click'))\n"
            "print(heavy, sorted(m for m in sys.modules if m.startswith('steptrace')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == "[] ['steptrace', 'steptrace._lazy']\n"
    assert st.__all__ == sorted([
        "trace_one", "trace", "trace_sharded", "trace_shard", "import_shards", "analyse",
        "make_tasks", "predict", "score", "report", "export_traces",
        "decontaminate", "anonymise", "ngram_overlap", "select_runs", "open_store", "Store", "Run", "Step", "State", "Object", "Attribute", "GlobalState", "SettraceLine",
        "Limits", "Records", "judge_answers", "RewardJudge", "RewardLimits",
        "SteptraceError", "InputError", "StoreError", "SandboxError", "PredictError"])
    for name in st.__all__:
        value = getattr(st, name)
        assert value.__doc__ and value.__doc__.strip(), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        st.nope  # noqa: B018


# ------------------------------------------------------------------ trace_one
SUM_STEPS = (st.Step(0, "call", "f", 1, 0, 0), st.Step(1, "line", "f", 2, 0, 0),
             st.Step(2, "line", "f", 3, 0, 0), st.Step(3, "line", "f", 4, 0, 0),
             st.Step(4, "line", "f", 3, 0, 0), st.Step(5, "line", "f", 4, 0, 0),
             st.Step(6, "line", "f", 3, 0, 0), st.Step(7, "line", "f", 5, 0, 0),
             st.Step(8, "return", "f", 5, 0, 0))
SUM_STATES = (st.State(0, "xs", "[1, 2]", "list", False, 1),
              st.State(2, "total", "0", "int", False),
              st.State(3, "x", "1", "int", False), st.State(4, "total", "1", "int", False),
              st.State(5, "x", "2", "int", False), st.State(6, "total", "3", "int", False),
              st.State(8, "<return>", "3", "int", False))
SUM_TEXT = """\
f([1, 2]) -> 3  [ok]
expected 3: matches
   1 | def f(xs):
   2 |     total = 0
   3 |     for x in xs:
   4 |         total += x
   5 |     return total
9 steps (7 line, 20 instruction), 7 state changes
step  event   line  depth  func  changed
   0  call       1      0  f     xs=[1, 2]
   1  line       2      0  f
   2  line       3      0  f     total=0
   3  line       4      0  f     x=1
   4  line       3      0  f     total=1
   5  line       4      0  f     x=2
   6  line       3      0  f     total=3
   7  line       5      0  f
   8  return     5      0  f     <return>=3"""


def test_trace_one_decodes_a_run_exactly():
    run = st.trace_one(SUM, "[1, 2]", expected="3")
    assert (run.status, run.output, run.output_type, run.output_matches, run.stdout,
            run.exception_type, run.note) == ("ok", "3", "int", True, "", None, None)
    assert (run.line_steps, run.instruction_steps, run.calls, run.max_depth) == (7, 20, 1, 0)
    assert (run.code, run.entry, run.input, run.expected) == (SUM, "f", "[1, 2]", "3")
    assert (run.run_id, run.sample_id, run.isolation) == (None, None, "job")
    assert run.steps == SUM_STEPS
    assert run.states == SUM_STATES
    assert str(run) == SUM_TEXT
    assert repr(run) == "Run(f([1, 2]) -> 3, status='ok', 9 steps, 7 states)"
    steps = run.steps_frame()
    assert steps.schema == pl.Schema({"step": pl.Int32, "event": pl.String, "func": pl.String,
                                      "line": pl.Int32, "depth": pl.Int32, "frame": pl.Int32})
    assert steps.rows() == [(s.step, s.event, s.func, s.line, s.depth, s.frame) for s in SUM_STEPS]
    assert run.states_frame().schema == pl.Schema({
        "step": pl.Int32, "var": pl.String, "value": pl.String, "type": pl.String,
        "truncated": pl.Boolean, "object_id": pl.Int32})
    assert run.states_frame().rows() == [(s.step, s.var, s.value, s.type, s.truncated,
                                          s.object_id) for s in SUM_STATES]
    assert run.objects == (st.Object(1, "list", 0),)  # xs
    assert (run.attributes, run.globals) == ((), ())


def test_trace_one_exception_and_stdout():
    run = st.trace_one(KEY_ERROR, "'k'")
    assert (run.status, run.output, run.exception_type, run.exception_message, run.stdout,
            run.output_matches) == ("exception", None, "KeyError", "'k'", "hi\n", None)
    assert [(s.event, s.line) for s in run.steps] == [
        ("call", 1), ("line", 2), ("line", 3), ("raise", 3), ("unwind", 3)]
    assert str(run).splitlines()[:2] == ["f('k') raised KeyError: 'k'  [exception]", "stdout: hi"]


def test_trace_one_equals_the_cli_stored_run(tmp_path):
    """The same jobs traced by `steptrace trace` in a worker process and read back with
    Store.run are equal to trace_one's runs: same decoding, same request."""
    records = [{"id": "sum", "code": SUM, "input": "[1, 2]", "output": "3"},
               {"id": "key", "code": KEY_ERROR, "input": "'k'"}, *RECORDS]
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    db = tmp_path / "cli.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 1, "--quiet")
    assert result.exit_code == 0, result.output
    store = st.open_store(db)
    runs = store.runs()
    assert runs.height == 8
    for run_id, sample_id, index in runs.select("run_id", "sample_id", "input_index").rows():
        stored = store.run(run_id)
        assert (stored.run_id, stored.sample_id, stored.input_index) == (run_id, sample_id, index)
        one = st.trace_one(stored.code, stored.input, stored.entry, stored.expected)
        assert one == stored, run_id
        assert one.steps == stored.steps and one.states == stored.states
        assert store.steps(run_id).equals(one.steps_frame())
        assert store.states(run_id).equals(one.states_frame())
    first = store.run(1)
    assert (first.steps, first.states) == (SUM_STEPS, SUM_STATES)
    assert str(first) == "run 1: " + SUM_TEXT


ACC = """\
count = 0

class Acc:
    def __init__(self, start):
        self.total = start
        self.items = []

    def add(self, x):
        global count
        count += 1
        self.total += x
        self.items.append(x)
        return self

def f(xs):
    a = Acc(10)
    b = a
    for x in xs:
        b.add(x)
    return a.total
"""
# xs is object 1, the Acc object 2 (a, b and self all name it), its items list 3.
ACC_OBJECTS = (st.Object(1, "list", 0), st.Object(2, "Acc", 2), st.Object(3, "list", 5))
ACC_ATTRIBUTES = (st.Attribute(4, 2, "total", "10", "int", False, None),
                  st.Attribute(5, 2, "items", "[]", "list", False, 3),
                  st.Attribute(12, 2, "total", "11", "int", False, None),
                  st.Attribute(13, 2, "items", "[1]", "list", False, 3),
                  st.Attribute(20, 2, "total", "13", "int", False, None),
                  st.Attribute(21, 2, "items", "[1, 2]", "list", False, 3))
ACC_GLOBALS = (st.GlobalState(0, "count", "0", "int", False, None),
               st.GlobalState(11, "count", "1", "int", False, None),
               st.GlobalState(19, "count", "2", "int", False, None))
ACC_TRACE = """\
26 steps (18 line, 74 instruction), 25 state changes, 6 attribute changes, 3 global changes
step  event   line  depth  func          changed
   0  call      15      0  f             xs=[1, 2], global count=0
   1  line      16      0  f
   2  call       4      1  Acc.__init__  self=Acc(), start=10
   3  line       5      1  Acc.__init__
   4  line       6      1  Acc.__init__  self=Acc(total=10), #2.total=10
   5  return     6      1  Acc.__init__  self=Acc(total=10, items=[]), <return>=None, #2.items=[]
   6  line      17      0  f             a=Acc(total=10, items=[])
   7  line      18      0  f             b=Acc(total=10, items=[])
   8  line      19      0  f             x=1
   9  call       8      1  Acc.add       self=Acc(total=10, items=[]), x=1
  10  line      10      1  Acc.add
  11  line      11      1  Acc.add       global count=1
  12  line      12      1  Acc.add       self=Acc(total=11, items=[]), #2.total=11"""


def test_trace_one_decodes_object_state_and_equals_the_stored_run(tmp_path):
    """A class program with attribute changes, an alias (``b = a``: both name object 2)
    and a global the method changes: ``trace_one`` gives the exact objects, attributes,
    globals and states' object ids, ``str`` lists them per step as ``steptrace show``
    does, and the same job traced into a store and read back is equal, frame for frame."""
    run = st.trace_one(ACC, "[1, 2]", expected="13")
    assert (run.status, run.output, run.output_matches) == ("ok", "13", True)
    assert run.objects == ACC_OBJECTS
    assert run.attributes == ACC_ATTRIBUTES
    assert run.globals == ACC_GLOBALS
    assert [(s.step, s.var, s.object_id) for s in run.states if s.var in ("a", "b", "self")] == [
        (2, "self", 2), (4, "self", 2), (5, "self", 2), (6, "a", 2), (7, "b", 2),
        (9, "self", 2), (12, "self", 2), (13, "self", 2), (15, "a", 2), (15, "b", 2),
        (17, "self", 2), (20, "self", 2), (21, "self", 2), (23, "a", 2), (23, "b", 2)]
    text = str(run).splitlines()
    assert "\n".join(text[22:37]) == ACC_TRACE
    assert repr(run) == "Run(f([1, 2]) -> 13, status='ok', 26 steps, 25 states)"
    assert run.objects_frame().schema == pl.Schema(
        {"object_id": pl.Int32, "type": pl.String, "step": pl.Int32})
    assert run.objects_frame().rows() == [(1, "list", 0), (2, "Acc", 2), (3, "list", 5)]
    assert run.attributes_frame().schema == pl.Schema(
        {"step": pl.Int32, "object_id": pl.Int32, "attr": pl.String, "value": pl.String,
         "type": pl.String, "truncated": pl.Boolean, "ref_id": pl.Int32})
    assert run.attributes_frame().rows() == [
        (a.step, a.object_id, a.attr, a.value, a.type, a.truncated, a.ref_id)
        for a in ACC_ATTRIBUTES]
    assert run.globals_frame().schema == pl.Schema(
        {"step": pl.Int32, "name": pl.String, "value": pl.String, "type": pl.String,
         "truncated": pl.Boolean, "object_id": pl.Int32})
    assert run.globals_frame().rows() == [(0, "count", "0", "int", False, None),
                                          (11, "count", "1", "int", False, None),
                                          (19, "count", "2", "int", False, None)]

    db = tmp_path / "acc.duckdb"
    st.trace([{"id": "acc", "code": ACC, "input": "[1, 2]", "output": "13"}], db, workers=0)
    with st.open_store(db) as store:
        stored = store.run(1)
        assert stored == run
        assert (stored.objects, stored.attributes, stored.globals, stored.states) == (
            run.objects, run.attributes, run.globals, run.states)
        assert str(stored) == "run 1: " + str(run)
        assert store.states(1).equals(run.states_frame())
        for frame in ("objects_frame", "attributes_frame", "globals_frame"):
            assert getattr(stored, frame)().equals(getattr(run, frame)()), frame
    # the records are compared: a run differing only in one attribute is another run
    changed = dataclasses.replace(run, attributes=run.attributes[:-1])
    assert changed != run and dataclasses.replace(changed, attributes=run.attributes) == run


def test_python_c_prints_a_decoded_run():
    """The issue's one-liner, in a fresh interpreter."""
    code = "import steptrace as st; print(st.trace_one('def f(x):\\n    return x*2', '21'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == (
        "f(21) -> 42  [ok]\n"
        "   1 | def f(x):\n"
        "   2 |     return x*2\n"
        "3 steps (1 line, 4 instruction), 2 state changes\n"
        "step  event   line  depth  func  changed\n"
        "   0  call       1      0  f     x=21\n"
        "   1  line       2      0  f\n"
        "   2  return     2      0  f     <return>=42\n")


def test_trace_one_limits_and_bad_arguments():
    capped = st.trace_one("def f(x):\n    return repr(x)\n", "'a' * 50", limits={"max_repr": 10})
    assert capped.states[0] == st.State(0, "x", "'aaaaaaaaa", "str", True)
    assert capped.output_truncated is False and capped.output == repr("'" + "a" * 50 + "'")
    with pytest.raises(st.InputError, match="^unknown limit 'timeout'; the limits are timeout_s, "):
        st.trace_one(SUM, "[]", limits={"timeout": 1})
    with pytest.raises(st.InputError, match="^limit max_steps must be positive, got 0$"):
        st.trace_one(SUM, "[]", limits={"max_steps": 0})
    with pytest.raises(st.InputError, match=r"^'entry' must be a Python identifier or a dotted path of them \(Stack.push\), got 'no way'$"):
        st.trace_one(SUM, "[]", entry="no way")
    with pytest.raises(st.InputError, match="^'input' must be a string, got int$"):
        st.trace_one(SUM, 3)


# ------------------------------------------------------------------ open_store
@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_jsonl(tmp_path / "small.jsonl", RECORDS)


def test_store_reads_tables_as_polars(tmp_path, corpus):
    db = tmp_path / "s.duckdb"
    with st.open_store(db) as store:  # not there yet: the trace below makes it
        assert os.fspath(store) == str(store) == str(db)
        assert repr(store) == f"Store({str(db)!r})"
        with pytest.raises(st.StoreError, match=f"^database not found: {db}$"):
            store.runs()
        summary = st.trace(corpus, store, workers=0)
        assert (summary.traced, summary.db) == (6, str(db))
        assert store.status_counts() == {"exception": 1, "ok": 5}
        runs = store.runs()
        assert runs.columns[:6] == ["run_id", "program_id", "sample_id", "input_index", "input",
                                    "status"]
        assert runs.select("run_id", "sample_id", "status").rows() == [
            (1, "add", "ok"), (2, "sq", "ok"), (3, "sq", "ok"), (4, "boom", "exception"),
            (5, "neg", "ok"), (6, "loop", "ok")]
        assert store.runs(status="exception")["sample_id"].to_list() == ["boom"]
        assert store.runs(sample_id="sq")["input"].to_list() == ["3", "4"]
        assert store.programs()["sample_id"].to_list() == ["add", "sq", "boom", "neg", "loop"]
        found = store.sql("SELECT sample_id, output FROM runs WHERE status = ? ORDER BY run_id",
                          ["ok"])
        assert found.rows() == [("add", "3"), ("sq", "9"), ("sq", "16"), ("neg", "-2"),
                                ("loop", "[2, 3]")]
        named = store.sql("SELECT count(*) AS n FROM steps WHERE run_id = $id", {"id": 6})
        assert named.rows() == [(15,)] and named.columns == ["n"]
        assert store.steps(6).height == 15 and store.states(6).height == 11
        assert store.run(4).outcome_text() == "raised ZeroDivisionError: division by zero"
        with pytest.raises(st.StoreError, match=f"^no run with run_id 99 in {db}$"):
            store.run(99)
        with pytest.raises(st.StoreError, match=f"^{db} has no tasks table: run make_tasks "):
            store.tasks()
        with pytest.raises(st.StoreError, match=f"^query failed on {db}: .*read-only"):
            store.sql("DELETE FROM runs")
        # reads hold nothing open: a second trace writes while the store is "open"
        again = st.trace([{"id": "more", "code": SUM, "input": "[5]"}], store, workers=0)
        assert again.traced == 1 and store.runs().height == 7
    assert store.closed
    with pytest.raises(st.StoreError, match=f"^store {db} is closed$"):
        store.runs()
    assert rows(db, "SELECT count(*) FROM runs") == [(7,)]


def test_open_store_refuses_a_file_that_is_not_a_store(tmp_path, corpus):
    with pytest.raises(st.StoreError, match="is a text file .*not a DuckDB database"):
        st.open_store(corpus)
    with pytest.raises(st.InputError, match="^a store is a path or what open_store returned, "
                                            "not int$"):
        st.trace(corpus, 3)


# ------------------------------------------------------------------ corpora in memory
STORE_DIGEST = {
    "programs": "SELECT * FROM programs ORDER BY program_id",
    "runs": "SELECT * EXCLUDE (duration_us, call_us, traced_at) FROM runs ORDER BY run_id",
    "steps": "SELECT * FROM steps ORDER BY run_id, step",
    "states": "SELECT * FROM states ORDER BY run_id, step, var",
}


def test_trace_records_and_a_frame_make_the_files_store(tmp_path, corpus):
    """A list of dicts and a polars DataFrame of the corpus records, named as the file,
    are the same jobs: the same programs, runs (keys included), steps and states."""
    stores = {}
    frame = pl.read_ndjson(corpus)
    loaded = load_corpus(corpus)
    for label, source, name in (("file", corpus, None), ("list", RECORDS, "small.jsonl"),
                                ("frame", frame, "small.jsonl"), ("loaded", loaded, None)):
        db = tmp_path / f"{label}.duckdb"
        summary = st.trace(source, db, workers=0, name=name)
        assert (summary.jobs, summary.traced, dict(summary.by_status), summary.corpus_errors) == (
            6, 6, {"exception": 1, "ok": 5}, [])
        assert summary.corpus == {"file": str(corpus), "loaded": "<memory>"}.get(label, name)
        stores[label] = {table: rows(db, sql) for table, sql in STORE_DIGEST.items()}
    assert stores["file"]["programs"][0][1] == "small.jsonl"  # the source, part of the keys
    assert stores["list"] == stores["file"]
    assert stores["frame"] == stores["file"]
    assert stores["loaded"] == stores["file"]
    # tracing the list again into the file's store skips every job: the same keys
    again = st.trace(RECORDS, tmp_path / "file.duckdb", workers=0, name="small.jsonl")
    assert (again.skipped, again.traced) == (6, 0)


def test_records_in_memory_in_the_corpus_helpers(corpus):
    """load_corpus takes records as it takes the file; bad records are reported by their
    number and skipped; a record without id is numbered from 1."""
    assert load_corpus(st.Records(RECORDS, "small.jsonl")) == load_corpus(corpus)
    loaded = load_corpus([{"code": SUM, "input": "[1]"}, {"code": SUM}, 3,
                          {"id": 7, "code": SUM, "inputs": ["[]"]}])
    assert [(j.program.source, j.program.sample_id, j.input) for j in loaded.jobs] == [
        ("<memory>", "1", "[1]"), ("<memory>", "7", "[]")]
    assert loaded.errors == ["<memory> record 2: missing 'input' or 'inputs'",
                             "<memory> record 3: expected a JSON object, got int"]
    with pytest.raises(st.InputError, match="^a corpus is a path, a list of records"):
        load_corpus({"code": SUM, "input": "[1]"})


def test_trace_a_frame_with_nulls_and_bad_records(tmp_path):
    """A frame's null cells are absent keys (a frame has every column on every row)."""
    frame = pl.DataFrame({"id": ["a", "b", None], "code": [SUM, SUM, None],
                          "input": ["[1]", None, "[3]"],
                          "inputs": [None, ["[2]", "[2, 2]"], None]})
    summary = st.trace(frame, tmp_path / "f.duckdb", workers=0)
    assert (summary.corpus, summary.jobs, summary.traced) == ("<memory>", 3, 3)
    assert summary.corpus_errors == ["<memory> record 3: missing 'code'"]
    assert rows(tmp_path / "f.duckdb", "SELECT sample_id, input_index, input, output FROM runs "
                                       "ORDER BY run_id") == [
        ("a", 0, "[1]", "1"), ("b", 0, "[2]", "2"), ("b", 1, "[2, 2]", "4")]


# ------------------------------------------------------------------ the notebook's loop
KINDS = ("output", "input", "state", "next_line", "coverage", "trace")


def block(text: str):
    return answer(f"[ANSWER]\n{text}\n[/ANSWER]")


def replies_m1(task: dict) -> list:
    """Three samples per task; which are right is written next to each kind."""
    right = block(task["answer"])
    return {
        "output": [right, block("4"), answer("I think it is three")],   # 1 right, 1 unparseable
        "input": [block("[1, 2, 3]"), block("[3]"), block("[2]")],     # 2 right (f([3]) == 3)
        "state": [right, right, block("12345")],                        # 2 right
        "next_line": [block("99"), block("raise"), right],             # 1 right
        "coverage": [right, right, right],                              # 3 right
        "trace": [right, block("[[2, 0]]"), answer("no idea")],         # 1 right, 1 unparseable
    }[task["kind"]]


def replies_m2(task: dict) -> list:
    """The second model gets only the output right."""
    if task["kind"] == "output":
        return [block(task["answer"])] * 3
    wrong = {"input": "[2]", "state": "12345", "next_line": "99", "trace": "[[1, 0]]",
             "coverage": "false" if task["answer"] == "true" else "true"}[task["kind"]]
    return [block(wrong)] * 3


def test_notebook_loop_trace_tasks_predict_score(tmp_path):
    """trace -> make_tasks -> predict (a real server on 127.0.0.1) -> score with nothing
    but the library: records in memory, tasks in memory, exact figures. (The program
    and replies are tests/scoring/test_scoring.py's, so the figures are the CLI's there.)"""
    db = tmp_path / "nb.duckdb"
    store = st.open_store(db)
    traced = st.trace([{"id": "loop", "code": LOOP, "input": "[1, 2, 3]"}], store,
                      workers=0)
    assert (traced.traced, dict(traced.by_status)) == (1, {"ok": 1})

    tasks = st.make_tasks(store, kinds=KINDS, per_run=1)
    assert tasks.rows() == [(kind, 1, 1) for kind in KINDS] + [("total", 6, 1)]
    assert tasks.tasks.height == 6 and sorted(tasks.tasks["kind"]) == sorted(KINDS)
    assert store.tasks().select("task_id", "answer").rows() == sorted(
        tasks.tasks.select("task_id", "answer").rows(), key=lambda r: r[0])
    records = {t["task_id"]: t for t in tasks.tasks.iter_rows(named=True)}
    by_prompt = {t["prompt"]: t["task_id"] for t in records.values()}

    summaries = {}
    for model, replies in (("m1", replies_m1), ("m2", replies_m2)):
        script = {task_id: replies(t) for task_id, t in records.items()}
        with StubServer(script, models=(model,), key_of=by_prompt.get) as server:
            summaries[model] = st.predict(tasks, store, model, base_url=server.base_url,
                                          samples=3, concurrency=1)
            assert sum(server.requests.values()) == 18
    m1 = summaries["m1"]
    assert (m1.tasks_file, m1.db, m1.model, m1.label, m1.tasks, m1.pairs, m1.requests,
            m1.errors, m1.unparseable) == ("<memory>", str(db), "m1", "direct-t0.0-m2048", 6,
                                           18, 18, 0, 2)
    assert store.predictions(model="m2").height == 18

    scored = st.score(store, tasks, ks=(1, 2), workers=0)
    result = scored.as_dict()
    got = {(r["model"], r["kind"]): (r["pass@1"], r["pass@2"]) for r in result["by_kind"]}
    assert got[("m1", "all")] == (0.5556, 0.8333)
    assert got[("m2", "all")] == (0.1667, 0.1667)
    assert {k: got[("m1", k)][0] for k in KINDS} == {
        "output": 0.3333, "input": 0.6667, "state": 0.6667, "next_line": 0.3333, "coverage": 1.0,
        "trace": 0.3333}
    assert (result["scored"], result["errors_skipped"], result["input_checks"]) == (36, 0, 3)
    assert store.scores().group_by("model").agg(pl.col("correct").sum()).sort("model").rows() == [
        ("m1", 10), ("m2", 3)]

    # the same scores from the tasks as a list of dicts and as the written file's frame
    again = st.score(store, list(records.values()), ks=(1, 2), workers=0)
    assert {(r["model"], r["kind"]): (r["pass@1"], r["pass@2"])
            for r in again.as_dict()["by_kind"]} == got


def test_predict_from_a_running_event_loop(tmp_path, corpus):
    """In a notebook an event loop is running: predict's requests then run in a thread of
    their own, with the same result as outside one."""
    db = tmp_path / "loop.duckdb"
    st.trace(corpus, db, workers=0)
    tasks = st.make_tasks(db, kinds="output", per_run=1)
    records = list(tasks.tasks.iter_rows(named=True))
    by_prompt = {t["prompt"]: t["task_id"] for t in records}
    script = {t["task_id"]: block(t["answer"]) for t in records}

    async def notebook_cell():
        asyncio.get_running_loop()  # a loop runs here, as in Jupyter
        return st.predict(records, db, "stub-model", base_url=server.base_url)

    with StubServer(script, key_of=by_prompt.get) as server:
        summary = asyncio.run(notebook_cell())
    # an output task for each of the five runs that returned (boom raised)
    assert (summary.tasks, summary.requests, summary.errors, summary.unparseable) == (5, 5, 0, 0)
    scored = st.score(db, tasks, ks=(1,), workers=0).as_dict()
    assert [(r["kind"], r["pass@1"]) for r in scored["by_kind"]] == [("output", 1.0),
                                                                     ("all", 1.0)]


def test_predict_and_score_check_tasks_in_memory(tmp_path, corpus):
    db = tmp_path / "s.duckdb"
    st.trace(corpus, db, workers=0)
    bad = [{"task_id": "a", "kind": "output", "prompt": "p"}, {"task_id": "a", "kind": "output",
                                                                "prompt": "q"}]
    with pytest.raises(st.InputError, match=r"^<memory> record 2: duplicate task_id 'a' "
                                            r"\(first on record 1\)$"):
        st.predict(bad, db, "m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(st.InputError, match="^<memory> record 1: field 'prompt' must be a "
                                            "non-empty string$"):
        st.predict([{"task_id": "a", "kind": "output"}], db, "m")
    with pytest.raises(st.InputError, match=r"^<memory> record 1: not a task record \(missing "
                                            "run_id, sample_id, answer, answer_type"):
        st.score(db, bad)
    with pytest.raises(st.InputError, match="^<memory> holds no tasks$"):
        st.score(db, [])
    with pytest.raises(st.InputError, match="^predict needs a model"):
        st.predict(bad, db)


# ------------------------------------------------------------------ errors
def test_library_errors_are_steptrace_errors(tmp_path, corpus):
    """What a caller gets wrong is a SteptraceError (an InputError is still a ValueError)."""
    db = tmp_path / "e.duckdb"
    st.trace(corpus, db, workers=0)
    with pytest.raises(st.InputError, match="^unknown task kind 'nope'") as raised:
        st.make_tasks(db, kinds="nope")
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, st.SteptraceError)
    with pytest.raises(st.InputError, match="^template directory not found: "):
        st.make_tasks(db, template_dir=tmp_path / "none")
    with pytest.raises(st.InputError, match="^isolation must be one of job, batch, not 'all'$"):
        st.trace(corpus, db, isolation="all")
    with pytest.raises(st.InputError, match="^limit timeout_s must be positive, got 0$"):
        st.Limits(timeout_s=0)
    with pytest.raises(st.StoreError, match="^database not found: "):
        st.analyse(tmp_path / "missing.duckdb")
    with pytest.raises(st.InputError, match="^top_p must be > 0 and <= 1$"):
        st.predict([], db, "m", top_p=2)
    out = tmp_path / "taken"
    out.mkdir()
    with pytest.raises(st.InputError) as raised:  # Python's message names the file
        st.report(db, out)
    assert str(raised.value) == f"[Errno 21] Is a directory: '{out}'"


USER_ERRORS = [  # each was a ValueError caught by the CLI; each is an InputError now
    (("query", "runs_by_status", "--param", "oops"), "bad --param 'oops': expected NAME=VALUE"),
    (("size-check", "--scores", "missing.csv"), "scores file not found: missing.csv"),
    (("synth", "--n", 1, "--out", "no/such/dir/x.jsonl"),
     "cannot write no/such/dir/x.jsonl: no directory no/such/dir"),
    (("tasks", "--db", "{db}", "--template-dir", "no-templates"),
     "template directory not found: no-templates"),
]


@pytest.mark.parametrize("args, message", USER_ERRORS)
def test_cli_user_errors_are_one_line(tmp_path, corpus, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "u.duckdb"
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    result = invoke(*[str(a).replace("{db}", str(db)) for a in args])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert (result.stdout, result.stderr) == ("", f"Error: {message}\n")


def test_cli_user_error_from_a_file_it_cannot_write(tmp_path, corpus):
    """An OSError writing a file the user named is an InputError naming the file."""
    db = tmp_path / "w.duckdb"
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    out = tmp_path / "tasks.jsonl"
    parquet = tmp_path / "tasks.parquet"
    parquet.mkdir()  # the Parquet file written next to the JSONL is a directory
    result = invoke("tasks", "--db", db, "--kinds", "output", "--out", out)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (f"Error: cannot write {parquet}: expected a file path; "
                             f"'{parquet}' is a directory\n")


@pytest.mark.parametrize("error", [KeyError("run_id"), ValueError("an internal invariant"),
                                   OSError("not about a user's file")])
def test_cli_bug_keeps_its_traceback(tmp_path, corpus, monkeypatch, error):
    """An exception that is not a SteptraceError is a bug: the CLI lets it propagate
    (CliRunner hands it back; the real command prints its traceback), where ValueError
    and OSError used to become one line."""
    db = tmp_path / "b.duckdb"
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(st._api, "make_tasks", broken)
    result = invoke("tasks", "--db", db)
    assert result.exception is error and result.exit_code == 1
    assert "Error:" not in result.stderr
    with pytest.raises(type(error)) as raised:
        invoke("tasks", "--db", db, catch_exceptions=False)
    assert raised.value is error


def test_cli_bug_prints_a_traceback_in_a_real_process(tmp_path):
    """Outside CliRunner: a genuine bug (a KeyError raised inside the library) is printed
    with its traceback and exit status 1."""
    code = ("import sys, steptrace._api as api\n"
            "from steptrace.cli._main import main\n"
            "def broken(*a, **k):\n    raise KeyError('deep inside')\n"
            "api.report = broken\n"
            "sys.argv = ['steptrace', 'report', '--db', 'x.duckdb', '--out', 'r.html']\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert done.stderr.endswith("KeyError: 'deep inside'\n")


def test_files_that_cannot_be_read_are_input_errors_naming_them(tmp_path):
    """The one reader of user text files turns an OSError into an InputError naming the
    file, with Python's own message where that names it (as the CLI always printed)."""
    from steptrace.corpus._text import open_utf8, read_utf8, user_file

    def read_lines(path: Path) -> list[str]:
        with open_utf8(path) as lines:
            return list(lines)

    folder = tmp_path / "a.sql"
    folder.mkdir()
    for read in (read_utf8, read_lines):
        with pytest.raises(st.InputError) as raised:
            read(folder)
        assert str(raised.value) == f"[Errno 21] Is a directory: '{folder}'"
        assert isinstance(raised.value.__cause__, IsADirectoryError)
    with pytest.raises(st.InputError) as raised:
        with user_file("out.jsonl"):
            raise OSError(28, "No space left on device")  # no file name: the path is added
    assert str(raised.value) == "cannot write out.jsonl: No space left on device"
