"""Reading the text files a user gives steptrace (corpora, tasks, candidates, records,
CRUXEval data and generations, few-shot pools, templates, SQL): one definition of how
their bytes become text, so that a file that is not UTF-8 is reported the same way
everywhere, naming the file, the line and the byte, instead of Python's bare
``'utf-8' codec can't decode byte 0xff in position 3`` that names nothing.

Lines end at ``\\n`` only (a ``\\r`` before it stays on the line): JSON text never holds a
raw line break, but it may hold U+2028 or \\x1c, at which ``str.splitlines`` would cut a
record in two. A UTF-8 byte-order mark at the start of a file is dropped.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from steptrace.errors import InputError

BOM = "\ufeff"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class NotUtf8Error(InputError):
    """A file (or one line of it) that is not UTF-8 text; the message names file and line."""


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for a message saying it is not a regular
    file (one that reads the same twice and never blocks)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "a special file")


class NotRegularFileError(OSError):
    """What ``read_regular`` raises for a file it will not read whole: ``strerror`` says
    what the file is (``a FIFO, not a regular file``) or that it is too large."""


# Open flags that make opening a FIFO return at once, and a terminal not become ours.
NO_WAIT = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def read_regular(path: str | Path, limit: int | None = None, follow: bool = True) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes. Opened
    without blocking and checked on the open descriptor (a FIFO would block the open, or
    the read, until a writer came: forever), and read no further than the limit (a
    device such as ``/dev/zero`` never ends, and a regular file may be far larger than
    what it should hold). ``follow=False``: a symbolic link is refused too (its target
    may be any file). NotRegularFileError (an OSError naming the file) for what it will
    not read, the OSError itself when it cannot."""
    def refuse(reason: str) -> NotRegularFileError:
        return NotRegularFileError(errno.EINVAL, reason, str(path))

    flags = os.O_RDONLY | NO_WAIT | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    mode = os.stat(path, follow_symlinks=follow).st_mode  # a socket cannot even be opened
    if stat.S_ISLNK(mode):
        raise refuse("a symbolic link, not a regular file")
    if not stat.S_ISREG(mode):
        raise refuse(f"{file_kind(mode)}, not a regular file")
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:  # replaced by a link since
            raise refuse("a symbolic link, not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode  # what was opened, if it was replaced meanwhile
        if not stat.S_ISREG(mode):
            raise refuse(f"{file_kind(mode)}, not a regular file")
        with open(fd, "rb", closefd=False) as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
    finally:
        os.close(fd)
    if limit is not None and len(data) > limit:
        raise refuse(f"larger than {limit:,} bytes")
    return data


def decode_line(raw: bytes, path: str | Path, number: int) -> str:
    """Line ``number`` (from 1) of ``path`` as text; NotUtf8Error naming the line and the
    byte (from 1, within the line) where decoding failed."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(f"{path}:{number}: not UTF-8 text "
                           f"({exc.reason} at byte {exc.start + 1})") from None
    return line.removeprefix(BOM) if number == 1 else line


def file_error(exc: OSError, path: str | Path, doing: str = "read") -> InputError:
    """An OSError of reading or writing a file the user named, as the InputError to raise
    for it: Python's own message where it names the file (``[Errno 2] No such file or
    directory: 'x.jsonl'``, the message these errors have always had), else ``cannot
    {doing} {path}: {reason}``."""
    if exc.filename is not None:
        return InputError(str(exc))
    return InputError(f"cannot {doing} {path}: {exc.strerror or exc}")


def current_umask() -> int:
    """The process's umask, read from /proc (Linux), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def as_created(fd: int) -> None:
    """Give a file made by ``tempfile`` (mode 0600, to be renamed into the place of a file
    the user asked for) the mode ``open()`` would have given it: 0666 less the umask, so
    an export is as readable as any other file the user writes."""
    os.fchmod(fd, 0o666 & ~current_umask())


@contextmanager
def user_file(path: str | Path, doing: str = "write") -> Iterator[None]:
    """``with user_file(out):`` around the reading or writing of one file the user named:
    an OSError in it becomes ``file_error``'s InputError. Only the file's own I/O belongs
    inside: any OSError there is taken to be about ``path``."""
    try:
        yield
    except OSError as exc:
        raise file_error(exc, path, doing) from exc


@contextmanager
def open_utf8(path: str | Path) -> Iterator[Iterator[str]]:
    """``with open_utf8(path) as lines:``, a drop-in for ``with path.open(encoding=
    "utf-8") as lines:``: the lines, each with its line break, read one at a time, and
    a bad byte reported by ``decode_line`` (file, line and byte). InputError when the
    file cannot be opened."""
    with user_file(path, "read"):
        handle = open(path, "rb")
    with handle:
        yield (decode_line(raw, path, number) for number, raw in enumerate(handle, start=1))


def utf8_lines(path: str | Path) -> Iterator[str]:
    """The lines of ``open_utf8`` for a ``for`` loop (a drop-in for
    ``path.read_text(encoding="utf-8").splitlines()``, but streamed and split at ``\\n``
    only); the file is closed when the loop ends or the iterator is dropped."""
    with open_utf8(path) as lines:
        yield from lines


def read_utf8(path: str | Path) -> str:
    """The whole of a UTF-8 file (a drop-in for ``Path.read_text(encoding="utf-8")``);
    NotUtf8Error names the line and byte of the first bad byte; InputError when the file
    cannot be read."""
    with user_file(path, "read"):
        data = Path(path).read_bytes()
    return decode_text(data, path)


def decode_text(data: bytes, path: str | Path) -> str:
    """The bytes of a whole file ``path`` as text (see ``read_utf8``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1  # the line holding the bad byte
        number = data.count(b"\n", 0, start) + 1
        raise NotUtf8Error(f"{path}:{number}: not UTF-8 text "
                           f"({exc.reason} at byte {exc.start - start + 1})") from None
    return text.removeprefix(BOM)
