"""``dedupe --against`` (steptrace.benchmark._decontaminate): CRUXEval against a synthetic
training set of exact, renamed and near copies and unrelated programs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import steptrace as st
from helpers.cli import assert_one_line_error
from steptrace.benchmark._decontaminate import Match, decontaminate_records
from steptrace.cli._main import main


def _training(by_id: dict[str, dict]) -> list[dict]:
    """Exact copies (one with a trailing newline), a renamed copy, a copy with another
    literal, two copies with a statement added or changed, unrelated programs; one
    record without an id (named by its number, 8)."""
    code = {key: by_id[key]["code"] for key in ("sample_0", "sample_1", "sample_2",
                                                 "sample_5", "sample_10", "sample_3")}
    renamed = (code["sample_1"].replace("result", "acc").replace("(a, b, c)", "(p, q, r)")
               .replace("in a, b, c", "in p, q, r").replace("d in", "item in")
               .replace("fromkeys(d)", "fromkeys(item)"))
    return [
        {"id": "t-exact-0", "code": code["sample_0"]},
        {"id": "t-exact-10", "code": code["sample_10"] + "  \n\n"},
        {"id": "t-renamed-1", "code": renamed},
        {"id": "t-literal-2", "code": code["sample_2"].replace("'+'", "'-'")},
        {"id": "t-statement-5", "code": code["sample_5"].replace(
            "    return count", "    count = count * 1\n    return count")},
        {"id": "t-changed-3", "code": code["sample_3"].replace(
            "text_list.append(value)", "text_list.insert(0, value)")},
        {"id": "t-unrelated-1", "code": "def g(s):\n    return s[::-1].upper()"},
        {"code": "class Stack:\n    def __init__(self):\n        self.items = []\n"
                 "    def push(self, x):\n        self.items.append(x)"},
    ]


EXPECTED = [
    Match("sample_0", "t-exact-0", "exact", 1.0),
    Match("sample_1", "t-renamed-1", "normalised", 1.0),
    Match("sample_2", "t-literal-2", "normalised", 0.7436),
    Match("sample_3", "t-changed-3", "near", 0.6667),
    Match("sample_5", "t-statement-5", "near", 0.8194),
    Match("sample_10", "t-exact-10", "exact", 1.0),
    # CRUXEval's own near copy of sample_3 (other names, extend for append): found too
    Match("sample_744", "t-changed-3", "near", 0.6667),
]


def test_cruxeval_against_a_synthetic_training_set(tmp_path, cruxeval_path):
    records = [json.loads(line) for line in cruxeval_path.read_text().splitlines()]
    training = _training({r["id"]: r for r in records})
    kept, report = decontaminate_records(records, training)
    assert report.matches == EXPECTED
    assert (report.records_in, report.training_records, report.records_out) == (800, 8, 793)
    assert [r["id"] for r in kept] == [r["id"] for r in records
                                       if r["id"] not in {m.id for m in EXPECTED}]
    # a stricter near threshold keeps the changed statement
    _, strict = decontaminate_records(records, training, threshold=0.7)
    assert [(m.id, m.criterion) for m in strict.matches if m.criterion == "near"] == [
        ("sample_5", "near")]
    # the command: the decontaminated corpus written as read, the matches and thresholds
    bench = tmp_path / "crux.jsonl"
    bench.write_text(cruxeval_path.read_text())
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in training))
    out = tmp_path / "clean.jsonl"
    result = CliRunner().invoke(main, ["dedupe", str(bench), "--against", str(train),
                                       "--out", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["thresholds"] == {"ngram": 5, "near_jaccard": 0.5}
    assert payload["removed"] == {"exact": 2, "normalised": 2, "near": 3}
    assert [(m["id"], m["training_id"], m["criterion"]) for m in payload["matches"]] == [
        (m.id, m.training_id, m.criterion) for m in EXPECTED]
    assert out.read_text().splitlines() == [json.dumps(r, ensure_ascii=False) for r in kept]
    table = CliRunner().invoke(main, ["dedupe", str(bench), "--against", str(train),
                                      "--out", str(out), "--format", "csv"])
    assert table.stdout.splitlines()[:3] == ["id,training_id,criterion,similarity",
                                             "sample_0,t-exact-0,exact,1.0000",
                                             "sample_1,t-renamed-1,normalised,1.0000"]


def test_near_matching_picks_the_most_similar_training_record():
    base = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x * 2\n    return total"
    one = base.replace("    return total", "    total -= 1\n    return total")
    two = base.replace("    return total", "    total -= 1\n    total *= 5\n    return total")
    training = [{"id": "far", "code": "def g(a):\n    return a"}, {"id": "two", "code": two},
                {"id": "one", "code": one}, {"id": "one-again", "code": one}]
    _, report = decontaminate_records([{"id": "b", "code": base}], training, ngram=3,
                                      threshold=0.3)
    # base: 22 tokens, 20 distinct 3-grams; "one": 24; shared: all of base's but
    # ('*', '2', 'return') and ('2', 'return', 'v2'): 18 / (20 + 24 - 18) = 0.6923
    assert report.matches == [Match("b", "one", "near", 0.6923)]
    training.append({"id": "other-literal", "code": base.replace("x * 2", "x * 3")})
    _, report = decontaminate_records([{"id": "b", "code": base}], training, ngram=3,
                                      threshold=0.3)
    assert [(m.training_id, m.criterion) for m in report.matches] == [
        ("other-literal", "normalised")]  # normalised before near, whatever the similarity


def test_bad_inputs_are_one_line_errors(tmp_path):
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"id": "a", "code": "def f(): pass"}) + "\n")
    train = tmp_path / "t.jsonl"
    train.write_text(json.dumps({"text": "no code"}) + "\n")
    result = CliRunner().invoke(main, ["dedupe", str(bench), "--against", str(train),
                                       "--out", str(tmp_path / "o.jsonl")])
    assert_one_line_error(result, f"{train}:1: a training record needs a string 'code'")
    missing = CliRunner().invoke(main, ["dedupe", str(bench), "--against",
                                        str(tmp_path / "nope.jsonl"), "--out",
                                        str(tmp_path / "o.jsonl")])
    assert_one_line_error(missing, f"training set not found: {tmp_path / 'nope.jsonl'}")
    with pytest.raises(st.InputError, match="--ngram"):
        st.decontaminate(bench, bench, tmp_path / "o.jsonl", ngram=0)


def test_near_options_go_with_against(tmp_path):
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"id": "a", "code": "def f(): pass"}) + "\n")
    result = CliRunner().invoke(main, ["dedupe", str(bench), "--out", str(tmp_path / "o"),
                                       "--threshold", "0.9"])
    assert result.exit_code == 2 and "--threshold goes with --against" in result.output
