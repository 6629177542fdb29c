"""Harvesting: real functions from installed packages as a corpus, inputs from a model.

EXE-style (Execution-based evaluation on real code): the functions are the packages' own,
found by static analysis of their installed sources, and a model writes the inputs.

1. **Scan** (:func:`scan_site`). The packages of a :class:`PackageLock` are installed into
   a temporary directory (pip, exactly the lock: ``steptrace.sandbox._packages.install``)
   and every public module's ``.py`` file is parsed with :mod:`ast` (nothing of a package
   is ever imported on the host). A *function* found is a public module-level ``def`` or
   a ``@staticmethod`` of a public module-level class. It is kept when its parameters and
   return are all annotated with types a model can write as literals (:data:`ATOMS`,
   :data:`CONTAINERS`, ``Optional``/``Union``/``|`` of them, nested, ``Literal[...]``,
   string annotations and module-level aliases of them); a ``.py`` function with no
   annotation at all takes them from a ``.pyi`` stub beside it with the same parameters
   (more-itertools ships its annotations that way). Every other function is rejected
   with one of :data:`REASONS` (counted): async, a generator, decorated, ``*args`` or
   ``**kwargs``, no parameters, an annotation missing or not literal-able, a ``global``
   statement, a name neither builtin nor bound in its module, or I/O: any use of a name
   of :data:`DENIED_BUILTINS`, of a module in :data:`DENIED_MODULES` (``import``-ed in
   the module or the function) or an attribute of :data:`DENIED_ATTRIBUTES`. The check is
   of the function's own code only (what it calls in its package is not traced, and the
   sandbox holds whatever it does).
2. **Program**. A kept function's program is its own source, dedented (a static method's
   ``@staticmethod`` line dropped), preceded by ``from pkg.mod import a, b`` for the
   free names it uses that its module binds (its free names in function bodies and
   default values, found with :mod:`symtable`; annotations are not evaluated by the
   guest's CPython 3.14 unless read, PEP 649, so the names only they use are not
   imported). Its entry is the function's name, its id ``pkg.mod.func`` (``pkg.mod.Class
   .func`` for a static method), and the guest imports ``pkg.mod`` when it is built (the
   lock's ``# import:`` lines).
3. **Inputs** (:func:`ask_inputs`). One prompt per kept function (its signature and
   docstring; ``prompts/harvest.txt``) asks for N calls, one a line, between ``[CALLS]``
   and ``[/CALLS]``. Requests go through predict's ``RequestRun`` with a JSONL log,
   resumable as ``steptrace generate`` is: a function logged without an error is not
   asked again. Each line is parsed with :mod:`ast` (:func:`parse_calls`): a call of the
   function whose arguments are literals only (``frozenset(<literal>)`` and ``set()``
   too), that binds to its parameters; the argument text (``ast.unparse``, so duplicates
   are found whatever the quoting) is a corpus ``input``.
4. :func:`harvest` writes ``corpus.jsonl`` (the generic corpus format, records of
   functions with at least one input, each ``model_written``: its inputs are a model's),
   ``guest.lock`` (the lock with the modules as imports) and ``harvest.json`` (the
   counts), then traces the corpus in the guest with the lock, in job isolation (as
   ``trace`` does any record a model wrote). A run that raises is kept: status
   ``exception`` with its type and message, the ``error`` task kind's answer.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import re
import symtable
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

from steptrace.benchmark._log import drop_partial_line, log_records
from steptrace.corpus._meta import MODEL_WRITTEN
from steptrace.corpus._text import NotUtf8Error, decode_text
from steptrace.errors import InputError
from steptrace.predictions._predict import (PredictError, PredictOptions, Prediction,
                                            RequestCounter, RequestRun, Task)

HARVEST_KIND = "harvest"

# ---------------------------------------------------------------- what is kept
ATOMS = frozenset({"int", "float", "complex", "str", "bool", "bytes", "None", "NoneType",
                   "typing.Text", "types.NoneType"})
# generic containers whose values a literal can be: bare or subscripted
CONTAINERS = frozenset({
    "list", "tuple", "dict", "set", "frozenset",
    "typing.List", "typing.Tuple", "typing.Dict", "typing.Set", "typing.FrozenSet",
    "typing.Sequence", "typing.MutableSequence", "typing.Iterable", "typing.Collection",
    "typing.Mapping", "typing.MutableMapping", "typing.AbstractSet", "typing.MutableSet",
    "collections.abc.Sequence", "collections.abc.MutableSequence", "collections.abc.Iterable",
    "collections.abc.Collection", "collections.abc.Mapping", "collections.abc.MutableMapping",
    "collections.abc.Set", "collections.abc.MutableSet"})
UNIONS = frozenset({"typing.Optional", "typing.Union"})
LITERALS = frozenset({"typing.Literal", "typing_extensions.Literal"})

# I/O, the outside world, time and randomness: a function using any of these is rejected
DENIED_BUILTINS = frozenset({"open", "print", "input", "exec", "eval", "compile", "__import__",
                             "breakpoint", "exit", "quit", "help", "globals", "locals", "vars"})
DENIED_MODULES = frozenset({
    "os", "sys", "io", "socket", "ssl", "select", "selectors", "subprocess", "shutil",
    "pathlib", "tempfile", "glob", "fileinput", "urllib", "http", "ftplib", "smtplib",
    "poplib", "imaplib", "requests", "httpx", "aiohttp", "urllib3", "asyncio", "threading",
    "_thread", "multiprocessing", "concurrent", "signal", "ctypes", "mmap", "time", "random",
    "secrets", "uuid", "logging", "getpass", "webbrowser", "sqlite3", "shelve", "dbm",
    "pickle", "importlib", "builtins", "inspect", "gc", "atexit", "sched", "platform",
    "locale", "warnings", "codecs", "zipfile", "tarfile", "gzip", "bz2", "lzma"})
DENIED_ATTRIBUTES = frozenset({"now", "today", "utcnow", "sleep", "system", "popen",
                               "urlopen", "read_text", "write_text", "read_bytes",
                               "write_bytes"})

# Why a function found was not kept (harvest.json's "rejected"), in the order checked.
ASYNC = "async"
GENERATOR = "generator"
DECORATED = "decorated"
VARARGS = "*args or **kwargs"
NO_PARAMETERS = "no parameters"
UNANNOTATED = "annotation missing"
NOT_LITERAL = "annotation not literal-able"
GLOBAL = "global statement"
IO = "I/O or nondeterminism"
UNRESOLVED = "name not bound in its module"
NOT_IMPORTABLE = "module does not import in the guest"
REASONS = (ASYNC, GENERATOR, DECORATED, VARARGS, NO_PARAMETERS, UNANNOTATED, NOT_LITERAL,
           GLOBAL, IO, UNRESOLVED, NOT_IMPORTABLE)

_NOT_LIBRARY = frozenset({"test", "tests", "testing", "docs", "doc", "examples", "benchmarks",
                          "conftest", "setup", "__main__"})
_BUILTINS = frozenset(dir(builtins))


class HarvestError(InputError):
    """Bad harvest settings or files: a log written with other settings, a bad directory."""


@dataclass(frozen=True)
class Harvested:
    """A kept function: its program (``code``, ``entry``) and what its prompt shows."""

    id: str            # pkg.mod.func, pkg.mod.Class.func
    distribution: str  # the locked distribution whose files hold it
    module: str        # pkg.mod: imported by the guest
    entry: str         # the function's name
    code: str          # the imports it needs and its own source
    signature: str     # "def f(x: int, y: str = 'a') -> str" (from the stub if it had none)
    doc: str | None
    params: tuple[tuple[str, str, bool], ...]  # (name, kind, has default): the call check


@dataclass
class ScanReport:
    """What the scan found: modules read, functions found, kept and rejected (by reason)."""

    modules: int = 0
    unparsed_modules: list[str] = field(default_factory=list)  # not UTF-8, or not host syntax
    found: int = 0
    kept: list[Harvested] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)   # id -> reason (detail after ': ')

    def by_reason(self) -> dict[str, int]:
        counts = Counter(reason.split(": ", 1)[0] for reason in self.rejected.values())
        return {reason: counts[reason] for reason in REASONS if counts[reason]}


# ---------------------------------------------------------------- scanning
def scan_site(site: Path, distributions: Iterable[str] | None = None) -> ScanReport:
    """Scan an installed ``site`` directory (pip ``--target``): every public module of
    each distribution (``*.dist-info/RECORD`` says which files are whose; ``distributions``
    limits the scan to those normalised names)."""
    report = ScanReport()
    wanted = None if distributions is None else set(distributions)
    for dist, files in sorted(_distribution_files(site).items()):
        if wanted is not None and dist not in wanted:
            continue
        modules: dict[str, str] = {}
        for relative in files:
            module = _module_name(relative)
            # a package directory shadows a module file of the same name (inflection
            # ships both): the import system finds the package
            if module is not None and (module not in modules
                                       or relative.endswith("/__init__.py")):
                modules[module] = relative
        for module, relative in sorted(modules.items()):
            _scan_module(site / relative, module, dist, report)
    report.kept.sort(key=lambda h: h.id)
    return report


def _distribution_files(site: Path) -> dict[str, list[str]]:
    from steptrace.sandbox._packages import normalise
    found: dict[str, list[str]] = {}
    for info in sorted(site.glob("*.dist-info")):
        record = info / "RECORD"
        if not record.is_file():
            continue
        name = normalise(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        files = sorted({line.split(",", 1)[0] for line in record.read_text().splitlines()
                        if line.split(",", 1)[0].endswith(".py")})
        found[name] = files
    return found


def _module_name(relative: str) -> str | None:
    """``pkg/sub/mod.py`` → ``pkg.sub.mod`` (``pkg/__init__.py`` → ``pkg``); None for a
    private module (a part starting with ``_``), tests and files outside a package."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or any(not p.isidentifier() or p.startswith("_") or p in _NOT_LIBRARY
                        for p in parts):
        return None
    return ".".join(parts)


