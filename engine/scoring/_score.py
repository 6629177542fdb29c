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

The store is open only while predictions are read and while verdicts are written, not
while input checks run, so ``predict`` can keep committing to it meanwhile (DuckDB lets
one process at a time have a file open for writing). A verdict whose prediction was
replaced in between (``predict --redo``) is not stored.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

import duckdb
import numpy as np
import pyarrow as pa

from steptrace.predictions._experiments import SCORES_DDL
from steptrace.scoring._stats import (bootstrap_interval, incremental_consistency, pass_at_k,
                                      probability_a_beats_b)
from steptrace.store._store import StoreError, connect, first_line
from steptrace.store._tables import SCORES
from steptrace.tasks._kinds import task_kind
from steptrace.corpus._text import open_utf8
from steptrace.sandbox._limits import Limits
from steptrace.errors import InputError

SCORE_TYPES = SCORES.arrow_types()
TASK_FIELDS = ("task_id", "kind", "run_id", "sample_id", "answer", "answer_type", "line_steps",
               "loop_nesting", "question")
# REval's order of a (program, input)'s tasks, easiest first.
CONSISTENCY_KINDS = ("coverage", "state", "next_line", "output")
STEP_BUCKETS = ((1, 4), (5, 16), (17, 64), (65, 256), (257, None))
Progress = Callable[[int, int], None]
ExperimentKey = tuple[str, str]  # (model, label): what the tables report and compare


class ScoreError(InputError):
    """Tasks or predictions that cannot be scored; the message says which and why."""


@dataclass(frozen=True)
class ScoreOptions:
    models: tuple[str, ...] = ()   # empty: every model
    labels: tuple[str, ...] = ()   # empty: every experiment of those models
    ks: tuple[int, ...] = (1, 5)
    type_strict: bool = False
    float_tolerance: float = 0.0
    workers: int | None = None
    limits: Limits = field(default_factory=lambda: Limits(timeout_s=3.0))
    resamples: int = 10_000
    seed: int = 0


@dataclass
class Verdict:
    task_id: str
    model: str
    label: str
    sample_index: int
    kind: str
    parsed: bool
    correct: bool
    distance: float | None = None
    note: str | None = None
    predicted_at: dt.datetime | None = None  # the prediction's created_at, to spot a redo

    @property
    def experiment(self) -> ExperimentKey:
        return self.model, self.label


# ====================================================================== judging
def judge(task: dict, predicted: str, options: ScoreOptions) -> tuple[bool, float | None]:
    """(correct, distance) of one parsed answer to a task of any kind but ``input``, by
    the kind's judge (engine/tasks/_kinds.py, engine/scoring/_judges.py)."""
    kind = task_kind(task["kind"])
    if kind is None or kind.judge.in_sandbox:
        raise ScoreError(f"task {task['task_id']}: unknown kind {task['kind']!r}")
    return kind.judge(task, predicted, options)


# ====================================================================== input checks
def input_requests(tasks: dict[str, dict], pending: list[tuple[dict, str]],
                   programs: dict[int, tuple[str, str]]) -> tuple[list[dict], list[int]]:
    """Distinct guest requests (mode ``run``) for the (task, predicted input) pairs, and for
    each pair the index of its request."""
    index: dict[tuple, int] = {}
    requests: list[dict] = []
    order = []
    for task, predicted in pending:
        code, entry = programs[task["run_id"]]
        output = json.loads(task["question"])["output"]
        key = (code, entry, predicted, output)
        if key not in index:
            index[key] = len(requests)
            requests.append({"code": code, "entry": entry, "input": predicted,
                             "expected": output, "mode": "run"})
        order.append(index[key])
    return requests, order


def run_input_checks(requests: list[dict], options: ScoreOptions,
                     progress: Progress | None = None, chunk_size: int = 8) -> list[dict]:
    """Each request in a fresh sandbox instance; the guest's results in order."""
    from steptrace.sandbox._runner import run_chunks  # the sandbox loads only when inputs are checked
    results: list[dict] = [{} for _ in requests]
    chunks = [requests[i:i + chunk_size] for i in range(0, len(requests), chunk_size)]
    workers = options.workers if options.workers is not None else (os.cpu_count() or 1)
    done = 0
    for index, outcomes in run_chunks(chunks, workers, options.limits, isolation="job"):
        for offset, outcome in enumerate(outcomes):
            results[index * chunk_size + offset] = outcome.result
        done += len(outcomes)
        if progress:
            progress(done, len(requests))
    return results


