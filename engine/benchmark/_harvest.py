"""Harvesting: real functions from installed packages as a corpus, inputs from a model.

EXE-style (Execution-based evaluation on real code): the functions are the packages' own,
found by static analysis of their installed sources, and a model writes the inputs.

1. **Scan** (``steptrace.benchmark._scan``). The packages of a :class:`PackageLock` (a
   WASI guest's, a native lock's, or one made for a local source:
   ``steptrace.benchmark._source``) are
   installed into a temporary directory (pip, exactly the lock) and parsed, never
   imported: functions found by their public names (re-exports followed), each once,
   kept when a model can call them with literals and they do no I/O, randomness or time
   and are no entry point; every other one rejected with a counted reason.
2. **Contamination** (``steptrace.benchmark._releases``): each function's package,
   version, module, source digest and release upload time go into its record's metadata
   (``--where "meta.released > ..."``); with ``since`` only the functions new or
   changed since an older release are kept.
3. **Inputs** (:func:`ask_inputs`). One prompt per kept function (its signature and
   docstring; ``prompts/harvest.txt``) asks for N calls, one a line, between ``[CALLS]``
   and ``[/CALLS]``. Requests go through predict's ``RequestRun`` with a JSONL log,
   resumable as ``steptrace generate`` is: a function logged without an error is not
   asked again. Each line is parsed with :mod:`ast` (:func:`parse_calls`): a call of the
   function (by its def name or its public name) whose arguments are literals only
   (``frozenset(<literal>)`` and ``set()`` too), that binds to its parameters and whose
   values satisfy their annotations (:func:`admitted`); the argument text
   (``ast.unparse``, so duplicates are found whatever the quoting) is an input.
4. **Checks** (``steptrace.benchmark._examples``): the inputs are traced into
   ``checks.duckdb`` and run twice more (the analysis, and the variant guest); only the
   deterministic examples whose exception, if any, is the function's own are kept.
5. :func:`harvest` writes ``corpus.jsonl`` (records of functions with at least one kept
   input, each ``model_written: "inputs"``), ``guest.lock`` (the lock with the modules as imports)
   and ``harvest.json`` (the counts, the reasons, the diversity), and traces the corpus
   into the store in job isolation. A kept run that raises is status ``exception``, the
   ``error`` task kind's answer.

The guest is the lock's: a WASI build, or for a native lock the native backend's jail
(its checks, its determinism variant and the final trace run there: the trace follows
the lock, ``steptrace.sandbox._backends.choose``).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

from steptrace.benchmark._annotations import conforms, describe
from steptrace.benchmark._diversity import diversity
from steptrace.benchmark._log import drop_partial_line, log_records
from steptrace.benchmark._scan import (NOT_IMPORTABLE, REASONS, Harvested, ScanReport,
                                       scan_site)
from steptrace.corpus._meta import INPUTS_ONLY, MODEL_WRITTEN
from steptrace.corpus._text import NotUtf8Error, decode_text
from steptrace.errors import InputError
from steptrace.predictions._predict import (PredictError, PredictOptions, Prediction,
                                            RequestCounter, RequestRun, Task)

HARVEST_KIND = "harvest"
__all__ = ["HarvestError", "HarvestOptions", "HarvestSummary", "Harvested", "REASONS",
           "ScanReport", "harvest", "parse_calls", "read_log", "scan_site"]


class HarvestError(InputError):
    """Bad harvest settings or files: a log written with other settings, a bad directory."""


# ---------------------------------------------------------------- inputs from a model
PLACEHOLDERS = ("id", "module", "entry", "signature", "doc", "n")
MAX_INPUT_CHARS = 2_000      # a longer argument text is not kept
_CALLS = re.compile(r"\[CALLS\](.*?)(?:\[/CALLS\]|$)", re.DOTALL)
_FENCE = re.compile(r"^\s*```")


def default_template_path() -> Path:
    return Path(str(resources.files("steptrace.benchmark") / "prompts" / "harvest.txt"))


def load_template(path: str | Path):
    """The prompt template: every one of :data:`PLACEHOLDERS`, nothing else."""
    import string
    try:
        text = decode_text(Path(path).read_bytes(), path)
    except FileNotFoundError:
        raise HarvestError(f"prompt template not found: {path}") from None
    except OSError as exc:
        raise HarvestError(f"cannot read prompt template {path}: {exc}") from None
    template = string.Template(text)
    if not template.is_valid():
        raise HarvestError(f"template {path}: a '$' that is not a placeholder (write $$ for '$')")
    used = set(template.get_identifiers())
    unknown = sorted(used - set(PLACEHOLDERS))
    if unknown:
        raise HarvestError(f"template {path}: unknown placeholder ${unknown[0]} "
                           f"(known: {', '.join('$' + p for p in PLACEHOLDERS)})")
    missing = [p for p in ("entry", "signature", "n") if p not in used]
    if missing:
        raise HarvestError(f"template {path}: missing placeholder ${missing[0]}")
    return template


def prompt_for(function: Harvested, n: int, template) -> str:
    doc = (f'Its docstring:\n\n"""\n{function.doc.strip()}\n"""' if function.doc
           else "It has no docstring.")
    return template.substitute(id=function.id, module=function.module, entry=function.entry,
                               signature=function.signature, doc=doc, n=n)


@dataclass
class CallReport:
    """What the responses' lines gave (summed over the functions)."""

    lines: int = 0          # non-empty lines in the [CALLS] blocks
    inputs: int = 0         # distinct valid calls kept
    duplicates: int = 0     # a call of the function given before
    not_a_call: int = 0     # no call of the function: prose, another function, bad syntax
    not_literal: int = 0    # an argument that is not a literal
    bad_arguments: int = 0  # the arguments do not bind to the parameters (or are too long)
    type_mismatch: int = 0  # an argument its parameter's annotation does not admit
    extra: int = 0          # valid calls past the N asked for


