"""The task-kind registry (engine/tasks/_kinds.py): one TaskKind per kind holds its
question builder, what the builder reads, its templates' placeholders, how its answer
comes in an assertion and its judge; tasks, answer extraction and scoring read it
instead of dispatching on kind names. And the one definition of a program's statements
(engine/corpus/_statements.py) that the question lines and the features share."""

from __future__ import annotations

import pytest

from steptrace.corpus import statement_lines
from steptrace.corpus._statements import parse_program, statements
from steptrace.scoring import _judges as judges
from steptrace.scoring._verdicts import ScoreError, ScoreOptions, judge
from steptrace.tasks import KINDS, TASK_KINDS, extract_answer, parse_kinds, task_kind
from steptrace.tasks._kinds import tables_read
from steptrace.tasks._program import program_info
from steptrace.tasks._templates import STYLES, bundled_template_dir, load_templates

STEPS, STATES, BRANCHES, ATTRIBUTES = "steps", "states", "branches", "attributes"
# name: (needs the program's ast, detail tables read, assertion part, judge)
REGISTRY = {
    "output": (False, set(), "value", judges.VALUE),
    "input": (False, set(), "args", judges.RUN_IN_SANDBOX),
    "state": (True, {STEPS, STATES, ATTRIBUTES}, None, judges.STATE),
    "state_any": (True, {STEPS, STATES, ATTRIBUTES}, None, judges.VALUE_SET),
    "next_line": (True, {STEPS}, None, judges.LINE),
    "next_line_any": (True, {STEPS}, None, judges.LINE_SET),
    "coverage": (True, {STEPS}, None, judges.TRUTH),
    "line_count": (True, {STEPS}, None, judges.COUNT),
    "branch": (True, {BRANCHES}, None, judges.TRUTH),
    "steps": (False, set(), None, judges.COUNT),
    "trace": (False, {STEPS}, None, judges.TRACE),
    "exception": (False, set(), None, judges.EXCEPTION),
    "error": (False, set(), None, judges.ERROR),
    "type": (True, {STEPS, STATES, ATTRIBUTES}, None, judges.TYPE),
    "alias": (True, {STEPS, STATES, ATTRIBUTES}, None, judges.TRUTH),
    "output_type": (False, set(), None, judges.TYPE),
    "stdout": (False, set(), None, judges.STDOUT),
    "instruction_steps": (False, set(), None, judges.COUNT),
}


def test_one_registered_kind_per_kind_in_order():
    assert KINDS == tuple(REGISTRY) == tuple(TASK_KINDS)
    for name, (needs_ast, reads, assertion, judged_by) in REGISTRY.items():
        kind = task_kind(name)
        assert kind is TASK_KINDS[name] and kind.name == name
        assert (kind.needs_ast, set(kind.reads), kind.assertion, kind.judge) == (
            needs_ast, reads, assertion, judged_by), name
        assert kind.build.__name__ == f"build_{name}"
    assert task_kind("nope") is None
    assert [k for k in KINDS if TASK_KINDS[k].verbatim] == ["stdout"]
    assert [k for k in KINDS if TASK_KINDS[k].judge.parts is not None] == ["error"]
    assert judges.TRACE.unparsed_distance == 1.0
    assert [k for k in KINDS if TASK_KINDS[k].judge.unparsed_distance is not None] == ["trace"]


def test_the_tables_a_set_of_kinds_reads():
    assert tables_read(["output", "steps"]) == frozenset()
    assert tables_read(["next_line", "trace"]) == {STEPS}
    assert tables_read(parse_kinds("state,branch")) == {STEPS, STATES, ATTRIBUTES, BRANCHES}
    assert parse_kinds("trace, output,trace") == ("output", "trace")


