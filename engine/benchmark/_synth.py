"""Synthetic CRUXEval-like programs, to exercise steptrace at scale (``steptrace synth``).

Each record is a function ``f`` of 3–12 lines (75–300 characters, as CRUXEval's are)
built from typed statement templates over string, list and dict methods, ``for`` and
``while`` loops, ``if``/``elif``/``else``, comprehensions, a generator expression now
and then and a ``try``/``except``, with one small random input ("mai2!", ``[3, -1, 7]``,
``{'ab': 4}``). The output is steptrace's generic corpus JSONL (``id``, ``code``,
``input``; no expected output).

Every program runs cleanly (status ``ok``) *by construction*, not by filtering:

* variables are typed (str, int, list of int, list of str, dict of str → int) and a
  template only uses a variable of the type it needs, so no ``TypeError``;
* no subscript can fail: strings and lists are sliced, indexed only under ``i < len(s)``
  or through ``range(len(xs))``, and dicts are read with ``get``;
* ``//`` and ``%`` only by non-zero literals, no floats, no imports, ASCII only;
* loops iterate over an input-sized sequence that the body does not modify, a ``while``
  has an index that grows towards ``len`` or a counter that halves, so every loop ends
  after at most a few dozen rounds; the ``try`` catches the only error ``int(s)`` can
  raise.

The same ``seed`` gives byte-identical output: one ``random.Random(seed)`` stream is
consumed in order and nothing depends on hashing or time. Records are generated and
written one at a time (memory does not grow with ``n``).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator
from steptrace.errors import InputError
from steptrace.corpus._text import user_file

MIN_CHARS, MAX_CHARS = 75, 300
MIN_LINES, MAX_LINES = 3, 12
INDENT = "    "

STR, INT, LST, WRD, DCT = "str", "int", "lst", "wrd", "dct"  # variable types
NAMES = {
    STR: ("result", "out", "res", "acc", "new_text", "s2", "tmp", "word", "prefix", "tail"),
    INT: ("count", "total", "cnt", "n2", "score", "best", "length", "pos", "steps", "m"),
    LST: ("items", "values", "arr", "out_list", "nums2", "parts", "seq", "evens"),
    WRD: ("tokens", "chars", "keys", "names", "pieces", "words2"),
    DCT: ("counts", "seen", "mapping", "freq", "table"),
}
# Signatures: parameter names and types. Loop variables (ch, x, w, k, v, i, j) never
# appear here or in NAMES, so a template cannot shadow a variable it reads.
SIGNATURES = (
    (("text", STR),), (("text", STR), ("ch", STR)), (("s", STR), ("t", STR)),
    (("text", STR), ("n", INT)), (("nums", LST),), (("nums", LST), ("k", INT)),
    (("arr_in", LST), ("target", INT)), (("words", WRD),), (("words", WRD), ("sep", STR)),
    (("d", DCT),), (("d", DCT), ("key", STR)), (("d", DCT), ("nums", LST)),
    (("text", STR), ("nums", LST)),
)
LOWER = "abcdefghijklmnopqrstuvwxyz"
INPUT_CHARS = LOWER * 3 + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "0123456789" + "!?.,-_#* "
LITERAL_CHARS = "aeioustnrlm0123!-_ "
PREDICATES = ("isalpha", "isdigit", "isupper", "islower", "isalnum", "isspace")
STR_METHODS = ("upper", "lower", "strip", "swapcase", "title", "capitalize", "casefold",
               "lstrip", "rstrip")
CHAR_METHODS = ("upper", "lower", "swapcase")
COMPARISONS = (">", "<", ">=", "<=", "==", "!=")
# Lines aimed at (def and return included), weighted towards CRUXEval's 4-8.
TARGET_LINES = (4, 5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 9, 10, 11, 12)


def _choice(rng: random.Random, options):
    """``options[k]`` for a uniform ``k`` from one ``random()`` draw: half the cost of
    ``Random.choice`` (which loops over ``getrandbits``), and as deterministic."""
    return options[int(rng.random() * len(options))]


def _randint(rng: random.Random, low: int, high: int) -> int:
    return low + int(rng.random() * (high - low + 1))


@dataclass
class _Stmt:
    """A candidate statement: its lines (relative indent in spaces) and the variables it
    defines; added to the program only if the program stays within its limits."""

    lines: list[str]
    defines: list[tuple[str, str]] = field(default_factory=list)


class _Builder:
    """Builds one program from an rng: a typed environment plus the lines so far."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.env: dict[str, list[str]] = {STR: [], INT: [], LST: [], WRD: [], DCT: []}
        self.used: set[str] = set()
        self.lines: list[str] = []
        self.chars = 0
        self.last: list[str] = []  # variables in the order they were last defined

    # --------------------------------------------------------------- helpers
    def has(self, kind: str) -> bool:
        return bool(self.env[kind])

    def pick(self, kind: str) -> str:
        return _choice(self.rng, self.env[kind])

    def pick_from(self, options):
        return _choice(self.rng, options)

    def below(self, n: int) -> int:
        return int(self.rng.random() * n)

    def rnd(self) -> float:
        return self.rng.random()

    def fresh(self, kind: str) -> str | None:
        free = [name for name in NAMES[kind] if name not in self.used]
        return _choice(self.rng, free) if free else None

    def char(self) -> str:
        return repr(_choice(self.rng, LITERAL_CHARS))

    def small(self, low: int = 0, high: int = 9) -> int:
        return _randint(self.rng, low, high)

    def define(self, name: str, kind: str) -> None:
        if name not in self.used:
            self.used.add(name)
            self.env[kind].append(name)
        if name in self.last:
            self.last.remove(name)
        self.last.append(name)

    def fits(self, stmt: _Stmt, lines: int = MAX_LINES, reserve: int = 24) -> bool:
        """Room for ``stmt`` within ``lines`` (def and return included), keeping
        ``reserve`` characters for the return."""
        extra = sum(map(len, stmt.lines)) + 5 * len(stmt.lines)  # indent + newline
        return (len(self.lines) + len(stmt.lines) + 2 <= lines
                and self.chars + extra + reserve <= MAX_CHARS)

    def add(self, stmt: _Stmt) -> None:
        for line in stmt.lines:
            self.lines.append(INDENT + line)
            self.chars += len(line) + 5
        for name, kind in stmt.defines:
            self.define(name, kind)


