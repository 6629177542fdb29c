"""Candidates: the functions and test inputs parsed out of generation responses.

A response is expected in the shape the generation prompt asks for (engine/tasks/prompts/
generate.txt): the function between ``[PYTHON]`` and ``[/PYTHON]`` (a Markdown
```` ```python ```` fence is accepted too) and test calls ``assert f(...) == ??``, one a
line, between ``[TEST]`` and ``[/TEST]`` (or anywhere after the function). Only the
shape is checked here: whether the code compiles, runs, is deterministic, or uses
floats is for the sandbox and the filters to say, from real executions.

The candidates file is a corpus (README, "Corpus formats"): one JSON object a line with
``id`` (the generation id), ``code``, ``entry`` ``f``, ``inputs`` (the text inside each
``f(...)``, duplicates dropped), for the benchmark steps ``method`` and ``fewshot``, and
``model_written`` (true: a model wrote it, so ``trace`` never runs it in batch isolation).
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol

from steptrace.corpus._meta import MODEL_WRITTEN
from steptrace.corpus._text import user_file, utf8_lines
from steptrace.errors import InputError

ENTRY = "f"
_TAGGED_CODE = re.compile(r"\[PYTHON\]\s*\n(.*?)\[/PYTHON\]", re.DOTALL)
_FENCED_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_TESTS = re.compile(r"\[TEST\](.*?)(?:\[/TEST\]|$)", re.DOTALL)
_DEFINES_ENTRY = re.compile(rf"^def\s+{ENTRY}\s*\(", re.MULTILINE)
_UNKNOWN_RESULT = re.compile(r"\s*==\s*\?\?\s*$")

# Why a response gave no candidate, in the order they are checked.
REQUEST_FAILED = "request failed"
NOT_ASKED = "not asked yet"
NO_CODE = "no code block"
NO_ENTRY = f"no top-level def {ENTRY}"
NO_INPUTS = "no test input"
REASONS = (NOT_ASKED, REQUEST_FAILED, NO_CODE, NO_ENTRY, NO_INPUTS)


@dataclass
class ParseReport:
    """What the responses gave: candidates, their inputs, and why the rest gave none."""

    generations: int = 0
    candidates: int = 0
    inputs: int = 0
    duplicate_inputs: int = 0    # repeated test calls of one function, dropped
    unparsed_tests: int = 0      # test lines that were not a call of f, skipped
    rejected: dict[str, int] = field(default_factory=dict)

    def as_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            ("candidates (functions)", self.candidates), ("test inputs", self.inputs),
            ("duplicate test inputs dropped", self.duplicate_inputs),
            ("unparsed test lines skipped", self.unparsed_tests)]
        return rows + [(f"  no candidate: {reason}", self.rejected.get(reason, 0))
                       for reason in REASONS if self.rejected.get(reason)]


@dataclass(frozen=True)
class Candidate:
    id: str
    method: str
    fewshot: tuple[str, ...]
    code: str
    inputs: tuple[str, ...]
    duplicate_inputs: int = 0   # repeated test calls, dropped
    unparsed_tests: int = 0     # test lines that were not a call of f, skipped

    def record(self) -> dict:
        return {"id": self.id, "method": self.method, "fewshot": list(self.fewshot),
                "code": self.code, "entry": ENTRY, "inputs": list(self.inputs),
                MODEL_WRITTEN: True}


class Planned(Protocol):
    gen_id: str
    method: str
    fewshot: tuple[str, ...]


def code_block(text: str) -> str | None:
    """The function's code: the first [PYTHON] block, else the first fenced block."""
    found = _TAGGED_CODE.search(text) or _FENCED_CODE.search(text)
    if found is None:
        return None
    code = found.group(1).strip("\n")
    return code + "\n" if code.strip() else None


def test_inputs(text: str, code: str) -> tuple[list[str], int]:
    """The argument text of each ``assert f(...)`` test line, and how many test lines
    were not such a call. Lines come from the [TEST] block, else from everything after
    the code."""
    block = _TESTS.search(text)
    lines = block.group(1) if block else text[text.find(code) + len(code):]
    inputs, unparsed = [], 0
    for line in lines.splitlines():
        line = line.strip()
        if not line.startswith(("assert", f"{ENTRY}(")):
            continue
        found = call_arguments(_UNKNOWN_RESULT.sub("", line))
        if found is None:
            unparsed += 1
        else:
            inputs.append(found)
    return inputs, unparsed


def call_arguments(line: str) -> str | None:
    """``'a', 2`` for ``assert f('a', 2)`` or ``assert f('a', 2) == 'x'`` or
    ``f('a', 2)``; None when the line is not a call of f with arguments."""
    try:
        tree = ast.parse(line)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    expression = node.test if isinstance(node, ast.Assert) else getattr(node, "value", None)
    if isinstance(expression, ast.Compare):
        expression = expression.left
    if not (isinstance(expression, ast.Call) and isinstance(expression.func, ast.Name)
            and expression.func.id == ENTRY and (expression.args or expression.keywords)):
        return None
    segment = ast.get_source_segment(line, expression) or ""
    inner = segment[segment.index("(") + 1:-1].strip()
    return inner or None


def parse_response(text: str | None, planned: Planned) -> Candidate | str:
    """The candidate in one response, or the reason (one of REASONS) it has none."""
    code = code_block(text or "")
    if code is None:
        return NO_CODE
    if not _DEFINES_ENTRY.search(code):
        return NO_ENTRY
    inputs, unparsed = test_inputs(text or "", code.rstrip("\n"))
    unique = tuple(dict.fromkeys(inputs))
    if not unique:
        return NO_INPUTS
    return Candidate(planned.gen_id, planned.method, tuple(planned.fewshot), code, unique,
                     len(inputs) - len(unique), unparsed)


def write_candidates(logged: dict[str, dict], planned: Iterable[Planned],
                     out: str | Path) -> ParseReport:
    """Parse the newest logged response of every planned generation into ``out`` (written
    whole, then renamed into place: a crash never leaves half a corpus)."""
    report = ParseReport()
    rejected: Counter[str] = Counter()
    lines = []
    for plan in planned:
        report.generations += 1
        record = logged.get(plan.gen_id)
        if record is None or record.get("error"):
            rejected[NOT_ASKED if record is None else REQUEST_FAILED] += 1
            continue
        found = parse_response(record.get("raw_text"), plan)
        if isinstance(found, str):
            rejected[found] += 1
            continue
        report.candidates += 1
        report.inputs += len(found.inputs)
        report.duplicate_inputs += found.duplicate_inputs
        report.unparsed_tests += found.unparsed_tests
        lines.append(json.dumps(found.record(), ensure_ascii=False) + "\n")
    report.rejected = dict(rejected)
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    with user_file(out):
        partial.write_text("".join(lines), encoding="utf-8")
        os.replace(partial, out)
    return report


def read_objects(path: str | Path, what: str, valid: Callable[[dict], bool],
                 needs: str) -> list[dict]:
    """The JSON objects of a JSONL file, one a line, each passing ``valid``; ValueError
    naming the file and line of the first that does not (``needs`` says what it lacks)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} not found: {path}")
    records = []
    for number, line in enumerate(utf8_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not (isinstance(record, dict) and valid(record)):
            raise InputError(f"{path}:{number}: {needs}")
        records.append(record)
    return records


def read_candidates(path: str | Path) -> dict[str, dict]:
    """The candidates file by id (what ``select`` needs: each function's method)."""
    records = read_objects(path, "candidates file", lambda r: isinstance(r.get("id"), str),
                           "a candidate needs a string 'id'")
    return {record["id"]: record for record in records}
