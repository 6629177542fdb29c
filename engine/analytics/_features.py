"""Per-run trace features (``steptrace features``): numba kernels over the steps arrays,
assembled with polars into a ``run_features`` table.

A run's **line sequence of a frame** is the ``line`` column of that frame's ``line``
steps (``event = 'line'``), in step order; ``call``/``return``/... steps are left out
because they repeat a line without a new line of code running. Frames are taken apart
(a callee's lines never join the caller's sequence), so recursion is not a loop and a
call is not a transition. Features, one row per run (every run of the store):

``transitions``
    line → next-line transitions within frames: Σ over frames of (line steps − 1).
``distinct_transitions``
    distinct ``(line, next line)`` pairs among them, over the whole run.
``loop_depth``
    the deepest loop nesting observed. A *backward jump* is a transition to a smaller
    line number; its target ``h`` is a loop header and the loop's range is ``[h, e]``
    with ``e`` the largest line that jumped back to ``h`` in that frame. ``loop_depth``
    is the largest number of a frame's loop ranges sharing one line (closed ranges;
    the maximum over frames), 0 without backward jumps. Nested ``for`` loops give 2 (the
    inner header jumps back to the outer one when it is exhausted: ranges [2, 3] and
    [3, 4] share line 3). A ``for`` loop over one item is observed (the header is
    revisited when the iterator is exhausted); a loop on one line is not (it has one
    line step); a multi-line expression evaluated out of line order (a ``return`` of
    a tuple spread over two lines steps its lines 1, 2, 1) also counts as one.
``longest_cycle``
    the longest period ``p`` of a line cycle repeated immediately: the largest ``p``
    such that some frame's line sequence has ``L[i:i+p] == L[i+p:i+2p]``; 0 if none.
    ``k`` identical consecutive iterations of an ``m``-line loop body give at least
    ``m * (k // 2)`` (a cycle may span several iterations).
``distinct_lines``
    distinct lines with a ``line`` step in the run.
``statement_lines``
    the program's statement lines (engine/corpus/_statements.py, the definition the
    tasks' question lines use too): lines on which a statement inside a function body
    starts (at any depth, nested functions and classes included; docstrings, ``global``
    and ``nonlocal`` left out: they never get a line step), plus ``except`` and ``case``
    lines. Defined by ``ast`` on the host; NULL if the host's Python cannot parse the
    program. A fast scanner (``scan_statement_lines``, checked against ``ast`` by the
    tests) computes it for plain programs and leaves anything unusual (classes,
    decorators, f-strings, semicolons, string statements, module-level blocks,
    programs whose run was ``invalid``) to ``ast``.
``coverage``
    (distinct lines executed ∩ statement lines) / statement_lines; NULL when
    ``statement_lines`` is NULL or 0.
``conditions``, ``branch_entropy``
    from ``branches`` (see ``steptrace analyse``): the number of distinct conditions
    ``(line, col)`` evaluated, and the mean over them of the Shannon entropy (bits) of
    their outcomes, ``-p log2 p - (1-p) log2 (1-p)`` with ``p`` the fraction of its
    evaluations that were true. 0 for an analysed run without conditions; NULL for a
    run without an ``analyses`` row.

The kernels are in engine/analytics/_step_kernels.py, the statement-line scanner in
_statement_scan.py; this module reads the store, assembles the table and writes it.

Steps are read set-wise, ``ORDER BY run_id, frame, step``, in slices of whole runs
(bounded memory), as numpy arrays with run offsets; each kernel is one
``prange`` over runs (no Python loop per run). Kernels are compiled with
``cache=True``: the first call in a fresh checkout compiles them (seconds, see
bench/README.md); later processes load the cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from steptrace.analytics._statement_scan import StatementLines, statement_lines
from steptrace.analytics._step_kernels import (line_coverage, longest_cycles, loop_depths,
                                               transition_counts)
from steptrace.store._arrow import arrow_array
from steptrace.store._store import StoreError, connect, first_line
from steptrace.store._tables import RUN_FEATURES
from steptrace.store._transaction import transaction

FEATURES_TABLE = RUN_FEATURES.name  # declared, with its columns, in engine/store/_tables.py
FEATURE_TYPES = {column.name: column.type for column in RUN_FEATURES.columns}
POLARS_TYPES = {"BIGINT": pl.Int64, "INTEGER": pl.Int32, "DOUBLE": pl.Float64}
DEFAULT_CHUNK_RUNS = 250_000


@dataclass
class FeatureSummary:
    db: str
    runs: int = 0
    line_steps: int = 0
    programs: int = 0
    programs_scanned: int = 0
    programs_parsed: int = 0
    runs_with_branches: int = 0
    means: dict[str, float | None] = field(default_factory=dict)
    maxima: dict[str, float | None] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            ("db", self.db), ("table", FEATURES_TABLE), ("runs", self.runs),
            ("line steps read", self.line_steps), ("programs", self.programs),
            ("  statement lines by scanner", self.programs_scanned),
            ("  statement lines by ast", self.programs_parsed),
            ("runs with branch data", self.runs_with_branches)]
        for name in FEATURE_TYPES:
            if name != "run_id":
                rows.append((f"{name} mean / max",
                             f"{_fmt(self.means.get(name))} / {_fmt(self.maxima.get(name))}"))
        rows += [(f"seconds {stage}", f"{value:.2f}") for stage, value in self.seconds.items()]
        return rows


def _fmt(value: float | None) -> str:
    return "NULL" if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


def _arrow(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pa.Table:
    """A query's result as an Arrow table (``to_arrow_table`` since DuckDB 1.4, before
    that ``fetch_arrow_table``)."""
    relation = con.sql(sql, params=params) if params else con.sql(sql)
    fetch = getattr(relation, "to_arrow_table", None) or relation.arrow
    return fetch()


def _numpy(table: pa.Table, column: str, dtype) -> np.ndarray:
    return table.column(column).to_numpy().astype(dtype, copy=False)


def _chunk_features(con: duckdb.DuckDBPyConnection, run_ids: np.ndarray, run_program: np.ndarray,
                    stmts: StatementLines) -> dict[str, np.ndarray]:
    """Step features of the runs ``run_ids`` (sorted, consecutive in the store's order)."""
    steps = _arrow(con, "SELECT run_id, frame, line FROM steps WHERE event = 'line' "
                        "AND run_id BETWEEN ? AND ? ORDER BY run_id, frame, step",
                   [int(run_ids[0]), int(run_ids[-1])])
    step_runs = _numpy(steps, "run_id", np.int64)
    frames = _numpy(steps, "frame", np.int32)
    lines = _numpy(steps, "line", np.int32)
    run_offsets = np.empty(len(run_ids) + 1, np.int64)
    run_offsets[:-1] = np.searchsorted(step_runs, run_ids, "left")
    run_offsets[-1] = len(step_runs)
    transitions, distinct_transitions = transition_counts(run_offsets, frames, lines)
    distinct, covered = line_coverage(run_offsets, lines, run_program, stmts.offsets, stmts.lines)
    return {"transitions": transitions, "distinct_transitions": distinct_transitions,
            "loop_depth": loop_depths(run_offsets, frames, lines),
            "longest_cycle": longest_cycles(run_offsets, frames, lines),
            "distinct_lines": distinct, "covered": covered, "line_steps": len(lines)}


def branch_entropy(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """``run_id, conditions, branch_entropy`` for every analysed run (0/0.0 without
    conditions). DuckDB reduces evaluations to one row per condition; polars does the
    rest."""
    per_condition = pl.from_arrow(_arrow(
        con, "SELECT run_id, avg(CASE WHEN taken THEN 1.0 ELSE 0.0 END) AS p "
             "FROM branches GROUP BY run_id, line, col"))
    p = pl.col("p")
    entropy = (pl.when((p > 0) & (p < 1))
               .then(-(p * p.log(2) + (1 - p) * (1 - p).log(2)))
               .otherwise(0.0))
    per_run = (per_condition.with_columns(h=entropy)
               .group_by("run_id")
               .agg(conditions=pl.len().cast(pl.Int32), branch_entropy=pl.col("h").mean()))
    analysed = pl.from_arrow(_arrow(con, "SELECT run_id FROM analyses"))
    return (analysed.join(per_run, on="run_id", how="left")
            .with_columns(pl.col("conditions").fill_null(0),
                          pl.col("branch_entropy").fill_null(0.0)))


def compute_features(con: duckdb.DuckDBPyConnection, summary: FeatureSummary,
                     chunk_runs: int = DEFAULT_CHUNK_RUNS) -> pl.DataFrame:
    """The ``run_features`` rows of every run in the store, as a polars frame."""
    clock = time.perf_counter()
    runs = _arrow(con, "SELECT run_id, program_id FROM runs ORDER BY run_id")
    programs = _arrow(con, "SELECT p.program_id, p.code, p.program_id IN (SELECT program_id "
                           "FROM runs WHERE status = 'invalid') AS invalid "
                           "FROM programs p ORDER BY p.program_id")
    program_ids = _numpy(programs, "program_id", np.int64)
    # a program that did not compile in the guest gets ast's verdict, not the scanner's
    stmts = statement_lines(programs.column("code").combine_chunks(),
                            _numpy(programs, "invalid", np.bool_))
    summary.programs, summary.programs_scanned, summary.programs_parsed = (
        len(program_ids), stmts.scanned, stmts.parsed)
    run_ids = _numpy(runs, "run_id", np.int64)
    run_program = np.searchsorted(program_ids, _numpy(runs, "program_id", np.int64))
    summary.seconds["statement lines"] = time.perf_counter() - clock
    clock = time.perf_counter()
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, len(run_ids), chunk_runs):
        window = slice(start, start + chunk_runs)
        part = _chunk_features(con, run_ids[window], run_program[window], stmts)
        summary.line_steps += part.pop("line_steps")
        parts.append(part)
    frame = _assemble(run_ids, run_program, stmts, parts)
    summary.seconds["steps and kernels"] = time.perf_counter() - clock
    clock = time.perf_counter()
    branches = branch_entropy(con)
    summary.runs_with_branches = branches.height
    frame = (frame.join(branches, on="run_id", how="left")
             .select([pl.col(name).cast(POLARS_TYPES[kind]) for name, kind in FEATURE_TYPES.items()]))
    summary.seconds["branch entropy"] = time.perf_counter() - clock
    return frame


def _assemble(run_ids: np.ndarray, run_program: np.ndarray, stmts: StatementLines,
              parts: list[dict[str, np.ndarray]]) -> pl.DataFrame:
    def column(name: str) -> np.ndarray:
        return (np.concatenate([part[name] for part in parts]) if parts
                else np.zeros(0, np.int64))
    sizes = np.diff(stmts.offsets)[run_program].astype(np.int32)
    known = stmts.known[run_program]
    frame = pl.DataFrame({
        "run_id": run_ids, "transitions": column("transitions"),
        "distinct_transitions": column("distinct_transitions"),
        "loop_depth": column("loop_depth"), "longest_cycle": column("longest_cycle"),
        "distinct_lines": column("distinct_lines"), "covered": column("covered"),
        "statement_lines": sizes, "known": known})
    return frame.with_columns(
        statement_lines=pl.when(pl.col("known")).then(pl.col("statement_lines")),
        coverage=pl.when(pl.col("known") & (pl.col("statement_lines") > 0))
        .then(pl.col("covered") / pl.col("statement_lines"))).drop("covered", "known")


def write_features(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame) -> None:
    """Replace ``run_features`` with ``frame`` in one transaction."""
    table = frame.to_arrow()
    with transaction(con):
        con.execute(RUN_FEATURES.ddl(replace=True))
        con.register("incoming_features", table)
        con.execute(f"INSERT INTO {FEATURES_TABLE} SELECT * FROM incoming_features")
        con.unregister("incoming_features")


def warm_up() -> float:
    """Compile (first use in a checkout) or load from numba's cache every kernel; the
    seconds it took."""
    started = time.perf_counter()
    offsets = np.array([0, 3], np.int64)
    frames = np.zeros(3, np.int32)
    lines = np.array([2, 3, 2], np.int32)
    transition_counts(offsets, frames, lines)
    loop_depths(offsets, frames, lines)
    longest_cycles(offsets, frames, lines)
    statement_lines(arrow_array(["def f(x):\n    return x\n"], pa.string()))
    line_coverage(offsets, lines, np.zeros(1, np.int64), np.array([0, 1], np.int64),
                  np.array([2], np.int32))
    return time.perf_counter() - started


def run_features(db: str | Path, chunk_runs: int = DEFAULT_CHUNK_RUNS) -> FeatureSummary:
    """Compute the features of every run in ``db`` and replace its ``run_features``."""
    if not Path(db).exists():
        raise StoreError(f"database not found: {db}")
    connect(db, read_only=True).close()  # refuses a DuckDB file that is not a store
    summary = FeatureSummary(db=str(db))
    summary.seconds["jit or cache load"] = warm_up()
    con = connect(db)
    try:
        frame = compute_features(con, summary, chunk_runs)
        clock = time.perf_counter()
        write_features(con, frame)
        summary.seconds["write"] = time.perf_counter() - clock
    except duckdb.Error as exc:
        raise StoreError(f"cannot compute features in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    summary.runs = frame.height
    for name in FEATURE_TYPES:
        if name != "run_id" and frame.height:
            summary.means[name] = frame[name].mean()
            summary.maxima[name] = frame[name].max()
    summary.seconds["total"] = sum(summary.seconds.values())
    return summary
