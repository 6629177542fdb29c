"""Sharing the component cache between processes: leases, one build at a time, eviction,
and the build log.

Several steptrace processes use one cache directory at once (two checkouts, two users of
one account, a package guest and the standard one, parallel test runs), so nothing one
of them does may pull a build from under another. The files are grouped into *builds*:
everything named ``guest-GROUP...`` (the component, its determinism variant, their
compiled forms, sidecars and stamps), where GROUP is the build key (24 hex digits) in
the cache directory, or the SHA-256 of a foreign component (64 hex digits) in its
``foreign/`` folder (engine/sharding/_shard.py). Each build has two lock files beside
it, both taken with ``flock`` (released by the kernel when the process ends, however it
ends):

* ``guest-GROUP.lock``, the *lease*: every process that uses the build (the one that
  prepares it, each worker that loads it, a Ray actor) holds it shared for the rest of its
  life (:func:`lease`). Taking it stamps the file's mtime: the build's last use.
* ``guest-GROUP.build``, held exclusive while the build is made or replaced, so two
  processes never build the same key at once (the second waits, then finds the first's
  build: :func:`building`).

Eviction (:func:`evict`, after a build) keeps the cache under a size budget
(``STEPTRACE_CACHE_MAX_MB``, default ``DEFAULT_MAX_MB``), removing the least recently used
builds first and never the one just made. A build is removed only while both its locks
are taken exclusive without waiting: one that any process leases, or that is being
built, is skipped. An evicted build's lock files go with it; a process that was waiting
for one of them finds the file gone once it has the lock, and takes the new one
(:func:`_lock`).

The build log (``builds.jsonl``) records each build made here (its key and digest) and
each eviction: it is how a rebuild says why (:func:`rebuild_reason`), and how a shard
directory's guest is known to be one this machine built (:func:`made_here`).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from steptrace.errors import SandboxError

MAX_MB_ENV = "STEPTRACE_CACHE_MAX_MB"
DEFAULT_MAX_MB = 3072  # ~20 standard builds (a component and one compiled form: ~75 MB)
LOG = "builds.jsonl"
LOG_KEEP = 2000  # records kept when the log is trimmed (it is trimmed at twice that)
FOREIGN = "foreign"

# every file of a build: guest-GROUP[-variant or -fingerprint].(wasm|cwasm)[.sha256|.checked]
_BUILD_FILE = re.compile(r"guest-([0-9a-f]{24}|[0-9a-f]{64})(-[0-9a-z-]+)?"
                         r"\.(wasm|cwasm)(\.sha256|\.checked)?")
_LOCK_FILE = re.compile(r"guest-([0-9a-f]{24}|[0-9a-f]{64})(-[0-9a-z-]+)?\.(lock|build)")

_HELD: dict[Path, int] = {}  # lease file -> the descriptor holding it shared, this process


class CacheError(SandboxError):
    """The cache cannot do what was asked: its budget (``STEPTRACE_CACHE_MAX_MB``) is not
    a size, or a build to replace is in use by another process."""


def group_of(key: str) -> str:
    """The build a key's files belong to: ``KEY-reseeded`` (a variant) is KEY's."""
    return key.split("-", 1)[0]


def lease_file(root: Path, key: str) -> Path:
    """The lease of ``key``: of its build for a build key (or a foreign digest), of the
    variant alone for a variant key (``KEY-reseeded``)."""
    return root / f"guest-{key}.lock"


def build_lock_file(root: Path, group: str) -> Path:
    return root / f"guest-{group}.build"


def _lock(path: Path, operation: int) -> int | None:
    """A descriptor of ``path`` (created if need be) holding ``flock(operation)``; None when
    ``LOCK_NB`` is in ``operation`` and another process holds a conflicting lock. Another
    process may remove the file while this one waits for it (an eviction): the lock is
    then on a file nobody else can find, so it is taken again on the file now there."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, operation)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def lease(root: Path, key: str) -> bool:
    """Hold ``key``'s build in use for the rest of this process (once per process; see the
    module doc), so no eviction removes it; False when the lock cannot be made (a
    read-only cache, which nothing evicts from either). A variant key's own lease is held
    too (after its build's): a forced rebuild of that variant alone is refused while
    another process holds it. Waits
    only while another process removes the build (an eviction, or a forced rebuild of
    it): then the caller finds it missing and builds it."""
    held = True
    for name in dict.fromkeys((group_of(key), key)):
        path = lease_file(root, name)
        if path in _HELD:
            continue
        try:
            fd = _lock(path, fcntl.LOCK_SH)
        except OSError:
            held = False
            break
        assert fd is not None
        _HELD[path] = fd
        try:
            os.utime(fd)  # the build's last use, which eviction orders by
        except OSError:
            pass  # another user's lock file: the lease holds all the same
    return held


