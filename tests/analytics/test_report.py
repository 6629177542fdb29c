"""``steptrace report``: the page's sections and tables on the fixed store of
test_queries (traced in the real sandbox, with tasks, predictions and scores, and REval
question chains added here), the empty sections of a store without them, and the page in
headless Chromium (Debian's package, installed by ``make test``): it loads without
console errors, requests nothing but itself, shows every plot, draws every interval (an
error bar per value, its length in proportion to the interval) and n, and keeps its
tables collapsed."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from helpers.chromium import Browser
from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.cli._main import main
from steptrace.analytics import _drawing as drawing
from steptrace.analytics._figures import FIGURES
from steptrace.analytics._report import SECTIONS, write_report
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.cli import assert_one_line_error
from helpers.query_corpus import RECORDS, _add_tasks_predictions_scores

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

PLOTS = [section.id for section in SECTIONS]


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path]:
    """(a traced store only, the same with tasks, predictions and scores)."""
    root = tmp_path_factory.mktemp("report")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    plain = root / "plain.duckdb"
    trace_corpus(corpus, plain, TraceOptions(workers=0))
    full = root / "full.duckdb"
    shutil.copy(plain, full)
    analyse_store(full, AnalysisOptions(workers=0))
    _add_tasks_predictions_scores(full)
    _add_chains(full)
    return plain, full


def _add_chains(db: Path) -> None:
    """REval's question chains on run 1 (count_a 'abca', whose output task t1 m1 answers
    right twice and m2 wrong once): coverage, state and next_line tasks (tasks --chains
    1), answered by m1 right in both samples and by m2 in one sample, coverage right,
    state and next_line wrong. Every chain of m1 then scores 1, of m2 1/8."""
    from steptrace.predictions._predict import Prediction, PredictionStore
    from steptrace.tasks._tasks import TaskOptions, generate_tasks
    generate_tasks(db, TaskOptions(kinds=("coverage", "state", "next_line", "output"),
                                   per_run=1, seed=0, chains=1))
    with duckdb.connect(str(db)) as con:
        tasks = con.execute("SELECT task_id, kind FROM tasks WHERE run_id = 1 AND kind IN "
                            "('coverage', 'state', 'next_line') ORDER BY task_id").fetchall()
        answers = [(t, "m1", s, True) for t, _ in tasks for s in (0, 1)]
        answers += [(t, "m2", 0, kind == "coverage") for t, kind in tasks]
        con.executemany("INSERT INTO scores (task_id, model, label, sample_index, correct) "
                        "VALUES (?, ?, 'l1', ?, ?)", answers)
    rows = [Prediction(t, model, s, dict(tasks)[t], answer="x", parsed=True, label="l1")
            for t, model, s, _ in answers]
    PredictionStore(db).write(rows)


def section_of(page: str, section_id: str) -> str:
    return re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.DOTALL).group(1)


def table_rows(fragment: str) -> list[list[str]]:
    body = re.search(r"<tbody>(.*?)</tbody>", fragment, re.DOTALL).group(1)
    return [[html.unescape(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body)]


def test_full_store_has_every_plot_and_its_table(stores, tmp_path):
    out = tmp_path / "report.html"
    summary = write_report(stores[1], out)
    assert (summary.runs, summary.programs, summary.plots, summary.empty) == (6, 5, PLOTS, {})
    page = out.read_text(encoding="utf-8")
    assert re.findall(r'<figure class="plot" id="plot-([a-z-]+)">', page) == PLOTS
    assert "Store <code>" in page and ": 6 runs of 5 programs." in page
    # runs by status: the five hand-written programs (see test_queries)
    assert table_rows(section_of(page, "status")) == [
        ["ok", "4", "3", "0", "56"], ["exception", "1", "0", "1", "5"],
        ["invalid", "1", "0", "1", "0"]]
    assert table_rows(section_of(page, "tasks")) == [
        ["state", "9", "5", "4"], ["coverage", "7", "4", "3"], ["next_line", "6", "5", "4"],
        ["exception", "5", "5", "4"], ["steps", "5", "5", "4"], ["output", "4", "4", "3"]]
    # accuracy by kind: score's "by kind" table from the scored answers (scored_samples):
    # pass@1, ci_low, ci_high, unparseable, fully solved, unsolved; n = tasks. m1 is right
    # on 2 of 2, 1 of 2, 1 of 2 output samples (0.6667; an interval over three tasks), on
    # every chain question (_add_chains); its steps task has no scores row: not counted
    kind_rows = table_rows(section_of(page, "accuracy-kind"))
    assert [r[:-1] for r in kind_rows] == [
        ["m1", "l1", "coverage", "1", "2", "1.0", "1.0", "1.0", "0.0", "1.0", "0.0", ""],
        ["m1", "l1", "exception", "1", "2", "0.0", "0.0", "0.0", "0.5", "0.0", "1.0", ""],
        ["m1", "l1", "next_line", "1", "2", "1.0", "1.0", "1.0", "0.0", "1.0", "0.0", ""],
        ["m1", "l1", "output", "3", "6", "0.6667", "0.5", "1.0", "0.0", "0.3333", "0.0", ""],
        ["m1", "l1", "state", "2", "4", "1.0", "1.0", "1.0", "0.0", "1.0", "0.0", ""],
        ["m1", "l1", "all", "8", "16", "0.75", "0.5", "1.0", "0.0625", "0.625", "0.125", ""],
        ["m2", "l1", "coverage", "1", "1", "1.0", "1.0", "1.0", "0.0", "1.0", "0.0", ""],
        ["m2", "l1", "next_line", "1", "1", "0.0", "0.0", "0.0", "0.0", "0.0", "1.0", ""],
        ["m2", "l1", "output", "2", "2", "0.5", "0.0", "1.0", "0.0", "0.5", "0.5", ""],
        ["m2", "l1", "state", "2", "2", "0.0", "0.0", "0.0", "0.0", "0.0", "1.0", ""],
        ["m2", "l1", "all", "6", "6", "0.3333", "0.0", "0.6667", "0.0", "0.3333", "0.6667", ""]]
    # the last column links each cell with wrong answers to them (the failures page):
    # m1 exception and output, m2 next_line, output and state; not "all"
    failures = out.with_name("report-failures.html")
    assert summary.failures == str(failures)
    linked = [(r[0], r[2]) for r in kind_rows if r[-1]]
    assert linked == [("m1", "exception"), ("m1", "output"), ("m2", "next_line"),
                      ("m2", "output"), ("m2", "state")]
    assert kind_rows[1][-1] == ('<a class="failures" href="report-failures.html#'
                                'fail--m1--l1--exception">wrong answers</a>')
    wrong = failures.read_text()
    assert re.findall(r'<section id="(fail--[^"]+)">', wrong) == [
        "fail--m1--l1--exception", "fail--m1--l1--output", "fail--m2--l1--next_line",
        "fail--m2--l1--output", "fail--m2--l1--state"]
    # accuracy by difficulty: each experiment's 8 (6) tasks lie in the buckets 8-15 and
    # 16-31, fewer than MIN_TASKS: merged into one bucket, every point marked few
    difficulty = table_rows(section_of(page, "accuracy-difficulty"))
    assert {tuple(r[3:6]) for r in difficulty} == {("8", "32", "8-31")}
    assert all(r[-2] == "few" for r in difficulty)
    assert [r[:3] + r[6:11] for r in difficulty if r[2] in ("output", "all")] == [
        ["m1", "l1", "output", "3", "6", "0.6667", "0.5", "1.0"],
        ["m1", "l1", "all", "8", "16", "0.75", "0.5", "1.0"],
        ["m2", "l1", "output", "2", "2", "0.5", "0.0", "1.0"],
        ["m2", "l1", "all", "6", "6", "0.3333", "0.0", "0.6667"]]
    # coverage: both right on the one coverage question (the line runs)
    assert table_rows(section_of(page, "coverage")) == [
        ["m1", "l1", "2", "2", "0", "0", "0"] + ["1.0"] * 9,
        ["m2", "l1", "1", "1", "0", "0", "0"] + ["1.0"] * 9]
    # REval's chains of run 1: m1 right on all four twice (score 1), m2 right on
    # coverage only (1/8)
    assert table_rows(section_of(page, "consistency")) == [
        ["m1", "l1", "2", "1.0", "1.0", "1.0", "2", "0", "0", "0", "0"],
        ["m2", "l1", "1", "0.125", "0.125", "0.125", "0", "0", "0", "1", "0"]]
    # paired comparison over the six tasks both answered: m1 (1 + 1/2 + 1 + 1 + 1 + 1)/6,
    # m2 (0 + 1 + 1 + 0 + 0 + 0)/6
    ((*head, low, high, p),) = table_rows(section_of(page, "comparison"))
    assert head == ["m1", "l1", "m2", "l1", "6", "0.9167", "0.3333", "0.5833"]
    assert float(low) < 0.5833 < float(high) and 0.95 < float(p) < 1
    # methods: the query run once per kind
    methods = table_rows(section_of(page, "accuracy-method"))
    assert ["output", "m1", "l1", "lower", "2", "4", "0", "4", "0.75"] in [r[:-1] for r in methods]
    assert sorted({r[0] for r in methods}) == ["coverage", "next_line", "output", "state",
                                               "steps"]
    assert '<td>ok</td><td class="num">4</td>' in section_of(page, "status")


def test_the_page_is_self_contained(stores, tmp_path):
    """Inline SVG only: no script, no image, no stylesheet, nothing to fetch. The only
    http URLs are the SVG namespace names (identifiers, never fetched); every url() and
    href inside the plots points into the page, and no two plots share an id."""
    out = tmp_path / "report.html"
    write_report(stores[1], out)
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page and "<img" not in page and "<link rel=\"stylesheet\"" not in page
    assert page.count("<svg") == len(PLOTS)
    assert Counter(re.findall(r'([\w:]+)="(https?://[^"]*)"', page)) == Counter({
        ("xmlns", "http://www.w3.org/2000/svg"): len(PLOTS),
        ("xmlns:xlink", "http://www.w3.org/1999/xlink"): len(PLOTS)})
    assert len(re.findall(r"https?://", page)) == 2 * len(PLOTS)
    # besides the icon, links only to the failures page beside it (a file of its own)
    links = set(re.findall(r'(?:href|src)="([^"#][^"]*)"', page))
    assert "data:," in links and len(links) == 6
    assert all(link.startswith("report-failures.html#fail--") for link in links - {"data:,"})
    assert all(ref.startswith("#") for ref in re.findall(r"url\(([^)]*)\)", page))
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    references = set(re.findall(r'href="#([^"]+)"|url\(#([^)]+)\)', page))
    assert {name for pair in references for name in pair if name} <= set(ids)


def test_same_store_and_time_give_the_same_bytes(stores, tmp_path):
    """The SVG carries no date and salted ids: the page changes only with its time."""
    made = dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.timezone.utc)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "report.html", tmp_path / "b" / "report.html"
    write_report(stores[1], first, now=made)
    write_report(stores[1], second, now=made)
    assert first.read_bytes() == second.read_bytes()
    assert ": 6 runs of 5 programs. Made 2024-01-02 03:04 UTC.</p>" in first.read_text()


# the drawing process replaced by one that dies at once, or answers garbage, or is not there
BROKEN_DRAWERS = {
    "dies": [sys.executable, "-c", "import sys; sys.exit(3)"],
    "garbage": [sys.executable, "-c",
                "import sys; sys.stdin.buffer.read(8); sys.stdout.buffer.write(b'\\x00' * 7 + b'\\x05junk!')"],
    "missing": ["/nonexistent/steptrace-drawing"],
    "stuck": [sys.executable, "-c", "import time; time.sleep(600)"],
    "no interpreter": [None, "-m", "steptrace.analytics._drawing"],  # sys.executable empty
}


def test_the_drawing_process_draws_what_the_report_would(stores):
    """A plot the drawing process gives back (the report not drawing from its end of the
    queue) is the SVG the report draws itself."""
    from steptrace.analytics._figures import plot_svg
    from steptrace.analytics._report import _run
    from steptrace.analytics._report_filter import ReportFilter, open_filtered
    with open_filtered(stores[1], ReportFilter()) as con:
        result = _run(con, "runs_by_status", str(stores[1]))
    there = drawing.Drawing(parallel=True)
    try:
        answer = there.submit("status", result).result(timeout=120)
    finally:
        there.close()
    assert answer == ("ok", plot_svg("status", result))
    assert answer[1].startswith("<svg")


def test_every_section_has_its_drawing():
    """The sections (the page, _report.py) and the drawings (_figures.py): one each."""
    assert list(FIGURES) == PLOTS


@pytest.mark.parametrize("drawer", [None, *BROKEN_DRAWERS])
def test_plots_drawn_in_the_drawing_process_are_the_same_bytes(stores, tmp_path, monkeypatch,
                                                                drawer):
    """A large report draws its plots in a second process (engine/analytics/_drawing.py):
    the page is the same bytes as drawn in one process, and still is when that process
    dies, answers garbage, never answers or cannot start (its plots are drawn here)."""
    made = dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.timezone.utc)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    here, there = tmp_path / "a" / "report.html", tmp_path / "b" / "report.html"
    alone = write_report(stores[1], here, now=made, parallel=False)
    if drawer is not None:
        monkeypatch.setattr(drawing, "WORKER", BROKEN_DRAWERS[drawer])
        monkeypatch.setattr(drawing, "PATIENCE", 0.5)  # the stuck one's plot: drawn here
    beside = write_report(stores[1], there, now=made, parallel=True)
    assert there.read_bytes() == here.read_bytes()
    assert beside.plots == alone.plots == PLOTS and beside.empty == alone.empty == {}


def test_store_without_tasks_says_what_to_run(stores, tmp_path):
    summary = write_report(stores[0], tmp_path / "plain.html")
    assert summary.plots == ["status", "steps"]
    predict_first = "no data: table predictions does not exist: run steptrace predict first"
    tasks_first = "no data: table tasks does not exist: run steptrace tasks first"
    assert summary.empty == {
        "tasks": tasks_first, "accuracy-kind": predict_first,
        "accuracy-difficulty": predict_first, "coverage": predict_first,
        "consistency": predict_first, "comparison": predict_first,
        "accuracy-method": tasks_first}
    page = (tmp_path / "plain.html").read_text(encoding="utf-8")
    assert ('<p class="empty">No plot: no data: table tasks does not exist: run steptrace '
            "tasks first</p>") in section_of(page, "tasks")


def test_cli_report(stores, tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "--db", str(stores[1]), "--out", str(out),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["item"]: row["value"] for row in json.loads(result.stdout)}
    assert rows["plots"] == ", ".join(PLOTS) and rows["runs"] == 6
    assert rows["bytes"] == out.stat().st_size
    missing = tmp_path / "none.duckdb"
    assert_one_line_error(CliRunner().invoke(main, ["report", "--db", str(missing), "--out",
                                                    str(out)]),
                          f"database not found: {missing}")
    assert_one_line_error(CliRunner().invoke(main, ["report", "--db", str(stores[1]), "--out",
                                                    str(tmp_path / "no" / "r.html")]),
                          f"cannot write {tmp_path / 'no' / 'r.html'}: no directory "
                          f"{tmp_path / 'no'}")


PLOT_BOXES = """
Array.from(document.querySelectorAll('figure.plot')).map(figure => {
  const svg = figure.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  return {id: figure.id, width: box.width, height: box.height,
          shown: !!svg && svg.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}),
          shapes: svg ? svg.querySelectorAll('path, rect, use').length : 0};
})
"""


def test_report_in_headless_chromium(stores, tmp_path):
    out = tmp_path / "report.html"
    write_report(stores[1], out)
    with Browser() as browser:
        page = browser.open(out.as_uri())
        boxes = browser.evaluate(page, PLOT_BOXES)
        title = browser.evaluate(page, "document.title")
    assert page.console_errors == []
    assert page.requests == [out.as_uri()]
    assert title == "steptrace report"
    assert [box["id"] for box in boxes] == [f"plot-{p}" for p in PLOTS]
    for box in boxes:
        assert box["shown"] and box["width"] > 100 and box["height"] > 100, box
        assert box["shapes"] > 10, box


INTERVALS = """
Array.from(document.querySelectorAll('figure.plot')).map(figure => ({
  id: figure.id,
  errorbars: Array.from(figure.querySelectorAll('g[id*="-errorbars-"] path')).map(path => {
    const box = path.getBBox();
    return [box.width, box.height];
  }),
  nLabels: figure.querySelectorAll('g[id*="-n-label-"]').length,
}))
"""

PAGE = """({height: document.documentElement.scrollHeight,
  details: document.querySelectorAll('details').length,
  open: document.querySelectorAll('details[open]').length,
  tables: Array.from(document.querySelectorAll('table')).map(t => t.checkVisibility()),
  kindRows: Array.from(document.querySelectorAll('#accuracy-kind tbody tr')).map(
    tr => Array.from(tr.cells).map(td => td.textContent))})
