"""A shard directory's finished shards checked before anything reads them as tables.

A shard directory may come from anyone, and its Parquet files are read through views
(``_store.py``) that DuckDB binds to the first file it finds and casts every other file
to: a column of another type would reach the commands as values of that type, or as a
conversion error in the middle of one, and a column that may hold NULL where the table
says it never does, as a None no command expects. So before a directory's tables are
read, each finished shard's files are checked (:func:`check_shard_files`): the shard's
folder and its files are the directory's own (no symbolic link, regular files), and each
table file's columns, read from its footer, are the table's declared columns with their
types and nullability (an extra column is left out by the views; a ``programs`` file
from before ``meta`` existed reads it as NULL).

Reading a footer costs ~0.2 ms a file, 2 ms a shard: 3 minutes for the 100,000 shards
of 100,000,000 runs. So a shard found good is remembered, by the status of its files
(inode, size, modification and change times: no write, rename over or ``utime`` keeps
the change time), in this machine's cache (``CHECKED/<digest of the directory's
path>``): a later command, in any process, checks it again only when one of its files
changed. A shard whose files changed in the last ``STAMP_SETTLE_NS`` is not remembered
(a same-size rewrite within one tick of a coarse file-system clock could keep its
times: see wasm_sandbox/_build.py). The record lives in this machine's cache, not in
the directory: whoever wrote the directory cannot write it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

from steptrace.sharding._plan import ShardError, own_path, shard_name

CHECKED = "checked-shards"  # the cache's folder of shards found good, a file a directory
DONE = "done.json"
# columns a shard written by an earlier steptrace may lack (read as NULL by the views):
# programs.meta (schema 6), runs.settrace_line_steps, runs.backend, runs.python and
# programs.environment (schema 7; backend read as 'wasi'). A table it lacks
# (settrace_lines, files: schema 7) is read as empty.
OPTIONAL_COLUMNS = frozenset({("programs", "meta"), ("runs", "settrace_line_steps"),
                              ("runs", "backend"), ("runs", "python"),
                              ("programs", "environment")})

_MEMO: dict[Path, dict[str, str]] = {}  # directory -> {shard: its files' status} found good


def check_shard_files(directory: Path, shard: int | None = None) -> None:
    """Refuse (ShardError, one line naming the file) a finished shard of ``directory`` (or
    only shard ``shard``) holding what ``run_shard`` never writes: see the module doc."""
    import pyarrow.parquet as pq
    from steptrace.sharding._shard import SHARD_TABLES
    shards = own_path(directory, "shards")
    try:
        entries = sorted((e for e in os.scandir(shards)
                          if shard is None or e.name == shard_name(shard)),
                         key=lambda e: e.name)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ShardError(f"cannot read {shards}: {exc.strerror or exc}") from exc
    expected = {f"{t.name}.parquet": t for t in SHARD_TABLES}
    memo = _load(directory)
    found: dict[str, str] = {}
    now = time.time_ns()
    for entry in entries:
        folder = own_path(directory, "shards", entry.name)
        if not entry.is_dir(follow_symlinks=False):
            raise ShardError(f"{folder} is not a shard's folder")
        status, newest = _status(folder, expected)
        if memo.get(entry.name) != status:
            for name, table in expected.items():
                if (folder / name).exists():
                    _check_schema(folder / name, table, pq)
        if now - newest >= _settle_ns():
            found[entry.name] = status
    if shard is not None:
        memo.update(found)
    elif found != memo:
        memo.clear()
        memo.update(found)
        _save(directory, memo)


def _status(folder: Path, expected: dict) -> tuple[str, int]:
    """The status of the shard files in ``folder`` as one token, and their newest change
    time (ns); ShardError for a link or a file that is not a regular file."""
    parts, newest = [], 0
    with os.scandir(folder) as entries:
        files = {e.name: e for e in entries if e.name == DONE or e.name in expected}
    for name in sorted(files):
        entry = files[name]
        path = folder / name
        if entry.is_symlink():
            raise ShardError(f"{path} is a symbolic link: a shard directory's files must be "
                             "its own (a link may point at any file on this machine)")
        st = entry.stat(follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise ShardError(f"{path} is not a regular file")
        parts.append(f"{name}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")
        newest = max(newest, st.st_ctime_ns)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32], newest


def _check_schema(path: Path, table, pq) -> None:
    """ShardError unless the Parquet file ``path`` has ``table``'s columns."""
    import pyarrow as pa
    from steptrace.store._store import first_line
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(f"{path} is not a Parquet file this steptrace wrote "
                         f"({first_line(exc)})") from exc
    have = {field.name: field for field in schema}
    for want in table.arrow_schema():
        field = have.get(want.name)
        if field is None:
            if (table.name, want.name) in OPTIONAL_COLUMNS:
                continue
            raise ShardError(f"{path} has no column {want.name} ({want.type}): not a shard "
                             "file this steptrace reads")
        if field.type != want.type or (field.nullable and not want.nullable):
            raise ShardError(
                f"{path}: column {want.name} is {field.type}"
                f"{' (nullable)' if field.nullable else ''}, not {want.type}"
                f"{'' if want.nullable else ' (not null)'}: not a shard file this steptrace "
                "reads")


def _settle_ns() -> int:
    from steptrace.sandbox._build import STAMP_SETTLE_NS
    return STAMP_SETTLE_NS


def _memo_path(directory: Path) -> Path:
    from steptrace.sandbox._build import cache_dir
    name = hashlib.sha256(str(directory).encode()).hexdigest()[:24]
    return cache_dir() / CHECKED / name


def _load(directory: Path) -> dict[str, str]:
    """The shards of ``directory`` found good (by this process, else as the cache
    records them)."""
    memo = _MEMO.get(directory)
    if memo is None:
        memo = _MEMO[directory] = {}
        try:
            lines = _memo_path(directory).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        if lines and lines[0] == str(directory):  # the path it is for, against a collision
            for line in lines[1:]:
                name, _, status = line.partition(" ")
                memo[name] = status
    return memo


def _save(directory: Path, memo: dict[str, str]) -> None:
    """Record ``memo`` in the cache (atomically); best effort: a read-only cache only
    means checking again."""
    from steptrace.sandbox._build import _write_atomic
    path = _memo_path(directory)
    text = "\n".join([str(directory), *(f"{k} {v}" for k, v in sorted(memo.items()))]) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, text.encode())
    except OSError:
        pass
