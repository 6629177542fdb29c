"""One meaning per flag: ``--out`` names what an export writes (``export --parquet`` is a
deprecated alias), ``--format`` is the output's table|json|csv everywhere (export-traces'
trace format is ``--trace-format``; its old ``--format jsonl`` works with a warning), and
export files get the mode ``open()`` gives (0666 less the umask), not tempfile's 0600."""

from __future__ import annotations

import json
import os
import stat

import pytest

from helpers.cli import assert_one_line_error, invoke
from helpers.processes import write_jsonl
from helpers.sample_corpus import RECORDS


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    assert invoke("trace", corpus, "--db", path, "--workers", 0, "--quiet").exit_code == 0
    return path


def test_export_out_and_the_deprecated_parquet(db, tmp_path):
    new = invoke("export", "--db", db, "--out", tmp_path / "a", "--format", "csv")
    old = invoke("export", "--db", db, "--parquet", tmp_path / "b", "--format", "csv")
    assert (new.exit_code, old.exit_code, new.stderr) == (0, 0, "")
    assert old.stderr == ("warning: export --parquet DIR is deprecated; use --out DIR (every "
                          "export names what it writes with --out)\n")
    assert new.stdout.splitlines()[1:] == old.stdout.splitlines()[1:]
    for args in ((), ("--out", tmp_path / "c", "--parquet", tmp_path / "d")):
        result = invoke("export", "--db", db, *args)
        assert result.exit_code == 2 and "give the directory to write as --out DIR" in result.stderr


def test_export_traces_trace_format_and_format(db, tmp_path):
    out = tmp_path / "t.jsonl"
    new = invoke("export-traces", "--trace-format", "jsonl", "--db", db, "--out", out,
                 "--format", "json")
    assert (new.exit_code, new.stderr) == (0, "")
    assert json.loads(new.stdout) == {"format": "jsonl", "out": str(out), "runs": 6,
                                      "steps": 34, "batches": 1}
    written = out.read_bytes()
    old = invoke("export-traces", "--format", "jsonl", "--db", db, "--out", out)
    assert old.exit_code == 0
    assert old.stderr == ("warning: export-traces --format jsonl is deprecated; use "
                          "--trace-format jsonl (--format is the summary's table, json or csv, "
                          "as everywhere)\n")
    assert out.read_bytes() == written
    csv = invoke("export-traces", "--trace-format", "cwm", "--db", db, "--out", out,
                 "--format", "csv")
    assert csv.stdout == f"item,value\nformat,cwm\nout,{out}\nruns,6\nsteps,34\nbatches,1\n"
    for args, message in ((("--format", "csv"), "give the trace format: --trace-format "
                           "jsonl|pythontutor|cwm|scratchpad|lines"),
                          (("--trace-format", "cwm", "--format", "jsonl"),
                           "give the trace format once, as --trace-format"),
                          (("--trace-format", "cwm", "--format", "xml"),
                           "'xml' is not one of table, json, csv")):
        result = invoke("export-traces", "--db", db, "--out", out, *args)
        assert result.exit_code == 2 and message in result.stderr, result.stderr


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_exports_honour_the_umask(db, tmp_path, umask):
    previous = os.umask(umask)
    try:
        out = tmp_path / "t.jsonl"
        assert invoke("export-traces", "--trace-format", "jsonl", "--db", db,
                      "--out", out).exit_code == 0
        tasks = tmp_path / "tasks.jsonl"
        assert invoke("tasks", "--db", db, "--out", tasks).exit_code == 0
    finally:
        os.umask(previous)
    for path in (out, tasks):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
