"""Shared fixtures: one real sandbox per test session, the CRUXEval data path."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

ROOT = Path(__file__).resolve().parent.parent
# $STEPTRACE_CRUXEVAL names the file where a checkout has no ../shared beside it
CRUXEVAL = Path(os.environ.get("STEPTRACE_CRUXEVAL")
                or ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl")

# In CI (CI=true) the property-based tests draw the same examples on every run, so whether
# a submission passes does not depend on the draw; a developer's run draws new ones each
# time, and what they find is fixed and pinned with @example.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


def pytest_configure(config) -> None:
    """The test session's own component cache: a second steptrace process using the same
    cache directory (another ``make test``, a user's ``steptrace trace``) would otherwise
    add, prune and rewrite files that tests count and compare. It starts as a copy of the
    current build in the user's cache (copies, not links: a test may damage a cached file
    on purpose), so no rebuild is needed when one is there, and goes with the session.
    The copy is made under the build's lock, so it is never half of one build and half
    of another being made there (wasm_sandbox/_cache.py).

    When there is none (a cold cache, or the guest's sources changed), it is built here,
    once: a build says why on stderr, which belongs to no test's output."""
    from steptrace.errors import SteptraceError
    from steptrace.sandbox import _build as build
    from steptrace.sandbox import _cache as cache
    source = build.cache_dir()
    private = Path(tempfile.mkdtemp(prefix="steptrace-test-cache-"))
    config._steptrace_cache = private
    config._steptrace_cache_source = source
    key = build.cache_key()
    if source.is_dir():
        with cache.building(source, key):
            # the guest, and the plain CPython of the tests that re-derive answers
            # (tests/helpers/native.py: its builds are named guest-native-KEY)
            for pattern in (f"guest-{key}*", "guest-native-*"):
                for path in source.glob(pattern):
                    if path.is_file() and not path.name.endswith((".checked", ".lock",
                                                                  ".build")):
                        shutil.copy2(path, private / path.name)
    os.environ[build.CACHE_ENV] = str(private)
    if not build.is_verified(build.artifacts(key).wasm):
        try:
            build.ensure_component()
        except SteptraceError:
            pass  # the tests that need the guest say why


def pytest_collection_modifyitems(config, items) -> None:
    """Tests that trace the whole CRUXEval corpus (its fixtures) are slow, whatever their
    module: ``make test-fast`` leaves them out (``make test`` runs everything)."""
    for item in items:
        if {"cruxeval_db", "cruxeval_path"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_unconfigure(config) -> None:
    """The session's cache goes; what it built that the user's cache lacks (a first
    build, the determinism variant) is kept there first, so the next session need not
    build it again. Each file arrives whole (a temporary name, then a rename), as the
    build writes it: a process reading the user's cache meanwhile sees it or not; and a
    build's files arrive under its build lock, as a build there writes them
    (wasm_sandbox/_cache.py), so they never mix with another process's build of it."""
    from steptrace.sandbox import _cache as cache
    private = getattr(config, "_steptrace_cache", None)
    if private is None:
        return
    source = config._steptrace_cache_source
    try:
        source.mkdir(parents=True, exist_ok=True)
        groups = {m.group(1) for p in private.glob("guest-*")
                  if (m := re.match(r"guest-([0-9a-f]{24})", p.name))}
        for group in sorted(groups):
            with cache.building(source, group):
                for path in sorted(private.glob(f"guest-{group}*")):
                    if (path.name.endswith((".checked", ".lock", ".build"))
                            or (source / path.name).exists()):
                        continue
                    partial = source / f".{path.name}.{os.getpid()}.partial"
                    shutil.copy2(path, partial)
                    os.replace(partial, source / path.name)
    except OSError:
        pass  # a read-only or full cache: the next session builds again
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox():
    """The real guest component under wasmtime (built and cached on first use)."""
    with Sandbox(Limits(timeout_s=5.0)) as box:
        yield box


@pytest.fixture(scope="session")
def run(sandbox):
    """``run(code, input, expected=None, entry='f', isolation='job', **options)`` → result dict."""
    def _run(code: str, input: str = "", expected: str | None = None, entry: str = "f",
             isolation: str = "job", **options) -> dict:
        request = {"code": code, "input": input, "expected": expected, "entry": entry,
                   "options": options}
        return sandbox.run(request, isolation).result
    return _run


@pytest.fixture(scope="session")
def cruxeval_path() -> Path:
    assert CRUXEVAL.exists(), f"CRUXEval data missing at {CRUXEVAL} (see shared/data/cruxeval/README.md)"
    return CRUXEVAL


@pytest.fixture(scope="session")
def cruxeval_db(tmp_path_factory, cruxeval_path) -> Path:
    """The 800 CRUXEval samples traced once per session (fresh instance per job) into a
    real DuckDB file, then analysed (conditions, operands, determinism; see
    engine/tracing/_analysis.py). Tests that read it must not write to it: copy it first."""
    from steptrace.tracing._analysis import AnalysisOptions, analyse_store
    from steptrace.tracing._trace import TraceOptions, trace_corpus
    db = tmp_path_factory.mktemp("cruxeval") / "crux.duckdb"
    summary = trace_corpus(cruxeval_path, db, TraceOptions(workers=2, isolation="job"))
    assert summary.traced == 800, summary
    analysed = analyse_store(db, AnalysisOptions(workers=2, determinism=True))
    assert (analysed.analysed, analysed.determinism_checked) == (800, 800), analysed
    return db
