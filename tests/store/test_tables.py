"""The table declarations (engine/store/_tables.py): one declaration per table, from which
the DDL, the Arrow columns and the schema page's rows come.

A store is made through every command that writes a table (trace, analyse, tasks,
predict's writer, score, features), and each table it ends up with is compared with its
declaration: columns in order, DuckDB types, NOT NULL, primary keys and UNIQUE
constraints. The declarations themselves are pinned against the public contract (the
README's Schema section), so a changed column is a failing test, not a silent change.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from steptrace.analytics._features import run_features
from steptrace.predictions._experiments import Experiment
from steptrace.predictions._predict import Prediction, PredictionStore
from steptrace.scoring._score import ScoreOptions, score_predictions
from steptrace.store import tables
from steptrace.store._store import SCHEMA, connect
from steptrace.store._tables import ARROW_TYPES, Column, Table, table
from steptrace.tasks._tasks import TaskOptions, generate_tasks
from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.tracing._trace import TraceOptions, trace_corpus

# The schema as the README documents it (schema version 4): table -> (column, type, NOT
# NULL) in column order, and the key. "!" marks NOT NULL (a key column is NOT NULL).
CONTRACT = {
    "meta": ("key VARCHAR!, value VARCHAR", ("key",)),
    "programs": ("program_id BIGINT!, source VARCHAR!, sample_id VARCHAR!, code VARCHAR!, "
                 "entry VARCHAR!, code_sha256 VARCHAR!, program_key VARCHAR!, shape VARCHAR!, "
                 "test VARCHAR, meta VARCHAR, environment VARCHAR", ("program_id",)),
    "runs": ("run_id BIGINT!, program_id BIGINT!, sample_id VARCHAR!, input_index INTEGER!, "
             "input VARCHAR!, status VARCHAR!, output VARCHAR, output_type VARCHAR, "
             "output_truncated BOOLEAN, exception_type VARCHAR, exception_message VARCHAR, "
             "expected VARCHAR, output_matches BOOLEAN, note VARCHAR, stdout VARCHAR, "
             "line_steps BIGINT, instruction_steps BIGINT, calls BIGINT, max_depth INTEGER, "
             "n_steps BIGINT, duration_us BIGINT, call_us BIGINT, isolation VARCHAR, "
             "run_key VARCHAR!, traced_at TIMESTAMP, chain VARCHAR, stdin VARCHAR, guest VARCHAR, "
             "settrace_line_steps BIGINT, backend VARCHAR, python VARCHAR", ("run_id",)),
    "steps": ("run_id BIGINT!, step INTEGER!, event VARCHAR!, func VARCHAR!, line INTEGER!, "
              "depth INTEGER!, frame INTEGER!", ()),
    "states": ("run_id BIGINT!, step INTEGER!, var VARCHAR!, value VARCHAR, type VARCHAR, "
               "truncated BOOLEAN!, object_id INTEGER", ()),
    "objects": ("run_id BIGINT!, object_id INTEGER!, type VARCHAR!, step INTEGER!",
                ("run_id", "object_id")),
    "attributes": ("run_id BIGINT!, step INTEGER!, object_id INTEGER!, attr VARCHAR!, "
                   "value VARCHAR, type VARCHAR, truncated BOOLEAN!, ref_id INTEGER", ()),
    "global_states": ("run_id BIGINT!, step INTEGER!, name VARCHAR!, value VARCHAR, "
                      "type VARCHAR, truncated BOOLEAN!, object_id INTEGER", ()),
    "settrace_lines": ("run_id BIGINT!, step INTEGER!, func VARCHAR!, line INTEGER!, "
                       "depth INTEGER!, frame INTEGER!", ()),
    "files": ("run_id BIGINT!, path VARCHAR!, kind VARCHAR!, size BIGINT!, sha256 VARCHAR, "
              "content BLOB, truncated BOOLEAN!, utf8 BOOLEAN", ("run_id", "path")),
    "guests": ("guest VARCHAR!, lock VARCHAR, first_used TIMESTAMP", ("guest",)),
    "analyses": ("run_id BIGINT!, status VARCHAR!, agrees BOOLEAN, disagreement VARCHAR, "
                 "int_ops BIGINT, int_ops_large BIGINT, seq_ops BIGINT, seq_ops_long BIGINT, "
                 "float_ops BIGINT, true_divisions BIGINT, evaluations BIGINT, "
                 "deterministic BOOLEAN, determinism_note VARCHAR, note VARCHAR, "
                 "analysed_at TIMESTAMP", ("run_id",)),
    "branches": ("run_id BIGINT!, line INTEGER!, col INTEGER!, kind VARCHAR!, "
                 "evaluation INTEGER!, taken BOOLEAN!", ()),
    "tasks": ("task_id VARCHAR!, kind VARCHAR!, run_id BIGINT!, sample_id VARCHAR!, "
              "line INTEGER, var VARCHAR, occurrence INTEGER, question VARCHAR, "
              "answer VARCHAR!, answer_type VARCHAR!, value_type VARCHAR, line_steps BIGINT, "
              "loop_nesting INTEGER, distinct_lines INTEGER, branch_count BIGINT, "
              "prompt_style VARCHAR!, prompt VARCHAR!, seed BIGINT!, created_at TIMESTAMP!",
              ("task_id",)),
    "experiments": ("model VARCHAR!, label VARCHAR!, prompt_style VARCHAR, "
                    "system_prompt VARCHAR, temperature DOUBLE, top_p DOUBLE, "
                    "max_tokens INTEGER, created_at TIMESTAMP!", ("model", "label")),
    "predictions": ("task_id VARCHAR!, model VARCHAR!, label VARCHAR!, sample_index INTEGER!, "
                    "kind VARCHAR!, prompt_style VARCHAR, prompt_sha256 VARCHAR, "
                    "raw_text VARCHAR, answer VARCHAR, parsed BOOLEAN!, prompt_tokens BIGINT, "
                    "completion_tokens BIGINT, latency_ms DOUBLE, error VARCHAR, "
                    "finish_reason VARCHAR, created_at TIMESTAMP",
                    ("task_id", "model", "label", "sample_index")),
    "scores": ("task_id VARCHAR!, model VARCHAR!, label VARCHAR!, sample_index INTEGER!, "
               "kind VARCHAR!, parsed BOOLEAN!, correct BOOLEAN!, distance DOUBLE, "
               "note VARCHAR, scored_at TIMESTAMP!, type_correct BOOLEAN, "
               "message_correct BOOLEAN", ("task_id", "model", "label", "sample_index")),
    "checks": ("check_key VARCHAR!, source VARCHAR!, status VARCHAR!, passed BOOLEAN!, "
               "note VARCHAR, guest VARCHAR!, timeout_s DOUBLE!, memory_mb INTEGER!, "
               "checked_at TIMESTAMP!", ("check_key",)),
    "run_features": ("run_id BIGINT!, transitions BIGINT, distinct_transitions INTEGER, "
                     "loop_depth INTEGER, longest_cycle INTEGER, distinct_lines INTEGER, "
                     "statement_lines INTEGER, coverage DOUBLE, conditions INTEGER, "
                     "branch_entropy DOUBLE", ("run_id",)),
}
UNIQUE = {("programs", "program_key"), ("runs", "run_key")}
LOOP = "def f(xs):\n    total = 0\n    for x in xs:\n        if x:\n            total += x\n    return total\n"


def spelled(declared: Table) -> str:
    return ", ".join(f"{c.name} {c.type}{'' if c.nullable else '!'}" for c in declared.columns)


def test_the_declarations_are_the_documented_schema():
    assert [t.name for t in tables()] == list(CONTRACT)
    for declared in tables():
        columns, key = CONTRACT[declared.name]
        assert (spelled(declared), declared.primary_key) == (columns, key), declared.name
        assert {(declared.name, c.name) for c in declared.columns if c.unique} == {
            pair for pair in UNIQUE if pair[0] == declared.name}
    assert table("scores") is tables()[16]
    with pytest.raises(KeyError):
        table("nope")


def test_every_column_is_documented_for_the_schema_page():
    """The docs generator renders doc_rows(); a column without a description would leave
    a hole in the page."""
    for declared in tables():
        assert declared.doc
        for name, type_, text in declared.doc_rows():
            assert text, (declared.name, name)
    assert table("meta").doc_rows() == [
        ("key", "VARCHAR", "primary key; the setting's name"),
        ("value", "VARCHAR", "its value")]
    assert table("scores").doc_rows()[:2] == [
        ("task_id", "VARCHAR", "primary key (task_id, model, label, sample_index); as in predictions"),
        ("model", "VARCHAR", "primary key (task_id, model, label, sample_index); as in predictions")]
    assert table("runs").doc_rows()[-8][2] == ("unique; unique identity of the job; resume "
                                               "skips stored keys")


def test_ddl_and_arrow_of_a_declaration():
    declared = Table("t", "a test table", (Column("a", "BIGINT", "x", nullable=False),
                                           Column("b", "VARCHAR", "y", unique=True)),
                     primary_key=("a",))
    assert declared.ddl() == ("CREATE TABLE IF NOT EXISTS t (\n"
                              "    a  BIGINT PRIMARY KEY,\n"
                              "    b  VARCHAR UNIQUE\n);\n")
    pair = Table("u", "two keys", (Column("a", "INTEGER", nullable=False),
                                   Column("b", "DOUBLE", nullable=False)), primary_key=("a", "b"))
    assert pair.ddl(replace=True) == ("CREATE OR REPLACE TABLE u (\n"
                                      "    a  INTEGER NOT NULL,\n"
                                      "    b  DOUBLE NOT NULL,\n"
                                      "    PRIMARY KEY (a, b)\n);\n")
    assert pair.arrow_schema() == pa.schema([pa.field("a", pa.int32(), nullable=False),
                                             pa.field("b", pa.float64(), nullable=False)])
    with pytest.raises(ValueError, match="unknown type 'TEXT'"):
        Column("c", "TEXT")
    with pytest.raises(ValueError, match="key column z is not declared"):
        Table("v", "", (Column("a", "BIGINT"),), primary_key=("z",))
    with pytest.raises(ValueError, match="declared twice"):
        Table("w", "", (Column("a", "BIGINT"), Column("a", "BIGINT")))


def test_arrow_types_are_what_duckdb_reads_back():
    """A batch built with a table's Arrow types lands in DuckDB as the declared types:
    the writers insert with ``SELECT *`` and rely on it."""
    con = duckdb.connect()
    for declared in tables():
        empty = pa.table({c.name: pa.array([], c.arrow) for c in declared.columns})
        con.register("incoming", empty)
        con.execute(f"CREATE TABLE {declared.name} AS SELECT * FROM incoming")
        con.unregister("incoming")
        found = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                            "WHERE table_name = ? ORDER BY ordinal_position",
                            [declared.name]).fetchall()
        assert found == [(c.name, c.type) for c in declared.columns]
    assert set(ARROW_TYPES) == {"BIGINT", "INTEGER", "DOUBLE", "BOOLEAN", "VARCHAR", "TIMESTAMP",
                                "BLOB"}


@pytest.fixture(scope="module")
def full_store(tmp_path_factory) -> Path:
    """A store every table-writing command has run on."""
    root = tmp_path_factory.mktemp("tables")
    corpus = root / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "loop", "code": LOOP, "input": "[1, 0, 2]",
                                  "output": "3"}) + "\n", encoding="utf-8")
    db = root / "full.duckdb"
    assert trace_corpus(corpus, db, TraceOptions(workers=0)).traced == 1
    assert analyse_store(db, AnalysisOptions(workers=0)).analysed == 1
    tasks_file = root / "tasks.jsonl"
    generate_tasks(db, TaskOptions(kinds=("output", "steps"), out=tasks_file))
    tasks = [json.loads(line) for line in tasks_file.read_text().splitlines()]
    store = PredictionStore(db)
    store.begin(Experiment("m", "l", "direct"), {t["task_id"]: "sha" for t in tasks})
    store.write([Prediction(t["task_id"], "m", 0, t["kind"], answer=t["answer"], parsed=True,
                            label="l") for t in tasks])
    score_predictions(db, tasks_file, ScoreOptions(workers=0))
    run_features(db)
    return db


def test_every_command_makes_its_tables_as_declared(full_store):
    con = duckdb.connect(str(full_store), read_only=True)
    try:
        columns: dict[str, list[tuple]] = {}
        for name, column, type_, nullable in con.execute(
                "SELECT table_name, column_name, data_type, is_nullable "
                "FROM information_schema.columns WHERE table_schema = 'main' "
                "ORDER BY table_name, ordinal_position").fetchall():
            columns.setdefault(name, []).append((column, type_, nullable == "NO"))
        constraints = con.execute(
            "SELECT table_name, constraint_type, constraint_column_names "
            "FROM duckdb_constraints() WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
            ).fetchall()
    finally:
        con.close()
    assert set(columns) == {t.name for t in tables()}
    for declared in tables():
        keyed = set(declared.primary_key) if len(declared.primary_key) == 1 else set()
        assert columns[declared.name] == [
            (c.name, c.type, not c.nullable or c.name in keyed) for c in declared.columns]
    assert sorted((t, kind, tuple(names)) for t, kind, names in constraints) == sorted(
        [(t.name, "PRIMARY KEY", t.primary_key) for t in tables() if t.primary_key]
        + [(t, "UNIQUE", (c,)) for t, c in UNIQUE])


def test_connect_creates_the_store_tables_from_their_declarations(tmp_path):
    con = connect(tmp_path / "new.duckdb")
    try:
        names = [n for (n,) in con.execute("SELECT table_name FROM duckdb_tables() "
                                            "ORDER BY table_name").fetchall()]
    finally:
        con.close()
    assert names == sorted(["meta", "programs", "runs", "steps", "states", "objects",
                            "attributes", "global_states", "settrace_lines", "files",
                            "guests", "analyses", "branches"])
    assert SCHEMA == "".join(t.ddl() for t in tables()[:13])
