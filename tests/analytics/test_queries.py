"""Named queries (queries/*.sql) and the Parquet export, on a small fixed store.

Five hand-written programs (six runs) are traced through the real sandbox and analysed;
every named query runs on the store and on its Parquet export, and each result is
compared with rows worked out by hand from the programs (the reasoning is in the
comments next to each expectation). The CPython 3.14 facts the hand counts rest on (see
README, "Steps"): each executed line is one ``line`` step; a ``for`` header runs once per
item and once more when the iterator runs out; a ``while`` header once per evaluation of
its condition; an inlined list comprehension is one step of its line; a state delta is
recorded at the frame's next step.

The ``tasks`` table is made by steptrace.tasks._tasks.generate_tasks and ``predictions`` written
through steptrace.predictions._predict.PredictionStore; ``scores`` (task_id, model, label, sample_index,
correct) is built by hand, as no module writes it yet.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.cli._main import main
from steptrace.analytics._export import MANIFEST, export_parquet, open_parquet
from steptrace.analytics._queries import (QUERIES_DIR, NamedQuery, Param, QueryDefinitionError, get_query,
                            load_queries, parse_assignments, parse_query, run_query,
                            stdlib_methods)
from steptrace.store._store import SCHEMA_VERSION, StoreError
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.query_corpus import BAD, BOOM, COLLATZ, COUNT_A, RECORDS, WORDS, _add_tasks_predictions_scores  # noqa: F401

pytestmark = pytest.mark.slow  # its stores are analysed (a variant build): left out by make test-fast

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ the fixed corpus

# Programs get ids in corpus order and runs in job order (one in-process chunk); the
# expected rows below use these ids, and test_the_store_is_as_the_comments_say checks them.
P_COUNT_A, P_COLLATZ, P_WORDS, P_BOOM, P_BAD = 1, 2, 3, 4, 5
RUN_IDS = {("count_a", 0): 1, ("count_a", 1): 2, ("collatz", 0): 3, ("words", 0): 4,
           ("boom", 0): 5, ("bad", 0): 6}
# Line steps by hand:
#  count_a('abca'): line 2 once, line 3 five times (4 chars + exhaustion), line 4 four
#    times, line 5 twice (two 'a's), line 6 once: 1 + 5 + 4 + 2 + 1 = 13
#  count_a(''): lines 2, 3 (exhausted at once), 6: 3
#  collatz(6): 6→3→10→5→16→8→4→2→1 is 8 rounds: line 2 once, line 3 nine times (8 true +
#    1 false), lines 4 and 5 eight times, line 6 once: 27
#  words('hi a yo'): in f lines 5, 6 once, line 7 four times (3 words + exhaustion),
#    line 8 three times, line 9 once (the comprehension is inlined: one step); shout's
#    line 2 three times: 1 + 1 + 4 + 3 + 1 + 3 = 13
#  boom({}): lines 2 to 6 once each (line 6 raises): 5
#  bad: a syntax error, nothing runs: 0
LINE_STEPS = {1: 13, 2: 3, 3: 27, 4: 13, 5: 5, 6: 0}


def src(code: str, line: int) -> str:
    """The stripped text of ``line`` (1-based): what the queries' source column shows."""
    return code.split("\n")[line - 1].strip()


def col(code: str, line: int, text: str) -> int:
    """0-based column where ``text`` starts on ``line``: a condition's position."""
    return code.split("\n")[line - 1].index(text)


# ------------------------------------------------------------------ fixtures
@dataclass(frozen=True)
class Stores:
    plain: Path      # traced, not analysed: analyses and branches are empty
    base: Path       # traced and analysed
    full: Path       # base plus tasks, predictions and scores
    plain_pq: Path   # their Parquet exports
    base_pq: Path
    full_pq: Path


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Stores:
    root = tmp_path_factory.mktemp("queries")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    base = root / "base.duckdb"
    summary = trace_corpus(corpus, base, TraceOptions(workers=0))
    assert summary.traced == 6, summary
    plain = root / "plain.duckdb"
    shutil.copy(base, plain)
    analysed = analyse_store(base, AnalysisOptions(workers=0))
    assert (analysed.analysed, analysed.agreed) == (5, 5), analysed  # ok and exception runs
    full = root / "full.duckdb"
    shutil.copy(base, full)
    _add_tasks_predictions_scores(full)
    exports = {}
    for name, db in (("plain", plain), ("base", base), ("full", full)):
        exports[name] = root / f"{name}_pq"
        export_parquet(db, exports[name])
    return Stores(plain, base, full, exports["plain"], exports["base"], exports["full"])


def sql_rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, message: str | None = None) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    if message is not None:
        assert lines[0] == f"Error: {message}"
    else:
        assert lines[0].startswith("Error: ")


def test_the_store_is_as_the_comments_say(stores):
    """The ids and line steps the expectations below are written against."""
    assert sql_rows(stores.base, "SELECT sample_id, program_id FROM programs ORDER BY 2") == [
        ("count_a", P_COUNT_A), ("collatz", P_COLLATZ), ("words", P_WORDS), ("boom", P_BOOM),
        ("bad", P_BAD)]
    runs = sql_rows(stores.base, "SELECT sample_id, input_index, run_id, line_steps, status "
                                 "FROM runs ORDER BY run_id")
    assert {(s, i): r for s, i, r, _, _ in runs} == RUN_IDS
    assert {r: n for _, _, r, n, _ in runs} == LINE_STEPS
    assert [s for *_, s in runs] == ["ok", "ok", "ok", "ok", "exception", "invalid"]


# ------------------------------------------------------------------ expected results
@dataclass(frozen=True)
class Case:
    name: str
    params: dict
    store: str            # "base", "plain" or "full"
    columns: list[str]
    rows: list[tuple] | Callable[[Path], list[tuple]]


