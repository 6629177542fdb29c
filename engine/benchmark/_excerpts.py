"""Excerpts: functions of real packages as they sit in their modules, the input of
``repair`` (CodeBenchGen-style: real code made into runnable examples with tests).

An excerpt is deliberately *not* self-contained. Its program is what a reader of the
repository sees of one function: the module's imports that the function uses (relative
ones written absolute, ``from .util import x`` -> ``from pkg.util import x``), then the
function's own source (its decorators included). The names it uses that its project
defines elsewhere (a helper or a constant of its own module, a name imported from
another module of its distribution) stay missing: repair's first round fails and its
feedback names every one of them (``steptrace.benchmark._missing``). The record says
where each is defined (``project_names``: name -> ``module.name``, null when a star
import hides it), so a reader (or a model with the repository) can look them up.

The functions are those the harvest finds (``steptrace.benchmark._scan``, ``_exports``:
reachable by a public name, re-exports followed, each once, under its shortest public
name), read from every module of each distribution (nothing is imported). Each is one
record of the ``write`` form (docs/guides/repair.md): ``code``, ``entry`` (its def's
name), ``input`` empty (it has no tests: the model writes them) and, as metadata,
``module`` (the public module of its id), ``defined_in``, ``distribution``, ``version``,
``source_digest`` and ``project_names``. Functions not written are counted by reason
(:data:`SKIP_REASONS`), and so are the modules not read (``_scan``'s ``NOT_READ_*``).
"""

from __future__ import annotations

import ast
import json
import symtable
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from steptrace.benchmark._exports import Exports, ModuleTree
from steptrace.benchmark._missing import undefined_names
from steptrace.benchmark._repair import MAX_CODE, example_from_record
from steptrace.benchmark._scan import (UNREADABLE, ScanReport, _ModuleFacts, _own_source,
                                       dist_version, read_distributions, source_digest)
from steptrace.corpus._formats import CorpusError
from steptrace.errors import InputError

METHOD = "a static method (its class is its context)"
TOO_LONG = f"longer than repair takes ({MAX_CODE:,} characters)"
NOT_A_RECORD = "not a record repair takes (its metadata too large)"
ID_TAKEN = "its id taken by another distribution's module of the same name"
SKIP_REASONS = (METHOD, UNREADABLE, TOO_LONG, NOT_A_RECORD, ID_TAKEN)


class ExcerptError(InputError):
    """Bad excerpt settings: an output file that cannot be written, a missing site."""


@dataclass
class ExcerptSummary:
    """What was read and written: modules (read, not read by reason), functions found,
    excerpts written (per distribution), those using project names, and the skipped."""

    out: str
    modules: int = 0
    modules_not_read: dict[str, int] = field(default_factory=dict)
    found: int = 0
    written: int = 0
    beyond_count: int = 0        # found and writable, past --count for its distribution
    with_project_names: int = 0  # excerpts using a name their project defines elsewhere
    project_names: int = 0       # such names, summed over the excerpts
    skipped: dict[str, int] = field(default_factory=dict)
    distributions: dict[str, int] = field(default_factory=dict)  # excerpts written each
    records: list[dict] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "records"} | {
            "next": self.next_step}

    @property
    def next_step(self) -> str:
        return (f"steptrace repair {self.out or 'CORPUS'} --model M --base-url URL "
                "--out repaired.jsonl")

    def as_rows(self) -> list[tuple[str, object]]:
        rows = [("excerpts", self.out), ("modules read", self.modules)]
        rows += [(f"modules not read: {k}", v) for k, v in self.modules_not_read.items()]
        rows += [("functions found", self.found), ("excerpts written", self.written),
                 ("past --count", self.beyond_count),
                 ("using project names", self.with_project_names),
                 ("project names used", self.project_names)]
        rows += [(f"skipped: {k}", v) for k, v in self.skipped.items()]
        rows += [(f"distribution {k}", v) for k, v in self.distributions.items()]
        return rows + [("next", self.next_step)]


# ---------------------------------------------------------------- reading a site
def excerpts_of_site(site: Path, distributions: Iterable[str] | None = None,
                     count: int | None = None, out: str = "") -> ExcerptSummary:
    """The excerpts of the functions of an installed ``site`` (pip ``--target``; only
    ``distributions``, normalised names, when given): at most ``count`` a distribution,
    the first by id (module docstring)."""
    scan = ScanReport()
    summary = ExcerptSummary(out)
    skipped: Counter[str] = Counter()
    taken: set[str] = set()
    for dist, exports, info in read_distributions(site, distributions, scan):
        version = dist_version(info)
        written, read = 0, {}
        for target, names in sorted(exports.public_names().items(), key=lambda t: t[1][0]):
            summary.found += 1
            ident = names[0]
            module = ident.rsplit(".", 2 if "." in target[1] else 1)[0]
            record = excerpt_record(exports, target, ident, module, dist, version, read)
            if not isinstance(record, str) and ident in taken:
                record = ID_TAKEN
            if isinstance(record, str):
                skipped[record] += 1
            elif count is not None and written >= count:
                summary.beyond_count += 1
            else:
                written += 1
                taken.add(ident)
                summary.records.append(record)
        if written:
            summary.distributions[dist] = written
    summary.modules = scan.modules
    summary.modules_not_read = dict(sorted(scan.unparsed_reasons.items()))
    summary.skipped = {reason: skipped[reason] for reason in SKIP_REASONS if skipped[reason]}
    summary.written = len(summary.records)
    summary.with_project_names = sum(1 for r in summary.records if r["project_names"])
    summary.project_names = sum(len(r["project_names"]) for r in summary.records)
    return summary


