"""Questions about objects (engine/tasks/_runs.py, _candidates.py): attribute paths in the
state after a line, the ``type`` and ``alias`` kinds, their templates and judges, on runs
written out row by row (the store's rows for these programs are tested against the real
sandbox in tests/tasks/test_tasks_objects.py)."""

from __future__ import annotations

import json

from steptrace.scoring import _judges as judges
from steptrace.scoring._verdicts import ScoreOptions
from steptrace.tasks._candidates import build_alias, build_state, build_type, run_facts
from steptrace.tasks._program import program_info
from steptrace.tasks._runs import RunData, attribute_paths, replay
from steptrace.tasks._tasks import TaskOptions
from steptrace.tasks._templates import load_templates, render

CODE = """class Acc:
    def __init__(self):
        self.total = 0
    def add(self, x):
        self.total += x
        return self

def f(xs):
    a = Acc()
    b = a
    for x in xs:
        b.add(x)
    return a.total
"""


def _run() -> RunData:
    """f([1]) as the tracer records it (steps; states with object ids; attribute rows
    of Acc #1, seen at each step of a frame that reaches it)."""
    steps = [
        (0, "call", "f", 8, 0, 0),
        (1, "line", "f", 9, 0, 0),
        (2, "call", "Acc.__init__", 2, 1, 1),
        (3, "line", "Acc.__init__", 3, 1, 1),
        (4, "return", "Acc.__init__", 3, 1, 1),
        (5, "line", "f", 10, 0, 0),
        (6, "line", "f", 11, 0, 0),
        (7, "line", "f", 12, 0, 0),
        (8, "call", "Acc.add", 4, 1, 2),
        (9, "line", "Acc.add", 5, 1, 2),
        (10, "line", "Acc.add", 6, 1, 2),
        (11, "return", "Acc.add", 6, 1, 2),
        (12, "line", "f", 11, 0, 0),
        (13, "line", "f", 13, 0, 0),
        (14, "return", "f", 13, 0, 0),
    ]
    states = [
        (0, "xs", "[1]", "list", False, 1),
        (2, "self", "Acc()", "Acc", False, 2),
        (4, "self", "Acc(total=0)", "Acc", False, 2),
        (4, "<return>", "None", "NoneType", False, None),
        (5, "a", "Acc(total=0)", "Acc", False, 2),
        (6, "b", "Acc(total=0)", "Acc", False, 2),
        (7, "x", "1", "int", False, None),
        (8, "self", "Acc(total=0)", "Acc", False, 2),
        (8, "x", "1", "int", False, None),
        (10, "self", "Acc(total=1)", "Acc", False, 2),
        (11, "<return>", "Acc(total=1)", "Acc", False, 2),
        (12, "a", "Acc(total=1)", "Acc", False, 2),
        (12, "b", "Acc(total=1)", "Acc", False, 2),
        (14, "<return>", "1", "int", False, None),
    ]
    attributes = [
        (4, 2, "total", "0", "int", False, None),
        (10, 2, "total", "1", "int", False, None),
    ]
    return RunData(1, "s1", "key", "ok", "[1]", "1", "int", False, None, 7, CODE, "f",
                   7, None, None, steps=steps, states=states, attributes=attributes)


def test_replay_gives_attribute_paths_after_a_line():
    execs = {(e.func, e.line, e.k): e for e in replay(_run())}
    after_init = execs[("Acc.__init__", 3, 1)].after
    assert after_init == {"self": ("Acc(total=0)", "Acc", False, 2),
                          "self.total": ("0", "int", False, None),
                          "<return>": ("None", "NoneType", False, None)}
    assert execs[("Acc.__init__", 3, 1)].changed == {"self", "<return>", "self.total"}
    after_add = execs[("Acc.add", 5, 1)].after
    assert after_add["self.total"] == ("1", "int", False, None)
    assert execs[("Acc.add", 5, 1)].changed == {"self", "self.total"}
    # f's line 10 (b = a): both names, one object; the attribute through either name
    after_alias = execs[("f", 10, 1)].after
    assert after_alias["a.total"] == ("0", "int", False, None)
    assert after_alias["b.total"] == ("0", "int", False, None)
    assert after_alias["a"][3] == after_alias["b"][3] == 2


