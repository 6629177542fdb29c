"""A plan without its shards (``trace --out DIR --plan-only``) for batch schedulers, and a
shard directory handing its guest to a machine whose cache has none."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from steptrace.cli import main
from steptrace.store._store import connect
from helpers.processes import write_jsonl

RECORDS = [{"id": f"s{i}", "code": "def f(x):\n    return x * 2\n", "input": str(i),
            "output": str(2 * i)} for i in range(5)]


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_plan_only_writes_the_plan_and_trace_shard_runs_each_index(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    out = tmp_path / "shards"
    planned = _invoke("trace", str(corpus), "--out", str(out), "--shard-size", "2",
                      "--plan-only", "--format", "json", "--quiet")
    assert planned.exit_code == 0, planned.output
    summary = json.loads(planned.stdout)
    assert (summary["shards"], summary["shards_traced"], summary["traced"],
            summary["complete"]) == (3, 0, 0, False)
    assert sorted(p.name for p in (out / "inputs").iterdir()) == ["00000.jsonl", "00001.jsonl",
                                                                   "00002.jsonl"]
    assert not (out / "shards").exists() and not (out / "steptrace_shards.json").exists()
    for index, runs in ((2, 1), (0, 2)):
        done = _invoke("trace-shard", str(out), "--index", str(index), "--workers", "1",
                       "--format", "json")
        assert done.exit_code == 0, done.output
        result = json.loads(done.stdout)
        assert (result["index"], result["runs"], result["by_status"]) == (index, runs, {"ok": runs})
    assert not (out / "steptrace_shards.json").exists()  # shard 1 is not done yet
    last = _invoke("trace-shard", str(out), "--index", "1", "--workers", "1", "--format", "json")
    assert json.loads(last.stdout)["runs"] == 2
    manifest = json.loads((out / "steptrace_shards.json").read_text())
    assert (manifest["shards"], manifest["runs"], manifest["by_status"]) == (3, 5, {"ok": 5})
    con = connect(out, read_only=True)
    try:
        assert con.execute("SELECT run_id, input, output FROM runs ORDER BY run_id").fetchall() == [
            (i + 1, str(i), str(2 * i)) for i in range(5)]
    finally:
        con.close()
    again = _invoke("trace-shard", str(out), "--index", "1", "--format", "json")
    assert json.loads(again.stdout)["skipped"] is True


def test_plan_only_is_refused_without_out(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    result = _invoke("trace", str(corpus), "--db", str(tmp_path / "s.duckdb"), "--plan-only")
    assert result.exit_code == 2
    assert "--plan-only goes with --out DIR" in result.stderr


def test_a_shard_directory_offers_nothing_to_the_cache(tmp_path, monkeypatch):
    """Opening a shard directory, to read or to write (score and analyse may run programs
    again), puts nothing in this machine's cache: the directory's guest is data, and a
    command that runs programs runs them in this machine's build, as for a store."""
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    out = tmp_path / "shards"
    assert _invoke("trace", str(corpus), "--out", str(out), "--workers", "1",
                   "--quiet").exit_code == 0
    empty = tmp_path / "cache"
    monkeypatch.setenv("STEPTRACE_CACHE_DIR", str(empty))
    connect(out, read_only=True).close()
    connect(out).close()
    assert not empty.exists()


def test_a_missing_corpus_makes_no_directory(tmp_path):
    from helpers.cli import assert_one_line_error
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    out = tmp_path / "shards"
    result = _invoke("trace", str(corpus), str(tmp_path / "nope.jsonl"), "--out", str(out))
    assert_one_line_error(result, f"corpus not found: {tmp_path / 'nope.jsonl'}")
    assert not out.exists()


def test_a_resume_checks_the_jobs_without_writing_their_inputs_again(tmp_path, monkeypatch):
    """Planning again (a resume) reads the corpora for their jobs' digest only: no input
    line is written (for 100,000,000 jobs that would be ~39 GB again), and the plan and
    inputs there stay as they are."""
    from steptrace.sandbox._limits import Limits
    from steptrace.sharding import _plan
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    out = tmp_path / "shards"
    first, resumed = _plan.plan_directory([corpus], out, 2, Limits(), "job")
    assert resumed is False
    before = {p.name: p.read_bytes() for p in (out / "inputs").iterdir()}
    opened = []
    real = _plan.input_path
    monkeypatch.setattr(_plan, "input_path", lambda d, i: opened.append(i) or real(d, i))
    again, resumed = _plan.plan_directory([corpus], out, 2, Limits(), "job")
    assert (resumed, again, opened) == (True, first, [])
    assert {p.name: p.read_bytes() for p in (out / "inputs").iterdir()} == before
    assert sorted(before) == ["00000.jsonl", "00001.jsonl", "00002.jsonl"]
