"""The repair loop (steptrace.benchmark._repair): replies parsed strictly, the minimum a
test must assert, the corpus read and the log resumed, and the loop itself against the
real sandbox and the local model server (tests/helpers/openai_stub.py), each example's
replies scripted by its id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import steptrace as st
from steptrace.benchmark._repair import (MAX_CODE, MAX_REPLY, RepairError, RepairOptions,
                                         Revision, assertion_problem, parse_reply,
                                         read_examples, read_log, repair)
from steptrace.cli._main import main
from steptrace.corpus._formats import CorpusError
from steptrace.errors import PredictError
from steptrace.predictions._options import PredictOptions
from helpers.openai_stub import StubServer, answer

MODEL = "stub-model"

NAME_ERROR = {"id": "name", "code": "def f(x):\n    return x + y\n", "input": "1",
              "output": "3"}
FINE = {"id": "fine", "code": "def f(x):\n    return x * 2\n", "input": "2", "output": "4"}
CALC_TEST = ("import unittest\nclass TestCalc(unittest.TestCase):\n    def test_add(self):\n"
             "        self.assertEqual(Calc().add(1, 2), 3)\n")
CALC = {"id": "calc", "code": "class Calc:\n    def add(self, a, b):\n        return a - b\n",
        "entry": "TestCalc.test_add", "input": "", "test": CALC_TEST}


def python(code: str) -> str:
    return f"Here it is.\n[PYTHON]\n{code}[/PYTHON]\n"


def with_test(code: str, test: str) -> str:
    return f"[PYTHON]\n{code}[/PYTHON]\n[TEST]\n{test}[/TEST]\n"


STILL_FAILS = python("def f(x):\n    return x + 'two'\n")          # TypeError
FIXED = python("def f(x):\n    y = 2\n    return x + y\n")


def run_repair(tmp_path: Path, records, script, *, rounds: int = 3, out: str = "out.jsonl",
               model: str = MODEL, **server_options):
    with StubServer(script, **server_options) as server:
        summary = repair(records, tmp_path / out,
                         PredictOptions(model=model, base_url=server.base_url, concurrency=1,
                                        max_retries=0),
                         RepairOptions(rounds=rounds, workers=0))
    return summary, server


def lines_of(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def outcomes(log: Path) -> list[tuple]:
    return [(line["id"], line["round"], line["parse_error"],
             line["outcome"] and (line["outcome"]["status"], line["outcome"]["problem"]))
            for line in lines_of(log)]


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------- replies
@pytest.mark.parametrize("text, form, expected", [
    (python("def f():\n    return 1\n"), "output", Revision("def f():\n    return 1\n", None)),
    ("[PYTHON]\ndef f(): return 1[/PYTHON]", "output", Revision("def f(): return 1\n", None)),
    (with_test("x = 1\n", "import unittest\n"), "test", Revision("x = 1\n", "import unittest\n")),
    (None, "output", "the reply is empty"),
    ("  \n", "output", "the reply is empty"),
    ("def f(): pass", "output", "the reply has no program in a [PYTHON] ... [/PYTHON] block"),
    ("[PYTHON]\n\n[/PYTHON]", "output",
     "the reply has no program in a [PYTHON] ... [/PYTHON] block"),
    ("[PYTHON]\ndef f(): pass\n", "output",
     "the reply's [PYTHON] block is not closed by [/PYTHON]"),
    (python("a = 1\n") + python("b = 2\n"), "output", "the reply has 2 [PYTHON] blocks; give one"),
    (with_test("a = 1\n", "t = 1\n"), "output",
     "the reply has a [TEST] block, but this example's tests are its expected outputs, which "
     "do not change: give the program only"),
    (python("a = 1\n"), "test", "the reply has no test code in a [TEST] ... [/TEST] block"),
    (python("a = 1\n"), "write", "the reply has no test code in a [TEST] ... [/TEST] block"),
    (python("#" * MAX_CODE + "\n"), "output",
     f"the revised example is {MAX_CODE + 1:,} characters; at most {MAX_CODE:,}"),
    ("x" * (MAX_REPLY + 1), "output",
     f"the reply is longer than {MAX_REPLY:,} characters ({MAX_REPLY + 1:,})"),
])
def test_parse_reply(text, form, expected):
    assert parse_reply(text, form) == expected


@pytest.mark.parametrize("test, problem", [
    (CALC_TEST, None),
    ("class TestCalc:\n    def test_add(self):\n        assert Calc().add(1, 2) == 3\n", None),
    ("class TestCalc:\n    def test_add(this):\n        with this.assertRaises(KeyError):\n"
     "            {}[1]\n", None),
    ("class TestCalc:\n    def test_add(self):\n        for x in [1]:\n            if x:\n"
     "                self.assertTrue(x)\n", None),
    ("class TestCalc:\n    def test_add(self):\n        pass\n",
     "the test TestCalc.test_add asserts nothing: its body has no assert statement and no "
     "self.assert*(...) call"),
    # an assertion only in a nested function, or in another method, is none of this test's
    ("class TestCalc:\n    def test_add(self):\n        def inner():\n            assert 1\n"
     "    def other(self):\n        self.assertEqual(1, 1)\n",
     "the test TestCalc.test_add asserts nothing: its body has no assert statement and no "
     "self.assert*(...) call"),
    # the last definition of the method is the one the class holds
    ("class TestCalc:\n    def test_add(self):\n        assert 1\n    def test_add(self):\n"
     "        print(1)\n",
     "the test TestCalc.test_add asserts nothing: its body has no assert statement and no "
     "self.assert*(...) call"),
    ("class Other:\n    def test_add(self):\n        assert 1\n",
     "the test code defines no test method TestCalc.test_add (class TestCalc, method test_add)"),
    ("def broken(:\n", None),  # the run reports a test that does not compile
    ("(" * 1000 + ")" * 1000, None),
])
def test_assertion_problem(test, problem):
    assert assertion_problem(test, "TestCalc.test_add") == problem


# ---------------------------------------------------------------- the corpus and the log
def test_read_examples_forms_and_bad_records(tmp_path):
    corpus = tmp_path / "c.jsonl"
    lines = [NAME_ERROR, CALC, {"code": "def g(s):\n    return s\n", "entry": "g", "input": "'a'"},
             {"id": "s", "shape": "script", "code": "print(1)\n", "input": ""},
             {"id": "name", "code": "x = 1\n", "input": "", "output": "1"},
             {"id": "big", "code": "#" * (MAX_CODE + 1), "input": "", "output": "1"},
             {"id": "nocode", "input": "1"}]
    corpus.write_text("\n".join(json.dumps(r) for r in lines) + "\nnot json\n\n")
    examples, errors = read_examples(corpus)
    assert [(e.id, e.form, e.entry) for e in examples] == [
        ("name", "output", "f"), ("calc", "test", "TestCalc.test_add"),
        ("3", "write", "TestExample.test_example")]
    assert errors == [
        f"{corpus}:4: a script with no expected output cannot be repaired (nothing says what "
        "it should print)",
        f"{corpus}:5: id 'name' was used before ({corpus}:1); the log needs one example per id",
        f"{corpus}:6: too long to repair: {MAX_CODE + 1:,} characters of code and test code "
        f"(at most {MAX_CODE:,})",
        f"{corpus}:7: missing 'code'",
        f"{corpus}:8: not valid JSON (Expecting value at column 1)"]
    with pytest.raises(CorpusError, match="^corpus not found: .*missing.jsonl "
                                          r"\(repair reads a JSONL file\)$"):
        read_examples(tmp_path / "missing.jsonl")


def test_read_log_ignores_a_cut_last_line_and_refuses_a_bad_one(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"id": "a", "round": 0}\n{"id": "a", "round": 1}\n{"id": "a", "rou')
    assert {k: sorted(v) for k, v in read_log(log).items()} == {"a": [0, 1]}
    log.write_text('{"id": "a", "round": 0}\nnot json\n{"id": "a", "round": 1}\n')
    with pytest.raises(RepairError, match=f"^{log}:2: not a repair log line$"):
        read_log(log)
    log.write_text('{"id": "a", "round": -1}\n')
    with pytest.raises(RepairError, match=f"^{log}:1: not a repair log line$"):
        read_log(log)


# ---------------------------------------------------------------- the loop
def test_an_example_fixed_in_round_2_is_traced_ok(tmp_path):
    """NameError as given; round 1's revision still fails (TypeError); round 2's passes.
    The example that runs as given is never sent."""
    summary, server = run_repair(tmp_path, [NAME_ERROR, FINE],
                                 {"name": [answer(STILL_FAILS), answer(FIXED)]})
    assert server.requests == {"name": 2}
    log = tmp_path / "out.log.jsonl"
    assert outcomes(log) == [
        ("name", 0, None, ("exception", "ended with status exception")),
        ("fine", 0, None, ("ok", None)),
        ("name", 1, None, ("exception", "ended with status exception")),
        ("name", 2, None, ("ok", None))]
    lines = lines_of(log)
    assert [line["outcome"]["runs"][0]["exception_type"] for line in lines] == [
        "NameError", None, "TypeError", None]
    assert lines[0]["prompt"] is None and lines[0]["model"] is None
    assert lines[0]["example"] == {"code": NAME_ERROR["code"], "test": None}
    assert lines[2]["raw_text"] == STILL_FAILS and lines[2]["model"] == MODEL
    # round 2's prompt: the round-1 version and how it failed
    prompt = lines[3]["prompt"]
    assert "Example [[name]], revision 2 of at most 3." in prompt
    assert "[PYTHON]\ndef f(x):\n    return x + 'two'\n[/PYTHON]" in prompt
    assert ("What happened when it ran:\nRun 1 of 1: f(1) ended with status exception.\n"
            "  TypeError: unsupported operand type(s) for +: 'int' and 'str'\n"
            "  the last program line it ran: line 2: return x + 'two'\n") in prompt
    assert "- f(1) must give 3\n" in prompt
    out = tmp_path / "out.jsonl"
    assert records_of(out) == [
        {"id": "name", "code": "def f(x):\n    y = 2\n    return x + y\n", "input": "1",
         "output": "3", "rounds": 2,
         "repair": {"model": MODEL, "record_sha256": lines[0]["record_sha256"]},
         "model_written": True},
        {**FINE, "rounds": 0,
         "repair": {"model": None, "record_sha256": lines[1]["record_sha256"]}}]
    assert (summary.examples, summary.done, summary.as_given, summary.fixed,
            summary.given_up, summary.unfinished) == (2, 2, 1, {2: 1}, 0, 0)
    assert (summary.requests, summary.errors, summary.unparseable, summary.executions) == (
        2, 0, 0, 4)
    assert summary.final_status == {"ok": 2}
    # the repaired corpus traces as it ran
    db = tmp_path / "r.duckdb"
    traced = st.trace(out, db, workers=0)
    assert traced.by_status == {"ok": 2}
    runs = st.open_store(db).runs().sort("sample_id")
    assert runs.select("sample_id", "status", "output", "output_matches").rows() == [
        ("fine", "ok", "4", True), ("name", "ok", "3", True)]
    # a second run asks nothing and writes the same corpus
    again, server = run_repair(tmp_path, [NAME_ERROR, FINE], {})
    assert server.requests == {} and again.executions == 0
    assert records_of(out)[0]["rounds"] == 2 and again.fixed == {2: 1}


def test_an_example_never_fixed_is_given_up_after_the_rounds(tmp_path):
    summary, server = run_repair(tmp_path, [NAME_ERROR], {"name": answer(STILL_FAILS)},
                                 rounds=2)
    assert server.requests == {"name": 2}
    assert [o[:2] for o in outcomes(tmp_path / "out.log.jsonl")] == [
        ("name", 0), ("name", 1), ("name", 2)]
    assert records_of(tmp_path / "out.jsonl") == []
    assert (summary.done, summary.given_up, summary.final_status) == (0, 1, {"exception": 1})
    # more rounds continue it from its last one
    summary, server = run_repair(tmp_path, [NAME_ERROR], {"name": answer(FIXED)}, rounds=3)
    assert server.requests == {"name": 1}
    assert (summary.fixed, summary.given_up) == ({3: 1}, 0)
    assert records_of(tmp_path / "out.jsonl")[0]["rounds"] == 3


def test_an_unparseable_reply_is_the_next_rounds_feedback(tmp_path):
    summary, server = run_repair(tmp_path, [NAME_ERROR],
                                 {"name": [answer("def f(x):\n    return 3\n"), answer(FIXED)]})
    assert outcomes(tmp_path / "out.log.jsonl") == [
        ("name", 0, None, ("exception", "ended with status exception")),
        ("name", 1, "the reply has no program in a [PYTHON] ... [/PYTHON] block", None),
        ("name", 2, None, ("ok", None))]
    lines = lines_of(tmp_path / "out.log.jsonl")
    assert lines[1]["example"] is None and lines[1]["outcome"] is None
    prompt = lines[2]["prompt"]
    assert ("Your last reply could not be used: the reply has no program in a [PYTHON] ... "
            "[/PYTHON] block. The program above is the last version that could.\nWhen that "
            "version ran:\nRun 1 of 1: f(1) ended with status exception.\n  NameError: name "
            "'y' is not defined\n") in prompt
    assert "[PYTHON]\ndef f(x):\n    return x + y\n[/PYTHON]" in prompt
    assert (summary.unparseable, summary.fixed, summary.executions) == (1, {2: 1}, 2)


def test_cheating_replies_are_not_accepted(tmp_path):
    """Tests that assert nothing, a test that never runs the program, and an output whose
    __eq__ says yes to everything: each runs ok in the sandbox, none is accepted."""
    fixed_calc = "class Calc:\n    def add(self, a, b):\n        return a + b\n"
    no_assert = CALC_TEST.replace("self.assertEqual(Calc().add(1, 2), 3)", "pass")
    trivially_true = CALC_TEST.replace("self.assertEqual(Calc().add(1, 2), 3)",
                                       "self.assertTrue(True)")
    always_equal = python("class Yes:\n    def __eq__(self, other):\n        return True\n"
                          "    def __repr__(self):\n        return 'Yes()'\n"
                          "def f(x):\n    return Yes()\n")
    summary, server = run_repair(
        tmp_path, [CALC, NAME_ERROR],
        {"calc": [answer(with_test(fixed_calc, no_assert)),
                  answer(with_test(fixed_calc, trivially_true))],
         "name": answer(always_equal)}, rounds=2)
    assert outcomes(tmp_path / "out.log.jsonl") == [
        ("calc", 0, None, ("exception", "ended with status exception")),
        ("name", 0, None, ("exception", "ended with status exception")),
        ("calc", 1, None, ("failed_tests", "the test TestCalc.test_add asserts nothing: its "
                           "body has no assert statement and no self.assert*(...) call")),
        ("name", 1, None, ("failed_tests", "returned Yes(), which is not a plain value equal "
                           "to the expected 3 (its repr must be a Python literal)")),
        ("calc", 2, None, ("failed_tests", "the test passed without running a single line of "
                           "the program: it must call the program and check what it returns")),
        ("name", 2, None, ("failed_tests", "returned Yes(), which is not a plain value equal "
                           "to the expected 3 (its repr must be a Python literal)"))]
    # the guest's own comparison said yes: the host's is what refused it
    assert lines_of(tmp_path / "out.log.jsonl")[3]["outcome"]["runs"][0]["output_matches"] is True
    assert (summary.done, summary.given_up, records_of(tmp_path / "out.jsonl")) == (0, 2, [])


def test_resume_after_the_server_dies(tmp_path):
    """The server dies after one response: that reply is run and logged, the run stops
    with one line; the next run asks only what was not answered."""
    other = {**NAME_ERROR, "id": "other"}
    with pytest.raises(PredictError, match=r"^cannot reach http://127\.0\.0\.1:\d+/v1: .*; "
                                           r"stopped with 1 new replies logged \(run again "
                                           r"to resume\)$"):
        run_repair(tmp_path, [NAME_ERROR, other], {"name": answer(STILL_FAILS)},
                   kill_after=1)
    assert [o[:2] for o in outcomes(tmp_path / "out.log.jsonl")] == [
        ("name", 0), ("other", 0), ("name", 1)]
    summary, server = run_repair(tmp_path, [NAME_ERROR, other],
                                 {"name": answer(FIXED), "other": answer(FIXED)})
    assert server.requests == {"name": 1, "other": 1}
    assert [o[:2] for o in outcomes(tmp_path / "out.log.jsonl")][3:] == [
        ("name", 2), ("other", 1)]
    assert summary.fixed == {1: 1, 2: 1} and summary.executions == 2
    assert [r["id"] for r in records_of(tmp_path / "out.jsonl")] == ["name", "other"]


def test_a_failed_request_is_asked_again_next_run(tmp_path):
    summary, server = run_repair(tmp_path, [NAME_ERROR], {})  # the stub answers 400
    assert (summary.requests, summary.errors, summary.unfinished) == (1, 1, 1)
    line = lines_of(tmp_path / "out.log.jsonl")[-1]
    assert line["round"] == 1 and line["error"].startswith("BadRequestError: ")
    summary, server = run_repair(tmp_path, [NAME_ERROR], {"name": answer(FIXED)})
    assert server.requests == {"name": 1} and summary.fixed == {1: 1}


def test_a_log_of_other_settings_is_refused(tmp_path):
    run_repair(tmp_path, [NAME_ERROR], {"name": answer(FIXED)})
    log = tmp_path / "out.log.jsonl"
    with pytest.raises(RepairError, match=f"^{log} holds example 'name' revised by model "
                                          "'stub-model', not 'other-model': use another --log "
                                          "for another model$"):
        run_repair(tmp_path, [NAME_ERROR], {}, model="other-model")
    changed = {**NAME_ERROR, "output": "4"}
    with pytest.raises(RepairError, match=f"^{log} holds example 'name' of another record "
                                          r"\(its code, tests or inputs changed\): use another "
                                          "--log for this corpus$"):
        run_repair(tmp_path, [changed], {})


def test_an_example_without_tests_gets_tests_written(tmp_path):
    """A call with no expected output: the model writes a test driver, which becomes the
    repaired example's entry; its steps are the program's only."""
    record = {"id": "up", "code": "def g(s):\n    return s.upper(\n", "entry": "g",
              "input": "'a'"}
    test = ("import unittest\nclass TestExample(unittest.TestCase):\n"
            "    def test_example(self):\n        self.assertEqual(g('a'), 'A')\n")
    summary, server = run_repair(tmp_path, [record], {
        "up": answer(with_test("def g(s):\n    return s.upper()\n", test))})
    assert outcomes(tmp_path / "out.log.jsonl") == [
        ("up", 0, None, ("invalid", "ended with status invalid")),
        ("up", 1, None, ("ok", None))]
    prompt = lines_of(tmp_path / "out.log.jsonl")[1]["prompt"]
    assert "It has no tests yet. It was run as:\n- g('a')\nWrite them:" in prompt
    (repaired,) = records_of(tmp_path / "out.jsonl")
    assert {k: repaired[k] for k in ("code", "entry", "input", "test", "rounds")} == {
        "code": "def g(s):\n    return s.upper()\n", "entry": "TestExample.test_example",
        "input": "", "test": test, "rounds": 1}
    db = tmp_path / "w.duckdb"
    st.trace(tmp_path / "out.jsonl", db, workers=0)
    run = st.open_store(db).run(1)
    assert (run.status, run.output, run.entry) == ("ok", "None", "TestExample.test_example")
    assert [(s.event, s.func, s.line) for s in run.steps] == [
        ("call", "g", 1), ("line", "g", 2), ("return", "g", 2)]


def test_feedback_quotes_are_capped(tmp_path):
    record = {"id": "long",
              "code": "def f(x):\n    print('o' * 5000)\n    raise ValueError('m' * 5000)\n",
              "input": "1", "output": "1"}
    run_repair(tmp_path, [record], {"long": answer(python("def f(x):\n    return 1\n"))})
    feedback = lines_of(tmp_path / "out.log.jsonl")[0]["outcome"]["feedback"]
    assert feedback == ("Run 1 of 1: f(1) ended with status exception.\n  ValueError: "
                        + "m" * 600 + "... (5,000 characters)\n  the last program line it "
                        "ran: line 3: raise ValueError('m' * 5000)\n  its stdout (the end): '..."
                        + "o" * 999 + "\\n'")


# ---------------------------------------------------------------- the command
def test_repair_command_writes_the_corpus_and_traces_it(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps(NAME_ERROR) + "\n" + json.dumps(FINE) + "\n{bad\n")
    out, db = tmp_path / "fixed.jsonl", tmp_path / "fixed.duckdb"
    with StubServer({"name": [answer(STILL_FAILS), answer(FIXED)]}) as server:
        result = CliRunner().invoke(main, [
            "repair", str(corpus), "--model", MODEL, "--base-url", server.base_url,
            "--out", str(out), "--rounds", "2", "--workers", "0", "--db", str(db),
            "--quiet", "--format", "json"])
    assert result.exit_code == 1, result.output  # a bad record: warned, exit 1
    assert result.stderr == (f"warning: {corpus}:3: not valid JSON (Expecting property name "
                             "enclosed in double quotes at column 2)\n")
    repaired, traced = result.stdout.split("\n}\n", 1)
    summary = json.loads(repaired + "}")
    assert (summary["done"], summary["fixed"], summary["log"]) == (
        2, {"2": 1}, str(tmp_path / "fixed.log.jsonl"))
    assert summary["next"] == f"steptrace trace {out} --db FILE (traces the repaired examples)"
    assert json.loads(traced)["by_status"] == {"ok": 2}
    assert [r["rounds"] for r in records_of(out)] == [2, 0]


def test_repair_from_a_running_event_loop(tmp_path):
    """In a notebook an event loop runs: the model's requests then run in a thread of their
    own (RequestRun.run), with the same result as outside one."""
    import asyncio

    async def notebook_cell():
        asyncio.get_running_loop()
        return run_repair(tmp_path, [NAME_ERROR], {"name": answer(FIXED)}, rounds=1)

    summary, server = asyncio.run(notebook_cell())
    assert server.requests == {"name": 1}
    assert (summary.fixed, summary.given_up) == ({1: 1}, 0)


# ---------------------------------------------------------------- model-written code runs alone
# Round 1's revision of "leaves" changes a function's defaults in the standard library
# (state batch isolation would not compare); "reads"'s revision, run after it in the same
# round, must see them as they are.
LEAVES = {"id": "leaves", "code": "def f(x):\n    return x + y\n", "input": "7", "output": "7"}
READS = {"id": "reads", "input": "0", "output": "70",
         "code": "import textwrap\ndef f(x):\n    return textwrap.TextWrapper().width + z\n"}
LEAVES_FIX = ("import textwrap\ndef f(x):\n    d = textwrap.TextWrapper.__init__.__defaults__\n"
              "    textwrap.TextWrapper.__init__.__defaults__ = (x,) + d[1:]\n    return x\n")
READS_FIX = "import textwrap\ndef f(x):\n    return textwrap.TextWrapper().width + x\n"


@pytest.mark.parametrize("workers", [0, 1])
def test_revisions_of_one_round_never_share_an_instance(tmp_path, workers):
    """Both revisions run in one round, one after the other (in this process, or in one
    worker process): the second passes, as it does alone. The repaired corpus is marked
    model_written, and tracing it with batch isolation asked for runs it in job
    isolation, with the note."""
    with StubServer({"leaves": answer(python(LEAVES_FIX)),
                     "reads": answer(python(READS_FIX))}) as server:
        summary = repair([LEAVES, READS], tmp_path / "out.jsonl",
                         PredictOptions(model=MODEL, base_url=server.base_url, concurrency=1,
                                        max_retries=0),
                         RepairOptions(rounds=1, workers=workers))
    assert outcomes(tmp_path / "out.log.jsonl") == [
        ("leaves", 0, None, ("exception", "ended with status exception")),
        ("reads", 0, None, ("exception", "ended with status exception")),
        ("leaves", 1, None, ("ok", None)),
        ("reads", 1, None, ("ok", None))]
    assert [run["output"] for line in lines_of(tmp_path / "out.log.jsonl")[2:]
            for run in line["outcome"]["runs"]] == ["7", "70"]
    assert (summary.fixed, summary.given_up) == ({1: 2}, 0)
    repaired = records_of(tmp_path / "out.jsonl")
    assert [(r["id"], r["code"], r["rounds"], r["model_written"]) for r in repaired] == [
        ("leaves", LEAVES_FIX, 1, True), ("reads", READS_FIX, 1, True)]
    db = tmp_path / "r.duckdb"
    traced = st.trace(tmp_path / "out.jsonl", db, workers=1, isolation="batch")
    assert traced.notes == ["batch isolation is not used for model-written code: 2 of the 2 "
                            "jobs are of records marked model_written, so every job ran in "
                            "job isolation"]
    runs = st.open_store(db).runs().sort("run_id")
    assert runs.select("sample_id", "status", "output", "output_matches", "isolation").rows() \
        == [("leaves", "ok", "7", True, "job"), ("reads", "ok", "70", True, "job")]


def test_an_example_passing_as_given_is_not_marked_model_written(tmp_path):
    run_repair(tmp_path, [FINE], {})
    (record,) = records_of(tmp_path / "out.jsonl")
    assert "model_written" not in record and record["rounds"] == 0
    traced = st.trace(tmp_path / "out.jsonl", tmp_path / "f.duckdb", workers=0,
                      isolation="batch")
    assert traced.notes == [] and traced.model_written == 0
    assert st.open_store(tmp_path / "f.duckdb").runs()["isolation"].to_list() == ["batch"]


# ---------------------------------------------------------------- what an excerpt lacks
EXCERPT = {"id": "excerpt", "code": "from proj.text import slugify\n\n\n"
                                    "def title(words: list) -> str:\n"
                                    "    return SEP.join(slugify(w) for w in words) + helper()\n",
           "entry": "title", "input": "['a', 'B']", "output": "'a-b!'"}
NAMES_ONLY = {"id": "names", "code": "def f(x):\n    return x + OFFSET * scale(x)\n",
              "input": "1", "output": "3"}
EXCERPT_FIXED = python("SEP = '-'\n\n\ndef slugify(w):\n    return w.lower()\n\n\n"
                       "def helper():\n    return '!'\n\n\ndef title(words: list) -> str:\n"
                       "    return SEP.join(slugify(w) for w in words) + helper()\n")


def test_feedback_names_every_name_and_module_an_excerpt_lacks(tmp_path):
    """One run shows one error (the import, or the first NameError); the feedback names
    all the project's names the excerpt uses and the modules the guest lacks, and the
    model's next round, given them, passes."""
    summary, _ = run_repair(tmp_path, [EXCERPT, NAMES_ONLY], {
        "excerpt": answer(EXCERPT_FIXED),
        "names": answer(python("OFFSET = 1\n\n\ndef scale(x):\n    return 2 * x\n\n\n"
                               "def f(x):\n    return x + OFFSET * scale(x)\n"))})
    first = {line["id"]: line["outcome"]["feedback"]
             for line in lines_of(tmp_path / "out.log.jsonl") if line["round"] == 0}
    assert first["excerpt"] == (
        "Run 1 of 1: title(['a', 'B']) ended with status missing_module.\n"
        "  ModuleNotFoundError: No module named 'proj'\n"
        "Names the program uses but never defines or imports: `SEP`, `helper` (its project "
        "defines them elsewhere: define them in the program, or import them from a module "
        "the guest has).\n"
        "Modules the guest does not have: `proj` (put what the program needs from them "
        "into the program).\n"
        "Names the program imports from them: `slugify` from `proj.text`.")
    assert first["names"] == (
        "Run 1 of 1: f(1) ended with status exception.\n"
        "  NameError: name 'OFFSET' is not defined\n"
        "  the last program line it ran: line 2: return x + OFFSET * scale(x)\n"
        "Names the program uses but never defines or imports: `OFFSET`, `scale` (its "
        "project defines them elsewhere: define them in the program, or import them from a "
        "module the guest has).")
    assert sorted(r["id"] for r in records_of(tmp_path / "out.jsonl")) == ["excerpt", "names"]


