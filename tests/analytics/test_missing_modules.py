"""Runs with status ``missing_module`` downstream: a real store traced from a corpus whose
programs import modules the sandbox does not have — the trace summary counts them, the
named query ``missing_modules`` lists the modules (on the store and on its Parquet
export), and they get no tasks, as other runs that did not finish."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers.cli import rows
from helpers.processes import write_jsonl
from steptrace.analytics._export import export_parquet
from steptrace.analytics._queries import run_query
from steptrace.cli._main import main
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tracing._trace import TraceOptions, trace_corpus

RECORDS = [
    # run 1, 2: numpy at the top level, two inputs
    {"id": "np_top", "code": "import numpy\ndef f(x):\n    return x\n", "inputs": ["1", "2"],
     "outputs": ["1", "2"]},
    # run 3: numpy imported in the call
    {"id": "np_call", "code": "def f(x):\n    import numpy\n    return x\n", "input": "1",
     "output": "1"},
    # run 4: a submodule of a package the guest has
    {"id": "sub", "code": "def f():\n    import json.nothere\n", "input": ""},
    # run 5: a script
    {"id": "script", "shape": "script", "code": "import scipy\nprint(1)\n", "input": "",
     "output": "1\n"},
    # run 6: numpy caught, the call returns
    {"id": "caught", "code": "def f(x):\n    try:\n        import numpy\n"
                             "    except ImportError:\n        return x\n", "input": "3",
     "output": "3"},
    # run 7: an ordinary exception naming a module the guest has
    {"id": "json", "code": "def f():\n    raise ModuleNotFoundError('x', name='json')\n",
     "input": ""},
]
MISSING = "missing_module"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("missing")
    corpus = root / "corpus.jsonl"
    write_jsonl(corpus, RECORDS)
    db = root / "store.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert summary.by_status == {MISSING: 5, "ok": 1, "exception": 1}
    assert (summary.with_expected, summary.matched) == (5, 1)
    return db


def test_the_runs(store):
    assert rows(store, "SELECT run_id, sample_id, status, exception_type, exception_message, "
                       "output_matches FROM runs ORDER BY run_id") == [
        (1, "np_top", MISSING, "ModuleNotFoundError", "No module named 'numpy'", False),
        (2, "np_top", MISSING, "ModuleNotFoundError", "No module named 'numpy'", False),
        (3, "np_call", MISSING, "ModuleNotFoundError", "No module named 'numpy'", False),
        (4, "sub", MISSING, "ModuleNotFoundError", "No module named 'json.nothere'", None),
        (5, "script", MISSING, "ModuleNotFoundError", "No module named 'scipy'", False),
        (6, "caught", "ok", None, None, True),
        (7, "json", "exception", "ModuleNotFoundError", "x", None)]


def test_the_query_lists_the_missing_modules(store, tmp_path):
    """numpy: three runs of two programs; json.nothere and scipy one each (ties by name);
    the caught import and the json error are not missing modules."""
    want = [("numpy", 3, 2), ("json.nothere", 1, 1), ("scipy", 1, 1)]
    result = run_query("missing_modules", db=store)
    assert (result.columns, result.rows) == (["module", "runs", "programs"], want)
    export_parquet(store, tmp_path / "pq")
    assert run_query("missing_modules", parquet=tmp_path / "pq").rows == want


def test_no_tasks_for_missing_module_runs(store, tmp_path):
    """Tasks are made for finished runs (ok, exception) only: runs 6 and 7."""
    db = tmp_path / "tasks.duckdb"
    db.write_bytes(store.read_bytes())
    generate_tasks(db, TaskOptions(kinds=("output", "exception"), per_run=1))
    assert rows(db, "SELECT run_id, kind FROM tasks ORDER BY run_id, kind") == [
        (6, "exception"), (6, "output"), (7, "exception")]


def test_trace_command_counts_the_status(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, RECORDS)
    result = CliRunner().invoke(main, ["trace", str(corpus), "--db", str(tmp_path / "t.duckdb"),
                                       "--workers", "0", "--format", "csv"])
    assert result.exit_code == 0, result.output
    table = dict(tuple(row) for row in csv.reader(io.StringIO(result.stdout)))
    assert table["  status missing_module"] == "5"
    assert table["  store status missing_module"] == "5"
    assert table["outputs matching expected"] == "1 / 5"