def parse_calls(text: str | None, function: Harvested, limit: int,
                report: CallReport | None = None) -> list[str]:
    """The distinct argument texts of the calls of ``function`` in a response (at most
    ``limit``): the lines between ``[CALLS]`` and ``[/CALLS]`` (the whole response
    without them; Markdown fences skipped), each ``entry(...)`` (or ``mod.entry(...)``)
    with literal arguments only that bind to the function's parameters."""
    report = report if report is not None else CallReport()
    found: list[str] = []
    if not text:
        return found
    block = _CALLS.search(text)
    for line in (block.group(1) if block else text).splitlines():
        line = line.strip()
        if not line or _FENCE.match(line):
            continue
        report.lines += 1
        verdict = _call_arguments(line, function)
        if verdict is None:
            report.not_a_call += 1
        elif verdict is _NOT_LITERAL:
            report.not_literal += 1
        elif verdict is _BAD_ARGUMENTS:
            report.bad_arguments += 1
        elif verdict is _MISMATCH:
            report.type_mismatch += 1
        elif verdict in found:
            report.duplicates += 1
        elif len(found) >= limit:
            report.extra += 1
        else:
            found.append(verdict)
    report.inputs += len(found)
    return found


_NOT_LITERAL = "<not literal>"
_BAD_ARGUMENTS = "<bad arguments>"
_MISMATCH = "<type mismatch>"


