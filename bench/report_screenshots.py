"""Screenshots of each section of the report, and of the failures page, for
docs/guides/images (PNG, 1000 CSS pixels wide, in headless Chromium).

Run: ``.venv/bin/python bench/report_screenshots.py [--store PATH]``: the report of the
store (default: a fresh tests/helpers/report_store.py store, CRUXEval with five
experiments), made at a fixed time, each ``<section>`` captured on its own.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers.chromium import Browser  # noqa: E402
from steptrace.analytics._report import write_report  # noqa: E402

OUT = ROOT / "docs" / "guides" / "images"
SECTIONS = """Array.from(document.querySelectorAll('section')).map(s => {
  const r = s.getBoundingClientRect();
  return {id: s.id, x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width,
          h: r.height};
})"""
FIRST = """(() => { const r = document.querySelector('section').getBoundingClientRect();
  return [{id: 'failures', x: r.left, y: r.top + window.scrollY, w: r.width,
           h: Math.min(r.height, 900)}]; })()"""


def capture(browser: Browser, url: str, boxes_js: str) -> None:
    page = browser.open(url)
    browser.send("Emulation.setDeviceMetricsOverride", {"width": 1000, "height": 1200,
                 "deviceScaleFactor": 1, "mobile": False}, session=page.session)
    for box in browser.evaluate(page, boxes_js):
        shot = browser.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": box["x"], "y": box["y"], "width": box["w"], "height": box["h"],
                     "scale": 1}}, session=page.session)
        (OUT / f"report-{box['id']}.png").write_bytes(base64.b64decode(shot["data"]))
        print(f"report-{box['id']}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.store is not None:
            db = tmp / "crux.duckdb"
            shutil.copy(args.store, db)
        else:
            from helpers.report_store import build
            db = build(tmp).db
        out = tmp / "report.html"
        write_report(db, out, now=dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc))
        OUT.mkdir(parents=True, exist_ok=True)
        with Browser() as browser:
            capture(browser, out.as_uri(), SECTIONS)
            capture(browser, out.with_name("report-failures.html").as_uri(), FIRST)


if __name__ == "__main__":
    main()