# ------------------------------------------------------------------ simple statements
def _str_from_str(b: _Builder) -> _Stmt | None:
    if not b.has(STR):
        return None
    s, new = b.pick(STR), b.fresh(STR)
    if new is None:
        return None
    form = b.below(10)
    if form == 0:
        rhs = f"{s}.{b.pick_from(STR_METHODS)}()"
    elif form == 1:
        rhs = f"{s}.replace({b.char()}, {b.char()})"
    elif form == 2:
        rhs = f"{s}[{b.small(0, 3)}:{b.small(3, 8)}]"
    elif form == 3:
        rhs = f"{s}[::-1]"
    elif form == 4:
        rhs = f"''.join(sorted({s}))"
    elif form == 5:
        rhs = f"{s}.center(len({s}) + {b.small(1, 4)}, {b.char()})"
    elif form == 6:
        rhs = f"{s}.zfill({b.small(2, 9)})"
    elif form == 7:
        rhs = f"''.join(ch for ch in {s} if ch.{b.pick_from(PREDICATES)}())"
    elif form == 8:
        rhs = f"{s}.partition({b.char()})[{b.pick_from((0, 2))}]"
    else:
        rhs = f"{s}.rstrip({b.char()}) + {s}[:{b.small(1, 3)}]"
    return _Stmt([f"{new} = {rhs}"], [(new, STR)])


def _int_from_any(b: _Builder) -> _Stmt | None:
    new = b.fresh(INT)
    if new is None:
        return None
    options = []
    if b.has(STR):
        s = b.pick(STR)
        options += [f"{s}.count({b.char()})", f"len({s})", f"{s}.find({b.char()})",
                    f"{s}.rfind({b.char()}) + len({s})"]
    if b.has(LST):
        xs = b.pick(LST)
        options += [f"sum({xs})", f"max({xs}) if {xs} else {b.small()}",
                    f"{xs}.count({b.small(-2, 9)})", f"len({xs}) * {b.small(2, 5)}"]
    if b.has(DCT):
        d = b.pick(DCT)
        options += [f"len({d})", f"{d}.get({b.char()}, {b.small()})", f"sum({d}.values())"]
    if b.has(WRD):
        ws = b.pick(WRD)
        options += [f"len({ws})", f"sum(len(w) for w in {ws})"]
    return _Stmt([f"{new} = {b.pick_from(options)}"], [(new, INT)]) if options else None


