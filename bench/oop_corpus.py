"""A fixed, generated corpus of 200 class-based programs for the object-tracing bench.

Run: ``.venv/bin/python bench/oop_corpus.py OUT.jsonl`` (bench/trace_objects.py writes it
itself). Five shapes, 40 programs each, parameters drawn from a fixed seed: a linked list
built and reversed, a stack machine, bank accounts with transfers, a binary search tree
inserted into and walked, a queue of jobs with counters. Every program mutates attributes
through ``self``, aliases and containers, the cases the object tracing records.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

LINKED = """\
class Node:
    def __init__(self, val, nxt=None):
        self.val = val
        self.next = nxt

class LinkedList:
    def __init__(self):
        self.head = None
        self.size = 0

    def push(self, val):
        self.head = Node(val, self.head)
        self.size += 1

    def reverse(self):
        prev = None
        node = self.head
        while node:
            node.next, prev, node = prev, node, node.next
        self.head = prev

    def values(self):
        out = []
        node = self.head
        while node:
            out.append(node.val)
            node = node.next
        return out

def f(xs):
    lst = LinkedList()
    for x in xs:
        lst.push(x)
    lst.reverse()
    return lst.values()
"""

STACK = """\
class Stack:
    def __init__(self):
        self.items = []
        self.ops = 0

    def push(self, x):
        self.items.append(x)
        self.ops += 1

    def pop(self):
        self.ops += 1
        return self.items.pop()

def f(program):
    s = Stack()
    for op in program:
        if op == '+':
            s.push(s.pop() + s.pop())
        elif op == '*':
            s.push(s.pop() * s.pop())
        else:
            s.push(int(op))
    return s.items, s.ops
"""

BANK = """\
class Account:
    def __init__(self, owner, balance):
        self.owner = owner
        self.balance = balance
        self.history = []

    def deposit(self, amount):
        self.balance += amount
        self.history.append(amount)

    def withdraw(self, amount):
        if amount > self.balance:
            return False
        self.balance -= amount
        self.history.append(-amount)
        return True

class Bank:
    def __init__(self):
        self.accounts = {}

    def open(self, owner, balance):
        self.accounts[owner] = Account(owner, balance)

    def transfer(self, a, b, amount):
        if self.accounts[a].withdraw(amount):
            self.accounts[b].deposit(amount)

def f(moves):
    bank = Bank()
    for name in ('ann', 'bob', 'cy'):
        bank.open(name, 10)
    for a, b, amount in moves:
        bank.transfer(a, b, amount)
    return {k: v.balance for k, v in bank.accounts.items()}
"""

TREE = """\
class Tree:
    def __init__(self, key):
        self.key = key
        self.left = None
        self.right = None
        self.count = 1

    def insert(self, key):
        self.count += 1
        if key < self.key:
            if self.left is None:
                self.left = Tree(key)
            else:
                self.left.insert(key)
        else:
            if self.right is None:
                self.right = Tree(key)
            else:
                self.right.insert(key)

    def walk(self, out):
        if self.left:
            self.left.walk(out)
        out.append(self.key)
        if self.right:
            self.right.walk(out)
        return out

def f(keys):
    root = Tree(keys[0])
    for k in keys[1:]:
        root.insert(k)
    return root.walk([]), root.count
"""

QUEUE = """\
class Job:
    def __init__(self, name, cost):
        self.name = name
        self.cost = cost
        self.done = 0

class Worker:
    def __init__(self, speed):
        self.speed = speed
        self.finished = []

    def work(self, job):
        job.done += self.speed
        if job.done >= job.cost:
            self.finished.append(job.name)
            return True
        return False

def f(costs, speed):
    queue = [Job('j' + str(i), c) for i, c in enumerate(costs)]
    worker = Worker(speed)
    rounds = 0
    while queue:
        job = queue.pop(0)
        rounds += 1
        if not worker.work(job):
            queue.append(job)
    return worker.finished, rounds
"""


def records(seed: int = 19) -> list[dict]:
    """The 200 programs with their inputs (no expected outputs)."""
    rng = random.Random(seed)
    out = []
    for i in range(40):
        xs = [rng.randint(0, 99) for _ in range(rng.randint(3, 12))]
        out.append({"id": f"linked_{i}", "code": LINKED, "input": repr(xs)})
        numbers = [str(rng.randint(1, 9)) for _ in range(rng.randint(2, 6))]
        program = numbers[:2] + [x for n in numbers[2:] for x in (n, rng.choice("+*"))]
        program.append(rng.choice("+*"))
        out.append({"id": f"stack_{i}", "code": STACK, "input": repr(program)})
        moves = [(rng.choice(("ann", "bob", "cy")), rng.choice(("ann", "bob", "cy")),
                  rng.randint(1, 8)) for _ in range(rng.randint(2, 8))]
        out.append({"id": f"bank_{i}", "code": BANK, "input": repr(moves)})
        keys = rng.sample(range(100), rng.randint(3, 12))
        out.append({"id": f"tree_{i}", "code": TREE, "input": repr(keys)})
        costs = [rng.randint(1, 6) for _ in range(rng.randint(2, 6))]
        out.append({"id": f"queue_{i}", "code": QUEUE,
                    "input": f"{costs!r}, {rng.randint(1, 3)}"})
    return out


def write(path: Path, seed: int = 19) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records(seed)), encoding="utf-8")
    return path


if __name__ == "__main__":
    write(Path(sys.argv[1]))
