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
import os
import re
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb
import matplotlib
import matplotlib.colors
import matplotlib.lines
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from steptrace.predictions._experiments import experiment_name
from steptrace.analytics._drawing import Drawing
from steptrace.analytics._failures import anchor, cells as failure_cells, report_failures_page
from steptrace.analytics._queries import run_query_on
from steptrace.analytics._results_json import write_results
from steptrace.analytics._report_filter import ReportFilter, open_filtered
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
    failures: str | None = None  # the failures page (None: no wrong answer scored)
    results: list[str] = field(default_factory=list)  # the results.json files written

    def as_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [("report", self.out), ("runs", self.runs),
                                          ("programs", self.programs),
                                          ("plots", ", ".join(self.plots) or "-")]
        rows += [(f"no plot: {section}", reason) for section, reason in self.empty.items()]
        return rows + [("bytes", self.bytes), ("failures", self.failures or "-"),
                       ("results", ", ".join(self.results) or "-")]


# ---------------------------------------------------------------- drawing
# Every figure is drawn to be read at any size of store (issue 36: all 18 kinds and five
# experiments made legends spill over the next panels and labels overlap): one message
# per plot, small multiples (a panel per experiment, kind or measure) in a grid, a
# legend only above the panels (a figure legend, outside every axes), numbers written in
# a column of their own at the right of each panel (never on the bars), tick labels
# turned upright when there are many. tests/analytics/test_report_large.py checks in
# Chromium that no two texts overlap and none leaves its figure or enters another panel.
FONT = 7.5            # points: every text written on a plot
ROW = 0.2             # inches per row of a horizontal panel
NUMBERS_FROM = 1.04   # data x where a panel's column of numbers starts (values end at 1)
SPAN = 1.7            # a pass@1 panel's x axis: 0 to SPAN, the numbers in (1, SPAN)


def _figure(width: float = 7.0, height: float = 3.2) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _color(index: int, count: int) -> str:
    """The index-th of ``count`` series' colours: the palette, or tab20 beyond it."""
    if count <= len(PALETTE):
        return PALETTE[index % len(PALETTE)]
    return matplotlib.colors.to_hex(matplotlib.colormaps["tab20"](index % 20))


@dataclass(frozen=True)
class Margins:
    """A grid's fixed margins and gaps, in inches: the two largest figures (a panel per
    kind) are laid out by these instead of matplotlib's constrained layout, whose passes
    over every tick label took most of the report's drawing time. Each is sized for the
    texts the figure writes there (tests/analytics/test_report_large.py checks none
    overlaps); the legend goes in ``top``."""

    left: float
    right: float
    top: float
    bottom: float
    wspace: float
    hspace: float


def _fixed_figure(panels: int, columns: int, panel_height: float, margins: Margins,
                  width: float = 7.5) -> Figure:
    """A figure for a grid of ``panels`` laid out by ``margins`` (no layout engine)."""
    rows = math.ceil(panels / max(1, min(columns, panels)))
    columns = max(1, min(columns, panels))
    height = margins.top + margins.bottom + rows * panel_height + (rows - 1) * margins.hspace
    figure = Figure(figsize=(width, height))
    panel_width = (width - margins.left - margins.right
                   - (columns - 1) * margins.wspace) / columns
    figure.subplots_adjust(left=margins.left / width, right=1 - margins.right / width,
                           top=1 - margins.top / height, bottom=margins.bottom / height,
                           wspace=margins.wspace / panel_width,
                           hspace=margins.hspace / panel_height)
    return figure


def _grid(figure: Figure, panels: int, columns: int, **kwargs) -> list:
    """``panels`` axes in a grid of ``columns``; the grid's unused cells removed."""
    columns = max(1, min(columns, panels))
    rows = math.ceil(panels / columns)
    grid = figure.subplots(rows, columns, squeeze=False, **kwargs).ravel().tolist()
    for extra in grid[panels:]:
        figure.delaxes(extra)
    return grid[:panels]