def _call_arguments(line: str, function: Harvested) -> str | None:
    line = line.removeprefix(">>>").strip().rstrip(";").strip().strip("`").strip()
    try:
        node = ast.parse(line, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(node, ast.Call):
        return None
    callee = node.func
    name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
    if name not in (function.entry, function.name):
        return None
    values = list(node.args) + [k.value for k in node.keywords]
    if (any(isinstance(a, ast.Starred) for a in node.args)
            or any(k.arg is None for k in node.keywords)
            or not all(_is_literal(v) for v in values)):
        return _NOT_LITERAL
    bound = _bind(function, node)
    if bound is None:
        return _BAD_ARGUMENTS
    text = ", ".join([ast.unparse(a) for a in node.args]
                     + [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords])
    if len(text) > MAX_INPUT_CHARS:
        return _BAD_ARGUMENTS
    return text if admitted(function, bound) is None else _MISMATCH


def admitted(function: Harvested, arguments: dict[str, object]) -> str | None:
    """Why the bound ``arguments`` (parameter name -> value) do not satisfy the
    function's annotations, or None: checked before anything runs, so a call the
    annotations forbid is never an example (its error would be the caller's)."""
    specs = dict(function.specs)
    for name, value in arguments.items():
        spec = specs.get(name)
        if spec is not None and not conforms(value, spec):
            return f"{name}={value!r:.80} is not {describe(spec)}"
    return None


def _is_literal(node: ast.expr) -> bool:
    """A literal (``ast.literal_eval`` takes it), ``set()`` or ``frozenset(<literal>)``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords
            and ((node.func.id == "set" and not node.args)
                 or (node.func.id == "frozenset" and len(node.args) <= 1
                     and all(_is_literal(a) for a in node.args)))):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _is_literal(k) for k in node.keys) and all(
            _is_literal(v) for v in node.values)
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _bind(function: Harvested, call: ast.Call) -> dict[str, object] | None:
    """The call's arguments by parameter name (their values: the literals evaluated), or
    None when they do not bind or a value cannot be made (``{[1]}`` raises a TypeError
    before the function starts: a bad call, never an input)."""
    kinds = {"positional": inspect.Parameter.POSITIONAL_ONLY,
             "either": inspect.Parameter.POSITIONAL_OR_KEYWORD,
             "keyword": inspect.Parameter.KEYWORD_ONLY}
    keywords = [k.arg for k in call.keywords]
    if len(set(keywords)) != len(keywords):
        return None
    try:
        signature = inspect.Signature([
            inspect.Parameter(name, kinds[kind], default=0 if has_default
                              else inspect.Parameter.empty)
            for name, kind, has_default in function.params])
        signature.bind(*range(len(call.args)), **{k: 0 for k in keywords})
    except (TypeError, ValueError):
        return None
    try:
        values = [_value(a) for a in call.args]
        named = {k.arg: _value(k.value) for k in call.keywords}
    except (TypeError, ValueError, MemoryError, RecursionError):
        return None
    return dict(signature.bind(*values, **named).arguments)


def _value(node: ast.expr) -> object:
    """A literal argument's value (``set()`` and ``frozenset(...)`` too)."""
    if isinstance(node, ast.Call):
        return set() if node.func.id == "set" else frozenset(
            _value(node.args[0]) if node.args else ())
    if isinstance(node, ast.List):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e) for e in node.elts)
    if isinstance(node, ast.Set):
        return {_value(e) for e in node.elts}
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    return ast.literal_eval(node)


# ---------------------------------------------------------------- the log
def read_log(path: Path) -> dict[str, dict]:
    """The newest logged line per function id (the log's reading: _log.py)."""
    return {record["function"]: record for record in log_records(
        path, lambda r: isinstance(r, dict) and isinstance(r.get("function"), str),
        HarvestError, "harvest log")}


class _Log:
    """The append-only log of prompts and responses: RequestRun's sink."""

    def __init__(self, path: Path, prompts: dict[str, str]) -> None:
        self.path = path
        self.prompts = prompts
        drop_partial_line(path)  # a line a crash left unterminated

    def write(self, rows: list[Prediction]) -> None:
        lines = [json.dumps({
            "function": row.task_id, "prompt": self.prompts[row.task_id], "model": row.model,
            "raw_text": row.raw_text, "error": row.error, "finish_reason": row.finish_reason,
            "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
            "latency_ms": row.latency_ms, "created_at": row.created_at.isoformat()},
            ensure_ascii=False) + "\n" for row in rows]
        with self.path.open("a", encoding="utf-8") as log:
            log.write("".join(lines))


