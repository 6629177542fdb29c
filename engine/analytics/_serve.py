"""``steptrace serve``: browse the runs of a store (or shard directory) in a browser.

``GET /`` lists the runs (run id, sample, input, status, steps, outcome), filtered by
``status`` and ``max_steps`` and paged by ``offset`` (``PAGE_RUNS`` a page), each linked to
``GET /run/ID``, the ``steptrace view`` page of that run (``#step=N``: at step N).
``GET /failures`` lists the experiments and task kinds scored, with their wrong answers,
and ``GET /failures?model=M&label=L&kind=K`` every wrong answer of one (``PAGE_RUNS`` a
page): prompt, raw response, extracted and expected answer, linked to the trace viewer at
the step the question is about (engine/analytics/_failures.py). Every request opens the store
read-only and closes it. The server is for one user on their own machine: it binds to
127.0.0.1 unless told otherwise, serves nothing else, and escapes every text it shows.
"""

from __future__ import annotations

import html
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from steptrace.analytics._failures import (cells, failure_html, failures, page as failure_page,
                                           serve_link)
from steptrace.analytics._viewer import render_page, view_data
from steptrace.errors import SteptraceError
from steptrace.store._store import StoreError, connect

PAGE_RUNS = 200


class ServeError(SteptraceError):
    """A request the server refuses: its HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def runs_page(db: str | Path, status: str | None = None, max_steps: int | None = None,
              offset: int = 0) -> str:
    """The HTML list of the runs matching the filters."""
    where, params = [], []
    if status:
        where.append("status = ?")
        params.append(status)
    if max_steps is not None:
        where.append("coalesce(line_steps, 0) <= ?")
        params.append(max_steps)
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    con = connect(db, read_only=True)
    try:
        total = con.execute(f"SELECT count(*) FROM runs {clause}", params).fetchall()[0][0]
        rows = con.execute(
            "SELECT run_id, sample_id, input_index, status, line_steps, "
            "coalesce(output, exception_type || ': ' || exception_message, note) "
            f"FROM runs {clause} ORDER BY run_id LIMIT ? OFFSET ?",
            params + [PAGE_RUNS, offset]).fetchall()
        statuses = [s for (s,) in con.execute("SELECT DISTINCT status FROM runs "
                                              "ORDER BY status").fetchall()]
    finally:
        con.close()
    e = html.escape
    options = "".join(f'<option{" selected" if s == status else ""}>{e(s)}</option>'
                      for s in statuses)
    body = "".join(
        f'<tr><td><a href="/run/{int(rid)}">{int(rid)}</a></td><td>{e(str(sample))}</td>'
        f"<td>{e(str(index))}</td><td>{e(str(st))}</td><td>{'' if steps is None else int(steps)}"
        f"</td><td>{e(str(outcome or ''))[:200]}</td></tr>"
        for rid, sample, index, st, steps, outcome in rows)
    more = ""
    if offset + PAGE_RUNS < total:
        query = {k: v for k, v in (("status", status), ("max_steps", max_steps)) if v}
        more = (f'<p><a id="more" href="/?{e(urlencode({**query, "offset": offset + PAGE_RUNS}))}">'
                "next runs</a></p>")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        'style-src \'unsafe-inline\'"><link rel="icon" href="data:,">'
        "<title>steptrace runs</title><style>body{font:14px system-ui,sans-serif;margin:1em}"
        "td,th{padding:.1em .6em;text-align:left}</style></head><body>"
        f"<h1>Runs of {e(str(db))}</h1><p><a href=\"/failures\">wrong answers</a> by "
        "experiment and task kind</p>"
        '<form method="get" action="/">status <select name="status"><option value="">any'
        f'</option>{options}</select> at most <input name="max_steps" type="number" min="0" '
        f'value="{"" if max_steps is None else int(max_steps)}"> line steps '
        '<button type="submit">filter</button></form>'
        f'<p id="count">{total} runs; {offset + 1 if rows else 0}-{offset + len(rows)} shown.</p>'
        "<table><thead><tr><th>run</th><th>sample</th><th>input</th><th>status</th>"
        f"<th>line steps</th><th>outcome</th></tr></thead><tbody>{body}</tbody></table>"
        f"{more}</body></html>")


def _scored(db: str | Path):
    """The store opened read-only, or a ServeError when it has no scores yet."""
    con = connect(db, read_only=True)
    present = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    missing = [t for t in ("tasks", "predictions", "scores") if t not in present]
    if missing:
        con.close()
        raise ServeError(404, f"no {missing[0]} table in {db}: run steptrace "
                              f"{'score' if missing[0] == 'scores' else missing[0].rstrip('s')}"
                              " first")
    return con


def failures_index(db: str | Path) -> str:
    """Every experiment and kind scored: wrong of scored, linked to its wrong answers."""
    con = _scored(db)
    try:
        found = cells(con)
    finally:
        con.close()
    e = html.escape
    def link(model: str, label: str, kind: str, wrong: int) -> str:
        return (f'<a href="{e(serve_link(model, label, kind))}">wrong answers</a>'
                if wrong else "")
    rows = "".join(
        f"<tr><td>{e(m)}</td><td>{e(l)}</td><td>{e(k)}</td><td>{wrong}</td><td>{scored}</td>"
        f"<td>{link(m, l, k, wrong)}</td></tr>" for m, l, k, wrong, scored in found)
    return failure_page("steptrace failures",
                        f'<p><a href="/">runs</a></p><table><thead><tr><th>model</th>'
                        "<th>label</th><th>kind</th><th>wrong</th><th>scored</th><th></th>"
                        f"</tr></thead><tbody>{rows}</tbody></table>")


def failures_page(db: str | Path, model: str, label: str, kind: str, offset: int) -> str:
    """One cell's wrong answers, PAGE_RUNS a page, each linked to its trace at its step."""
    con = _scored(db)
    try:
        total, shown = failures(con, model, label, kind, PAGE_RUNS, offset)
    finally:
        con.close()
    e = html.escape
    more = ("" if offset + PAGE_RUNS >= total else
            f'<p><a id="more" href="{e(serve_link(model, label, kind, offset + PAGE_RUNS))}">'
            "next wrong answers</a></p>")
    return failure_page(
        f"{model} [{label}] · {kind}",
        f'<p><a href="/failures">every experiment and kind</a></p><p id="count">{total} wrong '
        f"answers; {offset + 1 if shown else 0}-{offset + len(shown)} shown.</p>"
        + "".join(failure_html(f, link_traces=True) for f in shown) + more)


