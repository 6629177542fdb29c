"""The report of a large store, read in headless Chromium: CRUXEval traced in the real
sandbox with tasks of every kind and five experiments' predictions, judged by ``score``
(tests/helpers/report_store.py: 13,375 tasks; and three copies of it, 40,125). In every
plot no two texts overlap, none leaves its figure and none enters a panel it does not
belong to (measured by the browser's layout: tests/helpers/report_layout.py), and each
interval drawn is as long as its table says (ci_high − ci_low, in the panel's scale).
The filters (--model, --label, --kinds, --where) keep what they name, in every section."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from helpers.chromium import Browser
from helpers.report_layout import TEXT_LAYOUT
from helpers.report_store import EXPERIMENTS, build
from steptrace.analytics._report import MIN_TASKS, SECTIONS, SPAN, svg, write_report
from steptrace.analytics._report_filter import ReportFilter
from steptrace.cli._main import main

pytestmark = pytest.mark.slow  # builds a CRUXEval store: a minute or more

PLOTS = [f"plot-{section.id}" for section in SECTIONS]


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    return build(tmp_path_factory.mktemp("large"))


def tables(page: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Each section's table: (columns, rows), the cells as text."""
    found = {}
    for section, body in re.findall(r'<section id="([^"]+)">(.*?)</section>', page, re.DOTALL):
        table = re.search(r"<table><thead><tr>(.*?)</tr></thead><tbody>(.*?)</tbody>", body,
                          re.DOTALL)
        if table:
            columns = [html.unescape(c) for c in re.findall(r"<th>(.*?)</th>", table[1])]
            rows = [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
                    for row in re.findall(r"<tr>(.*?)</tr>", table[2])]
            found[section] = (columns, rows)
    return found


def layout(path: Path) -> dict[str, dict]:
    with Browser() as browser:
        page = browser.open(path.as_uri())
        measured = browser.evaluate(page, TEXT_LAYOUT)
    assert page.console_errors == []
    return {figure["id"]: figure for figure in measured}


def interval_widths(columns: list[str], rows: list[list[str]]) -> list[float]:
    low, high = columns.index("ci_low"), columns.index("ci_high")
    return [float(r[high]) - float(r[low]) for r in rows]


def assert_drawn_as_tables(figures: dict[str, dict], found: dict) -> None:
    """Every interval of the statistical plots against its table row, to 0.01 of the
    axis (a pixel or two)."""
    # accuracy by kind: a panel per experiment, its bars in the table's row order, x 0..SPAN
    columns, rows = found["accuracy-kind"]
    experiments = list(dict.fromkeys((r[0], r[1]) for r in rows))
    bars = figures["plot-accuracy-kind"]["errorbars"]
    assert sorted(bars) == sorted(str(i) for i in range(len(experiments)))
    for i, e in enumerate(experiments):
        mine = [r for r in rows if (r[0], r[1]) == e]
        width, _ = bars[str(i)]["panel"]
        drawn = [w / width * SPAN for w, _ in bars[str(i)]["paths"]]
        assert drawn == pytest.approx(interval_widths(columns, mine), abs=0.01)
    # accuracy by difficulty: a panel per kind (all last), a series per experiment, y -0.05..1.05
    columns, rows = found["accuracy-difficulty"]
    kinds = sorted({r[2] for r in rows} - {"all"}) + ["all"]
    experiments = list(dict.fromkeys((r[0], r[1]) for r in rows))
    bars = figures["plot-accuracy-difficulty"]["errorbars"]
    checked = 0
    for p, kind in enumerate(kinds):
        for i, e in enumerate(experiments):
            mine = [r for r in rows if (r[0], r[1]) == e and r[2] == kind]
            if not mine:
                assert f"{p}-{i}" not in bars
                continue
            _, height = bars[f"{p}-{i}"]["panel"]
            drawn = [h / height * 1.1 for _, h in bars[f"{p}-{i}"]["paths"]]
            assert drawn == pytest.approx(interval_widths(columns, mine), abs=0.01)
            checked += len(mine)
    assert checked == len(rows)
    # coverage: a panel per measure, a dot per experiment
    columns, rows = found["coverage"]
    bars = figures["plot-coverage"]["errorbars"]
    for p, measure in enumerate(("precision", "recall", "f1")):
        width, _ = bars[str(p)]["panel"]
        drawn = [w / width * SPAN for w, _ in bars[str(p)]["paths"]]
        low, high = columns.index(f"{measure} ci_low"), columns.index(f"{measure} ci_high")
        assert drawn == pytest.approx([float(r[high]) - float(r[low]) for r in rows], abs=0.01)
    # paired comparison: x from -1.05 to 2.2
    columns, rows = found["comparison"]
    width, _ = figures["plot-comparison"]["errorbars"]["0"]["panel"]
    drawn = [w / width * 3.25 for w, _ in figures["plot-comparison"]["errorbars"]["0"]["paths"]]
    assert drawn == pytest.approx(interval_widths(columns, rows), abs=0.01)