def _outer_labels(grid: list, columns: int) -> None:
    """Tick labels only where a grid of shared axes needs them: x on a panel with none
    below it, y in the first column (fewer texts: a page that draws faster)."""
    for i, axes in enumerate(grid):
        axes.tick_params(axis="x", labelbottom=i + columns >= len(grid))
        axes.tick_params(axis="y", labelleft=i % columns == 0)


def _tick_labels(axes, labels: list[str]) -> None:
    """x tick labels, upright (rotated 90°) when more than 6, so none overlaps another."""
    many = len(labels) > 6
    axes.set_xticks(range(len(labels)), labels, rotation=90 if many else 0,
                    fontsize=FONT)


def _counts_bars(labels: list[str], counts: list[int], xlabel: str) -> Figure:
    """Horizontal bars of whole counts, a bar per label, each count written after its
    bar inside the axes (room kept by the x margin)."""
    figure = _figure(7.0, max(1.6, ROW * len(labels) + 0.9))
    axes = figure.subplots()
    bars = axes.barh(range(len(labels)), counts, 0.7, color=PALETTE[0])
    axes.bar_label(bars, [f"{c:,}" for c in counts], padding=2, fontsize=FONT)
    axes.set_yticks(range(len(labels)), labels, fontsize=FONT)
    axes.invert_yaxis()
    axes.set_xlim(0, max(counts + [1]) * 1.2)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(xlabel)
    return figure


def _status(result: QueryResult) -> Figure | None:
    rows = _dicts(result)
    return _counts_bars([r["status"] for r in rows], [r["runs"] for r in rows], "runs")


def _bucket(low: int, high: int) -> str:
    """A query row's bucket [low, high) as score's table labels it: ``8-15``."""
    return Bucket(low, high).label


def _steps(result: QueryResult) -> Figure | None:
    """A panel per measure (line steps, instruction steps): runs per bucket."""
    rows = _dicts(result)
    measures = list(dict.fromkeys(r["measure"] for r in rows))
    figure = _figure(7.0, 3.0 * len(measures))
    for axes, measure in zip(_grid(figure, len(measures), 1), measures):
        mine = [r for r in rows if r["measure"] == measure]
        axes.bar(range(len(mine)), [r["runs"] for r in mine], color=PALETTE[0])
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        _tick_labels(axes, [_bucket(r["bucket_from"], r["bucket_to"]) for r in mine])
        axes.set_title(measure.replace("_", " "), fontsize="medium")
        axes.set_ylabel("runs")
    return figure


def _tasks(result: QueryResult) -> Figure | None:
    rows = _dicts(result)
    return _counts_bars([r["kind"] for r in rows], [r["tasks"] for r in rows], "tasks")


def _experiment(row: dict) -> str:
    """The name of a row's experiment in legends and titles: the model and its label, as
    one model may have been asked in several ways."""
    return experiment_name(row["model"], row["label"])


LEGEND_ROW = 0.2  # inches per row of a legend above the panels


def _legend_height(names: int) -> float:
    return LEGEND_ROW * math.ceil(names / 3) if names > 1 else 0.0


def _legend(figure: Figure, names: list[str]) -> None:
    """One legend above every panel (outside them all): a marker per experiment, three a
    row; in a constrained figure it takes its room, in a fixed one the top margin's."""
    handles = [matplotlib.lines.Line2D([], [], color=_color(i, len(names)), marker="o",
                                       linewidth=1) for i in range(len(names))]
    fixed = figure.get_layout_engine() is None
    figure.legend(handles, names, loc="upper center" if fixed else "outside upper center",
                  bbox_to_anchor=(0.5, 1.0) if fixed else None, ncols=min(3, len(names)),
                  frameon=False, fontsize=FONT, borderaxespad=0.2)


