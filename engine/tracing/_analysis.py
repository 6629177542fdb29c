"""Analysis of stored runs: condition outcomes, operand checks and determinism.

``analyse_store`` gives every finished (``ok``/``exception``) run of a store that has none
yet an ``analyses`` row and its ``branches`` rows. Each run's program runs once more in a
fresh guest instance, untraced, with its conditions and binary operators instrumented
(tracer/analysis.py); the host checks that this second run agrees with the traced one
(status, value or exception type, stdout).

With ``determinism=True`` every finished run not yet checked is also traced again in a
*variant* build of the guest: the same sources, pre-initialised separately, so its
interpreter has another string-hash secret (set and dict-of-str iteration orders differ;
checked by a probe before use) and another random state, and it runs later (clocks
differ). A run whose status, result, stdout, steps, states (with their object ids) or
object state (objects, attributes, global_states) differ there (memory addresses in reprs
aside) depends on hashing, randomness or time: ``deterministic`` is false and
``determinism_note`` says what differed first. A run stored without any object state (as
every run traced before schema 4) is compared on the rest only.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import pyarrow as pa

from steptrace.corpus._formats import guest_request
from steptrace.store._arrow import arrow_array
from steptrace.store._store import (FINISHED_STATUSES, MEMORY_ADDRESS, StoreError,
                                    analysis_missing, connect, first_line, guest_locks)
from steptrace.store._tables import ANALYSES, BRANCHES
from steptrace.sandbox._runner import run_chunks
from steptrace.sandbox._build import BuildError, ensure_component
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import by_lock
from steptrace.sandbox._pool import prepare
from steptrace.sandbox._runtime import Sandbox
from steptrace.store._transaction import transaction

VARIANT = "reseeded"
# The guest's str hash is FNV (WASI CPython): for a one-character string the secret only
# XORs its low bits with a constant, so two builds order a set of single characters alike
# unless those low bits of their constants differ (one pair of builds in eight do not).
_PROBE = {"code": "def f():\n    return hash('steptrace determinism probe'), hash('a') & 7\n",
          "input": "", "entry": "f"}
VARIANT_ATTEMPTS = 4
VARIANT_SEED = 1  # the variant's jobs start from random.seed(1) (the guest's default: 0)


@dataclass(frozen=True)
class AnalysisOptions:
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    limits: Limits = field(default_factory=Limits)
    determinism: bool = False
    chunk_size: int = 16


@dataclass
class AnalysisSummary:
    analysed: int = 0          # runs given an analysis now
    agreed: int = 0            # ... whose analysis run behaved as the traced run
    determinism_checked: int = 0
    nondeterministic: int = 0
    seconds: float = 0.0

    def as_rows(self) -> list[tuple[str, object]]:
        return [("analysed", self.analysed), ("agreed with the trace", self.agreed),
                ("determinism checked", self.determinism_checked),
                ("nondeterministic", self.nondeterministic),
                ("seconds", round(self.seconds, 2))]


@dataclass(frozen=True)
class StoredRun:
    run_id: int
    code: str
    entry: str
    input: str
    expected: str | None
    status: str
    output: str | None
    exception_type: str | None
    stdout: str
    shape: str = "call"
    test: str | None = None
    chain: str | None = None
    stdin: str | None = None
    guest: str | None = None  # the guest build that traced it (runs.guest)
    environment: str | None = None  # the program's files, argv and env (programs.environment)

    def request(self, mode: str | None = None) -> dict:
        """The traced job's request again (Job.request: the same shape fields)."""
        request = guest_request(self.code, self.entry, self.input, self.expected,
                                self.shape, self.test,
                                None if self.chain is None else json.loads(self.chain),
                                self.stdin, self.environment)
        if mode:
            request["mode"] = mode
        return request


_RUN_QUERY = """
SELECT r.run_id, p.code, p.entry, r.input, r.expected, r.status, r.output,
       r.exception_type, r.stdout, p.shape, p.test, r.chain, r.stdin, r.guest,
       p.environment
FROM runs r JOIN programs p USING (program_id)
WHERE r.status IN ('ok', 'exception') AND {missing}
ORDER BY r.run_id
"""


def ensure_analysed(db: str | Path, determinism: bool = False, workers: int | None = None,
                    progress: Callable[[int, int], None] | None = None) -> int:
    """Analyse the finished runs that lack it (and check their determinism when asked),
    starting the sandbox only if one does; the number of analysis and determinism runs
    made. What ``tasks`` (branch outcomes) and ``filter`` (operand and determinism rules)
    need before they read the store."""
    if not analysis_missing(db, determinism):
        return 0
    extra = {} if workers is None else {"workers": workers}
    summary = analyse_store(db, AnalysisOptions(determinism=determinism, **extra), progress)
    return summary.analysed + summary.determinism_checked


