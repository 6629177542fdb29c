"""Run features (engine/analytics/_features.py, `steptrace features`): every numba kernel against a
straightforward pure-Python version on random inputs, the statement-line scanner
against ``ast``, and exact feature values of hand-written programs traced and analysed
in the real sandbox."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.cli._main import main
from steptrace.analytics._features import branch_entropy, run_features
from steptrace.analytics._statement_scan import statement_lines
from steptrace.analytics._step_kernels import (line_coverage, longest_cycles, loop_depths,
                                               transition_counts)
from steptrace.corpus._statements import statement_lines as statement_lines_ast
from steptrace.benchmark._synth import synth_programs
from steptrace.tracing._trace import TraceOptions, trace_corpus

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

Run = list[list[int]]  # a run as the line sequences of its frames, in frame order


# ====================================================================== references
def ref_transitions(run: Run) -> tuple[int, int]:
    pairs = [(a, b) for frame in run for a, b in zip(frame, frame[1:])]
    return len(pairs), len(set(pairs))


def ref_loop_depth(run: Run) -> int:
    """Count, line by line, the loop ranges containing it (no sweep, no packing)."""
    best = 0
    for frame in run:
        ends: dict[int, int] = {}
        for a, b in zip(frame, frame[1:]):
            if b < a:
                ends[b] = max(ends.get(b, a), a)
        for line in set(range(min(frame, default=0), max(frame, default=0) + 1)):
            best = max(best, sum(h <= line <= e for h, e in ends.items()))
    return best


def ref_longest_cycle(run: Run) -> int:
    best = 0
    for frame in run:
        for p in range(1, len(frame) // 2 + 1):
            if any(frame[i:i + p] == frame[i + p:i + 2 * p] for i in range(len(frame) - 2 * p + 1)):
                best = max(best, p)
    return best


def ref_coverage(run: Run, statements: list[int]) -> tuple[int, int]:
    executed = {line for frame in run for line in frame}
    return len(executed), len(executed & set(statements))


def flatten(runs: list[Run]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernels' input: run offsets, frame ids and lines, sorted by run then frame."""
    offsets, frames, lines = [0], [], []
    for run in runs:
        for frame_id, frame in enumerate(run):
            frames += [frame_id * 3] * len(frame)  # ids need not be dense
            lines += frame
        offsets.append(len(lines))
    return (np.array(offsets, np.int64), np.array(frames, np.int32),
            np.array(lines, np.int32))


