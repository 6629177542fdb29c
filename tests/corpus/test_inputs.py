"""Inputs a user meets, through the CLI with real files, pipes, FIFOs and DuckDB stores:
a stream corpus (``-``, a pipe, a FIFO) is read once and traced in full; a FIFO in a
directory corpus is reported, never opened as a program; a --db that is missing (for
every command but trace), not a DuckDB file, or held by another process is a one-line
error naming it; a file that is not UTF-8 is an error naming the file, line and byte.

Nothing here can hang: a FIFO the code under test must not block on is released by a
guard (``released_fifos``) that opens its other end, so a regression fails instead."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.corpus._formats import CorpusError, load_corpus, spool
from steptrace.benchmark._generate import read_log
from steptrace.corpus._text import NotUtf8Error, read_utf8, utf8_lines
from helpers.sample_corpus import RECORDS, SQUARE
from helpers.cli import assert_one_line_error, new_store, rows

CLOSED_URL = "http://127.0.0.1:9/v1"  # predict must fail before it sends anything
GUARD_S = 120.0  # how long a guard waits before releasing a FIFO a regression blocks on


def invoke(*args: object, input: bytes | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def corpus_bytes(records=RECORDS) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")


def summary_of(result) -> dict:
    assert result.stdout, result.output
    summary = json.loads(result.stdout)
    for key in ("seconds", "runs_per_second"):
        summary.pop(key)
    return summary


@contextlib.contextmanager
def released_fifos(*fifos: Path) -> Iterator[None]:
    """While the block runs, a guard thread waits; if the block is still running after
    GUARD_S (a regression opened a FIFO and blocks on it), it keeps opening each FIFO's
    writing end and closing it, which ends a blocked open (or read) with EOF, until the
    block ends: the test then fails on its assertions instead of hanging. A passing test
    never waits for the guard."""
    done = threading.Event()

    def guard() -> None:
        if done.wait(GUARD_S):
            return
        while not done.wait(0.05):
            for fifo in fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass  # no reader blocked on this one (yet)

    thread = threading.Thread(target=guard, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def fifo_writer(fifo: Path, data: bytes) -> Iterator[None]:
    """A thread writing ``data`` into ``fifo`` once a reader opens it. If the code under
    test never opens it, the writer stays blocked in open(): on leaving, the test opens
    the reading end itself (without blocking) to release it."""
    thread = threading.Thread(target=lambda: Path(fifo).write_bytes(data), daemon=True)
    thread.start()
    try:
        yield
    finally:
        if thread.is_alive():
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            thread.join()
            os.close(reader)
        thread.join()


@pytest.fixture
def spool_dir(tmp_path, monkeypatch) -> Path:
    """The temporary directory stream copies go to, to check none is left behind."""
    directory = tmp_path / "spool"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


TRACED = {"jobs": 6, "duplicates": 0, "skipped": 0, "traced": 6,
          "by_status": {"exception": 1, "ok": 5}, "with_expected": 5, "matched": 3,
          "line_steps": 17, "instruction_steps": 59, "steps": 34, "corpus_errors": []}


# ------------------------------------------------------------------ stream corpora
def test_trace_a_pipe_traces_every_job_once(tmp_path, spool_dir):
    """A pipe (here /dev/fd/N, as `<(...)` or /dev/stdin give) is read once into a
    private copy: all 6 jobs are traced, not counted by the first pass and lost to the
    second; the copy is gone afterwards."""
    db = tmp_path / "t.duckdb"
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, corpus_bytes())  # 1 KB: fits in the pipe's buffer
        os.close(write_end)
        corpus = f"/dev/fd/{read_end}"
        result = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "json")
    finally:
        os.close(read_end)
    assert result.exit_code == 0, result.output
    assert summary_of(result) == {"corpus": corpus, "db": str(db), **TRACED,
                                  "store": {"exception": 1, "ok": 5}}
    assert rows(db, "SELECT count(*), count(DISTINCT source) FROM runs JOIN programs "
                    "USING (program_id)") == [(6, 1)]
    assert list(spool_dir.iterdir()) == []


def test_trace_dash_reads_standard_input_and_resumes(tmp_path, spool_dir):
    """`trace -` traces standard input; the same input again is all skipped (its
    programs are named <stdin> both times); a bad line is reported as <stdin>:LINE."""
    db = tmp_path / "t.duckdb"
    first = invoke("trace", "-", "--db", db, "--workers", 0, "--format", "json",
                   input=corpus_bytes())
    assert first.exit_code == 0, first.output
    assert summary_of(first) == {"corpus": "-", "db": str(db), **TRACED,
                                 "store": {"exception": 1, "ok": 5}}
    assert rows(db, "SELECT DISTINCT source FROM programs") == [("<stdin>",)]
    again = invoke("trace", "-", "--db", db, "--workers", 0, "--format", "json",
                   input=corpus_bytes() + b"[1]\n")
    assert again.exit_code == 1
    bad_line = len(RECORDS) + 1
    assert again.stderr == f"warning: <stdin>:{bad_line}: expected a JSON object, got list\n"
    summary = summary_of(again)
    assert (summary["jobs"], summary["skipped"], summary["traced"]) == (6, 6, 0)
    assert list(spool_dir.iterdir()) == []


def test_trace_a_named_fifo(tmp_path, spool_dir):
    """A FIFO named as the corpus is read (once) like a pipe."""
    fifo = tmp_path / "corpus.jsonl"
    os.mkfifo(fifo)
    db = tmp_path / "t.duckdb"
    with fifo_writer(fifo, corpus_bytes()):
        result = invoke("trace", fifo, "--db", db, "--workers", 0, "--format", "json")
    assert result.exit_code == 0, result.output
    assert summary_of(result) == {"corpus": str(fifo), "db": str(db), **TRACED,
                                  "store": {"exception": 1, "ok": 5}}
    assert list(spool_dir.iterdir()) == []


def test_a_stream_that_cannot_be_copied_is_one_line(tmp_path, spool_dir, monkeypatch):
    """No room for the copy of a stream (disk full): one line naming the stream, the
    copy and the reason, exit 1; no copy and no store are left."""
    import errno
    import shutil

    def full(source, target, length=0):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shutil, "copyfileobj", full)
    db = tmp_path / "t.duckdb"
    result = invoke("trace", "-", "--db", db, "--workers", 0, input=corpus_bytes())
    assert_one_line_error(result)
    line = result.stderr.rstrip("\n")
    assert line.startswith(f"Error: cannot copy corpus <stdin> to {spool_dir}/steptrace-corpus-")
    assert line.endswith(".jsonl: No space left on device")
    assert list(spool_dir.iterdir()) == []
    assert not db.exists()


def test_spool_reads_a_stream_once_and_names_it(tmp_path, spool_dir):
    """spool() gives a regular file back as it is, and a stream as a private copy that
    can be read twice, its errors and program sources still naming the stream."""
    regular = tmp_path / "c.jsonl"
    regular.write_bytes(corpus_bytes())
    with spool(regular) as same:
        assert same is regular
    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)
    with fifo_writer(fifo, corpus_bytes(RECORDS[:1]) + b"[1]\n"):
        with spool(fifo) as copied:
            assert copied.name == fifo
            assert oct(copied.copy.stat().st_mode & 0o777) == "0o600"
            first, second = load_corpus(copied), load_corpus(copied)
    assert first == second
    assert first.errors == [f"{fifo}:2: expected a JSON object, got list"]
    assert [(job.program.source, job.input) for job in first.jobs] == [("stream.jsonl", "1, 2")]
    assert list(spool_dir.iterdir()) == []


def test_directory_corpus_never_opens_a_fifo_as_a_program(tmp_path):
    """A FIFO named x.py (or a FIFO sidecar, a socket s.py, a directory z.py) in a
    directory corpus is one warning naming it, exit 1; the regular programs are traced;
    nothing blocks."""
    root = tmp_path / "progs"
    root.mkdir()
    (root / "ok.py").write_text(SQUARE)
    (root / "ok.json").write_text(json.dumps({"inputs": ["2", "3"]}))
    os.mkfifo(root / "x.py")
    (root / "x.json").write_text(json.dumps({"input": "1"}))
    (root / "y.py").write_text(SQUARE)
    os.mkfifo(root / "y.json")
    (root / "z.py").mkdir()
    db = tmp_path / "t.duckdb"
    with socket.socket(socket.AF_UNIX) as sock, released_fifos(root / "x.py", root / "y.json"):
        sock.bind(str(root / "s.py"))
        result = invoke("trace", root, "--db", db, "--workers", 0, "--format", "json")
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [
        f"warning: {root / 's.py'}: a socket, not a regular file",
        f"warning: {root / 'x.py'}: a FIFO, not a regular file",
        f"warning: {root / 'y.json'}: a FIFO, not a regular file",
        f"warning: {root / 'z.py'}: a directory, not a regular file"]
    summary = summary_of(result)
    assert (summary["jobs"], summary["traced"], summary["by_status"]) == (2, 2, {"ok": 2})
    assert rows(db, "SELECT sample_id, output FROM runs ORDER BY run_id") == [
        ("ok", "4"), ("ok", "9")]


def test_a_corpus_socket_is_a_one_line_error(tmp_path):
    """A socket cannot be opened as a file: one line naming it, no store."""
    path = tmp_path / "c.sock"
    db = tmp_path / "t.duckdb"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        result = invoke("trace", path, "--db", db, "--workers", 0)
    assert_one_line_error(result, f"cannot read corpus {path}: No such device or address")
    assert not db.exists()


# ------------------------------------------------------------------ --db
# A task both predict and score read.
TASK = {"task_id": "t1", "kind": "output", "prompt": "p", "run_id": 1, "sample_id": "a",
        "answer": "1", "answer_type": "int", "line_steps": 1, "loop_nesting": 0, "question": "{}"}


def command_args(tmp_path: Path) -> dict[str, tuple]:
    """Each command that needs an existing store, with the other arguments it needs."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n", encoding="utf-8")
    return {
        "sql": ("sql", "SELECT 1"), "show": ("show", 1), "analyse": ("analyse",),
        "filter": ("filter",), "query": ("query", "hottest_lines"),
        "export": ("export", "--out", tmp_path / "pq"), "tasks": ("tasks",),
        "features": ("features",), "report": ("report", "--out", tmp_path / "r.html"),
        "score": ("score", "--tasks", tasks),
        "predict": ("predict", "--tasks", tasks, "--model", "m", "--base-url", CLOSED_URL),
        "size-check": ("size-check",)}