def release(root: Path, key: str) -> None:
    """Stop holding ``key``'s lease (a forced rebuild of it, by this process); a build
    key's lease is its variants' too."""
    for path in list(_HELD):
        if path == lease_file(root, key) or (key == group_of(key) and path.parent == root
                                             and path.name.startswith(f"guest-{key}-")):
            os.close(_HELD.pop(path))


@contextmanager
def building(root: Path, group: str) -> Iterator[None]:
    """Hold ``group``'s build lock: one process builds or replaces any of its files at a
    time, and no eviction touches it meanwhile. Best effort in a cache where the lock
    cannot be made."""
    try:
        fd = _lock(build_lock_file(root, group), fcntl.LOCK_EX)
    except OSError:
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


@contextmanager
def replacing(root: Path, key: str) -> Iterator[None]:
    """Hold ``key`` exclusive to replace its files (a forced rebuild): CacheError when
    another process uses it (its lease is held), since that process's workers would load
    the new build beside the old one. This process's own lease goes first; on leaving it
    is held again, with no moment when an eviction could remove the new build (the build
    lock is held throughout)."""
    with building(root, group_of(key)):
        release(root, key)
        try:
            fd = _lock(lease_file(root, key), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fd = -1  # a read-only cache: writing the new build fails, and says so
        try:
            if fd is None:
                raise CacheError(f"the guest build {key} is in use by another steptrace "
                                 "process (a trace, a worker): rebuild it once that has ended")
            yield
        finally:
            if fd is not None and fd >= 0:
                os.close(fd)
            lease(root, key)


# ---------------------------------------------------------------------- eviction
def max_bytes() -> int:
    """The cache's budget: ``$STEPTRACE_CACHE_MAX_MB`` MB, else ``DEFAULT_MAX_MB``."""
    text = os.environ.get(MAX_MB_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_MB << 20
    if not text.isdigit():
        raise CacheError(f"{MAX_MB_ENV} must be a whole number of MB, not {text!r}")
    return int(text) << 20


@dataclass
class CachedBuild:
    """One build's files in a cache folder, their size and when it was last used."""

    root: Path
    group: str
    files: list[Path]
    size: int
    used: float  # its lease file's mtime, else its newest file's


def cached_builds(root: Path) -> list[CachedBuild]:
    """The builds in ``root`` and its ``foreign/`` folder (with no files: only the lock
    files of a build that failed or was removed by hand)."""
    found: list[CachedBuild] = []
    for folder in (root, root / FOREIGN):
        groups: dict[str, CachedBuild] = {}
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            match = _BUILD_FILE.fullmatch(entry.name) or _LOCK_FILE.fullmatch(entry.name)
            if not match or not entry.is_file(follow_symlinks=False):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            build = groups.setdefault(match.group(1), CachedBuild(folder, match.group(1),
                                                                  [], 0, 0.0))
            if entry.name.endswith(".lock"):
                build.used = max(build.used, st.st_mtime)
            elif not entry.name.endswith(".build"):
                build.files.append(Path(entry.path))
                build.size += st.st_size
                build.used = max(build.used, st.st_mtime)
        found += groups.values()
    return found


def evict(root: Path, keep: Path, budget: int | None = None) -> list[Path]:
    """Remove least recently used builds until the cache's files fit in ``budget`` bytes
    (default :func:`max_bytes`); ``keep`` (a lease file: the build just made) stays. A build
    in use or being built is skipped (see the module doc). Returns the files removed. Best
    effort: a file that cannot be removed stays."""
    budget = max_bytes() if budget is None else budget
    builds = cached_builds(root)
    total = sum(build.size for build in builds)
    removed: list[Path] = []
    for build in sorted(builds, key=lambda b: b.used):
        if lease_file(build.root, build.group) == keep or (total <= budget and build.files):
            continue
        gone = _remove(build)
        if not gone:
            continue  # in use, being built, removed by another process, or only lock files
        removed += gone
        total -= build.size
        record(root, {"event": "evicted", "group": build.group, "foreign": build.root != root,
                      "mb": round(build.size / (1 << 20)),
                      "why": f"the cache was over its {budget >> 20:,} MB budget ({MAX_MB_ENV})"})
    return sorted(removed)


def _remove(build: CachedBuild) -> list[Path] | None:
    """Remove ``build``'s files if no process holds or builds it; None if one does."""
    try:
        building_fd = _lock(build_lock_file(build.root, build.group),
                            fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return None
    if building_fd is None:
        return None
    try:
        try:
            lease_fd = _lock(lease_file(build.root, build.group), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None
        if lease_fd is None:
            return None
        try:
            removed = []
            pattern = re.compile(rf"guest-{build.group}(-[0-9a-z-]+)?\.(wasm|cwasm)"
                                 r"(\.sha256|\.checked)?")
            for path in sorted(build.root.iterdir()):  # as they are now, under the locks
                if pattern.fullmatch(path.name):
                    try:
                        path.unlink()
                        removed.append(path)
                    except OSError:
                        pass
            # the variants' leases are held only with the build's (taken first): none now
            locks = re.compile(rf"guest-{build.group}-[0-9a-z-]+\.lock")
            for path in sorted(build.root.iterdir()):
                if locks.fullmatch(path.name):
                    path.unlink(missing_ok=True)
            for lock in (lease_file(build.root, build.group),
                         build_lock_file(build.root, build.group)):
                lock.unlink(missing_ok=True)  # while held: a waiter takes the next one
            return removed
        finally:
            os.close(lease_fd)
    except OSError:
        return None
    finally:
        os.close(building_fd)


# ---------------------------------------------------------------------- the build log
def record(root: Path, entry: dict) -> None:
    """Append ``entry`` (with the time) to the build log; trim the log to its last
    ``LOG_KEEP`` records once it holds twice that. Best effort."""
    path = root / LOG
    line = json.dumps({"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       **entry}) + "\n"
    try:
        fd = _lock(path, fcntl.LOCK_EX)
        assert fd is not None
        try:
            with open(fd, "a+", encoding="utf-8", closefd=False) as handle:
                handle.write(line)
                handle.flush()
                handle.seek(0)
                lines = handle.readlines()
                if len(lines) > 2 * LOG_KEEP:
                    handle.seek(0)
                    handle.truncate()
                    handle.writelines(lines[-LOG_KEEP:])
        finally:
            os.close(fd)
    except OSError:
        pass


def read_log(root: Path) -> list[dict]:
    """The build log's records, oldest first (unreadable lines skipped)."""
    try:
        text = (root / LOG).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            records.append(item)
    return records


def made_here(root: Path, key: str, digest: str) -> bool:
    """Whether this cache's log records a build of ``key`` with component ``digest``: the
    same bytes as a build this machine made (a foreign copy of them is then as good)."""
    return any(item.get("event") == "built" and item.get("key") == key
               and item.get("digest") == digest for item in read_log(root))


def rebuild_reason(root: Path, key: str, packages: str | None, variant: str,
                   present: bool) -> str:
    """Why build ``key`` (of the package lock digest ``packages``, None: standard) now:
    its component is there but failed its check (``present``), was evicted, was removed by
    something else, or the guest's sources or tools changed since the last build of the
    same packages, or it was never built in this cache."""
    if present:
        return "its component in the cache failed its check (a truncated or altered file)"
    group = group_of(key)
    latest_build = None
    for item in reversed(read_log(root)):
        if item.get("group") == group and item.get("foreign") is not True:
            if item.get("event") == "evicted":
                return f"it was evicted on {_day(item)}: {item.get('why', 'the cache was full')}"
            if item.get("event") == "built" and item.get("key") == key:
                return ("its files were removed from the cache (not by steptrace's "
                        f"eviction) since it was built on {_day(item)}")
        if (latest_build is None and item.get("event") == "built"
                and item.get("packages") == packages and item.get("variant", "") == variant
                and item.get("group") != group):
            latest_build = item
    if latest_build is not None:
        return (f"the guest's sources or tools changed since the last build "
                f"({latest_build.get('key')}, {_day(latest_build)})")
    return "no build of it in this cache yet"


def _day(item: dict) -> str:
    return str(item.get("at", "?"))[:10]

