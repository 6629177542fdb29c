"""The plan of a sharded trace (engine/sharding/_plan.py): fixed shards of jobs in corpus
order, run ids from the place, duplicates counted (in the same shard or another one), bad
records kept as messages, the jobs' digest, the shards' input lines read back as the same
jobs, and every broken or foreign directory, plan or input line refused with one line.

Nothing here traces: planning reads the corpora and copies the session's guest.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from steptrace.corpus._formats import iter_corpus
from steptrace.errors import InputError
from steptrace.sandbox._build import cache_key, file_digest
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import wasm_stack_bytes
from steptrace.sharding._plan import (MANIFEST, PLAN, GuestSpec, Plan, ShardError, ShardSpec,
                                      guest_path, input_path, is_shard_directory,
                                      job_from_record, job_record, plan_directory, read_plan,
                                      read_shard_jobs)
from helpers.sample_corpus import ADD, NEG, SQUARE
from helpers.shard_corpus import write_jsonl, write_mixed

# Shard size 3. Line by line: the jobs it adds (sample, input index, input) and what
# happens to each; "dup" = a job with the key of an earlier one (same corpus, id, code,
# input index, input and expected output), left out.
PLANNED = [
    {"id": "a", "code": ADD, "inputs": ["1, 2", "3, 4"]},     # runs 1, 2 (shard 0)
    {"id": "a", "code": ADD, "inputs": ["1, 2"]},             # dup of run 1, in shard 0
    {"id": "sq", "code": SQUARE, "input": "3"},               # run 3; shard 0 is full
    {"id": "bad"},                                            # a bad record (no code)
    {"id": "sq", "code": SQUARE, "inputs": ["4", "5", "3"]},  # runs 4, 5, 6 (shard 1);
    # ("3" at input index 2 is not run 3's job: the index is part of the key)
    {"id": "a", "code": ADD, "inputs": ["1, 2", "3, 4"]},     # dups of runs 1, 2: they would
    # have fallen in shard 2, their first copies are in shard 0: two cross-shard duplicates
    {"id": "neg", "code": NEG, "input": "2"},                 # run 7 (shard 2)
    {"id": "sq", "code": SQUARE, "inputs": ["4"]},            # dup of run 4 (shard 1): cross
    {"id": "neg", "code": NEG, "input": "2"},                 # dup of run 7, in shard 2
    {"id": "neg", "code": NEG, "input": "2", "output": "-2"},  # run 8: the expected output
]                                                             # is part of the key
# (run id, sample id, input index, input, expected) of each shard's input lines
PLANNED_INPUTS = [
    [(1, "a", 0, "1, 2", None), (2, "a", 1, "3, 4", None), (3, "sq", 0, "3", None)],
    [(4, "sq", 0, "4", None), (5, "sq", 1, "5", None), (6, "sq", 2, "3", None)],
    [(7, "neg", 0, "2", None), (8, "neg", 0, "2", "-2")],
]


def plan(corpora, directory: Path, shard_size: int = 3, limits: Limits | None = None,
         isolation: str = "job") -> tuple[Plan, bool]:
    return plan_directory(corpora if isinstance(corpora, list) else [corpora], directory,
                          shard_size, limits or Limits(), isolation)


def input_lines(directory: Path, index: int) -> list[tuple]:
    return [(r["run_id"], r["sample_id"], r["input_index"], r["input"], r["expected"])
            for r in map(json.loads, input_path(directory, index).read_text().splitlines())]


def tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its content."""
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def corpus(tmp_path):
    return write_jsonl(tmp_path / "planned.jsonl", PLANNED)


@pytest.fixture
def planned(tmp_path, corpus):
    """The PLANNED corpus planned into ``out`` (shard size 3)."""
    directory = tmp_path / "out"
    made, resumed = plan(corpus, directory)
    assert resumed is False
    return directory, made


# ------------------------------------------------------------------ shards and run ids
def test_plan_cuts_the_jobs_into_fixed_shards(planned, corpus):
    """Shards are ranges of the de-duplicated jobs in corpus order; run id = shard * size +
    position + 1; the counts say 13 jobs, 5 duplicates (3 of them of a job in another
    shard) and the bad record, by file and line."""
    directory, made = planned
    assert made.shards == (ShardSpec(0, 3, 1), ShardSpec(1, 3, 4), ShardSpec(2, 2, 7))
    assert (made.jobs, made.runs, made.duplicates, made.cross_shard_duplicates) == (13, 8, 5, 3)
    assert made.corpus_errors == (f"{corpus}:4: missing 'code'",)
    assert (made.corpora, made.shard_size, made.isolation, made.limits) == (
        (str(corpus),), 3, "job", Limits())
    for index, lines in enumerate(PLANNED_INPUTS):
        assert input_lines(directory, index) == lines
    assert read_plan(directory) == made
    assert sorted(p.name for p in directory.iterdir()) == ["guest", "inputs", PLAN]
    assert sorted(p.name for p in (directory / "inputs").iterdir()) == [
        "00000.jsonl", "00001.jsonl", "00002.jsonl"]
    assert is_shard_directory(directory) and not is_shard_directory(corpus)


