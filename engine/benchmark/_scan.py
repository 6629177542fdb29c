"""The harvest's static scan: the functions of installed packages that a model can call
with literals, found where users call them, each once, and why the others are not kept.

Nothing of a package is imported on the host: every module of a distribution
(``*.dist-info/RECORD`` says which files are whose) is parsed with :mod:`ast`.

* **Found** (:mod:`steptrace.benchmark._exports`): a function (or a ``@staticmethod`` of
  a class) reachable by a public name: a public module's ``__all__``, its own public
  ``def``\\ s, a package ``__init__``'s imports from its own distribution, chains of them
  and star imports. A function defined in a private module and re-exported is found
  under its public name (``mdurl.parse`` for ``mdurl._parse.url_parse``); a function
  with several public names, or a name defined twice, is one function: its id is its
  shortest public name, the others are its ``aliases``.
* **Kept** when, in this order, it is not an entry point (a ``console_scripts`` /
  ``gui_scripts`` target of the distribution's ``entry_points.txt``, a function named
  ``main``, a click/typer command, or code using :data:`ENTRY_MODULES` or ``sys.argv``),
  not async, not a generator, not decorated, has no ``*args``/``**kwargs``, has
  parameters, is annotated (or takes its ``.pyi`` stub's annotations), every annotation
  a literal can satisfy (:mod:`steptrace.benchmark._annotations`), has no ``global``
  statement, does no I/O, randomness or time (:data:`DENIED`), and uses only names its
  module binds or builtins. Each rejection is counted by its reason (:data:`REASONS`),
  a rejected annotation also by why (``_annotations.ANNOTATION_REASONS``).
* **Program**: a kept function's own source, dedented, its relative imports made
  absolute, after ``from <defining module> import ...`` for the free names it uses that
  its module binds (``symtable``), with its
  id, entry (its ``def`` name), the public module the guest imports, its parameters'
  type specs (the input check) and the digest of its source (``--since``).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import io
import re
import symtable
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from steptrace.benchmark._annotations import NotLiteral, Spec, canonical, spec_of
from steptrace.benchmark._exports import Exports, ModuleTree, entry_points, is_public
from steptrace.corpus._text import NotUtf8Error, decode_text

# ---------------------------------------------------------------- what is refused
# Each category: (modules whose use is refused, builtins, attributes). A function whose
# own code (nested functions included) names any of them is rejected with the category
# as its reason; "entry point" first, then I/O, randomness, time.
ENTRY = "entry point"
IO = "I/O"
RANDOMNESS = "randomness"
TIME = "time"
DENIED: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {
    ENTRY: (frozenset({"argparse", "optparse", "getopt", "click", "typer", "fire", "docopt"}),
            frozenset(), frozenset({"argv"})),
    IO: (frozenset({
        "os", "sys", "io", "socket", "ssl", "select", "selectors", "subprocess", "shutil",
        "pathlib", "tempfile", "glob", "fileinput", "urllib.request", "urllib.robotparser",
        "http.client", "http.server", "http.cookiejar", "ftplib", "smtplib",
        "poplib", "imaplib", "requests", "httpx", "aiohttp", "urllib3", "asyncio",
        "threading", "_thread", "multiprocessing", "concurrent", "signal", "ctypes", "mmap",
        "logging", "getpass", "webbrowser", "sqlite3", "shelve", "dbm", "pickle",
        "importlib", "builtins", "inspect", "gc", "atexit", "platform", "locale",
        "warnings", "codecs", "zipfile", "tarfile", "gzip", "bz2", "lzma"}),
        frozenset({"open", "print", "input", "exec", "eval", "compile", "__import__",
                   "breakpoint", "exit", "quit", "help", "globals", "locals", "vars"}),
        frozenset({"system", "popen", "urlopen", "read_text", "write_text", "read_bytes",
                   "write_bytes"})),
    RANDOMNESS: (frozenset({"random", "secrets", "uuid"}), frozenset(),
                 frozenset({"urandom", "getrandbits", "randbytes", "token_bytes",
                            "token_hex", "uuid1", "uuid4"})),
    TIME: (frozenset({"time", "sched"}), frozenset(),
           frozenset({"now", "today", "utcnow", "sleep", "monotonic", "perf_counter",
                      "process_time", "time_ns", "monotonic_ns", "perf_counter_ns"})),
}
ENTRY_MODULES = DENIED[ENTRY][0]
ENTRY_NAMES = frozenset({"main"})

# Why a function found was not kept (harvest.json's "rejected"), in the order checked.
ASYNC = "async"
GENERATOR = "generator"
DECORATED = "decorated"
VARARGS = "*args or **kwargs"
NO_PARAMETERS = "no parameters"
UNANNOTATED = "annotation missing"
NOT_LITERAL = "annotation not literal-able"
GLOBAL = "global statement"
UNRESOLVED = "name not bound in its module"
UNREADABLE = "code the scan cannot read"   # nested past the host's recursion limit
NOT_IMPORTABLE = "module does not import in the guest"
REASONS = (ENTRY, ASYNC, GENERATOR, DECORATED, VARARGS, NO_PARAMETERS, UNANNOTATED,
           NOT_LITERAL, GLOBAL, IO, RANDOMNESS, TIME, UNRESOLVED, UNREADABLE, NOT_IMPORTABLE)

# Why a module of a distribution is not read (counted; its functions are not found).
MAX_MODULE_BYTES = 4 * 1024 * 1024
NOT_READ_SIZE = f"module larger than {MAX_MODULE_BYTES // (1024 * 1024)} MB"
NOT_READ_UTF8 = "module not UTF-8"
NOT_READ_SYNTAX = "module does not parse"
NOT_READ_NESTED = "module nested too deep to parse"
NOT_READ_OS = "module cannot be read (or not a regular file)"

_NOT_LIBRARY = frozenset({"test", "tests", "testing", "docs", "doc", "examples", "benchmarks",
                          "conftest", "setup", "__main__"})
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class Harvested:
    """A kept function: its program (``code``, ``entry``) and what its prompt shows."""

    id: str            # its shortest public name: pkg.func, pkg.mod.Class.func
    distribution: str  # the locked distribution whose files hold it
    module: str        # the public module of its id: imported by the guest
    entry: str         # its def's name (the program defines it)
    code: str          # the imports it needs and its own source
    signature: str     # "def f(x: int, y: str = 'a') -> str" (from the stub if it had none)
    doc: str | None
    params: tuple[tuple[str, str, bool], ...]  # (name, kind, has default): the call check
    specs: tuple[tuple[str, Spec], ...] = ()    # (name, type spec): the input check
    defined_in: str = ""                       # the module whose def it is
    source_digest: str = ""                    # of its code, normalised (source_digest)
    aliases: tuple[str, ...] = ()              # its other public names

    @property
    def name(self) -> str:
        """The name users call it by (the last part of its id)."""
        return self.id.rsplit(".", 1)[-1]


@dataclass
class ScanReport:
    """What the scan found: modules read, functions found, kept and rejected (by reason)."""

    modules: int = 0
    unparsed_modules: list[str] = field(default_factory=list)  # not UTF-8, or not host syntax
    unparsed_reasons: Counter = field(default_factory=Counter)  # NOT_READ_* -> modules
    found: int = 0
    reexported: int = 0            # found under a module other than the one defining it
    aliases: int = 0               # public names beyond each function's first
    kept: list[Harvested] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)   # id -> reason (detail after ': ')
    annotations: Counter = field(default_factory=Counter)    # why an annotation is not literal-able
    digests: dict[str, str] = field(default_factory=dict)    # id -> source digest (found ones)

    def by_reason(self) -> dict[str, int]:
        counts = Counter(reason.split(": ", 1)[0] for reason in self.rejected.values())
        return {reason: counts[reason] for reason in REASONS if counts[reason]}

    def reject(self, ident: str, reason: str) -> None:
        self.rejected[ident] = reason


# ---------------------------------------------------------------- scanning
def scan_site(site: Path, distributions: Iterable[str] | None = None) -> ScanReport:
    """Scan an installed ``site`` directory (pip ``--target``): every module of each
    distribution (``*.dist-info/RECORD`` says which files are whose; ``distributions``
    limits the scan to those normalised names), its functions found by their public
    names (module docstring)."""
    report = ScanReport()
    for dist, exports, info in read_distributions(site, distributions, report):
        _scan_distribution(dist, exports, _scripts(info), report)
    report.kept.sort(key=lambda h: h.id)
    return report


def read_distributions(site: Path, distributions: Iterable[str] | None,
                       report: ScanReport) -> Iterator[tuple[str, Exports, Path]]:
    """Each distribution of ``site`` (``distributions``: only those normalised names),
    in name order: its name, its modules parsed (``report`` counts those read and those
    that are not) and its ``.dist-info`` directory."""
    wanted = None if distributions is None else set(distributions)
    for dist, (files, info) in sorted(_distribution_files(site).items()):
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
        trees = {}
        for module, relative in sorted(modules.items()):
            parsed = _parse(site / relative, module, report)
            if parsed is not None:
                trees[module] = ModuleTree(module, site / relative,
                                           relative.endswith("__init__.py"), *parsed)
        yield dist, Exports(trees), info


def dist_version(info: Path) -> str:
    """The version a ``NAME-VERSION.dist-info`` directory names."""
    return info.name.removesuffix(".dist-info").rsplit("-", 1)[-1]


def _distribution_files(site: Path) -> dict[str, tuple[list[str], Path]]:
    from steptrace.sandbox._packages import normalise
    found: dict[str, tuple[list[str], Path]] = {}
    for info in sorted(site.glob("*.dist-info")):
        record = info / "RECORD"
        if not record.is_file():
            continue
        name = normalise(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        try:  # a RECORD that is not UTF-8 names no module that can be imported anyway
            text = record.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        files = sorted({line.split(",", 1)[0] for line in text.splitlines()
                        if line.split(",", 1)[0].endswith(".py")})
        found[name] = (files, info)
    return found


def _module_name(relative: str) -> str | None:
    """``pkg/sub/mod.py`` → ``pkg.sub.mod`` (``pkg/__init__.py`` → ``pkg``; private
    modules too: their functions are found through their re-exports); None for tests,
    docs and the like, and files outside a package."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or any(not p.isidentifier() or p in _NOT_LIBRARY for p in parts):
        return None
    return ".".join(parts)


