"""Objects, attributes and global_states in a real store: the rows a trace writes, the
same rows from job and batch isolation and from a second trace, ``--force`` replacing
them, and a version 3 store upgraded in place."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from steptrace.store._reader import open_store
from steptrace.store._store import SCHEMA_VERSION, connect
from steptrace.tracing._trace import TraceOptions, trace_corpus

BANK = """\
rate = 2
ledger = []


class Account:
    def __init__(self, owner):
        self.owner = owner
        self.balance = 0

    def deposit(self, amount):
        self.balance += amount * rate
        ledger.append(amount)


def f(names):
    accounts = [Account(name) for name in names]
    for account in accounts:
        account.deposit(len(account.owner))
    return accounts
"""
RECORDS = [{"id": "bank", "code": BANK, "input": "['ab', 'c']"},
           {"id": "list", "code": "def f(x):\n    a = [x]\n    b = a\n    b.append(2)\n"
                                  "    return a\n", "input": "1"}]
DETAIL = {
    "objects": "SELECT run_id, object_id, type, step FROM objects ORDER BY ALL",
    "attributes": "SELECT * FROM attributes ORDER BY run_id, step, object_id, attr",
    "global_states": "SELECT * FROM global_states ORDER BY run_id, step, name",
    "states": "SELECT * FROM states ORDER BY run_id, step, var",
}


def trace(tmp_path: Path, name: str, isolation: str = "job", force: bool = False) -> Path:
    corpus = tmp_path / "bank.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    db = tmp_path / name
    trace_corpus(corpus, db, TraceOptions(workers=0, isolation=isolation, force=force))
    return db


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def details(db: Path) -> dict[str, list[tuple]]:
    return {table: rows(db, sql) for table, sql in DETAIL.items()}


def test_a_trace_stores_objects_attributes_and_globals(tmp_path):
    """The bank program: ``names`` and the global ``ledger`` are objects 1 and 2 (locals
    first, then globals, at the first step), the two accounts 3 and 4 (made in the
    inlined comprehension), ``accounts`` 5; each deposit shows at the method's next line
    (``balance``) and its ``return`` (``ledger``); ``rate`` is recorded once."""
    db = trace(tmp_path, "one.duckdb")
    assert rows(db, "SELECT run_id, sample_id, status, output FROM runs ORDER BY run_id") == [
        (1, "bank", "ok", "[Account(owner='ab', balance=4), Account(owner='c', balance=2)]"),
        (2, "list", "ok", "[1, 2]")]
    assert rows(db, DETAIL["objects"]) == [
        (1, 1, "list", 0), (1, 2, "list", 0), (1, 3, "Account", 2), (1, 4, "Account", 6),
        (1, 5, "list", 10), (2, 1, "list", 2)]
    steps = dict(rows(db, "SELECT step, func || ':' || event || ':' || line FROM steps "
                          "WHERE run_id = 1"))
    assert [steps[step] for step in (2, 4, 5, 14, 15, 20, 21)] == [
        "Account.__init__:call:6", "Account.__init__:line:8", "Account.__init__:return:8",
        "Account.deposit:line:12", "Account.deposit:return:12", "Account.deposit:line:12",
        "Account.deposit:return:12"]
    assert rows(db, "SELECT step, object_id, attr, value, type, truncated, ref_id "
                    "FROM attributes WHERE run_id = 1 ORDER BY step, object_id, attr") == [
        (4, 3, "owner", "'ab'", "str", False, None),
        (5, 3, "balance", "0", "int", False, None),
        (8, 4, "owner", "'c'", "str", False, None),
        (9, 4, "balance", "0", "int", False, None),
        (14, 3, "balance", "4", "int", False, None),
        (20, 4, "balance", "2", "int", False, None)]
    assert rows(db, "SELECT step, name, value, type, truncated, object_id FROM global_states "
                    "WHERE run_id = 1 ORDER BY step, name") == [
        (0, "ledger", "[]", "list", False, 2), (0, "rate", "2", "int", False, None),
        (15, "ledger", "[2]", "list", False, 2), (21, "ledger", "[2, 1]", "list", False, 2)]
    assert rows(db, "SELECT step, var, object_id FROM states WHERE run_id = 1 AND "
                    "var IN ('account', 'accounts') ORDER BY step, var") == [
        (10, "accounts", 5), (11, "account", 3), (16, "account", 3), (16, "accounts", 5),
        (17, "account", 4), (22, "account", 4), (22, "accounts", 5)]
    assert rows(db, "SELECT step, var, value, object_id FROM states WHERE run_id = 2 "
                    "ORDER BY step, var") == [
        (0, "x", "1", None), (2, "a", "[1]", 1), (3, "b", "[1]", 1), (4, "a", "[1, 2]", 1),
        (4, "b", "[1, 2]", 1), (5, "<return>", "[1, 2]", 1)]


@pytest.mark.slow
def test_job_and_batch_isolation_and_a_second_trace_store_the_same_rows(tmp_path):
    """Object ids come from the order the tracer sees objects, never from addresses: the
    same corpus traced in job isolation, in batch isolation and again (``--force``)
    stores identical states, objects, attributes and global states (the forced runs
    under the ids they had: a run's id is its place in the corpus)."""
    job = trace(tmp_path, "job.duckdb", "job")
    batch = trace(tmp_path, "batch.duckdb", "batch")
    assert details(job) == details(batch)
    first = details(job)
    assert {row[0] for found in first.values() for row in found} == {1, 2}
    trace(tmp_path, "job.duckdb", "job", force=True)
    assert details(job) == first
    assert rows(job, "SELECT run_id FROM runs ORDER BY run_id") == [(1,), (2,)]


def test_a_version_3_store_is_upgraded_in_place_and_still_reads(tmp_path):
    """A version 3 store (states without object_id, no object tables) opens read-only as
    it is (its runs read back, without object state), and the first write adds the column (NULL for its rows)
    and the tables, sets version 4 and keeps every row; new runs get object rows."""
    db = trace(tmp_path, "old.duckdb")
    with duckdb.connect(str(db)) as con:
        for table in ("objects", "attributes", "global_states"):
            con.execute(f"DROP TABLE {table}")
        con.execute("ALTER TABLE states DROP COLUMN object_id")
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    before = rows(db, "SELECT * FROM states ORDER BY run_id, step, var")
    with open_store(db) as store:
        run = store.run(2)
        assert (run.output, [s.value for s in run.states]) == (
            "[1, 2]", ["1", "[1]", "[1]", "[1, 2]", "[1, 2]", "[1, 2]"])
        assert {s.object_id for s in run.states} == {None}
        assert (run.objects, run.attributes, run.globals) == ((), (), ())
        assert store.states(2).columns[-1] == "object_id"
        assert store.states(2)["object_id"].to_list() == [None] * 6
    connect(db).close()
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [
        (SCHEMA_VERSION,)] == [("7",)]
    assert rows(db, "SELECT * FROM states ORDER BY run_id, step, var") == [
        row + (None,) for row in before]
    assert rows(db, "SELECT count(*) FROM objects") == [(0,)]
    corpus = tmp_path / "more.jsonl"
    corpus.write_text(json.dumps({"id": "more", "code": RECORDS[1]["code"], "input": "5"}) + "\n")
    trace_corpus(corpus, db, TraceOptions(workers=0))
    assert rows(db, "SELECT run_id, object_id, type, step FROM objects") == [(3, 1, "list", 2)]
    assert rows(db, "SELECT step, var, object_id FROM states WHERE run_id = 3 AND var = 'b' "
                    "ORDER BY step") == [(3, "b", 1), (4, "b", 1)]


def test_show_lists_attribute_and_global_changes(tmp_path):
    """``steptrace show``: a step's changed locals, then ``#id.attr=value`` per changed
    attribute, then ``global name=value``; JSON gives each local's object id."""
    from click.testing import CliRunner
    from steptrace.cli._main import main
    db = trace(tmp_path, "show.duckdb")
    table = CliRunner().invoke(main, ["show", "1", "--db", str(db), "--format", "csv"])
    assert table.exit_code == 0, table.output
    changed = {int(row[0]): row[-1] for row in __import__("csv").reader(
        table.output.splitlines()[1:])}
    assert [changed[step] for step in (0, 14, 15)] == [
        "names=['ab', 'c'], global ledger=[], global rate=2",
        "self=Account(owner='ab', balance=4), #3.balance=4",
        "<return>=None, global ledger=[2]"]
    shown = CliRunner().invoke(main, ["show", "1", "--db", str(db), "--format", "json"])
    step = __import__("json").loads(shown.output)["steps"][14]
    assert (step["changes"], step["attributes"], step["globals"]) == (
        [{"var": "self", "value": "Account(owner='ab', balance=4)", "type": "Account",
          "truncated": False, "object_id": 3}],
        [{"object_id": 3, "attr": "balance", "value": "4", "type": "int", "truncated": False,
          "ref_id": None}], [])
