"""The command of pipeline step 5: tasks (prediction questions made from the stored runs).

Module-level imports are click and light modules only (see _common.py): the kinds and
styles come from steptrace.tasks._names; polars and DuckDB load when the command runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from steptrace.cli._common import db_option, format_option, where_option
from steptrace.cli._render import render
from steptrace.sharding._defaults import ENGINES
from steptrace.tasks._names import KINDS as TASK_KINDS, LINE_VIEWS, STYLES as PROMPT_STYLES

@click.command("tasks")
@db_option
@click.option("--kinds", default="all", show_default=True, metavar="KIND,...",
              help=f"Task kinds, comma-separated: all, or any of {', '.join(TASK_KINDS)}.")
@click.option("--per-run", type=click.IntRange(min=1), default=3, show_default=True,
              help="At most this many tasks of each kind per run.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the question selection (per run and kind).")
@click.option("--chains", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also ask REval's question chains on up to this many lines per run: "
                   "coverage, state and next_line questions about one line (with the "
                   "run's output question), for score's incremental consistency.")
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
@click.option("--lines", type=click.Choice(LINE_VIEWS), default="monitoring", show_default=True,
              help="The line events of the line-sequence kinds (next_line, next_line_any, "
                   "coverage, line_count, steps, trace): the steps' (monitoring), or "
                   "sys.settrace's (settrace: a line also counts each time a loop or "
                   "comprehension written on it goes round, as most trace benchmarks "
                   "recorded them).")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes for the analysis run that branch tasks need.")
@click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
              help="For a shard directory (trace --out): make its shards' tasks here, one "
                   "after another, or on Ray, a task per shard.")
@click.option("--address", help="With --engine ray: the cluster's address (default: a "
                                "local Ray).")
@where_option
@format_option
def tasks_command(db: str, kinds: str, per_run: int, seed: int, chains: int, prompt_style: str,
                  template_dir: Path | None, out: Path | None, max_trace_lines: int,
                  lines: str, workers: int | None, engine: str, address: str | None,
                  where: str | None, fmt: str) -> None:
    """Generate prediction tasks with exact answers from the stored traces, store them in
    the tasks table, and print how many there are of each kind."""
    from steptrace import _api as api
    summary = api.make_tasks(db, kinds, per_run=per_run, seed=seed, chains=chains,
                             prompt_style=prompt_style,
                             template_dir=template_dir, out=out,
                             max_trace_lines=max_trace_lines, workers=workers,
                             engine=engine, address=address, where=where, lines=lines)
    click.echo(render(["kind", "tasks", "runs"], summary.rows(), fmt, title="steptrace tasks"))
    click.echo(summary.timing_text(), err=True)


@click.command("cruxeval-prompts")
@click.argument("repository", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=True,
                                                      file_okay=False),
              help="Directory to write output.cruxeval.txt and input.cruxeval.txt into.")
@format_option
def cruxeval_prompts_command(repository: Path, out: Path, fmt: str) -> None:
    """Turn the official CRUXEval prompts (REPOSITORY: a checkout of facebookresearch/
    cruxeval, or its prompts.py, read and never run) into templates for tasks --prompt
    cruxeval --template-dir OUT."""
    from steptrace.tasks._official import OFFICIAL_PROMPTS, write_official_templates
    written = write_official_templates(repository, out)
    rows = [(path.name, OFFICIAL_PROMPTS[path.name.split(".")[0]][0]) for path in written]
    click.echo(render(["template", "from"], rows, fmt,
                      title=f"steptrace cruxeval-prompts -> {out}"))
