"""Corpus loading: every accepted format gives exactly the expected jobs, bad records are
reported with file and line and skipped, and a corpus that cannot be read is a CorpusError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steptrace.corpus._formats import (CorpusError, Job, Program, jobs_from_record, load_corpus,
                                       stdout_matches)

ADD = "def f(a, b):\n    return a + b\n"
SQUARE = "def f(x):\n    return x * x\n"
COUNT = ("def f(text):\n    counter = 0\n    for char in text:\n        if char.isalpha():\n"
         "            counter += 1\n    return counter")


def write_jsonl(path: Path, *records: object) -> Path:
    """One JSON value a line; a ``str`` record is written as the raw line."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ JSONL formats
def test_cruxeval_line_with_trailing_comma_input(tmp_path):
    """A CRUXEval line (id/code/input/output) is one job; the input text is kept verbatim,
    trailing comma included, and the expected output is the 'output' text."""
    path = write_jsonl(tmp_path / "crux.jsonl",
                       {"code": COUNT, "input": "'l000*',", "output": "1", "id": "sample_452"},
                       {"code": ADD, "input": "(1, ), (1, 2)", "output": "(1, 1, 2)",
                        "id": "sample_1"})
    corpus = load_corpus(path)
    assert corpus.errors == []
    assert corpus.jobs == [
        Job(Program("crux.jsonl", "sample_452", COUNT, "f"), "'l000*',", "1", 0),
        Job(Program("crux.jsonl", "sample_1", ADD, "f"), "(1, ), (1, 2)", "(1, 1, 2)", 0),
    ]


def test_generic_inputs_and_outputs_lists(tmp_path):
    """'inputs' + 'outputs' give one job per input with its index; null outputs mean no
    expected output; 'entry' is kept; a record without 'id' gets its line number."""
    path = write_jsonl(tmp_path / "gen.jsonl",
                       {"id": "sq", "entry": "square",
                        "code": SQUARE.replace("f(", "square("),
                        "inputs": ["3", "-2", "1.5"], "outputs": ["9", None, "2.25"]},
                       {"code": ADD, "inputs": ["1, 2"]},
                       {"code": ADD, "input": "'a', 'b'"})
    corpus = load_corpus(path)
    assert corpus.errors == []
    square = Program("gen.jsonl", "sq", "def square(x):\n    return x * x\n", "square")
    assert corpus.jobs == [
        Job(square, "3", "9", 0),
        Job(square, "-2", None, 1),
        Job(square, "1.5", "2.25", 2),
        Job(Program("gen.jsonl", "2", ADD, "f"), "1, 2", None, 0),
        Job(Program("gen.jsonl", "3", ADD, "f"), "'a', 'b'", None, 0),
    ]


