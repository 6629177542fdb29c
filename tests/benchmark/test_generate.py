"""Generation pieces: the seeded plan, the few-shot pool, template and method files, the
log (resuming, a crash mid-line), and parsing candidates out of responses."""

from __future__ import annotations

import json
from collections import Counter

import duckdb
import pytest
from click.testing import CliRunner

import steptrace as st
from steptrace.benchmark._candidates import (NO_CODE, NO_ENTRY, NO_INPUTS, call_arguments, parse_response,
                               write_candidates)
from steptrace.cli._main import main
from steptrace.benchmark._generate import (FewShot, GenerateError, GenerateOptions, GenerationLog,
                             builtin_methods, default_fewshot_path, default_template_path,
                             generate, load_fewshot, load_template, plan, read_log,
                             read_methods)
from steptrace.predictions._predict import PredictError, PredictOptions, Prediction
from helpers.openai_stub import StubServer, answer
from helpers.benchmark import GOOD_STRIP, method_of
from helpers.cli import assert_one_line_error

METHODS = ["str.upper", "list.append", "dict.get", "str.zfill"]


def bundled_plan(n: int, seed: int, methods=METHODS):
    return plan(n, seed, list(methods), load_fewshot(default_fewshot_path()),
                load_template(default_template_path()))


def test_builtin_methods_are_the_public_methods_of_str_list_dict():
    methods = builtin_methods()
    expected = ([f"str.{m}" for m in sorted(dir(str)) if not m.startswith("_")]
                + [f"list.{m}" for m in sorted(dir(list)) if not m.startswith("_")]
                + [f"dict.{m}" for m in sorted(dir(dict)) if not m.startswith("_")])
    assert methods == expected
    assert {"str.center", "str.maketrans", "list.append", "dict.setdefault"} <= set(methods)
    assert len(methods) == len(set(methods))


def test_plan_covers_methods_evenly_and_grows_as_a_prefix():
    long = bundled_plan(12, seed=7)
    assert Counter(r.method for r in long) == {m: 3 for m in METHODS}
    # each block of 4 generations is one permutation of the methods
    assert [sorted(r.method for r in long[i:i + 4]) for i in (0, 4, 8)] == [sorted(METHODS)] * 3
    assert bundled_plan(5, seed=7) == long[:5]
    assert bundled_plan(12, seed=7) == long
    assert [r.gen_id for r in long[:2]] == ["gen-7-000000", "gen-7-000001"]
    assert [r.method for r in bundled_plan(12, seed=8)] != [r.method for r in long]


def test_plan_prompts_show_two_distinct_examples_then_the_method():
    pool = {shot.id: shot for shot in load_fewshot(default_fewshot_path())}
    for request in bundled_plan(8, seed=1):
        first, second = request.fewshot
        assert first != second
        assert pool[first].render() in request.prompt and pool[second].render() in request.prompt
        assert request.prompt.endswith(f"[TASK]\n{request.method}\n[/TASK]\n")
        assert "$" not in request.prompt.replace("$$", "")


def test_bundled_fewshot_pool_is_runnable():
    """Each example's inputs call its function without an error (as the prompt promises)."""
    pool = load_fewshot(default_fewshot_path())
    assert len(pool) == 8
    for shot in pool:
        namespace: dict = {}
        exec(shot.code, namespace)
        for text in shot.inputs:
            eval(f"f({text})", namespace)
        assert shot.method.split(".")[1] in shot.code


