"""Third-party packages in the guest: resolve, lock, install for a build.

A guest with packages is the standard guest plus pure-Python distributions bundled into
its pre-initialised snapshot (componentize-py's ``-p``). Only modules imported while the
snapshot is made exist at run time, so the build imports each distribution's top-level
modules and any further modules the user names (``imports``: lazily imported submodules
such as ``dateutil.parser``).

* :func:`resolve` asks pip for wheels that run on the guest: CPython 3.14, no ABI, platform
  ``any`` (pure Python), dependencies included. A requirement with no such wheel (native
  code: numpy, regex, ...) is named in the error: it cannot run under WASI.
* The result is a :class:`PackageLock`: every distribution's name, version and wheel
  SHA-256, and the imports; written as a pip requirements file with hashes
  (``pip install --require-hashes -r`` accepts it), the imports as ``# import:`` lines.
  Its :attr:`PackageLock.digest` is part of the guest's cache key (``_build.py``), and so
  of the ``guest`` column of every run traced with it.
* :func:`install` installs exactly the locked wheels (hashes checked by pip) into a
  directory for the build.
* A lock may also name a directory of local wheels (``# wheels: DIR``, absolute): pip
  looks there too (``--find-links``), so a distribution built from a local source
  (``harvest --source``) is locked, hash-checked and installed as any other.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from steptrace.errors import SandboxError

GUEST_PYTHON = "3.14"  # the guest's CPython (componentize-py 0.25)
WASI_PYTHON = "3.14.0"  # its exact version, as runs.python records it (componentize-py 0.25.1)
# pip's options for wheels the guest can run: pure Python, any platform
_TARGET = ("--only-binary=:all:", "--platform", "any", "--python-version", GUEST_PYTHON,
           "--implementation", "py", "--abi", "none")
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._ -]*\])?"
                          r"\s*((===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_WHEEL = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl")
_LOCK_LINE = re.compile(r"(?P<name>[a-z0-9][a-z0-9._-]*)==(?P<version>[^ ]+) "
                        r"--hash=sha256:(?P<sha256>[0-9a-f]{64})")
LOCK_HEADER = "# steptrace guest packages (pure-Python wheels for CPython 3.14 under WASI)"
# A native lock (steptrace.native_sandbox._packages): platform wheels for the native
# backend's CPython, which it names; the packages whose wheels hold native code are listed
NATIVE_HEADER = "# steptrace native packages (wheels for the native backend's CPython)"
_PYTHON_LINE = re.compile(r"# python: (?P<minor>3\.[0-9]+)")
_WHEELS = "# wheels:"


class PackageError(SandboxError):
    """A requirement cannot be resolved or installed for the guest, or a lock is bad."""


@dataclass(frozen=True)
class LockedPackage:
    name: str      # normalised (PEP 503): lower case, runs of -_. as -
    version: str
    sha256: str    # of the wheel


@dataclass(frozen=True)
class PackageLock:
    """What a guest with packages holds: distributions (sorted by name) and extra imports."""

    packages: tuple[LockedPackage, ...]
    imports: tuple[str, ...] = field(default=())
    # a native lock: the ``major.minor`` CPython it was resolved for (the native backend
    # runs it: steptrace.native_sandbox), and its packages with native code; None: a
    # WASI guest's lock
    python: str | None = None
    native_code: tuple[str, ...] = field(default=())
    # a directory of local wheels pip looks in too (an absolute path), or None
    find_links: str | None = None

    @property
    def text(self) -> str:
        """The lock file: a pip requirements file with hashes, imports as comments (a
        native lock: its interpreter's version and its packages with native code too;
        its directory of local wheels, if any)."""
        lines = [LOCK_HEADER] if self.python is None else [NATIVE_HEADER,
                                                           f"# python: {self.python}"]
        if self.find_links is not None:
            lines.append(f"{_WHEELS} {self.find_links}")
        lines += [f"{p.name}=={p.version} --hash=sha256:{p.sha256}" for p in self.packages]
        lines += [f"# import: {name}" for name in self.imports]
        lines += [f"# native: {name}" for name in self.native_code]
        return "\n".join(lines) + "\n"

    @property
    def native(self) -> bool:
        """Whether the native backend runs it (a lock resolved for it)."""
        return self.python is not None

    @property
    def digest(self) -> str:
        """SHA-256 of :attr:`text` but its ``# wheels:`` line: the same lock, the same
        digest, wherever its local wheels are (their hashes are pinned)."""
        text = self.text if self.find_links is None else replace(self, find_links=None).text
        return hashlib.sha256(text.encode()).hexdigest()

    def __str__(self) -> str:
        return ", ".join(f"{p.name}=={p.version}" for p in self.packages)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_requirement(spec: str) -> str:
    """``spec`` stripped, if it is a plain requirement (``name``, ``name==1.2``,
    ``name>=1,<2``); PackageError otherwise (no URLs, paths or pip options)."""
    text = spec.strip()
    if not text or not _REQUIREMENT.fullmatch(text):
        raise PackageError(f"not a package requirement: {spec!r} (use e.g. 'toolz==1.0.0')")
    return text


def check_import(name: str) -> str:
    if not _MODULE.fullmatch(name):
        raise PackageError(f"not a module name: {name!r}")
    return name


# A lock or requirements file is a line per package: a few KB. Anything larger is not one
# (and a device such as /dev/zero would otherwise be read until memory ran out).
MAX_FILE_BYTES = 1 << 20


def _read_small(path: Path, what: str) -> str:
    """The text of the user's ``what`` file ``path``: a regular file of at most
    ``MAX_FILE_BYTES`` (``corpus._text.read_regular``: a FIFO is refused, not waited on),
    UTF-8; PackageError in one line otherwise."""
    from steptrace.corpus._text import read_regular  # not in workers, which never read one
    try:
        return read_regular(path, MAX_FILE_BYTES).decode("utf-8")
    except OSError as exc:
        raise PackageError(f"cannot read {what} file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise PackageError(f"cannot read {what} file {path}: not UTF-8 text "
                           f"({exc.reason} at byte {exc.start + 1})") from exc


def read_requirements(path: Path) -> list[str]:
    """The requirements of a requirements file (comments and blank lines skipped)."""
    lines = _read_small(path, "requirements").splitlines()
    found = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text:
            found.append(check_requirement(text))
    return found


PIP_TIMEOUT_S = 900.0  # one pip run (resolving or installing from the index)


WASI_NO_WHEEL = ("no wheel of {} that the guest can run: the index has none in pure Python "
                 "for CPython 3.14 (native code cannot run under WASI; build --backend native "
                 "runs it natively), or no such package or version")


def _pip(args: list[str], what: str, no_wheel: str = WASI_NO_WHEEL
         ) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", *args,
                               "--disable-pip-version-check", "--no-input"],
                              capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PackageError(f"pip could not {what} within {PIP_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
        missing = [m.group(1) for line in errors
                   if (m := re.search(r"No matching distribution found for (\S+)", line))]
        if missing:
            raise PackageError(no_wheel.format(", ".join(missing)))
        detail = errors[-1] if errors else (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise PackageError(f"pip could not {what}: {detail}")
    return proc


@dataclass(frozen=True)
class HeldBack:
    """A distribution pip resolved to an older version for the guest than for CPython 3.14
    with native wheels allowed: the newer one needs native code (``needs``: the
    distributions of its dependencies, itself included, that have no pure-Python wheel)."""

    name: str
    version: str
    newest: str
    needs: tuple[str, ...]

    def __str__(self) -> str:
        # with no native distribution of its own to blame, another held-back distribution's
        # requirement keeps it older (fastapi 0.125 pins starlette below 0.51)
        why = (f"needs {', '.join(self.needs)}" if self.needs
               else "is excluded by the others' requirements")
        return f"{self.name} {self.version}, not {self.newest} ({self.newest} {why})"


@dataclass(frozen=True)
class Resolution:
    """What :func:`resolve_packages` found: the lock, the distributions held back to
    older versions (each pinned by the user, or the resolution is refused), and whether
    the newest versions could be asked at all (``compared``: a reason when not)."""

    lock: PackageLock
    held_back: tuple[HeldBack, ...] = ()
    not_compared: str | None = None


def resolve(requirements: list[str], imports: list[str] = (), python: str | None = None,
            find_links: str | None = None) -> PackageLock:
    """Resolve ``requirements`` (and their dependencies) to pure-Python wheels for the
    guest; return their lock (:func:`resolve_packages`: PackageError when a distribution
    was held back to an older version the user did not pin). With ``python``
    (``major.minor``): to this machine's platform wheels for that CPython, a native lock
    (steptrace.native_sandbox._packages; nothing is held back there). ``find_links``: a
    directory of local wheels (absolute) pip takes wheels from too, named in the lock."""
    if python is not None:
        return _resolve_pure(requirements, imports, python, find_links)
    return resolve_packages(requirements, imports, find_links).lock


def resolve_packages(requirements: list[str], imports: list[str] = (),
                     find_links: str | None = None) -> Resolution:
    """Resolve ``requirements`` (and their dependencies) to pure-Python wheels for the
    guest. pip takes the newest versions that have such wheels, which may be old ones
    (pydantic 1.10 when pydantic 2 needs pydantic-core, native code; jsonschema 4.17 when
    4.18+ needs rpds-py): the same requirements are resolved again for CPython 3.14 with
    native wheels allowed, and every distribution that resolves to another version there
    is held back. Unless the user pinned each of those (``name==version``), the build is
    refused, saying which, why, and how to accept them."""
    lock = _resolve_pure(requirements, imports, find_links=find_links)
    specs = [check_requirement(spec) for spec in requirements]
    try:
        newest = _resolve_native(specs, find_links)
    except PackageError as exc:
        return Resolution(lock, (), str(exc))
    held = tuple(_held_back(lock, newest))
    pinned = _pinned(specs)
    unpinned = [item for item in held if not _pins(pinned.get(item.name), item.version)]
    if unpinned:
        pins = " ".join(f"--with {item.name}=={item.version}" for item in unpinned)
        raise PackageError(
            "pip resolved older versions than the newest for CPython 3.14, because the "
            "newer ones need native code (no pure-Python wheel: it cannot run under WASI): "
            + "; ".join(str(item) for item in unpinned)
            + f"; pin them to build with them anyway ({pins})")
    return Resolution(lock, held)


def _pinned(specs: list[str]) -> dict[str, str]:
    """Distribution -> version the user pinned it to (``name==version``)."""
    found = {}
    for spec in specs:
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*([^,;\s]+)",
                             spec)
        if match:
            found[normalise(match.group(1))] = match.group(3)
    return found


def _pins(pin: str | None, version: str) -> bool:
    """Whether the user's pin (``1.10.27``, ``1.10.*``) names ``version``."""
    if pin is None:
        return False
    return version == pin or pin.endswith(".*") and version.startswith(pin[:-1])