def test_plan_names_and_carries_the_guest(planned):
    """The plan's guest is this build (its key), by the SHA-256 of the copy it carries in
    DIR/guest/, with this process's wasm stack; no package lock."""
    directory, made = planned
    assert made.guest == GuestSpec(cache_key(), made.guest.digest, wasm_stack_bytes(), None)
    copy = guest_path(directory, made.guest)
    assert copy == directory / "guest" / f"guest-{cache_key()}.wasm"
    assert file_digest(copy) == made.guest.digest


def test_a_duplicate_of_a_full_shard_counts_as_in_another_shard(tmp_path):
    """A duplicate is counted as cross-shard by the shard it would have fallen in: with
    one job a shard, a job repeated right after its first copy would have been the next
    shard's."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "code": ADD, "input": "1, 2"}] * 2
                         + [{"id": "sq", "code": SQUARE, "inputs": ["3", "3"]}])
    made, _ = plan(corpus, tmp_path / "out", shard_size=1)
    assert made.shards == (ShardSpec(0, 1, 1), ShardSpec(1, 1, 2), ShardSpec(2, 1, 3))
    assert (made.jobs, made.duplicates, made.cross_shard_duplicates) == (4, 1, 1)


def test_the_same_corpus_twice_adds_only_duplicates(tmp_path, corpus, planned):
    """The same file given twice: its 13 jobs again, all duplicates; those whose first copy
    is in shard 2 (where they would fall again: it is not full) are not cross-shard."""
    _, once = planned
    twice, _ = plan([corpus, corpus], tmp_path / "twice")
    assert (twice.shards, twice.jobs, twice.duplicates, twice.cross_shard_duplicates) == (
        once.shards, 26, 5 + 13, 3 + 10)
    assert twice.jobs_digest == once.jobs_digest
    assert twice.corpus_errors == once.corpus_errors * 2


def test_jobs_digest_is_the_keys_in_order(planned, corpus, tmp_path):
    """jobs_digest is the SHA-256 of the planned jobs' keys in order, one a line: the same
    for the same corpus planned again (any directory), another when one input changes."""
    directory, made = planned
    keys = []
    for job in iter_corpus(corpus):
        if not isinstance(job, str) and job.key not in keys:
            keys.append(job.key)
    assert len(keys) == 8
    assert made.jobs_digest == hashlib.sha256("".join(k + "\n" for k in keys).encode()).hexdigest()
    again, _ = plan(corpus, tmp_path / "again")
    assert again == made
    assert tree(tmp_path / "again") == tree(directory)
    changed = [dict(r) for r in PLANNED]
    changed[-1]["output"] = "2"
    other, _ = plan(write_jsonl(tmp_path / "planned.jsonl", changed), tmp_path / "other")
    assert other.shards == made.shards and other.jobs_digest != made.jobs_digest


# ------------------------------------------------------------------ input lines
def test_job_record_round_trip_keeps_every_shape(tmp_path):
    """Every job of the mixed corpus (calls, a chain per input, a script, stdin, a test
    driver, a dotted entry) read back from its input line is the same job, the same key
    and the same request to the guest."""
    jobs = [j for j in iter_corpus(write_mixed(tmp_path / "mixed.jsonl")) if not isinstance(j, str)]
    assert len(jobs) == 22
    shapes = {(j.program.shape, j.calls is not None, j.stdin is not None,
               j.program.test is not None) for j in jobs}
    assert shapes == {("call", False, False, False), ("call", True, False, False),
                      ("script", False, False, False), ("call", False, True, False),
                      ("call", False, False, True)}
    for number, job in enumerate(jobs, start=1):
        line = json.dumps(job_record(job, number), ensure_ascii=False)
        run_id, back = job_from_record(json.loads(line), "here")
        assert (run_id, back, back.key, back.request()) == (number, job, job.key, job.request())


def test_job_record_round_trip_of_text_that_is_not_utf8(tmp_path):
    """A corpus may spell a lone surrogate (JSON "\\ud800"): planning writes its input line
    (escaped: UTF-8 cannot hold it; it raised UnicodeEncodeError) and the job read back is
    the same job; other text stays as it is (test_local traces both)."""
    corpus = write_jsonl(tmp_path / "s.jsonl", [
        {"id": "s", "code": "def f(x):\n    return x\n", "input": "'\ud800'"},
        {"id": "t", "code": "def f(x):\n    return x + '\u00e9'\n", "input": "'\u00e9'"}])
    directory = tmp_path / "out"
    made, _ = plan(corpus, directory)
    assert made.runs == 2
    jobs = [j for j in iter_corpus(corpus)]
    assert [(run_id, job.key) for run_id, job in read_shard_jobs(directory, made, 0)] == [
        (1, jobs[0].key), (2, jobs[1].key)]
    assert "\u00e9" in input_path(directory, 0).read_text(encoding="utf-8")  # kept as it is


BASE_LINE = {"run_id": 1, "source": "c.jsonl", "sample_id": "a", "code": ADD, "entry": "f",
             "shape": "call", "test": None, "input": "1, 2", "expected": None,
             "input_index": 0, "calls": None, "stdin": None}


@pytest.mark.parametrize("change, why", [
    ({"input": 3}, "'input' must be a string"),
    ({"code": None}, "'code' must be a string"),
    ({"stdin": 5}, "'stdin' must be a string or null"),
    ({"run_id": "1"}, "'run_id' must be an integer >= 0"),
    ({"input_index": -1}, "'input_index' must be an integer >= 0"),
    ({"input_index": True}, "'input_index' must be an integer >= 0"),
    ({"calls": [["push"]]}, "'calls' must be a list of [method, input] pairs"),
    ({"calls": {"push": "1"}}, "'calls' must be a list of [method, input] pairs"),
    ({"calls": [["push", 1]]}, "'calls' must be a list of [method, input] pairs"),
])
def test_job_from_record_refuses_a_wrong_type(change, why):
    with pytest.raises(ShardError) as caught:
        job_from_record({**BASE_LINE, **change}, "f.jsonl:7")
    assert str(caught.value) == f"f.jsonl:7: not a shard input line ({why})"


def test_job_from_record_refuses_what_is_not_an_object():
    for record in ([1, 2], "text", None):
        with pytest.raises(ShardError) as caught:
            job_from_record(record, "f.jsonl:1")
        assert str(caught.value) == "f.jsonl:1: not a shard input line (not a JSON object)"


def tamper_line(path: Path, number: int, text: str | None) -> None:
    """Replace line ``number`` (1-based) of ``path`` by ``text`` (None: drop it)."""
    lines = path.read_text().splitlines(keepends=True)
    if text is None:
        del lines[number - 1]
    else:
        lines[number - 1] = text + "\n"
    path.write_text("".join(lines))


def read_all(directory: Path, made: Plan, index: int) -> list:
    return list(read_shard_jobs(directory, made, index))


def test_tampered_input_lines_are_refused_with_one_line(planned):
    """An input line that is not JSON, not one the planner wrote, out of place, or a file
    with fewer or more lines than the plan says: ShardError naming the file and line."""
    directory, made = planned
    path = input_path(directory, 1)
    original = path.read_text()
    lines = original.splitlines()
    second = json.loads(lines[1])
    cases = [
        ((2, "{not json"), f"{path}:2: not JSON (Expecting property name enclosed in double "
                           "quotes: line 1 column 2 (char 1))"),
        ((2, json.dumps({**second, "run_id": 6})), f"{path}:2: run id 6 is not the plan's 5"),
        ((1, json.dumps({**second, "run_id": 4})), None),  # another job at the right id: read
        ((3, json.dumps({**second, "input": ["5"]})),
         f"{path}:3: not a shard input line ('input' must be a string)"),
        ((3, None), f"{path} holds 2 jobs; the plan says 3"),
    ]
    for (number, text), message in cases:
        tamper_line(path, number, text)
        if message is None:
            assert [run_id for run_id, _ in read_all(directory, made, 1)] == [4, 5, 6]
        else:
            with pytest.raises(ShardError) as caught:
                read_all(directory, made, 1)
            assert str(caught.value) == message
        path.write_text(original)
    path.write_text(original + json.dumps({**second, "run_id": 7}) + "\n")
    with pytest.raises(ShardError) as caught:
        read_all(directory, made, 1)
    assert str(caught.value) == f"{path} holds 4 jobs; the plan says 3"
    path.unlink()
    with pytest.raises(ShardError) as caught:
        read_all(directory, made, 1)
    assert str(caught.value) == f"cannot read shard input {path}: No such file or directory"


# ------------------------------------------------------------------ plan.json
def edit_plan(directory: Path, edit) -> Path:
    path = directory / PLAN
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def set_in(data, keys, value):
    for key in keys[:-1]:
        data = data[key]
    data[keys[-1]] = value


INTEGERS = "{path}: the shard size and the shards' ranges must be integers"
GUEST = ("{path}: the guest must be a build key (24 hex digits), a SHA-256 digest (64 hex "
         "digits), a wasm stack size and a package lock or null")


@pytest.mark.parametrize("keys, value, message", [
    (("format",), "steptrace-export", "{path} is not a steptrace shard plan"),
    (("version",), 2, "{path} has shard format version 2; this steptrace reads version 1"),
    (("isolation",), "thread", "{path}: unknown isolation 'thread'"),
    (("shards", 1, "first_run_id"), 5, "{path}: shard 1 is not where the plan's ranges put it"),
    (("shards", 1, "index"), 2, "{path}: shard 1 is not where the plan's ranges put it"),
    (("shards", 2, "jobs"), 0, "{path}: shard 2 is not where the plan's ranges put it"),
    (("shards", 0, "jobs"), 4, "{path}: shard 0 is not where the plan's ranges put it"),
    (("shard_size",), 2, "{path}: shard 0 is not where the plan's ranges put it"),
    (("limits", "timeout_s"), -1, "{path} is not a readable shard plan (limit timeout_s must "
                                  "be positive, got -1)"),
    (("limits", "seconds"), 1, "{path} is not a readable shard plan (Limits.__init__() got an "
                               "unexpected keyword argument 'seconds')"),
    (("shard_size",), "3", INTEGERS),
    (("shards", 0, "jobs"), 3.0, INTEGERS),
    (("shards", 1, "first_run_id"), True, INTEGERS),
    (("guest", "key"), "../../../tmp/elsewhere", GUEST),  # it names files: never a path
    (("guest", "key"), 7, GUEST),
    (("guest", "digest"), None, GUEST),
    (("guest", "digest"), "abc", GUEST),
    (("guest", "stack_bytes"), "6291456", GUEST),
    (("guest", "lock"), 1, GUEST),
    (("guest", "lock"), "", None),  # a lock's text is checked when it is used
])
def test_a_tampered_plan_is_refused(planned, keys, value, message):
    directory, _ = planned
    path = edit_plan(directory, lambda data: set_in(data, keys, value))
    if message is None:
        read_plan(directory)
        return
    with pytest.raises(ShardError) as caught:
        read_plan(directory)
    assert str(caught.value) == message.format(path=path)


def test_a_plan_that_is_not_one_is_refused(planned):
    directory, _ = planned
    path = directory / PLAN
    for text, message in [
        ("[1, 2]", f"{path} is not a readable shard plan ('list' object has no attribute 'get')"),
        ("{", f"cannot read {path}: Expecting property name enclosed in double quotes: line 1 "
              "column 2 (char 1)"),
        (json.dumps({"format": "steptrace-shards", "version": 1}),
         f"{path} is not a readable shard plan ('shards')"),
    ]:
        path.write_text(text)
        with pytest.raises(ShardError) as caught:
            read_plan(directory)
        assert str(caught.value) == message
    path.unlink()
    with pytest.raises(ShardError) as caught:
        read_plan(directory)
    assert str(caught.value) == (f"{directory} is not a shard directory (no plan.json; make "
                                 "one with steptrace trace CORPUS --out DIR)")


# ------------------------------------------------------------------ directories
def test_a_directory_that_is_not_a_shard_directory_is_refused(tmp_path, corpus):
    """A non-empty directory without a plan, a file, a path with a glob character: refused,
    nothing written; a directory holding only a shard directory's own names (left by a
    planner that died before its plan) is planned into."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ShardError) as caught:
        plan(corpus, other)
    assert str(caught.value) == (f"{other} is not empty and holds no shard plan: give a new or "
                                 "empty directory")
    assert tree(other) == {"notes.txt": b"mine"}
    with pytest.raises(ShardError) as caught:
        plan(corpus, corpus)
    assert str(caught.value) == f"{corpus} is not a directory"
    starry = tmp_path / "out[1]"
    with pytest.raises(ShardError) as caught:
        plan(corpus, starry)
    assert str(caught.value) == (f"a shard directory's path must not contain [ ] (its files "
                                 f"are found by a glob): {starry}")
    assert not starry.exists()
    leftover = tmp_path / "leftover"
    (leftover / "tmp" / "00000-x").mkdir(parents=True)
    (leftover / "inputs").mkdir()
    (leftover / ".plan-abc").mkdir()
    made, resumed = plan(corpus, leftover)
    assert (made.runs, resumed) == (8, False)
    assert input_lines(leftover, 2) == PLANNED_INPUTS[2]


