"""Run jobs in the native backend: a jailed fork server per sandbox, a forked child per job.

:class:`NativeSandbox` is to the native backend what ``steptrace.sandbox.Sandbox`` is to
the WASI one, behind the same interface (``run``, ``busy_since``, ``close``, context
manager; ``steptrace.sandbox.WorkerPool`` and ``run_chunks`` run it in their worker
processes, with their watchdog): a request goes in, a :class:`JobOutcome` comes out,
made from the guest's result text by the same check (``steptrace.sandbox._outcome``:
the result schema, its caps, the statuses). What is native is where the guest runs:

* the jail (native_sandbox/_jail.py) holds a fork server (native_sandbox/_forkserver.py)
  that set the interpreter up as the WASI guest's build does and forks a child per job:
  every job starts from that pre-initialised interpreter, whatever the isolation asked
  (there is no batch isolation here: a fork costs less than putting an interpreter back);
* limits: the time limit is the fork server's (it kills the job's process at
  ``timeout_s``, whatever it does) and this process's (a fork server that does not answer
  within ``timeout_s + HOST_GRACE_S`` has its jail killed and replaced: no worker's
  watchdog is needed, ``busy_since`` stays None); the CPU-time
  limit is the kernel's (``RLIMIT_CPU``); memory is ``RLIMIT_AS`` (the fork server's
  address space, read from ``/proc`` here, plus ``memory_mb``: a ``MemoryError`` is
  ``memory_limit`` as in the guest); a file is at most ``scratch_mb`` (``RLIMIT_FSIZE``)
  and all files together too (the scratch tmpfs's size); ``RLIMIT_NOFILE``,
  ``RLIMIT_NPROC`` and the job filter (no process, no thread) bound the rest;
* what a model wrote runs only when it is a pure literal (native_sandbox/_trust.py):
  a request marked ``model_written`` (its program is a model's) or ``answer`` (its
  input is) is refused here, with status ``refused``, unless every piece the model wrote
  is a literal ``ast.literal_eval`` accepts.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from steptrace.errors import InputError, SandboxError
from steptrace.native_sandbox import _jail
from steptrace.native_sandbox._python import Interpreter, find_python
from steptrace.native_sandbox._seccomp import job_filter
from steptrace.native_sandbox._trust import refusal
from steptrace.sandbox._build import cache_dir, guest_sources, tracer_dir
from steptrace.sandbox._files import check_path
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._outcome import JobOutcome, checked_outcome
from steptrace.sandbox._packages import PackageLock

BACKEND = "native"
# Past the time limit, before this process ends the jail itself: a safety net for a fork
# server that stopped answering (it ends every job at the limit itself), wide enough that
# a loaded machine never turns a job's own timeout into a replaced jail.
HOST_GRACE_S = 10.0
START_TIMEOUT_S = 120.0  # a fork server's set-up (imports, warm-up jobs)
SCRATCH_MB = 64       # the scratch tmpfs, and the largest file a job may write
OPEN_FILES = 256
PROCESSES = 64        # RLIMIT_NPROC (the job filter refuses new processes anyway)
NATIVE_DIR = "native"


class NativeError(SandboxError):
    """The native backend cannot run here, or its fork server failed (the message says)."""


@dataclass(frozen=True)
class NativeGuest:
    """A native guest, prepared: the interpreter, the runner directory (the tracer's
    modules and the fork server), the lock's installed packages. ``key`` is what
    ``runs.guest`` records (as a WASI build's key): a SHA-256 over the guest's sources,
    the fork server, the interpreter's version and path, and the lock."""

    key: str
    python: Interpreter
    runner: str
    packages: str | None = None
    lock: PackageLock | None = field(default=None, compare=False)
    # its jail's PYTHONHASHSEED: "0", or the determinism check's variant's (_jail.py)
    hash_seed: str = "0"

    @property
    def backend(self) -> str:
        return BACKEND

    def open(self, limits: Limits) -> "NativeSandbox":
        return NativeSandbox(limits, self)

    @property
    def manifest(self) -> bytes:
        """What a shard plan keeps of it (``DIR/guest``, named by its SHA-256): the key
        and the lock. A native guest is not shipped: every machine prepares its own, and
        runs a plan's shards only when its key is the plan's (the same tracer sources,
        interpreter and lock)."""
        lock = self.lock.text if self.lock is not None else ""
        return (f"steptrace native guest {self.key}\npython {self.python.version}\n"
                f"{lock}").encode()


def forkserver_source() -> Path:
    return Path(__file__).with_name("_forkserver.py")


def guest_key(python: Interpreter, lock: PackageLock | None) -> str:
    digest = hashlib.sha256(b"native\0")
    root = tracer_dir()
    for path in [*guest_sources(), forkserver_source()]:
        name = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"{python.version}\0{python.executable}\0".encode())
    if lock is not None:
        digest.update(f"packages={lock.digest}".encode())
    return digest.hexdigest()[:24]