READING_COMMANDS = ["analyse", "export", "features", "filter", "predict", "query", "report",
                    "score", "show", "size-check", "sql", "tasks"]


@pytest.mark.parametrize("command", READING_COMMANDS)
def test_a_missing_db_is_an_error_for_every_command_but_trace(tmp_path, command):
    """Every command but trace needs a store: a missing --db is 'database not found',
    exit 1, and no file is created (predict and tasks used to create an empty one)."""
    db = tmp_path / "typo.duckdb"
    result = invoke(*command_args(tmp_path)[command], "--db", db)
    assert_one_line_error(result, f"database not found: {db}")
    assert not db.exists()


NOT_DUCKDB = {
    "jsonl": (lambda p: p.write_text('{"task_id": "a"}\n'),
              "{} is a text file (such as JSONL or CSV), not a DuckDB database"),
    "csv": (lambda p: p.write_text("sample_id,m1\na,1\n"),
            "{} is a text file (such as JSONL or CSV), not a DuckDB database"),
    "empty": (lambda p: p.write_bytes(b""), "{} is an empty file, not a DuckDB database"),
    "directory": (lambda p: p.mkdir(), "{} is a directory, not a DuckDB database"),
    "binary": (lambda p: p.write_bytes(b"SQLite format 3\x00" + bytes(100)),
               "{} is not a DuckDB database file"),
    "fifo": (lambda p: os.mkfifo(p), "{} is a FIFO, not a DuckDB database"),
}


