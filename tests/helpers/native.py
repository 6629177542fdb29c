"""The plain CPython 3.14 of tests/helpers/native_guest: built once into a WebAssembly
component (componentize-py, as the guest is built, with its own sources only) and run
under wasmtime by the sandbox's runtime, one fresh instance per program.

It is the interpreter the guest traces programs with, so what it reports is what CPython
3.14 does, measured by a monitoring tool and a value writer of the tests' own. The
component is kept in the session's component cache (``guest-native-KEY.wasm``: the key
digests its sources and the tools' versions), which the test session keeps in the user's
cache at its end (tests/conftest.py), so later sessions need not build it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from steptrace.sandbox._build import (GuestArtifacts, cache_dir, is_verified, tracer_dir,
                                      write_verified)
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

SOURCE = Path(__file__).resolve().parent / "native_guest"
APP = "native_guest"
PRELOAD = "stdlib_preload.py"  # the guest's list of standard modules, imported as built


def sources() -> list[Path]:
    return [SOURCE / f"{APP}.py", tracer_dir() / PRELOAD, tracer_dir() / "wit" / "steptrace.wit"]


def key() -> str:
    digest = hashlib.sha256()
    for path in sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in ("componentize-py", "wasmtime"):
        digest.update(f"{dist}={importlib.metadata.version(dist)}\0".encode())
    digest.update(f"{platform.machine()}-{sys.platform}".encode())
    return digest.hexdigest()[:24]


def artifacts() -> GuestArtifacts:
    """The component, built into the cache if it is not there."""
    name = f"native-{key()}"
    found = GuestArtifacts(name, cache_dir() / f"guest-{name}.wasm",
                           cache_dir() / f"guest-{name}.cwasm")
    if not is_verified(found.wasm):
        with tempfile.TemporaryDirectory(prefix="steptrace-native-") as tmp:
            src = Path(tmp) / "src"
            (src / "wit").mkdir(parents=True)
            for path in sources():
                target = src / ("wit" if path.suffix == ".wit" else "") / path.name
                target.write_bytes(path.read_bytes())
            empty = Path(tmp) / "no-packages"
            (empty / "lib" / "site-packages").mkdir(parents=True)
            out = Path(tmp) / "native.wasm"
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
            env["VIRTUAL_ENV"] = str(empty)
            command = [sys.executable, "-c", "import sys, componentize_py; sys.argv[0] = "
                       "'componentize-py'; componentize_py.script()", "-q", "-d",
                       str(src / "wit"), "-w", "tracer", "componentize", APP, "-p", str(src),
                       "-o", str(out)]
            done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
            write_verified(found.wasm, out.read_bytes())
    return found


class Native:
    """Runs requests (tests/helpers/native_guest/native_guest.py's) in fresh instances."""

    def __init__(self, timeout_s: float = 20.0) -> None:
        self.box = Sandbox(Limits(timeout_s=timeout_s, memory_mb=512), artifacts=artifacts())

    def run(self, request: dict) -> dict:
        text, trapped, _ = self.box.call(json.dumps(request))
        assert trapped is None, (trapped, request.get("call"))
        result = json.loads(text)
        assert result["status"] != "harness_error", result
        return result

    def close(self) -> None:
        self.box.close()
