"""The commands of the sandbox and the trace (pipeline steps 1-4): build, trace, analyse, show.

Module-level imports are click and light modules only (see _common.py): each command
imports the library code it calls (wasmtime, DuckDB, ...) inside its function.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from steptrace.cli._common import (_progress_bar, _progress_callback, db_option, echo_warnings,
                                   format_option)
from steptrace.cli._render import render
from steptrace.sandbox._limits import BACKENDS, ISOLATIONS, Limits
from steptrace.sharding._defaults import DEFAULT_SHARD_SIZE, ENGINES

if TYPE_CHECKING:
    from steptrace.tracing._trace import TraceSummary

# Steps ``show`` prints unless asked for more (--limit 0: all of them).
SHOW_LIMIT = 1000

@click.command()
@click.option("--force", is_flag=True, help="Rebuild even if the cache is valid.")
@click.option("--with", "requirements", multiple=True, metavar="REQUIREMENT",
              help="A pure-Python package to bundle (pip syntax: 'toolz==1.0.0'); repeatable. "
                   "Resolved with its dependencies and written to --lock.")
@click.option("-r", "--requirements", "requirements_file",
              type=click.Path(path_type=Path, dir_okay=False),
              help="A requirements file of packages to bundle (as --with).")
@click.option("--import", "imports", multiple=True, metavar="MODULE",
              help="A module to import into the guest's snapshot besides the packages' "
                   "top-level modules (a lazily imported submodule: 'dateutil.parser'; "
                   "others are imported on first use); repeatable.")
@click.option("--lock", "lock_path", type=click.Path(path_type=Path, dir_okay=False),
              help="The package lock: written when packages are given, else read (build "
                   "the guest a lock describes).")
@click.option("--backend", type=click.Choice(BACKENDS), default="wasi", show_default=True,
              help="native: resolve the packages to this platform's wheels for the native "
                   "backend's CPython (native code allowed: numpy, pandas, scipy), install "
                   "them and start its jail once (docs/guides/sandbox.md).")
@click.option("--python", "python", metavar="PATH|3.N",
              help="With --backend native: the interpreter, or a version (3.13: the newest "
                   "CPython 3.13 found); default $STEPTRACE_PYTHON, else the newest CPython "
                   "3.12+ found.")
@click.option("--learn", "learn_from", type=click.Path(path_type=Path),
              help="A corpus: add to the lock the packages' submodules its programs import, "
                   "or import on first use in a first run (written back to --lock).")
@format_option
def build(force: bool, requirements: tuple[str, ...], requirements_file: Path | None,
          imports: tuple[str, ...], lock_path: Path | None, backend: str, python: str | None,
          learn_from: Path | None, fmt: str) -> None:
    """Build (or verify) the guest component and its compiled cache; with packages, a
    guest that bundles them (docs/guides/packages.md); with --backend native, the native
    backend's guest (its packages installed, its jail started once)."""
    if backend == "native":
        _build_native(requirements, requirements_file, imports, lock_path, python,
                      learn_from, fmt)
        return
    if python is not None:
        raise click.UsageError("--python goes with --backend native")
    from steptrace.sandbox._build import cache_dir, ensure_component
    from steptrace.sandbox._cache import cached_builds, max_bytes
    from steptrace.sandbox._packages import PackageError, read_lock, resolve_packages
    from steptrace.sandbox._runtime import Sandbox
    specs = _requested(requirements, requirements_file, lock_path)
    lock = resolution = None
    if specs:
        resolution = resolve_packages(specs, imports)
        lock = resolution.lock
        lock_path.write_text(lock.text)
    elif lock_path is not None:
        lock = read_lock(lock_path)
    elif imports:
        raise PackageError("--import needs packages (--with, -r) or a --lock")
    learned = None
    if learn_from is not None:
        if lock is None:
            raise PackageError("--learn needs packages (--with, -r) or a --lock")
        from steptrace.tracing._learn import learn_imports
        learned = learn_imports(learn_from, lock)
        lock = learned.lock
        lock_path.write_text(lock.text)
    found = ensure_component(force=force, packages=lock, announce=False)
    with Sandbox(Limits(), found) as sandbox:
        modules = sandbox.preloaded_modules()
    used = sum(b.size for b in cached_builds(cache_dir())) / (1 << 20)
    rows = [("cache_dir", str(cache_dir())),
            ("cache_mb", f"{used:,.0f} of {max_bytes() >> 20:,} (STEPTRACE_CACHE_MAX_MB)"),
            ("component", str(found.wasm)),
            ("component_bytes", found.wasm.stat().st_size), ("guest", found.key),
            ("built_now", found.built or "no: the cached build is verified"),
            ("preloaded_modules", len(modules["imported"])),
            ("bundled_modules", modules.get("bundled", 0)),
            ("unavailable", ", ".join(sorted(modules["failed"])) or "-")]
    if lock is not None:
        rows += [("lock", str(lock_path)), ("packages", str(lock)),
                 ("package_modules", ", ".join(modules.get("packages", [])))]
    if resolution is not None:
        # what pip held back to older versions (pinned by the user, or the build refused)
        rows += [("held_back", "; ".join(map(str, resolution.held_back)) or "-")]
        if resolution.not_compared:
            rows += [("newest_not_checked", resolution.not_compared)]
    if learned is not None:
        rows += [("learned_from_imports", ", ".join(learned.read) or "-")]
        rows += [(f"learned_in_run_{number}", ", ".join(added) or "-")
                 for number, added in enumerate(learned.rounds, 1)]
    click.echo(render(["item", "value"], rows, fmt))


