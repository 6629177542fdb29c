"""Candidate generation: ask a model for short functions that use a named method.

The CRUXEval recipe (Gu et al. 2024, §3.1): prompt a model with the name of a standard
library method and two few-shot examples drawn from a pool, and ask for a function that
uses the method plus a few test inputs. Generation ``i`` of seed ``s`` is fixed by
``(s, i)`` alone: its method is the ``i``-th of a seeded permutation of the methods (so
any ``n`` covers the methods evenly) and its two examples are drawn by a
``random.Random`` seeded with ``"s:i"``. Growing ``--n`` therefore extends a run
rather than changing it.

Every request and response goes to a log (JSONL, one line per response, appended and
flushed batch by batch), the record of what was asked and said. The run is resumable
like ``steptrace predict``: a generation logged without an error is not asked again;
one logged with an error is asked again (its newest line wins). The candidates file,
a corpus ``steptrace trace`` reads, is rebuilt from the log at the end of every run
(engine/benchmark/_candidates.py parses the responses); its records are marked
``model_written``, so ``trace`` runs them in job isolation even when asked for batch.
"""

from __future__ import annotations

import json
import random
import string
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

from steptrace.benchmark._candidates import ParseReport, write_candidates
from steptrace.predictions._predict import (PredictError, PredictOptions, Prediction,
                                            RequestCounter, RequestRun, Task)
from steptrace.benchmark._log import drop_partial_line, log_records
from steptrace.corpus._text import decode_text
from steptrace.errors import InputError

GENERATE_KIND = "generate"
PLACEHOLDERS = ("examples", "method")
BUILTIN_TYPES = (str, list, dict)


class GenerateError(InputError):
    """Bad generation settings: a method list, few-shot pool or template that cannot be used,
    or a log written with other settings."""


def builtin_methods() -> list[str]:
    """Every public (non-dunder) method of str, list and dict, as ``type.method``."""
    return [f"{kind.__name__}.{name}" for kind in BUILTIN_TYPES
            for name in sorted(dir(kind)) if not name.startswith("_")]


def read_methods(path: str | Path) -> list[str]:
    """Method names from a text file, one a line; blank lines and ``#`` comments skipped."""
    lines = _read_text(path, "methods file").splitlines()
    names = [line.split("#", 1)[0].strip() for line in lines]
    return [name for name in names if name]


@dataclass(frozen=True)
class FewShot:
    """One example of the pool: a function using ``method`` and its test inputs."""

    id: str
    method: str
    code: str
    inputs: tuple[str, ...]

    def render(self) -> str:
        tests = "\n".join(f"assert f({text}) == ??" for text in self.inputs)
        return (f"[TASK]\n{self.method}\n[/TASK]\n[PYTHON]\n{self.code.rstrip()}\n[/PYTHON]\n"
                f"[TEST]\n{tests}\n[/TEST]\n")


def default_fewshot_path() -> Path:
    return Path(str(resources.files("steptrace.benchmark") / "data" / "generate_fewshot.jsonl"))


def default_template_path() -> Path:
    return Path(str(resources.files("steptrace.benchmark") / "prompts" / "generate.txt"))


