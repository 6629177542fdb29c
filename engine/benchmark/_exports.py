"""Where users call a package's functions: its public names, through re-exports.

A function defined in a private module (``mdurl/_parse.py``'s ``url_parse``) is called as
the name a public module gives it (``mdurl.parse``: ``from mdurl._parse import url_parse
as parse`` in ``mdurl/__init__.py``). This module reads a distribution's modules (parsed,
never imported) and finds, for each function, every public name it has; the harvest
counts each function once, under its shortest public name.

A module's *exports*:

* its ``__all__`` when that is a literal list or tuple of strings (``+=`` and ``+`` of
  such literals too), else
* the public names it defines (``def``, ``class``), and the public names it imports from
  its own distribution when it is a package's ``__init__`` (the package's API), or with
  the re-export form ``import x as x`` / ``from m import x as x`` in any module;
* and in both cases what its ``from m import *`` lines bring from its distribution.

A public module is one no part of whose dotted name starts with ``_``. A function's public
names are ``P.n`` for every public module ``P`` exporting a name ``n`` that resolves to it
(following ``from ... import`` chains and star imports within the distribution, relative
or absolute); a static method of a class so exported is ``P.n.method``. Its id is the
shortest of them (fewest dots, then the shortest, then the first in sorted order).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

_MAX_HOPS = 16  # import chains followed (a cycle of re-exports ends here)


@dataclass
class ModuleTree:
    """One parsed module of a distribution."""

    name: str                 # pkg.sub.mod (pkg.sub for pkg/sub/__init__.py)
    path: Path
    package: bool             # an __init__.py
    tree: ast.Module
    source: str = ""
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (module, name)
    reexported: set[str] = field(default_factory=set)   # `import x as x` names
    stars: list[str] = field(default_factory=list)
    all: list[str] | None = None
    facts: object = None      # the scan's facts of it, read once (steptrace.benchmark._scan)

    def __post_init__(self) -> None:
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node  # the last definition is the binding
                self.classes.pop(node.name, None)
                self.imported.pop(node.name, None)
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                self.functions.pop(node.name, None)
                self.imported.pop(node.name, None)
            elif isinstance(node, ast.ImportFrom):
                source = self.absolute(node)
                if source is None:
                    continue
                for alias in node.names:
                    if alias.name == "*":
                        self.stars.append(source)
                        continue
                    name = alias.asname or alias.name
                    self.imported[name] = (source, alias.name)
                    self.functions.pop(name, None)
                    self.classes.pop(name, None)
                    if alias.asname == alias.name:
                        self.reexported.add(name)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                self._read_all(node)

    def absolute(self, node: ast.ImportFrom) -> str | None:
        """The module a ``from ... import`` in this module names, made absolute (None: a
        relative import beyond the top-level package)."""
        if node.level == 0:
            return node.module
        parts = self.name.split(".")
        if not self.package:
            parts = parts[:-1]
        if node.level - 1 > len(parts) - 1:
            return None
        base = parts[:len(parts) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _read_all(self, node: ast.stmt) -> None:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(
            node.targets) == 1 else getattr(node, "target", None)
        if not (isinstance(target, ast.Name) and target.id == "__all__"):
            return
        names = _strings(node.value)
        if names is None:
            return
        if isinstance(node, ast.AugAssign):
            self.all = (self.all or []) + names
        else:
            self.all = names


def _strings(node: ast.expr | None) -> list[str] | None:
    """The strings of a literal list/tuple (or a ``+`` of them), else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _strings(node.left), _strings(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def is_public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


# (defining module, "name" or "Class.name")
Target = tuple[str, str]


class Exports:
    """A distribution's modules and the public names of its functions."""

    def __init__(self, modules: dict[str, ModuleTree]) -> None:
        self.modules = modules
        self._exports: dict[str, list[str]] = {}
        # (module, name) -> what it resolves to; None while being resolved (a cycle of
        # re-exports resolves to nothing, and star imports are followed once each)
        self._resolved: dict[tuple[str, str], tuple[str, str, str] | None] = {}

    def exports(self, module: str) -> list[str]:
        """The names ``module`` exports (module docstring)."""
        if not self._exports:
            self._exports = self._all_exports()
        return self._exports.get(module, [])

    def _all_exports(self) -> dict[str, list[str]]:
        """Every module's exports at once: its own names, then what its star imports
        bring, to a fixed point (star imports may form cycles; each round only adds)."""
        found: dict[str, dict[str, None]] = {}
        for module, tree in self.modules.items():
            if tree.all is not None:
                names = [n for n in tree.all if not (n.startswith("__") and n.endswith("__"))]
            else:
                names = [n for n in list(tree.functions) + list(tree.classes)
                         if not n.startswith("_")]
                names += [n for n, (source, _) in tree.imported.items()
                          if not n.startswith("_") and (tree.package or n in tree.reexported)
                          and source in self.modules]
            found[module] = dict.fromkeys(names)
        changed = True
        while changed:
            changed = False
            for module, tree in self.modules.items():
                if tree.all is not None:
                    continue
                for source in tree.stars:
                    for name in found.get(source, ()):
                        if name not in found[module]:
                            found[module][name] = None
                            changed = True
        return {module: list(names) for module, names in found.items()}

    def resolve(self, module: str, name: str, hops: int = 0) -> tuple[str, str, str] | None:
        """What ``module.name`` is: (defining module, its name there, "function" or
        "class"), or None (a value, another distribution's, not found)."""
        key = (module, name)
        if key in self._resolved:
            return self._resolved[key]
        self._resolved[key] = None
        found = self._resolve(module, name, hops)
        self._resolved[key] = found
        return found

    def _resolve(self, module: str, name: str, hops: int) -> tuple[str, str, str] | None:
        tree = self.modules.get(module)
        if tree is None or hops > _MAX_HOPS:
            return None
        if name in tree.functions:
            return module, name, "function"
        if name in tree.classes:
            return module, name, "class"
        if name in tree.imported:
            source, original = tree.imported[name]
            if source in self.modules:
                return self.resolve(source, original, hops + 1)
            # `from pkg import sub` where sub is a module is no function
            return None
        for source in tree.stars:
            if name in self.exports(source):
                found = self.resolve(source, name, hops + 1)
                if found is not None:
                    return found
        return None

    def public_names(self) -> dict[Target, list[str]]:
        """Each function (and static method) reachable by a public name, with all its
        public names, the id (module docstring) first."""
        names: dict[Target, list[str]] = {}
        for module in sorted(self.modules):
            if not is_public(module):
                continue
            for name in self.exports(module):
                found = self.resolve(module, name)
                if found is None:
                    continue
                where, original, what = found
                if what == "function":
                    names.setdefault((where, original), []).append(f"{module}.{name}")
                    continue
                for item in self.modules[where].classes[original].body:
                    if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                            and not item.name.startswith("_")
                            and any(isinstance(d, ast.Name) and d.id == "staticmethod"
                                    for d in item.decorator_list)):
                        names.setdefault((where, f"{original}.{item.name}"), []).append(
                            f"{module}.{name}.{item.name}")
        return {target: sorted(set(found), key=_preference)
                for target, found in names.items()}

    def node(self, target: Target) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]:
        """A target's def and its class's name (None for a module-level function)."""
        module, name = target
        tree = self.modules[module]
        if "." not in name:
            return tree.functions[name], None
        cls, method = name.split(".", 1)
        for item in tree.classes[cls].body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                found = item  # the last definition
        return found, cls


def _preference(name: str) -> tuple[int, int, str]:
    return name.count("."), len(name), name


def entry_points(text: str) -> list[tuple[str, str, str]]:
    """The console and GUI scripts of an ``entry_points.txt``: (script, module, name)."""
    found, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif "=" in line and section in ("console_scripts", "gui_scripts"):
            script, value = (part.strip() for part in line.split("=", 1))
            value = value.split("[", 1)[0].strip()  # extras
            if ":" in value:
                module, attr = (part.strip() for part in value.split(":", 1))
                found.append((script, module, attr))
    return found
