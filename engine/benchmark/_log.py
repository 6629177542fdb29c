"""The append-only JSONL logs of the commands that ask a model (``generate``, ``harvest``,
``repair``): read back for resuming, and cleaned of a line a crash cut off.

Each log is written a batch of lines at a time, each line one JSON object ending in a
newline. A crash can leave only the last line unterminated (cut anywhere, even inside a
UTF-8 character): reading skips it, and :func:`drop_partial_line` removes it before new
lines are appended, so that the next line starts clean. Any other line that is not what
the log holds is an error naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

from steptrace.corpus._text import NotUtf8Error, decode_line, user_file
from steptrace.errors import InputError


def log_records(path: Path, valid: Callable[[object], bool], error: type[InputError],
                what: str) -> Iterator[dict]:
    """The records of the log at ``path`` in order (none if it does not exist). A record
    that is not JSON, or for which ``valid`` is false, raises ``error`` ("PATH:LINE: not
    a WHAT line"), unless it is the unterminated last line."""
    if not path.exists():
        return
    with user_file(path, "read"):
        lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, start=1):
        last = number == len(lines)  # unterminated: maybe cut by a crash, even mid-character
        try:
            line = decode_line(raw, path, number)
        except NotUtf8Error:
            if last:
                continue
            raise
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if last:
                continue  # the unterminated tail of an interrupted write
            raise error(f"{path}:{number}: not a {what} line") from None
        if not valid(record):
            raise error(f"{path}:{number}: not a {what} line")
        yield record


def drop_partial_line(path: Path) -> None:
    """A crash mid-write leaves a line with no newline: cut it off (what it held was never
    counted as logged)."""
    if not path.exists():
        return
    with user_file(path):
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end != len(data):
            with path.open("r+b") as log:
                log.truncate(end)
