"""The native backend's seccomp filters, compiled on the host with libseccomp (PyPI's
``pyseccomp``, ctypes bindings of Debian's ``libseccomp2``).

Two filters stack (the kernel applies both; the stricter answer wins):

* the **jail filter**, handed to bubblewrap (``--seccomp FD``), which loads it before it
  starts the interpreter: it holds for every process of the jail, the fork server
  included. It refuses (``EPERM``) what nothing in the jail needs and what would reach
  beyond it: ``ptrace`` and reading or writing another process's memory, mounting and
  namespaces, kernel keys, ``bpf``, ``userfaultfd``, ``perf_event_open``,
  ``personality``, io_uring, modules, reboot, clocks, and every socket (``socket``,
  ``socketpair``: the jail has no network, and the host's channel is pipes it was
  given).
* the **job filter**, which the fork server installs in each job's process before the
  program runs (native_sandbox/_forkserver.py): no new processes or threads (``clone``,
  ``clone3``, ``fork``, ``vfork``, ``execve``, ``execveat``), no signals sent
  (``kill``, ``tkill``, ``tgkill``, queued signals, pidfds), and resource limits,
  scheduling and priorities only for itself (pid argument 0).

Any other architecture's system calls (x32, i386 through ``int 0x80``) kill the process:
libseccomp's default for a foreign architecture.
"""

from __future__ import annotations

import errno
import os
import tempfile

from steptrace.errors import SandboxError

JAIL_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount",
    "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "quotactl",
    "keyctl", "add_key", "request_key", "bpf", "userfaultfd", "perf_event_open",
    "personality", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "syslog", "iopl", "ioperm", "lookup_dcookie",
    "clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "sethostname",
    "setdomainname", "migrate_pages", "move_pages", "process_madvise", "mbind",
    "socket", "socketpair",
)
JOB_DENIED = (
    "clone", "clone3", "fork", "vfork", "execve", "execveat",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "pidfd_open", "pidfd_send_signal",
)
# (name, index of the pid argument): allowed for the calling process only (pid 0)
JOB_SELF_ONLY = (("prlimit64", 0), ("sched_setaffinity", 0), ("sched_setscheduler", 0),
                 ("sched_setparam", 0), ("sched_setattr", 0), ("setpriority", 1),
                 ("ioprio_set", 1))


class FilterError(SandboxError):
    """The seccomp filters cannot be made here (no libseccomp or pyseccomp)."""


def _seccomp():
    try:
        import pyseccomp
    except (ImportError, OSError) as exc:
        raise FilterError("the native backend needs libseccomp (Debian: libseccomp2) and "
                          "its Python bindings (pip install 'steptrace[native]': pyseccomp): "
                          f"{exc}") from None
    return pyseccomp


def _compile(denied: tuple[str, ...], self_only: tuple[tuple[str, int], ...] = ()) -> bytes:
    seccomp = _seccomp()
    refuse = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in denied:
        try:
            rules.add_rule(refuse, name)
        except (ValueError, RuntimeError, OSError):
            continue  # a call this architecture does not have
    for name, argument in self_only:
        try:
            rules.add_rule(refuse, name, seccomp.Arg(argument, seccomp.NE, 0))
        except (ValueError, RuntimeError, OSError):
            continue
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        program = handle.read()
    if not program or len(program) % 8:
        raise FilterError("libseccomp made no filter")
    return program


_MADE: dict[str, bytes] = {}


def jail_filter() -> bytes:
    """The jail filter's BPF program (see the module doc)."""
    if "jail" not in _MADE:
        _MADE["jail"] = _compile(JAIL_DENIED)
    return _MADE["jail"]


def job_filter() -> bytes:
    """The job filter's BPF program (see the module doc)."""
    if "job" not in _MADE:
        _MADE["job"] = _compile(JOB_DENIED, JOB_SELF_ONLY)
    return _MADE["job"]


def filter_fd(program: bytes) -> int:
    """A readable descriptor holding ``program`` (bubblewrap reads its ``--seccomp FD``
    to the end): an unlinked temporary file, so no pipe can fill."""
    fd, path = tempfile.mkstemp(prefix="steptrace-seccomp-")
    os.unlink(path)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