def _parse(path: Path, module: str, report: ScanReport) -> tuple[ast.Module, str] | None:
    """A module's tree and source; None when it cannot be read, its reason counted."""
    try:
        if not path.is_file():  # a FIFO or a device (/dev/zero) is never read
            return _unparsed(report, module, NOT_READ_OS)
        with path.open("rb") as handle:
            data = handle.read(MAX_MODULE_BYTES + 1)
        if len(data) > MAX_MODULE_BYTES:
            return _unparsed(report, module, NOT_READ_SIZE)
        source = decode_text(data, path)
        tree = ast.parse(source)
    except NotUtf8Error:
        return _unparsed(report, module, NOT_READ_UTF8)
    except (SyntaxError, ValueError):
        return _unparsed(report, module, NOT_READ_SYNTAX)
    except (MemoryError, RecursionError):
        return _unparsed(report, module, NOT_READ_NESTED)
    except OSError:
        return _unparsed(report, module, NOT_READ_OS)
    report.modules += 1
    return tree, source


def _unparsed(report: ScanReport, module: str, reason: str) -> None:
    report.unparsed_modules.append(module)
    report.unparsed_reasons[reason] += 1


def _scripts(info: Path) -> dict[tuple[str, str], str]:
    """The distribution's console and GUI scripts: (module, attribute) -> script name."""
    path = info / "entry_points.txt"
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        return {}
    return {(module, attr): script for script, module, attr in entry_points(text)}


