"""``--where CONDITION`` (steptrace.store._where): runs selected by their run, program and
corpus metadata (``meta.KEY``), for tasks and score; hostile conditions; programs.meta
stored, bounded and upgraded in place."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import steptrace as st
from helpers.cli import assert_one_line_error, rows
from helpers.openai_stub import answer
from helpers.predict import predict_with_stub
from steptrace.cli._main import main
from steptrace.corpus._formats import CorpusError, jobs_from_record
from steptrace.corpus._meta import MAX_META_CHARS, record_meta
from steptrace.store._where import WhereError, select_runs

RECORDS = [
    {"id": "old", "code": "def f(x):\n    return x + 1", "input": "1", "output": "2",
     "release_date": "2024-06-01", "difficulty": 1, "source": "web"},
    {"id": "new", "code": "def f(x):\n    return x * 2", "input": "3", "output": "6",
     "release_date": "2025-03-01", "difficulty": 3, "licence": "MIT"},
    {"id": "newer", "code": "def f(s):\n    return s[::-1]", "input": "'ab'", "output": "'ba'",
     "release_date": "2025-09-30", "tags": ["string", "slice"]},
    {"id": "none", "code": "def f(x):\n    return -x", "input": "3", "output": "-3"},
]


def _corpus(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("where")
    db = folder / "s.duckdb"
    st.trace(_corpus(folder / "c.jsonl", RECORDS), db, workers=0)
    return db


def _ids(db: Path, where: str) -> list[str]:
    selected = select_runs(db, where)
    found = dict(rows(db, "SELECT run_id, sample_id FROM runs"))
    return [found[run_id] for run_id in selected]


def test_record_metadata_is_every_other_key_as_sorted_json():
    assert record_meta({"id": "a", "code": "x", "input": "1", "output": "2"}) is None
    assert record_meta({"code": "x", "input": "1", "z": [1, {"b": None}], "a": "é"}) == \
        '{"a": "é", "z": [1, {"b": null}]}'
    job, = jobs_from_record({"code": "def f(x): return x", "input": "1", "year": 2025},
                            "s", "1")
    plain, = jobs_from_record({"code": "def f(x): return x", "input": "1"}, "s", "1")
    assert job.program.meta == '{"year": 2025}'
    assert job.key == plain.key  # metadata is not part of a run's identity
    # an in-memory record's (a polars frame's) date is its ISO text
    import datetime as dt
    assert record_meta({"code": "x", "day": dt.date(2025, 1, 2)}) == '{"day": "2025-01-02"}'
    with pytest.raises(CorpusError, match=f"at most {MAX_META_CHARS:,}"):
        record_meta({"code": "x", "note": "n" * MAX_META_CHARS})
    with pytest.raises(CorpusError, match="NaN"):
        record_meta({"code": "x", "score": float("nan")})


def test_metadata_is_stored_and_queryable_in_sql(store):
    assert rows(store, "SELECT sample_id, meta FROM programs ORDER BY program_id") == [
        ("old", '{"difficulty": 1, "release_date": "2024-06-01", "source": "web"}'),
        ("new", '{"difficulty": 3, "licence": "MIT", "release_date": "2025-03-01"}'),
        ("newer", '{"release_date": "2025-09-30", "tags": ["string", "slice"]}'),
        ("none", None)]
    assert rows(store, "SELECT sample_id FROM programs WHERE meta->>'$.licence' = 'MIT'") == [
        ("new",)]


@pytest.mark.parametrize("where, expected", [
    ("meta.release_date >= '2025-01-01'", ["new", "newer"]),
    ("meta.release_date < '2025-01-01'", ["old"]),
    ("meta.release_date >= '2025-01-01' AND meta.release_date < '2025-06-01'", ["new"]),
    ("meta.difficulty::INT >= 2", ["new"]),
    ("meta.tags LIKE '%slice%'", ["newer"]),
    ("meta.nothing = 'x'", []),                       # a key no program has: NULL
    ("meta IS NULL OR meta.release_date IS NULL", ["none"]),
    ("meta_json IS NULL", ["none"]),
    ("sample_id IN ('old', 'none') AND status = 'ok'", ["old", "none"]),
    ("code LIKE '%[::-1]%'", ["newer"]),
    ('meta."release_date" > \'2025-06-01\'', ["newer"]),
])
def test_where_selects_runs_by_metadata_run_and_program(store, where, expected):
    assert _ids(store, where) == expected


@pytest.mark.parametrize("where, message", [
    ("1=1; DROP TABLE runs", "bad --where condition: Parser Error: syntax error at or near \";\""),
    ("run_id IN (SELECT 1 FROM read_csv('/etc/passwd'))",
     'bad --where condition: Permission Error: Cannot access file "/etc/passwd" - file '
     "system operations are disabled by configuration"),
    ("true) UNION SELECT 1 FROM read_text('/etc/hostname') WHERE (true",
     'bad --where condition: Permission Error: Cannot access file "/etc/hostname" - file '
     "system operations are disabled by configuration"),
    ("nope > 1", None),
    ("   ", "--where needs a condition, e.g. \"meta.release_date >= '2025-01-01'\""),
])
def test_a_hostile_or_bad_condition_is_one_line_and_changes_nothing(store, where, message):
    before = rows(store, "SELECT count(*) FROM runs") + rows(store, "SELECT count(*) FROM programs")
    with pytest.raises(WhereError) as raised:
        select_runs(store, where)
    text = str(raised.value)
    assert "\n" not in text
    if message is not None:
        assert text == message
    assert rows(store, "SELECT count(*) FROM runs") + rows(
        store, "SELECT count(*) FROM programs") == before


def test_tasks_and_score_take_where(tmp_path, store):
    db = tmp_path / "s.duckdb"
    db.write_bytes(store.read_bytes())
    out = tmp_path / "tasks.jsonl"
    made = CliRunner().invoke(main, ["tasks", "--db", str(db), "--kinds", "output", "--out",
                                     str(out), "--where", "meta.release_date >= '2025-01-01'",
                                     "--format", "json"])
    assert made.exit_code == 0, made.output
    tasks = [json.loads(line) for line in out.read_text().splitlines()]
    assert [t["sample_id"] for t in tasks] == ["new", "newer"]
    everything = st.make_tasks(db, "output")
    all_file = tmp_path / "all.jsonl"
    everything.tasks.write_ndjson(all_file)
    predict_with_stub(all_file, db, lambda task: answer(task["answer"]))
    scored = CliRunner().invoke(main, ["score", "--tasks", str(all_file), "--db", str(db),
                                       "--where", "meta.licence = 'MIT'"])
    assert scored.exit_code == 0, scored.output
    assert scored.stderr.startswith("1 predictions scored")
    assert rows(db, "SELECT t.sample_id FROM scores s JOIN tasks t USING (task_id)") == [("new",)]
    none = CliRunner().invoke(main, ["tasks", "--db", str(db), "--where", "meta.x = 'y'"])
    assert_one_line_error(none, f"no finished (ok or exception) runs in {db} meet --where")
    bad = CliRunner().invoke(main, ["score", "--tasks", str(all_file), "--db", str(db),
                                    "--where", "1; DROP TABLE runs"])
    assert_one_line_error(bad)
    assert rows(db, "SELECT count(*) FROM runs") == [(4,)]


def test_a_store_of_schema_5_gains_programs_meta_in_place(tmp_path, store):
    db = tmp_path / "old.duckdb"
    db.write_bytes(store.read_bytes())
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE programs DROP COLUMN meta")
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.close()
    assert _ids(db, "meta.release_date IS NULL") == ["old", "new", "newer", "none"]  # read as it is
    st.trace(_corpus(tmp_path / "more.jsonl", [
        {"id": "more", "code": "def f(x):\n    return x", "input": "0", "year": 2026}]),
        db, workers=0)
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [("7",)]
    assert rows(db, "SELECT sample_id, meta FROM programs ORDER BY program_id") == [
        ("old", None), ("new", None), ("newer", None), ("none", None),
        ("more", '{"year": 2026}')]


def test_a_time_window_split_of_cruxeval(tmp_path, cruxeval_path):
    """CRUXEval's first 12 samples given release dates a month apart (2024-07 to 2025-06):
    ``--where`` on the date selects exactly the samples of each window."""
    records = [json.loads(line) for line in cruxeval_path.read_text().splitlines()[:12]]
    for number, record in enumerate(records):
        record["release_date"] = f"{2024 + (6 + number) // 12}-{(6 + number) % 12 + 1:02d}-15"
    db = tmp_path / "crux.duckdb"
    st.trace(_corpus(tmp_path / "crux.jsonl", records), db, workers=0)
    before = _ids(db, "meta.release_date < '2025-01-01'")
    after = _ids(db, "meta.release_date >= '2025-01-01'")
    assert before == [f"sample_{n}" for n in range(6)]
    assert after == [f"sample_{n}" for n in range(6, 12)]
    window = st.make_tasks(db, "output", where="meta.release_date >= '2025-03-01' AND "
                                               "meta.release_date < '2025-05-01'")
    assert sorted(window.tasks["sample_id"].to_list()) == ["sample_8", "sample_9"]


def test_filter_where_reads_metadata_and_its_corpus_keeps_it(tmp_path, store):
    """``filter --where`` reads ``meta.KEY`` too, and the corpus ``filter --out`` writes
    carries each program's metadata keys, so a filtered benchmark keeps its dates."""
    from steptrace.benchmark._filters import FilterOptions, filter_runs, write_kept
    report = filter_runs(store, FilterOptions(rules=(), where="meta.release_date >= '2025-01-01'"))
    found = dict(rows(store, "SELECT run_id, sample_id FROM runs"))
    assert [found[run_id] for run_id in report.kept] == ["new", "newer"]
    out = tmp_path / "kept.jsonl"
    write_kept(store, report.kept, out)
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": "new", "code": RECORDS[1]["code"], "input": "3", "output": "6", "difficulty": 3,
         "licence": "MIT", "release_date": "2025-03-01"},
        {"id": "newer", "code": RECORDS[2]["code"], "input": "'ab'", "output": "'ba'",
         "release_date": "2025-09-30", "tags": ["string", "slice"]}]


