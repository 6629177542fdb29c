"""The HTML report: one self-contained page of plots over a store, with the tables behind them.

Every number on the page comes from a named query (queries/*.sql) or, for the
statistical sections, from the scored answers of the ``scored_samples`` query through
the statistics ``steptrace score`` prints (engine/scoring/_summary.py: pass@1 with 95%
bootstrap intervals and n, coverage precision/recall/F1, REval's incremental
consistency, paired comparisons), so a reader can rerun any table with ``steptrace
query`` or ``steptrace score``. Accuracy by difficulty merges step buckets of fewer than
MIN_TASKS tasks into their neighbours (``merged_buckets``). Each table is collapsed
under its plot (``<details>``), so the page's height is that of its plots. Plots are
drawn by matplotlib (Agg, no display) as SVG and written inline: the page needs no
network, no script and no other file. A section whose tables the store lacks (no tasks,
predictions or scores yet) says which command makes them instead of failing.
"""

from __future__ import annotations

import bisect
import datetime as dt
import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from steptrace.predictions._experiments import experiment_name
from steptrace.analytics._queries import run_query
from steptrace.scoring._buckets import Bucket, step_bucket
from steptrace.scoring._stats import BootstrapBatch
from steptrace.scoring._summary import ScoreSummary, fraction
from steptrace.scoring._verdicts import Verdict
from steptrace.store._store import QueryResult, StoreError, connect, first_line
from steptrace.errors import InputError
from steptrace.corpus._text import user_file

PALETTE = ("#3b6ea5", "#e07b39", "#5a9e4b", "#b5483f", "#7d5ba6", "#8c6d31", "#c7549a")
MAX_METHODS = 12  # methods plotted per kind (by tasks); the table lists them all


def _all(result: QueryResult) -> QueryResult:
    """The whole result: most sections show every row of their query."""
    return result


@dataclass(frozen=True)
class Section:
    """One plot: the query behind it, the part of its result the plot and the table show
    (two sections may share one query), and how to draw those rows (None: nothing to draw)."""

    id: str
    title: str
    caption: str
    query: str
    draw: Callable[[QueryResult], Figure | None]
    select: Callable[[QueryResult], QueryResult] = _all
    # run the query once per task kind (its ``kind`` parameter), rows tagged with the kind
    per_kind: bool = False
    nothing: str = "the query returned no rows"  # why a section without rows has no plot


@dataclass
class ReportSummary:
    """What was written, for the CLI's summary and the tests: the plots drawn and, for
    each section without one, the reason the page gives."""

    out: str
    runs: int
    programs: int
    plots: list[str] = field(default_factory=list)         # ids of the plots drawn
    empty: dict[str, str] = field(default_factory=dict)    # section id → why it has none
    bytes: int = 0

    def as_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [("report", self.out), ("runs", self.runs),
                                          ("programs", self.programs),
                                          ("plots", ", ".join(self.plots) or "-")]
        rows += [(f"no plot: {section}", reason) for section, reason in self.empty.items()]
        return rows + [("bytes", self.bytes)]


# ---------------------------------------------------------------- drawing
def _figure(width: float = 7.0, height: float = 3.2) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _value_label(value: float, fraction: bool) -> str:
    """The number written on a bar: a 0.0 pass@1 is then visible; a missing one (NaN, no
    bar) gets no label, so "wrong every time" and "no such task" never look alike."""
    if math.isnan(value):
        return ""
    return f"{value:.2f}" if fraction else f"{value:g}"


