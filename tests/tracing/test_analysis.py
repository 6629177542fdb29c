"""The analysis run (tracer/analysis.py, engine/tracing/_analysis.py): condition outcomes, operand
checks, agreement with the traced run, determinism — exact values on hand-written
programs, and condition outcomes cross-checked against the step trace on CRUXEval."""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.cli._main import main
from steptrace.store._store import StoreError, connect
from steptrace.tracing._trace import TraceOptions, trace_corpus
from steptrace.sandbox._build import BuildError
from steptrace.sandbox._limits import Limits

BRANCHY = """\
def f(x, ys):
    out = []
    for y in ys:
        if not y and x != 3:
            out.append(0)
        elif y > 5 or y < -5:
            out.append(y // 2)
        else:
            out += [y if y % 2 else -y]
    z = [a for a in ys if a > 1 if a < 9]
    d = {'k': [1]}
    d['k'] += [2, 3, 4, 5]
    d['k'][1:3] += [9]
    while x < 4:
        x += 100
    return out, z, d, x * 'ab'
"""

OPERANDS = """\
def f(a, b, s):
    p = a * b
    q = a / 2
    r = s + s
    t = s * 2
    u = [1, 2] + [3]
    return p, q, r, t, u
"""

# An augmented assignment to an item or attribute evaluates its container and key once,
# before the right-hand side: the instrumented program must print the same as the traced.
ORDER = """\
class Box:
    def __init__(self):
        self.n = 1

def key(log):
    log.append('key')
    return 0

def value(log, box):
    log.append('value')
    box.n *= 10
    return 5

def f():
    log = []
    box = Box()
    items = [1]
    items[key(log)] += value(log, box)
    box.n += value(log, box)
    return log, items, box.n
"""

SET_ORDER = "def f(xs):\n    return list(set(xs))\n"
RANDOM = "import random\n\ndef f():\n    return random.random() < 2.0, random.random()\n"
CLOCK = "import time\n\ndef f():\n    return time.time() > 0\n"
BOOM = "def f(x):\n    if x > 0:\n        return 1\n    return 1 // x\n"
# Object state (objects, attributes, globals): a class program with an alias and a global
# it changes, deterministic; then set orders that only the object state records (each
# returns 7 and keeps its locals' reprs alike): a global's value, an attribute of an
# instance whose repr hides it, and the types of objects made in set order.
ACCOUNT = """\
count = 0

class Acc:
    def __init__(self):
        self.total = 0

    def add(self, x):
        global count
        count += 1
        self.total += x

def f(xs):
    a = Acc()
    b = a
    for x in xs:
        b.add(x)
    return a.total
"""
GLOBAL_SET = ("seen = None\n\ndef f(xs):\n    global seen\n    seen = list(set(xs))\n"
              "    return len(seen)\n")
# the bag's rendering is cut (--max-repr) before its items: only its attribute row differs
ATTRIBUTE_SET = ("class Bag:\n    pass\n\n"
                 "def f(xs):\n    bag = Bag()\n    bag.pad = 'x' * 2000\n"
                 "    bag.items = list(set(xs))\n    return len(bag.items)\n")
# classes named by the set's letters, all rendered as O() (their __qualname__): only the
# objects' types show the order
OBJECT_SET = ("class O:\n    pass\n\n"
              "def f(xs):\n    made = list(map(type.__call__, map(type, set(xs), [(O,)] * 7, "
              "[{'__qualname__': 'O'}] * 7)))\n    return len(made)\n")
SEVEN = "['a', 'b', 'c', 'd', 'e', 'f', 'g']"


def trace(tmp_path: Path, records: list[dict]) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = tmp_path / "t.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0))
    return db


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def outcomes(db: Path, sample: str) -> dict[tuple, str]:
    found = rows(db, "SELECT b.line, b.col, b.kind, string_agg(CASE WHEN taken THEN 'T' ELSE 'F' END, '' "
                     "ORDER BY evaluation) FROM branches b JOIN runs r USING (run_id) "
                     f"WHERE r.sample_id = '{sample}' GROUP BY ALL")
    return {(line, col, kind): text for line, col, kind, text in found}


ANALYSIS = ("SELECT r.sample_id, a.status, a.agrees, a.disagreement, a.int_ops, a.int_ops_large, "
            "a.seq_ops, a.seq_ops_long, a.float_ops, a.true_divisions, a.evaluations "
            "FROM analyses a JOIN runs r USING (run_id) ORDER BY r.sample_id")


