"""Run and program ids follow the corpus order (engine/store/_ids.py): runs finishing in
any order, traces with any number of workers, an interrupted trace resumed, a second
corpus after the first, ``--force`` and the rule's own cases, each with the exact ids."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from steptrace.corpus._formats import iter_corpus
from steptrace.store._ids import CorpusOrder, corpus_ids, place
from steptrace.store._store import TraceWriter, connect
from steptrace.tracing._trace import TraceOptions, run_jobs, trace_corpus
from helpers.reproduce import assert_identical, differing_columns

# Work of very different sizes (done in C: a few steps each), so that runs finish out of
# corpus order when two workers share them; a record with three inputs (one program,
# three runs), one listed twice (a duplicate job: traced once, at its first place) and
# one that raises.
LOOP = ("def f(n):\n    k = n % 7\n    return k + len(sorted(map(hash, map(str, range(n)))))\n")
RAISE = "def f(x):\n    return 10 // x\n"
SIZES = (60_000, 3, 40_000, 5, 24_000, 1, 50_000, 2, 16_000, 4)


def records(prefix: str = "r") -> list[dict]:
    found = [{"id": f"{prefix}{i}", "code": LOOP + f"# {i}\n", "input": str(n)}
             for i, n in enumerate(SIZES)]
    found.insert(3, {"id": f"{prefix}multi", "code": LOOP, "inputs": ["7", "80000", "9"]})
    found.insert(6, {"id": f"{prefix}boom", "code": RAISE, "input": "0"})
    found.append(dict(found[1]))  # the same job again: one run, at its first place
    return found


# the (sample_id, input_index) of run 1, 2, ...: the corpus order, duplicates once
ORDER = ([("r0", 0), ("r1", 0), ("r2", 0), ("rmulti", 0), ("rmulti", 1), ("rmulti", 2),
          ("r3", 0), ("r4", 0), ("rboom", 0)]
         + [(f"r{i}", 0) for i in range(5, 10)])
PROGRAMS = ["r0", "r1", "r2", "rmulti", "r3", "r4", "rboom", "r5", "r6", "r7", "r8", "r9"]


def write(path: Path, found: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in found), encoding="utf-8")
    return path


def ids(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT run_id, sample_id, input_index, program_id FROM runs "
                           "ORDER BY run_id").fetchall()
    finally:
        con.close()


def programs(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT program_id, sample_id FROM programs ORDER BY program_id"
                           ).fetchall()
    finally:
        con.close()


def expected_ids(order=ORDER, names=PROGRAMS, first_run: int = 1, first_program: int = 1):
    program = {name: first_program + i for i, name in enumerate(names)}
    return [(first_run + i, sample, index, program[sample])
            for i, (sample, index) in enumerate(order)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("ids") / "c.jsonl", records())


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> Path:
    """The corpus traced in this process, one job after the other."""
    db = tmp_path_factory.mktemp("reference") / "ref.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert (summary.jobs, summary.duplicates, summary.traced) == (15, 1, 14)
    return db


def test_ids_are_corpus_places(reference):
    assert ids(reference) == expected_ids()
    assert programs(reference) == [(i, name) for i, name in enumerate(PROGRAMS, start=1)]


def test_runs_added_in_reverse_get_the_same_ids(corpus, reference, tmp_path):
    """The writer given the corpus's ids stores runs under their places whatever order
    they come in: the runs of an in-process trace written last first make the same store."""
    finished = [run for chunk in run_jobs((j for j in iter_corpus(corpus) if not isinstance(j, str)),
                                          TraceOptions(workers=0))
                for run in chunk]
    order = CorpusOrder()
    for run in finished:
        order.add(run.job.key, run.job.program.key)
    db = tmp_path / "reversed.duckdb"
    con = connect(db)
    try:
        writer = TraceWriter(con, guest=(finished[0].guest, None), ids=corpus_ids(con, order))
        for run in reversed(finished[:-1]):  # the last is the duplicate: one run
            writer.add([run])
            writer.commit()
    finally:
        con.close()
    assert ids(db) == expected_ids()
    assert differing_columns(reference, db) == {
        "runs": ["duration_us", "call_us", "traced_at"], "guests": ["first_used"]}
    assert assert_identical(reference, db)["runs"] == 14


@pytest.mark.parametrize("workers,isolation", [(1, "job"), (2, "job"), (2, "batch")])
def test_workers_and_isolations_make_the_same_store(corpus, reference, tmp_path, workers,
                                                    isolation):
    """Jobs handed out one at a time, committed one at a time: every run under its
    corpus place; only the timing columns (and, in batch isolation, runs.isolation)
    differ from the in-process trace."""
    db = tmp_path / "w.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=workers, isolation=isolation,
                                          chunk_size=1, commit_every=1))
    assert ids(db) == expected_ids()
    varying = {"runs": {"duration_us", "call_us", "traced_at"}, "guests": {"first_used"}}
    if isolation == "batch":
        varying["runs"].add("isolation")
    assert assert_identical(reference, db, varying) == {
        "programs": 12, "runs": 14, "steps": 56, "states": 42, "objects": 0, "attributes": 0,
        "global_states": 0, "settrace_lines": 0, "files": 0, "guests": 1}


class Interrupted(Exception):
    pass


def interrupt_after(count: int):
    def progress(done: int, total: int) -> None:
        if done >= count:
            raise Interrupted
    return progress


def test_a_resumed_trace_fills_in_its_places(corpus, reference, tmp_path):
    """A trace stopped after 7 runs (the first committed at once, then 5 more, the seventh
    lost), resumed: the store is the one an uninterrupted trace makes, ids included."""
    db = tmp_path / "resumed.duckdb"
    with pytest.raises(Interrupted):
        trace_corpus(corpus, db, TraceOptions(workers=0, chunk_size=1, commit_every=5),
                     progress=interrupt_after(7))
    assert ids(db) == expected_ids()[:6]
    summary = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert (summary.skipped, summary.traced) == (6, 8)
    assert ids(db) == expected_ids()
    assert assert_identical(reference, db)["runs"] == 14


def test_a_resume_with_gaps_anywhere(corpus, reference, tmp_path):
    """Stored runs that are no prefix of the corpus (as runs finishing out of order leave
    them): the first, a middle one and the last; the resume puts the rest in between."""
    finished = {run.job.key: run for chunk in run_jobs(
        (j for j in iter_corpus(corpus) if not isinstance(j, str)), TraceOptions(workers=0))
        for run in chunk}
    order = CorpusOrder()
    for key, run in finished.items():
        order.add(key, run.job.program.key)
    db = tmp_path / "gaps.duckdb"
    con = connect(db)
    try:
        writer = TraceWriter(con, ids=corpus_ids(con, order))
        keys = list(finished)
        writer.write([finished[keys[i]] for i in (13, 0, 7)])
    finally:
        con.close()
    assert [row[0] for row in ids(db)] == [1, 8, 14]
    trace_corpus(corpus, db, TraceOptions(workers=0))
    assert assert_identical(reference, db)["runs"] == 14


def test_a_second_corpus_follows_the_first(corpus, reference, tmp_path):
    """Another corpus's runs and programs take the ids after the store's; tracing the
    first corpus again changes nothing."""
    db = tmp_path / "two.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0))
    other = write(tmp_path / "other.jsonl", records("s"))
    trace_corpus(other, db, TraceOptions(workers=2, chunk_size=1))
    second = [(sample.replace("r", "s", 1), index) for sample, index in ORDER]
    assert ids(db) == expected_ids() + expected_ids(
        second, [name.replace("r", "s", 1) for name in PROGRAMS], 15, 13)
    again = trace_corpus(corpus, db, TraceOptions(workers=0))
    assert (again.skipped, again.traced) == (14, 0)
    assert ids(db)[:14] == expected_ids()


def test_a_resume_after_another_corpus_came_in_between(corpus, tmp_path):
    """The first corpus stopped after 3 runs, a second traced whole (runs 4 to 17, as the
    store's highest id was 3), the first resumed: its block (1 to 14) is taken, so its
    missing runs follow the highest id, in corpus order, and its programs too."""
    db = tmp_path / "between.duckdb"
    with pytest.raises(Interrupted):  # commits of the first run, then of 2 more
        trace_corpus(corpus, db, TraceOptions(workers=0, chunk_size=1, commit_every=2),
                     progress=interrupt_after(4))
    other = write(tmp_path / "other.jsonl", records("s"))
    trace_corpus(other, db, TraceOptions(workers=0))
    trace_corpus(corpus, db, TraceOptions(workers=0))
    second = [(sample.replace("r", "s", 1), index) for sample, index in ORDER]
    first = expected_ids()
    resumed = [(18 + i, sample, index, 3 + 12 + program - 3)
               for i, (_, sample, index, program) in enumerate(first[3:])]
    assert ids(db) == (first[:3]
                       + expected_ids(second, [n.replace("r", "s", 1) for n in PROGRAMS], 4, 4)
                       + resumed)


@pytest.mark.parametrize("stored,top,held,expected", [
    ({}, 0, None, {"a": 1, "b": 2, "c": 3}),
    ({}, 40, None, {"a": 41, "b": 42, "c": 43}),
    ({"b": 12}, 12, 1, {"a": 11, "b": 12, "c": 13}),           # its block, free
    ({"a": 11, "c": 13}, 20, 3, {"a": 11, "b": 20 + 1, "c": 13}),  # 12 held by another run
    ({"a": 5, "c": 9}, 9, 2, {"a": 5, "b": 10, "c": 9}),       # not one block
    ({"b": 1}, 1, 1, {"a": 2, "b": 1, "c": 3}),                # its block would start at 0
    ({"a": 1, "b": 2, "c": 3}, 3, 3, {"a": 1, "b": 2, "c": 3}),  # all stored (--force)
])
def test_the_rule(stored, top, held, expected):
    asked = []

    def held_between(low: int, high: int) -> int:
        asked.append((low, high))
        return held

    assert place(dict.fromkeys("abc"), stored, top, held_between) == expected
    offsets = {stored[key] - i for i, key in enumerate("abc", start=1) if key in stored}
    if len(offsets) == 1 and min(offsets) >= 0:
        base = min(offsets)
        assert asked == [(base + 1, base + 3)]
    else:
        assert asked == []
