"""A realistic large store for the report and score: CRUXEval traced in the real sandbox
(``copies`` times, each copy's samples under their own ids), tasks of every kind, and
five experiments' predictions (three models, two of them asked in two styles) written
through the library's own PredictionStore and judged by its own ``score``.

The predictions are synthetic but deterministic: whether an experiment answers a task
right is a hash of (experiment, task) against a chance that falls with the task's line
steps and rises with the experiment's skill; a wrong answer is a value of another type
(or, for yes/no kinds, the other word), and one answer in 40 is unparseable. So the
report has every section, difficulty curves that fall, and intervals of every width.
Used by tests/analytics/test_report_large.py and bench/report_speed.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

CRUXEVAL = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"

# (model, label, skill): the chance of a right answer to a one-step task
EXPERIMENTS = (("model-a", "direct", 0.85), ("model-a", "cot", 0.9),
               ("model-b", "direct", 0.6), ("model-b", "cot", 0.7),
               ("model-c", "direct", 0.45))


@dataclass(frozen=True)
class LargeStore:
    db: Path
    tasks: int
    predictions: int


def _chance(key: str) -> float:
    """A uniform number in [0, 1) from ``key`` (the same on every machine)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64


def _wrong(answer: str) -> str:
    lowered = answer.strip().lower()
    if lowered in ("yes", "no"):
        return "no" if lowered == "yes" else "yes"
    if lowered in ("true", "false"):
        return "False" if lowered == "true" else "True"
    return "'not the answer'" if not answer.startswith("'") else "-12345"


def corpus_copies(root: Path, copies: int, source: Path = CRUXEVAL) -> Path:
    """CRUXEval ``copies`` times in one JSONL file, copy k > 0's ids suffixed ``-k``."""
    records = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    out = root / f"cruxeval-x{copies}.jsonl"
    with out.open("w") as f:
        for k in range(copies):
            for r in records:
                f.write(json.dumps({**r, "id": r["id"] if k == 0 else f"{r['id']}-{k}"}) + "\n")
    return out


def build(root: Path, copies: int = 1, workers: int = 2,
          experiments=EXPERIMENTS) -> LargeStore:
    """Trace, make tasks, predict and score into ``root/report.duckdb``."""
    from steptrace.predictions._experiments import Experiment
    from steptrace.predictions._predict import Prediction, PredictionStore
    from steptrace.scoring._score import score_predictions
    from steptrace.scoring._verdicts import ScoreOptions
    from steptrace.tasks._tasks import TaskOptions, generate_tasks
    from steptrace.tracing._trace import TraceOptions, trace_corpus

    db = root / "report.duckdb"
    trace_corpus(corpus_copies(root, copies), db, TraceOptions(workers=workers))
    made = generate_tasks(db, TaskOptions(workers=workers))
    tasks = made.tasks.to_dicts()
    total = 0
    for model, label, skill in experiments:
        store = PredictionStore(db)
        store.experiment = Experiment(model, label, "direct")
        rows = []
        for t in tasks:
            key = f"{model}/{label}/{t['task_id']}"
            steps = max(1, t["line_steps"] or 1)
            right = _chance(key) < skill / (1 + 0.08 * steps ** 0.5)
            unparsed = _chance(key + "/parse") < 1 / 40
            answer = None if unparsed else (t["answer"] if right else _wrong(str(t["answer"])))
            rows.append(Prediction(
                t["task_id"], model, 0, t["kind"],
                raw_text=f"Reasoning...\n[ANSWER]{answer or 'I cannot tell'}[/ANSWER]",
                answer=answer, parsed=not unparsed, label=label, prompt_style="direct"))
        store.write(rows)
        total += len(rows)
    score_predictions(db, made.tasks, ScoreOptions(workers=workers))
    return LargeStore(db, len(tasks), total)
