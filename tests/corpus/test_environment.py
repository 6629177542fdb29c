"""A record's files, argv and env (steptrace.corpus._environment): checked with one line
naming the first problem (the bad record skipped, the rest loaded), kept as canonical JSON
on the program, part of its key, sent with every job, stored and traced."""

from __future__ import annotations

import json

import pytest

from steptrace.corpus._environment import MAX_FILES, MAX_FILES_CHARS
from steptrace.corpus._formats import jobs_from_record, load_corpus
from steptrace.store._store import connect

ADD = "def f(a, b):\n    return a + b\n"
SCRIPT = "import sys\nprint(sys.argv[1:])\n"


def write_jsonl(path, *records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def test_the_environment_is_kept_canonical_and_sent_with_every_job():
    record = {"id": "e", "code": ADD, "inputs": ["1, 2", "3, 4"],
              "files": {"b.txt": "2", "a/c.txt": "1"}, "env": {"Z": "z", "A": ""},
              "argv": ["-x", "y"]}
    jobs = jobs_from_record(record, "c.jsonl", "1")
    text = ('{"argv": ["-x", "y"], "env": {"A": "", "Z": "z"}, '
            '"files": {"a/c.txt": "1", "b.txt": "2"}}')
    assert [job.program.environment for job in jobs] == [text, text]
    assert jobs[1].request() == {
        "code": ADD, "entry": "f", "input": "3, 4", "expected": None, "argv": ["-x", "y"],
        "env": {"A": "", "Z": "z"}, "files": {"a/c.txt": "1", "b.txt": "2"}}
    assert jobs[0].program.meta is None  # not metadata


def test_keys_without_an_environment_are_as_before_and_each_part_changes_them():
    plain = jobs_from_record({"id": "k", "code": ADD, "input": "1, 2"}, "c.jsonl", "1")[0]
    assert plain.program.environment is None
    assert "environment" not in plain.request()
    keys = {plain.program.key}
    for extra in ({"argv": []}, {"argv": ["a"]}, {"env": {"A": "1"}}, {"files": {"x": ""}},
                  {"files": {"x": "1"}}):
        job = jobs_from_record({"id": "k", "code": ADD, "input": "1, 2", **extra},
                               "c.jsonl", "1")[0]
        keys.add(job.program.key)
    assert len(keys) == 6
    nulls = jobs_from_record({"id": "k", "code": ADD, "input": "1, 2", "argv": None,
                              "env": None, "files": None}, "c.jsonl", "1")[0]
    assert nulls.program.key == plain.program.key


@pytest.mark.parametrize("extra, message", [
    ({"argv": "x"}, "'argv' must be a list of strings (the arguments after the program's name)"),
    ({"argv": ["a", 1]}, "'argv' must be a list of strings (the arguments after the program's name)"),
    ({"argv": ["a\0b"]}, "an 'argv' argument holds a NUL character"),
    ({"argv": ["x"] * 10_001}, "'argv' has 10,001 arguments; at most 10,000"),
    ({"argv": ["x" * (1024 * 1024 + 1)]}, "'argv' is longer than 1,048,576 characters"),
    ({"env": ["A=1"]}, "'env' must be an object of strings (variable name -> value)"),
    ({"env": {"A": 1}}, "'env' must be an object of strings (variable name -> value)"),
    ({"env": {"A=B": "1"}}, "'env' variable name 'A=B' must be non-empty, without '=' or NUL"),
    ({"env": {"": "1"}}, "'env' variable name '' must be non-empty, without '=' or NUL"),
    ({"env": {"A": "x\0"}}, "'env' variable 'A' holds a NUL character"),
    ({"files": ["a.txt"]}, "'files' must be an object of relative path -> text"),
    ({"files": {"a.txt": 3}}, "file 'a.txt' must be text (a string), got int"),
    ({"files": {"a.txt": None}}, "file 'a.txt' must be text (a string), got NoneType"),
    ({"files": {"/etc/passwd": ""}},
     "file path '/etc/passwd' must be relative (files are written into the working "
     "directory, /work)"),
    ({"files": {"../up.txt": ""}}, "file path '../up.txt' may not have an empty, '.' or '..' part"),
    ({"files": {"a/./b": ""}}, "file path 'a/./b' may not have an empty, '.' or '..' part"),
    ({"files": {"a//b": ""}}, "file path 'a//b' may not have an empty, '.' or '..' part"),
    ({"files": {"": ""}}, "a file path must be a non-empty string, got ''"),
    ({"files": {"a\0": ""}}, "file path 'a\\x00' holds a NUL character"),
    ({"files": {"n" * 256: ""}}, f"file path '{'n' * 256}' has a part longer than 255 bytes"),
    ({"files": {"/".join(["d"] * 65): ""}},
     f"file path '{'/'.join(['d'] * 65)}' is nested deeper than 64 levels"),
    ({"files": {"a": "", "a/b": ""}},
     "file path 'a/b' clashes with another file's path ('a' is both a file and a directory)"),
    ({"files": {"a/b": "", "a": ""}},
     "file path 'a' clashes with another file's path ('a' is both a file and a directory)"),
    ({"files": {f"f{i}": "" for i in range(MAX_FILES + 1)}}, "'files' has 1,001 files; at most 1,000"),
    ({"files": {"a": "x" * MAX_FILES_CHARS, "b": "y"}},
     "'files' hold more than 16,777,216 characters"),
])
def test_bad_environments_are_reported_and_skipped(tmp_path, extra, message):
    path = write_jsonl(tmp_path / "bad.jsonl", {"id": "good", "code": ADD, "input": "1, 2"},
                       {"id": "bad", "code": ADD, "input": "1, 2", **extra})
    corpus = load_corpus(path)
    assert corpus.errors == [f"{path}:2: {message}"]
    assert [job.program.sample_id for job in corpus.jobs] == ["good"]


def test_a_traced_record_gets_its_files_argv_and_env_and_its_run_what_it_wrote(tmp_path):
    """End to end through the CLI's library call: the program reads the record's file,
    its argv and env, and writes; the store holds the environment and the file written,
    and the run read back has it."""
    import steptrace as st
    code = ("import os, sys\n"
            "total = sum(int(x) for x in open(sys.argv[1]).read().split())\n"
            "with open('result.txt', 'w') as out:\n"
            "    out.write(os.environ['LABEL'] + '=' + str(total))\n"
            "print(total)\n")
    corpus = write_jsonl(tmp_path / "c.jsonl", {
        "id": "sum", "shape": "script", "code": code, "inputs": ["", ""],
        "outputs": ["6\n", "6\n"], "argv": ["nums/in.txt"], "env": {"LABEL": "total"},
        "files": {"nums/in.txt": "1 2 3\n"}})
    db = tmp_path / "s.duckdb"
    summary = st.trace(corpus, db, workers=0)
    assert (summary.traced, summary.matched) == (2, 2)
    con = connect(db, read_only=True)
    try:
        assert con.execute("SELECT environment FROM programs").fetchall() == [(
            '{"argv": ["nums/in.txt"], "env": {"LABEL": "total"}, '
            '"files": {"nums/in.txt": "1 2 3\\n"}}',)]
        assert con.execute("SELECT run_id, path, kind, size, decode(content), truncated, utf8 "
                           "FROM files ORDER BY run_id").fetchall() == [
            (1, "/work/result.txt", "file", 7, "total=6", False, True),
            (2, "/work/result.txt", "file", 7, "total=6", False, True)]
    finally:
        con.close()
    run = st.open_store(db).run(2)
    assert [(f.path, f.text) for f in run.files] == [("/work/result.txt", "total=6")]
    again = st.trace(corpus, db, workers=0, force=True)
    assert again.traced == 2
    con = connect(db, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM files").fetchall() == [(2,)]
    finally:
        con.close()


def test_an_input_check_runs_the_program_with_its_environment(tmp_path):
    """A predicted input is checked in the sandbox with the program's files, argv and env,
    as it was traced: the right input passes, a wrong one does not."""
    import steptrace as st
    from steptrace.scoring._inputs import input_requests, input_verdict, run_input_checks
    from steptrace.scoring._load import load_programs
    from steptrace.scoring._verdicts import ScoreOptions
    code = ("import os, sys\n"
            "def f(x):\n"
            "    return x + int(os.environ['K']) + len(open('n.txt').read()) + len(sys.argv)\n")
    corpus = write_jsonl(tmp_path / "c.jsonl", {
        "id": "k", "code": code, "input": "1", "output": "15", "env": {"K": "10"},
        "files": {"n.txt": "ab"}, "argv": ["one"]})
    db = tmp_path / "s.duckdb"
    assert st.trace(corpus, db, workers=0).matched == 1
    tasks = st.make_tasks(db, "input").tasks.to_dicts()
    assert [(t["kind"], t["answer"]) for t in tasks] == [("input", "1")]
    con = connect(db)
    try:
        programs = load_programs(con, tasks)
    finally:
        con.close()
    task = tasks[0]
    assert programs[task["run_id"]][3] == ('{"argv": ["one"], "env": {"K": "10"}, '
                                           '"files": {"n.txt": "ab"}}')
    requests, order, _locks = input_requests({task["task_id"]: task},
                                             [(task, "1"), (task, "2")], programs)
    results = run_input_checks(requests, ScoreOptions(workers=0))
    assert [input_verdict(results[i]) for i in order] == [(True, None), (False, "returned 16")]
