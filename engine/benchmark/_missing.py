"""What an excerpt of real code lacks: the names it uses that nothing in it binds, and
the modules its runs could not import.

Code taken from a repository (a function with its file's imports) usually references
names its project defines elsewhere. A run shows only the first (one ``NameError``, or
one ``ModuleNotFoundError``, per round); ``repair``'s feedback names every one at once,
so a round can fix them all. The names are found statically with :mod:`symtable` (never
run): every name a scope reads as a global that the module never binds (``def``,
``class``, ``import``, assignment, ``global`` assignment in a function) and that is no
builtin. A module with a ``from m import *`` binds names no one can list, so it reports
none. The modules come from the runs' own errors (``No module named 'x'``).
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__builtins__",
                                        "__spec__", "__loader__", "__package__"}
_NO_MODULE = re.compile(r"No module named '([^']+)'")
MAX_LISTED = 20  # names (or modules) a feedback line lists


def undefined_names(code: str) -> list[str]:
    """The names ``code`` reads that it never binds and that are no builtins, sorted;
    [] when it does not compile or has a star import."""
    try:
        tree = ast.parse(code)
        table = symtable.symtable(code, "<example>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    if any(isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
           for node in ast.walk(tree)):
        return []
    bound: set[str] = set()
    used: set[str] = set()
    stack = [table]
    while stack:
        scope = stack.pop()
        stack.extend(scope.get_children())
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            if scope.get_type() == "module":
                if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
                    bound.add(name)
                elif symbol.is_referenced():
                    used.add(name)
            elif symbol.is_global():
                if symbol.is_declared_global() and symbol.is_assigned():
                    bound.add(name)
                if symbol.is_referenced():
                    used.add(name)
            elif scope.get_type() == "class" and symbol.is_referenced() and not (
                    symbol.is_local() or symbol.is_free()):
                used.add(name)
    return sorted(used - bound - _BUILTINS)


def missing_modules(messages) -> list[str]:
    """The modules named by ``No module named '...'`` in the runs' error messages, in the
    order first seen."""
    found: dict[str, None] = {}
    for message in messages:
        for name in _NO_MODULE.findall(message or ""):
            found.setdefault(name, None)
    return list(found)


def missing_feedback(code: str, messages) -> list[str]:
    """The feedback lines naming what the program lacks (none when it lacks nothing)."""
    lines = []
    names = undefined_names(code)
    if names:
        lines.append("Names the program uses but never defines or imports: "
                     + _listed(names) + " (its project defines them elsewhere: define "
                     "them in the program, or import them from a module the guest has).")
    modules = missing_modules(messages)
    if modules:
        lines.append("Modules the guest does not have: " + _listed(modules)
                     + " (put what the program needs from them into the program).")
    return lines


def _listed(items: list[str]) -> str:
    shown = ", ".join(f"`{item[:100]}`" for item in items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")
