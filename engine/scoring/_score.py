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

The store is open only while predictions are read and while verdicts are written, not
while input checks run, so ``predict`` can keep committing to it meanwhile (DuckDB lets
one process at a time have a file open for writing). A verdict whose prediction was
replaced in between (``predict --redo``) is not stored.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow as pa

from steptrace.predictions._experiments import SCORES_DDL
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
    summary, pending, programs = _read_and_judge(db, tasks_name(tasks_path), tasks, options)
    if pending:  # the store is closed meanwhile: the checks may take minutes
        requests, order, locks = input_requests(
            tasks, [(tasks[v.task_id], text) for v, text in pending], programs)
        results = run_input_checks(requests, options, progress, locks=locks)
        for (verdict, _), index in zip(pending, order):
            verdict.correct, verdict.note = (unsafe_input_verdict() if index is None
                                             else input_verdict(results[index]))
        summary.input_checks = len(requests)
    summary.stale = len(summary.verdicts) - store_verdicts(db, summary.verdicts)
    return summary


def _read_and_judge(db: Path, tasks_path: str, tasks: dict[str, dict],
                    options: ScoreOptions) -> tuple[ScoreSummary, list[tuple[Verdict, str]],
                                                    dict[int, tuple]]:
    """The summary of every verdict but the input checks', the (verdict, predicted input)
    pairs still to check, and their programs; the store is open only for this."""
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
        programs = load_programs(con, [tasks[v.task_id] for v, _ in pending]) if pending else {}
    except duckdb.Error as exc:
        raise StoreError(f"cannot score in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    summary = ScoreSummary(options.ks, tasks, verdicts, errors, resamples=options.resamples,
                           seed=options.seed)
    return summary, pending, programs


def store_verdicts(db: str | Path, verdicts: list[Verdict]) -> int:
    """Replace the verdicts' rows in ``scores``, in one short transaction, and return how
    many were stored: a verdict whose prediction is gone or was made again since it was
    read (``predict --redo`` while the input checks ran) is left out, as its row would
    judge an answer the store no longer holds."""
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
    except duckdb.Error as exc:
        raise StoreError(f"cannot store scores in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    return stored
