"""The Ray engine (``steptrace trace CORPUS --out DIR --engine ray``) on a real local Ray
cluster: its shards hold what ``steptrace trace --db`` stores and what ``--engine local``
writes, file for file; a worker killed mid-shard and a driver killed mid-run end, after a
retry or a re-run, with exactly one copy of every run; a worker dead past its restarts
is a one-line error and a re-run completes; a guest that is not the plan's is refused;
a relative ``--out`` reaches workers in another directory; without ``--address`` a
local Ray is started even where another cluster is found; without Ray the command says
so in one line.

One cluster serves the module (``cluster``: ``ray.init(num_cpus=2)`` in this process,
rooted in a private temp dir, shut down at the end with none of its processes left:
tests/helpers/ray_cluster.py). Its workers get a component cache of their own
(``STEPTRACE_CACHE_DIR``, set for the cluster when it starts: Ray's processes inherit
the environment of the process that started them), as a worker on another machine
would: it starts with the compiled guest but not the component, so the first actor
installs the plan's component from the bytes the driver put in Ray's object store (in its
cache's ``foreign/`` folder: a component it did not build), and the tests can give it
another build of the plan's guest without touching the driver's cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.sandbox._build import CACHE_ENV, artifacts, cache_dir, sidecar, write_verified
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import compiled_path
from steptrace.sharding._plan import read_plan
from steptrace.sharding._shard import SHARD_TABLES
from steptrace.store._store import connect
from helpers.processes import (HANG_GUARD_S, children_of, kill_processes, proc_stat,
                               wait_until_gone, write_jsonl)
from helpers.ray_cluster import LocalCluster, local_cluster, process_tree
from helpers.shards import TIMING, assert_same_trace

TABLES = [t.name for t in SHARD_TABLES]


# ---------------------------------------------------------------------- the cluster
@pytest.fixture(scope="module")
def worker_cache(tmp_path_factory) -> Path:
    """The Ray workers' component cache: the compiled guest (as the session's cache
    holds it for the default limits) without the component itself."""
    folder = tmp_path_factory.mktemp("ray-worker-cache")
    found = artifacts()
    cwasm = compiled_path(found, Limits())
    for path in (cwasm, sidecar(cwasm)):
        shutil.copyfile(path, folder / path.name)
    return folder


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, worker_cache) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("ray"), num_cpus=2,
                       env={CACHE_ENV: str(worker_cache)}) as running:
        yield running


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def trace_json(*args, code: int = 0) -> dict:
    """``steptrace trace ARGS --quiet --format json`` in this process; its summary."""
    result = invoke("trace", *args, "--quiet", "--format", "json")
    assert result.exit_code == code, (result.stderr, result.exception)
    return json.loads(result.stdout)


# what a sharded trace's summary and trace --db's count alike
SAME_AS_STORE = ("jobs", "duplicates", "traced", "by_status", "with_expected", "matched",
                 "line_steps", "steps", "corpus_errors")


def as_run(summary: dict) -> dict:
    """A sharded trace's summary less what differs between two runs of it."""
    return {k: v for k, v in summary.items() if k not in ("out", "engine", "seconds",
                                                          "runs_per_second")}


def shard_files(directory: Path) -> dict[str, object]:
    """Every file of a shard directory by its relative path, as content to compare: a
    Parquet table without its timing columns, its rows by run id (a stable sort: each
    run's rows keep their order) or, for programs, by program key; ``done.json`` without
    its seconds; any other file's bytes.

    A shard's runs come in the order its chunks finish: the local engine's pool of two
    workers can return a later chunk of a shard first, a Ray actor's one-worker pool
    returns them in order. Each run's rows are written together, in the guest's order."""
    out: dict[str, object] = {}
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        name = str(path.relative_to(directory))
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            table = table.drop_columns([c for c in table.column_names if c in TIMING])
            for key in ("run_id", "program_key"):
                if key in table.column_names:
                    table = table.take(pc.sort_indices(table, [(key, "ascending")]))
                    break
            out[name] = table
        elif path.name == "done.json":
            out[name] = {k: v for k, v in json.loads(path.read_text()).items() if k != "seconds"}
        else:
            out[name] = path.read_bytes()
    return out


