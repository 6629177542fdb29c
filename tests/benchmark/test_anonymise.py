"""``steptrace anonymise`` (steptrace.benchmark._anonymise): exact renamed texts, and the
check of each variant against its original in the real sandbox."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import steptrace as st
from helpers.cli import assert_one_line_error
from steptrace.benchmark._anonymise import (AnonymiseError, anonymise_record,
                                            anonymise_records, compare_results, rename_code)
from steptrace.cli._main import main

CLASSY = '''import math
class Stack:
    size = 0  # a class attribute: stays
    def push(self, item, *, count=1):
        self.items.append(item)
        return self.peek(item=item)
    def peek(self, item=None):
        return item
def helper(x, y=2):
    try:
        z = x // y
    except ZeroDivisionError as err:
        z = str(err)
    return [v for v in range(z)], math.pi
def f(data):
    global total
    s = Stack()
    return helper(data, y=3), len(data), s.push(1, count=2)
'''

CLASSY_RENAMED = '''import math
class C1:
    size = 0  # a class attribute: stays
    def push(x1, x2, *, x3=1):
        x1.items.append(x2)
        return x1.peek(x2=x2)
    def peek(x1, x2=None):
        return x2
def f1(x4, x5=2):
    try:
        x6 = x4 // x5
    except ZeroDivisionError as x7:
        x6 = str(x7)
    return [x8 for x8 in range(x6)], math.pi
def f(x9):
    global x10
    x11 = C1()
    return f1(x9, x5=3), len(x9), x11.push(1, x3=2)
'''


def test_renamed_text_is_exact_and_keeps_the_layout():
    renamed = rename_code(CLASSY)
    assert renamed.code == CLASSY_RENAMED
    assert renamed.names == {"Stack": "C1", "self": "x1", "item": "x2", "count": "x3",
                             "helper": "f1", "x": "x4", "y": "x5", "z": "x6", "err": "x7",
                             "v": "x8", "f": "f", "data": "x9", "total": "x10", "s": "x11"}
    # the entry function is f whatever its name; names the program binds are free to take
    renamed = rename_code("def solve(x1, f):\n    return f(x1) + len(f'{x1}')\n", "solve")
    assert (renamed.code, renamed.entry) == (
        "def f(x1, x2):\n    return x2(x1) + len(f'{x1}')\n", "f")
    # a keyword argument follows the parameter of the program's own function, not a builtin's
    renamed = rename_code("def f(xs, key=None):\n    key = sorted(xs, key=len)\n"
                          "    return g(key=key)\ndef g(key):\n    return key\n")
    assert renamed.code == ("def f(x1, x2=None):\n    x2 = sorted(x1, key=len)\n"
                            "    return f1(x2=x2)\ndef f1(x2):\n    return x2\n")
    # a generated name the program keeps (here a builtin-like free name) is skipped
    renamed = rename_code("def f(a):\n    return x1 + a\n")
    assert renamed.code == "def f(x2):\n    return x1 + x2\n"


def test_a_record_keeps_its_keys_and_its_entry_and_inputs_follow():
    variant, _ = anonymise_record({
        "id": "s", "code": "LIMIT = [1, 2]\nclass Box:\n    def put(self, v):\n"
                           "        return v\n", "entry": "Box.put", "input": "LIMIT[:]",
        "release_date": "2025-01-01"})
    assert variant == {"id": "s", "code": "x1 = [1, 2]\nclass C1:\n    def put(x2, x3):\n"
                                          "        return x3\n",
                       "entry": "C1.put", "input": "x1[:]", "release_date": "2025-01-01"}
    variant, _ = anonymise_record({"code": "def f(text, n=1):\n    return text * n",
                                   "inputs": ["'a', n=2", "(lambda n: n)(3)"]})
    assert variant["inputs"] == ["'a', x2=2", "(lambda n: n)(3)"]
    with pytest.raises(AnonymiseError, match="does not parse"):
        rename_code("def f(:\n")


def test_variants_are_traced_against_their_originals(tmp_path, cruxeval_path):
    """Every CRUXEval sample taken here runs the same renamed (sample_258's input reads a
    module-level list, sample_364's a lambda of its own); programs that read their own
    names differ, and are not written."""
    crux = {r["id"]: r for r in map(json.loads, cruxeval_path.read_text().splitlines())}
    records = [crux[key] for key in ("sample_0", "sample_258", "sample_364")] + [
        {"id": "locals", "code": "def f(text):\n    return sorted(locals())", "input": "'a'"},
        {"id": "type-name", "code": "class Box:\n    pass\ndef f(n):\n"
                                    "    return type(Box()).__name__ * n", "input": "1"},
        {"id": "getattr", "code": "def f(x):\n    y = x + 1\n    return eval('y')",
         "input": "1"},
        {"id": "method", "code": "class Stack:\n    def __init__(self):\n        self.items = []\n"
                                 "    def push(self, item):\n        self.items.append(item)\n"
                                 "        return repr(self.items)\n",
         "entry": "Stack.push", "input": "3"},
        {"id": "raises", "code": "def f(values):\n    return values[5]", "input": "[1]"},
        {"id": "broken", "code": "def f(:\n", "input": "1"},
        # one id, two records (one per input, as filter --out writes them): one each
        {"id": "twice", "code": "def f(a):\n    return locals()['a']", "input": "1"},
        {"id": "twice", "code": "def f(a):\n    return a", "input": "1"},
    ]
    kept, report = anonymise_records(records, workers=0)
    assert [(v.id, v.status) for v in report.variants] == [
        ("sample_0", "equal"), ("sample_258", "equal"), ("sample_364", "equal"),
        ("locals", "differs"), ("type-name", "differs"), ("getattr", "differs"),
        ("method", "equal"), ("raises", "equal"), ("broken", "unparsed"),
        ("twice", "differs"), ("twice", "equal")]
    details = {v.id: v.detail for v in report.variants}
    assert details["locals"] == "output: \"['text']\" != \"['x1']\""
    assert details["type-name"] == "output: \"'Box'\" != \"'C1'\""
    assert details["getattr"] == "status: 'ok' != 'exception'"
    assert details["broken"] == "does not parse: SyntaxError"
    assert [r["id"] for r in kept] == ["sample_0", "sample_258", "sample_364", "method", "raises",
                                       "twice"]
    assert kept[0]["code"] == ("def f(x1):\n    x2 = []\n    for x3 in x1:\n"
                               "        x2.append((x1.count(x3), x3))\n"
                               "    x2.sort(reverse=True)\n    return x2")
    assert kept[3]["entry"] == "C1.push"
    # the variants written are a corpus that traces as the originals did
    out = tmp_path / "anon.jsonl"
    result = CliRunner().invoke(main, ["anonymise", str(_write(tmp_path / "c.jsonl", records)),
                                       "--out", str(out), "--workers", "0", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "id,status,detail", "locals,differs,\"output: \"\"['text']\"\" != \"\"['x1']\"\"\"",
        "type-name,differs,\"output: \"\"'Box'\"\" != \"\"'C1'\"\"\"",
        "getattr,differs,status: 'ok' != 'exception'",
        "broken,unparsed,does not parse: SyntaxError",
        "twice,differs,status: 'ok' != 'exception'"]
    assert [json.loads(line) for line in out.read_text().splitlines()] == kept
    summary = st.trace(out, tmp_path / "anon.duckdb", workers=0)
    assert (summary.traced, summary.matched, summary.with_expected) == (6, 3, 3)


def test_compare_results_reads_names_word_by_word():
    names = {"self": "x1", "v": "x2", "Box": "C1"}
    original = {"status": "ok", "output": "1", "states": {
        "step": [0], "var": ["self"], "value": ["Box(v=3)"], "type": ["Box"]}}
    variant = {"status": "ok", "output": "1", "states": {
        "step": [0], "var": ["x1"], "value": ["C1(v=3)"], "type": ["C1"]}}
    assert compare_results(original, variant, names) is None
    variant["states"]["value"] = ["C1(v=4)"]
    assert compare_results(original, variant, names).startswith("states row 0:")


def test_no_check_writes_every_variant_and_errors_are_one_line(tmp_path):
    corpus = _write(tmp_path / "c.jsonl", [{"id": "a", "code": "def f(x):\n    return x",
                                            "input": "1"}])
    out = tmp_path / "o.jsonl"
    result = CliRunner().invoke(main, ["anonymise", str(corpus), "--out", str(out),
                                       "--no-check", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["by_status"] == {"equal": 0, "unchecked": 1,
                                                      "differs": 0, "unparsed": 0}
    assert json.loads(out.read_text()) == {"id": "a", "code": "def f(x1):\n    return x1",
                                           "input": "1"}
    bad = _write(tmp_path / "bad.jsonl", [{"id": "a"}])
    assert_one_line_error(CliRunner().invoke(main, ["anonymise", str(bad), "--out", str(out)]),
                          f"{bad}:1: a record needs a string 'code'")


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_every_cruxeval_sample_has_an_equal_variant(tmp_path, cruxeval_path):
    """All 800: each renamed variant traces as its original, modulo the names."""
    records = [json.loads(line) for line in cruxeval_path.read_text().splitlines()]
    kept, report = anonymise_records(records, workers=2)
    assert report.as_rows() == [("records in", 800), ("equal", 800), ("unchecked", 0),
                                ("differs", 0), ("unparsed", 0), ("written", 800)]
    assert [r["id"] for r in kept] == [r["id"] for r in records]
    assert all(r["output"] == v["output"] for r, v in zip(records, kept))


def test_hostile_program_text_is_unparsed_not_a_crash():
    """Text the host's parser refuses (nesting past its limits, a NUL) or cannot place
    is ``unparsed``; nothing of it runs on the host."""
    deep = "def f(x):\n    return " + "(" * 300_000 + "x" + ")" * 300_000
    _, report = anonymise_records([{"id": "deep", "code": deep, "input": "1"},
                                   {"id": "nul", "code": "def f(x):\n    return x\0",
                                    "input": "1"}], check=False)
    assert [(v.id, v.status) for v in report.variants] == [("deep", "unparsed"),
                                                           ("nul", "unparsed")]
