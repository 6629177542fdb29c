"""A local source as a harvestable distribution: a wheel built from a directory or an sdist.

``harvest --source PATH`` harvests code that is not (or not yet) a release on the index:

* a **directory**: a project (``pyproject.toml``, ``setup.py`` or ``setup.cfg``: a
  repository checkout) is built by pip (``pip wheel --no-deps``, its build backend in an
  isolated environment, as ``pip install .`` would); a plain package directory (an
  ``__init__.py``, no project file) is made a project first, named after the directory,
  its version the ``__version__`` string its ``__init__.py`` assigns (else ``0``);
* an **sdist** (``.tar.gz``, ``.tgz``): unpacked into a temporary directory only when
  every member is a plain file or directory inside it (no absolute path, no ``..``, no
  link, no device: one line naming the first member that is not) and the members add up
  to at most ``MAX_UNPACKED_BYTES``; its one top directory is then built as a directory
  is;
* a **wheel** (``.whl``): taken as it is.

The wheel is copied into ``OUT/wheels`` and its name and version read from its own
metadata (``*.dist-info/METADATA``). The harvest then resolves ``NAME==VERSION`` with
pip looking in ``OUT/wheels`` too (the lock's ``# wheels:`` line), so the local
distribution and its dependencies are locked by hash and installed, scanned, built into
the guest and traced exactly as a registry package is. Every bad source is one
:class:`HarvestError` line.
"""

from __future__ import annotations

import ast
import email.parser
import hashlib
import re
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from steptrace.benchmark._harvest import (HarvestError, HarvestOptions, HarvestSummary,
                                          harvest, out_dir)
from steptrace.predictions._predict import PredictOptions

PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
SDIST_SUFFIXES = (".tar.gz", ".tgz")
MAX_UNPACKED_BYTES = 512 << 20   # an sdist's members, added up
MAX_MEMBERS = 100_000
WHEELS_DIR = "wheels"            # under the harvest's --out
_VERSION = re.compile(r"[0-9][A-Za-z0-9.+!_-]*")  # what a plain package's version may be
PLAIN_PROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"

[tool.setuptools.packages.find]
include = ["{name}", "{name}.*"]
"""


@dataclass(frozen=True)
class LocalSource:
    """A wheel built from (or given as) a local source, and what its metadata says."""

    wheel: Path
    name: str      # normalised (PEP 503)
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


def harvest_source(out: str | Path, path: str | Path, request: PredictOptions,
                   options: HarvestOptions = HarvestOptions(), python: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> HarvestSummary:
    """Harvest the distribution built from the local source ``path`` (and its
    dependencies) into ``out``, as :func:`harvest` harvests a lock's; with ``python``
    (``major.minor``) for the native backend. Its records' ``released`` is null unless
    ``options.released`` is a list naming it."""
    lock, local = source_lock(path, out, python)
    return harvest(out, lock, request, replace(options, local=(local.name,)), progress)


def source_lock(path: str | Path, out: str | Path, python: str | None = None):
    """The lock of the distribution built from ``path`` (its wheel in ``OUT/wheels``)
    and its dependencies, and the :class:`LocalSource`."""
    from steptrace.sandbox._packages import PackageError, resolve
    local = local_wheel(Path(path), out_dir(out) / WHEELS_DIR)
    try:
        lock = resolve([local.requirement], python=python,
                       find_links=str(local.wheel.parent.resolve()))
    except PackageError as exc:
        raise HarvestError(f"--source {path}: {exc}") from None
    locked = {p.name: p.sha256 for p in lock.packages}.get(local.name)
    if locked != hashlib.sha256(local.wheel.read_bytes()).hexdigest():
        raise HarvestError(f"--source {path}: pip resolved {local.requirement} to another "
                           "wheel than the one built from it (the index has a release of "
                           "that name and version); give the project another version")
    return lock, local


def local_wheel(path: Path, into: Path) -> LocalSource:
    """The wheel of the local source ``path`` (module doc), copied into ``into``."""
    path = Path(path)
    if not path.exists():
        raise HarvestError(f"--source {path} does not exist")
    with tempfile.TemporaryDirectory(prefix="steptrace-source-") as tmp:
        work = Path(tmp)
        if path.is_dir():
            wheel = _build(_project(path, work), work / "dist", path)
        elif path.name.endswith(SDIST_SUFFIXES):
            wheel = _build(_project(_unpack(path, work / "unpacked"), work), work / "dist",
                           path)
        elif path.suffix == ".whl":
            wheel = path
        else:
            raise HarvestError(f"--source {path} is not a directory, an sdist "
                               f"({', '.join(SDIST_SUFFIXES)}) or a wheel (.whl)")
        name, version = wheel_metadata(wheel)
        target = into / wheel.name
        try:
            into.mkdir(parents=True, exist_ok=True)
            if not (target.exists() and target.samefile(wheel)):
                shutil.copyfile(wheel, target)
        except OSError as exc:
            raise HarvestError(f"cannot copy the wheel into {into}: {exc}") from None
    return LocalSource(target, name, version)


def wheel_metadata(wheel: Path) -> tuple[str, str]:
    """The normalised name and the version a wheel's ``*.dist-info/METADATA`` gives."""
    from steptrace.sandbox._packages import _WHEEL, normalise
    if not _WHEEL.fullmatch(wheel.name):
        raise HarvestError(f"--source {wheel.name} is not a wheel's file name "
                           "(NAME-VERSION-PYTHON-ABI-PLATFORM.whl)")
    try:
        with zipfile.ZipFile(wheel) as archive:
            found = [n for n in archive.namelist() if n.count("/") == 1
                     and n.endswith(".dist-info/METADATA")]
            if len(found) != 1:
                raise HarvestError(f"--source {wheel.name}: not one .dist-info/METADATA in "
                                   "the wheel")
            text = archive.read(found[0]).decode("utf-8", "replace")
    except (zipfile.BadZipFile, OSError) as exc:
        raise HarvestError(f"--source {wheel.name} is not a readable wheel: {exc}") from None
    metadata = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = metadata.get("Name"), metadata.get("Version")
    if not name or not version:
        raise HarvestError(f"--source {wheel.name}: its METADATA has no Name or Version")
    return normalise(name.strip()), version.strip()


