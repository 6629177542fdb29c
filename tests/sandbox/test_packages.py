"""Guests with third-party packages (steptrace.sandbox._packages, ``build --with``): locks,
resolution against the package registry, and real builds that trace programs using three
pinned pure-Python packages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import steptrace as st
from steptrace.sandbox import _build as build
from steptrace.sandbox._packages import (LOCK_HEADER, LockedPackage, PackageError, PackageLock,
                                         check_requirement, parse_lock, read_requirements,
                                         read_lock, resolve, resolve_packages,
                                         top_level_modules)

from click.testing import CliRunner

from steptrace.cli._main import main

from helpers.cli import rows
from helpers.processes import write_jsonl
from helpers.openai_stub import StubServer, answer

# Three real packages from the registry, pinned: the lock `build --with` writes for them.
from helpers.package_locks import LOCK, LOCK_TEXT  # noqa: E402

CHUNKS = ("from more_itertools import chunked\n\n"
          "def f(xs, n):\n    out = []\n    for part in chunked(xs, n):\n"
          "        out.append(sum(part))\n    return out\n")
SORTED = ("from sortedcontainers import SortedList\n\n"
          "def f(xs):\n    s = SortedList()\n    for x in xs:\n        s.add(x)\n"
          "    return list(s)\n")
# a program function called back from package code is traced; the package's is not
TOOLZ = ("import toolz\n\ndef double(x):\n    return x * 2\n\n"
         "def f(xs):\n    return toolz.pipe(xs, toolz.curried.map(double), list)\n")
RECORDS = [
    {"id": "chunks", "code": CHUNKS, "input": "[1, 2, 3, 4, 5], 2", "output": "[3, 7, 5]"},
    {"id": "sorted", "code": SORTED, "input": "[3, 1, 2]", "output": "[1, 2, 3]"},
    {"id": "toolz", "code": TOOLZ, "input": "[1, 2]", "output": "[2, 4]"},
    {"id": "absent", "code": "import numpy\n\ndef f(x):\n    return x\n", "input": "1"},
]
# (step, event, func, line, depth, var, value) of each run, states joined to their step
def sorted_list(length: int, lists: str, maxes: str) -> str:
    """A SortedList as the store renders it: from its attributes (its __repr__ never runs)."""
    return (f"SortedList(_len={length}, _load=1000, _lists={lists}, _maxes={maxes}, "
            "_index=[], _offset=0)")


EXPECTED = {
    "chunks": [
        (0, "call", "f", 3, 0, "n", "2"), (0, "call", "f", 3, 0, "xs", "[1, 2, 3, 4, 5]"),
        (1, "line", "f", 4, 0, None, None), (2, "line", "f", 5, 0, "out", "[]"),
        (3, "line", "f", 6, 0, "part", "[1, 2]"), (4, "line", "f", 5, 0, "out", "[3]"),
        (5, "line", "f", 6, 0, "part", "[3, 4]"), (6, "line", "f", 5, 0, "out", "[3, 7]"),
        (7, "line", "f", 6, 0, "part", "[5]"), (8, "line", "f", 5, 0, "out", "[3, 7, 5]"),
        (9, "line", "f", 7, 0, None, None), (10, "return", "f", 7, 0, "<return>", "[3, 7, 5]")],
    "sorted": [
        (0, "call", "f", 3, 0, "xs", "[3, 1, 2]"), (1, "line", "f", 4, 0, None, None),
        (2, "line", "f", 5, 0, "s", sorted_list(0, "[]", "[]")),
        (3, "line", "f", 6, 0, "x", "3"),
        (4, "line", "f", 5, 0, "s", sorted_list(1, "[[3]]", "[3]")),
        (5, "line", "f", 6, 0, "x", "1"),
        (6, "line", "f", 5, 0, "s", sorted_list(2, "[[1, 3]]", "[3]")),
        (7, "line", "f", 6, 0, "x", "2"),
        (8, "line", "f", 5, 0, "s", sorted_list(3, "[[1, 2, 3]]", "[3]")),
        (9, "line", "f", 7, 0, None, None),
        (10, "return", "f", 7, 0, "<return>", "[1, 2, 3]")],
}


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def traced_rows(db: Path, sample: str) -> list[tuple]:
    return rows(db, "SELECT s.step, s.event, s.func, s.line, s.depth, st.var, st.value "
                    "FROM runs r JOIN steps s USING (run_id) LEFT JOIN states st "
                    "USING (run_id, step) WHERE r.sample_id = ? ORDER BY s.step, st.var"
                .replace("?", f"'{sample}'"))


# ------------------------------------------------------------------ locks (no build)
def test_a_lock_round_trips_and_its_digest_is_its_text():
    assert LOCK.packages == (
        LockedPackage("more-itertools", "10.5.0",
                      "037b0d3203ce90cca8ab1defbbdac29d5f993fc20131f3664dc8d6acfa872aef"),
        LockedPackage("sortedcontainers", "2.4.0",
                      "a163dcaede0f1c021485e957a39245190e74249897e2ae4b2aa38595db237ee0"),
        LockedPackage("toolz", "1.0.0",
                      "292c8f1c4e7516bf9086f8850935c799a874039c8bcf959d47b600e4c44a6236"))
    assert LOCK.text == LOCK_TEXT and parse_lock(LOCK.text) == LOCK
    assert str(LOCK) == "more-itertools==10.5.0, sortedcontainers==2.4.0, toolz==1.0.0"
    with_import = PackageLock(LOCK.packages, ("toolz.curried",))
    assert with_import.text == LOCK_TEXT + "# import: toolz.curried\n"
    assert parse_lock(with_import.text) == with_import
    # the digest follows the text: a different import or version is a different guest
    assert len({LOCK.digest, with_import.digest, parse_lock(LOCK_TEXT.replace(
        "toolz==1.0.0", "toolz==0.12.1")).digest}) == 3
    assert build.cache_key(LOCK) == build.cache_key(parse_lock(LOCK_TEXT))
    assert len({build.cache_key(), build.cache_key(LOCK), build.cache_key(with_import)}) == 3


def test_a_lock_of_local_wheels_names_their_directory_and_keys_the_guest_by_hashes():
    """``# wheels: DIR`` (harvest --source): round-trips; the digest (the guest's key)
    leaves it out, so the same pinned wheels elsewhere are the same guest."""
    local = PackageLock(LOCK.packages, ("toolz.curried",), find_links="/srv/out/wheels")
    assert local.text == LOCK_TEXT.replace(
        LOCK_HEADER + "\n", LOCK_HEADER + "\n# wheels: /srv/out/wheels\n") + (
        "# import: toolz.curried\n")
    assert parse_lock(local.text) == local
    moved = PackageLock(LOCK.packages, ("toolz.curried",), find_links="/elsewhere")
    assert local.digest == moved.digest == PackageLock(LOCK.packages, ("toolz.curried",)).digest
    assert build.cache_key(local) == build.cache_key(moved)
    with pytest.raises(PackageError) as caught:
        parse_lock(LOCK_TEXT + "# wheels: out/wheels\n", "in.lock")
    assert str(caught.value) == "in.lock line 5: '# wheels:' needs an absolute directory"


@pytest.mark.parametrize("text, message", [
    ("", "lock names no packages"),
    ("toolz==1.0.0\n", "lock line 1 is not 'name==version --hash=sha256:<64 hex>'"),
    ("toolz>=1 --hash=sha256:" + "0" * 64, "lock line 1 is not"),
    ("toolz==1.0.0 --hash=sha256:" + "0" * 63, "lock line 1 is not"),
    ("toolz==1.0.0 --hash=sha256:" + "0" * 64 + "\ntoolz==1.0.1 --hash=sha256:" + "1" * 64,
     "lock names a package twice"),
    ("toolz==1.0.0 --hash=sha256:" + "0" * 64 + "\n# import: os; rm", "not a module name"),
])
def test_a_bad_lock_is_one_error(text, message):
    with pytest.raises(PackageError) as caught:
        parse_lock(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("spec", ["-e .", "--index-url=http://x", "https://x/y.whl", "../pkg",
                                  "git+https://github.com/a/b", "toolz; os_name == 'nt'", " "])
def test_only_plain_requirements_are_taken(spec):
    with pytest.raises(PackageError, match="not a package requirement"):
        check_requirement(spec)


def test_plain_requirements_and_a_requirements_file(tmp_path):
    assert [check_requirement(s) for s in ("toolz", " toolz==1.0.0 ", "a.b-c_d>=1,<2",
                                           "attrs[tests]~=23.1")] == [
        "toolz", "toolz==1.0.0", "a.b-c_d>=1,<2", "attrs[tests]~=23.1"]
    path = tmp_path / "requirements.txt"
    path.write_text("# the corpus needs\ntoolz==1.0.0  # pinned\n\nsortedcontainers\n")
    assert read_requirements(path) == ["toolz==1.0.0", "sortedcontainers"]
    path.write_text("toolz\n-r other.txt\n")
    with pytest.raises(PackageError, match="not a package requirement: '-r other.txt'"):
        read_requirements(path)


def test_top_level_modules_of_an_installed_site(tmp_path):
    for name in ("pkg", "tests", "_private", "notapkg"):
        (tmp_path / name).mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "_private" / "__init__.py").write_text("")
    (tmp_path / "single.py").write_text("")
    (tmp_path / "pkg-1.0.dist-info").mkdir()
    assert top_level_modules(tmp_path) == ["pkg", "single"]


# ------------------------------------------------------------------ the registry
def test_resolving_against_the_registry_locks_exact_wheels():
    """pip resolves for the guest (pure-Python wheels, CPython 3.14): the pinned
    requirements give the very lock above, the hashes those of the registry's wheels."""
    assert resolve(["toolz==1.0.0", "sortedcontainers==2.4.0", "more-itertools==10.5.0"]) == LOCK


