"""Sharded traces through the command line (CliRunner): ``trace --out``, ``trace-shard``,
``import``, and every reading command given a shard directory as ``--db`` (or
``--parquet``): sql, query, show, tasks, features, report, predict and score (the input
predictions checked in the sandbox) print what they print for a store traced from the same
corpus (ids aside: the store is traced in this process, so its run ids follow the corpus
order as the directory's do; program ids differ). Option errors are usage errors, a
store's errors one line.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from steptrace.sharding._plan import MANIFEST, read_plan
from steptrace.store._tables import ATTRIBUTES, GLOBAL_STATES, OBJECTS, STATES, STEPS
from helpers.cli import assert_one_line_error, invoke, ok
from helpers.openai_stub import answer
from helpers.predict import predict_with_stub
from helpers.shard_corpus import MAX_STEPS, write_mixed
from helpers.shards import assert_same_trace

TIMING = ("seconds", "runs/s", "runs_per_second")
STATUSES = {"exception": 3, "invalid": 2, "ok": 14, "step_limit": 1}
ROWS = {"programs": 17, "runs": 20, "steps": 2144, "states": 1126, "objects": 16,
        "attributes": 16, "global_states": 1, "settrace_lines": 0, "files": 0, "guests": 1}


def as_json(*args):
    return json.loads(ok(*args, "--format", "json"))


def items(stdout: str) -> dict:
    """The item -> value rows of a two-column JSON table, timings left out."""
    return {row["item"]: row["value"] for row in json.loads(stdout) if row["item"] not in TIMING}


def csv_rows(stdout: str) -> list[list[str]]:
    return [row for row in csv.reader(io.StringIO(stdout)) if row[0] not in TIMING]


def trace_out(corpus: Path, out: Path, *more):
    return invoke("trace", corpus, "--out", out, "--shard-size", 4, "--workers", 2,
                  "--max-steps", MAX_STEPS, "--quiet", *more)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The mixed corpus traced by the CLI into a store (--workers 0) and a shard directory
    (shard size 4, two workers, JSON summary). Tests copy them before writing to them."""
    tmp = tmp_path_factory.mktemp("shards-cli")
    corpus = write_mixed(tmp / "mixed.jsonl")
    store = tmp / "store.duckdb"
    stored = invoke("trace", corpus, "--db", store, "--workers", 0, "--max-steps", MAX_STEPS,
                    "--quiet")
    assert stored.exit_code == 1, stored.output  # the bad record
    sharded = trace_out(corpus, tmp / "out", "--format", "json")
    return SimpleNamespace(tmp=tmp, corpus=corpus, store=store, out=tmp / "out", result=sharded)


def this_machines(out: Path) -> str:
    """What a summary says of the plan's guest run as this machine's own build."""
    guest = read_plan(out).guest
    return f"{guest.key} sha256 {guest.digest[:16]}... (this machine's build)"


def copies(traced, target: Path) -> tuple[Path, Path]:
    """A copy of the store and of the shard directory under ``target``."""
    target.mkdir()
    shutil.copyfile(traced.store, target / "store.duckdb")
    shutil.copytree(traced.out, target / "out")
    return target / "store.duckdb", target / "out"


# ------------------------------------------------------------------ trace --out
def test_trace_out_prints_its_summary(traced):
    """Exit 1 and a warning for the bad record (as trace --db), the summary as JSON."""
    result = traced.result
    assert result.exit_code == 1
    assert result.stderr == f"warning: {traced.corpus}:20: missing 'code'\n"
    summary = json.loads(result.stdout)
    assert all(isinstance(summary.pop(key), float) for key in ("seconds", "runs_per_second"))
    assert summary == {
        "corpora": [str(traced.corpus)], "out": str(traced.out), "engine": "local", "jobs": 22,
        "duplicates": 2, "cross_shard_duplicates": 1, "shards": 5, "shards_done_before": 0,
        "shards_traced": 5, "runs": 20, "traced": 20, "by_status": STATUSES,
        "with_expected": 13, "matched": 11, "line_steps": 2078, "steps": 2144,
        "complete": True, "corpus_errors": [f"{traced.corpus}:20: missing 'code'"],
        "guest": this_machines(traced.out)}
    assert assert_same_trace(traced.store, traced.out) == ROWS


