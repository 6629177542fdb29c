"""Bench: generate prediction tasks of every kind for the 800 CRUXEval runs.

Run: ``.venv/bin/python bench/tasks_cruxeval.py [--repeat N] [--workers N]``.

The 800 samples are traced once into a temporary DuckDB file (``trace_corpus``, fresh
instance per job) and analysed once (``analyse_store``: the condition outcomes that
``branch`` tasks need), both timed but not part of the task figure. Each repeat then
copies that store and times one ``generate_tasks`` call with every kind, three questions
per kind and run, writing the JSONL and Parquet files: loading steps/states/branches in
bulk, building and selecting the questions, rendering the prompts, upserting the tasks
table and writing both files. The median of ``--repeat`` runs is reported; figures go
to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from steptrace.tracing._analysis import AnalysisOptions, analyse_store  # noqa: E402
from steptrace.tasks import KINDS, TaskOptions, generate_tasks  # noqa: E402
from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402

CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
PHASES = ("load", "generate", "store", "total")


def prepare_store(corpus: Path, db: Path, workers: int) -> tuple[float, float]:
    """Trace and analyse the corpus; seconds of each."""
    started = time.perf_counter()
    summary = trace_corpus(corpus, db, TraceOptions(workers=workers))
    traced = time.perf_counter() - started
    if summary.traced != 800 and corpus == CRUXEVAL:
        raise SystemExit(f"expected 800 traced runs, got {summary.traced}")
    started = time.perf_counter()
    analyse_store(db, AnalysisOptions(workers=workers))
    return traced, time.perf_counter() - started


def one_generation(source: Path, tmp: Path, index: int, per_run: int, seed: int):
    db = tmp / f"tasks_{index}.duckdb"
    shutil.copyfile(source, db)
    summary = generate_tasks(db, TaskOptions(per_run=per_run, seed=seed,
                                             out=tmp / f"tasks_{index}.jsonl"))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CRUXEVAL)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--per-run", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "crux.duckdb"
        traced_s, analysed_s = prepare_store(args.corpus, source, args.workers)
        summaries = [one_generation(source, tmp, i, args.per_run, args.seed)
                     for i in range(args.repeat)]
        jsonl_bytes = (tmp / "tasks_0.jsonl").stat().st_size
        parquet_bytes = (tmp / "tasks_0.parquet").stat().st_size

    last = summaries[-1]
    median = {phase: statistics.median(s.seconds[phase] for s in summaries) for phase in PHASES}
    print(f"cores: {os.cpu_count()}   python: {sys.version.split()[0]}   repeat: {args.repeat} "
          f"(median)   corpus: {args.corpus.name}   runs: {last.runs}   per run: {args.per_run}")
    print(f"setup (not in the figure): trace {traced_s:.1f} s, analyse {analysed_s:.1f} s "
          f"({args.workers} workers)")
    print(f"{'kind':<15} {'tasks':>7} {'runs':>6}")
    print("-" * 30)
    for kind, tasks, runs in last.rows():
        print(f"{kind:<15} {tasks:>7} {runs:>6}")
    print(f"task generation, all {len(KINDS)} kinds: "
          + ", ".join(f"{phase} {median[phase]:.2f} s" for phase in PHASES)
          + f"   ({last.total / median['total']:.0f} tasks/s, "
            f"{last.runs / median['total']:.0f} runs/s)")
    print(f"files: JSONL {jsonl_bytes / 1e6:.1f} MB, Parquet {parquet_bytes / 1e6:.1f} MB")
    print(json.dumps({"tasks": last.total, "runs": last.runs,
                      **{f"{phase}_s": round(median[phase], 3) for phase in PHASES}}))


if __name__ == "__main__":
    main()
