"""The judges of the whole-run kinds, with right, wrong and near-miss answers: `stdout`
(one definition of the comparison, shared with a script's expected output: line by
line, trailing whitespace and trailing empty lines aside), `error` scored by type and by
message apart and together (EXE), `output_type` and `instruction_steps`; answers that try
to game a judge; and the whole path on a real store: trace, tasks, `predict` against a
stub server on 127.0.0.1, `score`, the `scores` table's part columns and the summary's
"error parts" table."""

from __future__ import annotations

import json

import duckdb
import pytest

from steptrace.corpus._formats import stdout_matches
from steptrace.scoring._judges import ERROR, judge_error_parts
from steptrace.scoring._verdicts import ScoreOptions, judge
from steptrace.store._store import SCHEMA_VERSION
from steptrace.tasks import extract_answer
from helpers.openai_stub import answer as reply
from helpers.predict import MODEL, invoke, predict_with_stub
from helpers.programs import KIND_RECORDS

OPTIONS = ScoreOptions()
STARS = "*\n *\n  *\n"


def task(kind: str, answer: str) -> dict:
    return {"task_id": "t", "kind": kind, "answer": answer, "answer_type": kind}


@pytest.mark.parametrize("predicted, correct", [
    ("*\n *\n  *", True),
    ("*\n *\n  *\n", True),
    ("*\n *\n  *\n\n\n", True),           # empty lines at the end do not count
    ("*   \n *\t\n  *  ", True),           # nor spaces at the end of a line
    ("*\r\n *\r\n  *\r\n", True),          # \r\n ends a line as \n does
    ("*\n*\n*", False),                   # leading spaces count
    (" *\n *\n  *", False),
    ("*\n\n *\n  *", False),              # an empty line in between counts
    ("*\n *\n  *\n.", False),             # an extra line that is not empty
    ("*\n *", False),                     # a line missing
    ("'*\\n *\\n  *\\n'", False),          # the repr of the text is not the text
])
def test_stdout_judge(predicted, correct):
    assert judge(task("stdout", STARS), predicted, OPTIONS) == (correct, None)
    # the one definition: a script's expected output is compared the same way
    assert stdout_matches(predicted, STARS) is correct


@pytest.mark.parametrize("response, extracted, correct", [
    ("[ANSWER]\n*\n *\n  *\n[/ANSWER]", "*\n *\n  *", True),
    ("I think:\n[ANSWER]\n*\n *\n  *\n\n\n\n[/ANSWER]", "*\n *\n  *", True),
    ("[ANSWER]\n```\n*\n *\n  *\n```\n[/ANSWER]", "*\n *\n  *", True),
    ("Output:\n```text\n*\n *\n  *\n```\nDone.", "*\n *\n  *", True),
    ("[ANSWER]\n  *\n *\n  *\n[/ANSWER]", "  *\n *\n  *", False),  # leading spaces kept
    ("[ANSWER]\n\n*\n *\n  *\n[/ANSWER]", "\n*\n *\n  *", False),   # so is a first empty line
    ("[ANSWER]*\n*\n*[/ANSWER]", "*\n*\n*", False),
    ("[ANSWER]\n*\n *\n  *\nextra\n\n[/ANSWER]", "*\n *\n  *\nextra", False),
    ("*\n *\n  *", None, False),          # no block, no fence: not an answer
    ("[ANSWER]\n   \n[/ANSWER]", None, False),
])
def test_stdout_answers_are_extracted_verbatim(response, extracted, correct):
    """Leading whitespace and empty lines at the start are part of a printed text: an
    answer block (or a fence) keeps them; only the line break after the tag goes. A
    response padding its answer with trailing empty lines gains nothing it should not,
    and one indenting every line is wrong."""
    found = extract_answer(response, "stdout")
    assert found == extracted
    assert (found is not None and judge(task("stdout", STARS), found, OPTIONS)[0]) is correct


@pytest.mark.parametrize("answer, predicted, parts", [
    ("ValueError: bad input", "ValueError: bad input", (True, True)),
    ("ValueError: bad input", " ValueError:bad input ", (True, True)),   # spaces around parts
    ("ValueError: bad input", "builtins.ValueError: bad input", (True, True)),
    ("ValueError: bad input", "`ValueError: bad input`", (True, True)),
    ("ValueError: bad input", "ValueError: ", (True, False)),     # the type, no message
    ("ValueError: bad input", "ValueError", (True, False)),
    ("ValueError: bad input", "ValueError: Bad input", (True, False)),  # case counts
    ("ValueError: bad input", "ValueError: bad input.", (True, False)),
    ("ValueError: bad input", "TypeError: bad input", (False, True)),  # the message only
    ("ValueError: bad input", ": bad input", (False, True)),
    ("ValueError: bad input", "Value Error: bad input", (False, True)),  # no identifier
    ("ValueError: bad input", "valueerror: bad input", (False, True)),   # case counts
    ("KeyError: 'a'", "KeyError: a", (True, False)),
    ("KeyError: 'a'", 'KeyError: "a"', (True, False)),
    ("StopIteration", "StopIteration", (True, True)),
    ("StopIteration", "StopIteration: ", (True, True)),
    ("StopIteration", "StopIteration: done", (True, False)),
    ("a.b.OutOfRange: x: y", "OutOfRange: x: y", (True, True)),  # the message's own colon
])
def test_error_is_judged_by_type_and_message_apart_and_together(answer, predicted, parts):
    t = task("error", answer)
    assert judge_error_parts(t, predicted) == parts
    assert judge(t, predicted, OPTIONS) == (parts == (True, True), None)
    assert ERROR.parts is judge_error_parts


