"""Benchmark construction end to end (README, "Build your own benchmark"): a real
OpenAI-compatible server on 127.0.0.1 answers the generation prompts with a fixed set of
responses — good functions, broken code, an import, floats, non-determinism, exact and
near duplicates, responses with no usable candidate, a failing request — and the
pipeline generate → trace → filter → dedupe → select → export runs through the CLI with
the real sandbox and a real DuckDB file, with exact counts at every stage."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from steptrace.cli._main import main
from helpers.openai_stub import Reply, StubServer, answer
from helpers.cli import rows
from helpers.benchmark import GOOD_STRIP, _TARGET, method_of  # noqa: F401
import pytest

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

MODEL = "stub-model"

GOOD_UPPER = """Here it is.
[PYTHON]
def f(s):
    out = ''
    for ch in s:
        if ch.isalpha():
            out = out + ch.upper()
    return out
[/PYTHON]
[TEST]
assert f('ab3c') == ??
assert f('x!y') == ??
assert f('ab3c') == ??
[/TEST]
"""
# GOOD_UPPER with other names and another literal: a near duplicate.
NEAR_DUPLICATE = """[PYTHON]
def f(text):
    result = 'q'
    for c in text:
        if c.isalpha():
            result = result + c.upper()
    return result
[/PYTHON]
[TEST]
assert f('k9') == ??
[/TEST]
"""
LIST_CODE = """def f(nums):
    kept = []
    for n in nums:
        if n % 2 == 0:
            kept.append(n)
    kept.append(len(kept))
    return kept"""
# A Markdown fence and test lines with no [TEST] block.
GOOD_LIST = f"```python\n{LIST_CODE}\n```\nassert f([2, 3, 1]) == ??\nassert f([]) == ??\n"
# The same code again, for another method: an exact duplicate.
EXACT_DUPLICATE = f"[PYTHON]\n{LIST_CODE}\n[/PYTHON]\n[TEST]\nassert f([0, 1]) == ??\n[/TEST]\n"
BROKEN = """[PYTHON]
def f(d, key):
    if key in d
        return d.get(key)
    return None
[/PYTHON]
[TEST]
assert f({'a': 1}, 'a') == ??
assert f({}, 'b') == ??
[/TEST]
"""
IMPORTS = """[PYTHON]
import math

def f(d):
    total = 0
    for k, v in d.items():
        total += math.gcd(v, 2)
    return total
[/PYTHON]
[TEST]
assert f({'a': 4, 'b': 3}) == ??
[/TEST]
"""
# Floats on one path only: the run that takes the other path is kept.
FLOATS = """[PYTHON]
def f(s):
    parts = s.split('-')
    if len(parts) > 1:
        return len(parts[0]) / 2
    return len(parts)
[/PYTHON]
[TEST]
assert f('ab-c') == ??
assert f('abc') == ??
[/TEST]
"""
# Set iteration order follows string hashing: the reseeded guest build differs.
NONDETERMINISTIC = """[PYTHON]
def f(s):
    letters = {*s}
    out = ''
    for ch in letters:
        out = out + ch
    return '-'.join(out)
[/PYTHON]
[TEST]
assert f('pqrstu') == ??
[/TEST]
"""
PROSE = "I would use str.replace to swap characters, but I cannot write the function now."
NO_ENTRY = """[PYTHON]
def g(xs):
    xs.sort()
    return xs
[/PYTHON]
[TEST]
assert g([3, 1]) == ??
[/TEST]
"""
NO_INPUTS = """[PYTHON]
def f(xs):
    xs.reverse()
    return xs[0] if xs else None
[/PYTHON]
"""
GOOD_COUNT = """[PYTHON]
def f(s, sub):
    n = s.count(sub)
    if n > 1:
        return s[:n]
    return s + sub
