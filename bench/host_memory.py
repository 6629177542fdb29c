"""Bench: host memory (the whole process tree) for the worst single corpus lines.

Run: ``.venv/bin/python bench/host_memory.py [--baseline REF] [--case NAME ...]``.

Each case is one corpus line (a program, with one input or a list of ``inputs``) traced
by the real CLI (``python -m steptrace.cli trace LINE.jsonl --db FILE``, default limits,
default workers) in a fresh process into a fresh DuckDB file. While it runs, a thread of
this process reads ``/proc`` every ``SAMPLE_S`` seconds for the CLI and every process
below it (the sandbox workers): the peak of their summed ``VmRSS`` is the *tree peak*;
the sum of each process's own peak (``VmHWM``, the kernel's high-water mark, last read
before the process ended) is an upper bound that no sampling can miss, and it is the
figure compared with the target.

The ``inject:`` cases are not corpus lines: they stand for a compromised guest. Their
line is a plain program, but ``Sandbox.call`` is patched (in the CLI's own process, run
with ``--workers 0`` so the patch applies) to return the hostile result text in place of
the guest's. They measure the host's parse of a result near ``max_result_bytes``.

``--baseline REF`` runs every case a second time on the code of the git revision REF
(exported with ``git archive`` to a temporary directory; the guest build is shared when
``tracer/`` is the same), in the same run of this script, for the "before" column.
Figures go to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
TARGET_MB = 1536  # 1.5 GiB: the target for the whole tree
SAMPLE_S = 0.005
MIB = 1 << 20


# ------------------------------------------------------------------ the cases
def long_name_calls() -> dict:
    """A function whose name is 1 MiB long, called 150 times (450 steps carry its name)."""
    name = "g" * MIB
    code = (f"def {name}(x):\n    return x\n\n"
            f"def f(n):\n    t = 0\n    for i in range(n):\n        t += {name}(i)\n    return t\n")
    return {"id": "long_name_calls", "code": code, "input": "150"}


def huge_messages() -> dict:
    """Eight jobs (one line, eight inputs), each raising a 25 MiB exception message."""
    code = "def f(n):\n    raise ValueError(str(n) * (25 * 2**20))\n"
    return {"id": "huge_messages", "code": code, "inputs": [str(i) for i in range(8)]}


def many_long_names(count: int = 30) -> dict:
    """``count`` functions made at run time (compiled as the program's own code, so
    traced), each with a distinct 1 MiB name: a name table of ``count`` MiB (30: just
    under max_result_bytes)."""
    code = ("import types\n\ndef f(n):\n    total = 0\n    for k in range(n):\n"
            "        name = 'h' * (2**20 - 8) + str(k).zfill(8)\n"
            "        module = compile('def ' + name + '():\\n    return 1\\n', '<program>', 'exec')\n"
            "        body = [c for c in module.co_consts if isinstance(c, types.CodeType)][0]\n"
            "        total += types.FunctionType(body, {})()\n    return total\n")
    return {"id": f"many_long_names_{count}", "code": code, "input": str(count)}


def huge_type_name() -> dict:
    """Values of a class whose name is 1 MiB long: every state row of them repeats the
    name (the guest does not count type names against its trace size)."""
    code = ("def f(n):\n    C = type('T' * 2**20, (), {'__repr__': lambda s: str(s.v)})\n"
            "    for i in range(n):\n        x = C()\n        x.v = i\n    return x\n")
    return {"id": "huge_type_name", "code": code, "input": "13"}


def long_var_name() -> dict:
    """A local variable whose name is 1 MiB long, bound and deleted again and again."""
    name = "v" * MIB
    code = (f"def f(n):\n    for i in range(n):\n        {name} = i\n        del {name}\n"
            "    return n\n")
    return {"id": "long_var_name", "code": code, "input": "15"}


def many_states(count: int = 1, rounds: int = 790) -> Callable[[], dict]:
    """200 locals changed on every line, ``rounds`` times: small state rows (790: ~158,000
    rows of six values each, just under max_result_values); ``count`` jobs in the one
    line."""
    names = [f"a{i}" for i in range(200)]

    def make() -> dict:
        code = ("def f(n):\n    for i in range(n):\n        " + " = ".join(names) + " = i\n"
                "    return n\n")
        return {"id": f"many_states_x{count}", "code": code, "inputs": [str(rounds)] * count}
    return make


def wide_reprs(rounds: int = 5200) -> dict:
    """States whose reprs escape to six bytes a character in the guest's ASCII JSON:
    a result of ~6 KB a round (5,200: just under max_result_bytes; 21,000: just under
    its 128 MiB before)."""
    code = ("def f(n):\n    for i in range(n):\n        s = chr(0x4e00 + i % 500) * 999\n"
            "    return n\n")
    return {"id": "wide_reprs", "code": code, "input": str(rounds)}


def max_stdout() -> dict:
    """Sixteen jobs, each printing stdout up to its limit (65,536 characters)."""
    code = "def f(n):\n    print('\\u4e00' * 65535)\n    return n\n"
    return {"id": "max_stdout", "code": code, "inputs": [str(i) for i in range(16)]}


def guest_memory() -> dict:
    """32 jobs (two chunks, one for each worker), each filling ~480 MiB of the guest's
    512 MiB linear memory, with no result to speak of: what the sandbox itself holds,
    two workers at a time."""
    code = "def f(n):\n    b = b'x' * (480 * 2**20)\n    return len(b) + n\n"
    return {"id": "guest_memory", "code": code, "inputs": [str(i) for i in range(32)]}


def memory_and_states() -> dict:
    """32 jobs, each first filling ~400 MiB of guest memory (kept resident: linear memory
    does not shrink), then rebinding 100 locals every round, as many rounds as
    max_result_values lets through (~158,000 state rows): the guest's memory and large
    results at once, in both workers, each holding its chunk's earlier results while
    the next job runs."""
    names = ", ".join(f"a{i}" for i in range(100))
    code = ("def f(n):\n    b = b'x' * (400 * 2**20)\n    del b\n    for i in range(n):\n"
            f"        {names} = range(i, i + 100)\n    return n\n")
    return {"id": "memory_and_states", "code": code, "inputs": [str(1580 + i) for i in range(32)]}


def deep_recursion() -> dict:
    """Recursion 900 deep with a state per level."""
    code = ("def g(k):\n    if k == 0:\n        return 0\n    x = k\n    return g(k - 1) + x\n\n"
            "def f(n):\n    return g(n)\n")
    return {"id": "deep_recursion", "code": code, "input": "900"}


# Hostile result texts for the inject: cases (Python expressions, evaluated in the CLI's
# process): 31 MiB, under max_result_bytes (32 MiB), and 127 MiB, under its value before
# (128 MiB).
INJECTED = {
    "tiny_lists_31MiB": "'{\"steps\": [' + '[],' * (31 * 2**20 // 3) + '[]]}'",
    "tiny_lists_127MiB": "'{\"steps\": [' + '[],' * (127 * 2**20 // 3) + '[]]}'",
    "small_strings_31MiB": "'{\"funcs\": [' + '\"ab\",' * (31 * 2**20 // 5) + '\"ab\"]}'",
    "deep_nesting_31MiB": "'[' * (31 * 2**19) + ']' * (31 * 2**19)",
}


@dataclass(frozen=True)
class Case:
    name: str
    line: Callable[[], dict]
    inject: str | None = None  # a Python expression for the hostile result text


CASES = [
    Case("long_name_calls", long_name_calls),
    Case("huge_messages", huge_messages),
    Case("many_long_names", many_long_names),
    Case("many_long_names_110", lambda: many_long_names(110)),
    Case("huge_type_name", huge_type_name),
    Case("long_var_name", long_var_name),
    Case("many_states", many_states(1)),
    Case("many_states_x32", many_states(32)),
    Case("many_states_x32_2000", many_states(32, 2000)),
    Case("wide_reprs", wide_reprs),
    Case("wide_reprs_21000", lambda: wide_reprs(21000)),
    Case("max_stdout", max_stdout),
    Case("deep_recursion", deep_recursion),
    Case("guest_memory", guest_memory),
    Case("memory_and_states", memory_and_states),
    *(Case(f"inject:{name}", lambda: {"id": "inject", "code": "def f():\n    return 1\n",
                                      "input": ""}, expression)
      for name, expression in INJECTED.items()),
]

# Runs the CLI in this (fresh) process with Sandbox.call returning the hostile text.
INJECT_DRIVER = """
import sys
from steptrace.sandbox import _runtime as runtime
TEXT = {expression}
def call(self, payload, isolation="job"):
    return TEXT, None, True