def _list_from_any(b: _Builder) -> _Stmt | None:
    new = b.fresh(LST)
    if new is None:
        return None
    options = []
    if b.has(LST):
        xs = b.pick(LST)
        options += [f"sorted({xs})", f"{xs}[::-1]", f"{xs}[1:] + {xs}[:1]",
                    f"[x * {b.small(2, 4)} for x in {xs} if x % 2 == {b.small(0, 1)}]",
                    f"[x + {b.small(1, 5)} for x in {xs}]"]
    if b.has(STR):
        s = b.pick(STR)
        options += [f"[ord(ch) % {b.small(3, 11)} for ch in {s}]",
                    f"[i for i in range(len({s})) if {s}[i] in 'aeiou']"]
    if b.has(DCT):
        options.append(f"list({b.pick(DCT)}.values())")
    if b.has(WRD):
        options.append(f"[len(w) for w in {b.pick(WRD)}]")
    return _Stmt([f"{new} = {b.pick_from(options)}"], [(new, LST)]) if options else None


def _words_from_any(b: _Builder) -> _Stmt | None:
    new = b.fresh(WRD)
    if new is None:
        return None
    options = []
    if b.has(STR):
        s = b.pick(STR)
        options += [f"{s}.split()", f"{s}.split({b.char()})", f"list({s})"]
    if b.has(WRD):
        ws = b.pick(WRD)
        options += [f"[w.{b.pick_from(STR_METHODS)}() for w in {ws}]", f"sorted({ws})",
                    f"[w for w in {ws} if len(w) > {b.small(1, 3)}]"]
    if b.has(DCT):
        options.append(f"sorted({b.pick(DCT)})")
    return _Stmt([f"{new} = {b.pick_from(options)}"], [(new, WRD)]) if options else None


def _dict_from_any(b: _Builder) -> _Stmt | None:
    new = b.fresh(DCT)
    if new is None:
        return None
    options = []
    if b.has(STR):
        s = b.pick(STR)
        options += [f"{{ch: {s}.count(ch) for ch in {s}}}", f"dict.fromkeys({s}, {b.small()})"]
    if b.has(DCT):
        options.append(f"{{k: v for k, v in {b.pick(DCT)}.items() if v > {b.small(-2, 6)}}}")
    if b.has(WRD):
        ws = b.pick(WRD)
        options.append(f"{{w: len(w) for w in {ws}}}")
        if b.has(LST):
            options.append(f"dict(zip({ws}, {b.pick(LST)}))")
    return _Stmt([f"{new} = {b.pick_from(options)}"], [(new, DCT)]) if options else None


def _mutate(b: _Builder) -> _Stmt | None:
    options: list[tuple[str, tuple[str, str] | None]] = []
    if b.has(LST):
        xs = b.pick(LST)
        options += [(f"{xs}.append({b.small(-3, 12)})", None), (f"{xs}.sort(reverse=True)", None),
                    (f"{xs}.reverse()", None), (f"{xs}.insert(0, {b.small()})", None),
                    (f"{xs}.extend([{b.small()}, {b.small(-5, 5)}])", None)]
    if b.has(DCT):
        d = b.pick(DCT)
        options += [(f"{d}[{b.char()}] = {b.small()}", None),
                    (f"{d}.update({{{b.char()}: {b.small()}}})", None),
                    (f"{d}.pop({b.char()}, None)", None),
                    (f"{d}.setdefault({b.char()}, {b.small()})", None)]
    if b.has(STR):
        s = b.pick(STR)
        options += [(f"{s} = {s} + {b.char()}", (s, STR)),
                    (f"{s} = {s}.replace({b.char()}, '')", (s, STR))]
    if b.has(WRD):
        ws = b.pick(WRD)
        options.append((f"{ws}.append({b.char()})", None))
    if b.has(INT):
        n = b.pick(INT)
        options.append((f"{n} += {b.small(1, 7)}", (n, INT)))
    if not options:
        return None
    line, defined = b.pick_from(options)
    return _Stmt([line], [defined] if defined else [])


