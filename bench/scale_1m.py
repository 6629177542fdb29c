"""Bench: 1,000,000 synthetic runs traced into one DuckDB file, then every named query
over the store and over its Parquet export, and ``features``.

Run: ``.venv/bin/python bench/scale_1m.py --dir /tmp/scale [--n 1000000] [--seed 0]
[--workers 2] [--phase all|trace|queries]``.

1. ``write_synth`` writes N programs (seed 0) to DIR/synth.jsonl;
2. ``trace_corpus(..., TraceOptions(workers=2, isolation="batch"))`` traces them into a
   fresh DIR/scale.duckdb, as ``steptrace trace --isolation batch`` does. A thread samples
   the resident set (VmRSS) of this process and of every child every 0.5 s: the peak of
   their sum is the figure for "peak RSS while tracing"; the host's and the largest
   worker's own peaks (getrusage) are printed too;
3. ``export_parquet`` writes DIR/scale_pq;
4. ``--phase tasks`` (after ``trace``, before ``queries``; part of ``all``) gives the
   accuracy queries something to read: ``generate_tasks`` makes output, input and steps
   tasks (one of each per run, 3,000,000), then **synthetic** predictions and scores
   are inserted by SQL for two models (one sample per task; ``correct`` drawn from a
   hash of task and model, 60% and 45%): no model is asked, the point is the size of
   the tables the queries read. The analysis (branch outcomes) is not run: at ~160
   runs/s it would take ~2 hours, so ``branch_balance`` reads an empty table;
5. every named query runs on the store and on the export, each run on a fresh
   connection (``run_query``), three times; the median is printed with the row count;
6. ``run_features`` runs in a child process (bench/features_bench.py's helper).

``--phase queries`` skips 1-4 and reuses DIR's store (to time the queries again on a
quiet machine). Figures go to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from steptrace.analytics._export import export_parquet  # noqa: E402
from steptrace.predictions._experiments import PREDICTIONS_DDL, SCORES_DDL  # noqa: E402
from steptrace.store._store import connect  # noqa: E402
from steptrace.tasks._tasks import TaskOptions, generate_tasks  # noqa: E402
from steptrace.analytics._queries import load_queries, run_query  # noqa: E402
from steptrace.store._store import StoreError  # noqa: E402
from steptrace.benchmark._synth import write_synth  # noqa: E402
from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402
from features_bench import features_in_child  # noqa: E402

QUERY_TARGET_S, FEATURES_TARGET_S = 2.0, 60.0
RSS_TARGET_MB = 2048  # the process tree while tracing: issue 37 (issue 19 asked for 4,096)


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as found:
            return [int(child) for child in found.read().split()]
    except OSError:
        return []


class TreeRss(threading.Thread):
    """Peak of the summed VmRSS of this process and its descendants, sampled."""

    def __init__(self, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.every_s = every_s
        self.peak_mb = 0.0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.every_s):
            pids, total = [os.getpid()], 0
            while pids:
                pid = pids.pop()
                total += _rss_kb(pid)
                pids += _children(pid)
            self.peak_mb = max(self.peak_mb, total / 1024)

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.peak_mb


def trace_phase(n: int, seed: int, workers: int, directory: Path) -> None:
    corpus, db = directory / "synth.jsonl", directory / "scale.duckdb"
    for stale in (db, Path(f"{db}.wal")):
        stale.unlink(missing_ok=True)
    synth = write_synth(corpus, n, seed)
    print(f"synth: {n:,} programs in {synth.seconds:.1f} s, "
          f"{corpus.stat().st_size / 2**20:.0f} MB", flush=True)
    sampler = TreeRss()
    sampler.start()
    started = time.perf_counter()
    traced = trace_corpus(corpus, db, TraceOptions(workers=workers, isolation="batch"))
    seconds = time.perf_counter() - started
    tree_mb = sampler.stop()
    host_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"trace (batch isolation, {workers} workers): {traced.traced:,} runs in "
          f"{seconds:.0f} s ({traced.traced / seconds:,.0f} runs/s), statuses "
          f"{dict(traced.by_status)}, {traced.line_steps:,} line steps, {traced.steps:,} steps")
    print(f"  DB {db.stat().st_size / 2**30:.2f} GiB; peak RSS: process tree {tree_mb:,.0f} MB "
          f"(target {RSS_TARGET_MB:,} MB: {'met' if tree_mb <= RSS_TARGET_MB else 'NOT met'}), "
          f"host {host_mb:,.0f} MB, largest worker {worker_mb:,.0f} MB", flush=True)


SYNTHETIC_PREDICTIONS = """
INSERT INTO predictions (task_id, model, label, sample_index, kind, raw_text, answer, parsed,
                         prompt_tokens, completion_tokens, latency_ms, error, finish_reason,
                         created_at)