def _instruction_buckets(db: Path, width: int) -> list[tuple]:
    """Instruction counts are CPython 3.14 bytecode details, not countable by hand: this
    buckets the stored counts in Python (the query does it in SQL) and checks the two."""
    counts = [n for (n,) in sql_rows(db, "SELECT instruction_steps FROM runs")]
    assert len(counts) == 6 and all(n >= 0 for n in counts)
    buckets: dict[int, int] = {}
    for n in counts:
        lo = (n // width) * width if width else (0 if n < 1 else 1 << (n.bit_length() - 1))
        buckets[lo] = buckets.get(lo, 0) + 1
    return [("instruction_steps", lo, lo + width if width else (2 * lo or 1), k)
            for lo, k in sorted(buckets.items())]


STEP_COLUMNS = ["measure", "bucket_from", "bucket_to", "runs"]

SCORED_COLUMNS = ["model", "label", "task_id", "sample_index", "kind", "run_id", "line", "var",
                  "occurrence", "answer", "line_steps", "loop_nesting", "parsed", "correct"]


def _scored_samples(model: str) -> Callable[[Path], list[tuple]]:
    """scored_samples by hand (see _add_tasks_predictions_scores): the scored answers,
    in task-id order within a model (the ids are hashes: read from the store). m1: t1 (run
    1, 'abca' → 2, 13 line steps) right twice; t2 (run 3, collatz → 8, 27 steps) right,
    wrong; t3 (exception of run 3: none) wrong twice, the second unparseable; t4 (run 4
    → 'HI! YO!', 13 steps) right, wrong, its third sample an error (left out); t5 has no
    scores row (left out). m2: t1 wrong, t2 right."""
    facts = {"t1": ("output", 1, "2", 13), "t2": ("output", 3, "8", 27),
             "t3": ("exception", 3, "none", 27), "t4": ("output", 4, "'HI! YO!'", 13)}
    answers = {"m1": [("t1", 0, True, True), ("t1", 1, True, True), ("t2", 0, True, True),
                      ("t2", 1, True, False), ("t3", 0, True, False), ("t3", 1, False, False),
                      ("t4", 0, True, True), ("t4", 1, True, False)],
               "m2": [("t1", 0, True, False), ("t2", 0, True, True)]}

    def rows(db: Path) -> list[tuple]:
        ids = {(kind, run): task for task, kind, run in sql_rows(
            db, "SELECT task_id, kind, run_id FROM tasks")}
        found = []
        for m in ("m1", "m2") if model == "" else (model,):
            mine = []
            for name, sample, parsed, correct in answers[m]:
                kind, run, answer, steps = facts[name]
                mine.append((m, "l1", ids[kind, run], sample, kind, run, None, None, None,
                             answer, steps, 0, parsed, correct))
            found += sorted(mine, key=lambda r: (r[2], r[3]))
        return found
    return rows


CASES = [
    # ok: runs 1-4; matching: 1 ('abca' → 2), 3 (8) and 4 ('HI! YO!'); run 2 has no
    # expected output, so it is in neither count; line steps 13 + 3 + 27 + 13 = 56.
    # boom raised (expected 0: not matching), bad is invalid (not matching).
    Case("runs_by_status", {}, "base",
         ["status", "runs", "matching", "not_matching", "line_steps"],
         [("ok", 4, 3, 0, 56), ("exception", 1, 0, 1, 5), ("invalid", 1, 0, 1, 0)]),

    # line steps 13, 3, 27, 13, 5, 0 → [0,1): 0; [2,4): 3; [4,8): 5; [8,16): 13, 13;
    # [16,32): 27.
    Case("step_distribution", {}, "base", STEP_COLUMNS,
         lambda db: [("line_steps", 0, 1, 1), ("line_steps", 2, 4, 1), ("line_steps", 4, 8, 1),
                     ("line_steps", 8, 16, 2), ("line_steps", 16, 32, 1)]
         + _instruction_buckets(db, 0)),
    # width 10: [0,10): 0, 3, 5; [10,20): 13, 13; [20,30): 27.
    Case("step_distribution", {"width": "10"}, "base", STEP_COLUMNS,
         lambda db: [("line_steps", 0, 10, 3), ("line_steps", 10, 20, 2),
                     ("line_steps", 20, 30, 1)] + _instruction_buckets(db, 10)),

    # Executions of each line summed over a program's runs (see LINE_STEPS): collatz's
    # while line 9, its body lines 8 each; count_a's for line 5 + 1; its if 4, its body
    # 2; words' for 4, shout's return 3 (3 calls), the append line 3; count_a's lines 2
    # and 6 once per run (2); then the lines run once. Ties by sample_id, then line.
    Case("hottest_lines", {"limit": "50"}, "base",
         ["sample_id", "line", "executions", "source"],
         [("collatz", 3, 9, src(COLLATZ, 3)), ("collatz", 4, 8, src(COLLATZ, 4)),
          ("collatz", 5, 8, src(COLLATZ, 5)), ("count_a", 3, 6, src(COUNT_A, 3)),
          ("count_a", 4, 4, src(COUNT_A, 4)), ("words", 7, 4, src(WORDS, 7)),
          ("words", 2, 3, src(WORDS, 2)), ("words", 8, 3, src(WORDS, 8)),
          ("count_a", 2, 2, src(COUNT_A, 2)), ("count_a", 5, 2, src(COUNT_A, 5)),
          ("count_a", 6, 2, src(COUNT_A, 6))]
         + [("boom", line, 1, src(BOOM, line)) for line in range(2, 7)]
         + [("collatz", 2, 1, src(COLLATZ, 2)), ("collatz", 6, 1, src(COLLATZ, 6))]
         + [("words", line, 1, src(WORDS, line)) for line in (5, 6, 9)]),
    # The default limit is 10 rows: the first ten above.
    Case("hottest_lines", {}, "base", ["sample_id", "line", "executions", "source"],
         [("collatz", 3, 9, src(COLLATZ, 3)), ("collatz", 4, 8, src(COLLATZ, 4)),
          ("collatz", 5, 8, src(COLLATZ, 5)), ("count_a", 3, 6, src(COUNT_A, 3)),
          ("count_a", 4, 4, src(COUNT_A, 4)), ("words", 7, 4, src(WORDS, 7)),
          ("words", 2, 3, src(WORDS, 2)), ("words", 8, 3, src(WORDS, 8)),
          ("count_a", 2, 2, src(COUNT_A, 2)), ("count_a", 5, 2, src(COUNT_A, 5))]),

    # count_a has two runs; only 'abca' reaches the if body... and the if itself (the
    # empty string never enters the loop): lines 4 and 5 are reached by 1 of 2 runs.
    # Every other executed line is reached by all of its program's runs; those follow by
    # executions, then program id and line.
    Case("line_coverage", {"limit": "50"}, "base",
         ["program_id", "sample_id", "line", "runs_reaching", "program_runs", "share_of_runs",
          "executions", "source"],
         [(P_COUNT_A, "count_a", 4, 1, 2, 0.5, 4, src(COUNT_A, 4)),
          (P_COUNT_A, "count_a", 5, 1, 2, 0.5, 2, src(COUNT_A, 5)),
          (P_COLLATZ, "collatz", 3, 1, 1, 1.0, 9, src(COLLATZ, 3)),
          (P_COLLATZ, "collatz", 4, 1, 1, 1.0, 8, src(COLLATZ, 4)),
          (P_COLLATZ, "collatz", 5, 1, 1, 1.0, 8, src(COLLATZ, 5)),
          (P_COUNT_A, "count_a", 3, 2, 2, 1.0, 6, src(COUNT_A, 3)),
          (P_WORDS, "words", 7, 1, 1, 1.0, 4, src(WORDS, 7)),
          (P_WORDS, "words", 2, 1, 1, 1.0, 3, src(WORDS, 2)),
          (P_WORDS, "words", 8, 1, 1, 1.0, 3, src(WORDS, 8)),
          (P_COUNT_A, "count_a", 2, 2, 2, 1.0, 2, src(COUNT_A, 2)),
          (P_COUNT_A, "count_a", 6, 2, 2, 1.0, 2, src(COUNT_A, 6)),
          (P_COLLATZ, "collatz", 2, 1, 1, 1.0, 1, src(COLLATZ, 2)),
          (P_COLLATZ, "collatz", 6, 1, 1, 1.0, 1, src(COLLATZ, 6))]
         + [(P_WORDS, "words", line, 1, 1, 1.0, 1, src(WORDS, line)) for line in (5, 6, 9)]
         + [(P_BOOM, "boom", line, 1, 1, 1.0, 1, src(BOOM, line)) for line in range(2, 7)]),
    Case("line_coverage", {"limit": "2"}, "base",
         ["program_id", "sample_id", "line", "runs_reaching", "program_runs", "share_of_runs",
          "executions", "source"],
         [(P_COUNT_A, "count_a", 4, 1, 2, 0.5, 4, src(COUNT_A, 4)),
          (P_COUNT_A, "count_a", 5, 1, 2, 0.5, 2, src(COUNT_A, 5))]),

    # shout is called once per word (3 calls, 1 line each); count_a's f twice (2 runs,
    # 13 + 3 lines); collatz, words' f (5, 6, 7×4, 8×3, 9 = 10 lines) and boom once.
    Case("hottest_functions", {}, "base",
         ["program_id", "sample_id", "func", "calls", "line_steps", "runs_reaching",
          "program_runs", "share_of_runs"],
         [(P_WORDS, "words", "shout", 3, 3, 1, 1, 1.0),
          (P_COUNT_A, "count_a", "f", 2, 16, 2, 2, 1.0),
          (P_COLLATZ, "collatz", "f", 1, 27, 1, 1, 1.0),
          (P_WORDS, "words", "f", 1, 10, 1, 1, 1.0),
          (P_BOOM, "boom", "f", 1, 5, 1, 1, 1.0)]),
    Case("hottest_functions", {"limit": "1"}, "base",
         ["program_id", "sample_id", "func", "calls", "line_steps", "runs_reaching",
          "program_runs", "share_of_runs"],
         [(P_WORDS, "words", "shout", 3, 3, 1, 1, 1.0)]),

    # Deltas per variable: collatz's n is 6, 3, 10, 5, 16, 8, 4, 2, 1 (9) and steps 0..8
    # (9); words' w is bound in f for 'hi', 'a', 'yo' and as shout's argument 3 times (6);
    # count_a's ch takes 'a', 'b', 'c', 'a' (4), its n 0, 1, 2 in 'abca' and 0 in '' (4,
    # at most 3 in a run); words' out is [] then grows by 3 appends (4); boom's x is 0, '0'
    # then unbound by del (3, types int and str; the unbinding has no type); count_a's s
    # is an argument in each run (2, 1 a run); boom's d is {} then {'k': 0} (2); words'
    # text and words are bound once. <return> and <exception> are not variables; the
    # comprehension's o is gone by f's next step.
    Case("changing_variables", {}, "base",
         ["program_id", "sample_id", "var", "changes", "runs", "max_changes_in_a_run", "types"],
         [(P_COLLATZ, "collatz", "n", 9, 1, 9, "int"),
          (P_COLLATZ, "collatz", "steps", 9, 1, 9, "int"),
          (P_WORDS, "words", "w", 6, 1, 6, "str"),
          (P_COUNT_A, "count_a", "ch", 4, 1, 4, "str"),
          (P_COUNT_A, "count_a", "n", 4, 2, 3, "int"),
          (P_WORDS, "words", "out", 4, 1, 4, "list"),
          (P_BOOM, "boom", "x", 3, 1, 3, "int, str"),
          (P_COUNT_A, "count_a", "s", 2, 2, 1, "str"),
          (P_BOOM, "boom", "d", 2, 1, 2, "dict"),
          (P_WORDS, "words", "text", 1, 1, 1, "str"),
          (P_WORDS, "words", "words", 1, 1, 1, "list")]),
    Case("changing_variables", {"limit": "2"}, "base",
         ["program_id", "sample_id", "var", "changes", "runs", "max_changes_in_a_run", "types"],
         [(P_COLLATZ, "collatz", "n", 9, 1, 9, "int"),
          (P_COLLATZ, "collatz", "steps", 9, 1, 9, "int")]),

    # Loop headers: collatz's while runs 9 times in its one frame; count_a's for 5 times
    # for 'abca' and once for '' (2 frames: 6 in all, 3.0 on average); words' for 4 times.
    # Line 9 of words holds a comprehension's for but starts with return: not a header.
    Case("loop_iterations", {}, "base",
         ["program_id", "sample_id", "line", "source", "frames", "executions",
          "min_per_frame", "max_per_frame", "avg_per_frame"],
         [(P_COLLATZ, "collatz", 3, src(COLLATZ, 3), 1, 9, 9, 9, 9.0),
          (P_COUNT_A, "count_a", 3, src(COUNT_A, 3), 2, 6, 1, 5, 3.0),
          (P_WORDS, "words", 7, src(WORDS, 7), 1, 4, 4, 4, 4.0)]),
    Case("loop_iterations", {"limit": "1"}, "base",
         ["program_id", "sample_id", "line", "source", "frames", "executions",
          "min_per_frame", "max_per_frame", "avg_per_frame"],
         [(P_COLLATZ, "collatz", 3, src(COLLATZ, 3), 1, 9, 9, 9, 9.0)]),

    # Conditions: collatz's while is true 8 times then false (8/9 = 0.889); its ternary
    # sees n = 6, 3, 10, 5, 16, 8, 4, 2: even 6 times, odd twice; count_a's if sees
    # 'a', 'b', 'c', 'a' (only in the 'abca' run); words' filter sees 'HI!', 'A!', 'YO!'
    # (len > 2: true, false, true). boom has no condition.
    Case("branch_balance", {}, "base",
         ["program_id", "sample_id", "line", "col", "kind", "evaluations", "true_count",
          "false_count", "runs", "true_share", "source"],
         [(P_COLLATZ, "collatz", 3, col(COLLATZ, 3, "n != 1"), "while", 9, 8, 1, 1, 0.889,
           src(COLLATZ, 3)),
          (P_COLLATZ, "collatz", 4, col(COLLATZ, 4, "n % 2 == 0"), "ifexp", 8, 6, 2, 1, 0.75,
           src(COLLATZ, 4)),
          (P_COUNT_A, "count_a", 4, col(COUNT_A, 4, "ch == 'a'"), "if", 4, 2, 2, 1, 0.5,
           src(COUNT_A, 4)),
          (P_WORDS, "words", 9, col(WORDS, 9, "len(o) > 2"), "filter", 3, 2, 1, 1, 0.667,
           src(WORDS, 9))]),
    Case("branch_balance", {"limit": "1"}, "base",
         ["program_id", "sample_id", "line", "col", "kind", "evaluations", "true_count",
          "false_count", "runs", "true_share", "source"],
         [(P_COLLATZ, "collatz", 3, col(COLLATZ, 3, "n != 1"), "while", 9, 8, 1, 1, 0.889,
           src(COLLATZ, 3))]),
    # Before steptrace analyse the branches table is empty: no rows, no error.
    Case("branch_balance", {}, "plain",
         ["program_id", "sample_id", "line", "col", "kind", "evaluations", "true_count",
          "false_count", "runs", "true_share", "source"], []),

    # .name( calls in the code: count_a: s.lower(; words: text.lower(, .split(,
    # out.append(, w.upper(, ' '.join(; boom: d.setdefault(, d.get(. lower is in two
    # programs (count_a's 2 runs + words' 1 run); the rest in one program, one run each.
    # str(x) and len(o) are not method calls.
    Case("stdlib_methods", {}, "base",
         ["method", "owners", "programs", "occurrences", "runs"],
         [("lower", "str", 2, 2, 3), ("append", "list", 1, 1, 1), ("get", "dict", 1, 1, 1),
          ("join", "str", 1, 1, 1), ("setdefault", "dict", 1, 1, 1), ("split", "str", 1, 1, 1),
          ("upper", "str", 1, 1, 1)]),

    # Tasks (see _add_tasks_predictions_scores): exception and steps tasks for the five
    # finished runs 1-5 (programs count_a, collatz, words, boom), output tasks for the
    # four ok runs 1-4 (count_a, collatz, words). Run 6 (invalid) gets none.
    Case("tasks_by_kind", {}, "full", ["kind", "tasks", "runs", "programs"],
         [("exception", 5, 5, 4), ("steps", 5, 5, 4), ("output", 4, 4, 3)]),

    # Per task, model m1: t1 2/2 correct (1.0), t2 1/2 (0.5), t3 (exception) 0/2 (0.0,
    # one sample unparseable), t4 1/2 (0.5; its third sample failed with an error: left
    # out), t5 one unscored prediction (no accuracy). m2: t1 0/1, t2 1/1. Difficulty buckets by the
    # run's line steps: t1 (run 1: 13) and t4 (run 4: 13) in [8,16), t2 and t3 (run 3: 27)
    # in [16,32), t5 (run 2: 3) in [2,4). pass@1 is the mean of the tasks' accuracies:
    # m1 output (1.0 + 0.5 + 0.5) / 3 = 0.667, its [8,16) bucket (1.0 + 0.5) / 2 = 0.75.
    Case("accuracy_by_kind", {}, "full",
         ["model", "label", "kind", "bucket_from", "bucket_to", "tasks", "predictions",
          "unparseable", "scored", "pass_at_1"],
         [("m1", "l1", "exception", None, None, 1, 2, 1, 2, 0.0),
          ("m1", "l1", "exception", 16, 32, 1, 2, 1, 2, 0.0),
          ("m1", "l1", "output", None, None, 3, 6, 0, 6, 0.667),
          ("m1", "l1", "output", 8, 16, 2, 4, 0, 4, 0.75),
          ("m1", "l1", "output", 16, 32, 1, 2, 0, 2, 0.5),
          ("m1", "l1", "steps", None, None, 1, 1, 0, 0, None),
          ("m1", "l1", "steps", 2, 4, 1, 1, 0, 0, None),
          ("m2", "l1", "output", None, None, 2, 2, 0, 2, 0.5),
          ("m2", "l1", "output", 8, 16, 1, 1, 0, 1, 0.0),
          ("m2", "l1", "output", 16, 32, 1, 1, 0, 1, 1.0)]),
    # Width 10 and only m1: 13 → [10,20), 27 → [20,30), 3 → [0,10).
    Case("accuracy_by_kind", {"width": "10", "model": "m1"}, "full",
         ["model", "label", "kind", "bucket_from", "bucket_to", "tasks", "predictions",
          "unparseable", "scored", "pass_at_1"],
         [("m1", "l1", "exception", None, None, 1, 2, 1, 2, 0.0),
          ("m1", "l1", "exception", 20, 30, 1, 2, 1, 2, 0.0),
          ("m1", "l1", "output", None, None, 3, 6, 0, 6, 0.667),
          ("m1", "l1", "output", 10, 20, 2, 4, 0, 4, 0.75),
          ("m1", "l1", "output", 20, 30, 1, 2, 0, 2, 0.5),
          ("m1", "l1", "steps", None, None, 1, 1, 0, 0, None),
          ("m1", "l1", "steps", 0, 10, 1, 1, 0, 0, None)]),
    # A model name is a bound value, never SQL: this quote matches no model.
    Case("accuracy_by_kind", {"model": "m1' OR '1' = '1"}, "full",
         ["model", "label", "kind", "bucket_from", "bucket_to", "tasks", "predictions",
          "unparseable", "scored", "pass_at_1"], []),

    # Methods by program: count_a lower; words lower, split, append, upper, join; collatz
    # none (t2, t3 drop out). m1: lower covers t1 (1.0), t4 (0.5), t5 (unscored) → 3
    # tasks, 2 + 2 + 1 predictions, 4 scored, pass@1 0.75; append, join, split, upper
    # only t4 (0.5). m2: lower covers t1 (0.0). Hardest first within a model.
    Case("accuracy_by_method", {}, "full",
         ["model", "label", "method", "tasks", "predictions", "unparseable", "scored", "pass_at_1"],
         [("m1", "l1", "append", 1, 2, 0, 2, 0.5), ("m1", "l1", "join", 1, 2, 0, 2, 0.5),
          ("m1", "l1", "split", 1, 2, 0, 2, 0.5), ("m1", "l1", "upper", 1, 2, 0, 2, 0.5),
          ("m1", "l1", "lower", 3, 5, 0, 4, 0.75), ("m2", "l1", "lower", 1, 1, 0, 1, 0.0)]),
    # Output tasks only: t5 (steps) leaves lower: t1 and t4.
    Case("accuracy_by_method", {"kind": "output"}, "full",
         ["model", "label", "method", "tasks", "predictions", "unparseable", "scored", "pass_at_1"],
         [("m1", "l1", "append", 1, 2, 0, 2, 0.5), ("m1", "l1", "join", 1, 2, 0, 2, 0.5),
          ("m1", "l1", "split", 1, 2, 0, 2, 0.5), ("m1", "l1", "upper", 1, 2, 0, 2, 0.5),
          ("m1", "l1", "lower", 2, 4, 0, 4, 0.75), ("m2", "l1", "lower", 1, 1, 0, 1, 0.0)]),
    # The only predicted exception task is on collatz, which calls no method.
    Case("accuracy_by_method", {"kind": "exception"}, "full",
         ["model", "label", "method", "tasks", "predictions", "unparseable", "scored", "pass_at_1"],
         []),

    # Every scored answer with its task's facts (the report's statistics read it).
    Case("scored_samples", {}, "full", SCORED_COLUMNS, _scored_samples("")),
    Case("scored_samples", {"model": "m2"}, "full", SCORED_COLUMNS, _scored_samples("m2")),

    # No run of the fixed corpus imports a missing module (tests/analytics/
    # test_missing_modules.py traces a corpus that does).
    Case("missing_modules", {}, "base", ["module", "runs", "programs"], []),

    # No program of the fixed corpus writes a file (tests/analytics/test_written_files.py
    # traces a corpus that does).
    Case("written_files", {}, "base", ["run_id", "sample_id", "path", "size", "sha256", "text"],
         []),
]


def _case_id(case: Case) -> str:
    params = ",".join(f"{k}={v}" for k, v in case.params.items())
    return f"{case.name}[{case.store}{',' + params if params else ''}]"


def _expected(case: Case, stores: Stores) -> list[tuple]:
    db = getattr(stores, case.store)
    return case.rows(db) if callable(case.rows) else case.rows


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_named_query_on_the_store(stores, case):
    """Every named query on the DuckDB store: exact columns and rows."""
    result = run_query(case.name, db=getattr(stores, case.store), params=case.params)
    assert result.columns == case.columns
    assert result.rows == _expected(case, stores)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_named_query_on_the_parquet_export(stores, case):
    """The same queries over the Parquet export give the same columns and rows."""
    parquet = getattr(stores, f"{case.store}_pq")
    result = run_query(case.name, parquet=parquet, params=case.params)
    assert result.columns == case.columns
    assert result.rows == _expected(case, stores)


def test_every_named_query_is_checked():
    """Each file in queries/ has at least one exact case above, and each parameter of
    each query is varied by some case."""
    names = set(load_queries())
    assert names == {p.stem for p in QUERIES_DIR.glob("*.sql")}
    assert names == {case.name for case in CASES}
    for query in load_queries().values():
        varied = {k for case in CASES if case.name == query.name for k in case.params}
        assert varied == {p.name for p in query.params}, query.name


# ------------------------------------------------------------------ tables that are missing
@pytest.mark.parametrize("name, message", [
    ("tasks_by_kind", "table tasks does not exist: run steptrace tasks first"),
    ("accuracy_by_kind", "table predictions does not exist: run steptrace predict first"),
    ("accuracy_by_method", "table predictions does not exist: run steptrace predict first"),
    ("scored_samples", "table predictions does not exist: run steptrace predict first"),
])
def test_queries_over_missing_tables_say_what_to_run(stores, name, message):
    """A store without tasks or predictions: one clear line, on the store and the export."""
    for source in ({"db": stores.base}, {"parquet": stores.base_pq}):
        with pytest.raises(StoreError) as error:
            run_query(name, **source)
        assert str(error.value) == message


def test_accuracy_without_scores_says_so(stores, tmp_path):
    """Predictions and tasks but no scores: the message names the missing step."""
    db = tmp_path / "no_scores.duckdb"
    shutil.copy(stores.full, db)
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE scores")
    con.close()
    with pytest.raises(StoreError, match="^table scores does not exist: run steptrace score "
                                         "first$"):
        run_query("accuracy_by_kind", db=db)


def test_a_table_without_the_columns_a_query_reads(stores, tmp_path):
    """A scores table of another shape: one line naming the missing column."""
    db = tmp_path / "odd_scores.duckdb"
    shutil.copy(stores.full, db)
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE scores RENAME COLUMN correct TO passed")
    con.close()
    with pytest.raises(StoreError) as error:
        run_query("accuracy_by_method", db=db)
    assert str(error.value) == ("table scores has no column correct (query accuracy_by_method "
                                "reads task_id, model, label, sample_index, correct)")


def test_branch_balance_on_a_version_1_store(stores, tmp_path):
    """A version 1 store has no branches table: 'run steptrace analyse first'."""
    db = tmp_path / "v1.duckdb"
    shutil.copy(stores.plain, db)
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE branches")
    con.execute("DROP TABLE analyses")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(StoreError, match="^table branches does not exist: run steptrace "
                                         "analyse first$"):
        run_query("branch_balance", db=db)


# ------------------------------------------------------------------ parameters
def test_parameters_are_typed_and_validated(stores):
    """Unknown names, bad values and values below a bound are one-line ValueErrors."""
    cases = [
        ({"limit": "abc"}, "parameter limit of query hottest_lines must be an integer >= 1, "
                           "got 'abc'"),
        ({"limit": "0"}, "parameter limit of query hottest_lines must be an integer >= 1, "
                         "got '0'"),
        ({"limit": "1; DROP TABLE runs"}, "parameter limit of query hottest_lines must be an "
                                          "integer >= 1, got '1; DROP TABLE runs'"),
        ({"lmit": "3"}, "unknown parameter lmit for query hottest_lines (parameters: limit)"),
    ]
    for params, message in cases:
        with pytest.raises(ValueError) as error:
            run_query("hottest_lines", db=stores.base, params=params)
        assert str(error.value) == message
    with pytest.raises(ValueError, match="^unknown parameter x for query runs_by_status "
                                         r"\(parameters: none\)$"):
        run_query("runs_by_status", db=stores.base, params={"x": "1"})
    assert sql_rows(stores.base, "SELECT count(*) FROM runs") == [(6,)]


def test_unknown_query_names(stores):
    for name in ("nope", "../engine/cli", "hottest lines", ""):
        with pytest.raises(ValueError, match="^unknown query .*; see steptrace query --list$"):
            run_query(name, db=stores.base)


def test_param_values_by_kind():
    """Each declared kind parses its text; bools take the usual spellings."""
    assert Param("n", "int", 0, 0.0).parse("12", "q") == 12
    assert Param("x", "float", 0.0).parse("-1.5", "q") == -1.5
    assert Param("s", "str", "").parse("it's", "q") == "it's"
    flag = Param("b", "bool", False)
    assert [flag.parse(t, "q") for t in ("true", "Yes", "1", "off", "FALSE", "0")] == [
        True, True, True, False, False, False]
    with pytest.raises(ValueError, match="^parameter b of query q must be true or false"):
        flag.parse("maybe", "q")
    with pytest.raises(ValueError, match="^parameter x of query q must be a number, got 'x'$"):
        Param("x", "float", 0.0).parse("x", "q")


def test_parse_assignments():
    assert parse_assignments(["limit=3", "model=a=b", "kind="]) == {
        "limit": "3", "model": "a=b", "kind": ""}
    for bad, message in ((["limit"], "bad --param 'limit': expected NAME=VALUE"),
                         (["=3"], "bad --param '=3': expected NAME=VALUE"),
                         (["a=1", "a=2"], "--param a given twice")):
        with pytest.raises(ValueError) as error:
            parse_assignments(bad)
        assert str(error.value) == message


def _definition(tmp_path: Path, text: str, name: str = "q") -> NamedQuery:
    path = tmp_path / f"{name}.sql"
    path.write_text(text)
    return parse_query(text, path)


def test_query_headers(tmp_path):
    """The header gives name, description, typed params with defaults, and requirements."""
    query = _definition(tmp_path, (
        "-- name: q\n-- description: What it answers.\n-- a note for people\n"
        "-- param: limit int >= 1 = 5 (rows)\n-- param: model str = '' (a model)\n"
        "-- param: on bool = true\n"
        "-- requires: tasks(task_id, kind): run steptrace tasks first\n"
        "SELECT $limit, $model, $on -- a comment with $notaparam\n"))
    assert (query.name, query.description) == ("q", "What it answers.")
    assert [(p.name, p.kind, p.default, p.minimum, p.help) for p in query.params] == [
        ("limit", "int", 5, 1.0, "rows"), ("model", "str", "", None, "a model"),
        ("on", "bool", True, None, "")]
    assert query.params_text() == ("limit: int >= 1 = 5 (rows); model: str = '' (a model); "
                                   "on: bool = true")
    assert [(r.table, r.columns, r.hint) for r in query.requires] == [
        ("tasks", ("task_id", "kind"), "run steptrace tasks first")]
    assert query.bind({"limit": "7"}) == {"limit": 7, "model": "", "on": True}


@pytest.mark.parametrize("text, message", [
    ("-- description: d\nSELECT 1", "header has no '-- name:' line"),
    ("-- name: q\nSELECT 1", "header has no '-- description:' line"),
    ("-- name: other\n-- description: d\nSELECT 1", "name 'other' must be the file's stem"),
    ("-- name: q\n-- description: d\nSELECT $limit",
     "declared parameters [] differ from those the SQL uses ['limit']"),
    ("-- name: q\n-- description: d\n-- param: limit int = 3\nSELECT 1",
     "declared parameters ['limit'] differ from those the SQL uses []"),
    ("-- name: q\n-- description: d\n-- param: limit = 3\nSELECT $limit",
     "bad param line 'limit = 3'"),
    ("-- name: q\n-- description: d\n-- param: limit int = x\nSELECT $limit",
     "default 'x' is not of type int"),
    ("-- name: q\n-- description: d\n-- param: limit int >= 1 = 0\nSELECT $limit",
     "default of limit is below its bound"),
    ("-- name: q\n-- description: d\n-- requires: tasks\nSELECT 1", "bad requires line 'tasks'"),
])
def test_bad_query_headers(tmp_path, text, message):
    with pytest.raises(QueryDefinitionError) as error:
        _definition(tmp_path, text)
    assert str(error.value).startswith(f"{tmp_path / 'q.sql'}: {message}")


def test_shipped_method_lists_are_str_list_and_dict_methods():
    """Both method queries carry the VALUES list of steptrace.analytics._queries.stdlib_methods():
    every public method of str, list and dict, with the types that have it."""
    methods = stdlib_methods()
    assert ("count", "list,str") in methods and ("pop", "dict,list") in methods
    assert ("setdefault", "dict") in methods and ("removeprefix", "str") in methods
    assert {m for m, _ in methods} == {m for t in (str, list, dict) for m in dir(t)
                                       if not m.startswith("_")}
    import re
    for name in ("stdlib_methods", "accuracy_by_method"):
        sql = get_query(name).sql
        shipped = re.findall(r"\('([a-z_]+)', '([a-z,]+)'\)", sql)
        assert shipped == methods, name


# ------------------------------------------------------------------ the Parquet export
def _tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [t for (t,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "ORDER BY table_name").fetchall()]


@pytest.mark.parametrize("which", ["plain", "base", "full"])
def test_export_holds_every_table_exactly(stores, which):
    """Every table of the store, with its columns, types and rows, reads back from the
    export (empty tables included: the plain store's analyses and branches)."""
    db_con = duckdb.connect(str(getattr(stores, which)), read_only=True)
    pq_con = open_parquet(getattr(stores, f"{which}_pq"))
    try:
        tables = _tables(db_con)
        assert tables == _tables(pq_con)
        expected = {"meta", "programs", "runs", "steps", "states", "objects", "attributes",
                    "global_states", "settrace_lines", "files", "guests", "analyses",
                    "branches"}
        if which == "full":
            expected |= {"tasks", "predictions", "scores"}
        assert set(tables) == expected
        for table in tables:
            schema = f"SELECT column_name, data_type FROM information_schema.columns WHERE " \
                     f"table_name = '{table}' ORDER BY ordinal_position"
            assert db_con.execute(schema).fetchall() == pq_con.execute(schema).fetchall(), table
            content = f"SELECT * FROM {table} ORDER BY ALL"
            assert db_con.execute(content).fetchall() == pq_con.execute(content).fetchall(), table
        if which == "plain":
            assert pq_con.execute("SELECT count(*) FROM branches").fetchone() == (0,)
    finally:
        db_con.close()
        pq_con.close()


def test_export_layout_and_manifest(stores, tmp_path):
    """Run-keyed tables are partitioned by run_bucket = run_id // runs_per_bucket, every
    file holding only its bucket's runs; other tables are one file; the manifest says so."""
    out = tmp_path / "pq"
    summary = export_parquet(stores.full, out, runs_per_bucket=2)
    by_name = {t.name: t for t in summary.tables}
    # runs 1..6 → buckets 0 (1), 1 (2, 3), 2 (4, 5), 3 (6); run 6 (invalid) has no steps.
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "run_bucket=0", "run_bucket=1", "run_bucket=2", "run_bucket=3"]
    assert sorted(p.name for p in (out / "steps").iterdir()) == [
        "run_bucket=0", "run_bucket=1", "run_bucket=2"]
    # tasks are on runs 1-5 → buckets 0, 1, 2
    assert sorted(p.name for p in (out / "tasks").iterdir()) == [
        "run_bucket=0", "run_bucket=1", "run_bucket=2"]
    for table in ("runs", "steps", "states", "analyses", "branches", "tasks"):
        assert by_name[table].partition_by == "run_bucket"
        for file in (out / table).rglob("*.parquet"):
            bucket = int(file.parent.name.split("=")[1])
            run_ids = {r for (r,) in duckdb.sql(
                f"SELECT DISTINCT run_id FROM read_parquet('{file}')").fetchall()}
            assert run_ids and all(r // 2 == bucket for r in run_ids), (file, run_ids)
    for table in ("meta", "programs", "predictions", "scores"):
        assert by_name[table].partition_by is None
        assert [p.name for p in (out / table).iterdir()] == ["data_0.parquet"]
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["runs_per_bucket"] == 2 and manifest["schema_version"] == str(SCHEMA_VERSION)
    assert {t["name"]: t["rows"] for t in manifest["tables"]} == {
        t: sql_rows(stores.full, f"SELECT count(*) FROM {t}")[0][0] for t in by_name}


def test_export_refuses_a_non_empty_directory(stores, tmp_path):
    out = tmp_path / "pq"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty: use --force"):
        export_parquet(stores.base, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_export_force_replaces_an_earlier_export(stores, tmp_path):
    """--force removes the earlier export's tables (tasks is gone from the new one), and
    leaves other files alone."""
    out = tmp_path / "pq"
    export_parquet(stores.full, out)
    (out / "notes.txt").write_text("mine")
    export_parquet(stores.base, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["analyses", "attributes", "branches", "files", "global_states", "guests", "meta",
         "notes.txt", "objects", "programs", "runs", "settrace_lines", "states", "steps",
         MANIFEST])
    with pytest.raises(StoreError, match="^table tasks does not exist"):
        run_query("tasks_by_kind", parquet=out)
    assert run_query("runs_by_status", parquet=out).rows == CASES[0].rows


def test_reading_something_that_is_not_an_export(tmp_path):
    with pytest.raises(StoreError, match="^Parquet directory not found: "):
        open_parquet(tmp_path / "missing")
    with pytest.raises(StoreError, match=f"is not a steptrace Parquet export \\(no {MANIFEST}"):
        open_parquet(tmp_path)
    (tmp_path / MANIFEST).write_text("[]")
    with pytest.raises(StoreError, match="is not a steptrace export manifest$"):
        open_parquet(tmp_path)


# ------------------------------------------------------------------ the command line
def test_cli_query_list_json():
    """query --list --format json: one object per query file, with name and description."""
    result = invoke("query", "--list", "--format", "json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [q["name"] for q in listed] == sorted(p.stem for p in QUERIES_DIR.glob("*.sql"))
    for item in listed:
        assert {"name", "description"} <= set(item)
        assert item["description"] == get_query(item["name"]).description != ""
    by_name = {q["name"]: q for q in listed}
    assert by_name["hottest_lines"]["params"] == "limit: int >= 1 = 10 (rows to return)"
    assert by_name["runs_by_status"]["params"] == ""


def test_cli_query_list_csv_and_table():
    result = invoke("query", "--list", "--format", "csv")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "name,description,params"
    result = invoke("query", "--list")
    assert result.exit_code == 0 and "step_distribution" in result.stdout


def test_cli_query_with_params(stores):
    result = invoke("query", "hottest_functions", "--db", stores.base, "--param", "limit=2",
                    "--format", "json")
    assert result.exit_code == 0, result.output
    assert [(r["sample_id"], r["func"], r["calls"]) for r in json.loads(result.stdout)] == [
        ("words", "shout", 3), ("count_a", "f", 2)]
    result = invoke("query", "runs_by_status", "--parquet", stores.base_pq, "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout == ("status,runs,matching,not_matching,line_steps\n"
                             "ok,4,3,0,56\nexception,1,0,1,5\ninvalid,1,0,1,0\n")


@pytest.mark.parametrize("args, message", [
    (("query", "nope"), "unknown query 'nope'; see steptrace query --list"),
    (("query", "hottest_lines", "--param", "limit=x"),
     "parameter limit of query hottest_lines must be an integer >= 1, got 'x'"),
    (("query", "hottest_lines", "--param", "top=3"),
     "unknown parameter top for query hottest_lines (parameters: limit)"),
    (("query", "hottest_lines", "--param", "limit"), "bad --param 'limit': expected NAME=VALUE"),
    (("query", "accuracy_by_kind"),
     "table predictions does not exist: run steptrace predict first"),
    (("query", "tasks_by_kind"), "table tasks does not exist: run steptrace tasks first"),
])
def test_cli_query_errors_are_one_line(stores, args, message):
    assert_one_line_error(invoke(*args, "--db", stores.base), message)


def test_cli_query_on_a_missing_db(tmp_path):
    db = tmp_path / "missing.duckdb"
    assert_one_line_error(invoke("query", "runs_by_status", "--db", db),
                          f"database not found: {db}")
    assert not db.exists()


def test_cli_query_needs_a_name_or_list(stores):
    for args in (("query",), ("query", "runs_by_status", "--list")):
        result = invoke(*args, "--db", stores.base)
        assert result.exit_code == 2
        assert "give a query NAME or --list (not both)" in result.stderr


def test_cli_sql_over_parquet(stores):
    """sql --parquet: the tables are views over the export; the same SQL, the same rows."""
    text = "SELECT event, count(*) AS n FROM steps GROUP BY event ORDER BY event"
    on_db = invoke("sql", text, "--db", stores.base, "--format", "csv")
    on_pq = invoke("sql", text, "--parquet", stores.base_pq, "--format", "csv")
    assert on_db.exit_code == on_pq.exit_code == 0, on_pq.output
    assert on_pq.stdout == on_db.stdout
    assert "call," in on_db.stdout and "unwind," in on_db.stdout


def test_cli_sql_file_of_a_named_query_uses_its_defaults(stores):
    """make demo runs queries/hottest_lines.sql by path: its $limit takes the default."""
    for source in (("--db", stores.base), ("--parquet", stores.base_pq)):
        result = invoke("sql", "-f", QUERIES_DIR / "hottest_lines.sql", *source, "--format", "csv")
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0] == "sample_id,line,executions,source" and len(lines) == 11
        assert lines[1] == "collatz,3,9,while n != 1:"


def test_cli_sql_parquet_errors(stores, tmp_path):
    assert_one_line_error(invoke("sql", "SELECT 1", "--parquet", tmp_path),
                          f"{tmp_path} is not a steptrace Parquet export (no {MANIFEST}; "
                          "write one with steptrace export)")
    assert_one_line_error(invoke("sql", "SELEC 1", "--parquet", stores.base_pq),
                          f'query failed on Parquet export {stores.base_pq}: Parser Error: '
                          'syntax error at or near "SELEC"')


def test_cli_export(stores, tmp_path):
    """export prints one row per table; a second export into the same directory needs
    --force; a missing store is one line."""
    out = tmp_path / "pq"
    result = invoke("export", "--db", stores.base, "--out", out, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = {line.split(",")[0]: line for line in result.stdout.splitlines()[1:]}
    assert rows["runs"] == "runs,6,1,run_bucket"
    assert rows["programs"] == "programs,5,1,-"
    assert rows["branches"] == "branches,24,1,run_bucket"   # 9 + 8 + 4 + 3 evaluations
    assert_one_line_error(invoke("export", "--db", stores.base, "--out", out),
                          f"{out} is not empty: use --force to replace an export there")
    result = invoke("export", "--db", stores.base, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    missing = tmp_path / "missing.duckdb"
    assert_one_line_error(invoke("export", "--db", missing, "--out", tmp_path / "x"),
                          f"database not found: {missing}")
    assert_one_line_error(invoke("export", "--db", stores.base, "--out",
                                 tmp_path / "no" / "dir"),
                          f"cannot export to {tmp_path / 'no' / 'dir'}: directory "
                          f"{tmp_path / 'no'} does not exist")
