"""Experiments: the settings a model's predictions were made with, and the tables keyed by them.

A model asked the same tasks twice with other settings (another prompt style, system
prompt, temperature, top_p or max_tokens) gives two sets of answers that must neither skip
nor replace each other, and that scoring must report apart. So every prediction and every
verdict is keyed by the model *and* a label naming its experiment: ``(task_id, model,
label, sample_index)``. The ``experiments`` table holds one row per (model, label) with the
settings; a label always names the same settings, so reusing it with other settings is
refused rather than mixing two experiments under one name. The default label is spelled
from the settings (``direct-t0.0-m2048``), so runs with different settings get different
labels without the user naming them.

The template is not one of the recorded settings, because a tasks record does not say
which template made its prompt. Each prediction stores the SHA-256 of its prompt instead
(``prompt_sha256``), and a run is refused when a task it would resume was asked under the
same label with another prompt: a changed template can never be taken for the old one.

This module is imported by :func:`steptrace.store._store.connect` (to upgrade older stores), so it
keeps to the standard library, duckdb and the table declarations (engine/store/_tables.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

import duckdb
from steptrace.errors import InputError
from steptrace.store._tables import EXPERIMENTS, PREDICTIONS, SCORES
from steptrace.store._transaction import transaction

LEGACY_LABEL = "legacy"  # predictions stored before experiments were recorded (schema 2)
MAX_LABEL_CHARS = 100

# The tables' one declaration is in engine/store/_tables.py.
EXPERIMENTS_DDL = EXPERIMENTS.ddl()
PREDICTIONS_DDL = PREDICTIONS.ddl()
SCORES_DDL = SCORES.ddl()
# The layouts of schema 2, which upgrade() recognises (and nothing else).
V2_PREDICTION_COLUMNS = ("task_id", "model", "sample_index", "kind", "raw_text", "answer",
                         "parsed", "prompt_tokens", "completion_tokens", "latency_ms", "error",
                         "finish_reason", "created_at")
V2_SCORE_COLUMNS = ("task_id", "model", "sample_index", "kind", "parsed", "correct",
                    "distance", "note", "scored_at")
SETTINGS = ("prompt_style", "system_prompt", "temperature", "top_p", "max_tokens")


class ExperimentError(InputError):
    """A label that names other settings, or a bad label; the message says which."""


@dataclass(frozen=True)
class Experiment:
    """One row of ``experiments``: a model and the settings its requests were sent with.
    ``prompt_style`` is the tasks' style (styles joined by ``+`` for a mixed tasks file);
    None only for the legacy experiment, whose settings are unknown."""

    model: str
    label: str
    prompt_style: str | None
    system_prompt: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None

    def settings(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in SETTINGS}


def prompt_styles(styles: list[str | None]) -> str:
    """The experiment's prompt style for a tasks file: its tasks' styles, sorted, joined
    by ``+`` (``none`` for a task without one)."""
    return "+".join(sorted({style or "none" for style in styles})) or "none"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_label(prompt_style: str, temperature: float, top_p: float | None,
                  max_tokens: int | None, system_prompt: str | None) -> str:
    """The label spelled from every setting, so different settings never share a default
    label: ``<style>-t<temperature>[-p<top_p>][-m<max_tokens>][-s<system prompt digest>]``
    (floats by ``repr``, which tells every two floats apart)."""
    parts = [prompt_style, f"t{float(temperature)!r}"]
    if top_p is not None:
        parts.append(f"p{float(top_p)!r}")
    if max_tokens is not None:
        parts.append(f"m{max_tokens}")
    if system_prompt is not None:
        parts.append(f"s{sha256(system_prompt)[:8]}")
    return "-".join(parts)


def experiment_name(model: str, label: str) -> str:
    """How an experiment is named where one name must do (plot legends, size-check
    columns): ``model [label]``."""
    return f"{model} [{label}]"


def check_label(label: str) -> str:
    """A label is shown in tables and typed in commands: 1-100 printable characters, no
    spaces at its ends."""
    if (not label or len(label) > MAX_LABEL_CHARS or label != label.strip()
            or not label.isprintable()):
        raise ExperimentError(f"--label must be 1-{MAX_LABEL_CHARS} printable characters "
                              f"without spaces at the ends, not {label!r}")
    return label


# ------------------------------------------------------------------ the experiments table
def register(con: duckdb.DuckDBPyConnection, experiment: Experiment) -> None:
    """Record ``experiment`` (inside the caller's transaction) unless it is recorded, as
    :func:`check` allows. ``predict`` records it with its first predictions, in their
    transaction: a run that stores none (the server cannot be reached, the model does
    not exist) leaves no experiment behind."""
    if check(con, experiment):
        return
    columns = ", ".join(SETTINGS)
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    con.execute(f"INSERT INTO experiments (model, label, {columns}, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [experiment.model, experiment.label, *experiment.settings().values(), now])


def check(con: duckdb.DuckDBPyConnection, experiment: Experiment) -> bool:
    """Whether ``experiment`` is recorded; raise ExperimentError when its label is recorded
    for the model with other settings: one label, one set of settings, or a resumed run
    would mix two experiments. The legacy label is refused too: its settings are unknown,
    so no run can claim them."""
    con.execute(EXPERIMENTS_DDL)
    columns = ", ".join(SETTINGS)
    found = con.execute(f"SELECT {columns} FROM experiments WHERE model = ? AND label = ?",
                        [experiment.model, experiment.label]).fetchone()
    if found is None:
        return False
    stored = dict(zip(SETTINGS, found))
    if stored["prompt_style"] is None:
        raise ExperimentError(
            f"label {experiment.label!r} of model {experiment.model!r} holds the predictions "
            "stored before experiments were recorded (settings unknown): give another --label")
    wanted = experiment.settings()
    differ = [f"{name} {stored[name]!r}, not {wanted[name]!r}" for name in SETTINGS
              if stored[name] != wanted[name]]
    if differ:
        raise ExperimentError(
            f"label {experiment.label!r} of model {experiment.model!r} names an experiment "
            f"with other settings ({'; '.join(differ)}): give another --label")
    return True


def drop_if_empty(con: duckdb.DuckDBPyConnection, experiment: Experiment) -> bool:
    """Delete ``experiment``'s row (inside the caller's transaction) when no prediction
    and no score is kept under it (a ``--redo`` run that failed before its first answer
    deleted them); whether it did."""
    key = [experiment.model, experiment.label]
    present = {name for (name,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND "
        "table_name IN ('experiments', 'predictions', 'scores')").fetchall()}
    if "experiments" not in present:
        return False
    for table in sorted(present - {"experiments"}):
        if con.execute(f"SELECT count(*) FROM {table} WHERE model = ? AND label = ?",
                       key).fetchall()[0][0]:
            return False
    return bool(con.execute("DELETE FROM experiments WHERE model = ? AND label = ?",
                            key).fetchall()[0][0])


# ------------------------------------------------------------------ upgrading schema 2
def upgrade(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Bring schema 2's ``predictions`` and ``scores`` (keyed by task, model and sample)
    to schema 3 in one transaction: their rows get the label ``legacy``, and each model
    with such rows a ``legacy`` experiment whose settings are NULL (unknown). Tables of
    neither layout are left as they are. Returns the tables upgraded."""
    found: dict[str, tuple[str, ...]] = {}
    for table, column in con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name IN ('predictions', 'scores') "
            "ORDER BY table_name, ordinal_position").fetchall():
        found[table] = found.get(table, ()) + (column,)
    plan = [(table, ddl) for table, old, ddl in (
        ("predictions", V2_PREDICTION_COLUMNS, PREDICTIONS_DDL),
        ("scores", V2_SCORE_COLUMNS, SCORES_DDL)) if found.get(table) == old]
    if not plan:
        return []
    with transaction(con):
        con.execute(EXPERIMENTS_DDL)
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        for table, ddl in plan:
            old = found[table]
            con.execute(f"CREATE TEMPORARY TABLE upgrading AS SELECT * FROM {table}")
            con.execute(f"DROP TABLE {table}")
            con.execute(ddl)
            columns = ", ".join(old)
            con.execute(f"INSERT INTO {table} (label, {columns}) "
                        f"SELECT '{LEGACY_LABEL}', {columns} FROM upgrading")
            con.execute("DROP TABLE upgrading")
            con.execute("INSERT INTO experiments (model, label, created_at) "
                        f"SELECT DISTINCT model, '{LEGACY_LABEL}', ? FROM {table} "
                        "ON CONFLICT DO NOTHING", [now])
    return [table for table, _ in plan]
