"""Bench: ``steptrace report`` and a re-``score`` of a large store, this code against an
earlier commit's (issue 36: 51-58 s for the report of a 15,000-task, five-experiment
store; the goal is under 10 s, with the same intervals).

Run: ``.venv/bin/python bench/report_speed.py [--baseline COMMIT] [--rounds N]
[--copies K] [--store PATH]``.

The store is CRUXEval traced in the real sandbox, tasks of every kind and five
experiments' synthetic predictions judged by ``score`` (tests/helpers/report_store.py:
13,375 tasks, 66,875 scored answers with ``--copies 1``), built once (or ``--store``, a
copy of one built before). Each round runs, in a fresh process each and alternating,
the report with this worktree's code and with the baseline's (``git archive COMMIT``
unpacked in a temporary directory, imported from there: the same venv), and a re-score
of the unchanged store with each (judge every prediction again, store the verdicts,
compute what ``score`` prints by default: the summary now, every table before). It
prints the median wall and CPU seconds (CPU: the process's own, every thread, and its
children's: a large report draws its plots in a second process) of each
and their ratio, and checks that both reports' tables are the same numbers (the tables
of the sections both codes have, row by row, the cells both have).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

# the package's folders as installed names (pyproject.toml's package-dir)
PACKAGE_DIRS = {"sandbox": "wasm_sandbox", "native_sandbox": "native_sandbox",
                "guest": "tracer", "queries": "queries"}

CHILD = r"""
import json, resource, sys, time
import steptrace
assert steptrace.__file__.startswith(sys.argv[1]), steptrace.__file__
what, store, out = sys.argv[2:5]
def children():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime
wall, cpu, kids = time.perf_counter(), time.process_time(), children()
if what == "report":
    from steptrace.analytics._report import write_report
    write_report(store, out)
else:
    from steptrace.scoring._score import score_predictions
    from steptrace.scoring._verdicts import ScoreOptions
    summary = score_predictions(store, out, ScoreOptions(workers=2))
    summary.summary() if hasattr(summary, "summary") else summary.tables()
print(json.dumps({"wall": time.perf_counter() - wall,
                  "cpu": time.process_time() - cpu + children() - kids}))
"""


def unpack(commit: str, into: Path) -> Path:
    """The commit's tree in ``into/src``, with the package's folders linked as installed;
    returns the directory to put first on PYTHONPATH."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True,
                          capture_output=True).stdout
    src = into / "src"
    with tarfile.open(fileobj=BytesIO(data)) as archive:
        archive.extractall(src, filter="data")
    for name, folder in PACKAGE_DIRS.items():
        (src / "engine" / name).symlink_to(src / folder, target_is_directory=True)
    path = into / "path"
    path.mkdir()
    (path / "steptrace").symlink_to(src / "engine", target_is_directory=True)
    return path


def run(code: Path | None, what: str, store: Path, out: Path) -> dict:
    """One measurement in a fresh process: ``code`` None is this worktree's code."""
    env = dict(os.environ)
    prefix = str(ROOT / "engine") if code is None else str(code / "steptrace")
    if code is not None:
        env["PYTHONPATH"] = str(code)
    done = subprocess.run([sys.executable, "-c", CHILD, prefix, what, str(store), str(out)],
                          env=env, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def tables(page: str) -> dict[str, list[dict]]:
    found = {}
    for section, body in re.findall(r'<section id="([^"]+)">(.*?)</section>', page, re.DOTALL):
        table = re.search(r"<thead><tr>(.*?)</tr></thead><tbody>(.*?)</tbody>", body, re.DOTALL)
        if table:
            columns = re.findall(r"<th>(.*?)</th>", table[1])
            found[section] = [dict(zip(columns, re.findall(r"<td[^>]*>(.*?)</td>", row)))
                              for row in re.findall(r"<tr>(.*?)</tr>", table[2])]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="d21cf9f",
                        help="the commit to compare with (default: before issue 36)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--store", type=Path, help="a store built before (copied)")
    parser.add_argument("--no-score", action="store_true", help="time the report only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.store is not None:
            shutil.copy(args.store, tmp / "report.duckdb")
            db = tmp / "report.duckdb"
        else:
            from helpers.report_store import build
            started = time.perf_counter()
            built = build(tmp, copies=args.copies)
            db = built.db
            print(f"store: {built.tasks:,} tasks, {built.predictions:,} predictions, built in "
                  f"{time.perf_counter() - started:.0f} s")
        import duckdb
        with duckdb.connect(str(db), read_only=True) as con:
            tasks = con.sql("SELECT * FROM tasks").pl()
        tasks_file = tmp / "tasks.jsonl"
        tasks.write_ndjson(tasks_file)
        base = unpack(args.baseline, tmp / "base")
        times: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.rounds):
            for name, code in (("this", None), ("base", base)):
                out = tmp / f"{name}.html"
                times.setdefault(("report", name), []).append(run(code, "report", db, out))
                if not args.no_score:
                    copy = tmp / f"{name}.duckdb"
                    shutil.copy(db, copy)
                    times.setdefault(("score", name), []).append(
                        run(code, "score", copy, tasks_file))
        mine, theirs = (tables((tmp / f"{n}.html").read_text()) for n in ("this", "base"))
        # the same numbers where both define them: every row of coverage, consistency
        # and comparison, and accuracy by kind's rows of each kind (``all`` now leaves
        # trivial kinds out; difficulty buckets are now shared by every experiment)
        differ = []
        for section in ("accuracy-kind", "coverage", "consistency", "comparison"):
            rows = [(a, b) for a, b in zip(mine.get(section, []), theirs.get(section, []))
                    if section != "accuracy-kind" or a["kind"] != "all"]
            if section == "accuracy-kind":
                by_key = {(b["model"], b["label"], b["kind"]): b for b in theirs[section]}
                rows = [(a, by_key.get((a["model"], a["label"], a["kind"]), {}))
                        for a in mine[section] if a["kind"] != "all"]
            for a, b in rows:
                shared = [c for c in a if c in b and c not in ("failures", "trivial")]
                if not shared or [a[c] for c in shared] != [b[c] for c in shared]:
                    differ.append(section)
                    break
        size = {n: (tmp / f"{n}.html").stat().st_size for n in ("this", "base")}
    print(f"cores: {os.cpu_count()}  load: {os.getloadavg()[0]:.1f}  rounds: {args.rounds} "
          f"(median)  baseline: {args.baseline}")
    print(f"{'':22}{'this wall':>10}{'base wall':>10}{'ratio':>7}{'this cpu':>10}"
          f"{'base cpu':>10}{'ratio':>7}")
    for what in ("report", "score"):
        if (what, "this") not in times:
            continue
        med = {(n, k): statistics.median(t[k] for t in times[(what, n)])
               for n in ("this", "base") for k in ("wall", "cpu")}
        print(f"{what:22}{med['this', 'wall']:>9.1f}s{med['base', 'wall']:>9.1f}s"
              f"{med['base', 'wall'] / med['this', 'wall']:>6.1f}x"
              f"{med['this', 'cpu']:>9.1f}s{med['base', 'cpu']:>9.1f}s"
              f"{med['base', 'cpu'] / med['this', 'cpu']:>6.1f}x")
    print(f"page bytes: this {size['this']:,}, base {size['base']:,}")
    print("accuracy by kind (each kind), coverage, consistency, comparison: "
          + ("the same numbers" if not differ else f"differ in {', '.join(differ)}"))


if __name__ == "__main__":
    main()
