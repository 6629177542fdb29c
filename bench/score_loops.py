"""Bench: proved infinite loops (status ``loops``), detection on and off in one run.

Run: ``.venv/bin/python bench/score_loops.py [--repeat N] [--workers 2]``.

1. ``score-cruxeval`` on 800 × 10 input-prediction generations with a realistic share of
   looping candidates: the mix of bench/score_cruxeval.py without its looping candidate
   (per sample 5 × the sample's own call, 3 × ``f(<output>)``, 2 × ``f(<next sample's
   input>)``), then 12 candidates (0.15%) replaced by calls that make a CRUXEval
   ``while`` loop run forever: 8 cycle through a repeated state (``CYCLIC``), 4 grow
   without bound (``GROWING``), as in the 12 that loop for good among the published Code
   Llama 7B input generations. Each figure is the whole ``score_cruxeval`` call (data,
   workers, checks). pass@1 and pass@5 must be equal with and without the detection.
2. The overhead on normal tracing: the 800 CRUXEval samples traced (``trace_corpus`` into
   a fresh store, as bench/trace_cruxeval.py does), detection on and off, alternated,
   median of ``--repeat``. Only the ratio of the two, measured in the same run, is a
   figure: the machine is shared.

Figures go to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from steptrace.scoring._cruxeval import (CHECK_TIMEOUT_S, check_program,  # noqa: E402
                                         load_samples, run_checks, score_cruxeval)
from steptrace.sandbox._limits import Limits  # noqa: E402
from steptrace.corpus._formats import load_corpus  # noqa: E402
from steptrace.sandbox._pool import prepare  # noqa: E402
from steptrace.sandbox._runtime import Sandbox  # noqa: E402
from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402

CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
LIMITS = Limits(timeout_s=CHECK_TIMEOUT_S)
# sample -> a call that makes its while loop repeat its state forever
CYCLIC = {"sample_63": "f('', '')", "sample_192": "f('', '')", "sample_210": "f(1, 1, 1)",
          "sample_309": "f('', '')", "sample_331": "f('', '')",
          "sample_567": "f('one two three four five', 0)", "sample_650": "f('', '')",
          "sample_764": 'f("", "", "")'}
# sample -> a call whose while loop grows its state without bound
GROWING = {"sample_129": "f('', '')", "sample_319": "f('', '')", "sample_580": "f('', '')",
           "sample_729": "f('', '')"}


def build_generations(samples) -> dict[str, list[str]]:
    generations = {}
    for index, sample in enumerate(samples):
        neighbour = samples[(index + 1) % len(samples)]
        other = f"f({neighbour.input})" if sample.sample_id != "sample_520" \
            else f"f({sample.output})"  # sample_520 with sample_521's input loops too
        listed = [f"f({sample.input})"] * 5 + [f"f({sample.output})"] * 3 + [other] * 2
        looping = CYCLIC.get(sample.sample_id) or GROWING.get(sample.sample_id)
        if looping is not None:
            listed[5] = looping  # one of the three f(<output>) candidates
        generations[sample.sample_id] = listed
    return generations


def score(path: Path, workers: int, loop_detection: bool) -> dict:
    generations = json.loads(path.read_text())
    started = time.perf_counter()
    result = score_cruxeval(generations, "input", CRUXEVAL, workers=workers, limits=LIMITS,
                            loop_detection=loop_detection)
    return {"seconds": time.perf_counter() - started, "checks": result.checks_run,
            "outcomes": dict(sorted(result.outcomes.items())),
            "pass_at_1": result.pass_at_1, "pass_at_5": result.pass_at_5}


def cyclic_alone(samples) -> tuple[float, list[str]]:
    """Seconds for the cyclic checks alone, one after the other in one worker; outcomes."""
    by_id = {sample.sample_id: sample for sample in samples}
    programs = [check_program(by_id[sample_id], call) for sample_id, call in CYCLIC.items()]
    run_checks(programs[:1], 1, LIMITS)  # the worker's start-up, not measured below
    started = time.perf_counter()
    outcomes = run_checks(programs, 1, LIMITS)
    return time.perf_counter() - started, outcomes


def guest_call_time(rounds: int) -> tuple[int, int]:
    """Microseconds of the guest's traced calls (``call_us``) summed over the 800 samples,
    detection on and off, each job run both ways back to back in one process (the order
    alternating), ``rounds`` times: the tracer's own cost, without workers or the store."""
    requests = [job.request() for job in load_corpus(CRUXEVAL).jobs]
    totals = {True: 0, False: 0}
    with Sandbox(Limits()) as sandbox:
        for round_ in range(rounds):
            for index, request in enumerate(requests):
                order = (True, False) if (index + round_) % 2 == 0 else (False, True)
                for on in order:
                    result = sandbox.run({**request, "loops": on}, "job").result
                    totals[on] += result.get("call_us") or 0
    return totals[True], totals[False]