def answer(db: str | Path, target: str) -> str:
    """The page of one request path (with its query string); ServeError if none."""
    url = urlsplit(target)
    query = parse_qs(url.query)

    def one(name: str) -> str | None:
        values = query.get(name)
        return values[-1] if values and values[-1] != "" else None

    def number(name: str) -> int | None:
        text = one(name)
        if text is None:
            return None
        if not text.isdigit():
            raise ServeError(400, f"{name} must be a whole number, not {text!r}")
        return int(text)

    if url.path == "/":
        return runs_page(db, one("status"), number("max_steps"), number("offset") or 0)
    if url.path == "/failures":
        model, label, kind = one("model"), one("label"), one("kind")
        if model is None and label is None and kind is None:
            return failures_index(db)
        if model is None or label is None or kind is None:
            raise ServeError(400, "give model, label and kind (or none of them)")
        return failures_page(db, model, label, kind, number("offset") or 0)
    found = re.fullmatch(r"/run/(\d{1,18})", url.path)
    if found:
        try:
            return render_page(view_data(db, int(found.group(1))))
        except StoreError as exc:
            raise ServeError(404, str(exc)) from exc
    raise ServeError(404, f"no page {url.path}")


def make_server(db: str | Path, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A server of ``db``'s runs (``serve_forever()`` to run it; port 0: any free one)."""
    connect(db, read_only=True).close()  # a missing or bad store: its one-line error now

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            try:
                status, page = 200, answer(db, self.path)
            except ServeError as exc:
                status, page = exc.status, str(exc) + "\n"
            except SteptraceError as exc:
                status, page = 500, str(exc) + "\n"
            data = page.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8" if status == 200
                             else "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args) -> None:  # quiet: the CLI prints the address
            pass

    return ThreadingHTTPServer((host, port), Handler)