def load_fewshot(path: str | Path) -> list[FewShot]:
    """The few-shot pool: JSONL of ``{"id", "method", "code", "inputs": [...]}``; at least
    two examples (each prompt shows two)."""
    pool: list[FewShot] = []
    for number, line in enumerate(_read_text(path, "few-shot pool").split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GenerateError(f"{where}: not valid JSON ({exc.msg})") from None
        pool.append(_fewshot(record, where))
    if len(pool) < 2:
        raise GenerateError(f"few-shot pool {path} needs at least 2 examples, has {len(pool)}")
    ids = [shot.id for shot in pool]
    if len(set(ids)) != len(ids):
        raise GenerateError(f"few-shot pool {path}: example ids must be unique")
    return pool


def _fewshot(record: object, where: str) -> FewShot:
    if not isinstance(record, dict):
        raise GenerateError(f"{where}: an example must be a JSON object")
    for name in ("id", "method", "code"):
        if not isinstance(record.get(name), str) or not record[name].strip():
            raise GenerateError(f"{where}: field {name!r} must be a non-empty string")
    inputs = record.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise GenerateError(f"{where}: 'inputs' must be a non-empty list of strings")
    return FewShot(record["id"], record["method"], record["code"], tuple(inputs))


def load_template(path: str | Path) -> string.Template:
    """The prompt template: ``$examples`` (the two rendered examples) and ``$method``."""
    template = string.Template(_read_text(path, "prompt template"))
    if not template.is_valid():
        raise GenerateError(f"template {path}: a '$' that is not a placeholder (write $$ for '$')")
    used = set(template.get_identifiers())
    unknown = sorted(used - set(PLACEHOLDERS))
    if unknown:
        raise GenerateError(f"template {path}: unknown placeholder ${unknown[0]} "
                            f"(known: {', '.join('$' + p for p in PLACEHOLDERS)})")
    missing = [p for p in PLACEHOLDERS if p not in used]
    if missing:
        raise GenerateError(f"template {path}: missing placeholder ${missing[0]}")
    return template


def _read_text(path: str | Path, what: str) -> str:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise GenerateError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise GenerateError(f"cannot read {what} {path}: {exc}") from None
    return decode_text(data, path)  # NotUtf8Error names the file, line and byte


# ---------------------------------------------------------------- the plan
@dataclass(frozen=True)
class GenerationRequest:
    """Generation ``index`` of ``seed``: its method, its two examples and its prompt."""

    gen_id: str
    index: int
    method: str
    fewshot: tuple[str, ...]
    prompt: str


def plan(n: int, seed: int, methods: list[str], pool: list[FewShot],
         template: string.Template) -> list[GenerationRequest]:
    """The first ``n`` generations of ``seed`` (see the module docstring)."""
    if not methods:
        raise GenerateError("no methods to prompt with")
    if len(set(methods)) != len(methods):
        raise GenerateError("the method list names a method twice")
    order = list(methods)
    random.Random(f"{seed}:methods").shuffle(order)
    requests = []
    for index in range(n):
        method = order[index % len(order)]
        shots = random.Random(f"{seed}:{index}").sample(pool, 2)
        prompt = template.substitute(examples="\n".join(shot.render() for shot in shots),
                                     method=method)
        requests.append(GenerationRequest(f"gen-{seed}-{index:06d}", index, method,
                                          tuple(shot.id for shot in shots), prompt))
    return requests


# ---------------------------------------------------------------- the log
def read_log(path: Path) -> dict[str, dict]:
    """The newest logged line per generation id (the log's reading: _log.py)."""
    return {record["gen_id"]: record for record in log_records(
        path, lambda r: isinstance(r, dict) and isinstance(r.get("gen_id"), str),
        GenerateError, "generation log")}


class GenerationLog:
    """The append-only log; ``write`` is RequestRun's sink (one flush per batch)."""

    def __init__(self, path: Path, requests: dict[str, GenerationRequest]) -> None:
        self.path = path
        self.requests = requests
        drop_partial_line(path)

    def write(self, rows: list[Prediction]) -> None:
        lines = [json.dumps(self._record(row), ensure_ascii=False) + "\n" for row in rows]
        with self.path.open("a", encoding="utf-8") as log:
            log.write("".join(lines))

    def _record(self, row: Prediction) -> dict:
        request = self.requests[row.task_id]
        return {"gen_id": request.gen_id, "index": request.index, "method": request.method,
                "fewshot": list(request.fewshot), "prompt": request.prompt, "model": row.model,
                "raw_text": row.raw_text, "error": row.error, "finish_reason": row.finish_reason,
                "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
                "latency_ms": row.latency_ms, "created_at": row.created_at.isoformat()}


def log_path_for(out: Path) -> Path:
    """``candidates.jsonl`` → ``candidates.log.jsonl``."""
    return out.with_name(out.name.removesuffix(".jsonl") + ".log.jsonl")


# ---------------------------------------------------------------- running
@dataclass(frozen=True)
class GenerateOptions:
    n: int
    seed: int = 0
    methods: tuple[str, ...] = ()          # empty: builtin_methods()
    fewshot_path: Path | None = None       # None: the bundled pool
    template_path: Path | None = None      # None: the bundled template
    log_path: Path | None = None           # None: log_path_for(out)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise GenerateError("n must be at least 1")


@dataclass
class GenerateSummary(RequestCounter):
    out: str
    log: str
    model: str
    generations: int
    methods: int
    skipped: int = 0       # logged earlier without an error
    requests: int = 0      # asked in this run and logged
    errors: int = 0        # of those, failed after the client's retries
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    parsed: ParseReport = field(default_factory=ParseReport)

    def as_dict(self) -> dict:
        return asdict(self)

    def as_rows(self) -> list[tuple[str, object]]:
        rows = [("candidates file", self.out), ("log", self.log), ("model", self.model),
                ("generations", self.generations), ("methods", self.methods),
                ("already logged (skipped)", self.skipped), ("requests made", self.requests),
                ("errors", self.errors), ("prompt tokens", self.prompt_tokens),
                ("completion tokens", self.completion_tokens),
                ("seconds", f"{self.seconds:.2f}")]
        return rows + self.parsed.as_rows()


def generate(out: str | Path, options: GenerateOptions, request: PredictOptions,
             progress: Callable[[int, int], None] | None = None) -> GenerateSummary:
    """Ask ``request.model`` for the first ``options.n`` generations not yet logged
    without an error, log the responses, and rebuild the candidates file ``out``."""
    started = time.perf_counter()
    out = Path(out)
    log_path = options.log_path or log_path_for(out)
    for path in (out, log_path):
        if not path.parent.is_dir():
            raise GenerateError(f"cannot write {path}: no directory {path.parent}")
    methods = list(options.methods) or builtin_methods()
    pool = load_fewshot(options.fewshot_path or default_fewshot_path())
    template = load_template(options.template_path or default_template_path())
    requests = plan(options.n, options.seed, methods, pool, template)
    logged = read_log(log_path)
    _check_same_plan(requests, logged, log_path, request.model)
    todo = [r for r in requests if r.gen_id not in logged or logged[r.gen_id].get("error")]
    summary = GenerateSummary(str(out), str(log_path), request.model, len(requests),
                              len(set(r.method for r in requests)),
                              skipped=len(requests) - len(todo))
    by_id = {r.gen_id: r for r in requests}
    log = GenerationLog(log_path, by_id)
    tasks = [(Task(r.gen_id, GENERATE_KIND, r.prompt), 0) for r in todo]
    run = RequestRun(request, log, summary, progress or (lambda done, total: None),
                     extract=lambda text, task: None)
    fatal = run.run(tasks)
    summary.parsed = write_candidates(read_log(log_path), requests, out)
    summary.seconds = time.perf_counter() - started
    if fatal is not None:
        raise PredictError(f"{fatal}; stopped with {summary.requests} new generations logged "
                           "(run again to resume)")
    return summary


def _check_same_plan(requests: list[GenerationRequest], logged: dict[str, dict],
                     log_path: Path, model: str) -> None:
    """A log is resumed only by the settings that wrote it: the same id must mean the
    same prompt to the same model, or the candidates would mix two plans."""
    for request in requests:
        record = logged.get(request.gen_id)
        if record is None:
            continue
        if record.get("prompt") != request.prompt:
            raise GenerateError(
                f"{log_path} holds {request.gen_id} with another prompt: it was written with "
                "another method list, few-shot pool or template; use another --out "
                "(or --log) for new settings")
        if record.get("model") != model:
            raise GenerateError(
                f"{log_path} holds {request.gen_id} from model {record.get('model')!r}, not "
                f"{model!r}; use another --out (or --log) for another model")