# ------------------------------------------------------------------ compound statements
def _accumulator(b: _Builder, kind: str, initial: str, avoid: str) -> tuple[list[str], str] | None:
    """An accumulator of ``kind`` other than ``avoid``: a new one with its initialising
    line, or an existing one (no line)."""
    existing = [name for name in b.env[kind] if name != avoid]
    if existing and b.rnd() < 0.3:
        return [], b.pick_from(existing)
    new = b.fresh(kind)
    return ([f"{new} = {initial}"], new) if new else None


def _for_str(b: _Builder) -> _Stmt | None:
    if not b.has(STR):
        return None
    s = b.pick(STR)
    acc = _accumulator(b, STR, "''", s)
    if acc is None:
        return None
    lines, name = acc
    pred = b.pick_from(PREDICATES)
    grow = (f"{name} += ch.{b.pick_from(CHAR_METHODS)}()" if b.rnd() < 0.7
            else f"{name} = ch + {name}")
    lines += [f"for ch in {s}:", f"    if ch.{pred}():", f"        {grow}"]
    if b.rnd() < 0.5:
        lines += ["    else:", f"        {name} += {b.char()}"]
    return _Stmt(lines, [(name, STR)])


def _for_list(b: _Builder) -> _Stmt | None:
    if not b.has(LST):
        return None
    xs = b.pick(LST)
    acc = _accumulator(b, INT, "0", "")
    if acc is None:
        return None
    lines, name = acc
    lines += [f"for x in {xs}:", f"    if x {b.pick_from(COMPARISONS)} {b.small(-1, 8)}:",
              f"        {name} += x"]
    if b.rnd() < 0.5:
        lines += [f"    elif x % {b.small(2, 4)} == 0:", f"        {name} -= {b.small(1, 3)}"]
    return _Stmt(lines, [(name, INT)])


def _while_index(b: _Builder) -> _Stmt | None:
    if not b.has(STR) or "i" in b.used:
        return None
    s = b.pick(STR)
    acc = _accumulator(b, INT, "0", "")
    if acc is None:
        return None
    lines, name = acc
    test = b.pick_from((f"{s}[i] in 'aeiou'", f"{s}[i] == {b.char()}", f"{s}[i].isdigit()",
                         f"{s}[i] != {s}[-1]"))
    lines += ["i = 0", f"while i < len({s}):", f"    if {test}:", f"        {name} += i",
              f"    i += {b.pick_from((1, 1, 2))}"]
    return _Stmt(lines, [(name, INT), ("i", INT)])


def _range_update(b: _Builder) -> _Stmt | None:
    if not b.has(LST):
        return None
    xs = b.pick(LST)
    lines = [f"for j in range(len({xs})):", f"    if {xs}[j] % 2 == 0:",
             f"        {xs}[j] = {xs}[j] // 2"]
    if b.rnd() < 0.5:
        lines += ["    else:", f"        {xs}[j] = {xs}[j] * 3 + 1"]
    return _Stmt(lines)


def _dict_count(b: _Builder) -> _Stmt | None:
    source = [name for kind in (STR, WRD) for name in b.env[kind]]
    new = b.fresh(DCT)
    if not source or new is None:
        return None
    seq = b.pick_from(source)
    return _Stmt([f"{new} = {{}}", f"for v in {seq}:", f"    {new}[v] = {new}.get(v, 0) + 1"],
                 [(new, DCT)])


def _dict_items(b: _Builder) -> _Stmt | None:
    if not b.has(DCT):
        return None
    d = b.pick(DCT)
    acc = _accumulator(b, WRD, "[]", "")
    if acc is None:
        return None
    lines, name = acc
    lines += [f"for k, v in sorted({d}.items()):", f"    if v % 2 == {b.small(0, 1)}:",
              f"        {name}.append(k)"]
    if b.rnd() < 0.4:
        lines += ["    else:", f"        {name}.insert(0, k.upper())"]
    return _Stmt(lines, [(name, WRD)])