runtime.Sandbox.call = call
from steptrace.cli._main import main
main(sys.argv[1:])
"""


# ------------------------------------------------------------------ measuring
def _status(pid: int) -> dict[str, int]:
    found = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    found[line[:5]] = int(line.split()[1])
    except OSError:
        pass
    return found


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as children:
                todo += [int(child) for child in children.read().split()]
        except OSError:
            pass
    return found


class TreeSampler(threading.Thread):
    """Samples the tree under ``pid``: the peak of summed VmRSS, each process's VmHWM."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self.hwm_kb: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            total = 0
            for pid in _descendants(self.pid):
                status = _status(pid)
                total += status.get("VmRSS", 0)
                if "VmHWM" in status:
                    self.hwm_kb[pid] = max(self.hwm_kb.get(pid, 0), status["VmHWM"])
            self.peak_kb = max(self.peak_kb, total)
            time.sleep(SAMPLE_S)


@dataclass
class Measured:
    case: str
    code: str
    exit_code: int
    seconds: float
    tree_peak_mb: float
    hwm_sum_mb: float
    parent_mb: float
    worker_mb: float  # the largest peak of a process below the CLI
    processes: int
    statuses: dict
    error: str


def run_case(case: Case, code_root: Path, work: Path, cache: str) -> Measured:
    """Trace the case's line with the code under ``code_root`` in a fresh CLI process."""
    corpus = work / f"{case.name.replace(':', '_')}.jsonl"
    corpus.write_text(json.dumps(case.line()) + "\n", encoding="utf-8")
    db = work / f"{corpus.stem}-{code_root.name}.duckdb"
    args = ["trace", str(corpus), "--db", str(db), "--quiet", "--format", "json"]
    if case.inject is None:
        command = [sys.executable, "-m", "steptrace.cli", *args]
    else:
        command = [sys.executable, "-c", INJECT_DRIVER.format(expression=case.inject),
                   *args, "--workers", "0"]
    env = {**os.environ, "STEPTRACE_CACHE_DIR": cache, "PYTHONPATH": str(code_root)}
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=code_root, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(process.pid)
    sampler.start()
    out, err = process.communicate()
    seconds = time.perf_counter() - started
    sampler.done.set()
    sampler.join()
    statuses: dict = {}
    if process.returncode == 0:
        statuses = json.loads(out).get("store", {})
    last = err.strip().splitlines()[-1] if err.strip() else ""
    others = [kb for pid, kb in sampler.hwm_kb.items() if pid != process.pid]
    return Measured(case.name, code_root.name, process.returncode, seconds,
                    sampler.peak_kb / 1024, sum(sampler.hwm_kb.values()) / 1024,
                    sampler.hwm_kb.get(process.pid, 0) / 1024, max(others, default=0) / 1024,
                    len(sampler.hwm_kb), statuses, last[:160])


