"""Stored check verdicts: a sandboxed check is run once and its verdict kept in the
store's ``checks`` table, so that scoring again runs only what it has not judged yet.

A check is one guest request in mode ``run``: ``score``'s input checks (``f(predicted
input)`` compared with the task's output, engine/scoring/_inputs.py) and
``score-cruxeval``'s official checks (engine/scoring/_cruxeval.py). Its key is the
SHA-256 of everything that decides its verdict, as one JSON document:

* ``source``: ``input`` or ``cruxeval`` (the two read a result differently);
* ``request``: the guest request itself, every field (the exact program text, the entry,
  the predicted input, the expected output, the mode);
* ``guest``: the key of the guest build it runs in (steptrace.sandbox._build.cache_key:
  the guest's sources, the tools' versions, the machine, the package lock), so a changed
  tracer or runtime judges again;
* ``limits``: every sandbox limit (the time and memory limits among them).

A verdict is reused only under exactly that key: another program text, input, guest or
limit is another key and runs again. JSON with its default escaping is injective (every
string is quoted and escaped), so no answer's text can make its check's document equal
another check's: a model's answer cannot reach a verdict it was not judged for, short of
a SHA-256 collision.

A check whose status is ``crashed`` (the host or a worker failed: it may not happen again)
or ``timeout`` (wall time: a right answer may time out on a busy machine and pass on an
idle one) is not kept, so the next scoring runs it again; every other verdict is kept
(a loop the guest proves endless is ``loops``, kept). Any status but ``ok`` is a failure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from typing import Iterable

import duckdb
import pyarrow as pa

from steptrace.store._store import has_table
from steptrace.store._tables import CHECKS

SOURCES = ("input", "cruxeval")
# a host or worker failure, and a wall-time verdict: neither is the program's own
NOT_KEPT = frozenset({"crashed", "timeout"})
CHECK_TYPES = CHECKS.arrow_types()


@dataclass(frozen=True)
class CheckVerdict:
    """One check's verdict as stored: the status (``ok`` or why it failed), whether it
    passed, and a note (input checks: what a wrong input returned or raised)."""

    status: str
    passed: bool
    note: str | None = None


def check_key(source: str, request: dict, guest: str, limits) -> str:
    """The key of ``request`` run by ``source`` in the guest ``guest`` under ``limits``
    (a steptrace.sandbox._limits.Limits); see the module docstring."""
    if source not in SOURCES:
        raise ValueError(f"unknown check source {source!r}")
    document = json.dumps({"source": source, "request": request, "guest": guest,
                           "limits": {name: float(value) for name, value
                                      in dataclasses.asdict(limits).items()}},
                          sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(document.encode("ascii")).hexdigest()


def guest_key(lock=None) -> str:
    """The key of the guest build a check runs in: the standard guest's, or the one with
    ``lock``'s packages."""
    from steptrace.sandbox._build import cache_key
    return cache_key(lock)


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    """Make the ``checks`` table when the store has none (a store of schema 5 or older,
    or one never scored)."""
    con.execute(CHECKS.ddl())


def load_verdicts(con: duckdb.DuckDBPyConnection, keys: Iterable[str]
                  ) -> dict[str, CheckVerdict]:
    """The stored verdicts of ``keys`` (those judged before), by key."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    if not has_table(con, "checks"):
        return {}
    con.register("wanted_checks", pa.table({"check_key": wanted}))
    try:
        rows = con.execute("SELECT c.check_key, c.status, c.passed, c.note FROM checks c "
                           "JOIN wanted_checks w USING (check_key)").fetchall()
    finally:
        con.unregister("wanted_checks")
    return {key: CheckVerdict(status, passed, note) for key, status, passed, note in rows}


@dataclass(frozen=True)
class NewCheck:
    """A check just run, to be stored."""

    key: str
    source: str
    verdict: CheckVerdict
    guest: str
    timeout_s: float
    memory_mb: int


def store_new(con: duckdb.DuckDBPyConnection, checks: list[NewCheck]) -> int:
    """Insert the verdicts of ``checks`` (in the caller's transaction), but not those with
    status ``crashed`` or ``timeout``; a key already stored keeps its row (the same check,
    judged the same way). Returns how many rows were offered."""
    kept = {c.key: c for c in checks if c.verdict.status not in NOT_KEPT}
    ensure_table(con)
    if not kept:
        return 0
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    rows = list(kept.values())
    table = pa.table({
        "check_key": [c.key for c in rows], "source": [c.source for c in rows],
        "status": [c.verdict.status for c in rows], "passed": [c.verdict.passed for c in rows],
        "note": [c.verdict.note for c in rows], "guest": [c.guest for c in rows],
        "timeout_s": [float(c.timeout_s) for c in rows],
        "memory_mb": [int(c.memory_mb) for c in rows], "checked_at": [now] * len(rows)},
        schema=pa.schema(CHECK_TYPES))
    con.register("incoming_checks", table)
    try:
        con.execute("INSERT INTO checks SELECT * FROM incoming_checks ON CONFLICT DO NOTHING")
    finally:
        con.unregister("incoming_checks")
    return len(rows)