def test_fewshot_render():
    shot = FewShot("x", "str.upper", "def f(s):\n    return s.upper()\n", ("'a'", "'bc'"))
    assert shot.render() == ("[TASK]\nstr.upper\n[/TASK]\n[PYTHON]\ndef f(s):\n    return "
                             "s.upper()\n[/PYTHON]\n[TEST]\nassert f('a') == ??\n"
                             "assert f('bc') == ??\n[/TEST]\n")


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "method": "m", "code": "c", "inputs": ["1"]}'],
     "few-shot pool {path} needs at least 2 examples, has 1"),
    (['{"id": "a", "method": "m", "code": "c", "inputs": ["1"]}', "{nope"],
     "{path}:2: not valid JSON (Expecting property name enclosed in double quotes)"),
    (['{"id": "a", "method": "m", "code": "c", "inputs": []}'],
     "{path}:1: 'inputs' must be a non-empty list of strings"),
    (['{"id": "a", "method": "", "code": "c", "inputs": ["1"]}'],
     "{path}:1: field 'method' must be a non-empty string"),
    (['{"id": "a", "method": "m", "code": "c", "inputs": ["1"]}'] * 2,
     "few-shot pool {path}: example ids must be unique"),
])
def test_bad_fewshot_pools(tmp_path, lines, message):
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(GenerateError) as caught:
        load_fewshot(path)
    assert str(caught.value) == message.format(path=path)


@pytest.mark.parametrize("text, message", [
    ("$examples $method $model", "template {path}: unknown placeholder $model (known: "
                                 "$examples, $method)"),
    ("$examples only", "template {path}: missing placeholder $method"),
    ("$examples $method costs 5$", "template {path}: a '$' that is not a placeholder "
                                   "(write $$ for '$')"),
])
def test_bad_templates(tmp_path, text, message):
    path = tmp_path / "t.txt"
    path.write_text(text)
    with pytest.raises(GenerateError) as caught:
        load_template(path)
    assert str(caught.value) == message.format(path=path)


def test_methods_file_and_missing_files(tmp_path):
    path = tmp_path / "m.txt"
    path.write_text("# mine\ncollections.Counter.most_common\n\nstr.zfill  # padding\n")
    assert read_methods(path) == ["collections.Counter.most_common", "str.zfill"]
    with pytest.raises(GenerateError, match=f"^methods file not found: {tmp_path / 'no'}$"):
        read_methods(tmp_path / "no")
    with pytest.raises(GenerateError, match="^the method list names a method twice$"):
        bundled_plan(2, 0, ["str.upper", "str.upper"])
    with pytest.raises(GenerateError, match="^n must be at least 1$"):
        GenerateOptions(n=0)


# ---------------------------------------------------------------- the log
def test_log_newest_line_wins_and_a_cut_off_tail_is_ignored(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"gen_id": "a", "error": "boom"}\n{"gen_id": "b", "raw_text": "x"}\n'
                    '{"gen_id": "a", "raw_text": "y", "error": null}\n{"gen_id": "c", "raw')
    logged = read_log(path)
    assert logged == {"a": {"gen_id": "a", "raw_text": "y", "error": None},
                      "b": {"gen_id": "b", "raw_text": "x"}}
    # the next writer cuts the tail off and starts on a line of its own
    request = bundled_plan(1, 0)[0]
    log = GenerationLog(path, {request.gen_id: request})
    log.write([Prediction(request.gen_id, "m", 0, "generate", raw_text="z")])
    assert set(read_log(path)) == {"a", "b", request.gen_id}
    path.write_text('{"gen_id": "a"}\nnot json\n{"gen_id": "b"}\n')
    with pytest.raises(GenerateError, match=f"^{path}:2: not a generation log line$"):
        read_log(path)


def test_generate_resumes_after_the_server_dies(tmp_path):
    """The server is killed after 3 responses: those are logged, the run stops with a
    one-line error, and the next run asks for the other 5 only."""
    out = tmp_path / "c.jsonl"
    options = GenerateOptions(n=8, seed=2, methods=tuple(METHODS))
    script = {m: answer(GOOD_STRIP) for m in METHODS}
    with StubServer(script, key_of=method_of, kill_after=3) as server:
        settings = PredictOptions(model="stub-model", base_url=server.base_url, concurrency=1,
                                  max_retries=0)
        with pytest.raises(PredictError, match="stopped with 3 new generations logged"):
            generate(out, options, settings)
    assert len(read_log(tmp_path / "c.log.jsonl")) == 3
    assert len(out.read_text().splitlines()) == 3
    with StubServer(script, key_of=method_of) as server:
        settings = PredictOptions(model="stub-model", base_url=server.base_url, max_retries=0)
        summary = generate(out, options, settings)
        assert sum(server.requests.values()) == 5
    assert (summary.skipped, summary.requests, summary.errors) == (3, 5, 0)
    assert (summary.parsed.candidates, summary.parsed.inputs) == (8, 16)
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == [f"gen-2-{i:06d}" for i in range(8)]


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize("line, expected", [
    ("assert f('a', 2) == ??", "'a', 2"),
    ("assert f((1, 2), [3, (4)]) == ??", "(1, 2), [3, (4)]"),
    ("assert f(x=1, y='=') == 'known'", "x=1, y='='"),
    ("f({'k': ')'})", "{'k': ')'}"),
    ("assert f() == ??", None),
    ("assert g(1) == ??", None),
    ("assert f(['a', 'b') == ??", None),
    ("assert f(1); f(2)", None),
])
def test_call_arguments(line, expected):
    from steptrace.benchmark._candidates import _UNKNOWN_RESULT
    assert call_arguments(_UNKNOWN_RESULT.sub("", line)) == expected


