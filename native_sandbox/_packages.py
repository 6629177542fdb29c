"""The native backend's packages: a native lock's platform wheels, installed once into the
cache and shown read-only in the jail (``/steptrace/packages``).

A native lock is resolved as a WASI guest's is (``steptrace.sandbox._packages.resolve``,
the same hash-checked lock format, ``pip install --require-hashes``), but for the native
backend's CPython on this machine: its ABI and this platform's manylinux wheels, so
numpy, pandas, scipy and the like resolve (``steptrace build --backend native --with
numpy --lock FILE``). It is installed into ``native/site-DIGEST`` in the cache (DIGEST:
the lock's, its imports left out), written beside and renamed into place, and used by
every native guest of those packages.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from steptrace.native_sandbox._python import Interpreter
from steptrace.sandbox._build import cache_dir
from steptrace.sandbox._cache import building
from steptrace.sandbox._packages import PackageError, PackageLock, install

NATIVE_DIR = "native"


def site_dir(lock: PackageLock) -> Path:
    """Where ``lock``'s wheels are installed: named by the digest of its packages alone
    (its imports change what the jail preloads, not what is installed: a harvest that
    drops a module it cannot import installs nothing again)."""
    return cache_dir() / NATIVE_DIR / f"site-{replace(lock, imports=()).digest[:24]}"


def installed(lock: PackageLock, interpreter: Interpreter) -> Path:
    """The directory holding ``lock``'s packages for ``interpreter`` (installed now if
    need be; one process installs a lock at a time)."""
    if lock.python is not None and lock.python != interpreter.minor:
        raise PackageError(f"the lock was resolved for Python {lock.python}, not "
                           f"{interpreter.minor}")
    site = site_dir(lock)
    if (site / ".steptrace-installed").exists():
        return site
    site.parent.mkdir(parents=True, exist_ok=True)
    with building(site.parent, site.name):
        if (site / ".steptrace-installed").exists():
            return site
        tmp = Path(tempfile.mkdtemp(prefix=".site-", dir=site.parent))
        try:
            install(lock, tmp)
            (tmp / ".steptrace-installed").write_text(lock.text)
            for path in [tmp, *tmp.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o755)
            shutil.rmtree(site, ignore_errors=True)
            tmp.rename(site)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return site