def _nested(b: _Builder) -> _Stmt | None:
    if b.has(WRD) and (not b.has(LST) or b.rnd() < 0.5):
        ws = b.pick(WRD)
        acc = _accumulator(b, INT, "0", "")
        if acc is None:
            return None
        lines, name = acc
        lines += [f"for w in {ws}:", "    for ch in w:",
                  f"        if ch in {b.pick_from(('aeiou', 'xyz', 'stnrl', 'AEIOU'))!r}:",
                  f"            {name} += 1"]
        return _Stmt(lines, [(name, INT)])
    if not b.has(LST):
        return None
    xs = b.pick(LST)
    acc = _accumulator(b, LST, "[]", xs)
    if acc is None:
        return None
    lines, name = acc
    lines += [f"for x in {xs}:", f"    for j in range(x % {b.small(2, 4)}):",
              f"        {name}.append(x + j)"]
    return _Stmt(lines, [(name, LST)])


def _early_return(b: _Builder) -> _Stmt | None:
    if b.has(LST) and (not b.has(STR) or b.rnd() < 0.5):
        xs = b.pick(LST)
        return _Stmt([f"for x in {xs}:", f"    if x > {b.small(3, 15)}:", "        return x"])
    if not b.has(STR):
        return None
    s = b.pick(STR)
    return _Stmt([f"for ch in {s}:", f"    if ch.{b.pick_from(PREDICATES)}():",
                  f"        return ch + {s}"])


def _if_else(b: _Builder) -> _Stmt | None:
    kinds = [kind for kind in (STR, LST, DCT) if b.has(kind)]
    if not kinds:
        return None
    kind = b.pick_from(kinds)
    name = b.pick(kind)
    k = b.small(1, 6)
    if kind == STR:
        return _Stmt([f"if len({name}) > {k}:", f"    {name} = {name}[:{k}]",
                      f"elif {name}.{b.pick_from(PREDICATES)}():",
                      f"    {name} = {name}.{b.pick_from(STR_METHODS)}()", "else:",
                      f"    {name} = {name} + {b.char()}"], [(name, STR)])
    if kind == LST:
        return _Stmt([f"if {name} and {name}[0] > {k}:", f"    {name}.append({k})", "else:",
                      f"    {name}.insert(0, {k})"])
    key = b.char()
    return _Stmt([f"if {key} in {name}:", f"    {name}[{key}] += {k}", "else:",
                  f"    {name}[{key}] = {k}"])


def _halving(b: _Builder) -> _Stmt | None:
    sources = [name for kind in (STR, LST, WRD, DCT) for name in b.env[kind]]
    new, steps = b.fresh(INT), "halvings"
    if not sources or new is None or steps in b.used:
        return None
    return _Stmt([f"{new} = len({b.pick_from(sources)}) * {b.small(2, 9)}", f"{steps} = 0",
                  f"while {new} > 1:", f"    {new} //= 2", f"    {steps} += 1"],
                 [(new, INT), (steps, INT)])


def _try_int(b: _Builder) -> _Stmt | None:
    if not b.has(STR):
        return None
    new = b.fresh(INT)
    if new is None:
        return None
    return _Stmt(["try:", f"    {new} = int({b.pick(STR)})", "except ValueError:",
                  f"    {new} = {b.small(-1, 3)}"], [(new, INT)])


SIMPLE: tuple[Callable[[_Builder], _Stmt | None], ...] = (
    _str_from_str, _str_from_str, _int_from_any, _list_from_any, _words_from_any,
    _dict_from_any, _mutate, _mutate)
COMPOUND: tuple[Callable[[_Builder], _Stmt | None], ...] = (
    _for_str, _for_str, _for_list, _for_list, _while_index, _range_update, _dict_count,
    _dict_items, _nested, _early_return, _if_else, _if_else, _halving, _try_int)


def _return_line(b: _Builder) -> str:
    """Returns the most recent result, sometimes paired with an earlier one."""
    names = b.last
    if len(names) >= 2 and b.rnd() < 0.3:
        return f"return {names[-2]}, {names[-1]}"
    last = names[-1]
    if last in b.env[DCT] and b.rnd() < 0.5:
        return f"return sorted({last}.items())"
    return f"return {last}"


