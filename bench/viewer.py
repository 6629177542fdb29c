"""Bench: how fast the ``steptrace view`` page of a 100,000-step run opens.

Run: ``.venv/bin/python bench/viewer.py [--opens 5]`` (needs Debian's ``chromium``).

Traces one 100,004-step run (a ``while`` loop of 33,333 iterations, 3 steps and one state
change each) into a temporary store, writes its page with ``write_view`` (timed: the host's
read and encoding), then opens the page ``--opens`` times in headless Chromium (one
browser, a new tab each time) and prints, per open, the page's own navigation timing
(``loadEventEnd``: from the navigation's start to the end of its load event, which comes
after the page's script has parsed the data and drawn step 0) and the time the End key
takes (to the last step, drawn). The goal: opens in under 2 s. Figures go to
bench/README.md by hand, with the date and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.chromium import Browser  # noqa: E402
from steptrace.analytics._viewer import write_view  # noqa: E402
from steptrace.sandbox._limits import Limits  # noqa: E402
from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402

GOAL_S = 2.0
BIG = ("def f(n):\n    s = 0\n    while s < n:\n        s += 1\n        u = n\n"
       "    return s\n")
END = """(() => {
  const t0 = performance.now();
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'End'}));
  return [performance.now() - t0, window.steptraceViewer.step()];
})()"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opens", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="steptrace-viewer-bench-") as root:
        root = Path(root)
        corpus = root / "corpus.jsonl"
        corpus.write_text(json.dumps({"id": "big", "code": BIG, "input": "33333"}) + "\n")
        db = root / "store.duckdb"
        trace_corpus(corpus, db, TraceOptions(workers=0, limits=Limits(max_steps=200_000)))
        out = root / "big.html"
        started = time.perf_counter()
        summary = write_view(db, 1, out)
        written = time.perf_counter() - started
        print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.python_version()}")
        print(f"run of {summary.steps:,} steps: page {summary.bytes / 1e6:.2f} MB, "
              f"written in {written:.2f} s (host: read and encode)")
        opens, ends = [], []
        with Browser() as browser:
            for _ in range(args.opens):
                page = browser.open(out.as_uri())
                load = browser.evaluate(
                    page, "performance.getEntriesByType('navigation')[0].loadEventEnd")
                end_ms, step = browser.evaluate(page, END)
                assert step == summary.steps - 1 and not page.console_errors, page.console_errors
                opens.append(load / 1000)
                ends.append(end_ms / 1000)
        print("open (navigation start to load end), s: "
              + ", ".join(f"{s:.3f}" for s in opens))
        median = statistics.median(opens)
        print(f"median open {median:.3f} s (goal < {GOAL_S} s: "
              f"{'met' if median < GOAL_S else 'NOT met'}); "
              f"to the last step (End) median {statistics.median(ends) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
