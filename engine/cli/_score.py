"""The commands of pipeline step 7, scoring: score (the stored predictions of tasks) and
score-cruxeval (generations in CRUXEval's official format, as its harness scores them).

``score --cruxeval GENERATIONS --mode ...`` is score-cruxeval's old spelling, kept working
(hidden, with a notice) so that scripts written for it still run.

Module-level imports are click and light modules only (see _common.py): the sandbox and
DuckDB load when a command runs.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import click

from steptrace.errors import InputError

from steptrace.cli._common import _progress_bar, _progress_callback, db_option, format_option
from steptrace.cli._render import render

# Where the CRUXEval data is in this project's checkouts (as steptrace.scoring._cruxeval's
# DEFAULT_DATA; that module loads the sandbox, so it is not imported for a default).
CRUXEVAL_DATA = Path("../shared/data/cruxeval/cruxeval.jsonl")
workers_option = click.option(
    "--workers", type=click.IntRange(min=0), default=None,
    help="Worker processes (default: one per CPU; 0 = in this process, with no watchdog for "
         "jobs blocked in a sleep or wait).")

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
              help="Only this model (repeatable; default: every model).")
@click.option("--label", "labels", multiple=True, metavar="LABEL",
              help="Only the experiments of this label (repeatable; default: every "
                   "experiment of the models).")
@click.option("--k", "ks", default="1,5", show_default=True, callback=_ks, metavar="K,...",
              help="The k of pass@k (tasks with fewer samples are left out of it).")
@click.option("--type-strict", is_flag=True,
              help="Values must also have the same types (1 != 1.0 != True).")
@click.option("--float-tolerance", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Floats equal within this relative and absolute tolerance.")
@click.option("--table", "table", type=click.Choice(["all", *SCORE_TABLES]), default="all",
              show_default=True, help="Which table to print (csv prints one: 'all' means "
                                      "'kind' there).")
@click.option("--cruxeval", "cruxeval", type=click.Path(dir_okay=False, path_type=Path),
              hidden=True, help="Deprecated: use score-cruxeval GENERATIONS.")
@click.option("--mode", hidden=True, help="Deprecated: score-cruxeval's --mode.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), hidden=True,
              help="Deprecated: score-cruxeval's --out.")
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path), default=CRUXEVAL_DATA,
              hidden=True, help="Deprecated: score-cruxeval's --data.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=3.0,
              show_default=True, help="Seconds per sandboxed check (input tasks).")
@workers_option
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

    CRUXEval generations in the official format: see score-cruxeval (`score --cruxeval`
    still runs it, deprecated)."""
    sources = {"--tasks": tasks_path, "--cruxeval": cruxeval}
    given = [name for name, value in sources.items() if value is not None]
    if len(given) != 1:
        raise click.UsageError(f"give one of {', '.join(sources)}")
    if cruxeval is not None:
        if mode is None:
            raise click.UsageError("--cruxeval needs --mode input or --mode output")
        _score_cruxeval(cruxeval, mode, out, data, workers, fmt,
                        title="steptrace score --cruxeval")
        # After the result, not before: an error stays the one line it is everywhere.
        click.echo("warning: `steptrace score --cruxeval GENERATIONS` is deprecated; use "
                   "`steptrace score-cruxeval GENERATIONS`", err=True)
        return
    from steptrace import _api as api
    summary = api.score(db, tasks_path, models=models, labels=labels, ks=ks,
                        type_strict=type_strict, float_tolerance=float_tolerance,
                        workers=workers, timeout_s=timeout)
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


@click.command("score-cruxeval")
@click.argument("generations", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--mode", required=True, metavar="[input|output]",
              help="Which task the generations answer.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the official scored file (raw_generations, raw_scored_generations, "
                   "pass_at_1, pass_at_5) here.")
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path),
              default=CRUXEVAL_DATA, show_default=True,
              help="The CRUXEval JSONL (relative to the current directory).")
@click.option("--no-loop-detection", "no_loop_detection", is_flag=True,
              help="Run checks that provably loop forever to the time limit (status "
                   "timeout) instead of ending them as loops: the same pass@k, slower.")
