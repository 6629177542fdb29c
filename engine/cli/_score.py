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
from typing import Callable

import click

from steptrace.errors import InputError

from steptrace.cli._common import (_progress_bar, _progress_callback, db_option, format_option,
                                   where_option)
from steptrace.cli._render import render

# Where the CRUXEval data is in this project's checkouts (as steptrace.scoring._cruxeval's
# DEFAULT_DATA; that module loads the sandbox, so it is not imported for a default).
CRUXEVAL_DATA = Path("../shared/data/cruxeval/cruxeval.jsonl")
workers_option = click.option(
    "--workers", type=click.IntRange(min=0), default=None,
    help="Worker processes (default: one per CPU; 0 = in this process, with no watchdog for "
         "jobs blocked in a sleep or wait).")

quiet_option = click.option("--quiet", is_flag=True, help="No progress bar.")

SCORE_TABLES = {"summary": "summary", "kind": "by kind", "difficulty": "by difficulty",
                "coverage": "coverage",
                "consistency": "incremental consistency",
                "correlation": "input output correlation", "comparison": "paired comparison",
                "error": "error parts"}


# Why a table asked for by name has no rows.
EMPTY_REASONS = {
    "coverage": "no coverage tasks scored",
    "incremental consistency": "no question chains scored (make tasks with --chains)",
    "input output correlation": "fewer than two runs with both input and output tasks scored",
    "paired comparison": "fewer than two experiments with shared tasks",
    "error parts": "no error tasks scored"}


def _when_checks_run(progress) -> Callable[[int, int], None]:
    """The bar's ``progress(done, total)``, whose bar appears at its first call: none is
    drawn when every check's verdict was stored (engine/scoring/_checks.py)."""
    update: list[Callable[[int, int], None]] = []

    def first_call_draws(done: int, total: int) -> None:
        if not update:
            update.append(_progress_callback(progress, "checks"))
        update[0](done, total)
    return first_call_draws


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
@click.option("--tasks", "tasks_path", type=click.Path(path_type=Path),
              help="Score the stored predictions of these tasks (JSONL from steptrace tasks, "
                   "its Parquet file, or a dataset of tasks saved with save_to_disk).")
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
@click.option("--table", "table", type=click.Choice(["all", *SCORE_TABLES]),
              default="summary", show_default=True,
              help="Which table to print: summary (pass@k with its interval per experiment "
                   "and kind), one of the others, or all (every table that has rows; csv "
                   "prints one: 'all' means 'kind' there).")
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
@quiet_option
@where_option
@format_option
def score(tasks_path: Path | None, db: str, models: tuple[str, ...], labels: tuple[str, ...],
          ks: tuple[int, ...],
          type_strict: bool, float_tolerance: float, table: str, cruxeval: Path | None,
          mode: str | None, out: Path | None, data: Path, timeout: float,
          workers: int | None, quiet: bool, where: str | None, fmt: str) -> None:
    """Score predictions, every check in the sandbox (a fresh instance per candidate).

    --tasks TASKS.jsonl: judge the stored predictions of these tasks, store the verdicts
    in the scores table and print one summary table: pass@k with its interval per
    experiment (model and label) and kind. A kind whose every task has one answer (e.g.
    CRUXEval's exception tasks, all "none") is trivial: listed after all and left out of
    it. --table prints another table instead (or all of them): by kind in full, by
    difficulty, coverage precision/recall/F1, REval's incremental consistency, the
    input-output correlation, paired comparisons of every two experiments, and error
    tasks' type and message scored apart (EXE); a table without rows is a line saying
    why. Shares are fractions; intervals are ci_low and ci_high. Each input check's
    verdict is kept in the store (the checks table): scoring again runs only the checks
    not judged yet.

    CRUXEval generations in the official format: see score-cruxeval (`score --cruxeval`
    still runs it, deprecated)."""
    sources = {"--tasks": tasks_path, "--cruxeval": cruxeval}
    given = [name for name, value in sources.items() if value is not None]
    if len(given) != 1:
        raise click.UsageError(f"give one of {', '.join(sources)}")
    if cruxeval is not None:
        if where is not None:
            raise click.UsageError("--where goes with --tasks (a store's runs)")
        if mode is None:
            raise click.UsageError("--cruxeval needs --mode input or --mode output")
        source = click.get_current_context().get_parameter_source("db")
        given = source is not None and source.name != "DEFAULT"
        _score_cruxeval(cruxeval, mode, out, data, workers, fmt,
                        title="steptrace score --cruxeval", quiet=quiet,
                        store=Path(db) if given else None)
        # After the result, not before: an error stays the one line it is everywhere.
        click.echo("warning: `steptrace score --cruxeval GENERATIONS` is deprecated; use "
                   "`steptrace score-cruxeval GENERATIONS`", err=True)
        return
    from steptrace import _api as api
    with _progress_bar("input checks", quiet) as progress:
        summary = api.score(db, tasks_path, models=models, labels=labels, ks=ks,
                            type_strict=type_strict, float_tolerance=float_tolerance,
                            workers=workers, timeout_s=timeout, where=where,
                            progress=_when_checks_run(progress))
    if fmt == "json":
        click.echo(json.dumps(summary.as_dict(), indent=2, ensure_ascii=False))
        return
    wanted = "kind" if fmt == "csv" and table == "all" else table
    if wanted == "summary":
        tables = [("summary", *summary.summary())]
    else:
        tables = [t for t in summary.tables() if wanted == "all" or t[0] == SCORE_TABLES[wanted]]
    shown = [t for t in tables if t[2]]  # no empty table: a line says why instead
    if shown:
        click.echo("\n\n".join(render(columns, rows, fmt, title=f"steptrace score: {title}")
                                for title, columns, rows in shown))
    for title, _, rows in tables:
        if not rows and wanted != "all":
            click.echo(f"no {title} rows: {EMPTY_REASONS.get(title, 'nothing scored for it')}",
                       err=True)
    click.echo(f"{len(summary.verdicts)} predictions scored, {summary.errors} failed requests "
               f"left out, {summary.input_checks} input checks run in the sandbox, "
               f"{summary.input_checks_reused} judged before (read from the store)", err=True)
    if summary.stale:
        click.echo(f"{summary.stale} verdicts not stored: their predictions were made again "
                   "while scoring (score again)", err=True)
    trivial = summary.trivial_kinds
    if trivial and fmt == "table" and wanted in ("summary", "kind", "all"):
        click.echo("trivial kinds (every task has one answer; listed after all, left out of "
                   "it): " + ", ".join(f"{kind} ({answer!r})" for kind, answer in trivial.items()),
                   err=True)


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
@click.option("--db", "store", type=click.Path(path_type=Path), default=None,
              help="Keep each check's verdict in this store (the checks table; created if "
                   "missing) and reuse those it holds: scoring again runs only new checks. "
                   "Default: no store, every check runs.")