def analyse_store(db: str | Path, options: AnalysisOptions | None = None,
                  progress: Callable[[int, int], None] | None = None) -> AnalysisSummary:
    """Analyse the store's finished runs that have no analysis yet (and, with
    ``options.determinism``, check those not yet checked). Idempotent and resumable:
    each chunk of results is committed as it arrives."""
    options = options or AnalysisOptions()
    started = time.perf_counter()
    summary = AnalysisSummary()
    con = connect(db)
    try:
        pending = _runs(con, "run_id NOT IN (SELECT run_id FROM analyses)")
        total = len(pending)
        unchecked: list[StoredRun] = []
        if options.determinism:
            unchecked = _runs(con, "run_id NOT IN (SELECT run_id FROM analyses "
                                   "WHERE deterministic IS NOT NULL)")
            total += len(unchecked)
        done = 0
        if progress:
            progress(0, total)
        locks = guest_locks(con)
        for runs, outcomes in _execute(pending, "analyse", options, locks=locks):
            _store_analyses(con, db, runs, outcomes, summary)
            done += len(runs)
            if progress:
                progress(done, total)
        if unchecked:
            _check_variant(options.limits)
            for runs, outcomes in _execute(unchecked, None, options, VARIANT, locks):
                _store_determinism(con, db, runs, outcomes, summary)
                done += len(runs)
                if progress:
                    progress(done, total)
    finally:
        con.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _runs(con: duckdb.DuckDBPyConnection, missing: str) -> list[StoredRun]:
    rows = con.execute(_RUN_QUERY.format(missing=missing)).fetchall()
    return [StoredRun(*row) for row in rows]


def _execute(runs: list[StoredRun], mode: str | None, options: AnalysisOptions,
             variant: str = "", locks: dict | None = None
             ) -> Iterator[tuple[list[StoredRun], list]]:
    """The runs again, in the guest that traced them: with the packages of its lock
    (``guests``), else the standard guest."""
    for lock, members in by_lock(runs, lambda run: (locks or {}).get(run.guest)):
        yield from _execute_in(members, mode, options, variant, lock)


def _execute_in(runs: list[StoredRun], mode: str | None, options: AnalysisOptions,
                variant: str, lock) -> Iterator[tuple[list[StoredRun], list]]:
    chunks = [runs[i:i + options.chunk_size] for i in range(0, len(runs), options.chunk_size)]
    requests = [[run.request(mode) for run in chunk] for chunk in chunks]
    if variant:  # another random state too: every job starts from random.seed(0)
        for chunk in requests:
            for request in chunk:
                request["seed"] = VARIANT_SEED
    if not chunks:
        return
    for index, outcomes in run_chunks(requests, options.workers, options.limits, "job",
                                      variant, packages=lock):
        yield chunks[index], [outcome.result for outcome in outcomes]


def _check_variant(limits: Limits) -> None:
    """The variant build must really hash strings differently, or the check is blind:
    long strings, and the low bits that order small sets of single characters. A variant
    that does not is built again (a new secret), a few times at most."""
    main = _probe(limits, "")
    for attempt in range(VARIANT_ATTEMPTS + 1):
        variant = _probe(limits, VARIANT)
        if None not in (main, variant) and all(a != b for a, b in zip(main, variant)):
            return
        if attempt < VARIANT_ATTEMPTS:
            ensure_component(force=True, variant=VARIANT)
    raise BuildError(f"the guest's variant build hashes strings as the main build does "
                     f"({main}, {variant}), also after {VARIANT_ATTEMPTS} new builds")


def _probe(limits: Limits, variant: str) -> list | None:
    with Sandbox(limits, prepare(limits, variant)) as sandbox:
        output = sandbox.run(_PROBE).result.get("output")
    return None if output is None else list(ast.literal_eval(output))


# ---------------------------------------------------------------- agreement
def _plain(text: str | None) -> str | None:
    return None if text is None else MEMORY_ADDRESS.sub(" at 0x…", text)


def disagreement(run: StoredRun, result: dict) -> str | None:
    """What differs between the traced run and a second run of it, or None."""
    status = result.get("status")
    if status != run.status:
        return f"status {status} (traced: {run.status})"
    if status == "ok" and _plain(result.get("output")) != _plain(run.output):
        return "return value differs"
    if status == "exception" and result.get("exception_type") != run.exception_type:
        return f"exception {result.get('exception_type')} (traced: {run.exception_type})"
    if _plain(result.get("stdout")) != _plain(run.stdout):
        return "stdout differs"
    return None


