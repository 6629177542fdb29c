"""Which native CPython runs the native backend's jobs, and what of it the jail shows.

The interpreter is the user's own CPython, 3.12 or later (the tracer needs
``sys.monitoring``). It is chosen, first found first:

1. ``--python PATH`` (the ``python`` argument here; a version such as ``3.13`` takes the
   newest CPython of that version found as in 3);
2. ``$STEPTRACE_PYTHON`` (as ``--python``);
3. the newest CPython 3.12+ found as ``python3.N`` on ``PATH`` or under pyenv's
   ``versions/`` (``$PYENV_ROOT``, else ``~/.pyenv``), then ``python3`` on ``PATH``.

A native lock (``build --backend native``) names the ``major.minor`` version it was
resolved for: only an interpreter of that version is taken for it (found as above, or
refused when the one asked for is another). An interpreter is asked for its version and
paths once (~20 ms) and remembered for the process.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from steptrace.errors import SandboxError

PYTHON_ENV = "STEPTRACE_PYTHON"
_VERSION = re.compile(r"3\.[0-9]{1,2}")  # --python 3.13: a version, not a path
OLDEST = (3, 12)  # sys.monitoring
PROBE_TIMEOUT_S = 20.0

# What the jail needs of an interpreter: its executable, its standard library (and
# lib-dynload), its site-packages (to hide), its version.
_PROBE = """
import json, sys, sysconfig, os
paths = sysconfig.get_paths()
print(json.dumps({"implementation": sys.implementation.name,
                  "version": "%d.%d.%d" % sys.version_info[:3],
                  "executable": os.path.realpath(sys.executable),
                  "prefix": os.path.realpath(sys.base_prefix),
                  "stdlib": os.path.realpath(paths["stdlib"]),
                  "platstdlib": os.path.realpath(paths["platstdlib"]),
                  "purelib": os.path.realpath(paths["purelib"]),
                  "platlib": os.path.realpath(paths["platlib"]),
                  "dynload": os.path.realpath(os.path.dirname(
                      __import__("_struct").__file__))
                  if hasattr(__import__("_struct"), "__file__") else None}))
"""


class InterpreterError(SandboxError):
    """No usable CPython 3.12+ for the native backend (the message says what was tried)."""


@dataclass(frozen=True)
class Interpreter:
    """A native CPython: its executable and what the jail mounts of it."""

    executable: str
    version: str   # "3.13.0"
    prefix: str
    stdlib: str
    platstdlib: str
    site: tuple[str, ...]      # its site-packages directories: hidden in the jail
    dynload: str | None

    @property
    def minor(self) -> str:
        """``major.minor``: what a native lock names."""
        return ".".join(self.version.split(".")[:2])

    def mounts(self) -> list[str]:
        """The directories the jail shows read-only: the executable's and the library's."""
        found = [str(Path(self.executable).parent), self.stdlib, self.platstdlib]
        if self.dynload:
            found.append(self.dynload)
        return sorted(set(found))


@lru_cache(maxsize=None)
def probe(path: str) -> Interpreter:
    """Ask the interpreter at ``path`` what it is; InterpreterError when it is not a
    CPython 3.12+ (or does not run)."""
    try:
        proc = subprocess.run([path, "-I", "-S", "-c", _PROBE], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env={"PATH": os.defpath})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InterpreterError(f"cannot run the Python interpreter {path}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
    if proc.returncode != 0:
        raise InterpreterError(f"{path} is not a Python interpreter that runs here")
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise InterpreterError(f"{path} did not answer as a Python interpreter") from None
    version = tuple(int(part) for part in found["version"].split("."))
    if found["implementation"] != "cpython" or version[:2] < OLDEST:
        raise InterpreterError(f"{path} is {found['implementation']} {found['version']}: "
                               "the native backend needs CPython 3.12 or later "
                               "(sys.monitoring)")
    return Interpreter(found["executable"], found["version"], found["prefix"],
                       found["stdlib"], found["platstdlib"],
                       tuple(sorted({found["purelib"], found["platlib"]})), found["dynload"])


def candidates() -> list[str]:
    """Interpreters to try when none is named: ``python3.N`` on PATH, pyenv's versions,
    then ``python3``."""
    found = []
    for minor in range(20, OLDEST[1] - 1, -1):
        path = shutil.which(f"python3.{minor}")
        if path:
            found.append(path)
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found += sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3")),
                    reverse=True)
    path = shutil.which("python3")
    if path:
        found.append(path)
    return list(dict.fromkeys(found))


def _key(interpreter: Interpreter) -> tuple[int, ...]:
    return tuple(int(part) for part in interpreter.version.split("."))


def find_python(asked: str | None = None, minor: str | None = None) -> Interpreter:
    """The interpreter for the native backend (see the module doc); ``minor``: the
    ``major.minor`` version a native lock was resolved for. ``asked`` (or
    ``$STEPTRACE_PYTHON``) is a path or a command, or a version (``3.13``: the newest
    CPython 3.13 found as when none is named)."""
    named = asked or os.environ.get(PYTHON_ENV) or None
    if named and _VERSION.fullmatch(named) and shutil.which(named) is None \
            and not os.path.exists(named):
        if minor is not None and named != minor:
            raise InterpreterError(f"Python {named} was asked for, but the lock was resolved "
                                   f"for Python {minor}: use a {minor} interpreter")
        return _newest(named)
    if named:
        path = shutil.which(named) or named
        found = probe(path)
        if minor is not None and found.minor != minor:
            raise InterpreterError(f"{named} is Python {found.version}, but the lock was "
                                   f"resolved for Python {minor}: use a {minor} interpreter")
        return found
    return _newest(minor)


def _newest(minor: str | None) -> Interpreter:
    """The newest CPython 3.12+ (of version ``minor`` if given) among ``candidates()``."""
    usable, tried = [], []
    for path in candidates():
        try:
            found = probe(path)
        except InterpreterError as exc:
            tried.append(str(exc))
            continue
        if minor is None or found.minor == minor:
            usable.append(found)
    if not usable:
        want = f"CPython {minor}" if minor else "CPython 3.12 or later"
        raise InterpreterError(f"no {want} found for the native backend (looked on PATH and "
                               f"in pyenv's versions): name one with --python PATH or "
                               f"${PYTHON_ENV}")
    return max(usable, key=_key)