def _requested(requirements: tuple[str, ...], requirements_file: Path | None,
               lock_path: Path | None) -> list[str]:
    """The packages ``build`` is asked to resolve (--with, -r): resolving writes --lock, so
    they need one."""
    from steptrace.sandbox._packages import PackageError, read_requirements
    specs = list(requirements) + (read_requirements(requirements_file)
                                  if requirements_file else [])
    if specs and lock_path is None:
        raise PackageError("packages need --lock FILE: where their lock is written")
    return specs


def _build_native(requirements: tuple[str, ...], requirements_file: Path | None,
                  imports: tuple[str, ...], lock_path: Path | None, python: str | None,
                  learn_from: Path | None, fmt: str) -> None:
    """``build --backend native``: resolve (or read) a native lock, install its wheels into
    the cache and start the native guest once (its imports and warm-up jobs checked)."""
    from steptrace.native_sandbox._python import find_python
    from steptrace.native_sandbox._runtime import NativeSandbox, prepare
    from steptrace.sandbox._packages import PackageError, read_lock, resolve
    if learn_from is not None:
        raise click.UsageError("--learn goes with the WASI guest (a native guest imports "
                               "what its programs import at run time)")
    specs = _requested(requirements, requirements_file, lock_path)
    lock = None
    if specs:
        interpreter = find_python(python)
        lock = resolve(specs, imports, python=interpreter.minor)
        lock_path.write_text(lock.text)
    elif lock_path is not None:
        lock = read_lock(lock_path)
        if not lock.native:
            raise PackageError(f"{lock_path} is a WASI guest's lock: resolve the packages "
                               "again with --backend native --with ...")
        interpreter = find_python(python, lock.python)
    elif imports:
        raise PackageError("--import needs packages (--with, -r) or a --lock")
    else:
        interpreter = find_python(python)
    guest = prepare(interpreter, lock)
    with NativeSandbox(Limits(), guest) as sandbox:
        modules = sandbox.preloaded_modules()
    rows = [("backend", "native"), ("python", f"{interpreter.version} "
                                              f"({interpreter.executable})"),
            ("guest", guest.key), ("runner", guest.runner),
            ("preloaded_modules", len(modules.get("imported", []))),
            ("unavailable", ", ".join(sorted(modules.get("failed", {}))) or "-")]
    if lock is not None:
        rows += [("lock", str(lock_path)), ("packages", str(lock) or "-"),
                 ("native_code", ", ".join(lock.native_code) or "-"),
                 ("installed_in", guest.packages or "-"),
                 ("package_modules", ", ".join(modules.get("packages", [])))]
    click.echo(render(["item", "value"], rows, fmt))


