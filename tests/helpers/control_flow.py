"""Programs over Python's control flow, generated from a seed: the differential check's
input (tests/guest/test_differential.py).

``generate(seed)`` writes one module: helpers (a context manager class, a generator
function with ``yield``, ``x = yield``, ``yield from`` and a loop, a recursive function)
and an entry ``f(xs, n)`` whose body is drawn from Python's statements: ``if``/``elif``/
``else``, ``for`` and ``while`` loops with ``break``, ``continue`` and ``else`` (nested,
and written on one line), ``try``/``except``/``else``/``finally``, ``with``, ``match``
(values, alternatives, sequences, guards), comprehensions (list, set, dict, nested,
written over several lines), generator expressions, lambdas, closures, recursion, early
``return``, ``raise``, ``assert``, ``del`` and statements joined by ``;``. The same seed
gives the same program on every machine (``random.Random(seed)`` only).

Every program ends: loops run over at most four items or a counter that the loop's first
statement advances, recursion goes down from at most 3, and no ``continue`` skips a
counter. Values are small ints (no set of strings, whose order would follow the hash
secret), so a run is the same in every interpreter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

INDENT = "    "


@dataclass(frozen=True)
class Program:
    """One generated program and the call that runs it (``entry(<input>)``)."""

    seed: int
    code: str
    input: str
    entry: str = "f"


@dataclass
class _Scope:
    """What a statement may use where it is written."""

    depth: int = 0              # compound statements around it (inside the function)
    loop: str | None = None     # the innermost loop's kind: "for" or "while" (break/continue)
    names: tuple = ()           # loop variables bound here (readable ints)
    in_try: bool = False        # a raise here is caught by a handler of the function
    generator: bool = False     # writing the generator helper (yield allowed)


@dataclass
class _Writer:
    rng: random.Random
    counters: int = 0
    lines: list = field(default_factory=list)

    # ------------------------------------------------------------ expressions
    def value(self, scope: _Scope) -> str:
        """A small int expression over what is bound here."""
        names = ["a", "acc", "n", "len(xs)"] + list(scope.names)
        pick = self.rng.choice(names)
        form = self.rng.randrange(6)
        if form == 0:
            return pick
        if form == 1:
            return f"{pick} + {self.rng.randrange(1, 4)}"
        if form == 2:
            return f"{pick} * {self.rng.randrange(2, 4)} % {self.rng.randrange(5, 12)}"
        if form == 3:
            return f"({pick} - {self.rng.randrange(3)}) // 2"
        if form == 4:
            return f"abs({pick} - {self.choice_name(scope)})"
        return str(self.rng.randrange(5))

    def choice_name(self, scope: _Scope) -> str:
        return self.rng.choice(["a", "acc", "n"] + list(scope.names))

    def condition(self, scope: _Scope) -> str:
        left = self.choice_name(scope)
        form = self.rng.randrange(5)
        if form == 0:
            return f"{left} % 2 == {self.rng.randrange(2)}"
        if form == 1:
            return f"{left} > {self.rng.randrange(4)}"
        if form == 2:
            return f"{left} % 3 == {self.rng.randrange(3)} and {self.choice_name(scope)} < 9"
        if form == 3:
            return f"not {left} or {self.choice_name(scope)} == {self.rng.randrange(3)}"
        return f"{left} in xs"

    def counter(self) -> str:
        self.counters += 1
        return f"w{self.counters}"

    # ------------------------------------------------------------ statements
    def simple(self, scope: _Scope) -> list[str]:
        """One simple statement (maybe over several lines)."""
        rng = self.rng
        v = self.value(scope)
        choices = [
            lambda: [f"acc += {v}"],
            lambda: [f"a = {v}"],
            lambda: [f"log.append({v})"],
            lambda: ["pass"],
            lambda: [f"a = {v}; acc += a"],
            lambda: ["acc += max(", f"{INDENT}a,", f"{INDENT}{v},", ")"],
            lambda: ["assert acc > -10 ** 9, 'never'"],
            lambda: [f"acc += sum([x * 2 for x in xs if x % 2 == {rng.randrange(2)}])"],
            lambda: ["t = [", f"{INDENT}x + a", f"{INDENT}for x in xs", f"{INDENT}if x > 1", "]",
                     "acc += len(t)"],
            lambda: ["d = {x: x * 2 for x in xs}", "acc += len(d)"],
            lambda: ["acc += len({x % 3 for x in xs})"],
            lambda: [f"acc += sum(x for x in xs if x > {rng.randrange(3)})"],
            lambda: ["acc += sum([i * j for i in range(2) for j in range(3)])"],
            lambda: ["acc += any(x > 3 for x in xs)"],
            lambda: ["acc += (lambda x: x + 1)(a)"],
            lambda: ["acc += sorted(xs, key=lambda x: -x)[0] if xs else 0"],
            lambda: [f"acc += rec({self.choice_name(scope)} % 4)"],
            lambda: ["for x in xs: acc += x"],
            lambda: [f"{(c := self.counter())} = 0", f"while {c} < 3: {c} += 1",
                     f"acc += {c}"],
            lambda: ["acc += sum(sub(a))"],
            lambda: ["z = a", "del z"],
            lambda: [f"acc = acc + {v} if a % 2 else acc - 1"],
        ]
        if not scope.generator:  # (the generator helper calls no generator helper)
            choices += [lambda: ["acc += sum(gen(2))"], lambda: ["acc += inner(a)"],
                        lambda: ["g = gen(3)", "acc += next(g)", "acc += g.send(a)"]]
        if scope.in_try:
            choices += [
                lambda: [f"raise ValueError({v})"],
                lambda: ["acc += 1 // (a - a)"],
                lambda: ["acc += xs[len(xs) + 2]"],
            ]
        if scope.loop is not None:
            choices += [
                lambda: [f"if {self.condition(scope)}:", f"{INDENT}break"],
                lambda: [f"if {self.condition(scope)}:", f"{INDENT}continue"],
                lambda: [f"if {self.condition(scope)}: break"],
            ]
        if not scope.generator:
            choices += [lambda: [f"if {self.condition(scope)}:", f"{INDENT}return acc"]]
        if scope.generator:
            choices += [lambda: [f"yield {v}"], lambda: [f"got = yield {v}", "acc += got or 0"],
                        lambda: ["yield from sub(acc)"]]
        return rng.choice(choices)()

    def block(self, scope: _Scope, count: int | None = None) -> list[str]:
        """Statements for a block (at least one), indented by one level."""
        count = count if count is not None else self.rng.randrange(1, 4)
        lines = []
        for _ in range(count):
            lines += self.statement(scope)
        return [INDENT + line for line in lines]

    def statement(self, scope: _Scope) -> list[str]:
        if scope.depth >= 3 or self.rng.random() < 0.45:
            return self.simple(scope)
        inner = _Scope(scope.depth + 1, scope.loop, scope.names, scope.in_try, scope.generator)
        kind = self.rng.choice(["if", "for", "while", "try", "with", "match", "match_seq",
                                "for_else", "while_else", "try_finally", "def"])
        rng = self.rng
        if kind == "if":
            lines = [f"if {self.condition(scope)}:"] + self.block(inner)
            for _ in range(rng.randrange(2)):
                lines += [f"elif {self.condition(scope)}:"] + self.block(inner)
            if rng.randrange(2):
                lines += ["else:"] + self.block(inner)
            return lines
        if kind in ("for", "for_else"):
            var = f"v{scope.depth}"
            body = _Scope(inner.depth, "for", scope.names + (var,), scope.in_try,
                          scope.generator)
            source = rng.choice(["xs", "range(3)", "range(n % 3)", "reversed(xs)",
                                 "enumerate(xs)"] + ([] if scope.generator else ["gen(2)"]))
            if source == "enumerate(xs)":
                lines = [f"for k{scope.depth}, {var} in enumerate(xs):"] + self.block(body)
            else:
                lines = [f"for {var} in {source}:"] + self.block(body)
            if kind == "for_else":
                lines += ["else:"] + self.block(inner)
            return lines
        if kind in ("while", "while_else"):
            c = self.counter()
            body = _Scope(inner.depth, "while", scope.names + (c,), scope.in_try,
                          scope.generator)
            lines = [f"{c} = 0", f"while {c} < {rng.randrange(1, 4)}:",
                     f"{INDENT}{c} += 1"] + self.block(body)
            if kind == "while_else":
                lines += ["else:"] + self.block(inner)
            return lines
        if kind == "try":
            body = _Scope(inner.depth, scope.loop, scope.names, True, scope.generator)
            lines = ["try:"] + self.block(body)
            caught = rng.sample(["ValueError", "ZeroDivisionError", "IndexError"],
                                rng.randrange(1, 3))
            for name in caught:
                bound = rng.randrange(2)
                lines += [f"except {name}{' as e' if bound else ''}:"] + self.block(inner)
            lines += ["except Exception:", f"{INDENT}acc -= 1"]
            if rng.randrange(2):
                lines += ["else:"] + self.block(inner)
            if rng.randrange(2):
                lines += ["finally:", f"{INDENT}log.append(acc)"]
            return lines
        if kind == "try_finally":
            return ["try:"] + self.block(inner) + ["finally:", f"{INDENT}acc += 1"]
        if kind == "with":
            swallow = rng.choice(["True", "False"])
            body = _Scope(inner.depth, scope.loop, scope.names,
                          scope.in_try or swallow == "True", scope.generator)
            return [f"with CM(log, {swallow}) as c:"] + self.block(body)
        if kind == "match":
            lines = [f"match {self.choice_name(scope)} % 4:"]
            lines += [f"{INDENT}case 0:"] + [INDENT + x for x in self.block(inner)]
            lines += [f"{INDENT}case 1 | 2:"] + [INDENT + x for x in self.block(inner)]
            lines += [f"{INDENT}case _:"] + [INDENT + x for x in self.block(inner)]
            return lines
        if kind == "match_seq":
            lines = ["match xs:"]
            lines += [f"{INDENT}case []:"] + [INDENT + x for x in self.block(inner)]
            lines += [f"{INDENT}case [p] if p > {rng.randrange(3)}:"] + [
                INDENT + x for x in self.block(inner)]
            lines += [f"{INDENT}case [p, q, *rest]:", f"{INDENT * 2}acc += p + q + len(rest)"]
            lines += [f"{INDENT}case _:"] + [INDENT + x for x in self.block(inner)]
            return lines
        # a nested function using the enclosing scope's names, called at once
        return ["def local(x):", f"{INDENT}if x > {rng.randrange(3)}:",
                f"{INDENT * 2}return x + a", f"{INDENT}return acc",
                "acc += local(a)"]

    # ------------------------------------------------------------ the module
    def module(self) -> str:
        rng = self.rng
        lines = [
            "class CM:",
            "    def __init__(self, log, swallow):",
            "        self.log = log",
            "        self.swallow = swallow",
            "",
            "    def __enter__(self):",
            "        self.log.append(1)",
            "        return self",
            "",
            "    def __exit__(self, kind, value, tb):",
            "        self.log.append(2)",
            "        return self.swallow",
            "",
            "",
            "def sub(k):",
            "    yield k",
            "    yield k + 1",
            "",
            "",
            "def rec(m):",
            "    if m <= 0:",
            "        return 1",
            f"    return m + rec(m - {rng.choice([1, 2])})",
            "",
            "",
            "def gen(n):",
            "    a = acc = 0",
            "    xs = [n]",
            "    log = []",
            "    for k in range(n):",
        ]
        generator = _Scope(depth=2, loop="for", names=("k",), generator=True)
        lines += [INDENT + line for line in self.block(generator, rng.randrange(1, 3))]
        lines += ["        yield k", "    return acc", "", ""]
        lines += ["def f(xs, n):", "    acc = 0", "    a = n", "    log = []",
                  "    def inner(x):", "        return x * 2 + n"]
        lines += self.block(_Scope(), rng.randrange(3, 7))
        if rng.randrange(2):
            # a loop right before the return, its body ending in a conditional jump out
            # (the compiler copies the return into that path: CPython 3.14 loses the
            # return's LINE event on the loop's exit, see tracer/sysmon_tracer.py)
            body = _Scope(1, "for", ("v9",))
            lines += ["    for v9 in xs:"] + [INDENT + line for line in self.block(body)]
            lines += [f"        if {self.condition(body)}:",
                      f"            {rng.choice(['break', 'continue', 'return acc'])}"]
        lines += ["    return acc, log"]
        return "\n".join(lines) + "\n"


def generate(seed: int) -> Program:
    """The program of ``seed`` and its call's arguments."""
    rng = random.Random(seed)
    code = _Writer(rng).module()
    compile(code, "<program>", "exec")  # a generator bug is this module's, not the tracer's
    items = [rng.randrange(6) for _ in range(rng.randrange(5))]
    return Program(seed, code, f"{items}, {rng.randrange(5)}")