@pytest.mark.parametrize("kind", sorted(NOT_DUCKDB))
@pytest.mark.parametrize("command", ["trace", "analyse", "predict", "sql", "score"])
def test_a_db_that_is_not_duckdb_is_named_and_left_alone(tmp_path, kind, command):
    """A --db that is JSONL, CSV, empty, a directory, another binary or a FIFO: one line
    saying what it is, exit 1, the file unchanged. (DuckDB opened an existing .jsonl or
    .csv as an in-memory database: analyse reported success and predict would have
    stored its answers nowhere.)"""
    make, message = NOT_DUCKDB[kind]
    db = tmp_path / f"store.{kind}"
    make(db)
    before = db.read_bytes() if db.is_file() else None
    if command == "trace":
        corpus = tmp_path / "c.jsonl"
        corpus.write_bytes(corpus_bytes())
        args = ("trace", corpus, "--workers", 0)
    else:
        args = command_args(tmp_path)[command]
    with released_fifos(db):
        result = invoke(*args, "--db", db)
    assert_one_line_error(result, message.format(db))
    assert (db.read_bytes() if db.is_file() else None) == before


@contextlib.contextmanager
def held_by_another_process(db: Path) -> Iterator[int]:
    """A second Python process with ``db`` open for writing (as `steptrace predict` holds
    its store), until the block ends; yields its PID. It says 'ready' once it holds the
    lock and exits when its stdin closes."""
    code = ("import sys, duckdb\ncon = duckdb.connect(sys.argv[1])\nprint('ready', flush=True)\n"
            "sys.stdin.read()\ncon.close()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"  # EOF ("") if it failed: no hang
        yield holder.pid
    finally:
        holder.stdin.close()
        holder.wait()


def test_a_store_held_by_another_process(tmp_path, monkeypatch):
    """While another process writes to a store, a reader (sql, show) and a writer (trace,
    predict) each fail with one line naming the file and the holder's PID (without
    waiting for it: $STEPTRACE_LOCK_WAIT=0); afterwards the store reads normally."""
    monkeypatch.setenv("STEPTRACE_LOCK_WAIT", "0")
    db = new_store(tmp_path / "busy.duckdb")
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(corpus_bytes())
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "a", "kind": "output", "prompt": "p"}) + "\n")
    with held_by_another_process(db) as pid:
        message = (f"database {db} is in use by another process (PID {pid}): a store is "
                   "open to one writing process or to reading processes only (waited 0 s; "
                   "$STEPTRACE_LOCK_WAIT sets how long)")
        for args in (("sql", "SELECT count(*) FROM runs"), ("show", 1),
                     ("trace", corpus, "--workers", 0),
                     ("predict", "--tasks", tasks, "--model", "m", "--base-url", CLOSED_URL)):
            assert_one_line_error(invoke(*args, "--db", db), message)
    result = invoke("sql", "SELECT count(*) AS runs FROM runs", "--db", db, "--format", "csv")
    assert (result.exit_code, result.stdout) == (0, "runs\n0\n")


