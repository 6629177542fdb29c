"""Prediction tasks with exact answers, generated from stored traces (README, "Tasks").

Every task asks one question about one finished run (``ok`` or ``exception``): its
return value or input, a variable's value after a line, the next line, whether and how
often a line runs, a condition's outcome, the number of line steps, the whole line trace
or the exception. The answer is read from the trace (steps, state deltas, the
``branches`` table), never from running the program again.

All runs are loaded in a few bulk queries and processed in memory, so generating every
kind for a thousand runs takes seconds. Question selection is deterministic: each (run,
kind) gets its own ``random.Random(f"{seed}:{run_key}:{kind}")``, so adding runs to a
store does not change the questions of the others. ``task_id`` hashes the run key, the
kind and the question, so re-running gives the same ids and the ``tasks`` table keeps one
row per task.

The kinds themselves (how each makes its questions, its templates' placeholders, its
judge) are in engine/tasks/_kinds.py; the program's ast facts in _program.py, the runs in
memory in _runs.py, the questions in _candidates.py and the prompts in _templates.py.
This module generates the tasks of a store and stores and writes them.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import string
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa

from steptrace.corpus._text import user_file
from steptrace.errors import InputError
from steptrace.store._arrow import arrow_array
from steptrace.store._store import StoreError, connect, first_line
from steptrace.store._tables import TASKS
from steptrace.tasks._candidates import Candidate, run_facts, select, settrace_facts
from steptrace.tasks._kinds import KINDS, TASK_KINDS, parse_kinds, tables_read
from steptrace.tasks._names import CHAIN_KINDS, LINE_VIEWS
from steptrace.tasks._program import ProgramInfo, program_info
from steptrace.tasks._runs import RunData, load_runs
from steptrace.tasks._source import task_digest
from steptrace.tasks._templates import load_templates, render
from steptrace.tracing._analysis import ensure_analysed
from steptrace.store._transaction import transaction

TASK_TYPES = TASKS.arrow_types()  # the table's one declaration is in engine/store/_tables.py
TASK_COLUMNS = TASKS.column_names


# ====================================================================== options, records
@dataclass(frozen=True)
class TaskOptions:
    kinds: tuple[str, ...] = KINDS
    per_run: int = 3                  # at most this many questions of a kind per run
    seed: int = 0
    prompt_style: str = "direct"
    template_dir: Path | None = None  # user templates; missing files fall back to the bundled
    out: Path | None = None           # JSONL file; the Parquet file goes next to it
    max_trace_lines: int = 200        # no `trace` task for longer runs (the answer is the list)
    max_occurrence: int = 100         # k-th questions only for k <= this, or the last k
    chains: int = 0                   # REval chains per run (chain_candidates); 0: none
    workers: int | None = None        # analysis workers when `branch` needs analyse_store
    # a shard directory's tasks are made shard by shard: here (local) or on Ray
    engine: str = "local"
    address: str | None = None        # the Ray cluster's address (engine ray)
    where: str | None = None          # only the runs this condition selects (store/_where.py)
    # the line events the line-sequence kinds count: the steps' (monitoring) or the
    # settrace view's (docs/guides/runs.md)
    lines: str = "monitoring"


@dataclass
class TaskSummary:
    db: str
    kinds: tuple[str, ...]
    runs: int = 0                                         # finished runs considered
    by_kind: Counter = field(default_factory=Counter)     # tasks per kind
    runs_by_kind: Counter = field(default_factory=Counter)  # runs with >= 1 task of a kind
    unparsed: int = 0          # runs whose program the host's ast cannot parse (no line kinds)
    out: str | None = None
    parquet: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    # The tasks made, as stored (the tasks table's rows): what predicting and scoring
    # take in place of a tasks file.
    tasks: pl.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def rows(self) -> list[tuple[str, int, int]]:
        """(kind, tasks, runs) for every requested kind, then the total."""
        rows = [(kind, self.by_kind[kind], self.runs_by_kind[kind]) for kind in self.kinds]
        return rows + [("total", self.total, self.runs)]

    def timing_text(self) -> str:
        parts = ", ".join(f"{name} {secs:.2f}" for name, secs in self.seconds.items()
                          if name != "total")
        return (f"{self.total} tasks from {self.runs} runs in "
                f"{self.seconds.get('total', 0.0):.2f} s ({parts})")


@dataclass
class Task:
    task_id: str
    kind: str
    run_id: int
    sample_id: str
    line: int | None
    var: str | None
    occurrence: int | None
    question: str | None
    answer: str
    answer_type: str
    value_type: str | None
    line_steps: int | None
    loop_nesting: int
    distinct_lines: int | None
    branch_count: int | None
    prompt_style: str
    prompt: str
    seed: int
    created_at: dt.datetime


# ====================================================================== generation
def task_id(run_key: str, kind: str, candidate: Candidate) -> str:
    """Stable identity: the run, the kind and the question (not the prompt or seed)."""
    return task_digest(run_key, kind, candidate.line, candidate.var, candidate.occurrence,
                       dict(candidate.question))


def tasks_for_run(run: RunData, info: ProgramInfo | None, options: TaskOptions,
                  templates: dict[str, string.Template], now: dt.datetime) -> list[Task]:
    facts = run_facts(run, info, options)
    line_facts = facts
    if options.lines == "settrace" and any(TASK_KINDS[kind].line_view for kind in options.kinds):
        line_facts = settrace_facts(facts)
    found = {kind: _candidates(kind, facts, line_facts, options) for kind in options.kinds}
    chosen = [(kind, c) for kind in options.kinds
              for c in select(found[kind], options.per_run,
                              random.Random(f"{options.seed}:{run.run_key}:{kind}"))]
    if options.chains:
        chosen += chain_candidates(found, options, run.run_key, chosen)
    tasks = []
    for kind, c in chosen:
        tasks.append(Task(
            task_id(run.run_key, kind, c), kind, run.run_id, run.sample_id, c.line, c.var,
            c.occurrence,
            json.dumps(dict(c.question), ensure_ascii=False) if c.question else None,
            c.answer, c.answer_type, c.value_type, run.line_steps,
            info.loop_nesting(c.line) if info else 0, run.distinct_lines, run.branch_count,
            options.prompt_style,
            render(templates[kind], line_facts if TASK_KINDS[kind].line_view else facts, c,
                   options.lines), options.seed, now))
    return tasks


def _candidates(kind: str, facts, line_facts, options: TaskOptions) -> list[Candidate]:
    """The kind's candidates; a line-sequence kind's of the line view asked for, each
    saying so in its question when that is the settrace view (so a task's id and its
    question tell the two apart), none when the run has no such view."""
    task_kind = TASK_KINDS[kind]
    if not task_kind.line_view or options.lines == "monitoring":
        return list(task_kind.candidates(facts))
    if line_facts is None:
        return []
    return [replace(c, question=c.question + (("lines", options.lines),))
            for c in task_kind.candidates(line_facts)]



def chain_candidates(found: dict[str, list[Candidate]], options: TaskOptions, run_key: str,
                     chosen: list[tuple[str, Candidate]]) -> list[tuple[str, Candidate]]:
    """REval's question chains (``--chains N``): up to ``N`` lines of the run that have a
    coverage, a state and a next-line question, the last two not trivial (the line ran),
    picked with the run's own ``random.Random(f"{seed}:{run_key}:chains")``, and for
    each the line's coverage question and its most informative state and next-line
    questions (ties: the first occurrence, variable), added to ``chosen`` unless already
    there; the run's output question is the chain's last. Scoring's incremental
    consistency (engine/scoring/_summary.py) reads a chain as these four questions about
    one line. Needs every kind of the chain among the kinds asked, and a run with an
    output question (one that returned). ``found``: each asked kind's candidates."""
    if (not all(kind in options.kinds for kind in CHAIN_KINDS)
            or not any(kind == "output" for kind, _ in chosen)):
        return []
    by_line: dict[str, dict[int, Candidate]] = {}
    for kind in CHAIN_KINDS[:3]:
        best: dict[int, Candidate] = {}
        for c in sorted(found[kind], key=lambda c: (-c.score, c.occurrence or 0, c.var or "")):
            # a trivial state or next-line question gives its answer away (select never
            # asks one); a coverage question is asked whatever its score, as REval asks
            # about every line of the chain
            if c.line is not None and (kind == "coverage" or c.score >= 0):
                best.setdefault(c.line, c)
        by_line[kind] = best
    lines = sorted(set.intersection(*(set(best) for best in by_line.values())))
    random.Random(f"{options.seed}:{run_key}:chains").shuffle(lines)
    asked = {(kind, c.line, c.var, c.occurrence, c.question) for kind, c in chosen}
    added = []
    for line in sorted(lines[:options.chains]):
        for kind in CHAIN_KINDS[:3]:
            c = by_line[kind][line]
            if (kind, c.line, c.var, c.occurrence, c.question) not in asked:
                asked.add((kind, c.line, c.var, c.occurrence, c.question))
                added.append((kind, c))
    return added


