"""Two builds of the guest from the same sources, in separate cache directories: are the
components byte-identical, and are the traces of the 800 CRUXEval samples?

Run: ``.venv/bin/python bench/reproducible_build.py`` (two builds, ~30 s, then the 800 traced
with each, in job isolation).

Prints both component digests and, per sample, whether the two traces are identical: the
status, output, stdout, every step and every variable state. What makes them differ is the
string-hash secret, which componentize-py 0.25.1 draws from the building machine's
randomness while it pre-initialises CPython and offers no way to fix (docs/guides/sandbox.md,
"Reproducibility"); ``random`` is seeded per job and does not.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402
from steptrace.sandbox import _build as build  # noqa: E402

CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"

TRACE_QUERY = """
SELECT r.sample_id, r.status, r.output, r.stdout,
       (SELECT string_agg(event || ':' || func || ':' || line || ':' || depth || ':' || frame,
                          ',' ORDER BY step) FROM steps s WHERE s.run_id = r.run_id),
       (SELECT string_agg(step || ':' || var || ':' || coalesce(value, '-') || ':'
                          || coalesce(type, '-'), ',' ORDER BY step, var)
        FROM states t WHERE t.run_id = r.run_id)
FROM runs r ORDER BY r.sample_id
"""


def build_and_trace(directory: Path) -> tuple[str, dict[str, str]]:
    """Build into ``directory`` and trace the 800 there: (component digest, per-sample
    trace digests)."""
    os.environ[build.CACHE_ENV] = str(directory / "cache")
    found = build.ensure_component()
    digest = build.file_digest(found.wasm)
    db = directory / "crux.duckdb"
    summary = trace_corpus(CRUXEVAL, db, TraceOptions(workers=2, isolation="job"))
    assert summary.traced == 800, summary
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(TRACE_QUERY).fetchall()
    return digest, {row[0]: hashlib.sha256(repr(row[1:]).encode()).hexdigest() for row in rows}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="steptrace-repro-") as tmp:
        first, second = Path(tmp) / "a", Path(tmp) / "b"
        first.mkdir()
        second.mkdir()
        digest_a, traces_a = build_and_trace(first)
        digest_b, traces_b = build_and_trace(second)
    differ = sorted(sample for sample in traces_a if traces_a[sample] != traces_b.get(sample))
    print(f"component A {digest_a}")
    print(f"component B {digest_b}")
    print(f"same digest: {digest_a == digest_b}")
    print(f"identical traces: {len(traces_a) - len(differ)} of {len(traces_a)}")
    print(f"differing samples ({len(differ)}): {', '.join(differ) or '-'}")


if __name__ == "__main__":
    main()
