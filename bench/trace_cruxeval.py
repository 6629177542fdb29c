"""Bench: trace the 800 CRUXEval samples end to end, in both isolation modes, vs. native.

Run: ``make bench`` (or ``.venv/bin/python bench/trace_cruxeval.py [--repeat N]``).

Each traced figure is a whole ``trace_corpus`` call into a fresh DuckDB file with a warm
component cache: corpus loading, worker start-up, sandboxed tracing, and the Arrow bulk
load. The baseline runs the same 800 calls natively in this Python (compile, exec,
call, compare with the expected output) with no sandbox and no tracing. The median of
``--repeat`` runs is reported. Figures go to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from steptrace.corpus._formats import load_corpus  # noqa: E402
from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402
from steptrace.sandbox._limits import Limits  # noqa: E402
from steptrace.sandbox._pool import prepare  # noqa: E402
from steptrace.sandbox._runtime import Sandbox  # noqa: E402

CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"


def native_baseline(path: Path) -> tuple[float, int]:
    """Seconds to run every sample natively (no sandbox, no tracer); samples matching."""
    jobs = load_corpus(path).jobs
    started = time.perf_counter()
    matched = 0
    for job in jobs:
        namespace: dict = {}
        exec(compile(job.program.code, "<program>", "exec"), namespace)
        args, kwargs = eval(f"(lambda *a, **k: (a, k))({job.input}\n)", namespace)
        value = namespace[job.program.entry](*args, **kwargs)
        matched += bool(value == eval(job.expected, namespace))
    return time.perf_counter() - started, matched


def traced(path: Path, isolation: str, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        summary = trace_corpus(path, Path(tmp) / "bench.duckdb",
                               TraceOptions(workers=workers, isolation=isolation))
    return summary.as_dict()


def warm_start() -> tuple[float, str]:
    """Seconds to start one Sandbox, and how it resets a freed instance's memory."""
    started = time.perf_counter()
    sandbox = Sandbox(Limits())
    sandbox.close()
    return time.perf_counter() - started, sandbox.memory_reset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CRUXEVAL)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    prepare(Limits())  # build/compile the component once; every figure below is warm
    native_s = []
    for _ in range(args.repeat):
        seconds, matched = native_baseline(args.corpus)
        native_s.append(seconds)
    native = statistics.median(native_s)
    rows = [("native (no sandbox, no tracing)", native, 800, matched, 0)]
    for isolation in ("job", "batch"):
        runs = [traced(args.corpus, isolation, args.workers) for _ in range(args.repeat)]
        seconds = statistics.median(r["seconds"] for r in runs)
        last = runs[-1]
        rows.append((f"traced, {isolation} isolation, {args.workers} workers", seconds,
                     last["traced"], last["matched"], last["line_steps"]))

    print(f"cores: {os.cpu_count()}   python: {sys.version.split()[0]}   "
          f"repeat: {args.repeat} (median)   corpus: {args.corpus.name}")
    seconds, reset = warm_start()
    print(f"warm start of one Sandbox (deserialise the cached component): {seconds:.3f} s; "
          f"memory reset at teardown: {reset}")
    header = f"{'mode':<40} {'wall s':>8} {'runs/s':>9} {'line steps/s':>13} {'vs native':>10} {'matched':>8}"
    print(header)
    print("-" * len(header))
    for name, seconds, runs, matched_runs, steps in rows:
        print(f"{name:<40} {seconds:>8.3f} {runs / seconds:>9.0f} {steps / seconds:>13.0f} "
              f"{seconds / native:>9.0f}x {matched_runs:>8}")
    job_s, batch_s = rows[1][1], rows[2][1]
    print(f"job / batch isolation: {job_s / batch_s:.2f}x")
    print(json.dumps({"native_s": native, "job_s": job_s, "batch_s": batch_s}))


if __name__ == "__main__":
    main()