def test_a_package_with_native_code_only_is_named():
    with pytest.raises(PackageError) as caught:
        resolve(["numpy==2.1.0"])
    assert str(caught.value) == (
        "no wheel of numpy==2.1.0 that the guest can run: the index has none in pure Python "
        "for CPython 3.14 (native code cannot run under WASI; build --backend native runs it "
        "natively), or no such package or version")


# jsonschema 4.18.0 needs referencing, which needs rpds-py (native code); 4.17.3, the last
# before it, is pure Python: both are final, so this range resolves the same forever
HELD_JSONSCHEMA = ("pip resolved older versions than the newest for CPython 3.14, because the "
                   "newer ones need native code (no pure-Python wheel: it cannot run under "
                   "WASI): jsonschema 4.17.3, not 4.18.0 (4.18.0 needs rpds-py); pin them to "
                   "build with them anyway (--with jsonschema==4.17.3)")


def test_a_requirement_held_back_to_an_old_version_is_refused_saying_why():
    """jsonschema without a pin: pip would take 4.17.3 for the guest, where CPython 3.14
    gets 4.18.0; the build refuses, naming both versions, the native distribution the
    newer one needs and the pin that accepts the older one."""
    with pytest.raises(PackageError) as caught:
        resolve(["jsonschema>=4.17,<=4.18.0", "toolz==1.0.0"])
    assert str(caught.value) == HELD_JSONSCHEMA


