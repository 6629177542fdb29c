"""The guest's tracer run natively, on the host's CPython 3.12 and 3.13 (pyenv), and plain
``sys.settrace`` beside it: the references the differential check compares the guest with.

A :class:`NativeTracer` is a subprocess of one of those interpreters that imports the
guest's runner modules from ``tracer/`` and sets them up as ``tracer/guest.py`` does when
the component is built (the audit hook installed, the interpreter sealed, the tracer's
sys.monitoring tool installed, a warm-up job), then answers requests with ``job.handle``,
the function the WASI export calls. The same request gives the same result fields as in
the guest; only the interpreter differs. A :class:`NativeSettrace` runs a program's call
under a plain ``sys.settrace`` function (no runner, no guard) and reports its events.

Both speak one JSON object a line over the child's stdin and stdout. This file is also
the child's program (``python native_tracer.py tracer|settrace TRACER_DIR``): it imports
nothing outside the standard library, so the host's interpreters run it as it is.

``native_python(version)`` is the interpreter's path, or None when it is absent (the
tests using it skip then, naming the path; CI machines have both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACER_DIR = ROOT / "tracer"
PYTHONS = {"3.12": Path("/root/.pyenv/versions/3.12.1/bin/python"),
           "3.13": Path("/root/.pyenv/versions/3.13.0/bin/python")}
PROGRAM_FILE = "<program>"  # job.py compiles the traced program under this name


def native_python(version: str) -> Path | None:
    """The host's CPython ``version`` ("3.12", "3.13"), if it is installed."""
    path = PYTHONS[version]
    return path if path.is_file() and os.access(path, os.X_OK) else None


class _Child:
    """One long-lived child interpreter answering JSON requests line by line."""

    mode = ""

    def __init__(self, version: str) -> None:
        python = native_python(version)
        if python is None:
            raise FileNotFoundError(f"CPython {version} is not installed at {PYTHONS[version]}")
        self.version = version
        # -I: no user site, no PYTHON* variables, no script directory on sys.path
        self.process = subprocess.Popen(
            [str(python), "-I", str(Path(__file__).resolve()), self.mode, str(TRACER_DIR)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8")
        ready = self._read()
        if ready.get("ready") is not True:
            raise RuntimeError(f"the native {self.mode} child did not start: {ready}")

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            error = self.process.stderr.read()
            raise RuntimeError(f"the native {self.mode} child ({self.version}) ended: {error}")
        return json.loads(line)

    def request(self, payload: dict) -> dict:
        self.process.stdin.write(json.dumps(payload) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NativeTracer(_Child):
    """The guest's ``job.handle`` in a native CPython ``version``."""

    mode = "tracer"

    def run(self, request: dict) -> dict:
        """The result of one job request (as the guest's ``handle`` returns it)."""
        return self.request(request)


class NativeSettrace(_Child):
    """A program's call under plain ``sys.settrace`` in a native CPython ``version``."""

    mode = "settrace"

    def run(self, code: str, input: str, entry: str = "f") -> dict:
        """``{"status", "events": [[event, qualname, line, depth], ...]}`` of the call
        ``entry(<input>)`` after the program's top level ran (untraced), as job.py runs it;
        the events of the program's frames only, depth 0 for the entry's frame."""
        return self.request({"code": code, "input": input, "entry": entry})


# ---------------------------------------------------------------- the child's side
def _serve_tracer(tracer_dir: str, out) -> None:
    """What guest.py does at build time, then ``job.handle`` per request."""
    requests = sys.stdin  # a job leaves its own stdin in sys (job isolation puts none back)
    sys.path.insert(0, tracer_dir)
    import guard  # noqa: PLC0415 (the guest's modules exist only in the child)
    import job
    import stdlib_preload
    import sysmon_tracer
    guard.runner_globals = frozenset()
    guard.install()
    guard.seal()
    sysmon_tracer.install()
    job.PRELOADED = {"imported": list(stdlib_preload.imported),
                     "failed": dict(stdlib_preload.failed),
                     "packages": list(stdlib_preload.packages)}
    job.AVAILABLE_MODULES = frozenset(sys.modules) | frozenset(sys.builtin_module_names)
    # the warm-up: foreign code the first jobs run answers DISABLE here, as in the guest
    warm = "def f(xs):\n    out = [x for x in xs]\n    for x in xs:\n        out.append(x)\n    return out\n"
    job.handle(json.dumps({"code": warm, "input": "[1, 2]", "expected": "[1, 2, 1, 2]"}))
    _answer(out, {"ready": True, "version": list(sys.version_info[:3])})
    for line in requests:
        _answer(out, json.loads(job.handle(line)))


def _serve_settrace(out) -> None:
    """Each request: compile, run the top level, call the entry under sys.settrace."""
    _answer(out, {"ready": True, "version": list(sys.version_info[:3])})
    for line in sys.stdin:
        request = json.loads(line)
        _answer(out, _settrace_call(request["code"], request["input"], request["entry"]))


def _settrace_call(code: str, input_text: str, entry: str) -> dict:
    namespace: dict = {"__name__": "__main__"}
    exec(compile(code, PROGRAM_FILE, "exec", dont_inherit=True), namespace)
    namespace["__steptrace_args__"] = lambda *args, **kwargs: (args, kwargs)
    args, kwargs = eval(compile(f"__steptrace_args__({input_text}\n)", "<input>", "eval",
                                dont_inherit=True), namespace)
    function = namespace[entry]
    events: list = []
    base = sys._getframe()
    entry_frame: list = []  # the entry's activation: recording ends with its return

    def depth_of(frame) -> int:
        depth = -1
        while frame is not None and frame is not base:
            depth += 1
            frame = frame.f_back
        return depth

    def trace(frame, event, arg):
        if frame.f_code.co_filename != PROGRAM_FILE or len(entry_frame) > 1:
            return None
        if not entry_frame:
            entry_frame.append(frame)
        events.append([event, frame.f_code.co_qualname, frame.f_lineno, depth_of(frame)])
        if event == "return" and frame is entry_frame[0]:
            entry_frame.append(None)  # what runs after (a finaliser) is not the call's,
        return trace                  # as in the guest's trace

    status = "ok"
    sys.settrace(trace)
    try:
        function(*args, **kwargs)
    except Exception:  # the program's own exception: its events are what counts
        status = "exception"
    finally:
        sys.settrace(None)
    return {"status": status, "events": events}


def _answer(out, payload: dict) -> None:
    out.write(json.dumps(payload) + "\n")
    out.flush()


if __name__ == "__main__":
    # the answers go to a copy of the real stdout: the programs' prints go to the
    # runner's own streams (tracer mode) or to stderr (settrace mode)
    _out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if sys.argv[1] == "tracer":
        _serve_tracer(sys.argv[2], _out)
    else:
        _serve_settrace(_out)
