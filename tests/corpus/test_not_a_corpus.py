"""A file that is not a corpus (a tasks file given to trace by mistake) stops the trace
after a few bad records with one line and a hint, and leaves no store; bad-record
warnings are capped; a record reusing another program's id is a bad record, counted and
not stored beside the first."""

from __future__ import annotations

import json

import steptrace as st
from helpers.cli import assert_one_line_error, invoke
from helpers.processes import write_jsonl

ADD = "def f(x):\n    return x + 1\n"
OTHER = "def f(x):\n    return x * 2\n"


def test_a_tasks_file_given_as_corpus(tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [
        {"task_id": f"t{i}", "kind": "output", "prompt": "What?", "answer": "1"}
        for i in range(1600)])
    db = tmp_path / "store.duckdb"
    result = invoke("trace", tasks, "--db", db, "--workers", 0)
    assert_one_line_error(result, (
        f"{tasks}: none of its first 5 records is a corpus record ({tasks}:1: missing "
        "'code'); it looks like a tasks file (steptrace tasks --out): give it to steptrace "
        "predict --tasks; nothing was traced"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.jsonl"]


def test_a_short_file_of_bad_records_and_records_in_memory(tmp_path):
    """Fewer bad records than the limit, and nothing good: the same stop, saying so; a
    list of such records (the library) is refused the same way, without a store."""
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "input": "1"}, [1, 2]])
    db = tmp_path / "store.duckdb"
    assert_one_line_error(invoke("trace", bad, "--db", db, "--workers", 0), (
        f"{bad}: none of its records is a corpus record ({bad}:1: missing 'code'); a corpus "
        "record is a JSON object with 'code' and 'input' or 'inputs' (docs/guides/corpus.md); "
        "nothing was traced"))
    try:
        st.trace([{"task_id": "t", "prompt": "p"}] * 7, db, workers=0)
    except st.InputError as exc:
        assert str(exc) == (
            "<memory>: none of its first 5 records is a corpus record (<memory> record 1: "
            "missing 'code'); it looks like a tasks file (steptrace tasks --out): give it to "
            "steptrace predict --tasks; nothing was traced")
    else:
        raise AssertionError("records that are not a corpus were traced")
    assert not db.exists()


def test_bad_record_warnings_are_capped(tmp_path):
    """One good record, then 30 bad ones: the trace runs, prints 20 warnings and one line
    for the other 10, and --format json lists all 30."""
    records = [{"id": "ok", "code": ADD, "input": "1"}] + [{"id": f"b{i}"} for i in range(30)]
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    result = invoke("trace", corpus, "--db", tmp_path / "s.duckdb", "--workers", 0,
                    "--format", "json")
    assert result.exit_code == 1
    warnings = result.stderr.splitlines()
    assert warnings == ([f"warning: {corpus}:{n}: missing 'code'" for n in range(2, 22)]
                        + ["warning: ... and 10 more bad records (--format json lists "
                           "them all)"])
    summary = json.loads(result.stdout)
    assert (summary["jobs"], summary["traced"], len(summary["corpus_errors"])) == (1, 1, 30)


def test_an_id_given_to_two_programs(tmp_path):
    """The second program under an id is a bad record (counted, warned, not stored); the
    first program's records under that id (more inputs) are fine, and a true duplicate
    job is counted as one."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "a", "code": ADD, "input": "1"},
        {"id": "a", "code": OTHER, "input": "1"},
        {"id": "a", "code": ADD, "input": "2"},
        {"id": "a", "code": ADD, "input": "1"},
        {"id": "b", "code": OTHER, "inputs": ["1", "3"]}])
    db = tmp_path / "s.duckdb"
    result = invoke("trace", corpus, "--db", db, "--workers", 0, "--format", "json")
    assert result.exit_code == 1
    message = (f"{corpus}:2: id 'a' is already the id of another program ({corpus}:1); the "
               "record is skipped (give each program its own id)")
    assert result.stderr == f"warning: {message}\n"
    summary = json.loads(result.stdout)
    assert (summary["jobs"], summary["duplicates"], summary["traced"],
            summary["corpus_errors"]) == (5, 1, 4, [message])
    rows = invoke("sql", "SELECT r.sample_id, r.input, r.output, p.code FROM runs r JOIN "
                  "programs p USING (program_id) ORDER BY run_id", "--db", db,
                  "--format", "json")
    assert json.loads(rows.stdout) == [
        {"sample_id": "a", "input": "1", "output": "2", "code": ADD},
        {"sample_id": "a", "input": "2", "output": "3", "code": ADD},
        {"sample_id": "b", "input": "1", "output": "2", "code": OTHER},
        {"sample_id": "b", "input": "3", "output": "6", "code": OTHER}]
    # in memory the same: the record is named by its number
    summary = st.trace([{"id": "x", "code": ADD, "input": "1"},
                        {"id": "x", "code": OTHER, "input": "1"}], tmp_path / "m.duckdb",
                       workers=0)
    assert (summary.jobs, summary.traced, summary.corpus_errors) == (1, 1, [
        "<memory> record 2: id 'x' is already the id of another program (<memory> record "
        "1); the record is skipped (give each program its own id)"])
