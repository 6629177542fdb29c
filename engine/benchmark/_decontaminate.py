"""Cross-set decontamination (``steptrace dedupe RECORDS --against TRAINING``): the records
of a benchmark that a training set holds a copy of, by three criteria (CRUXEval §5.2's
weak and strong decontamination, and a near-duplicate rule):

* **exact**: the same source once line endings and trailing spaces are normalised
  (``exact_key`` of steptrace.benchmark._dedupe);
* **normalised**: the same syntax tree once bound identifiers are renamed by order of
  first appearance and literals replaced by their type (``near_key`` there): a renamed
  copy, or one with other literals;
* **near**: token n-gram Jaccard similarity at least ``threshold`` (default 0.5) between
  the two programs' ``renamed_tokens`` (steptrace.benchmark._overlap; n = ``ngram``,
  default 5): the set of the program's distinct n-grams against the training record's,
  ``|A ∩ B| / |A ∪ B|``. A copy with a statement added or a literal changed is near.

A record is matched by the first criterion that holds, in that order, to the first
training record (in file order) that meets it; for ``near``, the most similar training
record (the first of equals). The report lists every match (benchmark id, training id,
criterion, similarity) with the thresholds used; the decontaminated corpus is the
benchmark's other records, written as they were read.

Benchmark records need ``id`` and ``code``; training records need ``code`` (their ``id``
is optional: without one a record is named by its number among the file's records,
from 1).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from steptrace.benchmark._candidates import read_objects
from steptrace.benchmark._dedupe import exact_key, near_key, read_records
from steptrace.benchmark._overlap import ngrams, renamed_tokens
from steptrace.corpus._text import user_file
from steptrace.errors import InputError

EXACT, NORMALISED, NEAR = "exact", "normalised", "near"
CRITERIA = (EXACT, NORMALISED, NEAR)
DEFAULT_NGRAM = 5
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class Match:
    id: str            # the benchmark record's id
    training_id: str   # the training record it copies
    criterion: str     # exact, normalised or near
    similarity: float  # n-gram Jaccard similarity (4 decimals) of the two programs


@dataclass
class DecontaminationReport:
    against: str
    ngram: int
    threshold: float
    records_in: int = 0
    training_records: int = 0
    records_out: int = 0
    matches: list[Match] = field(default_factory=list)

    def count(self, criterion: str) -> int:
        return sum(1 for match in self.matches if match.criterion == criterion)

    def as_rows(self) -> list[tuple[str, object]]:
        return [("benchmark records", self.records_in),
                ("training records", self.training_records),
                ("exact copies removed", self.count(EXACT)),
                ("normalised copies removed", self.count(NORMALISED)),
                (f"near copies removed (Jaccard of {self.ngram}-grams >= {self.threshold})",
                 self.count(NEAR)),
                ("records out", self.records_out)]

    def match_rows(self) -> list[tuple]:
        return [(m.id, m.training_id, m.criterion, f"{m.similarity:.4f}") for m in self.matches]

    def as_dict(self) -> dict:
        return {"against": self.against,
                "thresholds": {"ngram": self.ngram, "near_jaccard": self.threshold},
                "records_in": self.records_in, "training_records": self.training_records,
                "records_out": self.records_out,
                "removed": {criterion: self.count(criterion) for criterion in CRITERIA},
                "matches": [asdict(m) for m in self.matches]}


def read_training(path: str | Path) -> list[dict]:
    """The training set's records (each with a string ``code``)."""
    return read_objects(path, "training set", lambda r: isinstance(r.get("code"), str),
                        "a training record needs a string 'code'")


def decontaminate_records(records: list[dict], training: list[dict], *,
                          ngram: int = DEFAULT_NGRAM, threshold: float = DEFAULT_THRESHOLD,
                          against: str = "<memory>") -> tuple[list[dict], DecontaminationReport]:
    """The benchmark ``records`` no ``training`` record copies, and the report (see the
    module docstring)."""
    if ngram < 1:
        raise InputError("--ngram must be at least 1")
    if not 0 < threshold <= 1:
        raise InputError("--threshold must be in (0, 1]")
    report = DecontaminationReport(against, ngram, threshold, records_in=len(records),
                                   training_records=len(training))
    names = [str(t["id"]) if t.get("id") is not None else str(number)
             for number, t in enumerate(training, start=1)]
    first: dict[tuple[str, str], int] = {}
    grams: list[set] = []
    index: dict[tuple[str, ...], list[int]] = {}
    for number, record in enumerate(training):
        code = record["code"]
        first.setdefault((EXACT, exact_key(code)), number)
        first.setdefault((NORMALISED, near_key(code)), number)
        own = ngrams(renamed_tokens(code), ngram)
        grams.append(own)
        for gram in own:
            index.setdefault(gram, []).append(number)
    kept = []
    for record in records:
        code = record["code"]
        own = ngrams(renamed_tokens(code), ngram)
        match = None
        for criterion, key in ((EXACT, exact_key(code)), (NORMALISED, near_key(code))):
            if (criterion, key) in first:
                match = (criterion, first[(criterion, key)])
                break
        shared = Counter(number for gram in own for number in index.get(gram, ()))
        if match is None and shared:
            best = min(shared, key=lambda n: (-_jaccard(shared[n], own, grams[n]), n))
            if _jaccard(shared[best], own, grams[best]) >= threshold:
                match = (NEAR, best)
        if match is None:
            kept.append(record)
            continue
        criterion, number = match
        similarity = _jaccard(shared.get(number, 0), own, grams[number])
        report.matches.append(Match(str(record["id"]), names[number], criterion,
                                    round(similarity, 4)))
    report.records_out = len(kept)
    return kept, report


def _jaccard(shared: int, a: set, b: set) -> float:
    union = len(a) + len(b) - shared
    return shared / union if union else 1.0


def decontaminate_file(path: str | Path, against: str | Path, out: str | Path, *,
                       ngram: int = DEFAULT_NGRAM,
                       threshold: float = DEFAULT_THRESHOLD) -> DecontaminationReport:
    """``decontaminate_records`` from a benchmark JSONL file against a training JSONL file;
    the kept records written to ``out`` (JSONL)."""
    records = read_records(path)
    training = read_training(against)
    kept, report = decontaminate_records(records, training, ngram=ngram, threshold=threshold,
                                         against=str(against))
    with user_file(out):
        Path(out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept),
                             encoding="utf-8")
    return report
