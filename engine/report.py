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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import matplotlib
from matplotlib.figure import Figure

from engine.queries import run_query
from engine.store import QueryResult, StoreError, connect, first_line

PALETTE = ("#3b6ea5", "#e07b39", "#5a9e4b", "#b5483f", "#7d5ba6", "#8c6d31", "#c7549a")
MAX_METHODS = 25  # methods plotted (by tasks); the table lists them all


@dataclass(frozen=True)
class Section:
    """One plot: the query behind it and how to draw its rows (None: nothing to draw)."""

    id: str
    title: str
    caption: str
    query: str
    draw: Callable[[QueryResult], Figure | None]


@dataclass
class ReportSummary:
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


def _bars(labels: list[str], series: dict[str, list[float]], ylabel: str,
          horizontal: bool = False) -> Figure:
    """Grouped bars: one group per label, one bar per series."""
    height = max(3.2, 0.28 * len(labels) + 1.2) if horizontal else 3.2
    figure = _figure(7.0, height)
    axes = figure.subplots()
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        positions = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        draw = axes.barh if horizontal else axes.bar
        draw(positions, values, width, label=name, color=PALETTE[i % len(PALETTE)])
    ticks = range(len(labels))
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


def _bucket(low, high) -> str:
    return f"{low}" if high == low + 1 else f"{low}-{high - 1}"


def _steps(result: QueryResult) -> Figure | None:
    rows = _dicts(result)
    measures = list(dict.fromkeys(r["measure"] for r in rows))
    figure = _figure(7.0, 3.0 * len(measures))
    for axes, measure in zip(figure.subplots(len(measures), 1, squeeze=False)[:, 0], measures):
        mine = [r for r in rows if r["measure"] == measure]
        axes.bar(range(len(mine)), [r["runs"] for r in mine], color=PALETTE[0])
        axes.set_xticks(range(len(mine)), [_bucket(r["bucket_from"], r["bucket_to"])
                                           for r in mine], rotation=30, ha="right")
        axes.set_title(measure.replace("_", " "), fontsize="medium")
        axes.set_ylabel("runs")
    return figure


def _tasks(result: QueryResult) -> Figure | None:
    rows = _dicts(result)
    return _bars([r["kind"] for r in rows], {"tasks": [r["tasks"] for r in rows]}, "tasks")


def _by_model(rows: list[dict], label: str) -> tuple[list[str], dict[str, list[float]]]:
    """Labels and one pass@1 series per model (0 where a model has no scored task)."""
    labels = list(dict.fromkeys(r[label] for r in rows))
    models = sorted({r["model"] for r in rows})
    values = {(r["model"], r[label]): r["pass_at_1"] for r in rows}
    return labels, {m: [values.get((m, x)) or 0.0 for x in labels] for m in models}


def _accuracy_kind(result: QueryResult) -> Figure | None:
    rows = [r for r in _dicts(result) if r["bucket_from"] is None and r["pass_at_1"] is not None]
    if not rows:
        return None
    labels, series = _by_model(rows, "kind")
    return _bars(labels, series, "pass@1")


def _accuracy_difficulty(result: QueryResult) -> Figure | None:
    """One panel per model: pass@1 by line-step bucket, a line per kind."""
    rows = [r for r in _dicts(result) if r["bucket_from"] is not None
            and r["pass_at_1"] is not None]
    if not rows:
        return None
    models = sorted({r["model"] for r in rows})
    buckets = sorted({(r["bucket_from"], r["bucket_to"]) for r in rows})
    figure = _figure(7.0, 2.8 * len(models))
    for axes, model in zip(figure.subplots(len(models), 1, squeeze=False)[:, 0], models):
        kinds = sorted({r["kind"] for r in rows if r["model"] == model})
        for i, kind in enumerate(kinds):
            points = sorted((buckets.index((r["bucket_from"], r["bucket_to"])), r["pass_at_1"])
                            for r in rows if r["model"] == model and r["kind"] == kind)
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
    return _bars(order, series, "pass@1", horizontal=True)


SECTIONS = (
    Section("status", "Runs by status", "Runs of the store by final status.",
            "runs_by_status", _status),
    Section("steps", "Step distributions",
            "Runs per bucket of line steps and of instruction steps (powers of two).",
            "step_distribution", _steps),
    Section("tasks", "Tasks by kind", "Prediction tasks of the store by kind.",
            "tasks_by_kind", _tasks),
    Section("accuracy-kind", "Accuracy by kind",
            "pass@1 of each model by task kind (over all difficulty buckets).",
            "accuracy_by_kind", _accuracy_kind),
    Section("accuracy-difficulty", "Accuracy by difficulty",
            "pass@1 by difficulty bucket (line steps of the task's run), a line per kind.",
            "accuracy_by_kind", _accuracy_difficulty),
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
    date, ids salted per figure so that two figures on one page never share one."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": salt}):
        figure.savefig(buffer, format="svg",
                       metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def table(result: QueryResult) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in result.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
                   for row in result.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value) -> str:
    return "" if value is None else html.escape(str(value))


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem; color: #222; }
h1 { margin-bottom: .2rem; } .meta { color: #555; margin-top: 0; }
nav a { margin-right: 1rem; } section { margin: 2.5rem 0; }
figure.plot { margin: 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .9rem; }
table { border-collapse: collapse; margin-top: .8rem; font-size: .85rem; }
th, td { border: 1px solid #ccc; padding: .15rem .5rem; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
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


def write_report(db: str | Path, out: str | Path) -> ReportSummary:
    """Run the queries behind every section on ``db`` and write the page to ``out``."""
    if not Path(db).exists():
        raise StoreError(f"database not found: {db}")
    out = Path(out)
    if not out.parent.is_dir():
        raise ValueError(f"cannot write {out}: no directory {out.parent}")
    runs, programs = _counts(db)
    summary = ReportSummary(str(out), runs, programs)
    cache: dict[str, QueryResult | StoreError] = {}
    sections = []
    for section in SECTIONS:
        if section.query not in cache:
            try:
                cache[section.query] = run_query(section.query, db=db)
            except StoreError as exc:
                cache[section.query] = exc
        found = cache[section.query]
        result = found if isinstance(found, QueryResult) else None
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
        sections.append(_section_html(section, result, figure, reason))
    page = _page(db, runs, programs, sections)
    out.write_text(page, encoding="utf-8")
    summary.bytes = len(page.encode("utf-8"))
    return summary


def _page(db: str | Path, runs: int, programs: int, sections: list[str]) -> str:
    made = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    links = "".join(f'<a href="#{s.id}">{html.escape(s.title)}</a>' for s in SECTIONS)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\"><title>steptrace report</title>"
            f"<style>{STYLE}</style></head><body><h1>steptrace report</h1>"
            f"<p class=\"meta\">Store <code>{html.escape(str(db))}</code>: {runs} runs of "
            f"{programs} programs. Made {made}.</p><nav>{links}</nav>"
            + "".join(sections) + "</body></html>\n")