def _accuracy_method(result: QueryResult) -> Figure | None:
    """A panel per task kind: pass@1 by method (the MAX_METHODS methods with most tasks
    of the kind), a dot per experiment; one legend above the panels."""
    rows = [r for r in _dicts(result) if r["pass_at_1"] is not None]
    if not rows:
        return None
    kinds = sorted({r["kind"] for r in rows})
    experiments = sorted({_experiment(r) for r in rows})
    panels = []
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        tasks: dict[str, int] = {}
        for r in mine:
            tasks[r["method"]] = max(tasks.get(r["method"], 0), r["tasks"])
        panels.append((kind, sorted(tasks, key=lambda m: (-tasks[m], m))[:MAX_METHODS], mine))
    tallest = max(len(top) for _, top, _ in panels)
    columns = 2 if len(panels) > 1 else 1
    # y: method names (up to 12 characters); x: 0.0 to 1.0 under the bottom panels
    figure = _fixed_figure(len(panels), columns, ROW * tallest + 0.2, Margins(
        left=0.95, right=0.15, top=0.35 + _legend_height(len(experiments)), bottom=0.55,
        wspace=1.0, hspace=0.45))
    offsets = np.linspace(-0.3, 0.3, len(experiments)) if len(experiments) > 1 else [0.0]
    grid = _grid(figure, len(panels), columns, sharex=True)
    for axes, (kind, top, mine) in zip(grid, panels):
        values = {(_experiment(r), r["method"]): r["pass_at_1"] for r in mine}
        for i, e in enumerate(experiments):
            shown = [(y + offsets[i], float(values[(e, m)])) for y, m in enumerate(top)
                     if (e, m) in values]
            axes.plot([v for _, v in shown], [y for y, _ in shown], "o", markersize=3,
                      color=_color(i, len(experiments)))
        axes.set_yticks(range(len(top)), top, fontsize=FONT)
        axes.set_ylim(tallest - 0.5, -0.5)
        axes.set_xlim(-0.02, 1.02)
        axes.tick_params(axis="x", labelsize=FONT)
        axes.set_title(f"{kind} tasks", fontsize=FONT + 1)
    for i, axes in enumerate(grid):
        axes.tick_params(axis="x", labelbottom=i + columns >= len(grid))
    if len(experiments) > 1:
        _legend(figure, experiments)
    figure.supxlabel("pass@1", fontsize=FONT + 1)
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
    at = {c: i for i, c in enumerate(result.columns)}  # by position: rows are many
    task_columns = [(c, at[c]) for c in ("task_id", "kind", "run_id", "line", "var",
                                         "occurrence", "answer", "line_steps", "loop_nesting")]
    (task_id, model, label, sample, kind, parsed, correct) = (
        at[c] for c in ("task_id", "model", "label", "sample_index", "kind", "parsed",
                        "correct"))
    for row in result.rows:
        if row[task_id] not in tasks:
            tasks[row[task_id]] = {c: row[i] for c, i in task_columns}
        verdicts.append(Verdict(row[task_id], row[model], row[label], row[sample], row[kind],
                                bool(row[parsed]), bool(row[correct])))
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
    buckets with fewer than MIN_TASKS tasks (of every kind and experiment together, so
    every experiment and kind has the same buckets) merged into their neighbours
    (``merged_buckets``); ``few`` marks a point of fewer than MIN_TASKS tasks of its
    kind, which the plot draws hollow. ``all`` leaves out the trivial kinds (as score's
    "by kind" does)."""
    summary = _summary(result)
    columns = ["model", "label", "kind", "bucket_from", "bucket_to", "bucket", "tasks",
               "samples", "pass@1", "ci_low", "ci_high", "few"]
    trivial = summary.trivial_kinds
    batch = BootstrapBatch(summary.resamples, seed=summary.seed)
    pending = []
    steps = {t: step_bucket(int(task["line_steps"])) for t, task in summary.tasks.items()
             if task.get("line_steps") is not None}
    counts: dict[Bucket, int] = {}
    for bucket in steps.values():
        counts[bucket] = counts.get(bucket, 0) + 1
    groups = merged_buckets([(b.low, b.high, n) for b, n in counts.items()])
    lows = [low for low, _ in groups]
    for experiment in summary.experiments():
        mine = [(t, vs) for t, vs in summary._by_experiment[experiment] if t in steps]
        # each task once into its (kind, group) and, unless its kind is trivial, ("all",
        # group): task id order, as the lists are
        cells: dict[tuple[str, int], list[Tally]] = {}
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
                firsts = [vs.correct / len(vs) for vs in tasks]
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


def _interval_panel(axes, labels: list[str], rows: list[tuple[int, dict]], panel: int,
                    color: str, value: str, bars: bool = True) -> None:
    """One horizontal panel of values in [0, 1]: for each (y, row) a bar (or a dot) to the
    row's ``value`` with its 95% interval (an error bar: group ``errorbars-PANEL``, a path
    per row in the given order) and, in the panel's column of numbers right of 1, the
    value and n (text ``n-label-PANEL-Y``). ``labels`` are the y ticks."""
    ys = [y for y, _ in rows]
    values = [r[value] for _, r in rows]
    if bars:
        axes.barh(ys, values, 0.7, color=color)
    errors = axes.errorbar(values, ys, xerr=_errors(values, [r["ci_low"] for _, r in rows],
                                                    [r["ci_high"] for _, r in rows]),
                           fmt="none" if bars else "o", color="#222" if bars else color,
                           ecolor="#222", capsize=2, linewidth=1, markersize=4)
    errors.lines[2][0].set_gid(f"errorbars-{panel}")
    for y, r in rows:
        axes.text(NUMBERS_FROM, y, f"{r[value]:.2f}  n={r['n']:,}", va="center",
                  fontsize=FONT, gid=f"n-label-{panel}-{y}")
    axes.axvline(1.0, color="#bbb", linewidth=0.6)
    axes.set_xlim(0, SPAN)
    axes.set_xticks([0, 0.5, 1], ["0", "0.5", "1"], fontsize=FONT)
    axes.set_yticks(range(len(labels)), labels, fontsize=FONT)
    axes.set_ylim(len(labels) - 0.5, -0.5)


def _kind_order(rows: list[dict]) -> list[str]:
    """Kinds as the table orders them: the kinds, ``all``, then the trivial ones."""
    kinds = sorted({r["kind"] for r in rows if r["kind"] != "all" and not r.get("trivial")})
    trivial = sorted({r["kind"] for r in rows if r.get("trivial")})
    return kinds + ["all"] * any(r["kind"] == "all" for r in rows) + trivial


def _accuracy_kind(result: QueryResult) -> Figure | None:
    """A panel per experiment: pass@1 by kind with its interval, value and n."""
    rows = [{**r, "n": r["tasks"]} for r in _dicts(result) if r["pass@1"] is not None]
    if not rows:
        return None
    experiments = list(dict.fromkeys(_experiment(r) for r in rows))  # the table's order
    kinds = _kind_order(rows)
    columns = 2 if len(experiments) > 1 else 1
    figure = _figure(7.5, math.ceil(len(experiments) / columns) * (ROW * len(kinds) + 0.8)
                     + 0.3)
    for panel, (axes, e) in enumerate(zip(_grid(figure, len(experiments), columns), experiments)):
        mine = [(kinds.index(r["kind"]), r) for r in rows if _experiment(r) == e]
        _interval_panel(axes, [k + " (trivial)" if any(r["kind"] == k and r.get("trivial")
                                                      for r in rows) else k for k in kinds],
                        mine, panel, _color(panel, len(experiments)), "pass@1")
        axes.set_title(e, fontsize=FONT + 1)
    figure.supxlabel("pass@1 (95% CI), n tasks", fontsize=FONT + 1)
    return figure


def _accuracy_difficulty(result: QueryResult) -> Figure | None:
    """A panel per kind (and all): pass@1 by merged line-step bucket, a line per
    experiment, each point with its 95% interval; a point of fewer than MIN_TASKS tasks
    is hollow; n in the panel's title; one legend above the panels."""
    rows = [r for r in _dicts(result) if r["pass@1"] is not None]
    if not rows:
        return None
    experiments = list(dict.fromkeys(_experiment(r) for r in rows))
    kinds = sorted({r["kind"] for r in rows if r["kind"] != "all"})
    kinds += ["all"] * any(r["kind"] == "all" for r in rows)
    buckets = sorted({(r["bucket_from"], r["bucket_to"]) for r in rows})
    columns = 3 if len(kinds) > 2 else len(kinds)
    # y: 0.0 to 1.0 in the first column and the figure's label; x: upright bucket
    # labels (up to 11 characters) under a panel with none below it, then the label
    figure = _fixed_figure(len(kinds), columns, 1.8, Margins(
        left=0.75, right=0.15, top=0.35 + _legend_height(len(experiments)), bottom=1.05,
        wspace=0.15, hspace=0.4))
    offsets = (np.linspace(-0.25, 0.25, len(experiments)) if len(experiments) > 1
               else [0.0])
    grid = _grid(figure, len(kinds), columns, sharex=True, sharey=True)
    for panel, (axes, kind) in enumerate(zip(grid, kinds)):
        mine = [r for r in rows if r["kind"] == kind]
        for i, e in enumerate(experiments):
            points = [(buckets.index((r["bucket_from"], r["bucket_to"])) + offsets[i], r)
                      for r in mine if _experiment(r) == e]
            if not points:
                continue
            xs, ys = [x for x, _ in points], [r["pass@1"] for _, r in points]
            color = _color(i, len(experiments))
            errors = axes.errorbar(xs, ys, yerr=_errors(ys, [r["ci_low"] for _, r in points],
                                                        [r["ci_high"] for _, r in points]),
                                   fmt="-", color=color, capsize=2, linewidth=1)
            errors.lines[2][0].set_gid(f"errorbars-{panel}-{i}")
            for few in (False, True):  # the points, filled then hollow: two lines, not one a point
                dots = [(x, r["pass@1"]) for x, (_, r) in zip(xs, points) if bool(r["few"]) == few]
                if dots:
                    axes.plot([x for x, _ in dots], [y for _, y in dots], linestyle="none",
                              marker="o", markersize=3, color=color,
                              markerfacecolor="white" if few else color)
        counts = sorted({sum(r["tasks"] for r in mine if _experiment(r) == e)
                         for e in experiments} - {0})
        n = f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,}"
        axes.set_title(f"{kind} (n={n})", fontsize=FONT + 1)
        _tick_labels(axes, [_bucket(*b) for b in buckets])
        axes.set_xlim(-0.5, len(buckets) - 0.5)
        axes.set_ylim(-0.05, 1.05)
        axes.tick_params(axis="y", labelsize=FONT)
    _outer_labels(grid, columns)
    if len(experiments) > 1:
        _legend(figure, experiments)
    figure.supxlabel(f"line steps of the task's run (buckets of < {MIN_TASKS} tasks merged;"
                     f" hollow: < {MIN_TASKS} tasks)", fontsize=FONT + 1)
    figure.supylabel("pass@1 (95% CI)", fontsize=FONT + 1)
    return figure