@click.option("--other-mode", "other_mode", type=click.Path(dir_okay=False, path_type=Path),
              help="An official scored file (--out) of the same samples in the other mode: "
                   "adds the input-output difficulty correlation.")
@click.option("--no-loop-detection", "no_loop_detection", is_flag=True,
              help="Run checks that provably loop forever to the time limit (status "
                   "timeout) instead of ending them as loops: the same pass@k, slower.")
@workers_option
@quiet_option
@format_option
def score_cruxeval_command(generations: Path, mode: str, out: Path | None, data: Path,
                           store: Path | None, other_mode: Path | None,
                           no_loop_detection: bool, workers: int | None, quiet: bool,
                           fmt: str) -> None:
    """Score CRUXEval generations as the official harness does: pass@1 and pass@5.

    GENERATIONS is a JSON file in the official format (an object sample_i -> list of
    generated strings). Every check runs in a fresh sandbox instance, with the official
    3 s limit. Also prints CRUXEval's analyses as fractions with 95% bootstrap intervals
    (ci_low, ci_high): pass@1, pass@5, the share of samples fully solved and unsolved,
    distinct generations per sample, and with --other-mode the input-output correlation."""
    _score_cruxeval(generations, mode, out, data, workers, fmt, title="steptrace score-cruxeval",
                    other_mode=other_mode, quiet=quiet, store=store,
                    loop_detection=not no_loop_detection)


