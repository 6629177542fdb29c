"""The failure drill-down: the wrong answers behind a cell of the report (an experiment and
a task kind), each with the task's prompt, the model's raw response, the answer extracted
from it, the expected answer and where in the trace the question is about.

``report`` writes them next to its page (``NAME-failures.html``: the first
``PER_CELL`` wrong answers of every cell, by task id, the page's tables link each row
there) and ``serve`` lists every one of a cell, paged, each linked to the trace viewer
at its step (``/run/ID#step=N``). The step is the one the question asks about: the
``occurrence``-th time the task's line runs (state, next_line, coverage and the other
kinds about a line), the run's last step (output and the others about the whole run).
Every text is escaped: a prompt and a model's answer are untrusted.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from urllib.parse import urlencode

import duckdb

PER_CELL = 20  # wrong answers a report's failures page shows per cell

# the step of a task's question: the index (from 0, as the viewer counts) of the
# occurrence-th line event at its line, else of the run's last step
_FAILURES_SQL = """
WITH wrong AS (
    SELECT s.task_id, s.model, s.label, s.sample_index, t.kind, t.run_id, t.line,
           coalesce(t.occurrence, 1) AS occurrence, t.line_steps, t.prompt,
           t.answer AS expected, p.raw_text, p.answer, {note} AS note
    FROM scores s JOIN tasks t USING (task_id)
    JOIN predictions p USING (task_id, model, label, sample_index)
    WHERE NOT s.correct {cell}
    {rows}),
numbered AS (
    SELECT st.run_id, st.line, st.event,
           row_number() OVER (PARTITION BY st.run_id ORDER BY st.step) - 1 AS position,
           row_number() OVER (PARTITION BY st.run_id, st.line, st.event ORDER BY st.step)
               AS seen
    FROM steps st WHERE st.run_id IN (SELECT run_id FROM wrong))
SELECT w.model, w.label, w.kind, w.task_id, w.sample_index, w.run_id, w.line,
       w.line_steps, w.prompt, w.raw_text, w.answer, w.expected, w.note,
       coalesce((SELECT n.position FROM numbered n WHERE n.run_id = w.run_id
                 AND n.line = w.line AND n.event = 'line' AND n.seen = w.occurrence),
                (SELECT max(n.position) FROM numbered n WHERE n.run_id = w.run_id)) AS step
FROM wrong w ORDER BY w.model, w.label, w.kind, w.task_id, w.sample_index
"""
_ONE_CELL = ("AND s.model = $model AND s.label = $label AND t.kind = $kind",
             "ORDER BY s.task_id, s.sample_index LIMIT $limit OFFSET $offset")
_EVERY_CELL = ("", "QUALIFY row_number() OVER (PARTITION BY s.model, s.label, t.kind "
               "ORDER BY s.task_id, s.sample_index) <= $limit")

_COUNT_SQL = """
SELECT count(*) FROM scores s JOIN tasks t USING (task_id)
WHERE NOT s.correct AND s.model = $model AND s.label = $label AND t.kind = $kind
"""


@dataclass(frozen=True)
class Failure:
    task_id: str
    sample_index: int
    run_id: int
    line: int | None
    line_steps: int | None
    prompt: str
    raw_text: str | None
    answer: str | None
    expected: str
    note: str | None
    step: int | None


def failures(con: duckdb.DuckDBPyConnection, model: str, label: str, kind: str,
             limit: int = PER_CELL, offset: int = 0) -> tuple[int, list[Failure]]:
    """(how many wrong answers the cell has, the ``limit`` from ``offset``)."""
    params = {"model": model, "label": label, "kind": kind}
    total = con.execute(_COUNT_SQL, params).fetchall()[0][0]
    rows = con.execute(_sql(con, _ONE_CELL), {**params, "limit": limit, "offset": offset}
                       ).fetchall()
    return total, [Failure(*row[3:]) for row in rows]


def first_failures(con: duckdb.DuckDBPyConnection, limit: int = PER_CELL
                   ) -> dict[tuple[str, str, str], list[Failure]]:
    """The first ``limit`` wrong answers of every (model, label, kind), in one query."""
    found: dict[tuple[str, str, str], list[Failure]] = {}
    for row in con.execute(_sql(con, _EVERY_CELL), {"limit": limit}).fetchall():
        found.setdefault(tuple(row[:3]), []).append(Failure(*row[3:]))
    return found


def _sql(con: duckdb.DuckDBPyConnection, where: tuple[str, str]) -> str:
    # scores.note is score's; a scores table made by other means may lack it
    note = "s.note" if "note" in _columns(con, "scores") else "NULL"
    return _FAILURES_SQL.format(note=note, cell=where[0], rows=where[1])


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = ?", [table]).fetchall()}


def cells(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str, int, int]]:
    """(model, label, kind, wrong answers, scored answers) of every cell with a score."""
    return con.execute(
        "SELECT s.model, s.label, t.kind, count(*) FILTER (WHERE NOT s.correct), count(*) "
        "FROM scores s JOIN tasks t USING (task_id) GROUP BY ALL ORDER BY ALL").fetchall()


def anchor(model: str, label: str, kind: str) -> str:
    """The id of a cell's section on the failures page: its names, made safe for an id
    (every other character as its code point), so two cells never share one."""
    def safe(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9_]", lambda m: f"-{ord(m[0]):x}-", text)
    return f"fail--{safe(model)}--{safe(label)}--{safe(kind)}"


def serve_link(model: str, label: str, kind: str, offset: int = 0) -> str:
    """The cell's page in ``steptrace serve``."""
    query = {"model": model, "label": label, "kind": kind}
    if offset:
        query["offset"] = str(offset)
    return "/failures?" + urlencode(query)


