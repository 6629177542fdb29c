"""The commands of pipeline step 7, scoring: score (stored predictions of tasks).

Module-level imports are click and light modules only (see _common.py): the sandbox and
DuckDB load when a command runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from steptrace.cli._common import _progress_bar, _progress_callback, db_option, format_option
from steptrace.cli._render import render
from steptrace.sandbox._limits import Limits

SCORE_TABLES = {"kind": "by kind", "difficulty": "by difficulty",
                "consistency": "incremental consistency", "comparison": "paired comparison"}


def _ks(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """``--k``: a comma-separated list of whole numbers >= 1."""
    try:
        ks = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a list of whole numbers, e.g. 1,5") from None
    if not ks or min(ks) < 1:
        raise click.BadParameter("every k must be >= 1")
    return ks


@click.command()
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
    from steptrace.scoring._score import ScoreOptions, score_predictions
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
