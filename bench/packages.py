"""Bench: guests with packages (docs/guides/packages.md): build time and size per package
set, and the cost of a job against the standard guest.

For each package set (none: the standard guest; then pinned sets from the registry) the
script builds the guest into a fresh cache directory (resolve + install + componentize-py
+ compile to native code, as ``steptrace build --with ... --lock`` and the first trace do)
and reports the wall time, the component's and the compiled form's sizes. Then, in one
process, it runs jobs in fresh instances (job isolation, ``Sandbox.run``): a stdlib
program in the standard guest (the baseline) and, in each package guest, a program that
uses the packages; each figure is the median of ``--repeat`` rounds of ``--jobs`` jobs.

    .venv/bin/python bench/packages.py [--jobs 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steptrace.errors import SteptraceError  # noqa: E402
from steptrace.sandbox import _build as build  # noqa: E402
from steptrace.sandbox._limits import Limits  # noqa: E402
from steptrace.sandbox._packages import resolve  # noqa: E402
from steptrace.sandbox._runtime import Sandbox, compiled_path  # noqa: E402

STDLIB = ("import itertools\n\ndef f(xs, n):\n    out = []\n"
          "    for i in range(0, len(xs), n):\n        out.append(sum(xs[i:i + n]))\n"
          "    return out\n", "[1, 2, 3, 4, 5], 2")
SETS = {
    "toolz, sortedcontainers, more-itertools": (
        ["toolz==1.0.0", "sortedcontainers==2.4.0", "more-itertools==10.5.0"],
        ("from more_itertools import chunked\nfrom sortedcontainers import SortedList\n"
         "import toolz\n\ndef f(xs, n):\n    s = SortedList(xs)\n"
         "    return toolz.pipe(chunked(list(s), n), toolz.curried.map(sum), list)\n",
         "[5, 1, 4, 2, 3], 2")),
    "python-dateutil (+ six), --import dateutil.easter": (
        (["python-dateutil==2.9.0.post0"], ["dateutil.easter"]),
        ("from dateutil.easter import easter\n\ndef f(year):\n    return str(easter(year))\n",
         "2024")),
    "networkx": (
        ["networkx==3.3"],
        ("import networkx as nx\n\ndef f(n):\n    g = nx.path_graph(n)\n"
         "    return nx.shortest_path_length(g, 0, n - 1)\n", "5")),
    "pyparsing": (
        ["pyparsing==3.1.4"],
        ("import pyparsing as pp\n\ndef f(text):\n"
         "    return pp.delimited_list(pp.Word(pp.nums)).parse_string(text).as_list()\n",
         "'1, 2, 3'")),
    # a package a guest cannot hold: the build names why
    "sympy (+ mpmath)": (
        ["sympy==1.13.3"],
        ("import sympy\n\ndef f(n):\n    x = sympy.Symbol('x')\n"
         "    return str(sympy.expand((x + 1) ** n))\n", "3")),
}


def build_guest(requirements) -> tuple[object, float, int, int, object]:
    """``requirements``: a list, or (list, imports)."""
    started = time.perf_counter()
    if isinstance(requirements, tuple):
        requirements, imports = requirements
    else:
        imports = []
    lock = resolve(requirements, imports) if requirements else None
    found = build.ensure_component(packages=lock)
    limits = Limits()
    with Sandbox(limits, found):  # compiles and caches the native form
        pass
    seconds = time.perf_counter() - started
    return found, seconds, found.wasm.stat().st_size, compiled_path(found, limits).stat().st_size, lock


def per_job(found, program: tuple[str, str], jobs: int, repeat: int) -> tuple[float, str]:
    code, args = program
    request = {"code": code, "entry": "f", "input": args}
    with Sandbox(Limits(), found) as sandbox:
        first = sandbox.run(request, "job").result
        rounds = []
        for _ in range(repeat):
            started = time.perf_counter()
            for _ in range(jobs):
                sandbox.run(request, "job")
            rounds.append((time.perf_counter() - started) / jobs)
    return statistics.median(rounds), f"{first['status']} {first.get('output')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    failures = []
    with tempfile.TemporaryDirectory(prefix="steptrace-bench-packages-") as cache:
        os.environ[build.CACHE_ENV] = cache
        found, seconds, wasm, cwasm, _ = build_guest(None)
        base, result = per_job(found, STDLIB, args.jobs, args.repeat)
        rows.append(("standard guest (stdlib program)", seconds, wasm, cwasm, base, result))
        for name, (requirements, program) in SETS.items():
            try:
                found, seconds, wasm, cwasm, lock = build_guest(requirements)
            except SteptraceError as exc:
                failures.append((name, str(exc).strip().splitlines()[-1]))
                continue
            cost, result = per_job(found, program, args.jobs, args.repeat)
            rows.append((f"{name}: {lock}", seconds, wasm, cwasm, cost, result))
    print(f"{'guest':<70} {'build s':>8} {'wasm MB':>8} {'cwasm MB':>9} {'ms/job':>7} "
          f"{'vs std':>7}  first result")
    for name, seconds, wasm, cwasm, cost, result in rows:
        print(f"{name:<70} {seconds:8.1f} {wasm / 1e6:8.1f} {cwasm / 1e6:9.1f} "
              f"{cost * 1e3:7.2f} {cost / base:6.2f}x  {result}")
    for name, message in failures:
        print(f"{name}: not built: {message}")


if __name__ == "__main__":
    main()
