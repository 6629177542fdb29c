"""A store's corpus, runs, tasks, predictions and scores as a Hugging Face dataset in the
Hub's layout, with its card: ready for ``datasets.load_dataset(DIR, "tasks")`` and for
``huggingface-cli upload``.

Layout::

    DIR/README.md                          the card: YAML configs, then what each holds
    DIR/<config>/train-00000-of-00001.parquet

One config per table asked for (``DATASET_CONFIGS``), one ``train`` split each, the rows
in the store's order (run id, task id, ...). ``corpus`` is not a table but the records a
trace reads: one per run of a call-shaped program (``id``, ``code``, ``entry``,
``input``, ``output``: the expected output), so that the dataset traced again is the same
jobs; runs of scripts, chains, stdin or files are left out of it (their other columns are
in ``runs``), and the card says how many. Written with DuckDB's Parquet writer: no
``datasets`` needed to write it. The directory is refused when it is not empty unless
``force``, which replaces what an earlier export of this kind wrote there.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from steptrace.analytics._defaults import DEFAULT_DATASET_CONFIGS
from steptrace.analytics._export import _prepare_directory, sql_literal
from steptrace.errors import InputError
from steptrace.store._store import SCHEMA_VERSION, StoreError, connect, first_line, has_table

DATA_FILE = "train-00000-of-00001.parquet"
CARD = "README.md"
# config -> (the query of its rows, the table it needs, what the card says it is)
CORPUS_SQL = ("SELECT r.sample_id AS id, p.code, p.entry, r.input, r.expected AS output "
              "FROM runs r JOIN programs p USING (program_id) WHERE p.shape = 'call' AND "
              "p.test IS NULL AND p.environment IS NULL AND r.chain IS NULL AND "
              "r.stdin IS NULL ORDER BY r.run_id")
DATASET_CONFIGS = {
    "corpus": (CORPUS_SQL, "runs", "the corpus records of the call-shaped runs (id, code, "
               "entry, input, expected output): `steptrace trace` reads them as a corpus"),
    "runs": ("SELECT * FROM runs ORDER BY run_id", "runs",
             "one row per traced run (the store's `runs` table)"),
    "programs": ("SELECT * FROM programs ORDER BY program_id", "programs",
                 "the traced programs (the store's `programs` table)"),
    "tasks": ("SELECT * FROM tasks ORDER BY run_id, task_id", "tasks",
              "prediction tasks with exact answers (`steptrace tasks`)"),
    "predictions": ("SELECT * FROM predictions ORDER BY model, label, task_id, sample_index",
                    "predictions", "models' answers (`steptrace predict`)"),
    "scores": ("SELECT * FROM scores ORDER BY model, label, task_id, sample_index", "scores",
               "the verdicts of `steptrace score`"),
}
DEFAULT_CONFIGS = DEFAULT_DATASET_CONFIGS


@dataclass
class DatasetExport:
    directory: str
    rows: dict[str, int] = field(default_factory=dict)
    left_out: int = 0  # runs not in the corpus config (scripts, chains, stdin, files)

    def as_rows(self) -> list[tuple[str, object]]:
        return [(name, rows) for name, rows in self.rows.items()] + (
            [("runs left out of corpus", self.left_out)] if "corpus" in self.rows else [])


def parse_configs(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in DATASET_CONFIGS]
    if unknown or not names:
        raise InputError(f"--tables takes some of {', '.join(DATASET_CONFIGS)}, not {text!r}")
    return names


def export_dataset(db: str | Path, directory: str | Path,
                   configs: tuple[str, ...] = DEFAULT_CONFIGS, force: bool = False,
                   name: str | None = None) -> DatasetExport:
    """Write ``configs`` of the store ``db`` into ``directory`` (module doc). A config
    whose table the store lacks (no tasks made yet) is an error naming the command that
    makes it."""
    directory = Path(directory)
    con = connect(db, read_only=True)
    try:
        for config in configs:
            table = DATASET_CONFIGS[config][1]
            if not has_table(con, table):
                raise InputError(f"{db} has no {table} table (config {config}): run steptrace "
                                 f"{'predict' if table == 'predictions' else table.rstrip('s')} "
                                 "first, or leave it out of --tables")
        _prepare_directory(directory, force)
        for config in (*DATASET_CONFIGS, CARD):
            target = directory / config
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
        summary = DatasetExport(str(directory))
        for config in configs:
            (directory / config).mkdir()
            query = DATASET_CONFIGS[config][0]
            con.execute(f"COPY ({query}) TO {sql_literal(directory / config / DATA_FILE)} "
                        "(FORMAT PARQUET)")
            summary.rows[config] = con.execute(f"SELECT count(*) FROM ({query})").fetchone()[0]
        if "corpus" in configs:
            summary.left_out = (con.execute("SELECT count(*) FROM runs").fetchone()[0]
                                - summary.rows["corpus"])
    except duckdb.Error as exc:
        raise StoreError(f"cannot export {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    (directory / CARD).write_text(card(summary, name or Path(db).stem), encoding="utf-8")
    return summary


def card(summary: DatasetExport, name: str) -> str:
    """The dataset card: the configs for the Hub and ``load_dataset``, then what each is."""
    lines = ["---", "configs:"]
    for config in summary.rows:
        lines += [f"- config_name: {config}", "  data_files:", "  - split: train",
                  f"    path: {config}/*.parquet"]
    lines += ["tags:", "- steptrace", "- code-execution", "---", "", f"# {name}", "",
              f"Made with steptrace from a trace store (schema version {SCHEMA_VERSION}): "
              "sandboxed, step-traced runs of Python programs and questions about them with "
              "exact answers.", "", "| config | rows | what |", "|---|---|---|"]
    lines += [f"| `{config}` | {rows} | {DATASET_CONFIGS[config][2]} |"
              for config, rows in summary.rows.items()]
    if "corpus" in summary.rows and summary.left_out:
        lines += ["", f"{summary.left_out} runs (scripts, call chains, stdin or files) are in "
                      "`runs` but not in `corpus`."]
    lines += ["", "```python", "from datasets import load_dataset",
              f'tasks = load_dataset("PATH", "{next(iter(summary.rows))}", split="train")',
              "```", ""]
    return "\n".join(lines)