@pytest.mark.parametrize("pin", ["jsonschema==4.17.3", "jsonschema==4.17.*"])
def test_a_pinned_old_version_is_built_with(pin):
    """Pinned (exactly, or by a wildcard), the old version is what the user asked for:
    resolved, nothing held back."""
    resolution = resolve_packages([pin])
    assert [(p.name, p.version) for p in resolution.lock.packages] == [
        ("attrs", resolution.lock.packages[0].version), ("jsonschema", "4.17.3"),
        ("pyrsistent", resolution.lock.packages[2].version)]
    assert (resolution.held_back, resolution.not_compared) == ((), None)


def test_build_refuses_a_held_back_resolution_in_one_line(tmp_path):
    lock = tmp_path / "guest.lock"
    result = invoke("build", "--with", "jsonschema>=4.17,<=4.18.0", "--lock", str(lock))
    assert result.exit_code == 1
    assert result.stderr == f"Error: {HELD_JSONSCHEMA}\n"
    assert not lock.exists()


def test_a_dependency_held_back_is_named_with_what_its_newer_version_needs():
    """The needs are followed through the newer version's dependencies (a pure package
    that needs a native one), and a package at the same version is not held back."""
    from steptrace.sandbox._packages import _held_back
    lock = PackageLock((LockedPackage("app", "2.0", "0" * 64), LockedPackage("lib", "1.0", "1" * 64),
                        LockedPackage("same", "3.0", "2" * 64), LockedPackage("both", "4.0", "3" * 64)))
    # "both" resolves to a native wheel of the version the lock has a pure wheel of: no need
    newest = {"app": ("2.0", True, ("lib",)), "lib": ("2.5", True, ("mid", "same", "both")),
              "mid": ("1.1", True, ("speedups",)), "speedups": ("0.9", False, ()),
              "same": ("3.0", True, ()), "both": ("4.0", False, ()), "other": ("1.0", False, ())}
    assert [str(item) for item in _held_back(lock, newest)] == [
        "lib 1.0, not 2.5 (2.5 needs speedups)"]