def prepare(python: str | Interpreter | None = None, lock: PackageLock | None = None,
            variant: str = "") -> NativeGuest:
    """The native guest for ``python`` (found as native_sandbox/_python.py says when not
    given) and ``lock`` (its packages installed: native_sandbox/_packages.py), its runner
    directory written once into the cache (``native/runner-KEY``). A ``variant`` (the
    determinism check's, steptrace.tracing._analysis) is the same guest with another
    string-hash secret (``_jail.VARIANT_HASH_SEED``): a WASI variant is another build."""
    from steptrace.native_sandbox._packages import installed  # pip runs only for a lock
    minor = lock.python if lock is not None and lock.python else None
    interpreter = python if isinstance(python, Interpreter) else find_python(python, minor)
    site = installed(lock, interpreter) if lock is not None and lock.packages else None
    key = guest_key(interpreter, lock)
    runner = cache_dir() / NATIVE_DIR / f"runner-{key}"
    if not (runner / "ready").exists():
        _write_runner(runner, site, lock)
    return NativeGuest(key, interpreter, str(runner), str(site) if site else None, lock,
                       _jail.VARIANT_HASH_SEED if variant else "0")


def _write_runner(runner: Path, site: Path | None, lock: PackageLock | None) -> None:
    """The runner directory: the tracer's modules, the fork server, the modules to
    preload (the lock's top-level modules and imports), an empty directory (what hides
    the interpreter's own site-packages). Written beside and renamed into place."""
    from steptrace.sandbox._packages import top_level_modules
    runner.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".runner-", dir=runner.parent))
    try:
        root = tracer_dir()
        for path in guest_sources():
            if path.suffix == ".py":
                shutil.copyfile(path, tmp / path.relative_to(root).name)
        shutil.copyfile(forkserver_source(), tmp / f"{_jail.FORKSERVER}.py")
        if site is not None:
            modules = top_level_modules(site) + list(lock.imports if lock else ())
            (tmp / "guest_packages.py").write_text(f"MODULES = {tuple(modules)!r}\n")
        (tmp / "empty").mkdir()
        (tmp / "ready").write_text("")
        for path in tmp.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        tmp.chmod(0o755)
        try:
            tmp.rename(runner)
        except OSError:
            if not (runner / "ready").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _frame(kind: bytes, data: bytes) -> bytes:
    return kind + struct.pack(">Q", len(data)) + data


