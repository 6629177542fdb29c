"""CRUXEval's analyses of scored generations, built in (CRUXEval §4 and Appendix D): the
share of samples fully solved (every generation passes) and unsolved (none passes), the
diversity of the generations (distinct generations per sample), pass@1 and pass@5 as
fractions (``pass@1 fraction``, ``pass@5 fraction``: score-cruxeval's ``pass@1`` and
``pass@5`` are the harness's percentages), and the input-output difficulty correlation
(Pearson's r of the samples' pass@1 in input mode and in output mode), each with a 95%
percentile bootstrap interval over the samples (engine/scoring/_stats.py).

pass@k are those of a sample's official scored list (``raw_scored_generations``: the
kept generations' results, or all failures when none passed); "fully solved" needs every
generation to pass, one the harness's rules drop counting as failed; distinct
generations count the generation strings as given, whitespace at their ends aside. Every
share is a fraction in [0, 1] (docs/guides/predictions-and-scoring.md, "Numbers").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from steptrace.corpus._text import read_utf8
from steptrace.errors import InputError
from steptrace.scoring._stats import Interval, bootstrap_interval, pass_at_k_product, pearson


@dataclass(frozen=True)
class Measure:
    """One analysis: its value, its 95% interval and the samples it is over."""

    name: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int

    def as_dict(self) -> dict:
        return {"measure": self.name, "value": self.value, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "n": self.n}


def _measure(name: str, interval: Interval, n: int, digits: int = 4) -> Measure:
    def rounded(value: float) -> float | None:
        return None if value != value else round(float(value), digits)  # NaN: undefined
    return Measure(name, rounded(interval.mean), rounded(interval.low), rounded(interval.high), n)


def sample_pass1(results: Sequence[bool]) -> float:
    return pass_at_k_product(len(results), sum(results), 1)


def generation_analyses(scored: Mapping[str, Sequence[bool]],
                        generations: Mapping[str, Sequence[str]] | None = None,
                        passed: Mapping[str, Sequence[bool]] | None = None,
                        resamples: int = 10_000, seed: int = 0) -> list[Measure]:
    """The analyses of one mode's scored generations: ``scored`` maps a sample id to its
    official scored list (pass@1, pass@5), ``passed`` (default: ``scored``) to whether
    each of its generations passed, a generation the rules dropped counting as failed
    (fully solved, unsolved), ``generations`` (optional) to its generated strings."""
    ids = list(scored)
    if not ids:
        raise InputError("no scored samples to analyse")
    n = len(ids)
    results = [list(scored[i]) for i in ids]
    each = results if passed is None else [list(passed[i]) for i in ids]
    measures = [
        _measure("pass@1 fraction", bootstrap_interval(np.array([sample_pass1(r) for r in results]),
                                              resamples, seed=seed), n),
        _measure("pass@5 fraction", bootstrap_interval(
            np.array([pass_at_k_product(len(r), sum(r), 5) for r in results]),
            resamples, seed=seed), n),
        _measure("fully solved", bootstrap_interval(
            np.array([float(bool(r) and all(r)) for r in each]), resamples, seed=seed), n),
        _measure("unsolved", bootstrap_interval(
            np.array([float(not any(r)) for r in each]), resamples, seed=seed), n)]
    if generations is not None:
        distinct = np.array([len({g.strip() for g in generations[i]}) for i in ids], np.float64)
        sizes = np.array([len(generations[i]) for i in ids], np.float64)
        measures.append(_measure("distinct generations",
                                 bootstrap_interval(distinct, resamples, seed=seed), n))
        measures.append(_measure("distinct share",
                                 bootstrap_interval(distinct / sizes, resamples, seed=seed), n))
    return measures


def difficulty_correlation(input_scored: Mapping[str, Sequence[bool]],
                           output_scored: Mapping[str, Sequence[bool]],
                           resamples: int = 10_000, seed: int = 0) -> Measure:
    """Pearson's r between the samples' pass@1 in input mode and in output mode, over
    the samples both score, in the input side's order (CRUXEval's input-output
    difficulty correlation)."""
    shared = [i for i in input_scored if i in output_scored]
    if len(shared) < 2:
        raise InputError("the input-output correlation needs at least 2 samples scored in "
                         "both modes")
    x = np.array([sample_pass1(input_scored[i]) for i in shared])
    y = np.array([sample_pass1(output_scored[i]) for i in shared])
    return _measure("input-output pass@1 correlation", pearson(x, y, resamples, seed=seed),
                    len(shared))


def load_scored(path: str | Path) -> dict[str, list[bool]]:
    """``raw_scored_generations`` of an official scored file (``score-cruxeval --out``, or
    the harness's own), checked: an object of sample id → list of booleans."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"scored file not found: {path}")
    try:
        data = json.loads(read_utf8(path))
    except ValueError as exc:
        raise InputError(f"malformed scored file {path}: {exc}") from None
    scored = data.get("raw_scored_generations") if isinstance(data, dict) else None
    if not isinstance(scored, dict) or not all(
            isinstance(v, list) and v and all(isinstance(b, bool) for b in v)
            for v in scored.values()):
        raise InputError(f"{path}: not an official scored file (raw_scored_generations must "
                         "map sample ids to non-empty lists of true/false)")
    return scored


def measure_rows(measures: list[Measure]) -> list[tuple[str, object]]:
    """Item/value rows: each measure's value, ``ci_low``, ``ci_high`` and ``n`` on rows of
    their own, so a CSV cell holds one number."""
    rows: list[tuple[str, object]] = []
    for m in measures:
        rows += [(m.name, m.value), (f"{m.name} ci_low", m.ci_low),
                 (f"{m.name} ci_high", m.ci_high), (f"{m.name} n", m.n)]
    return rows
