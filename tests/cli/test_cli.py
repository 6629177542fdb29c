"""The steptrace command line through click's CliRunner: trace, sql, show, build and
--version, their output formats, and one-line errors with the right exit codes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from steptrace import __version__
from steptrace.cli._main import main
from steptrace.store._store import connect
from steptrace.sandbox._build import cache_dir
from steptrace.sandbox._build import cache_key as component_key
from helpers.sample_corpus import RECORDS, SQUARE
from helpers.cli import assert_one_line_error, new_store, rows  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]

TIMING = ("seconds", "runs_per_second", "runs/s")


def write_corpus(path: Path, lines) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                            for line in lines), encoding="utf-8")
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def table_items(text: str) -> dict[str, str]:
    """The item → value rows of a rich two-column table."""
    items = {}
    for line in text.splitlines():
        if line.startswith("│"):
            _, item, value, _ = line.split("│")
            items[item.strip()] = value.strip()
    return items


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "small.jsonl", RECORDS)


@pytest.fixture
def db(tmp_path, corpus):
    """A store holding the small corpus, traced through the CLI."""
    path = tmp_path / "store.duckdb"
    result = invoke("trace", corpus, "--db", path, "--workers", 0, "--quiet")
    assert result.exit_code == 0, result.output
    return path


FIRST_SUMMARY = {
    "jobs": 6, "duplicates": 0, "skipped": 0, "traced": 6, "by_status": {"exception": 1, "ok": 5},
    "with_expected": 5, "matched": 3, "line_steps": 17, "instruction_steps": 59, "steps": 34,
    "corpus_errors": [], "store": {"exception": 1, "ok": 5},
}


# ------------------------------------------------------------------ trace
def test_trace_json_summary(tmp_path, corpus):
    """trace --format json prints the summary as JSON with exact counts and the store."""
    db = tmp_path / "t.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    summary = json.loads(result.stdout)
    assert isinstance(summary.pop("seconds"), float)
    assert isinstance(summary.pop("runs_per_second"), float)
    assert summary == {"corpus": str(corpus), "db": str(db), **FIRST_SUMMARY}
    assert rows(db, "SELECT count(*) FROM runs") == [(6,)]


def test_trace_twice_skips_everything(tmp_path, corpus):
    """A second trace of the same corpus reports all 6 jobs as skipped and traces none."""
    db = tmp_path / "t.duckdb"
    assert invoke("trace", corpus, "--db", db, "--workers", 0).exit_code == 0
    result = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    for key in ("seconds", "runs_per_second"):
        summary.pop(key)
    assert summary == {"corpus": str(corpus), "db": str(db), "jobs": 6, "duplicates": 0, "skipped": 6,
                       "traced": 0, "by_status": {}, "with_expected": 0, "matched": 0,
                       "line_steps": 0, "instruction_steps": 0, "steps": 0,
                       "corpus_errors": [], "store": {"exception": 1, "ok": 5}}
    assert rows(db, "SELECT count(*), count(DISTINCT run_key) FROM runs") == [(6, 6)]


def test_trace_csv_summary(tmp_path, corpus):
    """trace --format csv prints item,value rows with exact counts."""
    db = tmp_path / "t.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "csv")
    assert result.exit_code == 0, result.output
    table = list(csv.reader(io.StringIO(result.stdout)))
    assert table[0] == ["item", "value"]
    assert [row for row in table[1:] if row[0] not in TIMING] == [
        ["corpus", str(corpus)], ["db", str(db)], ["jobs in corpus", "6"], ["duplicate jobs in corpus", "0"],
        ["already stored (skipped)", "0"], ["traced now", "6"],
        ["  status exception", "1"], ["  status ok", "5"],
        ["outputs matching expected", "3 / 5"], ["line steps", "17"],
        ["instruction steps", "59"], ["trace steps", "34"],
        ["corpus records skipped as bad", "0"], ["runs in store", "6"],
        ["  store status exception", "1"], ["  store status ok", "5"],
    ]
    assert [row[0] for row in table[1:] if row[0] in TIMING] == ["seconds", "runs/s"]


def test_trace_table_summary(tmp_path, corpus):
    """The default table output has the title and the same items as the CSV."""
    db = tmp_path / "t.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].strip() == "steptrace trace"
    items = table_items(result.stdout)
    for key in TIMING:
        items.pop(key, None)
    assert items == {
        "corpus": str(corpus), "db": str(db), "jobs in corpus": "6", "duplicate jobs in corpus": "0",
        "already stored (skipped)": "0", "traced now": "6", "status exception": "1",
        "status ok": "5", "outputs matching expected": "3 / 5", "line steps": "17",
        "instruction steps": "59", "trace steps": "34", "corpus records skipped as bad": "0",
        "runs in store": "6", "store status exception": "1", "store status ok": "5"}


def test_trace_without_corpus_or_demo_is_a_usage_error(tmp_path):
    """Neither CORPUS nor --demo (or both) is a usage error, exit 2, and no store is made."""
    db = tmp_path / "t.duckdb"
    for args in (("trace", "--db", db), ("trace", tmp_path / "x.jsonl", "--demo", "--db", db)):
        result = invoke(*args)
        assert result.exit_code == 2
        assert "give a CORPUS path or --demo (not both)" in result.stderr
        assert "Traceback" not in result.output
    assert not db.exists()


def test_trace_missing_corpus_is_a_one_line_error(tmp_path):
    """A corpus path that does not exist: exit 1, 'Error: corpus not found: PATH', no store."""
    missing = tmp_path / "missing.jsonl"
    db = tmp_path / "t.duckdb"
    result = invoke("trace", missing, "--db", db, "--workers", 0)
    assert_one_line_error(result, f"corpus not found: {missing}")
    assert not db.exists()


def test_trace_db_in_missing_directory_is_a_one_line_error(tmp_path, corpus):
    """--db in a directory that does not exist: exit 1 with the store's message."""
    db = tmp_path / "nodir" / "t.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0)
    assert_one_line_error(result, f"cannot create database {db}: directory {db.parent} "
                                  "does not exist")