def input_verdict(result: dict) -> tuple[bool, str | None]:
    status = result.get("status")
    if status == "ok":
        matches = result.get("output_matches") is True
        return matches, None if matches else f"returned {str(result.get('output'))[:200]}"
    detail = result.get("exception_type") or result.get("exception_message") or ""
    return False, f"{status}: {detail}"[:300]


# ====================================================================== loading
def load_task_file(path: str | Path) -> dict[str, dict]:
    """Tasks JSONL as written by ``steptrace tasks``, by task id."""
    path = Path(path)
    if not path.is_file():
        raise ScoreError(f"tasks file not found: {path}")
    tasks: dict[str, dict] = {}
    with open_utf8(path) as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ScoreError(f"{path}:{number}: not JSON: {exc.msg}") from None
            missing = [f for f in TASK_FIELDS if not isinstance(record, dict) or f not in record]
            if missing:
                raise ScoreError(f"{path}:{number}: not a task record (missing {', '.join(missing)})")
            tasks[record["task_id"]] = record
    if not tasks:
        raise ScoreError(f"{path} holds no tasks")
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


def load_programs(con: duckdb.DuckDBPyConnection, tasks: Iterable[dict]) -> dict[int, tuple[str, str]]:
    """(code, entry) of the runs the input tasks are about, checked against their sample."""
    wanted = {t["run_id"]: t["sample_id"] for t in tasks}
    if not wanted:
        return {}
    con.register("wanted_runs", pa.table({"run_id": list(wanted)}))
    rows = con.execute("SELECT r.run_id, r.sample_id, p.code, p.entry FROM runs r "
                       "JOIN programs p USING (program_id) JOIN wanted_runs w USING (run_id)"
                       ).fetchall()
    con.unregister("wanted_runs")
    found = {run_id: (sample, code, entry) for run_id, sample, code, entry in rows}
    for run_id, sample in wanted.items():
        if run_id not in found or found[run_id][0] != sample:
            raise ScoreError(f"input tasks need their programs: run {run_id} ({sample}) is not "
                             "in this store (score with the --db the tasks were made from)")
    return {run_id: (code, entry) for run_id, (_, code, entry) in found.items()}


