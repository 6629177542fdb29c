"""Verdicts: what scoring makes of one prediction, and how stored predictions become
verdicts by their task kind's judge (engine/tasks/_kinds.py, engine/scoring/_judges.py).
Every input prediction is left pending here: it is checked in the sandbox afterwards
(engine/scoring/_inputs.py), with the store closed."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Callable

from steptrace.errors import InputError
from steptrace.sandbox._limits import Limits
from steptrace.tasks._kinds import task_kind

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
    where: str | None = None       # only the tasks of the runs it selects (store/_where.py)


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
    # an ``error`` verdict's parts (its judge's ``parts``): the type, the message alone;
    # None for a kind without parts, False for an unparseable answer
    type_correct: bool | None = None
    message_correct: bool | None = None

    @property
    def experiment(self) -> ExperimentKey:
        return self.model, self.label


def judge(task: dict, predicted: str, options: ScoreOptions) -> tuple[bool, float | None]:
    """(correct, distance) of one parsed answer to a task of any kind but ``input``, by
    the kind's judge (engine/tasks/_kinds.py, engine/scoring/_judges.py)."""
    kind = task_kind(task["kind"])
    if kind is None or kind.judge.in_sandbox:
        raise ScoreError(f"task {task['task_id']}: unknown kind {task['kind']!r}")
    return kind.judge(task, predicted, options)


def judge_rows(rows: list[tuple], tasks: dict[str, dict], options: ScoreOptions
               ) -> tuple[list[Verdict], list[tuple[Verdict, str]], int]:
    """Verdicts of the stored prediction ``rows`` (as load_predictions reads them), the
    (verdict, predicted input) pairs still to check in the sandbox, and the number of
    rows left out because their request failed. An unparseable prediction is wrong."""
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
        if kind is not None and kind.judge.parts is not None:
            verdict.type_correct, verdict.message_correct = (
                kind.judge.parts(task, answer) if verdict.parsed else (False, False))
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