SELECT task_id, m.model, 'synthetic', 0, kind, '[ANSWER] x [/ANSWER]', 'x', true, 100, 8, 1.0, NULL,
       'stop', now()::TIMESTAMP
FROM tasks, (VALUES ('model-a'), ('model-b')) m(model)
"""
SYNTHETIC_SCORES = """
INSERT INTO scores
SELECT task_id, model, label, sample_index, kind, true,
       hash(task_id || model) % 100 < CASE model WHEN 'model-a' THEN 60 ELSE 45 END,
       NULL, NULL, now()::TIMESTAMP
FROM predictions
"""


def tasks_phase(directory: Path) -> None:
    db = directory / "scale.duckdb"
    started = time.perf_counter()
    summary = generate_tasks(db, TaskOptions(kinds=("output", "input", "steps"), per_run=1))
    print(f"tasks: {sum(summary.by_kind.values()):,} in {time.perf_counter() - started:.0f} s",
          flush=True)
    con = connect(db)
    try:
        started = time.perf_counter()
        con.execute(PREDICTIONS_DDL)
        con.execute(SCORES_DDL)
        con.execute(SYNTHETIC_PREDICTIONS)
        con.execute(SYNTHETIC_SCORES)
        counts = [con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                  for t in ("predictions", "scores")]
    finally:
        con.close()
    print(f"synthetic predictions {counts[0]:,} and scores {counts[1]:,} "
          f"(SQL, no model asked) in {time.perf_counter() - started:.0f} s", flush=True)


def _time_query(name: str, where: dict) -> tuple[float, int] | str:
    seconds = []
    rows = 0
    for _ in range(3):
        started = time.perf_counter()
        try:
            result = run_query(name, **where)
        except StoreError as exc:
            return str(exc)
        seconds.append(time.perf_counter() - started)
        rows = len(result.rows)
    return statistics.median(seconds), rows


def queries_phase(directory: Path) -> None:
    db, parquet = directory / "scale.duckdb", directory / "scale_pq"
    started = time.perf_counter()
    exported = export_parquet(db, parquet, force=True)
    size = sum(f.stat().st_size for f in parquet.rglob("*.parquet"))
    print(f"export: {time.perf_counter() - started:.1f} s, {size / 2**30:.2f} GiB, "
          f"{len(exported.as_rows())} tables", flush=True)
    print(f"load average before the queries: {os.getloadavg()[0]:.2f}")
    print(f"{'query':24} {'DB s':>8} {'Parquet s':>10} {'rows':>8}")
    worst = 0.0
    for name in sorted(load_queries()):
        on_db = _time_query(name, {"db": db})
        on_parquet = _time_query(name, {"parquet": parquet})
        if isinstance(on_db, str):
            print(f"{name:24} not applicable: {on_db}")
            continue
        worst = max(worst, on_db[0], on_parquet[0])
        print(f"{name:24} {on_db[0]:8.2f} {on_parquet[0]:10.2f} {on_db[1]:8,}", flush=True)
    print(f"slowest query: {worst:.2f} s (target {QUERY_TARGET_S:g} s each: "
          f"{'met' if worst <= QUERY_TARGET_S else 'NOT met'})")
    features = features_in_child(db, cold_jit=False)
    print(f"features: {features['seconds']['total']:.1f} s in run_features "
          f"({features['wall']:.1f} s with imports), {features['runs']:,} runs, peak RSS "
          f"{features['peak_rss_mb']:,.0f} MB (target {FEATURES_TARGET_S:g} s: "
          f"{'met' if features['seconds']['total'] <= FEATURES_TARGET_S else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="Where corpus, DB, export go.")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--phase", choices=("all", "trace", "tasks", "queries"), default="all")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"cores: {os.cpu_count()}   python: {sys.version.split()[0]}   n: {args.n:,}", flush=True)
    if args.phase in ("all", "trace"):
        trace_phase(args.n, args.seed, args.workers, args.dir)
    if args.phase in ("all", "tasks"):
        tasks_phase(args.dir)
    if args.phase in ("all", "queries"):
        queries_phase(args.dir)


if __name__ == "__main__":
    main()