def test_trace_corpus_with_a_corrupt_line(tmp_path):
    """A corrupt line: the other jobs are stored, a warning names file:line, exit 1."""
    corpus = write_corpus(tmp_path / "bad.jsonl",
                          [RECORDS[0], "", '{"id": "cut", "code": "def f', RECORDS[1]])
    db = tmp_path / "t.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "json")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1
    assert warnings[0].startswith(f"warning: {corpus}:3: not valid JSON (")
    summary = json.loads(result.stdout)
    assert (summary["jobs"], summary["traced"]) == (3, 3)
    assert summary["corpus_errors"] == [warnings[0].removeprefix("warning: ")]
    assert rows(db, "SELECT sample_id, input_index FROM runs ORDER BY run_id") == [
        ("add", 0), ("sq", 0), ("sq", 1)]


def test_trace_corpus_with_a_null_input(tmp_path):
    """A record with "input": null is a bad record like any other: the other job is
    stored, the warning names the line, exit 1, and no traceback."""
    corpus = write_corpus(tmp_path / "null.jsonl",
                          [{"id": "a", "code": SQUARE, "input": None}, RECORDS[0]])
    db = tmp_path / "t.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "json")
    assert "Traceback" not in result.output
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.startswith(f"warning: {corpus}:1: ")
    assert rows(db, "SELECT sample_id FROM runs") == [("add",)]


def test_trace_into_a_foreign_duckdb_file(tmp_path, corpus):
    """--db naming a DuckDB file that is not a steptrace store (its 'runs' table has other
    columns) is a one-line error naming the file, not a DuckDB traceback."""
    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE runs (x INTEGER)")
    con.close()
    result = invoke("trace", corpus, "--db", db, "--workers", 0)
    assert_one_line_error(result)
    assert str(db) in result.stderr