def _scan_module(path: Path, module: str, dist: str, report: ScanReport) -> None:
    try:
        source = decode_text(path.read_bytes(), path)
        tree = ast.parse(source)
    except (OSError, NotUtf8Error, SyntaxError, ValueError):
        report.unparsed_modules.append(module)
        return
    report.modules += 1
    stub = _stub_functions(path.with_suffix(".pyi"))
    facts = _ModuleFacts(tree)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.name.startswith("_"):
                _consider(node, None, module, dist, source, facts, stub, report)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and not item.name.startswith("_")
                        and any(_is_staticmethod(d) for d in item.decorator_list)):
                    _consider(item, node.name, module, dist, source, facts, {}, report)


def _stub_functions(path: Path) -> dict[str, list[ast.FunctionDef]]:
    if not path.is_file():
        return {}
    try:
        tree = ast.parse(decode_text(path.read_bytes(), path))
    except (OSError, NotUtf8Error, SyntaxError, ValueError):
        return {}
    found: dict[str, list[ast.FunctionDef]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found.setdefault(node.name, []).append(node)
    return found


def _is_staticmethod(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "staticmethod"


class _ModuleFacts:
    """A module's top-level bindings: every name it binds (in any block at module level,
    not inside defs or classes), where its imports come from, and its simple assignments
    (type aliases)."""

    def __init__(self, tree: ast.Module) -> None:
        self.bound: set[str] = set()
        self.origins: dict[str, str] = {}     # name -> dotted origin of an import
        self.aliases: dict[str, ast.expr] = {}
        self.star = False
        self._collect(tree.body)

    def _collect(self, body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    self.bound.add(name)
                    self.origins[name] = alias.name if alias.asname else name
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        self.star = True
                        continue
                    name = alias.asname or alias.name
                    self.bound.add(name)
                    if node.level == 0 and node.module:
                        self.origins[name] = f"{node.module}.{alias.name}"
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for item in ast.walk(target):
                        if isinstance(item, ast.Name):
                            self.bound.add(item.id)
                value = node.value
                if (value is not None and len(targets) == 1 and isinstance(targets[0], ast.Name)
                        and not isinstance(node, ast.AugAssign)):
                    self.aliases[targets[0].id] = value
            else:
                for name in ("body", "orelse", "finalbody"):
                    self._collect(getattr(node, name, []) or [])
                for handler in getattr(node, "handlers", []) or []:
                    if handler.name:
                        self.bound.add(handler.name)
                    self._collect(handler.body)
                for item in getattr(node, "items", []) or []:  # with ... as name
                    if isinstance(getattr(item, "optional_vars", None), ast.Name):
                        self.bound.add(item.optional_vars.id)
                if isinstance(node, (ast.For, ast.AsyncFor)):
                    for item in ast.walk(node.target):
                        if isinstance(item, ast.Name):
                            self.bound.add(item.id)

    def origin(self, node: ast.expr) -> str | None:
        """A dotted name (``t.List``, ``Optional``) as the module sees it: ``typing.List``;
        a builtin name that the module does not rebind as itself."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(node.id)
        parts.reverse()
        head = self.origins.get(parts[0])
        if head is None:
            return None if parts[0] in self.bound else ".".join(parts)
        return ".".join([head, *parts[1:]])


def _literal_type(node: ast.expr | None, facts: _ModuleFacts, depth: int = 0) -> bool:
    """Whether the annotation ``node`` names only values a literal can write."""
    if node is None or depth > 20:
        return False
    if isinstance(node, ast.Constant):
        if node.value is None:
            return True
        if isinstance(node.value, str):  # a string annotation
            try:
                parsed = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                return False
            return _literal_type(parsed, facts, depth + 1)
        return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return (_literal_type(node.left, facts, depth + 1)
                and _literal_type(node.right, facts, depth + 1))
    if isinstance(node, ast.Subscript):
        base = facts.origin(node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base in LITERALS:
            return all(isinstance(i, ast.Constant) for i in items)
        if base in UNIONS or base in CONTAINERS:
            return all((isinstance(i, ast.Constant) and i.value is Ellipsis)
                       or _literal_type(i, facts, depth + 1) for i in items)
        return False
    name = facts.origin(node)
    if name in ATOMS or name in CONTAINERS:
        return True
    if isinstance(node, ast.Name) and node.id in facts.aliases and node.id not in facts.origins:
        return _literal_type(facts.aliases[node.id], facts, depth + 1)
    return False


def _consider(node: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None, module: str,
              dist: str, source: str, facts: _ModuleFacts,
              stub: dict[str, list[ast.FunctionDef]], report: ScanReport) -> None:
    name = node.name
    ident = f"{module}.{cls}.{name}" if cls else f"{module}.{name}"
    report.found += 1
    result = _check(node, cls, facts, stub.get(name, []))
    if isinstance(result, str):
        report.rejected[ident] = result
        return
    signature_node, imports = result
    report.kept.append(_program(node, signature_node, cls, ident, module, dist, source, imports))


def _check(node, cls, facts: _ModuleFacts, stubs: list[ast.FunctionDef]):
    """The reason ``node`` is rejected, or (the node whose annotations count, the names
    to import from its module)."""
    if isinstance(node, ast.AsyncFunctionDef):
        return ASYNC
    if _own_nodes(node, (ast.Yield, ast.YieldFrom)):
        return GENERATOR
    decorators = [d for d in node.decorator_list if not (cls and _is_staticmethod(d))]
    if decorators:
        return f"{DECORATED}: @{ast.unparse(decorators[0])}"
    args = node.args
    if args.vararg or args.kwarg:
        return VARARGS
    params = args.posonlyargs + args.args + args.kwonlyargs
    if not params:
        return NO_PARAMETERS
    annotated = node
    if all(p.annotation is None for p in params) and node.returns is None and stubs:
        if len(stubs) != 1:
            return f"{UNANNOTATED}: overloaded in its stub"
        stub = stubs[0]
        stub_params = stub.args.posonlyargs + stub.args.args + stub.args.kwonlyargs
        if [p.arg for p in stub_params] != [p.arg for p in params]:
            return f"{UNANNOTATED}: its stub has other parameters"
        annotated = stub
    annotated_params = (annotated.args.posonlyargs + annotated.args.args
                        + annotated.args.kwonlyargs)
    for param in annotated_params:
        if param.annotation is None:
            return f"{UNANNOTATED}: {param.arg}"
    if annotated.returns is None:
        return f"{UNANNOTATED}: return"
    for param in annotated_params:
        if not _literal_type(param.annotation, facts):
            return f"{NOT_LITERAL}: {param.arg}: {ast.unparse(param.annotation)}"
    if not _literal_type(annotated.returns, facts):
        return f"{NOT_LITERAL}: return: {ast.unparse(annotated.returns)}"
    if _own_nodes(node, (ast.Global,)):
        return GLOBAL
    denied = _denied(node, facts)
    if denied:
        return f"{IO}: {denied}"
    imports = []
    for free in sorted(_free_names(node)):
        if free == node.name and cls is None:
            continue  # recursion: the program defines it
        if free in facts.bound or (facts.star and free not in _BUILTINS):
            imports.append(free)
        elif free not in _BUILTINS:
            return f"{UNRESOLVED}: {free}"
    return annotated, imports


def _own_nodes(node: ast.AST, kinds: tuple) -> bool:
    """Whether ``node``'s own body (not nested functions, classes or lambdas) has one of
    ``kinds``."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        item = stack.pop()
        if isinstance(item, kinds):
            return True
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                 ast.Lambda)):
            stack.extend(ast.iter_child_nodes(item))
    return False


def _denied(node: ast.FunctionDef, facts: _ModuleFacts) -> str | None:
    """What I/O (or nondeterminism) the function's code names, or None."""
    local_origins: dict[str, str] = {}
    for item in ast.walk(node):
        if isinstance(item, ast.Import):
            for alias in item.names:
                if alias.name.split(".")[0] in DENIED_MODULES:
                    return f"import {alias.name}"
                local_origins[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(item, ast.ImportFrom):
            if item.module and item.level == 0 and item.module.split(".")[0] in DENIED_MODULES:
                return f"from {item.module} import"
    for item in ast.walk(node):
        if isinstance(item, ast.Attribute) and item.attr in DENIED_ATTRIBUTES:
            return f".{item.attr}"
        if isinstance(item, ast.Name) and isinstance(item.ctx, ast.Load):
            origin = local_origins.get(item.id) or facts.origins.get(item.id)
            if origin is not None and origin.split(".")[0] in DENIED_MODULES:
                return origin
            if (origin is None and item.id in DENIED_BUILTINS
                    and item.id not in facts.bound):
                return f"{item.id}()"
    return None


def _free_names(node: ast.FunctionDef) -> set[str]:
    """The global names the function's code uses: in its body and nested functions and
    classes (by symtable), and in its default values (annotations are left out)."""
    plain = _plain_def(node)
    table = symtable.symtable(ast.unparse(plain), "<harvest>", "exec")
    found: set[str] = set()
    stack = list(table.get_children())
    while stack:
        child = stack.pop()
        stack.extend(child.get_children())
        if child.get_type() == "function":
            found.update(s.get_name() for s in child.get_symbols()
                         if s.is_global() and s.is_referenced())
        elif child.get_type() == "class":
            found.update(s.get_name() for s in child.get_symbols()
                         if s.is_referenced() and not s.is_local())
    for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
        found.update(n.id for n in ast.walk(default) if isinstance(n, ast.Name))
    return found


def _plain_def(node: ast.FunctionDef) -> ast.FunctionDef:
    """The def without decorators, annotations or defaults: what symtable reads (the
    annotations and defaults are evaluated outside the function)."""
    copy = ast.parse(ast.unparse(node)).body[0]
    copy.decorator_list = []
    copy.returns = None
    for arg in copy.args.posonlyargs + copy.args.args + copy.args.kwonlyargs:
        arg.annotation = None
    copy.args.defaults = []
    copy.args.kw_defaults = [None] * len(copy.args.kw_defaults)
    return copy


def _program(node, signature_node, cls, ident, module, dist, source, imports) -> Harvested:
    lines = source.splitlines(keepends=True)
    first = node.lineno  # the def line: a static method's @staticmethod line is dropped
    text = textwrap.dedent("".join(lines[first - 1:node.end_lineno]))
    head = f"from {module} import {', '.join(imports)}\n\n\n" if imports else ""
    args = node.args
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    params = tuple([(a.arg, "positional" if i < len(args.posonlyargs) else "either",
                     i >= first_default) for i, a in enumerate(positional)]
                   + [(a.arg, "keyword", d is not None)
                      for a, d in zip(args.kwonlyargs, args.kw_defaults)])
    signature = _signature(node, signature_node)
    return Harvested(ident, dist, module, node.name, head + text.rstrip() + "\n", signature,
                     ast.get_docstring(node), params)


def _signature(node: ast.FunctionDef, annotated: ast.FunctionDef) -> str:
    """``def f(x: int, y: str = 'a') -> str``: the def line, annotations from ``annotated``
    (the function itself, or its stub), defaults from the function."""
    bare = ast.parse(ast.unparse(node)).body[0]
    bare.decorator_list, bare.body = [], [ast.Pass()]
    mine = bare.args.posonlyargs + bare.args.args + bare.args.kwonlyargs
    theirs = annotated.args.posonlyargs + annotated.args.args + annotated.args.kwonlyargs
    for arg, source in zip(mine, theirs):
        arg.annotation = source.annotation
    bare.returns = annotated.returns
    return ast.unparse(bare).split("\n", 1)[0].removesuffix(":")


# ---------------------------------------------------------------- inputs from a model
PLACEHOLDERS = ("id", "module", "entry", "signature", "doc", "n")
MAX_INPUT_CHARS = 2_000      # a longer argument text is not kept
_CALLS = re.compile(r"\[CALLS\](.*?)(?:\[/CALLS\]|$)", re.DOTALL)
_FENCE = re.compile(r"^\s*```")


def default_template_path() -> Path:
    return Path(str(resources.files("steptrace.benchmark") / "prompts" / "harvest.txt"))


def load_template(path: str | Path):
    """The prompt template: every one of :data:`PLACEHOLDERS`, nothing else."""
    import string
    try:
        text = decode_text(Path(path).read_bytes(), path)
    except FileNotFoundError:
        raise HarvestError(f"prompt template not found: {path}") from None
    except OSError as exc:
        raise HarvestError(f"cannot read prompt template {path}: {exc}") from None
    template = string.Template(text)
    if not template.is_valid():
        raise HarvestError(f"template {path}: a '$' that is not a placeholder (write $$ for '$')")
    used = set(template.get_identifiers())
    unknown = sorted(used - set(PLACEHOLDERS))
    if unknown:
        raise HarvestError(f"template {path}: unknown placeholder ${unknown[0]} "
                           f"(known: {', '.join('$' + p for p in PLACEHOLDERS)})")
    missing = [p for p in ("entry", "signature", "n") if p not in used]
    if missing:
        raise HarvestError(f"template {path}: missing placeholder ${missing[0]}")
    return template


def prompt_for(function: Harvested, n: int, template) -> str:
    doc = (f'Its docstring:\n\n"""\n{function.doc.strip()}\n"""' if function.doc
           else "It has no docstring.")
    return template.substitute(id=function.id, module=function.module, entry=function.entry,
                               signature=function.signature, doc=doc, n=n)


@dataclass
class CallReport:
    """What the responses' lines gave (summed over the functions)."""

    lines: int = 0          # non-empty lines in the [CALLS] blocks
    inputs: int = 0         # distinct valid calls kept
    duplicates: int = 0     # a call of the function given before
    not_a_call: int = 0     # no call of the function: prose, another function, bad syntax
    not_literal: int = 0    # an argument that is not a literal
    bad_arguments: int = 0  # the arguments do not bind to the parameters (or are too long)
    extra: int = 0          # valid calls past the N asked for


def parse_calls(text: str | None, function: Harvested, limit: int,
                report: CallReport | None = None) -> list[str]:
    """The distinct argument texts of the calls of ``function`` in a response (at most
    ``limit``): the lines between ``[CALLS]`` and ``[/CALLS]`` (the whole response
    without them; Markdown fences skipped), each ``entry(...)`` (or ``mod.entry(...)``)
    with literal arguments only that bind to the function's parameters."""
    report = report if report is not None else CallReport()
    found: list[str] = []
    if not text:
        return found
    block = _CALLS.search(text)
    for line in (block.group(1) if block else text).splitlines():
        line = line.strip()
        if not line or _FENCE.match(line):
            continue
        report.lines += 1
        verdict = _call_arguments(line, function)
        if verdict is None:
            report.not_a_call += 1
        elif verdict is _NOT_LITERAL:
            report.not_literal += 1
        elif verdict is _BAD_ARGUMENTS:
            report.bad_arguments += 1
        elif verdict in found:
            report.duplicates += 1
        elif len(found) >= limit:
            report.extra += 1
        else:
            found.append(verdict)
    report.inputs += len(found)
    return found


_NOT_LITERAL = "<not literal>"
_BAD_ARGUMENTS = "<bad arguments>"


def _call_arguments(line: str, function: Harvested) -> str | None:
    line = line.removeprefix(">>>").strip().rstrip(";").strip().strip("`").strip()
    try:
        node = ast.parse(line, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(node, ast.Call):
        return None
    callee = node.func
    name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
    if name != function.entry:
        return None
    values = list(node.args) + [k.value for k in node.keywords]
    if (any(isinstance(a, ast.Starred) for a in node.args)
            or any(k.arg is None for k in node.keywords)
            or not all(_is_literal(v) for v in values)):
        return _NOT_LITERAL
    if not _binds(function, len(node.args), [k.arg for k in node.keywords]):
        return _BAD_ARGUMENTS
    text = ", ".join([ast.unparse(a) for a in node.args]
                     + [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords])
    return text if len(text) <= MAX_INPUT_CHARS else _BAD_ARGUMENTS


def _is_literal(node: ast.expr) -> bool:
    """A literal (``ast.literal_eval`` takes it), ``set()`` or ``frozenset(<literal>)``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords
            and ((node.func.id == "set" and not node.args)
                 or (node.func.id == "frozenset" and len(node.args) <= 1
                     and all(_is_literal(a) for a in node.args)))):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _is_literal(k) for k in node.keys) and all(
            _is_literal(v) for v in node.values)
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _binds(function: Harvested, positional: int, keywords: list[str]) -> bool:
    kinds = {"positional": inspect.Parameter.POSITIONAL_ONLY,
             "either": inspect.Parameter.POSITIONAL_OR_KEYWORD,
             "keyword": inspect.Parameter.KEYWORD_ONLY}
    try:
        signature = inspect.Signature([
            inspect.Parameter(name, kinds[kind], default=0 if has_default
                              else inspect.Parameter.empty)
            for name, kind, has_default in function.params])
        signature.bind(*range(positional), **{k: 0 for k in keywords})
    except (TypeError, ValueError):
        return False
    return len(set(keywords)) == len(keywords)


# ---------------------------------------------------------------- the log
def read_log(path: Path) -> dict[str, dict]:
    """The newest logged line per function id (the log's reading: _log.py)."""
    return {record["function"]: record for record in log_records(
        path, lambda r: isinstance(r, dict) and isinstance(r.get("function"), str),
        HarvestError, "harvest log")}


class _Log:
    """The append-only log of prompts and responses: RequestRun's sink."""

    def __init__(self, path: Path, prompts: dict[str, str]) -> None:
        self.path = path
        self.prompts = prompts
        drop_partial_line(path)  # a line a crash left unterminated

    def write(self, rows: list[Prediction]) -> None:
        lines = [json.dumps({
            "function": row.task_id, "prompt": self.prompts[row.task_id], "model": row.model,
            "raw_text": row.raw_text, "error": row.error, "finish_reason": row.finish_reason,
            "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
            "latency_ms": row.latency_ms, "created_at": row.created_at.isoformat()},
            ensure_ascii=False) + "\n" for row in rows]
        with self.path.open("a", encoding="utf-8") as log:
            log.write("".join(lines))


@dataclass
class _Requests(RequestCounter):
    """RequestRun's counter."""

    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def ask_inputs(functions: list[Harvested], n: int, request: PredictOptions, log_path: Path,
               template_path: Path | None = None,
               progress: Callable[[int, int], None] | None = None
               ) -> tuple[dict[str, list[str]], CallReport, _Requests, int]:
    """Ask ``request.model`` for ``n`` calls of each function not yet logged without an
    error; return each function's inputs (from the log), the parse counts, the request
    counts and how many were already logged."""
    template = load_template(template_path or default_template_path())
    prompts = {f.id: prompt_for(f, n, template) for f in functions}
    logged = read_log(log_path)
    for function in functions:
        record = logged.get(function.id)
        if record is None:
            continue
        if record.get("prompt") != prompts[function.id]:
            raise HarvestError(f"{log_path} holds {function.id} with another prompt: it was "
                               "written with another --inputs, template or package version; "
                               "use another --out for new settings")
        if record.get("model") != request.model:
            raise HarvestError(f"{log_path} holds {function.id} from model "
                               f"{record.get('model')!r}, not {request.model!r}; use another "
                               "--out for another model")
    todo = [f for f in functions if f.id not in logged or logged[f.id].get("error")]
    counts = _Requests()
    run = RequestRun(request, _Log(log_path, prompts), counts,
                     progress or (lambda done, total: None), extract=lambda text, task: None)
    fatal = run.run([(Task(f.id, HARVEST_KIND, prompts[f.id]), 0) for f in todo])
    if fatal is not None:
        raise PredictError(f"{fatal}; stopped with {counts.requests} new responses logged "
                           "(run again to resume)")
    logged = read_log(log_path)
    report = CallReport()
    inputs = {}
    for function in functions:
        record = logged.get(function.id) or {}
        if not record.get("error"):
            inputs[function.id] = parse_calls(record.get("raw_text"), function, n, report)
    return inputs, report, counts, len(functions) - len(todo)


# ---------------------------------------------------------------- the whole harvest
CORPUS_FILE, LOCK_FILE, SUMMARY_FILE, LOG_FILE = ("corpus.jsonl", "guest.lock", "harvest.json",
                                                  "harvest.log.jsonl")
_CANNOT_IMPORT = re.compile(r"the guest cannot import '([^']+)' from its packages")
MAX_BUILDS = 5  # builds tried, each dropping the modules the guest could not import


@dataclass(frozen=True)
class HarvestOptions:
    inputs: int = 5                    # calls asked per function
    template_path: Path | None = None  # None: the bundled prompt
    trace: bool = True                 # trace the corpus (else stop after writing it)
    db: Path | None = None             # None: OUT/store.duckdb
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.inputs < 1:
            raise HarvestError("inputs must be at least 1")


@dataclass
class HarvestSummary:
    out: str
    model: str
    packages: str
    modules: int = 0
    unparsed_modules: int = 0
    found: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    kept: int = 0
    kept_by_distribution: dict[str, int] = field(default_factory=dict)
    asked: int = 0                     # functions whose calls are in the log
    already_logged: int = 0
    requests: int = 0
    request_errors: int = 0
    calls: CallReport = field(default_factory=CallReport)
    functions_with_inputs: int = 0
    db: str | None = None
    traced: dict[str, int] = field(default_factory=dict)          # runs by status
    functions_ok: int = 0              # functions with at least one ok run
    functions_raising: int = 0         # functions with at least one exception run
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    def as_rows(self) -> list[tuple[str, object]]:
        rows = [("packages", self.packages), ("modules scanned", self.modules),
                ("modules not parsed", self.unparsed_modules),
                ("functions found", self.found)]
        rows += [(f"rejected: {reason}", count) for reason, count in self.rejected.items()]
        rows += [("functions kept", self.kept),
                 ("asked (already logged)", f"{self.asked} ({self.already_logged})"),
                 ("request errors", self.request_errors), ("call lines", self.calls.lines),
                 ("inputs kept", self.calls.inputs),
                 ("functions with inputs", self.functions_with_inputs)]
        rows += [(f"runs {status}", count) for status, count in self.traced.items()]
        if self.db is not None:
            rows += [("functions with an ok run", self.functions_ok),
                     ("functions with an exception run", self.functions_raising),
                     ("store", self.db)]
        return rows + [("seconds", f"{self.seconds:.2f}")]


def harvest(out: str | Path, lock, request: PredictOptions,
            options: HarvestOptions = HarvestOptions(),
            progress: Callable[[int, int], None] | None = None) -> HarvestSummary:
    """Harvest the functions of the packages of ``lock`` (a ``PackageLock`` or a lock
    file) into the directory ``out``: scan, build the guest, ask ``request.model`` for
    inputs, write ``corpus.jsonl``, ``guest.lock``, ``harvest.json`` (and the log
    ``harvest.log.jsonl``), then trace the corpus (module docstring)."""
    from steptrace.sandbox._packages import as_lock, install
    started = time.perf_counter()
    lock = as_lock(lock)
    if lock.native:
        raise HarvestError("harvest builds and traces with the WASI guest: give it a lock "
                           "for it (steptrace build --with ... --lock FILE), not a native "
                           "lock")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HarvestError(f"--out {out} is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HarvestError(f"cannot create {out}: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="steptrace-harvest-") as tmp:
        install(lock, Path(tmp))
        report = scan_site(Path(tmp), [p.name for p in lock.packages])
    kept = {h.id: h for h in report.kept}
    guest_lock = _guest_lock(lock, kept.values())
    if options.trace:
        guest_lock = _build(lock, kept, report)
    functions = sorted(kept.values(), key=lambda h: h.id)
    inputs, calls, counts, already = ask_inputs(functions, options.inputs, request,
                                                out / LOG_FILE, options.template_path, progress)
    summary = HarvestSummary(str(out), request.model, str(lock), report.modules,
                             len(report.unparsed_modules), report.found, report.by_reason(),
                             len(functions), dict(sorted(Counter(
                                 f.distribution for f in functions).items())),
                             len(inputs), already, counts.requests, counts.errors, calls,
                             sum(1 for texts in inputs.values() if texts))
    records = [{"id": f.id, "code": f.code, "entry": f.entry, "inputs": inputs[f.id],
                "module": f.module, "distribution": f.distribution, MODEL_WRITTEN: True}
               for f in functions if inputs.get(f.id)]
    _write(out / CORPUS_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    _write(out / LOCK_FILE, guest_lock.text)
    details = {"kept_functions": [f.id for f in functions],
               "rejected_functions": dict(sorted(report.rejected.items())),
               "unparsed_modules": report.unparsed_modules}
    if options.trace and records:
        _trace(out, records, guest_lock, options, summary)
    summary.seconds = time.perf_counter() - started
    _write(out / SUMMARY_FILE, json.dumps({**summary.as_dict(), **details}, indent=2,
                                          ensure_ascii=False) + "\n")
    return summary


def _guest_lock(lock, functions: Iterable[Harvested]):
    from dataclasses import replace
    return replace(lock, imports=tuple(sorted(set(lock.imports)
                                              | {f.module for f in functions})))


def _build(lock, kept: dict[str, Harvested], report: ScanReport):
    """Build the guest importing the kept functions' modules; a module it cannot import
    (native code, a missing optional dependency, WASI) loses its functions and the build
    is tried again without it."""
    from steptrace.sandbox._build import BuildError, ensure_component
    for _ in range(MAX_BUILDS):
        guest_lock = _guest_lock(lock, kept.values())
        try:
            ensure_component(packages=guest_lock)
            return guest_lock
        except BuildError as exc:
            match = _CANNOT_IMPORT.search(str(exc))
            module = match.group(1) if match else None
            dropped = [i for i, f in kept.items() if module is not None
                       and (f.module == module or f.module.startswith(module + "."))]
            if not dropped:
                raise
            for ident in dropped:
                report.rejected[ident] = f"{NOT_IMPORTABLE}: {module}"
                del kept[ident]
    raise HarvestError(f"the guest could not be built in {MAX_BUILDS} tries")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise HarvestError(f"cannot write {path}: {exc}") from None


def _trace(out: Path, records: list[dict], guest_lock, options: HarvestOptions,
           summary: HarvestSummary) -> None:
    import duckdb

    from steptrace._api import trace
    db = options.db or out / "store.duckdb"
    trace(out / CORPUS_FILE, db, workers=options.workers, isolation="job", packages=guest_lock)
    summary.db = str(db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        ids = [r["id"] for r in records]
        summary.traced = dict(con.execute(
            "SELECT status, count(*) FROM runs WHERE sample_id IN (SELECT unnest(?)) "
            "GROUP BY status ORDER BY status", [ids]).fetchall())
        found = dict(con.execute(
            "SELECT status, count(DISTINCT sample_id) FROM runs WHERE status IN "
            "('ok', 'exception') AND sample_id IN (SELECT unnest(?)) GROUP BY status",
            [ids]).fetchall())
    finally:
        con.close()
    summary.functions_ok = found.get("ok", 0)
    summary.functions_raising = found.get("exception", 0)
