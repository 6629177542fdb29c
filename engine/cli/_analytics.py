"""The commands of pipeline step 8, analytics: sql, query, export, features, report, view, serve.

Module-level imports are click and light modules only (see _common.py): DuckDB, polars,
numba and matplotlib load inside the command that uses them.
"""

from __future__ import annotations

from pathlib import Path

import click

from steptrace.analytics._defaults import (DATASET_CONFIG_NAMES, DEFAULT_DATASET_CONFIGS,
                                           DEFAULT_RUNS_PER_BUCKET, TRACE_EXPORT_FORMATS)
from steptrace.cli._common import db_option, format_option, where_option
from steptrace.cli._render import render
from steptrace.tasks._names import LINE_VIEWS

@click.command()
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
    from steptrace.corpus._text import read_utf8
    if (sql is None) == (sql_file is None):
        raise click.UsageError("give a query or -f FILE (not both)")
    text = read_utf8(sql_file) if sql_file else sql
    params = default_params(text, sql_file) if sql_file else {}
    result = run_sql(text, db=db, parquet=parquet, params=params)
    click.echo(render(result.columns, result.rows, fmt))


@click.command("query")
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
    from steptrace.analytics._queries import list_rows, parse_assignments, run_query
    if list_queries == (name is not None):
        raise click.UsageError("give a query NAME or --list (not both)")
    if list_queries:
        click.echo(render(*list_rows(), fmt))
        return
    result = run_query(name, db=db, parquet=parquet, params=parse_assignments(params))
    click.echo(render(result.columns, result.rows, fmt))


@click.command("export")
@db_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write (must be empty, or use --force).")
@click.option("--parquet", type=click.Path(file_okay=False, path_type=Path),
              help="Deprecated: the old name of --out (a warning says so).")
@click.option("--runs-per-bucket", type=click.IntRange(min=1), default=DEFAULT_RUNS_PER_BUCKET,
              show_default=True, help="Consecutive run ids per Parquet partition.")
@click.option("--force", is_flag=True, help="Replace an export already in the directory.")
@format_option
def export_command(db: str, out: Path | None, parquet: Path | None, runs_per_bucket: int,
                   force: bool, fmt: str) -> None:
    """Write every table of the store as Hive-partitioned Parquet (by run_id bucket) into
    the directory --out."""
    from steptrace.analytics._export import export_parquet
    if (out is None) == (parquet is None):
        raise click.UsageError("give the directory to write as --out DIR")
    if parquet is not None:
        click.echo("warning: export --parquet DIR is deprecated; use --out DIR (every "
                   "export names what it writes with --out)", err=True)
    summary = export_parquet(db, out or parquet, force=force, runs_per_bucket=runs_per_bucket)
    click.echo(render(["table", "rows", "files", "partition_by"], summary.as_rows(), fmt,
                      title=f"steptrace export -> {summary.directory}"))


@click.command("export-dataset")
@db_option
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write (must be empty, or use --force).")
@click.option("--tables", default=",".join(DEFAULT_DATASET_CONFIGS), show_default=True,
              metavar="CONFIG,...", help=f"Configs to write: {', '.join(DATASET_CONFIG_NAMES)}.")
@click.option("--name", default=None, help="The card's title [default: the store's name].")
@click.option("--force", is_flag=True, help="Replace an export already in the directory.")
@format_option
def export_dataset_command(db: str, out: Path, tables: str, name: str | None, force: bool,
                           fmt: str) -> None:
    """Write the store's corpus, tasks, predictions and scores (or runs, programs) as a
    Hugging Face dataset in the Hub's layout, with its card: one config per table, Parquet
    (datasets.load_dataset(OUT, "tasks"))."""
    from steptrace.analytics._dataset import export_dataset, parse_configs
    summary = export_dataset(db, out, parse_configs(tables), force=force, name=name)
    click.echo(render(["config", "rows"], summary.as_rows(), fmt,
                      title=f"steptrace export-dataset -> {summary.directory}"))


@click.command("export-traces")
@click.option("--trace-format", "trace_format", metavar="FORMAT",
              help=f"Trace format: {', '.join(TRACE_EXPORT_FORMATS)} (docs/guides/exports.md).")
@click.option("--format", "fmt", metavar="FORMAT", default="table", show_default=True,
              help="Output format of the summary: table, json or csv (as in every command; "
                   "a trace format here is the deprecated spelling of --trace-format).")
@db_option
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="JSONL file to write, one run a line (replaced when the export is done).")
@click.option("--statuses", default="ok,exception", show_default=True, metavar="STATUS,...",
              help="Only runs of these statuses, comma-separated (as tasks: the finished runs).")
@click.option("--max-steps", type=click.IntRange(min=0), default=None,
              help="Only runs with at most this many steps.")
@click.option("--max-trace-lines", type=click.IntRange(min=0), default=None,
              help="Only runs with at most this many line steps (as tasks).")
@click.option("--batch-runs", type=click.IntRange(min=1), default=256, show_default=True,
              help="Runs read from the store at once (memory is bounded by one batch).")
@click.option("--lines", type=click.Choice(LINE_VIEWS), default="monitoring", show_default=True,
              help="With --trace-format lines: the steps' line events (monitoring) or those "
                   "sys.settrace reports (settrace; runs without a recorded settrace view "
                   "are left out).")