def _bars(labels: list[str], series: dict[str, list[float]], ylabel: str,
          horizontal: bool = False, fraction: bool = False) -> Figure:
    """Grouped bars with their values written on them: a group per label, a bar per
    series. ``fraction``: values are shares in [0, 1] (pass@1), else whole counts."""
    height = max(3.2, 0.28 * len(labels) * max(1, len(series)) + 1.2) if horizontal else 3.2
    figure = _figure(7.0, height)
    axes = figure.subplots()
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        positions = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        draw = axes.barh if horizontal else axes.bar
        bars = draw(positions, values, width, label=name, color=PALETTE[i % len(PALETTE)])
        axes.bar_label(bars, [_value_label(v, fraction) for v in values], padding=2,
                       fontsize="x-small")
    ticks = range(len(labels))
    values_axis = axes.xaxis if horizontal else axes.yaxis
    if fraction:
        (axes.set_xlim if horizontal else axes.set_ylim)(0, 1.1)
    else:
        values_axis.set_major_locator(MaxNLocator(integer=True))
        axes.margins(**{"x" if horizontal else "y": 0.12})
    if horizontal:
        axes.set_yticks(list(ticks), labels)
        axes.invert_yaxis()
        axes.set_xlabel(ylabel)
    else:
        axes.set_xticks(list(ticks), labels, rotation=30 if len(labels) > 6 else 0,
                        ha="right" if len(labels) > 6 else "center")
        axes.set_ylabel(ylabel)
    if len(series) > 1:
        axes.legend(frameon=False, fontsize="small")
    return figure


def _status(result: QueryResult) -> Figure | None:
    rows = _dicts(result)
    return _bars([r["status"] for r in rows], {"runs": [r["runs"] for r in rows]}, "runs")


def _bucket(low: int, high: int) -> str:
    """A query row's bucket [low, high) as score's table labels it: ``8-15``."""
    return Bucket(low, high).label


def _steps(result: QueryResult) -> Figure | None:
    rows = _dicts(result)
    measures = list(dict.fromkeys(r["measure"] for r in rows))
    figure = _figure(7.0, 3.0 * len(measures))
    for axes, measure in zip(figure.subplots(len(measures), 1, squeeze=False)[:, 0], measures):
        mine = [r for r in rows if r["measure"] == measure]
        bars = axes.bar(range(len(mine)), [r["runs"] for r in mine], color=PALETTE[0])
        axes.bar_label(bars, padding=2, fontsize="x-small")
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.margins(y=0.12)
        axes.set_xticks(range(len(mine)), [_bucket(r["bucket_from"], r["bucket_to"])
                                           for r in mine], rotation=30, ha="right")
        axes.set_title(measure.replace("_", " "), fontsize="medium")
        axes.set_ylabel("runs")
    return figure


def _tasks(result: QueryResult) -> Figure | None:
    rows = _dicts(result)
    return _bars([r["kind"] for r in rows], {"tasks": [r["tasks"] for r in rows]}, "tasks")


def _experiment(row: dict) -> str:
    """The name of a row's experiment in legends and titles: the model and its label, as
    one model may have been asked in several ways."""
    return experiment_name(row["model"], row["label"])


def _accuracy_method(result: QueryResult) -> Figure | None:
    """One panel per task kind: pass@1 by method, the MAX_METHODS methods with most tasks
    of the kind, a bar per experiment."""
    rows = [r for r in _dicts(result) if r["pass_at_1"] is not None]
    if not rows:
        return None
    kinds = sorted({r["kind"] for r in rows})
    panels = []
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        tasks: dict[str, int] = {}
        for r in mine:
            tasks[r["method"]] = max(tasks.get(r["method"], 0), r["tasks"])
        panels.append((kind, sorted(tasks, key=lambda m: (-tasks[m], m))[:MAX_METHODS], mine))
    experiments = sorted({_experiment(r) for r in rows})
    heights = [0.2 * len(top) * len(experiments) + 0.3 for _, top, _ in panels]
    gap, top_margin, bottom_margin = 0.55, 0.3, 0.55  # inches
    total = sum(heights) + gap * (len(panels) - 1) + top_margin + bottom_margin
    # fixed margins, not the constrained layout: its solution for panels of unequal
    # heights varies in the last bits between runs, and the page must be the same bytes
    figure = Figure(figsize=(7.0, total))
    figure.subplots_adjust(left=0.2, right=0.95, top=1 - top_margin / total,
                           bottom=bottom_margin / total,
                           hspace=gap / (sum(heights) / len(panels)))
    grid = figure.subplots(len(panels), 1, squeeze=False,
                           gridspec_kw={"height_ratios": heights})[:, 0]
    for axes, (kind, top, mine) in zip(grid, panels):
        values = {(_experiment(r), r["method"]): r["pass_at_1"] for r in mine}
        width = 0.8 / len(experiments)
        for i, e in enumerate(experiments):
            positions = [y + (i - (len(experiments) - 1) / 2) * width for y in range(len(top))]
            shown = [float(values.get((e, m), math.nan)) for m in top]
            bars = axes.barh(positions, shown, width, label=e, color=PALETTE[i % len(PALETTE)])
            axes.bar_label(bars, [_value_label(v, True) for v in shown], padding=2,
                           fontsize="x-small")
        axes.set_yticks(range(len(top)), top, fontsize="small")
        axes.invert_yaxis()
        axes.set_xlim(0, 1.1)
        axes.set_title(f"{kind} tasks", fontsize="medium")
    if len(experiments) > 1:
        grid[0].legend(frameon=False, fontsize="x-small", loc="lower right")
    grid[-1].set_xlabel("pass@1")
    return figure


