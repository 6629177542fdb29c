"""Stored check verdicts (engine/scoring/_checks.py): ``score`` and ``score-cruxeval --db``
run each sandboxed check once, keep its verdict in the store's ``checks`` table, and read
it back the next time, keyed by exactly what decides it (the request's text, the guest
build, the limits): scoring again runs zero checks and prints the same numbers; another
timeout or guest runs again; a model's answer cannot reach another check's verdict.

Everything runs for real: a traced store, predictions from the stub model server over
HTTP, the sandbox (in this process, ``--workers 0``). Sandbox requests are counted by
wrapping the runner every check goes through.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import steptrace.sandbox._runner as runner
import steptrace.scoring._checks as checks_module
import steptrace.scoring._cruxeval as cruxeval_module
from steptrace.cli._main import main
from steptrace.sandbox._build import cache_key
from steptrace.sandbox._limits import Limits
from steptrace.scoring._checks import check_key
from steptrace.scoring._cruxeval import CruxSample, score_samples
from steptrace.store._store import SCHEMA_VERSION
from helpers.openai_stub import answer
from helpers.predict import predict_with_stub
from helpers.programs import LOOP  # f([1, 2, 3]) == 3, f([2]) == -1, f([3]) == 3

MODEL = "m1"


def invoke(*args, env: dict | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def block(text: str):
    return answer(f"[ANSWER]\n{text}\n[/ANSWER]")


@pytest.fixture()
def sandbox_requests(monkeypatch) -> list[int]:
    """How many guest requests reach the sandbox, per run (every check goes through
    run_chunks)."""
    counted: list[int] = []
    real = runner.run_chunks

    def counting(chunks, *args, **kwargs):
        chunks = list(chunks)
        counted.append(sum(len(chunk) for chunk in chunks))
        yield from real(chunks, *args, **kwargs)
    monkeypatch.setattr(runner, "run_chunks", counting)
    monkeypatch.setattr(cruxeval_module, "run_chunks", counting)  # imported by name there
    return counted


# ------------------------------------------------------------------ score --tasks
@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """LOOP traced on [1, 2, 3] (output 3) and on [2] (output -1), an input task of each
    run, two predictions each: the other run's input is the wrong one."""
    tmp = tmp_path_factory.mktemp("verdicts")
    corpus, db, tasks_file = tmp / "loop.jsonl", tmp / "s.duckdb", tmp / "tasks.jsonl"
    corpus.write_text(json.dumps({"id": "loop3", "code": LOOP, "input": "[1, 2, 3]"}) + "\n"
                      + json.dumps({"id": "loop2", "code": LOOP, "input": "[2]"}) + "\n")
    assert invoke("trace", corpus, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    made = invoke("tasks", "--db", db, "--kinds", "input", "--per-run", 1, "--out", tasks_file)
    assert made.exit_code == 0, made.output
    replies = {"3": [block("[1, 2, 3]"), block("[2]")],    # right, wrong (gives -1)
               "-1": [block("[2]"), block("[1, 2, 3]")]}   # right, wrong (gives 3)
    tasks = predict_with_stub(tasks_file, db, lambda t: replies[json.loads(t["question"])["output"]],
                              model=MODEL, samples=2)
    assert sorted(json.loads(t["question"])["output"] for t in tasks) == ["-1", "3"]
    return db, tasks_file


@pytest.fixture()
def store(predicted, tmp_path) -> tuple[Path, Path]:
    """A fresh copy of the predicted store: no verdict kept yet."""
    db, tasks_file = predicted
    copy = tmp_path / "s.duckdb"
    shutil.copy(db, copy)
    return copy, tasks_file


def score_json(db: Path, tasks_file: Path, *extra) -> dict:
    result = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 0, "--format",
                    "json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


SCORES_SQL = ("SELECT t.question, s.sample_index, s.correct, s.note FROM scores s "
              "JOIN tasks t USING (task_id) ORDER BY ALL")


def test_a_second_score_runs_no_check_and_prints_the_same(store, sandbox_requests):
    db, tasks_file = store
    first = score_json(db, tasks_file)
    assert (first["input_checks"], first["input_checks_reused"]) == (4, 0)
    assert sandbox_requests == [4]
    stored = rows(db, "SELECT source, status, passed, note, guest, timeout_s, memory_mb "
                      "FROM checks ORDER BY note NULLS FIRST")
    guest = cache_key()
    assert stored == [("input", "ok", True, None, guest, 3.0, 512),
                      ("input", "ok", True, None, guest, 3.0, 512),
                      ("input", "ok", False, "returned -1", guest, 3.0, 512),
                      ("input", "ok", False, "returned 3", guest, 3.0, 512)]
    scores = rows(db, "SELECT task_id, sample_index, correct, note FROM scores ORDER BY ALL")
    assert sorted((c, n) for _, _, c, n in scores) == [
        (False, "returned -1"), (False, "returned 3"), (True, None), (True, None)]

    second = score_json(db, tasks_file)
    assert sandbox_requests == [4]  # nothing more reached the sandbox
    assert (second["input_checks"], second["input_checks_reused"]) == (0, 4)
    drop = ("input_checks", "input_checks_reused")
    assert ({k: v for k, v in second.items() if k not in drop}
            == {k: v for k, v in first.items() if k not in drop})
    assert second["by_kind"][0]["pass@1"] == 0.5
    assert rows(db, "SELECT task_id, sample_index, correct, note FROM scores ORDER BY ALL"
                ) == scores
    assert rows(db, "SELECT count(*) FROM checks") == [(4,)]

    # the printed tables are the same too, and the count line says what was reused
    table = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 0)
    again = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 0)
    assert table.exit_code == again.exit_code == 0
    assert table.stdout == again.stdout
    assert again.stderr.splitlines()[-1] == (
        "4 predictions scored, 0 failed requests left out, 0 input checks run in the "
        "sandbox, 4 judged before (read from the store)")
    assert sandbox_requests == [4]