def test_odd_keys_and_many_keys():
    """Keys that are not identifiers are quoted; keys differing in case are one field (the
    first in sorted order); past MAX_META_FIELDS keys only the named ones are fields."""
    import pyarrow as pa
    from steptrace.store import _where
    texts = ['{"first seen": "2025", "Tag": "a", "tag": "b", "q\\"k": "1"}', None]
    rows_ = pa.table({"run_id": [1, 2], "meta_json": texts})
    assert _where._evaluate(rows_, 'meta."first seen" = \'2025\'') == [1]
    assert _where._evaluate(rows_, "meta.tag = 'a'") == [1]  # "Tag" < "tag"
    assert _where._evaluate(rows_, 'meta."q""k" = \'1\'') == [1]
    many = ['{' + ", ".join(f'"k{i}": {i}' for i in range(_where.MAX_META_FIELDS + 1)) + '}']
    column = _where.meta_column(many, "meta.k7 = '7' AND meta.zz IS NULL")
    assert [f.name for f in column.type] == ["k7", "zz"]
    assert _where._evaluate(pa.table({"run_id": [5], "meta_json": many}),
                            "meta.k7::INT = 7 AND meta.zz IS NULL") == [5]


def test_filter_where_still_names_the_runs_table(store):
    from steptrace.benchmark._filters import FilterOptions, filter_runs
    report = filter_runs(store, FilterOptions(rules=(), where="runs.sample_id = 'old' OR "
                                                              "meta.licence = 'MIT'"))
    assert len(report.kept) == 2
