"""The contamination commands: anonymise (renamed variants, checked in the sandbox) and
overlap (the n-gram overlap of a corpus with a text dump). ``dedupe --against`` is in
_benchmark.py with ``dedupe``.

Module-level imports are click and light modules only (see _common.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from steptrace.cli._common import format_option
from steptrace.cli._render import render


@click.command("anonymise")
@click.argument("corpus", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="JSONL of the renamed variants (those the check found equal).")
@click.option("--no-check", "no_check", is_flag=True,
              help="Write every variant without tracing it against the original.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes for the check (default: one per CPU; 0: this one).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=3.0,
              show_default=True, help="Seconds per traced run of the check.")
@format_option
def anonymise_command(corpus: Path, out: Path, no_check: bool, workers: int | None,
                      timeout: float, fmt: str) -> None:
    """Rename every name a program binds to a neutral one (f, f1, C1, x1, ...), trace each
    variant against its original in the sandbox, write those that run the same modulo the
    names, and list the others (CORPUS: JSONL records)."""
    from steptrace import _api as api
    report = api.anonymise(corpus, out, check=not no_check, workers=workers,
                           timeout_s=timeout)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
        return
    if fmt == "csv":
        click.echo(render(["id", "status", "detail"], report.problem_rows(), fmt))
        return
    click.echo(render(["", "records"], report.as_rows(), fmt,
                      title=f"steptrace anonymise -> {out}"))
    if report.problem_rows():
        click.echo(render(["id", "status", "detail"], report.problem_rows(), fmt,
                          title="not written"))


@click.command("overlap")
@click.argument("corpus", type=click.Path(path_type=Path))
@click.option("--dump", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The text to look in (a training-data dump), read as a stream.")
@click.option("--n", "n", type=click.IntRange(min=1), default=13, show_default=True,
              help="Tokens per n-gram (13: GPT-3's decontamination length).")
@format_option
def overlap_command(corpus: Path, dump: Path, n: int, fmt: str) -> None:
    """Per program of CORPUS, the share of its code's token n-grams found in a text dump."""
    from steptrace import _api as api
    report = api.ngram_overlap(corpus, dump, n=n)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
        return
    click.echo(render(list(report.COLUMNS), report.rows(), fmt,
                      title=f"steptrace overlap: {n}-grams of {corpus} in {dump}"))
    for error in report.corpus_errors:
        click.echo(f"skipped: {error}", err=True)
