"""Bench: score 800 × 10 CRUXEval input-prediction generations end to end, every candidate
checked in a fresh sandbox instance, against one fresh ``python`` process per candidate.

Run: ``.venv/bin/python bench/score_cruxeval.py [--repeat N] [--workers 2]``.

The generations are built deterministically from the data, per sample (10 candidates,
3 distinct, about what a model sampled at temperature 0.2 gives: the official repository's
Code Llama 7B input generations have 3.0 distinct strings per 10 on the samples read):

* 5 × the sample's own call ``f(<input>)`` (passes);
* 3 × ``f(<output>)``, the output passed as the input (a typical wrong answer);
* 2 × ``f(<input of the next sample>)`` (another plausible-looking wrong answer; for
  sample_520 this call loops forever, through a repeated state: the guest proves it and
  ends it as ``loops``; a third row replaces it to show what that one check costs).

Each steptrace figure is the whole of what ``steptrace score-cruxeval`` does: read the
generations file, load and validate the data, start the workers, run the checks, write the
scored file. The baseline is the official harness's approach (a fresh interpreter per
candidate, no sharing): each candidate's official check program is written to a fresh
``python -c`` subprocess that ``exec``\\s it, as many at once as there are workers, on the
first ``--baseline`` candidates, extrapolated to 8,000. Figures go to bench/README.md by
hand, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from steptrace.scoring._cruxeval import (CHECK_TIMEOUT_S, CruxSample, check_program,  # noqa: E402
                                     check_request, load_generations, load_samples,
                                     score_cruxeval, write_official)
from steptrace.sandbox._runner import run_chunks  # noqa: E402
from steptrace.sandbox._limits import Limits  # noqa: E402
from steptrace.sandbox._pool import prepare  # noqa: E402
from steptrace.sandbox._runtime import Sandbox  # noqa: E402

CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
LIMITS = Limits(timeout_s=CHECK_TIMEOUT_S)
BASELINE_RUNNER = "import sys\nexec(sys.stdin.read(), {})\n"
LOOPING = "sample_520"  # f(<input of sample_521>) runs until the 3 s limit
VARIANTS = (("steptrace score, identical checks once", True, False),
            ("steptrace score, every candidate checked", False, False),
            ("  identical checks once, no looping candidate", True, True))


def build_generations(samples: list[CruxSample],
                      without_loop: bool = False) -> dict[str, list[str]]:
    """The mix described in the module docstring: 10 candidates, 3 distinct, per sample.
    ``without_loop``: the looping candidate of LOOPING is ``f(<output>)`` instead, to show
    what the one 3 s timeout costs."""
    generations = {}
    for index, sample in enumerate(samples):
        neighbour = samples[(index + 1) % len(samples)]
        other = f"f({neighbour.input})"
        if without_loop and sample.sample_id == LOOPING:
            other = f"f({sample.output})"
        generations[sample.sample_id] = ([f"f({sample.input})"] * 5
                                         + [f"f({sample.output})"] * 3 + [other] * 2)
    return generations


def score_end_to_end(path: Path, data: Path, workers: int, deduplicate: bool) -> dict:
    """What ``steptrace score-cruxeval PATH --mode input --out …`` does, timed."""
    started = time.perf_counter()
    result = score_cruxeval(load_generations(path), "input", data, workers=workers,
                            limits=LIMITS, deduplicate=deduplicate)
    with tempfile.TemporaryDirectory() as tmp:
        write_official(result, Path(tmp) / "scored.json")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "candidates": result.candidates, "checks": result.checks_run,
            "pass_at_1": result.pass_at_1, "pass_at_5": result.pass_at_5,
            "outcomes": dict(result.outcomes)}


def baseline(programs: list[str], workers: int) -> tuple[float, int]:
    """Seconds to check ``programs`` with one fresh ``python`` process each, ``workers``
    at a time; how many passed."""
    def check(program: str) -> bool:
        try:
            done = subprocess.run([sys.executable, "-c", BASELINE_RUNNER], input=program,
                                  capture_output=True, text=True,
                                  timeout=CHECK_TIMEOUT_S + 1)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    started = time.perf_counter()
    with ThreadPoolExecutor(max(1, workers)) as pool:
        passed = sum(pool.map(check, programs))
    return time.perf_counter() - started, passed


def per_check_in_process(programs: list[str]) -> tuple[float, str]:
    """Milliseconds per check in one process (no workers): the fresh-instance floor; and
    how the sandbox resets a freed instance's memory."""
    with Sandbox(LIMITS) as sandbox:
        sandbox.run(check_request(programs[0]), "job")
        started = time.perf_counter()
        for program in programs:
            sandbox.run(check_request(program), "job")
        return (time.perf_counter() - started) / len(programs) * 1000, sandbox.memory_reset


