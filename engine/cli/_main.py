"""The ``steptrace`` command: thin click wrappers over the library functions."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from steptrace import __version__
from steptrace.tracing._analysis import AnalysisOptions, analyse_store
from steptrace.corpus._formats import CorpusError, demo_corpus_path, source_lines
from steptrace.analytics._export import DEFAULT_RUNS_PER_BUCKET, export_parquet
from steptrace.cli._render import FORMATS, render
from steptrace.predictions._predict import (DEFAULT_API_KEY_ENV, PredictError, PredictOptions, predict,
                                resolve_api_key)
from steptrace.analytics._queries import list_rows, parse_assignments, run_query
from steptrace.analytics._show import load_run
from steptrace.store._store import DEFAULT_DB, StoreError, require_store, status_counts
from steptrace.tasks import KINDS as TASK_KINDS, STYLES as PROMPT_STYLES
from steptrace.corpus._text import read_utf8
from steptrace.tracing._trace import TraceOptions, TraceSummary, trace_corpus
from steptrace.sandbox._build import BuildError, cache_dir, ensure_component
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._pool import PoolError
from steptrace.sandbox._runtime import ISOLATIONS, Sandbox

EXPECTED_ERRORS = (StoreError, CorpusError, BuildError, PoolError, PredictError, ValueError,
                   OSError)

# Not click.Path(dir_okay=False): steptrace.store._store.connect says what is wrong with a --db
# (missing, a directory, a text file, ...) in one line, where click would print usage.
# Only trace creates a store: the commands that write into one call require_store first.
db_option = click.option("--db", default=DEFAULT_DB, show_default=True,
                         type=click.Path(), help="DuckDB trace store.")
format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                             show_default=True, help="Output format.")


class SteptraceGroup(click.Group):
    """Turns the errors a user can cause into one line and exit status 1, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EXPECTED_ERRORS as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=SteptraceGroup)
@click.version_option(__version__, prog_name="steptrace")
def main() -> None:
    """steptrace: sandboxed, step-traced execution of Python functions, stored in DuckDB."""


@main.command()
@click.option("--force", is_flag=True, help="Rebuild even if the cache is valid.")
@format_option
def build(force: bool, fmt: str) -> None:
    """Build (or verify) the guest component and its compiled cache."""
    found = ensure_component(force=force)
    with Sandbox(Limits()) as sandbox:
        modules = sandbox.preloaded_modules()
    rows = [("cache_dir", str(cache_dir())), ("component", str(found.wasm)),
            ("component_bytes", found.wasm.stat().st_size),
            ("preloaded_modules", len(modules["imported"])),
            ("unavailable", ", ".join(sorted(modules["failed"])) or "-")]
    click.echo(render(["item", "value"], rows, fmt))


def _progress_bar(label: str, quiet: bool = False) -> Progress:
    """A progress bar on stderr: done/total, rate, elapsed time and ETA. None is drawn with
    --quiet or when stderr is not a terminal."""
    console = Console(stderr=True)
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console, disable=quiet or not console.is_terminal)