def summary_rows(summary: TraceSummary, store: dict[str, int]) -> list[tuple[str, object]]:
    """``trace``'s table: the summary's counts, then the store's runs by status."""
    rows: list[tuple[str, object]] = [
        ("corpus", summary.corpus), ("db", summary.db), ("jobs in corpus", summary.jobs),
        ("duplicate jobs in corpus", summary.duplicates),
        ("already stored (skipped)", summary.skipped), ("traced now", summary.traced)]
    rows += [(f"  status {status}", count) for status, count in sorted(summary.by_status.items())]
    if summary.with_expected:
        rows.append(("outputs matching expected", f"{summary.matched} / {summary.with_expected}"))
    rows += [("line steps", summary.line_steps), ("instruction steps", summary.instruction_steps),
             ("trace steps", summary.steps), ("seconds", f"{summary.seconds:.2f}"),
             ("runs/s", f"{summary.runs_per_second:.1f}"),
             ("corpus records skipped as bad", len(summary.corpus_errors)),
             ("runs in store", sum(store.values()))]
    rows += [(f"  store status {status}", count) for status, count in store.items()]
    return rows


@click.command()
@click.argument("corpus", nargs=-1, type=click.Path(path_type=Path))
@click.option("--demo", is_flag=True, help="Trace the demo corpus bundled with steptrace.")
@db_option
@click.option("--out", type=click.Path(path_type=Path, file_okay=False),
              help="Trace into this shard directory instead of --db: fixed shards of jobs, "
                   "Parquet files per shard; run again to resume (docs/guides/shards.md).")
@click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
              help="With --out: run the shards on this machine's worker pool or on Ray.")
@click.option("--address", help="With --engine ray: the cluster's address (default: start "
                                 "a local Ray with --workers CPUs).")
@click.option("--shard-size", type=click.IntRange(min=1), default=DEFAULT_SHARD_SIZE,
              show_default=True, help="With --out: jobs per shard.")
@click.option("--plan-only", is_flag=True,
              help="With --out: write the plan and stop (then trace-shard DIR --index I).")
@click.option("--trust-guest", metavar="SHA256",
              help="With --out: run the plan's guest although this machine did not build it "
                   "(a directory planned elsewhere), if its component has this digest.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes (default: CPU count; 0 runs in this process, with no "
                   "watchdog: a job blocked in a sleep or wait ends only when the wait does). "
                   "With --engine ray: actors.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=Limits.timeout_s,
              show_default=True, help="Seconds per job (wall clock).")
@click.option("--max-steps", type=click.IntRange(min=1), default=Limits.max_steps,
              show_default=True, help="Trace steps per job.")
@click.option("--memory-mb", type=click.IntRange(min=16), default=Limits.memory_mb,
              show_default=True, help="Guest linear memory per job, MiB.")
@click.option("--max-repr", type=click.IntRange(min=1), default=Limits.max_repr,
              show_default=True, help="Characters kept of each variable's repr.")
@click.option("--max-script-stdout", type=click.IntRange(min=1),
              default=Limits.max_script_stdout, show_default=True,
              help="Characters a script may write to stdout (and to stderr); a call's cap is "
                   f"{Limits.max_stdout:,}.")
@click.option("--max-file-bytes", type=click.IntRange(min=1), default=Limits.max_file_bytes,
              show_default=True, help="Bytes of all the files a job has in /work and /tmp "
                                      "(status file_limit).")