@dataclass
class _Requests(RequestCounter):
    """RequestRun's counter."""

    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def ask_inputs(functions: list[Harvested], n: int, request: PredictOptions, log_path: Path,
               template_path: Path | None = None,
               progress: Callable[[int, int], None] | None = None
               ) -> tuple[dict[str, list[str]], CallReport, _Requests, int]:
    """Ask ``request.model`` for ``n`` calls of each function not yet logged without an
    error; return each function's inputs (from the log), the parse counts, the request
    counts and how many were already logged."""
    template = load_template(template_path or default_template_path())
    prompts = {f.id: prompt_for(f, n, template) for f in functions}
    logged = read_log(log_path)
    for function in functions:
        record = logged.get(function.id)
        if record is None:
            continue
        if record.get("prompt") != prompts[function.id]:
            raise HarvestError(f"{log_path} holds {function.id} with another prompt: it was "
                               "written with another --inputs, template or package version; "
                               "use another --out for new settings")
        if record.get("model") != request.model:
            raise HarvestError(f"{log_path} holds {function.id} from model "
                               f"{record.get('model')!r}, not {request.model!r}; use another "
                               "--out for another model")
    todo = [f for f in functions if f.id not in logged or logged[f.id].get("error")]
    counts = _Requests()
    run = RequestRun(request, _Log(log_path, prompts), counts,
                     progress or (lambda done, total: None), extract=lambda text, task: None)
    fatal = run.run([(Task(f.id, HARVEST_KIND, prompts[f.id]), 0) for f in todo])
    if fatal is not None:
        raise PredictError(f"{fatal}; stopped with {counts.requests} new responses logged "
                           "(run again to resume)")
    logged = read_log(log_path)
    report = CallReport()
    inputs = {}
    for function in functions:
        record = logged.get(function.id) or {}
        if not record.get("error"):
            inputs[function.id] = parse_calls(record.get("raw_text"), function, n, report)
    return inputs, report, counts, len(functions) - len(todo)


# ---------------------------------------------------------------- the whole harvest
CORPUS_FILE, LOCK_FILE, SUMMARY_FILE, LOG_FILE = ("corpus.jsonl", "guest.lock", "harvest.json",
                                                  "harvest.log.jsonl")
CANDIDATES_FILE, CHECKS_FILE = "candidates.jsonl", "checks.duckdb"
_CANNOT_IMPORT = re.compile(r"the guest cannot import '([^']+)' from its packages")
MAX_BUILDS = 5  # builds tried, each dropping the modules the guest could not import


@dataclass(frozen=True)
class HarvestOptions:
    inputs: int = 5                    # calls asked per function
    template_path: Path | None = None  # None: the bundled prompt
    trace: bool = True                 # check and trace the corpus (else stop after writing it)
    db: Path | None = None             # None: OUT/store.duckdb
    workers: int | None = None
    since: tuple[tuple[str, str], ...] = ()  # (distribution, older version): new or changed only
    released: str | Path | None = "pypi"  # upload times: "pypi", a list file, None (unknown)
    local: tuple[str, ...] = ()        # distributions built from a local source (no upload
                                       # time on the index: only a list file gives one)

    def __post_init__(self) -> None:
        if self.inputs < 1:
            raise HarvestError("inputs must be at least 1")


