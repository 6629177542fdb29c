"""A question's answer is what its prompt asks for: every task of every kind, in every
prompt style, re-derived from its prompt's text and the program alone, no store
(tests/helpers/rederive.py): the program run as the prompt says in a plain CPython 3.14
of the tests' own (tests/helpers/native.py), the answer worked out by the rules the
prompt states (values written by its ``$values`` rule, lines as CPython 3.14 reports
them, ``type(e).__name__`` and ``str(e)``), for a class-heavy corpus and for CRUXEval's
800 programs; and what the prompts say where an answer is a value, a literal, an error."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from steptrace.tasks._candidates import python_literal
from steptrace.tasks._kinds import KINDS
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tasks._templates import VALUES
from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.class_corpus import records
from helpers.native import Native
from helpers.programs import KIND_RECORDS
from helpers.rederive import rederive

STYLES = {"direct": KINDS, "cot": KINDS, "cruxeval": ("output", "input")}


@pytest.fixture(scope="module")
def native():
    runner = Native()
    yield runner
    runner.close()


def tasks_of(db: Path, tmp: Path, per_run: int = 3) -> list[dict]:
    """Tasks of every kind in every style (the cruxeval style has output and input)."""
    found = []
    for style, kinds in STYLES.items():
        out = tmp / f"{style}.jsonl"
        generate_tasks(db, TaskOptions(kinds=kinds, per_run=per_run, prompt_style=style,
                                       out=out))
        found += [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return found


@pytest.fixture(scope="module")
def class_tasks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("classes")
    corpus = tmp / "classes.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records()), encoding="utf-8")
    db = tmp / "classes.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=2))
    assert dict(summary.by_status) == {"ok": 28, "exception": 1}
    analysed = analyse_store(db, AnalysisOptions(workers=2, determinism=True))
    assert (analysed.analysed, analysed.determinism_checked) == (29, 29)
    return tasks_of(db, tmp)


@pytest.mark.slow
def test_class_corpus_answers_follow_from_their_prompts(class_tasks, native):
    checked = rederive(class_tasks, native)
    assert checked == Counter(t["kind"] for t in class_tasks)
    assert set(checked) == set(KINDS)
    by_style = Counter((t["prompt_style"], t["kind"]) for t in class_tasks)
    assert {kind for style, kind in by_style if style == "cot"} == set(KINDS)
    # the value rule is used: instances written from their attributes, in every corner
    answers = {t["answer"] for t in class_tasks if t["kind"] in ("output", "state")}
    assert {"[Point(a=2, __hidden=4, y=6), Point(a=0, __hidden=0, x=1)]",
            "Outer(items={'a': Outer.Inner(k=4), 'b': "
            "f.<locals>.Local(v=3)})", "Account(owner='ann', balance=1)"} <= answers
    assert any("Node(...)" in answer for answer in answers)


def test_cruxeval_answers_follow_from_their_prompts(cruxeval_db, native, tmp_path):
    db = tmp_path / "crux.duckdb"
    shutil.copyfile(cruxeval_db, db)
    tasks = tasks_of(db, tmp_path)
    checked = rederive(tasks, native)
    assert checked == Counter(t["kind"] for t in tasks)
    # every kind a CRUXEval run allows (none raises or prints); the one run whose values
    # depend on the hash seed (analyse --determinism) is asked nothing
    assert set(checked) == set(KINDS) - {"error", "stdout"}
    assert {t["sample_id"] for t in tasks if t["kind"] == "steps"} == {
        f"sample_{i}" for i in range(800)} - {"sample_736"}
    assert sum(checked.values()) == len(tasks) > 25_000


# ------------------------------------------------------------------ what the prompts say
@pytest.fixture(scope="module")
def kinds_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kinds")
    corpus = tmp / "kinds.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in KIND_RECORDS), encoding="utf-8")
    db = tmp / "kinds.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0))
    return tmp, db


def prompts(db: Path, tmp: Path, style: str, kinds) -> dict[tuple[str, str], dict]:
    out = tmp / f"{style}.jsonl"
    generate_tasks(db, TaskOptions(kinds=kinds, per_run=5, prompt_style=style, out=out))
    return {(t["sample_id"], t["kind"]): t
            for t in map(json.loads, out.read_text(encoding="utf-8").splitlines())}


@pytest.mark.slow
def test_whole_run_answers_follow_from_their_prompts(kinds_store, native, tmp_path):
    """The whole-run kinds of calls that print, raise or return an instance, and of a
    script with its standard input, in every style."""
    _, db = kinds_store
    tasks = tasks_of(db, tmp_path, per_run=5)
    checked = rederive(tasks, native)
    assert checked == Counter(t["kind"] for t in tasks)
    assert {"stdout", "error", "output_type", "instruction_steps", "steps",
            "trace"} <= set(checked)
    assert {t["sample_id"] for t in tasks if t["kind"] == "stdout"} == {
        "prints", "script", "raises"}


def test_value_prompts_state_the_rule(kinds_store):
    """Output, state and state_any prompts say how values are written; the answer for an
    instance is written by that rule (``make(7)`` returns ``Node(v=7)``)."""
    tmp, db = kinds_store
    for style in ("direct", "cot"):
        found = prompts(db, tmp, style, ("output", "state", "state_any", "steps"))
        node = found[("node", "output")]
        assert node["answer"] == "Node(v=7)"
        assert f"Answer with the return value (for example 'abc', [1, 2] or None). {VALUES}" \
               in node["prompt"]
        assert all(VALUES in t["prompt"] for (_, kind), t in found.items() if kind != "steps")
        assert VALUES not in found[("node", "steps")]["prompt"]
    assert VALUES.startswith("Values are written as Python's repr() writes them, with these "
                             "exceptions: an instance of a class written in Python (the "
                             "program's or a library's), whatever its `__repr__`, is written "
                             "`Name(attr=value, ...)`")


def test_literal_prompts_ask_only_for_literals(kinds_store):
    """The cruxeval style asks for a literal making ``assert CALL == ??`` pass, and input
    prompts show the output as a value an answer's call is compared with: neither is
    asked where the output is no literal (an instance); the direct output question is."""
    tmp, db = kinds_store
    crux = prompts(db, tmp, "cruxeval", ("output", "input"))
    assert sorted(crux) == [("blank", "input"), ("blank", "output"), ("prints", "input"),
                            ("prints", "output"), ("quiet", "input"), ("quiet", "output")]
    direct = prompts(db, tmp, "direct", ("output", "input"))
    assert ("node", "output") in direct and ("node", "input") not in direct


@pytest.mark.parametrize("text, literal", [
    ("[1, (2, 'a'), {3: None}]", True), ("-1.5e3", True), ("{1, 2}", True), ("b'x'", True),
    ("set()", False), ("frozenset({1})", False), ("Node(v=7)", False), ("nan", False),
    ("inf", False), ("[1, 2", False), ("", False), (None, False), ("(1,) + (2,)", False),
])
def test_python_literal(text, literal):
    assert python_literal(text) is literal


def test_error_prompts_say_type_name_and_str(kinds_store):
    tmp, db = kinds_store
    found = prompts(db, tmp, "direct", ("error", "exception"))
    error = found[("raises", "error")]
    assert error["answer"] == "KeyError: 'a'"
    assert ("Answer with the exception's type name (`type(e).__name__`), a colon, a space "
            "and its message as `str(e)` gives it") in error["prompt"]
    assert ("Answer with the exception's type name (`type(e).__name__`, for example "
            "ValueError)") in found[("raises", "exception")]["prompt"]


def test_runs_that_depend_on_the_hash_seed_are_not_asked(kinds_store, tmp_path):
    """A run analyse --determinism found nondeterministic gets no task; unchecked and
    deterministic runs do."""
    tmp, db = kinds_store
    copy = tmp_path / "k.duckdb"
    shutil.copyfile(db, copy)
    analyse_store(copy, AnalysisOptions(workers=0, determinism=True))
    con = duckdb.connect(str(copy))
    con.execute("UPDATE analyses SET deterministic = false WHERE run_id = 1")
    con.execute("UPDATE analyses SET deterministic = NULL WHERE run_id = 2")
    con.close()
    summary = generate_tasks(copy, TaskOptions(kinds=("steps",)))
    assert sorted(summary.tasks["sample_id"].to_list()) == [
        "blank", "node", "quiet", "raises", "script"]
