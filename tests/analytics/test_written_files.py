"""The named query ``written_files`` on a real store: a corpus whose programs write text and
binary files, a file past the content cap, directories and a symlink in ``/work`` and
``/tmp``, one that changes the record's own file and one that only reads it, traced
through the sandbox; the query (library, ``steptrace query`` and the Parquet export) lists
every file row with its size, digest and text, exactly."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers.cli import rows
from helpers.processes import write_jsonl
from steptrace.analytics._export import export_parquet
from steptrace.analytics._queries import run_query
from steptrace.cli._main import main
from steptrace.tracing._trace import TraceOptions, trace_corpus

BIG = 70_000  # past the 65,536 bytes of content a file keeps
RECORDS = [
    # run 1: a text file in /work, a binary one in a directory of /tmp, a symlink
    {"id": "writer", "shape": "script", "input": "",
     "code": "import os\nopen('out.txt', 'w').write('héllo\\n')\n"
             "os.makedirs('/tmp/d')\nopen('/tmp/d/b.bin', 'wb').write(b'\\xff\\x00')\n"
             "os.symlink('out.txt', 'link')\n"},
    # run 2: a file cut to its first 65,536 bytes (no text), and an empty one
    {"id": "big", "code": f"def f():\n    open('big.txt', 'w').write('a' * {BIG})\n"
                          "    open('/tmp/empty', 'w').close()\n", "input": ""},
    # run 3: the record's file read, not changed: no row
    {"id": "reader", "code": "def f():\n    return open('in.txt').read()\n", "input": "",
     "files": {"in.txt": "given"}},
    # run 4: the record's file changed: its row
    {"id": "changer", "code": "def f():\n    open('in.txt', 'a').write('+')\n", "input": "",
     "files": {"in.txt": "given"}},
    # run 5: nothing written
    {"id": "none", "code": "def f(x):\n    return x\n", "input": "1"},
]
COLUMNS = ["run_id", "sample_id", "path", "size", "sha256", "text"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# By the programs: directories and the symlink are not file rows; the binary file and
# the cut file have no text.
EXPECTED = [
    (1, "writer", "/tmp/d/b.bin", 2, sha(b"\xff\x00"), None),
    (1, "writer", "/work/out.txt", 7, sha("héllo\n".encode()), "héllo\n"),
    (2, "big", "/tmp/empty", 0, sha(b""), ""),
    (2, "big", "/work/big.txt", BIG, sha(b"a" * BIG), None),
    (4, "changer", "/work/in.txt", 6, sha(b"given+"), "given+"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("written")
    corpus = root / "corpus.jsonl"
    write_jsonl(corpus, RECORDS)
    db = root / "store.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert summary.by_status == {"ok": 5}, summary
    return db


def test_the_files_table_holds_what_the_query_reads(store):
    """The rows the query filters: the directory and the symlink are there, as kinds."""
    assert rows(store, "SELECT run_id, path, kind, truncated, utf8 FROM files "
                       "ORDER BY run_id, path") == [
        (1, "/tmp/d", "dir", False, None), (1, "/tmp/d/b.bin", "file", False, False),
        (1, "/work/link", "symlink", False, True), (1, "/work/out.txt", "file", False, True),
        (2, "/tmp/empty", "file", False, True), (2, "/work/big.txt", "file", True, True),
        (4, "/work/in.txt", "file", False, True)]


def test_written_files_on_the_store_and_the_export(store, tmp_path):
    result = run_query("written_files", db=store)
    assert (result.columns, result.rows) == (COLUMNS, EXPECTED)
    export_parquet(store, tmp_path / "pq")
    result = run_query("written_files", parquet=tmp_path / "pq")
    assert (result.columns, result.rows) == (COLUMNS, EXPECTED)


def test_steptrace_query_written_files(store):
    result = CliRunner().invoke(main, ["query", "written_files", "--db", str(store),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [dict(zip(COLUMNS, row)) for row in EXPECTED]
