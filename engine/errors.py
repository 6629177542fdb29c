"""steptrace's errors: one hierarchy, so callers (and the CLI, which turns exactly these into
one-line messages) can tell what a user can fix from a bug, which keeps its traceback.

``SteptraceError``
├── ``InputError`` (also a ValueError): a corpus record, an option, a file's content, a
│   │   file the user named that cannot be read or written (steptrace.corpus._text.user_file)
│   ├── ``CorpusError``, ``NotUtf8Error`` (steptrace.corpus)
│   ├── ``ExperimentError``, ``TasksFileError`` (steptrace.predictions)
│   ├── ``ScoreError`` (steptrace.scoring), ``QueryDefinitionError`` (steptrace.analytics)
│   └── ``GenerateError`` (steptrace.benchmark)
├── ``StoreError``: the DuckDB store cannot be opened, read or written (``StoreLockedError``)
├── ``SandboxError``: the guest cannot be built (``BuildError``) or run (``PoolError``)
├── ``PredictError``: the model server cannot be used
└── ``Interrupted``: a long command stopped by Ctrl-C (or SIGTERM), saying what it kept

An error a user can cause is raised as one of these (a ``raise ValueError`` in the library
is left for a broken internal invariant, which is a bug); the CLI turns exactly these into
``Error: <message>`` and exit status 1, and lets anything else show its traceback.
"""

from __future__ import annotations


class SteptraceError(Exception):
    """Anything a user can cause and fix; the message says what, in one line."""


class InputError(SteptraceError, ValueError):
    """Bad input: a corpus record, an option's value, a file's content, or a file the user
    named that cannot be read or written (the message names it)."""


class StoreError(SteptraceError, RuntimeError):
    """The DB file cannot be opened, read or written; the message names the file."""


class SandboxError(SteptraceError, RuntimeError):
    """The guest component cannot be built, loaded or run."""


class PredictError(SteptraceError, RuntimeError):
    """A failure that stops the run (unreachable server, unknown model, refused key)."""


class Interrupted(SteptraceError):
    """A long command (trace, predict, score) stopped by Ctrl-C: what it had finished is
    stored, and running the same command again resumes. The message is the one line the
    CLI prints (``interrupted: 120 runs stored; run the same command to resume``), without
    the ``Error:`` of the other errors, and the exit status is 130 (a shell's for SIGINT)."""

    def __init__(self, stored: int, units: str) -> None:
        """``units``: what was stored, in the plural ("runs")."""
        unit = units.removesuffix("s") if stored == 1 else units
        super().__init__(f"interrupted: {stored} {unit} stored; run the same command to resume")
        self.stored = stored


__all__ = ["InputError", "Interrupted", "PredictError", "SandboxError", "SteptraceError",
           "StoreError"]