def test_a_distribution_held_back_by_anothers_pin_says_so():
    """A pure distribution kept older only by another held-back one's requirement (fastapi
    0.125 pins starlette below 0.51) is not said to lack a pure-Python wheel."""
    from steptrace.sandbox._packages import _held_back
    lock = PackageLock((LockedPackage("web", "0.125", "0" * 64),
                        LockedPackage("star", "0.50", "1" * 64)))
    newest = {"web": ("0.165", True, ("core", "star")), "core": ("2.0", False, ()),
              "star": ("1.10", True, ())}
    assert [str(item) for item in _held_back(lock, newest)] == [
        "web 0.125, not 0.165 (0.165 needs core)",
        "star 0.50, not 1.10 (1.10 is excluded by the others' requirements)"]


# ------------------------------------------------------------------ real builds
@pytest.fixture(scope="module")
def package_guest():
    """The guest with the three packages, built once for this module."""
    return build.ensure_component(packages=LOCK)


@pytest.mark.slow
def test_programs_using_three_packages_trace_exactly(package_guest, tmp_path):
    db = tmp_path / "packages.duckdb"
    summary = st.trace(RECORDS, db, workers=1, packages=LOCK, name="packages")
    assert dict(summary.by_status) == {"ok": 3, "missing_module": 1}
    assert rows(db, "SELECT sample_id, status, output, output_matches, guest FROM runs "
                    "ORDER BY run_id") == [
        ("chunks", "ok", "[3, 7, 5]", True, package_guest.key),
        ("sorted", "ok", "[1, 2, 3]", True, package_guest.key),
        ("toolz", "ok", "[2, 4]", True, package_guest.key),
        ("absent", "missing_module", None, None, package_guest.key)]
    assert rows(db, "SELECT exception_type, exception_message FROM runs "
                    "WHERE sample_id = 'absent'") == [
        ("ModuleNotFoundError", "No module named 'numpy'")]
    assert package_guest.key == build.cache_key(LOCK) != build.cache_key()
    for sample, expected in EXPECTED.items():
        assert traced_rows(db, sample) == expected, sample
    # toolz calls the program's function back: those calls are traced (at depth 1, the
    # package's frames between are not steps); none of toolz's own lines is
    assert traced_rows(db, "toolz") == [
        (0, "call", "f", 6, 0, "xs", "[1, 2]"), (1, "line", "f", 7, 0, None, None),
        (2, "call", "double", 3, 1, "x", "1"), (3, "line", "double", 4, 1, None, None),
        (4, "return", "double", 4, 1, "<return>", "2"),
        (5, "call", "double", 3, 1, "x", "2"), (6, "line", "double", 4, 1, None, None),
        (7, "return", "double", 4, 1, "<return>", "4"),
        (8, "return", "f", 7, 0, "<return>", "[2, 4]")]
    assert rows(db, "SELECT DISTINCT func FROM steps ORDER BY func") == [("double",), ("f",)]