def test_another_timeout_or_memory_limit_runs_again(store, sandbox_requests):
    db, tasks_file = store
    assert score_json(db, tasks_file)["input_checks"] == 4
    two = score_json(db, tasks_file, "--timeout", 2)
    assert (two["input_checks"], two["input_checks_reused"]) == (4, 0)
    assert score_json(db, tasks_file, "--timeout", 2)["input_checks"] == 0
    assert score_json(db, tasks_file)["input_checks"] == 0  # the 3 s verdicts are still there
    assert sandbox_requests == [4, 4]
    assert rows(db, "SELECT timeout_s, count(*) FROM checks GROUP BY ALL ORDER BY ALL") == [
        (2.0, 4), (3.0, 4)]
    # the memory limit is in the key as every other limit is
    limits = Limits(timeout_s=3.0)
    request = {"code": LOOP, "entry": "f", "input": "[2]", "expected": "-1", "mode": "run"}
    keys = {check_key("input", request, "g", limits),
            check_key("input", request, "g", Limits(timeout_s=3.0, memory_mb=256)),
            check_key("input", request, "g", Limits(timeout_s=3.0, max_steps=7)),
            check_key("input", request, "g", Limits(timeout_s=2.5))}
    assert len(keys) == 4


def test_another_guest_runs_again(store, sandbox_requests, monkeypatch):
    """A verdict is the guest build's: when the guest's key changes (another tracer, runtime
    or package lock) every check runs again."""
    db, tasks_file = store
    assert score_json(db, tasks_file)["input_checks"] == 4
    real = checks_module.guest_key
    monkeypatch.setattr(checks_module, "guest_key", lambda lock=None: "rebuilt-" + real(lock))
    import steptrace.scoring._score as score_module
    monkeypatch.setattr(score_module, "guest_key", checks_module.guest_key)
    other = score_json(db, tasks_file)
    assert (other["input_checks"], other["input_checks_reused"]) == (4, 0)
    assert sandbox_requests == [4, 4]
    assert rows(db, "SELECT guest LIKE 'rebuilt-%', count(*) FROM checks GROUP BY ALL "
                    "ORDER BY ALL") == [(False, 4), (True, 4)]
    assert checks_module.guest_key(None) == "rebuilt-" + cache_key(None)


def test_a_forged_answer_cannot_reach_another_checks_verdict(store, sandbox_requests):
    """[1, 2, 3] passes for the task whose output is 3; the same text answering the task
    whose output is -1 is its own check (the expected output is in the key) and fails.
    An answer cannot move text between the key's fields either: JSON quotes each one."""
    db, tasks_file = store
    score_json(db, tasks_file)
    by_question = {(json.loads(q)["output"], i): (c, n) for q, i, c, n in rows(db, SCORES_SQL)}
    assert by_question == {("3", 0): (True, None), ("3", 1): (False, "returned -1"),
                           ("-1", 0): (True, None), ("-1", 1): (False, "returned 3")}
    assert len(set(rows(db, "SELECT check_key FROM checks"))) == 4
    request = {"code": LOOP, "entry": "f", "input": "[2]", "expected": "-1", "mode": "run"}
    forged = [
        {**request, "input": '[2]", "expected": "-1'},             # a field boundary in the text
        {**request, "input": "[2]", "expected": "-1", "extra": ""},
        {**request, "input": "[2] ", "expected": "-1"},              # one space more
        {**request, "input": "[2]\\u0000", "expected": "-1"},
        {**request, "input": "[2]\x00", "expected": "-1"},
        {**request, "input": "[\ud800]"},                             # a lone surrogate
    ]
    keys = [check_key("input", r, "g", Limits(timeout_s=3.0)) for r in [request, *forged]]
    assert len(set(keys)) == len(keys)
    assert check_key("input", request, "g", Limits(timeout_s=3.0)) != check_key(
        "cruxeval", request, "g", Limits(timeout_s=3.0))
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in keys)