@click.option("--max-files", type=click.IntRange(min=1), default=Limits.max_files,
              show_default=True, help="Files, directories and symlinks a job may have in "
                                      "/work and /tmp (status file_limit).")
@click.option("--isolation", type=click.Choice(ISOLATIONS), default="job", show_default=True,
              help="job: a fresh interpreter per job; batch: reuse one per chunk (trusted code; "
                   "a corpus with records marked model_written runs in job isolation).")
@click.option("--force", is_flag=True, help="Trace again jobs already in the store.")
@click.option("--packages", "lock", type=click.Path(path_type=Path, dir_okay=False),
              help="A package lock (steptrace build --with ... --lock FILE): trace in the "
                   "guest that bundles those packages.")
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="wasi: the WebAssembly guest; native: the same tracer in a jailed native "
                   "CPython 3.12+, for packages with native code (numpy, pandas, scipy). "
                   "Default: native for a lock made with build --backend native (said in a "
                   "note), else wasi. docs/guides/sandbox.md says what each guarantees.")
@click.option("--python", "python", metavar="PATH|3.N",
              help="The native backend's interpreter, or a version (3.13: the newest CPython "
                   "3.13 found); default $STEPTRACE_PYTHON, else the newest CPython 3.12+ "
                   "found on PATH or in pyenv's versions.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--no-loop-detection", "no_loop_detection", is_flag=True,
              help="Run programs that provably loop forever on to the step or time limit "
                   "instead of ending them with status loops (goes with --db).")
@format_option
def trace(corpus: tuple[Path, ...], demo: bool, db: str, out: Path | None, engine: str,
          address: str | None, shard_size: int, plan_only: bool, trust_guest: str | None,
          workers: int | None, timeout: float, max_steps: int, memory_mb: int, max_repr: int,
          max_script_stdout: int, max_file_bytes: int, max_files: int, isolation: str,
          force: bool, lock: Path | None, backend: str | None, python: str | None,
          quiet: bool, no_loop_detection: bool, fmt: str) -> None:
    """Trace every job of CORPUS (JSONL file, directory of .py files, Parquet file or a
    Hugging Face dataset saved with save_to_disk or in the Hub's layout; - or a pipe is
    read once, into a temporary file) into the store; with --out, of every CORPUS into a
    shard directory."""
    from steptrace.corpus._formats import demo_corpus_path
    from steptrace import _api as api
    if demo == bool(corpus):
        raise click.UsageError("give a CORPUS path or --demo (not both)")
    paths = [demo_corpus_path()] if demo else list(corpus)
    limits = Limits(timeout_s=timeout, max_steps=max_steps, memory_mb=memory_mb, max_repr=max_repr,
                    max_script_stdout=max_script_stdout, max_file_bytes=max_file_bytes,
                    max_files=max_files)
    if out is None:
        given = [name for name, value in (("--engine", engine != "local"), ("--address", address),
                                          ("--shard-size", shard_size != DEFAULT_SHARD_SIZE),
                                          ("--plan-only", plan_only),
                                          ("--trust-guest", trust_guest))
                 if value]
        if given:
            raise click.UsageError(f"{given[0]} goes with --out DIR (a sharded trace)")
        if len(paths) != 1:
            raise click.UsageError("a trace into --db takes one CORPUS (several go with --out DIR)")
        with _progress_bar("tracing", quiet) as progress:
            summary = api.trace(paths[0], db, workers=workers, isolation=isolation,
                                limits=limits, force=force,
                                name="demo" if demo else str(paths[0]),
                                progress=_progress_callback(progress), packages=lock,
                                loop_detection=not no_loop_detection, backend=backend,
                                python=python)
        echo_warnings(summary.corpus_errors)
        for note in summary.notes:
            click.echo(f"note: {note}", err=True)
        echo_trace_summary(summary, db, fmt)
        if summary.corpus_errors:
            sys.exit(1)
        return
    if force:
        raise click.UsageError("--force goes with --db (a shard directory is resumed, not "
                               "replaced: give a new --out to trace again)")
    if no_loop_detection:
        raise click.UsageError("--no-loop-detection goes with --db")
    if workers == 0:
        raise click.UsageError("a sharded trace needs --workers 1 or more")
    shards = [0, 0]  # done, planned: shown beside the runs' rate

    def shard_progress(done: int, total: int) -> None:
        shards[:] = [done, total]

    notes: list[str] = []
    with _progress_bar("tracing shards", quiet) as progress:
        bar = _progress_callback(progress, note=lambda: f"shards {shards[0]}/{shards[1]}")
        sharded = api.trace_sharded(paths, out, engine=engine, address=address,
                                    shard_size=shard_size, workers=workers, isolation=isolation,
                                    limits=limits, progress=bar, shard_progress=shard_progress,
                                    packages=lock, plan_only=plan_only, on_note=notes.append,
                                    trust_guest=trust_guest, backend=backend, python=python)
    echo_warnings(sharded.corpus_errors)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if fmt == "json":
        click.echo(json.dumps(sharded.as_dict(), indent=2))
    else:
        click.echo(render(["item", "value"], sharded.as_rows(), fmt, title="steptrace trace"))
    if sharded.corpus_errors:
        sys.exit(1)