@pytest.mark.parametrize("answer, predicted, correct", [
    ("Node", "Node", True),
    ("Node", "__main__.Node", True),
    ("Node", "<class '__main__.Node'>", True),
    ("Node", "`Node`", True),
    ("Node", "node", False),
    ("Node", "Node()", False),
    ("NoneType", "None", False),
    ("NoneType", "NoneType", True),
    ("dict", "Dict", False),
    ("dict", "typing.Dict", False),
])
def test_output_type_judge(answer, predicted, correct):
    assert judge(task("output_type", answer), predicted, OPTIONS) == (correct, None)


@pytest.mark.parametrize("predicted, correct", [
    ("43", True), (" 43 ", True), ("43.0", False), ("42", False), ("True", False),
    ("4_3", True), ("about 43", False)])
def test_instruction_steps_judge(predicted, correct):
    assert judge(task("instruction_steps", "43"), predicted, OPTIONS) == (correct, None)


@pytest.mark.parametrize("kind, answer, response", [
    ("error", "ValueError: bad input",
     "[ANSWER]\nValueError: bad input\nTypeError: bad input\n[/ANSWER]"),
    ("error", "ValueError: bad input", "[ANSWER]ValueError: bad input or TypeError[/ANSWER]"),
    ("error", "ValueError: bad input", "[ANSWER]ValueError|TypeError: bad input[/ANSWER]"),
    ("output_type", "int", "[ANSWER]int or float[/ANSWER]"),
    ("output_type", "int", "[ANSWER]int, float[/ANSWER]"),
    ("output_type", "int", "[ANSWER]<class 'int'> | <class 'float'>[/ANSWER]"),
    ("instruction_steps", "43", "[ANSWER]43 or 44[/ANSWER]"),
    ("instruction_steps", "43", "[ANSWER][43, 44][/ANSWER]"),
    ("stdout", "a\n", "[ANSWER]\na\n[/ANSWER]\nor\n[ANSWER]\nb\n[/ANSWER]"),
    ("stdout", "a\n", "[ANSWER]\na\nb\n[/ANSWER]"),
])
def test_hedged_answers_are_wrong(kind, answer, response):
    """An answer naming two possibilities is no answer: the judges take one value, never
    a choice (the last answer block is the answer, as for every kind)."""
    found = extract_answer(response, kind)
    assert found is not None and judge(task(kind, answer), found, OPTIONS) == (False, None)


# ------------------------------------------------------------------ the whole path
def _replies(t: dict) -> list:
    """Two samples per task: the first right, the second a near miss (or unparseable)."""
    wrong = {
        ("prints", "stdout"): "[ANSWER]\n*\n*\n*\n[/ANSWER]",
        ("script", "stdout"): "total: 6",              # bare text: unparseable
        ("raises", "stdout"): "[ANSWER]\nlooking up\nKeyError: 'a'\n[/ANSWER]",
        ("raises", "error"): "[ANSWER]\nKeyError: a\n[/ANSWER]",
        ("prints", "output_type"): "[ANSWER]Dict[/ANSWER]",
        ("node", "output_type"): "[ANSWER]dict[/ANSWER]",
    }
    right = {
        ("prints", "stdout"): "Each line:\n[ANSWER]\n*\n *\n  *\n\n\n[/ANSWER]",
        ("script", "stdout"): "```\ntotal: 6\n```",
        ("node", "output_type"): "[ANSWER]<class '__main__.Node'>[/ANSWER]",
    }
    key = (t["sample_id"], t["kind"])
    if t["kind"] == "instruction_steps":
        return [reply(f"[ANSWER]{t['answer']}[/ANSWER]"),
                reply(f"[ANSWER]{int(t['answer']) + 1}[/ANSWER]")]
    return [reply(right.get(key, f"[ANSWER]\n{t['answer']}\n[/ANSWER]")), reply(wrong[key])]


