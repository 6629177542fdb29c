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
    found: dict[tuple[str, str | None], None] = {}
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
        imported = imported_from(code, modules)
        if imported:
            lines.append("Names the program imports from them: " + _listed(
                [f"`{name[:100]}` from `{module[:100]}`" if module else f"`{name[:100]}`"
                 for name, module in imported], quoted=False) + ".")
    return lines


def imported_from(code: str, modules: list[str]) -> list[tuple[str, str | None]]:
    """What ``code``'s imports take from ``modules`` (or their submodules), in order:
    (name, module) for a ``from`` import, (the dotted module, None) for an ``import``;
    [] when it does not parse. A run names only the first module it cannot import; this
    names every name that module's absence leaves unbound."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    within = tuple(modules)
    found: dict[tuple[str, str | None], None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _under(node.module, within):
            for alias in node.names:
                found.setdefault((alias.name, node.module), None)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _under(alias.name, within):
                    found.setdefault((alias.name, None), None)
    return list(found)


def _under(module: str | None, modules: tuple[str, ...]) -> bool:
    return module is not None and any(module == m or module.startswith(m + ".")
                                      for m in modules)


def _listed(items: list[str], quoted: bool = True) -> str:
    shown = ", ".join(f"`{item[:100]}`" if quoted else item for item in items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")
