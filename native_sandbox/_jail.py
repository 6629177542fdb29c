"""The jail a native fork server runs in: bubblewrap's command line, started and ended.

What the jail is (bubblewrap, Debian's ``bubblewrap``; ``make test`` installs it):

* namespaces of its own (``--unshare-all``: user, pid, network, IPC, UTS, cgroup): no
  network at all, not even loopback (a new network namespace has its ``lo`` down); the
  fork server is process 1 of its pid namespace (``--as-pid-1``), which shows no process
  of the host;
* a file system of read-only views of only: the interpreter's installation (its prefix,
  with its own ``site-packages`` hidden by an empty directory), the system's shared
  libraries (``/usr/lib``, ``/lib*``, ``/etc/ld.so.cache``), the runner (a copy of the
  tracer and the fork server, ``/steptrace/runner``) and the lock's installed packages
  (``/steptrace/packages``); a minimal ``/dev`` (null, zero, full, random, urandom, tty);
  no ``/proc``, no ``/sys``, no home; and one writable place, a tmpfs of ``scratch_mb``
  at ``/tmp``, which the fork server empties after every job (each job works in a fresh
  ``/tmp/job``);
* an empty environment (``--clearenv``) but for the few settings steptrace makes:
  ``PYTHONHASHSEED=0`` (every worker the same string-hash order, as the WASI guest's one
  snapshot has; the determinism check's variant jail another, ``VARIANT_HASH_SEED``), and
  one thread for the numeric libraries (OpenBLAS, OpenMP, MKL);
* no capabilities (``--cap-drop ALL``), a new session (``--new-session``: no terminal to
  inject input into), killed with its parent (``--die-with-parent``);
* the jail seccomp filter (native_sandbox/_seccomp.py) for every process in it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from steptrace.errors import SandboxError
from steptrace.native_sandbox._seccomp import filter_fd, jail_filter

RUNNER_MOUNT = "/steptrace/runner"
PACKAGES_MOUNT = "/steptrace/packages"
SCRATCH = "/tmp"
FORKSERVER = "steptrace_forkserver"
# the numeric libraries start no threads of their own (the job filter refuses them)
ENVIRONMENT = {"PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1", "LANG": "C.UTF-8"}
# The determinism check's variant (steptrace.tracing._analysis): another string-hash
# secret, whose low bits of hash('a') and hash('b') differ from seed 0's (CPython's
# siphash13, 3.11 on), so even a set of single characters iterates in another order.
VARIANT_HASH_SEED = "2"
SYSTEM_LIBRARIES = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32")
SYSTEM_LINKS = ("/lib", "/lib64", "/lib32", "/libx32")


class JailError(SandboxError):
    """The jail cannot be started here (no bubblewrap, or it fails: the message says)."""


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise JailError("the native backend needs bubblewrap ('bwrap'; Debian: apt-get "
                        "install bubblewrap)")
    return found


def command(executable: str, prefix: str, hidden: tuple[str, ...], runner: str,
            packages: str | None, scratch_bytes: int, seccomp_fd: int, info_fd: int,
            channel: tuple[int, int], hash_seed: str = "0") -> list[str]:
    """bubblewrap's command line for a fork server (see the module doc)."""
    args = [bwrap(), "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--clearenv"]
    for name, value in {**ENVIRONMENT, "PYTHONHASHSEED": hash_seed}.items():
        args += ["--setenv", name, value]
    for path in SYSTEM_LIBRARIES:
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--ro-bind", path, path]
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if os.path.exists("/etc/ld.so.cache"):
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    if prefix not in SYSTEM_LIBRARIES:
        args += ["--ro-bind", prefix, prefix]
    empty = os.path.join(runner, "empty")
    for path in hidden:  # the interpreter's own installed packages: not the lock's
        if os.path.isdir(path):
            args += ["--ro-bind", empty, path]
    args += ["--ro-bind", runner, RUNNER_MOUNT]
    if packages is not None:
        args += ["--ro-bind", packages, PACKAGES_MOUNT]
    args += ["--dev", "/dev", "--size", str(scratch_bytes), "--tmpfs", SCRATCH,
             "--remount-ro", "/", "--chdir", SCRATCH,
             "--seccomp", str(seccomp_fd), "--info-fd", str(info_fd)]
    path = [RUNNER_MOUNT] + ([PACKAGES_MOUNT] if packages is not None else [])
    boot = (f"__import__('sys').path[:0] = {path!r}; "
            f"__import__({FORKSERVER!r}).main({channel[0]}, {channel[1]})")
    return args + ["--", executable, "-S", "-s", "-B", "-P", "-c", boot]


@dataclass
class Jail:
    """A started fork server: its bubblewrap process, the pipes to it, its host pid."""

    process: subprocess.Popen
    requests: int       # write end (host -> fork server)
    replies: int        # read end (fork server -> host)
    pid: int | None     # the fork server's pid on the host (bubblewrap's --info-fd)
    errors: object      # bubblewrap's stderr (a temporary file)

    def error_text(self) -> str:
        try:
            self.errors.seek(0)
            return self.errors.read(4000).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        """End the jail (every process in it: killing bubblewrap kills the fork server,
        process 1 of its namespace, and with it the rest)."""
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                self.process.kill()
        self.process.wait()
        self.errors.close()


def start(executable: str, prefix: str, hidden: tuple[str, ...], runner: str,
          packages: str | None, scratch_bytes: int, hash_seed: str = "0") -> Jail:
    """Start a fork server in a new jail (its interpreter's ``PYTHONHASHSEED``:
    ``hash_seed``)."""
    to_server_read, to_server_write = os.pipe()
    from_server_read, from_server_write = os.pipe()
    info_read, info_write = os.pipe()
    seccomp_fd = filter_fd(jail_filter())
    errors = tempfile.TemporaryFile(prefix="steptrace-jail-")
    inherited = (to_server_read, from_server_write, info_write, seccomp_fd)
    try:
        process = subprocess.Popen(
            command(executable, prefix, hidden, runner, packages, scratch_bytes, seccomp_fd,
                    info_write, (to_server_read, from_server_write), hash_seed),
            pass_fds=inherited, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=errors, env={"PATH": os.defpath}, start_new_session=True)
    except OSError as exc:
        errors.close()
        for fd in (*inherited, to_server_write, from_server_read, info_read):
            os.close(fd)
        raise JailError(f"cannot start bubblewrap: {exc.strerror or exc}") from exc
    for fd in inherited:
        os.close(fd)
    pid = None
    with os.fdopen(info_read, "rb") as info:
        text = info.read(4096)
    try:
        pid = int(json.loads(text)["child-pid"])
    except (ValueError, KeyError, TypeError):
        pid = None
    return Jail(process, to_server_write, from_server_read, pid, errors)


def address_space(pid: int | None) -> int | None:
    """Bytes of address space the process ``pid`` maps now (``/proc/PID/statm``); None
    when it cannot be read."""
    if pid is None:
        return None
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")