def test_scoring_stores_and_sums_the_error_parts(tmp_path):
    records = [r for r in KIND_RECORDS if r["id"] in ("prints", "script", "raises", "node")]
    corpus = tmp_path / "kinds.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    db, tasks_file = tmp_path / "kinds.duckdb", tmp_path / "tasks.jsonl"
    assert invoke("trace", corpus, "--db", db, "--workers", 0).exit_code == 0
    made = invoke("tasks", "--db", db, "--kinds", "output_type,stdout,error,instruction_steps",
                  "--out", tasks_file)
    assert made.exit_code == 0, made.output
    predict_with_stub(tasks_file, db, _replies, samples=2)
    scored = invoke("score", "--tasks", tasks_file, "--db", db, "--k", "1,2", "--workers", 0,
                    "--format", "json")
    assert scored.exit_code == 0, scored.output
    result = json.loads(scored.stdout)
    label = result["by_kind"][0]["label"]
    assert result["error_parts"] == [
        {"model": MODEL, "label": label, "part": part, "tasks": 1, "samples": 2,
         "pass@1": pass1, "pass@2": pass2, "ci_low": pass1, "ci_high": pass1,
         "unparseable": 0.0, "fully solved": solved, "unsolved": 0.0}
        for part, pass1, pass2, solved in (("error.type", 1.0, 1.0, 1.0),
                                           ("error.message", 0.5, 1.0, 0.0),
                                           ("error", 0.5, 1.0, 0.0))]
    con = duckdb.connect(str(db), read_only=True)
    found = con.execute(
        "SELECT r.sample_id, s.kind, s.sample_index, s.parsed, s.correct, s.type_correct, "
        "s.message_correct FROM scores s JOIN tasks t USING (task_id) JOIN runs r "
        "USING (run_id) ORDER BY ALL").fetchall()
    con.close()
    assert found == [
        ("node", "instruction_steps", 0, True, True, None, None),
        ("node", "instruction_steps", 1, True, False, None, None),
        ("node", "output_type", 0, True, True, None, None),
        ("node", "output_type", 1, True, False, None, None),
        ("prints", "instruction_steps", 0, True, True, None, None),
        ("prints", "instruction_steps", 1, True, False, None, None),
        ("prints", "output_type", 0, True, True, None, None),
        ("prints", "output_type", 1, True, False, None, None),
        ("prints", "stdout", 0, True, True, None, None),
        ("prints", "stdout", 1, True, False, None, None),
        ("raises", "error", 0, True, True, True, True),
        ("raises", "error", 1, True, False, True, False),
        ("raises", "instruction_steps", 0, True, True, None, None),
        ("raises", "instruction_steps", 1, True, False, None, None),
        ("raises", "stdout", 0, True, True, None, None),
        ("raises", "stdout", 1, True, False, None, None),
        ("script", "instruction_steps", 0, True, True, None, None),
        ("script", "instruction_steps", 1, True, False, None, None),
        ("script", "stdout", 0, True, True, None, None),
        ("script", "stdout", 1, False, False, None, None)]
    table = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 0,
                   "--table", "error", "--format", "csv")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0] == "model,label,part,tasks,samples,pass@1,pass@5," \
                                           "ci_low,ci_high,unparseable,fully solved,unsolved"
    # the reward service judges with the same extraction and judges
    from steptrace.scoring._reward import judge_answers
    ids = {(t["sample_id"], t["kind"]): t["task_id"]
           for t in map(json.loads, tasks_file.read_text().splitlines())}
    judged = judge_answers(db, [
        {"task_id": ids[("prints", "stdout")], "response": "[ANSWER]\n*\n *\n  *\n\n[/ANSWER]"},
        {"task_id": ids[("prints", "stdout")], "response": "[ANSWER]\n *\n *\n  *\n[/ANSWER]"},
        {"task_id": ids[("raises", "error")], "response": "[ANSWER]KeyError: 'a'[/ANSWER]"},
        {"task_id": ids[("raises", "error")], "answer": "KeyError: "},
        {"task_id": ids[("node", "output_type")], "answer": "__main__.Node"},
        {"task_id": ids[("script", "instruction_steps")], "answer": "52"}], workers=1)
    assert [(r["correct"], r["kind"]) for r in judged] == [
        (True, "stdout"), (False, "stdout"), (True, "error"), (False, "error"),
        (True, "output_type"), (True, "instruction_steps")]


def test_a_schema_5_stores_scores_gain_the_part_columns(tmp_path):
    """The next command that writes adds scores.type_correct and scores.message_correct
    (NULL in the rows scored before) and sets the version to 6; a schema 2 store's scores
    are remade as declared, columns and all (tests/predictions/test_experiments.py)."""
    from steptrace.store._store import connect
    db = tmp_path / "v5.duckdb"
    connect(db).close()
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.execute("CREATE TABLE scores (task_id VARCHAR NOT NULL, model VARCHAR NOT NULL, "
                "label VARCHAR NOT NULL, sample_index INTEGER NOT NULL, kind VARCHAR NOT NULL, "
                "parsed BOOLEAN NOT NULL, correct BOOLEAN NOT NULL, distance DOUBLE, "
                "note VARCHAR, scored_at TIMESTAMP NOT NULL, "
                "PRIMARY KEY (task_id, model, label, sample_index))")
    con.execute("INSERT INTO scores VALUES ('a', 'm', 'l', 0, 'error', true, true, NULL, NULL, "
                "TIMESTAMP '2026-01-01 00:00:00')")
    con.close()
    connect(db).close()
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT value FROM meta").fetchall() == [(str(SCHEMA_VERSION),)]
    assert con.execute("SELECT task_id, correct, type_correct, message_correct FROM scores"
                       ).fetchall() == [("a", True, None, None)]
    con.close()