def _store_analyses(con, db, runs: list[StoredRun], results: list[dict],
                    summary: AnalysisSummary) -> None:
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    rows = {name: [] for name in ANALYSES.column_names}
    branches = {name: [] for name in BRANCHES.column_names}
    for run, result in zip(runs, results):
        report = result.get("analysis") or {}
        differs = disagreement(run, result)
        values = {
            "run_id": run.run_id, "status": result.get("status") or "crashed",
            "agrees": differs is None, "disagreement": differs,
            "int_ops": report.get("int_ops"), "int_ops_large": report.get("int_ops_large"),
            "seq_ops": report.get("seq_ops"), "seq_ops_long": report.get("seq_ops_long"),
            "float_ops": report.get("float_ops"), "true_divisions": report.get("true_divisions"),
            "evaluations": report.get("evaluations"), "deterministic": None,
            "determinism_note": None,
            "note": ("condition outcomes beyond the first 1,000,000 not kept"
                     if report.get("evaluations_truncated") else result.get("exception_message")
                     if result.get("status") not in FINISHED_STATUSES else None),
            "analysed_at": now,
        }
        for name in ANALYSES.column_names:
            rows[name].append(values[name])
        summary.analysed += 1
        summary.agreed += differs is None
        for condition in report.get("conditions", ()):
            for k, outcome in enumerate(condition["outcomes"], start=1):
                branches["run_id"].append(run.run_id)
                branches["line"].append(condition["line"])
                branches["col"].append(condition["col"])
                branches["kind"].append(condition["kind"])
                branches["evaluation"].append(k)
                branches["taken"].append(outcome == "T")
    _commit(con, db, [("analyses", _ANALYSIS_TYPES, rows), ("branches", _BRANCH_TYPES, branches)])


# ---------------------------------------------------------------- determinism
# What a trace digest holds besides its steps: each a list of rows, compared in order.
_STATE_PARTS = ("states", "objects", "attributes", "globals")


def _trace_digest(result: dict) -> dict:
    steps, states = result.get("steps") or {}, result.get("states") or {}
    objects = result.get("objects") or {}
    attributes, globals_ = result.get("attributes") or {}, result.get("global_states") or {}
    funcs = result.get("funcs") or []
    events = result.get("events") or []
    return {
        "steps": [(events[e] if e < len(events) else e, funcs[f] if f < len(funcs) else f,
                   line, depth, frame)
                  for e, f, line, depth, frame in zip(steps.get("event", ()), steps.get("func", ()),
                                                      steps.get("line", ()), steps.get("depth", ()),
                                                      steps.get("frame", ()))],
        "states": _sorted((step, var, _plain(value), kind, oid)
                          for step, var, value, kind, oid in zip(*_columns(
                              states, ("step", "var", "value", "type", "object_id")))),
        "objects": [(oid, kind, step) for oid, (kind, step) in enumerate(
            zip(*_columns(objects, ("type", "step"))), start=1)],
        "attributes": _sorted((step, oid, attr, _plain(value), kind, ref)
                              for step, oid, attr, value, kind, ref in zip(*_columns(
                                  attributes, ("step", "object_id", "attr", "value", "type",
                                               "ref_id")))),
        "globals": _sorted((step, name, _plain(value), kind, oid)
                           for step, name, value, kind, oid in zip(*_columns(
                               globals_, ("step", "name", "value", "type", "object_id")))),
    }


def _columns(table: dict, names: tuple[str, ...]) -> list:
    """The columns ``names`` of a result's table (a missing one: None per row)."""
    count = len(table.get(names[0]) or ())
    return [table.get(name) or [None] * count for name in names]


def _sorted(rows: Iterator[tuple]) -> list[tuple]:
    """Rows in one order whatever order they came in (NULLs first in a column)."""
    return sorted(rows, key=lambda row: tuple((value is not None, value) for value in row))


