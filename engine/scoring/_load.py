"""What scoring reads: the tasks file, the stored predictions of its tasks, and the
programs input tasks are about."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import duckdb
import pyarrow as pa

from steptrace.corpus._text import open_utf8
from steptrace.scoring._verdicts import ScoreError
from steptrace.tasks._source import (MEMORY_NAME, TasksLike, in_memory_tasks, is_tasks_file,
                                    table_tasks)
from steptrace.sandbox._packages import PackageLock
from steptrace.store._store import guest_locks

TASK_FIELDS = ("task_id", "kind", "run_id", "sample_id", "answer", "answer_type", "line_steps",
               "loop_nesting", "question")


def load_task_file(path: TasksLike) -> dict[str, dict]:
    """Tasks JSONL as written by ``steptrace tasks``, by task id; or tasks in memory
    (steptrace.tasks._source), checked the same way."""
    if not is_tasks_file(path):
        return _task_records(in_memory_tasks(path), MEMORY_NAME)
    table = table_tasks(path)
    if table is not None:  # Parquet, a saved dataset
        return _task_records(table, str(path))
    path = Path(path)
    if not path.is_file():
        raise ScoreError(f"tasks file not found: {path}")
    with open_utf8(path) as lines:
        return _task_records(((f"{path}:{number}", _parsed(line, f"{path}:{number}"))
                              for number, line in enumerate(lines, start=1) if line.strip()),
                             str(path))


def _parsed(line: str, where: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ScoreError(f"{where}: not JSON: {exc.msg}") from None


def _task_records(records: Iterable[tuple[str, object]], name: str) -> dict[str, dict]:
    """The records by task id, each checked to have the fields scoring reads."""
    tasks: dict[str, dict] = {}
    for where, record in records:
        missing = [f for f in TASK_FIELDS if not isinstance(record, dict) or f not in record]
        if missing:
            raise ScoreError(f"{where}: not a task record (missing {', '.join(missing)})")
        tasks[record["task_id"]] = record
    if not tasks:
        raise ScoreError(f"{name} holds no tasks")
    return tasks


def load_predictions(con: duckdb.DuckDBPyConnection, tasks: dict[str, dict],
                     models: tuple[str, ...], labels: tuple[str, ...] = ()) -> list[tuple]:
    """(task_id, model, label, sample_index, answer, parsed, error, created_at) of the
    tasks' predictions, of ``models`` and ``labels`` (empty: all)."""
    con.register("wanted_tasks", pa.table({"task_id": list(tasks)}))
    where, params = "", {}
    for column, values in (("model", models), ("label", labels)):
        if values:
            where += f" AND p.{column} IN (SELECT unnest(${column}s))"
            params[f"{column}s"] = list(values)
    rows = con.execute(
        "SELECT p.task_id, p.model, p.label, p.sample_index, p.answer, p.parsed, p.error, "
        "p.created_at FROM predictions p JOIN wanted_tasks w USING (task_id) "
        f"WHERE TRUE{where} ORDER BY p.model, p.label, p.task_id, p.sample_index",
        params).fetchall()
    con.unregister("wanted_tasks")
    return rows


def load_programs(con: duckdb.DuckDBPyConnection, tasks: Iterable[dict]
                  ) -> dict[int, tuple[str, str, PackageLock | None, str | None]]:
    """(code, entry, package lock of the guest that traced it: None for the standard guest,
    the program's files, argv and env: programs.environment, None before schema 7) of the
    runs the input tasks are about, checked against their sample (``con``: the store
    opened for writing, so an older one has runs.guest)."""
    wanted = {t["run_id"]: t["sample_id"] for t in tasks}
    if not wanted:
        return {}
    environment = "p.environment" if con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'main' AND "
        "table_name = 'programs' AND column_name = 'environment'").fetchall()[0][0] else "NULL"
    con.register("wanted_runs", pa.table({"run_id": list(wanted)}))
    rows = con.execute(f"SELECT r.run_id, r.sample_id, p.code, p.entry, r.guest, {environment} "
                       "FROM runs r JOIN programs p USING (program_id) "
                       "JOIN wanted_runs w USING (run_id)").fetchall()
    con.unregister("wanted_runs")
    locks = guest_locks(con)
    found = {run_id: (sample, code, entry, locks.get(key), given)
             for run_id, sample, code, entry, key, given in rows}
    for run_id, sample in wanted.items():
        if run_id not in found or found[run_id][0] != sample:
            raise ScoreError(f"input tasks need their programs: run {run_id} ({sample}) is not "
                             "in this store (score with the --db the tasks were made from)")
    return {run_id: program[1:] for run_id, program in found.items()}
