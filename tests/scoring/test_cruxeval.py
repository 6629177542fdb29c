"""The real CRUXEval benchmark, traced end to end through worker processes into DuckDB."""

from __future__ import annotations

import duckdb

from steptrace.tracing._trace import TraceOptions, trace_corpus


def test_all_800_samples_run_ok_and_match(cruxeval_db):
    """800 runs, all `ok`, every output equal to CRUXEval's expected output as the
    benchmark's own `assert f(input) == output` decides it (evaluated in the guest)."""
    con = duckdb.connect(str(cruxeval_db), read_only=True)
    try:
        assert con.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall() == [
            ("ok", 800)]
        assert con.execute("SELECT count(*), count(DISTINCT sample_id), "
                           "count(*) FILTER (WHERE output_matches) FROM runs").fetchone() == (800, 800, 800)
        # every run's steps are stored whole: n_steps agrees with the steps table
        mismatched = con.execute(
            "SELECT count(*) FROM runs r LEFT JOIN (SELECT run_id, count(*) AS n FROM steps "
            "GROUP BY run_id) s USING (run_id) WHERE coalesce(s.n, 0) <> r.n_steps").fetchone()[0]
        assert mismatched == 0
        # sample_0 as a spot check: its program, input and output survive the round trip
        row = con.execute("SELECT p.code, r.input, r.output, r.expected FROM runs r "
                          "JOIN programs p USING (program_id) WHERE r.sample_id = 'sample_0'").fetchone()
    finally:
        con.close()
    assert row[1] == "[1, 1, 3, 1, 3, 1]"
    assert row[2] == "[(4, 1), (4, 1), (4, 1), (4, 1), (2, 3), (2, 3)]"
    assert row[3] == row[2]


def test_batch_isolation_gives_the_same_traces(tmp_path, cruxeval_path):
    """Reusing one interpreter per chunk must not change any trace of this corpus (object
    addresses in default reprs aside: a reused instance's heap is laid out differently)."""
    job_db, batch_db = tmp_path / "job.duckdb", tmp_path / "batch.duckdb"
    first_100 = cruxeval_path.read_text().splitlines()[:100]
    corpus = tmp_path / "crux100.jsonl"
    corpus.write_text("\n".join(first_100) + "\n")
    trace_corpus(corpus, job_db, TraceOptions(workers=0, isolation="job"))
    trace_corpus(corpus, batch_db, TraceOptions(workers=0, isolation="batch"))
    digest = ("SELECT sample_id, status, output, line_steps, instruction_steps, "
              "(SELECT string_agg(event || ':' || line || ':' || depth || ':' || frame, ',' ORDER BY step) "
              " FROM steps s WHERE s.run_id = r.run_id), "
              "(SELECT string_agg(step || ':' || var || '=' || "
              "regexp_replace(coalesce(value, '?'), ' at 0x[0-9a-f]+>', ' at ADDR>', 'g'), ',' ORDER BY step, var) "
              " FROM states t WHERE t.run_id = r.run_id) FROM runs r ORDER BY sample_id")
    with duckdb.connect(str(job_db), read_only=True) as a, duckdb.connect(str(batch_db), read_only=True) as b:
        rows_job, rows_batch = a.execute(digest).fetchall(), b.execute(digest).fetchall()
    assert len(rows_job) == 100
    assert rows_job == rows_batch
