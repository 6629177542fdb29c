"""Bench: ``repair`` over excerpts of real package functions (CodeBenchGen-style, issue
35), against a local test model server.

Run: ``.venv/bin/python bench/repair_popular.py [--count 20] [--rounds 3] [--out DIR]``.
The packages of tests/sandbox/data's popular_a.lock and popular_b.lock are installed
(pip, exactly the locks) and the functions of :data:`PACKAGES` taken as ``steptrace
excerpts`` does (at most ``--count`` a distribution): each its module's imports it uses
and its own source, the names its project defines elsewhere missing. ``repair`` runs them
in the standard guest (no packages: the examples must become self-contained) against
tests/helpers/repair_model.py's server on 127.0.0.1, which stands in for a model that
reads the repository: it puts in the definitions of the names the feedback lists, from
the package's source, and writes a test calling the function with literals chosen by its
annotations (bench/harvest_popular.py's ``calls_for``), asserting that a second call
returns an equal value; about one example in 7 (by its id's digest) gets a round-1 test
that does not call the function (it must not be kept). The repaired corpus is then traced (``steptrace trace``), and every
kept example must run ``ok``.

Prints one JSON object: the excerpts (found, written, skipped, with project names), the
examples passing after each round (0 to ``--rounds``), the kept ones traced by status,
and why the rest failed (their last round's status and exception type).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harvest_popular import LOCKS, calls_for  # noqa: E402
from helpers.repair_model import ContextModel  # noqa: E402
from steptrace.benchmark._excerpts import excerpts_of_site  # noqa: E402
from steptrace.benchmark._repair import RepairOptions, repair  # noqa: E402
from steptrace.benchmark._scan import ScanReport, read_distributions  # noqa: E402
from steptrace.predictions._predict import PredictOptions  # noqa: E402
from steptrace.sandbox._packages import install, read_lock  # noqa: E402

PACKAGES = ("cachetools", "idna", "isodate", "jmespath", "markdown-it-py", "mdurl",
            "more-itertools", "packaging", "pyparsing", "python-slugify", "tabulate",
            "xmltodict")


def wrong(ident: str) -> bool:
    """About one example in 7 (by its id's digest): its round-1 test never calls the function."""
    return int(hashlib.sha256(ident.encode()).hexdigest(), 16) % 7 == 0


def why_failed(log: Path, kept: set[str]) -> Counter:
    """The last round's status (and exception type) of every example not kept."""
    last: dict[str, dict] = {}
    for line in log.read_text().splitlines():
        record = json.loads(line)
        last[record["id"]] = record
    reasons: Counter = Counter()
    for ident, record in last.items():
        if ident in kept:
            continue
        outcome = record.get("outcome")
        if outcome is None:  # numbers as N
            reasons["reply not usable: " + re.sub(r"\d[\d,]*", "N", record["parse_error"])] += 1
            continue
        run = (outcome.get("runs") or [{}])[0]
        detail = run.get("exception_type") or outcome["problem"].split(":")[0]
        reasons[f"{outcome['status']}: {detail}"] += 1
    return reasons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args()
    out = options.out or Path(tempfile.mkdtemp(prefix="repair-popular-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    locks = [LOCKS["popular_a"], LOCKS["popular_b"]]  # the packages PACKAGES names
    sites = [out / lock_path.stem for lock_path in locks]
    for lock_path, site in zip(locks, sites):
        if not site.is_dir():
            install(read_lock(lock_path), site)
    records, excerpts, modules = {}, Counter(), {}
    for site in sites:  # a distribution of both locks (idna) is taken from the first
        wanted = [p for p in PACKAGES if not any(
            r["distribution"] == p for r in records.values())]
        found = excerpts_of_site(site, wanted, options.count)
        excerpts.update({k: v for k, v in found.as_dict().items() if isinstance(v, int)})
        excerpts.update({f"skipped: {k}": v for k, v in found.skipped.items()})
        excerpts.update({f"modules not read: {k}": v
                         for k, v in found.modules_not_read.items()})
        records.update((r["id"], r) for r in found.records)
        for _, exports, _ in read_distributions(site, wanted, ScanReport()):
            modules.update(exports.modules)
    (out / "excerpts.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                for r in records.values()))
    model = ContextModel(records, modules, calls_for, wrong)
    repaired = out / "repaired.jsonl"
    with model as server:
        summary = repair(out / "excerpts.jsonl", repaired,
                         PredictOptions("stub-model", base_url=server.base_url, concurrency=4),
                         RepairOptions(rounds=options.rounds, workers=options.workers))
    kept = [json.loads(line) for line in repaired.read_text().splitlines()]
    passing, total = [], summary.as_given
    for round_ in range(options.rounds + 1):
        total += summary.fixed.get(round_, 0) if round_ else 0
        passing.append(total)
    from steptrace import _api as api
    db = out / "repaired.duckdb"
    traced = {}
    if kept:
        api.trace(repaired, db, workers=options.workers)
        import duckdb
        with duckdb.connect(str(db), read_only=True) as con:
            traced = dict(con.sql("SELECT status, count(*) FROM runs GROUP BY 1").fetchall())
    print(json.dumps({
        "packages": len(PACKAGES), "excerpts": dict(excerpts),
        "excerpts_by_distribution": dict(Counter(r["distribution"]
                                                 for r in records.values())),
        "examples": summary.examples, "passing_after_round": passing,
        "yield_after_round": [round(n / max(summary.examples, 1), 3) for n in passing],
        "fixed_at_round": summary.fixed, "kept": len(kept),
        "kept_by_distribution": dict(Counter(r["distribution"] for r in kept)),
        "given_up": summary.given_up, "unfinished": summary.unfinished,
        "final_status": summary.final_status,
        "why_failed": dict(why_failed(out / "repaired.log.jsonl",
                                      {r["id"] for r in kept}).most_common()),
        "kept_traced_by_status": traced, "requests": summary.requests,
        "runs": summary.executions, "wall_s": round(time.perf_counter() - started, 1),
        "out": str(out)}, indent=1))


if __name__ == "__main__":
    main()