# pip's options for the same resolution with native wheels allowed (Linux, CPython 3.14)
_NATIVE_TARGET = ("--only-binary=:all:", "--python-version", GUEST_PYTHON, "--implementation",
                  "cp", "--abi", "cp314", "--abi", "abi3", "--abi", "none",
                  "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                  "--platform", "manylinux2014_x86_64", "--platform", "any")


def _resolve_native(specs: list[str], find_links: str | None = None
                    ) -> dict[str, tuple[str, bool, tuple[str, ...]]]:
    """name -> (version, is a pure-Python wheel, the names it requires) of ``specs``
    resolved with native wheels allowed (pip's dry run: nothing installed)."""
    with tempfile.TemporaryDirectory(prefix="steptrace-newest-") as tmp:
        report = Path(tmp) / "report.json"
        _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
              "--target", str(Path(tmp) / "target"), *_NATIVE_TARGET,
              *_links(find_links), *specs],
             "resolve " + " ".join(specs) + " with native wheels")
        data = json.loads(report.read_text())
    found = {}
    for item in data.get("install", ()):
        metadata = item.get("metadata", {})
        wheel = item.get("download_info", {}).get("url", "").rsplit("/", 1)[-1]
        requires = tuple(normalise(m.group(0)) for dep in metadata.get("requires_dist") or ()
                         if (m := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", dep)))
        found[normalise(metadata.get("name", ""))] = (
            metadata.get("version", ""), wheel.endswith("-none-any.whl"), requires)
    return found


def _held_back(lock: PackageLock, newest: dict) -> list[HeldBack]:
    """The locked distributions ``newest`` (``_resolve_native``) has at another version,
    with the native-code distributions that version needs (those it resolved to a native
    wheel and the lock does not have at that version)."""
    held = []
    pure = {package.name: package.version for package in lock.packages}
    for package in lock.packages:
        if package.name not in newest or newest[package.name][0] == package.version:
            continue
        needs, seen, todo = [], set(), [package.name]
        while todo:
            name = todo.pop()
            if name in seen or name not in newest:
                continue
            seen.add(name)
            version, is_pure, requires = newest[name]
            # a native wheel where the lock has the same version's pure one is a choice,
            # not a need (charset-normalizer has both)
            if not is_pure and pure.get(name) != version:
                needs.append(name)
            todo.extend(requires)
        held.append(HeldBack(package.name, package.version, newest[package.name][0],
                             tuple(sorted(needs))))
    return held


def _links(find_links: str | None) -> tuple[str, ...]:
    """pip's options to take wheels from the directory ``find_links`` too."""
    return () if find_links is None else ("--find-links", find_links)


def _resolve_pure(requirements: list[str], imports: list[str] = (),
                  python: str | None = None, find_links: str | None = None) -> PackageLock:
    """``requirements`` (and their dependencies) resolved to pure-Python wheels for the
    guest (with ``python``: to platform wheels for that native CPython): their lock."""
    if not requirements:
        raise PackageError("no packages given")
    specs = [check_requirement(spec) for spec in requirements]
    target = _TARGET if python is None else native_target(python)
    no_wheel = WASI_NO_WHEEL if python is None else (
        "no wheel of {} for CPython " + python + " on this platform, or no such package or "
        "version")
    native_code = []
    with tempfile.TemporaryDirectory(prefix="steptrace-resolve-") as tmp:
        _pip(["download", "--quiet", "--dest", tmp, *target, *_links(find_links), *specs],
             "resolve " + " ".join(specs), no_wheel)
        packages = {}
        for wheel in sorted(Path(tmp).glob("*.whl")):
            match = _WHEEL.fullmatch(wheel.name)
            if not match:
                raise PackageError(f"pip gave an unexpected file {wheel.name}")
            name = normalise(match.group("name"))
            sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
            packages[name] = LockedPackage(name, match.group("version"), sha256)
            if not wheel.name.endswith("-none-any.whl"):
                native_code.append(name)
        unwheeled = [p.name for p in Path(tmp).iterdir() if p.suffix != ".whl"]
        if unwheeled:
            raise PackageError(f"pip gave files that are not wheels: {', '.join(unwheeled)}")
    return PackageLock(tuple(packages[name] for name in sorted(packages)),
                       tuple(sorted({check_import(name) for name in imports})), python,
                       tuple(sorted(native_code)), find_links)


def native_target(python: str) -> tuple[str, ...]:
    """pip's options for the wheels the native backend's CPython ``python`` (``3.N``)
    runs on this machine: its ABI (and abi3, and none), this platform's manylinux tags
    down from this machine's glibc, and pure Python."""
    import platform
    machine = platform.machine()
    minor = python.replace(".", "")
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    glibc = int(libc.split()[-1].split(".")[1]) if libc and libc.startswith("glibc") else 17
    platforms = [f"manylinux_2_{n}_{machine}" for n in range(glibc, 16, -1)]
    platforms += [f"manylinux2014_{machine}", f"linux_{machine}", "any"]
    target = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
              "--abi", f"cp{minor}", "--abi", "abi3", "--abi", "none"]
    for tag in platforms:
        target += ["--platform", tag]
    return tuple(target)


def parse_lock(text: str, where: str = "lock") -> PackageLock:
    """A lock written by :attr:`PackageLock.text` (one-line PackageError for anything else)."""
    packages, imports, native_code, python, find_links = [], [], [], None, None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line in (LOCK_HEADER, NATIVE_HEADER):
            continue
        if line.startswith("# import:"):
            imports.append(check_import(line.split(":", 1)[1].strip()))
            continue
        if line.startswith("# native:"):
            native_code.append(normalise(check_import(line.split(":", 1)[1].strip()
                                                      .replace("-", "_"))))
            continue
        if line.startswith(_WHEELS):
            find_links = line[len(_WHEELS):].strip()
            if not os.path.isabs(find_links):
                raise PackageError(f"{where} line {number}: '{_WHEELS}' needs an absolute "
                                   "directory")
            continue
        if line.startswith("# python:"):
            match = _PYTHON_LINE.fullmatch(line)
            if match is None:
                raise PackageError(f"{where} line {number} is not '# python: 3.N'")
            python = match.group("minor")
            continue
        if line.startswith("#"):
            continue
        match = _LOCK_LINE.fullmatch(line)
        if not match:
            raise PackageError(f"{where} line {number} is not 'name==version "
                               "--hash=sha256:<64 hex>'")
        packages.append(LockedPackage(normalise(match.group("name")), match.group("version"),
                                      match.group("sha256")))
    if not packages and python is None:  # a native lock may be the interpreter alone
        raise PackageError(f"{where} names no packages")
    names = [p.name for p in packages]
    if len(set(names)) != len(names):
        raise PackageError(f"{where} names a package twice")
    return PackageLock(tuple(sorted(packages, key=lambda p: p.name)), tuple(sorted(set(imports))),
                       python, tuple(sorted(set(native_code))), find_links)


def as_lock(lock: PackageLock | str | os.PathLike) -> PackageLock:
    """``lock`` itself, or the lock of the lock file it names."""
    return lock if isinstance(lock, PackageLock) else read_lock(Path(lock))


Item = TypeVar("Item")


def by_lock(items: Iterable[Item], lock_of: Callable[[Item], PackageLock | None]
            ) -> list[tuple[PackageLock | None, list[Item]]]:
    """``items`` grouped by the package lock of the guest each runs in (``lock_of(item)``,
    None: the standard guest), groups and items in first-seen order: one sandbox (or
    pool) per guest."""
    groups: dict[str | None, tuple[PackageLock | None, list[Item]]] = {}
    for item in items:
        lock = lock_of(item)
        groups.setdefault(lock.digest if lock is not None else None, (lock, []))[1].append(item)
    return list(groups.values())


def read_lock(path: Path) -> PackageLock:
    return parse_lock(_read_small(path, "lock"), str(path))


def install(lock: PackageLock, target: Path) -> list[str]:
    """Install exactly the locked wheels into ``target`` (pip checks every hash, takes no
    dependency beyond the lock); return the top-level modules the distributions hold. A
    native lock's wheels are the platform's for its CPython."""
    wheels = _TARGET if lock.python is None else native_target(lock.python)
    with tempfile.TemporaryDirectory(prefix="steptrace-install-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(lock.text)
        _pip(["install", "--quiet", "--target", str(target), "--no-deps", "--no-compile",
              "--require-hashes", *wheels, *_links(lock.find_links), "-r", str(requirements)],
             f"install {lock}")
    return top_level_modules(target)


# top-level names a wheel may carry that are not its library (imported by nothing)
NOT_LIBRARY = frozenset({"test", "tests", "testing", "docs", "doc", "examples", "benchmarks",
                         "bin", "__pycache__"})


def top_level_modules(site: Path) -> list[str]:
    """The importable top-level names in an installed ``site`` directory: packages
    (directories with ``__init__.py``) and modules (``.py`` files); not private ones
    (``_version``: their packages import what they need) nor ``NOT_LIBRARY``."""
    found = set()
    for path in site.iterdir():
        if (path.name.endswith((".dist-info", ".data")) or path.name.startswith("_")
                or path.stem in NOT_LIBRARY):
            continue
        if path.is_dir() and (path / "__init__.py").exists() and path.name.isidentifier():
            found.add(path.name)
        elif path.suffix == ".py" and path.stem.isidentifier():
            found.add(path.stem)
    return sorted(found)