@dataclass
class HarvestSummary:
    out: str
    model: str
    packages: str
    modules: int = 0
    unparsed_modules: int = 0
    found: int = 0
    reexported: int = 0                # found under a module other than their defining one
    aliases: int = 0                   # public names beyond each function's first
    rejected: dict[str, int] = field(default_factory=dict)
    rejected_annotations: dict[str, int] = field(default_factory=dict)
    since: dict[str, str] = field(default_factory=dict)  # distribution -> older version
    unchanged: int = 0                 # kept functions left out by since: same source
    kept: int = 0
    kept_by_distribution: dict[str, int] = field(default_factory=dict)
    released: dict[str, str | None] = field(default_factory=dict)
    asked: int = 0                     # functions whose calls are in the log
    already_logged: int = 0
    requests: int = 0
    request_errors: int = 0
    calls: CallReport = field(default_factory=CallReport)
    functions_with_inputs: int = 0
    checked: dict[str, int] = field(default_factory=dict)  # examples by verdict (_examples)
    examples: int = 0                  # examples kept (ok and error)
    db: str | None = None
    traced: dict[str, int] = field(default_factory=dict)          # runs by status
    functions_ok: int = 0              # functions with at least one ok run
    functions_raising: int = 0         # functions with at least one exception run
    diversity: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    def as_rows(self) -> list[tuple[str, object]]:
        rows = [("packages", self.packages), ("modules scanned", self.modules),
                ("modules not parsed", self.unparsed_modules),
                ("functions found", self.found),
                ("found through a re-export", self.reexported)]
        rows += [(f"rejected: {reason}", count) for reason, count in self.rejected.items()]
        rows += [(f"annotation rejected: {reason}", count)
                 for reason, count in self.rejected_annotations.items()]
        if self.since:
            rows += [("since", ", ".join(f"{d}=={v}" for d, v in self.since.items())),
                     ("unchanged since", self.unchanged)]
        if self.released:
            known = sum(1 for t in self.released.values() if t is not None)
            rows.append(("packages with an upload time", f"{known} of {len(self.released)}"))
        rows += [("functions kept", self.kept),
                 ("asked (already logged)", f"{self.asked} ({self.already_logged})"),
                 ("request errors", self.request_errors), ("call lines", self.calls.lines),
                 ("calls against the annotations", self.calls.type_mismatch),
                 ("inputs kept", self.calls.inputs),
                 ("functions with inputs", self.functions_with_inputs)]
        rows += [(f"examples {verdict}", count) for verdict, count in self.checked.items()]
        rows += [(f"runs {status}", count) for status, count in self.traced.items()]
        if self.db is not None:
            rows += [("functions with an ok run", self.functions_ok),
                     ("functions with an exception run", self.functions_raising),
                     ("store", self.db)]
        for part in ("packages", "modules", "constructs"):
            if self.diversity.get(part):
                rows.append((f"spread: {part}", len(self.diversity[part])))
        for part in ("call_depth", "steps"):
            if self.diversity.get(part):
                rows.append((f"spread: {part.replace('_', ' ')}", ", ".join(
                    f"{k}: {v}" for k, v in self.diversity[part].items())))
        rows += [("note", note) for note in self.notes]
        return rows + [("seconds", f"{self.seconds:.2f}")]


