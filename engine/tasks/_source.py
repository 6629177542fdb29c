"""Tasks in memory, wherever a tasks file is read (predicting, scoring).

A tasks file is JSONL, one task record a line, as ``steptrace tasks --out`` writes it.
The same records may be given in memory: what ``steptrace.make_tasks`` returns (its
``tasks`` frame), a polars DataFrame of the ``tasks`` table's columns, or a list of
dicts. The readers of tasks files take their records from ``in_memory_tasks`` instead
of the file's lines and check them the same way; a bad record is named by its number,
counted from 1 as a file's lines are.

Kept to the standard library: the CLI imports the predicting module for its defaults.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterable, Iterator, Mapping

from steptrace.corpus._formats import is_polars_frame
from steptrace.corpus._frames import frame_rows, is_frame
from steptrace.errors import InputError

MEMORY_NAME = "<memory>"  # how summaries and messages name tasks given in memory

# What tasks may be given as: a tasks file's path, or records in memory.
TasksLike = Any  # str | os.PathLike | TaskSummary | pl.DataFrame | Iterable[Mapping]


def task_digest(run_key: str, kind: str, line: int | None, var: str | None,
                occurrence: int | None, question: Mapping[str, object]) -> str:
    """A task's id: the SHA-256 of its run's key, its kind and its question (line,
    variable, occurrence and the question's other fields), not of its prompt or seed. A
    record's id can so be checked against a store: the same id from the store's run of
    the record's ``run_id`` means the record is about that run (``predict`` checks it)."""
    key = json.dumps([run_key, kind, line, var, occurrence, dict(question)], sort_keys=True,
                     ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()


def is_tasks_file(tasks: TasksLike) -> bool:
    """Whether ``tasks`` names a tasks file (a ``str`` or path-like), not records."""
    return isinstance(tasks, (str, os.PathLike))


def tasks_name(tasks: TasksLike) -> str:
    """What summaries and messages call ``tasks``: the file's path, or ``<memory>``."""
    return os.fspath(tasks) if is_tasks_file(tasks) else MEMORY_NAME


def in_memory_tasks(tasks: TasksLike) -> Iterator[tuple[str, object]]:
    """``(where, record)`` for each task of in-memory ``tasks``: ``where`` names the
    record in messages (``<memory> record 3``). ``tasks`` is what ``make_tasks`` returned
    (anything with a ``tasks`` DataFrame), a polars DataFrame or an iterable of dicts;
    InputError for anything else."""
    for number, record in enumerate(_records(tasks), start=1):
        yield f"{MEMORY_NAME} record {number}", record


def table_tasks(path: TasksLike) -> Iterator[tuple[str, object]] | None:
    """``(where, record)`` for each task of a tasks file that is a table (a Parquet file,
    as ``tasks --out`` writes beside the JSONL, or a dataset saved with ``save_to_disk``,
    steptrace.corpus._frames), None for a JSONL file (read by lines)."""
    from pathlib import Path
    from steptrace.corpus._frames import is_saved_dataset, parquet_rows, saved_dataset_rows
    path = Path(path)
    if path.is_file() and path.suffix == ".parquet":
        rows = parquet_rows(path, keep_missing=True)
    elif is_saved_dataset(path):
        rows = saved_dataset_rows(path, keep_missing=True)
    else:
        return None
    return ((f"{path} row {number}", record) for number, record in enumerate(rows, start=1))


def _records(tasks: TasksLike) -> Iterable[object]:
    frame = getattr(tasks, "tasks", None)
    if is_polars_frame(frame):
        tasks = frame
    if is_polars_frame(tasks):
        return tasks.iter_rows(named=True)
    if is_frame(tasks):  # pandas, Hugging Face datasets
        return frame_rows(tasks, keep_missing=True)
    if isinstance(tasks, (bytes, bytearray, Mapping)) or not isinstance(tasks, Iterable):
        raise InputError(f"tasks are a tasks file's path, what make_tasks returned, a polars "
                         f"or pandas DataFrame, a Hugging Face Dataset or a list of task "
                         f"records (dicts), not "
                         f"{type(tasks).__name__}")
    return tasks
