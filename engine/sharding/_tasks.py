"""Tasks of a shard directory, made shard by shard (here, or spread over a Ray cluster).

A task depends on its run alone (its questions are drawn from ``random.Random(seed, run
key, kind)``: engine/tasks/_tasks.py), so the tasks of a directory are the union of its
shards' tasks, and a shard's are made from that shard's files with the memory of one
shard's runs. Each shard's tasks are written to a Parquet file in a private folder under
``DIR/tmp/``; once all are there, they are stored in the directory's ``tasks`` table
(``DIR/store.duckdb``) in one upsert, in run order, as ``tasks`` stores a store's.

The analysis run that ``branch`` tasks read comes first, for the whole directory on this
machine's worker pool (``ensure_analysed``), then the shards' tasks: engine ``local``
makes them one shard after another in this process, ``ray`` as one Ray task per shard
(retried by Ray if its worker dies; a retry rewrites the same file).
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq

from steptrace.errors import InputError, StoreError
from steptrace.sharding._defaults import ENGINES
from steptrace.sharding._plan import read_plan, shard_name
from steptrace.sharding._shard import read_done


def shard_tasks(directory: str, index: int, options, staging: str, now: dt.datetime) -> dict:
    """Make shard ``index``'s tasks into ``staging/NNNNN.parquet``; return its counts."""
    from steptrace.sharding._store import open_shard_store
    from steptrace.tasks._kinds import tables_read
    from steptrace.tasks._runs import load_runs
    from steptrace.tasks._tasks import (TaskSummary, _sort_key, tasks_arrow, tasks_for_runs)
    from steptrace.tasks._templates import load_templates
    templates = load_templates(options.kinds, options.prompt_style, options.template_dir)
    con = open_shard_store(directory, read_only=True, shard=index)
    try:
        runs = load_runs(con, tables_read(options.kinds, options.lines))
        if options.where is not None:  # the shard's runs the condition selects
            from steptrace.store._where import select_runs_of
            selected = set(select_runs_of(con, options.where, directory))
            runs = [run for run in runs if run.run_id in selected]
    finally:
        con.close()
    part = TaskSummary(db=directory, kinds=options.kinds)
    tasks = sorted(tasks_for_runs(runs, options, templates, now, part), key=_sort_key)
    target = Path(staging) / f"{shard_name(index)}.parquet"
    partial = target.with_name(f".{target.name}.partial")
    pq.write_table(tasks_arrow(tasks), partial)
    partial.replace(target)  # a retried task rewrites the same file whole
    return {"runs": part.runs, "unparsed": part.unparsed, "by_kind": dict(part.by_kind),
            "runs_by_kind": dict(part.runs_by_kind)}


def _ray_results(directory: str, indexes: list[int], options, staging: str,
                 now: dt.datetime):
    from steptrace.sharding._ray import connect
    ray = connect(options.address, options.workers)
    remote = ray.remote(num_cpus=1, max_retries=4)(shard_tasks)
    pending = [remote.remote(directory, index, options, staging, now) for index in indexes]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            yield ray.get(ready[0])
        except ray.exceptions.RayTaskError as exc:  # an error of the task itself: one line
            cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else exc
            raise StoreError(f"making a shard's tasks failed: {cause}") from exc


def generate_shard_tasks(directory: str | Path, options):
    """``generate_tasks`` for a shard directory (see the module doc)."""
    from steptrace.sharding._store import open_shard_store
    from steptrace.tasks._kinds import parse_kinds, tables_read
    from steptrace.tasks._tasks import TaskSummary, upsert_staged_tasks, write_tasks
    from steptrace.tasks._templates import load_templates
    from steptrace.tracing._analysis import ensure_analysed
    started = time.perf_counter()
    if options.engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, not {options.engine!r}")
    options = replace(options, kinds=parse_kinds(options.kinds))
    directory = Path(directory).resolve()
    plan = read_plan(directory)
    summary = TaskSummary(db=str(directory), kinds=options.kinds)
    load_templates(options.kinds, options.prompt_style, options.template_dir)  # fail early
    if "branches" in tables_read(options.kinds, options.lines):
        mark = time.perf_counter()
        ensure_analysed(directory, workers=options.workers)
        summary.seconds["analyse"] = time.perf_counter() - mark
    indexes = [spec.index for spec in plan.shards if read_done(directory, spec.index)]
    mark = time.perf_counter()
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    (directory / "tmp").mkdir(exist_ok=True)
    staging = tempfile.mkdtemp(dir=directory / "tmp", prefix="tasks-")
    try:
        if options.engine == "ray":
            results = _ray_results(str(directory), indexes, options, staging, now)
        else:
            results = (shard_tasks(str(directory), index, options, staging, now)
                       for index in indexes)
        for counts in results:
            summary.runs += counts["runs"]
            summary.unparsed += counts["unparsed"]
            summary.by_kind.update(Counter(counts["by_kind"]))
            summary.runs_by_kind.update(Counter(counts["runs_by_kind"]))
        if not summary.runs:
            if options.where is not None:
                raise InputError(f"no finished (ok or exception) runs in {directory} meet "
                                 "--where")
            raise InputError(f"no finished (ok or exception) runs in {directory}: nothing "
                             "to ask about")
        summary.seconds["generate"] = time.perf_counter() - mark
        mark = time.perf_counter()
        con = open_shard_store(directory)
        try:
            files = [str(Path(staging) / f"{shard_name(i)}.parquet") for i in indexes]
            summary.tasks = upsert_staged_tasks(con, directory, files)
        finally:
            con.close()
        if options.out is not None:
            summary.out, summary.parquet = write_tasks(summary.tasks, Path(options.out))
        summary.seconds["store"] = time.perf_counter() - mark
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    summary.seconds["total"] = time.perf_counter() - started
    return summary