def excerpt_record(exports: Exports, target: tuple[str, str], ident: str, module: str,
                   dist: str, version: str, read: dict | None = None) -> dict | str:
    """The record of the function ``target`` (defining module, name), or why it is not
    written (one of :data:`SKIP_REASONS`). ``read``: the modules' facts read so far."""
    if "." in target[1]:
        return METHOD
    tree = exports.modules[target[0]]
    node, _ = exports.node(target)
    try:
        text = _own_source(tree, node, decorators=True)
        symtable.symtable(text, "<excerpt>", "exec")  # what undefined_names reads
        read = {} if read is None else read
        if tree.name not in read:
            read[tree.name] = _Facts(_ModuleFacts(tree.tree), _module_imports(tree))
        head, names = _context(exports, tree, read[tree.name], undefined_names(text))
        code = head + ("\n\n" if head else "") + text
        digest = source_digest(text)
    except (RecursionError, MemoryError, SyntaxError, ValueError):
        return UNREADABLE  # symtable and unparse recurse: code nested too deep
    if len(code) > MAX_CODE:
        return TOO_LONG
    record = {"id": ident, "code": code, "entry": node.name, "input": "", "module": module,
              "defined_in": target[0], "distribution": dist, "version": version,
              "source_digest": digest, "project_names": names}
    try:
        example_from_record(record, ident)  # repair's own checks (the metadata's size)
    except CorpusError:
        return NOT_A_RECORD
    return record


def _context(exports: Exports, tree: ModuleTree, read: "_Facts", used: list[str]
             ) -> tuple[str, dict[str, str | None]]:
    """For the names a function uses: the import lines of its module that bind them, and
    those its project defines, each mapped to where (module docstring)."""
    facts, imports = read.facts, read.imports
    project = {t.split(".")[0] for t in exports.modules}
    lines: dict[int, tuple[str, list[str]]] = {}
    names: dict[str, str | None] = {}
    for name in used:
        found = imports.get(name)
        if found is not None:
            index, alias, origin, original = found
            head = "import " if original is None else f"from {origin} import "
            lines.setdefault(index, (head, []))[1].append(alias)
            if origin is not None and origin.split(".")[0] in project:
                names[name] = _origin(exports, origin, original)
        elif name in facts.bound:
            names[name] = _origin(exports, tree.name, name)
        else:  # through a star import, or bound nowhere in its module
            found = exports.resolve(tree.name, name) if facts.star else None
            names[name] = None if found is None else f"{found[0]}.{found[1]}"
    head = "".join(statement + ", ".join(aliases) + "\n"
                   for _, (statement, aliases) in sorted(lines.items()))
    return head, dict(sorted(names.items()))


# An import binding one name: (the statement's index in the module, the alias text,
# the absolute module it imports from or imports, the name it takes from it (None for an
# ``import``))
_Import = tuple[int, str, "str | None", "str | None"]


@dataclass(frozen=True)
class _Facts:
    """A module's bindings and imports, read once for all its functions."""

    facts: _ModuleFacts
    imports: dict[str, _Import]


def _module_imports(tree: ModuleTree) -> dict[str, _Import]:
    """The names a module's imports bind at module level (in ``if``/``try``/``with``
    blocks too, the last binding winning), and how."""
    found: dict[str, _Import] = {}
    statements = []
    pending = list(tree.tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            statements.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for name in ("body", "orelse", "finalbody", "handlers"):
                pending.extend(getattr(node, name, []) or [])
    statements.sort(key=lambda n: (n.lineno, n.col_offset))
    for index, node in enumerate(statements):
        source = tree.absolute(node) if isinstance(node, ast.ImportFrom) else None
        for alias in node.names:
            if alias.name == "*":
                continue
            text = alias.name + (f" as {alias.asname}" if alias.asname else "")
            if isinstance(node, ast.Import):
                module = alias.name if alias.asname else alias.name.split(".")[0]
                found[alias.asname or module] = (index, text, module, None)
            elif source is not None:
                found[alias.asname or alias.name] = (index, text, source, alias.name)
    return found


def _origin(exports: Exports, module: str, name: str | None) -> str:
    """Where the project defines ``module``'s ``name``: the function or class it resolves
    to (``defining.module.name``), a submodule, else ``module.name`` (a value)."""
    if name is None:
        return module
    found = exports.resolve(module, name)
    if found is not None:
        return f"{found[0]}.{found[1]}"
    return f"{module}.{name}"


# ---------------------------------------------------------------- installing and writing
def write_excerpts(out: str | Path, lock=None, site: Path | None = None,
                   count: int | None = None) -> ExcerptSummary:
    """Write the excerpts of the packages of ``lock`` (installed into a temporary
    directory, exactly the lock) or of an installed ``site`` to the JSONL file ``out``."""
    from steptrace.sandbox._packages import as_lock, install
    out = Path(out)
    if not out.parent.is_dir():
        raise ExcerptError(f"cannot write {out}: no directory {out.parent}")
    if site is not None:
        if not site.is_dir():
            raise ExcerptError(f"site not found: {site} (a directory of installed "
                               "distributions, as pip --target leaves it)")
        summary = excerpts_of_site(site, None, count, str(out))
    else:
        lock = as_lock(lock)
        with tempfile.TemporaryDirectory(prefix="steptrace-excerpts-") as tmp:
            install(lock, Path(tmp))
            summary = excerpts_of_site(Path(tmp), [p.name for p in lock.packages], count,
                                       str(out))
    try:
        out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                               for r in summary.records), encoding="utf-8")
    except OSError as exc:
        raise ExcerptError(f"cannot write {out}: {exc}") from None
    return summary
