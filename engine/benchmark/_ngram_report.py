"""The n-gram overlap report (``steptrace overlap CORPUS --dump TEXT``): how much of each
program's code a text dump (training data, a crawl) holds.

Per corpus record (program), the share of its distinct token n-grams (tokens: see
steptrace.benchmark._overlap; identifiers kept as they are) that occur anywhere in the
dump's token stream. ``n`` defaults to 13, GPT-3's decontamination n-gram length (Brown
et al. 2020, appendix C); code tokens include punctuation, so 13 code tokens are about
one line of code, shorter than GPT-3's 13 words. A program of fewer than ``n`` tokens has
no n-gram: its share is empty (None).

The dump is streamed (1 MiB at a time, split between tokens), never held whole: memory is
the corpus's n-grams. Its bytes are read as UTF-8, a bad byte replaced (a dump may be any
text). The corpus is any corpus ``steptrace trace`` reads; a program run on several
inputs is one record, named by its ``sample_id``.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from steptrace.benchmark._overlap import stream_ngrams, tokens
from steptrace.corpus._formats import CorpusLike, iter_corpus
from steptrace.errors import InputError

DEFAULT_N = 13
CHUNK = 1 << 20
MAX_WORD = 16 << 20  # characters of one word held before it is cut (a dump with no boundary)


@dataclass(frozen=True)
class RecordOverlap:
    id: str
    ngrams: int          # distinct n-grams of the program's code
    found: int           # of them, those the dump holds
    share: float | None  # found / ngrams (4 decimals); None without n-grams


@dataclass
class OverlapReport:
    corpus: str
    dump: str
    n: int
    records: list[RecordOverlap] = field(default_factory=list)
    dump_ngrams: int = 0  # n-grams of the dump (with repeats)
    corpus_errors: list[str] = field(default_factory=list)

    COLUMNS = ("id", "ngrams", "found", "share")

    def rows(self) -> list[tuple]:
        return [(r.id, r.ngrams, r.found, "" if r.share is None else f"{r.share:.4f}")
                for r in self.records]

    def as_dict(self) -> dict:
        total = sum(r.ngrams for r in self.records)
        found = sum(r.found for r in self.records)
        return {"corpus": self.corpus, "dump": self.dump, "n": self.n,
                "dump_ngrams": self.dump_ngrams,
                "records": len(self.records),
                "records_with_overlap": sum(1 for r in self.records if r.found),
                "share": round(found / total, 4) if total else None,
                "per_record": [r.__dict__ for r in self.records],
                "corpus_errors": self.corpus_errors}


def _programs(corpus: CorpusLike, errors: list[str]) -> list[tuple[str, str]]:
    """(sample id, code) per program of the corpus, in corpus order."""
    seen: dict[str, tuple[str, str]] = {}
    for item in iter_corpus(corpus):
        if isinstance(item, str):
            errors.append(item)
            continue
        program = item.program
        seen.setdefault(program.key, (program.sample_id, program.code))
    return list(seen.values())


_LAST_BOUNDARY = re.compile(r"[^A-Za-z0-9_][A-Za-z0-9_]*\Z")


def _chunks(handle: BinaryIO) -> Iterator[str]:
    """The dump's text in pieces that end after a character that is not a letter, digit
    or underscore: no token runs across one (tokens are runs of those, or one other
    character), so no token is split. A run of them longer than ``MAX_WORD`` characters
    (no boundary at all) is split there, so memory stays bounded whatever the dump."""
    rest = ""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may
    while True:                                                        # span two reads
        data = handle.read(CHUNK)
        if not data:
            rest += decoder.decode(b"", final=True)
            break
        text = rest + decoder.decode(data)
        found = _LAST_BOUNDARY.search(text)
        if found is None:
            if len(text) <= MAX_WORD:
                rest = text
                continue
            cut = len(text)
        else:
            cut = found.start() + 1
        yield text[:cut]
        rest = text[cut:]
    if rest:
        yield rest


def ngram_overlap(corpus: CorpusLike, dump: str | Path, n: int = DEFAULT_N) -> OverlapReport:
    """The overlap report of ``corpus`` against the text file ``dump`` (see the module
    docstring)."""
    if n < 1:
        raise InputError("--n must be at least 1")
    dump = Path(dump)
    if not dump.is_file():
        raise InputError(f"dump not found (or not a file): {dump}")
    report = OverlapReport(str(corpus), str(dump), n)
    programs = _programs(corpus, report.corpus_errors)
    grams: list[set[tuple[str, ...]]] = []
    wanted: set[tuple[str, ...]] = set()
    for _, code in programs:
        items = tokens(code)
        own = {tuple(items[i:i + n]) for i in range(len(items) - n + 1)}
        grams.append(own)
        wanted |= own
    found: set[tuple[str, ...]] = set()
    try:
        with open(dump, "rb") as handle:
            for gram in stream_ngrams(_chunks(handle), n):
                report.dump_ngrams += 1
                if gram in wanted:
                    found.add(gram)
    except OSError as exc:
        raise InputError(f"cannot read dump {dump}: {exc.strerror or exc}") from exc
    for (sample_id, _), own in zip(programs, grams):
        hits = len(own & found)
        report.records.append(RecordOverlap(sample_id, len(own), hits,
                                            round(hits / len(own), 4) if own else None))
    return report


