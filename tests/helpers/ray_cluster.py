"""A private local Ray cluster for tests of the Ray engine, its processes found through
/proc, and none of them left behind.

The cluster's root temp dir (its sessions, sockets and logs) is the test session's own:
Ray's default, ``/tmp/ray``, is shared by every Ray on the machine (another test session,
a user's ``ray start``, whose address ``ray.init()`` would even join). Ray keeps its Unix
sockets at ``ROOT/session_<date>_<time>_<µs>_<pid>/sockets/plasma_store`` and a Unix
socket path holds at most 107 bytes, so ``ROOT`` may have at most about 40 characters:
a pytest folder such as ``/tmp/pytest-of-root/pytest-12/ray0`` (34) fits; when the given
folder is longer (a long ``--basetemp`` or ``$TMPDIR``) a short private folder under
``/tmp`` is made instead, and removed at the end.

The cluster is started by ``ray.init`` in the test process, so its processes (the raylet,
and the workers the raylet starts) inherit this process's environment at that moment:
``local_cluster(env=...)`` sets variables for the cluster only (for example a component
cache of the workers' own) and gives the test process its own values back.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from helpers.processes import kill_processes, proc_stat, wait_until_gone

UNIX_PATH_MAX = 107
# what Ray puts after its root temp dir, at the longest (a 7-digit pid, a numbered socket)
SOCKET_TAIL = len("/session_2026-11-24_21-16-16_165895_4194304/sockets/plasma_store.99")
OBJECT_STORE_BYTES = 256 << 20  # the guest's bytes (28 MB) are the largest object


def short_root(folder: Path) -> tuple[Path, bool]:
    """``folder``, or a new short folder under /tmp when Ray's socket paths under
    ``folder`` would be too long; whether it is one of ours (to remove at the end)."""
    if len(str(folder)) + SOCKET_TAIL <= UNIX_PATH_MAX:
        return folder, False
    return Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp")), True


def _processes() -> dict[int, tuple[int, int, str]]:
    """Every live process: {pid: (parent pid, start time, command line)}."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is None or stat[0] == "Z":
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        found[int(entry)] = (stat[1], stat[2], raw.replace(b"\0", b" ").decode(errors="replace").strip())
    return found


def process_tree(pid: int) -> dict[int, tuple[int, str]]:
    """``pid`` and every live process below it, {pid: (start time, command line)}: a
    driver that started a local Ray has its GCS and raylet below it, and the raylet the
    workers."""
    table = _processes()
    return {p: table[p][1:] for p in descendants({pid}, table) if p in table}


def descendants(roots: set[int], table: dict[int, tuple[int, int, str]]) -> set[int]:
    """``roots`` and every process below them in ``table``."""
    out, frontier = set(roots), set(roots)
    while frontier:
        frontier = {pid for pid, (parent, _, _) in table.items()
                    if parent in frontier and pid not in out}
        out |= frontier
    return out


@dataclass
class LocalCluster:
    temp_dir: Path
    address: str  # the GCS address: what --address and ray.init(address=...) take
    env: dict[str, str]  # what its processes were given on top of the test process's

    def processes(self) -> dict[int, tuple[int, str]]:
        """Every live process of the cluster, {pid: (start time, command line)}: those
        whose command line names its temp dir (GCS, raylet, agents, monitors) and all
        their descendants (Ray's workers, retitled ``ray::...``, and the sandbox worker
        processes those start)."""
        table = _processes()
        roots = {pid for pid, (_, _, cmd) in table.items() if str(self.temp_dir) in cmd}
        return {pid: table[pid][1:] for pid in descendants(roots, table) if pid in table}

    def raylet(self) -> int:
        table = _processes()
        pids = [pid for pid, (_, _, cmd) in table.items()
                if cmd.split(" ", 1)[0].endswith("/raylet")
                and f" --temp_dir={self.temp_dir} " in cmd + " "]
        assert len(pids) == 1, pids
        return pids[0]

    def workers(self, title: str) -> dict[int, tuple[int, str]]:
        """The raylet's worker processes whose title starts with ``title`` (Ray titles an
        actor's process ``ray::CLASS`` and ``ray::CLASS.METHOD`` while it runs one)."""
        raylet = self.raylet()
        return {pid: (start, cmd) for pid, (parent, start, cmd) in _processes().items()
                if parent == raylet and cmd.startswith(title)}

    def with_children(self, processes: dict[int, tuple[int, str]]) -> dict[int, tuple[int, str]]:
        """``processes`` and every process below them."""
        table = _processes()
        return {pid: table[pid][1:] for pid in descendants(set(processes), table)
                if pid in table}


@contextmanager
def local_cluster(folder: Path, num_cpus: int, env: dict[str, str] | None = None
                  ) -> Iterator[LocalCluster]:
    """A new local Ray cluster (``ray.init`` in this process, which is its first driver)
    rooted in ``folder`` (see the module doc), with ``env`` set for its processes. At the
    end it is shut down and every one of its processes must be gone (any left are killed
    first, then the check fails)."""
    import ray
    env = dict(env or {})
    temp_dir, ours = short_root(folder)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        context = ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                           _temp_dir=str(temp_dir), object_store_memory=OBJECT_STORE_BYTES,
                           logging_level="ERROR", log_to_driver=False)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    cluster = LocalCluster(temp_dir, context.address_info["gcs_address"], env)
    try:
        yield cluster
    finally:
        processes = cluster.processes()
        ray.shutdown()
        left = wait_until_gone(processes, bound=30)
        kill_processes(processes)
        if ours:
            shutil.rmtree(temp_dir, ignore_errors=True)
        assert left == [], f"Ray processes left after shutdown: {left}"