def random_runs(seed: int, count: int) -> list[Run]:
    """Random runs mixing noise with loop-like repetition, so that every feature takes
    many values (backward jumps, nested ranges, long repeated cycles, empty frames)."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(count):
        run = []
        for _ in range(rng.integers(0, 4)):
            if rng.random() < 0.5:
                frame = rng.integers(1, 7, rng.integers(0, 30)).tolist()
            else:
                body = rng.integers(1, 12, rng.integers(1, 6)).tolist()
                frame = rng.integers(1, 12, rng.integers(0, 4)).tolist()
                for _ in range(rng.integers(1, 5)):
                    frame += body if rng.random() < 0.8 else body[::-1]
            run.append(frame)
        runs.append(run)
    return runs


def check_kernels(runs: list[Run]) -> None:
    offsets, frames, lines = flatten(runs)
    total, distinct = transition_counts(offsets, frames, lines)
    assert [(int(t), int(d)) for t, d in zip(total, distinct)] == [ref_transitions(r) for r in runs]
    assert loop_depths(offsets, frames, lines).tolist() == [ref_loop_depth(r) for r in runs]
    assert longest_cycles(offsets, frames, lines).tolist() == [ref_longest_cycle(r) for r in runs]


# ====================================================================== kernels
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_step_kernels_match_python_on_random_runs(seed):
    check_kernels(random_runs(seed, 1500))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(1, 5), max_size=24), max_size=4))
def test_step_kernels_match_python_on_any_run(run):
    check_kernels([run, [], run[::-1]])


def test_kernel_corner_cases():
    """Hand-checked: nested for loops (ranges [3, 4] and [4, 6] share line 4), two
    sequential loops (disjoint ranges), a cycle of period 3 repeated, one-step frames."""
    runs = [
        [[2, 3, 4, 5, 6, 4, 5, 6, 4, 3, 4, 5, 4, 3, 7]],
        [[2, 3, 2, 3, 2, 4, 5, 4, 5, 4, 6]],
        [[1, 2, 3, 1, 2, 3, 1, 2, 3, 9]],
        [[5], [2], [7]],
        [],
    ]
    offsets, frames, lines = flatten(runs)
    assert loop_depths(offsets, frames, lines).tolist() == [2, 1, 1, 0, 0]
    assert longest_cycles(offsets, frames, lines).tolist() == [3, 2, 3, 0, 0]
    total, distinct = transition_counts(offsets, frames, lines)
    assert total.tolist() == [14, 10, 9, 0, 0]
    assert distinct.tolist() == [8, 6, 4, 0, 0]


@pytest.mark.parametrize("seed", [0, 1])
def test_line_coverage_matches_python(seed):
    runs = random_runs(seed, 1000)
    rng = np.random.default_rng(seed + 10)
    programs = [sorted(set(rng.integers(1, 12, rng.integers(0, 8)).tolist())) for _ in range(40)]
    run_program = rng.integers(0, len(programs), len(runs))
    stmt_offsets = np.cumsum([0] + [len(p) for p in programs]).astype(np.int64)
    stmt_lines = np.array([line for p in programs for line in p], np.int32)
    offsets, _, lines = flatten(runs)
    distinct, covered = line_coverage(offsets, lines, run_program, stmt_offsets, stmt_lines)
    assert list(zip(distinct.tolist(), covered.tolist())) == [
        ref_coverage(run, programs[p]) for run, p in zip(runs, run_program)]


# ====================================================================== statement lines
TRICKY = {
    # handled by the scanner
    "continuation": "def f(x):\n    y = (x +\n         1)\n    z = x \\\n        + 2\n    return [y,\n            z]\n",
    "strings": "def f(x):\n    s = '''\ndef g():\n    pass\n'''\n    t = 'a#b' # c\n    return s + t + \"\\\"\"\n",
    "blocks": ("def f(x):\n    global G\n    try:\n        y = 1\n    except (ValueError,\n"
               "            TypeError):\n        y = 2\n    else:\n        y = 3\n    finally:\n"
               "        pass\n    while x:\n        x -= 1\n    else:  # done\n        pass\n"
               "    return y\n"),
    "nested": ("import math\n\nX = 3\n\ndef g(a):\n    return a\n# comment\n\nasync def h():\n"
               "    await g(1)\n\ndef f(x):\n    def inner(y):\n        nonlocal x\n"
               "        return y\n\n    return inner(x) if x else math.pi\n"),
    "match": "def f(x):\n    match x:\n        case 1:\n            return 'one'\n        case _:\n            return 'other'\n",
    "after": "def f(x):\n    return x\n\nprint(f(1))\nY = [\n  1,\n]\n",
    "prefixes": "def f(x):\n    return rb'\\x' + br\"y\" + u'z'.encode()\n",
    # left to ast
    "inline def": "def f(x): return x\n",
    "inline else": "def f(x):\n    if x:\n        return 1\n    else: return 2\n",
    "docstring": "def f(x):\n    \"\"\"Doc.\"\"\"\n    'not a docstring'\n    return x\n",
    "class": "class A:\n    y = 1\n    def m(self):\n        return 2\n\ndef f(x):\n    return A().m()\n",
    "decorator": "import functools\n\n@functools.cache\ndef f(x):\n    return x\n",
    "fstring": "def f(x):\n    return f'{x!r:>4}'\n",
    "semicolon": "def f(x):\n    y = 1; z = 2\n    return y + z\n",
    "module block": "if True:\n    def f(x):\n        return x\n",
    "syntax error": "def f(x):\n    return x +\n",
    "crlf": "def f(x):\r\n    return x\r\n",
}
SCANNED = {"continuation", "strings", "blocks", "nested", "match", "after", "prefixes"}


def per_program(result) -> list[list[int]]:
    return [result.lines[a:b].tolist() for a, b in zip(result.offsets[:-1], result.offsets[1:])]


def test_statement_lines_definition():
    """The ast definition on programs worked out by hand."""
    assert statement_lines_ast(TRICKY["blocks"]) == [3, 4, 5, 7, 9, 11, 12, 13, 15, 16]
    assert statement_lines_ast(TRICKY["nested"]) == [6, 10, 13, 15, 17]
    assert statement_lines_ast(TRICKY["match"]) == [2, 3, 4, 5, 6]
    assert statement_lines_ast(TRICKY["docstring"]) == [3, 4]
    assert statement_lines_ast(TRICKY["class"]) == [4, 7]
    assert statement_lines_ast(TRICKY["inline def"]) == [1]
    assert statement_lines_ast(TRICKY["syntax error"]) is None


def test_scanner_agrees_with_ast_on_tricky_programs():
    """The scanner's results equal ast's; what it does not handle goes to ast. It does
    not look for syntax errors: a program that did not compile in the guest (an
    ``invalid`` run) is sent to ast by the caller (``use_ast``), as here."""
    names = list(TRICKY)
    codes = pa.array([TRICKY[name] for name in names])
    invalid = np.array([name == "syntax error" for name in names])
    result = statement_lines(codes, use_ast=invalid)
    assert per_program(result) == [statement_lines_ast(TRICKY[n]) or [] for n in names]
    assert result.known.tolist() == [n != "syntax error" for n in names]
    assert (result.scanned, result.parsed) == (len(SCANNED), len(names) - len(SCANNED))
    unchecked = statement_lines(codes)
    assert per_program(unchecked)[names.index("syntax error")] == [2]


def test_scanner_agrees_with_ast_on_cruxeval_and_synthetic(cruxeval_path):
    codes = [json.loads(line)["code"] for line in cruxeval_path.read_text().splitlines()]
    codes += [record["code"] for record in synth_programs(3000, seed=8)]
    result = statement_lines(pa.array(codes))
    assert per_program(result) == [statement_lines_ast(code) for code in codes]
    assert result.parsed <= 20  # the scanner handles nearly all of them itself
    forced = statement_lines(pa.array(codes[:50]), use_ast=np.ones(50, np.bool_))
    assert (forced.scanned, forced.parsed) == (0, 50)
    assert per_program(forced) == per_program(result)[:50]


# ====================================================================== branch entropy
def entropy(outcomes: list[bool]) -> float:
    p = sum(outcomes) / len(outcomes)
    return 0.0 if p in (0.0, 1.0) else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def test_branch_entropy_matches_python():
    rng = np.random.default_rng(4)
    rows = []
    for run_id in range(1, 301):
        for condition in range(rng.integers(0, 4)):
            for evaluation in range(1, rng.integers(1, 9)):
                rows.append((run_id, condition % 2 + 1, condition, evaluation,
                             bool(rng.random() < 0.4)))
    analysed = list(range(1, 251))  # runs 251-300 have branches but no analyses row
    con = duckdb.connect()
    con.execute("CREATE TABLE branches (run_id BIGINT, line INTEGER, col INTEGER, "
                "evaluation INTEGER, taken BOOLEAN)")
    con.executemany("INSERT INTO branches VALUES (?, ?, ?, ?, ?)", rows)
    con.execute("CREATE TABLE analyses (run_id BIGINT)")
    con.executemany("INSERT INTO analyses VALUES (?)", [(r,) for r in analysed])
    got = {row["run_id"]: row for row in branch_entropy(con).to_dicts()}
    assert sorted(got) == analysed
    for run_id in analysed:
        conditions: dict[tuple, list[bool]] = {}
        for r, line, col, _, taken in rows:
            if r == run_id:
                conditions.setdefault((line, col), []).append(taken)
        want = (sum(map(entropy, conditions.values())) / len(conditions)) if conditions else 0.0
        assert got[run_id]["conditions"] == len(conditions)
        assert got[run_id]["branch_entropy"] == pytest.approx(want, abs=1e-12)


# ====================================================================== real traces
VOWELS = """\
def f(words):
    n = 0
    for w in words:
        for ch in w:
            if ch in 'aeiou':
                n += 1
    return n