# ---------------------------------------------------------------- statistics of scored samples
# The statistical sections read the scored_samples query (one row per scored answer) and
# compute what `steptrace score` prints from the same verdicts (engine/scoring/_summary.py):
# pass@1 with its 95% bootstrap interval and n, coverage precision/recall/F1, REval's
# incremental consistency, paired comparisons. Every share is a fraction; every interval
# two numbers, ci_low and ci_high (docs/guides/predictions-and-scoring.md, "Numbers").
MIN_TASKS = 10  # a difficulty bucket with fewer tasks is merged into its neighbour
# id(result) -> (result, its summary): the result is kept, so its id is not another's
# while the entry lives (the report clears it when it starts and ends)
_SUMMARIES: dict[int, tuple[QueryResult, ScoreSummary]] = {}


def _summary(result: QueryResult) -> ScoreSummary:
    """The scored_samples rows as steptrace score's summary (computed once per result)."""
    found = _SUMMARIES.get(id(result))
    if found is not None and found[0] is result:
        return found[1]
    tasks: dict[str, dict] = {}
    verdicts: list[Verdict] = []
    for row in _dicts(result):
        tasks.setdefault(row["task_id"], {
            "task_id": row["task_id"], "kind": row["kind"], "run_id": row["run_id"],
            "line": row["line"], "var": row["var"], "occurrence": row["occurrence"],
            "answer": row["answer"], "line_steps": row["line_steps"],
            "loop_nesting": row["loop_nesting"]})
        verdicts.append(Verdict(row["task_id"], row["model"], row["label"],
                                row["sample_index"], row["kind"], bool(row["parsed"]),
                                bool(row["correct"])))
    summary = ScoreSummary((1,), tasks, verdicts)
    _SUMMARIES[id(result)] = (result, summary)
    return summary


def _table(columns: list[str], rows: list[list]) -> QueryResult:
    return QueryResult(list(columns), [tuple(r) for r in rows])


def _kind_table(result: QueryResult) -> QueryResult:
    """score's "by kind" table: pass@1 with ci_low, ci_high and n (tasks) per experiment
    and kind (and all kinds)."""
    columns, rows = _summary(result).by_kind()
    keep = [i for i, c in enumerate(columns) if c != "trace distance"]
    return _table([columns[i] for i in keep], [[r[i] for i in keep] for r in rows])


def merged_buckets(counts: list[tuple[int, int, int]], minimum: int = MIN_TASKS
                   ) -> list[tuple[int, int]]:
    """Difficulty buckets with few tasks merged: ``counts`` is (low, high, tasks) of the
    step buckets that have tasks, in order; neighbours are joined from the lowest up until
    a group holds at least ``minimum`` tasks, and a last group still short of it joins
    the one before. Returns the groups' (low, high): the buckets [low, high). A store with
    fewer than ``minimum`` tasks in all has one group (whose points are marked)."""
    groups: list[list[int]] = []
    current: list[int] | None = None
    for low, high, tasks in sorted(counts):
        if current is None:
            current = [low, high, 0]
        current[1], current[2] = high, current[2] + tasks
        if current[2] >= minimum:
            groups.append(current)
            current = None
    if current is not None:
        if groups:
            groups[-1][1], groups[-1][2] = current[1], groups[-1][2] + current[2]
        else:
            groups.append(current)
    return [(low, high) for low, high, _ in groups]


