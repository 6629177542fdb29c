"""Input answers that build their own behaviour are wrong, by ``score`` and by the reward
service alike.

The program imports modules that make classes (abc, types, dataclasses, enum,
collections, functools, typing), so an answer made of literals and the program's names
can still call a class factory, and build an object equal to anything. The host's text
check lets such answers through; the guest refuses the values (tracer/answer_values.py):
every factory kind here is ``unsafe_input``, while answers whose values are plain or the
program's stay right."""

from __future__ import annotations

import json

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.sandbox._limits import Limits
from steptrace.scoring._reward import RewardJudge, RewardLimits
from helpers.openai_stub import answer
from helpers.predict import predict_with_stub

PROGRAM = """\
import abc, types, dataclasses, enum, collections, functools, typing
def make(eq):
    return type('X', (), {'__eq__': eq, '__hash__': None})()
def f(s):
    if callable(s):
        s = s()
    return s
"""
TROJAN = ("{'__eq__': lambda s, o: True, '__ne__': lambda s, o: False, "
          "'__getattr__': lambda s, n: s, '__hash__': None}")
# answers whose value equals 'abc' only because the answer made it so
FORGED = {
    "abc.ABCMeta": f"abc.ABCMeta('T', (), {TROJAN})()",
    "types.new_class": f"types.new_class('T', (), {{}}, lambda ns: ns.update({TROJAN}))()",
    "dataclasses.make_dataclass": f"dataclasses.make_dataclass('T', [], eq=False, "
                                  f"namespace={TROJAN})()",
    "functools.partial of a factory": f"functools.partial(abc.ABCMeta, 'T', ())({TROJAN})()",
    "enum.Enum": "enum.Enum('T', {'A': 'abc'}, type=str).A",
    "typing.NamedTuple": f"typing.NamedTuple('T', [('a', str)])('abc')",
    "collections.namedtuple": "collections.namedtuple('T', 'a')('abc')",
    "a builtin as __eq__": "abc.ABCMeta('T', (), {'__eq__': slice, '__hash__': None})()",
    "the program's own factory": "make(lambda s, o: True)",
    "the program's factory, a builtin": "make(slice)",
    "made when the program calls it": f"lambda: abc.ABCMeta('T', (), {TROJAN})()",
    "made by the program, called later": "lambda: make(slice)",
    "partial made later": f"functools.partial(lambda: abc.ABCMeta('T', (), {TROJAN})())",
}
# answers whose values are plain: right or wrong on their merits
HONEST = {"'abc'": True, "'ab' + 'c'": True, "(lambda: 'abc')": True,
          "functools.partial(str, 'abc')": True, "enum.Enum('E', {'A': 'abc'}).A.value": True,
          "types.SimpleNamespace(x=1)": False, "'abd'": False}
TIMEOUT_S = 3.0


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A store with the program's input task, every answer predicted and scored."""
    tmp = tmp_path_factory.mktemp("forged")
    corpus, db, tasks_file = tmp / "corpus.jsonl", tmp / "f.duckdb", tmp / "tasks.jsonl"
    corpus.write_text(json.dumps({"id": "id", "code": PROGRAM, "input": "'abc'"}) + "\n")
    assert invoke("trace", corpus, "--db", db, "--workers", 0).exit_code == 0
    made = invoke("tasks", "--db", db, "--kinds", "input", "--out", tasks_file)
    assert made.exit_code == 0, made.output
    answers = list(FORGED.values()) + list(HONEST)
    tasks = predict_with_stub(tasks_file, db,
                              lambda task: [answer(f"[ANSWER]\n{a}\n[/ANSWER]") for a in answers],
                              samples=len(answers))
    assert [t["kind"] for t in tasks] == ["input"]
    done = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 2, "--timeout",
                  TIMEOUT_S, "--format", "json")
    assert done.exit_code == 0, done.output
    return db, tasks[0], answers


def test_score_judges_every_factory_kind_wrong(scored):
    db, _task, answers = scored
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT p.answer, s.correct, s.note FROM scores s JOIN predictions p "
                           "USING (task_id, model, label, sample_index)").fetchall()
    verdicts = {a: (correct, note) for a, correct, note in rows}
    assert set(verdicts) == set(answers)
    for name, forged in FORGED.items():
        correct, note = verdicts[forged]
        assert correct is False, name
        assert note.startswith("unsafe_input: "), (name, note)
    assert {a: verdicts[a][0] for a in HONEST} == HONEST


def test_the_reward_service_judges_them_as_score(scored):
    db, task, answers = scored
    limits = RewardLimits(sandbox=Limits(timeout_s=TIMEOUT_S))
    with RewardJudge(db, workers=2, limits=limits) as judge:
        results = judge.judge_batch([{"task_id": task["task_id"], "answer": a} for a in answers])
    got = dict(zip(answers, results))
    for name, forged in FORGED.items():
        assert (got[forged]["correct"], got[forged]["status"]) == (False, "unsafe_input"), name
    assert {a: got[a]["correct"] for a in HONEST} == HONEST
    assert got["'abd'"]["status"] == "ok"
