"""A shard directory read as a store (engine/sharding/_store.py): the trace's tables are
views over the finished shards' Parquet files with the store's columns and types, a
directory partly traced reads its done shards and one with none done reads as empty
tables; what later commands write goes to DIR/store.duckdb; a moved directory still
reads; a directory that cannot be one is refused with one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from steptrace.errors import StoreError
from steptrace.sandbox._limits import Limits
from steptrace.sharding._plan import ShardError
from steptrace.sharding._run import ShardOptions, trace_shards
from steptrace.sharding._shard import SHARD_TABLES
from steptrace.sharding._store import COMPANION
from steptrace.store._store import connect
from steptrace.store._tables import CONNECT_TABLES
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.shard_corpus import MAX_STEPS, trace_both, write_mixed
from helpers.shards import trace_tables

TRACE_TABLES = [t.name for t in SHARD_TABLES]


def sql(db: Path, query: str, read_only: bool = True) -> list[tuple]:
    con = connect(db, read_only=read_only)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def columns(db: Path, table: str, read_only: bool = True) -> list[tuple]:
    """(name, type) of a table's columns as DuckDB describes them (a view's rowid aside)."""
    return [(name, kind) for name, kind, *_ in sql(db, f'DESCRIBE "{table}"', read_only)
            if name != "rowid"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixed")
    corpus = write_mixed(tmp / "mixed.jsonl")
    trace_both(corpus, tmp / "store.duckdb", tmp / "out")
    return corpus, tmp / "store.duckdb", tmp / "out"


def copy_of(directory: Path, target: Path) -> Path:
    shutil.copytree(directory, target)
    return target


def test_views_have_the_stores_columns(mixed):
    """Each trace table of a shard directory has the store's columns, names and types in
    order, read-only or not; opening it for writing makes DIR/store.duckdb with every
    table a store has (the trace's as views)."""
    _, store, out = mixed
    for name in TRACE_TABLES:
        assert columns(out, name) == columns(store, name), name
    shard = copy_of(out, out.parent / "writable")
    assert not (shard / COMPANION).exists()
    for name in TRACE_TABLES:
        assert columns(shard, name, read_only=False) == columns(store, name), name
    with duckdb.connect(str(shard / COMPANION), read_only=True) as con:
        kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables"
                                 ).fetchall())
    assert kinds == {t.name: "VIEW" if t.name in TRACE_TABLES else "BASE TABLE"
                     for t in CONNECT_TABLES}


def test_a_directory_partly_done_reads_its_done_shards(mixed, tmp_path):
    """Shards 1 and 3 not done: the views hold shards 0, 2 and 4's runs (run ids 1-4,
    9-12, 17-20), their rows exactly as in the whole directory, and only their programs."""
    _, _, out = mixed
    part = copy_of(out, tmp_path / "part")
    for index in (1, 3):
        shutil.rmtree(part / "shards" / f"0000{index}")
    kept = [*range(1, 5), *range(9, 13), *range(17, 21)]
    assert [i for (i,) in sql(part, "SELECT run_id FROM runs ORDER BY run_id")] == kept
    where = f"run_id IN ({', '.join(map(str, kept))})"
    for name in ("runs", "steps", "states", "objects", "attributes", "global_states"):
        query = f"SELECT * FROM {name} WHERE {where} ORDER BY ALL"
        assert sql(part, f"SELECT * FROM {name} ORDER BY ALL") == sql(out, query), name
    assert sql(part, "SELECT program_id FROM programs ORDER BY ALL") == sql(
        out, f"SELECT DISTINCT program_id FROM runs WHERE {where} ORDER BY ALL")
    assert sql(part, "SELECT count(*) FROM guests") == [(1,)]


