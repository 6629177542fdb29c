"""How varied a harvested corpus is: its spread over packages, modules, the constructs of
its code, call depth and step counts (the spread the EXE review asked for).

* ``packages``, ``modules``: functions with at least one kept example, per distribution
  and per public module;
* ``constructs``: how many of those functions use each construct of :data:`CONSTRUCTS`
  in their own code (a function counts once per construct);
* ``call_depth``: runs by their deepest call depth (``runs.max_depth``: 0 is the
  function alone, 1 a call it makes to a program function, ...);
* ``steps``: runs by their line steps, in the doubling buckets every step table of
  steptrace uses (``steptrace.scoring._buckets``: 1, 2-3, 4-7, ...).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Iterable

from steptrace.scoring._buckets import step_bucket

# construct name -> the AST nodes that are it
CONSTRUCTS: dict[str, tuple[type, ...]] = {
    "for": (ast.For,), "while": (ast.While,), "if": (ast.If,),
    "conditional expression": (ast.IfExp,),
    "try": (ast.Try,), "raise": (ast.Raise,), "with": (ast.With,), "assert": (ast.Assert,),
    "comprehension": (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp),
    "lambda": (ast.Lambda,), "nested function": (ast.FunctionDef, ast.AsyncFunctionDef),
    "f-string": (ast.JoinedStr,), "slice": (ast.Slice,), "boolean operator": (ast.BoolOp,),
    "augmented assignment": (ast.AugAssign,), "unpacking": (ast.Starred,),
    "match": (ast.Match,),
}


def constructs(code: str, entry: str) -> set[str]:
    """The constructs the entry function of ``code`` uses (``recursion`` when it calls
    itself by name)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    function = next((n for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                             ast.AsyncFunctionDef))
                     and n.name == entry), None)
    if function is None:
        return set()
    found = set()
    nodes = [n for child in function.body for n in ast.walk(child)]
    for name, kinds in CONSTRUCTS.items():
        if any(isinstance(n, kinds) for n in nodes):
            found.add(name)
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == entry
           for n in nodes):
        found.add("recursion")
    return found


def diversity(functions: Iterable, db: str | Path) -> dict:
    """The spread of the corpus of ``functions`` (``Harvested``, those with kept
    examples) traced into ``db``."""
    import duckdb
    functions = list(functions)
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = con.execute("SELECT max_depth, line_steps FROM runs WHERE sample_id IN "
                           "(SELECT unnest(?))", [[f.id for f in functions]]).fetchall()
    finally:
        con.close()
    used = Counter(c for f in functions for c in constructs(f.code, f.entry))
    buckets = Counter(step_bucket(steps or 0) for _, steps in runs)
    return {
        "packages": dict(sorted(Counter(f.distribution for f in functions).items())),
        "modules": dict(sorted(Counter(f.module for f in functions).items())),
        "constructs": dict(sorted(used.items(), key=lambda item: (-item[1], item[0]))),
        "call_depth": {str(depth): count for depth, count in sorted(
            Counter(depth for depth, _ in runs).items(), key=lambda i: (i[0] is None, i[0]))},
        "steps": {bucket.label: buckets[bucket] for bucket in sorted(buckets)},
    }
