"""Sharded traces on this machine's worker pool (engine/sharding/_run.py, _shard.py), and
``import_shards`` (engine/sharding/_store.py): the shards hold what ``trace --db`` stores,
row for row (helpers.shards.assert_same_trace: ids and timings aside), on the mixed corpus
of every program shape and on the 800 CRUXEval samples; a re-run resumes without tracing a
done shard again; a shard retried (a dead worker's leftovers, two workers finishing the
same shard) is stored once; ``run_one`` runs shards one at a time; a guest that is not
the plan's is refused; ``import`` loads a directory into a store.

Everything runs the real sandbox (two worker processes at most) into real Parquet and
DuckDB files.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from steptrace.errors import InputError
from steptrace.sandbox._build import artifacts, cache_key, file_digest, write_verified
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._pool import WorkerPool
from steptrace.sandbox._runtime import wasm_stack_bytes
from steptrace.sharding._plan import MANIFEST, GuestMismatchError, guest_path, read_plan
from steptrace.sharding._run import ShardOptions, run_one, trace_shards
from steptrace.sharding._shard import (THIS_MACHINE, TRUSTED, describe_guest, plan_guest,
                                       read_done, run_shard)
from steptrace.sharding._store import import_shards
from steptrace.store._store import SCHEMA_VERSION, connect
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.processes import assert_store_whole
from helpers.sample_corpus import RECORDS
from helpers.shard_corpus import (MAX_STEPS, MIXED, files_of, trace_both, write_jsonl,
                                  write_mixed)
from helpers.reproduce import assert_identical, differing_columns
from helpers.shards import assert_same_trace, trace_tables

LIMITS = Limits(max_steps=MAX_STEPS)
# (run id, sample, input index, status) of the mixed corpus's runs, in the plan's order
MIXED_RUNS = [
    (1, "add", 0, "ok"), (2, "sq", 0, "ok"), (3, "sq", 1, "ok"), (4, "boom", 0, "exception"),
    (5, "neg", 0, "ok"), (6, "loop", 0, "ok"), (7, "stack", 0, "ok"), (8, "stack", 1, "ok"),
    (9, "peek", 0, "invalid"), (10, "script", 0, "ok"), (11, "script", 1, "ok"),
    (12, "echo", 0, "ok"), (13, "calc", 0, "ok"), (14, "calc_bad", 0, "exception"),
    (15, "acc", 0, "ok"), (16, "nested", 0, "exception"), (17, "caught", 0, "ok"),
    (18, "math", 0, "ok"), (19, "syntax", 0, "invalid"), (20, "spin", 0, "step_limit")]
# rows per table of the mixed corpus's trace
MIXED_ROWS = {"programs": 17, "runs": 20, "steps": 2144, "states": 1126, "objects": 16,
              "attributes": 16, "global_states": 1, "settrace_lines": 0, "guests": 1}
SHARD_STATUSES = [{"exception": 1, "ok": 3}, {"ok": 4}, {"invalid": 1, "ok": 3},
                  {"exception": 2, "ok": 2}, {"invalid": 1, "ok": 2, "step_limit": 1}]
TIMING = ("seconds", "runs_per_second")


def sql(db: Path, query: str) -> list[tuple]:
    con = connect(db, read_only=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def without_timing(summary: dict) -> dict:
    assert all(isinstance(summary[k], float) for k in TIMING)
    return {k: v for k, v in summary.items() if k not in TIMING}


def copy_of(directory: Path, target: Path) -> Path:
    shutil.copytree(directory, target)
    return target


def one_copy_each(directory: Path) -> None:
    """Every run once in the directory's views, with its steps once."""
    assert sql(directory, "SELECT count(*), count(DISTINCT run_key), count(DISTINCT run_id) "
                          "FROM runs") == [(20, 20, 20)]
    assert sql(directory, "SELECT count(*) FROM (SELECT run_id, step FROM steps GROUP BY ALL "
                          "HAVING count(*) > 1)") == [(0,)]
    assert sql(directory, "SELECT sum(n_steps) FROM runs") == sql(directory,
                                                                  "SELECT count(*) FROM steps")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The mixed corpus traced into a store (in this process: run ids in corpus order) and
    into a shard directory (shard size 4, two workers); the summaries. Tests copy the
    directory before changing it."""
    tmp = tmp_path_factory.mktemp("mixed")
    corpus = write_mixed(tmp / "mixed.jsonl")
    traced, sharded = trace_both(corpus, tmp / "store.duckdb", tmp / "out")
    return corpus, tmp / "store.duckdb", tmp / "out", traced, sharded


# ------------------------------------------------------------------ the same as trace --db
def test_shards_hold_what_trace_stores(mixed):
    """Every table row for row as trace --db stores it (ids and timings aside), the same
    summary counts, run ids from the plan, program ids from the keys."""
    corpus, store, out, traced, sharded = mixed
    assert assert_same_trace(store, out) == MIXED_ROWS
    assert without_timing(sharded.as_dict()) == {
        "corpora": [str(corpus)], "out": str(out), "engine": "local", "jobs": 22,
        "duplicates": 2, "cross_shard_duplicates": 1, "shards": 5, "shards_done_before": 0,
        "shards_traced": 5, "runs": 20, "traced": 20,
        "by_status": {"exception": 3, "invalid": 2, "ok": 14, "step_limit": 1},
        "with_expected": 13, "matched": 11, "line_steps": 2078, "steps": 2144,
        "complete": True, "corpus_errors": [f"{corpus}:20: missing 'code'"],
        "guest": describe_guest(read_plan(out), THIS_MACHINE)}
    assert (traced.jobs, traced.duplicates, dict(traced.by_status), traced.with_expected,
            traced.matched, traced.line_steps, traced.steps, traced.corpus_errors) == (
        sharded.jobs, sharded.duplicates, dict(sharded.by_status), sharded.with_expected,
        sharded.matched, sharded.line_steps, sharded.steps, sharded.corpus_errors)
    assert sql(out, "SELECT run_id, sample_id, input_index, status FROM runs ORDER BY run_id"
               ) == MIXED_RUNS
    # in this process the store numbered its runs in corpus order too: the same ids
    assert sql(out, "SELECT run_id, run_key FROM runs ORDER BY run_id") == sql(
        store, "SELECT run_id, run_key FROM runs ORDER BY run_id")
    keys = sql(out, "SELECT program_id, program_key FROM programs")
    assert len(keys) == 17 and all(pid == int(key[:15], 16) for pid, key in keys)


def test_done_markers_and_manifest(mixed):
    """done.json says each shard's runs by status and rows per table; the manifest sums
    them (a program traced in two shards is a row in each), with the plan's counts; the
    tmp folder is gone."""
    _, _, out, _, _ = mixed
    plan = read_plan(out)
    rows = []
    for spec, statuses in zip(plan.shards, SHARD_STATUSES):
        done = read_done(out, spec.index)
        assert (done.index, done.runs, done.by_status, done.skipped) == (
            spec.index, 4, statuses, True)
        where = f"run_id BETWEEN {spec.first_run_id} AND {spec.first_run_id + 3}"
        count = {name: sql(out, f"SELECT count(*) FROM {name} WHERE {where}")[0][0]
                 for name in ("runs", "steps", "states", "objects", "attributes",
                              "global_states", "settrace_lines")}
        count["programs"] = sql(out, f"SELECT count(DISTINCT program_id) FROM runs "
                                     f"WHERE {where}")[0][0]
        assert list(done.rows) == ["runs", "steps", "states", "programs", "objects",
                                   "attributes", "global_states", "settrace_lines", "guests"]
        assert done.rows == {**count, "guests": 1}
        rows.append(done.rows)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest == {
        "format": "steptrace-shards", "version": 1, "schema_version": SCHEMA_VERSION,
        "shards": 5, "runs": 20, "by_status": {"exception": 3, "invalid": 2, "ok": 14,
                                               "step_limit": 1},
        "jobs": 22, "duplicates": 2, "cross_shard_duplicates": 1, "corpus_errors": 1,
        "tables": [{"name": name, "rows": sum(r[name] for r in rows)} for name in rows[0]]}
    assert [t["rows"] for t in manifest["tables"]] == [20, 2144, 1126, 17, 16, 16, 1, 0, 5]
    assert [r["programs"] for r in rows] == [3, 3, 3, 4, 4]
    assert sorted(p.name for p in out.iterdir()) == [
        "guest", "inputs", "plan.json", "shards", MANIFEST]


def test_several_corpora(tmp_path):
    """Two corpora into one directory: runs of both (the same record in each is two jobs:
    a program's source is its corpus), as two trace --db runs into one store."""
    first = write_mixed(tmp_path / "mixed.jsonl")
    second = write_jsonl(tmp_path / "small.jsonl", RECORDS + [RECORDS[1]])
    store = tmp_path / "store.duckdb"
    for corpus in (first, second):
        trace_corpus(corpus, store, TraceOptions(workers=0, limits=LIMITS))
    sharded = trace_shards([first, second], tmp_path / "out",
                           ShardOptions(shard_size=8, workers=2, limits=LIMITS))
    assert (sharded.jobs, sharded.duplicates, sharded.cross_shard_duplicates, sharded.shards,
            sharded.runs) == (22 + 8, 2 + 2, 1 + 2, 4, 26)
    assert assert_same_trace(store, tmp_path / "out") == {
        **MIXED_ROWS, "programs": 22, "runs": 26, "steps": 2178, "states": 1151, "objects": 18}
    assert sql(tmp_path / "out", "SELECT run_id, sample_id FROM runs WHERE run_id > 20 "
                                 "ORDER BY run_id") == [
        (21, "add"), (22, "sq"), (23, "sq"), (24, "boom"), (25, "neg"), (26, "loop")]


def test_text_that_is_not_utf8(tmp_path):
    """A job spelling a lone surrogate (its input) and a program printing one: stored as
    trace --db stores them (escaped)."""
    corpus = write_jsonl(tmp_path / "s.jsonl", [
        {"id": "s", "code": "def f(x):\n    return x\n", "input": "'\ud800'"},
        {"id": "p", "code": "def f():\n    s = chr(0xdc00)\n    print(s)\n    return s\n",
         "input": ""}])
    traced, sharded = trace_both(corpus, tmp_path / "store.duckdb", tmp_path / "out")
    assert sharded.by_status == traced.by_status
    counts = assert_same_trace(tmp_path / "store.duckdb", tmp_path / "out")
    assert (counts["runs"], counts["steps"]) == (2, traced.steps)
    assert sql(tmp_path / "out", "SELECT run_id, input, output FROM runs ORDER BY run_id") == [
        (1, "'\\ud800'", None), (2, "", "'\\udc00'")]


# ------------------------------------------------------------------ resume
def test_running_again_resumes_without_tracing_a_done_shard(mixed, tmp_path):
    """The same trace again: every shard done before, nothing traced, no file rewritten.
    With two shards lost (and the manifest): only those two are traced, the others' files
    untouched, and the directory equals the store again."""
    corpus, store, out, _, _ = mixed
    out = copy_of(out, tmp_path / "out")
    options = ShardOptions(shard_size=4, workers=2, limits=LIMITS)
    before = files_of(out)
    progress = []
    again = trace_shards([corpus], out, options, lambda done, planned: progress.append(
        (done, planned)))
    assert without_timing(again.as_dict()) | {"out": None} == {
        "corpora": [str(corpus)], "out": None, "engine": "local", "jobs": 22, "duplicates": 2,
        "cross_shard_duplicates": 1, "shards": 5, "shards_done_before": 5, "shards_traced": 0,
        "runs": 20, "traced": 0, "by_status": {}, "with_expected": 0, "matched": 0,
        "line_steps": 0, "steps": 0, "complete": True,
        "corpus_errors": [f"{corpus}:20: missing 'code'"], "guest": ""}  # no guest ran
    assert progress == [(20, 20)]
    after = files_of(out)
    assert {k: v for k, v in after.items() if k != MANIFEST} == {
        k: v for k, v in before.items() if k != MANIFEST}
    assert after[MANIFEST][1] == before[MANIFEST][1]
    for index in (1, 3):
        shutil.rmtree(out / "shards" / f"0000{index}")
    (out / MANIFEST).unlink()
    kept = {k: v for k, v in files_of(out).items() if k.startswith("shards/")}
    assert len(kept) == 3 * 10  # a Parquet file per table, and done.json
    progress.clear()
    resumed = trace_shards([corpus], out, options, lambda done, planned: progress.append(
        (done, planned)))
    assert (resumed.shards_done_before, resumed.shards_traced, resumed.traced, resumed.runs,
            dict(resumed.by_status), resumed.complete) == (
        3, 2, 8, 20, {"exception": 2, "ok": 6}, True)
    assert progress == [(12, 20), (16, 20), (20, 20)]
    after = files_of(out)
    assert {k: after[k] for k in kept} == kept
    assert assert_same_trace(store, out) == MIXED_ROWS


# ------------------------------------------------------------------ retries
def test_a_dead_workers_leftovers_are_never_read(mixed, tmp_path):
    """A worker killed mid-shard leaves a private folder under tmp/ (half-written Parquet
    files, no done marker): readers see the other shards only; the next run traces the
    shard again, stores every run once, and clears tmp/."""
    corpus, store, out, _, _ = mixed
    out = copy_of(out, tmp_path / "out")
    shutil.rmtree(out / "shards" / "00002")
    (out / MANIFEST).unlink()
    dead = out / "tmp" / "00002-k1lled"
    dead.mkdir(parents=True)
    whole = (mixed[2] / "shards" / "00002" / "runs.parquet").read_bytes()
    (dead / "runs.parquet").write_bytes(whole[: len(whole) // 2])
    shutil.copyfile(mixed[2] / "shards" / "00002" / "steps.parquet", dead / "steps.parquet")
    assert sql(out, "SELECT count(*), min(run_id), max(run_id) FROM runs") == [(16, 1, 20)]
    assert sql(out, "SELECT count(*) FROM runs WHERE run_id BETWEEN 9 AND 12") == [(0,)]
    summary = trace_shards([corpus], out, ShardOptions(shard_size=4, workers=2, limits=LIMITS))
    assert (summary.shards_done_before, summary.shards_traced, summary.traced,
            summary.complete) == (4, 1, 4, True)
    assert not (out / "tmp").exists()
    one_copy_each(out)
    assert assert_same_trace(store, out) == MIXED_ROWS


SLEEPY = "import time\n\ndef f(x):\n    time.sleep(0.2)\n    return x * 2\n"


@pytest.mark.slow  # a steptrace process started and killed, its work traced again
def test_a_driver_killed_mid_run_resumes_to_one_copy_of_each_run(tmp_path):
    """``steptrace trace --out`` killed (SIGKILL, with its worker) once its first shard is
    done: the same command again skips the done shards, traces the rest, and the
    directory holds every run once, as trace --db stores them."""
    from helpers.processes import children_of, kill_processes, wait_until_gone
    corpus = write_jsonl(tmp_path / "slow.jsonl", RECORDS[:2] + [
        {"id": f"s{n}", "code": SLEEPY, "input": str(n)} for n in range(6)])
    out = tmp_path / "out"
    driver = subprocess.Popen([sys.executable, "-m", "steptrace.cli", "trace", str(corpus),
                               "--out", str(out), "--shard-size", "2", "--workers", "1",
                               "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a verdict
        while not (out / "shards" / "00000" / "done.json").exists():
            assert driver.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        workers = children_of(driver.pid)
        driver.kill()
        kill_processes(workers)
    finally:
        driver.kill()
        driver.wait()
    assert wait_until_gone(workers) == []
    store = tmp_path / "store.duckdb"
    trace_corpus(corpus, store, TraceOptions(workers=0))
    again = trace_shards([corpus], out, ShardOptions(shard_size=2, workers=1))
    assert again.shards_done_before >= 1
    assert (again.shards_done_before + again.shards_traced, again.runs, again.complete) == (
        5, 9, True)
    assert not (out / "tmp").exists()
    assert sql(out, "SELECT count(*), count(DISTINCT run_key), min(run_id), max(run_id) "
                    "FROM runs") == [(9, 9, 1, 9)]
    assert assert_same_trace(store, out)["runs"] == 9


@pytest.fixture
def pool_for(tmp_path):
    """``pool_for(directory)``: a one-worker pool running the directory's guest."""
    pools = []

    def make(directory: Path) -> WorkerPool:
        plan = read_plan(directory)
        pool = WorkerPool(1, plan.limits, plan.isolation, artifacts=plan_guest(directory, plan).artifacts)
        pools.append(pool.__enter__())
        return pools[-1]
    yield make
    for pool in pools:
        pool.__exit__(None, None, None)


def test_a_shard_run_twice_is_stored_once(mixed, tmp_path, pool_for, monkeypatch):
    """run_shard on a done shard returns its marker (skipped) and writes nothing; a worker
    that finishes a shard another worker finished first (it found no marker when it
    began) drops its copy: one copy of every run, the first worker's files untouched."""
    import steptrace.sharding._shard as shard_module
    _, store, out, _, _ = mixed
    out = copy_of(out, tmp_path / "out")
    shutil.rmtree(out / "shards" / "00002")
    pool = pool_for(out)
    first = run_shard(out, 2, pool)
    assert (first.index, first.runs, first.by_status, first.skipped) == (
        2, 4, SHARD_STATUSES[2], False)
    landed = files_of(out / "shards")
    second = run_shard(out, 2, pool)
    assert (second.runs, second.by_status, second.rows, second.skipped) == (
        first.runs, first.by_status, first.rows, True)
    assert files_of(out / "shards") == landed
    real = shard_module.read_done
    calls = []

    def racing(directory, index):  # the first look finds no marker: the other worker's
        calls.append(index)        # rename lands while this one traces
        return None if len(calls) == 1 else real(directory, index)
    monkeypatch.setattr(shard_module, "read_done", racing)
    late = run_shard(out, 2, pool)
    assert (late.runs, late.rows, late.skipped, len(calls)) == (4, first.rows, True, 3)
    assert files_of(out / "shards") == landed
    assert list((out / "tmp").iterdir()) == []
    one_copy_each(out)
    assert assert_same_trace(store, out) == MIXED_ROWS


# ------------------------------------------------------------------ one shard at a time
def test_shards_one_at_a_time(mixed, tmp_path):
    """Plan only, then run_one per index in any order: the manifest appears with the last
    shard; a done shard is skipped; an index out of range is refused; the directory holds
    what the one-command run wrote, ids and all."""
    corpus, store, whole, _, _ = mixed
    out = tmp_path / "out"
    planned = trace_shards([corpus], out, ShardOptions(shard_size=4, limits=LIMITS,
                                                       plan_only=True))
    assert (planned.shards, planned.shards_traced, planned.runs, planned.complete) == (
        5, 0, 0, False)
    assert not (out / "shards").exists()
    assert sql(out, "SELECT count(*) FROM runs") == [(0,)]
    for number, index in enumerate((4, 0, 2, 1, 3), start=1):
        result = run_one(out, index, workers=1)
        assert (result.index, result.runs, result.by_status, result.skipped) == (
            index, 4, SHARD_STATUSES[index], False)
        assert (out / MANIFEST).exists() == (number == 5)
        assert sql(out, "SELECT count(*) FROM runs") == [(4 * number,)]
    assert run_one(out, 2).skipped is True
    with pytest.raises(InputError) as caught:
        run_one(out, 5)
    assert str(caught.value) == "shard index 5 is out of range: the plan has 5 shards (0..4)"
    assert json.loads((out / MANIFEST).read_text()) == json.loads((whole / MANIFEST).read_text())
    assert assert_same_trace(store, out) == MIXED_ROWS
    ids = ("SELECT r.run_id, r.run_key, r.program_id, p.program_key FROM runs r "
           "JOIN programs p USING (program_id) ORDER BY r.run_id")
    assert sql(out, ids) == sql(whole, ids)
    assert trace_tables(out) == trace_tables(whole)


# ------------------------------------------------------------------ the guest
@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """An empty component cache for this test (the session's is not touched)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("STEPTRACE_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def planned(tmp_path):
    """The mixed corpus planned (shard size 8), nothing traced."""
    corpus = write_mixed(tmp_path / "mixed.jsonl")
    out = tmp_path / "out"
    trace_shards([corpus], out, ShardOptions(shard_size=8, limits=LIMITS, plan_only=True))
    return corpus, out, read_plan(out)


def test_a_tampered_guest_copy_is_refused(planned, private_cache):
    """A worker without the build runs the plan's copy only if the user trusts its digest,
    and only if the copy has it: a changed copy is refused, nothing installed, no shard
    done."""
    _, out, plan = planned
    copy = guest_path(out, plan.guest)
    data = copy.read_bytes()
    copy.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    digest = file_digest(copy)
    with pytest.raises(GuestMismatchError) as caught:
        run_one(out, 0, workers=1, trust_guest=plan.guest.digest)
    assert str(caught.value) == (f"the guest component given has digest {digest[:16]}..., the "
                                 f"plan's is {plan.guest.digest[:16]}...")
    assert list(private_cache.iterdir()) == []
    assert not (out / "shards").exists()


def test_another_build_under_the_plans_key_is_not_run_untrusted(planned, private_cache):
    """A worker whose cache holds another build under the plan's key (a separate build
    draws another string-hash secret) does not take the plan's guest for its own: one
    line saying how to trust it, nothing changed."""
    _, out, plan = planned
    other = guest_path(out, plan.guest).read_bytes() + b"\0"
    found = artifacts(key=plan.guest.key)
    write_verified(found.wasm, other)
    with pytest.raises(GuestMismatchError) as caught:
        run_one(out, 0, workers=1)
    digest = file_digest(found.wasm)
    assert str(caught.value) == (
        f"the plan's guest {plan.guest.key} (sha256 {plan.guest.digest[:16]}...) is not a "
        f"build made on this machine (this machine's build of that key has sha256 "
        f"{digest[:16]}...); to run the component {guest_path(out, plan.guest)} anyway, if "
        f"you trust where it came from: --trust-guest {plan.guest.digest}")
    assert found.wasm.read_bytes() == other
    assert not (out / "shards").exists() and not (private_cache / "foreign").exists()


@pytest.mark.slow  # compiles the component (5-15 s)
def test_a_trusted_guest_runs_from_the_foreign_folder(planned, private_cache):
    """Trusted by its digest, the plan's copy runs from the cache's ``foreign/`` folder,
    named by that digest and compiled there; the build this machine keeps under the
    plan's key is left as it was, and the summary says which guest ran."""
    _, out, plan = planned
    other = guest_path(out, plan.guest).read_bytes() + b"\0"
    found = artifacts(key=plan.guest.key)
    write_verified(found.wasm, other)
    result = run_one(out, 1, workers=1, trust_guest=plan.guest.digest.upper())
    assert (result.runs, result.skipped) == (8, False)
    assert result.guest == (f"{plan.guest.key} sha256 {plan.guest.digest[:16]}... ({TRUSTED})")
    foreign = private_cache / "foreign" / f"guest-{plan.guest.digest}.wasm"
    assert file_digest(foreign) == plan.guest.digest == file_digest(guest_path(out, plan.guest))
    assert found.wasm.read_bytes() == other
    # (a stamp of a check may be there too: .checked)
    assert sorted(p.name for p in private_cache.iterdir() if p.suffix != ".checked") == [
        "foreign", found.wasm.name.replace(".wasm", ".lock"), found.wasm.name,
        found.wasm.name + ".sha256"]
    assert any(p.suffix == ".cwasm" for p in foreign.parent.iterdir())
    assert sql(out, "SELECT DISTINCT guest FROM runs") == [(cache_key(),)]
    installed = foreign.stat().st_ino
    again = run_one(out, 2, workers=1, trust_guest=plan.guest.digest)
    assert (again.runs, again.guest) == (4, result.guest)
    assert foreign.stat().st_ino == installed  # installed once, then reused


def test_another_wasm_stack_is_refused(planned):
    """A plan made where the wasm stack was another size (a higher ulimit -s) is refused
    by a worker, through run_one and through a resumed trace."""
    corpus, out, plan = planned
    path = out / "plan.json"
    data = json.loads(path.read_text())
    data["guest"]["stack_bytes"] = plan.guest.stack_bytes + 4096
    path.write_text(json.dumps(data))
    message = (f"this worker's wasm stack would be {wasm_stack_bytes():,} bytes, the plan's is "
               f"{plan.guest.stack_bytes + 4096:,} (its stack limit, ulimit -s, is lower than "
               "the planner's)")
    with pytest.raises(GuestMismatchError) as caught:
        run_one(out, 0, workers=1)
    assert str(caught.value) == message
    with pytest.raises(GuestMismatchError) as caught:
        trace_shards([corpus], out, ShardOptions(shard_size=8, workers=1, limits=LIMITS))
    assert str(caught.value) == message
    assert not (out / "shards").exists()


def test_a_worker_with_a_lower_stack_limit_is_refused(planned):
    """``steptrace trace-shard`` in a process whose stack limit (ulimit -s) is 4 MiB: its
    wasm stack would be 3 MiB, not the planner's; one line, exit status 1."""
    _, out, plan = planned
    assert plan.guest.stack_bytes > 3 << 20

    def lower_stack() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (4 << 20, resource.getrlimit(
            resource.RLIMIT_STACK)[1]))
    done = subprocess.run([sys.executable, "-m", "steptrace.cli", "trace-shard", str(out),
                           "--index", "0", "--workers", "1"], capture_output=True, text=True,
                          preexec_fn=lower_stack, timeout=120, env=os.environ.copy())
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"Error: this worker's wasm stack would be {3 << 20:,} bytes, the "
                           f"plan's is {plan.guest.stack_bytes:,} (its stack limit, ulimit -s, "
                           "is lower than the planner's)\n")


# ------------------------------------------------------------------ import
def test_import_into_a_new_store(mixed, tmp_path):
    """Into an empty store: the shards' own run ids, programs numbered by the store in
    the order of their first runs, every table as trace --db stores it, ids included
    (only the timing columns differ)."""
    _, store, out, _, _ = mixed
    db = tmp_path / "imported.duckdb"
    summary = import_shards(out, db)
    assert (summary.shards, summary.runs_in_shards, summary.already_stored, summary.imported,
            summary.programs_added) == (5, 20, 0, 20, 17)
    ids = "SELECT run_id, run_key FROM runs ORDER BY run_id"
    assert sql(db, ids) == sql(out, ids)
    assert sql(db, "SELECT min(program_id), max(program_id) FROM programs") == [(1, 17)]
    assert assert_same_trace(store, db) == MIXED_ROWS
    assert differing_columns(store, db) == {"runs": ["duration_us", "call_us", "traced_at"],
                                            "guests": ["first_used"]}
    assert assert_identical(store, db)["programs"] == 17
    assert [row[:4] for row in assert_store_whole(db)] == [
        (run_id, sample, status, output) for (run_id, sample, _, status), output in zip(
            MIXED_RUNS, [r[0] for r in sql(out, "SELECT output FROM runs ORDER BY run_id")])]


def test_import_keeps_what_the_store_holds(mixed, tmp_path):
    """Into a store holding other runs and three of the directory's: only the other 17
    are imported, numbered after the store's last run in the shards' order (the three
    do not sit where the shards' order would put them after the store's own six, so the
    rest follows the highest id: engine/store/_ids.py), programs matched by key; again:
    nothing; --force: the 20 replaced, each under the id it had. Every time, the store
    holds what trace --db of both corpora would."""
    _, _, out, _, _ = mixed
    tmp = tmp_path
    (tmp / "part").mkdir()
    part = write_jsonl(tmp / "part" / "mixed.jsonl", MIXED[6:8])  # stack (2 jobs), peek
    other = write_jsonl(tmp / "other.jsonl", RECORDS)
    db = tmp / "db.duckdb"
    reference = tmp / "reference.duckdb"
    for corpus, target in ((other, db), (part, db), (other, reference),
                           (write_mixed(tmp / "mixed.jsonl"), reference)):
        trace_corpus(corpus, target, TraceOptions(workers=0, limits=LIMITS))
    assert sql(db, "SELECT run_id, sample_id FROM runs WHERE run_id > 6 ORDER BY run_id") == [
        (7, "stack"), (8, "stack"), (9, "peek")]
    summary = import_shards(out, db)
    assert (summary.runs_in_shards, summary.already_stored, summary.imported,
            summary.programs_added) == (20, 3, 17, 15)
    shard_ids = dict(sql(out, "SELECT run_key, run_id FROM runs"))
    stored = sql(db, "SELECT run_key, run_id FROM runs WHERE run_id > 9 ORDER BY run_id")
    assert [run_id for _, run_id in stored] == list(range(10, 27))
    assert [shard_ids[key] for key, _ in stored] == [
        i for i in range(1, 21) if i not in (7, 8, 9)]
    assert sql(db, "SELECT max(program_id), count(*) FROM programs") == [(22, 22)]
    counts = {**MIXED_ROWS, "programs": 22, "runs": 26, "steps": 2178, "states": 1151,
              "objects": 18}
    assert assert_same_trace(reference, db) == counts
    again = import_shards(out, db)
    assert (again.already_stored, again.imported, again.programs_added) == (20, 0, 0)
    forced = import_shards(out, db, force=True)
    assert (forced.already_stored, forced.imported, forced.programs_added) == (0, 20, 0)
    stored = sql(db, "SELECT run_key, run_id FROM runs WHERE run_id > 6 ORDER BY run_id")
    assert [run_id for _, run_id in stored] == list(range(7, 27))
    assert [shard_ids[key] for key, _ in stored] == [7, 8, 9] + [
        i for i in range(1, 21) if i not in (7, 8, 9)]
    assert assert_same_trace(reference, db) == counts
    assert len(assert_store_whole(db)) == 26


def test_import_refuses_what_it_cannot_import(planned, mixed, tmp_path):
    """A directory without a finished shard; a shard directory as the store (itself or
    another): one line, nothing written."""
    from steptrace.errors import StoreError
    _, out, _ = planned
    with pytest.raises(StoreError) as caught:
        import_shards(out, tmp_path / "db.duckdb")
    assert str(caught.value) == f"{out} has no finished shard to import"
    assert not (tmp_path / "db.duckdb").exists()
    done = copy_of(mixed[2], tmp_path / "done")
    before = files_of(done)
    for target in (done, out):
        with pytest.raises(StoreError) as caught:
            import_shards(done, target)
        assert str(caught.value) == (f"{target} is a shard directory: import into a store "
                                     "(--db FILE)")
    assert files_of(done) == before
    assert not (out / "store.duckdb").exists()


# ------------------------------------------------------------------ CRUXEval
def test_cruxeval_shards_equal_the_store(cruxeval_db, cruxeval_path, tmp_path):
    """The 800 samples in shards of 100 (two workers): every table as trace --db stored
    it; imported into a new store, the same again, with the shards' run ids."""
    out = tmp_path / "crux"
    summary = trace_shards([cruxeval_path], out, ShardOptions(shard_size=100, workers=2))
    assert (summary.jobs, summary.duplicates, summary.shards, summary.traced,
            summary.complete) == (800, 0, 8, 800, True)
    counts = assert_same_trace(cruxeval_db, out)
    assert (counts["runs"], counts["programs"]) == (800, 800)
    db = tmp_path / "crux.duckdb"
    assert import_shards(out, db).imported == 800
    assert assert_same_trace(cruxeval_db, db) == counts
    ids = "SELECT run_id, run_key FROM runs ORDER BY run_id"
    assert sql(db, ids) == sql(out, ids)
    assert [i for (i,) in sql(out, "SELECT run_id FROM runs ORDER BY run_id")] == list(
        range(1, 801))
