"""One transaction on a store connection, the one way every writer makes one."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import duckdb


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``BEGIN``; ``COMMIT`` when the block ends; ``ROLLBACK`` when anything (an
    interrupt too) leaves it, raising the original error, not a failed rollback's (DuckDB
    has already aborted a transaction whose ``COMMIT`` failed)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # already aborted: keep the real error
        raise