def test_blank_lines_are_ignored_but_counted(tmp_path):
    """Blank lines load nothing, and a record's default id is its physical line number."""
    path = tmp_path / "blank.jsonl"
    path.write_text("\n   \n" + json.dumps({"code": ADD, "input": "1, 1"}) + "\n\n",
                    encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.errors == []
    assert corpus.jobs == [Job(Program("blank.jsonl", "3", ADD, "f"), "1, 1", None, 0)]


def test_numeric_id_becomes_text(tmp_path):
    """A numeric 'id' is stored as its text."""
    path = write_jsonl(tmp_path / "n.jsonl", {"id": 7, "code": ADD, "input": "1, 2"})
    assert load_corpus(path).jobs == [Job(Program("n.jsonl", "7", ADD, "f"), "1, 2", None, 0)]


def test_directory_of_py_files_with_sidecars(tmp_path):
    """Each NAME.py with NAME.json is a program named by the directory and the file stem
    (or the sidecar's 'id'); files are read in name order; other files are ignored."""
    root = tmp_path / "progs"
    root.mkdir()
    (root / "b_square.py").write_text(SQUARE, encoding="utf-8")
    (root / "b_square.json").write_text(json.dumps({"inputs": ["2", "5"], "outputs": ["4", None]}))
    (root / "a_add.py").write_text(ADD.replace("f(", "add("), encoding="utf-8")
    (root / "a_add.json").write_text(json.dumps({"entry": "add", "input": "1, 2",
                                                 "output": "3", "id": "adder"}))
    (root / "notes.txt").write_text("not a program")
    (root / "sub").mkdir()
    (root / "sub" / "c.py").write_text(SQUARE)
    corpus = load_corpus(root)
    assert corpus.errors == []
    add = Program("progs", "adder", "def add(a, b):\n    return a + b\n", "add")
    square = Program("progs", "b_square", SQUARE, "f")
    assert corpus.jobs == [Job(add, "1, 2", "3", 0), Job(square, "2", "4", 0),
                           Job(square, "5", None, 1)]


def test_sidecar_code_key_does_not_replace_the_py_file(tmp_path):
    """The program text always comes from the .py file, even if the sidecar has 'code'."""
    root = tmp_path / "d"
    root.mkdir()
    (root / "p.py").write_text(SQUARE)
    (root / "p.json").write_text(json.dumps({"code": "def f(x):\n    return 0\n", "input": "3"}))
    assert load_corpus(root).jobs == [Job(Program("d", "p", SQUARE, "f"), "3", None, 0)]


# ------------------------------------------------------------------ bad records
def test_corrupt_json_line_is_reported_with_its_line_and_the_rest_loads(tmp_path):
    """A line that is not JSON is one error naming file:line (blank lines counted); the
    lines before and after it still load."""
    path = write_jsonl(tmp_path / "c.jsonl",
                       {"id": "one", "code": ADD, "input": "1, 2"},
                       "",
                       '{"id": "two", "code": ',
                       {"id": "three", "code": SQUARE, "input": "4"})
    corpus = load_corpus(path)
    assert len(corpus.errors) == 1
    assert corpus.errors[0].startswith(f"{path}:3: not valid JSON (Expecting value at column ")
    assert corpus.jobs == [Job(Program("c.jsonl", "one", ADD, "f"), "1, 2", None, 0),
                           Job(Program("c.jsonl", "three", SQUARE, "f"), "4", None, 0)]


@pytest.mark.parametrize("record, message", [
    ({"id": "x", "input": "1"}, "missing 'code'"),
    ({"code": SQUARE, "inputs": "1"}, "'inputs' must be a list of strings"),
    ({"code": SQUARE, "inputs": ["1", 2]}, "'inputs' must be a list of strings"),
    ({"code": SQUARE, "inputs": []}, "'inputs' is empty: the record has nothing to run"),
    ({"code": SQUARE, "inputs": ["1", "2"], "outputs": ["1"]},
     "'outputs' must be a list as long as 'inputs'"),
    ({"code": SQUARE, "inputs": ["1"], "outputs": "1"},
     "'outputs' must be a list as long as 'inputs'"),
    ({"code": SQUARE, "inputs": ["1"], "outputs": [1]}, "'outputs' entries must be strings or null"),
    ({"code": SQUARE, "entry": "not an id", "input": "1"},
     "'entry' must be a Python identifier or a dotted path of them (Stack.push), got 'not an id'"),
    ({"code": SQUARE, "entry": "f()", "input": "1"},
     "'entry' must be a Python identifier or a dotted path of them (Stack.push), got 'f()'"),
    ({"code": SQUARE, "entry": 5, "input": "1"}, "'entry' must be a string, got int"),
    ({"code": ["def f(): pass"], "input": "1"}, "'code' must be a string, got list"),
    ({"code": SQUARE, "input": 3}, "'input' must be a string, got int"),
    ({"code": SQUARE, "input": "3", "output": 9}, "'output' must be a string, got int"),
    ({"code": SQUARE}, "missing 'input' or 'inputs'"),
    ([1, 2], "expected a JSON object, got list"),
    ('"just text"', "expected a JSON object, got str"),
    ("null", "expected a JSON object, got NoneType"),
])
def test_bad_record_is_reported_and_skipped(tmp_path, record, message):
    """Each kind of bad record is one error 'file:line: message'; the good lines load."""
    path = write_jsonl(tmp_path / "bad.jsonl",
                       {"id": "good1", "code": ADD, "input": "1, 2"},
                       record,
                       {"id": "good2", "code": ADD, "input": "3, 4"})
    corpus = load_corpus(path)
    assert corpus.errors == [f"{path}:2: {message}"]
    assert [(j.program.sample_id, j.input) for j in corpus.jobs] == [("good1", "1, 2"),
                                                                     ("good2", "3, 4")]


def test_null_input_is_a_bad_record(tmp_path):
    """"input": null is not an input text: the line is reported and skipped, not loaded
    as a job whose input is None (which later breaks Job.key and tracing)."""
    path = write_jsonl(tmp_path / "null.jsonl",
                       {"id": "a", "code": SQUARE, "input": None},
                       {"id": "b", "code": SQUARE, "input": "2"})
    corpus = load_corpus(path)
    assert [j.program.sample_id for j in corpus.jobs] == ["b"]
    assert len(corpus.errors) == 1
    assert corpus.errors[0].startswith(f"{path}:1: ")
    assert "'input'" in corpus.errors[0]


def test_py_file_without_sidecar_is_reported(tmp_path):
    """A .py without NAME.json is one error naming the file and the sidecar to write;
    the programs that have sidecars still load."""
    root = tmp_path / "d"
    root.mkdir()
    (root / "lonely.py").write_text(SQUARE)
    (root / "ok.py").write_text(SQUARE)
    (root / "ok.json").write_text(json.dumps({"input": "3"}))
    corpus = load_corpus(root)
    assert corpus.errors == [f"{root / 'lonely.py'}: no inputs (write them in lonely.json)"]
    assert corpus.jobs == [Job(Program("d", "ok", SQUARE, "f"), "3", None, 0)]


def test_bad_sidecars_are_reported(tmp_path):
    """A sidecar that is not JSON, not an object, or an invalid record is one error each,
    naming the sidecar."""
    root = tmp_path / "d"
    root.mkdir()
    for name, sidecar in (("a", "{not json"), ("b", "[1, 2]"),
                          ("c", json.dumps({"inputs": ["1"], "outputs": ["1", "2"]})),
                          ("d", json.dumps({"input": "5"}))):
        (root / f"{name}.py").write_text(SQUARE)
        (root / f"{name}.json").write_text(sidecar)
    corpus = load_corpus(root)
    assert corpus.errors == [
        f"{root / 'a.json'}: not readable JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1))",
        f"{root / 'b.json'}: expected a JSON object",
        f"{root / 'c.json'}: 'outputs' must be a list as long as 'inputs'",
    ]
    assert corpus.jobs == [Job(Program("d", "d", SQUARE, "f"), "5", None, 0)]


def test_missing_path_is_a_corpus_error(tmp_path):
    """A corpus path that does not exist raises CorpusError with the exact message."""
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(CorpusError) as info:
        load_corpus(missing)
    assert str(info.value) == f"corpus not found: {missing}"


def test_directory_without_py_files_is_a_corpus_error(tmp_path):
    """A directory holding no .py files at all is not a corpus."""
    root = tmp_path / "empty"
    root.mkdir()
    (root / "x.json").write_text("{}")
    with pytest.raises(CorpusError) as info:
        load_corpus(root)
    assert str(info.value) == f"no .py files in corpus directory {root}"


def test_non_utf8_jsonl_lines_are_bad_records(tmp_path):
    """A JSONL file that is not UTF-8 (here UTF-16) gives a bad record, not a crash."""
    path = tmp_path / "u16.jsonl"
    path.write_bytes(json.dumps({"code": ADD, "input": "1, 2"}).encode("utf-16"))
    corpus = load_corpus(path)
    assert corpus.jobs == []
    assert corpus.errors == [f"{path}:1: not UTF-8 text (invalid start byte at byte 1)"]


def test_one_bad_byte_loses_only_its_line_and_a_bom_is_ignored(tmp_path):
    """A line with an invalid UTF-8 byte is one bad record (with its line number); a
    byte-order mark at the start of the file is not part of the first record."""
    path = tmp_path / "mixed.jsonl"
    good = json.dumps({"id": "a", "code": ADD, "input": "1, 2"}).encode()
    path.write_bytes(b"\xef\xbb\xbf" + good + b"\n" + b'{"code": "\xff", "input": "2"}\n'
                     + json.dumps({"id": "c", "code": ADD, "input": "3, 4"}).encode() + b"\n")
    corpus = load_corpus(path)
    assert [(job.program.sample_id, job.input) for job in corpus.jobs] == [("a", "1, 2"), ("c", "3, 4")]
    assert corpus.errors == [f"{path}:2: not UTF-8 text (invalid start byte at byte 11)"]


def test_non_utf8_py_file_is_reported_and_others_load(tmp_path):
    """In a directory corpus a .py that is not UTF-8 is one error naming its line and
    byte; the others still load."""
    root = tmp_path / "d"
    root.mkdir()
    (root / "latin.py").write_bytes("def f(x):\n    return 'é'\n".encode("latin-1"))
    (root / "latin.json").write_text(json.dumps({"input": "1"}))
    (root / "ok.py").write_text(SQUARE)
    (root / "ok.json").write_text(json.dumps({"input": "2"}))
    corpus = load_corpus(root)
    assert corpus.errors == [
        f"{root / 'latin.py'}:2: not UTF-8 text (invalid continuation byte at byte 13)"]
    assert corpus.jobs == [Job(Program("d", "ok", SQUARE, "f"), "2", None, 0)]


def test_corpus_of_only_bad_records_loads_empty_with_errors(tmp_path):
    """A JSONL file whose every line is bad gives no jobs and one error per line."""
    path = write_jsonl(tmp_path / "allbad.jsonl", "[1,", {"code": SQUARE})
    corpus = load_corpus(path)
    assert len(corpus.errors) == 2
    assert corpus.errors[0].startswith(f"{path}:1: not valid JSON (")
    assert corpus.errors[1] == f"{path}:2: missing 'input' or 'inputs'"
    assert corpus.jobs == []


def test_json_error_column_is_the_column_in_the_line(tmp_path):
    """The column in a 'not valid JSON' error is where the line goes wrong. A truncated line
    (the usual corruption) fails at its end: '{"id": "two", "code": ' is 22 characters, so
    the value is missing at column 23, and a lone '{' needs a key at column 2, not 'column 1'
    (the position after the line's newline)."""
    path = write_jsonl(tmp_path / "cut.jsonl", '{"id": "two", "code": ', "{",
                       '{"code": "x", oops}')
    assert load_corpus(path).errors == [
        f"{path}:1: not valid JSON (Expecting value at column 23)",
        f"{path}:2: not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{path}:3: not valid JSON (Expecting property name enclosed in double quotes at column 15)",
    ]


# ------------------------------------------------------------------ identity
def test_job_key_is_stable_and_distinguishes_what_makes_a_run():
    """Job.key is the same for equal jobs (and fixed across processes: a sha256 of the
    fields), and differs when the input, expected output, code, entry, sample id, source
    or input index differ; 'no expected output' differs from an empty expected output."""
    base = Job(Program("c.jsonl", "s1", SQUARE, "f"), "3", "9", 0)
    again = Job(Program("c.jsonl", "s1", SQUARE, "f"), "3", "9", 0)
    assert base.key == again.key
    assert len(base.key) == 64 and int(base.key, 16) >= 0
    variants = [
        Job(base.program, "4", "9", 0),
        Job(base.program, "3", "10", 0),
        Job(base.program, "3", None, 0),
        Job(base.program, "3", "", 0),
        Job(base.program, "3", "9", 1),
        Job(Program("c.jsonl", "s1", SQUARE + "\n", "f"), "3", "9", 0),
        Job(Program("c.jsonl", "s1", SQUARE, "g"), "3", "9", 0),
        Job(Program("c.jsonl", "s2", SQUARE, "f"), "3", "9", 0),
        Job(Program("d.jsonl", "s1", SQUARE, "f"), "3", "9", 0),
    ]
    keys = {base.key} | {job.key for job in variants}
    assert len(keys) == len(variants) + 1


def test_job_key_is_the_same_after_reloading(tmp_path):
    """Loading the same corpus twice gives the same job keys (what resume relies on)."""
    path = write_jsonl(tmp_path / "k.jsonl", {"id": "a", "code": ADD, "inputs": ["1, 2", "3, 4"]})
    first = [job.key for job in load_corpus(path).jobs]
    second = [job.key for job in load_corpus(path).jobs]
    assert first == second and len(set(first)) == 2


def test_job_request_is_what_the_guest_needs():
    """request() carries code, entry, input and expected output."""
    job = Job(Program("c.jsonl", "s", SQUARE, "g"), "3", "9", 2)
    assert job.request() == {"code": SQUARE, "entry": "g", "input": "3", "expected": "9"}


# ------------------------------------------------------------------ program shapes
STACK = "class Stack:\n    def push(self, x):\n        pass\n"
SCRIPT = "print(int(input()) * 2)\n"


def test_shape_records_give_exact_jobs(tmp_path):
    """A script (inputs = stdin texts, outputs = expected stdout), a dotted entry, a
    method chain for every input, a chain per input, test code and a call's stdin."""
    chain = [{"method": "push", "input": "1"}, {"method": "pop"}]
    path = write_jsonl(
        tmp_path / "shapes.jsonl",
        {"id": "s", "shape": "script", "code": SCRIPT, "inputs": ["3\n", "5\n"],
         "outputs": ["6\n", None]},
        {"id": "d", "code": STACK, "entry": "Stack.push", "input": "Stack(), 1"},
        {"id": "one", "code": STACK, "entry": "Stack", "inputs": ["", ""], "calls": chain},
        {"id": "per", "code": STACK, "entry": "Stack", "inputs": ["", "1"],
         "calls": [chain, []], "outputs": ["2", None]},
        {"id": "t", "code": STACK, "entry": "T.test_x", "input": "", "test": "import unittest\n"},
        {"id": "in", "code": SQUARE, "input": "", "stdin": "7\n"})
    corpus = load_corpus(path)
    assert corpus.errors == []
    script = Program("shapes.jsonl", "s", SCRIPT, "<module>", "script")
    stack = lambda sid, entry, test=None: Program("shapes.jsonl", sid, STACK, entry, "call", test)  # noqa: E731
    calls = (("push", "1"), ("pop", ""))
    assert corpus.jobs == [
        Job(script, "3\n", "6\n", 0), Job(script, "5\n", None, 1),
        Job(stack("d", "Stack.push"), "Stack(), 1", None, 0),
        Job(stack("one", "Stack"), "", None, 0, calls),
        Job(stack("one", "Stack"), "", None, 1, calls),
        Job(stack("per", "Stack"), "", "2", 0, calls),
        Job(stack("per", "Stack"), "1", None, 1, ()),
        Job(stack("t", "T.test_x", "import unittest\n"), "", None, 0),
        Job(Program("shapes.jsonl", "in", SQUARE, "f"), "", None, 0, None, "7\n"),
    ]
    requests = [job.request() for job in corpus.jobs]
    assert requests[0] == {"code": SCRIPT, "input": "3\n", "expected": "6\n", "shape": "script"}
    assert requests[3] == {"code": STACK, "entry": "Stack", "input": "", "expected": None,
                           "calls": [{"method": "push", "input": "1"},
                                     {"method": "pop", "input": ""}]}
    assert requests[7]["test"] == "import unittest\n" and requests[8]["stdin"] == "7\n"
    assert corpus.jobs[3].calls_json == ('[{"method": "push", "input": "1"}, '
                                         '{"method": "pop", "input": ""}]')


def test_old_records_keep_their_keys_and_new_fields_change_them():
    """Keys of a record without the new fields are those stores made before them hold
    (pinned here: computed by main before shapes existed); each new field makes another program or job."""
    (job,) = jobs_from_record({"code": ADD, "input": "1, 2", "output": "3"}, "x.jsonl", "1")
    assert job.program.key == "525dc2b95ec60f4695644aa600cc97b51b42f8048c23e30034f29072375cd621"
    assert job.key == "cb9f27d20bd0de10c0779328820a441b5af666820212be1a26526471a73aa88a"
    variants = [
        {"shape": "script"}, {"test": "pass"}, {"calls": []},
        {"calls": [{"method": "m"}]}, {"stdin": ""}, {"stdin": "x"},
    ]
    keys = {job.key}
    for extra in variants:
        record = {"code": ADD, "input": "1, 2", "output": "3", **extra}
        (other,) = jobs_from_record(record, "x.jsonl", "1")
        keys.add(other.key)
    assert len(keys) == len(variants) + 1


@pytest.mark.parametrize("record, message", [
    ({"code": SCRIPT, "input": "", "shape": "module"},
     "'shape' must be one of call, script, got 'module'"),
    ({"code": SCRIPT, "input": "", "shape": "script", "entry": "f"},
     "a script takes no 'entry' (its 'input' is its stdin, its 'output' the expected stdout)"),
    ({"code": SCRIPT, "input": "", "shape": "script", "stdin": "x"},
     "a script takes no 'stdin' (its 'input' is its stdin, its 'output' the expected stdout)"),
    ({"code": STACK, "input": "", "entry": "Stack.", "calls": []},
     "'entry' must be a Python identifier or a dotted path of them (Stack.push), got 'Stack.'"),
    ({"code": STACK, "input": "", "calls": {"method": "push"}},
     "'calls' must be a list of {\"method\": ..., \"input\": ...} (or a list of such lists, "
     "one per input)"),
    ({"code": STACK, "inputs": ["", ""], "calls": [[]]},
     "'calls' has 1 chains for 2 inputs: give one chain per input, or one chain for all"),
    ({"code": STACK, "input": "", "calls": [{"method": "push", "args": "1"}]},
     "'calls[0]' must be {\"method\": name, \"input\": arguments}"),
    ({"code": STACK, "input": "", "calls": [{"method": "a.b"}]},
     "'calls[0].method' must be a method name, got 'a.b'"),
    ({"code": STACK, "input": "", "calls": [{"method": "push", "input": 1}]},
     "'calls[0].input' must be a string, got int"),
    ({"code": STACK, "input": "", "calls": [{"method": "push"}] * 10_000},
     "'calls' has 10,000 calls; at most 1,000"),
    ({"code": STACK, "input": "", "test": 3}, "'test' must be a string, got int"),
    ({"code": STACK, "input": "", "stdin": "x" * (16 * 1024 * 1024 + 1)},
     "a stdin text is longer than 16,777,216 characters (16,777,217)"),
])
def test_bad_shape_records_are_reported_and_skipped(tmp_path, record, message):
    path = write_jsonl(tmp_path / "bad.jsonl", {"id": "good", "code": ADD, "input": "1, 2"},
                       record)
    corpus = load_corpus(path)
    assert corpus.errors == [f"{path}:2: {message}"]
    assert [job.program.sample_id for job in corpus.jobs] == ["good"]


def test_a_directory_sidecar_takes_the_shape_keys(tmp_path):
    (tmp_path / "double.py").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "double.json").write_text(json.dumps(
        {"shape": "script", "inputs": ["2\n"], "outputs": ["4\n"]}), encoding="utf-8")
    corpus = load_corpus(tmp_path)
    assert corpus.errors == []
    assert corpus.jobs == [Job(Program(tmp_path.name, "double", SCRIPT, "<module>", "script"),
                               "2\n", "4\n", 0)]


@pytest.mark.parametrize("stdout, expected, matches", [
    ("6\n", "6", True),
    ("6  \n\n\n", "6\n", True),          # trailing whitespace and empty lines at the end
    ("a\r\nb\r\n", "a\nb", True),         # line ends
    ("1 2\n", "1  2\n", False),           # inside a line: exact
    (" 6\n", "6\n", False),               # leading whitespace: exact
    ("a\n\nb\n", "a\nb\n", False),        # empty lines between: exact
    ("", "", True), ("", "\n\n", True), ("0\n", "", False),
])
def test_stdout_matching_rule(stdout, expected, matches):
    assert stdout_matches(stdout, expected) is matches
