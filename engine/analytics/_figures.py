"""The report's figures: a drawing per section, from the rows of its table alone.

Kept apart from the page and its statistics (engine/analytics/_report.py) so that the
drawing process (engine/analytics/_drawing.py) imports matplotlib and these, not the
store, the scoring and numba: a large report's plots are drawn there. ``FIGURES`` maps
each section id to its drawing; ``plot_svg`` draws one as inline SVG.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import matplotlib
import matplotlib.colors
import matplotlib.lines
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from steptrace.scoring._buckets import Bucket

if TYPE_CHECKING:
    from steptrace.store._store import QueryResult

PALETTE = ("#3b6ea5", "#e07b39", "#5a9e4b", "#b5483f", "#7d5ba6", "#8c6d31", "#c7549a")
MAX_METHODS = 12  # methods plotted per kind (by tasks); the table lists them all


MIN_TASKS = 10  # a difficulty bucket with fewer tasks is merged into its neighbour


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




def experiment_name(model: str, label: str) -> str:
    """steptrace.predictions's name of an experiment (imported when first drawn: that
    module brings the store)."""
    from steptrace.predictions._experiments import experiment_name as name
    return name(model, label)


FIGURES: dict[str, Callable[[QueryResult], Figure | None]] = {
    "status": _status, "steps": _steps, "tasks": _tasks, "accuracy-kind": _accuracy_kind,
    "accuracy-difficulty": _accuracy_difficulty, "coverage": _coverage,
    "consistency": _consistency, "comparison": _comparison,
    "accuracy-method": _accuracy_method,
}


def plot_svg(section_id: str, result: QueryResult) -> str | None:
    """The section's plot of ``result`` (its selected rows) as inline SVG, None when it
    has nothing to plot. Runs in the drawing process (engine/analytics/_drawing.py), or
    in the report's own for a small store."""
    figure = FIGURES[section_id](result)
    return None if figure is None else svg(figure, f"steptrace-{section_id}")