def _scan_distribution(dist: str, exports: Exports, scripts: dict[tuple[str, str], str],
                       report: ScanReport) -> None:
    script_targets = {}
    for (module, attr), script in scripts.items():
        head, _, method = attr.partition(".")
        found = exports.resolve(module, head)
        if found is not None:
            where, original, _ = found
            script_targets[(where, f"{original}.{method}" if method else original)] = script
    facts: dict[str, _ModuleFacts] = {}
    stubs: dict[str, tuple[dict[str, list[ast.FunctionDef]], _ModuleFacts | None]] = {}
    for target, names in sorted(exports.public_names().items(), key=lambda t: t[1][0]):
        ident, aliases = names[0], tuple(names[1:])
        module = ident.rsplit(".", 2 if "." in target[1] else 1)[0]
        report.found += 1
        report.aliases += len(aliases)
        report.reexported += module != target[0]
        tree = exports.modules[target[0]]
        node, cls = exports.node(target)
        if target[0] not in facts:
            facts[target[0]] = _facts(tree, exports)
        text = _own_source(tree, node)
        report.digests[ident] = source_digest(text)
        script = script_targets.get(target)
        if script is not None:
            report.reject(ident, f"{ENTRY}: console script {script}")
            continue
        if target[0] not in stubs:
            stubs[target[0]] = _stub(tree.path.with_suffix(".pyi"))
        stub_defs, stub_facts = stubs[target[0]]
        try:
            result = _check(node, cls, facts[target[0]],
                            [] if cls else stub_defs.get(node.name, []), stub_facts,
                            report.annotations)
            if not isinstance(result, str):
                signature_node, imports, specs = result
                kept = _program(node, signature_node, text, ident, module, dist,
                                target[0], imports, specs, aliases)
        except (RecursionError, MemoryError, SyntaxError, ValueError):
            result = UNREADABLE  # symtable and unparse recurse: code nested too deep
        if isinstance(result, str):
            report.reject(ident, result)
            continue
        report.kept.append(kept)