@pytest.mark.parametrize("code, names", [
    ("import os\nfrom p.q import r\nLIMIT = 3\n\n\ndef f(x, y=DEFAULT):\n"
     "    z = helper(x) + LIMIT\n    return [r(i) for i in z] + [len(x), Other.attr]\n",
     ["DEFAULT", "Other", "helper"]),
    ("class C(Base):\n    k = CONST\n\n    def m(self):\n        global G\n        G = 1\n"
     "        return G + later\n", ["Base", "CONST", "later"]),
    ("def f():\n    def g():\n        return a\n    a = 1\n    return g\n", []),  # a closure
    ("for i in range(3):\n    pass\nprint(i, j)\n", ["j"]),
    ("try:\n    pass\nexcept E as e:\n    e\nwith open(p) as fh:\n    fh\n", ["E", "p"]),
    ("from x import *\nf(y)\n", []),             # a star import binds names no one can list
    ("def f(:\n", []),                           # does not compile: nothing to say
    ("print(__name__, __file__)\n", []),
])
def test_undefined_names_are_found_statically(code, names):
    from steptrace.benchmark._missing import undefined_names
    assert undefined_names(code) == names


def test_the_listed_names_are_capped():
    from steptrace.benchmark._missing import missing_feedback
    code = "def f():\n    return " + " + ".join(f"n{i:02}" for i in range(25)) + "\n"
    line, = missing_feedback(code, [None, "No module named 'a.b'", "No module named 'a.b'"])[:1]
    assert line.startswith("Names the program uses but never defines or imports: `n00`, ")
    assert "`n19` and 5 more (its project" in line
    assert missing_feedback("x = 1\n", ["No module named 'a.b'", "No module named 'c'"]) == [
        "Modules the guest does not have: `a.b`, `c` (put what the program needs from "
        "them into the program)."]
    # the names the missing modules leave unbound: every import from them, submodules too
    code = ("import a.b.c\nimport cc\nfrom c.d import e as f, g\nfrom a.bb import h\n"
            "from . import rel\n")
    assert missing_feedback(code, ["No module named 'a.b'", "No module named 'c'"])[1:] == [
        "Names the program imports from them: `a.b.c`, `e` from `c.d`, `g` from `c.d`."]