def tasks_for_runs(runs: list[RunData], options: TaskOptions,
                   templates: dict[str, string.Template], now: dt.datetime,
                   summary: TaskSummary) -> list[Task]:
    """The tasks of ``runs``, counted in ``summary`` (runs, kinds, unparsed programs)."""
    infos: dict[tuple[str, str], ProgramInfo | None] = {}
    tasks: list[Task] = []
    for run in runs:
        key = (run.code, run.entry)
        if key not in infos:
            infos[key] = program_info(run.code, run.entry, run.shape == "script")
        summary.unparsed += infos[key] is None
        made = tasks_for_run(run, infos[key], options, templates, now)
        summary.by_kind.update(t.kind for t in made)
        summary.runs_by_kind.update({t.kind for t in made})
        tasks.extend(made)
    summary.runs += len(runs)
    return tasks


def generate_tasks(db: str | Path, options: TaskOptions | None = None) -> TaskSummary:
    """Make tasks for every finished run of ``db``, store them in its ``tasks`` table and,
    with ``options.out``, write them as JSONL and Parquet. The summary holds them too
    (``summary.tasks``, a polars DataFrame of the stored rows)."""
    options = options or TaskOptions()
    started = time.perf_counter()
    _check(db, options)
    from steptrace.sharding._plan import is_shard_directory
    if is_shard_directory(db):  # shard by shard: steptrace.sharding._tasks
        if options.where is not None:  # a bad condition fails here, before any shard
            from steptrace.store._where import select_runs
            select_runs(db, options.where)
        from steptrace.sharding._tasks import generate_shard_tasks
        return generate_shard_tasks(db, options)
    options = replace(options, kinds=parse_kinds(options.kinds))
    summary = TaskSummary(db=str(db), kinds=options.kinds)
    templates = load_templates(options.kinds, options.prompt_style, options.template_dir)
    if "branches" in tables_read(options.kinds, options.lines):
        summary.seconds["analyse"] = _analyse(db, options)
    selected = None
    if options.where is not None:  # read-only, before the store is opened for writing
        from steptrace.store._where import select_runs
        selected = set(select_runs(db, options.where))
    con = connect(db)
    try:
        mark = time.perf_counter()
        runs = _load(con, db, options.kinds, selected, options.lines)
        summary.seconds["load"] = time.perf_counter() - mark
        mark = time.perf_counter()
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        tasks = tasks_for_runs(runs, options, templates, now, summary)
        summary.seconds["generate"] = time.perf_counter() - mark
        mark = time.perf_counter()
        frame = summary.tasks = store_tasks(con, db, tasks)
        if options.out is not None:
            summary.out, summary.parquet = write_tasks(frame, Path(options.out))
        summary.seconds["store"] = time.perf_counter() - mark
    finally:
        con.close()
    summary.seconds["total"] = time.perf_counter() - started
    return summary