def test_a_directory_with_no_shard_done_reads_as_empty_tables(mixed, tmp_path):
    """Planned only: every trace table is there, empty, with the store's columns; a named
    query and a join over them run."""
    corpus, store, _ = mixed
    out = tmp_path / "out"
    trace_shards([corpus], out, ShardOptions(shard_size=4, limits=Limits(max_steps=MAX_STEPS),
                                             plan_only=True))
    for read_only in (True, False):
        for name in TRACE_TABLES:
            assert sql(out, f"SELECT count(*) FROM {name}", read_only) == [(0,)], name
            assert columns(out, name, read_only) == columns(store, name), name
    assert sql(out, "SELECT r.status, count(*) FROM runs r JOIN steps s USING (run_id) "
                    "GROUP BY ALL") == []
    assert trace_tables(out) == {name: [] for name in TRACE_TABLES}


def test_a_moved_directory_still_reads(mixed, tmp_path):
    """The views are made again at every open with the directory's current path: after a
    move (its store.duckdb made at the old place) it reads the same, read-only or not."""
    _, _, out = mixed
    first = copy_of(out, tmp_path / "first")
    expected = sql(out, "SELECT run_id, run_key FROM runs ORDER BY run_id")
    assert sql(first, "SELECT run_id, run_key FROM runs ORDER BY run_id", False) == expected
    moved = tmp_path / "moved"
    first.rename(moved)
    assert (moved / COMPANION).exists()
    for read_only in (True, False):
        assert sql(moved, "SELECT run_id, run_key FROM runs ORDER BY run_id", read_only) == expected


def test_directories_that_cannot_be_read_are_refused(mixed, tmp_path):
    """A shard directory renamed to a path with a glob character, or with a broken plan:
    one line, nothing opened."""
    _, _, out = mixed
    starry = copy_of(out, tmp_path / "out*")
    with pytest.raises(ShardError) as caught:
        connect(starry, read_only=True)
    assert str(caught.value) == (f"a shard directory's path must not contain * (its files are "
                                 f"found by a glob): {starry.resolve()}")
    broken = copy_of(out, tmp_path / "broken")
    (broken / "plan.json").write_text("{}")
    with pytest.raises(ShardError) as caught:
        connect(broken)
    assert str(caught.value) == f"{broken / 'plan.json'} is not a steptrace shard plan"
    assert not (broken / COMPANION).exists()


def test_trace_into_a_shard_directory_is_refused(mixed):
    """trace --db DIR would mix a store's runs into a shard directory: refused before
    anything is written."""
    corpus, _, out = mixed
    with pytest.raises(StoreError) as caught:
        trace_corpus(corpus, out, TraceOptions(workers=0))
    assert str(caught.value) == (f"{out} is a shard directory: trace into it with steptrace "
                                 "trace CORPUS --out DIR")
    assert not (out / COMPANION).exists()


def test_open_store_reads_a_shard_directory(mixed):
    """steptrace.open_store(DIR), the Python reader: every run read back as the store's
    Run record (steps, states, objects, attributes, globals), the tables as DataFrames the
    store's (ids and timings aside)."""
    from steptrace import open_store
    _, store, out = mixed
    with open_store(out) as shards, open_store(store) as stored:
        for run_id in range(1, 21):
            assert shards.run(run_id) == stored.run(run_id), run_id
        assert (len(shards.run(15).attributes), len(shards.run(15).globals)) == (8, 1)
        aside = ["program_id", "duration_us", "call_us", "traced_at"]
        assert shards.runs().drop(aside).equals(stored.runs().drop(aside))
        assert shards.runs(status="invalid")["sample_id"].to_list() == ["peek", "syntax"]
        assert shards.programs().drop("program_id").sort("sample_id").equals(
            stored.programs().drop("program_id").sort("sample_id"))
        assert shards.states(15).equals(stored.states(15))
        assert shards.steps(20).equals(stored.steps(20))
        assert shards.status_counts() == stored.status_counts() == {
            "exception": 3, "invalid": 2, "ok": 14, "step_limit": 1}
        assert shards.sql("SELECT count(*) AS n FROM steps")["n"].to_list() == [2144]
    assert not (out / COMPANION).exists()


