"""The HTML report: one self-contained page of plots over a store, with the tables behind them.

Every number on the page comes from a named query (queries/*.sql), so the page says
nothing the SQL does not, and a reader can rerun any table with ``steptrace query``.
Plots are drawn by matplotlib (Agg, no display) as SVG and written inline: the page needs
no network, no script and no other file. A section whose tables the store lacks (no
tasks, predictions or scores yet) says which command makes them instead of failing.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from steptrace.predictions._experiments import experiment_name
from steptrace.analytics._queries import run_query
from steptrace.scoring._buckets import Bucket
from steptrace.store._store import QueryResult, StoreError, connect, first_line
from steptrace.errors import InputError
from steptrace.corpus._text import user_file

PALETTE = ("#3b6ea5", "#e07b39", "#5a9e4b", "#b5483f", "#7d5ba6", "#8c6d31", "#c7549a")
MAX_METHODS = 25  # methods plotted (by tasks); the table lists them all


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


def _by_model(rows: list[dict], label: str) -> tuple[list[str], dict[str, list[float]]]:
    """Labels and one pass@1 series per experiment (NaN, drawn as no bar, where it has no
    scored task of that label)."""
    labels = list(dict.fromkeys(r[label] for r in rows))
    experiments = sorted({_experiment(r) for r in rows})
    values = {(_experiment(r), r[label]): r["pass_at_1"] for r in rows}
    return labels, {e: [float(values.get((e, x), math.nan)) for x in labels] for e in experiments}


def _overall(result: QueryResult) -> QueryResult:
    """accuracy_by_kind's rows over all buckets (bucket_from NULL), without the buckets."""
    keep = [i for i, c in enumerate(result.columns) if c not in ("bucket_from", "bucket_to")]
    bucket = result.columns.index("bucket_from")
    return QueryResult([result.columns[i] for i in keep],
                       [tuple(row[i] for i in keep) for row in result.rows
                        if row[bucket] is None])


def _bucketed(result: QueryResult) -> QueryResult:
    """accuracy_by_kind's rows of one difficulty bucket each."""
    bucket = result.columns.index("bucket_from")
    return QueryResult(result.columns, [r for r in result.rows if r[bucket] is not None])


def _accuracy_kind(result: QueryResult) -> Figure | None:
    rows = [r for r in _dicts(result) if r["pass_at_1"] is not None]
    if not rows:
        return None
    labels, series = _by_model(rows, "kind")
    return _bars(labels, series, "pass@1", fraction=True)


def _accuracy_difficulty(result: QueryResult) -> Figure | None:
    """One panel per experiment: pass@1 by line-step bucket, a line per kind."""
    rows = [r for r in _dicts(result) if r["pass_at_1"] is not None]
    if not rows:
        return None
    models = sorted({_experiment(r) for r in rows})
    buckets = sorted({(r["bucket_from"], r["bucket_to"]) for r in rows})
    figure = _figure(7.0, 2.8 * len(models))
    for axes, model in zip(figure.subplots(len(models), 1, squeeze=False)[:, 0], models):
        kinds = sorted({r["kind"] for r in rows if _experiment(r) == model})
        for i, kind in enumerate(kinds):
            points = sorted((buckets.index((r["bucket_from"], r["bucket_to"])), r["pass_at_1"])
                            for r in rows if _experiment(r) == model and r["kind"] == kind)
            axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=kind,
                      color=PALETTE[i % len(PALETTE)])
        axes.set_xticks(range(len(buckets)), [_bucket(*b) for b in buckets])
        axes.set_ylim(-0.05, 1.05)
        axes.set_title(model, fontsize="medium")
        axes.set_ylabel("pass@1")
        axes.set_xlabel("line steps of the task's run")
        axes.legend(frameon=False, fontsize="small")
    return figure


def _accuracy_method(result: QueryResult) -> Figure | None:
    rows = [r for r in _dicts(result) if r["pass_at_1"] is not None]
    if not rows:
        return None
    tasks: dict[str, int] = {}
    for r in rows:
        tasks[r["method"]] = max(tasks.get(r["method"], 0), r["tasks"])
    top = sorted(tasks, key=lambda m: (-tasks[m], m))[:MAX_METHODS]
    labels, series = _by_model([r for r in rows if r["method"] in top], "method")
    order = sorted(labels, key=top.index)
    series = {m: [values[labels.index(x)] for x in order] for m, values in series.items()}
    return _bars(order, series, "pass@1", horizontal=True, fraction=True)


SECTIONS = (
    Section("status", "Runs by status", "Runs of the store by final status.",
            "runs_by_status", _status),
    Section("steps", "Step distributions",
            "Runs per bucket of line steps and of instruction steps (powers of two).",
            "step_distribution", _steps),
    Section("tasks", "Tasks by kind", "Prediction tasks of the store by kind.",
            "tasks_by_kind", _tasks),
    Section("accuracy-kind", "Accuracy by kind",
            "pass@1 of each experiment (model and label) by task kind (over all "
            "difficulty buckets).",
            "accuracy_by_kind", _accuracy_kind, _overall),
    Section("accuracy-difficulty", "Accuracy by difficulty",
            "pass@1 by difficulty bucket (line steps of the task's run), a line per kind.",
            "accuracy_by_kind", _accuracy_difficulty, _bucketed),
    Section("accuracy-method", "Accuracy by standard-library method",
            f"pass@1 on tasks whose program calls each str/list/dict method "
            f"(CRUXEval Appendix A.3); the {MAX_METHODS} methods with most tasks.",
            "accuracy_by_method", _accuracy_method),
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
        parts.append(table(result))
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
    for section in SECTIONS:
        if section.query not in results:  # two sections read accuracy_by_kind: run it once
            results[section.query] = _run(section.query, db)
        sections.append(_render_section(section, results[section.query], summary))
    page = _page(db, runs, programs, sections, now or dt.datetime.now(dt.timezone.utc))
    with user_file(out):
        out.write_text(page, encoding="utf-8")
    summary.bytes = len(page.encode("utf-8"))
    return summary


def _run(name: str, db: str | Path) -> QueryResult | StoreError:
    """The query's result, or the one-line error of a store without its tables (which
    the section shows instead of a plot)."""
    try:
        return run_query(name, db=db)
    except StoreError as exc:
        return exc


def _render_section(section: Section, found: QueryResult | StoreError,
                    summary: ReportSummary) -> str:
    """The section's HTML; records in ``summary`` whether it has a plot and why not."""
    result = section.select(found) if isinstance(found, QueryResult) else None
    figure, reason = None, None
    if result is None:
        reason = f"no data: {first_line(found)}"
    elif not result.rows:
        reason = "no data: the query returned no rows"
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
