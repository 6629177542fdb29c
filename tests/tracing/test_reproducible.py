"""Two traces of the CRUXEval corpus are the same store: with one worker or two, in job
isolation and in batch isolation, the runs, programs, steps, states and object tables
are identical row for row, ids included (run ``i`` is the corpus's ``i``-th job), and
their exports (``export``, ``export-traces`` in every format) are byte for byte the same.
The only columns that differ are listed exactly (tests/helpers/reproduce.py)."""

from __future__ import annotations

import pytest

from steptrace.analytics._export import export_parquet
from steptrace.analytics._trace_export import export_traces
from steptrace.analytics._trace_formats import FORMATS
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.reproduce import (BETWEEN_ISOLATIONS, VARYING, assert_identical,
                               differing_columns, settled_copy)
from helpers.shard_corpus import files_of

TRACES = (("job", 1), ("job", 2), ("batch", 1), ("batch", 2))
ROWS = {"programs": 800, "runs": 800, "steps": 10375, "states": 7160, "objects": 774,
        "attributes": 0, "global_states": 5, "settrace_lines": 387, "guests": 1}
PARQUET = sorted([f"{name}/run_bucket=0/data_0.parquet" for name in (
    "analyses", "attributes", "branches", "global_states", "objects", "runs",
    "settrace_lines", "states", "steps")] + [f"{name}/data_0.parquet" for name in ("guests", "meta", "programs")]
    + ["steptrace_export.json"])


@pytest.fixture(scope="module")
def traces(cruxeval_path, tmp_path_factory):
    """The corpus traced four times: (isolation, workers) -> store."""
    tmp = tmp_path_factory.mktemp("reproducible")
    found = {}
    for isolation, workers in TRACES:
        db = tmp / f"{isolation}-{workers}.duckdb"
        summary = trace_corpus(cruxeval_path, db, TraceOptions(workers=workers,
                                                               isolation=isolation))
        assert (summary.traced, dict(summary.by_status)) == (800, {"ok": 800})
        found[(isolation, workers)] = db
    return found


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_worker_counts_give_the_same_tables(traces, isolation):
    one, two = traces[(isolation, 1)], traces[(isolation, 2)]
    assert differing_columns(one, two) == {
        "runs": ["duration_us", "call_us", "traced_at"], "guests": ["first_used"]}
    assert assert_identical(one, two) == ROWS


def test_isolations_differ_in_the_isolation_column_only(traces):
    job, batch = traces[("job", 1)], traces[("batch", 2)]
    assert differing_columns(job, batch) == {
        "runs": ["duration_us", "call_us", "isolation", "traced_at"], "guests": ["first_used"]}
    leave_out = {**VARYING, "runs": VARYING["runs"] | BETWEEN_ISOLATIONS["runs"]}
    assert assert_identical(job, batch, leave_out) == ROWS


def test_run_ids_are_the_corpus_order(traces):
    import duckdb
    con = duckdb.connect(str(traces[("batch", 2)]), read_only=True)
    try:
        assert con.execute("SELECT run_id, sample_id, program_id FROM runs ORDER BY run_id"
                           ).fetchall() == [(i + 1, f"sample_{i}", i + 1) for i in range(800)]
    finally:
        con.close()


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_exports_are_byte_identical(traces, isolation, tmp_path):
    """export-traces in every format as they are; export once the columns that measure
    one trace (runs' timings and time, guests.first_used) are set alike in both stores."""
    exported = {}
    for workers in (1, 2):
        db = traces[(isolation, workers)]
        files = {}
        for name in FORMATS:
            out = tmp_path / f"{workers}.{name}.jsonl"
            export_traces(db, out, name)
            files[name] = out.read_bytes()
        settled = settled_copy(db, tmp_path / f"settled-{workers}.duckdb")
        export_parquet(settled, tmp_path / f"parquet-{workers}")
        files["parquet"] = {path: data for path, (_, data)
                            in files_of(tmp_path / f"parquet-{workers}").items()}
        exported[workers] = files
    assert sorted(exported[1]) == sorted([*FORMATS, "parquet"])
    assert all(exported[1][name] for name in FORMATS)
    assert sorted(exported[1]["parquet"]) == PARQUET
    for name in exported[1]:
        assert exported[1][name] == exported[2][name], name