@workers_option
@format_option
def score_cruxeval_command(generations: Path, mode: str, out: Path | None, data: Path,
                           no_loop_detection: bool, workers: int | None, fmt: str) -> None:
    """Score CRUXEval generations as the official harness does: pass@1 and pass@5.

    GENERATIONS is a JSON file in the official format (an object sample_i -> list of
    generated strings). Every check runs in a fresh sandbox instance, with the official
    3 s limit."""
    _score_cruxeval(generations, mode, out, data, workers, fmt, title="steptrace score-cruxeval",
                    loop_detection=not no_loop_detection)


def _score_cruxeval(generations_path: Path, mode: str, out: Path | None, data: Path,
                    workers: int | None, fmt: str, title: str,
                    loop_detection: bool = True) -> None:
    """score-cruxeval, and the deprecated ``score --cruxeval``: check, score, print."""
    from steptrace.scoring._cruxeval import (check_mode, load_generations, score_cruxeval,
                                         write_official)
    check_mode(mode)  # a wrong mode or output directory fails before any check runs
    if out is not None and not out.parent.is_dir():
        raise InputError(f"cannot write {out}: no directory {out.parent}")
    generations = load_generations(generations_path)
    with _progress_bar("checks") as progress:
        result = score_cruxeval(generations, mode, data, workers=workers,
                                progress=_progress_callback(progress, "checks"),
                                loop_detection=loop_detection)
    if out is not None:
        write_official(result, out)
    if fmt == "json":
        click.echo(json.dumps({**result.summary(), "out": None if out is None else str(out)},
                              indent=2))
    else:
        click.echo(render(["item", "value"], result.rows(exact=fmt == "csv"), fmt,
                          title=title))


@click.command("reward-server")
@db_option
@click.option("--port", type=click.IntRange(min=0, max=65535), required=True,
              help="TCP port to listen on (0: any free port, printed at start).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (the service has no authentication: keep it local "
                   "or behind a proxy).")
@workers_option
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=3.0,
              show_default=True, help="Seconds per sandboxed check (input answers, code "
                                      "checks).")
@click.option("--memory-mb", type=click.IntRange(min=1), default=512, show_default=True,
              help="Linear memory of each sandboxed check (MiB).")
@click.option("--max-items", type=click.IntRange(min=1), default=1_000, show_default=True,
              help="Items in one request at most.")
@click.option("--max-text-chars", type=click.IntRange(min=1), default=100_000,
              show_default=True, help="Characters in one text field of an item at most.")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=16 * 1024 * 1024,
              show_default=True, help="Bytes in one request body at most.")
@click.option("--type-strict", is_flag=True,
              help="Values must also have the same types (1 != 1.0 != True), as score's.")
@click.option("--float-tolerance", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Floats equal within this relative and absolute tolerance, as score's.")
def reward_server_command(db: str, port: int, host: str, workers: int | None, timeout: float,
                          memory_mb: int, max_items: int, max_text_chars: int,
                          max_body_bytes: int, type_strict: bool, float_tolerance: float
                          ) -> None:
    """Serve rewards over HTTP: judge answers to the store's tasks as score does.

    POST /v1/judge {"items": [{"task_id": ..., "answer": ...}, {"code": ..., "input":
    ..., "expected_output": ...}]} answers {"results": [{"correct", "status", "detail",
    "kind"}]}; input answers and code checks run in the sandbox, on a pool of workers
    shared by every request. See docs/guides/reward-server.md."""
    from steptrace.sandbox._limits import Limits
    from steptrace.scoring._reward import RewardJudge, RewardLimits
    from steptrace.scoring._reward_server import serve_rewards
    from steptrace.scoring._verdicts import ScoreOptions
    if workers == 0:
        raise click.BadParameter("the reward server runs its checks in worker processes: "
                                 "give at least 1", param_hint="--workers")
    limits = RewardLimits(max_items=max_items, max_text_chars=max_text_chars,
                          max_body_bytes=max_body_bytes,
                          sandbox=Limits(timeout_s=timeout, memory_mb=memory_mb))
    options = ScoreOptions(type_strict=type_strict, float_tolerance=float_tolerance)
    with RewardJudge(db, workers=workers, limits=limits, options=options) as judge:
        try:
            server = serve_rewards(judge, host, port)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        with server:
            click.echo(f"steptrace reward server on {server.url} ({judge.slots.workers} "
                       f"sandbox workers, store {db}); Ctrl-C or SIGTERM stops it", err=True)
            previous = signal.signal(signal.SIGTERM, _interrupt)  # stop as Ctrl-C does
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                pass
            finally:
                signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
