"""The tables a scoring prints, from its verdicts: pass@k by experiment and kind, pass@1
by difficulty bucket, REval's incremental consistency, a paired comparison of every
two experiments, and ``error`` tasks' type and message scored apart (EXE)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from steptrace.scoring._buckets import step_bucket
from steptrace.scoring._stats import (bootstrap_interval, incremental_consistency, pass_at_k,
                                      probability_a_beats_b)
from steptrace.scoring._verdicts import ExperimentKey, Verdict

# REval's order of a (program, input)'s tasks, easiest first.
CONSISTENCY_KINDS = ("coverage", "state", "next_line", "output")


@dataclass
class ScoreSummary:
    """Verdicts and what they add up to; ``tables()`` gives the printed tables."""

    ks: tuple[int, ...]
    tasks: dict[str, dict]
    verdicts: list[Verdict]
    errors: int = 0
    input_checks: int = 0  # input checks run in the sandbox
    input_checks_reused: int = 0  # input checks whose stored verdict was reused (checks table)
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
        """pass@1 per experiment by bucket of the task's run's line steps (the buckets of
        engine/scoring/_buckets.py, as the accuracy_by_kind query and the report have
        them) and by the loop nesting around the task's line (0, 1, 2+)."""
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
                    bucket = step_bucket(int(steps))
                    buckets[("line_steps", bucket.label, bucket.low)].append(vs)
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

    def error_parts(self) -> tuple[list[str], list[list]]:
        """``error`` tasks scored as EXE scores them: the type alone (``error.type``), the
        message alone (``error.message``) and both together (``error``, as in "by
        kind"), from each verdict's ``type_correct`` / ``message_correct``."""
        columns = (["model", "label", "part", "tasks", "samples"] + [f"pass@{k}" for k in self.ks]
                   + ["unparseable %"])
        rows = []
        for experiment in self.experiments():
            groups = [vs for (e, t), vs in sorted(self._by_task.items())
                      if e == experiment and self.tasks[t]["kind"] == "error"]
            if not groups:
                continue
            for part, field in (("error.type", "type_correct"),
                                ("error.message", "message_correct"), ("error", "correct")):
                parts = [[replace(v, correct=bool(getattr(v, field))) for v in g] for g in groups]
                rows.append([*experiment, part] + self._pass_row(parts))
        return columns, rows

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        return [("by kind", *self.by_kind()), ("by difficulty", *self.by_difficulty()),
                ("incremental consistency", *self.consistency()),
                ("paired comparison", *self.comparisons()),
                ("error parts", *self.error_parts())]

    def as_dict(self) -> dict:
        out: dict[str, Any] = {"scored": len(self.verdicts), "errors_skipped": self.errors,
                               "input_checks": self.input_checks,
                               "input_checks_reused": self.input_checks_reused, "stale": self.stale}
        for title, columns, rows in self.tables():
            out[title.replace(" ", "_")] = [dict(zip(columns, row)) for row in rows]
        return out


def _percent(value: float) -> float:
    return round(100.0 * float(value), 2)