class Planned:
    gen_id, method, fewshot = "gen-0-000000", "str.upper", ("fs-01", "fs-02")


@pytest.mark.parametrize("text, expected", [
    ("no code here", NO_CODE),
    ("[PYTHON]\n\n[/PYTHON]", NO_CODE),
    ("[PYTHON]\ndef g(x):\n    return x\n[/PYTHON]\n[TEST]\nassert g(1) == ??\n[/TEST]", NO_ENTRY),
    ("[PYTHON]\n    def f(x):\n        return x\n[/PYTHON]\nassert f(1) == ??", NO_ENTRY),
    ("[PYTHON]\ndef f(x):\n    return x\n[/PYTHON]\n[TEST]\n[/TEST]", NO_INPUTS),
])
def test_responses_without_a_candidate(text, expected):
    assert parse_response(text, Planned) == expected


def test_candidate_from_tagged_response_with_duplicates_and_bad_lines():
    text = ("[PYTHON]\ndef f(x):\n    return x.upper()\n[/PYTHON]\n[TEST]\n"
            "assert f('a') == ??\nassert f('a') == ??\nassert f('b' == ??\n# note\n"
            "assert f('c') == ??\n[/TEST]\nassert f('outside') == ??\n")
    found = parse_response(text, Planned)
    assert found.record() == {"id": "gen-0-000000", "method": "str.upper",
                              "fewshot": ["fs-01", "fs-02"],
                              "code": "def f(x):\n    return x.upper()\n", "entry": "f",
                              "inputs": ["'a'", "'c'"], "model_written": True}
    assert (found.duplicate_inputs, found.unparsed_tests) == (1, 1)


def test_write_candidates_replaces_the_file_whole(tmp_path):
    requests = bundled_plan(3, 0)
    logged = {requests[0].gen_id: {"raw_text": GOOD_STRIP, "error": None},
              requests[2].gen_id: {"raw_text": None, "error": "APIError: boom"}}
    out = tmp_path / "c.jsonl"
    out.write_text("old\n")
    report = write_candidates(logged, requests, out)
    assert (report.generations, report.candidates, report.inputs) == (3, 1, 2)
    assert report.rejected == {"not asked yet": 1, "request failed": 1}
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [requests[0].gen_id]
    assert not (tmp_path / "c.jsonl.partial").exists()


def test_cli_refuses_an_out_file_in_a_missing_directory(tmp_path):
    """Checked before any request is made: the responses could not be logged."""
    with StubServer({}, key_of=method_of) as server:
        out = tmp_path / "no" / "c.jsonl"
        result = CliRunner().invoke(main, ["generate", "--model", "stub-model", "--base-url",
                                           server.base_url, "--n", "2", "--out", str(out)])
        assert sum(server.requests.values()) == 0
    assert_one_line_error(result, f"cannot write {out}: no directory {tmp_path / 'no'}")


