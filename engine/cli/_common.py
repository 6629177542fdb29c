"""What the commands share: the --db and --format options, the progress bar, the printing
of a summary, and the options of a run of requests to a model (predict, generate).

``steptrace --help`` imports every command module, and each imports this one: so none of
them imports at its top more than click and light modules (the option defaults come from
modules that import nothing heavy, e.g. steptrace.store._defaults). DuckDB, pyarrow,
polars, numba, matplotlib, openai, wasmtime and rich are imported inside the commands that
use them (tests/cli/test_cli_startup.py checks it; bench/startup.py times it).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Callable

import click

from steptrace.cli._render import FORMATS, render
from steptrace.predictions._options import DEFAULT_API_KEY_ENV, ENDPOINTS, PredictOptions
from steptrace.store._defaults import DEFAULT_DB

if TYPE_CHECKING:
    from rich.progress import Progress

# Not click.Path(dir_okay=False): steptrace.store._store.connect says what is wrong with a --db
# (missing, a directory, a text file, ...) in one line, where click would print usage.
# Only trace creates a store: the commands that write into one call require_store first.
db_option = click.option("--db", default=DEFAULT_DB, show_default=True,
                         type=click.Path(), help="DuckDB trace store.")
format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                             show_default=True, help="Output format.")


def _progress_bar(label: str, quiet: bool = False) -> Progress:
    """A progress bar on stderr: done/total, rate, elapsed time and ETA. None is drawn with
    --quiet or when stderr is not a terminal."""
    from rich.console import Console  # rich: only for the commands that draw a bar
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    console = Console(stderr=True)
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console, disable=quiet or not console.is_terminal)


def _progress_callback(progress: Progress, unit: str = "runs",
                       note: Callable[[], str] | None = None) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` for the library functions, driving one bar's task;
    ``note()`` is shown after the rate (a sharded trace's shards done)."""
    task = progress.add_task("", total=None, rate="")
    started = time.perf_counter()

    def update(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started
        rate = f"{done / elapsed:.0f} {unit}/s" if done and elapsed > 0 else ""
        if note is not None:
            rate = f"{rate}  {note()}".strip()
        progress.update(task, completed=done, total=total, rate=rate)
    return update


def request_options(temperature: float) -> Callable[[Callable], Callable]:
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
        click.option("--endpoint", type=click.Choice(ENDPOINTS),
                     default=PredictOptions.endpoint, show_default=True,
                     help="chat: /v1/chat/completions (the prompt as the user's message); "
                          "completions: /v1/completions (the prompt continued as it is: "
                          "base models, CRUXEval's protocol)."),
        click.option("--stop", "stop", multiple=True, metavar="TEXT",
                     help="A stop sequence (repeatable; \\n in it is a newline): the server "
                          "ends the answer before it, e.g. --stop '[/ANSWER]'."),
        click.option("--extra-body", metavar="JSON", default=None,
                     help="More request fields, a JSON object sent as it is, e.g. "
                          "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}' "
                          "(vLLM) or '{\"reasoning_effort\": \"low\"}'."),
    ]

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command
    return apply


def request_settings(model: str, base_url: str | None, api_key_env: str | None,
                     temperature: float, max_tokens: int, top_p: float | None,
                     concurrency: int, timeout: float, max_retries: int, endpoint: str,
                     stop: tuple[str, ...], extra_body: str | None,
                     **experiment) -> PredictOptions:
    """PredictOptions from the request options (and predict's samples, label, system
    prompt and redo), warning when the named key is unset."""
    from steptrace.predictions._predict import resolve_api_key
    if api_key_env is not None and resolve_api_key(api_key_env) is None:
        click.echo(f"warning: ${api_key_env} is not set; sending a placeholder API key", err=True)
    return PredictOptions(model=model, base_url=base_url,
                          api_key_env=api_key_env or DEFAULT_API_KEY_ENV,
                          temperature=temperature, max_tokens=max_tokens, top_p=top_p,
                          concurrency=concurrency, timeout_s=timeout, max_retries=max_retries,
                          endpoint=endpoint, extra_body=extra_body,
                          stop=tuple(text.replace("\\n", "\n") for text in stop),
                          **experiment)


# Bad-record warnings printed one a line; the rest are counted in one more line (the
# summary's "corpus records skipped as bad" and --format json list them all).
MAX_WARNINGS = 20


def echo_warnings(errors: list[str]) -> None:
    """The first ``MAX_WARNINGS`` of ``errors`` as warnings on stderr, then how many more."""
    for error in errors[:MAX_WARNINGS]:
        click.echo(f"warning: {error}", err=True)
    if len(errors) > MAX_WARNINGS:
        click.echo(f"warning: ... and {len(errors) - MAX_WARNINGS} more bad records (--format "
                   "json lists them all)", err=True)


def _echo_summary(summary, fmt: str, title: str) -> None:
    """A summary with ``as_dict`` and ``as_rows`` as JSON, or as an item/value table."""
    if fmt == "json":
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        click.echo(render(["item", "value"], summary.as_rows(), fmt, title=title))


where_option = click.option(
    "--where", "where", metavar="CONDITION",
    help="Only the runs this SQL condition selects: columns of the run and its program, "
         "and meta.KEY of the corpus record's metadata, e.g. \"meta.release_date >= "
         "'2025-01-01'\" (a missing key is NULL: not selected).")
