"""Deduplication of benchmark candidates: exact and near-duplicate functions.

A model asked many times with the same few-shot pair writes the same function again and
again, often with other names or literals (CRUXEval §3.1 saw few unique functions per
pair). Duplicates are judged per function, over all the corpus records (runs) of it:

* **exact**: the same source once line endings and trailing spaces are normalised;
* **near**: the same syntax tree once every identifier the program binds (function,
  parameter and variable names) is renamed by order of first appearance, and every
  literal replaced by a placeholder of its type. Builtins (``len``, ``range``), method
  and attribute names (``.upper``), ``True``/``False``/``None`` and the literal's type
  are kept: they decide what the program does.

The first function in file order is kept; each later one that duplicates a kept one is
dropped with all its records, and the report names which it duplicated.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from steptrace.benchmark._candidates import read_objects
from steptrace.corpus._text import user_file

_BUILTINS = frozenset(dir(builtins))
_TRAILING_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)
EXACT, NEAR = "exact", "near"


def exact_key(code: str) -> str:
    """The source with ``\\r\\n``/``\\r`` as ``\\n``, no trailing spaces, no trailing
    blank lines."""
    text = code.replace("\r\n", "\n").replace("\r", "\n")
    return _TRAILING_SPACE.sub("", text).rstrip("\n")


class _Normaliser(ast.NodeTransformer):
    """Renames bound identifiers to ``v0, v1, …`` and replaces literals by type."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def rename(self, name: str, binds: bool = True) -> str:
        """A read of a builtin the program never bound keeps its name."""
        if not binds and name in _BUILTINS and name not in self.names:
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.rename(node.id, binds=not isinstance(node.ctx, ast.Load))
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.rename(node.arg)
        node.annotation = None
        return node

    def _visit_function(self, node):
        node.name = self.rename(node.name)
        node.returns = None
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.name = self.rename(node.name)
        self.generic_visit(node)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        if node.value is None or isinstance(node.value, bool) or node.value is Ellipsis:
            return node
        node.value = type(node.value).__name__
        return node

    def visit_Expr(self, node: ast.Expr):
        """A docstring or other bare literal statement does nothing: drop it."""
        if isinstance(node.value, ast.Constant):
            return None
        self.generic_visit(node)
        return node


def near_key(code: str) -> str:
    """The normalised syntax tree (see the module docstring); the exact key for code
    that does not parse here."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "unparsed:" + exact_key(code)
    normalised = _Normaliser().visit(tree)
    return ast.dump(normalised, annotate_fields=False, include_attributes=False)


@dataclass(frozen=True)
class Duplicate:
    id: str          # the dropped function's id
    kept_id: str     # the kept function it duplicates
    kind: str        # EXACT or NEAR
    records: int     # its records dropped


@dataclass
class DedupeReport:
    records_in: int = 0
    functions_in: int = 0
    records_out: int = 0
    functions_out: int = 0
    duplicates: list[Duplicate] = field(default_factory=list)

    def removed(self, kind: str) -> tuple[int, int]:
        """(functions, records) dropped as ``kind`` duplicates."""
        found = [d for d in self.duplicates if d.kind == kind]
        return len(found), sum(d.records for d in found)

    def as_rows(self) -> list[tuple[str, object, object]]:
        exact, near = self.removed(EXACT), self.removed(NEAR)
        return [("in", self.functions_in, self.records_in),
                ("exact duplicates removed", *exact),
                ("near duplicates removed", *near),
                ("out", self.functions_out, self.records_out)]

    def as_dict(self) -> dict:
        return asdict(self)


def read_records(path: str | Path) -> list[dict]:
    """Corpus records (``steptrace filter --out`` writes them: id, code, input, output)."""
    return read_objects(path, "file", lambda r: isinstance(r.get("code"), str)
                        and r.get("id") is not None, "a record needs 'id' and a string 'code'")


def function_id(record: dict) -> tuple[str, str]:
    """One function: a generation id may recur once per input, always with one code."""
    return str(record["id"]), record["code"]


def dedupe_records(records: list[dict]) -> tuple[list[dict], DedupeReport]:
    """The records of every function that duplicates no earlier one, and the report."""
    report = DedupeReport(records_in=len(records))
    per_function: dict[tuple[str, str], int] = {}
    for record in records:
        key = function_id(record)
        per_function[key] = per_function.get(key, 0) + 1
    report.functions_in = len(per_function)
    owners: dict[tuple[str, str], str] = {}   # (kind, key) → kept function id
    dropped: set[tuple[str, str]] = set()
    for function, count in per_function.items():
        fid, code = function
        keys = ((EXACT, exact_key(code)), (NEAR, near_key(code)))
        match = next(((kind, owners[(kind, key)]) for kind, key in keys
                      if (kind, key) in owners and owners[(kind, key)] != fid), None)
        if match is None:
            for pair in keys:
                owners.setdefault(pair, fid)
            continue
        dropped.add(function)
        report.duplicates.append(Duplicate(fid, match[1], match[0], count))
    kept = [r for r in records if function_id(r) not in dropped]
    report.records_out = len(kept)
    report.functions_out = report.functions_in - len(dropped)
    return kept, report


def dedupe_file(path: str | Path, out: str | Path) -> DedupeReport:
    """``dedupe_records`` from one JSONL file to another."""
    kept, report = dedupe_records(read_records(path))
    with user_file(out):
        Path(out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept),
                             encoding="utf-8")
    return report