def batch_isolation(programs: list[str], workers: int) -> float:
    """Seconds for the same checks with one reused instance per worker (informational:
    not used for scoring, generations are untrusted)."""
    chunks = [[check_request(p) for p in programs[i:i + 32]] for i in range(0, len(programs), 32)]
    started = time.perf_counter()
    for _ in run_chunks(chunks, workers, LIMITS, isolation="batch"):
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=CRUXEVAL)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--baseline", type=int, default=200,
                        help="candidates checked by the subprocess baseline (extrapolated)")
    args = parser.parse_args()

    prepare(LIMITS)  # build/compile the component once: every figure below is warm
    load_before = os.getloadavg()[0]
    samples = load_samples(args.data)
    generations = build_generations(samples)
    candidates = [(s, g) for s in samples for g in generations[s.sample_id]]
    distinct = list(dict.fromkeys(check_program(s, g) for s, g in candidates))
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, dedup, without_loop in VARIANTS:
            path = Path(tmp) / f"generations-{without_loop}.json"
            path.write_text(json.dumps(build_generations(samples, without_loop)))
            runs[label] = [score_end_to_end(path, args.data, args.workers, dedup)
                           for _ in range(args.repeat)]
    subset = [check_program(s, g) for s, g in candidates[:args.baseline]]
    base_runs = [baseline(subset, args.workers) for _ in range(args.repeat)]
    base_s, base_passed = statistics.median(r[0] for r in base_runs), base_runs[0][1]
    base_total = base_s * len(candidates) / len(subset)
    floors = [per_check_in_process(distinct[:200]) for _ in range(args.repeat)]
    floor_ms, reset = statistics.median(ms for ms, _ in floors), floors[0][1]
    batch_s = batch_isolation(distinct, args.workers)

    print(f"machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}, {args.workers} workers, "
          f"median of {args.repeat}; load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after (other processes share the cores)")
    print(f"generations: {len(samples)} samples x 10 = {len(candidates)} candidates, "
          f"{len(distinct)} distinct check programs")
    first = runs[VARIANTS[0][0]][0]
    print(f"outcomes: {first['outcomes']}; pass@1 {first['pass_at_1']:.2f}, "
          f"pass@5 {first['pass_at_5']:.2f}")
    print(f"{'run':58} {'checks':>7} {'wall s':>8} {'checks/s':>9} {'cand./s':>8} "
          f"{'speed-up':>8}")
    for label, _, _ in VARIANTS:
        seconds = statistics.median(r["seconds"] for r in runs[label])
        checks = runs[label][0]["checks"]
        each = ", ".join(f"{r['seconds']:.2f}" for r in runs[label])
        print(f"{label:58} {checks:>7} {seconds:>8.2f} {checks / seconds:>9.0f} "
              f"{len(candidates) / seconds:>8.0f} {base_total / seconds:>7.1f}x   (runs: {each})")
    print(f"{'baseline: fresh python per candidate (' + str(len(subset)) + ', extrapolated)':58} "
          f"{len(candidates):>7} {base_total:>8.2f} {len(candidates) / base_total:>9.0f} "
          f"{len(candidates) / base_total:>8.0f} {1:>7.1f}x")
    each = ", ".join(f"{r[0]:.2f}" for r in base_runs)
    print(f"baseline measured: {len(subset)} candidates in {base_s:.2f} s (runs: {each}), "
          f"{base_passed} passed")
    print(f"one check in one process (fresh instance), mean of 200: {floor_ms:.2f} ms; "
          f"memory reset at teardown: {reset}")
    print(f"informational, batch isolation (reused instance, not used): {len(distinct)} checks "
          f"in {batch_s:.2f} s")
    best = statistics.median(r["seconds"] for r in runs[VARIANTS[0][0]])
    print(f"target <= 4 s for 800 x 10 on 2 cores: {'met' if best <= 4 else 'NOT met'} "
          f"({best:.2f} s)")


if __name__ == "__main__":
    main()