def harvest(out: str | Path, lock, request: PredictOptions,
            options: HarvestOptions = HarvestOptions(),
            progress: Callable[[int, int], None] | None = None) -> HarvestSummary:
    """Harvest the functions of the packages of ``lock`` (a ``PackageLock`` or a lock
    file) into the directory ``out``: scan, build the guest, ask ``request.model`` for
    inputs, check them (run twice, the errors judged), write ``corpus.jsonl``,
    ``guest.lock``, ``harvest.json`` (and the log ``harvest.log.jsonl``), and trace the
    corpus (module docstring)."""
    from steptrace.benchmark._releases import previous_digests
    from steptrace.sandbox._packages import as_lock, install
    started = time.perf_counter()
    lock = as_lock(lock)
    versions = {p.name: p.version for p in lock.packages}
    for dist, old in options.since:
        if dist not in versions:
            raise HarvestError(f"--since {dist}=={old}: {dist} is not among the packages "
                               f"harvested ({lock})")
        if old == versions[dist]:
            raise HarvestError(f"--since {dist}=={old} is the version harvested")
    out = out_dir(out)
    released, notes = _released(lock, options)
    with tempfile.TemporaryDirectory(prefix="steptrace-harvest-") as tmp:
        install(lock, Path(tmp))
        report = scan_site(Path(tmp), [p.name for p in lock.packages])
    unchanged = []
    for dist, old in options.since:
        before = previous_digests(dist, old, lock.python)
        unchanged += [f.id for f in report.kept
                      if f.distribution == dist and before.get(f.id) == f.source_digest]
    kept = {h.id: h for h in report.kept if h.id not in set(unchanged)}
    guest_lock = _guest_lock(lock, kept.values())
    if options.trace:
        guest_lock = _build(lock, kept, report)
    functions = sorted(kept.values(), key=lambda h: h.id)
    inputs, calls, counts, already = ask_inputs(functions, options.inputs, request,
                                                out / LOG_FILE, options.template_path, progress)
    summary = HarvestSummary(
        str(out), request.model, str(lock), report.modules, len(report.unparsed_modules),
        report.found, report.reexported, report.aliases, report.by_reason(),
        dict(report.annotations.most_common()), dict(options.since), len(unchanged),
        len(functions), dict(sorted(Counter(f.distribution for f in functions).items())),
        released, len(inputs), already, counts.requests, counts.errors, calls,
        sum(1 for texts in inputs.values() if texts), notes=notes)
    records = [_record(f, inputs[f.id], versions, released) for f in functions
               if inputs.get(f.id)]
    details = {"kept_functions": [f.id for f in functions],
               "rejected_functions": dict(sorted(report.rejected.items())),
               "unchanged_functions": sorted(unchanged),
               "aliases": {f.id: list(f.aliases) for f in functions if f.aliases},
               "unparsed_modules": report.unparsed_modules}
    if options.trace and records:
        verdicts = _check(out, records, guest_lock, options, summary)
        details["dropped_examples"] = [{"function": v.sample_id, "input": v.input,
                                        "verdict": v.verdict, "note": v.note}
                                       for v in verdicts if not v.kept]
        kept_inputs = Counter()
        for verdict in verdicts:
            if verdict.kept:
                kept_inputs[(verdict.sample_id, verdict.input)] += 1
        records = [r for r in ({**r, "inputs": [i for i in r["inputs"]
                                                if kept_inputs[(r["id"], i)]]}
                               for r in records) if r["inputs"]]
    elif records:
        summary.notes.append("not traced: the corpus's inputs were not run twice nor their "
                             "errors judged")
    _write(out / CORPUS_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    _write(out / LOCK_FILE, guest_lock.text)
    if options.trace and records:
        _trace(out, records, guest_lock, options, summary)
        with_examples = {r["id"] for r in records}
        summary.diversity = diversity([f for f in functions if f.id in with_examples],
                                      summary.db)
    summary.seconds = time.perf_counter() - started
    _write(out / SUMMARY_FILE, json.dumps({**summary.as_dict(), **details}, indent=2,
                                          ensure_ascii=False) + "\n")
    return summary


def out_dir(out: str | Path) -> Path:
    """The harvest's directory ``out``, made if missing."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HarvestError(f"--out {out} is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HarvestError(f"cannot create {out}: {exc}") from None
    return out


def _released(lock, options: HarvestOptions) -> tuple[dict[str, str | None], list[str]]:
    """Each distribution's upload time (``_releases.released_times``), but never the
    index's for one built from a local source (``options.local``): the index's release of
    that name, if any, is not its code."""
    from dataclasses import replace

    from steptrace.benchmark._releases import PYPI, released_times
    local = set(options.local)
    if not local or str(options.released) != PYPI:
        return released_times(lock, options.released)
    times, notes = released_times(replace(lock, packages=tuple(
        p for p in lock.packages if p.name not in local)), PYPI)
    notes.append(f"no upload time for {', '.join(sorted(local))}: built from a local "
                 "source (--released FILE gives one)")
    return {p.name: times.get(p.name) for p in lock.packages}, notes


def _record(function: Harvested, inputs: list[str], versions: dict[str, str],
            released: dict[str, str | None]) -> dict:
    """A function's corpus record: its program and inputs, and as metadata where it comes
    from (``meta.distribution``, ``meta.version``, ``meta.module``, ``meta.defined_in``,
    ``meta.source_digest``, ``meta.released``) and that a model wrote its inputs (only
    them: ``model_written`` is ``"inputs"``, so the native backend runs it when they are
    pure literals)."""
    return {"id": function.id, "code": function.code, "entry": function.entry,
            "inputs": inputs, "module": function.module, "distribution": function.distribution,
            "version": versions.get(function.distribution),
            "defined_in": function.defined_in, "source_digest": function.source_digest,
            "released": released.get(function.distribution), MODEL_WRITTEN: INPUTS_ONLY}


def _check(out: Path, records: list[dict], guest_lock, options: HarvestOptions,
           summary: HarvestSummary) -> list:
    """Trace every candidate example into ``OUT/checks.duckdb``, run each twice more
    (the analysis with determinism), and judge them (steptrace.benchmark._examples)."""
    from steptrace._api import trace
    from steptrace.benchmark._examples import verdicts
    from steptrace.tracing._analysis import AnalysisOptions, analyse_store
    _write(out / CANDIDATES_FILE,
           "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    checks = out / CHECKS_FILE
    trace(out / CANDIDATES_FILE, checks, workers=options.workers, isolation="job",
          packages=guest_lock)
    extra = {} if options.workers is None else {"workers": options.workers}
    analyse_store(checks, AnalysisOptions(determinism=True, **extra))
    found = verdicts(checks)
    counts = Counter(v.verdict for v in found)
    summary.checked = dict(sorted(counts.items()))
    summary.examples = counts["ok"] + counts["error"]
    return found


def _guest_lock(lock, functions: Iterable[Harvested]):
    from dataclasses import replace
    return replace(lock, imports=tuple(sorted(set(lock.imports)
                                              | {f.module for f in functions})))


def _build(lock, kept: dict[str, Harvested], report: ScanReport):
    """Make the guest importing the kept functions' modules ready (:func:`_ready`); a
    module it cannot import (native code under WASI, a missing optional dependency, WASI)
    loses its functions and the guest is made again without it."""
    from steptrace.errors import SandboxError
    for _ in range(MAX_BUILDS):
        guest_lock = _guest_lock(lock, kept.values())
        try:
            _ready(guest_lock)
            return guest_lock
        except SandboxError as exc:
            match = _CANNOT_IMPORT.search(str(exc))
            module = match.group(1) if match else None
            dropped = [i for i, f in kept.items() if module is not None
                       and (f.module == module or f.module.startswith(module + "."))]
            if not dropped:
                raise
            for ident in dropped:
                report.rejected[ident] = f"{NOT_IMPORTABLE}: {module}"
                del kept[ident]
    raise HarvestError(f"the guest could not be built in {MAX_BUILDS} tries")


def _ready(guest_lock) -> None:
    """Build the WASI guest of ``guest_lock``, or, for a native lock, install its packages
    and start the native backend's jail once (as ``steptrace build --backend native``
    does): either fails naming a module the guest cannot import."""
    if not guest_lock.native:
        from steptrace.sandbox._build import ensure_component
        ensure_component(packages=guest_lock)
        return
    from steptrace.native_sandbox._runtime import NativeSandbox, prepare
    from steptrace.sandbox._limits import Limits
    with NativeSandbox(Limits(), prepare(lock=guest_lock)):
        pass


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise HarvestError(f"cannot write {path}: {exc}") from None


def _trace(out: Path, records: list[dict], guest_lock, options: HarvestOptions,
           summary: HarvestSummary) -> None:
    import duckdb

    from steptrace._api import trace
    db = options.db or out / "store.duckdb"
    traced = trace(out / CORPUS_FILE, db, workers=options.workers, isolation="job",
                   packages=guest_lock)
    summary.notes += traced.notes  # the backend the lock chose, if the trace says
    summary.db = str(db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        ids = [r["id"] for r in records]
        summary.traced = dict(con.execute(
            "SELECT status, count(*) FROM runs WHERE sample_id IN (SELECT unnest(?)) "
            "GROUP BY status ORDER BY status", [ids]).fetchall())
        found = dict(con.execute(
            "SELECT status, count(DISTINCT sample_id) FROM runs WHERE status IN "
            "('ok', 'exception') AND sample_id IN (SELECT unnest(?)) GROUP BY status",
            [ids]).fetchall())
    finally:
        con.close()
    summary.functions_ok = found.get("ok", 0)
    summary.functions_raising = found.get("exception", 0)