"""
DIGITS = """\
def f(s):
    i = 0
    out = ''
    while i < len(s):
        if s[i].isdigit():
            out += s[i]
        else:
            out += '-'
        i += 1
    return out
"""
HELPER = """\
def g(x):
    return x * 2 if x > 0 else 0

def f(xs):
    total = 0
    for x in xs:
        total += g(x)
    if total > 100:
        return -1
    return total
"""
FIRST = "def f(d):\n    keys = sorted(d)\n    return d[keys[0]]\n"
BROKEN = "def f(x):\n    return x +\n"
RECORDS = [
    {"id": "vowels", "code": VOWELS, "input": "['aa', 'b']"},
    {"id": "digits", "code": DIGITS, "input": "'1a2'"},
    {"id": "helper", "code": HELPER, "input": "[1, 2]"},
    {"id": "first", "code": FIRST, "input": "{}"},
    {"id": "broken", "code": BROKEN, "input": "1"},
]
# Each program's line steps per frame, as the sandbox records them (checked first, so
# that the feature values below follow from them by hand).
LINES = {
    1: [[2, 3, 4, 5, 6, 4, 5, 6, 4, 3, 4, 5, 4, 3, 7]],
    2: [[2, 3, 4, 5, 6, 9, 4, 5, 8, 9, 4, 5, 6, 9, 4, 10]],
    3: [[5, 6, 7, 6, 7, 6, 8, 10], [2], [2]],
    4: [[2, 3]],
    5: [],
}
H23 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))  # 0.918...: 2 of 3 true
H34 = -(3 / 4 * math.log2(3 / 4) + 1 / 4 * math.log2(1 / 4))  # 0.811...: 3 of 4 true
# run_id: (transitions, distinct_transitions, loop_depth, longest_cycle, distinct_lines,
#          statement_lines, coverage, conditions, branch_entropy)
EXPECTED = {
    # vowels(['aa', 'b']): 14 transitions; 8 distinct pairs (2→3 3→4 4→5 5→6 6→4 4→3
    # 5→4 3→7). Backward jumps 6→4, 5→4 (header 4, range [4, 6]) and 4→3 (the inner
    # loop exhausted: header 3, range [3, 4]): they share line 4, depth 2. 'aa' gives
    # the iteration 4 5 6 twice in a row: cycle 3. Lines 2-7 all run: 6/6. One condition
    # (line 5) true, true, false: entropy H(2/3).
    1: (14, 8, 2, 3, 6, 6, 1.0, 1, H23),
    # digits('1a2'): 15 transitions, 9 distinct pairs; the only backward jump is 9→4:
    # depth 1. The iterations 4 5 6 9 / 4 5 8 9 / 4 5 6 9 never repeat back to back
    # (and no other square exists): cycle 0. `else:` (line 7) is not a statement: 8
    # lines of 8. Conditions: while (T T T F) and if (T F T): mean of H(3/4), H(2/3).
    2: (15, 9, 1, 0, 8, 8, 1.0, 2, (H34 + H23) / 2),
    # helper([1, 2]): f's frame 5 6 7 6 7 6 8 10 has 7 transitions (5 distinct), g's
    # two frames one line step each (none: calls do not join frames). 7→6 is the one
    # backward jump: depth 1; 6 7 6 7: cycle 2. Lines run: 2 (in g), 5, 6, 7, 8, 10 of
    # the statement lines 2, 5-10 (line 9's return never ran): 6/7. Conditions: the
    # ternary (T T) and the if (F): both certain, entropy 0.
    3: (7, 5, 1, 2, 6, 7, 6 / 7, 2, 0.0),
    # first({}): IndexError at line 3 after line 2: 1 transition; analysed, no
    # conditions: 0 conditions and entropy 0.0 (not NULL).
    4: (1, 1, 0, 0, 2, 2, 1.0, 0, 0.0),
    # broken: invalid (syntax error), no steps, not analysed, unparseable: NULLs.
    5: (0, 0, 0, 0, 0, None, None, None, None),
}


@pytest.fixture(scope="module")
def features_db(tmp_path_factory) -> Path:
    """RECORDS traced (in process) and analysed in the real sandbox; tests copy it."""
    root = tmp_path_factory.mktemp("features")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    db = root / "store.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert dict(summary.by_status) == {"ok": 3, "exception": 1, "invalid": 1}
    assert analyse_store(db, AnalysisOptions(workers=0)).analysed == 4
    return db


def copy(db: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy.duckdb"
    shutil.copy(db, target)
    return target


def table(db: Path) -> dict[int, tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {row[0]: row[1:] for row in
                con.execute("SELECT * FROM run_features ORDER BY run_id").fetchall()}
    finally:
        con.close()


def assert_expected(rows: dict[int, tuple]) -> None:
    assert sorted(rows) == sorted(EXPECTED)
    for run_id, want in EXPECTED.items():
        got = rows[run_id]
        assert got[:6] == want[:6], run_id
        for g, w in zip(got[6:], want[6:]):
            assert (g is None and w is None) or g == pytest.approx(w, abs=1e-12), run_id


def test_line_sequences_of_the_programs(features_db):
    con = duckdb.connect(str(features_db), read_only=True)
    try:
        for run_id, frames in LINES.items():
            got = con.execute("SELECT list(line ORDER BY step) FROM steps WHERE run_id = ? "
                              "AND event = 'line' GROUP BY frame ORDER BY frame",
                              [run_id]).fetchall()
            assert [lines for (lines,) in got] == frames
    finally:
        con.close()


def test_features_command_exact_values(features_db, tmp_path):
    db = copy(features_db, tmp_path)
    result = CliRunner().invoke(main, ["features", "--db", str(db), "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = {row["item"]: row["value"] for row in json.loads(result.stdout)}
    assert (summary["runs"], summary["line steps read"], summary["programs"],
            summary["runs with branch data"]) == (5, 43, 5, 4)
    assert (summary["  statement lines by scanner"], summary["  statement lines by ast"]) == (4, 1)
    assert summary["loop_depth mean / max"] == "0.8 / 2"
    assert_expected(table(db))
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT column_name, data_type FROM information_schema.columns "
                           "WHERE table_name = 'run_features' ORDER BY ordinal_position"
                           ).fetchall() == [
            ("run_id", "BIGINT"), ("transitions", "BIGINT"), ("distinct_transitions", "INTEGER"),
            ("loop_depth", "INTEGER"), ("longest_cycle", "INTEGER"),
            ("distinct_lines", "INTEGER"), ("statement_lines", "INTEGER"),
            ("coverage", "DOUBLE"), ("conditions", "INTEGER"), ("branch_entropy", "DOUBLE")]
    finally:
        con.close()


def test_rerun_replaces_and_chunks_do_not_matter(features_db, tmp_path):
    """A second run replaces the table (no duplicates), whatever the chunk size."""
    db = copy(features_db, tmp_path)
    run_features(db)
    first = table(db)
    summary = run_features(db, chunk_runs=2)
    assert summary.runs == 5
    assert table(db) == first
    assert_expected(first)


def test_table_summary_and_errors(features_db, tmp_path):
    db = copy(features_db, tmp_path)
    result = CliRunner().invoke(main, ["features", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "run_features" in result.stdout and "branch_entropy mean / max" in result.stdout
    missing = CliRunner().invoke(main, ["features", "--db", str(tmp_path / "none.duckdb")])
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"Error: database not found: {tmp_path / 'none.duckdb'}"
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE t (x INTEGER)").close()
    refused = CliRunner().invoke(main, ["features", "--db", str(other)])
    assert refused.exit_code == 1
    assert refused.stderr.startswith("Error: ") and "not a steptrace store" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_features_of_a_synthetic_corpus_are_consistent(tmp_path):
    """Over 200 synthetic runs: invariants that hold whatever the program."""
    corpus = tmp_path / "synth.jsonl"
    from steptrace.benchmark._synth import write_synth
    write_synth(corpus, 200, seed=21)
    db = tmp_path / "synth.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=2, isolation="batch"))
    summary = run_features(db)
    assert (summary.runs, summary.programs_parsed) == (200, 0)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT f.*, r.line_steps FROM run_features f JOIN runs r USING (run_id)").fetchall()
    finally:
        con.close()
    kinds = Counter()
    for (_, transitions, distinct, depth, cycle, lines, statements, coverage, conditions,
         entropy_, line_steps) in rows:
        assert transitions <= line_steps - 1 and distinct <= transitions
        assert 0 < coverage <= 1 and lines <= statements + 1
        assert 2 * cycle <= line_steps and depth <= 3
        assert conditions is None and entropy_ is None  # not analysed
        kinds[depth] += 1
    assert set(kinds) >= {0, 1, 2}