# ------------------------------------------------------------------ files that are not UTF-8
LATIN1_TASK = '{"task_id": "b", "kind": "output", "prompt": "café"}\n'.encode("latin-1")


def test_non_utf8_tasks_file_names_the_file_line_and_byte(tmp_path):
    """predict and score: a tasks file with a Latin-1 byte on line 2 is one line naming
    file, line and byte, exit 1, and predict sends nothing and stores nothing."""
    db = new_store(tmp_path / "p.duckdb")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(json.dumps(TASK).encode() + b"\n" + LATIN1_TASK)
    message = f"{tasks}:2: not UTF-8 text (invalid continuation byte at byte 50)"
    assert_one_line_error(invoke("predict", "--tasks", tasks, "--model", "m", "--base-url",
                                 CLOSED_URL, "--db", db), message)
    assert_one_line_error(invoke("score", "--tasks", tasks, "--db", db), message)
    assert rows(db, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'predictions'"
                ) == [(0,)]


def test_non_utf8_user_files_of_other_commands(tmp_path):
    """Every other file a user names (generations, records, candidates, few-shot pool,
    templates, SQL): not UTF-8 is one line naming file, line and byte."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "code": "def f(): pass"}\n{"id": "\xff"}\n')
    message = f"{bad}:2: not UTF-8 text (invalid start byte at byte 9)"
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"id": "a", "code": "def f(x): return x", "input": "1",
                                "output": "1"}) + "\n")
    out = tmp_path / "out.jsonl"
    assert_one_line_error(invoke("score", "--cruxeval", bad, "--mode", "output"), message)
    assert_one_line_error(invoke("dedupe", bad, "--out", out), message)
    assert_one_line_error(invoke("select", good, "--n", 1, "--candidates", bad, "--out", out),
                          message)
    assert_one_line_error(invoke("generate", "--model", "m", "--base-url", CLOSED_URL,
                                 "--n", 1, "--out", out, "--fewshot", bad), message)
    sql = tmp_path / "q.sql"
    sql.write_bytes(b"-- caf\xe9\nSELECT 1\n")
    db = new_store(tmp_path / "s.duckdb")
    assert_one_line_error(invoke("sql", "-f", sql, "--db", db),
                          f"{sql}:1: not UTF-8 text (invalid continuation byte at byte 7)")
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "output.direct.txt").write_bytes(b"$code\n$call \xe9\n")
    assert_one_line_error(invoke("tasks", "--kinds", "output", "--template-dir", templates,
                                 "--db", db),
                          f"{templates / 'output.direct.txt'}:2: not UTF-8 text "
                          "(invalid continuation byte at byte 7)")
    assert not out.exists()


def test_text_readers_split_lines_at_newline_only(tmp_path):
    """A JSONL record may hold U+2028 or \\x1c raw (dedupe writes ensure_ascii=False):
    it is one line, not two; a byte-order mark is not part of the first record."""
    records = tmp_path / "records.jsonl"
    code = "def f(x):\n    return 'a\u2028b\x1cc' + x\n"
    records.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "code": code, "input": "''"},
                                                     ensure_ascii=False).encode() + b"\n")
    out = tmp_path / "kept.jsonl"
    result = invoke("dedupe", records, "--out", out, "--format", "json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["code"] for line in out.read_text().split("\n") if line] == [code]
    assert list(utf8_lines(records))[0].startswith('{"id": "a"')


def test_read_utf8_and_utf8_lines_name_the_line_and_byte(tmp_path):
    """The one definition: the line (from 1) and the byte within it (from 1)."""
    path = tmp_path / "x.txt"
    path.write_bytes(b"ok\nab\xc3(\n")
    with pytest.raises(NotUtf8Error) as whole:
        read_utf8(path)
    with pytest.raises(NotUtf8Error) as lines:
        list(utf8_lines(path))
    assert str(whole.value) == str(lines.value) == \
        f"{path}:2: not UTF-8 text (invalid continuation byte at byte 3)"


def test_generation_log_cut_mid_character_is_a_partial_last_line(tmp_path):
    """A crash can cut the log's last line inside a UTF-8 character: like any cut last
    line it is ignored; a bad byte on an earlier line is an error naming it."""
    log = tmp_path / "c.log.jsonl"
    whole = json.dumps({"gen_id": "g0", "raw_text": "é"}, ensure_ascii=False).encode()
    log.write_bytes(whole + b"\n" + whole[:-3])  # ends inside the two bytes of 'é'
    assert list(read_log(log)) == ["g0"]
    log.write_bytes(whole[:-3] + b"\n" + whole + b"\n")
    with pytest.raises(NotUtf8Error) as info:
        read_log(log)
    assert str(info.value) == (f"{log}:1: not UTF-8 text (unexpected end of data at byte "
                               f"{len(whole) - 3})")


def test_corpus_dash_without_standard_input(monkeypatch):
    """A process without standard input (sys.stdin is None) cannot read corpus '-'."""
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(CorpusError) as info:
        load_corpus("-")
    assert str(info.value) == "corpus '-' is standard input, and this process has none"