def test_trace_with_worker_processes_equals_in_process(tmp_path):
    """--workers 2 (two real worker processes: the 17 demo jobs are two chunks) stores
    exactly the runs, steps and states that --workers 0 stores."""
    digest = ("SELECT sample_id, input_index, input, status, output, output_type, expected, "
              "output_matches, exception_type, exception_message, stdout, line_steps, "
              "instruction_steps, calls, max_depth, n_steps, isolation, run_key, "
              "(SELECT string_agg(event || ':' || func || ':' || line || ':' || depth || ':' "
              "  || frame, ',' ORDER BY step) FROM steps s WHERE s.run_id = r.run_id), "
              "(SELECT string_agg(step || ':' || var || '=' || coalesce(value, '?') || ':' "
              "  || coalesce(type, '?') || ':' || truncated, ',' ORDER BY step, var) "
              " FROM states t WHERE t.run_id = r.run_id) "
              "FROM runs r ORDER BY sample_id, input_index")
    results = {}
    for workers in (0, 2):
        db = tmp_path / f"w{workers}.duckdb"
        # a time limit far past the step limit's job (~1 s): a busy machine cannot make it
        # a timeout
        result = invoke("trace", "--demo", "--db", db, "--workers", workers, "--format", "json",
                        "--timeout", "120")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert (summary["traced"], summary["by_status"]) == (
            17, {"exception": 1, "invalid": 1, "ok": 14, "step_limit": 1})
        results[workers] = rows(db, digest)
    assert len(results[0]) == 17
    assert results[2] == results[0]


# ------------------------------------------------------------------ sql
QUERY = "SELECT run_id, sample_id, status, output, output_matches FROM runs ORDER BY run_id"


def test_sql_json(db):
    """sql --format json: a list of objects, NULL as null, booleans as booleans."""
    result = invoke("sql", QUERY, "--db", db, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"run_id": 1, "sample_id": "add", "status": "ok", "output": "3", "output_matches": True},
        {"run_id": 2, "sample_id": "sq", "status": "ok", "output": "9", "output_matches": True},
        {"run_id": 3, "sample_id": "sq", "status": "ok", "output": "16", "output_matches": None},
        {"run_id": 4, "sample_id": "boom", "status": "exception", "output": None,
         "output_matches": False},
        {"run_id": 5, "sample_id": "neg", "status": "ok", "output": "-2", "output_matches": False},
        {"run_id": 6, "sample_id": "loop", "status": "ok", "output": "[2, 3]",
         "output_matches": True},
    ]


