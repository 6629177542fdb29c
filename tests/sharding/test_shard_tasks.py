"""Tasks of a shard directory, made shard by shard (here and on a local Ray cluster), are
the rows a store of the same runs gets (run ids aside: into an empty store ``import``
keeps them, so here they are equal too)."""

from __future__ import annotations

import json

import pytest

import steptrace as st
from helpers.cli import assert_one_line_error
from helpers.processes import write_jsonl

PROGRAMS = [
    "def f(x):\n    total = 0\n    for i in range(x):\n        if i % 2:\n            total += i\n"
    "    return total\n",
    "def f(s):\n    out = []\n    for ch in s:\n        out.append(ch.upper())\n    return ''.join(out)\n",
    "def f(n):\n    if n < 0:\n        raise ValueError('negative')\n    return n * 2\n",
]
INPUTS = [["3", "6", "9"], ["'ab'", "'xyz'"], ["2", "-1"]]


def _corpus(tmp_path):
    records = [{"id": f"p{number}", "code": code, "inputs": inputs, "year": 2024 + number}
               for number, (code, inputs) in enumerate(zip(PROGRAMS, INPUTS))]
    return write_jsonl(tmp_path / "corpus.jsonl", records)


def _rows(path):
    return [{k: v for k, v in json.loads(line).items() if k != "created_at"}
            for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The corpus as a shard directory of three shards, and imported into a store."""
    tmp_path = tmp_path_factory.mktemp("shard-tasks")
    out = tmp_path / "shards"
    summary = st.trace_sharded(_corpus(tmp_path), out, shard_size=3, workers=2)
    assert (summary.shards, summary.traced) == (3, 7)
    db = tmp_path / "store.duckdb"
    assert st.import_shards(out, db).imported == 7
    return tmp_path, out, db


def test_shard_tasks_equal_the_store_tasks(traced):
    tmp_path, out, db = traced
    from_store = st.make_tasks(db, out=tmp_path / "store-tasks.jsonl")
    from_shards = st.make_tasks(out, out=tmp_path / "shard-tasks.jsonl")
    assert from_shards.runs == from_store.runs == 7
    assert from_shards.by_kind == from_store.by_kind
    assert from_shards.by_kind["output"] == 6 and from_shards.by_kind["exception"] == 7
    assert _rows(tmp_path / "shard-tasks.jsonl") == _rows(tmp_path / "store-tasks.jsonl")
    # stored in the directory's store.duckdb, and made again without duplicates
    again = st.make_tasks(out)
    assert again.total == from_store.total
    store = st.open_store(out)
    assert store.sql("SELECT count(*) AS n, count(DISTINCT task_id) AS d FROM tasks").rows() == [
        (from_store.total, from_store.total)]


def test_shard_tasks_where_equal_the_store_tasks_where(traced):
    """``--where`` selects each shard's runs as the store's: the same rows."""
    tmp_path, out, db = traced
    where = "meta.year::INT >= 2025 AND status = 'ok'"
    from_store = st.make_tasks(db, "output", where=where, out=tmp_path / "w-store.jsonl")
    from_shards = st.make_tasks(out, "output", where=where, out=tmp_path / "w-shards.jsonl")
    assert from_shards.runs == from_store.runs == 3  # p1's two runs, p2's run on 2
    assert _rows(tmp_path / "w-shards.jsonl") == _rows(tmp_path / "w-store.jsonl")
    with pytest.raises(st.InputError, match=f"no finished .* runs in {out} meet --where"):
        st.make_tasks(out, where="meta.year = 'never'")
    with pytest.raises(st.InputError, match="bad --where condition"):
        st.make_tasks(out, where="1; DROP TABLE runs")


@pytest.mark.slow
def test_shard_tasks_on_ray_equal_the_local_ones(traced):
    from helpers.ray_cluster import local_cluster
    tmp_path, out, _db = traced
    local = st.make_tasks(out, kinds="output,state,branch", out=tmp_path / "local.jsonl")
    with local_cluster(tmp_path / "ray", num_cpus=2):
        on_ray = st.make_tasks(out, kinds="output,state,branch", engine="ray",
                               out=tmp_path / "ray.jsonl")
    assert on_ray.by_kind == local.by_kind
    assert _rows(tmp_path / "ray.jsonl") == _rows(tmp_path / "local.jsonl")


def test_engine_goes_with_a_shard_directory(traced):
    from click.testing import CliRunner
    from steptrace.cli import main
    _tmp_path, _out, db = traced
    result = CliRunner().invoke(main, ["tasks", "--db", str(db), "--engine", "ray"])
    assert_one_line_error(result, "--engine and --address go with a shard directory "
                                  "(trace --out DIR)")
