"""Build the guest component from ``tracer/`` with componentize-py, and cache it.

The cache key is a SHA-256 over the guest sources (every ``.py`` and ``.wit`` file under
``tracer/``), the componentize-py and wasmtime versions and the machine: a changed tracer
source rebuilds automatically. Two artifacts live under the cache directory:

* ``guest-<key>.wasm``   the component, as componentize-py wrote it;
* ``guest-<key>.cwasm``  the same compiled to native code by wasmtime (``serialize``), so a
  warm start deserialises it in milliseconds instead of compiling for seconds.

Each artifact has a ``.sha256`` sidecar written after it; a file whose digest does not
match (truncated or corrupted) is rebuilt. Deserialising an unverified ``.cwasm`` would be
unsafe: wasmtime trusts its bytes.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import steptrace.guest as tracer
from steptrace.errors import SandboxError
from steptrace.sandbox._packages import PackageLock, install

PACKAGES_MODULE = "guest_packages"  # written into a build with packages: what to import
TZDATA = "tzdata"  # the IANA time zones, bundled into every guest (_tzdata_path)

WORLD = "tracer"
APP_MODULE = "guest"
CACHE_ENV = "STEPTRACE_CACHE_DIR"


class BuildError(SandboxError):
    """componentize-py failed, or the cache directory is unusable."""


@dataclass(frozen=True)
class GuestArtifacts:
    key: str
    wasm: Path
    cwasm: Path


def tracer_dir() -> Path:
    return Path(tracer.__file__).resolve().parent


def cache_dir() -> Path:
    """``$STEPTRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/steptrace``, else ``~/.cache/steptrace``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "steptrace"


def guest_sources() -> list[Path]:
    root = tracer_dir()
    files = [p for p in root.rglob("*") if p.suffix in (".py", ".wit") and "__pycache__" not in p.parts]
    return sorted(files)


def cache_key(packages: PackageLock | None = None) -> str:
    """The build's key: the guest's sources, the tools' versions, the machine, and the
    package lock's digest (none for the standard guest)."""
    import importlib.metadata  # here: a worker never computes the key, and this costs 12 ms

    digest = hashlib.sha256()
    root = tracer_dir()
    for path in guest_sources():
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    for dist in ("componentize-py", "wasmtime", TZDATA):
        digest.update(f"{dist}={importlib.metadata.version(dist)}\0".encode())
    digest.update(f"{platform.machine()}-{sys.platform}".encode())
    if packages is not None:
        digest.update(f"\0packages={packages.digest}".encode())
    return digest.hexdigest()[:24]


def artifacts(key: str | None = None, variant: str = "",
              packages: PackageLock | None = None) -> GuestArtifacts:
    key = (key or cache_key(packages)) + (f"-{variant}" if variant else "")
    root = cache_dir()
    return GuestArtifacts(key, root / f"guest-{key}.wasm", root / f"guest-{key}.cwasm")


def file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_verified(path: Path, data: bytes) -> None:
    """Write ``data`` and its digest sidecar atomically (rename), digest last."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, data)
    _write_atomic(sidecar(path), hashlib.sha256(data).hexdigest().encode())


def _write_atomic(target: Path, payload: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(payload)
    os.replace(tmp, target)


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


# A file whose status last changed less than this long before it was hashed gets no
# stamp: a same-size rewrite within one tick of a coarse file-system clock could keep
# its ctime (git's "racily clean" files).
STAMP_SETTLE_NS = 2_000_000_000


def checked_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".checked")


def _status(path: Path) -> tuple[str, int]:
    """The file's status as a stamp names it, and its ctime (ns)."""
    st = os.stat(path)
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}", st.st_ctime_ns


def is_verified(path: Path) -> bool:
    """True when ``path`` exists and matches the digest in its sidecar.

    Hashing the 41 MB ``.cwasm`` takes ~25 ms, on every command and in every worker that
    loads it; so its digest is kept in a stamp with its status (:func:`stamped_digest`)
    and it is hashed again only when that changed. Any write, truncation, rename over it
    or ``utime`` changes its ctime, which no user-space call can set back. The stamp is
    best effort: in a read-only cache every check hashes."""
    try:
        expected = sidecar(path).read_text().strip()
        return bool(expected) and stamped_digest(path, checked_stamp(path)) == expected
    except OSError:
        return False


def stamped_digest(path: Path, stamp: Path) -> str:
    """SHA-256 of ``path``, hashed again only when its status (inode, size, mtime, ctime)
    changed: the digest is kept in ``stamp`` with the status, unless the file changed too
    recently to trust its status (STAMP_SETTLE_NS) or while it was hashed. OSError when
    ``path`` cannot be read."""
    before, changed_ns = _status(path)
    try:
        recorded, digest = stamp.read_text().split(" ")
        if recorded == before:
            return digest
    except (OSError, ValueError):
        pass
    digest = file_digest(path)
    if time.time_ns() - changed_ns >= STAMP_SETTLE_NS:
        try:
            if _status(path)[0] == before:
                _write_atomic(stamp, f"{before} {digest}".encode())
        except OSError:
            pass
    return digest


