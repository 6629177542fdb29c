"""Run and program ids in corpus order: the one rule ``trace --db`` and ``import`` give
ids by (docs/guides/runs.md, "Run ids").

A run's id must not depend on which worker ran it or when it finished: two traces of a
corpus (any ``--workers``, either isolation) must be the same tables, and ``show 1`` must
be the same program in every store of the corpus. So ids are handed out before any job
runs, from the corpus order, as a shard directory's plan does (engine/sharding/_plan.py):
the corpus's jobs, each key once (its first place), are places 1..n and job ``i`` gets run
id ``base + i``; its programs, in the order their first job comes, get ``base' + j``.

``base`` is the store's highest id (0 for a new store): a second corpus follows the ids
already there. A resumed trace (some of the corpus's jobs stored by an earlier trace that
was interrupted) finds the ``base`` that trace used from the stored runs: when every
stored job of the corpus sits at ``base + i`` for one ``base``, and no other run holds an
id of the block ``base + 1 .. base + n``, the missing jobs get their places in that block,
and the store ends as an uninterrupted trace would have made it. Otherwise (the jobs were
stored by a trace of another corpus, or another corpus's runs came into the block
meanwhile) the stored jobs keep their ids and the missing ones follow the highest id, in
corpus order. A job traced again (``--force``) keeps its id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import duckdb
import pyarrow as pa

from steptrace.store._arrow import arrow_array


@dataclass
class CorpusIds:
    """The ids of a corpus's jobs and programs: job key -> run id, program key -> program
    id, for every job and program of the corpus (those stored keep theirs)."""

    runs: dict[str, int] = field(default_factory=dict)
    programs: dict[str, int] = field(default_factory=dict)
    stored: set[str] = field(default_factory=set)  # job keys the store holds already


class CorpusOrder:
    """A corpus's job keys and program keys in corpus order, each once (a key's first
    place), collected a job at a time. Its dicts become the ids' (:func:`corpus_ids`
    fills in their values): each key is held once, with its id."""

    def __init__(self) -> None:
        self.jobs: dict[str, int | None] = {}      # job key (insertion order is the order)
        self.programs: dict[str, int | None] = {}  # program key, in the order of its first job

    def add(self, job_key: str, program_key: str) -> bool:
        """Record a job; False when its key came before (a duplicate, not traced twice)."""
        if job_key in self.jobs:
            return False
        self.jobs[job_key] = None
        self.programs.setdefault(program_key, None)
        return True

    def __len__(self) -> int:
        return len(self.jobs)


def block_base(offsets: set[int], stored: int, count: int, top: int,
               held_between: Callable[[int, int], int]) -> int | None:
    """The ``base`` of a corpus's block of ids (module doc), or None when the stored jobs
    do not sit in one free block (then they keep their ids and the others follow ``top``).
    ``offsets``: the distinct ``id - place`` of the ``stored`` jobs of the ``count``;
    ``held_between(low, high)``: how many ids of ``low .. high`` the store holds."""
    if not stored:
        return top
    if len(offsets) != 1:
        return None
    base = next(iter(offsets))
    if base < 0 or held_between(base + 1, base + count) != stored:
        return None
    return base


def place(ids: dict[str, int | None], stored: dict[str, int], top: int,
          held_between: Callable[[int, int], int]) -> dict[str, int]:
    """Give the keys of ``ids`` (corpus order, each once) their ids by the module's rule,
    in place; returns ``ids``. ``stored``: the ids the store gives some of them; ``top``:
    the store's highest id; ``held_between(low, high)``: how many ids of ``low .. high``
    the store holds."""
    offsets = {stored[key] - i for i, key in enumerate(ids, start=1) if key in stored}
    base = block_base(offsets, len(stored), len(ids), top, held_between)
    following = top
    for i, key in enumerate(ids, start=1):
        if base is not None:
            ids[key] = base + i
        elif key in stored:
            ids[key] = stored[key]
        else:
            following += 1
            ids[key] = following
    return ids


def held_between(con: duckdb.DuckDBPyConnection, table: str,
                 id_column: str) -> Callable[[int, int], int]:
    """``held_between`` for ``place`` over ``table``'s ``id_column`` in ``con``."""
    def count(low: int, high: int) -> int:
        return con.execute(f"SELECT count(*) FROM {table} WHERE {id_column} BETWEEN ? AND ?",
                           [low, high]).fetchall()[0][0]
    return count


def top_id(con: duckdb.DuckDBPyConnection, table: str, id_column: str) -> int:
    """The highest id of ``table`` (0 when it is empty)."""
    return con.execute(f"SELECT coalesce(max({id_column}), 0) FROM {table}").fetchall()[0][0]


def corpus_ids(con: duckdb.DuckDBPyConnection, order: CorpusOrder) -> CorpusIds:
    """The ids of ``order``'s jobs and programs in the store ``con`` (module doc), in
    ``order``'s own dicts."""
    found = CorpusIds(order.jobs, order.programs)
    for table, key_column, id_column, ids in (
            ("runs", "run_key", "run_id", order.jobs),
            ("programs", "program_key", "program_id", order.programs)):
        top = top_id(con, table, id_column)
        stored = stored_ids(con, table, key_column, id_column, ids) if top else {}
        place(ids, stored, top, held_between(con, table, id_column))
        if table == "runs":
            found.stored = set(stored)
    return found


def stored_ids(con: duckdb.DuckDBPyConnection, table: str, key_column: str,
               id_column: str, keys: Iterable[str]) -> dict[str, int]:
    """The stored ids of ``keys`` (one query: the keys go in as an Arrow table)."""
    wanted = pa.table({"wanted_key": arrow_array(list(keys), pa.string())})
    con.register("wanted_keys", wanted)
    try:
        return dict(con.execute(f"SELECT t.{key_column}, t.{id_column} FROM {table} t "
                                f"JOIN wanted_keys w ON t.{key_column} = w.wanted_key"
                                ).fetchall())
    finally:
        con.unregister("wanted_keys")