def test_every_bundled_template_fits_its_kinds_placeholders():
    """Every kind has direct and cot templates; cruxeval exists for output and input."""
    for style in ("direct", "cot"):
        assert set(load_templates(KINDS, style)) == set(KINDS)
    assert set(load_templates(("output", "input"), "cruxeval")) == {"output", "input"}
    shipped = {path.name for path in bundled_template_dir().glob("*.txt")}
    assert shipped == {f"{k}.{s}.txt" for k in KINDS for s in ("direct", "cot")} | {
        "output.cruxeval.txt", "input.cruxeval.txt"}
    assert STYLES == ("direct", "cot", "cruxeval")


@pytest.mark.parametrize("kind, found", [
    ("output", "[3]"), ("input", "1, 'a'"), ("state", None), ("exception", None),
    ("error", None), ("output_type", None), ("stdout", None), ("instruction_steps", None),
    ("nope", None)])
def test_answer_extraction_reads_the_assertion_part_from_the_kind(kind, found):
    """Only a kind with an assertion part takes its answer from ``assert f(...) == ...``;
    for the others (and a name that is no kind) the assertion is no answer at all."""
    assert extract_answer("Done.\nassert f(1, 'a') == [3]", kind) == found


def test_scoring_judges_by_the_registered_judge():
    options = ScoreOptions()
    task = {"task_id": "t", "kind": "line_count", "answer": "3", "answer_type": "int"}
    assert judge(task, "3", options) == TASK_KINDS["line_count"].judge(task, "3", options) \
        == (True, None)
    assert judge(dict(task, kind="steps"), "3.0", options) == (False, None)
    assert judge(dict(task, kind="trace", answer="[[2, 0]]"), "[[2, 0], [3, 0]]",
                 options) == (False, 0.5)
    for kind in ("input", "nope"):
        with pytest.raises(ScoreError, match=f"task t: unknown kind '{kind}'"):
            judge(dict(task, kind=kind), "3", options)


NESTED = """\
import math


def f(xs):
    '''doc'''
    global G
    total = 0
    for x in xs:
        if x:
            total += helper(x)
    try:
        y = math.sqrt(total)
    except ValueError:
        y = 0
    class C:
        z = 1
        def m(self):
            return self.z
    return (y,
            total)


def helper(v):
    match v:
        case 1:
            return 10
        case _:
            return v
"""


def test_statements_are_one_walk_for_tasks_and_features():
    """Lines, scopes and whether a statement always runs when the entry is called."""
    found = [(s.line, s.scope, s.conditional) for s in statements(parse_program(NESTED), "f")]
    assert found == [
        (7, "f", False), (8, "f", False), (9, "f", True), (10, "f", True),
        (11, "f", False), (12, "f", False), (13, "f", True), (14, "f", True),
        (15, "f", False), (16, "f.<locals>.C", True), (17, "f.<locals>.C", True),
        (18, "f.<locals>.C.m", True), (19, "f", False),
        (24, "helper", True), (25, "helper", True), (26, "helper", True),
        (27, "helper", True), (28, "helper", True)]
    assert statement_lines(NESTED) == [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
                                       24, 25, 26, 27, 28]
    info = program_info(NESTED, "f")
    # question lines: the statements whose own text is one line (the return spans two)
    assert info.question_lines == set(statement_lines(NESTED)) - {19}
    # a class body is a scope of its own: only the entry's own body is unconditional
    assert info.unconditional == {7, 8, 11, 12, 15}
    assert info.owners[18] == "f.<locals>.C.m" and info.owners[25] == "helper"
    assert info.return_lines == {18, 19, 26, 28}


def test_a_program_the_host_cannot_parse_has_no_statements():
    """Too deeply nested for the host's parser (MemoryError in ast.parse) is the same as a
    syntax error: no statement lines, no ast facts, so no question about a line."""
    deep = "def f(x):\n    return " + "-" * 100_000 + "x\n"
    for code in (deep, "def f(:\n    pass\n"):
        assert parse_program(code) is None
        assert statement_lines(code) is None
        assert program_info(code, "f") is None
