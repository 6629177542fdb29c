"""A shard directory someone else wrote is data: nothing in it changes this machine's guest
or reads this machine's other files, and whatever is wrong with it is one line of error.

* Its guest: a directory whose plan names this machine's own build key, with a component
  of its own (a valid one: this machine's build with a custom section added, the plan's
  digest fixed to match), is read by ``tasks``, ``sql``, ``features``, ``import``,
  ``analyse`` and what ``score`` opens, with this machine's cache empty and with it
  holding the build: nothing is installed, and a plain ``trace`` afterwards runs this
  machine's build (its key and digest, the same results). The commands that run the
  directory's guest (``trace-shard``, a resumed ``trace --out``) refuse it in one line
  naming its digest, refuse a ``--trust-guest`` of another digest, and with its own run
  it from the cache's ``foreign/`` folder and say so.
* Its plan's guest key is a file name: path characters, NUL, another case, other lengths
  are refused.
* Links: nothing below the directory may be a symbolic link (a shard folder, a table
  file, the guest, an input file, the plan, ``shards``, ``store.duckdb``); the directory
  itself may be one. A FIFO where a file belongs is refused, not waited on.
* Parquet files whose columns are not the declared ones (another type, nullable where
  the table says not null, a column missing, not Parquet at all) are one line through
  every command that reads them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from steptrace.sandbox import _build as build
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import compiled_path
from steptrace.sharding._plan import guest_path, read_plan
from steptrace.sharding._shard import SHARD_TABLES
from steptrace.store._store import connect
from helpers.cli import assert_one_line_error, invoke, ok
from helpers.openai_stub import answer
from helpers.predict import predict_with_stub
from helpers.processes import HANG_GUARD_S, write_jsonl

RECORDS = [
    {"id": "add", "code": "def f(a, b):\n    c = a + b\n    return c\n", "input": "1, 2",
     "output": "3"},
    {"id": "set", "code": "def f(x):\n    s = {x, 'a', 'b', 'c', 'd'}\n    return list(s)\n",
     "input": "'e'"},
    {"id": "boom", "code": "def f(x):\n    return 1 // x\n", "input": "0"},
    {"id": "loop", "code": "def f(n):\n    t = 0\n    for i in range(n):\n        t += i\n"
                           "    return t\n", "input": "5", "output": "10"},
]
RUNS = ("SELECT sample_id, status, output, exception_type, n_steps, line_steps, guest "
        "FROM runs ORDER BY sample_id")


def sql(db: Path, query: str) -> list[dict]:
    return json.loads(ok("sql", query, "--db", db, "--format", "json"))


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The corpus traced by this machine into a shard directory (shard size 2), and a
    plain trace of it into a store: the reference a later trace must equal."""
    tmp = tmp_path_factory.mktemp("hostile")
    corpus = write_jsonl(tmp / "c.jsonl", RECORDS)
    out = tmp / "out"
    ok("trace", corpus, "--out", out, "--shard-size", 2, "--workers", 1, "--quiet")
    reference = tmp / "reference.duckdb"
    ok("trace", corpus, "--db", reference, "--workers", 1, "--quiet")
    found = build.artifacts()
    return corpus, out, sql(reference, RUNS), found.key, build.file_digest(found.wasm)


def custom_section(name: bytes, payload: bytes) -> bytes:
    body = bytes([len(name)]) + name + payload
    assert len(body) < 128  # one LEB128 byte
    return b"\x00" + bytes([len(body)]) + body


@pytest.fixture
def hostile(traced, tmp_path):
    """A copy of the directory whose guest is another valid component (this machine's
    build with a custom section added) under this machine's key, the plan's digest fixed
    to match, as someone could hand it over; and that digest."""
    corpus, out, _, key, _ = traced
    copy = tmp_path / "hostile"
    shutil.copytree(out, copy)
    plan = read_plan(copy)
    assert plan.guest.key == key
    wasm = guest_path(copy, plan.guest)
    data = wasm.read_bytes() + custom_section(b"forged", b"not a build of this machine")
    wasm.write_bytes(data)
    digest = build.hashlib.sha256(data).hexdigest()
    document = json.loads((copy / "plan.json").read_text())
    document["guest"]["digest"] = digest
    (copy / "plan.json").write_text(json.dumps(document))
    return copy, digest


