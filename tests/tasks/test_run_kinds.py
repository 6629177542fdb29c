"""The whole-run kinds asked of a real store (a real sandbox, a real DuckDB file):
``output_type`` (the type of what the call returns), ``stdout`` (what the run printed),
``error`` (type and message of what a call raises) and ``instruction_steps`` (CRUXEval's
numsteps), with exact answers, and when each is not asked."""

from __future__ import annotations

import json

import duckdb
import pytest

from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tracing._trace import TraceOptions, trace_corpus
from helpers.programs import KIND_RECORDS

NEW_KINDS = ("output", "output_type", "stdout", "error", "instruction_steps")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run_kinds")
    corpus = tmp / "kinds.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in KIND_RECORDS), encoding="utf-8")
    db = tmp / "kinds.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert dict(summary.by_status) == {"ok": 5, "exception": 1}
    return db


def _tasks(db, tmp_path, kinds=NEW_KINDS, style="direct") -> list[dict]:
    out = tmp_path / f"tasks-{style}.jsonl"
    generate_tasks(db, TaskOptions(kinds=kinds, per_run=1000, out=out, prompt_style=style))
    return [json.loads(line) for line in out.read_text().splitlines()]


def _answers(tasks: list[dict]) -> dict:
    return {(t["sample_id"], t["kind"]): (t["answer"], t["answer_type"], t["value_type"],
                                          t["line"], t["var"])
            for t in tasks}


def test_each_whole_run_kind_has_its_exact_answer(store, tmp_path):
    found = _answers(_tasks(store, tmp_path))
    assert found == {
        ("prints", "output"): ("{'n': 3}", "repr", "dict", None, None),
        ("prints", "output_type"): ("dict", "type", "dict", None, None),
        ("prints", "stdout"): ("*\n *\n  *\n", "stdout", None, None, None),
        ("prints", "instruction_steps"): ("43", "int", None, None, None),
        ("script", "stdout"): ("total: 6\n", "stdout", None, None, None),
        ("script", "instruction_steps"): ("52", "int", None, None, None),
        ("raises", "stdout"): ("looking up\n", "stdout", None, None, None),
        ("raises", "error"): ("KeyError: 'a'", "error", None, None, None),
        ("raises", "instruction_steps"): ("7", "int", None, None, None),
        ("node", "output"): ("Node(v=7)", "repr", "Node", None, None),
        ("node", "output_type"): ("Node", "type", "Node", None, None),
        ("node", "instruction_steps"): ("8", "int", None, None, None),
        ("quiet", "output"): ("3.5", "repr", "float", None, None),
        ("quiet", "output_type"): ("float", "type", "float", None, None),
        ("quiet", "instruction_steps"): ("3", "int", None, None, None),
        ("blank", "output"): ("0", "repr", "int", None, None),
        ("blank", "output_type"): ("int", "type", "int", None, None),
        ("blank", "instruction_steps"): ("9", "int", None, None, None),
    }
    # not asked: a script's or a raising call's return type, a stdout that is empty
    # (quiet, node) or only blank lines (blank); instruction_steps is the store's
    con = duckdb.connect(str(store), read_only=True)
    stored = dict(con.execute("SELECT sample_id, instruction_steps FROM runs").fetchall())
    con.close()
    assert {s: int(a[0]) for (s, k), a in found.items() if k == "instruction_steps"} == stored


def test_prompts_ask_each_question_in_every_style(store, tmp_path):
    """direct and cot templates for each new kind; cruxeval has none (their answers never
    come as an assertion) and is refused with one line."""
    kinds = ("output_type", "stdout", "instruction_steps")
    direct = {(t["sample_id"], t["kind"]): t["prompt"] for t in _tasks(store, tmp_path, kinds)}
    cot = {(t["sample_id"], t["kind"]): t["prompt"]
           for t in _tasks(store, tmp_path, kinds, "cot")}
    assert direct.keys() == cot.keys()
    script = direct[("script", "stdout")]
    assert ("It is run as a script, with this standard input:\n\n```\n4\n```\n\n"
            "What does the program print to its standard output during this run?\n\n") in script
    assert script.endswith("[ANSWER]\nthe printed text\n[/ANSWER]\n")
    assert "It is called as `make(7)`.\n\nWhat is the type of the value the call returns?" \
        in direct[("node", "output_type")]
    assert "How many bytecode instructions does the call execute, as CPython 3.14 runs it? " \
           "Count every instruction executed in `stars`" in direct[("prints", "instruction_steps")]
    assert all("Reason step by step first" in p for p in cot.values())
    assert not any("Reason step by step" in p for p in direct.values())
    from steptrace.errors import InputError
    for kind in kinds:
        with pytest.raises(InputError, match=f"no cruxeval prompt template for kind '{kind}'"):
            _tasks(store, tmp_path, (kind,), "cruxeval")


def test_a_stdout_the_host_cut_is_not_asked(store, tmp_path):
    """A run whose note says the host cut its stdout (the result schema's cap) has no
    stdout question; another cut (of the exception message) does not stop it."""
    copy = tmp_path / "cut.duckdb"
    copy.write_bytes(store.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("UPDATE runs SET note = 'cut to the host''s caps: stdout (70,000 "
                "characters) to 65,536' WHERE sample_id = 'prints'")
    con.execute("UPDATE runs SET note = 'cut to the host''s caps: exception_message "
                "(20,000 characters) to 10,000' WHERE sample_id = 'raises'")
    con.close()
    stdout = {t["sample_id"] for t in _tasks(copy, tmp_path, ("stdout",))}
    assert stdout == {"script", "raises"}


def test_all_kinds_include_the_new_ones(store, tmp_path):
    summary = generate_tasks(store, TaskOptions(kinds="all", per_run=1000))
    assert {k: summary.by_kind[k] for k in ("output_type", "stdout", "instruction_steps",
                                            "error")} == {
        "output_type": 4, "stdout": 3, "instruction_steps": 6, "error": 1}


@pytest.mark.parametrize("stdout, asked", [
    ("*\n *\n", True),
    ("", False), ("  \n\n\t\n", False),                     # nothing to write
    ("x" * 2_001, False), ("x" * 2_000, True),                # MAX_STDOUT_ANSWER
    ("<object object at 0x7f3a2c>\n", False),               # an address differs per run
    ("done [/ANSWER] now\n", False), ("[answer]\n", False),  # would end or open a block
    ("```\ncode\n```\n", False), ("  ```py\n", False),       # would be unwrapped as a fence
    ("a ``` b\n", True),                                     # not a fence line
])
def test_which_printed_texts_are_asked(stdout, asked):
    """A program controls what it prints: a text an answer could not carry back verbatim
    is not asked (a hostile program printing `[/ANSWER]` or a fence cannot make an
    unanswerable or misjudged task)."""
    from steptrace.tasks._candidates import build_stdout, run_facts
    from steptrace.tasks._runs import RunData
    run = RunData(run_id=1, sample_id="s", run_key="k", status="ok", input="", output="0",
                  output_type="int", output_truncated=False, exception_type=None,
                  line_steps=0, code="", entry="f", distinct_lines=0, branch_count=None,
                  agrees=None, stdout=stdout)
    found = build_stdout(run_facts(run, None, TaskOptions()))
    assert [(c.answer, c.answer_type) for c in found] == ([(stdout, "stdout")] if asked else [])
