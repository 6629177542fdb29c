"""The ``steptrace`` command as a whole (engine/cli): what it loads to start, its commands
and their help, its entry points, and which errors it turns into one line.

Start-up *time* depends on the machine and its load, so it is measured by bench/startup.py
and never asserted here. What makes start-up fast is asserted instead: ``steptrace
--help``, ``--version`` and every ``COMMAND --help`` load none of the heavy dependencies,
which each command imports inside its function.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from steptrace import __version__
from steptrace.cli._main import main

HEAVY = ("duckdb", "pyarrow", "polars", "numpy", "numba", "matplotlib", "openai", "wasmtime",
         "rich")

# Run in a fresh interpreter: this test process has loaded everything already.
PROBE = """
import json, sys
import click
HEAVY = set(%r)

def loaded():
    return sorted({name.split(".")[0] for name in sys.modules} & HEAVY)

import steptrace.cli
from steptrace.cli import main
found = {"import steptrace.cli": loaded()}
for args in (["--help"], ["--version"],
             *([name, "--help"] for name in main.list_commands(click.Context(main)))):
    try:
        main(args, prog_name="steptrace")
    except SystemExit as exc:
        assert exc.code == 0, (args, exc.code)
found["--help, --version, every COMMAND --help"] = loaded()
import steptrace.store._store  # the control: a module that does load DuckDB
found["then steptrace.store._store"] = loaded()
print(json.dumps(found))
""" % (HEAVY,)

COMMANDS = ["analyse", "anonymise", "build", "cruxeval-prompts", "dedupe", "excerpts",
            "export", "export-dataset", "export-generations", "export-traces", "features",
            "filter", "generate", "harvest", "import", "overlap", "predict", "query", "repair",
            "report", "reward-server", "score", "score-cruxeval", "select", "serve", "show",
            "size-check", "sql", "synth", "tasks", "trace", "trace-shard", "view"]


def test_help_and_version_load_no_heavy_dependency():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    control = found.pop("then steptrace.store._store")
    assert found == {"import steptrace.cli": [], "--help, --version, every COMMAND --help": []}
    assert {"duckdb", "pyarrow"} <= set(control)  # the probe sees a heavy import when there is one


def test_every_command_is_listed_with_help():
    """The commands (a change here is deliberate), each with a help text whose first
    sentence --help lists, and every option it shows with a help text of its own."""
    ctx = click.Context(main, info_name="steptrace")
    assert main.list_commands(ctx) == COMMANDS
    listing = CliRunner().invoke(main, ["--help"])
    assert listing.exit_code == 0, listing.output
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command.help and command.help.strip(), name
        assert f"  {name} " in listing.stdout
        for param in command.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help and param.help.strip(), (name, param.name)


def test_python_m_steptrace_cli_is_the_command():
    """``python -m steptrace.cli`` (what bench/host_memory.py and test_experiments.py run)."""
    result = subprocess.run([sys.executable, "-m", "steptrace.cli", "--version"],
                            capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"steptrace, version {__version__}\n", "")


def _errors() -> list[BaseException]:
    """One of each error the CLI listed by class before it named them by their base,
    SteptraceError."""
    from steptrace.corpus._formats import CorpusError
    from steptrace.predictions._predict import PredictError
    from steptrace.sandbox._build import BuildError
    from steptrace.sandbox._pool import PoolError
    from steptrace.store._store import StoreError, StoreLockedError
    return [StoreError("store: bad"), StoreLockedError("store: in use"),
            CorpusError("corpus: bad"), BuildError("build: failed"),
            PoolError("pool: no worker"), PredictError("predict: unreachable")]


@pytest.mark.parametrize("error", _errors(), ids=lambda e: type(e).__name__)
def test_errors_a_user_can_cause_are_one_line(monkeypatch, tmp_path, error):
    def fail(*args, **kwargs):
        raise error
    monkeypatch.setattr("steptrace.analytics._export.export_parquet", fail)
    result = CliRunner().invoke(main, ["export", "--db", str(tmp_path / "s.duckdb"),
                                       "--out", str(tmp_path / "out")])
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", f"Error: {error}\n")
    assert isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("error", [RuntimeError("a bug"), ValueError("value: bad"),
                                   OSError("os: no space")], ids=lambda e: type(e).__name__)
def test_other_errors_keep_their_traceback(monkeypatch, tmp_path, error):
    """A bug is not a user's error: it propagates (the real command prints its traceback),
    a ValueError or an OSError from inside the library as much as any other (what a user
    can cause is raised as a SteptraceError, steptrace.errors)."""
    def fail(*args, **kwargs):
        raise error
    monkeypatch.setattr("steptrace.analytics._export.export_parquet", fail)
    result = CliRunner().invoke(main, ["export", "--db", str(tmp_path / "s.duckdb"),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.exception is error
    assert "Error:" not in result.stderr