def run_readers(directory: Path, tmp_path: Path) -> None:
    """What a user does with a directory handed over: tasks, sql, features, import, and
    the opening for writing that score and analyse do."""
    ok("tasks", "--db", directory, "--kinds", "output", "--out", tmp_path / "tasks.jsonl")
    ok("sql", "SELECT count(*) FROM runs", "--db", directory)
    ok("features", "--db", directory)
    ok("import", directory, "--db", tmp_path / "imported.duckdb")
    connect(directory).close()


def cache_guests(cache: Path) -> list[str]:
    """The components anywhere in a cache."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*.wasm")) if cache.exists() \
        else []


# ---------------------------------------------------------------------- the guest
def test_a_hostile_guest_is_never_installed_in_an_empty_cache(traced, hostile, tmp_path,
                                                             monkeypatch):
    """With this machine's cache empty (its build not made yet), reading the directory
    installs nothing: the build later made here is looked up under the key with nothing
    of the directory's there."""
    directory, _ = hostile
    _, _, _, key, _ = traced
    empty = tmp_path / "empty-cache"
    monkeypatch.setenv(build.CACHE_ENV, str(empty))
    run_readers(directory, tmp_path)
    assert cache_guests(empty) == []
    assert not build.artifacts(key).wasm.exists()


def test_a_hostile_guest_changes_nothing_a_later_trace_produces(traced, hostile, tmp_path):
    """With this machine's build in the cache: the readers, then ``analyse`` and ``score`` of
    predicted inputs (which run the directory's programs again, in this machine's build),
    install nothing; a plain
    ``trace`` afterwards runs this machine's build, key and digest, with the reference's
    results."""
    corpus, _, reference, key, digest = traced
    directory, _ = hostile
    cache = build.cache_dir()
    before = cache_guests(cache)
    run_readers(directory, tmp_path)
    assert "analysed" in ok("analyse", "--db", directory, "--workers", 1, "--quiet")
    tasks_file = tmp_path / "input-tasks.jsonl"
    ok("tasks", "--db", directory, "--kinds", "input", "--out", tasks_file)
    predict_with_stub(tasks_file, directory,
                      lambda task: [answer(f"[ANSWER]\n{task['answer']}\n[/ANSWER]")])
    scored = json.loads(ok("score", "--tasks", tasks_file, "--db", directory, "--workers", 1,
                           "--format", "json"))
    assert scored["input_checks"] > 0  # the predicted inputs ran, in this machine's build
    assert cache_guests(cache) == before and not (cache / "foreign").exists()
    assert build.file_digest(build.artifacts(key).wasm) == digest
    later = tmp_path / "later.duckdb"
    ok("trace", corpus, "--db", later, "--workers", 1, "--quiet")
    assert sql(later, RUNS) == reference
    assert {r["guest"] for r in reference} == {key}
    assert sql(later, "SELECT guest, lock FROM guests") == [{"guest": key, "lock": None}]


def test_running_a_hostile_guest_is_refused_without_trust(traced, hostile, tmp_path):
    """``trace-shard`` and a resumed ``trace --out`` would run the directory's component:
    refused in one line naming its digest and how to trust it; a ``--trust-guest`` of
    another digest (this machine's) is refused too; nothing installed, no shard run."""
    corpus, _, _, key, digest = traced
    directory, forged = hostile
    shutil.rmtree(directory / "shards" / "00001")
    (directory / "steptrace_shards.json").unlink()
    message = (f"the plan's guest {key} (sha256 {forged[:16]}...) is not a build made on this "
               f"machine (this machine's build of that key has sha256 {digest[:16]}...); to "
               f"run the component {guest_path(directory, read_plan(directory).guest)} anyway, "
               f"if you trust where it came from: --trust-guest {forged}")
    assert_one_line_error(invoke("trace-shard", directory, "--index", 1, "--workers", 1),
                          message)
    assert_one_line_error(invoke("trace", corpus, "--out", directory, "--shard-size", 2,
                                 "--workers", 1, "--quiet"), message)
    assert_one_line_error(invoke("trace-shard", directory, "--index", 1, "--trust-guest",
                                 digest), f"--trust-guest {digest[:16]}... is not the plan's "
                                          f"guest: its component has sha256 {forged}")
    assert_one_line_error(invoke("trace-shard", directory, "--index", 1, "--trust-guest",
                                 "../" + forged[3:]),
                          "--trust-guest takes the SHA-256 of a guest component (64 hex "
                          f"digits), not '../{forged[3:]}'")
    assert not (directory / "shards" / "00001").exists()
    assert not (build.cache_dir() / "foreign").exists()
    assert invoke("trace", corpus, "--db", tmp_path / "s.duckdb", "--trust-guest",
                  forged).exit_code == 2  # it goes with --out


