"""Selection: sample the benchmark from the deduplicated candidates, balanced over methods,
and write it in CRUXEval's JSONL format.

A benchmark sample is one function with one input (CRUXEval: 800 distinct functions).
Each function's input is drawn from its surviving runs; functions are then taken round
by round, one per method a round, with the methods in a seeded order, until ``n`` are
chosen. Every method with enough functions gets ``n / methods`` of them (one more or
less); a method that runs out leaves its share to the others ("balanced where
possible"). Same inputs, same seed: same benchmark.

Outputs: the benchmark (``id`` ``sample_<i>``, ``code``, ``input``, ``output``: exactly
the four fields CRUXEval's harness reads; ``output`` is the traced run's return value)
and a sources file beside it saying which candidate and method each sample came from.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from steptrace.benchmark._candidates import read_candidates
from steptrace.benchmark._dedupe import function_id, read_records
from steptrace.errors import InputError
from steptrace.corpus._text import user_file

UNKNOWN_METHOD = "(unknown)"


@dataclass(frozen=True)
class Sample:
    id: str
    source_id: str
    method: str
    code: str
    input: str
    output: str

    def cruxeval(self) -> dict:
        return {"id": self.id, "code": self.code, "input": self.input, "output": self.output}

    def source(self) -> dict:
        return {"id": self.id, "source_id": self.source_id, "method": self.method}


@dataclass
class SelectionReport:
    requested: int
    seed: int
    records: int = 0
    without_output: int = 0            # runs with no stored return value, not eligible
    functions: int = 0                 # eligible functions
    available: dict[str, int] = field(default_factory=dict)   # method → functions
    selected: dict[str, int] = field(default_factory=dict)    # method → samples

    @property
    def chosen(self) -> int:
        return sum(self.selected.values())

    def as_rows(self) -> list[tuple[str, int, int]]:
        rows = [(method, self.available[method], self.selected.get(method, 0))
                for method in sorted(self.available)]
        return rows + [("total", self.functions, self.chosen)]

    def as_dict(self) -> dict:
        return asdict(self) | {"chosen": self.chosen}


def sources_path_for(out: Path) -> Path:
    """``benchmark.jsonl`` → ``benchmark.sources.jsonl``."""
    return out.with_name(out.name.removesuffix(".jsonl") + ".sources.jsonl")


def eligible_functions(records: list[dict], methods: dict[str, str],
                       report: SelectionReport) -> dict[str, list[tuple[str, dict]]]:
    """method → [(function id, its runs)], runs without an output left out."""
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for record in records:
        if not isinstance(record.get("output"), str) or not isinstance(record.get("input"), str):
            report.without_output += 1
            continue
        runs[function_id(record)].append(record)
    by_method: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for (fid, _), group in runs.items():
        by_method[methods.get(fid, UNKNOWN_METHOD)].append((fid, group))
    return by_method


def balanced_order(by_method: dict[str, list], n: int, seed: int) -> list[tuple[str, object]]:
    """Up to ``n`` (method, item) pairs, round-robin over the methods in a seeded order,
    each method's items in a seeded order."""
    queues = {}
    for method in sorted(by_method):
        items = list(by_method[method])
        random.Random(f"{seed}:{method}").shuffle(items)
        queues[method] = items
    methods = sorted(queues)
    random.Random(f"{seed}:methods").shuffle(methods)
    chosen: list[tuple[str, object]] = []
    depth = 0
    while len(chosen) < n and any(depth < len(queues[m]) for m in methods):
        for method in methods:
            if depth < len(queues[method]) and len(chosen) < n:
                chosen.append((method, queues[method][depth]))
        depth += 1
    return chosen


def select_benchmark(records: list[dict], methods: dict[str, str], n: int, seed: int,
                     allow_fewer: bool = False) -> tuple[list[Sample], SelectionReport]:
    """Choose ``n`` samples (see the module docstring). Fewer functions than ``n`` is an
    error unless ``allow_fewer``: a smaller benchmark than asked for must be a choice."""
    if n < 1:
        raise InputError("n must be at least 1")
    report = SelectionReport(requested=n, seed=seed, records=len(records))
    by_method = eligible_functions(records, methods, report)
    report.available = {m: len(functions) for m, functions in by_method.items()}
    report.functions = sum(report.available.values())
    if report.functions < n and not allow_fewer:
        raise InputError(f"only {report.functions} eligible functions for a benchmark of {n} "
                         "(generate more candidates, or pass --allow-fewer)")
    samples = []
    for index, (method, (fid, group)) in enumerate(balanced_order(by_method, n, seed)):
        runs = sorted(group, key=lambda r: r["input"])
        run = random.Random(f"{seed}:{fid}").choice(runs)
        samples.append(Sample(f"sample_{index}", fid, method, run["code"], run["input"],
                              run["output"]))
    report.selected = dict(Counter(sample.method for sample in samples))
    return samples, report


def select_file(path: str | Path, out: str | Path, n: int, seed: int,
                candidates: str | Path | None = None,
                allow_fewer: bool = False) -> SelectionReport:
    """Select from a records file (``steptrace dedupe`` output) into ``out`` and its
    sources file; methods come from the candidates file when given."""
    methods = ({cid: str(record.get("method") or UNKNOWN_METHOD)
                for cid, record in read_candidates(candidates).items()} if candidates else {})
    samples, report = select_benchmark(read_records(path), methods, n, seed, allow_fewer)
    out = Path(out)
    _write_jsonl(out, [sample.cruxeval() for sample in samples])
    _write_jsonl(sources_path_for(out), [sample.source() for sample in samples])
    return report


def _write_jsonl(path: Path, records: list[dict]) -> None:
    with user_file(path):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                        encoding="utf-8")
