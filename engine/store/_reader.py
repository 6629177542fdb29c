"""A store opened from Python (``steptrace.open_store``): its tables as polars DataFrames
and its runs as ``Run`` records.

Every read opens the file read-only for as long as it takes and closes it again. DuckDB
lets one process open a file for writing or any number of processes for reading only,
and one process cannot hold it both ways: a ``Store`` kept open in a notebook while
``steptrace.trace``, ``predict`` or ``score`` write to the same file (in this process or
in another, e.g. the CLI) must not hold a connection between reads, or every writer
would be locked out until it is closed. The library's functions take a ``Store`` wherever
they take a path.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import duckdb

from steptrace.errors import StoreError
from steptrace.store._runs import Run
from steptrace.store._store import (STATE_COLUMNS, STEP_COLUMNS, check_database_file, connect,
                                    first_line, has_table, shape_columns)
from steptrace.store._tables import ATTRIBUTES, GLOBAL_STATES, OBJECTS, SETTRACE_LINES

if TYPE_CHECKING:
    import polars as pl

# The states columns a Run record holds; ``object_id``, added in schema 4, is read as NULL
# from a version 3 store opened read-only (it has no such column).
_STATE_FIELDS = STATE_COLUMNS[1:6]
# The detail tables a Run record holds besides steps and states: the object state (schema
# 4) and the settrace view's own line events (schema 7): (table, the columns read, the
# order they are read in). A store of an older version opened read-only lacks them.
_OBJECT_TABLES = (("objects", OBJECTS.column_names[1:], "object_id"),
                  ("attributes", ATTRIBUTES.column_names[1:], "step, rowid"),
                  ("global_states", GLOBAL_STATES.column_names[1:], "step, rowid"),
                  ("settrace_lines", SETTRACE_LINES.column_names[1:], "step, rowid"))

# The tables later commands add, and the command (library function) that makes each.
MADE_BY = {"tasks": "make_tasks (steptrace tasks)", "predictions": "predict (steptrace predict)",
           "scores": "score (steptrace score)", "experiments": "predict (steptrace predict)",
           "analyses": "analyse (steptrace analyse)", "run_features": "steptrace features"}


class Store:
    """A steptrace store (a DuckDB file) for reading from Python; see the module
    docstring. ``str(store)`` and ``os.fspath(store)`` are its path, so it goes wherever
    a store's path does. A context manager: ``with open_store(path) as store:``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        from steptrace.sharding._plan import is_shard_directory
        if not is_shard_directory(self.path):  # a shard directory reads as a store too
            check_database_file(self.path)  # a text file or another directory is refused now
        self._closed = False

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Refuse further reads (no connection is held between them: see the module
        docstring)."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}{', closed' if self._closed else ''})"

    @contextmanager
    def _reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection for one read; DuckDB errors as one StoreError line."""
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        con = connect(self.path, read_only=True)
        try:
            yield con
        except duckdb.Error as exc:
            raise StoreError(f"query failed on {self.path}: {first_line(exc)}") from exc
        finally:
            con.close()

    # ------------------------------------------------------------------ any query
    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None
            ) -> "pl.DataFrame":
        """Run one SQL statement read-only and return its result as a polars DataFrame.

        query: the SQL text; ``?`` or ``$name`` placeholders take ``params``.
        params: a list of values for ``?`` placeholders, or a dict for ``$name`` ones.
        StoreError (one line) for a statement DuckDB refuses, or one that writes."""
        with self._reading() as con:
            return _polars(con, query, params)

    def _table(self, table: str, where: Mapping[str, Any], order: str) -> "pl.DataFrame":
        """Rows of ``table`` whose columns equal the non-None values of ``where``."""
        with self._reading() as con:
            if not has_table(con, table):
                raise StoreError(f"{self.path} has no {table} table: run "
                                 f"{MADE_BY.get(table, 'the command that makes it')} first")
            wanted = {column: value for column, value in where.items() if value is not None}
            condition = " AND ".join(f"{column} = ${column}" for column in wanted) or "TRUE"
            return _polars(con, f"SELECT * FROM {table} WHERE {condition} ORDER BY {order}",
                           wanted)

    # ------------------------------------------------------------------ runs
    def runs(self, status: str | None = None, sample_id: str | None = None) -> "pl.DataFrame":
        """The ``runs`` table (one row per traced job), by run id.

        status: only runs of this status (ok, exception, timeout, ...).
        sample_id: only the runs of this sample (one per input)."""
        return self._table("runs", {"status": status, "sample_id": sample_id}, "run_id")

    def programs(self) -> "pl.DataFrame":
        """The ``programs`` table: each program's source, sample id, code and entry."""
        return self._table("programs", {}, "program_id")

    def run(self, run_id: int) -> Run:
        """Run ``run_id`` read back as a ``Run`` record (its program, outcome, steps,
        states and object state): equal to the ``steptrace.trace_one`` of the same job.
        StoreError when there is no such run."""
        with self._reading() as con:
            cursor = con.execute(f"SELECT r.*, p.code, p.entry, {shape_columns(con)} FROM runs r "
                                 "JOIN programs p USING (program_id) WHERE r.run_id = ?", [run_id])
            row = cursor.fetchone()
            if row is None:
                raise StoreError(f"no run with run_id {run_id} in {self.path}")
            run = dict(zip([d[0] for d in cursor.description], row))
            steps = _dicts(con.execute(f"SELECT {', '.join(STEP_COLUMNS[1:])} FROM steps "
                                       "WHERE run_id = ? ORDER BY step", [run_id]))
            states = _dicts(con.execute(_states_query(con), [run_id]))
            details = {}
            for table, columns, order in _OBJECT_TABLES:
                details[table] = [] if not has_table(con, table) else _dicts(con.execute(
                    f"SELECT {', '.join(columns)} FROM {table} WHERE run_id = ? "
                    f"ORDER BY {order}", [run_id]))
        return Run.from_rows(run, run.pop("code"), run.pop("entry"), steps, states,
                             objects=details["objects"], attributes=details["attributes"],
                             globals=details["global_states"],
                             settrace_lines=details["settrace_lines"])

    def steps(self, run_id: int) -> "pl.DataFrame":
        """The steps of run ``run_id`` in order: step, event, func, line, depth, frame
        (``store.run(run_id).steps_frame()``, read without the rest of the run)."""
        with self._reading() as con:
            return _polars(con, f"SELECT {', '.join(STEP_COLUMNS[1:])} FROM steps "
                           "WHERE run_id = ? ORDER BY step", [run_id])

    def states(self, run_id: int) -> "pl.DataFrame":
        """The state changes of run ``run_id`` in order: step, var, value, type,
        truncated, object_id (``store.run(run_id).states_frame()``)."""
        with self._reading() as con:
            return _polars(con, _states_query(con), [run_id])

    def status_counts(self) -> dict[str, int]:
        """How many runs the store holds of each status."""
        with self._reading() as con:
            return dict(con.execute("SELECT status, count(*) FROM runs GROUP BY status "
                                    "ORDER BY status").fetchall())

    # ------------------------------------------------------------------ what is made from runs
    def tasks(self, kind: str | None = None) -> "pl.DataFrame":
        """The ``tasks`` table (``steptrace.make_tasks``), by run and task id.

        kind: only tasks of this kind (output, state, next_line, ...)."""
        return self._table("tasks", {"kind": kind}, "run_id, task_id")

    def predictions(self, model: str | None = None, label: str | None = None) -> "pl.DataFrame":
        """The ``predictions`` table (``steptrace.predict``).

        model, label: only the predictions of this model, of this experiment label."""
        return self._table("predictions", {"model": model, "label": label},
                           "model, label, task_id, sample_index")

    def scores(self, model: str | None = None, label: str | None = None) -> "pl.DataFrame":
        """The ``scores`` table (``steptrace.score``): one verdict per prediction.

        model, label: only the verdicts of this model, of this experiment label."""
        return self._table("scores", {"model": model, "label": label},
                           "model, label, task_id, sample_index")

    def experiments(self) -> "pl.DataFrame":
        """The ``experiments`` table: each (model, label)'s settings."""
        return self._table("experiments", {}, "model, label")


