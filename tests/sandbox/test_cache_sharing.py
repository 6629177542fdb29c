"""The component cache shared by processes (wasm_sandbox/_cache.py): eviction by size, least
recently used first, never of a build another process leases or builds; one build of a
key at a time; a rebuild that says why; a forced rebuild refused while another process
uses the build; and real processes (worker pools, ``steptrace trace``, builders that
evict) racing on one cache with none of them failing.

The processes are real (tests/helpers/cache_users.py): a lease is a ``flock`` only
another process can contend for. What a test waits for (a process holding or waiting for
a lock, a process saying it is ready) is observed, never timed; the waits have a
generous limit only so that a broken test fails instead of hanging."""

from __future__ import annotations

import datetime as dt
import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.sandbox import _build as build
from steptrace.sandbox import _cache as cache
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import compiled_path
from helpers.cli import assert_one_line_error
from helpers.processes import HANG_GUARD_S, write_jsonl

USERS = Path(__file__).resolve().parent.parent / "helpers" / "cache_users.py"
MB = 1 << 20
HOUR = 3600.0
TODAY = dt.datetime.now(dt.timezone.utc).date().isoformat()


# ---------------------------------------------------------------------- helpers
@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """An empty cache for this test; the leases this process takes in it are let go at
    the end (a lease lasts as long as its process otherwise)."""
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv(build.CACHE_ENV, str(folder))
    monkeypatch.delenv(cache.MAX_MB_ENV, raising=False)
    yield folder
    for path in [p for p in cache._HELD if folder in p.parents]:
        os.close(cache._HELD.pop(path))


def make_build(root: Path, group: str, size: int, age_s: float, variant: bool = False,
               compiled: bool = False) -> list[Path]:
    """A build's files (sparse: ``size`` bytes of component, no disk), last used
    ``age_s`` seconds ago."""
    names = [f"guest-{group}.wasm", f"guest-{group}.wasm.sha256"]
    if variant:
        names += [f"guest-{group}-reseeded.wasm", f"guest-{group}-reseeded.wasm.sha256"]
    if compiled:
        names += [f"guest-{group}-0badf00d.cwasm", f"guest-{group}-0badf00d.cwasm.sha256",
                  f"guest-{group}-0badf00d.cwasm.checked"]
    root.mkdir(parents=True, exist_ok=True)
    when = time.time() - age_s
    paths = []
    for name in names:
        path = root / name
        with open(path, "wb") as handle:
            handle.truncate(size if name.endswith("wasm") else 64)
        os.utime(path, (when, when))
        paths.append(path)
    return paths


def key(n: int) -> str:
    return f"{n:x}" * 24


class User:
    """A tests/helpers/cache_users.py process: ``read()`` its next JSON line, ``finish()``
    lets it go on and waits for its end."""

    def __init__(self, *args: str, env: dict | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, str(USERS), *args],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, **(env or {})})
        self.pid = self.process.pid

    def read(self) -> dict:
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(HANG_GUARD_S):
                self.process.kill()
                raise AssertionError(f"no word from {self.process.args} in {HANG_GUARD_S} s")
        line = self.process.stdout.readline()
        assert line, self.process.stderr.read()
        return json.loads(line)

    def finish(self) -> tuple[list[dict], str]:
        """Let it go on; its remaining lines and its stderr, once it has exited 0."""
        out, err = self.process.communicate("\n", timeout=HANG_GUARD_S)
        assert self.process.returncode == 0, err
        return [json.loads(line) for line in out.splitlines()], err


def flocks(path: Path) -> set[tuple[int, str, bool]]:
    """``(pid, READ | WRITE, waiting)`` of the flock locks on ``path`` (/proc/locks)."""
    inode = os.stat(path).st_ino
    found = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        waiting = fields[1] == "->"
        fields = [f for f in fields[1:] if f != "->"]
        if fields[0] == "FLOCK" and int(fields[4].rsplit(":", 1)[1]) == inode:
            found.add((int(fields[3]), fields[2], waiting))
    return found