def _difficulty_table(result: QueryResult) -> QueryResult:
    """pass@1 with ci_low, ci_high and n per experiment, kind and line-step bucket, the
    buckets with fewer than MIN_TASKS tasks (of the experiment, every kind) merged into
    their neighbours (``merged_buckets``); ``few`` marks a point of fewer than MIN_TASKS
    tasks of its kind, which the plot draws hollow."""
    summary = _summary(result)
    columns = ["model", "label", "kind", "bucket_from", "bucket_to", "bucket", "tasks",
               "samples", "pass@1", "ci_low", "ci_high", "few"]
    trivial = summary.trivial_kinds
    batch = BootstrapBatch(summary.resamples, seed=summary.seed)
    pending = []
    for experiment in summary.experiments():
        mine = [(t, vs) for t, vs in summary._by_experiment[experiment]
                if summary.tasks[t].get("line_steps") is not None]
        steps = {t: step_bucket(int(summary.tasks[t]["line_steps"])) for t, _ in mine}
        counts: dict[Bucket, int] = {}
        for bucket in steps.values():
            counts[bucket] = counts.get(bucket, 0) + 1
        groups = merged_buckets([(b.low, b.high, n) for b, n in counts.items()])
        lows = [low for low, _ in groups]
        # each task once into its (kind, group) and, unless its kind is trivial, ("all",
        # group): task id order, as the lists are
        cells: dict[tuple[str, int], list[list[Verdict]]] = {}
        for t, vs in mine:
            group = bisect.bisect_right(lows, steps[t].low) - 1
            kind = summary.tasks[t]["kind"]
            cells.setdefault((kind, group), []).append(vs)
            if kind not in trivial:
                cells.setdefault(("all", group), []).append(vs)
        kinds = sorted({kind for kind, _ in cells if kind != "all"})
        for kind in kinds + ["all"]:
            for group, (low, high) in enumerate(groups):
                tasks = cells.get((kind, group))
                if not tasks:
                    continue
                firsts = [sum(v.correct for v in vs) / len(vs) for vs in tasks]
                pending.append(([*experiment, kind, low, high, _bucket(low, high), len(tasks),
                                 sum(len(vs) for vs in tasks), fraction(np.mean(firsts))],
                                batch.add(firsts), len(tasks)))
    batch.run()
    rows = [[*head, fraction(batch.interval(h).low), fraction(batch.interval(h).high),
             "few" if n < MIN_TASKS else ""] for head, h, n in pending]
    return _table(columns, rows)


def _coverage_table(result: QueryResult) -> QueryResult:
    return _table(*_summary(result).coverage())


def _consistency_table(result: QueryResult) -> QueryResult:
    return _table(*_summary(result).consistency())


def _comparison_table(result: QueryResult) -> QueryResult:
    return _table(*_summary(result).comparisons())


def _errors(values: list[float], lows: list, highs: list) -> np.ndarray:
    """matplotlib's yerr: distances from each value down to ci_low and up to ci_high."""
    return np.array([[v - lo if lo is not None else 0.0 for v, lo in zip(values, lows)],
                     [hi - v if hi is not None else 0.0 for v, hi in zip(values, highs)]])