def _experiment_panels(rows: list[dict], measures: list[str], xlabel: str) -> Figure | None:
    """A panel per measure: a dot per experiment with its interval, value and n."""
    rows = [r for r in rows if r["value"] is not None]
    if not rows:
        return None
    experiments = list(dict.fromkeys(_experiment(r) for r in rows))
    measures = [m for m in measures if any(r["measure"] == m for r in rows)]
    figure = _figure(7.5, ROW * len(experiments) + 1.2)
    grid = _grid(figure, len(measures), len(measures), sharey=True)
    for panel, (axes, measure) in enumerate(zip(grid, measures)):
        mine = [(experiments.index(_experiment(r)), r) for r in rows if r["measure"] == measure]
        _interval_panel(axes, experiments, mine, panel, PALETTE[0], "value", bars=False)
        if panel:
            axes.tick_params(axis="y", labelleft=False)
        if len(measures) > 1:
            axes.set_title(measure, fontsize=FONT + 1)
    figure.supxlabel(xlabel, fontsize=FONT + 1)
    return figure


def _coverage(result: QueryResult) -> Figure | None:
    """Precision, recall and F1 per experiment, each with its interval and n."""
    rows = []
    for r in _dicts(result):
        for measure in ("precision", "recall", "f1"):
            rows.append({"model": r["model"], "label": r["label"], "measure": measure,
                         "value": r[measure], "ci_low": r[f"{measure} ci_low"],
                         "ci_high": r[f"{measure} ci_high"], "n": r["questions"]})
    return _experiment_panels(rows, ["precision", "recall", "f1"],
                              "coverage (95% CI), n questions")