def test_a_crashed_or_timed_out_check_is_not_kept(tmp_path, monkeypatch):
    """``crashed`` is the host's or a worker's failure and ``timeout`` a wall-time verdict
    (a busy machine's), neither the program's own: reported as failures but not kept, so
    the next score runs the check again; ``loops`` (proved) is kept."""
    from steptrace.scoring._checks import CheckVerdict, NewCheck, load_verdicts, store_new
    from steptrace.store._store import connect
    con = connect(tmp_path / "c.duckdb")
    try:
        new = [NewCheck("a" * 64, "input", CheckVerdict("crashed", False, "worker died"), "g",
                        3.0, 512),
               NewCheck("b" * 64, "cruxeval", CheckVerdict("timeout", False), "g", 3.0, 512),
               NewCheck("c" * 64, "cruxeval", CheckVerdict("ok", True), "g", 3.0, 512),
               NewCheck("e" * 64, "cruxeval", CheckVerdict("loops", False), "g", 3.0, 512)]
        assert store_new(con, new) == 2
        assert store_new(con, new[1:]) == 2  # the same keys again: kept once
        assert load_verdicts(con, ["a" * 64, "b" * 64, "c" * 64, "d" * 64, "e" * 64]) == {
            "c" * 64: CheckVerdict("ok", True), "e" * 64: CheckVerdict("loops", False)}
        assert con.execute("SELECT count(*) FROM checks").fetchall() == [(2,)]
    finally:
        con.close()


# ------------------------------------------------------------------ score-cruxeval --db
SAMPLES = [CruxSample("sample_0", "def f(x):\n    return x + 1", "1", "2"),
           CruxSample("sample_1", "def f(s):\n    return s[::-1]", "'ab'", "'ba'")]
GENERATIONS = {"sample_0": ["f(1)", "f(2)", "f(0 + 1)", "x"],
               "sample_1": ["f('ab')", "f('ba')", "f(", "f('ab')"]}


@pytest.fixture()
def crux_data(tmp_path) -> tuple[Path, Path]:
    data = tmp_path / "crux.jsonl"
    data.write_text("".join(json.dumps({"id": s.sample_id, "code": s.code, "input": s.input,
                                        "output": s.output}) + "\n" for s in SAMPLES))
    generations = tmp_path / "gen.json"
    generations.write_text(json.dumps(GENERATIONS))
    return data, generations


