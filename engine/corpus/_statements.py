"""A program's statements as the host's ``ast`` sees them: one definition of which lines
are statements, for the tasks (which lines a question may name) and the trace features
(``statement_lines`` and ``coverage``).

A program's **statements** are the statements inside a function body, at any depth
(nested functions and classes included), that get a line step when they run: docstrings
(compiled to ``__doc__``), ``global`` and ``nonlocal`` (declarations, no code) are left
out; ``except`` and ``case`` clauses are in (their matching runs on their line). Module-
level code is left out: the guest runs it when the program loads, untraced. A
statement's **line** is the line it starts on (``node.lineno``; a ``case``: its
pattern's), and the program's **statement lines** are the distinct lines of its
statements. A program the host's Python cannot parse (the guest is a newer CPython) has
none: :func:`statement_lines` gives None.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

# The fields of a compound statement that hold statements, clauses or cases, in the order
# they are walked.
STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")
_TRIES = (ast.Try, getattr(ast, "TryStar", ast.Try))
_BRANCHING = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Match, *_TRIES)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_CLAUSES = (ast.ExceptHandler, ast.match_case)
MODULE = "<module>"  # the scope of a script's module-level statements (its code's qualname)


@dataclass(frozen=True)
class Statement:
    """One statement that gets a line step: an ``ast.stmt``, or an ``except`` / ``case``
    clause (``ast.ExceptHandler``, ``ast.match_case``)."""

    node: ast.AST
    line: int          # the line it starts on
    scope: str         # qualified name of the function or class whose body holds it
    # Whether it may be skipped when its function runs: False only for the entry
    # function's own body outside any branch, loop, match or except (it runs whenever
    # the call does); always True without an entry.
    conditional: bool


def parse_program(code: str) -> ast.Module | None:
    """``code``'s syntax tree, or None if the host's Python cannot parse it."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def statements(tree: ast.Module, entry: str | None = None,
               script: bool = False) -> Iterator[Statement]:
    """Every statement of the program (module docstring), outer before inner and in
    source order within a body; ``entry`` names the entry function (a top-level
    ``def``), whose unconditional statements are marked so. Scopes are named by Python's
    ``__qualname__`` rules: ``f.<locals>.g`` for a def inside a function, ``C.m`` for a
    method. A ``script``'s module-level statements (and class bodies) are statements too,
    of the scope ``<module>`` (the qualified name of a module's code), unconditional at
    the top level: the script runs them whenever it runs."""
    if script:
        yield from _walk(tree.body, entry, inside=True, conditional=False, top=True,
                         scope=None, scope_is_function=False, scope_body=True,
                         module=True)
        return
    yield from _walk(tree.body, entry, inside=False, conditional=True, top=True,
                     scope=None, scope_is_function=False, scope_body=False)


def statement_lines(code: str) -> list[int] | None:
    """The program's statement lines, ascending (module docstring); None if the host
    cannot parse it."""
    tree = parse_program(code)
    if tree is None:
        return None
    return sorted({statement.line for statement in statements(tree)})


def is_docstring(node: ast.AST) -> bool:
    """A string statement: when first in a body it is the docstring, which gets no line
    step (any other string statement does)."""
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def runs_sometimes(node: ast.stmt, field: str) -> bool:
    """Whether the statements in ``node.<field>`` may be skipped when ``node`` runs."""
    if isinstance(node, _TRIES):
        return field not in ("body", "finalbody")
    return isinstance(node, _BRANCHING)


def _walk(body: list, entry: str | None, inside: bool, conditional: bool, top: bool,
          scope: str | None, scope_is_function: bool, scope_body: bool,
          module: bool = False) -> Iterator[Statement]:
    for index, node in enumerate(body):
        docstring = scope_body and index == 0 and is_docstring(node)
        if inside and not docstring and not isinstance(node, (ast.Global, ast.Nonlocal)):
            yield Statement(node, node.lineno, MODULE if module else scope, conditional)
        if isinstance(node, _SCOPES):
            is_class = isinstance(node, ast.ClassDef)
            is_entry = top and isinstance(node, ast.FunctionDef) and node.name == entry
            qualname = (node.name if scope is None
                        else f"{scope}.<locals>.{node.name}" if scope_is_function
                        else f"{scope}.{node.name}")
            yield from _walk(node.body, entry, inside or not is_class, not is_entry, False,
                             qualname, not is_class, scope_body=True)
            continue
        for field in STATEMENT_LISTS:
            children = getattr(node, field, None) or []
            for child in children:
                if isinstance(child, _CLAUSES):
                    if inside:
                        line = child.lineno if isinstance(child, ast.ExceptHandler) \
                            else child.pattern.lineno
                        yield Statement(child, line, MODULE if module else scope, True)
                    yield from _walk(child.body, entry, inside, True, False, scope,
                                     scope_is_function, scope_body=False, module=module)
            nested = [child for child in children if isinstance(child, ast.stmt)]
            yield from _walk(nested, entry, inside, conditional or runs_sometimes(node, field),
                             False, scope, scope_is_function, scope_body=False,
                             module=module)
