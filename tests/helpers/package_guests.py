"""Programs run with real packages in a guest built with them and natively, to compare.

The guest is built from a lock (``steptrace.sandbox._build.ensure_component``: cached, so
a session builds each lock once and later sessions find it in the user's cache); the
native run is CPython 3.13 (tests/helpers/native_python.py) with exactly the locked
wheels installed (``steptrace.sandbox._packages.install``: hash-checked) on its path.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers.native_python import NATIVE
from steptrace.sandbox._build import ensure_component
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import PackageLock, install
from steptrace.sandbox._runtime import Sandbox


class PackageGuest:
    """A sandbox of the guest built with ``lock`` and the same wheels installed for the
    native interpreter under ``where``."""

    def __init__(self, lock: PackageLock, where: Path, limits: Limits | None = None) -> None:
        self.lock = lock
        self.site = where / "site"
        install(lock, self.site)
        self.sandbox = Sandbox(limits or Limits(timeout_s=120.0), ensure_component(packages=lock))
        self.where = where

    def close(self) -> None:
        self.sandbox.close()

    def native(self, code: str) -> subprocess.CompletedProcess:
        """``code`` run as a script by NATIVE with the wheels on its path, in an empty
        working directory."""
        work = self.where / "work"
        work.mkdir(exist_ok=True)
        for child in work.iterdir():  # what the last program left (files, directories)
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        env = {"PYTHONPATH": str(self.site), "PYTHONDONTWRITEBYTECODE": "1"}
        return subprocess.run([NATIVE, "-S", "-c", code], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300)

    def guest(self, code: str, isolation: str = "job") -> dict:
        """``code`` run as a script in the guest: its result."""
        return self.sandbox.run({"code": code, "input": "", "shape": "script"},
                                isolation).result

    def assert_as_native(self, code: str, isolation: str = "job") -> dict:
        """The script ends ``ok`` in the guest and prints what it prints natively (where
        it must exit 0)."""
        native = self.native(code)
        assert native.returncode == 0, native.stderr[-2000:]
        result = self.guest(code, isolation)
        assert (result["status"], result["exception_type"], result["exception_message"]) == (
            "ok", None, None), (result["exception_message"], result.get("stderr"))
        assert result["stdout"] == native.stdout, (result["stdout"], native.stdout)
        return result