@pytest.mark.slow
def test_batch_isolation_puts_a_package_back_after_a_job_changed_it(package_guest, tmp_path):
    """A program that rebinds a package's function in batch isolation: its own run sees
    the change; the next job sees the package as built (a fresh instance)."""
    hostile = ("import toolz\n\ndef f(x):\n    toolz.pipe = lambda *a: 'hijacked'\n"
               "    return toolz.pipe(x)\n")
    records = [{"id": "hostile", "code": hostile, "input": "1"},
               {"id": "after", "code": TOOLZ, "input": "[1, 2]", "output": "[2, 4]"}]
    db = tmp_path / "batch.duckdb"
    st.trace(records, db, workers=1, isolation="batch", packages=LOCK)
    assert rows(db, "SELECT sample_id, status, output, output_matches FROM runs ORDER BY run_id") == [
        ("hostile", "ok", "'hijacked'", None), ("after", "ok", "[2, 4]", True)]
    (note,) = rows(db, "SELECT note FROM runs WHERE sample_id = 'hostile'")[0]
    assert note.startswith("changed shared interpreter state (toolz")


@pytest.mark.slow
def test_the_same_lock_builds_the_same_guest_again(package_guest, tmp_path, monkeypatch):
    """A second, separate build from the same lock (another cache directory, the lock read
    back from its file) has the same key, bundles the same modules and traces the same runs.
    (Its bytes are not identical: componentize-py draws the snapshot's hash secret at build
    time, docs/guides/packages.md.)"""
    lock_file = tmp_path / "guest.lock"
    lock_file.write_text(LOCK.text)
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    again = build.ensure_component(packages=read_lock(lock_file))
    # a build of its own, in the other cache directory
    assert again.key == package_guest.key and again.wasm.parent == tmp_path / "cache"
    assert build.is_verified(again.wasm)
    db = tmp_path / "again.duckdb"
    st.trace(RECORDS[:2], db, workers=0, packages=lock_file)
    for sample, expected in EXPECTED.items():
        assert traced_rows(db, sample) == expected, sample