def test_large_report_has_no_overlapping_text_and_intervals_as_its_tables(large, tmp_path):
    out = tmp_path / "report.html"
    summary = write_report(large.db, out)
    assert large.tasks == 13_375 and large.predictions == 5 * 13_375
    assert summary.plots == [s.id for s in SECTIONS] and summary.empty == {}
    page = out.read_text()
    figures = layout(out)
    assert list(figures) == PLOTS
    assert {f: figures[f]["problems"] for f in PLOTS} == {f: [] for f in PLOTS}
    # small multiples: a panel per experiment, per kind (and all), per coverage measure
    assert figures["plot-accuracy-kind"]["panels"] == 5
    assert figures["plot-accuracy-difficulty"]["panels"] == 17  # 16 kinds and all
    assert figures["plot-coverage"]["panels"] == 3
    found = tables(page)
    assert_drawn_as_tables(figures, found)
    # exception tasks all answer "none" in CRUXEval: reported apart, not in all
    columns, rows = found["accuracy-kind"]
    kinds = [r[columns.index("kind")] for r in rows if (r[0], r[1]) == ("model-a", "cot")]
    assert kinds[-2:] == ["all", "exception"]
    trivial = {r[columns.index("kind")]: r[columns.index("trivial")] for r in rows}
    assert trivial["exception"] == "every answer none" and trivial["all"] == ""
    every = {r[columns.index("kind")]: int(r[columns.index("tasks")]) for r in rows
             if (r[0], r[1]) == ("model-a", "cot")}
    assert every["all"] == 13_375 - 800 == sum(n for k, n in every.items()
                                                if k not in ("all", "exception"))


def test_three_times_the_store_is_as_readable(tmp_path):
    """Three copies of CRUXEval (40,125 tasks; n of five digits): still no overlap."""
    big = build(tmp_path, copies=3)
    assert big.tasks == 3 * 13_375
    out = tmp_path / "report.html"
    write_report(big.db, out)
    figures = layout(out)
    assert {f: figures[f]["problems"] for f in PLOTS} == {f: [] for f in PLOTS}
    assert_drawn_as_tables(figures, tables(out.read_text()))


def test_the_layout_check_sees_overlaps_and_spills(tmp_path):
    """The check can fail: two texts on one spot, a text out of its figure and a label
    over another panel are each seen."""
    figure = Figure(figsize=(4, 2))
    left, right = figure.subplots(1, 2)
    left.text(0.5, 0.5, "first", gid="a")
    left.text(0.5, 0.5, "second", gid="b")
    left.text(1.3, 0.2, "over the right panel", gid="c")
    figure.text(0.95, 0.5, "off the edge of the figure", gid="d")
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                    f'<figure class="plot" id="plot-bad">{svg(figure, "bad")}</figure>'
                    "</body></html>")
    problems = layout(page)["plot-bad"]["problems"]
    assert "bad-a overlaps bad-b" in problems
    assert any(p.startswith("bad-c enters bad-axes_") for p in problems)
    assert "bad-d leaves the figure" in problems


def test_filters_keep_what_they_name(large, tmp_path):
    """--model, --label, --kinds and --where restrict every section and its table; the
    page says so; a bad filter is one line."""
    out = tmp_path / "only.html"
    result = CliRunner().invoke(main, ["report", "--db", str(large.db), "--out", str(out),
                                       "--model", "model-a", "--label", "cot",
                                       "--kinds", "output,input",
                                       "--where", "sample_id IN ('sample_0', 'sample_1', "
                                                  "'sample_2', 'sample_3')"])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    found = tables(page)
    assert "(only model model-a; label cot; kinds output, input; where sample_id IN" in page
    columns, rows = found["accuracy-kind"]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("model-a", "cot", "input", "4"), ("model-a", "cot", "output", "4"),
        ("model-a", "cot", "all", "8")]
    assert [r[:2] for r in found["tasks"][1]] == [["input", "4"], ["output", "4"]]
    assert [r[:2] for r in found["status"][1]] == [["ok", "4"]]
    assert ": 4 runs of 4 programs (only" in page
    assert "coverage" not in found and "comparison" not in found
    bad = CliRunner().invoke(main, ["report", "--db", str(large.db), "--out", str(out),
                                    "--kinds", "outputs"])
    assert bad.exit_code != 0 and len(bad.output.strip().splitlines()) == 1, bad.output
    assert "unknown task kind 'outputs'" in bad.output
    assert MIN_TASKS == 10 and len(EXPERIMENTS) == 5