"""


def test_report_draws_intervals_and_n_in_headless_chromium(stores, tmp_path):
    """The intervals are drawn: each statistical plot has one error bar per value (an SVG
    path each, their lengths in proportion to ci_high − ci_low) and one n label per
    value; the tables are collapsed, so the page is as tall as its plots."""
    out = tmp_path / "report.html"
    write_report(stores[1], out)
    with Browser() as browser:
        page = browser.open(out.as_uri())
        plots = {p["id"]: p for p in browser.evaluate(page, INTERVALS)}
        shown = browser.evaluate(page, PAGE)
    assert page.console_errors == []
    # error bars and n labels per plot: accuracy by kind 6 bars of m1 (5 kinds and all)
    # and 5 of m2 (no exception task); by difficulty one point per kind (and all) and
    # experiment (6 + 5), its n in each panel's title; coverage 3 measures x 2;
    # consistency 2; comparison 1 pair
    counts = {i: (len(p["errorbars"]), p["nLabels"]) for i, p in plots.items()}
    assert counts == {"plot-status": (0, 0), "plot-steps": (0, 0), "plot-tasks": (0, 0),
                      "plot-accuracy-kind": (11, 11), "plot-accuracy-difficulty": (11, 0),
                      "plot-coverage": (6, 6), "plot-consistency": (2, 2),
                      "plot-comparison": (1, 1), "plot-accuracy-method": (0, 0)}
    # accuracy by kind, bars in order: m1 coverage, exception, next_line, output, state,
    # all; m2 coverage, next_line, output, state, all (a panel each, horizontal). The
    # intervals' widths (ci_high - ci_low, the table's columns) and the error bars'
    # widths in pixels agree
    rows = {(r[0], r[2]): r for r in shown["kindRows"]}
    order = [("m1", k) for k in ("coverage", "exception", "next_line", "output", "state",
                                 "all")]
    order += [("m2", k) for k in ("coverage", "next_line", "output", "state", "all")]
    widths = [float(rows[key][7]) - float(rows[key][6]) for key in order]
    assert widths == [0.0, 0.0, 0.0, 0.5, 0.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.6667]
    drawn = [w for w, _ in plots["plot-accuracy-kind"]["errorbars"]]
    scale = max(drawn)  # the pixels of a whole unit (m2's output: 0 to 1)
    assert [round(w / scale, 3) for w in drawn] == [round(w, 3) for w in widths]
    # the comparison's interval is horizontal and not empty
    ((width, height),) = plots["plot-comparison"]["errorbars"]
    assert width > 10 and height == 0
    # tables collapsed by default: one <details> per table, none open, none shown
    assert shown["details"] == len(PLOTS) and shown["open"] == 0
    assert shown["tables"] == [False] * len(PLOTS)
    assert shown["height"] < 12_000, shown["height"]


def test_the_browser_check_sees_errors_requests_and_hidden_plots(tmp_path):
    """The checks above can fail: a page with a console error, an exception, a missing
    image and a hidden plot is seen as such."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><link rel=\"icon\" href=\"data:,\"></head><body>"
                   '<figure class="plot" id="plot-a"><svg width="200" height="200">'
                   '<rect width="10" height="10"/></svg></figure>'
                   '<figure class="plot" id="plot-b" style="display:none"><svg width="200" '
                   'height="200"></svg></figure><img src="missing.png">'
                   "<script>console.error('drawn badly'); undefined_function();</script>"
                   "</body></html>")
    with Browser() as browser:
        page = browser.open(bad.as_uri())
        boxes = browser.evaluate(page, PLOT_BOXES)
    # the failed image load is logged whenever the file read fails: order not fixed
    assert sorted(error.split("\n")[0] for error in page.console_errors) == [
        "Failed to load resource: net::ERR_FILE_NOT_FOUND",
        "ReferenceError: undefined_function is not defined", "drawn badly"]
    assert page.requests == [bad.as_uri(), (tmp_path / "missing.png").as_uri()]
    assert [(b["id"], b["shown"], b["width"]) for b in boxes] == [("plot-a", True, 200),
                                                                  ("plot-b", False, 0)]


