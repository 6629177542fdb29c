"""Synthetic corpora (engine/benchmark/_synth.py, `steptrace synth`): byte-identical output for a
seed, a pinned first record, CRUXEval-like sizes, and programs that all run cleanly in
the real sandbox."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.corpus._formats import load_corpus
from steptrace.benchmark._synth import MAX_CHARS, MAX_LINES, MIN_CHARS, MIN_LINES, synth_programs, write_synth
from steptrace.tracing._trace import TraceOptions, trace_corpus


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    first = write_synth(tmp_path / "a.jsonl", 2000, seed=5)
    second = write_synth(tmp_path / "b.jsonl", 2000, seed=5)
    other = write_synth(tmp_path / "c.jsonl", 2000, seed=6)
    assert (first.programs, first.bytes) == (2000, (tmp_path / "a.jsonl").stat().st_size)
    assert digest(tmp_path / "a.jsonl") == digest(tmp_path / "b.jsonl")
    assert digest(tmp_path / "a.jsonl") != digest(tmp_path / "c.jsonl")
    assert first.bytes == second.bytes != other.bytes
    # a prefix of a longer corpus is the shorter corpus: records do not depend on n
    write_synth(tmp_path / "d.jsonl", 100, seed=5)
    assert (tmp_path / "a.jsonl").read_bytes().startswith((tmp_path / "d.jsonl").read_bytes())


def test_first_record_is_pinned():
    """The first program for seed 2024, exactly (a change to the grammar shows here)."""
    assert next(synth_programs(1, 2024)) == {
        "id": "synth_2024_0",
        "code": "def f(arr_in, target):\n"
                "    score = len(arr_in) * 4\n"
                "    halvings = 0\n"
                "    while score > 1:\n"
                "        score //= 2\n"
                "        halvings += 1\n"
                "    arr_in.extend([9, -2])\n"
                "    return halvings",
        "input": "[14], 4",
    }


def test_sizes_and_fields_of_10000_programs(tmp_path):
    """Every program is a function f of 3-12 lines and 75-300 characters that the host
    compiles; records have exactly id, code, input; ids are unique; the file loads as
    a corpus without errors."""
    path = tmp_path / "synth.jsonl"
    write_synth(path, 10_000, seed=1)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 10_000
    assert {tuple(sorted(r)) for r in records} == {("code", "id", "input")}
    assert len({r["id"] for r in records}) == 10_000
    lengths = [len(r["code"]) for r in records]
    lines = [r["code"].count("\n") + 1 for r in records]
    assert MIN_CHARS <= min(lengths) and max(lengths) <= MAX_CHARS
    assert MIN_LINES <= min(lines) and max(lines) <= MAX_LINES
    assert 120 <= sum(lengths) / len(lengths) <= 200  # CRUXEval's mean is 137
    for record in records:
        assert record["code"].startswith("def f(")
        compile(record["code"], record["id"], "exec")
        compile(f"f({record['input']})", record["id"], "eval")
    corpus = load_corpus(path)
    assert (len(corpus.jobs), corpus.errors) == (10_000, [])
    # the grammar's constructs all occur
    text = "\n".join(r["code"] for r in records)
    for construct in ("for ", "while ", "if ", "elif ", "else:", "try:", " for ch in ",
                      ".get(", ".append(", ".split(", ".join(", ".replace(", "sorted("):
        assert construct in text, construct


@pytest.mark.slow  # 300 programs through worker processes
def test_300_programs_run_cleanly_in_the_sandbox(tmp_path):
    """A sample traced for real (fresh instance per job): every run is ok, with steps."""
    path = tmp_path / "synth.jsonl"
    write_synth(path, 300, seed=99)
    db = tmp_path / "synth.duckdb"
    summary = trace_corpus(path, db, TraceOptions(workers=2))
    assert summary.traced == 300
    assert dict(summary.by_status) == {"ok": 300}
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM runs WHERE line_steps > 0 "
                           "AND note IS NULL AND stdout = ''").fetchone() == (300,)
    finally:
        con.close()


def test_negative_n_is_refused():
    with pytest.raises(ValueError, match="--n must be >= 0"):
        list(synth_programs(-1, 0))


def test_synth_command(tmp_path):
    out = tmp_path / "corpus.jsonl"
    result = CliRunner().invoke(main, ["synth", "--n", "50", "--seed", "3", "--out", str(out),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["item"]: row["value"] for row in json.loads(result.stdout)}
    assert (rows["out"], rows["programs"], rows["bytes"]) == (str(out), 50, out.stat().st_size)
    expected = tmp_path / "expected.jsonl"
    write_synth(expected, 50, seed=3)
    assert out.read_bytes() == expected.read_bytes()
    missing = CliRunner().invoke(main, ["synth", "--n", "5", "--out", str(tmp_path / "no" / "x")])
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"Error: cannot write {tmp_path / 'no' / 'x'}: no directory {tmp_path / 'no'}"
