"""Bench: the cost of object tracing (objects, attributes, global states) on CRUXEval and
on a class-heavy corpus, against a checkout without it.

Run: ``.venv/bin/python bench/trace_objects.py --baseline /work/i19-base [--rounds 5]``,
where the baseline is a checkout (a git worktree) of the code before, with its own
``.venv`` (``python3 -m venv .venv && .venv/bin/pip install -e .``).

Each measurement is a fresh process of that checkout's Python tracing the corpus into a
fresh DuckDB file with ``trace_corpus`` (2 workers, both isolation modes), after a warm-up
trace that builds and caches the component (each checkout keys its own). Rounds alternate
the two checkouts so that load drifts hit both alike. Two figures per corpus and mode:
the wall time of the whole trace (what a user waits for), and the sum of ``call_us``
over the runs (the guest's time in the traced calls alone: where the tracer's own cost
is, without the sandbox's fixed cost per job). Medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"


def measure(corpus: Path, isolation: str, workers: int) -> dict:
    """In the checkout's own process: one trace, its wall time and guest call time."""
    import duckdb
    from steptrace.tracing._trace import TraceOptions, trace_corpus
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        started = time.perf_counter()
        trace_corpus(corpus, db, TraceOptions(workers=workers, isolation=isolation))
        seconds = time.perf_counter() - started
        with duckdb.connect(str(db), read_only=True) as con:
            call_us, runs, ok = con.execute(
                "SELECT sum(call_us), count(*), count(*) FILTER (status = 'ok') FROM runs"
            ).fetchone()
    return {"seconds": seconds, "call_us": call_us, "runs": runs, "ok": ok}


def run_in(checkout: Path, corpus: Path, isolation: str, workers: int) -> dict:
    python = checkout / ".venv" / "bin" / "python"
    done = subprocess.run([str(python), str(Path(__file__).resolve()), "--measure", str(corpus),
                           "--isolation", isolation, "--workers", str(workers)],
                          cwd=checkout, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the code before")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--isolation", default="job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.isolation, args.workers)))
        return
    if args.baseline is None:
        parser.error("--baseline CHECKOUT is required")
    sys.path.insert(0, str(ROOT / "bench"))
    import oop_corpus
    with tempfile.TemporaryDirectory() as tmp:
        oop = oop_corpus.write(Path(tmp) / "oop.jsonl")
        corpora = {"cruxeval": CRUXEVAL, "oop (200 class programs)": oop}
        checkouts = {"before": args.baseline.resolve(), "after": ROOT}
        for checkout in checkouts.values():  # build and cache each component, warm up
            run_in(checkout, oop, "job", args.workers)
        results: dict = {}
        for _ in range(args.rounds):
            for corpus_name, corpus in corpora.items():
                for isolation in ("job", "batch"):
                    for name, checkout in checkouts.items():
                        found = run_in(checkout, corpus, isolation, args.workers)
                        results.setdefault((corpus_name, isolation, name), []).append(found)
    print(f"cores: {os.cpu_count()}, load: {os.getloadavg()[0]:.2f}, rounds: {args.rounds}, "
          f"workers: {args.workers}")
    print(f"{'corpus':<26} {'mode':<6} {'wall before':>11} {'after':>8} {'change':>7}   "
          f"{'call_us before':>14} {'after':>10} {'change':>7}")
    for corpus_name in corpora:
        for isolation in ("job", "batch"):
            before = results[(corpus_name, isolation, "before")]
            after = results[(corpus_name, isolation, "after")]
            wall = [statistics.median(r["seconds"] for r in rows) for rows in (before, after)]
            call = [statistics.median(r["call_us"] for r in rows) for rows in (before, after)]
            ok = {r["ok"] for r in before + after}
            print(f"{corpus_name:<26} {isolation:<6} {wall[0]:>10.3f}s {wall[1]:>7.3f}s "
                  f"{(wall[1] / wall[0] - 1) * 100:>+6.1f}%   {call[0] / 1e6:>13.3f}s "
                  f"{call[1] / 1e6:>9.3f}s {(call[1] / call[0] - 1) * 100:>+6.1f}%   ok {ok}")


if __name__ == "__main__":
    main()
