"""The DuckDB trace store: exact table contents, resume by run_key, force, one transaction
per batch, and one-line StoreErrors for every file problem."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest

import steptrace.store._store as store_module
import steptrace.tracing._trace as tracing
from steptrace.corpus._formats import demo_corpus_path, load_corpus
from steptrace.store._store import (StoreError, TraceWriter, connect, query, status_counts)
from steptrace.tracing._trace import TraceOptions, run_jobs, trace_corpus
from helpers.sample_corpus import ADD, BOOM, LOOP, NEG, RECORDS, SQUARE


N_RUNS = 6
INPROCESS = TraceOptions(workers=0)
TABLES = ("programs", "runs", "steps", "states")


def write_corpus(path: Path, records=RECORDS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def counts(db: Path) -> dict[str, int]:
    return {t: rows(db, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def traced(tmp_path):
    """The small corpus traced in-process into a fresh store: (corpus, db, summary)."""
    corpus = write_corpus(tmp_path / "small.jsonl")
    db = tmp_path / "store.duckdb"
    summary = trace_corpus(corpus, db, INPROCESS)
    return corpus, db, summary


# ------------------------------------------------------------------ exact contents
def test_summary_of_a_fresh_trace(traced):
    """The summary counts jobs, statuses, expected/matched and steps exactly."""
    corpus, db, summary = traced
    assert (summary.jobs, summary.skipped, summary.traced) == (N_RUNS, 0, N_RUNS)
    assert dict(summary.by_status) == {"ok": 5, "exception": 1}
    assert (summary.with_expected, summary.matched) == (5, 3)
    assert (summary.line_steps, summary.instruction_steps, summary.steps) == (17, 59, 34)
    assert summary.corpus_errors == []


def test_programs_rows(traced):
    """One programs row per distinct program, ids in corpus order, keys as Program.key."""
    corpus, db, _ = traced
    keys = {job.program.sample_id: job.program.key for job in load_corpus(corpus).jobs}
    assert rows(db, "SELECT * FROM programs ORDER BY program_id") == [
        (1, "small.jsonl", "add", ADD, "f", sha(ADD), keys["add"], "call", None, None, None),
        (2, "small.jsonl", "sq", SQUARE, "f", sha(SQUARE), keys["sq"], "call", None, None, None),
        (3, "small.jsonl", "boom", BOOM, "f", sha(BOOM), keys["boom"], "call", None, None, None),
        (4, "small.jsonl", "neg", NEG, "f", sha(NEG), keys["neg"], "call", None, None, None),
        (5, "small.jsonl", "loop", LOOP, "f", sha(LOOP), keys["loop"], "call", None, None, None),
    ]
    assert rows(db, "SELECT * FROM meta") == [("schema_version", "7")]


def test_runs_rows(traced):
    """Every runs column: status, output and type, exception, expected, output_matches
    (NULL without expected, False for a wrong output and for an exception), stdout, step
    counters, isolation and run_key = Job.key."""
    corpus, db, _ = traced
    keys = [job.key for job in load_corpus(corpus).jobs]
    assert rows(db, "SELECT run_id, program_id, sample_id, input_index, input, status, output, "
                    "output_type, output_truncated, exception_type, exception_message, expected, "
                    "output_matches, note, stdout, line_steps, instruction_steps, calls, "
                    "max_depth, n_steps, isolation, run_key FROM runs ORDER BY run_id") == [
        (1, 1, "add", 0, "1, 2", "ok", "3", "int", False, None, None, "3", True, None, "",
         2, 5, 1, 0, 4, "job", keys[0]),
        (2, 2, "sq", 0, "3", "ok", "9", "int", False, None, None, "9", True, None, "",
         1, 3, 1, 0, 3, "job", keys[1]),
        (3, 2, "sq", 1, "4", "ok", "16", "int", False, None, None, None, None, None, "",
         1, 3, 1, 0, 3, "job", keys[2]),
        (4, 3, "boom", 0, "0", "exception", None, None, False, "ZeroDivisionError",
         "division by zero", "1", False, None, "", 1, 3, 1, 0, 4, "job", keys[3]),
        (5, 4, "neg", 0, "2", "ok", "-2", "int", False, None, None, "2", False, None, "-2\n",
         3, 9, 1, 0, 5, "job", keys[4]),
        (6, 5, "loop", 0, "[1, 2]", "ok", "[2, 3]", "list", False, None, None, "[2, 3]", True,
         None, "", 9, 36, 3, 1, 15, "job", keys[5]),
    ]
    # timings and the timestamp are filled for every run
    assert rows(db, "SELECT count(*) FROM runs WHERE duration_us > 0 AND call_us > 0 "
                    "AND traced_at IS NOT NULL") == [(N_RUNS,)]


def test_n_steps_equals_the_steps_rows_of_each_run(traced):
    """runs.n_steps is the number of steps rows stored for that run."""
    _, db, _ = traced
    assert rows(db, "SELECT r.run_id, r.n_steps, count(s.step) FROM runs r LEFT JOIN steps s "
                    "USING (run_id) GROUP BY r.run_id, r.n_steps ORDER BY r.run_id") == [
        (1, 4, 4), (2, 3, 3), (3, 3, 3), (4, 4, 4), (5, 5, 5), (6, 15, 15)]


def test_steps_and_states_of_a_small_program(traced):
    """The exact steps and state deltas of f(1, 2) with c = a + b."""
    _, db, _ = traced
    assert rows(db, "SELECT * FROM steps WHERE run_id = 1 ORDER BY step") == [
        (1, 0, "call", "f", 1, 0, 0),
        (1, 1, "line", "f", 2, 0, 0),
        (1, 2, "line", "f", 3, 0, 0),
        (1, 3, "return", "f", 3, 0, 0),
    ]
    assert rows(db, "SELECT * FROM states WHERE run_id = 1 ORDER BY step, rowid") == [
        (1, 0, "a", "1", "int", False, None),
        (1, 0, "b", "2", "int", False, None),
        (1, 2, "c", "3", "int", False, None),
        (1, 3, "<return>", "3", "int", False, None),
    ]


def test_steps_and_states_with_nested_calls_and_an_exception(traced):
    """Nested calls get depth 1 and a new frame per call; an exception is recorded at
    the raise and unwind steps."""
    _, db, _ = traced
    assert rows(db, "SELECT step, event, func, line, depth, frame FROM steps WHERE run_id = 6 "
                    "ORDER BY step") == [
        (0, "call", "f", 4, 0, 0), (1, "line", "f", 5, 0, 0), (2, "line", "f", 6, 0, 0),
        (3, "line", "f", 7, 0, 0), (4, "call", "g", 1, 1, 1), (5, "line", "g", 2, 1, 1),
        (6, "return", "g", 2, 1, 1), (7, "line", "f", 6, 0, 0), (8, "line", "f", 7, 0, 0),
        (9, "call", "g", 1, 1, 2), (10, "line", "g", 2, 1, 2), (11, "return", "g", 2, 1, 2),
        (12, "line", "f", 6, 0, 0), (13, "line", "f", 8, 0, 0), (14, "return", "f", 8, 0, 0),
    ]
    assert rows(db, "SELECT step, var, value, type, truncated FROM states WHERE run_id = 6 "
                    "ORDER BY step, rowid") == [
        (0, "xs", "[1, 2]", "list", False), (2, "out", "[]", "list", False),
        (3, "x", "1", "int", False), (4, "n", "1", "int", False),
        (6, "<return>", "2", "int", False), (7, "out", "[2]", "list", False),
        (8, "x", "2", "int", False), (9, "n", "2", "int", False),
        (11, "<return>", "3", "int", False), (12, "out", "[2, 3]", "list", False),
        (14, "<return>", "[2, 3]", "list", False),
    ]
    assert rows(db, "SELECT step, event FROM steps WHERE run_id = 4 ORDER BY step") == [
        (0, "call"), (1, "line"), (2, "raise"), (3, "unwind")]
    assert rows(db, "SELECT step, var, value, type FROM states WHERE run_id = 4 "
                    "ORDER BY step, rowid") == [
        (0, "x", "0", "int"),
        (2, "<exception>", "ZeroDivisionError('division by zero')", "ZeroDivisionError"),
        (3, "<exception>", "ZeroDivisionError('division by zero')", "ZeroDivisionError"),
    ]


# ------------------------------------------------------------------ resume and force
def test_tracing_again_stores_nothing_new(traced):
    """A second trace of the same corpus skips every job and leaves the store unchanged."""
    corpus, db, _ = traced
    before = counts(db)
    ids = rows(db, "SELECT run_id, run_key FROM runs ORDER BY run_id")
    summary = trace_corpus(corpus, db, INPROCESS)
    assert (summary.jobs, summary.skipped, summary.traced) == (N_RUNS, N_RUNS, 0)
    assert dict(summary.by_status) == {}
    assert counts(db) == before == {"programs": 5, "runs": 6, "steps": 34, "states": 25}
    assert rows(db, "SELECT run_id, run_key FROM runs ORDER BY run_id") == ids


def test_adding_one_job_traces_only_that_one(traced, tmp_path):
    """After appending a record to the corpus, only its job is traced; stored runs keep
    their ids and the new run gets the next one."""
    corpus, db, _ = traced
    ids = rows(db, "SELECT run_id, run_key FROM runs ORDER BY run_id")
    write_corpus(corpus, RECORDS + [{"id": "new", "code": SQUARE, "input": "5", "output": "25"}])
    summary = trace_corpus(corpus, db, INPROCESS)
    assert (summary.jobs, summary.skipped, summary.traced) == (7, 6, 1)
    assert (summary.with_expected, summary.matched) == (1, 1)
    assert rows(db, "SELECT run_id, run_key FROM runs WHERE run_id <= 6 ORDER BY run_id") == ids
    assert rows(db, "SELECT run_id, program_id, sample_id, output, output_matches FROM runs "
                    "WHERE run_id > 6") == [(7, 6, "new", "25", True)]
    assert counts(db) == {"programs": 6, "runs": 7, "steps": 37, "states": 27}


def test_changed_expected_output_is_a_new_run(traced):
    """Changing a record's expected output makes a new job (a new run_key); the old run
    stays, the unchanged jobs are skipped."""
    corpus, db, _ = traced
    records = [dict(r) for r in RECORDS]
    records[0]["output"] = "4"
    write_corpus(corpus, records)
    summary = trace_corpus(corpus, db, INPROCESS)
    assert (summary.skipped, summary.traced, summary.matched) == (5, 1, 0)
    assert rows(db, "SELECT run_id, program_id, expected, output_matches FROM runs "
                    "WHERE sample_id = 'add' ORDER BY run_id") == [(1, 1, "3", True),
                                                                   (7, 1, "4", False)]


def test_force_retraces_everything_without_duplicates(traced):
    """force=True traces every job again and replaces the stored runs: same row counts,
    one runs row per run_key, each under the id it had (a run's id is its place in the
    corpus: engine/store/_ids.py), programs reused, no orphaned steps/states."""
    corpus, db, _ = traced
    before = counts(db)
    keys = rows(db, "SELECT run_id, run_key FROM runs ORDER BY run_id")
    first = rows(db, "SELECT max(traced_at) FROM runs")[0][0]
    summary = trace_corpus(corpus, db, TraceOptions(workers=0, force=True))
    assert (summary.jobs, summary.skipped, summary.traced) == (N_RUNS, 0, N_RUNS)
    assert counts(db) == before
    assert rows(db, "SELECT run_id, run_key FROM runs ORDER BY run_id") == keys
    assert [run_id for run_id, _ in keys] == [1, 2, 3, 4, 5, 6]
    assert rows(db, f"SELECT count(*) FROM runs WHERE traced_at <= '{first}'") == [(0,)]
    assert rows(db, "SELECT count(*) FROM steps WHERE run_id NOT IN (SELECT run_id FROM runs)"
                ) == [(0,)]
    assert rows(db, "SELECT sum(n_steps) FROM runs") == [(34,)]
    assert rows(db, "SELECT count(*) FROM steps") == [(34,)]
    # force twice is still one row per job, under the same ids
    trace_corpus(corpus, db, TraceOptions(workers=0, force=True))
    assert counts(db) == before
    assert rows(db, "SELECT run_id, run_key FROM runs ORDER BY run_id") == keys


def test_a_job_listed_twice_is_one_run(tmp_path):
    """Two identical records are one job, stored once."""
    corpus = write_corpus(tmp_path / "dup.jsonl", [RECORDS[0], RECORDS[0]])
    db = tmp_path / "dup.duckdb"
    summary = trace_corpus(corpus, db, INPROCESS)
    assert (summary.jobs, summary.traced) == (2, 1)
    assert counts(db) == {"programs": 1, "runs": 1, "steps": 4, "states": 4}
    # and with force the duplicate is still one run
    trace_corpus(corpus, db, TraceOptions(workers=0, force=True))
    assert counts(db) == {"programs": 1, "runs": 1, "steps": 4, "states": 4}


# ------------------------------------------------------------------ atomicity
class FailingConnection:
    """A DuckDB connection that raises on the n-th ``INSERT INTO steps`` (after the batch's
    programs and runs rows were inserted in the same transaction), counted in ``seen``
    over every connection sharing it (the trace opens the store for each commit)."""

    def __init__(self, con, fail_on: int, seen: list[int]):
        self.con = con
        self.fail_on = fail_on
        self.seen = seen

    def execute(self, sql, *args):
        if sql.startswith("INSERT INTO steps"):
            self.seen[0] += 1
            if self.seen[0] == self.fail_on:
                raise RuntimeError("disk full (simulated)")
        return self.con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.con, name)


def fail_writes(monkeypatch, fail_on: int) -> None:
    """The trace's writer (TraceWriter, which opens the store for each commit) gets
    connections that fail on the ``fail_on``-th steps insert of the trace."""
    real_connect = store_module.connect
    seen = [0]
    monkeypatch.setattr(store_module, "connect",
                        lambda path, read_only=False: FailingConnection(
                            real_connect(path, read_only), fail_on, seen))


def test_failed_batch_leaves_no_rows_and_earlier_batches_stay(tmp_path, monkeypatch):
    """With one job per batch, a failure inside the third batch's transaction leaves
    exactly the first two runs (whole) and nothing of the third; a re-run finishes the
    rest and the store ends up as if nothing had failed."""
    corpus = write_corpus(tmp_path / "small.jsonl")
    db = tmp_path / "atomic.duckdb"
    fail_writes(monkeypatch, fail_on=3)
    options = TraceOptions(workers=0, chunk_size=1, commit_every=1)
    with pytest.raises(RuntimeError, match="disk full"):
        trace_corpus(corpus, db, options)
    assert rows(db, "SELECT run_id, sample_id, input_index FROM runs ORDER BY run_id") == [
        (1, "add", 0), (2, "sq", 0)]
    assert counts(db) == {"programs": 2, "runs": 2, "steps": 7, "states": 6}
    monkeypatch.undo()
    summary = trace_corpus(corpus, db, options)
    assert (summary.skipped, summary.traced) == (2, 4)
    assert counts(db) == {"programs": 5, "runs": 6, "steps": 34, "states": 25}
    assert rows(db, "SELECT count(*) FROM runs r LEFT JOIN programs p USING (program_id) "
                    "WHERE p.program_id IS NULL") == [(0,)]


def test_failed_forced_batch_keeps_the_replaced_runs(traced, monkeypatch):
    """force deletes the old rows inside the batch's transaction: when the batch fails,
    the old runs, steps and states are all still there, unchanged."""
    corpus, db, _ = traced
    before = rows(db, "SELECT run_id, run_key, output FROM runs ORDER BY run_id")
    fail_writes(monkeypatch, fail_on=1)
    with pytest.raises(RuntimeError, match="disk full"):
        trace_corpus(corpus, db, TraceOptions(workers=0, force=True))
    assert rows(db, "SELECT run_id, run_key, output FROM runs ORDER BY run_id") == before
    assert counts(db) == {"programs": 5, "runs": 6, "steps": 34, "states": 25}


def test_writer_can_retry_a_failed_batch(tmp_path):
    """After a failed write the same TraceWriter can write the batch again, and the
    store is complete: every run has its programs row (a rolled-back batch must not leave
    the writer believing its new programs were stored)."""
    corpus = write_corpus(tmp_path / "small.jsonl", RECORDS[:2])
    batch = [t for chunk in run_jobs(load_corpus(corpus).jobs, INPROCESS) for t in chunk]
    db = tmp_path / "retry.duckdb"
    con = connect(db)
    try:
        flaky = FailingConnection(con, 1, [0])
        writer = TraceWriter(flaky)
        with pytest.raises(RuntimeError, match="disk full"):
            writer.write(batch)
        assert [con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES] == [
            0, 0, 0, 0]
        writer.write(batch)
    finally:
        con.close()
    assert counts(db) == {"programs": 2, "runs": 3, "steps": 10, "states": 8}
    assert rows(db, "SELECT r.sample_id, p.sample_id FROM runs r LEFT JOIN programs p "
                    "USING (program_id) ORDER BY r.run_id") == [
        ("add", "add"), ("sq", "sq"), ("sq", "sq")]


# ------------------------------------------------------------------ errors
def test_db_in_a_missing_directory(tmp_path):
    """Creating a store in a directory that does not exist is a StoreError saying so."""
    db = tmp_path / "no" / "such" / "dir" / "x.duckdb"
    with pytest.raises(StoreError) as info:
        connect(db)
    assert str(info.value) == (f"cannot create database {db}: directory {db.parent} "
                               "does not exist")
    corpus = write_corpus(tmp_path / "c.jsonl", RECORDS[:1])
    with pytest.raises(StoreError) as info:
        trace_corpus(corpus, db, INPROCESS)
    assert str(info.value) == (f"cannot create database {db}: directory {db.parent} "
                               "does not exist")
    assert not (tmp_path / "no").exists()


def test_file_that_is_not_a_duckdb_database(tmp_path):
    """A garbage file is a StoreError naming the file and saying what is wrong, for
    writing and reading alike, and the file is left as it was."""
    db = tmp_path / "x.duckdb"
    garbage = b"this is not a database\x00\x01\x02" * 100
    db.write_bytes(garbage)
    for call in (lambda: connect(db), lambda: connect(db, read_only=True),
                 lambda: query(db, "SELECT 1"),
                 lambda: trace_corpus(write_corpus(tmp_path / "c.jsonl", RECORDS[:1]), db,
                                      INPROCESS)):
        with pytest.raises(StoreError) as info:
            call()
        assert str(info.value) == f"{db} is not a DuckDB database file"
    assert db.read_bytes() == garbage


def test_duckdb_file_with_a_foreign_runs_table(tmp_path):
    """Tracing into a DuckDB file that is not a steptrace store (its 'runs' table has other
    columns) is a StoreError naming the file, not a raw DuckDB error."""
    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE runs (x INTEGER)")
    con.close()
    corpus = write_corpus(tmp_path / "c.jsonl", RECORDS[:1])
    with pytest.raises(StoreError) as info:
        trace_corpus(corpus, db, INPROCESS)
    assert str(db) in str(info.value)


def test_query_on_a_missing_database(tmp_path):
    """query() never creates a store: a missing file is 'database not found: PATH'."""
    db = tmp_path / "missing.duckdb"
    with pytest.raises(StoreError) as info:
        query(db, "SELECT 1")
    assert str(info.value) == f"database not found: {db}"
    assert not db.exists()


def test_query_results_and_bad_sql(traced):
    """query() returns columns and rows; bad SQL, an unknown table and a write statement
    are StoreErrors ('query failed on DB: ...', one line) and change nothing."""
    _, db, _ = traced
    result = query(db, "SELECT sample_id, output FROM runs WHERE input_index = ? ORDER BY run_id",
                   [1])
    assert (result.columns, result.rows) == (["sample_id", "output"], [("sq", "16")])
    for sql, start in (("SELEC 1", "query failed: Parser Error: syntax error at or near \"SELEC\""),
                       ("SELECT * FROM nosuch", "query failed: Catalog Error: Table with name "
                                                "nosuch does not exist!"),
                       ("DELETE FROM runs", "query failed: Invalid Input Error: Cannot execute "
                                            "statement of type \"DELETE\"")):
        with pytest.raises(StoreError) as info:
            query(db, sql)
        assert str(info.value).startswith(start.replace("query failed:", f"query failed on {db}:"))
        assert "\n" not in str(info.value)
    assert counts(db)["runs"] == N_RUNS
    assert status_counts(db) == {"exception": 1, "ok": 5}


# ------------------------------------------------------------------ the demo corpus
def test_demo_corpus_statuses_and_matches(tmp_path):
    """The bundled demo corpus: 17 jobs of 14 programs, statuses ok 14, exception 1,
    invalid 1, step_limit 1; 14 of the 15 runs with an expected output match."""
    db = tmp_path / "demo.duckdb"
    summary = trace_corpus(demo_corpus_path(), db, INPROCESS)
    assert (summary.jobs, summary.traced) == (17, 17)
    expected_statuses = {"ok": 14, "exception": 1, "invalid": 1, "step_limit": 1}
    assert dict(summary.by_status) == expected_statuses
    assert (summary.with_expected, summary.matched) == (15, 14)
    assert status_counts(db) == expected_statuses
    assert rows(db, "SELECT count(*) FROM programs") == [(14,)]
    assert rows(db, "SELECT count(*) FILTER (WHERE expected IS NOT NULL), "
                    "count(*) FILTER (WHERE output_matches), "
                    "count(*) FILTER (WHERE output_matches IS NULL) FROM runs") == [(15, 14, 2)]
    assert rows(db, "SELECT sample_id, status FROM runs WHERE status <> 'ok' "
                    "ORDER BY sample_id") == [("demo_bad_input", "invalid"),
                                              ("demo_infinite_loop", "step_limit"),
                                              ("demo_uncaught", "exception")]
    assert rows(db, "SELECT n_steps, line_steps FROM runs "
                    "WHERE sample_id = 'demo_infinite_loop'") == [(100000, 100000)]


def test_tracing_reads_the_corpus_a_few_chunks_ahead_of_the_workers(tmp_path, monkeypatch):
    """Memory does not grow with the corpus: the second pass over it (the one that hands
    jobs to the workers) is never more than a few chunks ahead of the finished runs.
    200 jobs in chunks of 4 on 2 workers: at most (IN_FLIGHT + 1) chunks a worker waiting
    or queued, IN_FLIGHT a worker in flight and one being assembled, i.e. 11 chunks = 44
    jobs, read ahead; the store gets every job once. (A corpus this small is parsed once
    and kept: the cap is lowered so that it is read again, as a large one is.)"""
    from steptrace.sandbox._pool import IN_FLIGHT
    monkeypatch.setattr(tracing, "KEEP_PARSED_SIZE", 1000)
    corpus = tmp_path / "many.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"j{i}", "code": "def f(x):\n    return x\n",
                                          "input": str(i)}) + "\n" for i in range(200)))
    passes: list[list[int]] = []  # per pass over the corpus: items read so far
    original = tracing.iter_corpus

    def counting(path):
        read = [0]
        passes.append(read)
        for item in original(path):
            read[0] += 1
            yield item

    ahead: list[int] = []

    def progress(done: int, total: int) -> None:
        if len(passes) == 2:
            ahead.append(passes[1][0] - done)

    monkeypatch.setattr(tracing, "iter_corpus", counting)
    db = tmp_path / "many.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=2, chunk_size=4), progress=progress)
    assert (summary.jobs, summary.traced, len(passes)) == (200, 200, 2)
    assert passes[0][0] == passes[1][0] == 200
    bound = 4 * ((IN_FLIGHT + 1) * 2 + IN_FLIGHT * 2 + 1)
    assert bound == 44 and 0 < max(ahead) <= bound, ahead
    assert sorted(int(r[0]) for r in query(db, "SELECT input FROM runs").rows) == list(range(200))


def test_a_small_corpus_is_parsed_once_and_a_large_one_again(tmp_path, monkeypatch):
    """The first pass keeps the jobs of a corpus that fits ``KEEP_PARSED_SIZE`` (texts
    and a fixed overhead a job) and the second hands those to the workers; one over it
    by a character is read again. The runs stored are the same either way."""
    corpus = tmp_path / "few.jsonl"
    code = "def f(x):\n    return x * 2\n"
    corpus.write_text("".join(json.dumps({"id": f"j{i}", "code": code, "input": str(i)})
                              + "\n" for i in range(10)))
    size = sum(tracing._kept_size(job) for job in load_corpus(corpus).jobs)
    assert size == 10 * (512 + len(code)) + sum(len(str(i)) for i in range(10))
    passes: list[int] = []
    original = tracing.iter_corpus

    def counting(path):
        passes.append(0)
        yield from original(path)

    monkeypatch.setattr(tracing, "iter_corpus", counting)
    stored = []
    for cap, reads in ((size, 1), (size - 1, 2)):
        monkeypatch.setattr(tracing, "KEEP_PARSED_SIZE", cap)
        passes.clear()
        db = tmp_path / f"cap{cap}.duckdb"
        summary = trace_corpus(corpus, db, TraceOptions(workers=0))
        assert (len(passes), summary.jobs, summary.traced) == (reads, 10, 10)
        stored.append(query(db, "SELECT run_id, input, output, status FROM runs "
                                "ORDER BY run_id").rows)
    assert stored[0] == stored[1]
    assert [row[1:] for row in stored[0]] == [(str(i), str(2 * i), "ok") for i in range(10)]


def test_the_writers_memory_cap_grows_with_the_keys_the_store_holds(tmp_path):
    """DuckDB must hold the key indexes to commit, and they grow with the store: a fixed
    128 MB cap made a million-run trace fail at 495,232 runs. The cap is a base plus room
    per text key (runs, programs) and integer pair (objects, files) held, set at every
    open of the writer."""
    from steptrace.store._store import writer_memory_limit
    assert writer_memory_limit(0, 0) == "128MiB"  # the cap a small store always had
    # the store that failed: 495,232 runs and programs each, 925,535 objects
    assert writer_memory_limit(2 * 495_232, 925_535) == "426MiB"
    db = tmp_path / "cap.duckdb"
    trace_corpus(demo_corpus_path(), db, TraceOptions(workers=0))
    (runs, programs, objects, files), = query(
        db, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM programs), "
            "(SELECT count(*) FROM objects), (SELECT count(*) FROM files)").rows
    assert runs > 0 and programs > 0 and objects > 0
    writer = TraceWriter(None, path=db)
    with writer._open() as con:
        setting = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    expected = (128 << 20) + 256 * (runs + programs) + 64 * (objects + files)
    assert setting == f"{expected >> 20}.0 MiB"
