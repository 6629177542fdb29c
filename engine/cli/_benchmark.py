"""The commands that build a benchmark: generate, harvest, excerpts, repair, filter, dedupe, select,
size-check, synth.

Module-level imports are click and light modules only (see _common.py): each command
imports its steptrace.benchmark module (and with it DuckDB, numpy or openai) when it runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from steptrace.errors import InputError

from steptrace.cli._common import (_echo_summary, _progress_bar, _progress_callback, db_option,
                                   format_option, request_options, request_settings)
from steptrace.cli._render import render

GENERATE_TEMPERATURE = 0.8  # candidates should differ from one another


@click.command("generate")
@request_options(temperature=GENERATE_TEMPERATURE)
@click.option("--n", "count", type=click.IntRange(min=1), required=True,
              help="Generations (one request each).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Fixes each generation's method and few-shot pair.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Candidates JSONL to write (a corpus for `steptrace trace`).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Prompts and raw responses, appended [default: OUT with .log.jsonl].")
@click.option("--methods-file", "methods_files", multiple=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="More methods to prompt with, one a line (e.g. collections.Counter."
                   "most_common); repeatable.")
@click.option("--no-builtin-methods", is_flag=True,
              help="Prompt only with the --methods-file methods, not those of str/list/dict.")
@click.option("--fewshot", "fewshot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Few-shot pool JSONL (id, method, code, inputs) [default: the bundled one].")
@click.option("--template", "template_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Prompt template with $examples and $method [default: the bundled one].")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def generate_command(count: int, seed: int, out: Path, log_path: Path | None,
                     methods_files: tuple[Path, ...], no_builtin_methods: bool,
                     fewshot_path: Path | None, template_path: Path | None, quiet: bool,
                     fmt: str, **request) -> None:
    """Ask a model for candidate benchmark functions, each using one named method, with
    test inputs; log every prompt and response, and write the parsed candidates. A re-run
    asks only for generations not logged yet, or logged with an error."""
    from steptrace.benchmark._generate import GenerateOptions, builtin_methods, generate, read_methods
    if no_builtin_methods and not methods_files:
        raise click.UsageError("--no-builtin-methods needs at least one --methods-file")
    methods = [] if no_builtin_methods else builtin_methods()
    for path in methods_files:
        methods += [m for m in read_methods(path) if m not in methods]
    options = GenerateOptions(n=count, seed=seed, methods=tuple(methods),
                              fewshot_path=fewshot_path, template_path=template_path,
                              log_path=log_path)
    settings = request_settings(**request)
    with _progress_bar("generate", quiet) as progress:
        summary = generate(out, options, settings,
                           progress=_progress_callback(progress, "requests"))
    _echo_summary(summary, fmt, "steptrace generate")


@click.command("harvest")
@request_options(temperature=GENERATE_TEMPERATURE)
@click.option("--with", "requirements", multiple=True, metavar="REQUIREMENT",
              help="A package to harvest (pip syntax: 'idna==3.10'; pure Python, or native "
                   "code with --backend native); repeatable. Resolved with its "
                   "dependencies, which are harvested too.")
@click.option("--lock", "lock_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Harvest the packages of this lock (`steptrace build --lock`, or "
                   "`build --backend native --lock`: traced natively) instead.")
@click.option("--source", "source", type=click.Path(path_type=Path),
              help="Harvest a local source instead: a project directory (pyproject.toml or "
                   "setup.py), a plain package directory, an sdist (.tar.gz) or a wheel; "
                   "built with pip, harvested with its dependencies.")
@click.option("--backend", type=click.Choice(("wasi", "native")), default=None,
              help="With --with or --source: resolve for the WASI guest (the default) or "
                   "for the native backend's CPython (native code allowed). A --lock "
                   "names its own.")
@click.option("--python", default=None, metavar="PATH|3.N",
              help="With --backend native: the interpreter (default: as `build` finds it).")
@click.option("--inputs", "count", type=click.IntRange(min=1), default=5, show_default=True,
              help="Calls asked of the model per function.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Directory for corpus.jsonl, guest.lock, harvest.json, the request log "
                   "and (without --db) store.duckdb.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
              help="Store to trace into [default: OUT/store.duckdb].")
@click.option("--template", "template_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Prompt template with $entry, $signature, $n (and $id, $module, $doc) "
                   "[default: the bundled one].")
@click.option("--no-trace", is_flag=True, help="Write the corpus, do not build or trace.")
@click.option("--since", "since", multiple=True, metavar="NAME==VERSION",
              help="Keep only the functions new or changed (by the digest of their source) "
                   "since this older release of a harvested package; repeatable. A bare "
                   "VERSION names the one package of --with.")
@click.option("--released", default="pypi", show_default=True, metavar="pypi|FILE|none",
              help="Where each release's upload time (meta.released) comes from: the index's "
                   "JSON API, a list ('name==version TIME' lines or a JSON object), or none.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes for tracing (default: one per CPU).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def harvest_command(requirements: tuple[str, ...], lock_path: Path | None,
                    source: Path | None, backend: str | None, python: str | None, count: int,
                    out: Path, db: Path | None, template_path: Path | None, no_trace: bool,
                    since: tuple[str, ...], released: str, workers: int | None, quiet: bool,
                    fmt: str, **request) -> None:
    """Harvest real functions from packages (EXE-style): keep the annotated, I/O-free
    ones, ask a model for inputs, write them as a corpus and trace it in a guest with the
    packages (the native backend's for native code). A re-run asks only for functions
    not logged yet."""
    from steptrace.benchmark._harvest import HarvestOptions, harvest
    from steptrace.benchmark._releases import since_releases
    from steptrace.benchmark._source import harvest_source
    from steptrace.sandbox._backends import interpreter
    from steptrace.sandbox._packages import read_lock, resolve
    if sum((bool(requirements), lock_path is not None, source is not None)) != 1:
        raise click.UsageError("give the packages with --with, --lock or --source (one of "
                               "them)")
    if lock_path is not None and backend is not None:
        raise click.UsageError("--backend goes with --with or --source (a --lock names its "
                               "own backend)")
    if python is not None and backend != "native":
        raise click.UsageError("--python goes with --backend native")
    minor = None
    if backend == "native":
        from steptrace.native_sandbox._python import find_python
        minor = find_python(python).minor
    pairs = since_releases(since, requirements)
    options = HarvestOptions(inputs=count, template_path=template_path, trace=not no_trace,
                             db=db, workers=workers, since=pairs,
                             released=None if released == "none" else released)
    settings = request_settings(**request)
    with interpreter(python), _progress_bar("harvest", quiet) as progress:
        callback = _progress_callback(progress, "requests")
        if source is not None:
            summary = harvest_source(out, source, settings, options, minor, callback)
        else:
            lock = (resolve(list(requirements), python=minor) if requirements
                    else read_lock(lock_path))
            summary = harvest(out, lock, settings, options, progress=callback)
    _echo_summary(summary, fmt, "steptrace harvest")


@click.command("excerpts")
@click.option("--with", "requirements", multiple=True, metavar="REQUIREMENT",
              help="A package to take functions from (pip syntax: 'idna==3.10'); "
                   "repeatable. Resolved with its dependencies, which are read too.")
@click.option("--lock", "lock_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Take the functions of this lock's packages instead.")
@click.option("--site", type=click.Path(path_type=Path, file_okay=False),
              help="Instead: a directory of installed distributions (pip --target).")
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="At most this many excerpts a distribution (the first by id).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Corpus JSONL of the excerpts (the input of `steptrace repair`).")
@format_option
def excerpts_command(requirements: tuple[str, ...], lock_path: Path | None,
                     site: Path | None, count: int | None, out: Path, fmt: str) -> None:
    """Take the functions of real packages as they sit in their modules (the module's
    imports it uses, its own source; the names its project defines elsewhere left
    missing and listed in the record) and write them as a corpus for `steptrace repair`."""
    from steptrace.benchmark._excerpts import write_excerpts
    from steptrace.sandbox._packages import read_lock, resolve
    if sum((bool(requirements), lock_path is not None, site is not None)) != 1:
        raise click.UsageError("give the packages with --with, --lock or --site (one of them)")
    lock = (resolve(list(requirements)) if requirements
            else read_lock(lock_path) if lock_path is not None else None)
    summary = write_excerpts(out, lock, site, count)
    _echo_summary(summary, fmt, "steptrace excerpts")


@click.command("repair")
@click.argument("corpus", type=click.Path(dir_okay=False, path_type=Path))
@request_options(temperature=0.0)
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Revisions asked for at most per example (round 0 runs it as given).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Repaired corpus JSONL to write: the examples that end with their tests "
                   "passing (a corpus for `steptrace trace`).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Every round's prompt, reply, revision and outcome, appended; a re-run "
                   "resumes from it [default: OUT with .log.jsonl].")
@click.option("--packages", "lock", type=click.Path(path_type=Path, dir_okay=False),
              help="A package lock (steptrace build --with ... --lock FILE): run the "
                   "examples in the guest that bundles those packages.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes running the examples (default: CPU count; 0 runs "
                   "them in this process, with no watchdog).")
@click.option("--db", default=None, type=click.Path(),
              help="Also trace the repaired corpus into this store (as `steptrace trace OUT "
                   "--db DB` would).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def repair_command(corpus: Path, rounds: int, out: Path, log_path: Path | None,
                   lock: Path | None, workers: int | None, db: str | None, quiet: bool,
                   fmt: str, **request) -> None:
    """Make the examples of CORPUS (JSONL) run with passing tests: run each as given in
    the sandbox, and ask the model to revise each one that fails, with the run's
    feedback, for at most --rounds rounds; log every round and write the repaired
    examples to --out. A re-run with the same log resumes. Trace the result with
    `steptrace trace OUT` (or give --db)."""
    from steptrace.benchmark._repair import RepairOptions, repair
    from steptrace.sandbox._packages import read_lock
    options = RepairOptions(rounds=rounds, log_path=log_path, workers=workers,
                            packages=None if lock is None else read_lock(lock))
    settings = request_settings(**request)
    with _progress_bar("repair", quiet) as progress:
        summary = repair(corpus, out, settings, options,
                         progress=_progress_callback(progress, "requests"))
    for error in summary.bad_records:
        click.echo(f"warning: {error}", err=True)
    _echo_summary(summary, fmt, "steptrace repair")
    if db is not None:
        from steptrace import _api as api
        from steptrace.cli._trace import echo_trace_summary
        with _progress_bar("tracing", quiet) as progress:
            traced = api.trace(out, db, workers=workers, progress=_progress_callback(progress),
                               packages=lock)
        echo_trace_summary(traced, db, fmt)
    if summary.bad_records:
        sys.exit(1)


def _range_option(ctx: click.Context, param: click.Parameter, value: str | None):
    """``MIN:MAX`` (a side may be empty) → steptrace.benchmark._filters.Range."""
    from steptrace.benchmark._filters import parse_range
    try:
        return None if value is None else parse_range(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.command("filter")
@db_option
@click.option("--rule", "rules", multiple=True, metavar="NAME",
              help="Apply only these rules (repeatable): a rule name or a group (all, default, "
                   "static, dynamic, determinism). Default: every rule.")
@click.option("--no-rule", "without", multiple=True, metavar="NAME",
              help="Switch a rule or group off (repeatable).")
@click.option("--where", help="Extra rule: a SQL condition over runs and meta.KEY (the "
                              "corpus metadata), e.g. \"line_steps BETWEEN 5 AND 100\" "
                              "(read-only).")
@click.option("--length", default="75:300", show_default=True, callback=_range_option,
              metavar="MIN:MAX", help="Bounds of the length rule, in characters of code.")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=2.0,
              show_default=True, help="The time rule's limit on the traced call.")
@click.option("--line-steps", default=":", callback=_range_option, metavar="MIN:MAX",
              help="Bounds of the steps rule on line steps (default: none).")
@click.option("--instruction-steps", default=":", callback=_range_option, metavar="MIN:MAX",
              help="Bounds of the steps rule on instruction steps (default: none).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the kept runs as corpus JSONL (id, code, input, output).")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes for the analysis run, when one is needed.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def filter_command(db: str, rules: tuple[str, ...], without: tuple[str, ...], where: str | None,
                   length, max_seconds: float, line_steps, instruction_steps, out: Path | None,
                   workers: int | None, quiet: bool, fmt: str) -> None:
    """CRUXEval-style construction filters: which runs each rule removes, and which every
    rule keeps. Analyses the store first if a rule needs it (see `analyse`)."""
    from steptrace.benchmark._filters import FilterOptions, FilterReport, filter_runs, write_kept
    from steptrace.store._store import require_store
    require_store(db)
    options = FilterOptions(rules=rules or None, without=without, where=where, length=length,
                            max_seconds=max_seconds, line_steps=line_steps,
                            instruction_steps=instruction_steps, workers=workers)
    with _progress_bar("analyse", quiet) as progress:
        report = filter_runs(db, options, progress=_progress_callback(progress))
    if out is not None:
        written = write_kept(db, report.kept, out)
        click.echo(f"wrote {written} runs to {out}", err=True)
    click.echo(render(FilterReport.COLUMNS, report.rows(), fmt, title="steptrace filter"))


@click.command("dedupe")
@click.argument("records", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="JSONL of the records of the functions kept.")
@click.option("--against", type=click.Path(dir_okay=False, path_type=Path),
              help="A training set (JSONL records with 'code'): drop instead the records it "
                   "holds an exact, normalised or near copy of, and list the matches.")
@click.option("--ngram", type=click.IntRange(min=1), default=5, show_default=True,
              help="With --against: n of the token n-grams of the near-copy rule.")
@click.option("--threshold", type=click.FloatRange(min=0, max=1, min_open=True), default=0.5,
              show_default=True, help="With --against: least n-gram Jaccard similarity of a "
                                      "near copy.")
@format_option
def dedupe_command(records: Path, out: Path, against: Path | None, ngram: int,
                   threshold: float, fmt: str) -> None:
    """Drop functions that duplicate an earlier one, exactly or after renaming identifiers
    and replacing literals (RECORDS: e.g. the output of `steptrace filter --out`); with
    --against, drop the records a training set holds a copy of (decontamination)."""
    if against is not None:
        _decontaminate(records, against, out, ngram, threshold, fmt)
        return
    given = [f"--{name}" for name in ("ngram", "threshold") if click.get_current_context()
             .get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    if given:
        raise click.UsageError(f"{given[0]} goes with --against")
    from steptrace.benchmark._dedupe import dedupe_file
    report = dedupe_file(records, out)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    click.echo(render(["stage", "functions", "records"], report.as_rows(), fmt,
                      title=f"steptrace dedupe -> {out}"))


def _decontaminate(records: Path, against: Path, out: Path, ngram: int, threshold: float,
                   fmt: str) -> None:
    from steptrace import _api as api
    report = api.decontaminate(records, against, out, ngram=ngram, threshold=threshold)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
        return
    if fmt == "csv":  # one table: the matches
        click.echo(render(["id", "training_id", "criterion", "similarity"],
                          report.match_rows(), fmt))
        return
    click.echo(render(["", "records"], report.as_rows(), fmt,
                      title=f"steptrace dedupe --against {against} -> {out}"))
    click.echo(render(["id", "training_id", "criterion", "similarity"], report.match_rows(),
                      fmt, title="matches"))


@click.command("select")
@click.argument("records", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--n", "count", type=click.IntRange(min=1), required=True,
              help="Samples in the benchmark (one function, one input each).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--candidates", type=click.Path(dir_okay=False, path_type=Path),
              help="The candidates file of `steptrace generate`, for each function's method "
                   "(without it every function counts as one method).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Benchmark JSONL in CRUXEval's format (id, code, input, output); the "
                   "sources (candidate id, method per sample) go beside it.")
@click.option("--allow-fewer", is_flag=True,
              help="Write a smaller benchmark when fewer than N functions are eligible.")
@format_option
def select_command(records: Path, count: int, seed: int, candidates: Path | None, out: Path,
                   allow_fewer: bool, fmt: str) -> None:
    """Sample the benchmark from deduplicated records, balanced over the prompted methods,
    and print the method distribution."""
    from steptrace.benchmark._selection import select_file
    report = select_file(records, out, count, seed, candidates, allow_fewer)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    click.echo(render(["method", "available", "selected"], report.as_rows(), fmt,
                      title=f"steptrace select: {report.chosen} of {report.requested}"))


@click.command("size-check")
@click.option("--db", type=click.Path(), default=None,
              help="Store with a scores table (`steptrace score`): per-task pass@1 per model.")
@click.option("--model", "models", multiple=True, metavar="NAME",
              help="With --db: the models to compare (default: every scored model).")
@click.option("--kind", help="With --db: only tasks of this kind (e.g. output).")
@click.option("--scores", "scores_csv", type=click.Path(dir_okay=False, path_type=Path),
              help="Instead of --db: a CSV with a header sample_id,<model>,<model>,...")
@click.option("--sizes", default="100:2000:100", show_default=True, metavar="START:STOP:STEP",
              help="Benchmark sizes to try (or N,N,...); at most the pool size.")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.05, show_default=True,
              help="Highest acceptable probability that a pair's order reverses.")
@click.option("--resamples", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Random benchmarks drawn per size.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@format_option
def size_check_command(db: str | None, models: tuple[str, ...], kind: str | None,
                       scores_csv: Path | None, sizes: str, level: float, resamples: int,
                       seed: int, fmt: str) -> None:
    """How large a benchmark drawn from the candidate pool must be for every pair of models
    to keep its pool order (CRUXEval §3.3): the probability of a reversal per size."""
    from steptrace.benchmark._sizecheck import load_pool_scores, load_scores_csv, parse_sizes, size_check
    if (db is None) == (scores_csv is None):
        raise click.UsageError("give exactly one of --db and --scores")
    if scores_csv is not None and (models or kind):
        raise click.UsageError("--model and --kind go with --db")
    pool = (load_scores_csv(scores_csv) if scores_csv is not None
            else load_pool_scores(db, models, kind))
    result = size_check(pool.scores, pool.models, parse_sizes(sizes), level, resamples, seed)
    if fmt == "json":
        click.echo(json.dumps({**result.as_dict(), "dropped": pool.dropped}, indent=2))
        return
    click.echo(render(result.columns(), result.as_rows(), fmt,
                      title=f"reversal probability, pool of {result.pool}"))
    if fmt == "table":
        smallest = result.smallest_n
        click.echo(f"samples scored for some models only (left out): {pool.dropped}")
        click.echo(f"smallest n with every reversal below {level:g}: {smallest}" if smallest
                   else f"no size tried keeps every reversal below {level:g}")


@click.command()
@click.option("--n", "count", type=click.IntRange(min=0), required=True,
              help="Number of programs.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Random seed: the same seed writes the same bytes.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Corpus JSONL to write (id, code, input).")
@format_option
def synth(count: int, seed: int, out: Path, fmt: str) -> None:
    """Write a deterministic corpus of CRUXEval-like programs with inputs."""
    from steptrace.benchmark._synth import write_synth  # imported here: no cost for other commands
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: no directory {out.parent}")
    summary = write_synth(out, count, seed)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace synth"))
