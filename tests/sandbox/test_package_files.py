"""The package files a user names (``--packages LOCK``, ``build --lock``, ``build -r``) are
read only when they are regular files of a lock's size: a device that never ends
(``/dev/zero``), a FIFO that no one writes, a link to either, and a huge file are each
one line of error, at once. Each command runs in a process of its own under a time limit
and an address-space limit, so that a failure here is a failed test, not a hang or a
machine out of memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from steptrace.sandbox._packages import MAX_FILE_BYTES
from helpers.processes import HANG_GUARD_S, write_jsonl

MEMORY_CAP = 4 << 30  # bytes of address space: a read of /dev/zero would reach it in seconds


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def steptrace(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "steptrace.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=cwd,
                          preexec_fn=_capped, stdin=subprocess.DEVNULL)


@pytest.fixture
def files(tmp_path) -> dict[str, tuple[Path, str]]:
    """Each bad package file and what the error says it is."""
    fifo = tmp_path / "lock.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    big.write_bytes(b"toolz==1.0.0\n" * (MAX_FILE_BYTES // 13 + 1))
    zero_link = tmp_path / "zero-link.txt"
    zero_link.symlink_to("/dev/zero")
    fifo_link = tmp_path / "fifo-link.txt"
    fifo_link.symlink_to(fifo)
    return {"zero": (Path("/dev/zero"), "a character device, not a regular file"),
            "fifo": (fifo, "a FIFO, not a regular file"),
            "zero link": (zero_link, "a character device, not a regular file"),
            "fifo link": (fifo_link, "a FIFO, not a regular file"),
            "big": (big, f"larger than {MAX_FILE_BYTES:,} bytes")}


def assert_one_line(done: subprocess.CompletedProcess, message: str) -> None:
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"Error: {message}\n")


@pytest.mark.parametrize("kind", ["zero", "fifo", "zero link", "fifo link", "big"])
def test_trace_packages_reads_a_lock_file_only(kind, files, tmp_path):
    path, what = files[kind]
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"code": "def f(x):\n    return x\n",
                                                 "input": "1"}])
    done = steptrace("trace", corpus, "--db", tmp_path / "s.duckdb", "--packages", path,
                     "--quiet", cwd=tmp_path)
    assert_one_line(done, f"cannot read lock file {path}: {what}")
    assert not (tmp_path / "s.duckdb").exists()


@pytest.mark.parametrize("kind", ["zero", "fifo", "big"])
def test_build_lock_and_requirements_files_are_read_the_same_way(kind, files, tmp_path):
    path, what = files[kind]
    done = steptrace("build", "--lock", path, cwd=tmp_path)
    assert_one_line(done, f"cannot read lock file {path}: {what}")
    done = steptrace("build", "-r", path, "--lock", tmp_path / "out.lock", cwd=tmp_path)
    assert_one_line(done, f"cannot read requirements file {path}: {what}")
    assert not (tmp_path / "out.lock").exists()


def test_a_lock_file_that_is_not_utf8_is_one_line(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_bytes(b"toolz==1.0.0 \xff\n")
    done = steptrace("build", "--lock", lock, cwd=tmp_path)
    assert_one_line(done, f"cannot read lock file {lock}: not UTF-8 text (invalid start byte "
                          "at byte 14)")
