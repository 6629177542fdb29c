"""The job's own file system: a host directory the guest sees as ``/work`` and ``/tmp``.

WASI gives a guest only the directories it is handed (preopens): this module holds one
host directory per :class:`~steptrace.sandbox._runtime.Sandbox` (``steptrace-files-*`` in
the host's temporary directory, mode 0700) with two subdirectories, ``work`` and ``tmp``,
preopened as the guest's ``/work`` (its working directory: the guest changes into it at
every job's start, tracer/guard.py) and ``/tmp``. Nothing else of the host exists for the
guest: ``/``, ``/etc``, ``..`` above a preopen, an absolute symlink, all resolve to
nothing (wasmtime's WASI resolves every path inside the preopen it starts from, symlinks
included, and refuses what would leave it). The guest never learns the host path.

Every job starts with both directories empty (or holding the files its corpus record
gives, written here before the job: :meth:`JobFiles.write`) and ends with them emptied
again (:meth:`JobFiles.finish`). The directory is made once per sandbox, not per job: a
job that touches no file costs two ``scandir`` calls of empty directories (~10 µs) at its
end, and the preopens (~5 µs) when its instance is made. In job isolation the job's
instance, with every file it held open, is gone before the directory is emptied; in batch
isolation a job that used the file system (the guest's audit events, or files left
behind) makes the next job run in a fresh instance (wasm_sandbox/_runtime.py).

Bounds (:class:`FileBounds`, from ``Limits.max_file_bytes`` and ``Limits.max_files``):
the bytes of all files together (their sizes as ``stat`` gives them: a sparse file counts
at its length, a hard link once per name), the number of entries (files, directories and
symlinks; the two roots do not count), and directories nested at most ``MAX_DEPTH`` deep.
They are measured, never followed through a symlink, while the job runs (the sandbox's
ticker thread, every ``FILES_EVERY_TICKS`` ticks: a job over a bound is interrupted as a
runaway one is, within ~20 ms) and once more when it ends; either way the job's status is
``file_limit``. In a worker process the kernel also stops any single file at the byte
bound (``RLIMIT_FSIZE``, wasm_sandbox/_worker.py), so no write of one file can outrun the
ticker.

What the job left in its directories is recorded with its run (:meth:`JobFiles.finish`;
the store's ``files`` table): every file, directory and symlink except the corpus
record's own files left unchanged, with its size, SHA-256 and up to ``CONTENT_CAP``
bytes of its content (``RUN_CONTENT_CAP`` for all of a run's files; a symlink: its
target, never followed).

The host reads these directories while the guest may be changing them (the ticker) and
after it stopped (the job's end): every read is relative to an open directory descriptor,
with ``O_NOFOLLOW``, so no name the guest made can lead the host outside them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import tempfile
import weakref
from dataclasses import dataclass, field

from steptrace.errors import InputError, SandboxError

GUEST_WORK = "/work"  # the guest's working directory
GUEST_TMP = "/tmp"    # tempfile.gettempdir() in the guest
# The host subdirectory of each guest directory, in the order files are recorded.
ROOTS = (("work", GUEST_WORK), ("tmp", GUEST_TMP))
PREFIX = "steptrace-files-"
MAX_DEPTH = 64  # directories nested deeper than this end the job (file_limit)
CONTENT_CAP = 65_536  # bytes of a file's content recorded with its run
# bytes of content of all of a run's files: a worker holds a chunk's results until the
# chunk ends (16 runs of 64 MiB of files each would be 1 GiB); past it, only the sizes
# and digests (each file's content cut where the budget ends: ``truncated``)
RUN_CONTENT_CAP = 1 << 20
FILES_EVERY_TICKS = 1  # the ticker measures the directories every this many ticks
_READ = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# The columns of a run's recorded files (the result's ``files``; the store's table)
FILE_COLUMNS = ("path", "kind", "size", "sha256", "content", "truncated", "utf8")


@dataclass(frozen=True)
class FileBounds:
    """What a job may leave in its directories at any moment."""

    max_bytes: int
    max_entries: int


@dataclass
class _Usage:
    """What a walk found so far, and the first bound it broke (None: none)."""

    bounds: FileBounds
    bytes: int = 0
    entries: int = 0
    over: str | None = None

    def add(self, size: int) -> bool:
        """Count one entry; False once a bound is broken (the walk stops)."""
        self.entries += 1
        self.bytes += size
        if self.entries > self.bounds.max_entries:
            self.over = (f"the program made more than {self.bounds.max_entries:,} files and "
                         "directories")
        elif self.bytes > self.bounds.max_bytes:
            self.over = (f"the program's files hold more than {self.bounds.max_bytes:,} "
                         "bytes")
        return self.over is None


@dataclass
class FileRecord:
    """One entry a job left: its guest path, kind (``file``, ``dir``, ``symlink``,
    ``other``), size in bytes, SHA-256 (files), the first ``CONTENT_CAP`` bytes of its
    content (a symlink: its target), whether that was cut and whether it is UTF-8."""

    path: str
    kind: str
    size: int
    sha256: str | None = None
    content: bytes | None = None
    truncated: bool = False
    utf8: bool | None = None


@dataclass
class Finished:
    """A job's file system at its end: the bound it broke (None: none), what it left
    (empty when over a bound) and whether it left anything at all."""

    over: str | None = None
    records: list[FileRecord] = field(default_factory=list)
    touched: bool = False

    def columns(self) -> dict[str, list] | None:
        """The records as the result's ``files`` columns; None when there are none."""
        if not self.records:
            return None
        return {name: [getattr(record, name) for record in self.records]
                for name in FILE_COLUMNS}