def test_condition_outcomes_and_operands_exactly(tmp_path):
    """``f(1, [0, 3, 8, 2])`` by hand: y=0 takes the ``if`` (not 0 and 1 != 3); y=3 fails
    the if, the elif, and takes the ternary's true side (3 % 2); y=8 takes the elif;
    y=2 fails both and the ternary (2 % 2 == 0). The filters see 0, 3, 8, 2 (``a > 1``)
    and 3, 8, 2 (``a < 9``); the while runs once. Operators: int ``y % 2`` twice, ``y //
    2`` once, ``x += 100`` once (all with a small operand); sequence ``out +=`` twice,
    ``d['k'] +=``, the slice ``+=`` and ``x * 'ab'`` (length 2): none with two long
    operands (an in-place ``+=`` is measured before it grows its left operand)."""
    db = trace(tmp_path, [{"id": "branchy", "code": BRANCHY, "input": "1, [0, 3, 8, 2]"}])
    assert analyse_store(db, AnalysisOptions(workers=0)).analysed == 1
    assert outcomes(db, "branchy") == {
        (4, 11, "if"): "TFFF",
        (6, 13, "elif"): "FTF",
        (9, 25, "ifexp"): "TF",
        (10, 26, "filter"): "FTTT",
        (10, 35, "filter"): "TTT",
        (14, 10, "while"): "TF",
    }
    assert rows(db, ANALYSIS) == [("branchy", "ok", True, None, 4, 0, 5, 0, 0, 0, 18)]


def test_operand_classes(tmp_path):
    """``f(12, 40, 'abcd')``: ``a * b`` is an int operation with no operand ≤ 3; ``a / 2``
    a true division with a float result; ``s + s`` a string operation of two length-4
    operands; ``s * 2`` and ``[1, 2] + [3]`` have a short operand."""
    db = trace(tmp_path, [{"id": "ops", "code": OPERANDS, "input": "12, 40, 'abcd'"}])
    analyse_store(db, AnalysisOptions(workers=0))
    assert rows(db, ANALYSIS) == [("ops", "ok", True, None, 1, 1, 3, 1, 1, 1, 0)]


def test_augmented_assignment_keeps_evaluation_order(tmp_path):
    """``items[key()] += value()`` evaluates the key before the value (``log``), and
    ``box.n += value()`` loads ``box.n`` (10, after the first ``value()``) before
    ``value`` makes it 100: 10 + 5, as CPython does (105 would mean a late load)."""
    db = trace(tmp_path, [{"id": "order", "code": ORDER, "input": ""}])
    analyse_store(db, AnalysisOptions(workers=0))
    assert rows(db, "SELECT output FROM runs") == [("(['key', 'value', 'value'], [6], 15)",)]
    assert rows(db, "SELECT status, agrees, int_ops FROM analyses") == [("ok", True, 4)]


@pytest.mark.slow  # builds the determinism variant of the guest when it is not cached
def test_determinism_agreement_and_resume(tmp_path):
    """A set of strings listed, ``random.random()``: they differ in the variant build
    (another hash secret, another random seed); ``time.time() > 0`` and an exception do
    not. The random program agrees in its analysis run: every job starts from the same
    random seed. Only finished runs are analysed (not the syntax error); a second call
    finds nothing left to do."""
    db = trace(tmp_path, [
        {"id": "set", "code": SET_ORDER, "input": "['a', 'b', 'c', 'd', 'e', 'f', 'g']"},
        {"id": "random", "code": RANDOM, "input": ""},
        {"id": "clock", "code": CLOCK, "input": ""},
        {"id": "boom", "code": BOOM, "input": "0"},
        {"id": "invalid", "code": "def f(:\n", "input": ""},
    ])
    summary = analyse_store(db, AnalysisOptions(workers=0, determinism=True))
    assert (summary.analysed, summary.determinism_checked, summary.nondeterministic) == (4, 4, 2)
    assert rows(db, "SELECT r.sample_id, a.status, a.agrees, a.disagreement, a.deterministic, "
                    "a.determinism_note FROM analyses a JOIN runs r USING (run_id) "
                    "ORDER BY r.sample_id") == [
        ("boom", "exception", True, None, True, None),
        ("clock", "ok", True, None, True, None),
        ("random", "ok", True, None, False, "return value differs"),
        ("set", "ok", True, None, False, "return value differs"),
    ]
    assert outcomes(db, "boom") == {(2, 7, "if"): "F"}
    again = analyse_store(db, AnalysisOptions(workers=0, determinism=True))
    assert (again.analysed, again.determinism_checked) == (0, 0)
    assert rows(db, "SELECT count(*) FROM analyses") == [(4,)]


