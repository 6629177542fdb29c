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

Only builds made here are ever named by a key: a component that arrives from elsewhere (a
shard directory's guest) is data, kept apart in ``foreign/guest-<sha256>.wasm`` and named
by its digest (:func:`install_foreign`), so nothing another machine wrote can stand in
for a build this one looks up. Processes share the cache safely: leases, one build at a
time and eviction by size are wasm_sandbox/_cache.py's.
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
from dataclasses import dataclass, field, replace
from pathlib import Path

import steptrace.guest as tracer
from steptrace.errors import SandboxError
from steptrace.sandbox._cache import (FOREIGN, building, evict, group_of, lease, lease_file,
                                      rebuild_reason, record, replacing)
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
    """A build's files: its key (a foreign component's: its SHA-256), its component and the
    stem of its compiled forms (``_runtime.compiled_path``). ``built`` says why this
    process built it, when it did (``ensure_component``)."""

    key: str
    wasm: Path
    cwasm: Path
    built: str | None = field(default=None, compare=False)


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


def hold(found: GuestArtifacts) -> None:
    """Lease ``found``'s build for the rest of this process (wasm_sandbox/_cache.py): every
    process that loads or prepares it holds it, so no other process's eviction removes it
    while it runs."""
    lease(found.wasm.parent, found.key)


def foreign_artifacts(digest: str) -> GuestArtifacts:
    """Where a component not built here with SHA-256 ``digest`` is kept: in the cache's
    ``foreign/`` folder, named by its digest, never under a build key."""
    if re.fullmatch(r"[0-9a-f]{64}", digest) is None:
        raise ValueError(f"not a SHA-256 digest: {digest!r}")
    root = cache_dir() / FOREIGN
    return GuestArtifacts(digest, root / f"guest-{digest}.wasm", root / f"guest-{digest}.cwasm")


def install_foreign(payload: bytes, digest: str) -> GuestArtifacts:
    """``payload`` (a component made elsewhere) in the cache's ``foreign/`` folder, if its
    SHA-256 is ``digest`` (ValueError otherwise: the caller says whose it is), leased for
    this process like a build. Installed once; the evictions that follow keep the cache
    within its budget."""
    if hashlib.sha256(payload).hexdigest() != digest:
        raise ValueError("the component's digest is not the one expected")
    found = foreign_artifacts(digest)
    root = found.wasm.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot create cache directory {root}: {exc}") from exc
    hold(found)
    if _holds(found.wasm, digest):
        return found
    with building(root, digest):
        if not _holds(found.wasm, digest):
            write_verified(found.wasm, payload)
            for stale in compiled_files(found):
                stale.unlink(missing_ok=True)
    evict(cache_dir(), lease_file(root, digest))
    return found


def _holds(path: Path, digest: str) -> bool:
    """Whether ``path`` is verified and its digest is ``digest``."""
    try:
        return is_verified(path) and sidecar(path).read_text().strip() == digest
    except OSError:
        return False


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
                     packages: PackageLock | None = None, announce: bool = True
                     ) -> GuestArtifacts:
    """Return verified artifacts for the current sources, building what is missing.

    A ``variant`` is a second, separately pre-initialised build of the same sources: its
    interpreter snapshot has its own string-hash secret (drawn when it was initialised:
    componentize-py offers no way to choose it), which is what the determinism check needs
    (engine/tracing/_analysis.py; it also gives the variant's jobs another random seed).

    The build is leased for the rest of this process before it is looked at, so no other
    process evicts it (wasm_sandbox/_cache.py); a build is made by one process at a time
    (another one building the same key is waited for, and its build used). A build made
    here says why on stderr (``announce``) and in the result's ``built``; the evictions
    that follow it keep the cache within its budget."""
    found = artifacts(variant=variant, packages=packages)
    root = found.wasm.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot create cache directory {root}: {exc}") from exc
    group = group_of(found.key)
    hold(found)
    if not force and is_verified(found.wasm):
        return found
    lock = None if packages is None else packages.digest
    if force:
        with replacing(root, found.key):
            built = _build(found, packages, "asked to (--force)", announce)
    else:
        with building(root, group):
            if is_verified(found.wasm):  # another process built it while this one waited
                return found
            why = rebuild_reason(root, found.key, lock, variant, found.wasm.exists())
            built = _build(found, packages, why, announce)
    record(root, {"event": "built", "key": found.key, "group": group, "variant": variant,
                  "packages": lock, "digest": sidecar(found.wasm).read_text().strip(),
                  "why": built.built})
    evict(root, lease_file(root, group))
    return built


def _build(found: GuestArtifacts, packages: PackageLock | None, why: str,
           announce: bool) -> GuestArtifacts:
    """Build ``found``'s component (its build lock held) and drop its stale compiled forms."""
    if announce:
        print(f"steptrace: building the guest component {found.key} ({why}); this takes "
              "a minute", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="steptrace-out-") as tmp:
        out = Path(tmp) / "guest.wasm"
        componentize(out, packages)
        write_verified(found.wasm, out.read_bytes())
    for stale in compiled_files(found):
        stale.unlink(missing_ok=True)
    return replace(found, built=why)


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