def export_revision(ref: str, into: Path) -> Path:
    """The tree of git revision ``ref`` of this repository, written under ``into``."""
    target = into / f"baseline-{ref.replace('/', '_')}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="git revision to measure alongside (the 'before')")
    parser.add_argument("--case", action="append", help="run only these cases")
    parser.add_argument("--cache", default=os.environ.get("STEPTRACE_CACHE_DIR", ""),
                        help="STEPTRACE_CACHE_DIR for the CLI (default: the environment's)")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.case or c.name in args.case]
    with tempfile.TemporaryDirectory(prefix="host-memory-") as tmp:
        work = Path(tmp)
        roots = [ROOT] + ([export_revision(args.baseline, work)] if args.baseline else [])
        print(f"cores: {os.cpu_count()}   python: {sys.version.split()[0]}   target: "
              f"{TARGET_MB} MiB (sum of the tree's per-process peaks)")
        header = (f"{'case':<22} {'code':<16} {'exit':>4} {'s':>6} {'tree peak':>10} "
                  f"{'sum of peaks':>13} {'parent':>7} {'worker':>7} {'procs':>5}  statuses "
                  "(MiB: peak RSS)")
        print(header)
        print("-" * len(header))
        results = []
        for case in cases:
            for root in roots:
                m = run_case(case, root, work, args.cache)
                results.append(m)
                verdict = "" if m.hwm_sum_mb <= TARGET_MB else "  OVER"
                detail = json.dumps(m.statuses) if m.exit_code == 0 else m.error
                print(f"{m.case:<22} {m.code[:16]:<16} {m.exit_code:>4} {m.seconds:>6.1f} "
                      f"{m.tree_peak_mb:>10,.0f} {m.hwm_sum_mb:>13,.0f} {m.parent_mb:>7,.0f} "
                      f"{m.worker_mb:>7,.0f} {m.processes:>5}  {detail}{verdict}", flush=True)
        print(json.dumps([m.__dict__ for m in results]))


if __name__ == "__main__":
    main()