def test_trace_out_again_resumes(traced, tmp_path):
    """The same command again: every shard skipped, nothing traced (CSV summary)."""
    _, out = copies(traced, tmp_path / "c")
    result = trace_out(traced.corpus, out, "--format", "csv")
    assert result.exit_code == 1
    assert csv_rows(result.stdout) == [
        ["item", "value"], ["corpora", str(traced.corpus)], ["out", str(out)],
        ["engine", "local"], ["jobs in corpora", "22"], ["duplicate jobs", "2"],
        ["  of them in another shard", "1"], ["shards", "5"],
        ["shards done before (skipped)", "5"], ["shards traced now", "0"],
        ["runs traced now", "0"], ["line steps", "0"], ["trace steps", "0"],
        ["corpus records skipped as bad", "1"], ["runs in directory", "20"],
        ["complete", "True"]]
    other = trace_out(traced.corpus, out, "--timeout", 2)
    assert_one_line_error(other, f"{out} holds the plan of other work (other jobs, shard size, "
                                 "limits, isolation or packages): give a new directory")


@pytest.mark.parametrize("args, message", [
    (("--engine", "ray"), "--engine goes with --out DIR (a sharded trace)"),
    (("--address", "auto"), "--address goes with --out DIR (a sharded trace)"),
    (("--shard-size", 10), "--shard-size goes with --out DIR (a sharded trace)"),
    (("--plan-only",), "--plan-only goes with --out DIR (a sharded trace)"),
    (("{corpus}",), "a trace into --db takes one CORPUS (several go with --out DIR)"),
    (("--out", "{out}", "--force"), "--force goes with --db (a shard directory is resumed, not "
                                    "replaced: give a new --out to trace again)"),
    (("--out", "{out}", "--workers", 0), "a sharded trace needs --workers 1 or more"),
])
def test_trace_option_errors_are_usage_errors(tmp_path, args, message):
    """Options that need --out, or that --out excludes: exit 2, click's usage error, no
    store or directory made."""
    corpus = write_mixed(tmp_path / "mixed.jsonl")
    args = [str(a).format(corpus=corpus, out=tmp_path / "out") for a in args]
    result = invoke("trace", corpus, "--db", tmp_path / "s.duckdb", *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == f"Error: {message}"
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed.jsonl"]


def test_trace_into_a_shard_directory_is_refused(traced):
    result = invoke("trace", traced.corpus, "--db", traced.out, "--workers", 0)
    assert_one_line_error(result, f"{traced.out} is a shard directory: trace into it with "
                                  "steptrace trace CORPUS --out DIR")


# ------------------------------------------------------------------ trace-shard, import
def test_trace_shard_runs_one_shard_at_a_time(traced, tmp_path):
    """--plan-only plans and stops; trace-shard DIR --index I runs shard I (JSON: its
    counts), again: skipped; the manifest comes with the last shard; the result is the
    one-command run's. An index out of range, a broken input file, a directory that is
    not a shard directory: one line."""
    out = tmp_path / "out"
    planned = trace_out(traced.corpus, out, "--plan-only", "--format", "json")
    assert planned.exit_code == 1
    summary = json.loads(planned.stdout)
    assert (summary["shards"], summary["shards_traced"], summary["runs"],
            summary["complete"]) == (5, 0, 0, False)
    statuses = [{"exception": 1, "ok": 3}, {"ok": 4}, {"invalid": 1, "ok": 3},
                {"exception": 2, "ok": 2}, {"invalid": 1, "ok": 2, "step_limit": 1}]
    for number, index in enumerate((3, 1, 4, 0, 2), start=1):
        result = as_json("trace-shard", out, "--index", index, "--workers", 1)
        assert isinstance(result.pop("seconds"), float)
        assert (result.pop("index"), result.pop("runs"), result.pop("by_status"),
                result.pop("skipped"), result.pop("guest")) == (
            index, 4, statuses[index], False, this_machines(out))
        assert set(result) == {"with_expected", "matched", "line_steps", "steps", "rows"}
        assert (out / MANIFEST).exists() == (number == 5)
    again = json.loads(ok("trace-shard", out, "--index", 2, "--format", "json"))
    assert (again["skipped"], again["runs"], again["guest"]) == (True, 4, "")  # nothing ran
    assert json.loads((out / MANIFEST).read_text()) == json.loads(
        (traced.out / MANIFEST).read_text())
    assert assert_same_trace(traced.store, out) == ROWS
    ids = "SELECT run_id, run_key, program_id FROM runs ORDER BY run_id"
    assert as_json("sql", ids, "--db", out) == as_json("sql", ids, "--db", traced.out)
    assert_one_line_error(invoke("trace-shard", out, "--index", 5),
                          "shard index 5 is out of range: the plan has 5 shards (0..4)")
    shutil.rmtree(out / "shards" / "00001")
    (out / "inputs" / "00001.jsonl").write_text("{}\n")
    assert_one_line_error(invoke("trace-shard", out, "--index", 1),
                          f"{out / 'inputs' / '00001.jsonl'}:1: not a shard input line "
                          "('source' must be a string)")
    assert not (out / "shards" / "00001").exists()
    assert_one_line_error(invoke("trace-shard", tmp_path, "--index", 0),
                          f"{tmp_path} is not a shard directory (no plan.json; make one with "
                          "steptrace trace CORPUS --out DIR)")


def test_import_loads_a_shard_directory(traced, tmp_path):
    """import DIR --db FILE: the summary; the store then holds the directory's runs with
    their ids; again, nothing is imported; --force replaces them."""
    db = tmp_path / "imported.duckdb"
    result = ok("import", traced.out, "--db", db, "--format", "json")
    assert items(result) == {
        "shard directory": str(traced.out), "db": str(db), "shards done": 5,
        "runs in shards": 20, "already stored (skipped)": 0, "runs imported": 20,
        "programs added": 17}
    assert assert_same_trace(traced.store, db) == ROWS
    ids = "SELECT run_id, run_key FROM runs ORDER BY run_id"
    assert as_json("sql", ids, "--db", db) == as_json("sql", ids, "--db", traced.out)
    again = items(ok("import", traced.out, "--db", db, "--format", "json"))
    assert (again["already stored (skipped)"], again["runs imported"]) == (20, 0)
    forced = items(ok("import", traced.out, "--db", db, "--force", "--format", "json"))
    assert (forced["already stored (skipped)"], forced["runs imported"]) == (0, 20)
    assert as_json("sql", ids, "--db", db) == as_json("sql", ids, "--db", traced.out)
    assert_one_line_error(invoke("import", traced.tmp, "--db", db),
                          f"{traced.tmp} is not a shard directory (no plan.json; make one "
                          "with steptrace trace CORPUS --out DIR)")


# ------------------------------------------------------------------ reading commands
def without_program_ids(rows: list[dict]) -> list:
    return sorted(json.dumps({k: v for k, v in row.items() if k != "program_id"},
                             sort_keys=True) for row in rows)


TRACE_QUERIES = ["runs_by_status", "hottest_lines", "changing_variables", "hottest_functions",
                 "line_coverage", "loop_iterations", "missing_modules", "stdlib_methods",
                 "step_distribution"]
LIMITED = {"hottest_lines", "changing_variables", "hottest_functions", "line_coverage",
           "loop_iterations"}


@pytest.mark.parametrize("name", TRACE_QUERIES)
def test_named_queries_read_a_shard_directory(traced, name):
    """query NAME --db DIR and --parquet DIR give the store's rows (all of them: a limit
    would cut ties the two order by program id differently; program ids left out)."""
    params = ["--param", "limit=1000"] if name in LIMITED else []
    expected = as_json("query", name, "--db", traced.store, *params)
    assert expected or name == "missing_modules", name  # the corpus imports no missing module
    for where in ("--db", "--parquet"):
        got = as_json("query", name, where, traced.out, *params)
        assert without_program_ids(got) == without_program_ids(expected), (name, where)
        if not any("program_id" in row for row in expected):
            assert got == expected


def test_sql_reads_a_shard_directory(traced):
    """sql over every trace table, ids aside, in every format; a write is refused. (A
    view of a table whose rows keep the guest's order within a step has its row number as
    a column, rowid, which a store's table has as a hidden one: these queries name their
    columns.)"""
    def columns(table) -> str:
        return ", ".join(table.column_names)
    queries = [
        "SELECT * EXCLUDE (program_id, duration_us, call_us, traced_at) FROM runs "
        "ORDER BY run_id",
        f"SELECT {columns(STEPS)} FROM steps ORDER BY run_id, step",
        f"SELECT {columns(STATES)} FROM states ORDER BY run_id, step, rowid",
        f"SELECT {columns(OBJECTS)} FROM objects ORDER BY ALL",
        f"SELECT {columns(ATTRIBUTES)} FROM attributes ORDER BY run_id, step, rowid",
        f"SELECT {columns(GLOBAL_STATES)} FROM global_states ORDER BY ALL",
        "SELECT * EXCLUDE (program_id) FROM programs ORDER BY sample_id",
        "SELECT guest, lock FROM guests",
    ]
    for query in queries:
        for fmt in ("json", "csv", "table"):
            assert ok("sql", query, "--db", traced.out, "--format", fmt) == ok(
                "sql", query, "--db", traced.store, "--format", fmt), (query, fmt)
        assert ok("sql", query, "--parquet", traced.out, "--format", "json") == ok(
            "sql", query, "--db", traced.store, "--format", "json")
    result = invoke("sql", "DELETE FROM runs", "--db", traced.out)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert as_json("sql", "SELECT count(*) AS n FROM runs", "--db", traced.out) == [{"n": 20}]


def test_export_of_a_shard_directory(traced, tmp_path):
    """export --db DIR writes the store's export: the same tables with the same columns
    (ids aside), read back with sql --parquet."""
    exports = {}
    for name, db in (("store", traced.store), ("out", traced.out)):
        exports[name] = tmp_path / name
        ok("export", "--db", db, "--out", exports[name], "--runs-per-bucket", 8)
    for table in ("runs", "steps", "states", "objects", "attributes", "global_states",
                  "programs"):
        query = f"SELECT * FROM {table} LIMIT 0"
        assert ok("sql", query, "--parquet", exports["out"], "--format", "csv") == ok(
            "sql", query, "--parquet", exports["store"], "--format", "csv"), table
    for query in ("SELECT * EXCLUDE (program_id, duration_us, call_us, traced_at) FROM runs "
                  "ORDER BY run_id",
                  f"SELECT {', '.join(STATES.column_names)} FROM states ORDER BY ALL",
                  "SELECT * EXCLUDE (program_id) FROM programs ORDER BY sample_id"):
        assert as_json("sql", query, "--parquet", exports["out"]) == as_json(
            "sql", query, "--parquet", exports["store"]), query


def test_show_reads_a_shard_directory(traced):
    """show RUN_ID --db DIR prints what it prints for the store, every run, table and
    JSON (its run's ids and timings aside): the state rows within a step come in the
    guest's order."""
    for run_id in range(1, 21):
        assert ok("show", run_id, "--db", traced.out) == ok("show", run_id, "--db", traced.store)
        got = as_json("show", run_id, "--db", traced.out)
        want = as_json("show", run_id, "--db", traced.store)
        for view in (got, want):
            for key in ("program_id", "duration_us", "call_us", "traced_at"):
                view["run"].pop(key)
        assert got == want, run_id
    acc = as_json("show", "--sample-id", "acc", "--db", traced.out)
    first = [s for s in acc["steps"] if len(s["changes"]) > 1][0]
    order = ("SELECT var FROM states WHERE run_id = 15 AND step = {step} ORDER BY rowid")
    assert [c["var"] for c in first["changes"]] == [
        row["var"] for row in as_json("sql", order.format(step=first["step"]), "--db",
                                      traced.store)]


def test_a_partly_done_directory_reads_its_done_shards(traced, tmp_path):
    """Shards 0 and 3 not done: sql and query see the other three shards' 12 runs; none
    done: no runs, and the commands still work."""
    _, out = copies(traced, tmp_path / "c")
    for index in (0, 3):
        shutil.rmtree(out / "shards" / f"0000{index}")
    assert as_json("sql", "SELECT min(run_id) AS lo, max(run_id) AS hi, count(*) AS n "
                          "FROM runs", "--db", out) == [{"lo": 5, "hi": 20, "n": 12}]
    kept = "run_id BETWEEN 5 AND 12 OR run_id BETWEEN 17 AND 20"
    assert as_json("query", "runs_by_status", "--db", out) == as_json(
        "sql", "SELECT status, count(*) AS runs, count(*) FILTER (WHERE output_matches) AS "
               "matching, count(*) FILTER (WHERE NOT output_matches) AS not_matching, "
               f"sum(line_steps) AS line_steps FROM runs WHERE {kept} GROUP BY status "
               "ORDER BY runs DESC, status", "--db", traced.store)
    for index in (1, 2, 4):
        shutil.rmtree(out / "shards" / f"0000{index}")
    assert as_json("sql", "SELECT count(*) AS n FROM steps", "--db", out) == [{"n": 0}]
    assert as_json("query", "runs_by_status", "--db", out) == []
    assert_one_line_error(invoke("show", 1, "--db", out))


# ------------------------------------------------------------------ tasks, features, report
@pytest.fixture(scope="module")
def downstream(traced, tmp_path_factory):
    """Copies of the store and the directory, with tasks of every kind written to a file
    from each (the branch kind runs the analysis: its tables go to DIR/store.duckdb)."""
    tmp = tmp_path_factory.mktemp("downstream")
    store, out = copies(traced, tmp / "c")
    made = {}
    for name, db in (("store", store), ("out", out)):
        result = invoke("tasks", "--db", db, "--out", tmp / f"{name}.jsonl", "--workers", 2,
                        "--format", "json")
        assert result.exit_code == 0, result.output
        made[name] = result.stdout
    return SimpleNamespace(tmp=tmp, store=store, out=out, made=made)


def test_tasks_from_a_shard_directory(downstream):
    """tasks --db DIR makes the store's tasks (the same ids, prompts, answers; the same
    table printed), writes them to the file and the Parquet beside it, and keeps them in
    DIR/store.duckdb."""
    d = downstream
    assert d.made["out"] == d.made["store"]
    assert json.loads(d.made["out"])[-1] == {"kind": "total", "tasks": 229, "runs": 17}

    def tasks(name):
        return [{k: v for k, v in json.loads(line).items() if k != "created_at"}
                for line in (d.tmp / f"{name}.jsonl").read_text().splitlines()]
    assert tasks("out") == tasks("store")
    assert len(tasks("out")) == 229
    assert (d.tmp / "out.parquet").exists()
    by_kind = "SELECT kind, count(*) AS n FROM tasks GROUP BY kind ORDER BY kind"
    assert as_json("sql", by_kind, "--db", d.out) == as_json("sql", by_kind, "--db", d.store)
    assert as_json("query", "tasks_by_kind", "--db", d.out) == as_json(
        "query", "tasks_by_kind", "--db", d.store)
    analysed = "SELECT * EXCLUDE (analysed_at) FROM analyses ORDER BY run_id"
    assert as_json("sql", analysed, "--db", d.out) == as_json("sql", analysed, "--db", d.store)
    branches = "SELECT * FROM branches ORDER BY ALL"
    assert as_json("sql", branches, "--db", d.out) == as_json("sql", branches, "--db", d.store)


def test_features_of_a_shard_directory(downstream):
    """features --db DIR: the store's run_features rows and the same summary (its db and
    timings aside)."""
    d = downstream
    got = items(ok("features", "--db", d.out, "--format", "json"))
    want = items(ok("features", "--db", d.store, "--format", "json"))
    timings = [k for k in want if k.startswith("seconds")]
    assert got.pop("db") == str(d.out) and want.pop("db") == str(d.store)
    assert {k: v for k, v in got.items() if k not in timings} == {
        k: v for k, v in want.items() if k not in timings}
    query = "SELECT * FROM run_features ORDER BY run_id"
    rows = as_json("sql", query, "--db", d.out)
    assert len(rows) == 20 and rows == as_json("sql", query, "--db", d.store)


def test_report_of_a_shard_directory(downstream):
    """report --db DIR: the store's page but for the line naming the store."""
    d = downstream
    pages = {}
    for name, db in (("store", d.store), ("out", d.out)):
        page = d.tmp / f"{name}.html"
        summary = items(ok("report", "--db", db, "--out", page, "--format", "json"))
        assert summary.pop("report") == str(page)
        summary.pop("bytes")
        pages[name] = (summary, page.read_text().replace(str(db), "DB"))
    assert pages["out"][0] == pages["store"][0]
    assert pages["out"][0]["runs"] == 20
    meta = re.compile(r"Made [0-9-]+ [0-9:]+ UTC")
    assert meta.sub("", pages["out"][1]) == meta.sub("", pages["store"][1])


# ------------------------------------------------------------------ predict and score
KINDS = "output,input,state,coverage,exception"


def replies(task: dict) -> list:
    """Three samples a task: right, wrong, right (input tasks: the right input, one that
    gives another output, the right one); text outside a block is unparseable."""
    right = answer(f"[ANSWER]\n{task['answer']}\n[/ANSWER]")
    wrong = answer("[ANSWER]\n'no such value'\n[/ANSWER]")
    return [right, wrong, right if task["kind"] != "exception" else answer("no idea")]


def test_predict_and_score_a_shard_directory(traced, tmp_path):
    """Tasks from each, predictions from a real OpenAI-compatible server (one request at
    a time: a task's samples get its replies in order), scores (the input predictions run
    in the sandbox): the directory's scores are the store's."""
    store, out = copies(traced, tmp_path / "c")
    scored = {}
    for name, db in (("store", store), ("out", out)):
        tasks_file = tmp_path / f"{name}.jsonl"
        ok("tasks", "--db", db, "--kinds", KINDS, "--per-run", 1, "--out", tasks_file)
        tasks = predict_with_stub(tasks_file, db, replies, model="m1", samples=3)
        result = as_json("score", "--tasks", tasks_file, "--db", db, "--k", "1,2",
                         "--workers", 2)
        scored[name] = (tasks, result)
    (tasks, got), (same_tasks, want) = scored["out"], scored["store"]
    assert [t["task_id"] for t in tasks] == [t["task_id"] for t in same_tasks]
    assert {t["kind"] for t in tasks} == set(KINDS.split(","))
    assert got == want
    assert got["input_checks"] > 0 and got["scored"] == 3 * len(tasks)
    verdicts = "SELECT * EXCLUDE (scored_at) FROM scores ORDER BY ALL"
    assert as_json("sql", verdicts, "--db", out) == as_json("sql", verdicts, "--db", store)
    inputs = as_json("sql", "SELECT sample_index, correct, count(*) AS n FROM scores WHERE "
                            "kind = 'input' GROUP BY ALL ORDER BY ALL", "--db", out)
    assert [(r["sample_index"], r["correct"]) for r in inputs] == [
        (0, True), (1, False), (2, True)]
    predictions = "SELECT * EXCLUDE (created_at, latency_ms) FROM predictions ORDER BY ALL"
    assert as_json("sql", predictions, "--db", out) == as_json("sql", predictions, "--db", store)
