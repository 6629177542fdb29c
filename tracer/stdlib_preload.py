"""Standard-library modules imported while the guest component is built.

componentize-py snapshots the interpreter after this module runs; the standard library's
files are there only while it builds. Modules imported here are in the snapshot every
job starts from (importing one costs a job nothing): the pure-Python and built-in
standard library that benchmark programs (HumanEval, MBPP, ClassEval, REval, CRUXEval)
import. Every other module is held compiled and imported on first use
(held_modules.py, called last). Some modules imported here need what WASI lacks (socket,
select, subprocess, signal import; using them fails in the program: PermissionError,
OSError, RuntimeError). Threads cannot start: a program that starts one is stopped with
status ``unsupported`` (guard.py).
"""

import importlib
import sys

MODULES = (
    "abc", "array", "ast", "base64", "binascii", "bisect", "calendar", "cmath", "codecs",
    "collections", "collections.abc", "colorsys", "contextlib", "copy", "copyreg", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "dis", "enum", "errno", "fnmatch",
    "fractions", "functools", "gc", "graphlib", "gzip", "hashlib", "heapq", "hmac", "html",
    "inspect", "io", "ipaddress", "itertools", "json", "keyword", "linecache", "locale",
    "math", "numbers", "operator", "pickle", "pprint", "queue", "random", "re", "reprlib",
    "secrets", "shlex", "statistics", "string", "struct", "textwrap", "time", "tokenize",
    "traceback", "types", "typing", "unicodedata", "uuid", "warnings", "weakref", "zlib",
    "zipfile", "unittest", "doctest", "sys", "os", "pathlib",
    # asyncio runs (guest.py gives it a loop for the sandbox); threading and the thread
    # pool are here so that starting a thread reaches the runner (status ``unsupported``)
    # rather than failing to import
    "asyncio", "threading", "concurrent.futures", "concurrent.futures.thread",
    # imported lazily by time.strptime and datetime.strptime
    "_strptime",
    # the job's files (wasm_sandbox/_files.py), arguments and time zones
    "argparse", "getopt", "glob", "shutil", "tempfile", "sqlite3", "zoneinfo",
)

imported: list[str] = []
failed: dict[str, str] = {}


def _load(name: str) -> None:
    try:
        importlib.import_module(name)
        imported.append(name)
    except Exception as exc:  # recorded and reported by the build, not fatal
        failed[name] = f"{type(exc).__name__}: {exc}"


for _name in MODULES:
    _load(_name)

# Every text codec, so str.encode/bytes.decode with any codec name works as in CPython.
import encodings  # noqa: E402
import pkgutil  # noqa: E402

for _info in pkgutil.iter_modules(encodings.__path__):
    _load(f"encodings.{_info.name}")

# IANA time zones: the tzdata package (put on the build's path by
# steptrace.sandbox._build), its zone files held in memory (memory_resources.py), and
# what zoneinfo imports lazily on its first zone, loaded here once.
try:
    import memory_resources  # noqa: E402
    import zoneinfo  # noqa: E402

    memory_resources.hold("tzdata")
    zoneinfo.available_timezones()
    zoneinfo.ZoneInfo("Europe/Paris")
    zoneinfo.ZoneInfo.clear_cache()
    imported.append("tzdata")
except Exception as exc:  # recorded and reported by the build, not fatal
    failed["tzdata"] = f"{type(exc).__name__}: {exc}"

# Name lookups trap the guest under WASI (wasi-libc's getaddrinfo): they raise the error
# of a machine without network instead (exposed.no_name_lookup), in _socket and in socket
# (which copied them), before any package can take its own reference.
# (A component built from this module without the runner's, as tests/helpers/native.py
# builds plain CPython, keeps WASI's own.)
import _socket  # noqa: E402

try:
    import exposed  # noqa: E402
except ImportError:
    exposed = None
for _name in exposed.NAME_LOOKUPS if sys.platform == "wasi" and exposed is not None else ():
    for _module in (_socket, sys.modules.get("socket")):
        if _module is not None and hasattr(_module, _name):
            setattr(_module, _name, exposed.no_name_lookup)

# A guest built with packages (steptrace.sandbox._packages) has a generated module naming
# the packages' top-level modules and the imports the user asked for: each must import
# here, or the build fails naming it (a package that cannot work under WASI).
packages: list[str] = []
try:
    import guest_packages  # noqa: E402
except ImportError:
    guest_packages = None
if guest_packages is not None:
    for _name in guest_packages.MODULES:
        try:
            importlib.import_module(_name)
        except BaseException as exc:
            raise ImportError(f"steptrace: the guest cannot import {_name!r} from its packages: "
                              f"{type(exc).__name__}: {exc}") from None
        packages.append(_name)

# The rest of the standard library and of the packages, held compiled and imported on
# first use, and the packages' data files (held_modules.py): last, while their files are
# still there to read.
import held_modules  # noqa: E402

held_modules.hold(frozenset(sys.modules),
                  held_modules.packages_root(packages) if packages else None)