def _interval_bars(axes, labels: list[str], series: dict[str, list[dict]], value: str) -> None:
    """Grouped bars of ``value`` per label and series, each with its 95% interval as an
    error bar (group ``errorbars``: a path per interval) and its n written under the
    value (text group ``n-labels``: one per bar)."""
    width = 0.8 / max(1, len(series))
    for i, (name, rows) in enumerate(series.items()):
        present = [(x, r) for x, r in enumerate(rows) if r is not None]
        positions = [x + (i - (len(series) - 1) / 2) * width for x, _ in present]
        values = [r[value] for _, r in present]
        axes.bar(positions, values, width, label=name, color=PALETTE[i % len(PALETTE)])
        errors = axes.errorbar(positions, values,
                               yerr=_errors(values, [r["ci_low"] for _, r in present],
                                            [r["ci_high"] for _, r in present]),
                               fmt="none", ecolor="#222", capsize=3, linewidth=1)
        errors.lines[2][0].set_gid(f"errorbars-{i}")
        for position, (_, r) in zip(positions, present):
            axes.text(position, -0.02, f"{r[value]:.2f}\nn={r['n']}", ha="center", va="top",
                      fontsize="x-small", gid=f"n-label-{i}-{position:.3f}")
    axes.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 6 else 0,
                    ha="right" if len(labels) > 6 else "center")
    axes.tick_params(axis="x", pad=24)
    axes.set_ylim(0, 1.05)
    if len(series) > 1:
        axes.legend(frameon=False, fontsize="small")


def _interval_plot(rows: list[dict], label: str, value: str, n: str, ylabel: str,
                   order: list[str] | None = None) -> Figure | None:
    """Bars of ``value`` by ``label`` (a series per experiment) with intervals and n."""
    rows = [r for r in rows if r.get(value) is not None]
    if not rows:
        return None
    labels = order or list(dict.fromkeys(r[label] for r in rows))
    experiments = sorted({_experiment(r) for r in rows})
    series = {e: [next(({**r, "n": r[n]} for r in rows
                        if _experiment(r) == e and r[label] == x), None) for x in labels]
              for e in experiments}
    figure = _figure(7.0, 3.4)
    axes = figure.subplots()
    _interval_bars(axes, labels, series, value)
    axes.set_ylabel(ylabel)
    return figure


def _accuracy_kind(result: QueryResult) -> Figure | None:
    return _interval_plot(_dicts(result), "kind", "pass@1", "tasks", "pass@1 (95% CI)")


def _accuracy_difficulty(result: QueryResult) -> Figure | None:
    """One panel per experiment: pass@1 by merged line-step bucket, a line per kind, each
    point with its 95% interval (error bar) and n; a point of fewer than MIN_TASKS
    tasks is hollow."""
    rows = [r for r in _dicts(result) if r["pass@1"] is not None and r["kind"] != "all"]
    if not rows:
        return None
    models = sorted({_experiment(r) for r in rows})
    every_kind = sorted({r["kind"] for r in rows})  # one colour per kind in every panel
    figure = _figure(7.0, 2.9 * len(models))
    panels = figure.subplots(len(models), 1, squeeze=False)[:, 0]
    for panel, (axes, model) in enumerate(zip(panels, models)):
        mine = [r for r in rows if _experiment(r) == model]
        buckets = sorted({(r["bucket_from"], r["bucket_to"]) for r in mine})
        kinds = sorted({r["kind"] for r in mine})
        width = 0.6 / max(1, len(kinds))
        for i, kind in enumerate(kinds):
            points = sorted((buckets.index((r["bucket_from"], r["bucket_to"])), r)
                            for r in mine if r["kind"] == kind)
            xs = [x + (i - (len(kinds) - 1) / 2) * width for x, _ in points]
            ys = [r["pass@1"] for _, r in points]
            color = PALETTE[every_kind.index(kind) % len(PALETTE)]
            errors = axes.errorbar(xs, ys, yerr=_errors(ys, [r["ci_low"] for _, r in points],
                                                        [r["ci_high"] for _, r in points]),
                                   fmt="-", color=color, capsize=3, linewidth=1, label=kind)
            errors.lines[2][0].set_gid(f"errorbars-{panel}-{i}")
            for x, (_, r) in zip(xs, points):
                axes.plot([x], [r["pass@1"]], marker="o", color=color,
                          markerfacecolor="white" if r["few"] else color)
                axes.text(x, -0.12, f"n={r['tasks']}", ha="center", va="top",
                          fontsize="x-small", gid=f"n-label-{panel}-{i}-{x:.3f}")
        axes.set_xticks(range(len(buckets)), [_bucket(*b) for b in buckets])
        axes.tick_params(axis="x", pad=14)
        axes.set_ylim(-0.05, 1.05)
        axes.set_title(model, fontsize="medium")
        axes.set_ylabel("pass@1 (95% CI)")
        axes.set_xlabel(f"line steps of the task's run (buckets of < {MIN_TASKS} tasks "
                        "merged; hollow: < 10 tasks of the kind)")
        axes.legend(frameon=False, fontsize="small")
    return figure