def export_traces_command(trace_format: str | None, fmt: str, db: str, out: Path,
                          statuses: str, max_steps: int | None, max_trace_lines: int | None,
                          batch_runs: int, lines: str) -> None:
    """Write the stored traces as training data, one run a line in run id order
    (--trace-format): jsonl (steptrace's own record), pythontutor, cwm, scratchpad or
    lines (the line events alone)."""
    from steptrace.analytics._trace_export import export_traces
    from steptrace.cli._render import FORMATS
    if fmt in TRACE_EXPORT_FORMATS:  # the old spelling: --format was the trace format
        if trace_format is not None:
            raise click.UsageError("give the trace format once, as --trace-format")
        click.echo(f"warning: export-traces --format {fmt} is deprecated; use --trace-format "
                   f"{fmt} (--format is the summary's table, json or csv, as everywhere)",
                   err=True)
        trace_format, fmt = fmt, "table"
    elif fmt not in FORMATS:
        raise click.BadParameter(f"{fmt!r} is not one of {', '.join(FORMATS)}",
                                 param_hint="'--format'")
    if trace_format is None:
        raise click.UsageError("give the trace format: --trace-format "
                               f"{'|'.join(TRACE_EXPORT_FORMATS)}")
    summary = export_traces(db, out, trace_format,
                            statuses=[s.strip() for s in statuses.split(",") if s.strip()],
                            max_steps=max_steps, max_trace_lines=max_trace_lines,
                            batch_runs=batch_runs, lines=lines)
    if fmt == "json":
        import json
        click.echo(json.dumps(dict(summary.as_rows()), indent=2))
        return
    click.echo(render(["item", "value"], summary.as_rows(), fmt,
                      title="steptrace export-traces"))


@click.command()
@db_option
@click.option("--chunk-runs", type=click.IntRange(min=1), default=250_000, show_default=True,
              help="Runs whose steps are held in memory at once.")
@format_option
def features(db: str, chunk_runs: int, fmt: str) -> None:
    """Compute per-run trace features into the run_features table (replaced each time)."""
    from steptrace.analytics._features import run_features  # numba and polars load only here
    summary = run_features(db, chunk_runs=chunk_runs)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace features"))


@click.command("report")
@db_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="HTML file to write (one self-contained page).")
@click.option("--model", "models", multiple=True, metavar="NAME",
              help="Only this model's predictions (repeatable; default: every model).")
@click.option("--label", "labels", multiple=True, metavar="LABEL",
              help="Only the experiments of this label (repeatable; default: every one).")
@click.option("--kinds", default=None, metavar="KIND,...",
              help="Only tasks of these kinds, comma-separated (default: every kind).")
@where_option
@format_option
def report_command(db: str, out: Path, models: tuple[str, ...], labels: tuple[str, ...],
                   kinds: str | None, where: str | None, fmt: str) -> None:
    """Write an HTML page of plots over the store (statuses, step distributions, tasks,
    accuracy by kind and difficulty with 95% intervals and n, coverage precision/recall/F1,
    incremental consistency, paired comparisons, accuracy by standard-library method per
    kind) with the tables behind them, collapsed; beside it NAME-failures.html (the wrong
    answers of each experiment and kind, linked from the tables) and one
    lm-evaluation-harness results.json per experiment (NAME-results/). --model, --label,
    --kinds and --where keep part of the store, in every section."""
    from steptrace import _api as api  # matplotlib loads only in the report itself
    summary = api.report(db, out, models=models, labels=labels,
                         kinds=() if kinds is None else [k for k in kinds.split(",")],
                         where=where)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace report"))


@click.command("view")
@click.argument("run_id", required=False, type=int)
@click.option("--sample-id", help="View the newest run of this sample id instead.")
@click.option("--input-index", type=int, default=0, show_default=True,
              help="With --sample-id: which of the sample's inputs.")
@db_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="HTML file to write (one self-contained page) [default: run-ID.html].")
@format_option
def view_command(run_id: int | None, sample_id: str | None, input_index: int, db: str,
                 out: Path | None, fmt: str) -> None:
    """Write one run as an HTML page to step through: the source with the current line,
    the call stack with each frame's locals, the objects, stdout and the outcome."""
    from steptrace.analytics import write_view
    if (run_id is None) == (sample_id is None):
        raise click.UsageError("give a RUN_ID or --sample-id (not both)")
    summary = write_view(db, run_id, out, sample_id=sample_id, input_index=input_index)
    click.echo(render(["item", "value"], summary.as_rows(), fmt, title="steptrace view"))


@click.command("serve")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8000, show_default=True,
              help="Port to listen on (0: any free one).")
def serve_command(db: str, host: str, port: int) -> None:
    """Browse the runs of the store in a browser: a list filtered by status and steps,
    each run opening its `view` page; /failures: the wrong answers of each experiment and
    task kind, each linked to its trace at the step asked about. Runs until interrupted
    (Ctrl-C)."""
    from steptrace.analytics._serve import make_server
    try:
        server = make_server(db, host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    click.echo(f"steptrace serve: http://{server.server_address[0]}:{server.server_address[1]}/"
               "  (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