def test_a_tasks_file_among_the_corpora_stops_the_plan_at_its_fifth_record(tmp_path, corpus):
    """A tasks file given as a corpus (beside a real one) stops the plan with one error
    naming it, its first bad record and what it looks like, read no further than its
    first NOT_A_CORPUS records (as ``trace`` does); no plan is left behind."""
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"task_id": f"t{i}", "kind": "output", "prompt": "?"} for i in range(20)]
    lines.append("not JSON, never read")
    tasks.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n"
                             for x in lines))
    directory = tmp_path / "out"
    with pytest.raises(InputError) as caught:
        plan([corpus, tasks], directory)
    assert str(caught.value) == (
        f"{tasks}: none of its first 5 records is a corpus record ({tasks}:1: missing "
        "'code'); it looks like a tasks file (steptrace tasks --out): give it to steptrace "
        "predict --tasks; nothing was planned")
    assert list(directory.iterdir()) == []


def test_a_corpus_without_jobs_leaves_the_directory_free(tmp_path, corpus):
    """Only bad records: InputError, and no plan is left behind (the directory can take
    another plan). Shard size 0, no corpus, an unknown isolation: InputError."""
    directory = tmp_path / "out"
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "x"}, {"code": ADD, "inputs": 3}])
    with pytest.raises(InputError) as caught:
        plan(bad, directory)
    assert str(caught.value) == (
        f"{bad}: none of its records is a corpus record ({bad}:1: missing 'code'); a corpus "
        "record is a JSON object with 'code' and 'input' or 'inputs' (docs/guides/corpus.md); "
        "nothing was planned")
    assert list(directory.iterdir()) == []
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError) as caught:
        plan(empty, directory)
    assert str(caught.value) == "the corpora hold no jobs to trace"
    assert list(directory.iterdir()) == []
    assert plan(corpus, directory)[0].runs == 8
    for args, message in [
        (([corpus], tmp_path / "a", 0), "shard size must be at least 1, not 0"),
        (([], tmp_path / "a", 3), "give at least one corpus"),
    ]:
        with pytest.raises(InputError) as caught:
            plan_directory(*args, Limits(), "job")
        assert str(caught.value) == message
    with pytest.raises(InputError) as caught:
        plan(corpus, tmp_path / "a", isolation="thread")
    assert str(caught.value) == "isolation must be one of job, batch, not 'thread'"
    assert not (tmp_path / "a").exists()


