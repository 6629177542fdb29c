"""Modules held as compiled code and imported on first use: the rest of the standard
library, and every module of a guest's packages; and the packages' other files.

componentize-py mounts the interpreter's standard library (and a build's packages) only
while it builds the guest; at run time there is no file to import from, so only modules
imported by then would exist (stdlib_preload.py imports the ones most programs use, and
each package's top-level modules). :func:`hold`, called when the guest is built, compiles
every other module of the standard library (``.py`` files under its directory) and of
the packages' directory, and keeps each as zlib-compressed marshal data; this module, on
``sys.meta_path`` before the path finder, is then the finder and loader of those modules:
``import xml.etree.ElementTree`` (or a lexer pygments loads by name) unmarshals and runs
its code, in the importing job, as CPython would run its ``.pyc``. A module nobody
imports costs nothing but its compressed bytes in the snapshot (pages no job touches are
never copied), and nothing is imported at the start of a job.

A package's files are held too (:func:`package_files`: its data, such as certifi's
``cacert.pem``, jsonschema's schemas and pytz's zones, its ``.dist-info`` metadata, its
sources): the host asks for them once per sandbox and mounts them, read-only, where the
build saw them (wasm_sandbox/_package_files.py), so ``open(os.path.join(
os.path.dirname(__file__), ...))``, ``importlib.resources``, ``importlib.metadata``, a
listing of a package's directory and a traceback's source lines find them as natively.
Modules are still imported from the held code, never compiled from the mounted sources.

Left out (``UNAVAILABLE``): the modules that cannot exist under WASI (their C part is not
in the WASI build, or they are for another platform); importing one is a
ModuleNotFoundError naming it, status ``missing_module`` (job.py). Test suites and the
IDE are left out too (``LEFT_OUT_DIRS``).

Why a module and not classes: this module is the finder and the loader
(``find_spec``, ``create_module``, ``exec_module`` are its functions), so that it defines
no class a program could change for every instance; what it holds are tuples of strings
and bytes, which nothing can change in place. Its namespace is compared after every
batch job like a module's (shared_state.take), and the import system's lists
(``sys.meta_path``, ``sys.path_hooks``) are checked after every batch job. A module it
imported during a batch job is a change of ``sys.modules``: the next job gets a fresh
instance (shared_state.changed).
"""

from __future__ import annotations

import marshal
import os
import sys
import zlib
from bisect import bisect_left
from importlib.machinery import ModuleSpec
from importlib.readers import FileReader
from types import SimpleNamespace

