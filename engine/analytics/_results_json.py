"""``results.json`` files in lm-evaluation-harness's layout, written next to the report.

lm-evaluation-harness writes one results file per model run (``results``: per task its
metrics keyed ``metric,filter``, e.g. ``acc,none`` and ``acc_stderr,none``; ``groups``
and ``group_subtasks``; ``n-samples``, ``higher_is_better``, ``versions``, ``n-shot``,
``config`` naming the model; ``date``), and the tools around it (its own
``--show_config`` tables, leaderboards, Weights & Biases' importer) read that. A
steptrace store holds several experiments (a model and a label: engine/predictions/
_experiments.py), so the report writes one such file per experiment, in
``NAME-results/MODEL__LABEL/results.json`` (each name made safe for a path). A task kind
is a task ``steptrace_KIND``; ``acc`` is its pass@1 (the mean over tasks of the share
of right samples, as ``score`` prints it), ``acc_stderr`` the standard error of that mean
(the sample standard deviation over the tasks / √n, lm-evaluation-harness's
``mean_stderr``), and ``acc_ci_low``/``acc_ci_high`` score's 95% bootstrap interval; the
group ``steptrace`` is ``all`` (trivial kinds left out, as score's ``all``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path

import numpy as np

from steptrace.corpus._text import user_file
from steptrace.scoring._summary import ScoreSummary

GROUP = "steptrace"


def _safe(text: str) -> str:
    """A name as a path part: letters, digits, ``.``, ``_`` and ``-`` kept, every other
    character as ``%XX`` of its UTF-8 bytes (so two names never make one part), and never
    ``.`` or ``..``."""
    safe = "".join(c if re.fullmatch(r"[A-Za-z0-9_-]", c) or (c == "." and i)
                   else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
                   for i, c in enumerate(text))
    return safe or "%"


def _stderr(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def experiment_results(summary: ScoreSummary, model: str, label: str, store: str,
                       date: dt.datetime) -> dict:
    """One experiment's results in lm-evaluation-harness's layout."""
    from steptrace import __version__
    columns, rows = summary.by_kind()
    index = {c: i for i, c in enumerate(columns)}
    pass1 = summary.task_pass1()
    per_kind: dict[str, list[float]] = {}
    for (experiment, task_id), value in sorted(pass1.items()):
        if experiment == (model, label):
            per_kind.setdefault(summary.tasks[task_id]["kind"], []).append(value)
    trivial = summary.trivial_kinds
    results, samples = {}, {}
    for row in rows:
        if (row[0], row[1]) != (model, label):
            continue
        kind = row[index["kind"]]
        name = GROUP if kind == "all" else f"{GROUP}_{kind}"
        values = ([v for k, vs in per_kind.items() if k not in trivial for v in vs]
                  if kind == "all" else per_kind.get(kind, []))
        results[name] = {"alias": kind if kind != "all" else GROUP,
                         "acc,none": row[index["pass@1"]],
                         "acc_stderr,none": _stderr(values),
                         "acc_ci_low,none": row[index["ci_low"]],
                         "acc_ci_high,none": row[index["ci_high"]]}
        if kind in trivial:
            results[name]["trivial"] = f"every task's answer is {trivial[kind]!r}"
        samples[name] = {"original": row[index["tasks"]], "effective": row[index["tasks"]]}
    subtasks = [n for n in results if n != GROUP and results[n]["alias"] not in trivial]
    tasks = [n for n in results if n != GROUP]
    return {
        "results": {n: r for n, r in results.items() if n != GROUP},
        "groups": {GROUP: results[GROUP]} if GROUP in results else {},
        "group_subtasks": {GROUP: subtasks},
        "configs": {n: {"task": n, "output_type": "generate_until", "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True}]} for n in tasks},
        "versions": {n: __version__ for n in tasks},
        "n-shot": {n: 0 for n in tasks},
        "higher_is_better": {n: {"acc": True} for n in tasks},
        "n-samples": {n: samples[n] for n in tasks},
        "config": {"model": model, "model_args": f"label={label}", "batch_size": None,
                   "bootstrap_iters": summary.resamples, "random_seed": summary.seed},
        "steptrace": {"store": store, "model": model, "label": label,
                      "metric": "acc is pass@1; acc_ci_low/acc_ci_high its 95% bootstrap "
                                "interval over the tasks"},
        "date": date.timestamp(),
    }


def write_results(summary: ScoreSummary, report: Path, store: str,
                  now: dt.datetime | None = None) -> list[str]:
    """One results.json per experiment in ``REPORT-results/MODEL__LABEL/``; their paths."""
    date = now or dt.datetime.now(dt.timezone.utc)
    root = report.with_name(f"{report.stem}-results")
    written = []
    for model, label in summary.experiments():
        folder = root / f"{_safe(model)}__{_safe(label)}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "results.json"
        text = json.dumps(experiment_results(summary, model, label, store, date), indent=2,
                          ensure_ascii=False, allow_nan=False)
        with user_file(path):
            path.write_text(text + "\n", encoding="utf-8")
        written.append(str(path))
    return written
