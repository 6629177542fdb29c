"""Sharded traces of the native backend (slow: a private local Ray cluster): the same
corpus traced natively into a store, into shards by the local engine and by the Ray
engine gives the same tables (the runs marked native, with their CPython's version), and
a shard directory imported into a store reads as the store."""

from __future__ import annotations

import json

import pytest

from helpers.cli import ok, rows
from helpers.ray_cluster import local_cluster
from helpers.shards import assert_same_trace
from steptrace.native_sandbox import find_python

pytestmark = pytest.mark.slow

RECORDS = [
    {"id": "loop", "code": "def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n"
                           "    return total\n", "inputs": ["[1, 2]", "[3]", "[]"]},
    {"id": "raises", "code": "def f(d):\n    return d['k']\n", "input": "{}"},
    {"id": "obj", "code": "class A:\n    def __init__(self, v):\n        self.v = v\n\n"
                          "def f(v):\n    a = A(v)\n    a.v += 1\n    return a.v\n",
     "input": "1", "output": "2"},
    {"id": "prints", "code": "def f(n):\n    for i in range(n):\n        print(i)\n", "input": "3"},
    {"id": "written", "code": "def f():\n    return 1\n", "input": "", "model_written": True},
]


def test_native_shards_local_and_ray_equal_a_store(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    store = tmp_path / "store.duckdb"
    ok("trace", corpus, "--db", store, "--backend", "native", "--workers", 2, "--quiet")
    version = find_python().version  # the newest CPython found: what every worker finds
    assert rows(store, "SELECT sample_id, status, backend, python FROM runs "
                       "ORDER BY sample_id, input_index") == [
        ("loop", "ok", "native", version), ("loop", "ok", "native", version),
        ("loop", "ok", "native", version), ("obj", "ok", "native", version),
        ("prints", "ok", "native", version), ("raises", "exception", "native", version),
        ("written", "refused", "native", version)]
    local = tmp_path / "local"
    ok("trace", corpus, "--out", local, "--engine", "local", "--backend", "native",
       "--shard-size", 3, "--workers", 2, "--quiet")
    counts = assert_same_trace(store, local)
    with local_cluster(tmp_path / "ray", num_cpus=2) as cluster:
        ray = tmp_path / "ray-out"
        ok("trace", corpus, "--out", ray, "--engine", "ray", "--address", cluster.address,
           "--backend", "native", "--shard-size", 3, "--workers", 2, "--quiet")
    assert assert_same_trace(store, ray) == counts
    assert counts["runs"] == 7
    imported = tmp_path / "imported.duckdb"
    ok("import", ray, "--db", imported)
    assert rows(imported, "SELECT DISTINCT backend, python FROM runs") == [("native", version)]
    assert assert_same_trace(store, imported) == counts