def test_failures_drill_down_in_the_report_and_in_serve(stores, tmp_path):
    """From a cell to its wrong answers: the report's failures page and serve's pages show
    each with its prompt, raw response, extracted and expected answer and the trace at the
    step the question is about (an output task: the run's last step; a state task: the
    occurrence-th time its line runs), every text escaped; serve's trace link opens the
    viewer at that step."""
    import threading
    import urllib.request
    from steptrace.analytics._serve import make_server
    db = tmp_path / "store.duckdb"
    shutil.copy(stores[1], db)
    hostile = "<script>alert('x')</script> & <b>bold</b>"
    with duckdb.connect(str(db)) as con:
        (t1,) = con.execute("SELECT task_id FROM tasks WHERE kind = 'output' AND run_id = 1"
                            ).fetchone()
        con.execute("UPDATE predictions SET raw_text = ? WHERE task_id = ? AND model = 'm2'",
                    [hostile, t1])
        last = con.execute("SELECT count(*) - 1 FROM steps WHERE run_id = 1").fetchone()[0]
        line, occurrence, run = con.execute(
            "SELECT line, occurrence, run_id FROM tasks WHERE kind = 'state' "
            "AND run_id = 1").fetchone()
        steps = con.execute("SELECT line, event FROM steps WHERE run_id = ? ORDER BY step",
                            [run]).fetchall()
    at = [i for i, (l, ev) in enumerate(steps) if l == line and ev == "line"][occurrence - 1]
    out = tmp_path / "report.html"
    summary = write_report(db, out)
    page = Path(summary.failures).read_text()
    m2_output = re.search(r'<section id="fail--m2--l1--output">(.*?)</section>', page,
                          re.DOTALL).group(1)
    assert m2_output.startswith("<h2>m2 [l1] · output: 1 wrong of 2</h2>")
    assert hostile not in page and html.escape(hostile) in m2_output
    assert (f"<dt>expected</dt><dd><pre>2</pre></dd><dt>extracted answer</dt>"
            f"<dd><pre>x</pre></dd>") in m2_output
    assert f"trace: run 1, step {last} (<code>steptrace serve</code>, then " \
           f"<code>/run/1#step={last}</code>)" in m2_output
    assert "<summary>prompt</summary><pre>" in m2_output and "<script" not in page
    m1_exception = re.search(r'<section id="fail--m1--l1--exception">(.*?)</section>', page,
                             re.DOTALL).group(1)
    assert "<dt>extracted answer</dt><dd><pre>(unparseable)</pre></dd>" in m1_exception
    assert "<summary>raw response</summary><pre>no idea</pre>" in m1_exception
    server = make_server(db, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        index = urllib.request.urlopen(base + "/failures", timeout=30).read().decode()
        assert ('<td>m2</td><td>l1</td><td>state</td><td>2</td><td>2</td><td><a href="'
                '/failures?model=m2&amp;label=l1&amp;kind=state">wrong answers</a>') in index
        cell = urllib.request.urlopen(base + "/failures?model=m2&label=l1&kind=state",
                                      timeout=30).read().decode()
        assert '<p id="count">2 wrong answers; 1-2 shown.</p>' in cell
        assert f'<a class="trace" href="/run/{run}#step={at}">' in cell
        with Browser() as browser:
            viewer = browser.open(f"{base}/run/{run}#step={at}")
            assert browser.evaluate(viewer, "window.steptraceViewer.step()") == at
            assert viewer.console_errors == []
        bad = urllib.request.Request(base + "/failures?model=m2")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=30)
        assert refused.value.code == 400
        assert refused.value.read().decode() == "give model, label and kind (or none of them)\n"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_results_json_in_lm_evaluation_harness_layout(stores, tmp_path):
    """One results.json per experiment next to the report: the by-kind pass@1 as acc, its
    standard error over the tasks and score's interval, all as the group."""
    out = tmp_path / "report.html"
    summary = write_report(stores[1], out)
    assert summary.results == [str(tmp_path / "report-results" / "m1__l1" / "results.json"),
                               str(tmp_path / "report-results" / "m2__l1" / "results.json")]
    m1 = json.loads(Path(summary.results[0]).read_text())
    assert sorted(m1) == ["config", "configs", "date", "group_subtasks", "groups",
                          "higher_is_better", "n-samples", "n-shot", "results", "steptrace",
                          "versions"]
    # m1's output tasks: 1, 1/2, 1/2 right (mean 0.6667, sample sd 0.2887, / sqrt 3)
    assert m1["results"]["steptrace_output"] == {
        "alias": "output", "acc,none": 0.6667, "acc_stderr,none": pytest.approx(1 / 6),
        "acc_ci_low,none": 0.5, "acc_ci_high,none": 1.0}
    assert m1["groups"]["steptrace"]["acc,none"] == 0.75
    assert m1["n-samples"]["steptrace_output"] == {"original": 3, "effective": 3}
    assert m1["group_subtasks"]["steptrace"] == [
        "steptrace_coverage", "steptrace_exception", "steptrace_next_line",
        "steptrace_output", "steptrace_state"]
    assert m1["config"]["model"] == "m1" and m1["config"]["model_args"] == "label=l1"
    # one task: no standard error (JSON null), never NaN
    assert m1["results"]["steptrace_coverage"]["acc_stderr,none"] is None
