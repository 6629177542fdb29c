"""The tables a scoring prints, from its verdicts: pass@k by experiment and kind, pass@1
by difficulty bucket, coverage precision/recall/F1, REval's incremental consistency per
question chain, CRUXEval's input-output difficulty correlation, a paired comparison of
every two experiments, and ``error`` tasks' type and message scored apart (EXE).

Numbers (docs/guides/predictions-and-scoring.md, "Numbers"): every share (pass@k,
unparseable, solved, precision, recall, F1, IC, a difference of pass@1) is a fraction in
[0, 1] rounded to 4 decimals, in every format (table, JSON, CSV), as the named queries
give theirs (to 3); an interval is two numbers, ``ci_low`` and ``ci_high`` (95%
percentile bootstrap over the tasks, or the questions, chains or runs a table counts);
an undefined value is empty (JSON null).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Callable

import numpy as np

from steptrace.scoring._buckets import step_bucket
from steptrace.scoring._stats import (BootstrapBatch, confusion, incremental_consistency,
                                      pass_at_k, pearson)
from steptrace.scoring._verdicts import ExperimentKey, Verdict
from steptrace.scoring._judges import _boolean
from steptrace.tasks._names import CHAIN_KINDS

# REval's chain of questions about one line of one run, easiest first: coverage → state →
# path (steptrace's next_line) → output (evaluation.py, class Consistency, of
# github.com/r-eval/REval); tasks --chains makes them.
CONSISTENCY_KINDS = CHAIN_KINDS
CHAIN_SCORES = (1.0, 0.5, 0.25, 0.125, 0.0)  # the scores a four-question chain can have
# A kind is trivial in a scoring when at least this many of its tasks were scored and all
# have one same expected answer (CRUXEval's 800 ``exception`` tasks all answer "none"):
# answering that constant gets every one right, so the kind is reported after ``all``
# and left out of it (``trivial_kinds``).
TRIVIAL_MIN_TASKS = 10


class Tally(list):
    """One experiment's verdicts on one task (its samples) with the counts every table
    reads, counted once: a report of 15,000 tasks and five experiments asks them of each
    group in a dozen tables."""

    __slots__ = ("correct", "parsed")

    def __init__(self, verdicts=()) -> None:
        super().__init__(verdicts)
        self.correct = sum(1 for v in self if v.correct)
        self.parsed = sum(1 for v in self if v.parsed)


class _Later:
    """A table cell computed after the table's bootstrap batch has run (``_resolved``):
    every interval of a table is asked first and resampled in one batch."""

    def __init__(self, value: Callable[[], object]) -> None:
        self.value = value


def fraction(value: float | None) -> float | None:
    """A share as every table gives it: a fraction rounded to 4 decimals; None for an
    undefined one (NaN)."""
    if value is None or math.isnan(value):
        return None
    return round(float(value), 4)


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
    def _by_task(self) -> dict[tuple[ExperimentKey, str], Tally]:
        """Verdicts per (experiment, task), grouped and counted once (every table reads
        them)."""
        grouped: dict[tuple[ExperimentKey, str], list[Verdict]] = defaultdict(list)
        for v in self.verdicts:
            grouped[((v.model, v.label), v.task_id)].append(v)
        return {key: Tally(vs) for key, vs in grouped.items()}

    @cached_property
    def _by_experiment(self) -> dict[ExperimentKey, list[tuple[str, Tally]]]:
        """Per experiment, its (task id, verdicts) in task id order, sorted once: the
        tables select from these lists instead of sorting every verdict per row."""
        grouped: dict[ExperimentKey, list[tuple[str, Tally]]] = defaultdict(list)
        for (e, t), vs in sorted(self._by_task.items()):
            grouped[e].append((t, vs))
        return grouped

    def experiments(self) -> list[ExperimentKey]:
        """The (model, label) pairs scored, in the tables' order."""
        return sorted(self._by_experiment)

    @cached_property
    def trivial_kinds(self) -> dict[str, str]:
        """Kind → its one expected answer, for each kind of at least TRIVIAL_MIN_TASKS
        scored tasks that all have the same answer (see TRIVIAL_MIN_TASKS)."""
        answers: dict[str, set[str]] = defaultdict(set)
        counts: Counter = Counter()
        for task_id in {t for _, t in self._by_task}:
            task = self.tasks[task_id]
            answers[task["kind"]].add(str(task["answer"]))
            counts[task["kind"]] += 1
        return {kind: next(iter(found)) for kind, found in sorted(answers.items())
                if len(found) == 1 and counts[kind] >= TRIVIAL_MIN_TASKS}

    def task_pass1(self) -> dict[tuple[ExperimentKey, str], float]:
        """Per (experiment, task): the share of its samples that are right (pass@1)."""
        return {key: vs.correct / len(vs) for key, vs in self._by_task.items()}

    def _batch(self) -> BootstrapBatch:
        return BootstrapBatch(self.resamples, seed=self.seed)

    @staticmethod
    def _interval(batch: BootstrapBatch, values: list[float]) -> list[_Later]:
        """(ci_low, ci_high) cells of the mean of per-task (or per-chain) values, filled
        when the batch has run (``_resolved``)."""
        handle = batch.add(values)
        return [_Later(lambda: fraction(batch.interval(handle).low)),
                _Later(lambda: fraction(batch.interval(handle).high))]

    @staticmethod
    def _resolved(batch: BootstrapBatch, rows: list[list]) -> list[list]:
        """The rows with every cell the batch computes filled in (the batch run once)."""
        batch.run()
        return [[c.value() if isinstance(c, _Later) else c for c in row] for row in rows]

    def _pass_row(self, groups: list[Tally], batch: BootstrapBatch) -> list:
        n_tasks = len(groups)
        samples = sum(len(g) for g in groups)
        row: list = [n_tasks, samples]
        for k in self.ks:
            values = [pass_at_k(len(g), g.correct, k) for g in groups if len(g) >= k]
            row.append(fraction(np.mean(values)) if values else None)
        row.extend(self._interval(batch, [g.correct / len(g) for g in groups]))
        unparsed = samples - sum(g.parsed for g in groups)
        row.append(fraction(unparsed / samples) if samples else None)
        row.append(fraction(np.mean([g.correct == len(g) for g in groups])))
        row.append(fraction(np.mean([g.correct == 0 for g in groups])))
        return row

    def by_kind(self) -> tuple[list[str], list[list]]:
        """``_by_kind`` (computed once: the summary, the report and results.json read it)."""
        columns, rows = self._by_kind
        return list(columns), [list(r) for r in rows]

    @cached_property
    def _by_kind(self) -> tuple[list[str], list[list]]:
        """Per experiment and kind (and ``all``): tasks, samples, pass@k, the 95% interval
        of pass@1 (``ci_low``, ``ci_high``), the unparseable share of the samples, the
        share of tasks ``fully solved`` (every sample right) and ``unsolved`` (none
        right: CRUXEval's analyses), and for ``trace`` the mean normalised edit distance.
        A trivial kind (``trivial_kinds``) is left out of ``all`` and listed after it,
        its ``trivial`` cell naming the one answer."""
        columns = (["model", "label", "kind", "tasks", "samples"] + [f"pass@{k}" for k in self.ks]
                   + ["ci_low", "ci_high", "unparseable", "fully solved", "unsolved",
                      "trace distance", "trivial"])
        trivial = self.trivial_kinds
        batch = self._batch()
        rows = []
        for experiment, mine in self._by_experiment.items():
            per_kind: dict[str, list[Tally]] = defaultdict(list)
            for task_id, vs in mine:
                per_kind[self.tasks[task_id]["kind"]].append(vs)
            kinds = sorted(k for k in per_kind if k not in trivial)
            every = [vs for task_id, vs in mine if self.tasks[task_id]["kind"] not in trivial]
            shown = [(k, per_kind[k]) for k in kinds] + [("all", every)] * bool(every)
            shown += [(k, per_kind[k]) for k in sorted(per_kind) if k in trivial]
            for kind, groups in shown:
                row = [*experiment, kind] + self._pass_row(groups, batch)
                distances = [v.distance for g in groups for v in g if v.distance is not None]
                row.append(round(float(np.mean(distances)), 4) if kind == "trace" and distances else None)
                row.append(f"every answer {trivial[kind]}" if kind in trivial else None)
                rows.append(row)
        return columns, self._resolved(batch, rows)

    def by_difficulty(self) -> tuple[list[str], list[list]]:
        """pass@1 (with its 95% interval) per experiment by bucket of the task's run's line
        steps (the buckets of engine/scoring/_buckets.py, as the accuracy_by_kind query and
        the report have them) and by the loop nesting around the task's line (0, 1, 2+)."""
        columns = ["model", "label", "feature", "bucket", "tasks", "samples", "pass@1",
                   "ci_low", "ci_high"]
        batch = self._batch()
        rows = []
        for experiment, mine in self._by_experiment.items():
            buckets: dict[tuple[str, str, int], list[Tally]] = defaultdict(list)
            for task_id, vs in mine:
                task = self.tasks[task_id]
                steps = task.get("line_steps")
                if steps is not None:
                    bucket = step_bucket(int(steps))
                    buckets[("line_steps", bucket.label, bucket.low)].append(vs)
                nesting = min(int(task.get("loop_nesting") or 0), 2)
                buckets[("loop_nesting", "2+" if nesting == 2 else str(nesting), nesting)].append(vs)
            for (feature, label, _), groups in sorted(buckets.items(), key=lambda i: (i[0][0], i[0][2])):
                n = sum(len(g) for g in groups)
                firsts = [g.correct / len(g) for g in groups]
                rows.append([*experiment, feature, label, len(groups), n,
                             fraction(np.mean(firsts)), *self._interval(batch, firsts)])
        return columns, self._resolved(batch, rows)

    def coverage(self) -> tuple[list[str], list[list]]:
        """Coverage prediction as REval reports it: per experiment, over its coverage
        questions (task and sample), the confusion counts with "the line runs" as the
        positive class, and precision, recall and F1, each with its 95% interval. An
        unparseable answer counts as "no", as REval's Coverage task takes it."""
        columns = ["model", "label", "questions", "tp", "fp", "fn", "tn"]
        for measure in ("precision", "recall", "f1"):
            columns += [measure, f"{measure} ci_low", f"{measure} ci_high"]
        pairs: dict[ExperimentKey, tuple[list[bool], list[bool]]] = defaultdict(lambda: ([], []))
        for v in self.verdicts:
            if v.kind != "coverage":
                continue
            truth = _boolean(str(self.tasks[v.task_id]["answer"])) is True
            predicted, actual = pairs[v.experiment]
            predicted.append(v.parsed and v.correct == truth)
            actual.append(truth)
        rows = []
        for experiment in sorted(pairs):
            predicted, actual = pairs[experiment]
            c = confusion(np.array(predicted), np.array(actual), self.resamples, seed=self.seed)
            row = [*experiment, c.n, c.tp, c.fp, c.fn, c.tn]
            for measure in (c.precision, c.recall, c.f1):
                row += [fraction(measure.mean), fraction(measure.low), fraction(measure.high)]
            rows.append(row)
        return columns, rows

    def chains(self) -> dict[ExperimentKey, list[tuple[bool, ...]]]:
        """REval's question chains per experiment, each the (coverage, state, next_line,
        output) verdicts of one line of one run in one sample: the coverage question about
        the line, a state question at the line, the next-line question at the line and the
        run's output question (REval asks one variable per line; where steptrace has
        several state or next-line tasks at one line, the chain takes the first by
        occurrence, variable and task id). A chain needs a verdict of each of its four
        tasks with that sample index: sample ``i`` is REval's ``i``-th repeat."""
        verdict: dict[tuple[ExperimentKey, str, int], bool] = {}
        answered: dict[ExperimentKey, set[str]] = defaultdict(set)
        for v in self.verdicts:
            if v.kind in CONSISTENCY_KINDS:
                verdict[(v.experiment, v.task_id, v.sample_index)] = v.correct
                answered[v.experiment].add(v.task_id)
        out: dict[ExperimentKey, list[tuple[bool, ...]]] = {}
        for experiment in self.experiments():
            mine = sorted((self.tasks[t] for t in answered[experiment]), key=_chain_order)
            first: dict[tuple[str, int, int | None], str] = {}
            for task in mine:
                line = None if task["kind"] == "output" else task.get("line")
                first.setdefault((task["kind"], task["run_id"], line), task["task_id"])
            samples = sorted({s for (e, _, s) in verdict if e == experiment})
            found = []
            for (kind, run_id, line), coverage_id in sorted(first.items(), key=_key_order):
                if kind != "coverage":
                    continue
                ids = [coverage_id] + [first.get((k, run_id, line if k != "output" else None))
                                       for k in CONSISTENCY_KINDS[1:]]
                if None in ids:
                    continue
                for sample in samples:
                    chain = [verdict.get((experiment, t, sample)) for t in ids]
                    if None not in chain:
                        found.append(tuple(chain))
            if found:
                out[experiment] = found
        return out

    def consistency(self) -> tuple[list[str], list[list]]:
        """REval's incremental consistency per experiment: the mean over its question
        chains (``chains``) of each chain's score (1, 1/2, 1/4, 1/8 when the first 4, 3,
        2, 1 answers are right and the rest wrong, else 0: ``incremental_consistency``),
        with its 95% interval over the chains and how many chains have each score."""
        columns = (["model", "label", "chains", "IC", "ci_low", "ci_high"]
                   + [f"score {s:g}" for s in CHAIN_SCORES])
        batch = self._batch()
        rows = []
        for experiment, found in sorted(self.chains().items()):
            scores = [incremental_consistency(list(chain)) for chain in found]
            counts = Counter(scores)
            rows.append([*experiment, len(scores), fraction(np.mean(scores)),
                         *self._interval(batch, scores), *(counts[s] for s in CHAIN_SCORES)])
        return columns, self._resolved(batch, rows)

    def difficulty_correlation(self) -> tuple[list[str], list[list]]:
        """CRUXEval's input-output difficulty correlation per experiment: Pearson's r
        between a run's pass@1 on its ``input`` tasks and on its ``output`` tasks, over
        the runs that have both, with its 95% bootstrap interval over the runs (empty
        with fewer than two such runs or no variance)."""
        columns = ["model", "label", "runs", "r", "ci_low", "ci_high"]
        per_run: dict[tuple[ExperimentKey, int], dict[str, list[float]]] = defaultdict(
            lambda: defaultdict(list))
        for (experiment, task_id), value in self.task_pass1().items():
            task = self.tasks[task_id]
            if task["kind"] in ("input", "output"):
                per_run[(experiment, task["run_id"])][task["kind"]].append(value)
        rows = []
        for experiment in self.experiments():
            pairs = [(np.mean(kinds["input"]), np.mean(kinds["output"]))
                     for (e, _), kinds in sorted(per_run.items())
                     if e == experiment and "input" in kinds and "output" in kinds]
            if len(pairs) < 2:
                continue
            r = pearson(np.array([x for x, _ in pairs]), np.array([y for _, y in pairs]),
                        self.resamples, seed=self.seed)
            rows.append([*experiment, len(pairs), fraction(r.mean), fraction(r.low),
                         fraction(r.high)])
        return columns, rows

    def comparisons(self) -> tuple[list[str], list[list]]:
        """For every two experiments (two models, or one model's two labels: prompt
        styles, temperatures, ...), over the tasks both answered: pass@1 of each, their
        difference A − B with its 95% paired bootstrap interval, and P(A's pass@1 > B's)
        in bootstrap resamples of the tasks (CRUXEval §4)."""
        columns = ["model A", "label A", "model B", "label B", "tasks", "pass@1 A", "pass@1 B",
                   "difference", "ci_low", "ci_high", "P(A beats B)"]
        pass1 = self.task_pass1()
        experiments = self.experiments()
        batch = self._batch()
        rows = []
        for i, a in enumerate(experiments):
            for b in experiments[i + 1:]:
                shared = [t for t, _ in self._by_experiment[a] if (b, t) in pass1]
                if not shared:
                    continue
                xa = np.array([pass1[(a, t)] for t in shared])
                xb = np.array([pass1[(b, t)] for t in shared])
                ha, hb = batch.add(xa, keep=True), batch.add(xb, keep=True)
                hd = batch.add_difference(ha, hb)
                rows.append([*a, *b, len(shared), fraction(xa.mean()), fraction(xb.mean()),
                             fraction(xa.mean() - xb.mean()),
                             _Later(lambda hd=hd: fraction(batch.interval(hd).low)),
                             _Later(lambda hd=hd: fraction(batch.interval(hd).high)),
                             _Later(lambda ha=ha, hb=hb: round(batch.beats(ha, hb), 4))])
        return columns, self._resolved(batch, rows)

    def error_parts(self) -> tuple[list[str], list[list]]:
        """``error`` tasks scored as EXE scores them: the type alone (``error.type``), the
        message alone (``error.message``) and both together (``error``, as in "by
        kind"), from each verdict's ``type_correct`` / ``message_correct``."""
        columns = (["model", "label", "part", "tasks", "samples"] + [f"pass@{k}" for k in self.ks]
                   + ["ci_low", "ci_high", "unparseable", "fully solved", "unsolved"])
        batch = self._batch()
        rows = []
        for experiment, mine in self._by_experiment.items():
            groups = [vs for t, vs in mine if self.tasks[t]["kind"] == "error"]
            if not groups:
                continue
            for part, field in (("error.type", "type_correct"),
                                ("error.message", "message_correct"), ("error", "correct")):
                parts = [Tally(replace(v, correct=bool(getattr(v, field))) for v in g)
                         for g in groups]
                rows.append([*experiment, part] + self._pass_row(parts, batch))
        return columns, self._resolved(batch, rows)

    def summary(self) -> tuple[list[str], list[list]]:
        """The one table ``score`` prints by default: "by kind" with the columns a reader
        compares (model, label, kind, tasks, pass@k, ci_low, ci_high, unparseable), a
        pass@k column only where some task has k samples, a trivial kind named so
        (``exception (trivial)``: after ``all``, left out of it)."""
        columns, rows = self.by_kind()
        keep = ["model", "label", "kind", "tasks",
                *(f"pass@{k}" for k in self.ks
                  if any(r[columns.index(f"pass@{k}")] is not None for r in rows)),
                "ci_low", "ci_high", "unparseable"]
        kind, trivial = columns.index("kind"), columns.index("trivial")
        out = []
        for row in rows:
            row = list(row)
            if row[trivial]:
                row[kind] = f"{row[kind]} (trivial)"
            out.append([row[columns.index(c)] for c in keep])
        return keep, out

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        return [("by kind", *self.by_kind()), ("by difficulty", *self.by_difficulty()),
                ("coverage", *self.coverage()),
                ("incremental consistency", *self.consistency()),
                ("input output correlation", *self.difficulty_correlation()),
                ("paired comparison", *self.comparisons()),
                ("error parts", *self.error_parts())]

    def as_dict(self) -> dict:
        out: dict[str, Any] = {"scored": len(self.verdicts), "errors_skipped": self.errors,
                               "input_checks": self.input_checks,
                               "input_checks_reused": self.input_checks_reused, "stale": self.stale}
        for title, columns, rows in self.tables():
            out[title.replace(" ", "_")] = [dict(zip(columns, row)) for row in rows]
        return out


def _chain_order(task: dict) -> tuple:
    return (task.get("occurrence") or 0, task.get("var") or "", task["task_id"])


def _key_order(item: tuple) -> tuple:
    (kind, run_id, line), _ = item
    return (run_id, line if line is not None else -1, kind)