# Top-level modules that cannot exist under WASI, and why (docs/guides/sandbox.md lists
# them; tests/guest/test_stdlib_all.py checks that these, and only these, of
# sys.stdlib_module_names do not import).
_NO_C = "its C extension is not part of CPython's WASI build"
UNAVAILABLE = {
    # C extensions the WASI build does not compile (no library, or no such system call)
    "_bz2": _NO_C + " (no libbz2)", "bz2": "needs _bz2 (no libbz2 in the WASI build)",
    "_lzma": _NO_C + " (no liblzma)", "lzma": "needs _lzma (no liblzma in the WASI build)",
    "_zstd": _NO_C + " (no libzstd)",
    "_ctypes": _NO_C + " (no libffi: WebAssembly cannot call native code)",
    "ctypes": "needs _ctypes (WebAssembly cannot call native code)",
    "_curses": _NO_C + " (no terminal)", "_curses_panel": _NO_C + " (no terminal)",
    "curses": "needs _curses (no terminal)",
    "_dbm": _NO_C + " (no ndbm)", "_gdbm": _NO_C + " (no gdbm)",
    "_hashlib": _NO_C + " (no OpenSSL; hashlib uses its built-in hashes)",
    "_ssl": _NO_C + " (no OpenSSL, no sockets)", "ssl": "needs _ssl (no OpenSSL, no sockets)",
    "_tkinter": _NO_C + " (no Tcl/Tk, no display)", "tkinter": "needs _tkinter (no display)",
    "turtle": "needs tkinter (no display)", "turtledemo": "needs tkinter (no display)",
    "idlelib": "the IDE: needs tkinter (no display)",
    "_multiprocessing": _NO_C + " (no processes)", "_posixshmem": _NO_C + " (no shared memory)",
    "multiprocessing": "needs processes and _multiprocessing (WASI has neither)",
    "_posixsubprocess": _NO_C + " (WASI cannot start a process)",
    "_interpreters": _NO_C + " (no threads)", "_interpchannels": _NO_C + " (no threads)",
    "_interpqueues": _NO_C + " (no threads)",
    "_remote_debugging": _NO_C + " (no other process to read)",
    "_uuid": _NO_C + " (no libuuid; uuid uses its Python code)",
    "fcntl": "WASI has no fcntl/ioctl", "grp": "WASI has no groups", "pwd": "WASI has no users",
    "mmap": "WASI cannot map files", "readline": "no terminal (no libreadline)",
    "resource": "WASI has no resource limits", "syslog": "WASI has no syslog",
    "termios": "no terminal", "pty": "needs termios and processes (no terminal)",
    "tty": "needs termios (no terminal)",
    # other platforms' modules
    "_overlapped": "Windows only", "_winapi": "Windows only", "_wmi": "Windows only",
    "msvcrt": "Windows only", "nt": "Windows only", "winreg": "Windows only",
    "winsound": "Windows only", "_scproxy": "macOS only",
}
# Directories of the standard library that are not modules a program imports: CPython's
# own test suites, and what needs a display or a network to install from.
LEFT_OUT_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "__pycache__",
                           "__phello__"})

# Sorted module names, and for each (origin, is a package, compressed code): tuples, so
# that nothing changes them in place (see the module doc).
_NAMES: tuple = ()
_ENTRIES: tuple = ()
_SELF = None  # this module (taken out of sys.modules when the guest is built: guest.py)
_PACKAGES_ROOT = None  # where the packages' files are, as the build saw them
_PACKAGE_FILES: tuple = ()
failed: dict = {}  # module -> why it could not be compiled (reported by the build)


def _candidates(root: str, stdlib: bool) -> list[tuple[str, str, bool]]:
    """(module name, file, is a package) for every module file under ``root`` (the
    standard library's directory, else the packages')."""
    found = []
    for current, dirs, files in os.walk(root):
        relative = os.path.relpath(current, root)
        parts = [] if relative == "." else relative.split(os.sep)
        if stdlib and parts and parts[0] in UNAVAILABLE:
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d not in LEFT_OUT_DIRS and d.isidentifier())
        if parts and "__init__.py" not in files:
            dirs[:] = []  # not a package: nothing below is a module
            continue
        for name in sorted(files):
            stem, dot, suffix = name.rpartition(".")
            if suffix != "py" or not dot or not stem.isidentifier():
                continue
            if stem == "__init__":
                if parts:
                    found.append((".".join(parts), os.path.join(current, name), True))
            elif parts or not stdlib or stem not in UNAVAILABLE:
                found.append((".".join(parts + [stem]), os.path.join(current, name), False))
    return found


def _stdlib_root() -> str:
    """The directory the standard library is imported from while the guest is built
    (componentize-py mounts it at ``/python``; ``os`` itself is frozen): the entry of
    ``sys.path`` holding ``json``."""
    for entry in sys.path:
        if os.path.isfile(os.path.join(entry, "json", "__init__.py")):
            return entry
    raise RuntimeError("the standard library's directory is not on sys.path")


def packages_root(modules) -> str | None:
    """The entry of ``sys.path`` the packages' top-level ``modules`` (names) were
    imported from (componentize-py mounts a build's packages at ``/1``); None without
    packages."""
    for name in modules:
        where = getattr(sys.modules.get(name.partition(".")[0]), "__file__", None)
        if type(where) is not str:
            continue
        for entry in sys.path:
            if entry and where.startswith(entry.rstrip("/") + "/"):
                return entry
    return None