def _progress_callback(progress: Progress, unit: str = "runs"):
    """A ``progress(done, total)`` for the library functions, driving one bar's task."""
    task = progress.add_task("", total=None, rate="")
    started = time.perf_counter()

    def update(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started
        rate = f"{done / elapsed:.0f} {unit}/s" if done and elapsed > 0 else ""
        progress.update(task, completed=done, total=total, rate=rate)
    return update


def summary_rows(summary: TraceSummary, store: dict[str, int]) -> list[tuple[str, object]]:
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


@main.command()
@click.argument("corpus", required=False, type=click.Path(path_type=Path))
@click.option("--demo", is_flag=True, help="Trace the demo corpus bundled with steptrace.")
@db_option
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes (default: CPU count; 0 runs in this process, with no "
                   "watchdog: a job blocked in a sleep or wait ends only when the wait does).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=Limits.timeout_s,
              show_default=True, help="Seconds per job (wall clock).")
@click.option("--max-steps", type=click.IntRange(min=1), default=Limits.max_steps,
              show_default=True, help="Trace steps per job.")
@click.option("--memory-mb", type=click.IntRange(min=16), default=Limits.memory_mb,
              show_default=True, help="Guest linear memory per job, MiB.")
@click.option("--max-repr", type=click.IntRange(min=1), default=Limits.max_repr,
              show_default=True, help="Characters kept of each variable's repr.")
@click.option("--isolation", type=click.Choice(ISOLATIONS), default="job", show_default=True,
              help="job: a fresh interpreter per job; batch: reuse one per chunk (trusted code).")
@click.option("--force", is_flag=True, help="Trace again jobs already in the store.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def trace(corpus: Path | None, demo: bool, db: str, workers: int | None, timeout: float,
          max_steps: int, memory_mb: int, max_repr: int, isolation: str, force: bool,
          quiet: bool, fmt: str) -> None:
    """Trace every job of CORPUS (JSONL file or directory of .py files; - or a pipe is
    read once, into a temporary file) into the store."""
    if demo == (corpus is not None):
        raise click.UsageError("give a CORPUS path or --demo (not both)")
    path = demo_corpus_path() if demo else corpus
    limits = Limits(timeout_s=timeout, max_steps=max_steps, memory_mb=memory_mb, max_repr=max_repr)
    options = TraceOptions(limits=limits, isolation=isolation, force=force,
                           **({} if workers is None else {"workers": workers}))
    with _progress_bar("tracing", quiet) as progress:
        summary = trace_corpus(path, db, options, progress=_progress_callback(progress),
                               corpus_name="demo" if demo else str(corpus))
    for error in summary.corpus_errors:
        click.echo(f"warning: {error}", err=True)
    if fmt == "json":
        click.echo(json.dumps({**summary.as_dict(), "store": status_counts(db)}, indent=2))
    else:
        click.echo(render(["item", "value"], summary_rows(summary, status_counts(db)), fmt,
                          title="steptrace trace"))
    if summary.corpus_errors:
        sys.exit(1)


@main.command()
@click.argument("sql", required=False)
@click.option("-f", "--file", "sql_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read the query from a .sql file (a named query runs with its defaults).")
@db_option
@click.option("--parquet", type=click.Path(file_okay=False, path_type=Path),
              help="Query a Parquet export (steptrace export) instead of --db.")
@format_option
def sql(sql: str | None, sql_file: Path | None, db: str, parquet: Path | None, fmt: str) -> None:
    """Run a SQL query against the store or its Parquet export (read-only)."""
    from steptrace.analytics._queries import default_params, run_sql
    if (sql is None) == (sql_file is None):
        raise click.UsageError("give a query or -f FILE (not both)")
    text = read_utf8(sql_file) if sql_file else sql
    params = default_params(text, sql_file) if sql_file else {}
    result = run_sql(text, db=db, parquet=parquet, params=params)
    click.echo(render(result.columns, result.rows, fmt))


@main.command()
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
    require_store(db)
    options = AnalysisOptions(limits=Limits(timeout_s=timeout), determinism=determinism,
                              **({} if workers is None else {"workers": workers}))
    with _progress_bar("analyse", quiet) as progress:
        summary = analyse_store(db, options, progress=_progress_callback(progress))
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace analyse"))


@main.command()
@click.argument("run_id", required=False, type=int)
@click.option("--sample-id", help="Show the run of this sample id instead.")
@click.option("--input-index", type=int, default=0, show_default=True,
              help="With --sample-id: which of the sample's inputs.")
@db_option
@format_option
def show(run_id: int | None, sample_id: str | None, input_index: int, db: str, fmt: str) -> None:
    """Show one run: the program and its trace step by step."""
    if (run_id is None) == (sample_id is None):
        raise click.UsageError("give a RUN_ID or --sample-id (not both)")
    view = load_run(db, run_id=run_id, sample_id=sample_id, input_index=input_index)
    columns = ["step", "event", "func", "line", "depth", "frame", "code", "changed"]
    rows = [(s.step, s.event, s.func, s.line, s.depth, s.frame,
             ("  " * s.depth) + s.source, s.changes_text()) for s in view.steps]
    if fmt == "json":
        run = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
               for k, v in view.run.items()}
        steps = [{**dict(zip(columns[:6], row[:6])), "code": s.source,
                  "changes": [{"var": n, "value": v, "type": t, "truncated": tr}
                              for n, v, t, tr in s.changes]}
                 for row, s in zip(rows, view.steps)]
        click.echo(json.dumps({"run": run, "code": view.code, "steps": steps}, indent=2,
                              ensure_ascii=False))
        return
    if fmt == "csv":
        click.echo(render(columns, rows, "csv"))
        return
    r = view.run
    header = [f"run {r['run_id']}  sample {r['sample_id']}  {r['entry']}({r['input']})",
              f"status {r['status']}" + (f"  output {r['output']}" if r['output'] is not None else "")
              + (f"  {r['exception_type']}: {r['exception_message']}" if r['exception_message'] else "")
              + ("" if r["output_matches"] is None else f"  matches expected: {r['output_matches']}"),
              ""]
    header += [f"{i:>3}  {line}" for i, line in enumerate(source_lines(view.code), start=1)]
    click.echo("\n".join(header))
    click.echo(render(columns, rows, "table"))


