"""Bench: the CPU time (user + system, every thread of the process) of tracing the 800
CRUXEval samples in one ``Sandbox``, in one isolation mode.

Run: ``.venv/bin/python bench/trace_cpu.py job|batch``; prints one JSON line. CPU time is
steadier than wall time on a shared, loaded machine, and counts what the sandbox's own
threads (the epoch ticker, wasmtime's) spend too. Compare two checkouts by running it
from each, rounds alternating (bench/README.md, "The job's file system").
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
WARM_UP = 50


def main(isolation: str) -> None:
    from steptrace.corpus._formats import load_corpus
    from steptrace.sandbox._limits import Limits
    from steptrace.sandbox._pool import prepare
    from steptrace.sandbox._runtime import Sandbox
    requests = [job.request() for job in load_corpus(CRUXEVAL).jobs]
    limits = Limits()
    with Sandbox(limits, prepare(limits)) as sandbox:
        for request in requests[:WARM_UP]:
            sandbox.run(request, isolation)
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        ok = sum(sandbox.run(request, isolation).result["status"] == "ok"
                 for request in requests)
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"isolation": isolation, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                      "ok": ok}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "job")