def _project(path: Path, work: Path) -> Path:
    """The project directory to build: ``path`` itself when it has a project file, else
    a project made around the plain package ``path``."""
    if any((path / name).is_file() for name in PROJECT_FILES):
        return path
    if not (path / "__init__.py").is_file():
        raise HarvestError(f"--source {path} is not a Python project (no "
                           f"{', '.join(PROJECT_FILES)}) nor a package (no __init__.py)")
    name = path.resolve().name
    if not name.isidentifier():
        raise HarvestError(f"--source {path}: a package directory's name must be a Python "
                           f"identifier, not {name!r}")
    project = work / "project"
    shutil.copytree(path, project / name, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    version = _declared_version(path / "__init__.py")
    (project / "pyproject.toml").write_text(PLAIN_PROJECT.format(name=name, version=version))
    return project


def _declared_version(init: Path) -> str:
    """The string ``__version__`` is assigned at the top of ``init`` (read, never
    imported) when it looks like a version, else ``0``."""
    try:
        tree = ast.parse(init.read_bytes())
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
        return "0"
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "__version__"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                and _VERSION.fullmatch(node.value.value.strip())):
            return node.value.value.strip()
    return "0"


def _unpack(sdist: Path, target: Path) -> Path:
    """The sdist's one top directory, unpacked into ``target`` after every member was
    checked (module doc)."""
    try:
        with tarfile.open(sdist, "r:*") as archive:
            members = _checked_members(archive, sdist)
            target.mkdir(parents=True)
            archive.extractall(target, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise HarvestError(f"--source {sdist} is not a readable sdist: {exc}") from None
    tops = [p for p in target.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        raise HarvestError(f"--source {sdist}: an sdist holds one top directory "
                           f"(NAME-VERSION/); this one holds {len(tops)} entries")
    return tops[0]


def _checked_members(archive: tarfile.TarFile, sdist: Path) -> list[tarfile.TarInfo]:
    members, total = [], 0
    for member in archive:
        name = member.name
        parts = Path(name).parts
        if not parts and member.isdir():  # "./": the directory itself
            continue
        if name.startswith(("/", "\\")) or ".." in parts or not parts:
            raise HarvestError(f"--source {sdist}: member {name!r} would be unpacked "
                               "outside its directory")
        if not (member.isfile() or member.isdir()):
            kind = "a link" if member.issym() or member.islnk() else "not a file"
            raise HarvestError(f"--source {sdist}: member {name!r} is {kind} "
                               "(an sdist's members are files and directories)")
        total += member.size
        members.append(member)
        if total > MAX_UNPACKED_BYTES or len(members) > MAX_MEMBERS:
            raise HarvestError(f"--source {sdist} unpacks to more than "
                               f"{MAX_UNPACKED_BYTES >> 20} MiB or {MAX_MEMBERS:,} members")
    return members


def _build(project: Path, dist: Path, given: Path) -> Path:
    """``pip wheel`` of ``project`` (no dependencies) into ``dist``: the one wheel."""
    from steptrace.sandbox._packages import PackageError, _pip
    try:
        _pip(["wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(project)],
             f"build a wheel of {given}")
    except PackageError as exc:
        raise HarvestError(f"--source {given}: {exc}") from None
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise HarvestError(f"--source {given}: the build made {len(wheels)} wheels, not one")
    return wheels[0]