def componentize(output: Path, packages: PackageLock | None = None) -> None:
    """Run componentize-py on a private copy of ``tracer/`` (so nothing else is on the
    guest's module path) and write the component to ``output``. With ``packages``, their
    locked wheels are installed beside it and their top-level modules, and the lock's
    imports, are imported into the snapshot (stdlib_preload.py)."""
    with tempfile.TemporaryDirectory(prefix="steptrace-build-") as tmp:
        src = Path(tmp) / "guest"
        src.mkdir()
        root = tracer_dir()
        for path in guest_sources():
            target = src / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        paths = ["-p", str(src)]
        if packages is not None:
            site = Path(tmp) / "site-packages"
            modules = install(packages, site)
            # the guest's own modules come first on its path: a package module of the same
            # name would be shadowed (and the package broken) without a word
            clash = sorted(set(modules) & ({path.stem for path in guest_sources()
                                            if path.suffix == ".py"} | {PACKAGES_MODULE}))
            if clash:
                raise BuildError(f"the packages ({packages}) hold top-level modules named as "
                                 f"the guest's own: {', '.join(clash)}; they cannot be bundled")
            modules += packages.imports
            (src / f"{PACKAGES_MODULE}.py").write_text(f"MODULES = {tuple(modules)!r}\n")
            paths += ["-p", str(site)]
        paths += ["-p", str(_tzdata_path(Path(tmp)))]
        command = [sys.executable, "-c",
                   "import sys, componentize_py; sys.argv[0] = 'componentize-py'; componentize_py.script()",
                   "-q", "-d", str(src / "wit"), "-w", WORLD, "componentize", APP_MODULE,
                   *paths, "-o", str(output)]
        # componentize-py adds $VIRTUAL_ENV's site-packages to the guest's path (or, with
        # none, asks pipenv or the host's `python3` for theirs): an empty environment keeps
        # the building machine's packages out of the snapshot
        empty = Path(tmp) / "no-packages"
        (empty / "lib" / "site-packages").mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["VIRTUAL_ENV"] = str(empty)
        env["RUST_BACKTRACE"] = "0"  # the guest's Python traceback is the useful part
        proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"componentize-py failed ({proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[-2000:]}")


def _tzdata_path(tmp: Path) -> Path:
    """A directory holding a copy of the installed ``tzdata`` package (a dependency), last
    on the guest's path at build time: the guest holds its zone files in memory
    (tracer/memory_resources.py) for ``zoneinfo``. Last, so that a package lock's own
    tzdata wins."""
    import importlib.util  # here: a worker never builds

    spec = importlib.util.find_spec(TZDATA)
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("the tzdata package (a dependency of steptrace) is not installed")
    target = tmp / "tzdata-package"
    shutil.copytree(Path(spec.submodule_search_locations[0]), target / TZDATA,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return target


def ensure_component(force: bool = False, variant: str = "",
                     packages: PackageLock | None = None) -> GuestArtifacts:
    """Return verified artifacts for the current sources, building what is missing.

    A ``variant`` is a second, separately pre-initialised build of the same sources: its
    interpreter snapshot has its own string-hash secret (drawn when it was initialised:
    componentize-py offers no way to choose it), which is what the determinism check needs
    (engine/tracing/_analysis.py; it also gives the variant's jobs another random seed)."""
    found = artifacts(variant=variant, packages=packages)
    try:
        found.wasm.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot create cache directory {found.wasm.parent}: {exc}") from exc
    if force or not is_verified(found.wasm):
        with tempfile.TemporaryDirectory(prefix="steptrace-out-") as tmp:
            out = Path(tmp) / "guest.wasm"
            componentize(out, packages)
            write_verified(found.wasm, out.read_bytes())
        for stale in compiled_files(found):
            stale.unlink(missing_ok=True)
        prune_cache(found.key.split("-", 1)[0], found.wasm.parent)
    return found


KEEP_BUILDS = 4  # source keys whose builds stay in the cache (the newest)
_BUILD_FILE = re.compile(r"guest-([0-9a-f]{24})(-.+)?\.(wasm|cwasm)(\.sha256|\.checked)?")


def prune_cache(keep: str, root: Path) -> list[Path]:
    """After a build: delete every file of all but the ``KEEP_BUILDS`` most recently built
    source keys (``keep``, the one just built, always stays; a key's variant and compiled
    forms go with it). Each change of the guest's sources or tools makes a new key,
    ~130 MB with its variant and compiled forms, so without this the cache only grows.
    A process still running a deleted ``.cwasm`` keeps its mapping; one about to load it
    builds again. Best effort: a file that cannot be deleted stays."""
    groups: dict[str, list[Path]] = {}
    try:
        for path in root.iterdir():
            match = _BUILD_FILE.fullmatch(path.name)
            if match:
                groups.setdefault(match.group(1), []).append(path)
    except OSError:
        return []

    def built(key: str) -> float:
        times = [p.stat().st_mtime for p in groups[key] if p.suffix == ".wasm" and p.exists()]
        return max(times, default=0.0)

    newest = sorted((key for key in groups if key != keep), key=built, reverse=True)
    removed = []
    for key in newest[KEEP_BUILDS - 1:]:
        for path in groups[key]:
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    return sorted(removed)


def compiled_files(found: GuestArtifacts) -> list[Path]:
    """Every compiled form of ``found`` (one ``.cwasm`` per engine setting, named
    ``guest-KEY-FINGERPRINT.cwasm``) with its sidecars: stale once the ``.wasm`` is
    rebuilt, and a verified stale one would otherwise still be loaded."""
    pattern = re.compile(rf"guest-{re.escape(found.key)}(-[0-9a-f]{{8}})?\.cwasm"
                         r"(\.sha256|\.checked)?")
    try:
        return sorted(p for p in found.cwasm.parent.iterdir() if pattern.fullmatch(p.name))
    except OSError:
        return []