# ====================================================================== summary
@dataclass
class ScoreSummary:
    """Verdicts and what they add up to; ``tables()`` gives the printed tables."""

    ks: tuple[int, ...]
    tasks: dict[str, dict]
    verdicts: list[Verdict]
    errors: int = 0
    input_checks: int = 0
    stale: int = 0  # verdicts not stored: their prediction was replaced while scoring
    resamples: int = 10_000
    seed: int = 0

    @cached_property
    def _by_task(self) -> dict[tuple[ExperimentKey, str], list[Verdict]]:
        """Verdicts per (experiment, task), grouped once (every table reads them)."""
        grouped: dict[tuple[ExperimentKey, str], list[Verdict]] = defaultdict(list)
        for v in self.verdicts:
            grouped[(v.experiment, v.task_id)].append(v)
        return grouped

    def experiments(self) -> list[ExperimentKey]:
        """The (model, label) pairs scored, in the tables' order."""
        return sorted({e for e, _ in self._by_task})

    def task_pass1(self) -> dict[tuple[ExperimentKey, str], float]:
        """Per (experiment, task): the share of its samples that are right (pass@1)."""
        return {key: sum(v.correct for v in vs) / len(vs) for key, vs in self._by_task.items()}

    def _pass_row(self, groups: list[list[Verdict]]) -> list:
        n_tasks = len(groups)
        samples = sum(len(g) for g in groups)
        row: list = [n_tasks, samples]
        for k in self.ks:
            values = [pass_at_k(len(g), sum(v.correct for v in g), k) for g in groups if len(g) >= k]
            row.append(_percent(np.mean(values)) if values else None)
        unparsed = sum(not v.parsed for g in groups for v in g)
        row.append(_percent(unparsed / samples) if samples else None)
        return row

    def by_kind(self) -> tuple[list[str], list[list]]:
        columns = (["model", "label", "kind", "tasks", "samples"] + [f"pass@{k}" for k in self.ks]
                   + ["unparseable %", "pass@1 95% CI", "trace distance"])
        by_task = self._by_task
        rows = []
        for experiment in self.experiments():
            kinds = sorted({self.tasks[t]["kind"] for e, t in by_task if e == experiment})
            for kind in kinds + ["all"]:
                groups = [vs for (e, t), vs in sorted(by_task.items())
                          if e == experiment and (kind == "all" or self.tasks[t]["kind"] == kind)]
                row = [*experiment, kind] + self._pass_row(groups)
                firsts = [sum(v.correct for v in g) / len(g) for g in groups]
                ci = bootstrap_interval(np.array(firsts), self.resamples, seed=self.seed)
                row.append(f"{_percent(ci.low)}–{_percent(ci.high)}")
                distances = [v.distance for g in groups for v in g if v.distance is not None]
                row.append(round(float(np.mean(distances)), 4) if kind == "trace" and distances else None)
                rows.append(row)
        return columns, rows

    def by_difficulty(self) -> tuple[list[str], list[list]]:
        columns = ["model", "label", "feature", "bucket", "tasks", "samples", "pass@1"]
        by_task = self._by_task
        rows = []
        for experiment in self.experiments():
            buckets: dict[tuple[str, str, int], list[list[Verdict]]] = defaultdict(list)
            for (e, task_id), vs in by_task.items():
                if e != experiment:
                    continue
                task = self.tasks[task_id]
                steps = task.get("line_steps")
                if steps is not None:
                    order, label = _step_bucket(int(steps))
                    buckets[("line_steps", label, order)].append(vs)
                nesting = min(int(task.get("loop_nesting") or 0), 2)
                buckets[("loop_nesting", "2+" if nesting == 2 else str(nesting), nesting)].append(vs)
            for (feature, label, _), groups in sorted(buckets.items(), key=lambda i: (i[0][0], i[0][2])):
                n = sum(len(g) for g in groups)
                rows.append([*experiment, feature, label, len(groups), n,
                             _percent(np.mean([sum(v.correct for v in g) / len(g) for g in groups]))])
        return columns, rows

    def consistency(self) -> tuple[list[str], list[list]]:
        """REval's incremental consistency per experiment over the runs that have a task of
        each of coverage, state, next_line and output (a kind's pass@1 >= 0.5 counts as
        right when a run has several tasks or samples of it)."""
        columns = ["model", "label", "runs", "IC score", "consistent runs"]
        per_run: dict[tuple[ExperimentKey, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for (experiment, task_id), value in self.task_pass1().items():
            task = self.tasks[task_id]
            if task["kind"] in CONSISTENCY_KINDS:
                per_run[(experiment, task["run_id"])][task["kind"]].append(value)
        rows = []
        for experiment in self.experiments():
            scores = [incremental_consistency([float(np.mean(kinds[k])) >= 0.5 for k in CONSISTENCY_KINDS])
                      for (e, _), kinds in sorted(per_run.items())
                      if e == experiment and all(k in kinds for k in CONSISTENCY_KINDS)]
            if scores:
                rows.append([*experiment, len(scores), _percent(np.mean(scores)),
                             sum(s > 0 for s in scores)])
        return columns, rows

    def comparisons(self) -> tuple[list[str], list[list]]:
        """For every two experiments (two models, or one model's two labels: prompt
        styles, temperatures, ...), over the tasks both answered: P(A's pass@1 > B's) in
        bootstrap resamples of the tasks (CRUXEval §4)."""
        columns = ["model A", "label A", "model B", "label B", "tasks", "pass@1 A", "pass@1 B",
                   "P(A beats B)"]
        pass1 = self.task_pass1()
        experiments = self.experiments()
        rows = []
        for i, a in enumerate(experiments):
            for b in experiments[i + 1:]:
                shared = sorted(t for e, t in pass1 if e == a and (b, t) in pass1)
                if not shared:
                    continue
                xa = np.array([pass1[(a, t)] for t in shared])
                xb = np.array([pass1[(b, t)] for t in shared])
                p = probability_a_beats_b(xa, xb, self.resamples, seed=self.seed)
                rows.append([*a, *b, len(shared), _percent(xa.mean()), _percent(xb.mean()),
                             round(p, 4)])
        return columns, rows

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        return [("by kind", *self.by_kind()), ("by difficulty", *self.by_difficulty()),
                ("incremental consistency", *self.consistency()),
                ("paired comparison", *self.comparisons())]

    def as_dict(self) -> dict:
        out: dict[str, Any] = {"scored": len(self.verdicts), "errors_skipped": self.errors,
                               "input_checks": self.input_checks, "stale": self.stale}
        for title, columns, rows in self.tables():
            out[title.replace(" ", "_")] = [dict(zip(columns, row)) for row in rows]
        return out


def _percent(value: float) -> float:
    return round(100.0 * float(value), 2)


def _step_bucket(steps: int) -> tuple[int, str]:
    for order, (low, high) in enumerate(STEP_BUCKETS):
        if steps >= low and (high is None or steps <= high):
            return order, f"{low}+" if high is None else f"{low}-{high}"
    return -1, "0"


# ====================================================================== scoring
def score_predictions(db: str | Path, tasks_path: str | Path, options: ScoreOptions,
                      progress: Progress | None = None) -> ScoreSummary:
    """Judge every stored prediction of the tasks in ``tasks_path`` (of ``options.models``
    and ``options.labels``, or all), replace their rows in ``scores``, and sum them up."""
    if any(k < 1 for k in options.ks) or not options.ks:
        raise ScoreError("--k takes whole numbers >= 1, e.g. 1,5")
    tasks = load_task_file(tasks_path)
    db = Path(db)
    if not db.exists():
        raise ScoreError(f"database not found: {db}")
    summary, pending, programs = _read_and_judge(db, tasks_path, tasks, options)
    if pending:  # the store is closed meanwhile: the checks may take minutes
        requests, order = input_requests(tasks, [(tasks[v.task_id], text) for v, text in pending],
                                         programs)
        results = run_input_checks(requests, options, progress)
        for (verdict, _), index in zip(pending, order):
            verdict.correct, verdict.note = input_verdict(results[index])
        summary.input_checks = len(requests)
    summary.stale = len(summary.verdicts) - store_verdicts(db, summary.verdicts)
    return summary


def _read_and_judge(db: Path, tasks_path: str | Path, tasks: dict[str, dict],
                    options: ScoreOptions) -> tuple[ScoreSummary, list[tuple[Verdict, str]],
                                                    dict[int, tuple[str, str]]]:
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
        verdicts, pending, errors = _judge_rows(rows, tasks, options)
        programs = load_programs(con, [tasks[v.task_id] for v, _ in pending]) if pending else {}
    except duckdb.Error as exc:
        raise StoreError(f"cannot score in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    summary = ScoreSummary(options.ks, tasks, verdicts, errors, resamples=options.resamples,
                           seed=options.seed)
    return summary, pending, programs


def _judge_rows(rows: list[tuple], tasks: dict[str, dict], options: ScoreOptions
                ) -> tuple[list[Verdict], list[tuple[Verdict, str]], int]:
    verdicts: list[Verdict] = []
    pending: list[tuple[Verdict, str]] = []
    batches: dict[Callable, list[tuple[Verdict, str, str]]] = {}
    errors = 0
    for task_id, model, label, sample_index, answer, parsed, error, created_at in rows:
        if error is not None:
            errors += 1
            continue
        task = tasks[task_id]
        kind = task_kind(task["kind"])
        verdict = Verdict(task_id, model, label, sample_index, task["kind"],
                          bool(parsed and answer is not None), False, predicted_at=created_at)
        verdicts.append(verdict)
        if not verdict.parsed:
            verdict.note = "unparseable"
            verdict.distance = kind.judge.unparsed_distance if kind is not None else None
        elif kind is None:
            raise ScoreError(f"task {task_id}: unknown kind {task['kind']!r}")
        elif kind.judge.in_sandbox:
            pending.append((verdict, answer))
        elif kind.judge.many is not None:  # judged together: one kernel call per kind
            batches.setdefault(kind.judge.many, []).append((verdict, task["answer"], answer))
        else:
            verdict.correct, verdict.distance = kind.judge(task, answer, options)
    for many, batch in batches.items():
        judged = many([a for _, a, _ in batch], [p for _, _, p in batch])
        for (verdict, _, _), (correct, distance) in zip(batch, judged):
            verdict.correct, verdict.distance = correct, distance
    return verdicts, pending, errors


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
        con.execute("BEGIN")
        try:
            con.execute(SCORES_DDL)
            con.execute(f"DELETE FROM scores WHERE ({key}) IN (SELECT ({key}) FROM incoming_scores)")
            stored = con.execute(
                f"INSERT INTO scores SELECT {', '.join(f'i.{c}' for c in SCORE_TYPES)} "
                f"FROM incoming_scores i JOIN predictions p USING ({key}) "
                "WHERE p.created_at IS NOT DISTINCT FROM i.predicted_at").fetchall()[0][0]
            con.execute("COMMIT")
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass  # already aborted: keep the real error
            raise
    except duckdb.Error as exc:
        raise StoreError(f"cannot store scores in {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    return stored