[/PYTHON]
[TEST]
assert f('abab', 'ab') == ??
assert f('zq', 'z') == ??
assert f(['a', 'b') == ??
[/TEST]
"""
SCRIPT = {
    "str.upper": answer(GOOD_UPPER), "str.lower": answer(NEAR_DUPLICATE),
    "list.append": answer(GOOD_LIST), "list.pop": answer(EXACT_DUPLICATE),
    "dict.get": answer(BROKEN), "dict.items": answer(IMPORTS), "str.split": answer(FLOATS),
    "str.join": answer(NONDETERMINISTIC), "str.replace": answer(PROSE),
    "list.sort": answer(NO_ENTRY), "list.reverse": answer(NO_INPUTS),
    "dict.keys": Reply(500, message="overloaded"),
    "str.strip": answer(GOOD_STRIP), "str.count": answer(GOOD_COUNT),
}


def invoke(*args) -> object:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def as_json(*args) -> dict:
    return json.loads(invoke(*args, "--format", "json").stdout)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def generate_args(server: StubServer, tmp_path: Path) -> list:
    return ["generate", "--model", MODEL, "--base-url", server.base_url, "--n", len(SCRIPT),
            "--seed", 3, "--out", tmp_path / "candidates.jsonl",
            "--methods-file", tmp_path / "methods.txt", "--no-builtin-methods",
            "--max-retries", 0, "--quiet"]


def test_generate_trace_filter_dedupe_select_export(tmp_path):
    (tmp_path / "methods.txt").write_text("\n".join(SCRIPT) + "\n", encoding="utf-8")
    pool, kept = tmp_path / "pool.duckdb", tmp_path / "kept.jsonl"

    # 1. generate: 14 prompts, one per method; one request fails (500, no retries).
    with StubServer(SCRIPT, key_of=method_of) as server:
        generated = as_json(*generate_args(server, tmp_path))
        assert dict(server.requests) == {method: 1 for method in SCRIPT}
    assert (generated["generations"], generated["methods"], generated["requests"],
            generated["errors"], generated["skipped"]) == (14, 14, 14, 1, 0)
    # 2. parse: 10 candidates; inputs: 2+1+2+1+2+1+2+1+2+2 = 16 (GOOD_UPPER repeats one,
    # GOOD_COUNT has one line that is not a call).
    assert generated["parsed"] == {
        "generations": 14, "candidates": 10, "inputs": 16, "duplicate_inputs": 1,
        "unparsed_tests": 1,
        "rejected": {"request failed": 1, "no code block": 1, "no top-level def f": 1,
                     "no test input": 1}}
    log = jsonl(tmp_path / "candidates.log.jsonl")
    assert len(log) == 14 and {r["method"] for r in log} == set(SCRIPT)
    assert all(r["prompt"].endswith(f"[TASK]\n{r['method']}\n[/TASK]\n") for r in log)
    candidates = {r["method"]: r for r in jsonl(tmp_path / "candidates.jsonl")}
    assert candidates["str.upper"]["inputs"] == ["'ab3c'", "'x!y'"]
    assert candidates["str.count"]["inputs"] == ["'abab', 'ab'", "'zq', 'z'"]

    # A second run asks only for the generation that failed.
    with StubServer({**SCRIPT, "dict.keys": answer(PROSE)}, key_of=method_of) as server:
        again = as_json(*generate_args(server, tmp_path))
        assert dict(server.requests) == {"dict.keys": 1}
    assert (again["requests"], again["skipped"], again["errors"]) == (1, 13, 0)
    assert again["parsed"]["rejected"] == {"no code block": 2, "no top-level def f": 1,
                                           "no test input": 1}

    # 3. trace the candidates: the broken function's two inputs do not compile.
    # Asked for batch isolation, trace says it does not use it for model-written code.
    result = invoke("trace", tmp_path / "candidates.jsonl", "--db", pool, "--isolation",
                    "batch", "--quiet", "--format", "json")
    traced = json.loads(result.stdout)
    assert (traced["traced"], traced["by_status"]) == (16, {"invalid": 2, "ok": 14})
    assert result.stderr == ("note: batch isolation is not used for model-written code: 16 "
                             "of the 16 jobs are of records marked model_written, so every "
                             "job ran in job isolation\n")
    assert rows(pool, "SELECT isolation, count(*) FROM runs GROUP BY ALL") == [("job", 16)]

    # 4. filter: the removals table, then the kept runs as corpus records.
    report = as_json("filter", "--db", pool, "--out", kept, "--quiet")
    removed = {row["rule"]: row["removed"] for row in report[:-1] if row["removed"]}
    # The broken function is also short (73 characters): length removes it too.
    assert removed == {"length": 2, "valid": 2, "no_imports": 1, "no_float_values": 1, "no_float_ops": 1,
                       "no_true_division": 1, "no_exception": 2, "deterministic": 1}
    assert (report[-1]["rule"], report[-1]["removed"], report[-1]["kept"]) == ("kept", 5, 11)
    assert [r["model_written"] for r in jsonl(kept)] == [True] * 11  # the mark is kept

    # 5. dedupe: list.pop's function is list.append's exactly (whichever came first
    # stays), str.lower's is str.upper's after renaming.
    deduped = as_json("dedupe", kept, "--out", tmp_path / "unique.jsonl")
    assert (deduped["functions_in"], deduped["records_in"]) == (7, 11)
    assert (deduped["functions_out"], deduped["records_out"]) == (5, 8)
    method = {r["id"]: r["method"] for r in candidates.values()}
    pairs = {(d["kind"], frozenset({method[d["id"]], method[d["kept_id"]]}), d["records"])
             for d in deduped["duplicates"]}
    dropped_list = next(d for d in deduped["duplicates"] if d["kind"] == "exact")
    assert pairs == {("exact", frozenset({"list.append", "list.pop"}),
                      {"list.append": 2, "list.pop": 1}[method[dropped_list["id"]]]),
                     ("near", frozenset({"str.lower", "str.upper"}), 1)}
    kept_list_method = ({"list.append", "list.pop"} - {method[dropped_list["id"]]}).pop()

    # 6. select 4 of the 5 functions, one per method at most.
    selected = as_json("select", tmp_path / "unique.jsonl", "--candidates",
                       tmp_path / "candidates.jsonl", "--n", 4, "--seed", 0,
                       "--out", tmp_path / "benchmark.jsonl")
    assert selected["available"] == {kept_list_method: 1, "str.count": 1, "str.split": 1,
                                     "str.strip": 1, "str.upper": 1}
    assert (selected["chosen"], sorted(selected["selected"].values())) == (4, [1, 1, 1, 1])
    benchmark = jsonl(tmp_path / "benchmark.jsonl")
    sources = jsonl(tmp_path / "benchmark.sources.jsonl")
    assert [list(r) for r in benchmark] == [["id", "code", "input", "output"]] * 4
    assert [r["id"] for r in benchmark] == [f"sample_{i}" for i in range(4)]
    assert [s["method"] for s in sources] == [m for m in selected["selected"]]
    # The same seed selects the same benchmark, byte for byte.
    invoke("select", tmp_path / "unique.jsonl", "--candidates", tmp_path / "candidates.jsonl",
           "--n", 4, "--seed", 0, "--out", tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "benchmark.jsonl").read_bytes()

    # 7. export: the CRUXEval file traces back to the same outputs, CRUXEval's own
    # scoring reads it, and steptrace makes its tasks.
    exported = tmp_path / "benchmark.duckdb"
    retraced = as_json("trace", tmp_path / "benchmark.jsonl", "--db", exported, "--quiet")
    assert (retraced["with_expected"], retraced["matched"]) == (4, 4)
    generations = tmp_path / "generations.json"
    generations.write_text(json.dumps({r["id"]: [r["output"]] for r in benchmark}))
    scored = as_json("score", "--cruxeval", generations, "--mode", "output",
                     "--data", tmp_path / "benchmark.jsonl")
    assert (scored["samples"], scored["passed"], scored["pass_at_1"]) == (4, 4, 100.0)
    invoke("tasks", "--db", exported, "--kinds", "output,input", "--out",
           tmp_path / "tasks.jsonl")
    tasks = jsonl(tmp_path / "tasks.jsonl")
    assert sorted((t["kind"], t["answer"]) for t in tasks if t["kind"] == "output") == \
        sorted(("output", r["output"]) for r in benchmark)
    assert rows(exported, "SELECT count(*) FROM runs WHERE status = 'ok'") == [(4,)]


def test_generate_refuses_a_log_written_with_other_settings(tmp_path):
    """The same seed with another method list, or another model, must not resume a log:
    its generation ids would mean other prompts. Nothing is asked."""
    (tmp_path / "methods.txt").write_text("\n".join(SCRIPT) + "\n", encoding="utf-8")
    log = tmp_path / "candidates.log.jsonl"
    with StubServer(SCRIPT, key_of=method_of) as server:
        invoke(*generate_args(server, tmp_path))
        before = log.read_bytes()
        (tmp_path / "methods.txt").write_text("\n".join(list(SCRIPT)[1:]) + "\n")
        other_methods = CliRunner().invoke(main, [str(a) for a in generate_args(server, tmp_path)])
        (tmp_path / "methods.txt").write_text("\n".join(SCRIPT) + "\n", encoding="utf-8")
        args = generate_args(server, tmp_path)
        args[args.index("--model") + 1] = "other-model"
        other_model = CliRunner().invoke(main, [str(a) for a in args])
        assert dict(server.requests) == {method: 1 for method in SCRIPT}
    assert log.read_bytes() == before
    assert other_methods.exit_code == 1
    assert re.fullmatch(rf"Error: {re.escape(str(log))} holds gen-3-\d{{6}} with another prompt: "
                        r"it was written with another method list, few-shot pool or "
                        r"template; use another --out \(or --log\) for new settings\n",
                        other_methods.stderr)
    assert other_model.exit_code == 1
    assert other_model.stderr == (f"Error: {log} holds gen-3-000000 from model 'stub-model', "
                                  "not 'other-model'; use another --out (or --log) for another "
                                  "model\n")
