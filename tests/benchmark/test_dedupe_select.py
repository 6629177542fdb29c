"""Deduplication (exact and near-duplicate functions) and selection (balanced over
methods, one input per function, CRUXEval JSONL)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from steptrace.benchmark._dedupe import EXACT, NEAR, Duplicate, dedupe_records, exact_key, near_key
from steptrace.benchmark._selection import balanced_order, select_benchmark, select_file, sources_path_for

BASE = "def f(s):\n    out = ''\n    for ch in s:\n        out = out + ch.upper()\n    return out\n"


def test_exact_key_normalises_line_endings_and_trailing_space():
    assert exact_key(BASE.replace("\n", "\r\n")) == exact_key(BASE)
    assert exact_key(BASE.replace("return out", "return out   ") + "\n\n") == exact_key(BASE)
    assert exact_key(BASE.replace("    out = ''", "\tout = ''")) != exact_key(BASE)


@pytest.mark.parametrize("other, same", [
    # other names, other literal of the same type, a docstring, annotations: same
    ("def g(text):\n    acc = 'zz'\n    for c in text:\n        acc = acc + c.upper()\n"
     "    return acc\n", True),
    ('def f(s: str) -> str:\n    """Upper."""\n    out = \'\'\n    for ch in s:\n'
     "        out = out + ch.upper()\n    return out\n", True),
    # another method, builtin, literal type or operator: different
    (BASE.replace("upper", "lower"), False),
    (BASE.replace("out = ''", "out = str()"), False),
    (BASE.replace("out = ''", "out = 0"), False),
    (BASE.replace("out + ch", "ch + out"), False),
    (BASE.replace("return out", "return out or None"), False),
])
def test_near_key(other, same):
    assert (near_key(other) == near_key(BASE)) is same


def test_near_key_keeps_booleans_and_names_builtins_apart_from_variables():
    assert near_key("def f(x):\n    return x is True\n") != near_key("def f(x):\n    return x is False\n")
    # a variable named like a builtin after it is bound stays that variable
    assert near_key("def f(len):\n    return len\n") == near_key("def f(n):\n    return n\n")
    assert near_key("def f(x):\n  return (\n") == "unparsed:def f(x):\n  return ("


def record(fid: str, code: str, text: str, output: str | None = "1") -> dict:
    return {"id": fid, "code": code, "input": text, "output": output}


def test_dedupe_records_keeps_the_first_of_each_group():
    renamed = BASE.replace("out", "acc")
    records = [record("a", BASE, "'x'"), record("a", BASE, "'y'"),
               record("b", BASE + "\n", "'z'"),                 # exact duplicate of a
               record("c", renamed, "'w'"), record("c", renamed, "'v'"),  # near duplicate of a
               record("d", BASE.replace("upper", "title"), "'x'")]
    kept, report = dedupe_records(records)
    assert [(r["id"], r["input"]) for r in kept] == [("a", "'x'"), ("a", "'y'"), ("d", "'x'")]
    assert report.duplicates == [Duplicate("b", "a", EXACT, 1), Duplicate("c", "a", NEAR, 2)]
    assert report.as_rows() == [("in", 4, 6), ("exact duplicates removed", 1, 1),
                                ("near duplicates removed", 1, 2), ("out", 2, 3)]


def test_balanced_order_shares_out_evenly_where_possible():
    by_method = {"A": list(range(5)), "B": ["b0"], "C": ["c0", "c1", "c2"]}
    chosen = balanced_order(by_method, 6, seed=0)
    counts = Counter(method for method, _ in chosen)
    assert counts["B"] == 1 and counts["A"] + counts["C"] == 5
    assert abs(counts["A"] - counts["C"]) == 1
    assert len({item for _, item in chosen}) == 6
    assert balanced_order(by_method, 6, seed=0) == chosen
    assert Counter(m for m, _ in balanced_order(by_method, 100, seed=0)) == {"A": 5, "B": 1, "C": 3}
    assert Counter(m for m, _ in balanced_order(by_method, 3, seed=5)) == {"A": 1, "B": 1, "C": 1}


def test_select_benchmark_one_input_per_function_and_outputs_required():
    records = [record("a", "A", "'1'", "'x'"), record("a", "A", "'2'", "'y'"),
               record("b", "B", "'3'", None), record("c", "C", "'4'", "'z'")]
    methods = {"a": "str.upper", "b": "str.upper", "c": "list.pop"}
    samples, report = select_benchmark(records, methods, 2, seed=1)
    assert (report.records, report.without_output, report.functions) == (4, 1, 2)
    assert report.available == {"str.upper": 1, "list.pop": 1}
    assert report.selected == {"str.upper": 1, "list.pop": 1}
    assert sorted(s.source_id for s in samples) == ["a", "c"]
    chosen_a = next(s for s in samples if s.source_id == "a")
    assert (chosen_a.input, chosen_a.output) in {("'1'", "'x'"), ("'2'", "'y'")}
    assert [s.id for s in samples] == ["sample_0", "sample_1"]
    with pytest.raises(ValueError, match=r"^only 2 eligible functions for a benchmark of 3 "
                                         r"\(generate more candidates, or pass --allow-fewer\)$"):
        select_benchmark(records, methods, 3, seed=1)
    fewer, report = select_benchmark(records, methods, 3, seed=1, allow_fewer=True)
    assert (len(fewer), report.chosen, report.requested) == (2, 2, 3)


def test_select_file_without_candidates_writes_cruxeval_jsonl(tmp_path):
    path = tmp_path / "unique.jsonl"
    path.write_text("".join(json.dumps(record(f"g{i}", f"C{i}", f"{i}", f"{i * 2}")) + "\n"
                            for i in range(5)))
    out = tmp_path / "bench.jsonl"
    report = select_file(path, out, 3, seed=9)
    assert report.available == {"(unknown)": 5} and report.chosen == 3
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [sorted(r) for r in lines] == [["code", "id", "input", "output"]] * 3
    assert all(r["output"] == str(int(r["input"]) * 2) for r in lines)
    sources = [json.loads(line) for line in sources_path_for(out).read_text().splitlines()]
    assert [s["id"] for s in sources] == ["sample_0", "sample_1", "sample_2"]
    assert sources_path_for(out).name == "bench.sources.jsonl"
    with pytest.raises(ValueError, match=f"^file not found: {tmp_path / 'none.jsonl'}$"):
        select_file(tmp_path / "none.jsonl", out, 3, seed=9)
