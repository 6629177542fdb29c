"""CLI helpers shared by the test modules: one-line errors, reading a store, an empty store."""

from __future__ import annotations

from pathlib import Path

import duckdb
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.store._store import connect


def invoke(*args):
    """``steptrace ARGS`` in this process (CliRunner), every argument as text."""
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args) -> str:
    """``invoke``'s stdout, once it exited 0."""
    result = invoke(*args)
    assert result.exit_code == 0, (args, result.output)
    return result.stdout


def assert_one_line_error(result, message: str | None = None, code: int = 1) -> None:
    """Exit ``code``, nothing on stdout, stderr one line 'Error: ...' (no traceback)."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    if message is not None:
        assert lines[0] == f"Error: {message}"


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def new_store(path: Path) -> Path:
    """An empty steptrace store at ``path``: every command but trace needs one to exist."""
    connect(path).close()
    return path
