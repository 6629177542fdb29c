"""Bench: the per-job cost of the native backend (docs/guides/sandbox.md) against a WASI job
in each isolation and against a bare subprocess.

In one process, one sandbox of each kind runs the same traced request again and again (as
``trace`` makes it: ``Sandbox.run`` / ``NativeSandbox.run``, the result checked by the
host), and a bare subprocess runs the program untraced:

* ``wasi job``: the WASI guest, a fresh instance per job (job isolation);
* ``wasi batch``: the WASI guest, one instance reset between jobs (batch isolation);
* ``native``: the native backend on the newest CPython found, no packages (its fork
  server holds the standard library as the WASI guest does);
* ``native numpy``: the native backend with a numpy lock (``build --backend native
  --with numpy==2.5.5``, installed into the component cache if it is not there yet): the
  same pure program, then a numpy program;
* ``subprocess``: ``python3.N -I -S -c PROGRAM`` per job, untraced, no jail (the numpy
  program with the lock's packages on its path: it imports numpy each time).

Rounds alternate the configurations (``--rounds`` rounds of ``--jobs`` jobs each); each
figure is the median over the rounds of the mean wall time of a job. The goal: a native
job within 3x of a WASI job-isolation job.

    .venv/bin/python bench/native_backend.py [--jobs 100] [--rounds 5] [--python 3.13]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steptrace.native_sandbox import NativeSandbox, find_python, prepare  # noqa: E402
from steptrace.sandbox._limits import Limits  # noqa: E402
from steptrace.sandbox._packages import resolve  # noqa: E402
from steptrace.sandbox._runtime import Sandbox  # noqa: E402

GOAL = 3.0
PURE = ("def f(nums):\n    output = []\n    for n in nums:\n"
        "        output.append((nums.count(n), n))\n    output.sort(reverse=True)\n"
        "    return output\n", "[1, 1, 3, 1, 3, 1]")  # CRUXEval's sample_0
NUMPY = ("import numpy as np\n\ndef f(rows):\n    m = np.array(rows, dtype=float)\n"
         "    m[0, 0] = 0.5\n    col = m.sum(axis=0)\n    return col / col.max()\n",
         "[[1, 2], [3, 4]]")


def request(program: tuple[str, str]) -> dict:
    return {"code": program[0], "input": program[1]}


def subprocess_job(python: str, program: tuple[str, str], path: str | None) -> None:
    env = {"PATH": os.defpath}
    if path is not None:
        env["PYTHONPATH"] = path
    code = f"{program[0]}\nprint(repr(f({program[1]})))\n"
    subprocess.run([python, "-I" if path is None else "-s", "-S", "-c", code], env=env,
                   check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100, help="Jobs per configuration a round.")
    parser.add_argument("--rounds", type=int, default=5, help="Rounds (configurations alternate).")
    parser.add_argument("--python", default=None, help="The native interpreter (path or 3.N).")
    options = parser.parse_args()
    python = find_python(options.python)
    limits = Limits(timeout_s=30)
    lock = resolve(["numpy==2.5.5"], python=python.minor)
    started = time.perf_counter()
    numpy_guest = prepare(python, lock)
    install_s = time.perf_counter() - started

    wasi = Sandbox(limits)
    native = NativeSandbox(limits, prepare(python))
    started = time.perf_counter()
    numpy_box = NativeSandbox(limits, numpy_guest)
    numpy_start_s = time.perf_counter() - started
    runs = {
        "wasi job (pure)": lambda: wasi.run(request(PURE), "job"),
        "wasi batch (pure)": lambda: wasi.run(request(PURE), "batch"),
        "native (pure)": lambda: native.run(request(PURE)),
        "native numpy lock (pure)": lambda: numpy_box.run(request(PURE)),
        "native numpy lock (numpy)": lambda: numpy_box.run(request(NUMPY)),
        "subprocess (pure)": lambda: subprocess_job(python.executable, PURE, None),
        "subprocess (numpy)": lambda: subprocess_job(python.executable, NUMPY,
                                                     numpy_guest.packages),
    }
    for name, run in runs.items():  # warm: each once, and the outcomes checked
        outcome = run()
        if outcome is not None:
            assert outcome.result["status"] == "ok", (name, outcome.result)
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for round_ in range(options.rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        for name in order:
            jobs = max(1, options.jobs // 10) if name.startswith("subprocess") else options.jobs
            began = time.perf_counter()
            for _ in range(jobs):
                runs[name]()
            times[name].append((time.perf_counter() - began) / jobs * 1000)
    load_after = os.getloadavg()
    for box in (wasi, native, numpy_box):
        box.close()

    cpu = "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in
                   Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"{dt.date.today()}, {os.cpu_count()} cores ({cpu}), {platform.system()} "
          f"{platform.release()}, host Python {platform.python_version()}, native CPython "
          f"{python.version}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} "
          f"after; {options.rounds} rounds of {options.jobs} jobs "
          f"(subprocess: {max(1, options.jobs // 10)})")
    print(f"numpy lock prepared (installed when not in the cache) in {install_s:.1f} s, its "
          f"fork server started in "
          f"{numpy_start_s:.1f} s")
    base = statistics.median(times["wasi job (pure)"])
    print(f"{'configuration':28} {'ms a job':>9} {'min':>7} {'vs wasi job':>12}")
    for name in names:
        median = statistics.median(times[name])
        print(f"{name:28} {median:9.2f} {min(times[name]):7.2f} {median / base:11.2f}x")
    ratio = statistics.median(times["native (pure)"]) / base
    print(f"native (pure) / wasi job (pure): {ratio:.2f}x (goal <= {GOAL}x): "
          f"{'met' if ratio <= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
