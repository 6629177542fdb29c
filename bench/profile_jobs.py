"""Bench: where a traced job's time goes, host and guest, and the physical limit.

Run: ``.venv/bin/python bench/profile_jobs.py [--python 3.13] [--section NAME ...]``.

Sections (all by default; each prints a table):

* ``host``: one ``Sandbox`` in this process runs the 800 CRUXEval requests (as ``trace``
  makes them) after 50 warm-up jobs, in each isolation, and splits each job's wall time
  by phase: the request's JSON, the store and its WASI set-up, the linker's
  instantiation, the guest's call, the instance's drop (wasmtime's memory reset), the
  job's directories looked at, the result parsed and checked. The phases are timed by
  wrapping the functions that do them (the wrappers cost ~1 µs each).
* ``trace``: a whole ``trace_corpus`` of the 800 (2 workers) and of its first 10 (the
  fixed cost), the CPU seconds of the main process (corpus, store) and of its workers.
* ``guest``: the guest tracer itself run natively in ``--python`` (no sandbox, so a
  corpus other than CRUXEval needs ``--trusted``; the request the sandbox sends, batch
  isolation's checks on), its phases timed by wrapping tracer/job.py's functions; and the
  physical limit: the same jobs in one native process and split over two processes at
  once (the native baseline of issue 37).

The guest's own phases cannot be timed inside wasm without a timing build; the
``host`` section's guest call against the ``guest`` section's total is the price of
running the same code in wasm.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
WARM_UP = 50


CORPUS = CRUXEVAL  # --corpus


def _requests() -> list[dict]:
    from steptrace.corpus._formats import load_corpus
    from steptrace.tracing._trace import job_request
    return [job_request(job) for job in load_corpus(CORPUS).jobs]


class PhaseClock:
    """Wall time spent in wrapped callables, by phase."""

    def __init__(self) -> None:
        self.seconds: Counter = Counter()

    def wrap(self, owner, name: str, phase: str) -> None:
        inner = getattr(owner, name)
        clock, seconds = time.perf_counter, self.seconds

        def timed(*args, **kwargs):
            started = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                seconds[phase] += clock() - started
        setattr(owner, name, timed)


def host_section() -> None:
    import wasmtime
    import wasmtime._bindings as bindings
    import wasmtime._ffi as ffi
    from steptrace.sandbox import _runtime
    from steptrace.sandbox._files import JobFiles
    from steptrace.sandbox._limits import Limits
    from steptrace.sandbox._pool import prepare

    requests = _requests()
    limits = Limits()
    clock = PhaseClock()
    clock.wrap(_runtime.json, "dumps", "request JSON")
    clock.wrap(wasmtime, "Store", "store + WASI set-up")
    clock.wrap(wasmtime, "WasiConfig", "store + WASI set-up")
    clock.wrap(_runtime.JobFiles, "preopen", "store + WASI set-up")
    clock.wrap(ffi, "wasmtime_component_linker_instantiate", "instantiate (linker)")
    clock.wrap(bindings, "wasmtime_component_func_call", "guest call")
    clock.wrap(ffi, "wasmtime_store_delete", "instance drop (memory reset)")
    clock.wrap(JobFiles, "finish", "job directories")
    clock.wrap(_runtime, "checked_outcome", "result parsed and checked")
    print(f"host: one Sandbox in this process, the {len(requests)} jobs of {CORPUS.name}, "
          "µs a job (wall)")
    rows = {}
    for isolation in ("job", "batch"):
        with _runtime.Sandbox(limits, prepare(limits)) as sandbox:
            for request in requests[:WARM_UP]:
                sandbox.run(request, isolation)
            clock.seconds.clear()
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            for request in requests:
                sandbox.run(request, isolation)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
        phases = dict(clock.seconds)
        phases["other (run's own code)"] = wall - sum(phases.values())
        phases["total"] = wall
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        phases["CPU, every thread"] = cpu
        rows[isolation] = phases
    names = list(dict.fromkeys(name for phases in rows.values() for name in phases))
    print(f"{'phase':<32} {'job':>9} {'batch':>9}")
    for name in names:
        cells = [f"{rows[iso].get(name, 0.0) / len(requests) * 1e6:>9.0f}" for iso in rows]
        print(f"{name:<32} {' '.join(cells)}")
    print()


def trace_section() -> None:
    from steptrace.sandbox._limits import Limits
    from steptrace.sandbox._pool import prepare
    from steptrace.tracing._trace import TraceOptions, trace_corpus

    prepare(Limits())
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "ten.jsonl"
        small.write_text("".join(CRUXEVAL.read_text().splitlines(keepends=True)[:10]))
        print("trace: trace_corpus into a new store, 2 workers; seconds (second of two runs)")
        print(f"{'corpus, isolation':<24} {'wall':>7} {'main CPU':>9} {'workers CPU':>12}")
        for corpus, label in ((small, "first 10"), (CRUXEVAL, "the 800")):
            for isolation in ("job", "batch"):
                for attempt in range(2):  # the first pays this process's imports
                    own = resource.getrusage(resource.RUSAGE_SELF)
                    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
                    started = time.perf_counter()
                    trace_corpus(corpus, Path(tmp) / f"{label}-{isolation}-{attempt}.duckdb",
                                 TraceOptions(workers=2, isolation=isolation))
                    wall = time.perf_counter() - started
                own2 = resource.getrusage(resource.RUSAGE_SELF)
                kids2 = resource.getrusage(resource.RUSAGE_CHILDREN)
                main_cpu = own2.ru_utime - own.ru_utime + own2.ru_stime - own.ru_stime
                kids_cpu = kids2.ru_utime - kids.ru_utime + kids2.ru_stime - kids.ru_stime
                print(f"{label + ', ' + isolation:<24} {wall:>7.3f} {main_cpu:>9.3f} "
                      f"{kids_cpu:>12.3f}")
    print()


# Run by the native interpreter: the guest tracer in that process, no sandbox (its
# phases timed by this file's PhaseClock, imported there from bench/).
_NATIVE = r'''
import json, os, sys, time
BENCH, TRACER, REQUESTS, MODE = sys.argv[1:5]
sys.path[:0] = [BENCH, TRACER]
from profile_jobs import PhaseClock
clock = PhaseClock()
def _wrap_all():
    import job, guard, shared_state, wire, sysmon_tracer
    for name in ("run_job", "_run", "_call", "compile_call_arguments", "_compare",
                 "_collect", "_fill_trace"):
        clock.wrap(job, name, "job." + name)
    clock.wrap(wire, "encode", "wire.encode")
    clock.wrap(wire, "decode", "wire.decode")
    for name in ("enter", "leave", "wind_down", "exposed_changed"):
        clock.wrap(guard, name, "guard." + name)
    for name in ("reaches_shared_state", "restore_cheap", "cheap_changed", "changed"):
        clock.wrap(shared_state, name, "shared_state." + name)
    clock.wrap(sysmon_tracer, "tamper_reasons", "tracer.tamper_reasons")
def _entry():
    import guest
    made = guest.WitWorld()
    del guest
    return made
if MODE == "phases":
    _wrap_all()
entry = _entry()
requests = open(REQUESTS).read().splitlines()
for request in requests[:50]:
    entry.run(request)
clock.seconds.clear()
started = time.perf_counter()
for request in requests:
    entry.run(request)
wall = time.perf_counter() - started
os.write(1, json.dumps({"wall": wall, "jobs": len(requests),
                        "phases": dict(clock.seconds)}).encode())
'''


def _native(python: str, tracer: Path, requests: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen([python, "-I", "-S", "-c", _NATIVE, str(Path(__file__).parent),
                             str(tracer), str(requests), mode], stdout=subprocess.PIPE, text=True)


def guest_section(python_asked: str | None) -> None:
    from steptrace.native_sandbox._python import find_python
    from steptrace.sandbox._build import tracer_dir
    from steptrace.sandbox._limits import Limits

    python = find_python(python_asked)
    limits = Limits()
    payloads = [json.dumps({**request, "limits": limits.guest(), "check_shared_state": True})
                for request in _requests()]
    with tempfile.TemporaryDirectory() as tmp:
        every = Path(tmp) / "all.jsonl"
        every.write_text("\n".join(payloads))
        halves = [Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"]
        halves[0].write_text("\n".join(payloads[0::2]))
        halves[1].write_text("\n".join(payloads[1::2]))
        phased = json.loads(_native(python.executable, tracer_dir(), every, "phases")
                            .communicate()[0])
        print(f"guest: the guest tracer natively in CPython {python.version} "
              "(batch isolation's request), µs a job, wrapped phases (nested: a phase's "
              "time includes the phases it calls)")
        for name, seconds in sorted(phased["phases"].items(), key=lambda kv: -kv[1]):
            print(f"  {name:<34} {seconds / phased['jobs'] * 1e6:>8.1f}")
        singles, pairs = [], []
        for _ in range(5):
            single = json.loads(_native(python.executable, tracer_dir(), every, "plain")
                                .communicate()[0])
            singles.append(single["wall"])
            started = time.perf_counter()
            both = [_native(python.executable, tracer_dir(), half, "plain") for half in halves]
            walls = [json.loads(p.communicate()[0])["wall"] for p in both]
            pairs.append(max(walls))
            del started
        single, pair = statistics.median(singles), statistics.median(pairs)
        print(f"physical limit: the {len(payloads)} jobs natively, one process {single:.3f} s "
              f"({single / len(payloads) * 1e6:.0f} µs a job), two processes at once "
              f"{pair:.3f} s (median of 5; the jobs' own loop only)")
    print()


SECTIONS = {"host": host_section, "trace": trace_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=None,
                        help="the native CPython for the guest section (path or 3.N)")
    parser.add_argument("--section", action="append", choices=["host", "trace", "guest"])
    parser.add_argument("--corpus", type=Path, default=CRUXEVAL,
                        help="the jobs of the host and guest sections (default: CRUXEval)")
    parser.add_argument("--trusted", action="store_true",
                        help="run --corpus's programs natively in the guest section: no "
                             "sandbox, no jail (for a corpus you would run yourself)")
    args = parser.parse_args()
    global CORPUS
    CORPUS = args.corpus
    if "guest" in (args.section or ["guest"]) and CORPUS != CRUXEVAL and not args.trusted:
        parser.error("the guest section runs the corpus's programs natively, unsandboxed: "
                     "give --trusted for a corpus you trust, or --section host/trace")
    print(f"cores: {os.cpu_count()}   host python: {sys.version.split()[0]}   "
          f"load average: {os.getloadavg()[0]:.2f}")
    for name in args.section or ["host", "trace", "guest"]:
        if name == "guest":
            guest_section(args.python)
        else:
            SECTIONS[name]()


if __name__ == "__main__":
    main()
