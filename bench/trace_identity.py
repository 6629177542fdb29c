"""Check: a change to the tracer records the very same traces as a reference.

Run: ``.venv/bin/python bench/trace_identity.py write DIR`` traces the 800 CRUXEval
samples and the class-heavy corpus (oop_corpus.py) in job and batch isolation, one fresh
store each, into DIR (with this checkout's guest); ``... compare DIR_A DIR_B`` compares
two such directories table by table with SQL ``EXCEPT ALL`` both ways (every column but
the timings ``duration_us``, ``call_us`` and ``traced_at``, and ``guest``, the build's
key; ``run_id`` and ``program_id``, which follow the order the workers finish in, are
replaced by the run's ``run_key`` and the program's ``program_key``) and exits 1 on any
difference.
Two builds of the guest differ in their string-hash secret (docs/guides/sandbox.md), so a
set of strings may list in another order after any change to tracer/: such rows (one in
CRUXEval, ``whitespaces`` of sample 66deba1c...) are the build's, not the change's.
Typical use: ``write /tmp/ref`` on the code before a change, ``write /tmp/new`` after,
then ``compare /tmp/ref /tmp/new``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
TABLES = ("programs", "runs", "steps", "states", "objects", "attributes", "global_states",
          "settrace_lines")  # (a table only one of the stores has is said, not compared)
SKIPPED = {"duration_us", "call_us", "traced_at", "run_id", "program_id", "guest"}
STORES = [(corpus, isolation) for corpus in ("cruxeval", "oop") for isolation in ("job", "batch")]


def write(out: Path) -> None:
    from steptrace.tracing._trace import TraceOptions, trace_corpus
    sys.path.insert(0, str(ROOT / "bench"))
    import oop_corpus
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {"cruxeval": CRUXEVAL, "oop": oop_corpus.write(Path(tmp) / "oop.jsonl")}
        for corpus, isolation in STORES:
            db = out / f"{corpus}-{isolation}.duckdb"
            db.unlink(missing_ok=True)
            summary = trace_corpus(corpora[corpus], db, TraceOptions(isolation=isolation))
            print(f"{db.name}: {summary.traced} runs, {summary.seconds:.2f} s")


def compare(first: Path, second: Path) -> int:
    import duckdb
    differences = 0
    for corpus, isolation in STORES:
        name = f"{corpus}-{isolation}.duckdb"
        con = duckdb.connect()
        con.execute(f"ATTACH '{first / name}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{second / name}' AS b (READ_ONLY)")
        for table in TABLES:
            held = [con.execute("SELECT count(*) FROM information_schema.tables WHERE "
                                f"table_catalog = '{db}' AND table_name = '{table}'"
                                ).fetchone()[0] for db in ("a", "b")]
            if held != [1, 1]:
                print(f"{name:<24} {table:<14} only in {'the first' if held[0] else 'the second'}")
                continue
            columns = [row[0] for row in con.execute(
                f"SELECT column_name FROM information_schema.columns WHERE table_catalog = 'a' "
                f"AND table_name = '{table}' ORDER BY ordinal_position").fetchall()
                if row[0] not in SKIPPED]
            cols = ", ".join(f't."{c}"' for c in columns)
            if table == "runs":
                cols += ", p.program_key AS program_ref"
            if table not in ("programs",):
                cols += ", r.run_key AS run_ref"
            counts = con.execute(f"SELECT (SELECT count(*) FROM a.{table}), "
                                 f"(SELECT count(*) FROM b.{table})").fetchone()
            only = [con.execute(f"SELECT count(*) FROM (SELECT {cols} FROM {_source(x, table)} "
                                f"EXCEPT ALL SELECT {cols} FROM {_source(y, table)})"
                                ).fetchone()[0]
                    for x, y in (("a", "b"), ("b", "a"))]
            same = counts[0] == counts[1] and only == [0, 0]
            differences += not same
            print(f"{name:<24} {table:<14} {counts[0]:>8} rows  "
                  f"{'same' if same else f'DIFFERENT: {counts[1]} rows, {only} only in each'}")
        con.close()
    return 1 if differences else 0


def _source(db: str, table: str) -> str:
    """The table as ``t``, with its run as ``r`` and its program as ``p``."""
    if table == "programs":
        return f"{db}.programs t"
    if table == "runs":
        return f"{db}.runs t JOIN {db}.runs r USING (run_id) JOIN {db}.programs p ON p.program_id = t.program_id"
    return f"{db}.{table} t JOIN {db}.runs r ON r.run_id = t.run_id"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