def trace(workers: int, loop_detection: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        summary = trace_corpus(CRUXEVAL, Path(tmp) / "bench.duckdb",
                               TraceOptions(workers=workers, loop_detection=loop_detection))
        return {"seconds": time.perf_counter() - started,
                "by_status": dict(sorted(summary.by_status.items())),
                "steps": summary.steps}


def _listed(runs: list[dict]) -> str:
    return ", ".join(f"{run['seconds']:.2f}" for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="scoring runs per setting")
    parser.add_argument("--trace-repeat", type=int, default=3, help="tracing runs per setting")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    prepare(LIMITS)
    load_before = os.getloadavg()[0]
    samples = load_samples(CRUXEVAL)
    scored = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "generations.json"
        path.write_text(json.dumps(build_generations(samples)))
        for _ in range(args.repeat):
            for on in (True, False):
                scored[on].append(score(path, args.workers, on))
    alone_s, alone = cyclic_alone(samples)
    traced = {True: [], False: []}
    for index in range(args.trace_repeat):
        for on in ((True, False) if index % 2 == 0 else (False, True)):
            traced[on].append(trace(args.workers, on))

    print(f"machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}, {args.workers} workers; load average "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after (shared cores)")
    candidates = 10 * len(samples)
    looping = len(CYCLIC) + len(GROWING)
    print(f"generations: {len(samples)} x 10 = {candidates} candidates, {looping} looping "
          f"({looping / candidates:.2%}: {len(CYCLIC)} cyclic, {len(GROWING)} growing)")
    for on in (True, False):
        runs = scored[on]
        seconds = statistics.median(r["seconds"] for r in runs)
        first = runs[0]
        print(f"score, loop detection {'on ' if on else 'off'}: {seconds:6.2f} s "
              f"(runs: {_listed(runs)}), "
              f"{first['checks']} checks, pass@1 {first['pass_at_1']:.4f}, "
              f"pass@5 {first['pass_at_5']:.4f}, outcomes {first['outcomes']}")
    same = all((r["pass_at_1"], r["pass_at_5"]) == (scored[False][0]["pass_at_1"],
                                                   scored[False][0]["pass_at_5"])
               for r in scored[True] + scored[False])
    on_s = statistics.median(r["seconds"] for r in scored[True])
    off_s = statistics.median(r["seconds"] for r in scored[False])
    print(f"pass@1 and pass@5 equal on and off: {same}; off / on: {off_s / on_s:.2f}x")
    print(f"the {len(CYCLIC)} cyclic checks alone, one worker (its start-up included): "
          f"{alone_s:.2f} s, {alone_s / len(CYCLIC) * 1000:.0f} ms each; outcomes {alone}")
    for on in (True, False):
        runs = traced[on]
        print(f"trace 800 CRUXEval samples, loop detection {'on ' if on else 'off'}: "
              f"{statistics.median(r['seconds'] for r in runs):6.2f} s "
              f"(runs: {_listed(runs)}), "
              f"statuses {runs[0]['by_status']}, steps {runs[0]['steps']}")
    ratio = (statistics.median(r["seconds"] for r in traced[True])
             / statistics.median(r["seconds"] for r in traced[False]))
    print(f"tracing overhead of the detection (on / off, same run): {ratio:.3f}x")
    on_us, off_us = guest_call_time(args.trace_repeat)
    print(f"guest traced-call time over the 800 samples x {args.trace_repeat}, each job on "
          f"and off back to back: on {on_us / 1000:.1f} ms, off {off_us / 1000:.1f} ms, "
          f"on / off {on_us / off_us:.3f}x")


if __name__ == "__main__":
    main()