def _coverage(result: QueryResult) -> Figure | None:
    """Precision, recall and F1 per experiment, each with its interval and n."""
    rows = []
    for r in _dicts(result):
        for measure in ("precision", "recall", "f1"):
            rows.append({"model": r["model"], "label": r["label"], "measure": measure,
                         "value": r[measure], "ci_low": r[f"{measure} ci_low"],
                         "ci_high": r[f"{measure} ci_high"], "questions": r["questions"]})
    return _interval_plot(rows, "measure", "value", "questions", "coverage (95% CI)",
                          ["precision", "recall", "f1"])


def _consistency(result: QueryResult) -> Figure | None:
    rows = [{**r, "what": "incremental consistency"} for r in _dicts(result)]
    return _interval_plot(rows, "what", "IC", "chains", "IC (95% CI)")


def _comparison(result: QueryResult) -> Figure | None:
    """A forest plot: per pair of experiments the difference of pass@1 (A − B) over the
    tasks both answered, with its paired 95% interval and n."""
    rows = _dicts(result)
    if not rows:
        return None
    figure = _figure(7.0, max(2.2, 0.45 * len(rows) + 1.2))
    axes = figure.subplots()
    ys = list(range(len(rows)))
    diffs = [r["difference"] for r in rows]
    errors = axes.errorbar(diffs, ys, xerr=_errors(diffs, [r["ci_low"] for r in rows],
                                                   [r["ci_high"] for r in rows]),
                           fmt="o", color=PALETTE[0], capsize=3, linewidth=1)
    errors.lines[2][0].set_gid("errorbars-0")
    for y, r in zip(ys, rows):
        axes.text(1.08, y, f"n={r['tasks']}  P(A>B)={r['P(A beats B)']:.2f}", va="center",
                  fontsize="x-small", gid=f"n-label-0-{y}")
    axes.axvline(0, color="#888", linewidth=0.8)
    axes.set_yticks(ys, [f"{experiment_name(r['model A'], r['label A'])} − "
                         f"{experiment_name(r['model B'], r['label B'])}" for r in rows],
                    fontsize="small")
    axes.invert_yaxis()
    axes.set_xlim(-1.05, 1.05)
    axes.set_xlabel("difference of pass@1, A − B (paired 95% CI)")
    return figure