def _facts(tree: ModuleTree, exports: Exports) -> "_ModuleFacts":
    """A module's facts, with the type aliases and type variables it imports from another
    module of its distribution (``from ._types import T``: one hop, read as if defined
    here)."""
    facts = _ModuleFacts(tree.tree)
    for name, (source, original) in tree.imported.items():
        other = exports.modules.get(source)
        if other is None or name in facts.aliases:
            continue
        if other.facts is None:
            other.facts = _ModuleFacts(other.tree)
        if original in other.facts.aliases:
            facts.aliases[name] = other.facts.aliases[original]
    return facts


def _stub(path: Path) -> tuple[dict[str, list[ast.FunctionDef]], "_ModuleFacts | None"]:
    """The functions of the ``.pyi`` stub beside a module (by name: one list per name,
    overloads several) and the stub's facts (its annotations are read in its names)."""
    if not path.is_file():
        return {}, None
    try:
        tree = ast.parse(decode_text(path.read_bytes(), path))
    except (OSError, NotUtf8Error, SyntaxError, ValueError, MemoryError, RecursionError):
        return {}, None
    found: dict[str, list[ast.FunctionDef]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found.setdefault(node.name, []).append(node)
    return found, _ModuleFacts(tree)


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



_RELATIVE_FROM = re.compile(r"from[ \t]*\.(?:[ \t]*\.)*"
                            r"(?:[ \t]*(?!import\b)[A-Za-z_]\w*(?:[ \t]*\.[ \t]*[A-Za-z_]\w*)*)?")


def _own_source(tree: ModuleTree, node: ast.FunctionDef | ast.AsyncFunctionDef,
                decorators: bool = False) -> str:
    """The def's own lines, dedented: from the def line (a decorator line is dropped), or
    from its first decorator; its relative imports made absolute: the program runs
    outside its package, where numpy.polynomial's ``from ._polybase import ABCPolyBase``
    would raise ImportError, so it reads ``from numpy.polynomial._polybase import
    ABCPolyBase``."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list if decorators])
    # the lines as ast numbers them: split at \n, \r\n and \r only (not at a form feed
    # or U+2028, which str.splitlines splits at)
    lines = io.StringIO(tree.source, newline="").readlines()[first - 1:node.end_lineno]
    relative = [item for item in ast.walk(node)
                if isinstance(item, ast.ImportFrom) and item.level]
    for item in sorted(relative, key=lambda i: (i.lineno, i.col_offset), reverse=True):
        absolute = tree.absolute(item)
        row = item.lineno - first
        line = lines[row]
        start = len(line.encode("utf-8")[:item.col_offset].decode("utf-8", "replace"))
        match = _RELATIVE_FROM.match(line, start)
        if absolute is not None and match is not None:
            lines[row] = f"{line[:start]}from {absolute}{line[match.end():]}"
    return textwrap.dedent("".join(lines)).rstrip() + "\n"


def source_digest(text: str) -> str:
    """SHA-256 of a function's code, normalised: ``ast.unparse`` of its def without its
    docstring, so a release that only reformats it, edits its comments or its docstring
    does not make it new (``--since``); the text itself when it does not parse."""
    try:
        node = ast.parse(text).body[0]
        body = node.body
        if (len(body) > 1 and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:]
        text = ast.unparse(node)
    except (SyntaxError, ValueError, IndexError, AttributeError, RecursionError):
        pass
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check(node, cls, facts: "_ModuleFacts", stubs: list[ast.FunctionDef],
           stub_facts: "_ModuleFacts | None", annotations: Counter):
    """The reason ``node`` is rejected, or (the node whose annotations count, the names
    to import from its module, its parameters' type specs). A rejected annotation's
    reason is counted in ``annotations``."""
    entry = _entry_point(node, facts)
    if entry:
        return f"{ENTRY}: {entry}"
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
    reading = facts if annotated is node else stub_facts
    annotated_params = (annotated.args.posonlyargs + annotated.args.args
                        + annotated.args.kwonlyargs)
    for param in annotated_params:
        if param.annotation is None:
            return f"{UNANNOTATED}: {param.arg}"
    if annotated.returns is None:
        return f"{UNANNOTATED}: return"
    specs = []
    for name, annotation, returns in ([(p.arg, p.annotation, False) for p in annotated_params]
                                      + [("return", annotated.returns, True)]):
        try:
            specs.append((name, spec_of(annotation, reading.origin, reading.aliases,
                                        returns)))
        except NotLiteral as exc:
            annotations[exc.reason] += 1
            return f"{NOT_LITERAL}: {name}: {ast.unparse(annotation)} ({exc.reason})"
    if _own_nodes(node, (ast.Global,)):
        return GLOBAL
    denied = _denied(node, facts)
    if denied:
        return denied
    imports = []
    for free in sorted(_free_names(node)):
        if free == node.name and cls is None:
            continue  # recursion: the program defines it
        if free in facts.bound or (facts.star and free not in _BUILTINS):
            imports.append(free)
        elif free not in _BUILTINS:
            return f"{UNRESOLVED}: {free}"
    return annotated, imports, tuple(specs[:-1])


def _entry_point(node, facts: "_ModuleFacts") -> str | None:
    """Why ``node`` is a program's entry point rather than a library function, or None:
    named ``main``, or a click/typer command (a console script is found by the caller)."""
    if node.name in ENTRY_NAMES:
        return f"named {node.name}"
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        origin = facts.origin(target) or ""
        if origin.split(".")[0] in ENTRY_MODULES:
            return f"@{ast.unparse(target)}"
    return None


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


def _denied(node: ast.FunctionDef, facts: "_ModuleFacts") -> str | None:
    """The first category of :data:`DENIED` (in its order) the function's code uses, as
    ``category: what``, or None."""
    found: dict[str, str] = {}

    def hit(module: str) -> None:
        parts = module.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        for category, (modules, _, _) in DENIED.items():
            if prefixes & modules:
                found.setdefault(category, module)

    local_origins: dict[str, str] = {}
    for item in ast.walk(node):
        if isinstance(item, ast.Import):
            for alias in item.names:
                hit(alias.name)
                local_origins[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(item, ast.ImportFrom) and item.module and item.level == 0:
            hit(item.module)
    for item in ast.walk(node):
        if isinstance(item, ast.Attribute):
            for category, (_, _, attributes) in DENIED.items():
                if item.attr in attributes:
                    found.setdefault(category, f".{item.attr}")
            chain = []  # a.b.c: the dotted name from the origin of a
            while isinstance(item, ast.Attribute):
                chain.append(item.attr)
                item = item.value
            if isinstance(item, ast.Name):
                origin = local_origins.get(item.id) or facts.origins.get(item.id)
                if origin is not None:
                    hit(".".join([origin, *reversed(chain)]))
        elif isinstance(item, ast.Name) and isinstance(item.ctx, ast.Load):
            origin = local_origins.get(item.id) or facts.origins.get(item.id)
            if origin is not None:
                hit(origin)
            elif item.id not in facts.bound:
                for category, (_, names, _) in DENIED.items():
                    if item.id in names:
                        found.setdefault(category, f"{item.id}()")
    for category in DENIED:
        if category in found:
            return f"{category}: {found[category]}"
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




def _program(node, signature_node, text: str, ident: str, module: str, dist: str,
             defined_in: str, imports: list[str], specs, aliases) -> Harvested:
    head = f"from {defined_in} import {', '.join(imports)}\n\n\n" if imports else ""
    args = node.args
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    params = tuple([(a.arg, "positional" if i < len(args.posonlyargs) else "either",
                     i >= first_default) for i, a in enumerate(positional)]
                   + [(a.arg, "keyword", d is not None)
                      for a, d in zip(args.kwonlyargs, args.kw_defaults)])
    return Harvested(ident, dist, module, node.name, head + text, _signature(node, signature_node),
                     ast.get_docstring(node), params, specs, defined_in, source_digest(text), aliases)

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