def _score_cruxeval(generations_path: Path, mode: str, out: Path | None, data: Path,
                    workers: int | None, fmt: str, title: str,
                    other_mode: Path | None = None, quiet: bool = False,
                    store: Path | None = None, loop_detection: bool = True) -> None:
    """score-cruxeval, and the deprecated ``score --cruxeval``: check, score, print."""
    from steptrace.scoring._analyses import load_scored
    from steptrace.scoring._cruxeval import (check_mode, load_generations, score_cruxeval,
                                         write_official)
    check_mode(mode)  # a wrong mode or output directory fails before any check runs
    if out is not None and not out.parent.is_dir():
        raise InputError(f"cannot write {out}: no directory {out.parent}")
    other = None if other_mode is None else load_scored(other_mode)
    generations = load_generations(generations_path)
    with _progress_bar("checks", quiet) as progress:
        result = score_cruxeval(generations, mode, data, workers=workers,
                                progress=_when_checks_run(progress), store=store,
                                loop_detection=loop_detection)
    if out is not None:
        write_official(result, out)
    measures = _cruxeval_measures(result, other)
    if fmt == "json":
        click.echo(json.dumps({**result.summary(), "out": None if out is None else str(out),
                               "analyses": [m.as_dict() for m in measures]}, indent=2))
    else:
        from steptrace.scoring._analyses import measure_rows
        click.echo(render(["item", "value"], result.rows(exact=fmt == "csv")
                          + measure_rows(measures), fmt, title=title))


def _cruxeval_measures(result, other: dict | None) -> list:
    """CRUXEval's analyses of a scoring (steptrace.scoring._analyses), with the
    input-output correlation when the other mode's scored file is given."""
    from steptrace.scoring._analyses import difficulty_correlation, generation_analyses
    scored = {s.sample_id: list(s.results) for s in result.samples}
    passed = {s.sample_id: [o == "ok" for o in s.outcomes] for s in result.samples}
    measures = generation_analyses(scored, result.raw_generations, passed)
    if other is not None:
        pair = (scored, other) if result.mode == "input" else (other, scored)
        measures.append(difficulty_correlation(*pair))
    return measures


@click.command("export-generations")
@db_option
@click.option("--model", required=True, help="The model whose predictions to export.")
@click.option("--label", default=None, metavar="LABEL",
              help="The experiment's label (default: the model's only one).")
@click.option("--mode", required=True, type=click.Choice(["input", "output"]),
              help="Which tasks' predictions: input (written as whole calls, f(...)) or "
                   "output (the literals).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The generations file to write (JSON: sample id -> list of strings).")
@format_option
def export_generations_command(db: str, model: str, label: str | None, mode: str, out: Path,
                               fmt: str) -> None:
    """Write a model's input or output predictions as CRUXEval generations.

    The official harness's input format (and score-cruxeval's): a JSON object sample id ->
    list of generated strings, one per sample of the prediction's task, by sample index.
    Unparseable answers are written as empty strings; failed requests are left out."""
    from steptrace.cli._common import _echo_summary
    from steptrace.scoring._generations import export_generations
    summary = export_generations(db, out, model, mode, label)
    _echo_summary(summary, fmt, title=f"steptrace export-generations -> {out}")


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
@click.option("--max-client-checks", type=click.IntRange(min=1), default=1_000,
              show_default=True, help="Sandboxed checks of one client (IP address) queued or "
                                      "running at once; a request over it is 429.")
@click.option("--max-client-requests", type=click.IntRange(min=1), default=8,
              show_default=True, help="Requests of one client (IP address) read or judged at "
                                      "once; more are 429.")
@click.option("--type-strict", is_flag=True,
              help="Values must also have the same types (1 != 1.0 != True), as score's.")
@click.option("--float-tolerance", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Floats equal within this relative and absolute tolerance, as score's.")
def reward_server_command(db: str, port: int, host: str, workers: int | None, timeout: float,
                          memory_mb: int, max_items: int, max_text_chars: int,
                          max_body_bytes: int, max_client_checks: int,
                          max_client_requests: int, type_strict: bool, float_tolerance: float
                          ) -> None:
    """Serve rewards over HTTP: judge answers to the store's tasks as score does.

    POST /v1/judge {"items": [{"task_id": ..., "answer": ...}, {"code": ..., "input":
    ..., "expected_output": ...}]} answers {"results": [{"correct", "status", "detail",
    "kind"}]}; input answers and code checks run in the sandbox, each in a fresh
    instance, on a pool of workers shared by every request, taken round-robin across
    clients and their requests. See docs/guides/reward-server.md."""
    from steptrace.sandbox._limits import Limits
    from steptrace.scoring._reward import RewardJudge, RewardLimits
    from steptrace.scoring._reward_server import serve_rewards
    from steptrace.scoring._verdicts import ScoreOptions
    if workers == 0:
        raise click.BadParameter("the reward server runs its checks in worker processes: "
                                 "give at least 1", param_hint="--workers")
    limits = RewardLimits(max_items=max_items, max_text_chars=max_text_chars,
                          max_body_bytes=max_body_bytes, max_client_checks=max_client_checks,
                          max_client_requests=max_client_requests,
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
