"""A store's predictions as CRUXEval generations: the official harness's input format
(facebookresearch/cruxeval, ``evaluation/evaluate_generations.py``), which
``score-cruxeval`` (engine/scoring/_cruxeval.py) and the harness itself score.

The format is one JSON object: ``"sample_<i>"`` (the sample's id) → the list of
generated strings for that sample. This module writes, for one experiment (model and
label) and one mode:

* the key of a sample is its ``runs.sample_id`` (the corpus id: ``sample_0`` ... for the
  CRUXEval data), in the order the runs were traced (the corpus order);
* its list holds the predictions of the sample's task of that kind (``input`` or
  ``output``), by ``sample_index``;
* ``input`` mode: the whole call as the harness checks it, ``<entry>(<predicted
  arguments>)`` (``f(...)`` for CRUXEval's programs), because steptrace stores an input
  answer as the text inside the call's parentheses (engine/tasks/_answers.py);
  ``output`` mode: the predicted literal as stored;
* an unparseable prediction (no answer found) is the empty string: the harness drops it
  in input mode (no ``f(``) and fails it in output mode, as ``score`` counts it wrong;
  so is an answer ``score`` refuses without running it (an input that is not "safe
  arguments", engine/scoring/_inputs.py; an output that is no literal): the harness
  would run it as code (``f(0) or True``, ``0 or True`` pass its ``assert``);
* a prediction whose request failed is left out, as ``score`` leaves it out; a sample
  left with no generation is left out (the harness would count an empty list as passed).

A sample with more than one task of the mode (several runs of one sample id) cannot be
written in this format: that is an error naming it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from steptrace.corpus._text import user_file
from steptrace.errors import InputError
from steptrace.scoring._inputs import program_names, safe_arguments
from steptrace.scoring._judges import NO_LITERAL, literal
from steptrace.store._store import StoreError, connect, first_line, has_table

MODES = ("input", "output")


@dataclass(frozen=True)
class GenerationsExport:
    """What ``export-generations`` wrote."""

    out: str
    model: str
    label: str
    mode: str
    samples: int          # keys written
    generations: int      # strings written
    unparseable: int      # predictions without an answer, written as ""
    refused: int          # answers score refuses (unsafe input, non-literal output), as ""
    failed_requests: int  # predictions whose request failed, left out
    samples_left_out: int  # samples whose every request failed

    def as_dict(self) -> dict:
        return asdict(self)

    def as_rows(self) -> list[tuple[str, object]]:
        return [("out", self.out), ("model", self.model), ("label", self.label),
                ("mode", self.mode), ("samples", self.samples),
                ("generations", self.generations),
                ("unparseable (written as \"\")", self.unparseable),
                ("refused: unsafe input or no literal (written as \"\")", self.refused),
                ("failed requests (left out)", self.failed_requests),
                ("samples left out (no generation)", self.samples_left_out)]


def _experiment_label(con: duckdb.DuckDBPyConnection, db: Path, model: str,
                      label: str | None) -> str:
    """``label``, or the model's only label; an error naming the choices otherwise."""
    labels = [l for (l,) in con.execute("SELECT DISTINCT label FROM predictions WHERE model = ? "
                                        "ORDER BY label", [model]).fetchall()]
    if not labels:
        raise InputError(f"no predictions of model {model} in {db}")
    if label is None:
        if len(labels) > 1:
            raise InputError(f"model {model} has {len(labels)} experiments in {db}: give "
                             f"--label ({', '.join(labels)})")
        return labels[0]
    if label not in labels:
        raise InputError(f"no predictions of model {model} with label {label} in {db} "
                         f"(labels: {', '.join(labels)})")
    return label


def predictions_as_generations(db: str | Path, model: str, mode: str,
                               label: str | None = None
                               ) -> tuple[dict[str, list[str]], GenerationsExport]:
    """The generations of ``model``'s experiment ``label`` (default: its only one) in
    ``mode``, and the export's counts (``out`` empty)."""
    if mode not in MODES:  # as score-cruxeval's --mode (that module loads the sandbox)
        raise InputError(f"unknown mode {mode!r}; use 'input' or 'output'")
    db = Path(db)
    con = connect(db, read_only=True)
    try:
        for table in ("predictions", "tasks"):
            if not has_table(con, table):
                raise InputError(f"{db} has no {table} table: run steptrace tasks and "
                                 "steptrace predict first")
        label = _experiment_label(con, db, model, label)
        rows = con.execute(
            "SELECT r.sample_id, t.task_id, p.sample_index, p.answer, p.parsed, p.error, "
            "g.entry, g.code FROM predictions p JOIN tasks t USING (task_id) "
            "JOIN runs r ON r.run_id = t.run_id JOIN programs g ON g.program_id = r.program_id "
            "WHERE p.model = ? AND p.label = ? AND t.kind = ? "
            "ORDER BY r.run_id, t.task_id, p.sample_index", [model, label, mode]).fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"cannot read predictions from {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    if not rows:
        raise InputError(f"no predictions of {mode} tasks for model {model}, label {label} "
                         f"in {db}")
    generations: dict[str, list[str]] = {}
    task_of: dict[str, str] = {}
    unparseable = refused = failed = 0
    for sample_id, task_id, _, answer, parsed, error, entry, code in rows:
        if task_of.setdefault(sample_id, task_id) != task_id:
            raise InputError(f"sample {sample_id} has more than one {mode} task in {db} "
                             "(several runs of one sample id): CRUXEval's generations "
                             "format holds one task per sample")
        listed = generations.setdefault(sample_id, [])
        if error is not None:
            failed += 1
            continue
        if not parsed or answer is None:
            unparseable += 1
            listed.append("")
            continue
        safe = (safe_arguments(answer, program_names(code)) if mode == "input"  # (cached)
                else literal(answer) is not NO_LITERAL)
        if not safe:
            refused += 1
            listed.append("")
            continue
        listed.append(f"{entry}({answer})" if mode == "input" else answer)
    kept = {sample_id: listed for sample_id, listed in generations.items() if listed}
    summary = GenerationsExport("", model, label, mode, len(kept),
                                sum(len(v) for v in kept.values()), unparseable, refused,
                                failed,
                                len(generations) - len(kept))
    return kept, summary


def export_generations(db: str | Path, out: str | Path, model: str, mode: str,
                       label: str | None = None) -> GenerationsExport:
    """Write the generations (``predictions_as_generations``) to ``out`` as the official
    files are written (``json.dump``'s default style: one line)."""
    out = Path(out)
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: no directory {out.parent}")
    generations, summary = predictions_as_generations(db, model, mode, label)
    with user_file(out):
        out.write_text(json.dumps(generations), encoding="utf-8")
    return GenerationsExport(**{**summary.as_dict(), "out": str(out)})