@pytest.mark.slow  # compiles the forged component (10-20 s)
def test_a_trusted_foreign_guest_runs_apart_and_says_so(traced, hostile, tmp_path):
    """Trusted by its digest, the directory's component runs from the cache's ``foreign/``
    folder (named by the digest), the summary says whose guest ran; this machine's build
    under the key is untouched and a plain trace afterwards is the reference."""
    corpus, _, reference, key, digest = traced
    directory, forged = hostile
    shutil.rmtree(directory / "shards" / "00001")
    result = json.loads(ok("trace-shard", directory, "--index", 1, "--workers", 1,
                           "--trust-guest", forged.upper(), "--format", "json"))
    assert (result["runs"], result["guest"]) == (
        2, f"{key} sha256 {forged[:16]}... (the directory's copy, trusted with --trust-guest)")
    foreign = build.cache_dir() / "foreign" / f"guest-{forged}.wasm"
    assert build.file_digest(foreign) == forged
    assert compiled_path(build.GuestArtifacts(forged, foreign, foreign.with_suffix(".cwasm")),
                         Limits()).exists()
    assert build.file_digest(build.artifacts(key).wasm) == digest
    later = tmp_path / "later.duckdb"
    ok("trace", corpus, "--db", later, "--workers", 1, "--quiet")
    assert sql(later, RUNS) == reference


def test_a_build_made_here_runs_without_trust(traced, tmp_path, monkeypatch):
    """A directory this machine planned, resumed once its build has left the cache (another
    build under the key now): its copy is a build this machine made (the build log names
    its key and digest), so it runs, from ``foreign/``, without ``--trust-guest``."""
    from steptrace.sandbox._cache import record
    corpus, out, _, key, digest = traced
    directory = tmp_path / "mine"
    shutil.copytree(out, directory)
    cache = tmp_path / "cache"
    monkeypatch.setenv(build.CACHE_ENV, str(cache))
    build.write_verified(build.artifacts(key).wasm, b"another build of the key")
    record(cache, {"event": "built", "key": key, "group": key, "variant": "", "packages": None,
                   "digest": digest})
    shutil.rmtree(directory / "shards" / "00001")
    session = build.artifacts().wasm.parent
    limits_cwasm = compiled_path(build.GuestArtifacts(digest, cache / "foreign" /
                                                      f"guest-{digest}.wasm",
                                                      cache / "foreign" / f"guest-{digest}.cwasm"),
                                 read_plan(directory).limits)
    # its compiled form, as this machine compiled it before (saves compiling again here)
    monkeypatch.setenv(build.CACHE_ENV, str(session))
    compiled = compiled_path(build.artifacts(key), read_plan(directory).limits)
    monkeypatch.setenv(build.CACHE_ENV, str(cache))
    if compiled.exists():
        limits_cwasm.parent.mkdir(parents=True)
        shutil.copy2(compiled, limits_cwasm)
        shutil.copy2(build.sidecar(compiled), build.sidecar(limits_cwasm))
    result = json.loads(ok("trace-shard", directory, "--index", 1, "--workers", 1,
                           "--format", "json"))
    assert result["guest"] == (f"{key} sha256 {digest[:16]}... (the directory's copy of a "
                               "build this machine made, no longer in its cache)")
    assert build.artifacts(key).wasm.read_bytes() == b"another build of the key"
    assert build.file_digest(cache / "foreign" / f"guest-{digest}.wasm") == digest