def test_sql_csv(db):
    """sql --format csv: a header, one line per row, NULL empty, commas quoted."""
    result = invoke("sql", QUERY, "--db", db, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout == ("run_id,sample_id,status,output,output_matches\n"
                             "1,add,ok,3,True\n"
                             "2,sq,ok,9,True\n"
                             "3,sq,ok,16,\n"
                             "4,boom,exception,,False\n"
                             "5,neg,ok,-2,False\n"
                             '6,loop,ok,"[2, 3]",True\n')


def test_sql_table(db):
    """sql with the default table format: exact rich table, NULL shown as NULL."""
    result = invoke("sql", QUERY, "--db", db)
    assert result.exit_code == 0, result.output
    assert result.stdout == """\
┏━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━━━━┓
┃ run_id ┃ sample_id ┃ status    ┃ output ┃ output_matches ┃
┡━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━━━┩
│ 1      │ add       │ ok        │ 3      │ True           │
│ 2      │ sq        │ ok        │ 9      │ True           │
│ 3      │ sq        │ ok        │ 16     │ NULL           │
│ 4      │ boom      │ exception │ NULL   │ False          │
│ 5      │ neg       │ ok        │ -2     │ False          │
│ 6      │ loop      │ ok        │ [2, 3] │ True           │
└────────┴───────────┴───────────┴────────┴────────────────┘
"""


def test_sql_non_json_types(db):
    """Values JSON cannot hold (decimals, dates) are printed as text in json and csv."""
    sql = "SELECT 1 AS a, NULL AS b, 'x,y' AS c, 1.5 AS d, DATE '2024-01-02' AS e"
    result = invoke("sql", sql, "--db", db, "--format", "json")
    assert json.loads(result.stdout) == [{"a": 1, "b": None, "c": "x,y", "d": "1.5",
                                          "e": "2024-01-02"}]
    result = invoke("sql", sql, "--db", db, "--format", "csv")
    assert result.stdout == 'a,b,c,d,e\n1,,"x,y",1.5,2024-01-02\n'


def test_sql_from_file(db):
    """sql -f queries/runs_by_status.sql runs the bundled query."""
    result = invoke("sql", "-f", ROOT / "queries" / "runs_by_status.sql", "--db", db,
                    "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout == ("status,runs,matching,not_matching,line_steps\n"
                             "ok,5,3,1,16\n"
                             "exception,1,0,1,1\n")


def test_sql_hottest_lines_file(db):
    """sql -f queries/hottest_lines.sql: the most executed lines with their source text."""
    result = invoke("sql", "-f", ROOT / "queries" / "hottest_lines.sql", "--db", db,
                    "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:5] == [
        "sample_id,line,executions,source", "loop,6,3,for x in xs:",
        "loop,2,2,return n + 1", "loop,7,2,out.append(g(x))", "sq,2,2,return x * x"]
    assert len(result.stdout.splitlines()) == 11


def test_sql_bad_query_is_a_one_line_error(db):
    """Bad SQL: exit 1, one line 'Error: query failed on DB: ...'."""
    result = invoke("sql", "SELEC 1", "--db", db)
    assert_one_line_error(result, f'query failed on {db}: Parser Error: syntax error at or near "SELEC"')


def test_sql_write_statement_is_refused(db):
    """The store is opened read-only: DELETE fails with one line and deletes nothing."""
    result = invoke("sql", "DELETE FROM runs", "--db", db)
    assert_one_line_error(result)
    assert result.stderr.startswith(f"Error: query failed on {db}: ")
    assert rows(db, "SELECT count(*) FROM runs") == [(6,)]


def test_sql_on_a_missing_db(tmp_path):
    """A missing store: exit 1, 'Error: database not found: PATH', and it is not created."""
    db = tmp_path / "missing.duckdb"
    result = invoke("sql", "SELECT 1", "--db", db)
    assert_one_line_error(result, f"database not found: {db}")
    assert not db.exists()


def test_sql_needs_exactly_one_query(db, tmp_path):
    """Neither a query nor -f, or both, is a usage error (exit 2)."""
    query_file = tmp_path / "q.sql"
    query_file.write_text("SELECT 1")
    for args in (("sql", "--db", db), ("sql", "SELECT 2", "-f", query_file, "--db", db)):
        result = invoke(*args)
        assert result.exit_code == 2
        assert "give a query or -f FILE (not both)" in result.stderr


# ------------------------------------------------------------------ show
def test_show_run_table(db):
    """show RUN_ID prints the run header, the numbered program lines and the step table."""
    result = invoke("show", 1, "--db", db)
    assert result.exit_code == 0, result.output
    assert result.stdout == """\
run 1  sample add  f(1, 2)
status ok  output 3  matches expected: True

  1  def f(a, b):
  2      c = a + b
  3      return c
┏━━━━━━┳━━━━━━━━┳━━━━━━┳━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━━━━┓
┃ step ┃ event  ┃ func ┃ line ┃ depth ┃ frame ┃ code         ┃ changed    ┃
┡━━━━━━╇━━━━━━━━╇━━━━━━╇━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━┩
│ 0    │ call   │ f    │ 1    │ 0     │ 0     │ def f(a, b): │ a=1, b=2   │
│ 1    │ line   │ f    │ 2    │ 0     │ 0     │ c = a + b    │            │
│ 2    │ line   │ f    │ 3    │ 0     │ 0     │ return c     │ c=3        │
│ 3    │ return │ f    │ 3    │ 0     │ 0     │ return c     │ <return>=3 │
└──────┴────────┴──────┴──────┴───────┴───────┴──────────────┴────────────┘
"""


def test_show_exception_and_nested_calls(db):
    """The header of an exception run names it; nested calls are indented by depth."""
    result = invoke("show", 4, "--db", db)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:2] == [
        "run 4  sample boom  f(0)",
        "status exception  ZeroDivisionError: division by zero  matches expected: False"]
    assert ("│ 2    │ raise  │ f    │ 2    │ 0     │ 0     │ return 1 // x │ "
            "<exception>=ZeroDivisionError('division by zero') │") in result.stdout
    result = invoke("show", 6, "--db", db)
    lines = result.stdout.splitlines()
    assert lines[:11] == ["run 6  sample loop  f([1, 2])",
                          "status ok  output [2, 3]  matches expected: True", "",
                          "  1  def g(n):", "  2      return n + 1", "  3  ", "  4  def f(xs):",
                          "  5      out = []", "  6      for x in xs:",
                          "  7          out.append(g(x))", "  8      return out"]
    assert ("│ 4    │ call   │ g    │ 1    │ 1     │ 1     │   def g(n):      │ n=1             │"
            in lines)
    assert sum(line.startswith("│ ") for line in lines) == 15


