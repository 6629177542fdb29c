"""Learn which modules of its packages a corpus needs in the guest's snapshot.

A guest holds every module of its packages and imports one on first use
(tracer/held_modules.py), so a submodule a package loads lazily or by name (dateutil's
``relativedelta``, pygments' lexers and styles, docutils' readers and writers, rich's
tables) is found when a run asks for it; but a job pays for importing it, every job in
job isolation, and in batch isolation the import makes the next job run in a fresh
instance. The build imports each package's top-level modules into the snapshot, and the
lock's ``# import:`` lines name further ones. ``learn_imports`` finds those a corpus
needs and returns the lock with them added:

1. by reading the corpus: every module its programs and test code import (``import a.b``,
   ``from a.b import c``: ``a.b`` and, when it is a module, ``a.b.c``) under a package's
   top-level module, that is a module of the installed wheels;
2. by a first run: the corpus is run in the guest built so far (untraced, nothing
   stored), each run reporting the modules it imported on first use (the guest's own
   list: modules of its packages that entered ``sys.modules`` during the job, whatever
   name the package loaded them by) and the module a run ended ``missing_module`` for
   (the guest's own verdict, never a message a program made up); those of the installed
   wheels are added and the guest is built again, for at most ``rounds`` rounds.
"""

from __future__ import annotations

import ast
import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from steptrace.corpus._formats import CorpusLike, Job, iter_corpus
from steptrace.sandbox._build import ensure_component
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import PackageLock, install
from steptrace.sandbox._runner import run_chunks

_MISSING = re.compile(r"No module named '([A-Za-z_][A-Za-z0-9_.]*)'")  # the guest's message


@dataclass
class LearnReport:
    """What ``learn_imports`` found: by reading the corpus, and by each run."""

    lock: PackageLock
    read: list[str] = field(default_factory=list)          # from the programs' imports
    rounds: list[list[str]] = field(default_factory=list)  # from each run: modules added
    jobs: int = 0


def imported_names(code: str) -> set[str]:
    """The dotted module names a program's import statements name (and ``a.b.c`` for
    ``from a.b import c``, which may be a module); none if the code does not parse.
    Relative imports are skipped."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if alias.name != "*")
    return found


def installed_modules(site: Path, names: Iterable[str]) -> set[str]:
    """Those of ``names`` that are modules of the installed ``site`` (a ``.py`` file or a
    package directory), below a top-level module: submodules only."""
    found = set()
    for name in names:
        parts = name.split(".")
        if len(parts) < 2:
            continue
        path = site.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            found.add(name)
    return found


def learn_imports(corpus: CorpusLike, lock: PackageLock, rounds: int = 2, workers: int = 1,
                  limits: Limits | None = None) -> LearnReport:
    """The lock with the submodules ``corpus`` needs added to its imports (see the module
    docstring); the guests it builds on the way are cached as any build is."""
    jobs = [job for job in iter_corpus(corpus) if isinstance(job, Job)]
    report = LearnReport(lock, jobs=len(jobs))
    with tempfile.TemporaryDirectory(prefix="steptrace-learn-") as tmp:
        site = Path(tmp)
        install(lock, site)
        names: set[str] = set()
        for job in jobs:
            names |= imported_names(job.program.code)
            if job.program.test:
                names |= imported_names(job.program.test)
        report.read = sorted(installed_modules(site, names) - set(lock.imports))
        current = _with_imports(lock, report.read)
        for _ in range(rounds):
            ensure_component(packages=current)
            needed = _needed_in_run(jobs, current, workers, limits or Limits())
            added = sorted(installed_modules(site, needed) - set(current.imports))
            report.rounds.append(added)
            if not added:
                break
            current = _with_imports(current, added)
    report.lock = current
    return report


def _with_imports(lock: PackageLock, names: Iterable[str]) -> PackageLock:
    return replace(lock, imports=tuple(sorted(set(lock.imports) | set(names))))


def _needed_in_run(jobs: list[Job], lock: PackageLock, workers: int,
                   limits: Limits) -> set[str]:
    """The modules the runs of ``jobs`` (untraced) imported on first use, and those they
    ended ``missing_module`` for."""
    requests = [{**job.request(), "mode": "run", "report_imports": True} for job in jobs]
    chunks = [requests[i:i + 16] for i in range(0, len(requests), 16)]
    found: set[str] = set()
    for _, outcomes in run_chunks(chunks, workers, limits, "job", packages=lock):
        for outcome in outcomes:
            result = outcome.result
            found.update(result.get("imported") or ())
            if result.get("status") == "missing_module":
                found.update(_MISSING.findall(result.get("exception_message") or ""))
    return found
