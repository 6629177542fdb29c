"""CRUXEval-style construction filters (engine/benchmark/_filters.py, ``steptrace filter``): each rule
on a hand-written program it must remove, through the real sandbox, analysis and DuckDB
store; the exact filter table on the 800 CRUXEval runs, with every removal explained."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.benchmark._filters import (GROUPS, RULES, FilterOptions, Range, filter_runs, parse_range,
                            printable, program_facts, write_kept)
from steptrace.tracing._trace import TraceOptions, trace_corpus
from steptrace.sandbox._limits import Limits

pytestmark = pytest.mark.slow  # its stores are analysed (a variant build): left out by make test-fast

# Every program is 75-300 characters long (asserted below) unless it is there for the
# length rule, and breaks exactly the rule(s) its name says.
KEEP = ("def f(text, n):\n    out = []\n    for ch in text:\n        out.append(ch * n)\n"
        "    return ''.join(out)\n")
UNICODE = ("def f(word, mark):\n    if mark in word:\n        return word.replace(mark, '-')\n"
           "    return word.upper()\n")
SHORT = "def f(x):\n    return x\n"
LONG = "def f(a):\n" + "    b = a\n" * 30 + "    return b\n"
UNUSED = ("def f(text, unused):\n    result = []\n    for ch in text:\n"
          "        result.append(ch.upper())\n    return result\n")
SYNTAX = "def f(text):\n    result = text.upper(\n    return result + 'x' if text else result\n"
IMPORTS = ("def f(values):\n    import math\n    total = 0\n    for v in values:\n"
           "        total = math.gcd(total, v)\n    return total\n")
SET_CALL = ("def f(values):\n    seen = set()\n    for v in values:\n        seen.add(v % 3)\n"
            "    return sorted(seen)\n")
CONTROL = ("def f(text):\n    parts = text.split('\x0b')\n"
           "    return [part.strip() for part in parts if part]\n")
FLOAT_VALUE = ("def f(price, items):\n    if price in items:\n        return items.index(price)\n"
               "    return len(items)\n")
FLOAT_OP = ("def f(count, step):\n    total = 0\n    for i in range(count):\n"
            "        total = total + int(step * 1.5)\n    return total\n")
TRUE_DIV = ("class Half:\n    def __truediv__(self, other):\n        return 2\n\n"
            "def f(n):\n    return Half() / n + n\n")
LARGE_INT = "def f(width, height):\n    area = width * height\n    return [area, width, height]\n"
LONG_SEQ = "def f(word, other):\n    joined = word + other\n    return [joined, word, other]\n"
# its state grows (a repeating one is proved to loop: status loops, test_loops_fail_the_time_rule)
SPIN = "def f(limit):\n    steps = 0\n    while limit > 0: steps += 1\n    return steps\n"
LOOP = ("def f(n):\n    total = 0\n    for i in range(n):\n        total = total + i % 2\n"
        "    return total\n")
RAISES = ("def f(values):\n    total = 0\n    for v in values:\n        total = total + 1 // v\n"
          "    return total\n")
SET_ORDER = ("def f(words):\n    unique = {w for w in words}\n"
             "    return [w.upper() for w in unique]\n")

RECORDS = [
    # keep/0 passes every rule; keep/1's input does not parse; keep/2's input calls eval(
    {"id": "keep", "code": KEEP, "inputs": ["'abc', 2", "'abc', 2 +", "'ab', eval('2')"],
     "outputs": ["'aabbcc'", None, "'aabb'"]},
    {"id": "unicode", "code": UNICODE, "input": "'h\u00e9llo', '\u00e9'", "output": "'h-llo'"},
    {"id": "short", "code": SHORT, "input": "1"},
    {"id": "long", "code": LONG, "input": "7"},
    {"id": "unused", "code": UNUSED, "input": "'ab', 5"},
    {"id": "syntax", "code": SYNTAX, "input": "'x'"},
    {"id": "imports", "code": IMPORTS, "input": "[4, 6]"},
    {"id": "set_call", "code": SET_CALL, "input": "[1, 2, 4]"},
    {"id": "control", "code": CONTROL, "input": "'a\\x0bb'"},
    {"id": "float_value", "code": FLOAT_VALUE, "input": "2.5, [1, 2.5]"},
    {"id": "float_op", "code": FLOAT_OP, "input": "2, 2"},
    {"id": "true_div", "code": TRUE_DIV, "input": "1"},
    {"id": "large_int", "code": LARGE_INT, "input": "12, 40"},
    {"id": "long_seq", "code": LONG_SEQ, "input": "'abcd', 'efgh'"},
    {"id": "spin", "code": SPIN, "input": "1"},
    {"id": "loop", "code": LOOP, "input": "3000"},
    {"id": "raises", "code": RAISES, "input": "[1, 0]"},
    {"id": "set_order", "code": SET_ORDER, "input": "['a', 'b', 'c', 'd', 'e', 'f', 'g']"},
]
N_RUNS = 20

# What the default rules remove, as "sample_id/input_index"; every run is the one
# program (or input) written for that rule, plus the runs that did not return for
# no_exception (and the unparsable ones counted by `valid` as well).
DEFAULT_REMOVALS = {
    "length": ["short/0", "long/0"],
    "args_used": ["unused/0"],
    "valid": ["keep/1", "syntax/0"],
    "no_imports": ["imports/0"],
    "no_forbidden": ["keep/2", "set_call/0"],
    "printable": ["control/0"],
    "no_float_values": ["float_value/0"],
    "no_float_ops": ["float_op/0"],
    "no_true_division": ["true_div/0"],
    "small_int_ops": ["large_int/0"],
    "short_seq_ops": ["long_seq/0"],
    "time": ["spin/0"],
    "no_exception": ["keep/1", "syntax/0", "spin/0", "raises/0"],
    "steps": [],
    "deterministic": ["set_order/0"],
}
DEFAULT_KEPT = ["keep/0", "unicode/0", "loop/0"]

CRUXEVAL_TABLE = [
    ("length", "static", "code is 75-300 characters long", 133, 667),
    ("args_used", "static", "every parameter of the entry function is read in its body", 2, 798),
    ("valid", "static",
     "no syntax error: program, entry and input compile (status not invalid)", 0, 800),
    ("no_imports", "static", "no import statement, no __import__ in code or input", 0, 800),
    ("no_forbidden", "static", "none of __builtins__ globals() locals() open( exec( eval( "
                               "input( hash( set( in code or input", 0, 800),
    ("printable", "static",
     "code, input and output printable (str.isprintable; tab, newline allowed)", 0, 800),
    ("no_float_values", "dynamic",
     "no float among recorded locals, arguments and the return value", 5, 795),
    ("no_float_ops", "dynamic", "no executed operation with a float operand or result", 0, 800),
    ("no_true_division", "dynamic", "no executed true division (/)", 0, 800),
    ("small_int_ops", "dynamic", "every int operation has an operand with |x| <= 3", 0, 800),
    ("short_seq_ops", "dynamic",
     "every str/list/tuple/bytes operation has an operand of length <= 3", 0, 800),
    ("time", "dynamic", "the traced call finished within 2 s", 0, 800),
    ("no_exception", "dynamic", "the call returned (status ok)", 0, 800),
    ("steps", "dynamic", "line/instruction steps within bounds (none set)", 0, 800),
    ("deterministic", "determinism",
     "same result, stdout and trace in a reseeded guest build", 1, 799),
    ("kept", "", "runs that pass every rule above", 140, 660),
]


def rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def labels(db: Path, run_ids: list[int]) -> list[str]:
    """``sample_id/input_index`` of runs, in run id order."""
    found = dict(rows(db, "SELECT run_id, sample_id || '/' || input_index FROM runs"))
    return [found[run_id] for run_id in sorted(run_ids)]


def copy_store(src: Path, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(src, directory / src.name))


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"Error: {message}"], result.stderr


@pytest.fixture(scope="module")
def traced_db(tmp_path_factory) -> Path:
    """The corpus above traced in-process (1 s per job, so `spin` times out quickly), not
    analysed. Never written: tests copy it."""
    directory = tmp_path_factory.mktemp("filters")
    corpus = directory / "rules.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    db = directory / "rules.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0, limits=Limits(timeout_s=1.0)))
    assert summary.traced == N_RUNS
    return db


@pytest.fixture(scope="module")
def analysed_db(traced_db, tmp_path_factory) -> tuple[Path, object]:
    """A copy filtered once with the default rules (which analyses it): (db, report)."""
    db = copy_store(traced_db, tmp_path_factory.mktemp("analysed"))
    return db, filter_runs(db, FilterOptions(workers=0))


# ---------------------------------------------------------------- the corpus itself
def test_programs_are_within_length_except_the_length_ones():
    """Guard: each program breaks only the rule it is written for."""
    for record in RECORDS:
        inside = 75 <= len(record["code"]) <= 300
        assert inside == (record["id"] not in ("short", "long")), record["id"]


def test_statuses_of_the_corpus(traced_db):
    assert rows(traced_db, "SELECT sample_id || '/' || input_index, status FROM runs "
                           "WHERE status <> 'ok' ORDER BY run_id") == [
        ("keep/1", "invalid"), ("syntax/0", "invalid"), ("spin/0", "timeout"),
        ("raises/0", "exception")]


# ---------------------------------------------------------------- rules
def test_rule_registry():
    """Rule names, kinds and groups (the CLI's --rule accepts names and groups)."""
    assert {name: rule.kind for name, rule in RULES.items()} == {
        "length": "static", "args_used": "static", "valid": "static", "no_imports": "static",
        "no_forbidden": "static", "printable": "static", "no_float_values": "dynamic",
        "no_float_ops": "dynamic", "no_true_division": "dynamic", "small_int_ops": "dynamic",
        "short_seq_ops": "dynamic", "time": "dynamic", "no_exception": "dynamic",
        "steps": "dynamic", "deterministic": "determinism"}
    assert GROUPS["default"] == GROUPS["all"] == tuple(RULES)
    assert GROUPS["determinism"] == ("deterministic",)
    assert [name for name, rule in RULES.items() if rule.needs_analysis] == [
        "no_float_ops", "no_true_division", "small_int_ops", "short_seq_ops", "deterministic"]


def test_each_rule_removes_its_program(analysed_db):
    """The default rules on the hand-written corpus: exactly the runs written for each
    rule; a run that did not return counts under no_exception too (and `valid` for the
    two that do not compile); three runs pass everything."""
    db, report = analysed_db
    assert {name: labels(db, ids) for name, ids in report.removed.items()} == DEFAULT_REMOVALS
    assert labels(db, report.kept) == DEFAULT_KEPT
    assert report.rows()[-1] == ("kept", "", "runs that pass every rule above", 17, 3)
    assert [(r.rule, r.removed, r.kept) for r in report.counts] == [
        (name, len(removed), N_RUNS - len(removed)) for name, removed in DEFAULT_REMOVALS.items()]


def test_filter_analyses_the_store_when_a_rule_needs_it(traced_db, analysed_db, tmp_path):
    """The default rules analysed every finished run (16 ok, 1 exception), with the
    determinism check, through the real analyse_store; a second filter finds nothing
    left to analyse. Static and trace-only rules never start an analysis."""
    db, report = analysed_db
    assert report.analysed == 17 + 17
    assert rows(db, "SELECT count(*), count(deterministic) FROM analyses") == [(17, 17)]
    assert filter_runs(db, FilterOptions(workers=0)).analysed == 0
    fresh = copy_store(traced_db, tmp_path)
    static = filter_runs(fresh, FilterOptions(rules=("static", "time", "no_exception", "steps")))
    assert static.analysed == 0
    assert rows(fresh, "SELECT count(*) FROM analyses") == [(0,)]
    assert labels(fresh, static.kept) == [
        "keep/0", "unicode/0", "float_value/0", "float_op/0", "true_div/0", "large_int/0",
        "long_seq/0", "loop/0", "set_order/0"]


def test_without_analysis_rows_only_the_analysis_rules_change(traced_db, tmp_path):
    """Without the determinism rule the analysis runs without the reseeded check."""
    db = copy_store(traced_db, tmp_path)
    report = filter_runs(db, FilterOptions(rules=("small_int_ops",), workers=0))
    assert report.analysed == 17
    assert rows(db, "SELECT count(*), count(deterministic) FROM analyses") == [(17, 0)]
    assert labels(db, report.removed["small_int_ops"]) == ["large_int/0"]


def test_rule_selection(analysed_db):
    """--rule selects exactly (names or groups), --no-rule takes away; the report lists
    the enabled rules in registry order."""
    db, _ = analysed_db
    report = filter_runs(db, FilterOptions(rules=("static",), without=("length", "printable")))
    assert [c.rule for c in report.counts] == ["args_used", "valid", "no_imports",
                                               "no_forbidden"]
    assert labels(db, [i for i in range(1, N_RUNS + 1) if i not in report.kept]) == [
        "keep/1", "keep/2", "unused/0", "syntax/0", "imports/0", "set_call/0"]
    only = filter_runs(db, FilterOptions(rules=("deterministic", "no_exception")))
    assert [(c.rule, c.removed) for c in only.counts] == [("no_exception", 4),
                                                          ("deterministic", 1)]
    with pytest.raises(ValueError, match="unknown rule 'nope'; rules: length, args_used"):
        filter_runs(db, FilterOptions(rules=("nope",)))
    with pytest.raises(ValueError, match="unknown rule 'floats'"):
        filter_runs(db, FilterOptions(without=("floats",)))


def test_rule_parameters(analysed_db):
    """Length, time and step bounds are options. The time rule compares the stored
    call_us: a limit at half the loop's own time removes exactly the runs slower than
    that (checked against an independent query) and `spin`, which timed out (no
    call_us). A run without steps (timeout) is not judged by the steps rule."""
    db, _ = analysed_db
    length = filter_runs(db, FilterOptions(rules=("length",), length=Range(80, 100)))
    assert labels(db, length.removed["length"]) == [
        "unicode/0", "short/0", "long/0", "unused/0", "imports/0", "set_call/0",
        "float_op/0", "long_seq/0", "spin/0"]
    assert length.counts[0].description == "code is 80-100 characters long"
    [[loop_us]] = rows(db, "SELECT call_us FROM runs WHERE sample_id = 'loop'")
    limit = loop_us / 2 / 1e6
    timed = filter_runs(db, FilterOptions(rules=("time",), max_seconds=limit))
    slower = [r[0] for r in rows(db, "SELECT run_id FROM runs WHERE call_us > ? "
                                     "OR status = 'timeout'", [int(limit * 1e6)])]
    assert timed.removed["time"] == sorted(slower)
    assert {"loop/0", "spin/0"} <= set(labels(db, timed.removed["time"]))
    steps = filter_runs(db, FilterOptions(rules=("steps",), line_steps=Range(None, 100),
                                          instruction_steps=Range(3, None)))
    # loop: 6,003 line steps; short: 2 instructions; the two invalid runs: none
    assert labels(db, steps.removed["steps"]) == ["keep/1", "short/0", "syntax/0", "loop/0"]
    assert steps.counts[0].description == "line_steps in -inf..100, instruction_steps in 3..inf"
    [[loop_steps]] = rows(db, "SELECT line_steps FROM runs WHERE sample_id = 'loop'")
    assert loop_steps > 100


def test_where_rule(analysed_db):
    """--where: its own reported rule; NULL counts as false; subqueries may read the
    store; ';', files and invalid SQL are refused with a clear ValueError."""
    db, _ = analysed_db
    report = filter_runs(db, FilterOptions(rules=("valid",),
                                           where="line_steps BETWEEN 5 AND 100"))
    assert [(c.rule, c.kind, c.description) for c in report.counts][-1] == (
        "where", "sql", "runs WHERE line_steps BETWEEN 5 AND 100")
    expected = [r[0] for r in rows(db, "SELECT run_id FROM runs WHERE NOT coalesce("
                                       "line_steps BETWEEN 5 AND 100, false) ORDER BY run_id")]
    assert report.removed["where"] == expected
    sub = filter_runs(db, FilterOptions(rules=(), where="run_id IN (SELECT run_id FROM "
                                                        "analyses WHERE int_ops > 0)"))
    assert labels(db, sub.kept) == ["set_call/0", "float_op/0", "true_div/0", "large_int/0",
                                    "loop/0", "raises/0"]
    for where, message in [
            ("status = 'ok'; DROP TABLE runs", "';' is not allowed"),
            ("   ", "--where needs a condition"),
            ("no_such_column > 1", "invalid --where condition 'no_such_column > 1': Binder Error"),
            ("run_id IN (SELECT 1 FROM read_text('/etc/hostname'))",
             "file system operations are disabled"),
            ("status = 'ok') OR (DELETE FROM runs", "invalid --where condition")]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            filter_runs(db, FilterOptions(rules=(), where=where))
    assert rows(db, "SELECT count(*) FROM runs") == [(N_RUNS,)]


def test_version_1_store_is_filtered_as_it_is(traced_db, tmp_path):
    """A store without the analyses table (schema version 1) is read as it is by the
    rules that need no analysis; nothing is written to it."""
    db = copy_store(traced_db, tmp_path)
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE analyses")
        con.execute("DROP TABLE branches")
        con.execute("UPDATE meta SET value = '1'")
    report = filter_runs(db, FilterOptions(rules=("valid", "no_float_values", "time")))
    assert [(c.rule, c.removed) for c in report.counts] == [
        ("valid", 2), ("no_float_values", 1), ("time", 1)]
    assert rows(db, "SELECT value FROM meta") == [("1",)]


# ---------------------------------------------------------------- per-row facts
def test_program_facts():
    """Unused parameters (a read anywhere in the body counts, ``x += 1`` reads x, a
    lambda entry is checked too), imports anywhere, and text that does not parse."""
    facts = program_facts("def f(a, b, *c, d, **e):\n    b += 1\n    def g():\n"
                          "        return d\n    return g\n", "f")
    assert (facts.unused_args, facts.imports) == ("a,c,e", False)
    assert program_facts("f = lambda x, y: x\n", "f").unused_args == "y"
    assert program_facts("def g(x):\n    return 1\n", "f").unused_args is None
    assert program_facts("def f(x):\n    from os import path\n    return x\n", "f").imports
    assert program_facts("def f(x):\n    return __import__('os')\n", "f").imports
    assert program_facts("def f(:\n", "f") == type(facts)(8, None, None)


def test_printable():
    """CRUXEval's definition: str.isprintable once tab and newline are removed."""
    assert printable("a\tb\nc h\u00e9 \u0441 \uc758") and printable(None)
    assert not printable("a\rb") and not printable("a\x0bb") and not printable("\x1b[0m")


def test_parse_range():
    assert parse_range("5:100") == Range(5, 100)
    assert parse_range(":7") == Range(None, 7) and parse_range(":") == Range()
    for bad in ("5", "a:b", "9:1"):
        with pytest.raises(ValueError):
            parse_range(bad)


# ---------------------------------------------------------------- CLI
def test_cli_formats(analysed_db):
    db, _ = analysed_db
    as_json = invoke("filter", "--db", db, "--format", "json", "--workers", 0)
    assert as_json.exit_code == 0, as_json.output
    table = json.loads(as_json.stdout)
    assert [(r["rule"], r["removed"], r["kept"]) for r in table] == [
        (name, len(removed), N_RUNS - len(removed)) for name, removed in DEFAULT_REMOVALS.items()
    ] + [("kept", 17, 3)]
    assert set(table[0]) == {"rule", "kind", "description", "removed", "kept"}
    as_csv = invoke("filter", "--db", db, "--format", "csv", "--rule", "length",
                    "--length", "80:", "--where", "status = 'ok'")
    assert as_csv.exit_code == 0, as_csv.output
    assert list(csv.reader(io.StringIO(as_csv.stdout))) == [
        ["rule", "kind", "description", "removed", "kept"],
        ["length", "static", "code is at least 80 characters long", "3", "17"],
        ["where", "sql", "runs WHERE status = 'ok'", "4", "16"],
        ["kept", "", "runs that pass every rule above", "6", "14"]]
    as_table = invoke("filter", "--db", db, "--rule", "dynamic", "--no-rule", "time")
    assert as_table.exit_code == 0, as_table.output
    lines = [line.split("│") for line in as_table.stdout.splitlines() if line.startswith("│")]
    assert [(cells[1].strip(), cells[4].strip(), cells[5].strip()) for cells in lines] == [
        ("no_float_values", "1", "19"), ("no_float_ops", "1", "19"),
        ("no_true_division", "1", "19"), ("small_int_ops", "1", "19"),
        ("short_seq_ops", "1", "19"), ("no_exception", "4", "16"), ("steps", "0", "20"),
        ("kept", "9", "11")]


def test_cli_analyses_when_needed(traced_db, tmp_path):
    """On a store not yet analysed, `filter` runs the analysis itself (--workers 0)."""
    db = copy_store(traced_db, tmp_path)
    result = invoke("filter", "--db", db, "--rule", "short_seq_ops", "--workers", 0,
                    "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0] == {
        "rule": "short_seq_ops", "kind": "dynamic",
        "description": "every str/list/tuple/bytes operation has an operand of length <= 3",
        "removed": 1, "kept": 19}
    assert rows(db, "SELECT count(*), count(deterministic) FROM analyses") == [(17, 0)]


def test_cli_out_round_trip(analysed_db, tmp_path):
    """--out writes the kept runs as corpus JSONL; `steptrace trace` reads it back and
    every output matches the one written."""
    db, _ = analysed_db
    out = tmp_path / "kept.jsonl"
    result = invoke("filter", "--db", db, "--out", out, "--format", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"wrote 3 runs to {out}\n"
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": "keep", "code": KEEP, "input": "'abc', 2", "output": "'aabbcc'"},
        {"id": "unicode", "code": UNICODE, "input": "'h\u00e9llo', '\u00e9'", "output": "'h-llo'"},
        {"id": "loop", "code": LOOP, "input": "3000", "output": "1500"}]
    again = tmp_path / "again.duckdb"
    traced = invoke("trace", out, "--db", again, "--workers", 0, "--quiet", "--format", "json")
    assert traced.exit_code == 0, traced.output
    summary = json.loads(traced.stdout)
    assert (summary["traced"], summary["with_expected"], summary["matched"]) == (3, 3, 3)
    assert rows(again, "SELECT sample_id, input, output FROM runs ORDER BY run_id") == [
        ("keep", "'abc', 2", "'aabbcc'"), ("unicode", "'h\u00e9llo', '\u00e9'", "'h-llo'"),
        ("loop", "3000", "1500")]


def test_write_kept_entry_and_null_output(tmp_path):
    """A non-default entry is written; a run without a return value has output null."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "g", "code": "def g(x):\n    return 1 // x\n",
                                  "entry": "g", "inputs": ["0", "1"]}) + "\n")
    db = tmp_path / "c.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0))
    out = tmp_path / "out.jsonl"
    assert write_kept(db, [1, 2], out) == 2
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": "g", "code": "def g(x):\n    return 1 // x\n", "input": "0", "output": None,
         "entry": "g"},
        {"id": "g", "code": "def g(x):\n    return 1 // x\n", "input": "1", "output": "1",
         "entry": "g"}]


def test_cli_errors(analysed_db, tmp_path):
    db, _ = analysed_db
    assert_one_line_error(invoke("filter", "--db", db, "--rule", "bogus"),
                          "unknown rule 'bogus'; rules: " + ", ".join(RULES)
                          + "; groups: all, default, static, dynamic, determinism")
    assert_one_line_error(invoke("filter", "--db", db, "--no-rule", "bogus", "--rule", "time"),
                          "unknown rule 'bogus'; rules: " + ", ".join(RULES)
                          + "; groups: all, default, static, dynamic, determinism")
    bad = invoke("filter", "--db", db, "--where", "nosuch > 1")
    assert_one_line_error(bad, "invalid --where condition 'nosuch > 1': Binder Error: "
                               "Referenced column \"nosuch\" not found in FROM clause!")
    assert_one_line_error(invoke("filter", "--db", db, "--where", "1=1; DROP TABLE runs"),
                          "--where takes one SQL condition over runs; ';' is not allowed")
    assert_one_line_error(invoke("filter", "--db", tmp_path / "nope.duckdb"),
                          f"database not found: {tmp_path / 'nope.duckdb'}")
    usage = invoke("filter", "--db", db, "--length", "300")
    assert usage.exit_code == 2 and "bad range '300'" in usage.stderr
    assert rows(db, "SELECT count(*) FROM runs") == [(N_RUNS,)]


# ---------------------------------------------------------------- CRUXEval
def test_cruxeval_filter_table(cruxeval_db, tmp_path):
    """The default rules on the 800 CRUXEval runs (already analysed by the fixture, so
    nothing is written). What each rule removes, and why (README, "Filters"):

    * length (133): every one is shorter than 75 characters (the longest program has
      278). CRUXEval measured a longer text: its filter script sees each program with
      its test assertion appended, and with ``\\nassert f(input) == output`` no sample is
      under 75 (the shortest is 78); the exact text measured is not published.
    * args_used (2): sample_510 never reads ``e``, sample_593 never reads ``n``; the
      README states this rule but CRUXEval's filter script does not implement it.
    * no_float_values (5): floats held but never operated on (arguments, dict values,
      a return value); CRUXEval's tracer only looked at operands of executed operations.
    * deterministic (1): sample_736 returns the same string under any hash seed, but
      the recorded value of its set of whitespace characters lists them in another
      order; CRUXEval compared results only."""
    db = copy_store(cruxeval_db, tmp_path)
    report = filter_runs(db, FilterOptions(workers=0))
    assert report.analysed == 0
    assert report.rows() == CRUXEVAL_TABLE
    removed = {name: sorted(labels(db, ids)) for name, ids in report.removed.items() if ids}
    assert {name: ids for name, ids in removed.items() if name != "length"} == {
        "args_used": ["sample_510/0", "sample_593/0"],
        "no_float_values": ["sample_145/0", "sample_240/0", "sample_510/0", "sample_552/0",
                            "sample_85/0"],
        "deterministic": ["sample_736/0"]}
    lengths = rows(db, "SELECT min(length(code)), max(length(code)), "
                       "count(*) FILTER (WHERE length(code) < 75) FROM programs")
    assert lengths == [(30, 278, 133)]
    with_assertion = rows(db, "SELECT min(length(p.code || '\nassert f(' || r.input || ') == ' "
                              "|| r.output)) FROM runs r JOIN programs p USING (program_id)")
    assert with_assertion == [(78,)]


def test_loops_fail_the_time_rule(tmp_path):
    """A run proved to loop forever (status loops) did not finish: the time rule removes
    it, as it removes a timeout."""
    corpus = tmp_path / "cycle.jsonl"
    cycle = "def f(limit):\n    steps = 0\n    while limit > 0: steps = 1 - steps\n    return steps\n"
    corpus.write_text(json.dumps({"id": "cycle", "code": cycle, "input": "1"}) + "\n"
                      + json.dumps({"id": "done", "code": cycle, "input": "0"}) + "\n")
    db = tmp_path / "cycle.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0, limits=Limits(timeout_s=10.0)))
    assert rows(db, "SELECT sample_id, status FROM runs ORDER BY run_id") == [
        ("cycle", "loops"), ("done", "ok")]
    timed = filter_runs(db, FilterOptions(rules=("time",)))
    assert labels(db, timed.removed["time"]) == ["cycle/0"]
