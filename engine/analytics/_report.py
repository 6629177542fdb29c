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
import os
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np

from steptrace.analytics._drawing import Drawing
from steptrace.analytics._figures import (MAX_METHODS, MIN_TASKS, SPAN, _bucket,  # noqa: F401
                                          svg)
from steptrace.analytics._failures import anchor, cells as failure_cells, report_failures_page
from steptrace.analytics._queries import run_query_on
from steptrace.analytics._results_json import write_results
from steptrace.analytics._report_filter import ReportFilter, open_filtered
from steptrace.scoring._buckets import Bucket, step_bucket
from steptrace.scoring._stats import BootstrapBatch
from steptrace.scoring._summary import ScoreSummary, Tally, fraction
from steptrace.scoring._verdicts import Verdict
from steptrace.store._store import QueryResult, StoreError, connect, first_line
from steptrace.errors import InputError
from steptrace.corpus._text import user_file

def _all(result: QueryResult) -> QueryResult:
    """The whole result: most sections show every row of their query."""
    return result


@dataclass(frozen=True)
class Section:
    """One plot: the query behind it and the part of its result the plot and the table
    show (two sections may share one query); its drawing is ``FIGURES[id]``
    (engine/analytics/_figures.py)."""

    id: str
    title: str
    caption: str
    query: str
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


# ---------------------------------------------------------------- statistics of scored samples
# The statistical sections read the scored_samples query (one row per scored answer) and
# compute what `steptrace score` prints from the same verdicts (engine/scoring/_summary.py):
# pass@1 with its 95% bootstrap interval and n, coverage precision/recall/F1, REval's
# incremental consistency, paired comparisons. Every share is a fraction; every interval
# two numbers, ci_low and ci_high (docs/guides/predictions-and-scoring.md, "Numbers").
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


SECTIONS = (
    Section("status", "Runs by status", "Runs of the store by final status.",
            "runs_by_status"),
    Section("steps", "Step distributions",
            "Runs per bucket of line steps and of instruction steps (powers of two).",
            "step_distribution"),
    Section("tasks", "Tasks by kind", "Prediction tasks of the store by kind.",
            "tasks_by_kind"),
    Section("accuracy-kind", "Accuracy by kind",
            "pass@1 by task kind, a panel per experiment (model and label), with its 95% "
            "bootstrap interval over the tasks (error bar) and n, the tasks scored; a "
            "trivial kind (every task one answer) after all, and not in it. Each table "
            "row links to the cell's wrong answers.",
            "scored_samples", _kind_table),
    Section("accuracy-difficulty", "Accuracy by difficulty",
            f"pass@1 by difficulty bucket (line steps of the task's run), a panel per kind "
            f"(n in its title), a line per experiment, with 95% intervals; buckets of fewer "
            f"than {MIN_TASKS} tasks are merged into their neighbours, a point of fewer than "
            f"{MIN_TASKS} tasks of its kind is hollow (and marked few in the table).",
            "scored_samples", _difficulty_table),
    Section("coverage", "Coverage prediction",
            "REval's precision, recall and F1 of coverage answers (positive: the line "
            "runs), with 95% intervals and n, the questions.",
            "scored_samples", _coverage_table, nothing="no coverage tasks scored"),
    Section("consistency", "Incremental consistency",
            "REval's incremental consistency over its question chains (coverage, state, "
            "next line, output about one line: tasks --chains), with its 95% interval and "
            "n, the chains.",
            "scored_samples", _consistency_table,
            nothing="no question chains scored (make tasks with --chains)"),
    Section("comparison", "Paired comparison",
            "For every two experiments, over the tasks both answered: the difference of "
            "pass@1 (A − B) with its paired 95% bootstrap interval, n and P(A beats B).",
            "scored_samples", _comparison_table,
            nothing="fewer than two experiments with shared tasks"),
    Section("accuracy-method", "Accuracy by standard-library method",
            f"pass@1 on tasks whose program calls each str/list/dict method "
            f"(CRUXEval Appendix A.3), a panel per task kind, a dot per experiment; the "
            f"{MAX_METHODS} methods "
            f"with most tasks of the kind.",
            "accuracy_by_method", per_kind=True),
)


# ---------------------------------------------------------------- the page
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