SECTIONS = (
    Section("status", "Runs by status", "Runs of the store by final status.",
            "runs_by_status", _status),
    Section("steps", "Step distributions",
            "Runs per bucket of line steps and of instruction steps (powers of two).",
            "step_distribution", _steps),
    Section("tasks", "Tasks by kind", "Prediction tasks of the store by kind.",
            "tasks_by_kind", _tasks),
    Section("accuracy-kind", "Accuracy by kind",
            "pass@1 of each experiment (model and label) by task kind, with its 95% "
            "bootstrap interval over the tasks (error bar) and n, the tasks scored.",
            "scored_samples", _accuracy_kind, _kind_table),
    Section("accuracy-difficulty", "Accuracy by difficulty",
            f"pass@1 by difficulty bucket (line steps of the task's run), a line per kind, "
            f"with 95% intervals and n; buckets of fewer than {MIN_TASKS} tasks are merged "
            f"into their neighbours, a point of fewer than {MIN_TASKS} tasks of its kind is "
            "hollow (and marked few in the table).",
            "scored_samples", _accuracy_difficulty, _difficulty_table),
    Section("coverage", "Coverage prediction",
            "REval's precision, recall and F1 of coverage answers (positive: the line "
            "runs), with 95% intervals and n, the questions.",
            "scored_samples", _coverage, _coverage_table, nothing="no coverage tasks scored"),
    Section("consistency", "Incremental consistency",
            "REval's incremental consistency over its question chains (coverage, state, "
            "next line, output about one line: tasks --chains), with its 95% interval and "
            "n, the chains.",
            "scored_samples", _consistency, _consistency_table,
            nothing="no question chains scored (make tasks with --chains)"),
    Section("comparison", "Paired comparison",
            "For every two experiments, over the tasks both answered: the difference of "
            "pass@1 (A − B) with its paired 95% bootstrap interval, n and P(A beats B).",
            "scored_samples", _comparison, _comparison_table,
            nothing="fewer than two experiments with shared tasks"),
    Section("accuracy-method", "Accuracy by standard-library method",
            f"pass@1 on tasks whose program calls each str/list/dict method "
            f"(CRUXEval Appendix A.3), a panel per task kind; the {MAX_METHODS} methods "
            f"with most tasks of the kind.",
            "accuracy_by_method", _accuracy_method, per_kind=True),
)


# ---------------------------------------------------------------- the page
def _dicts(result: QueryResult) -> list[dict]:
    return [dict(zip(result.columns, row)) for row in result.rows]


