"""Benchmark size check (CRUXEval §3.3, Fig. 1): how large must a benchmark drawn from a
candidate pool be for the models' order on it to match their order on the whole pool?

Given per-sample scores of two or more models on the pool (e.g. each task's pass@1), a
benchmark of size ``n`` is a random subset of the pool (drawn without replacement:
selecting a benchmark takes each sample at most once). For every pair of models, A the
better on the whole pool, the check estimates the probability that A's mean on the
subset is *not* above B's: a reversal, with a tie counting as half (neither order wins,
as in engine/scoring/_stats.py's paired comparison). The smallest ``n`` of the sizes tried that
keeps every pair's probability below ``level`` (and stays below it for every larger size
tried) is the size to choose.

The numba kernel draws ``resamples`` subsets per size with a partial Fisher–Yates shuffle
driven by engine/scoring/_stats.py's splitmix64, so results are the same on every platform and a
test can replay them; within one resample the subsets of the sizes are nested (each is
still a uniform subset of its size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import duckdb
import numba
import numpy as np

from steptrace.predictions._experiments import experiment_name
from steptrace.scoring._stats import _splitmix64
from steptrace.store._store import StoreError, connect, first_line, has_table
from steptrace.errors import InputError

TIE_TOLERANCE = 1e-9  # sums of per-sample scores this close (per sample) are a tie


@numba.njit(cache=True)
def _reversal_counts(scores: np.ndarray, sizes: np.ndarray, better: np.ndarray,
                     worse: np.ndarray, resamples: int, seed: int) -> tuple:
    """(reversals, ties) per size and pair over ``resamples`` subsets of each size.
    ``sizes`` ascending; pair p compares column better[p] against worse[p]."""
    pool, models = scores.shape
    pairs = better.shape[0]
    reversals = np.zeros((sizes.shape[0], pairs), np.int64)
    ties = np.zeros((sizes.shape[0], pairs), np.int64)
    index = np.arange(pool)
    totals = np.zeros(models)
    state = np.uint64(seed)
    largest = sizes[sizes.shape[0] - 1]
    for _ in range(resamples):
        totals[:] = 0.0
        size = 0
        for k in range(largest):
            state, bits = _splitmix64(state)
            j = k + np.int64(bits % np.uint64(pool - k))
            index[k], index[j] = index[j], index[k]
            for m in range(models):
                totals[m] += scores[index[k], m]
            while size < sizes.shape[0] and sizes[size] == k + 1:
                for p in range(pairs):
                    difference = totals[better[p]] - totals[worse[p]]
                    if abs(difference) <= TIE_TOLERANCE * (k + 1):
                        ties[size, p] += 1
                    elif difference < 0:
                        reversals[size, p] += 1
                size += 1
    return reversals, ties


@dataclass(frozen=True)
class SizeCheck:
    models: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]      # (better on the pool, worse on the pool)
    pool_means: tuple[float, ...]
    pool: int
    sizes: tuple[int, ...]
    probability: np.ndarray                 # sizes × pairs: reversal probability
    resamples: int
    seed: int
    level: float

    @property
    def smallest_n(self) -> int | None:
        """The smallest size tried from which every pair's reversal probability stays
        below ``level``; None when even the largest size does not get there."""
        found = None
        for row in range(len(self.sizes) - 1, -1, -1):
            if not np.all(self.probability[row] < self.level):
                break
            found = self.sizes[row]
        return found

    def columns(self) -> list[str]:
        return ["n"] + [f"{a} > {b}" for a, b in self.pairs]

    def as_rows(self) -> list[tuple]:
        return [(n, *(round(float(p), 6) for p in self.probability[row]))
                for row, n in enumerate(self.sizes)]

    def as_dict(self) -> dict:
        return {"models": list(self.models), "pool": self.pool,
                "pool_means": dict(zip(self.models, self.pool_means)),
                "resamples": self.resamples, "seed": self.seed, "level": self.level,
                "pairs": [list(pair) for pair in self.pairs],
                "reversal_probability": {str(n): dict(zip((f"{a} > {b}" for a, b in self.pairs),
                                                          map(float, self.probability[row])))
                                         for row, n in enumerate(self.sizes)},
                "smallest_n": self.smallest_n}


def parse_sizes(text: str) -> list[int]:
    """``100:2000:100`` (start:stop:step, stop included) or ``100,200,800``."""
    try:
        if ":" in text:
            start, stop, step = (int(part) for part in text.split(":"))
            if step < 1:
                raise ValueError
            sizes = list(range(start, stop + 1, step))
        else:
            sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"sizes must be START:STOP:STEP or N,N,... with whole numbers, "
                         f"got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise InputError(f"sizes must be at least 1, got {text!r}")
    return sorted(set(sizes))


def size_check(scores: np.ndarray, models: Sequence[str], sizes: Sequence[int],
               level: float = 0.05, resamples: int = 10_000, seed: int = 0) -> SizeCheck:
    """Reversal probability per pair of models and benchmark size (module docstring)."""
    scores = np.asarray(scores, np.float64)
    models = tuple(models)
    if scores.ndim != 2 or scores.shape[1] != len(models):
        raise InputError("scores must be a samples x models matrix, one column per model")
    if len(models) < 2:
        raise InputError(f"a size check needs at least two models, got {len(models)}")
    if np.isnan(scores).any():
        raise InputError("scores hold NaN")
    if not 0 < level < 1:
        raise InputError(f"level must be between 0 and 1, got {level}")
    if resamples < 1:
        raise InputError("resamples must be at least 1")
    sizes = sorted(set(int(n) for n in sizes))
    if not sizes or sizes[0] < 1:
        raise InputError("sizes must be a non-empty list of sizes >= 1")
    if sizes[-1] > scores.shape[0]:
        raise InputError(f"size {sizes[-1]} is larger than the pool ({scores.shape[0]} samples)")
    means = scores.mean(axis=0)
    pairs = _ordered_pairs(models, means)
    index = {name: i for i, name in enumerate(models)}
    better = np.array([index[a] for a, _ in pairs], np.int64)
    worse = np.array([index[b] for _, b in pairs], np.int64)
    reversals, ties = _reversal_counts(np.ascontiguousarray(scores), np.array(sizes, np.int64),
                                       better, worse, resamples, seed)
    probability = (reversals + 0.5 * ties) / resamples
    return SizeCheck(models, tuple(pairs), tuple(float(m) for m in means), scores.shape[0],
                     tuple(sizes), probability, resamples, seed, level)


def _ordered_pairs(models: tuple[str, ...], means: np.ndarray) -> list[tuple[str, str]]:
    pairs = []
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            if math.isclose(means[i], means[j], rel_tol=0.0, abs_tol=TIE_TOLERANCE):
                raise InputError(f"models {models[i]} and {models[j]} have the same mean score "
                                 f"on the pool ({means[i]:.6g}): their order is undefined")
            pairs.append((models[i], models[j]) if means[i] > means[j]
                         else (models[j], models[i]))
    return pairs


# ---------------------------------------------------------------- loading scores
@dataclass(frozen=True)
class PoolScores:
    models: tuple[str, ...]
    samples: tuple[str, ...]
    scores: np.ndarray          # samples × models
    dropped: int = 0            # samples not scored for every model, left out


def load_pool_scores(db: str | Path, models: Sequence[str] | None = None,
                     kind: str | None = None) -> PoolScores:
    """Per-task pass@1 (the share of correct samples) of each experiment of the models
    from the store's ``scores`` table (``steptrace score``). ``models`` None or empty:
    every scored model. Each experiment (a model and label, engine/predictions/_experiments.py) is a
    column of its own, named ``model [label]``: one model's prompt styles are not averaged
    together. Tasks not scored for every column are left out (and counted in
    ``dropped``): comparing means over different task sets would not compare them."""
    if not Path(db).exists():
        raise StoreError(f"database not found: {db}")
    con = connect(db, read_only=True)
    try:
        if not has_table(con, "scores"):
            raise StoreError(f"{db} has no scores table: run steptrace score --tasks first")
        where = "WHERE kind = ?" if kind else ""
        rows = con.execute(f"SELECT task_id, model, label, avg(correct::DOUBLE) FROM scores "
                           f"{where} GROUP BY ALL ORDER BY task_id, model, label",
                           [kind] if kind else []).fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    chosen = tuple(models or ()) or tuple(sorted({model for _, model, _, _ in rows}))
    missing = [m for m in chosen if m not in {model for _, model, _, _ in rows}]
    if missing:
        raise InputError(f"no scores for model {missing[0]!r} in {db}")
    labels = sorted({(model, label) for _, model, label, _ in rows})
    columns = tuple(experiment_name(m, label) for m in chosen for model, label in labels
                    if model == m)
    return _pivot([(task, experiment_name(model, label), value)
                   for task, model, label, value in rows], columns, db)


def _pivot(rows: list[tuple], models: tuple[str, ...], where: object) -> PoolScores:
    by_task: dict[str, dict[str, float]] = {}
    present: set[str] = set()
    for task, model, value in rows:
        present.add(model)
        by_task.setdefault(task, {})[model] = value
    missing = [m for m in models if m not in present]
    if missing:
        raise InputError(f"no scores for model {missing[0]!r} in {where}")
    complete = [task for task, values in by_task.items() if all(m in values for m in models)]
    if models and not complete:
        raise InputError(f"no task in {where} is scored for every model of "
                         f"{', '.join(models)}")
    matrix = np.array([[by_task[task][m] for m in models] for task in complete], np.float64)
    return PoolScores(models, tuple(complete), matrix.reshape(len(complete), len(models)),
                      len(by_task) - len(complete))


def load_scores_csv(path: str | Path) -> PoolScores:
    """A CSV with a header ``sample_id,<model>,<model>,...`` and one row per sample."""
    import polars as pl
    path = Path(path)
    if not path.is_file():
        raise InputError(f"scores file not found: {path}")
    try:
        frame = pl.read_csv(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {path}: {first_line(exc)}") from None
    if frame.width < 3 or frame.columns[0] != "sample_id":
        raise InputError(f"{path}: the header must be sample_id,<model>,<model>,...")
    models = tuple(frame.columns[1:])
    try:
        matrix = frame.select(pl.col(m).cast(pl.Float64, strict=True) for m in models).to_numpy()
    except pl.exceptions.PolarsError:
        raise InputError(f"{path}: every score must be a number") from None
    if np.isnan(matrix).any():
        raise InputError(f"{path}: a score is missing")
    return PoolScores(models, tuple(str(s) for s in frame["sample_id"]), matrix)