def _consistency(result: QueryResult) -> Figure | None:
    rows = [{**r, "measure": "IC", "value": r["IC"], "n": r["chains"]} for r in _dicts(result)]
    return _experiment_panels(rows, ["IC"], "incremental consistency (95% CI), n chains")


def _comparison(result: QueryResult) -> Figure | None:
    """A forest plot: per pair of experiments the difference of pass@1 (A − B) over the
    tasks both answered, with its paired 95% interval, n and P(A beats B) written in the
    panel's column right of +1."""
    rows = _dicts(result)
    if not rows:
        return None
    figure = _figure(7.5, ROW * 1.4 * len(rows) + 1.0)
    axes = figure.subplots()
    ys = list(range(len(rows)))
    diffs = [r["difference"] for r in rows]
    errors = axes.errorbar(diffs, ys, xerr=_errors(diffs, [r["ci_low"] for r in rows],
                                                   [r["ci_high"] for r in rows]),
                           fmt="o", color=PALETTE[0], capsize=2, linewidth=1, markersize=4)
    errors.lines[2][0].set_gid("errorbars-0")
    for y, r in zip(ys, rows):
        axes.text(1.08, y, f"{r['difference']:+.2f}  n={r['tasks']:,}  "
                           f"P(A>B)={r['P(A beats B)']:.2f}", va="center", fontsize=FONT,
                  gid=f"n-label-0-{y}")
    for x in (-1, 0, 1):
        axes.axvline(x, color="#888" if x == 0 else "#ccc", linewidth=0.7)
    axes.set_yticks(ys, [f"{experiment_name(r['model A'], r['label A'])} − "
                         f"{experiment_name(r['model B'], r['label B'])}" for r in rows],
                    fontsize=FONT)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlim(-1.05, 2.2)
    axes.set_xticks([-1, -0.5, 0, 0.5, 1], ["-1", "-0.5", "0", "0.5", "1"], fontsize=FONT)
    axes.set_xlabel("difference of pass@1, A − B (paired 95% CI)", fontsize=FONT + 1)
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
            "pass@1 by task kind, a panel per experiment (model and label), with its 95% "
            "bootstrap interval over the tasks (error bar) and n, the tasks scored; a "
            "trivial kind (every task one answer) after all, and not in it. Each table "
            "row links to the cell's wrong answers.",
            "scored_samples", _accuracy_kind, _kind_table),
    Section("accuracy-difficulty", "Accuracy by difficulty",
            f"pass@1 by difficulty bucket (line steps of the task's run), a panel per kind "
            f"(n in its title), a line per experiment, with 95% intervals; buckets of fewer "
            f"than {MIN_TASKS} tasks are merged into their neighbours, a point of fewer than "
            f"{MIN_TASKS} tasks of its kind is hollow (and marked few in the table).",
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
            f"(CRUXEval Appendix A.3), a panel per task kind, a dot per experiment; the "
            f"{MAX_METHODS} methods "
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


def table(result: QueryResult, links: dict[tuple[str, str, str], str] | None = None) -> str:
    """The rows as an HTML table, every value escaped; numbers right-aligned. ``links``:
    a table of experiments and kinds gets a ``failures`` column, each row of a cell with
    wrong answers linked to them (the failures page)."""
    columns = list(result.columns)
    linked = bool(links) and {"model", "label", "kind"} <= set(columns)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns + ["failures"] * linked)

    def link(row: tuple) -> str:
        key = tuple(row[columns.index(c)] for c in ("model", "label", "kind"))
        href = links.get(key) if links else None
        return (f'<td><a class="failures" href="{html.escape(href)}">wrong answers</a></td>'
                if href else "<td></td>")
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + (link(row) if linked else "")
                   + "</tr>" for row in result.rows)
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