def svg(figure: Figure, salt: str) -> str:
    """The figure as an inline ``<svg>`` element: text as paths (no fonts needed), no
    date, fixed hash salt (same bytes every time), and every id prefixed with ``salt``:
    matplotlib names elements figure_1, axes_1 and glyphs DejaVuSans-48 in every SVG, and
    ids must be unique across the page the figures share."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": salt}):
        figure.savefig(buffer, format="svg",
                       metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    return _scope_ids(text[text.index("<svg"):], salt)


_ID_OR_REFERENCE = re.compile(r'(\bid="|\bhref="#|url\(#)([^")]+)')


def _scope_ids(text: str, prefix: str) -> str:
    """``text`` with each id it defines, and each reference to one, as ``prefix-id``."""
    defined = set(re.findall(r'\bid="([^"]+)"', text))
    return _ID_OR_REFERENCE.sub(
        lambda m: m[1] + (f"{prefix}-{m[2]}" if m[2] in defined else m[2]), text)


def table(result: QueryResult) -> str:
    """The rows as an HTML table, every value escaped; numbers right-aligned."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in result.columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in result.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: object) -> str:
    if value is None:
        return "<td></td>"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    opening = '<td class="num">' if number else "<td>"
    return f"{opening}{html.escape(str(value))}</td>"


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem; color: #222; }
h1 { margin-bottom: .2rem; } .meta { color: #555; margin-top: 0; }
nav a { margin-right: 1rem; } section { margin: 2.5rem 0; }
figure.plot { margin: 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .9rem; }
table { border-collapse: collapse; margin-top: .8rem; font-size: .85rem; }
th, td { border: 1px solid #ccc; padding: .15rem .5rem; text-align: left; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
details { margin-top: .6rem; } summary { cursor: pointer; color: #3b6ea5; }
.empty { color: #8a4b00; background: #fff6e5; padding: .5rem .8rem; border-radius: 4px; }
"""


def _section_html(section: Section, result: QueryResult | None, figure: Figure | None,
                  reason: str | None) -> str:
    parts = [f'<section id="{section.id}"><h2>{html.escape(section.title)}</h2>']
    if figure is not None:
        parts.append(f'<figure class="plot" id="plot-{section.id}">'
                     f"{svg(figure, f'steptrace-{section.id}')}"
                     f"<figcaption>{html.escape(section.caption)} Query: "
                     f"<code>{section.query}</code>.</figcaption></figure>")
    if reason is not None:
        parts.append(f'<p class="empty">No plot: {html.escape(reason)}</p>')
    if result is not None and result.rows:
        rows = len(result.rows)
        parts.append(f"<details><summary>Table: {rows} row{'s' if rows != 1 else ''}"
                     f"</summary>{table(result)}</details>")
    return "".join(parts) + "</section>"


def _counts(db: str | Path) -> tuple[int, int]:
    con = connect(db, read_only=True)
    try:
        return (con.execute("SELECT count(*) FROM runs").fetchall()[0][0],
                con.execute("SELECT count(*) FROM programs").fetchall()[0][0])
    finally:
        con.close()


def write_report(db: str | Path, out: str | Path,
                 now: dt.datetime | None = None) -> ReportSummary:
    """Run the queries behind every section on ``db`` and write the page to ``out``.
    ``now`` is the time the page says it was made (default: the current time); with the
    same store and ``now`` the page is the same bytes."""
    if not Path(db).exists():
        raise StoreError(f"database not found: {db}")
    out = Path(out)
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: no directory {out.parent}")
    runs, programs = _counts(db)
    summary = ReportSummary(str(out), runs, programs)
    results: dict[str, QueryResult | StoreError] = {}
    sections = []
    _SUMMARIES.clear()
    try:
        for section in SECTIONS:
            if section.query not in results:  # sections share scored_samples: run it once
                results[section.query] = (_run_per_kind(section.query, db) if section.per_kind
                                          else _run(section.query, db))
            sections.append(_render_section(section, results[section.query], summary))
    finally:
        _SUMMARIES.clear()
    page = _page(db, runs, programs, sections, now or dt.datetime.now(dt.timezone.utc))
    with user_file(out):
        out.write_text(page, encoding="utf-8")
    summary.bytes = len(page.encode("utf-8"))
    return summary


def _run(name: str, db: str | Path, params: dict[str, str] | None = None
         ) -> QueryResult | StoreError:
    """The query's result, or the one-line error of a store without its tables (which
    the section shows instead of a plot)."""
    try:
        return run_query(name, db=db, params=params)
    except StoreError as exc:
        return exc


def _run_per_kind(name: str, db: str | Path) -> QueryResult | StoreError:
    """The query run once per task kind of the store (its ``kind`` parameter), its rows
    after a leading ``kind`` column, in kind order."""
    kinds = _run("tasks_by_kind", db)
    if isinstance(kinds, StoreError):
        return kinds
    columns: list[str] = []
    rows: list[tuple] = []
    for kind in sorted(row[0] for row in kinds.rows):
        found = _run(name, db, {"kind": kind})
        if isinstance(found, StoreError):
            return found
        columns = ["kind"] + found.columns
        rows += [(kind, *row) for row in found.rows]
    return QueryResult(columns, rows)


def _render_section(section: Section, found: QueryResult | StoreError,
                    summary: ReportSummary) -> str:
    """The section's HTML; records in ``summary`` whether it has a plot and why not."""
    result = section.select(found) if isinstance(found, QueryResult) else None
    figure, reason = None, None
    if result is None:
        reason = f"no data: {first_line(found)}"
    elif not result.rows:
        reason = f"no data: {section.nothing}"
    else:
        figure = section.draw(result)
        reason = None if figure is not None else "no scored predictions to plot"
    if figure is not None:
        summary.plots.append(section.id)
    else:
        summary.empty[section.id] = reason
    return _section_html(section, result, figure, reason)


def _page(db: str | Path, runs: int, programs: int, sections: list[str],
          now: dt.datetime) -> str:
    made = now.strftime("%Y-%m-%d %H:%M %Z").strip()
    links = "".join(f'<a href="#{s.id}">{html.escape(s.title)}</a>' for s in SECTIONS)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\"><title>steptrace report</title>"
            f"<style>{STYLE}</style></head><body><h1>steptrace report</h1>"
            f"<p class=\"meta\">Store <code>{html.escape(str(db))}</code>: {runs} runs of "
            f"{programs} programs. Made {html.escape(made)}.</p><nav>{links}</nav>"
            + "".join(sections) + "</body></html>\n")
