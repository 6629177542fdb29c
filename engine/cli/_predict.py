"""The command of pipeline step 6: predict (ask a model every task, store its answers).

Module-level imports are click and light modules only (see _common.py): the request
options' defaults come from steptrace.predictions._options; DuckDB and openai load when
the command runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from steptrace.cli._common import (_echo_summary, _progress_bar, _progress_callback, db_option,
                                   format_option, request_options, request_settings)
from steptrace.predictions._options import PredictOptions

@click.command("predict")
@click.option("--tasks", "tasks_path", required=True,
              type=click.Path(path_type=Path),
              help="Tasks JSONL, as written by `steptrace tasks` (or its Parquet file, or a "
                   "Hugging Face dataset of tasks saved with save_to_disk).")
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
@click.option("--max-requests", type=click.IntRange(min=1), default=None,
              help="A request budget: ask at most this many (task, sample) pairs in this run "
                   "(the first not stored); run again for the rest [default: all].")
@db_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@format_option
def predict_command(tasks_path: Path, samples: int, system_prompt: str | None,
                    label: str | None, redo: bool, max_requests: int | None, db: str,
                    quiet: bool, fmt: str, **request) -> None:
    """Ask a model every task (one request per task and sample) and store its responses
    and their parsed answers in the predictions table, under the experiment's label
    (the settings are recorded in the experiments table). A re-run of the same
    experiment asks only for what is not stored yet, or ended in an error; another
    prompt style, system prompt or sampling setting is another experiment."""
    from steptrace import _api as api
    from steptrace.store._store import require_store
    options = request_settings(samples=samples, system_prompt=system_prompt, label=label,
                               redo=redo, max_requests=max_requests, **request)
    require_store(db)
    with _progress_bar("predict", quiet) as progress:
        summary = api.predict(tasks_path, db, options=options,
                              progress=_progress_callback(progress, "requests"))
    _echo_summary(summary, fmt, "steptrace predict")