# ------------------------------------------------------------------ inputs
def _text(rng: random.Random, low: int = 0, high: int = 10) -> str:
    return "".join(rng.choices(INPUT_CHARS, k=_randint(rng, low, high)))


def _word(rng: random.Random) -> str:
    return "".join(rng.choices(LOWER, k=_randint(rng, 1, 5)))


def _argument(rng: random.Random, name: str, kind: str) -> str:
    """The literal text of one small argument of ``kind``."""
    if kind == STR:
        if name in ("ch", "sep", "key"):
            return repr(_choice(rng, LITERAL_CHARS if name != "key" else LOWER[:6]))
        return repr(_text(rng))
    if kind == INT:
        return str(_randint(rng, -3, 12))
    if kind == LST:
        return repr([_randint(rng, -5, 20) for _ in range(_randint(rng, 0, 8))])
    if kind == WRD:
        return repr([_word(rng) for _ in range(_randint(rng, 0, 5))])
    return repr({_choice(rng, LOWER[:6]) + _word(rng)[:1]: _randint(rng, -5, 20)
                 for _ in range(_randint(rng, 0, 5))})


# ------------------------------------------------------------------ programs
def _attempt(rng: random.Random) -> tuple[str, str] | None:
    """One try at a program and its input; None if it came out outside the limits."""
    signature = _choice(rng, SIGNATURES)
    b = _Builder(rng)
    for name, kind in signature:
        b.define(name, kind)
    header = f"def f({', '.join(name for name, _ in signature)}):"
    b.chars = len(header) + 1
    target = _choice(rng, TARGET_LINES)
    misses = 0
    while len(b.lines) + 2 < target and misses < 6:
        room = target - len(b.lines) - 2
        compound = room >= 3 and rng.random() < 0.6
        stmt = _choice(rng, COMPOUND if compound else SIMPLE)(b)
        if stmt is None or not b.fits(stmt, lines=target):
            misses += 1
            continue
        b.add(stmt)
    while b.chars < MIN_CHARS + 10 and misses < 12:
        stmt = _choice(rng, SIMPLE)(b)
        if stmt is None or not b.fits(stmt):
            misses += 1
            continue
        b.add(stmt)
    code = "\n".join([header, *b.lines, INDENT + _return_line(b)])
    if not (MIN_CHARS <= len(code) <= MAX_CHARS and MIN_LINES <= code.count("\n") + 1 <= MAX_LINES):
        return None
    args = ", ".join(_argument(rng, name, kind) for name, kind in signature)
    return code, args


def synth_programs(n: int, seed: int) -> Iterator[dict]:
    """``n`` records ``{"id", "code", "input"}``, deterministic in ``seed``."""
    if n < 0:
        raise InputError(f"--n must be >= 0, not {n}")
    rng = random.Random(seed)
    for index in range(n):
        made = _attempt(rng)
        while made is None:  # rare (a few percent): the same stream tries again
            made = _attempt(rng)
        code, args = made
        yield {"id": f"synth_{seed}_{index}", "code": code, "input": args}


@dataclass(frozen=True)
class SynthSummary:
    path: str
    programs: int
    bytes: int
    seconds: float

    @property
    def programs_per_second(self) -> float:
        return self.programs / self.seconds if self.seconds > 0 else 0.0

    def as_rows(self) -> list[tuple[str, object]]:
        return [("out", self.path), ("programs", self.programs), ("bytes", self.bytes),
                ("seconds", f"{self.seconds:.2f}"),
                ("programs/s", f"{self.programs_per_second:.0f}")]


def write_synth(path: str | Path, n: int, seed: int) -> SynthSummary:
    """Stream ``synth_programs(n, seed)`` to ``path`` as JSONL (one record a line)."""
    path = Path(path)
    started = time.perf_counter()
    dumps = json.JSONEncoder(ensure_ascii=True, separators=(", ", ": ")).encode
    written = 0
    with user_file(path), open(path, "w", encoding="ascii", newline="\n",
                                buffering=1 << 20) as out:
        for record in synth_programs(n, seed):
            line = dumps(record) + "\n"
            out.write(line)
            written += len(line)
    return SynthSummary(str(path), n, written, time.perf_counter() - started)