def _section_html(section: Section, result: QueryResult | None, plot: str | None,
                  reason: str | None, links: dict | None = None) -> str:
    parts = [f'<section id="{section.id}"><h2>{html.escape(section.title)}</h2>']
    if plot is not None:
        parts.append(f'<figure class="plot" id="plot-{section.id}">{plot}'
                     f"<figcaption>{html.escape(section.caption)} Query: "
                     f"<code>{section.query}</code>.</figcaption></figure>")
    if reason is not None:
        parts.append(f'<p class="empty">No plot: {html.escape(reason)}</p>')
    if result is not None and result.rows:
        rows = len(result.rows)
        parts.append(f"<details><summary>Table: {rows} row{'s' if rows != 1 else ''}"
                     f"</summary>{table(result, links)}</details>")
    return "".join(parts) + "</section>"


def _counts(con) -> tuple[int, int]:
    return (con.execute("SELECT count(*) FROM runs").fetchall()[0][0],
            con.execute("SELECT count(*) FROM programs").fetchall()[0][0])


# A store of at least this many runs and tasks together draws its plots in a second
# process while this one computes the next sections' tables (drawing is a third of a
# large report's time; the process costs ~1 s of start, more than a small report takes).
PARALLEL_DRAWING_SIZE = 5_000


def plot_svg(section_id: str, result: QueryResult) -> str | None:
    """The section's plot of ``result`` (its selected rows) as inline SVG, None when it
    has nothing to plot. Runs in the drawing process (engine/analytics/_drawing.py), or
    here for a small store."""
    section = next(s for s in SECTIONS if s.id == section_id)
    figure = section.draw(result)
    return None if figure is None else svg(figure, f"steptrace-{section_id}")