def _polars(con: duckdb.DuckDBPyConnection, query: str,
            params: Sequence[Any] | Mapping[str, Any] | None) -> "pl.DataFrame":
    """The result of ``query`` as a polars DataFrame (an empty one for a statement that
    returns no rows, such as ``SET``)."""
    relation = con.sql(query, params=params or None)
    if relation is None:
        import polars as pl
        return pl.DataFrame()
    return relation.pl()


def _states_query(con: duckdb.DuckDBPyConnection) -> str:
    """The states of one run (``?``) in their recorded order, with ``object_id`` (INTEGER
    NULL in a version 3 store, read-only, which has no such column)."""
    has_object_id = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'main' "
        "AND table_name = 'states' AND column_name = 'object_id'").fetchall()[0][0]
    object_id = "object_id" if has_object_id else "CAST(NULL AS INTEGER) AS object_id"
    return (f"SELECT {', '.join(_STATE_FIELDS)}, {object_id} FROM states "
            "WHERE run_id = ? ORDER BY step, rowid")


def _dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def open_store(path: str | os.PathLike) -> Store:
    """Open the store at ``path`` for reading from Python; see ``Store``.

    path: the DuckDB file. It need not exist yet (``steptrace.trace`` into the returned
    store creates it); a file that is not a DuckDB database is refused now (StoreError).
    Nothing is held open: each read opens the file read-only and closes it."""
    return Store(path)