def test_planning_again_resumes_or_refuses_other_work(planned, corpus, tmp_path):
    """The same jobs and options again: the plan there (resumed), nothing rewritten; the
    same file moved elsewhere is the same work (a program's source is the corpus's file
    name). Other jobs (an input changed, the corpus under another name, a second corpus),
    another shard size, other limits or isolation: refused, the directory untouched."""
    directory, made = planned
    before = tree(directory)
    moved = tmp_path / "moved" / "planned.jsonl"
    moved.parent.mkdir()
    shutil.copyfile(corpus, moved)
    for corpora in (corpus, moved):
        again, resumed = plan(corpora, directory)
        assert (again, resumed) == (made, True)
        assert tree(directory) == before
    changed = [dict(r) for r in PLANNED]
    changed[0]["inputs"] = ["1, 2", "3, 5"]
    (tmp_path / "edited").mkdir()
    edited = write_jsonl(tmp_path / "edited" / "planned.jsonl", changed)
    renamed = tmp_path / "renamed.jsonl"
    shutil.copyfile(corpus, renamed)
    refusals = [
        dict(corpora=[edited]),
        dict(corpora=[renamed]),
        dict(corpora=[corpus, renamed]),
        dict(corpora=[corpus], shard_size=4),
        dict(corpora=[corpus], limits=Limits(timeout_s=2.0)),
        dict(corpora=[corpus], isolation="batch"),
    ]
    for options in refusals:
        with pytest.raises(ShardError) as caught:
            plan(directory=directory, **options)
        assert str(caught.value) == (
            f"{directory} holds the plan of other work (other jobs, shard size, limits, "
            "isolation or packages): give a new directory")
        assert tree(directory) == before
    assert not (directory / MANIFEST).exists()
