"""``export-traces --format lines`` and the settrace view in exports (docs/guides/exports.md,
"lines"): exact records of both views, jsonl's settrace rows, the selection by the view's
line steps, a store without a view, a shard directory, and the errors; the settrace
view's lines re-derived from native ``sys.settrace`` (CPython 3.13)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import steptrace as st
from steptrace.analytics._trace_export import export_traces
from steptrace.cli._main import main
from steptrace.errors import InputError
from helpers.native_tracer import PYTHONS, NativeSettrace, native_python
from helpers.programs import CALLS_IN_COMPREHENSION, ONE_LINE_LOOPS

VIEW, CALLS = ONE_LINE_LOOPS, CALLS_IN_COMPREHENSION
RECORDS = [{"id": "view", "code": VIEW, "input": "[1, 2, 3]"},
           {"id": "calls", "code": CALLS, "input": "[1, 2]"}]
VIEW_LINES = [[2, 0, "f"]] * 4 + [[3, 0, "f"]] + [[4, 0, "f"]] * 4 + [[5, 0, "f"]]
CALLS_LINES = [[5, 0, "f"], [2, 1, "double"], [5, 0, "f"], [2, 1, "double"], [5, 0, "f"],
               [6, 0, "f"]]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("settrace-export") / "s.duckdb"
    st.trace(RECORDS, db, workers=0)
    return db


def export(store: Path, tmp_path: Path, fmt: str, **options) -> list[dict]:
    out = tmp_path / f"{fmt}.jsonl"
    export_traces(store, out, fmt, **options)
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_lines_of_both_views(store, tmp_path):
    assert export(store, tmp_path, "lines") == [
        {"run_id": 1, "sample_id": "view", "input_index": 0, "status": "ok",
         "call": "f([1, 2, 3])", "view": "monitoring",
         "lines": [[2, 0, "f"], [3, 0, "f"], [4, 0, "f"], [5, 0, "f"]]},
        {"run_id": 2, "sample_id": "calls", "input_index": 0, "status": "ok",
         "call": "f([1, 2])", "view": "monitoring",
         "lines": [[5, 0, "f"], [2, 1, "double"], [2, 1, "double"], [6, 0, "f"]]}]
    assert export(store, tmp_path, "lines", lines="settrace") == [
        {"run_id": 1, "sample_id": "view", "input_index": 0, "status": "ok",
         "call": "f([1, 2, 3])", "view": "settrace", "lines": VIEW_LINES},
        {"run_id": 2, "sample_id": "calls", "input_index": 0, "status": "ok",
         "call": "f([1, 2])", "view": "settrace", "lines": CALLS_LINES}]


def test_jsonl_holds_the_views_own_events(store, tmp_path):
    records = {r["sample_id"]: r for r in export(store, tmp_path, "jsonl")}
    assert records["calls"]["settrace_line_steps"] == 6
    assert records["calls"]["settrace_lines"] == [
        {"step": 4, "func": "f", "line": 5, "depth": 0, "frame": 0},
        {"step": 7, "func": "f", "line": 5, "depth": 0, "frame": 0}]
    assert records["view"]["settrace_line_steps"] == 10
    assert [(r["step"], r["line"]) for r in records["view"]["settrace_lines"]] == [
        (1, 2), (1, 2), (1, 2), (3, 4), (3, 4), (3, 4)]


def test_max_trace_lines_counts_the_views_line_events(store, tmp_path):
    """``calls`` has 4 line steps and 6 in its settrace view, ``view`` 4 and 10."""
    assert [r["sample_id"] for r in export(store, tmp_path, "lines", max_trace_lines=6,
                                           lines="settrace")] == ["calls"]
    assert [r["sample_id"] for r in export(store, tmp_path, "lines", max_trace_lines=4)] == [
        "view", "calls"]
    assert export(store, tmp_path, "lines", max_trace_lines=5, lines="settrace") == []


def test_a_store_without_a_view(store, tmp_path):
    """A schema 6 store read as it is: its runs have no view, so the settrace lines leave
    them out, and jsonl says null and no events."""
    db = tmp_path / "old.duckdb"
    db.write_bytes(store.read_bytes())
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE settrace_lines")
        for column in ("python", "backend", "settrace_line_steps"):  # schema 7's
            con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    assert export(db, tmp_path, "lines", lines="settrace") == []
    assert [r["lines"] for r in export(db, tmp_path, "lines")] == [
        [[2, 0, "f"], [3, 0, "f"], [4, 0, "f"], [5, 0, "f"]],
        [[5, 0, "f"], [2, 1, "double"], [2, 1, "double"], [6, 0, "f"]]]
    assert [(r["settrace_line_steps"], r["settrace_lines"])
            for r in export(db, tmp_path, "jsonl")] == [(None, []), (None, [])]


def test_a_shard_directory_exports_as_a_store(store, tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    out = tmp_path / "shards"
    result = CliRunner().invoke(main, ["trace", str(corpus), "--out", str(out), "--workers",
                                       "1", "--shard-size", "1"])
    assert result.exit_code == 0, result.output
    assert export(out, tmp_path, "lines", lines="settrace") == export(
        store, tmp_path, "lines", lines="settrace")


def test_the_settrace_view_goes_with_the_lines_format_only(store, tmp_path):
    for fmt in ("cwm", "scratchpad", "pythontutor", "jsonl"):
        with pytest.raises(InputError) as raised:
            export_traces(store, tmp_path / "x.jsonl", fmt, lines="settrace")
        assert str(raised.value) == (
            f"--lines settrace goes with --trace-format lines: the settrace view's own line "
            f"events have no recorded state for {fmt} (jsonl holds them as settrace_lines)")
    with pytest.raises(InputError) as raised:
        export_traces(store, tmp_path / "x.jsonl", "lines", lines="sys")
    assert str(raised.value) == "unknown line view 'sys': choose from monitoring, settrace"
    assert not (tmp_path / "x.jsonl").exists()
    result = CliRunner().invoke(main, ["export-traces", "--trace-format", "cwm", "--lines",
                                       "settrace", "--db", str(store), "--out",
                                       str(tmp_path / "c.jsonl")])
    assert result.exit_code == 1
    assert result.output == ("Error: --lines settrace goes with --trace-format lines: the "
                             "settrace view's own line events have no recorded state for cwm "
                             "(jsonl holds them as settrace_lines)\n")


@pytest.mark.skipif(native_python("3.13") is None,
                    reason=f"CPython 3.13 is not installed at {PYTHONS['3.13']}")
def test_settrace_lines_are_native_settraces(store, tmp_path):
    records = {r["sample_id"]: r for r in export(store, tmp_path, "lines", lines="settrace")}
    with NativeSettrace("3.13") as native:
        for record in RECORDS:
            events = native.run(record["code"], record["input"])["events"]
            assert records[record["id"]]["lines"] == [
                [line, depth, func] for event, func, line, depth in events if event == "line"]