def crux_json(data: Path, generations: Path, *extra, env=None) -> dict:
    result = invoke("score-cruxeval", generations, "--mode", "input", "--data", data,
                    "--workers", 0, "--format", "json", *extra, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_score_cruxeval_db_keeps_verdicts(crux_data, tmp_path, sandbox_requests):
    data, generations = crux_data
    db = tmp_path / "crux.duckdb"
    out1, out2 = tmp_path / "a.json", tmp_path / "b.json"
    first = crux_json(data, generations, "--db", db, "--out", out1)
    # 7 kept generations (the "x" is dropped), 6 distinct check programs
    assert (first["checks_needed"], first["checks_run"], first["checks_reused"]) == (7, 6, 0)
    assert first["store"] == str(db)
    second = crux_json(data, generations, "--db", db, "--out", out2)
    assert (second["checks_run"], second["checks_reused"]) == (0, 6)
    assert sandbox_requests == [6]
    timing = ("seconds", "checks_per_second", "checks_run", "checks_reused")
    assert ({k: v for k, v in second.items() if k not in timing + ("out",)}
            == {k: v for k, v in first.items() if k not in timing + ("out",)})
    assert out1.read_bytes() == out2.read_bytes()
    assert first["outcomes"] == {"AssertionError": 2, "SyntaxError": 1, "ok": 4}
    assert rows(db, "SELECT source, status, passed, count(*) FROM checks GROUP BY ALL "
                    "ORDER BY ALL") == [("cruxeval", "AssertionError", False, 2),
                                        ("cruxeval", "SyntaxError", False, 1),
                                        ("cruxeval", "ok", True, 3)]
    # without --db every check runs, as before, and no store is touched
    plain = crux_json(data, generations)
    assert (plain["checks_run"], plain["checks_reused"], plain["store"]) == (6, 0, None)
    assert sandbox_requests == [6, 6]
    # the table shows the reused checks
    table = invoke("score-cruxeval", generations, "--mode", "input", "--data", data,
                   "--workers", 0, "--db", db)
    assert table.exit_code == 0, table.output
    assert "checks judged before (read from the store)" in table.stdout
    assert sandbox_requests == [6, 6]


def test_score_cruxeval_another_limit_runs_again(tmp_path, sandbox_requests):
    db = tmp_path / "crux.duckdb"
    first = score_samples(SAMPLES, GENERATIONS, "input", workers=0, store=db)
    same = score_samples(SAMPLES, GENERATIONS, "input", workers=0, store=db)
    other = score_samples(SAMPLES, GENERATIONS, "input", workers=0, store=db,
                          limits=Limits(timeout_s=2.0))
    assert [(r.checks_run, r.checks_reused) for r in (first, same, other)] == [
        (6, 0), (0, 6), (6, 0)]
    assert first.official() == same.official() == other.official()
    assert sandbox_requests == [6, 6]


def test_deprecated_score_cruxeval_uses_db_only_when_given(crux_data, tmp_path, monkeypatch,
                                                            sandbox_requests):
    data, generations = crux_data
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    plain = invoke("score", "--cruxeval", generations, "--mode", "input", "--data", data,
                   "--workers", 0, "--format", "json")
    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["store"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no default store made
    db = tmp_path / "given.duckdb"
    for expected in ((6, 0), (0, 6)):
        kept = invoke("score", "--cruxeval", generations, "--mode", "input", "--data", data,
                      "--workers", 0, "--format", "json", "--db", db)
        assert kept.exit_code == 0, kept.output
        summary = json.loads(kept.stdout)
        assert (summary["checks_run"], summary["checks_reused"]) == expected


# ------------------------------------------------------------------ progress bars
TTY = {"TTY_COMPATIBLE": "1"}   # rich draws on a terminal: this makes it take stderr for one
NO_TTY = {"TTY_COMPATIBLE": "0"}
BAR = "\u2501"  # the bar's line: what rich's BarColumn draws


def test_progress_bar_on_score_per_flags(store):
    db, tasks_file = store
    args = ("score", "--tasks", tasks_file, "--db", db, "--workers", 0, "--timeout", 2.5)
    drawn = invoke(*args, env=TTY)
    assert drawn.exit_code == 0, drawn.output
    assert BAR in drawn.stderr and "4/4" in drawn.stderr
    for extra, env in (((), NO_TTY), (("--quiet",), TTY)):
        # another timeout each time: the checks run again (none would run, and no bar be
        # drawn, with the verdicts of a timeout already used)
        result = invoke(*args, "--timeout", 2.25 if env is NO_TTY else 2.125, *extra, env=env)
        assert result.exit_code == 0, result.output
        assert BAR not in result.stderr and "4/4" not in result.stderr
        assert "4 input checks run in the sandbox" in result.stderr
        assert result.stdout == drawn.stdout
    # nothing left to run: no bar is drawn even on a terminal
    reused = invoke(*args, env=TTY)
    assert BAR not in reused.stderr and "0 input checks run" in reused.stderr


def test_progress_bar_on_score_cruxeval_per_flags(crux_data):
    data, generations = crux_data
    args = ("score-cruxeval", generations, "--mode", "input", "--data", data, "--workers", 0)
    drawn = invoke(*args, env=TTY)
    assert drawn.exit_code == 0, drawn.output
    assert BAR in drawn.stderr and "6/6" in drawn.stderr
    for extra, env in (((), NO_TTY), (("--quiet",), TTY)):
        result = invoke(*args, *extra, env=env)
        assert result.exit_code == 0, result.output
        assert result.stderr == ""
    old = invoke("score", "--cruxeval", generations, "--mode", "input", "--data", data,
                 "--workers", 0, "--quiet", env=TTY)
    assert old.exit_code == 0 and "6/6" not in old.stderr


def test_a_schema_5_store_gets_its_checks_table_when_scored(store, sandbox_requests):
    """A store of schema 5 has no checks table: scoring it upgrades it to 6 and makes the
    table (connect makes what is missing; score makes checks), then reuses its verdicts."""
    db, tasks_file = store
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE IF EXISTS checks")
        con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    first = score_json(db, tasks_file)
    assert (first["input_checks"], first["input_checks_reused"]) == (4, 0)
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert rows(db, "SELECT count(*) FROM checks") == [(4,)]
    assert score_json(db, tasks_file)["input_checks_reused"] == 4
    assert sandbox_requests == [4]