class NativeSandbox:
    """Runs jobs in a jailed fork server (see the module doc). The jail is started here
    and again after anything that ends it (a fork server that stops answering)."""

    def __init__(self, limits: Limits | None = None, guest: NativeGuest | None = None) -> None:
        self.limits = limits or Limits()
        self._script_limits = self.limits.for_shape("script")
        self.guest = guest or prepare()
        self.python = self.guest.python.version
        # Sandbox's is read by a worker's watchdog (wasm_sandbox/_worker.py), for a guest
        # blocked in a host call; none is here (the fork server ends a job at the limit,
        # and call() waits no longer than HOST_GRACE_S past it): always None
        self.busy_since: float | None = None
        self._jail: _jail.Jail | None = None
        self._address_space: int | None = None
        self.preloaded: dict = {}
        self._start()

    # ------------------------------------------------------------------ the jail
    def _start(self) -> None:
        python = self.guest.python
        jail = _jail.start(python.executable, python.prefix, python.site, self.guest.runner,
                           self.guest.packages, SCRATCH_MB << 20, self.guest.hash_seed)
        try:
            kind, data = self._receive(jail, time.monotonic() + START_TIMEOUT_S)
            if kind != b"H":
                detail = data.decode("utf-8", "replace") if kind == b"F" else (
                    jail.error_text() or "it ended while starting")
                raise NativeError(f"the native backend's fork server ({python.executable}, "
                                  f"Python {python.version}) failed to start: {detail[-2000:]}")
            hello = json.loads(data)
            self.preloaded = hello.get("preloaded", {})
            base = _jail.address_space(jail.pid)
            if base is None:
                raise NativeError("cannot read the fork server's address space "
                                  f"(/proc/{jail.pid}/statm)")
            self._address_space = base + self.limits.memory_bytes
            setup = {"filter": job_filter().hex(), "scratch": _jail.SCRATCH}
            self._send(jail, _frame(b"S", json.dumps(setup).encode()))
        except BaseException:
            jail.close()
            raise
        self._jail = jail

    def _job_limits(self, files: list | None = None) -> bytes:
        """The job's line for the fork server: its limits, and the record's files (``[[path
        parts, text], ...]``, checked here) that its process writes into its working
        directory before the program runs."""
        limits = self.limits
        return json.dumps({
            "timeout_s": limits.timeout_s, "cpu_s": max(1, int(limits.timeout_s + 0.999)),
            "address_space": self._address_space, "file_bytes": SCRATCH_MB << 20,
            "open_files": OPEN_FILES, "processes": PROCESSES,
            "max_bytes": limits.max_result_bytes, "files": files or []}).encode()

    @staticmethod
    def _send(jail: _jail.Jail, frame: bytes) -> None:
        view = memoryview(frame)
        while view:
            view = view[os.write(jail.requests, view):]

    @staticmethod
    def _receive(jail: _jail.Jail, deadline: float) -> tuple[bytes | None, bytes]:
        """The fork server's next frame, or ``(None, b"")`` when it ended or did not
        answer by ``deadline``."""
        head = NativeSandbox._read(jail.replies, 9, deadline)
        if head is None:
            return None, b""
        body = NativeSandbox._read(jail.replies, struct.unpack(">Q", head[1:])[0], deadline)
        return (head[:1], body) if body is not None else (None, b"")

    @staticmethod
    def _read(fd: int, size: int, deadline: float) -> bytes | None:
        parts = []
        while size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                return None
            parts.append(chunk)
            size -= len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self._jail is not None:
            self._jail.close()
            self._jail = None

    def __enter__(self) -> "NativeSandbox":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------------ jobs
    def call(self, payload: str, files: list | None = None
             ) -> tuple[bytes | None, dict | None]:
        """Send one JSON request to a fresh job process (``files``: the record's, written
        into its working directory first); return (the guest's result bytes, unchecked) or
        (None, the host's result: ``timeout``, ``crashed``, ``exited``)."""
        if self._jail is not None and select.select([self._jail.replies], [], [], 0)[0]:
            self.close()  # it said why it ended (F: its scratch space), or it died
        if self._jail is None:
            self._start()
        jail = self._jail
        body = self._job_limits(files) + b"\n" + payload.encode("utf-8", "surrogatepass")
        started = time.monotonic()
        try:
            self._send(jail, _frame(b"J", body))
        except OSError:
            kind, data = None, b""
        else:
            kind, data = self._receive(jail, started + self.limits.timeout_s + HOST_GRACE_S)
        if kind == b"R":
            return data, None
        if kind == b"X":
            return None, json.loads(data)
        # no answer in time, or the fork server ended: its jail goes, the next job starts
        # another
        self.close()
        return None, {"status": "timeout", "exception_message":
                      f"exceeded the {self.limits.timeout_s:g} s time limit: the native fork "
                      "server did not answer in time, so its jail was replaced"}

    def run(self, request: dict, isolation: str = "job") -> JobOutcome:
        """Run one job (as ``Sandbox.run``); every job runs in a fresh process, so the
        ``isolation`` asked changes nothing here."""
        started = time.perf_counter_ns()
        refused = refusal(request)
        if refused is not None:
            return JobOutcome({"status": "refused", "exception_message": refused}, 0)
        guest_request = {key: value for key, value in request.items()
                         if key not in ("model_written", "files")}
        try:
            files = [[check_path(path), text] for path, text in
                     (request.get("files") or {}).items()]
        except InputError as exc:
            return JobOutcome({"status": "invalid", "exception_message": str(exc)}, 0)
        limits = self._script_limits if request.get("shape") == "script" else self.limits
        payload = json.dumps({**guest_request, "limits": limits.guest(),
                              "check_shared_state": False})
        text, ended = self.call(payload, files)
        duration_us = (time.perf_counter_ns() - started) // 1000
        if ended is not None:
            return JobOutcome(ended, duration_us)
        return checked_outcome(text, limits, duration_us, True)[0]

    def preloaded_modules(self) -> dict:
        return self.preloaded