@pytest.mark.slow  # builds the determinism variant of the guest when it is not cached
def test_determinism_compares_object_state(tmp_path):
    """Objects, attributes and global states are part of what the variant's trace must
    agree on. The class program agrees, and what it was compared on is its exact object
    state; each set-order program differs only there, and the note names the first
    difference: the global, the attribute (``#2.items``: of the bag, object 2) or the
    object (the first instance the two builds' set orders made of another class: which
    one follows their hash secrets)."""
    from steptrace.tracing._analysis import _stored_digests

    db = trace(tmp_path, [
        {"id": "account", "code": ACCOUNT, "input": "[1, 2]"},
        {"id": "attribute", "code": ATTRIBUTE_SET, "input": SEVEN},
        {"id": "global", "code": GLOBAL_SET, "input": SEVEN},
        {"id": "object", "code": OBJECT_SET, "input": SEVEN},
    ])
    with connect(db) as con:
        (account,) = _stored_digests(con, [1]).values()
    assert {part: account[part] for part in ("objects", "attributes", "globals")} == {
        "objects": [(1, "list", 0), (2, "Acc", 2)],
        "attributes": [(4, 2, "total", "0", "int", None), (11, 2, "total", "1", "int", None),
                       (17, 2, "total", "3", "int", None)],
        "globals": [(0, "count", "0", "int", None), (10, "count", "1", "int", None),
                    (16, "count", "2", "int", None)]}
    assert [row for row in account["states"] if row[1] in ("a", "b")] == [
        (5, "a", "Acc(total=0)", "Acc", 2), (6, "b", "Acc(total=0)", "Acc", 2),
        (12, "a", "Acc(total=1)", "Acc", 2), (12, "b", "Acc(total=1)", "Acc", 2),
        (18, "a", "Acc(total=3)", "Acc", 2), (18, "b", "Acc(total=3)", "Acc", 2)]
    summary = analyse_store(db, AnalysisOptions(workers=0, determinism=True))
    assert (summary.determinism_checked, summary.nondeterministic) == (4, 3)
    *found, (name, output, agrees, deterministic, note) = rows(
        db, "SELECT r.sample_id, r.output, a.agrees, a.deterministic, a.determinism_note "
            "FROM analyses a JOIN runs r USING (run_id) ORDER BY r.sample_id")
    assert found == [
        ("account", "3", True, True, None),
        ("attribute", "7", True, False, "attributes differ (step 4, #2.items)"),
        ("global", "7", True, False, "globals differ (step 2, seen)"),
    ]
    assert (name, output, agrees, deterministic) == ("object", "7", True, False)
    kinds = dict(rows(db, "SELECT o.object_id, o.type FROM objects o JOIN runs r "
                          "USING (run_id) WHERE r.sample_id = 'object'"))
    assert sorted(kinds.values()) == sorted(["list", "list", *"abcdefg"])
    first = int(note.removeprefix("objects differ (object ").removesuffix(")"))
    assert note == f"objects differ (object {first})" and kinds[first] in "abcdefg"


@pytest.mark.slow  # builds the determinism variant of the guest when it is not cached
def test_determinism_of_a_run_stored_without_object_state(tmp_path):
    """A run traced before schema 4 has no object rows and NULL object ids in its states
    (a store upgraded in place): its variant trace, which has them, is compared on the
    rest, and agrees; the same run with its object rows kept but one attribute's value
    changed does not."""
    db = trace(tmp_path, [{"id": "account", "code": ACCOUNT, "input": "[1, 2]"},
                          {"id": "again", "code": ACCOUNT, "input": "[1, 2, 3]"}])
    with duckdb.connect(str(db)) as con:
        for table in ("objects", "attributes", "global_states"):
            con.execute(f"DELETE FROM {table} WHERE run_id = 1")
        con.execute("UPDATE states SET object_id = NULL WHERE run_id = 1")
        con.execute("UPDATE attributes SET value = '7' WHERE run_id = 2 AND step = 11")
    summary = analyse_store(db, AnalysisOptions(workers=0, determinism=True))
    assert (summary.determinism_checked, summary.nondeterministic) == (2, 1)
    assert rows(db, "SELECT r.sample_id, a.deterministic, a.determinism_note FROM analyses a "
                    "JOIN runs r USING (run_id) ORDER BY r.sample_id") == [
        ("account", True, None), ("again", False, "attributes differ (step 11, #2.total)")]


