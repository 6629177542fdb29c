"""A class-heavy corpus: bench/oop_corpus.py's programs (linked lists, stack machines,
bank accounts, search trees, job queues) and programs for the corners of the value rule
the prompts state: slots (inherited, private, unset), instances nested past four levels
and in a cycle, nested and function-local classes, instances in deques, defaultdicts,
lists and dicts, aliases, and a method that prints and one that raises."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "oop_corpus.py"

SLOTS = """\
class Base:
    __slots__ = ('a', '__hidden')

    def __init__(self, a):
        self.a = a
        self.__hidden = a * 2


class Point(Base):
    __slots__ = ('x', 'y')

    def __init__(self, a, x):
        super().__init__(a)
        self.x = x


def f(n):
    p = Point(n, n + 1)
    q = p
    p.y = n * 3
    del p.x
    pts = [p, Point(0, 1)]
    last = pts[-1]
    return pts
"""
CHAIN = """\
class Node:
    def __init__(self, v, nxt=None):
        self.v = v
        self.nxt = nxt


def f(n):
    head = None
    for i in range(n):
        head = Node(i, head)
    tail = head
    while tail.nxt is not None:
        tail = tail.nxt
    tail.nxt = head
    return head.v
"""
NESTED = """\
class Outer:
    class Inner:
        def __init__(self, k):
            self.k = k

    def __init__(self):
        self.items = {'a': Outer.Inner(1)}


def f(x):
    class Local:
        def __init__(self, v):
            self.v = v

    o = Outer()
    loc = Local(x)
    o.items['b'] = loc
    o.items['a'].k += x
    return o
"""
QUEUED = """\
from collections import deque, defaultdict


class Job:
    def __init__(self, name):
        self.name = name
        self.tags = []


def f(names):
    q = deque()
    by_first = defaultdict(list)
    for n in names:
        j = Job(n)
        q.append(j)
        by_first[n[0]].append(j)
    first = q.popleft()
    first.tags.append('x')
    same = by_first[first.name[0]][0]
    return same is first, len(q), by_first
"""
OVERDRAWN = """\
class Account:
    def __init__(self, owner):
        self.owner = owner
        self.balance = 0

    def withdraw(self, amount):
        if amount > self.balance:
            raise ValueError(f'{self.owner} has only {self.balance}')
        self.balance -= amount


def f(amounts):
    acc = Account('ann')
    for a in amounts:
        acc.balance += a
        print(acc.owner, acc.balance)
    acc.withdraw(5)
    return acc
"""
CORNERS = [
    {"id": "slots", "code": SLOTS, "inputs": ["2", "5"]},
    {"id": "chain", "code": CHAIN, "inputs": ["3", "6"]},
    {"id": "nested", "code": NESTED, "inputs": ["3"]},
    {"id": "queued", "code": QUEUED, "inputs": ["['ab', 'ac', 'b']", "['x']"]},
    {"id": "overdrawn", "code": OVERDRAWN, "inputs": ["[1, 2]", "[1, 2, 3]"]},
]


def records(per_shape: int = 4) -> list[dict]:
    """``per_shape`` programs of each of the bench corpus's five shapes, then CORNERS."""
    spec = importlib.util.spec_from_file_location("oop_corpus", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shapes: dict[str, int] = {}
    chosen = []
    for record in module.records():
        shape = record["id"].rsplit("_", 1)[0]
        if shapes.get(shape, 0) < per_shape:
            shapes[shape] = shapes.get(shape, 0) + 1
            chosen.append(record)
    return chosen + CORNERS
