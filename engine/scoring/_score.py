"""Score stored predictions against their tasks' answers.

One verdict per (task, model, label, sample) goes to the ``scores`` table. Everything is
reported per experiment, a (model, label) pair (engine/predictions/_experiments.py), because one
model asked with two prompt styles or temperatures is two sets of answers: the summary
gives, per experiment and kind, pass@k with the unbiased estimator, a bootstrap interval
of pass@1, the unparseable rate, accuracy by difficulty bucket, REval's incremental
consistency, and a paired comparison of every two experiments, whether of two models or
of one. How each kind is judged is the kind's judge (engine/scoring/_judges.py); an
``input`` prediction is checked by running ``f(predicted input)`` in the sandbox,
untraced, a fresh instance per distinct candidate: it is right when it returns a value
equal to the task's output.

The work is split by job: _verdicts.py (verdicts and judging), _judges.py (each kind's
judge), _inputs.py (input checks in the sandbox), _load.py (what is read), _summary.py
(the tables) and this module (scoring a store: reading, judging, storing).

Each input check's verdict is kept in the ``checks`` table (engine/scoring/_checks.py),
keyed by the exact request, the guest build and the limits: scoring again runs only the
checks not judged yet (``input_checks`` in the summary counts those run,
``input_checks_reused`` those read back) and gives the same verdicts.

The store is open only while predictions are read and while verdicts are written, not
while input checks run, so ``predict`` can keep committing to it meanwhile (DuckDB lets
one process at a time have a file open for writing). A verdict whose prediction was
replaced in between (``predict --redo``) is not stored.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from steptrace.predictions._experiments import SCORES_DDL
from steptrace.scoring._checks import (CheckVerdict, NewCheck, check_key, guest_key,
                                       load_verdicts, store_new)
from steptrace.scoring._inputs import (input_requests, input_verdict, unsafe_input_verdict,
                                       run_input_checks)
from steptrace.scoring._load import load_predictions, load_programs, load_task_file
from steptrace.scoring._summary import ScoreSummary
from steptrace.scoring._verdicts import (Progress, ScoreError, ScoreOptions, Verdict,
                                         judge_rows)
from steptrace.store._store import StoreError, connect, first_line
from steptrace.tasks._source import TasksLike, tasks_name
from steptrace.store._tables import SCORES
from steptrace.store._transaction import transaction

SCORE_TYPES = SCORES.arrow_types()


def score_predictions(db: str | Path, tasks_path: TasksLike, options: ScoreOptions,
                      progress: Progress | None = None) -> ScoreSummary:
    """Judge every stored prediction of the tasks in ``tasks_path`` (of ``options.models``
    and ``options.labels``, or all), replace their rows in ``scores``, and sum them up.
    ``tasks_path`` is a tasks file or tasks in memory (``load_task_file``)."""
    if any(k < 1 for k in options.ks) or not options.ks:
        raise ScoreError("--k takes whole numbers >= 1, e.g. 1,5")
    tasks = load_task_file(tasks_path)
    db = Path(db)
    if not db.exists():
        raise ScoreError(f"database not found: {db}")
    if options.where is not None:
        from steptrace.store._where import select_tasks
        tasks = select_tasks(db, tasks, options.where)
    summary, pending, plan = _read_and_judge(db, tasks_name(tasks_path), tasks, options)
    new_checks: list[NewCheck] = []
    if pending:  # the store is closed meanwhile: the checks may take minutes
        judged = dict(plan.stored)
        to_run = [i for i in range(len(plan.requests)) if i not in judged]
        results = run_input_checks([plan.requests[i] for i in to_run], options, progress,
                                   locks=[plan.locks[i] for i in to_run])
        for index, result in zip(to_run, results):
            passed, note = input_verdict(result)
            judged[index] = CheckVerdict(str(result.get("status") or "crashed"), passed, note)
            new_checks.append(NewCheck(plan.keys[index], "input", judged[index],
                                       plan.guests[index], options.limits.timeout_s,
                                       options.limits.memory_mb))
        for (verdict, _), index in zip(pending, plan.order):
            verdict.correct, verdict.note = (unsafe_input_verdict() if index is None
                                             else (judged[index].passed, judged[index].note))
        summary.input_checks = len(to_run)
        summary.input_checks_reused = len(plan.requests) - len(to_run)
    summary.stale = len(summary.verdicts) - store_verdicts(db, summary.verdicts, new_checks)
    return summary


@dataclass
class CheckPlan:
    """The input checks of the pending verdicts: the distinct guest requests, per pending
    verdict the index of its request (None: not safe arguments, never run), per request
    the package lock and key of its guest and its check key, and the verdicts the store
    already holds, by request index."""

    requests: list[dict] = field(default_factory=list)
    order: list[int | None] = field(default_factory=list)
    locks: list = field(default_factory=list)
    guests: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    stored: dict[int, CheckVerdict] = field(default_factory=dict)


def plan_checks(con: duckdb.DuckDBPyConnection, tasks: dict[str, dict],
                pending: list[tuple[Verdict, str]], programs: dict[int, tuple],
                options: ScoreOptions) -> CheckPlan:
    """The input checks ``pending`` needs, with the verdicts ``con``'s store holds."""
    requests, order, locks = input_requests(
        tasks, [(tasks[v.task_id], text) for v, text in pending], programs)
    by_digest: dict[str | None, str] = {}
    guests = []
    for lock in locks:
        digest = lock.digest if lock is not None else None
        if digest not in by_digest:
            by_digest[digest] = guest_key(lock)
        guests.append(by_digest[digest])
    keys = [check_key("input", request, guest, options.limits)
            for request, guest in zip(requests, guests)]
    found = load_verdicts(con, keys)
    stored = {i: found[key] for i, key in enumerate(keys) if key in found}
    return CheckPlan(requests, order, locks, guests, keys, stored)