# ---------------------------------------------------------------------- keys
@pytest.mark.parametrize("key", [
    "../" + "a" * 21, "a" * 23 + "/", "/" + "a" * 23, "a" * 23 + "\0", "a" * 12 + "\0" + "a" * 11,
    "A" * 24, "a" * 24 + "\n", "a" * 25, "a" * 23, "", "../../../etc/passwd", 12345, None,
    ["a" * 24]])
def test_a_plan_guest_key_must_be_a_build_key(traced, tmp_path, key):
    """The key names files (the directory's guest, a cache entry): anything but 24 lower
    hex digits is refused by every command, in one line, before any file is named."""
    _, out, _, _, _ = traced
    directory = tmp_path / "d"
    shutil.copytree(out, directory)
    document = json.loads((directory / "plan.json").read_text())
    document["guest"]["key"] = key
    (directory / "plan.json").write_text(json.dumps(document))
    message = (f"{directory / 'plan.json'}: the guest must be a build key (24 hex digits), a "
               "SHA-256 digest (64 hex digits), a wasm stack size and a package lock or null")
    for args in (("sql", "SELECT 1", "--db", directory), ("tasks", "--db", directory),
                 ("import", directory, "--db", tmp_path / "s.duckdb"),
                 ("trace-shard", directory, "--index", 0)):
        assert_one_line_error(invoke(*args), message)
    assert not (tmp_path / "s.duckdb").exists()


# ---------------------------------------------------------------------- links and FIFOs
@pytest.fixture
def directory(traced, tmp_path) -> Path:
    """A copy of the traced directory, and beside it the files a link could point at."""
    _, out, _, _, _ = traced
    copy = tmp_path / "d"
    shutil.copytree(out, copy)
    shutil.copytree(out, tmp_path / "elsewhere")
    return copy


def link(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.symlink_to(target)


LINKED = ["shards/00000", "shards/00001/runs.parquet", "shards/00000/done.json", "shards",
          "plan.json", "store.duckdb"]


@pytest.mark.parametrize("part", LINKED)
def test_a_link_in_a_shard_directory_is_refused(directory, tmp_path, part):
    """A link below the directory could make it read (or write) any file of this machine:
    refused in one line naming it, by readers and by import."""
    if part == "store.duckdb":
        connect(tmp_path / "elsewhere").close()  # makes elsewhere/store.duckdb
    link(directory / part, tmp_path / "elsewhere" / part)
    message = (f"{directory / part} is a symbolic link: a shard directory's files must be its "
               "own (a link may point at any file on this machine)")
    assert_one_line_error(invoke("sql", "SELECT count(*) FROM runs", "--db", directory),
                          message)
    assert_one_line_error(invoke("import", directory, "--db", tmp_path / "s.duckdb"), message)


def test_a_linked_guest_or_input_is_refused_by_the_shard_runner(directory, tmp_path,
                                                                monkeypatch):
    """The guest's copy (read when this machine lacks the build, here with the user's
    trust) and a shard's input file are the directory's own files, not links: one line."""
    plan = read_plan(directory)
    shutil.rmtree(directory / "shards" / "00000")
    guest = guest_path(directory, plan.guest)
    link(guest, build.artifacts().wasm)  # even to this machine's own build
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "empty-cache"))
    assert_one_line_error(
        invoke("trace-shard", directory, "--index", 0, "--trust-guest", plan.guest.digest),
        f"{guest} is a symbolic link: a shard directory's files must be its own (a link may "
        "point at any file on this machine)")
    monkeypatch.undo()
    inputs = directory / "inputs" / "00000.jsonl"
    link(inputs, tmp_path / "elsewhere" / "inputs" / "00000.jsonl")
    assert_one_line_error(invoke("trace-shard", directory, "--index", 0, "--workers", 1),
                          f"{inputs} is a symbolic link: a shard directory's files must be its "
                          "own (a link may point at any file on this machine)")
    assert not (directory / "shards" / "00000").exists()


def test_a_linked_directory_itself_is_read(traced, tmp_path):
    """The directory the user names may be a link: it is theirs to name."""
    _, out, _, _, _ = traced
    (tmp_path / "alias").symlink_to(out)
    assert sql(tmp_path / "alias", "SELECT count(*) AS n FROM runs") == [{"n": 4}]