def test_force_retrace_drops_the_old_analysis(tmp_path):
    """``trace --force`` replaces runs (under their ids): their analyses and branches go too."""
    records = [{"id": "boom", "code": BOOM, "input": "0"}]
    db = trace(tmp_path, records)
    analyse_store(db, AnalysisOptions(workers=0))
    trace_corpus(tmp_path / "corpus.jsonl", db, TraceOptions(workers=0, force=True))
    assert rows(db, "SELECT count(*) FROM analyses") == [(0,)]
    assert rows(db, "SELECT count(*) FROM branches") == [(0,)]
    analyse_store(db, AnalysisOptions(workers=0))
    assert rows(db, "SELECT count(*) FROM analyses a JOIN runs r USING (run_id)") == [(1,)]


def test_version_1_store_is_upgraded_on_write(tmp_path):
    """A store written by schema version 1 (no analyses/branches) opens read-only as it
    is and gains the new tables (and the current version, 4) when opened for writing."""
    db = trace(tmp_path, [{"id": "boom", "code": BOOM, "input": "0"}])
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE analyses")
        con.execute("DROP TABLE branches")
        con.execute("UPDATE meta SET value = '1'")
    connect(db, read_only=True).close()
    connect(db).close()
    assert rows(db, "SELECT value FROM meta") == [("7",)]
    assert analyse_store(db, AnalysisOptions(workers=0)).analysed == 1
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE meta SET value = '9'")
    with pytest.raises(StoreError, match="schema version 9"):
        connect(db)


def test_cli_analyse(tmp_path):
    db = trace(tmp_path, [{"id": "boom", "code": BOOM, "input": "0"}])
    result = CliRunner().invoke(main, ["analyse", "--db", str(db), "--workers", "0",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[:2] == [{"item": "analysed", "value": 1},
                                             {"item": "agreed with the trace", "value": 1}]
    missing = CliRunner().invoke(main, ["analyse", "--db", str(tmp_path / "nope.duckdb")])
    assert missing.exit_code == 1
    assert "database not found" in missing.output


# ---------------------------------------------------------------- CRUXEval
def _step_derived_outcomes(code: str, steps: list[tuple]) -> dict[tuple, str]:
    """Outcomes of ``if``/``elif``/``while`` conditions read off the step trace alone: the
    condition (one line, body starting on a later line with a simple statement) was true
    exactly when its frame's next line step is the body's first line."""
    tree = ast.parse(code)
    bodies: dict[int, tuple] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While)):
            test, first = node.test, node.body[0]
            if (test.end_lineno == test.lineno and first.lineno > test.lineno
                    and not isinstance(first, (ast.If, ast.While, ast.For, ast.Try, ast.With))):
                if test.lineno in bodies:
                    bodies[test.lineno] = None  # two conditions on one line: ambiguous
                else:
                    bodies[test.lineno] = (test.col_offset, first.lineno)
    derived: dict[tuple, list[str]] = defaultdict(list)
    by_frame: dict[int, list[tuple]] = defaultdict(list)
    for event, line, frame in steps:
        by_frame[frame].append((event, line))
    for frame_steps in by_frame.values():
        for (event, line), (next_event, next_line) in zip(frame_steps, frame_steps[1:]):
            if event == "line" and bodies.get(line) and next_event == "line":
                col, body_line = bodies[line]
                derived[(line, col)].append("T" if next_line == body_line else "F")
    return {key: "".join(v) for key, v in derived.items()}