def _store_size(con) -> int:
    """Runs and tasks together (a store without a tasks table has none)."""
    runs = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
    try:
        return runs + con.execute("SELECT count(*) FROM tasks").fetchall()[0][0]
    except duckdb.Error:
        return runs


def write_report(db: str | Path, out: str | Path, now: dt.datetime | None = None,
                 selection: ReportFilter = ReportFilter(),
                 parallel: bool | None = None) -> ReportSummary:
    """Run the queries behind every section on ``db`` (restricted to ``selection``: the
    report's --model, --label, --kinds and --where) and write the page to ``out``.
    ``now`` is the time the page says it was made (default: the current time); with the
    same store and ``now`` the page is the same bytes. ``parallel``: draw the plots in a
    second process (default: when the machine has two CPUs and the store
    PARALLEL_DRAWING_SIZE runs and tasks); the page is the same either way."""
    if not Path(db).exists():
        raise StoreError(f"database not found: {db}")
    out = Path(out)
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: no directory {out.parent}")
    results: dict[str, QueryResult | StoreError] = {}
    pending = []
    _SUMMARIES.clear()
    drawing = None
    try:
        with open_filtered(db, selection) as con:
            runs, programs = _counts(con)
            if parallel is None:
                parallel = (os.cpu_count() or 1) > 1 and \
                    _store_size(con) >= PARALLEL_DRAWING_SIZE
            drawing = Drawing(parallel)
            summary = ReportSummary(str(out), runs, programs)
            links = _write_failures(con, db, out, summary)
            for section in SECTIONS:
                if section.query not in results:  # sections share scored_samples: run it once
                    results[section.query] = (_run_per_kind(con, section.query, str(db))
                                              if section.per_kind
                                              else _run(con, section.query, str(db)))
                pending.append(_start_section(section, results[section.query], drawing))
                if section.id == "accuracy-kind" and isinstance(results[section.query],
                                                                QueryResult):
                    summary.results = write_results(_summary(results[section.query]), out,
                                                    str(db), now)
        drawing.finish()
        sections = [_finish_section(*started, drawing, summary, links) for started in pending]
    finally:
        _SUMMARIES.clear()
        if drawing is not None:
            drawing.close()
    page = _page(db, runs, programs, sections, now or dt.datetime.now(dt.timezone.utc),
                 selection)
    with user_file(out):
        out.write_text(page, encoding="utf-8")
    summary.bytes = len(page.encode("utf-8"))
    return summary