@pytest.mark.parametrize("part, runner", [
    ("inputs/00000.jsonl", "trace-shard"), ("shards/00000/done.json", "trace"),
    ("plan.json", "trace-shard"), ("guest/GUEST", "trace-shard")])
def test_a_fifo_where_a_file_belongs_is_refused_not_waited_on(directory, traced, tmp_path,
                                                              part, runner):
    """A FIFO no one writes would block a reader for ever: refused in one line (each run
    in a process of its own, under a time limit: a hang fails the test)."""
    corpus = traced[0]
    plan = read_plan(directory)
    part = part.replace("GUEST", guest_path(directory, plan.guest).name)
    target = directory / part
    if part.startswith("inputs") or part.startswith("guest"):
        shutil.rmtree(directory / "shards" / "00000")
    target.unlink()
    os.mkfifo(target)
    args = (["trace-shard", directory, "--index", 0, "--workers", 1] if runner == "trace-shard"
            else ["trace", corpus, "--out", directory, "--shard-size", 2, "--workers", 1,
                  "--quiet"])
    env = dict(os.environ)
    if part.startswith("guest"):  # read only when this machine lacks the build
        env[build.CACHE_ENV] = str(tmp_path / "empty-cache")
        args += ["--trust-guest", plan.guest.digest]
    done = subprocess.run([sys.executable, "-m", "steptrace.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env=env,
                          stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout, done.stderr) == (
        1, "", f"Error: cannot read {target}: a FIFO, not a regular file\n")


# ---------------------------------------------------------------------- Parquet columns
def rewrite(path: Path, change) -> None:
    table = pq.read_table(path)
    pq.write_table(change(table), path)


def retype(column: str, array) -> callable:
    def change(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index(column)
        return table.set_column(index, pa.field(column, array(table).type, nullable=True),
                                array(table))
    return change


BAD_FILES = {
    "runs.run_id as text": ("runs", retype("run_id", lambda t: pa.array(["x"] * t.num_rows)),
                            "column run_id is string (nullable), not int64 (not null)"),
    "runs.status as int": ("runs", retype("status", lambda t: pa.array([1] * t.num_rows)),
                           "column status is int64 (nullable), not string (not null)"),
    "runs.sample_id nullable": ("runs", retype("sample_id", lambda t: pa.array(
        ["s"] * t.num_rows, pa.string())), "column sample_id is string (nullable), not string "
                                             "(not null)"),
    "steps.event as int": ("steps", retype("event", lambda t: pa.array([0] * t.num_rows)),
                           "column event is int64 (nullable), not string (not null)"),
    "states.var as int": ("states", retype("var", lambda t: pa.array([0] * t.num_rows)),
                          "column var is int64 (nullable), not string (not null)"),
    "guests.lock as int": ("guests", retype("lock", lambda t: pa.array([0] * t.num_rows)),
                           "column lock is int64 (nullable), not string"),
    "programs.program_id as float": ("programs", retype("program_id", lambda t: pa.array(
        [1.5] * t.num_rows)), "column program_id is double (nullable), not int64 (not null)"),
    "runs without status": ("runs", lambda t: t.drop_columns(["status"]),
                            "has no column status (string): not a shard file this steptrace "
                            "reads"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_parquet_file_with_other_columns_is_one_line(directory, tmp_path, case):
    """A shard's table file whose columns are not the table's, in the second shard (a view
    reads every file as the first one), through every command that reads the tables:
    one line naming the file and the column."""
    table, change, what = BAD_FILES[case]
    path = directory / "shards" / "00001" / f"{table}.parquet"
    rewrite(path, change)
    message = (f"{path}: {what}: not a shard file this steptrace reads"
               if not what.startswith("has no") else f"{path} {what}")
    for args in (("sql", "SELECT * FROM runs", "--db", directory),
                 ("tasks", "--db", directory),
                 ("import", directory, "--db", tmp_path / "s.duckdb"),
                 ("features", "--db", directory),
                 ("show", 3, "--db", directory),
                 ("export-traces", "--db", directory, "--trace-format", "jsonl", "--out",
                  tmp_path / "t.jsonl")):
        assert_one_line_error(invoke(*args), message)


def test_a_file_that_is_not_parquet_is_one_line(directory, tmp_path):
    path = directory / "shards" / "00000" / "steps.parquet"
    path.write_bytes(b"PAR1 but not really")
    result = invoke("sql", "SELECT count(*) FROM steps", "--db", directory)
    assert_one_line_error(result)
    assert result.stderr.startswith(f"Error: {path} is not a Parquet file this steptrace wrote (")


def test_extra_columns_and_an_older_programs_table_are_read(directory):
    """What an earlier or later steptrace may write is read: an extra column is left out,
    a programs file without ``meta`` (before it existed) reads it as NULL."""
    rewrite(directory / "shards" / "00000" / "runs.parquet",
            lambda t: t.append_column("later", pa.array([1] * t.num_rows)))
    rewrite(directory / "shards" / "00000" / "programs.parquet",
            lambda t: t.drop_columns(["meta"]))
    assert sql(directory, "SELECT count(*) AS n, count(meta) AS m FROM programs") == [
        {"n": 4, "m": 0}]
    assert sql(directory, "SELECT count(*) AS n FROM runs") == [{"n": 4}]


def test_a_done_marker_of_other_types_is_one_line(directory, traced):
    """``done.json`` is counted into the manifest and summaries: a field of another type or
    another shard's index is refused, not summed."""
    corpus = traced[0]
    path = directory / "shards" / "00001" / "done.json"
    data = json.loads(path.read_text())
    for bad, message in (
            ({**data, "runs": "4"}, f"{path} is not a shard's done marker (its fields: index, "
                                    "runs, by_status, with_expected, matched, line_steps, "
                                    "steps, rows, seconds, numbers and counts by name)"),
            ({**data, "rows": {"runs": [1]}}, None), ({**data, "extra": 1}, None),
            ({**data, "index": 0}, f"{path} is the done marker of shard 0, not 1")):
        path.write_text(json.dumps(bad))
        result = invoke("trace", corpus, "--out", directory, "--shard-size", 2, "--workers", 1,
                        "--quiet")
        assert_one_line_error(result, message)
        assert_one_line_error(invoke("trace-shard", directory, "--index", 1), message)


def test_shards_found_good_are_checked_again_only_when_they_change(directory, monkeypatch):
    """The footers are read once a shard: this machine's cache records the shards found
    good by their files' status, so a later process reads none of them again until a file
    changes; then that shard alone is checked again, and refused. Files changed too
    recently to trust their times are not recorded."""
    from steptrace.sharding import _check
    read: list[Path] = []
    real = _check._check_schema
    monkeypatch.setattr(_check, "_check_schema",
                        lambda path, table, pq: read.append(path) or real(path, table, pq))
    resolved = directory.resolve()
    memo = _check._memo_path(resolved)
    files = 2 * len(SHARD_TABLES)  # two shards, a file a table
    connect(directory, read_only=True).close()  # just copied: too recent to record
    assert len(read) == files and not memo.exists()
    monkeypatch.setattr(build, "STAMP_SETTLE_NS", 0)
    _check._MEMO.clear()  # as a new process
    connect(directory, read_only=True).close()
    assert len(read) == 2 * files
    assert memo.read_text().splitlines()[0] == str(resolved)
    assert [line.split()[0] for line in memo.read_text().splitlines()[1:]] == ["00000", "00001"]
    _check._MEMO.clear()
    connect(directory, read_only=True).close()
    connect(directory).close()
    assert len(read) == 2 * files  # nothing read again
    path = directory / "shards" / "00001" / "runs.parquet"
    rewrite(path, retype("status", lambda t: pa.array([1] * t.num_rows)))
    _check._MEMO.clear()
    assert_one_line_error(invoke("sql", "SELECT 1", "--db", directory),
                          f"{path}: column status is int64 (nullable), not string (not null): "
                          "not a shard file this steptrace reads")
    assert read[2 * files:] == [directory.resolve() / "shards" / "00001" / f"{t}.parquet" for t in (
        "runs",)]