def trace_link(failure: Failure) -> str:
    """The trace viewer at the failure's step, as ``serve`` serves it."""
    return f"/run/{int(failure.run_id)}" + ("" if failure.step is None
                                            else f"#step={int(failure.step)}")


def failure_html(failure: Failure, link_traces: bool) -> str:
    """One wrong answer; ``link_traces``: the trace is a link (in ``serve``), else its
    place is named for ``steptrace view`` / ``serve``."""
    e = html.escape
    where = (f"run {int(failure.run_id)}" + ("" if failure.step is None
                                            else f", step {int(failure.step)}"))
    trace = (f'<a class="trace" href="{e(trace_link(failure))}">trace: {where}</a>'
             if link_traces else f"trace: {where} (<code>steptrace serve</code>, then "
             f"<code>{e(trace_link(failure))}</code>)")
    raw = "" if failure.raw_text is None else failure.raw_text
    answer = "(unparseable)" if failure.answer is None else failure.answer
    return (f'<article class="failure" id="{e(failure.task_id)}-{int(failure.sample_index)}">'
            f"<h4>{e(failure.task_id)} · sample {int(failure.sample_index)}"
            + ("" if failure.line_steps is None else f" · {int(failure.line_steps)} line steps")
            + f"</h4><dl><dt>expected</dt><dd><pre>{e(failure.expected)}</pre></dd>"
            f"<dt>extracted answer</dt><dd><pre>{e(answer)}</pre></dd>"
            + ("" if not failure.note else f"<dt>note</dt><dd><pre>{e(failure.note)}</pre></dd>")
            + f"</dl><p>{trace}</p>"
            f"<details><summary>prompt</summary><pre>{e(failure.prompt)}</pre></details>"
            f"<details><summary>raw response</summary><pre>{e(raw)}</pre></details></article>")


STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem auto; max-width: 60rem; padding: 0 1rem; }
article.failure { border-top: 1px solid #ddd; padding: .4rem 0; }
h4 { margin: .3rem 0; } dl { display: grid; grid-template-columns: 9rem 1fr; margin: 0; }
dd { margin: 0; } pre { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; }
summary { cursor: pointer; color: #3b6ea5; }
"""


def page(title: str, body: str) -> str:
    """A failures page: no script, nothing loaded from elsewhere."""
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            'style-src \'unsafe-inline\'"><link rel="icon" href="data:,">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{body}</body></html>\n")


def report_failures_page(con: duckdb.DuckDBPyConnection, store: str) -> str:
    """The report's failures page: a section per cell, its first PER_CELL wrong answers."""
    e = html.escape
    sections = []
    first = first_failures(con)
    for model, label, kind, wrong, scored in cells(con):
        if not wrong:
            continue
        shown = first.get((model, label, kind), [])
        more = ("" if wrong <= len(shown) else
                f"<p>{wrong - len(shown)} more: <code>steptrace serve --db {e(store)}</code>, "
                f"then <code>{e(serve_link(model, label, kind))}</code>.</p>")
        sections.append(f'<section id="{anchor(model, label, kind)}"><h2>{e(model)} '
                        f"[{e(label)}] · {e(kind)}: {wrong} wrong of {scored}</h2>"
                        + "".join(failure_html(f, link_traces=False) for f in shown)
                        + more + "</section>")
    return page("steptrace failures", f"<p>Store <code>{e(store)}</code>: the first "
                f"{PER_CELL} wrong answers of each experiment and kind, by task id.</p>"
                + ("".join(sections) or "<p>No wrong answers scored.</p>"))
