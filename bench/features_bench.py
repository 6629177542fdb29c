"""Bench: synthetic corpus → batch-isolation tracing → ``steptrace features``.

Run: ``.venv/bin/python bench/features_bench.py [--n 100000] [--seed 0] [--workers 2]
[--dir DIR] [--cold-jit]``.

1. ``write_synth`` writes N programs (programs/s);
2. ``trace_corpus`` traces them into a fresh DuckDB file with ``--isolation batch``
   (runs/s, as ``steptrace trace`` would);
3. with ``--analyse``, ``analyse_store`` records the condition outcomes (so that
   branch entropy has data);
4. with ``--replicate K``, the store's programs, runs, steps, analyses and branches
   are copied K - 1 more times under new ids (states are not copied: features do not
   read them), giving a store of N x K real traces without tracing them all;
5. ``run_features`` runs in a child process (so its peak RSS is its own), with the
   numba cache warm unless ``--cold-jit`` (which points numba at an empty cache
   directory to measure the first-call compile).

Synth and tracing figures for 1,000,000 programs are extrapolated linearly from N and
printed as such; the features figure is measured on N x K runs and extrapolated only
if N x K is below 1,000,000. Figures go to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from steptrace.tracing._analysis import AnalysisOptions, analyse_store  # noqa: E402
from steptrace.benchmark._synth import write_synth  # noqa: E402
from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402

MILLION = 1_000_000
CHILD = """
import json, resource, sys, time
started = time.perf_counter()
from steptrace.analytics._features import run_features
summary = run_features(sys.argv[1])
print(json.dumps({"wall": time.perf_counter() - started, "seconds": summary.seconds,
                  "runs": summary.runs, "line_steps": summary.line_steps,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def features_in_child(db: Path, cold_jit: bool) -> dict:
    """``run_features`` in a fresh interpreter: its timings and its own peak RSS."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        if cold_jit:
            env["NUMBA_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, "-c", CHILD, str(db)], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


REPLICATED = {
    "programs": "program_id + c * {P}, source, sample_id || '#' || c, code, entry, "
                "code_sha256, program_key || '#' || c",
    "runs": "* EXCLUDE (c) REPLACE (run_id + c * {R} AS run_id, program_id + c * {P} AS program_id, "
            "run_key || '#' || c AS run_key)",
    "steps": "* EXCLUDE (c) REPLACE (run_id + c * {R} AS run_id)",
    "analyses": "* EXCLUDE (c) REPLACE (run_id + c * {R} AS run_id)",
    "branches": "* EXCLUDE (c) REPLACE (run_id + c * {R} AS run_id)",
}


def replicate(db: Path, copies: int) -> float:
    """Copy every run (with its program, steps, analysis, branches) ``copies - 1`` more
    times under new ids, in run order; seconds taken."""
    started = time.perf_counter()
    con = duckdb.connect(str(db))
    try:
        runs, programs = con.execute("SELECT max(run_id), max(program_id) FROM runs").fetchone()
        order = {"programs": "c, program_id", "steps": "c, run_id, step",
                 "branches": "c, run_id, line, col, evaluation"}
        for table, columns in REPLICATED.items():
            con.execute(f"INSERT INTO {table} SELECT {columns.format(R=runs, P=programs)} "
                        f"FROM {table}, range(1, {copies}) AS t(c) "
                        f"ORDER BY {order.get(table, 'c, run_id')}")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return time.perf_counter() - started


def bench(n: int, seed: int, workers: int, directory: Path, cold_jit: bool, analyse: bool,
          copies: int) -> dict:
    corpus, db = directory / "synth.jsonl", directory / "synth.duckdb"
    synth = write_synth(corpus, n, seed)
    traced = trace_corpus(corpus, db, TraceOptions(workers=workers, isolation="batch"))
    trace_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    traced_mb = db.stat().st_size / 2**20
    analysed = analyse_store(db, AnalysisOptions(workers=workers)) if analyse else None
    replicated = replicate(db, copies) if copies > 1 else 0.0
    features = features_in_child(db, cold_jit=False)
    cold = features_in_child(db, cold_jit=True) if cold_jit else None
    return {"n": n, "seed": seed, "synth": synth, "traced": traced, "trace_rss": trace_rss,
            "workers_rss": workers_rss, "analysed": analysed, "copies": copies,
            "replicated_s": replicated, "features": features, "cold": cold,
            "traced_mb": traced_mb, "db_mb": db.stat().st_size / 2**20, "corpus_mb": corpus.stat().st_size / 2**20}


def report(r: dict) -> str:
    n, synth, traced, feats = r["n"], r["synth"], r["traced"], r["features"]
    seconds = feats["seconds"]
    scalable = seconds["total"] - seconds["jit or cache load"]
    scale = MILLION / n
    feature_scale = MILLION / feats["runs"]
    lines = [
        f"programs: {n:,}, seed {r['seed']}",
        f"synth: {synth.seconds:.2f} s, {synth.programs_per_second:,.0f} programs/s, "
        f"{r['corpus_mb']:.1f} MB",
        f"trace (batch isolation): {traced.seconds:.1f} s, {traced.runs_per_second:,.0f} runs/s, "
        f"statuses {dict(traced.by_status)}, {traced.steps:,} steps, DB {r['traced_mb']:.0f} MB",
        f"  peak RSS: host process {r['trace_rss']:.0f} MB, largest worker {r['workers_rss']:.0f} MB",
    ]
    if r["analysed"]:
        lines.append(f"analyse: {r['analysed'].seconds:.1f} s, {r['analysed'].analysed:,} runs")
    if r["copies"] > 1:
        lines.append(f"replicated x{r['copies']} in {r['replicated_s']:.0f} s: "
                     f"{n * r['copies']:,} runs, DB {r['db_mb']:.0f} MB")
    lines += [
        f"features: {seconds['total']:.2f} s in run_features ({feats['wall']:.2f} s with imports), "
        f"{feats['runs']:,} runs, {feats['line_steps']:,} line steps, "
        f"peak RSS {feats['peak_rss_mb']:.0f} MB",
        "  " + ", ".join(f"{stage} {value:.2f} s" for stage, value in seconds.items()
                         if stage != "total"),
    ]
    if r["cold"]:
        lines.append(f"  first call with an empty numba cache (compile): "
                     f"{r['cold']['seconds']['jit or cache load']:.1f} s")
    lines.append(f"extrapolated linearly to {MILLION:,} programs (not measured): "
                 f"synth {synth.seconds * scale:.0f} s, trace {traced.seconds * scale / 60:.0f} min")
    if feats["runs"] < MILLION:
        lines.append(f"features extrapolated linearly to {MILLION:,} runs (not measured): "
                     f"{scalable * feature_scale + seconds['jit or cache load']:.0f} s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", type=Path, help="Keep the corpus and DB here.")
    parser.add_argument("--cold-jit", action="store_true",
                        help="Also time features with an empty numba cache.")
    parser.add_argument("--analyse", action="store_true",
                        help="Analyse the runs (branch outcomes) before features.")
    parser.add_argument("--replicate", type=int, default=1, metavar="K",
                        help="Copy the traced runs to K times as many before features.")
    args = parser.parse_args()
    if args.dir:
        args.dir.mkdir(parents=True, exist_ok=True)
        for name in ("synth.duckdb", "synth.duckdb.wal"):
            (args.dir / name).unlink(missing_ok=True)
        print(report(bench(args.n, args.seed, args.workers, args.dir, args.cold_jit,
                           args.analyse, args.replicate)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(report(bench(args.n, args.seed, args.workers, Path(tmp), args.cold_jit,
                           args.analyse, args.replicate)))


if __name__ == "__main__":
    main()
