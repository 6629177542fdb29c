"""Bench: start-up time of the light ``steptrace`` commands, as fresh processes.

Run: ``.venv/bin/python bench/startup.py [--runs 30] [--baseline-steptrace PATH]``.

Each figure is the wall time of one whole process, from its start to its exit:
``steptrace --help``, ``steptrace --version``, ``steptrace trace --help`` and ``steptrace
sql --help``, run ``--runs`` times each (after ``--warmup`` untimed runs, so the files are in
the page cache: warm). It prints the median and the minimum of each against the target,
0.25 s for each (the median is the figure compared; the minimum is what the machine gives
when nothing else is running).

``--baseline-steptrace PATH`` times another checkout's installed ``steptrace`` in the same
run (e.g. /work/main/.venv/bin/steptrace, the code before a change): every round runs each
command once with each executable, alternating which goes first, so both see the same load.
``--trace-samples N`` also times a whole ``steptrace trace`` of the first N CRUXEval samples
into a new store (its default workers: one per CPU), ``--trace-runs`` times per
executable, alternating as above: a trace's fixed cost as a user meets it (imports,
workers, the sandbox, the store), with no target of its own; each executable's ratio to
the baseline's median.
Figures go to bench/README.md by hand, with the date and the machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.25
CRUXEVAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
COMMANDS = (("--help",), ("--version",), ("trace", "--help"), ("sql", "--help"))


def time_once(executable: Path, args: tuple[str, ...]) -> float:
    """Seconds from starting ``executable args`` to its exit; it must succeed."""
    started = time.perf_counter()
    subprocess.run([str(executable), *args], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(executables: dict[str, Path], runs: int, warmup: int) -> dict[tuple[str, str], list[float]]:
    """``{(name, command): [seconds, ...]}``: the commands interleaved, each round
    alternating which executable goes first."""
    for executable in executables.values():
        for args in COMMANDS:
            for _ in range(warmup):
                time_once(executable, args)
    times: dict[tuple[str, str], list[float]] = {}
    names = list(executables)
    for round_ in range(runs):
        order = names if round_ % 2 == 0 else names[::-1]
        for args in COMMANDS:
            for name in order:
                times.setdefault((name, " ".join(args)), []).append(
                    time_once(executables[name], args))
    return times


def measure_trace(executables: dict[str, Path], samples: int, runs: int) -> dict[str, list[float]]:
    """``{name: [seconds, ...]}`` of ``steptrace trace`` of the first ``samples`` CRUXEval
    samples into a new store, each round alternating which executable goes first (one
    untimed round first)."""
    times: dict[str, list[float]] = {name: [] for name in executables}
    names = list(executables)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "first.jsonl"
        corpus.write_text("".join(CRUXEVAL.read_text().splitlines(keepends=True)[:samples]))
        for round_ in range(runs + 1):
            for name in names if round_ % 2 == 0 else names[::-1]:
                db = Path(tmp) / f"{name}-{round_}.duckdb"
                seconds = time_once(executables[name], ("trace", str(corpus), "--db", str(db)))
                if round_:
                    times[name].append(seconds)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steptrace", type=Path, default=Path(sys.executable).parent / "steptrace",
                        help="The steptrace to time [default: the one beside this Python].")
    parser.add_argument("--baseline-steptrace", type=Path,
                        help="Another checkout's steptrace, timed in the same run.")
    parser.add_argument("--runs", type=int, default=30, help="Timed runs per command.")
    parser.add_argument("--warmup", type=int, default=3, help="Untimed runs per command first.")
    parser.add_argument("--trace-samples", type=int, default=0,
                        help="Also time a trace of the first N CRUXEval samples [default: 0, not].")
    parser.add_argument("--trace-runs", type=int, default=7, help="Timed traces per executable.")
    options = parser.parse_args()
    executables = {"this checkout": options.steptrace}
    if options.baseline_steptrace is not None:
        executables["baseline"] = options.baseline_steptrace
    for name, path in executables.items():
        if not os.access(path, os.X_OK):
            parser.error(f"{name}: {path} is not an executable")

    load_before = os.getloadavg()
    times = measure(executables, options.runs, options.warmup)
    traces = (measure_trace(executables, options.trace_samples, options.trace_runs)
              if options.trace_samples else {})
    load_after = os.getloadavg()

    print(f"{dt.date.today()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}; load average {load_before[0]:.2f} "
          f"before, {load_after[0]:.2f} after; {options.runs} runs per command "
          f"(after {options.warmup} untimed)")
    for name, path in executables.items():
        print(f"{name}: {path}")
    print()
    header = "| command |" + "".join(f" {name}: median (min) |" for name in executables)
    print(header + f" target | median within target ({next(iter(executables))}) |")
    print("|---|" + "---:|" * len(executables) + "---:|---|")
    failed = False
    for args in COMMANDS:
        command = " ".join(args)
        cells = []
        for name in executables:
            seconds = times[(name, command)]
            cells.append(f"{statistics.median(seconds):.3f} s ({min(seconds):.3f})")
        median = statistics.median(times[(next(iter(executables)), command)])
        failed |= median > TARGET_S
        print(f"| `steptrace {command}` | " + " | ".join(cells)
              + f" | {TARGET_S:.2f} s | {'yes' if median <= TARGET_S else 'NO'} |")
    if traces:
        medians = {name: statistics.median(seconds) for name, seconds in traces.items()}
        base = medians.get("baseline")
        print(f"\n`steptrace trace` of the first {options.trace_samples} CRUXEval samples, "
              f"a new store, {options.trace_runs} runs each (after one untimed):\n")
        print("| executable | median | min-max | / baseline |")
        print("|---|---:|---:|---:|")
        for name, seconds in traces.items():
            ratio = f"{medians[name] / base:.2f}x" if base else ""
            print(f"| {name} | {medians[name]:.3f} s | {min(seconds):.3f}-{max(seconds):.3f} s "
                  f"| {ratio} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