@click.command("trace-shard")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
@click.option("--index", type=click.IntRange(min=0), required=True,
              help="The shard to run (0-based; the plan lists them).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: CPU count).")
@click.option("--trust-guest", metavar="SHA256",
              help="Run the plan's guest although this machine did not build it (a directory "
                   "planned elsewhere), if its component has this digest.")
@format_option
def trace_shard(directory: Path, index: int, workers: int | None, trust_guest: str | None,
                fmt: str) -> None:
    """Run one shard of a shard directory made by trace --out (for batch schedulers: one
    process per shard index); a done shard is not run again."""
    from dataclasses import asdict
    from steptrace import _api as api
    result = api.trace_shard(directory, index, workers=workers, trust_guest=trust_guest)
    data = asdict(result)
    rows = [("shard", result.index), ("already done (skipped)", result.skipped),
            *([("guest", result.guest)] if result.guest else []), ("runs", result.runs)]
    rows += [(f"  status {status}", count) for status, count in result.by_status.items()]
    rows += [("trace steps", result.steps), ("seconds", f"{result.seconds:.2f}")]
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(render(["item", "value"], rows, fmt, title="steptrace trace-shard"))


@click.command("import")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
@db_option
@click.option("--force", is_flag=True, help="Replace runs the store already holds.")
@format_option
def import_command(directory: Path, db: str, force: bool, fmt: str) -> None:
    """Load the finished shards of a shard directory (trace --out) into the store --db."""
    from steptrace import _api as api
    summary = api.import_shards(directory, db, force=force)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace import"))


def echo_trace_summary(summary: TraceSummary, db: str, fmt: str) -> None:
    """What ``trace`` prints: its summary and the store's runs by status."""
    from steptrace.store._store import status_counts
    if fmt == "json":
        click.echo(json.dumps({**summary.as_dict(), "store": status_counts(db)}, indent=2))
    else:
        click.echo(render(["item", "value"], summary_rows(summary, status_counts(db)), fmt,
                          title="steptrace trace"))