def _check(db: str | Path, options: TaskOptions) -> None:
    """Refuse bad arguments before any work (and before creating a file)."""
    if not Path(db).exists():  # a store file, or a shard directory
        raise StoreError(f"database not found: {db}")
    parse_kinds(options.kinds)
    if options.lines not in LINE_VIEWS:
        raise InputError(f"unknown line view {options.lines!r}: choose from "
                         f"{', '.join(LINE_VIEWS)}")
    if options.per_run < 1:
        raise InputError("--per-run must be at least 1")
    if options.out is not None:
        out = Path(options.out)
        if not out.parent.is_dir():
            raise InputError(f"cannot write {out}: directory {out.parent} does not exist")
        if out.suffix == ".parquet":
            raise InputError(f"--out names the JSONL file ({out}); the Parquet file is "
                             "written next to it")


def _analyse(db: str | Path, options: TaskOptions) -> float:
    """Condition outcomes come from the analysis run; make sure every run has one."""
    mark = time.perf_counter()
    ensure_analysed(db, workers=options.workers)
    return time.perf_counter() - mark


def _load(con, db, kinds, selected: set[int] | None = None,
          lines: str = "monitoring") -> list[RunData]:
    try:
        runs = load_runs(con, tables_read(kinds, lines))
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    if selected is not None:
        runs = [run for run in runs if run.run_id in selected]
        if not runs:
            raise InputError(f"no finished (ok or exception) runs in {db} meet --where")
    if not runs:
        raise InputError(f"no finished (ok or exception) runs in {db}: nothing to ask about")
    return runs


