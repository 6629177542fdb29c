"""``export`` writes each table's rows in a fixed order (engine/analytics/_export.py,
``row_order``): two stores holding the same rows, inserted in other orders (as runs that
finish in another order are committed), give byte-identical exports; a view of the
user's is written too."""

from __future__ import annotations

import json
import shutil

import duckdb

from steptrace.analytics._export import export_parquet, row_order
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.sample_corpus import RECORDS
from helpers.shard_corpus import files_of


def test_the_same_rows_in_another_order_give_the_same_files(tmp_path):
    corpus = tmp_path / "small.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    first = tmp_path / "first.duckdb"
    trace_corpus(corpus, first, TraceOptions(workers=0))
    second = tmp_path / "second.duckdb"
    shutil.copyfile(first, second)
    con = duckdb.connect(str(second))
    for table in ("runs", "steps", "states", "programs"):  # the rows again, last run first
        order = "program_id DESC" if table == "programs" else "run_id DESC, rowid"
        con.execute(f"CREATE TEMP TABLE copied AS SELECT * FROM {table} ORDER BY {order}")
        con.execute(f"DELETE FROM {table}")
        con.execute(f"INSERT INTO {table} SELECT * FROM copied")
        con.execute("DROP TABLE copied")
    assert con.execute("SELECT run_id FROM runs LIMIT 1").fetchall() == [(6,)]
    con.close()
    for db in (first, second):
        con = duckdb.connect(str(db))
        con.execute("CREATE VIEW mine AS SELECT run_id, status FROM runs")
        con.close()
        export_parquet(db, tmp_path / f"export-{db.stem}")
    exported = [{path: data for path, (_, data) in files_of(tmp_path / f"export-{name}").items()}
                for name in ("first", "second")]
    assert exported[0] == exported[1]
    assert "mine/run_bucket=0/data_0.parquet" in exported[0]
    assert duckdb.sql(f"SELECT run_id FROM read_parquet('{tmp_path}/export-second/steps/*/*"
                      ".parquet')").fetchall()[:3] == [(1,), (1,), (1,)]


def test_row_orders():
    assert row_order("runs", ["run_id", "status"]) == '"run_id"'
    assert row_order("steps", ["run_id", "step"]) == "run_id, rowid"
    assert row_order("predictions", ["task_id"]) == '"task_id", "model", "label", "sample_index"'
    assert row_order("mine", ["run_id", "status"]) == "ALL"
    assert row_order("meta", ["key", "value"]) == '"key"'
