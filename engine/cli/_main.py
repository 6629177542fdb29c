"""The ``steptrace`` command: the group, its error handling, and every command registered.

The commands live in modules by pipeline step (_trace, _tasks, _predict, _score,
_analytics, _benchmark, _contamination), each a thin click wrapper: parse the options, call one library
function, render what it returns. ``steptrace --help`` imports all of them, so they import
only click and light modules at their top (see _common.py); this module imports nothing
heavier either.
"""

from __future__ import annotations

import click

from steptrace import __version__
from steptrace.cli._analytics import (export_command, export_dataset_command,
                                      export_traces_command, features,
                                      query_command, report_command, serve_command, sql,
                                      view_command)
from steptrace.cli._benchmark import (dedupe_command, excerpts_command, filter_command,
                                      generate_command, harvest_command, repair_command,
                                      select_command, size_check_command, synth)
from steptrace.cli._contamination import anonymise_command, overlap_command
from steptrace.cli._predict import predict_command
from steptrace.cli._score import (export_generations_command, reward_server_command, score,
                                  score_cruxeval_command)
from steptrace.cli._tasks import cruxeval_prompts_command, tasks_command
from steptrace.cli._trace import analyse, build, import_command, show, trace, trace_shard
from steptrace.errors import Interrupted, SteptraceError

# What a user can cause and fix, printed as one line with exit status 1: steptrace's own
# errors (steptrace/errors.py: bad input, a store, the sandbox, the model server). Anything
# else is a bug and keeps its traceback. (click's own usage errors are click's.)
EXPECTED_ERRORS = (SteptraceError,)
# The exit status after Ctrl-C, as a shell reports a process SIGINT ended (128 + 2).
INTERRUPTED_STATUS = 130


class SteptraceGroup(click.Group):
    """Turns the errors a user can cause (``SteptraceError``) into one line and exit status
    1; any other exception is a bug and propagates with its traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Interrupted as exc:  # Ctrl-C in a long command: what it kept, one line
            click.echo(str(exc), err=True)
            ctx.exit(INTERRUPTED_STATUS)
        except KeyboardInterrupt:  # Ctrl-C in any other command: one line, no traceback
            click.echo("interrupted", err=True)
            ctx.exit(INTERRUPTED_STATUS)
        except EXPECTED_ERRORS as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=SteptraceGroup)
@click.version_option(__version__, prog_name="steptrace")
def main() -> None:
    """steptrace: sandboxed, step-traced execution of Python functions, stored in DuckDB."""


# In pipeline order; --help lists them by name.
for _command in (build, trace, trace_shard, import_command, analyse, show,  # _trace
                 tasks_command, cruxeval_prompts_command,                  # _tasks
                 predict_command,                                          # _predict
                 score, score_cruxeval_command, reward_server_command,     # _score
                 export_generations_command,
                 sql, query_command, export_command, export_traces_command,  # _analytics
                 export_dataset_command, features,
                 report_command, view_command, serve_command,
                 generate_command, harvest_command, excerpts_command,  # _benchmark
                 repair_command, filter_command,
                 dedupe_command, select_command, size_check_command, synth,
                 anonymise_command, overlap_command):                     # _contamination
    main.add_command(_command)
del _command