def test_attribute_paths_follow_references_and_stop_at_cycles():
    heap = {1: {"val": ("1", "int", False, None), "next": ("Node(...)", "Node", False, 2)},
            2: {"val": ("2", "int", False, None), "next": ("Node(...)", "Node", False, 1)}}
    paths, changed = attribute_paths({"head": ("Node(...)", "Node", False, 1),
                                      "n": ("3", "int", False, None)}, heap, {(2, "val")})
    assert list(paths) == ["head.val", "head.next", "head.next.val", "head.next.next"]
    # an attribute holding a program instance: its text is the rendering from when the
    # reference was made (the instance's own changes are its own rows), so it is marked
    # cut and never asked as a value; its type and object id stand
    assert paths["head.next.next"] == ("Node(...)", "Node", True, 1)
    assert paths["head.next"] == ("Node(...)", "Node", True, 2)
    assert paths["head.val"] == ("1", "int", False, None)
    assert changed == ["head.next.val"]


def _facts():
    run = _run()
    return run_facts(run, program_info(run.code, run.entry), TaskOptions())


def test_state_questions_name_attribute_paths():
    found = {(c.line, c.var, c.occurrence): c.answer for c in build_state(_facts())}
    assert found[(5, "self.total", 1)] == "1"
    assert found[(3, "self.total", 1)] == "0"
    assert found[(10, "b.total", 1)] == "0"


def test_type_and_alias_questions():
    types = {(c.line, c.var, c.occurrence): (c.answer, c.score) for c in build_type(_facts())}
    assert types[(10, "b", 1)] == ("Acc", 1)       # a program class, changed at that step
    assert types[(5, "self.total", 1)] == ("int", -1)  # never asked: an int every time
    alias = {(c.line, c.var, dict(c.question)["other"], c.occurrence): (c.answer, c.score)
             for c in build_alias(_facts())}
    assert alias[(10, "a", "b", 1)] == ("true", 3)  # same object, and b just changed
    assert alias[(11, "a", "b", 1)] == ("true", 2)
    assert not any(var == "xs" or other == "xs" for _, var, other, _ in alias)  # differ
    assert not any(var.endswith(".total") for _, var, _, _ in alias)  # ints are not objects


def test_prompts_name_an_attribute_through_its_local():
    facts = _facts()
    candidate = next(c for c in build_state(facts) if c.var == "self.total" and c.line == 5)
    text = render(load_templates(["state"], "direct")["state"], facts, candidate)
    assert ("What is the value of `self.total` (where `self` is the local variable of "
            "`Acc.add`) right after the 1st execution of line 5") in text
    local = next(c for c in build_state(facts) if c.var == "x" and c.line == 11)
    assert "the local variable `x` of `f` right after" in render(
        load_templates(["state"], "direct")["state"], facts, local)
    alias = next(c for c in build_alias(facts) if c.line == 10)
    text = render(load_templates(["alias"], "cot")["alias"], facts, alias)
    assert "do `a` and `b` refer to the same object (is `a is b` true)?" in text


def test_type_judge_accepts_the_ways_a_type_is_written():
    task = {"answer": "Acc", "answer_type": "type"}
    options = ScoreOptions()
    for said, right in (("Acc", True), ("`Acc`", True), ("<class '__main__.Acc'>", True),
                        ("__main__.Acc", True), ("acc", False), ("Acc()", False),
                        ("int", False), ("", False)):
        assert judges.TYPE(task, said, options) == (right, None), said
    assert judges.TYPE({"answer": "int"}, "builtins.int", options) == (True, None)
    assert judges.TRUTH({"answer": json.dumps(True)}, "yes", options) == (True, None)