SCORE_TABLES = {"kind": "by kind", "difficulty": "by difficulty",
                "consistency": "incremental consistency", "comparison": "paired comparison"}


def _ks(ctx, param, value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a list of whole numbers, e.g. 1,5") from None
    if not ks or min(ks) < 1:
        raise click.BadParameter("every k must be >= 1")
    return ks


@main.command()
@click.option("--tasks", "tasks_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Score the stored predictions of these tasks (JSONL from steptrace tasks).")
@db_option
@click.option("--model", "models", multiple=True, metavar="NAME",
              help="With --tasks: only this model (repeatable; default: every model).")
@click.option("--label", "labels", multiple=True, metavar="LABEL",
              help="With --tasks: only the experiments of this label (repeatable; default: "
                   "every experiment of the models).")
@click.option("--k", "ks", default="1,5", show_default=True, callback=_ks, metavar="K,...",
              help="With --tasks: the k of pass@k (tasks with fewer samples are left out of it).")
@click.option("--type-strict", is_flag=True,
              help="With --tasks: values must also have the same types (1 != 1.0 != True).")
@click.option("--float-tolerance", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="With --tasks: floats equal within this relative and absolute tolerance.")
@click.option("--table", "table", type=click.Choice(["all", *SCORE_TABLES]), default="all",
              show_default=True, help="With --tasks: which table to print (csv prints one: "
                                      "'all' means 'kind' there).")
@click.option("--cruxeval", "cruxeval", type=click.Path(dir_okay=False, path_type=Path),
              help="Score CRUXEval generations in the official format (a JSON object "
                   "sample_i -> list of generated strings) as the official harness does.")
@click.option("--mode", help="With --cruxeval: input or output (which task the "
                             "generations answer).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="With --cruxeval: write the official scored file (raw_generations, "
                   "raw_scored_generations, pass_at_1, pass_at_5) here.")
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("../shared/data/cruxeval/cruxeval.jsonl"), show_default=True,
              help="With --cruxeval: the CRUXEval JSONL (relative to the current directory).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=3.0,
              show_default=True, help="Seconds per sandboxed check (input tasks, --cruxeval "
                                      "uses the official 3 s).")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes (default: one per CPU; 0 = in this process, with no "
                   "watchdog for jobs blocked in a sleep or wait).")
@format_option
def score(tasks_path: Path | None, db: str, models: tuple[str, ...], labels: tuple[str, ...],
          ks: tuple[int, ...],
          type_strict: bool, float_tolerance: float, table: str, cruxeval: Path | None,
          mode: str | None, out: Path | None, data: Path, timeout: float,
          workers: int | None, fmt: str) -> None:
    """Score predictions, every check in the sandbox (a fresh instance per candidate).

    --tasks TASKS.jsonl: judge the stored predictions of these tasks, store the verdicts
    in the scores table, print pass@k by experiment (model and label) and kind, by
    difficulty, incremental consistency and paired comparisons of every two experiments
    (two models, or one model's two labels).

    --cruxeval GENERATIONS.json --mode input|output: the official CRUXEval harness's
    pass@1 and pass@5 (3 s per check)."""
    sources = {"--tasks": tasks_path, "--cruxeval": cruxeval}
    given = [name for name, value in sources.items() if value is not None]
    if len(given) != 1:
        raise click.UsageError(f"give one of {', '.join(sources)}")
    if cruxeval is not None:
        if mode is None:
            raise click.UsageError("--cruxeval needs --mode input or --mode output")
        _score_cruxeval(cruxeval, mode, out, data, workers, fmt)
        return
    from steptrace.scoring import ScoreOptions, score_predictions
    options = ScoreOptions(models=models, labels=labels, ks=ks, type_strict=type_strict,
                           float_tolerance=float_tolerance, workers=workers,
                           limits=Limits(timeout_s=timeout))
    summary = score_predictions(db, tasks_path, options)
    if fmt == "json":
        click.echo(json.dumps(summary.as_dict(), indent=2, ensure_ascii=False))
        return
    wanted = "kind" if fmt == "csv" and table == "all" else table
    tables = [t for t in summary.tables() if wanted == "all" or t[0] == SCORE_TABLES[wanted]]
    click.echo("\n\n".join(render(columns, rows, fmt, title=f"steptrace score: {title}")
                            for title, columns, rows in tables))
    click.echo(f"{len(summary.verdicts)} predictions scored, {summary.errors} failed requests "
               f"left out, {summary.input_checks} input checks run in the sandbox", err=True)
    if summary.stale:
        click.echo(f"{summary.stale} verdicts not stored: their predictions were made again "
                   "while scoring (score again)", err=True)


def _score_cruxeval(generations_path: Path, mode: str, out: Path | None, data: Path,
                    workers: int | None, fmt: str) -> None:
    from steptrace.scoring._cruxeval import (check_mode, load_generations, score_cruxeval,
                                         write_official)
    check_mode(mode)  # a wrong mode or output directory fails before any check runs
    if out is not None and not out.parent.is_dir():
        raise ValueError(f"cannot write {out}: no directory {out.parent}")
    generations = load_generations(generations_path)
    with _progress_bar("checks") as progress:
        result = score_cruxeval(generations, mode, data, workers=workers,
                                progress=_progress_callback(progress, "checks"))
    if out is not None:
        write_official(result, out)
    if fmt == "json":
        click.echo(json.dumps({**result.summary(), "out": None if out is None else str(out)},
                              indent=2))
    else:
        click.echo(render(["item", "value"], result.rows(exact=fmt == "csv"), fmt,
                          title="steptrace score --cruxeval"))


def _range_option(ctx, param, value: str | None):
    """``MIN:MAX`` (a side may be empty) → steptrace.benchmark._filters.Range."""
    from steptrace.benchmark._filters import parse_range
    try:
        return None if value is None else parse_range(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@main.command("filter")
@db_option
@click.option("--rule", "rules", multiple=True, metavar="NAME",
              help="Apply only these rules (repeatable): a rule name or a group (all, default, "
                   "static, dynamic, determinism). Default: every rule.")
@click.option("--no-rule", "without", multiple=True, metavar="NAME",
              help="Switch a rule or group off (repeatable).")
@click.option("--where", help="Extra rule: a SQL condition over runs, e.g. "
                              "\"line_steps BETWEEN 5 AND 100\" (read-only).")
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


@main.command("query")
@click.argument("name", required=False)
@click.option("--list", "list_queries", is_flag=True, help="List the named queries.")
@db_option
@click.option("--parquet", type=click.Path(file_okay=False, path_type=Path),
              help="Query a Parquet export (steptrace export) instead of --db.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A parameter of the query (repeatable); see --list.")
@format_option
def query_command(name: str | None, list_queries: bool, db: str, parquet: Path | None,
                  params: tuple[str, ...], fmt: str) -> None:
    """Run the named query NAME (queries/NAME.sql), or --list them."""
    if list_queries == (name is not None):
        raise click.UsageError("give a query NAME or --list (not both)")
    if list_queries:
        click.echo(render(*list_rows(), fmt))
        return
    result = run_query(name, db=db, parquet=parquet, params=parse_assignments(params))
    click.echo(render(result.columns, result.rows, fmt))


@main.command("export")
@db_option
@click.option("--parquet", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write (must be empty, or use --force).")
@click.option("--runs-per-bucket", type=click.IntRange(min=1), default=DEFAULT_RUNS_PER_BUCKET,
              show_default=True, help="Consecutive run ids per Parquet partition.")
@click.option("--force", is_flag=True, help="Replace an export already in the directory.")
@format_option
def export_command(db: str, parquet: Path, runs_per_bucket: int, force: bool, fmt: str) -> None:
    """Write every table of the store as Hive-partitioned Parquet (by run_id bucket)."""
    summary = export_parquet(db, parquet, force=force, runs_per_bucket=runs_per_bucket)
    click.echo(render(["table", "rows", "files", "partition_by"], summary.as_rows(), fmt,
                      title=f"steptrace export -> {summary.directory}"))


def request_options(temperature: float):
    """The options of a run of requests to an OpenAI-compatible server (predict, generate)."""
    options = [
        click.option("--model", required=True, help="Model name, as the server knows it."),
        click.option("--base-url", default=None,
                     help="Root of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1 "
                          "[default: $OPENAI_BASE_URL, else OpenAI's API, as the openai "
                          "client does]."),
        click.option("--api-key-env", metavar="VAR", default=None,
                     help=f"Environment variable holding the API key [default: "
                          f"{DEFAULT_API_KEY_ENV}]; when it is unset a placeholder key is sent "
                          "(local servers need none)."),
        click.option("--temperature", type=click.FloatRange(min=0), default=temperature,
                     show_default=True, help="Sampling temperature."),
        click.option("--max-tokens", type=click.IntRange(min=1),
                     default=PredictOptions.max_tokens, show_default=True,
                     help="Completion tokens per response."),
        click.option("--top-p", type=click.FloatRange(min=0, max=1, min_open=True),
                     default=None, help="Nucleus sampling [default: not sent, the server's]."),
        click.option("--concurrency", type=click.IntRange(min=1),
                     default=PredictOptions.concurrency, show_default=True,
                     help="Requests in flight at once."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True),
                     default=PredictOptions.timeout_s, show_default=True,
                     help="Seconds per request attempt."),
        click.option("--max-retries", type=click.IntRange(min=0),
                     default=PredictOptions.max_retries, show_default=True,
                     help="Retries of a request after a 429, a 5xx, a timeout or a dropped "
                          "connection (the client backs off and honours Retry-After)."),
    ]

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command
    return apply


def request_settings(model: str, base_url: str | None, api_key_env: str | None,
                     temperature: float, max_tokens: int, top_p: float | None,
                     concurrency: int, timeout: float, max_retries: int,
                     **experiment) -> PredictOptions:
    """PredictOptions from the request options (and predict's samples, label, system
    prompt and redo), warning when the named key is unset."""
    if api_key_env is not None and resolve_api_key(api_key_env) is None:
        click.echo(f"warning: ${api_key_env} is not set; sending a placeholder API key", err=True)
    return PredictOptions(model=model, base_url=base_url,
                          api_key_env=api_key_env or DEFAULT_API_KEY_ENV,
                          temperature=temperature, max_tokens=max_tokens, top_p=top_p,
                          concurrency=concurrency, timeout_s=timeout, max_retries=max_retries,
                          **experiment)


def _echo_summary(summary, fmt: str, title: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        click.echo(render(["item", "value"], summary.as_rows(), fmt, title=title))


@main.command("predict")
@click.option("--tasks", "tasks_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Tasks JSONL, as written by `steptrace tasks`.")
@request_options(temperature=PredictOptions.temperature)
@click.option("--samples", type=click.IntRange(min=1), default=PredictOptions.samples,
              show_default=True, help="Samples per task (one request each).")
@click.option("--system-prompt", default=None,
              help="A system message sent before each task's prompt [default: none].")
@click.option("--label", default=None,
              help="Name of this experiment of the model [default: spelled from the "
                   "settings, e.g. direct-t0.0-m2048]; one label, one set of settings.")
@click.option("--redo", is_flag=True,
              help="Delete this experiment's stored predictions (and scores) of these "
                   "tasks, then ask again.")
@db_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def predict_command(tasks_path: Path, samples: int, system_prompt: str | None,
                    label: str | None, redo: bool, db: str, quiet: bool, fmt: str,
                    **request) -> None:
    """Ask a model every task (one request per task and sample) and store its responses
    and their parsed answers in the predictions table, under the experiment's label
    (the settings are recorded in the experiments table). A re-run of the same
    experiment asks only for what is not stored yet, or ended in an error; another
    prompt style, system prompt or sampling setting is another experiment."""
    options = request_settings(samples=samples, system_prompt=system_prompt, label=label,
                               redo=redo, **request)
    require_store(db)
    with _progress_bar("predict", quiet) as progress:
        summary = predict(tasks_path, db, options, progress=_progress_callback(progress, "requests"))
    _echo_summary(summary, fmt, "steptrace predict")


GENERATE_TEMPERATURE = 0.8  # candidates should differ from one another


@main.command("generate")
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


@main.command("dedupe")
@click.argument("records", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="JSONL of the records of the functions kept.")
@format_option
def dedupe_command(records: Path, out: Path, fmt: str) -> None:
    """Drop functions that duplicate an earlier one, exactly or after renaming identifiers
    and replacing literals (RECORDS: e.g. the output of `steptrace filter --out`)."""
    from steptrace.benchmark._dedupe import dedupe_file
    report = dedupe_file(records, out)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    click.echo(render(["stage", "functions", "records"], report.as_rows(), fmt,
                      title=f"steptrace dedupe -> {out}"))


@main.command("select")
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


@main.command("tasks")
@db_option
@click.option("--kinds", default="all", show_default=True, metavar="KIND,...",
              help=f"Task kinds, comma-separated: all, or any of {', '.join(TASK_KINDS)}.")
@click.option("--per-run", type=click.IntRange(min=1), default=3, show_default=True,
              help="At most this many tasks of each kind per run.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the question selection (per run and kind).")
@click.option("--prompt", "prompt_style", type=click.Choice(PROMPT_STYLES), default="direct",
              show_default=True, help="Prompt templates: direct, cot (chain of thought) or "
                                      "cruxeval (output and input only).")
@click.option("--template-dir", type=click.Path(path_type=Path),
              help="Directory of your own <kind>.<style>.txt templates (missing files: "
                   "the bundled ones).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the tasks as JSONL here and as Parquet next to it (.parquet).")
@click.option("--max-trace-lines", type=click.IntRange(min=1), default=200, show_default=True,
              help="No trace task for runs with more line steps than this.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes for the analysis run that branch tasks need.")
@format_option
def tasks_command(db: str, kinds: str, per_run: int, seed: int, prompt_style: str,
                  template_dir: Path | None, out: Path | None, max_trace_lines: int,
                  workers: int | None, fmt: str) -> None:
    """Generate prediction tasks with exact answers from the stored traces, store them in
    the tasks table, and print how many there are of each kind."""
    from steptrace.tasks import TaskOptions, generate_tasks, parse_kinds
    options = TaskOptions(kinds=parse_kinds(kinds), per_run=per_run, seed=seed,
                          prompt_style=prompt_style, template_dir=template_dir, out=out,
                          max_trace_lines=max_trace_lines, workers=workers)
    summary = generate_tasks(db, options)
    click.echo(render(["kind", "tasks", "runs"], summary.rows(), fmt, title="steptrace tasks"))
    click.echo(summary.timing_text(), err=True)


@main.command()
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
        raise ValueError(f"cannot write {out}: no directory {out.parent}")
    summary = write_synth(out, count, seed)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace synth"))


@main.command()
@db_option
@click.option("--chunk-runs", type=click.IntRange(min=1), default=250_000, show_default=True,
              help="Runs whose steps are held in memory at once.")
@format_option
def features(db: str, chunk_runs: int, fmt: str) -> None:
    """Compute per-run trace features into the run_features table (replaced each time)."""
    from steptrace.analytics._features import run_features  # numba and polars load only here
    summary = run_features(db, chunk_runs=chunk_runs)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace features"))


@main.command("report")
@db_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="HTML file to write (one self-contained page).")
@format_option
def report_command(db: str, out: Path, fmt: str) -> None:
    """Write an HTML page of plots over the store (statuses, step distributions, tasks,
    accuracy by kind, difficulty and standard-library method) with the tables behind them."""
    from steptrace.analytics._report import write_report  # matplotlib loads only here
    summary = write_report(db, out)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace report"))


@main.command("size-check")
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