def test_show_sample_id_json(db):
    """show --sample-id X --format json: the run, the code and the exact step list with
    each step's changes."""
    result = invoke("show", "--sample-id", "sq", "--input-index", 1, "--db", db,
                    "--format", "json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    run = shown["run"]
    assert {k: run[k] for k in ("run_id", "program_id", "sample_id", "input_index", "input",
                                "status", "output", "expected", "output_matches", "n_steps",
                                "entry", "source")} == {
        "run_id": 3, "program_id": 2, "sample_id": "sq", "input_index": 1, "input": "4",
        "status": "ok", "output": "16", "expected": None, "output_matches": None,
        "n_steps": 3, "entry": "f", "source": "small.jsonl"}
    assert isinstance(run["traced_at"], str)
    assert shown["code"] == SQUARE
    none = {"attributes": [], "globals": []}
    assert shown["steps"] == [
        {"step": 0, "event": "call", "func": "f", "line": 1, "depth": 0, "frame": 0,
         "code": "def f(x):",
         "changes": [{"var": "x", "value": "4", "type": "int", "truncated": False,
                      "object_id": None}], **none},
        {"step": 1, "event": "line", "func": "f", "line": 2, "depth": 0, "frame": 0,
         "code": "return x * x", "changes": [], **none},
        {"step": 2, "event": "return", "func": "f", "line": 2, "depth": 0, "frame": 0,
         "code": "return x * x",
         "changes": [{"var": "<return>", "value": "16", "type": "int", "truncated": False,
                      "object_id": None}], **none},
    ]


def test_show_csv(db):
    """show --format csv: one row per step, the code indented by depth."""
    result = invoke("show", "--sample-id", "add", "--db", db, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout == ("step,event,func,line,depth,frame,code,changed\n"
                             '0,call,f,1,0,0,"def f(a, b):","a=1, b=2"\n'
                             "1,line,f,2,0,0,c = a + b,\n"
                             "2,line,f,3,0,0,return c,c=3\n"
                             "3,return,f,3,0,0,return c,<return>=3\n")


def test_show_a_range_of_steps_and_a_limit(db):
    """show --steps FIRST:STOP prints those steps (a Python slice) and a line saying which
    of how many; --limit caps them; json says which were shown; csv says it on stderr."""
    result = invoke("show", 6, "--steps", "4:7", "--db", db)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split("│")[1].strip() for line in lines if line.startswith("│ ")] == [
        "4", "5", "6"]
    assert lines[-1] == "steps 4 to 6 of 15 shown; --steps 7: shows the next"
    result = invoke("show", 6, "--steps", "12:", "--limit", 2, "--db", db, "--format", "csv")
    assert (result.stdout, result.stderr) == (
        "step,event,func,line,depth,frame,code,changed\n"
        '12,line,f,6,0,0,for x in xs:,"out=[2, 3]"\n'
        "13,line,f,8,0,0,return out,\n",
        "note: steps 12 to 13 of 15 shown; --steps 14: shows the next\n")
    shown = json.loads(invoke("show", 6, "--limit", 3, "--db", db, "--format", "json").stdout)
    assert ([s["step"] for s in shown["steps"]], shown["steps_shown"]) == (
        [0, 1, 2], {"first": 0, "count": 3, "of": 15})
    # all of them: no line; past the end: no step, and a line saying so
    assert invoke("show", 6, "--limit", 0, "--db", db).stdout.count("\n│ ") == 15
    last = invoke("show", 6, "--steps", "14:", "--db", db).stdout.splitlines()
    assert (last[-3].split("│")[1].strip(), last[-1]) == ("14", "steps 14 to 14 of 15 shown")
    assert invoke("show", 6, "--steps", "40:", "--db", db).stdout.splitlines()[-1] == (
        "no steps from step 40 (the run has 15)")
    for bad in ("7", "x:", "5:2", "-1:"):
        assert_one_line_error(invoke("show", 6, "--steps", bad, "--db", db), (
            "--steps takes FIRST:STOP (steps FIRST to STOP-1; either may be left out), FIRST "
            f">= 0 and STOP >= FIRST, not {bad!r}"))


def test_show_missing_run_is_a_one_line_error(db):
    """A run id not in the store: exit 1, 'Error: no run with run_id 999'."""
    assert_one_line_error(invoke("show", 999, "--db", db), "no run with run_id 999")
    assert_one_line_error(invoke("show", "--sample-id", "nope", "--db", db),
                          "no run for sample_id 'nope' (input 0)")


def test_show_on_a_missing_db(tmp_path):
    """show on a store that does not exist: 'Error: database not found: PATH'."""
    db = tmp_path / "missing.duckdb"
    assert_one_line_error(invoke("show", 1, "--db", db), f"database not found: {db}")


def test_show_needs_a_run_id_or_sample_id(db):
    """Neither RUN_ID nor --sample-id (or both) is a usage error (exit 2)."""
    for args in (("show", "--db", db), ("show", 1, "--sample-id", "add", "--db", db)):
        result = invoke(*args)
        assert result.exit_code == 2
        assert "give a RUN_ID or --sample-id (not both)" in result.stderr


def test_show_on_a_duckdb_file_that_is_not_a_store(tmp_path):
    """show on a valid DuckDB file without steptrace tables is a one-line error naming the
    file, not a DuckDB CatalogException traceback."""
    db = tmp_path / "empty.duckdb"
    duckdb.connect(str(db)).close()
    result = invoke("show", 1, "--db", db)
    assert_one_line_error(result)
    assert str(db) in result.stderr


# ------------------------------------------------------------------ build, --version
def test_build_json():
    """build --format json reports the cached component (not built now), the cache's size
    against its budget, 204 preloaded stdlib modules, 211 held for first use and the three
    codecs the guest cannot import."""
    from steptrace.sandbox._cache import cached_builds
    result = invoke("build", "--format", "json")
    assert result.exit_code == 0, result.output
    items = {row["item"]: row["value"] for row in json.loads(result.stdout)}
    assert list(items) == ["cache_dir", "cache_mb", "component", "component_bytes", "guest",
                           "built_now", "preloaded_modules", "bundled_modules", "unavailable"]
    used = sum(build.size for build in cached_builds(cache_dir())) / (1 << 20)
    assert items["cache_mb"] == f"{used:,.0f} of 3,072 (STEPTRACE_CACHE_MAX_MB)"
    assert items["built_now"] == "no: the cached build is verified"
    assert items["guest"] == component_key()
    assert items["cache_dir"] == str(cache_dir())
    component = Path(items["component"])
    assert component.parent == cache_dir() and component.suffix == ".wasm"
    assert items["component_bytes"] == component.stat().st_size
    assert items["preloaded_modules"] == 204
    assert items["bundled_modules"] == 211  # the rest of the standard library, on first use
    assert items["unavailable"] == "encodings.bz2_codec, encodings.mbcs, encodings.oem"


def test_version():
    """--version prints the package version and exits 0."""
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout == f"steptrace, version {__version__}\n"
    assert __version__ == "0.1.0"