def _read_and_judge(db: Path, tasks_path: str, tasks: dict[str, dict],
                    options: ScoreOptions) -> tuple[ScoreSummary, list[tuple[Verdict, str]],
                                                    CheckPlan]:
    """The summary of every verdict but the input checks', the (verdict, predicted input)
    pairs still to check, and their checks' plan; the store is open only for this."""
    con = connect(db)  # for writing: an older store's predictions are upgraded first
    try:
        if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'predictions'"
                       ).fetchall() == [(0,)]:
            raise ScoreError(f"{db} has no predictions table: run steptrace predict first")
        rows = load_predictions(con, tasks, options.models, options.labels)
        for column, index, wanted in (("model", 1, options.models), ("label", 2, options.labels)):
            found = {r[index] for r in rows}
            absent = [value for value in wanted if value not in found]
            if absent:
                raise ScoreError(f"no predictions of {column} {', '.join(absent)} for these "
                                 f"tasks in {db}")
        if not rows:
            raise ScoreError(f"no predictions for the tasks of {tasks_path} in {db}")
        verdicts, pending, errors = judge_rows(rows, tasks, options)
        plan = CheckPlan()
        if pending:
            programs = load_programs(con, [tasks[v.task_id] for v, _ in pending])
            plan = plan_checks(con, tasks, pending, programs, options)
    except duckdb.Error as exc:
        raise StoreError(f"cannot score in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    summary = ScoreSummary(options.ks, tasks, verdicts, errors, resamples=options.resamples,
                           seed=options.seed)
    return summary, pending, plan


def store_verdicts(db: str | Path, verdicts: list[Verdict],
                   checks: list[NewCheck] | None = None) -> int:
    """Replace the verdicts' rows in ``scores`` (and add the ``checks`` just run), in one
    short transaction, and return how many verdicts were stored: a verdict whose
    prediction is gone or was made again since it was read (``predict --redo`` while the
    input checks ran) is left out, as its row would judge an answer the store no longer
    holds."""
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    columns = {name: [getattr(v, name) for v in verdicts] for name in SCORE_TYPES
               if name != "scored_at"}
    table = pa.table({**columns, "scored_at": [now] * len(verdicts),
                      "predicted_at": [v.predicted_at for v in verdicts]},
                     schema=pa.schema({**SCORE_TYPES, "predicted_at": pa.timestamp("us")}))
    key = "task_id, model, label, sample_index"
    con = connect(db)
    try:
        con.register("incoming_scores", table)
        with transaction(con):
            con.execute(SCORES_DDL)
            con.execute(f"DELETE FROM scores WHERE ({key}) IN (SELECT ({key}) FROM incoming_scores)")
            stored = con.execute(
                f"INSERT INTO scores SELECT {', '.join(f'i.{c}' for c in SCORE_TYPES)} "
                f"FROM incoming_scores i JOIN predictions p USING ({key}) "
                "WHERE p.created_at IS NOT DISTINCT FROM i.predicted_at").fetchall()[0][0]
            store_new(con, checks or [])  # makes the checks table when missing
    except duckdb.Error as exc:
        raise StoreError(f"cannot store scores in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    return stored
