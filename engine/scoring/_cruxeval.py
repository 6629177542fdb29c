"""CRUXEval-compatible scoring: the official harness's pass@1 and pass@5, every check run
in the sandbox.

The input is the official generations format, a JSON object ``sample_i`` → list of
generated strings for the 800 samples. The rules are those of the issue (and of the
current ``evaluation/utils_general.py`` of facebookresearch/cruxeval; an earlier version of
that file scored dropped generations as failures instead, see the README):

* the check program is the sample's ``code`` followed by ``assert <output> == <generation>``
  at module level: in input mode the generation is a whole call (``f("abc")``), in output
  mode a literal;
* input mode drops a generation without ``f(``; output mode drops one that contains
  ``f(<input>)`` (it would pass by calling the function);
* the sample's results are the kept generations' results, unless none of them passes: then
  they are ``len(generations)`` failures;
* pass@k per sample is ``1 − C(n−c, k)/C(n, k)`` computed as the harness does (1.0 whenever
  ``n − c < k``), averaged over the samples in order, times 100.

Each check is one guest request in mode ``run`` (untraced), a fresh instance per check
(isolation ``job``) with the official 3-second limit; status ``ok`` passes, anything else
(assertion, exception, syntax error, timeout, memory limit, ...) fails. A check the guest
proves to loop forever (status ``loops``: its complete state repeated, see the guest's
loops.py) ends there instead of at the time limit, a failure as its timeout would have
been: pass@k are the same with ``loop_detection`` off. Identical check
programs are run once and their outcome reused (``deduplicate``), which the summary shows
as checks run against checks needed. Checks whose program has a ``while`` loop run first
(``run_order``), so that one that times out does not end the run 3 s after the rest.

With a store (``score-cruxeval --db``) each check's verdict is kept in its ``checks``
table (engine/scoring/_checks.py), keyed by the exact check program, the guest build and
the limits: scoring generations again runs only the checks not judged yet
(``checks_reused`` counts the others) and gives the same outcomes.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from steptrace.scoring._stats import pass_at_k_product as pass_at_k  # the harness arithmetic, n < k gives 1.0
from steptrace.corpus._text import read_utf8, user_file, utf8_lines
from steptrace.sandbox._runner import run_chunks
from steptrace.sandbox._limits import Limits
from steptrace.errors import InputError

MODES = ("input", "output")
CHECK_ENTRY = "__steptrace_check__"
CHECK_TIMEOUT_S = 3.0
DEFAULT_DATA = Path("../shared/data/cruxeval/cruxeval.jsonl")
CHUNK_SIZE = 32
PASSED = "ok"

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class CruxSample:
    sample_id: str
    code: str
    input: str
    output: str


def check_mode(mode: object) -> str:
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; use 'input' or 'output'")
    return mode  # type: ignore[return-value]


def load_samples(path: str | Path) -> list[CruxSample]:
    """The CRUXEval JSONL (``id``, ``code``, ``input``, ``output`` a line), in file order:
    the order of ``raw_scored_generations`` and of the pass@k average."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"CRUXEval data not found: {path} (give --data)")
    samples: list[CruxSample] = []
    seen: set[str] = set()
    for number, line in enumerate(utf8_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            sample = CruxSample(record["id"], record["code"], record["input"], record["output"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{path}:{number}: not a CRUXEval record ({exc})") from None
        if not all(isinstance(v, str) for v in (sample.sample_id, sample.code, sample.input,
                                                sample.output)):
            raise InputError(f"{path}:{number}: id, code, input and output must be strings")
        if sample.sample_id in seen:
            raise InputError(f"{path}:{number}: duplicate sample id {sample.sample_id!r}")
        seen.add(sample.sample_id)
        samples.append(sample)
    if not samples:
        raise InputError(f"{path}: no CRUXEval records")
    return samples


def load_generations(path: str | Path) -> dict:
    """The generations file as JSON (validated later against the data)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"generations file not found: {path}")
    text = read_utf8(path)  # NotUtf8Error names the file, line and byte
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"malformed generations file {path}: {exc}") from None


def _listed(ids: Iterable[str], limit: int = 5) -> str:
    ids = list(ids)
    shown = ", ".join(repr(i) for i in ids[:limit])
    return shown + (f" (and {len(ids) - limit} more)" if len(ids) > limit else "")


def validate_generations(generations: object, samples: list[CruxSample]) -> dict[str, list[str]]:
    """Refuse what the official harness would crash on or score silently wrong: a
    non-object, unknown or missing sample ids, non-list values, non-string generations,
    and empty lists (the harness's estimator gives an empty list pass@k = 1.0)."""
    if not isinstance(generations, dict):
        raise InputError("generations must be a JSON object mapping sample ids to lists of "
                         f"generated strings, not a {type(generations).__name__}")
    known = {sample.sample_id for sample in samples}
    unknown = [key for key in generations if key not in known]
    if unknown:
        raise InputError(f"unknown sample ids in the generations: {_listed(unknown)}")
    missing = [sample.sample_id for sample in samples if sample.sample_id not in generations]
    if missing:
        raise InputError(f"generations missing for {len(missing)} of {len(samples)} samples: "
                         f"{_listed(missing)}")
    for sample_id, listed in generations.items():
        if not isinstance(listed, list):
            raise InputError(f"{sample_id}: expected a list of generated strings, "
                             f"got {type(listed).__name__}")
        if not listed:
            raise InputError(f"{sample_id}: no generations (pass@k is undefined; the "
                             "official harness would count the sample as passed)")
        for index, generation in enumerate(listed):
            if not isinstance(generation, str):
                raise InputError(f"{sample_id}: generation {index} is "
                                 f"{type(generation).__name__}, not a string")
    return generations


# ------------------------------------------------------------------ the rules
def is_dropped(sample: CruxSample, generation: str, mode: str) -> bool:
    """The harness's textual filters: an input prediction must call ``f``; an output
    prediction must not simply call ``f`` on the sample's input."""
    if mode == "input":
        return "f(" not in generation
    return f"f({sample.input})" in generation


def check_program(sample: CruxSample, generation: str) -> str:
    """The official check ``<code>\\nassert <output> == <generation>``, run at module level
    as the harness's ``exec`` does, with a no-op entry for the guest to call.

    The entry sits between the code and the assertion, so the code still starts the file
    (a ``from __future__`` import keeps working) and the generation still ends it: whatever
    the generation's text does (a second line, an unclosed bracket, a trailing backslash, a
    ``yield``) it does to the same module-level program as in the harness. Inside a
    function instead, ``yield`` would make the check a generator that passes unrun and an
    indented second line would join the function's body."""
    return (f"{sample.code}\n"
            f"def {CHECK_ENTRY}():\n    pass\n"
            f"assert {sample.output} == {generation}")


def check_request(program: str, loop_detection: bool = True) -> dict:
    """One check's guest request; ``loop_detection`` off: a check that loops forever runs
    to the time limit even where the guest can prove it loops (status ``loops``)."""
    request = {"code": program, "entry": CHECK_ENTRY, "input": "", "mode": "run"}
    if not loop_detection:
        request["loops"] = False
    return request


def outcome_of(result: dict) -> str:
    """``ok`` (passed), the guest status, or for a program that failed at its top level
    (every failing assertion, error and syntax error, and an import of a module the
    sandbox does not have: ``missing_module``) the exception type."""
    status = result.get("status") or "crashed"
    if status in ("invalid", "missing_module") and result.get("exception_type"):
        return result["exception_type"]
    return status


def scored_results(kept_passed: list[bool], generations: int) -> list[bool]:
    """The sample's official scored list: the kept generations' results, or
    ``generations`` failures when none of them passed."""
    return kept_passed if any(kept_passed) else [False] * generations


def mean_percent(values: Iterable[float]) -> float:
    """Sum left to right, divide, times 100: the harness's ``sum(x) / len(x) * 100`` as
    Python up to 3.11 computes it (3.12's compensated ``sum`` may differ in the last bit)."""
    total, count = 0.0, 0
    for value in values:
        total += value
        count += 1
    return total / count * 100


# ------------------------------------------------------------------ results
@dataclass(frozen=True)
class SampleScore:
    """One sample: per generation the check's outcome (None = dropped by the rules), the
    official scored list, and its pass@1/pass@5."""

    sample_id: str
    outcomes: tuple[str | None, ...]
    results: tuple[bool, ...]
    pass_at_1: float
    pass_at_5: float

    @property
    def generations(self) -> int:
        return len(self.outcomes)

    @property
    def dropped(self) -> int:
        return self.outcomes.count(None)

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def c(self) -> int:
        return self.results.count(True)


@dataclass(frozen=True)
class CruxScore:
    mode: str
    data: str
    raw_generations: dict[str, list[str]]
    samples: list[SampleScore]
    checks_run: int
    deduplicated: bool
    seconds: float
    pass_at_1: float
    pass_at_5: float
    checks_reused: int = 0  # checks whose verdict the store held (not run again)
    store: str | None = None  # the store keeping the verdicts (``--db``), if any

    @property
    def candidates(self) -> int:
        return sum(s.generations for s in self.samples)

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self.samples)

    @property
    def checks_needed(self) -> int:
        return self.candidates - self.dropped

    @property
    def outcomes(self) -> Counter:
        """Kept candidates by check outcome."""
        return Counter(o for s in self.samples for o in s.outcomes if o is not None)

    @property
    def below_k5(self) -> int:
        """Samples with n < 5, whose pass@5 the harness's estimator sets to 1.0."""
        return sum(s.n < 5 for s in self.samples)

    @property
    def checks_per_second(self) -> float:
        return self.checks_run / self.seconds if self.seconds > 0 else 0.0

    def official(self) -> dict:
        """The official scored file: ``raw_generations`` as given, ``raw_scored_generations``
        in data order, ``pass_at_1`` and ``pass_at_5`` (percent)."""
        return {"raw_generations": self.raw_generations,
                "raw_scored_generations": {s.sample_id: list(s.results) for s in self.samples},
                "pass_at_1": self.pass_at_1,
                "pass_at_5": self.pass_at_5}

    def summary(self) -> dict:
        return {"mode": self.mode, "data": self.data, "samples": len(self.samples),
                "generations": self.candidates, "dropped": self.dropped,
                "checks_needed": self.checks_needed, "checks_run": self.checks_run,
                "checks_reused": self.checks_reused, "store": self.store,
                "deduplicated": self.deduplicated,
                "outcomes": dict(sorted(self.outcomes.items())),
                "passed": self.outcomes[PASSED], "samples_n_below_5": self.below_k5,
                "pass_at_1": self.pass_at_1, "pass_at_5": self.pass_at_5,
                "seconds": round(self.seconds, 3),
                "checks_per_second": round(self.checks_per_second, 1)}

    def rows(self, exact: bool = False) -> list[tuple[str, object]]:
        """Item/value rows; pass@k to one decimal as the harness prints it unless ``exact``."""
        def percent(value: float) -> object:
            return value if exact else f"{value:.1f}"
        rows: list[tuple[str, object]] = [
            ("mode", self.mode), ("data", self.data), ("samples", len(self.samples)),
            ("generations", self.candidates), ("dropped by the rules", self.dropped),
            ("checks needed", self.checks_needed),
            ("checks run" + (" (identical checks once)" if self.deduplicated else ""),
             self.checks_run)]
        if self.store is not None:
            rows.append(("checks judged before (read from the store)", self.checks_reused))
        rows += [(f"  outcome {name}", count) for name, count in sorted(self.outcomes.items())]
        rows += [("passed", self.outcomes[PASSED]), ("pass@1", percent(self.pass_at_1)),
                 ("pass@5", percent(self.pass_at_5))]
        if self.below_k5:
            rows.append(("samples with n < 5 (pass@5 = 1.0, as in the harness)", self.below_k5))
        rows += [("seconds", f"{self.seconds:.2f}"),
                 ("checks/s", f"{self.checks_per_second:.1f}")]
        return rows


# ------------------------------------------------------------------ running
_WHILE = re.compile(r"\bwhile\b")


def run_order(programs: list[str]) -> list[int]:
    """Indices of ``programs`` in the order to run them: those with the word ``while``
    first, the rest after, each group in its given order.

    A check that times out holds its worker for the whole 3 s limit; started late, it
    ends the run 3 s after the other workers have finished. Almost every check that loops
    for good does so in a ``while`` loop (an unbounded ``for`` or a deep recursion is rare
    in these programs), so running those first lets the other workers do the rest in the
    meantime: longest job first. Outcomes do not depend on the order."""
    return sorted(range(len(programs)), key=lambda i: _WHILE.search(programs[i]) is None)


def run_checks(programs: list[str], workers: int, limits: Limits,
               progress: Progress | None = None, chunk_size: int = CHUNK_SIZE,
               loop_detection: bool = True) -> list[str]:
    """The outcome of each check program, in order, each in a fresh sandbox instance."""
    outcomes: list[str] = ["crashed"] * len(programs)
    if not programs:
        return outcomes
    order = run_order(programs)
    chunks = [[check_request(programs[i], loop_detection)
               for i in order[start:start + chunk_size]]
              for start in range(0, len(order), chunk_size)]
    done = 0
    if progress:
        progress(0, len(programs))
    for index, results in run_chunks(chunks, workers, limits, isolation="job"):
        for offset, outcome in enumerate(results):
            outcomes[order[index * chunk_size + offset]] = outcome_of(outcome.result)
        done += len(results)
        if progress:
            progress(done, len(programs))
    return outcomes


def _plan(samples: list[CruxSample], generations: dict[str, list[str]], mode: str,
          deduplicate: bool) -> tuple[list[str], list[list[int | None]]]:
    """Check programs to run, and per sample and generation the index of its program
    (None when the rules drop it)."""
    programs: list[str] = []
    index_of: dict[str, int] = {}
    plan: list[list[int | None]] = []
    for sample in samples:
        row: list[int | None] = []
        for generation in generations[sample.sample_id]:
            if is_dropped(sample, generation, mode):
                row.append(None)
                continue
            program = check_program(sample, generation)
            if deduplicate and program in index_of:
                row.append(index_of[program])
                continue
            index_of[program] = len(programs)
            row.append(len(programs))
            programs.append(program)
        plan.append(row)
    return programs, plan


def _sample_score(sample: CruxSample, row: list[int | None], outcomes: list[str]) -> SampleScore:
    per_generation = tuple(None if i is None else outcomes[i] for i in row)
    kept = [o == PASSED for o in per_generation if o is not None]
    results = tuple(scored_results(kept, len(row)))
    n, c = len(results), results.count(True)
    return SampleScore(sample.sample_id, per_generation, results,
                       pass_at_k(n, c, 1), pass_at_k(n, c, 5))


def score_samples(samples: list[CruxSample], generations: dict[str, list[str]], mode: str,
                  workers: int | None = None, limits: Limits | None = None,
                  deduplicate: bool = True, progress: Progress | None = None,
                  data: str = "", chunk_size: int = CHUNK_SIZE,
                  store: str | Path | None = None, loop_detection: bool = True) -> CruxScore:
    """Score ``generations`` (already validated) for ``samples``; the average runs over
    these samples, so a subset gives the subset's pass@k. With ``store`` the verdicts it
    holds are reused and the new ones kept (engine/scoring/_checks.py)."""
    started = time.perf_counter()
    mode = check_mode(mode)
    if not samples:
        raise InputError("no samples to score")
    workers = (os.cpu_count() or 1) if workers is None else workers
    limits = limits or Limits(timeout_s=CHECK_TIMEOUT_S)
    programs, plan = _plan(samples, generations, mode, deduplicate)
    if store is None:
        outcomes = run_checks(programs, workers, limits, progress, chunk_size, loop_detection)
        reused = 0
    else:
        outcomes, reused = _stored_checks(Path(store), programs, workers, limits, progress,
                                          chunk_size, loop_detection)
    scores = [_sample_score(sample, row, outcomes) for sample, row in zip(samples, plan)]
    return CruxScore(mode=mode, data=data, raw_generations=generations, samples=scores,
                     checks_run=len(programs) - reused, deduplicated=deduplicate,
                     seconds=time.perf_counter() - started,
                     pass_at_1=mean_percent(s.pass_at_1 for s in scores),
                     pass_at_5=mean_percent(s.pass_at_5 for s in scores),
                     checks_reused=reused, store=None if store is None else str(store))


def _stored_checks(store: Path, programs: list[str], workers: int, limits: Limits,
                   progress: Progress | None, chunk_size: int,
                   loop_detection: bool = True) -> tuple[list[str], int]:
    """The outcome of each check program, reading those ``store`` holds and running (and
    then keeping) the others; and how many were read. The store is open only to read and
    to write, not while the checks run."""
    from steptrace.scoring._checks import (CheckVerdict, NewCheck, check_key, guest_key,
                                          load_verdicts, store_new)
    from steptrace.store._store import connect, first_line
    from steptrace.store._transaction import transaction
    import duckdb
    guest = guest_key()
    keys = [check_key("cruxeval", check_request(program, loop_detection), guest, limits)
            for program in programs]
    try:
        con = connect(store)
        try:
            found = load_verdicts(con, keys)
        finally:
            con.close()
    except duckdb.Error as exc:
        raise InputError(f"cannot read check verdicts from {store}: {first_line(exc)}") from exc
    outcomes: list[str] = [found[key].status if key in found else "" for key in keys]
    to_run = [i for i, key in enumerate(keys) if key not in found]
    ran = run_checks([programs[i] for i in to_run], workers, limits, progress, chunk_size,
                     loop_detection)
    new = []
    for index, outcome in zip(to_run, ran):
        outcomes[index] = outcome
        new.append(NewCheck(keys[index], "cruxeval", CheckVerdict(outcome, outcome == PASSED),
                            guest, limits.timeout_s, limits.memory_mb))
    try:
        con = connect(store)
        try:
            with transaction(con):
                store_new(con, new)
        finally:
            con.close()
    except duckdb.Error as exc:
        raise InputError(f"cannot store check verdicts in {store}: {first_line(exc)}") from exc
    return outcomes, len(programs) - len(to_run)


def score_cruxeval(generations: object, mode: str, data_path: str | Path = DEFAULT_DATA,
                   workers: int | None = None, limits: Limits | None = None,
                   deduplicate: bool = True, progress: Progress | None = None,
                   store: str | Path | None = None, loop_detection: bool = True) -> CruxScore:
    """Score official-format CRUXEval ``generations`` (every sample of the data, nothing
    else) in ``mode`` ``input`` or ``output``; ValueError for anything malformed. With
    ``store`` (a store path) check verdicts are kept there and reused."""
    started = time.perf_counter()
    check_mode(mode)
    samples = load_samples(data_path)
    checked = validate_generations(generations, samples)
    score = score_samples(samples, checked, mode, workers, limits, deduplicate, progress,
                          data=str(data_path), store=store, loop_detection=loop_detection)
    return replace(score, seconds=time.perf_counter() - started)


def write_official(score: CruxScore, path: str | Path) -> None:
    """``--out``: the scored file as the harness writes it (``json.dump``, default style)."""
    with user_file(path):
        Path(path).write_text(json.dumps(score.official()), encoding="utf-8")