def test_condition_outcomes_agree_with_the_steps_on_cruxeval(cruxeval_db):
    """Two independent paths to the same facts: for every one-line ``if``/``elif``/
    ``while`` condition of the 800 CRUXEval programs whose body starts on a later line,
    the outcomes recorded by the analysis run equal those read off the stored steps, in
    order. Also: every analysis run agrees with its traced run."""
    assert rows(cruxeval_db, "SELECT count(*) FILTER (WHERE agrees), count(*) FROM analyses") == [
        (800, 800)]
    programs = dict(rows(cruxeval_db, "SELECT r.run_id, p.code FROM runs r JOIN programs p "
                                      "USING (program_id)"))
    steps: dict[int, list] = defaultdict(list)
    for run_id, event, line, frame in rows(cruxeval_db, "SELECT run_id, event, line, frame "
                                                        "FROM steps ORDER BY run_id, step"):
        steps[run_id].append((event, line, frame))
    recorded: dict[int, dict] = defaultdict(dict)
    for run_id, line, col, text in rows(cruxeval_db, """
            SELECT run_id, line, col, string_agg(CASE WHEN taken THEN 'T' ELSE 'F' END, ''
                                                 ORDER BY evaluation)
            FROM branches WHERE kind IN ('if', 'elif', 'while') GROUP BY ALL"""):
        recorded[run_id][(line, col)] = text
    compared = evaluations = 0
    for run_id, code in programs.items():
        derived = _step_derived_outcomes(code, steps[run_id])
        for key, text in derived.items():
            assert recorded[run_id].get(key) == text, (run_id, key, code)
            compared += 1
            evaluations += len(text)
    # how much the check covers (pinned so that a change in coverage is noticed)
    assert (compared, evaluations) == (469, 2162)


def test_cruxeval_analysis_figures(cruxeval_db):
    """What the analysis finds on the 800: CRUXEval was built with operand and float
    filters, so no run has a large-operand operation or a float; one run's trace depends
    on string hashing (sample_736 holds a set of whitespace strings)."""
    assert rows(cruxeval_db, """
        SELECT count(*) FILTER (WHERE int_ops_large > 0), count(*) FILTER (WHERE seq_ops_long > 0),
               count(*) FILTER (WHERE float_ops > 0), count(*) FILTER (WHERE true_divisions > 0),
               count(*) FILTER (WHERE NOT deterministic)
        FROM analyses""") == [(0, 0, 0, 0, 1)]
    assert rows(cruxeval_db, "SELECT r.sample_id, a.determinism_note FROM analyses a "
                             "JOIN runs r USING (run_id) WHERE NOT a.deterministic") == [
        ("sample_736", "variable states differ (step 2, whitespaces)")]
    assert rows(cruxeval_db, "SELECT count(*), count(DISTINCT run_id) FROM branches") == [
        (2547, 438)]


def test_untraced_run_mode_and_unknown_mode(sandbox):
    """``mode: run`` (checking predicted inputs) calls the program as it is, untraced: the
    result, its comparison with the expected output, stdout and exception as usual, no
    steps and no analysis; an unknown mode is an invalid request."""
    code = "def f(x):\n    print('x is', x)\n    return x * 2\n"
    ran = sandbox.run({"code": code, "input": "21", "mode": "run", "expected": "42"}).result
    assert (ran["status"], ran["output"], ran["output_matches"], ran["stdout"],
            ran["line_steps"], ran["steps"]["event"], "analysis" in ran) == (
        "ok", "42", True, "x is 21\n", 0, [], False)
    boom = sandbox.run({"code": "def f():\n    assert 1 == 2\n", "input": "", "mode": "run"}).result
    assert (boom["status"], boom["exception_type"]) == ("exception", "AssertionError")
    bad = sandbox.run({"code": code, "input": "1", "mode": "fast"}).result
    assert (bad["status"], bad["exception_message"]) == (
        "invalid", "unknown mode 'fast'; use one of trace, analyse, run")


@pytest.mark.slow  # builds the variant again
def test_a_variant_that_orders_single_characters_alike_is_built_again(monkeypatch):
    """The variant must differ from the main build in the hash of a long string and in the
    low bits that order sets of single characters (FNV in the WASI guest: one pair of
    builds in eight share them). A variant that does not is rebuilt; one that never does
    is refused after VARIANT_ATTEMPTS builds."""
    import steptrace.tracing._analysis as analysis

    probes = {"": [[111, 3]], analysis.VARIANT: [[222, 3], [333, 5]]}  # one bad build
    rebuilds: list[str] = []
    monkeypatch.setattr(analysis, "_probe", lambda limits, variant: probes[variant][
        min(len(rebuilds), len(probes[variant]) - 1) if variant else 0])
    monkeypatch.setattr(analysis, "ensure_component",
                        lambda force=False, variant="": rebuilds.append(variant))
    analysis._check_variant(Limits())
    assert rebuilds == [analysis.VARIANT]

    rebuilds.clear()
    probes[analysis.VARIANT] = [[222, 3]]
    with pytest.raises(BuildError, match="hashes strings as the main build does"):
        analysis._check_variant(Limits())
    assert rebuilds == [analysis.VARIANT] * analysis.VARIANT_ATTEMPTS