def assert_same_files(expected: Path, got: Path) -> list[str]:
    """Two shard directories hold the same files with the same content (timings aside);
    returns their names."""
    want, have = shard_files(expected), shard_files(got)
    assert sorted(have) == sorted(want)
    for name in want:
        if hasattr(want[name], "equals"):
            assert have[name].schema == want[name].schema, name
            assert have[name].equals(want[name]), name
        else:
            assert have[name] == want[name], name
    return sorted(want)


def this_machines(directory: Path) -> str:
    """What a summary says of the plan's guest when the driver built it."""
    guest = read_plan(directory).guest
    return f"{guest.key} sha256 {guest.digest[:16]}... (this machine's build)"


def plan_guest(directory: Path) -> str:
    """The file name of the plan's guest component."""
    return f"guest-{read_plan(directory).guest.key}.wasm"


def runs_by_key(directory: Path) -> tuple[int, int, list[int]]:
    """(runs, distinct run keys, run ids in order) of a shard directory's views."""
    con = connect(directory, read_only=True)
    try:
        total, keys = con.execute("SELECT count(*), count(DISTINCT run_key) FROM runs").fetchone()
        ids = [i for (i,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        return total, keys, ids
    finally:
        con.close()


# ---------------------------------------------------------------------- corpora
ADD = "def f(a, b):\n    c = a + b\n    return c\n"
BOOM = "def f(x):\n    return 1 // x\n"
PRINTS = "def f(x):\n    y = -x\n    print(y)\n    return y\n"
HELPER = ("def g(n):\n    return n + 1\n\ndef f(xs):\n    out = []\n    for x in xs:\n"
          "        out.append(g(x))\n    return out\n")
BANK = ("rate = 2\nledger = []\n\nclass Account:\n    def __init__(self, owner):\n"
        "        self.owner = owner\n        self.balance = 0\n\n"
        "    def deposit(self, amount):\n        self.balance += amount * rate\n"
        "        ledger.append(amount)\n\n"
        "def f(names):\n    accounts = [Account(name) for name in names]\n"
        "    for account in accounts:\n        account.deposit(len(account.owner))\n"
        "    return accounts\n")
STACK = ("class Stack:\n    def __init__(self):\n        self.items = []\n"
         "    def push(self, x):\n        self.items.append(x)\n"
         "    def pop(self):\n        return self.items.pop()\n")
MATH = "class Math:\n    @staticmethod\n    def square(x):\n        return x * x\n"
CALC = "def add(a, b):\n    return a + b\n"
CALC_TEST = ("import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n"
             "        self.assertEqual(add(1, 2), 4)\n")
SCRIPT = "n = int(input())\nprint(sum(int(input()) for _ in range(n)))\n"
SPIN = "def f(n):\n    while True:\n        n += 1\n"

# 17 records: 21 jobs and a bad record; with --shard-size 4 the 18 distinct jobs make
# five shards (4, 4, 4, 4, 2), the repeated "add" is left out in its own shard, the two
# repeated "boom" jobs in shard 3 (their first is in shard 0)
MIXED = [
    {"id": "add", "code": ADD, "input": "1, 2", "output": "3"},
    {"id": "add", "code": ADD, "input": "1, 2", "output": "3"},  # the same job, same shard
    {"id": "boom", "code": BOOM, "inputs": ["0", "4"], "outputs": ["1", "0"]},
    {"id": "prints", "code": PRINTS, "input": "2", "output": "-2"},
    {"id": "helper", "code": HELPER, "inputs": ["[1, 2]", "[]"]},
    {"id": "bank", "code": BANK, "input": "['ab', 'c']"},
    {"id": "stack", "code": STACK, "entry": "Stack", "input": "",
     "calls": [{"method": "push", "input": "1"}, {"method": "push", "input": "2"},
               {"method": "pop"}], "output": "2"},
    {"id": "square", "code": MATH, "entry": "Math.square", "input": "3", "output": "9"},
    {"id": "calc", "code": CALC, "entry": "T.test_add", "input": "", "test": CALC_TEST},
    {"id": "script", "shape": "script", "code": SCRIPT, "inputs": ["2\n3\n4\n", "0\n"],
     "outputs": ["7\n", "1\n"]},
    {"id": "stdin", "code": "import sys\ndef f():\n    return sys.stdin.read()\n", "input": "",
     "stdin": "hi\n", "output": "'hi\\n'"},
    {"id": "invalid", "code": "def f(:\n    return 1\n", "input": "1"},
    {"id": "spin", "code": SPIN, "input": "0"},
    {"id": "bad-record", "input": "1"},  # no code: a corpus error, traced by none
    {"id": "boom", "code": BOOM, "inputs": ["0", "4"], "outputs": ["1", "0"]},  # other shards
    {"id": "unicode", "code": "def f(s):\n    t = s[::-1]\n    return t + 'é'\n",
     "inputs": ["'añb'", "''"]},
    {"id": "big", "code": "def f(n):\n    xs = list(range(n))\n    return sum(xs)\n",
     "input": "300", "output": "44850"},
]
MIXED_OPTIONS = ("--max-steps", "300")
TWO = [{"id": "a", "code": ADD, "inputs": ["1, 2", "3, 4"], "outputs": ["3", "7"]}]


# ---------------------------------------------------------------------- the tests
@pytest.mark.slow
def test_the_workers_inherit_the_environment_the_cluster_started_with(cluster, worker_cache):
    """What the cache tests below rely on: the workers' STEPTRACE_CACHE_DIR is the one set
    when ray.init started the cluster, not the test process's (the session's cache)."""
    import ray

    @ray.remote(num_cpus=1)
    def cache_of_worker() -> tuple[str | None, str]:
        return os.environ.get(CACHE_ENV), str(cache_dir())

    assert ray.get(cache_of_worker.remote()) == (str(worker_cache), str(worker_cache))
    assert cache_dir() != worker_cache


@pytest.mark.slow
def test_ray_shards_equal_a_store_and_local_shards_mixed_corpus(cluster, worker_cache, tmp_path):
    """A mixed corpus (calls, exceptions, prints, helpers, objects and globals, a method
    chain, a dotted entry, a test driver, a script, stdin, a syntax error, a step limit,
    unicode, repeats in the same and other shards, a bad record) traced three ways: into
    DuckDB, ``--engine local`` and ``--engine ray``. The Ray directory holds the store's
    rows, table by table, and the local directory's files, shard by shard."""
    corpus = write_jsonl(tmp_path / "mixed.jsonl", MIXED)
    store = tmp_path / "store.duckdb"
    result = invoke("trace", corpus, "--db", store, *MIXED_OPTIONS, "--workers", 2, "--quiet",
                    "--format", "json")
    assert result.exit_code == 1  # the bad record
    stored = json.loads(result.stdout)
    sharded = ("--shard-size", 4, "--workers", 2, *MIXED_OPTIONS)
    # exit status 1 for the bad record, as trace --db
    local = trace_json(corpus, "--out", tmp_path / "local", "--engine", "local", *sharded,
                       code=1)
    ray_summary = trace_json(corpus, "--out", tmp_path / "ray", "--engine", "ray", *sharded,
                             code=1)
    bad = [f"{corpus}:14: missing 'code'"]
    assert as_run(ray_summary) == as_run(local) == {
        "corpora": [str(corpus)], "jobs": 21, "duplicates": 3, "cross_shard_duplicates": 2,
        "shards": 5, "shards_done_before": 0, "shards_traced": 5, "runs": 18, "traced": 18,
        "by_status": {"exception": 2, "invalid": 1, "ok": 14, "step_limit": 1},
        "with_expected": 10, "matched": 8, "line_steps": 353, "steps": 412, "complete": True,
        "corpus_errors": bad, "guest": this_machines(tmp_path / "ray")}
    assert {k: stored[k] for k in SAME_AS_STORE} == {k: ray_summary[k] for k in SAME_AS_STORE}
    assert assert_same_trace(store, tmp_path / "ray") == {
        "programs": 14, "runs": 18, "steps": 412, "states": 244, "objects": 12,
        "attributes": 10, "global_states": 4, "settrace_lines": 4, "guests": 1}
    files = assert_same_files(tmp_path / "local", tmp_path / "ray")
    shards = [f"shards/0000{i}/{t}.parquet" for i in range(5) for t in TABLES] + [
        f"shards/0000{i}/done.json" for i in range(5)]
    assert files == sorted([f"guest/{plan_guest(tmp_path / 'ray')}", "plan.json",
                            "steptrace_shards.json", *shards,
                            *(f"inputs/0000{i}.jsonl" for i in range(5))])
    # the workers installed the plan's component from the bytes the driver shipped, apart
    # from their own builds
    digest = read_plan(tmp_path / "ray").guest.digest
    installed = worker_cache / "foreign" / f"guest-{digest}.wasm"
    assert sidecar(installed).read_text() == digest
    assert installed.read_bytes() == (tmp_path / "ray" / "guest" /
                                      plan_guest(tmp_path / "ray")).read_bytes()
    assert not (worker_cache / plan_guest(tmp_path / "ray")).exists()


@pytest.mark.slow
def test_ray_shards_equal_a_store_and_local_shards_cruxeval(cluster, tmp_path, cruxeval_path):
    """The 800 CRUXEval samples: ``--engine ray`` with shards of 100 holds what ``trace
    --db`` stores, row for row, and ``--engine local``'s files."""
    store = tmp_path / "crux.duckdb"
    stored = trace_json(cruxeval_path, "--db", store, "--workers", 2)
    sharded = ("--shard-size", 100, "--workers", 2)
    local = trace_json(cruxeval_path, "--out", tmp_path / "local", "--engine", "local", *sharded)
    ray_summary = trace_json(cruxeval_path, "--out", tmp_path / "ray", "--engine", "ray", *sharded)
    assert as_run(ray_summary) == as_run(local) == {
        "corpora": [str(cruxeval_path)], "jobs": 800, "duplicates": 0,
        "cross_shard_duplicates": 0, "shards": 8, "shards_done_before": 0,
        "shards_traced": 8, "runs": 800, "traced": 800, "by_status": {"ok": 800},
        "with_expected": 800, "matched": 800, "line_steps": 8545, "steps": 10375,
        "complete": True, "corpus_errors": [], "guest": this_machines(tmp_path / "ray")}
    assert {k: stored[k] for k in SAME_AS_STORE} == {k: ray_summary[k] for k in SAME_AS_STORE}
    assert assert_same_trace(store, tmp_path / "ray") == {
        "programs": 800, "runs": 800, "steps": 10375, "states": 7160, "objects": 774,
        "attributes": 0, "global_states": 5, "settrace_lines": 387, "guests": 1}
    files = assert_same_files(tmp_path / "local", tmp_path / "ray")
    assert len(files) == 8 * (len(TABLES) + 1) + 8 + 3  # tables and done.json a shard


@pytest.mark.slow
def test_a_relative_out_is_found_by_workers_in_another_directory(cluster, tmp_path, monkeypatch):
    """The cluster's workers run in the directory the cluster was started from, not the
    driver's (on another machine, in whatever directory its raylet has): ``--out out``
    given in another directory must reach them as the absolute path of ``out``."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "two.jsonl", TWO)
    summary = trace_json("two.jsonl", "--out", "out", "--engine", "ray", "--workers", 2,
                         "--shard-size", 1)
    assert {k: summary[k] for k in ("out", "shards", "traced", "matched", "complete")} == {
        "out": "out", "shards": 2, "traced": 2, "matched": 2, "complete": True}
    assert runs_by_key(tmp_path / "out") == (2, 2, [1, 2])


@pytest.mark.slow
def test_without_address_a_local_ray_is_started_even_where_another_is_found(cluster, tmp_path):
    """``--engine ray`` without ``--address`` starts a local Ray of ``--workers`` CPUs, as
    documented, also where ``ray.init()`` alone would join another cluster: with
    RAY_ADDRESS set (as under ``ray job submit``; a ``ray start`` on the machine is found
    alike), where ``ray.init(num_cpus=...)`` failed with Ray's ValueError and a
    traceback. That local Ray is rooted in a private RAY_TMPDIR: it is not this module's
    cluster, and none of its processes outlive the command."""
    corpus = write_jsonl(tmp_path / "two.jsonl", TWO)
    ray_tmp = Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp"))  # short: socket paths
    seen: dict[int, tuple[int, str]] = {}  # every process of the command's, while it ran
    try:
        env = {**os.environ, "RAY_ADDRESS": cluster.address, "RAY_TMPDIR": str(ray_tmp)}
        with open(tmp_path / "out.json", "wb") as out, open(tmp_path / "err", "wb") as err:
            command = subprocess.Popen(
                [sys.executable, "-m", "steptrace.cli", "trace", corpus, "--out",
                 tmp_path / "out", "--engine", "ray", "--workers", "1", "--shard-size", "1",
                 "--quiet", "--format", "json"], env=env, stdout=out, stderr=err)
            try:
                deadline = time.monotonic() + HANG_GUARD_S
                while command.poll() is None and time.monotonic() < deadline:
                    seen.update(process_tree(command.pid))
                    time.sleep(0.05)
            finally:
                command.kill()
                command.wait()
        assert (command.returncode, (tmp_path / "err").read_text()) == (0, "")
        summary = json.loads((tmp_path / "out.json").read_text())
        assert (summary["shards_traced"], summary["traced"], summary["matched"],
                summary["complete"]) == (2, 2, 2, True)
        # its own Ray (a session in its RAY_TMPDIR), not this module's cluster; which of
        # its processes the sampling saw depends on the machine's load, so only what it
        # saw is checked: none is this module's cluster's, none outlives the command
        assert len(list((ray_tmp / "ray").glob("session_2*"))) == 1
        assert not set(seen) & set(cluster.processes())
        assert wait_until_gone(seen) == []
    finally:
        kill_processes(seen)
        shutil.rmtree(ray_tmp, ignore_errors=True)


# ---------------------------------------------------------------------- killed processes
SLEEPY = "import time\n\ndef f(x):\n    time.sleep(0.2)\n    y = x * 2\n    return y\n"
SLEEPY_RECORDS = [{"id": f"s{i}", "code": SLEEPY, "input": str(i), "output": str(2 * i)}
                  for i in range(16)]
# the clean trace of SLEEPY_RECORDS: 16 programs (a sample id is part of a program's key)
# and 16 runs of 5 steps (call, lines 4, 5 and 6, return) and 3 states (x, y, the return)
SLEEPY_COUNTS = {"programs": 16, "runs": 16, "steps": 80, "states": 48, "objects": 0,
                 "attributes": 0, "global_states": 0, "settrace_lines": 0, "guests": 1}


@pytest.fixture(scope="module")
def sleepy(tmp_path_factory) -> tuple[Path, Path]:
    """A corpus of 16 jobs that each sleep 0.2 s in the guest (so a shard of them takes
    a while) and its clean trace into DuckDB."""
    folder = tmp_path_factory.mktemp("sleepy")
    corpus = write_jsonl(folder / "sleepy.jsonl", SLEEPY_RECORDS)
    store = folder / "clean.duckdb"
    assert trace_json(corpus, "--db", store, "--workers", 2)["traced"] == 16
    return corpus, store


def shard_folders_open(pid: int, tmp: Path) -> set[str]:
    """The folders under ``tmp`` (DIR/tmp: shards being written) in which process ``pid``
    has a file open: a shard it is writing (its Parquet writers are open from its start
    to its end)."""
    names = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return names
    for fd in fds:
        try:
            target = Path(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if tmp in target.parents:
            names.add(target.relative_to(tmp).parts[0])
    return names


class ShardWorkerKiller(threading.Thread):
    """SIGKILLs the first ShardWorker actor process found writing a shard of
    ``directory`` (some 0.3 s into it: a job or so done, the shard not); ``killed`` then
    says which process, its title, the shard folder it had open and its children (the
    sandbox worker of its pool)."""

    def __init__(self, cluster: LocalCluster, directory: Path) -> None:
        super().__init__(daemon=True)
        self.cluster, self.tmp = cluster, directory / "tmp"
        self.killed: dict | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        while not self.stop.is_set() and time.monotonic() < deadline:
            for pid, (started, title) in self.cluster.workers("ray::ShardWorker").items():
                folders = shard_folders_open(pid, self.tmp)
                if not folders:
                    continue
                time.sleep(0.3)
                if (shard_folders_open(pid, self.tmp) != folders
                        or (proc_stat(pid) or (0, 0, 0))[2] != started):
                    continue  # that shard ended meanwhile: try the next one
                children = children_of(pid)
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
                os.kill(pid, signal.SIGKILL)
                self.killed = {"pid": pid, "title": title, "folders": folders,
                               "children": children, "started": started}
                return
            time.sleep(0.01)


@pytest.mark.slow
def test_a_worker_killed_mid_shard_is_restarted_and_its_shard_run_once(cluster, sleepy, tmp_path):
    """16 sleeping jobs in 4 shards of 4 on 2 actors; the actor process writing a shard is
    SIGKILLed mid-shard. Ray restarts it and runs the shard again: the trace completes
    and holds every planned run once, as the clean trace does, row for row. While the
    retry runs, the killed attempt's private folder in DIR/tmp (its Parquet files begun)
    is not in the views, which hold exactly the runs of the shards done; at the end
    DIR/tmp is gone, and so is the killed actor's sandbox worker."""
    from steptrace.sharding._run import ShardOptions, trace_shards
    corpus, clean = sleepy
    out = tmp_path / "out"
    killer = ShardWorkerKiller(cluster, out)
    seen: list[dict] = []

    def progress(done: int, planned: int) -> None:
        killed = killer.killed
        if killed is None or not (out / "tmp").is_dir():
            return
        before = sorted(p.parent.name for p in (out / "shards").glob("*/done.json"))
        leftovers = {p.name: sorted(f.name for f in p.iterdir())
                     for p in (out / "tmp").iterdir()}
        views = runs_by_key(out)
        after = sorted(p.parent.name for p in (out / "shards").glob("*/done.json"))
        if before == after:  # no shard finished while the views were read
            seen.append({"done": before, "leftovers": leftovers, "views": views})

    killer.start()
    try:
        summary = trace_shards([corpus], out, ShardOptions(shard_size=4, workers=2,
                                                           engine="ray"), progress)
    finally:
        killer.stop.set()
        killer.join()
    killed = killer.killed
    assert killed is not None, "no ShardWorker was found writing a shard"
    assert killed["title"] == "ray::ShardWorker.run"
    (folder,) = killed["folders"]
    shard = folder.split("-")[0]
    assert shard in {"00000", "00001", "00002", "00003"}
    assert [p for p in killed["children"].values() if "steptrace.sandbox._worker" in p[1]]
    assert wait_until_gone(killed["children"]) == []
    assert (summary.shards, summary.shards_traced, summary.traced, summary.runs,
            dict(summary.by_status), summary.matched, summary.complete) == (
        4, 4, 16, 16, {"ok": 16}, 16, True)
    # while the retry ran: the killed attempt's folder, with its files begun, beside the
    # views, which hold the done shards' runs once each
    during = [s for s in seen if folder in s["leftovers"]]
    assert during, seen
    for s in during:
        assert s["leftovers"][folder] == sorted(f"{t}.parquet" for t in TABLES)
        ids = [4 * int(name) + i for name in s["done"] for i in range(1, 5)]
        assert s["views"] == (len(ids), len(ids), ids)
    assert not (out / "tmp").exists()
    assert runs_by_key(out) == (16, 16, list(range(1, 17)))
    counts = assert_same_trace(clean, out)
    assert counts == SLEEPY_COUNTS
    manifest = json.loads((out / "steptrace_shards.json").read_text())
    # the manifest counts the files' rows: each shard's file has the guest's row
    assert {t["name"]: t["rows"] for t in manifest["tables"]} == {**counts, "guests": 4}


@pytest.mark.slow
def test_a_driver_killed_mid_run_leaves_no_workers_and_a_rerun_completes(cluster, sleepy, tmp_path):
    """``steptrace trace sleepy.jsonl --out out --engine ray --workers 2 --shard-size 2``
    as a process of its own, SIGKILLed once a shard is done and not all: the cluster
    ends the dead driver's actors (and their sandbox workers), and the same command again
    skips the done shards, traces the rest and leaves every run once, as the clean trace.

    The driver joins this module's cluster with ``--address`` (a second local cluster on
    2 cores would compete with this one, and the fixture's checks that none of the
    cluster's processes outlive it cover the dead driver's workers too); it runs in its
    own folder with relative paths, as a user would, while the cluster's workers run in
    this process's working directory."""
    corpus, clean = sleepy
    shutil.copyfile(corpus, tmp_path / "sleepy.jsonl")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "steptrace.cli", "trace", "sleepy.jsonl", "--out", "out",
               "--engine", "ray", "--address", cluster.address, "--workers", "2",
               "--shard-size", "2", "--quiet", "--format", "json"]
    with open(tmp_path / "first.err", "wb") as err:
        first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + HANG_GUARD_S
            done = 0
            while first.poll() is None and time.monotonic() < deadline:
                done = len(list((out / "shards").glob("*/done.json")))
                if done >= 1:
                    break
                time.sleep(0.01)
            actors = cluster.with_children(cluster.workers("ray::ShardWorker"))
        finally:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL, (tmp_path / "first.err").read_text()
    assert 1 <= done < 8
    assert [p for p in actors.values() if p[1].startswith("ray::ShardWorker")]
    assert wait_until_gone(actors) == []
    assert cluster.workers("ray::ShardWorker") == {}
    done_before = len(list((out / "shards").glob("*/done.json")))
    assert 1 <= done_before < 8
    rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
    assert (rerun.returncode, rerun.stderr) == (0, "")
    summary = json.loads(rerun.stdout)
    assert {k: summary[k] for k in ("shards", "shards_done_before", "shards_traced", "runs",
                                    "traced", "by_status", "complete")} == {
        "shards": 8, "shards_done_before": done_before, "shards_traced": 8 - done_before,
        "runs": 16, "traced": 2 * (8 - done_before), "by_status": {"ok": 2 * (8 - done_before)},
        "complete": True}
    assert not (out / "tmp").exists()
    assert runs_by_key(out) == (16, 16, list(range(1, 17)))
    assert assert_same_trace(clean, out) == SLEEPY_COUNTS


@pytest.mark.slow
def test_a_worker_dead_past_its_restarts_is_one_line_and_a_rerun_completes(
        cluster, sleepy, tmp_path, monkeypatch):
    """An actor that dies more often than Ray may restart it (here: no restarts, as after
    four) ends ``steptrace trace`` with a one-line error naming the shard, not Ray's
    multi-line ActorDiedError with a traceback; the shards done are kept, and the same
    command again (restarts allowed) completes with every run once."""
    import steptrace as st
    import steptrace.sharding._ray as ray_engine
    monkeypatch.setattr(ray_engine, "MAX_RESTARTS", 0)
    monkeypatch.setattr(ray_engine, "MAX_TASK_RETRIES", 0)
    corpus, clean = sleepy
    out = tmp_path / "out"
    command = ("trace", corpus, "--out", out, "--engine", "ray", "--workers", 2,
               "--shard-size", 4, "--quiet")
    killer = ShardWorkerKiller(cluster, out)
    killer.start()
    try:
        result = invoke(*command)
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed is not None
    (folder,) = killer.killed["folders"]
    assert (result.exit_code, type(result.exception)) == (1, SystemExit)
    # stdout has only Ray's own notice of the dead worker: Ray's driver prints the
    # cluster's error messages there whatever log_to_driver says
    assert all("(raylet)" in line for line in result.stdout.splitlines())
    assert len(result.stderr.splitlines()) == 1
    # (the rest of the line is the first of Ray's message)
    assert result.stderr.startswith(
        f"Error: shard {int(folder.split('-')[0])} failed on Ray after 0 retries: ")
    monkeypatch.undo()
    # the error's end killed the other actor too, and with it its sandbox worker
    assert wait_until_gone(cluster.with_children(cluster.workers("ray::ShardWorker"))) == []
    done_before = len(list((out / "shards").glob("*/done.json")))
    assert done_before < 4
    # (through the API: Ray's driver may print its notice of the dead worker on stdout
    # later, in the middle of the next command's output)
    summary = st.trace_sharded(corpus, out, engine="ray", workers=2, shard_size=4)
    assert (summary.shards_done_before, summary.shards_traced, summary.runs,
            summary.complete) == (done_before, 4 - done_before, 16, True)
    assert runs_by_key(out) == (16, 16, list(range(1, 17)))
    assert assert_same_trace(clean, out) == SLEEPY_COUNTS


# ---------------------------------------------------------------------- the guest
def drop_component(cache: Path, name: str) -> dict[Path, bytes]:
    """Remove the component ``name`` (and its sidecars) from ``cache``; what was there."""
    saved = {}
    for path in (cache / name, sidecar(cache / name), cache / f"{name}.checked"):
        if path.exists():
            saved[path] = path.read_bytes()
            path.unlink()
    return saved


@pytest.fixture
def other_build(worker_cache):
    """The workers' cache holds another build of the plan's guest (as a separate build of
    the same sources would be: other bytes under the same key, with their own digest in
    the sidecar); what was there is put back afterwards."""
    name = artifacts().wasm.name
    saved = drop_component(worker_cache, name)
    other = b"\0asm another build of the same sources"
    write_verified(worker_cache / name, other)
    yield hashlib.sha256(other).hexdigest()
    drop_component(worker_cache, name)
    for path, data in saved.items():
        path.write_bytes(data)


@pytest.mark.slow
def test_a_worker_cache_holding_another_build_runs_the_plans_apart(cluster, worker_cache,
                                                                   other_build, tmp_path):
    """A worker whose cache holds another build under the plan's key runs the plan's guest
    all the same (the driver trusts it: its own build), from its cache's ``foreign/``
    folder: its own build stays as it was, under its key."""
    from steptrace.sharding._run import ShardOptions, trace_shards
    corpus = write_jsonl(tmp_path / "two.jsonl", TWO)
    out = tmp_path / "out"
    summary = trace_shards([corpus], out, ShardOptions(shard_size=1, workers=2, engine="ray"))
    assert (summary.traced, summary.matched, summary.complete) == (2, 2, True)
    assert summary.guest == this_machines(out)
    guest = read_plan(out).guest
    assert sidecar(worker_cache / plan_guest(out)).read_text() == other_build
    assert sidecar(worker_cache / "foreign" / f"guest-{guest.digest}.wasm").read_text() == (
        guest.digest)


@pytest.mark.slow
def test_a_tampered_guest_in_the_directory_is_refused(cluster, worker_cache, tmp_path):
    """The driver ships the directory's copy of the guest to workers that lack it; a copy
    whose bytes are not the plan's (tampered, or truncated) is refused by them with a
    one-line GuestMismatchError, nothing of it is installed, no shard is begun."""
    from steptrace.sharding._plan import GuestMismatchError, plan_directory
    from steptrace.sharding._run import ShardOptions, trace_shards
    corpus = write_jsonl(tmp_path / "two.jsonl", TWO)
    out = tmp_path / "out"
    plan, resumed = plan_directory([corpus], out, 1, Limits(), "job")
    assert not resumed
    copy = out / "guest" / plan_guest(out)
    tampered = copy.read_bytes()[:-1] + b"\0"
    copy.write_bytes(tampered)
    # the workers must install it from the bytes (an earlier test may have installed it)
    foreign = worker_cache / "foreign"
    saved = drop_component(foreign, f"guest-{plan.guest.digest}.wasm")
    drop_component(worker_cache, copy.name)
    try:
        with pytest.raises(GuestMismatchError) as caught:
            trace_shards([corpus], out, ShardOptions(shard_size=1, workers=2, engine="ray"))
        assert str(caught.value) == (
            f"the guest component given has digest "
            f"{hashlib.sha256(tampered).hexdigest()[:16]}..., the plan's is "
            f"{plan.guest.digest[:16]}...")
        assert not (worker_cache / copy.name).exists()
        assert not (foreign / f"guest-{plan.guest.digest}.wasm").exists()
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
    assert sorted(p.name for p in out.iterdir()) == ["guest", "inputs", "plan.json"]


# ---------------------------------------------------------------------- no Ray
def test_engine_ray_without_ray_installed_is_one_line(tmp_path, monkeypatch):
    """Without Ray (``import ray`` fails: ``sys.modules['ray'] = None``), ``--engine ray``
    is a one-line InputError naming the extra to install, from the CLI and the API."""
    import steptrace as st
    from steptrace.errors import InputError
    from helpers.cli import assert_one_line_error
    monkeypatch.setitem(sys.modules, "ray", None)
    corpus = write_jsonl(tmp_path / "two.jsonl", TWO)
    message = "--engine ray needs Ray: pip install 'steptrace[ray]'"
    assert_one_line_error(invoke("trace", corpus, "--out", tmp_path / "cli", "--engine", "ray",
                                 "--quiet"), message)
    with pytest.raises(InputError) as caught:
        st.trace_sharded(corpus, tmp_path / "api", engine="ray")
    assert str(caught.value) == message
    # refused before planning: nothing written
    assert not (tmp_path / "cli").exists() and not (tmp_path / "api").exists()