def wait_for(check, what: str) -> None:
    """Poll ``check()`` until true (a state another process reaches), failing after
    HANG_GUARD_S."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}")
        time.sleep(0.02)


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def log_events(root: Path) -> list[tuple]:
    return [(r["event"], r.get("key") or r["group"]) for r in cache.read_log(root)]


# ---------------------------------------------------------------------- eviction
def test_eviction_keeps_the_cache_within_its_budget_least_recently_used_first(root, monkeypatch):
    """Over a budget of 10 MB, builds go oldest use first (a foreign one among them) until
    the rest fits; the build just made stays, though it is the oldest; each build goes with
    all its files (variant, compiled forms, sidecars, stamps, locks); a group left with
    lock files only is tidied; other files in the cache stay. Each eviction is logged."""
    monkeypatch.setenv(cache.MAX_MB_ENV, "10")
    a = make_build(root, key(1), 4 * MB, 50 * HOUR)
    b = make_build(root, key(2), 2 * MB, 40 * HOUR, variant=True, compiled=True)
    c = make_build(root, key(3), 4 * MB, 30 * HOUR)
    d = make_build(root, key(4), 4 * MB, 20 * HOUR)
    foreign = make_build(root / cache.FOREIGN, "f" * 64, 4 * MB, 45 * HOUR)
    for name in (f"guest-{key(2)}.lock", f"guest-{key(2)}-reseeded.lock", f"guest-{key(2)}.build",
                 f"guest-{key(5)}.lock", f"guest-{key(5)}.build"):  # 5: locks only
        (root / name).touch()
        os.utime(root / name, (time.time() - 60 * HOUR,) * 2)
    (root / "notes.txt").write_text("mine")
    (root / "libwasmtime.checked").write_text("stamp")
    removed = cache.evict(root, cache.lease_file(root, key(1)))
    assert removed == sorted(foreign + b + c)
    # a, 4 MB (kept), d 4 MB: 8 MB <= 10 after the foreign (45 h), b (40 h) and c (30 h) went
    assert names(root) == {p.name for p in a + d} | {"notes.txt", "libwasmtime.checked",
                                                     cache.LOG, cache.FOREIGN}
    assert names(root / cache.FOREIGN) == set()
    assert [(r["event"], r["group"], r["foreign"], r["mb"], r["why"]) for r in cache.read_log(root)] == [
        ("evicted", "f" * 64, True, 4, "the cache was over its 10 MB budget (STEPTRACE_CACHE_MAX_MB)"),
        ("evicted", key(2), False, 6, "the cache was over its 10 MB budget (STEPTRACE_CACHE_MAX_MB)"),
        ("evicted", key(3), False, 4, "the cache was over its 10 MB budget (STEPTRACE_CACHE_MAX_MB)")]
    assert cache.evict(root, cache.lease_file(root, key(1))) == []  # within the budget now


def test_a_lease_stamps_the_builds_last_use(root, monkeypatch):
    """Taking a lease marks the build used now: the least recently used go first, and
    a build made long ago but used today is not among them."""
    monkeypatch.setenv(cache.MAX_MB_ENV, "5")
    make_build(root, key(1), 4 * MB, 50 * HOUR)
    made_later = make_build(root, key(2), 4 * MB, 10 * HOUR)
    user = User("lease", key(1))
    assert user.read()["phase"] == "held"
    user.finish()  # its lease is gone with it, its use stamped
    removed = cache.evict(root, cache.lease_file(root, key(3)))
    assert removed == sorted(made_later)
    assert f"guest-{key(1)}.wasm" in names(root)


def test_a_build_another_process_uses_or_builds_is_never_evicted(root):
    """Budget 0: every build but the one just made should go; those another process
    leases (a build, or only its variant: a variant's lease holds its build's too) or is
    building stay, and go once those processes have ended."""
    a = make_build(root, key(1), MB, 50 * HOUR, variant=True)
    b = make_build(root, key(2), MB, 40 * HOUR)
    c = make_build(root, key(3), MB, 30 * HOUR)
    make_build(root, key(4), MB, 1 * HOUR)
    keep = cache.lease_file(root, key(4))
    variant_user = User("lease", f"{key(1)}-reseeded")
    user = User("lease", key(2))
    builder = User("building", key(3))
    assert [p.read()["phase"] for p in (variant_user, user, builder)] == ["held", "held",
                                                                          "building"]
    assert flocks(cache.lease_file(root, key(1))) == {(variant_user.pid, "READ", False)}
    assert cache.evict(root, keep, budget=0) == []
    assert {p.name for p in a + b + c} <= names(root)
    builder.finish()
    assert cache.evict(root, keep, budget=0) == sorted(c)
    user.finish()
    assert cache.evict(root, keep, budget=0) == sorted(b)
    variant_user.finish()
    assert cache.evict(root, keep, budget=0) == sorted(a)
    assert {n for n in names(root) if n.startswith(f"guest-{key(1)}")} == set()


def test_the_budget_must_be_a_number(root, monkeypatch):
    monkeypatch.setenv(cache.MAX_MB_ENV, "lots")
    monkeypatch.setattr(build, "cache_key", lambda packages=None: key(1))
    monkeypatch.setattr(build, "componentize", lambda out, packages=None: out.write_bytes(b"x"))
    with pytest.raises(cache.CacheError) as caught:
        build.ensure_component(announce=False)
    assert str(caught.value) == "STEPTRACE_CACHE_MAX_MB must be a whole number of MB, not 'lots'"
    monkeypatch.setenv(cache.MAX_MB_ENV, "-5")
    with pytest.raises(cache.CacheError, match="not '-5'"):
        cache.max_bytes()
    monkeypatch.setenv(cache.MAX_MB_ENV, " 2048 ")
    assert cache.max_bytes() == 2048 * MB
    monkeypatch.delenv(cache.MAX_MB_ENV)
    assert cache.max_bytes() == cache.DEFAULT_MAX_MB * MB == 3072 * MB


# ---------------------------------------------------------------------- builds
@pytest.fixture
def fake_builds(root, monkeypatch):
    """componentize-py stood in for by a writer of numbered bytes; the guest's key is
    whatever ``keys[0]`` is (a dict: the standard guest under None, packages by digest)."""
    made = []

    def componentize(out: Path, packages=None) -> None:
        made.append(out)
        out.write_bytes(f"fake build {len(made)}".encode())

    keys = {None: key(1)}
    monkeypatch.setattr(build, "componentize", componentize)
    monkeypatch.setattr(build, "cache_key",
                        lambda packages=None: keys[None if packages is None else packages.digest])
    return keys


def test_a_rebuild_says_why(root, fake_builds, capsys, monkeypatch):
    """Each build says why on stderr (one line) and in its artifacts' ``built``: the first
    build, a component that fails its check, files removed by something else, a change
    of the guest's sources (another key for the same packages), an eviction, a forced
    rebuild; a package guest is not another build of the standard one. A verified build is
    used without a word."""
    from steptrace.sandbox._packages import parse_lock, LOCK_HEADER
    def built(**options) -> tuple[str | None, str]:
        found = build.ensure_component(**options)
        return found.built, capsys.readouterr().err

    def line(k: str, why: str) -> str:
        return f"steptrace: building the guest component {k} ({why}); this takes a minute\n"

    first = "no build of it in this cache yet"
    assert built() == (first, line(key(1), first))
    assert built() == (None, "")
    wasm = build.artifacts(key(1)).wasm
    wasm.write_bytes(wasm.read_bytes()[:-1] + b"X")  # same size, altered
    altered = "its component in the cache failed its check (a truncated or altered file)"
    assert built() == (altered, line(key(1), altered))
    wasm.unlink()
    removed = ("its files were removed from the cache (not by steptrace's eviction) since it "
               f"was built on {TODAY}")
    assert built() == (removed, line(key(1), removed))
    fake_builds[None] = key(2)
    changed = f"the guest's sources or tools changed since the last build ({key(1)}, {TODAY})"
    assert built() == (changed, line(key(2), changed))
    lock = parse_lock(f"{LOCK_HEADER}\ntoolz==1.0.0 --hash=sha256:{'a' * 64}\n")
    fake_builds[lock.digest] = key(3)
    assert built(packages=lock) == (first, line(key(3), first))  # not a change of key(2)
    cache.release(root, key(1))  # this process no longer uses key(1): the next build evicts it
    monkeypatch.setenv(cache.MAX_MB_ENV, "0")
    fake_builds[None] = key(4)
    assert built(announce=False) == (changed.replace(key(1), key(2)), "")
    assert not wasm.exists()
    fake_builds[None] = key(1)
    evicted = (f"it was evicted on {TODAY}: the cache was over its 0 MB budget "
               "(STEPTRACE_CACHE_MAX_MB)")
    assert built() == (evicted, line(key(1), evicted))
    forced = "asked to (--force)"
    assert built(force=True) == (forced, line(key(1), forced))
    assert [e for e in log_events(root) if e[0] == "built"] == [
        ("built", key(1)), ("built", key(1)), ("built", key(1)), ("built", key(2)),
        ("built", key(3)), ("built", key(4)), ("built", key(1)), ("built", key(1))]
    assert cache.made_here(root, key(1), build.file_digest(wasm))
    assert not cache.made_here(root, key(2), build.file_digest(wasm))


def test_a_forced_rebuild_of_a_build_in_use_is_refused(root, fake_builds):
    """``build --force`` while another process uses the build would have that process's
    next worker load the new build beside the old: refused in one line, the build left as
    it was; once the other process has ended, it is rebuilt."""
    found = build.ensure_component(announce=False)
    before = found.wasm.read_bytes()
    user = User("lease", key(1))
    assert user.read()["phase"] == "held"
    message = (f"the guest build {key(1)} is in use by another steptrace process (a trace, a "
               "worker): rebuild it once that has ended")
    with pytest.raises(cache.CacheError) as caught:
        build.ensure_component(force=True)
    assert str(caught.value) == message
    assert_one_line_error(CliRunner().invoke(main, ["build", "--force"]), message)
    assert found.wasm.read_bytes() == before and build.is_verified(found.wasm)
    assert cache.lease_file(root, key(1)) in cache._HELD  # this process's lease is back
    user.finish()
    assert build.ensure_component(force=True, announce=False).built == "asked to (--force)"
    assert found.wasm.read_bytes() != before


def test_two_processes_build_a_key_once(root):
    """The second process to want a build that is being made waits for it (the build
    lock) and uses it: one build, both with its digest, one log record."""
    go = root.parent / "go"
    first = User("build", key(1), str(go))
    wait_for(lambda: cache.build_lock_file(root, key(1)).exists()
             and (first.pid, "WRITE", False) in flocks(cache.build_lock_file(root, key(1))),
             "the first builder holding the build lock")
    second = User("build", key(1))
    wait_for(lambda: (second.pid, "WRITE", True) in flocks(cache.build_lock_file(root, key(1))),
             "the second builder waiting for it")
    go.touch()
    (one,), _ = first.finish()
    (two,), _ = second.finish()
    assert one["built"] == "no build of it in this cache yet" and two["built"] is None
    assert one["digest"] == two["digest"]
    assert build.artifacts(key(1)).wasm.read_text() == f"fake build of {key(1)} by {first.pid}"
    assert log_events(root) == [("built", key(1))]


def test_the_build_log_is_trimmed(root, monkeypatch):
    monkeypatch.setattr(cache, "LOG_KEEP", 3)
    for n in range(6):
        cache.record(root, {"event": "built", "key": str(n)})
    assert [r["key"] for r in cache.read_log(root)] == ["0", "1", "2", "3", "4", "5"]
    cache.record(root, {"event": "built", "key": "6"})  # past twice LOG_KEEP: the last 3 kept
    assert [r["key"] for r in cache.read_log(root)] == ["4", "5", "6"]


# ---------------------------------------------------------------------- racing processes
@pytest.mark.slow  # real worker pools and a real trace beside the builders
def test_processes_racing_on_one_cache(tmp_path, monkeypatch):
    """Real processes share one cache with a budget of 1 MB, so every build evicts all it
    can: two worker pools on the standard guest and a ``steptrace trace`` use it while
    nine builders (three at a time) make and evict other builds, old large builds and a
    foreign one wait to be evicted, and a ``build --force`` is tried. No run fails or
    rebuilds; the standard build's files are the same files throughout; each pool starts
    new workers on it afterwards; the old builds are gone. Once its users have ended, the
    next build evicts it, and building it again would say so."""
    session = build.artifacts()
    limits = Limits(timeout_s=5.0)
    shared = tmp_path / "cache"
    shared.mkdir()
    for path in (session.wasm, build.sidecar(session.wasm), compiled_path(session, limits),
                 build.sidecar(compiled_path(session, limits))):
        if path.exists():
            shutil.copy2(path, shared / path.name)
    standard = session.key
    old = [make_build(shared, key(n), 1 << 30, (50 - n) * HOUR, variant=True) for n in (1, 2, 3)]
    old.append(make_build(shared / cache.FOREIGN, "e" * 64, 1 << 30, 45 * HOUR))
    env = {build.CACHE_ENV: str(shared), cache.MAX_MB_ENV: "1"}
    monkeypatch.setenv(build.CACHE_ENV, str(shared))

    def standard_files() -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_ino, p.stat().st_size) for p in shared.iterdir()
                if p.name.startswith(f"guest-{standard}") and p.suffix in (".wasm", ".cwasm",
                                                                         ".sha256")}

    pools = [User("hold", env=env) for _ in range(2)]
    assert [p.read() for p in pools] == [{"phase": "ready", "key": standard,
                                          "outputs": ["2", "4", "6"]}] * 2
    files = standard_files()
    assert sorted(files) == sorted(p.name for p in (
        session.wasm, build.sidecar(session.wasm), compiled_path(session, limits),
        build.sidecar(compiled_path(session, limits))))
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"id": f"s{i}", "code": "def f(n):\n    return sum(range(n))\n", "input": str(i),
         "output": str(sum(range(i)))} for i in range(40)])
    trace = subprocess.Popen([sys.executable, "-m", "steptrace.cli", "trace", str(corpus), "--db",
                              str(tmp_path / "s.duckdb"), "--workers", "2", "--timeout", "5",
                              "--quiet", "--format", "json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    done = []
    for round_ in range(3):
        builders = [User("build", key(4 + 3 * round_ + n), env=env) for n in range(3)]
        done += [b.finish()[0][0] for b in builders]
        forced = subprocess.run([sys.executable, "-m", "steptrace.cli", "build", "--force"],
                                capture_output=True, text=True, env={**os.environ, **env},
                                timeout=HANG_GUARD_S)
        assert (forced.returncode, forced.stdout, forced.stderr) == (
            1, "", f"Error: the guest build {standard} is in use by another steptrace process "
                   "(a trace, a worker): rebuild it once that has ended\n")
    # each built its own key (which build the log names as the last before it depends on
    # which builder got there first)
    changed = "the guest's sources or tools changed since the last build ("
    assert [d["key"] for d in done] == [key(n) for n in range(4, 13)]
    assert all(d["built"] == "no build of it in this cache yet" or d["built"].startswith(changed)
               for d in done)
    out, err = trace.communicate(timeout=HANG_GUARD_S)
    assert trace.returncode == 0, err
    summary = json.loads(out)
    assert (summary["traced"], summary["by_status"], summary["matched"]) == (40, {"ok": 40}, 40)
    assert err == ""  # no rebuild, no warning
    assert standard_files() == files  # the same files: never removed, rebuilt or replaced
    for paths in old:
        assert not any(p.exists() for p in paths)
    for pool in pools:
        lines, err = pool.finish()
        assert lines == [{"phase": "again", "key": standard, "outputs": ["8", "10"]}]
        assert "building" not in err and "Traceback" not in err
    # its users have ended: the next build evicts it, and a rebuild would say why
    last = User("build", key(15), env=env)
    assert last.finish()[0][0]["built"].startswith(changed)
    assert standard_files() == {}
    assert ("evicted", standard) in log_events(shared)
    assert cache.rebuild_reason(shared, standard, None, "", False) == (
        f"it was evicted on {TODAY}: the cache was over its 1 MB budget (STEPTRACE_CACHE_MAX_MB)")
    assert {n for n in names(shared) if n.startswith("guest-")} == {
        f"guest-{key(15)}.wasm", f"guest-{key(15)}.wasm.sha256", f"guest-{key(15)}.lock",
        f"guest-{key(15)}.build"}
