"""``steptrace overlap`` (steptrace.benchmark._ngram_report): per program, the share of its
code's token n-grams found in a text dump, streamed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import steptrace as st
from helpers.cli import assert_one_line_error
from steptrace.benchmark import _ngram_report
from steptrace.benchmark._overlap import renamed_tokens, stream_ngrams, tokens
from steptrace.cli._main import main

RECORDS = [
    # 10 tokens: def f ( x ) : return x + 1 -> 6 distinct 5-grams
    {"id": "inc", "code": "def f(x):\n    return x + 1", "input": "1"},
    # 10 tokens: def f ( x ) : return x * 2 -> 6 distinct 5-grams
    {"id": "dbl", "code": "def f(x):\n    return x * 2", "input": "1"},
    {"id": "tiny", "code": "x = 1", "input": ""},  # 3 tokens: no 5-gram
]
# the dump holds inc's code reformatted (tokens, not layout, count) and dbl's first 7 tokens
DUMP = "some text\ndef f( x ) :\n  return x +   1\nmore text def f(x): return x\n"


def test_tokens_and_ngrams():
    assert tokens("def f(x):\n    return x+10 # é") == [
        "def", "f", "(", "x", ")", ":", "return", "x", "+", "10", "#", "é"]
    assert renamed_tokens("def f(x): return len(x) + y") == [
        "def", "v0", "(", "v1", ")", ":", "return", "len", "(", "v1", ")", "+", "v2"]
    assert list(stream_ngrams(["a b", " c\n", "d"], 3)) == [("a", "b", "c"), ("b", "c", "d")]


def test_the_dump_is_read_in_pieces_that_split_no_token(tmp_path, monkeypatch):
    """Pieces end after a non-word character (none of a token's), whitespace or not; a
    dump with no such character at all is cut at MAX_WORD, so memory stays bounded."""
    dump = tmp_path / "d.txt"
    dump.write_bytes("ab(cd)+ef é gh_1\n23x ééé".encode())  # é: 2 bytes, split by reads
    monkeypatch.setattr(_ngram_report, "CHUNK", 3)
    with open(dump, "rb") as handle:
        pieces = list(_ngram_report._chunks(handle))
    assert "".join(pieces) == dump.read_text()
    assert len(pieces) > 3
    assert [t for piece in pieces for t in tokens(piece)] == tokens(dump.read_text())
    monkeypatch.setattr(_ngram_report, "MAX_WORD", 5)
    dump.write_text("abcdefghijklmnop")
    with open(dump, "rb") as handle:
        assert list(_ngram_report._chunks(handle)) == ["abcdef", "ghijkl", "mnop"]


def test_shares_are_exact(tmp_path, monkeypatch):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    dump = tmp_path / "dump.txt"
    dump.write_text(DUMP)
    monkeypatch.setattr(_ngram_report, "CHUNK", 7)  # many pieces: tokens are never split
    report = st.ngram_overlap(corpus, dump, n=5)
    # inc: all 6 of its 5-grams; dbl: (def f ( x )), (f ( x ) :), (( x ) : return),
    # (x ) : return x) of 6 -- its last two end in '*'
    assert [(r.id, r.ngrams, r.found, r.share) for r in report.records] == [
        ("inc", 6, 6, 1.0), ("dbl", 6, 4, 0.6667), ("tiny", 0, 0, None)]
    assert report.dump_ngrams == len(tokens(DUMP)) - 4
    payload = report.as_dict()
    assert (payload["share"], payload["records_with_overlap"]) == (0.8333, 2)
    result = CliRunner().invoke(main, ["overlap", str(corpus), "--dump", str(dump), "--n", "5",
                                       "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["id,ngrams,found,share", "inc,6,6,1.0000",
                                          "dbl,6,4,0.6667", "tiny,0,0,"]


def test_cruxeval_against_a_dump_of_its_own_samples(tmp_path, cruxeval_path):
    """A dump holding sample_0 and sample_1 verbatim and sample_2 with its last line cut:
    the default 13-grams find all of the first two, part of the third, and the 3 13-grams
    sample_298 shares with sample_2's start (``def f ( text ) : new_text = list ( text )
    for i in``)."""
    records = [json.loads(line) for line in cruxeval_path.read_text().splitlines()]
    by_id = {r["id"]: r for r in records}
    cut = by_id["sample_2"]["code"].rsplit("\n", 1)[0]
    dump = tmp_path / "dump.txt"
    dump.write_text(f"# crawl\n{by_id['sample_0']['code']}\n\n{by_id['sample_1']['code']}\n"
                    f"{cut}\n")
    report = st.ngram_overlap(cruxeval_path, dump)
    shares = {r.id: r.share for r in report.records if r.found}
    assert report.n == 13
    grams_2 = len(tokens(by_id["sample_2"]["code"])) - 12  # its tokens are distinct 13-grams
    kept_2 = len(tokens(cut)) - 12
    assert (kept_2, grams_2) == (18, 26)
    assert shares == {"sample_0": 1.0, "sample_1": 1.0, "sample_2": 0.6923,
                      "sample_298": 0.0789}  # 3 of 38


def test_bad_arguments_are_one_line_errors(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps(RECORDS[0]) + "\n")
    result = CliRunner().invoke(main, ["overlap", str(corpus), "--dump", str(tmp_path / "no")])
    assert_one_line_error(result, f"dump not found (or not a file): {tmp_path / 'no'}")
    with pytest.raises(st.InputError, match="--n must be at least 1"):
        st.ngram_overlap(corpus, corpus, n=0)