@click.command()
@db_option
@click.option("--determinism", is_flag=True,
              help="Also trace each run again in a separately seeded build of the guest "
                   "and flag runs whose result or trace differs.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes (default: one per CPU; 0 = in this process, with no "
                   "watchdog for jobs blocked in a sleep or wait).")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=Limits.timeout_s,
              show_default=True, help="Seconds per job (wall clock).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def analyse(db: str, determinism: bool, workers: int | None, timeout: float, quiet: bool,
            fmt: str) -> None:
    """Record condition outcomes and operand checks of every finished run (a second,
    instrumented run), and with --determinism whether the run is reproducible."""
    from steptrace.store._store import require_store
    from steptrace import _api as api
    require_store(db)
    with _progress_bar("analyse", quiet) as progress:
        summary = api.analyse(db, determinism=determinism, workers=workers, timeout_s=timeout,
                              progress=_progress_callback(progress))
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace analyse"))


@click.command()
@click.argument("run_id", required=False, type=int)
@click.option("--sample-id", help="Show the run of this sample id instead.")
@click.option("--input-index", type=int, default=0, show_default=True,
              help="With --sample-id: which of the sample's inputs.")
@click.option("--steps", "step_range", metavar="FIRST:STOP",
              help="Only steps FIRST to STOP-1, as a Python slice (100:200; 5000: from step "
                   "5000; :50 the first 50).")
@click.option("--limit", type=click.IntRange(min=0), default=SHOW_LIMIT, show_default=True,
              help="At most this many steps (0: no limit); a line says which were shown.")
@db_option
@format_option
def show(run_id: int | None, sample_id: str | None, input_index: int, step_range: str | None,
         limit: int, db: str, fmt: str) -> None:
    """Show one run: the program and its trace step by step (up to --limit steps, from
    --steps)."""
    from steptrace.analytics._show import StepRange, load_run
    from steptrace.corpus._formats import source_lines
    if (run_id is None) == (sample_id is None):
        raise click.UsageError("give a RUN_ID or --sample-id (not both)")
    asked = StepRange.parse(step_range, limit or None)
    view = load_run(db, run_id=run_id, sample_id=sample_id, input_index=input_index,
                    steps=asked)
    columns = ["step", "event", "func", "line", "depth", "frame", "code", "changed"]
    rows = [(s.step, s.event, s.func, s.line, s.depth, s.frame,
             ("  " * s.depth) + s.source, s.changes_text()) for s in view.steps]
    if fmt == "json":
        run = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
               for k, v in view.run.items()}
        steps = [{**dict(zip(columns[:6], row[:6])), "code": s.source,
                  "changes": [{"var": n, "value": v, "type": t, "truncated": tr,
                               "object_id": oid}
                              for (n, v, t, tr), oid in zip(s.changes, s.object_ids)],
                  "attributes": [dict(zip(("object_id", "attr", "value", "type", "truncated",
                                           "ref_id"), row)) for row in s.attributes],
                  "globals": [dict(zip(("name", "value", "type", "truncated", "object_id"),
                                       row)) for row in s.globals]}
                 for row, s in zip(rows, view.steps)]
        shown = {"first": view.first, "count": len(steps), "of": view.run.get("n_steps") or 0}
        click.echo(json.dumps({"run": run, "code": view.code, "steps": steps,
                               "steps_shown": shown}, indent=2, ensure_ascii=False))
        return
    if fmt == "csv":
        click.echo(render(columns, rows, "csv"))
        if view.omitted:
            click.echo(f"note: {view.omitted}", err=True)
        return
    from steptrace.store._runs import call_text
    r = view.run
    called = call_text(r["entry"], r["input"], r.get("shape") or "call", r.get("chain"))
    header = [f"run {r['run_id']}  sample {r['sample_id']}  {called}",
              f"status {r['status']}" + (f"  output {r['output']}" if r['output'] is not None else "")
              + (f"  {r['exception_type']}: {r['exception_message']}" if r['exception_message'] else "")
              + ("" if r["output_matches"] is None else f"  matches expected: {r['output_matches']}"),
              ""]
    header += [f"{i:>3}  {line}" for i, line in enumerate(source_lines(view.code), start=1)]
    click.echo("\n".join(header))
    click.echo(render(columns, rows, "table"))
    if view.omitted:
        click.echo(view.omitted)