# A generated function that changes a function's defaults in the standard library (state
# batch isolation does not compare), and one that reads them.
LEAVES_STATE = ("[PYTHON]\nimport textwrap\n\ndef f(x):\n"
                "    d = textwrap.TextWrapper.__init__.__defaults__\n"
                "    textwrap.TextWrapper.__init__.__defaults__ = (x,) + d[1:]\n"
                "    return x\n[/PYTHON]\n[TEST]\nassert f(7) == ??\nassert f(9) == ??\n[/TEST]\n")
READS_STATE = ("[PYTHON]\nimport textwrap\n\ndef f(x):\n"
               "    return textwrap.TextWrapper().width + x\n[/PYTHON]\n"
               "[TEST]\nassert f(0) == ??\n[/TEST]\n")


def test_generated_candidates_never_run_in_batch_isolation(tmp_path):
    """The candidates are marked model_written; ``trace --isolation batch`` on them (one
    worker: every job in one process) says in one line that it does not use batch
    isolation, and runs each job in a fresh instance: the reader sees the defaults as
    they are, not as the first candidate left them; a sharded trace plans in job
    isolation."""
    methods = ["str.upper", "list.append"]
    first, second = [r.method for r in bundled_plan(2, 0, methods)]
    out, db = tmp_path / "candidates.jsonl", tmp_path / "pool.duckdb"
    with StubServer({first: answer(LEAVES_STATE), second: answer(READS_STATE)},
                    key_of=method_of) as server:
        generate(out, GenerateOptions(n=2, seed=0, methods=tuple(methods)),
                 PredictOptions(model="stub-model", base_url=server.base_url, concurrency=1,
                                max_retries=0))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["method"], r["inputs"], r["model_written"]) for r in records] == [
        (first, ["7", "9"], True), (second, ["0"], True)]
    result = CliRunner().invoke(main, ["trace", str(out), "--db", str(db), "--isolation",
                                       "batch", "--workers", "1", "--quiet", "--format", "json"])
    assert result.exit_code == 0, result.output
    note = ("batch isolation is not used for model-written code: 3 of the 3 jobs are of "
            "records marked model_written, so every job ran in job isolation")
    assert result.stderr == f"note: {note}\n"
    assert json.loads(result.stdout)["notes"] == [note]
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT sample_id, input, status, output, isolation FROM runs "
                           "ORDER BY run_id").fetchall() == [
            (records[0]["id"], "7", "ok", "7", "job"), (records[0]["id"], "9", "ok", "9", "job"),
            (records[1]["id"], "0", "ok", "70", "job")]
    # the same in a sharded trace: the plan is made in job isolation, with the note
    shards = tmp_path / "shards"
    result = CliRunner().invoke(main, ["trace", str(out), "--out", str(shards), "--isolation",
                                       "batch", "--workers", "1", "--shard-size", "2",
                                       "--quiet", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"note: {note}\n"
    assert json.loads((shards / "plan.json").read_text())["isolation"] == "job"
    runs = st.open_store(shards).runs().sort("run_id")
    assert runs.select("input", "status", "output", "isolation").rows() == [
        ("7", "ok", "7", "job"), ("9", "ok", "9", "job"), ("0", "ok", "70", "job")]


@pytest.mark.parametrize("mark, isolation", [
    (False, "batch"), (None, "batch"), (True, "job"), ("gpt-4o", "job"), (0, "job"),
    ({"by": "model"}, "job")])
def test_any_model_written_mark_but_false_or_null_keeps_batch_isolation_away(
        tmp_path, mark, isolation):
    """One record marked (with ``mark``) beside an unmarked one: any value but false or
    null marks it, and then the whole corpus runs in job isolation, with the note."""
    code = "def f(x):\n    return x\n"
    records = [{"id": "plain", "code": code, "input": "1"},
               {"id": "marked", "code": code, "input": "2", "model_written": mark}]
    db = tmp_path / "m.duckdb"
    summary = st.trace(records, db, workers=0, isolation="batch")
    assert summary.notes == ([] if isolation == "batch" else [
        "batch isolation is not used for model-written code: 1 of the 2 jobs are of records "
        "marked model_written, so every job ran in job isolation"])
    assert st.open_store(db).runs().sort("run_id").select("output", "isolation").rows() == [
        ("1", isolation), ("2", isolation)]