def _sort_key(task: Task) -> tuple:
    return (task.run_id, KINDS.index(task.kind), task.line or 0, task.occurrence or 0,
            task.var or "", task.question or "")


def tasks_arrow(tasks: list[Task]) -> pa.Table:
    """``tasks`` as rows of the tasks table, in their order."""
    # getattr, not dataclasses.asdict: asdict deep-copies every field of every task
    return pa.table({name: arrow_array([getattr(task, name) for task in tasks], TASK_TYPES[name])
                     for name in TASK_COLUMNS})


def store_tasks(con: duckdb.DuckDBPyConnection, db: str | Path,
                tasks: list[Task]) -> pl.DataFrame:
    """Upsert ``tasks`` (one row per task_id; ``created_at`` kept from the first time) and
    return them as stored, in a stable order."""
    tasks = sorted(tasks, key=_sort_key)
    incoming = tasks_arrow(tasks)
    order = pa.table({"task_id": incoming.column("task_id"),
                      "ord": arrow_array(range(len(tasks)), pa.int64())})
    updates = ", ".join(f"{c} = excluded.{c}" for c in TASK_COLUMNS[1:] if c != "created_at")
    try:
        con.execute(TASKS.ddl())
        con.register("incoming_tasks", incoming)
        con.register("task_order", order)
        with transaction(con):
            if tasks:
                con.execute(f"INSERT INTO tasks SELECT * FROM incoming_tasks "
                            f"ON CONFLICT (task_id) DO UPDATE SET {updates}")
        return con.sql("SELECT t.* FROM tasks t JOIN task_order o USING (task_id) "
                           "ORDER BY o.ord").pl()
    except duckdb.Error as exc:
        raise StoreError(f"cannot write tasks to database {db}: {first_line(exc)}") from exc
    finally:
        con.unregister("incoming_tasks")
        con.unregister("task_order")


def upsert_staged_tasks(con: duckdb.DuckDBPyConnection, db: str | Path,
                        files: list[str]) -> pl.DataFrame:
    """``store_tasks`` for tasks written to Parquet ``files`` (a shard directory's, each
    file one shard's tasks in ``_sort_key`` order): upserted in one statement, returned
    as stored, in run order."""
    from steptrace.analytics._export import sql_literal
    listing = "[" + ", ".join(sql_literal(f) for f in files) + "]"
    updates = ", ".join(f"{c} = excluded.{c}" for c in TASK_COLUMNS[1:] if c != "created_at")
    try:
        con.execute(TASKS.ddl())
        with transaction(con):
            con.execute(f"INSERT INTO tasks SELECT * FROM read_parquet({listing}) "
                        f"ON CONFLICT (task_id) DO UPDATE SET {updates}")
        # a run's tasks are in one file, in order; run ids grow from shard to shard
        return con.sql("SELECT t.* FROM tasks t JOIN (SELECT task_id, file_row_number FROM "
                       f"read_parquet({listing}, file_row_number = true)) o USING (task_id) "
                       "ORDER BY t.run_id, o.file_row_number").pl()
    except duckdb.Error as exc:
        raise StoreError(f"cannot write tasks to database {db}: {first_line(exc)}") from exc


def write_tasks(frame: pl.DataFrame, out: Path) -> tuple[str, str]:
    """JSONL (one object per task, the table's columns) and Parquet next to it."""
    parquet = out.with_suffix(".parquet")
    with user_file(out):
        frame.write_ndjson(out)
    with user_file(parquet):
        frame.write_parquet(parquet)
    return str(out), str(parquet)