@pytest.mark.slow
def test_build_and_trace_commands_with_packages(tmp_path, monkeypatch):
    """build --with resolves, writes the lock and builds; trace --packages uses it; a bad
    requirement is one line and exit status 1."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    lock_file = tmp_path / "toolz.lock"
    result = invoke("build", "--with", "toolz==1.0.0", "--import", "toolz.curried.operator",
                    "--lock", str(lock_file), "--format", "json")
    assert result.exit_code == 0, result.output
    items = {row["item"]: row["value"] for row in json.loads(result.stdout)}
    lock = parse_lock(lock_file.read_text())
    assert lock.imports == ("toolz.curried.operator",) and str(lock) == "toolz==1.0.0"
    assert (items["guest"], items["packages"], items["package_modules"]) == (
        build.cache_key(lock), "toolz==1.0.0", "tlz, toolz, toolz.curried.operator")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps(RECORDS[2]) + "\n")
    db = tmp_path / "t.duckdb"
    result = invoke("trace", str(corpus), "--db", str(db), "--packages", str(lock_file),
                    "--workers", "1", "--quiet")
    assert result.exit_code == 0, result.output
    assert rows(db, "SELECT status, output, guest FROM runs") == [
        ("ok", "[2, 4]", build.cache_key(lock))]
    result = invoke("build", "--with", "https://example.org/x.whl", "--lock", str(lock_file))
    assert (result.exit_code, result.output) == (
        1, "Error: not a package requirement: 'https://example.org/x.whl' (use e.g. "
           "'toolz==1.0.0')\n")
    result = invoke("build", "--with", "toolz")
    assert (result.exit_code, result.output) == (
        1, "Error: packages need --lock FILE: where their lock is written\n")


@pytest.mark.slow
def test_downstream_commands_run_programs_again_in_their_packages_guest(package_guest, tmp_path):
    """analyse and the scoring of predicted inputs run a run's program again: in the guest
    with the packages that traced it (``guests``), where the standard guest would fail
    every import."""
    db = tmp_path / "downstream.duckdb"
    st.trace(RECORDS[:3], db, workers=0, packages=LOCK, name="packages")
    assert rows(db, "SELECT guest, lock FROM guests") == [(package_guest.key, LOCK.text)]
    analysed = st.analyse(db, workers=0)
    assert analysed.analysed == 3
    assert rows(db, "SELECT status, agrees FROM analyses ORDER BY run_id") == [
        ("ok", True), ("ok", True), ("ok", True)]
    tasks = st.make_tasks(db, kinds="input", per_run=1)
    records = {t["sample_id"]: t for t in tasks.tasks.iter_rows(named=True)}
    assert sorted(records) == ["chunks", "sorted", "toolz"]
    # two right inputs (one that is not the traced one) and a wrong one
    predicted = {"chunks": "[1, 2, 3, 4, 5], 2", "sorted": "[2, 3, 1]", "toolz": "[1]"}
    script = {t["task_id"]: answer(f"[ANSWER]\n{predicted[sample]}\n[/ANSWER]")
              for sample, t in records.items()}
    by_prompt = {t["prompt"]: t["task_id"] for t in records.values()}
    with StubServer(script, key_of=by_prompt.get) as server:
        st.predict(list(records.values()), db, "stub-model", base_url=server.base_url)
    scored = st.score(db, list(records.values()), ks=(1,), workers=0)
    assert scored.as_dict()["input_checks"] == 3
    assert rows(db, "SELECT t.sample_id, s.correct, s.note FROM scores s JOIN tasks t "
                    "USING (task_id) ORDER BY t.sample_id") == [
        ("chunks", True, None), ("sorted", True, None), ("toolz", False, "returned [2]")]
    # the verdicts are kept under the guest that ran them, the packages' one
    assert rows(db, "SELECT DISTINCT guest FROM checks") == [(package_guest.key,)]
    assert st.score(db, list(records.values()), ks=(1,), workers=0).input_checks_reused == 3


DATEUTIL = parse_lock(f"""{LOCK_HEADER}
python-dateutil==2.9.0.post0 --hash=sha256:a8b2bc7bffae282281c8140a97d3aa9c14da0b136dfe83f850eea9a5f7470427
six==1.16.0 --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254
""")
# dateutil imports its submodules lazily (a module __getattr__): easter is named by an
# import statement (found by reading the program), relativedelta (and the private module
# it imports) only when the program runs (found by the first run: imported on first use)
LAZY = [
    {"id": "easter", "code": "from dateutil.easter import easter\n\ndef f(year):\n"
                             "    return str(easter(year))\n",
     "input": "2024", "output": "'2024-03-31'"},
    {"id": "months", "code": "import dateutil\n\ndef f(m):\n"
                             "    delta = dateutil.relativedelta.relativedelta(months=m)\n"
                             "    return (delta.years, delta.months)\n",
     "input": "14", "output": "(1, 2)"},
    # a program that makes up the guest's message for an installed module it never
    # imports (the exception names json, which the guest has): learning must not take it
    {"id": "forged", "code": "def f():\n    raise ModuleNotFoundError("
                             "\"No module named 'dateutil.rrule'\", name='json')\n",
     "input": ""},
]


def test_imported_names_of_a_program():
    from steptrace.tracing._learn import imported_names
    assert imported_names("import a.b, c\nfrom d.e import f, g as h\nfrom . import x\n"
                          "from k import *\ndef f():\n    import m.n\n") == {
        "a.b", "c", "d.e", "d.e.f", "d.e.g", "k", "m.n"}
    assert imported_names("def f(:\n") == set()


@pytest.mark.slow
def test_learning_the_submodules_a_corpus_needs(tmp_path, monkeypatch):
    """build --learn: the guest imports a package's submodules on first use, so the runs
    work before learning, but each pays the import (in batch isolation the next job runs in
    a fresh instance). The submodule a program imports is read from it, the ones a package
    loads while the program runs are what a first run reports it imported; the lock
    written back names them, and in the guest it describes they are in the snapshot."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    corpus = tmp_path / "lazy.jsonl"
    write_jsonl(corpus, LAZY)
    imported = "changed shared interpreter state (sys.modules{}); later jobs ran in a fresh instance"
    before = tmp_path / "before.duckdb"
    st.trace(LAZY, before, workers=1, packages=DATEUTIL, isolation="batch")
    assert rows(before, "SELECT status, output, exception_message, note FROM runs "
                        "ORDER BY run_id") == [
        ("ok", "'2024-03-31'", None, imported.format(", dateutil")),
        ("ok", "(1, 2)", None, imported.format(", dateutil")),
        ("exception", None, "No module named 'dateutil.rrule'", None)]
    lock_file = tmp_path / "dateutil.lock"
    lock_file.write_text(DATEUTIL.text)
    result = invoke("build", "--lock", str(lock_file), "--learn", str(corpus), "--format",
                    "json")
    assert result.exit_code == 0, result.output
    items = {row["item"]: row["value"] for row in json.loads(result.stdout)}
    assert (items["learned_from_imports"], items["learned_in_run_1"],
            items["learned_in_run_2"]) == (
        "dateutil.easter", "dateutil._common, dateutil.relativedelta", "-")
    learned = parse_lock(lock_file.read_text())
    assert learned == PackageLock(DATEUTIL.packages, (
        "dateutil._common", "dateutil.easter", "dateutil.relativedelta"))
    assert items["guest"] == build.cache_key(learned)
    after = tmp_path / "after.duckdb"
    st.trace(LAZY, after, workers=1, packages=lock_file, isolation="batch")
    assert rows(after, "SELECT status, output, output_matches, note FROM runs "
                       "ORDER BY run_id") == [
        ("ok", "'2024-03-31'", True, None), ("ok", "(1, 2)", True, None),
        ("exception", None, None, None)]