def _stored_digests(con, run_ids: list[int]) -> dict[int, dict]:
    con.register("wanted", pa.table({"run_id": arrow_array(run_ids, pa.int64())}))
    wanted = "WHERE run_id IN (SELECT run_id FROM wanted)"
    try:
        steps = con.execute("SELECT run_id, event, func, line, depth, frame FROM steps "
                            f"{wanted} ORDER BY run_id, step").fetchall()
        found = {
            "states": con.execute("SELECT run_id, step, var, value, type, object_id FROM "
                                  f"states {wanted}").fetchall(),
            "objects": con.execute("SELECT run_id, object_id, type, step FROM objects "
                                   f"{wanted} ORDER BY run_id, object_id").fetchall(),
            "attributes": con.execute("SELECT run_id, step, object_id, attr, value, type, "
                                      f"ref_id FROM attributes {wanted}").fetchall(),
            "globals": con.execute("SELECT run_id, step, name, value, type, object_id FROM "
                                   f"global_states {wanted}").fetchall(),
        }
    finally:
        con.unregister("wanted")
    digests = {run_id: {"steps": [], **{part: [] for part in _STATE_PARTS}}
               for run_id in run_ids}
    for run_id, *step in steps:
        digests[run_id]["steps"].append(tuple(step))
    value_at = {"states": 2, "attributes": 3, "globals": 2}  # the rendering's position
    for part, rows in found.items():
        for run_id, *row in rows:
            if part in value_at:
                row[value_at[part]] = _plain(row[value_at[part]])
            digests[run_id][part].append(tuple(row))
    for digest in digests.values():
        for part in ("states", "attributes", "globals"):
            digest[part] = _sorted(digest[part])
    return digests


def determinism_difference(run: StoredRun, stored: dict, result: dict) -> str | None:
    differs = disagreement(run, result)
    if differs is not None:
        return differs
    again = _trace_digest(result)
    if again["steps"] != stored["steps"]:
        first = next((i for i, (a, b) in enumerate(zip(again["steps"], stored["steps"]))
                      if a != b), min(len(again["steps"]), len(stored["steps"])))
        return f"steps differ from step {first}"
    if not (stored["objects"] or stored["attributes"] or stored["globals"]):
        # no object state stored: a run traced before schema 4 (or one without any), its
        # states' object ids NULL; its states are compared without them
        again = {"states": [row[:4] + (None,) for row in again["states"]],
                 "objects": [], "attributes": [], "globals": []}
    first = _first_difference(again["states"], stored["states"])
    if first is not None:
        return f"variable states differ (step {first[0]}, {first[1]})"
    first = _first_difference(again["objects"], stored["objects"])
    if first is not None:
        return f"objects differ (object {first[0]})"
    first = _first_difference(again["attributes"], stored["attributes"])
    if first is not None:
        return f"attributes differ (step {first[0]}, #{first[1]}.{first[2]})"
    first = _first_difference(again["globals"], stored["globals"])
    if first is not None:
        return f"globals differ (step {first[0]}, {first[1]})"
    return None


def _first_difference(again: list[tuple], stored: list[tuple]) -> tuple | None:
    """The first row where two lists of rows differ (the re-traced run's; past the end of
    the shorter, the longer's next row), or None when they are equal."""
    for a, b in zip(again, stored):
        if a != b:
            return a
    if len(again) == len(stored):
        return None
    return (again if len(again) > len(stored) else stored)[min(len(again), len(stored))]


def _store_determinism(con, db, runs: list[StoredRun], results: list[dict],
                       summary: AnalysisSummary) -> None:
    stored = _stored_digests(con, [run.run_id for run in runs])
    ids, flags, notes = [], [], []
    for run, result in zip(runs, results):
        note = determinism_difference(run, stored[run.run_id], result)
        ids.append(run.run_id)
        flags.append(note is None)
        notes.append(note)
        summary.determinism_checked += 1
        summary.nondeterministic += note is not None
    table = pa.table({"run_id": arrow_array(ids, pa.int64()),
                      "deterministic": arrow_array(flags, pa.bool_()),
                      "note": arrow_array(notes, pa.string())})
    try:
        con.register("checked", table)
        with transaction(con):
            con.execute("UPDATE analyses SET deterministic = c.deterministic, "
                        "determinism_note = c.note FROM checked c WHERE analyses.run_id = c.run_id")
    except duckdb.Error as exc:
        raise StoreError(f"cannot write to database {db}: {first_line(exc)}") from exc
    finally:
        con.unregister("checked")


# ---------------------------------------------------------------- writing
_ANALYSIS_TYPES = ANALYSES.arrow_types()
_BRANCH_TYPES = BRANCHES.arrow_types()


def _commit(con, db, tables: list[tuple[str, dict, dict]]) -> None:
    """Insert all ``tables`` (name, arrow types, columns) in one transaction."""
    try:
        with transaction(con):
            for name, types, columns in tables:
                table = pa.table({column: arrow_array(values, types[column])
                                  for column, values in columns.items()})
                if table.num_rows:
                    con.register("incoming", table)
                    con.execute(f"INSERT INTO {name} SELECT * FROM incoming")
                    con.unregister("incoming")
    except duckdb.Error as exc:
        raise StoreError(f"cannot write to database {db}: {first_line(exc)}") from exc