def test_shards_written_before_programs_meta_read_it_as_null(mixed, tmp_path):
    """A shard directory traced before schema 6 has programs files without ``meta``: the
    view reads it as NULL (every file old, or only some), and ``--where`` works on it."""
    import pyarrow.parquet as pq
    from steptrace.store._where import select_runs
    _, _, out = mixed
    old = copy_of(out, tmp_path / "old")
    files = sorted(old.glob("shards/*/programs.parquet"))
    for file in files:
        pq.write_table(pq.read_table(file).drop_columns(["meta"]), file)
    expected = sql(out, "SELECT * EXCLUDE (meta) FROM programs ORDER BY ALL")
    assert sql(old, "SELECT * EXCLUDE (meta) FROM programs ORDER BY ALL") == expected
    assert sql(old, "SELECT DISTINCT meta FROM programs") == [(None,)]
    assert select_runs(old, "meta.release_date IS NULL") == [
        i for (i,) in sql(out, "SELECT run_id FROM runs ORDER BY run_id")]
    mixed_ages = copy_of(out, tmp_path / "mixed")  # one shard old, the others new
    first = mixed_ages / files[0].relative_to(old)
    pq.write_table(pq.read_table(first).drop_columns(["meta"]), first)
    assert sql(mixed_ages, "SELECT * EXCLUDE (meta) FROM programs ORDER BY ALL") == expected


VIEW = "def f(xs):\n    sq = [x * x for x in xs]\n    for x in xs: sq.append(x)\n    return sq\n"


def test_shards_written_before_the_settrace_view_read_without_it(tmp_path):
    """A shard directory traced before schema 7 has no settrace_lines files and runs files
    without ``settrace_line_steps``: its runs read with NULL and no view rows (every shard
    old, or only some: the others keep theirs), and it imports into a store."""
    import json
    import pyarrow.parquet as pq
    from steptrace.sharding._store import import_shards
    corpus = tmp_path / "view.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"v{n}", "code": VIEW, "input": f"{list(range(n))}"})
                              + "\n" for n in (1, 2, 3)))
    store, out = tmp_path / "store.duckdb", tmp_path / "out"
    trace_both(corpus, store, out, shard_size=1, workers=1)
    view_rows = "SELECT run_id, step, func, line, depth, frame FROM settrace_lines ORDER BY ALL"
    assert sql(out, "SELECT run_id, settrace_line_steps FROM runs ORDER BY ALL") == [
        (1, 5), (2, 7), (3, 9)]  # 3 line steps, and a jump back per item in each loop
    assert sql(out, view_rows) == sql(store, view_rows)
    expected_runs = sql(out, "SELECT * EXCLUDE (settrace_line_steps) FROM runs ORDER BY ALL")
    old = copy_of(out, tmp_path / "old")
    for file in sorted(old.glob("shards/*/settrace_lines.parquet")):
        file.unlink()
    runs_files = sorted(old.glob("shards/*/runs.parquet"))
    for file in runs_files:
        pq.write_table(pq.read_table(file).drop_columns(["settrace_line_steps"]), file)
    assert sql(old, "SELECT * EXCLUDE (settrace_line_steps) FROM runs ORDER BY ALL") == \
        expected_runs
    assert sql(old, "SELECT DISTINCT settrace_line_steps FROM runs") == [(None,)]
    assert sql(old, "SELECT count(*) FROM settrace_lines") == [(0,)]
    assert columns(old, "settrace_lines") == columns(store, "settrace_lines")
    imported = tmp_path / "imported.duckdb"
    assert import_shards(old, imported).imported == 3
    assert sql(imported, "SELECT DISTINCT settrace_line_steps FROM runs") == [(None,)]
    # shard 0 (run 1) old, the others as written: they keep their view
    half = copy_of(out, tmp_path / "half")
    first = half / runs_files[0].relative_to(old)
    pq.write_table(pq.read_table(first).drop_columns(["settrace_line_steps"]), first)
    (first.parent / "settrace_lines.parquet").unlink()
    assert sql(half, "SELECT run_id, settrace_line_steps FROM runs ORDER BY ALL") == [
        (1, None), (2, 7), (3, 9)]
    assert sql(half, view_rows) == [row for row in sql(out, view_rows) if row[0] != 1]