def _run(con, name: str, source: str, params: dict[str, str] | None = None
         ) -> QueryResult | StoreError:
    """The query's result, or the one-line error of a store without its tables (which
    the section shows instead of a plot)."""
    try:
        return run_query_on(con, name, source, params=params)
    except StoreError as exc:
        return exc


def _run_per_kind(con, name: str, source: str) -> QueryResult | StoreError:
    """The query run once per task kind of the store (its ``kind`` parameter), its rows
    after a leading ``kind`` column, in kind order."""
    kinds = _run(con, "tasks_by_kind", source)
    if isinstance(kinds, StoreError):
        return kinds
    columns: list[str] = []
    rows: list[tuple] = []
    for kind in sorted(row[0] for row in kinds.rows):
        found = _run(con, name, source, {"kind": kind})
        if isinstance(found, StoreError):
            return found
        columns = ["kind"] + found.columns
        rows += [(kind, *row) for row in found.rows]
    return QueryResult(columns, rows)


def _write_failures(con, db: str | Path, out: Path, summary: ReportSummary
                    ) -> dict[tuple[str, str, str], str]:
    """Write the failures page next to ``out`` (``NAME-failures.html``) when the store
    has wrong answers; the link of each (model, label, kind) cell that has some."""
    try:
        found = failure_cells(con)
    except duckdb.Error:  # no tasks, predictions or scores yet: no page
        return {}
    wrong = [(m, l, k) for m, l, k, n, _ in found if n]
    if not wrong:
        return {}
    path = out.with_name(f"{out.stem}-failures.html")
    page = report_failures_page(con, str(db))
    with user_file(path):
        path.write_text(page, encoding="utf-8")
    summary.failures = str(path)
    return {cell: f"{path.name}#{anchor(*cell)}" for cell in wrong}


def _start_section(section: Section, found: QueryResult | StoreError, drawing: Drawing
                   ) -> tuple[Section, QueryResult | None, Future | str]:
    """The section's table and its plot under way (a Future), or why it has none."""
    result = section.select(found) if isinstance(found, QueryResult) else None
    if result is None:
        return section, None, f"no data: {first_line(found)}"
    if not result.rows:
        return section, result, f"no data: {section.nothing}"
    return section, result, drawing.submit(section.id, result)


def _finish_section(section: Section, result: QueryResult | None, plot: Future | str,
                    drawing: Drawing, summary: ReportSummary, links: dict | None = None
                    ) -> str:
    """The section's HTML once its plot is drawn; records in ``summary`` whether it has
    a plot and why not."""
    reason = plot if isinstance(plot, str) else None
    drawn = None if reason is not None else drawing.result(plot, section.id, result)
    if reason is None and drawn is None:
        reason = "no scored predictions to plot"
    if drawn is not None:
        summary.plots.append(section.id)
    else:
        summary.empty[section.id] = reason
    return _section_html(section, result, drawn, reason, links)


def _filtered(selection: ReportFilter) -> str:
    """The page's word on its filter (nothing without one)."""
    if selection.empty:
        return ""
    return f" (only {html.escape(selection.describe())})"


def _page(db: str | Path, runs: int, programs: int, sections: list[str],
          now: dt.datetime, selection: ReportFilter) -> str:
    made = now.strftime("%Y-%m-%d %H:%M %Z").strip()
    links = "".join(f'<a href="#{s.id}">{html.escape(s.title)}</a>' for s in SECTIONS)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\"><title>steptrace report</title>"
            f"<style>{STYLE}</style></head><body><h1>steptrace report</h1>"
            f"<p class=\"meta\">Store <code>{html.escape(str(db))}</code>: {runs} runs of "
            f"{programs} programs{_filtered(selection)}. Made {html.escape(made)}.</p>"
            f"<nav>{links}</nav>"
            + "".join(sections) + "</body></html>\n")