def _package_dir_files(root: str) -> list[tuple[str, bytes]]:
    """(path below ``root``, compressed content) of every file under ``root`` but
    bytecode: the packages' sources (what ``inspect``, tracebacks and a plugin scan of a
    package's directory read), data and metadata."""
    found = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        relative = os.path.relpath(current, root)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            with open(os.path.join(current, name), "rb") as handle:
                found.append((prefix + name, zlib.compress(handle.read(), 6)))
    return found


def hold(skip, packages: str | None = None) -> int:
    """Compile and hold every module of the standard library, and of the packages'
    directory ``packages`` (a ``sys.path`` entry), not in ``skip`` (the modules already
    imported), hold the packages' other files, and put this module on ``sys.meta_path``
    before the path finder; return how many modules are held. Called once, when the
    guest is built."""
    global _NAMES, _ENTRIES, _SELF, _PACKAGES_ROOT, _PACKAGE_FILES
    held = []
    roots = [(_stdlib_root(), True)] + ([(packages, False)] if packages else [])
    for root, stdlib in roots:
        for name, path, package in _candidates(root, stdlib):
            if name in skip:
                continue
            try:
                with open(path, "rb") as handle:
                    code = compile(handle.read(), path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError, OSError) as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"
                continue
            held.append((name, (path, package, zlib.compress(marshal.dumps(code), 6))))
    held.sort()
    _NAMES = tuple(name for name, _ in held)
    _ENTRIES = tuple(entry for _, entry in held)
    if packages:
        _PACKAGES_ROOT = packages
        _PACKAGE_FILES = tuple(_package_dir_files(packages))
    _SELF = sys.modules[__name__]
    if _SELF not in sys.meta_path:
        finders = sys.meta_path
        path_finder = next((i for i, f in enumerate(finders)
                            if getattr(f, "__name__", "") == "PathFinder"), len(finders))
        finders.insert(path_finder, _SELF)
    return len(_NAMES)


def package_files() -> tuple:
    """(where the packages were mounted when the guest was built, or None; their files
    as (path, compressed content): what the host mounts there, read-only)."""
    return _PACKAGES_ROOT, _PACKAGE_FILES


def names() -> tuple:
    """The modules held: what a program can import besides those already imported."""
    return _NAMES


def _entry(name):
    index = bisect_left(_NAMES, name)
    if index < len(_NAMES) and _NAMES[index] == name:
        return _ENTRIES[index]
    return None


def find_spec(name, path=None, target=None):
    """The import system's finder call: a spec for a held module, else None."""
    entry = _entry(name)
    if entry is None:
        return None
    origin, package, _ = entry
    spec = ModuleSpec(name, _SELF, origin=origin, is_package=package)
    spec.has_location = True  # its repr says where it came from, as a file's does
    if package:
        spec.submodule_search_locations = [os.path.dirname(origin)]
    return spec


def create_module(spec):
    return None  # the default module object


def exec_module(module):
    """Run the held code of ``module`` in its namespace (what a .pyc's loader does)."""
    entry = _entry(module.__spec__.name)
    if entry is None:
        raise ImportError(f"no held module {module.__spec__.name!r}",
                          name=module.__spec__.name)
    exec(marshal.loads(zlib.decompress(entry[2])), module.__dict__)


def is_package(name):
    entry = _entry(name)
    if entry is None:
        raise ImportError(f"no held module {name!r}", name=name)
    return entry[1]


def get_code(name):
    """The module's code object (``runpy``, ``pkgutil`` and ``inspect`` ask a loader)."""
    entry = _entry(name)
    if entry is None:
        raise ImportError(f"no held module {name!r}", name=name)
    return marshal.loads(zlib.decompress(entry[2]))


def get_resource_reader(name):
    """``importlib.resources`` for a held package: its directory's files, where the host
    mounted them (the packages' data) or nothing (the standard library's)."""
    entry = _entry(name)
    if entry is None or not entry[1]:
        return None
    return FileReader(SimpleNamespace(path=entry[0]))


def get_source(name):
    return None  # the sources are not held (as for the modules imported at build time)