def remove_root(root: str) -> None:
    """Remove a root made by :func:`make_root` and everything in it, however deep (best
    effort: when its sandbox is closed or collected, at exit, or when a worker that used
    it is gone)."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    try:
        _clear(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    shutil.rmtree(root, ignore_errors=True)


def make_root() -> str:
    """A new, private files root (``work`` and ``tmp`` inside), in the host's temporary
    directory."""
    root = tempfile.mkdtemp(prefix=PREFIX)
    for name, _guest in ROOTS:
        os.mkdir(os.path.join(root, name), 0o700)
    return root


class JobFiles:
    """One sandbox's job directories (see the module docstring). ``root``: a directory
    made by :func:`make_root` that someone else removes (a worker pool's, which outlives
    its workers); by default one is made here and removed with this object."""

    def __init__(self, bounds: FileBounds, root: str | None = None) -> None:
        self.bounds = bounds
        if root is None:
            root = make_root()
            self._finalizer = weakref.finalize(self, remove_root, root)
        else:
            self._finalizer = None
        self.root = root
        self.hosts = tuple(os.path.join(root, name) for name, _guest in ROOTS)
        self._fds = tuple(os.open(path, _DIR_FLAGS) for path in self.hosts)
        # the record's files: guest path -> SHA-256 (None: a directory made for them)
        self._written: dict[str, str | None] = {}

    def close(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = ()
        if self._finalizer is not None:
            self._finalizer()

    def preopen(self, config) -> None:
        """Hand the directories to a ``wasmtime.WasiConfig``."""
        for host, (_name, guest) in zip(self.hosts, ROOTS):
            config.preopen_dir(host, guest)

    # ------------------------------------------------------------------ before a job
    def write(self, files: dict[str, str]) -> None:
        """Write a corpus record's files (relative paths, checked by the corpus loader
        and again here) into ``/work`` before the job; remembered so that the job's
        record leaves them out while unchanged. InputError for a bad path."""
        self._written = {}
        for path, text in files.items():
            parts = check_path(path)
            data = text.encode("utf-8", "surrogatepass")
            fd = os.dup(self._fds[0])
            try:
                for depth, part in enumerate(parts[:-1], 1):
                    try:
                        os.mkdir(part, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                    self._written[f"{GUEST_WORK}/{'/'.join(parts[:depth])}"] = None
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = inner
                out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o600, dir_fd=fd)
                try:
                    with os.fdopen(out, "wb", closefd=False) as handle:
                        handle.write(data)
                finally:
                    os.close(out)
            except OSError as exc:
                raise InputError(f"cannot write the record's file {path!r}: "
                                 f"{exc.strerror or exc}") from None
            finally:
                os.close(fd)
            self._written[f"{GUEST_WORK}/{'/'.join(parts)}"] = hashlib.sha256(data).hexdigest()

    # ------------------------------------------------------------------ while it runs
    def over(self) -> str | None:
        """The bound the directories break now (None: none): read while the guest may be
        changing them, so a name that vanished meanwhile is skipped."""
        usage = _Usage(self.bounds)
        for fd in self._fds:
            if not _measure(fd, usage, 0):
                break
        return usage.over

    # ------------------------------------------------------------------ after it
    def finish(self) -> Finished:
        """After the job (the guest is not running): the bound it broke, or what it left
        (:class:`FileRecord`, sorted by path); then both directories are emptied."""
        written, self._written = self._written, {}
        found = Finished()
        empty = [not _has_entries(fd) for fd in self._fds]
        if all(empty) and not written:
            return found
        found.touched = True
        found.over = self.over()
        if found.over is None:
            budget = [RUN_CONTENT_CAP]
            for fd, (_name, guest), is_empty in zip(self._fds, ROOTS, empty):
                if not is_empty:
                    _collect(fd, guest, found.records, written, budget)
        for fd, is_empty in zip(self._fds, empty):
            if not is_empty:
                try:
                    _clear(fd)
                except OSError as exc:  # WASI gives a program no way to make this happen
                    raise SandboxError(f"cannot empty the jobs' directory {self.root}: "
                                       f"{exc.strerror or exc}") from None
        return found


def check_path(path: object) -> list[str]:
    """The parts of a corpus record's file path: relative, ``/``-separated, no empty,
    ``.`` or ``..`` part, no NUL, at most ``MAX_DEPTH`` parts of at most 255 bytes.
    InputError naming the problem."""
    if not isinstance(path, str) or not path:
        raise InputError(f"a file path must be a non-empty string, got {path!r}")
    if path.startswith("/"):
        raise InputError(f"file path {path!r} must be relative (files are written into "
                         f"the working directory, {GUEST_WORK})")
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InputError(f"file path {path!r} may not have an empty, '.' or '..' part")
        if "\0" in part:
            raise InputError(f"file path {path!r} holds a NUL character")
        if len(part.encode("utf-8", "surrogatepass")) > 255:
            raise InputError(f"file path {path!r} has a part longer than 255 bytes")
    if len(parts) > MAX_DEPTH:
        raise InputError(f"file path {path!r} is nested deeper than {MAX_DEPTH} levels")
    return parts


# ---------------------------------------------------------------------- walking
def _has_entries(fd: int) -> bool:
    with os.scandir(fd) as entries:
        return next(entries, None) is not None


def _measure(fd: int, usage: _Usage, depth: int) -> bool:
    """Add what is under the directory ``fd`` to ``usage``; False once a bound is
    broken. Depth-first, holding one descriptor per level (at most ``MAX_DEPTH``)."""
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return True  # removed or replaced meanwhile: the next measurement sees it
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not usage.add(info.st_size if not stat.S_ISDIR(info.st_mode) else 0):
            return False
        if stat.S_ISDIR(info.st_mode):
            if depth + 1 >= MAX_DEPTH:
                usage.over = f"the program nested directories more than {MAX_DEPTH} deep"
                return False
            try:
                inner = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                if not _measure(inner, usage, depth + 1):
                    return False
            finally:
                os.close(inner)
    return True


def _collect(fd: int, prefix: str, records: list[FileRecord],
             written: dict[str, str | None], budget: list[int]) -> None:
    """Record what is under the directory ``fd`` (guest path ``prefix``), sorted by
    path; the record's own files are left out while their content is unchanged, and the
    directories made for them; ``budget[0]``: the bytes of content still to keep
    (``RUN_CONTENT_CAP``). Only called within the bounds (``over`` found none), so depth
    and bytes are bounded."""
    with os.scandir(fd) as listing:
        entries = sorted(listing, key=lambda entry: entry.name)
    for entry in entries:
        path = f"{prefix}/{entry.name}"
        info = entry.stat(follow_symlinks=False)
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            if path not in written or written[path] is not None:  # not made for the record
                records.append(FileRecord(path, "dir", 0))
            inner = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            try:
                _collect(inner, path, records, written, budget)
            finally:
                os.close(inner)
        elif stat.S_ISLNK(mode):
            target = os.readlink(entry.name, dir_fd=fd)
            data = os.fsencode(target)
            records.append(FileRecord(path, "symlink", len(data), None, data, False,
                                      _is_utf8(data)))
        elif stat.S_ISREG(mode):
            record = _read_file(fd, entry.name, path, min(CONTENT_CAP, budget[0]))
            if record is not None and written.get(path) != record.sha256:
                records.append(record)
                budget[0] -= len(record.content)
        else:
            records.append(FileRecord(path, "other", info.st_size))


def _read_file(fd: int, name: str, path: str, cap: int) -> FileRecord | None:
    """A regular file's record: its digest over all of it, its first ``cap`` bytes.
    Opened without following a symlink and checked to be a regular file once open."""
    try:
        handle = os.open(name, _FILE_FLAGS, dir_fd=fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        digest = hashlib.sha256()
        head = bytearray()
        size = 0
        while chunk := os.read(handle, _READ):
            digest.update(chunk)
            size += len(chunk)
            if len(head) < cap:
                head += chunk[:cap - len(head)]
    finally:
        os.close(handle)
    content = bytes(head)
    truncated = size > len(content)
    return FileRecord(path, "file", size, digest.hexdigest(), content, truncated,
                      _is_utf8(content, truncated))


def _is_utf8(data: bytes, truncated: bool = False) -> bool:
    """Whether ``data`` is UTF-8 text (a cut content may end inside a character)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return truncated and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"
    return True


def _clear(top: int) -> None:
    """Remove everything inside the directory ``top`` (which stays), however deep, holding
    at most two descriptors: a directory is emptied, then left through ``..`` and removed
    from its parent. Only while the guest is not running (nothing moves meanwhile)."""
    current = os.dup(top)
    names: list[str] = []
    try:
        while True:
            descended = False
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        inner = os.open(entry.name, _DIR_FLAGS, dir_fd=current)
                        os.close(current)
                        current = inner
                        names.append(entry.name)
                        descended = True
                        break
                    try:
                        os.unlink(entry.name, dir_fd=current)
                    except FileNotFoundError:
                        pass
            if descended:
                continue
            if not names:
                return
            parent = os.open("..", _DIR_FLAGS, dir_fd=current)
            os.close(current)
            current = parent
            try:
                os.rmdir(names.pop(), dir_fd=current)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
    finally:
        os.close(current)
