"""A program run by the host's own CPython, as a script, to compare with the sandbox.

NATIVE is CPython 3.13 where the machine has it (closest to the guest's 3.14), else this
interpreter. The programs compared print nothing that differs between CPython versions
or machines (no absolute paths, no timestamps, no compressed sizes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

NATIVE = next((path for path in ("/root/.pyenv/versions/3.13.0/bin/python",
                                 shutil.which("python3.13")) if path and os.path.exists(path)),
              sys.executable)


def run_natively(code: str, argv: list[str], env: dict[str, str], where: Path,
                 files: dict[str, str] | None = None) -> str:
    """The program's stdout run by NATIVE as ``python main.py ARGV`` in an empty working
    directory (holding ``files``, path -> text) with exactly ``env`` as its environment;
    the program must exit 0."""
    (where / "prog").mkdir()
    work = where / "work"
    work.mkdir()
    for name, text in (files or {}).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text, encoding="utf-8")
    main = where / "prog" / "main.py"
    main.write_text(code)
    done = subprocess.run([NATIVE, str(main), *argv], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_as_native(box, code: str, isolation: str, where: Path, argv: list[str] | None = None,
                     env: dict[str, str] | None = None, files: dict[str, str] | None = None
                     ) -> dict:
    """Run ``code`` as a script in the sandbox ``box`` (in ``isolation``) and natively,
    with the same arguments, environment and files: the sandbox's run ends ``ok`` and
    prints what the native run prints. Returns the sandbox's result."""
    want = run_natively(code, argv or [], env or {}, where, files)
    request = {"code": code, "input": "", "shape": "script", "argv": argv or [],
               "env": env or {}}
    if files:
        request["files"] = files
    result = box.run(request, isolation).result
    assert (result["status"], result["exception_type"], result["exception_message"]) == (
        "ok", None, None), result.get("stderr")
    assert result["stdout"] == want, (result["stdout"], want)
    return result
