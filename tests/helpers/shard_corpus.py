"""A small mixed corpus for the sharding tests (tests/sharding, tests/cli/test_shards_cli.py):
every program shape and several statuses a shard must store as ``trace --db`` does, a
duplicate job in the same shard and one in another shard (at shard size 4), and a bad
record. ``MIXED``'s jobs in corpus order, by shard at size 4 (``=`` a duplicate, left out):

shard 0 (runs 1-4)    add, sq#0, sq#1, boom                 (helpers.sample_corpus.RECORDS)
shard 1 (runs 5-8)    neg, loop, =neg, stack#0, stack#1     (a method chain per input)
shard 2 (runs 9-12)   peek (a missing method: invalid), script#0, script#1 (stdin),
                      echo (a call given stdin)
shard 3 (runs 13-16)  calc (a test driver, passes), calc_bad (fails), acc (objects,
                      attributes, a global), nested (KeyError two calls deep)
shard 4 (runs 17-20)  caught (an exception caught), math (Math.square), syntax (a syntax
                      error: invalid), spin (an endless loop: step_limit at MAX_STEPS),
                      =add (a duplicate of shard 0's), then a record without code (bad)
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.sample_corpus import RECORDS

STACK = ("class Stack:\n    def __init__(self):\n        self.items = []\n"
         "    def push(self, x):\n        self.items.append(x)\n        return len(self.items)\n"
         "    def pop(self):\n        return self.items.pop()\n")
READ_STDIN = ("n = int(input())\ntotal = 0\nfrom sys import stdin\nfor line in stdin:\n"
              "    total += int(line)\nprint(n, total)\n")
ECHO = "def f(prefix):\n    line = input()\n    return prefix + line\n"
CALC = "class Calc:\n    def add(self, a, b):\n        return a + b\n"
CALC_TEST = ("import unittest\nclass TestCalc(unittest.TestCase):\n    def test_add(self):\n"
             "        self.assertEqual(Calc().add(1, 2), 3)\n    def test_bad(self):\n"
             "        self.assertEqual(Calc().add(1, 2), 4)\n")
ACC = ("SCALE = 3\n\nclass Acc:\n    def __init__(self):\n        self.total = 0\n"
       "        self.items = []\n\n    def add(self, x):\n        self.items.append(x)\n"
       "        self.total += x * SCALE\n        return self.total\n\n"
       "def f(xs):\n    a = Acc()\n    seen = {}\n    for x in xs:\n        seen[x] = a.add(x)\n"
       "    return a.total, seen\n")
NESTED = ("def g(d, k):\n    return d[k]\n\ndef f(d):\n    x = g(d, 'a')\n    y = g(d, 'b')\n"
          "    return x + y\n")
CAUGHT = ("def f(xs):\n    try:\n        return xs[5]\n    except IndexError as e:\n"
          "        msg = str(e)\n    return msg\n")
MATH = "class Math:\n    @staticmethod\n    def square(x):\n        return x * x\n"
SPIN = "def f(n):\n    while True:\n        n += 1\n"

MIXED = RECORDS + [
    RECORDS[3],
    {"id": "stack", "code": STACK, "entry": "Stack", "inputs": ["", ""],
     "calls": [[{"method": "push", "input": "1"}, {"method": "push", "input": "2"},
                {"method": "pop"}],
               [{"method": "push", "input": "'x'"}]],
     "outputs": ["2", "1"]},
    {"id": "peek", "code": STACK, "entry": "Stack", "input": "",
     "calls": [{"method": "push", "input": "1"}, {"method": "peek"}]},
    {"id": "script", "shape": "script", "code": READ_STDIN, "inputs": ["2\n3\n4", "0\n"],
     "outputs": ["2 7\n", "0 0\n"]},
    {"id": "echo", "code": ECHO, "input": "'> '", "stdin": "hello\nworld\n", "output": "'> hello'"},
    {"id": "calc", "code": CALC, "entry": "TestCalc.test_add", "input": "", "test": CALC_TEST},
    {"id": "calc_bad", "code": CALC, "entry": "TestCalc.test_bad", "input": "",
     "test": CALC_TEST},
    {"id": "acc", "code": ACC, "input": "[1, 2, 2]", "output": "(15, {1: 3, 2: 15})"},
    {"id": "nested", "code": NESTED, "input": "{'a': 1}"},
    {"id": "caught", "code": CAUGHT, "input": "[1, 2]", "output": "'list index out of range'"},
    {"id": "math", "code": MATH, "entry": "Math.square", "input": "7", "output": "49"},
    {"id": "syntax", "code": "def f(x)\n    return x\n", "input": "1"},
    {"id": "spin", "code": SPIN, "input": "0"},
    RECORDS[0],
    {"id": "no code"},
]
MIXED_JOBS = 22          # jobs in MIXED (a record with several inputs is several jobs)
MIXED_DUPLICATES = 2     # lines 6 (in the same shard as its first copy) and 20 (another)
MIXED_RUNS = MIXED_JOBS - MIXED_DUPLICATES
MIXED_BAD_LINE = 20      # the record without code
MAX_STEPS = 2000         # the limit the tests trace MIXED with (the spin job reaches it)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_mixed(path: Path) -> Path:
    return write_jsonl(path, MIXED)


def trace_both(corpus: Path, store: Path, out: Path, shard_size: int = 4, workers: int = 2,
               limits=None):
    """``corpus`` traced into the store ``store`` in this process (so its run ids follow
    the corpus order, as a shard directory's do) and into the shard directory ``out``;
    returns both summaries."""
    from steptrace.sandbox._limits import Limits
    from steptrace.sharding._run import ShardOptions, trace_shards
    from steptrace.tracing._trace import TraceOptions, trace_corpus
    limits = limits or Limits(max_steps=MAX_STEPS)
    traced = trace_corpus(corpus, store, TraceOptions(workers=0, limits=limits))
    sharded = trace_shards([corpus], out, ShardOptions(shard_size=shard_size, workers=workers,
                                                       limits=limits))
    return traced, sharded


def files_of(directory: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``directory``: its modification time (ns) and its bytes."""
    return {str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(directory.rglob("*")) if p.is_file()}