@pytest.mark.slow
def test_every_store_command_works_on_a_package_corpus(package_guest, tmp_path):
    """The commands after trace (analyse with the determinism check, features, filter,
    tasks, named queries, report, export, show, dedupe and select of the kept runs) on
    runs made in a guest with packages."""
    corpus = tmp_path / "packages.jsonl"
    write_jsonl(corpus, RECORDS[:3])
    lock_file = tmp_path / "guest.lock"
    lock_file.write_text(LOCK.text)
    db = tmp_path / "packages.duckdb"

    def ok(*args):
        result = invoke(*args)
        assert result.exit_code == 0, (args, result.output)
        return result

    def as_json(*args):
        return json.loads(ok(*args, "--format", "json").stdout)

    ok("trace", corpus, "--db", db, "--packages", lock_file, "--workers", 1, "--quiet")
    ok("analyse", "--db", db, "--determinism", "--workers", 1, "--quiet")
    assert rows(db, "SELECT status, agrees, deterministic FROM analyses ORDER BY run_id") == [
        ("ok", True, True)] * 3
    ok("features", "--db", db)
    kept = tmp_path / "kept.jsonl"
    filtered = as_json("filter", "--db", db, "--no-rule", "static", "--out", kept, "--quiet")
    assert (filtered[-1]["rule"], filtered[-1]["kept"]) == ("kept", 3)
    tasks = {row["kind"]: row["runs"] for row in as_json("tasks", "--db", db)}
    assert (tasks["output"], tasks["input"], tasks["total"]) == (3, 3, 3)
    names = [row["name"] for row in as_json("query", "--list")
             if not row["name"].startswith("accuracy_")  # these read predictions
             and row["name"] != "scored_samples"]
    for name in names:
        ok("query", name, "--db", db, "--format", "json")
    assert as_json("query", "runs_by_status", "--db", db)[0]["runs"] == 3
    ok("report", "--db", db, "--out", tmp_path / "r.html")
    ok("export", "--db", db, "--out", tmp_path / "pq")
    for run_id in (1, 2, 3):
        ok("show", run_id, "--db", db)
    deduped = tmp_path / "deduped.jsonl"
    ok("dedupe", kept, "--out", deduped)
    ok("select", deduped, "--n", 2, "--out", tmp_path / "bench.jsonl")
    assert len((tmp_path / "bench.jsonl").read_text().splitlines()) == 2


def test_a_package_module_named_as_a_guest_module_is_refused(tmp_path, monkeypatch):
    """A package with a top-level module named as one of the guest's own (``wire``, the
    name of a real PyPI package) would be shadowed by it: the build stops, naming it,
    before componentize-py runs."""
    def fake_install(lock, site):
        site.mkdir(parents=True)
        return ["toolz", "wire"]

    monkeypatch.setattr(build, "install", fake_install)
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(build.BuildError) as caught:
        build.componentize(tmp_path / "guest.wasm", LOCK)
    assert str(caught.value) == (
        "the packages (more-itertools==10.5.0, sortedcontainers==2.4.0, toolz==1.0.0) hold "
        "top-level modules named as the guest's own: wire; they cannot be bundled")
