"""The reward service's judge: answers to a store's tasks, and "does this code give this
output" checks, judged one batch at a time, as ``score`` judges them
(docs/guides/reward-server.md; the HTTP server is engine/scoring/_reward_server.py).

A batch is a list of items; each gets one result, ``{"correct", "status", "detail",
"kind"}``, and an item that cannot be judged (an unknown task, a wrong field) gets status
``error`` without failing the others.

* ``{"task_id": ..., "answer": TEXT | null}``: the answer as ``predict`` stores it (the
  extracted text; null: none was found, which is wrong, as ``score`` has it), or
  ``{"task_id": ..., "response": TEXT}``: the model's whole response, from which the
  answer is extracted as ``predict`` does (steptrace.tasks._answers, with the entry of the
  task's program). The task is read
  from the store's ``tasks`` table (made by ``steptrace tasks``) and judged by its kind's
  judge (engine/scoring/_judges.py, the one ``score`` uses); an ``input`` answer must be
  safe arguments and is then run in the sandbox (engine/scoring/_inputs.py).
* ``{"code": ..., "input": ..., "expected_output": ..., "entry": "f"}``: ``entry(input)``
  runs in the sandbox (untraced, a fresh instance); it is right when it returns built-in
  data (no object of the code's own, whose ``__repr__`` could say anything) and that
  value's repr equals ``expected_output`` as the ``output`` judge compares an answer
  (``same_value``: as Python values when both are literals, else as text).

Sandbox runs go to a pool of sandbox workers shared by every batch (:class:`SandboxSlots`):
each worker process runs one job at a time in a fresh instance (job isolation: what one
check leaves in a module, another never sees; there is no batch isolation here, since
every check is a model's or a client's code), with the run's limits (``Limits``:
``timeout_s`` is the per-check time limit), so a job that loops forever ends as
``timeout`` and holds only its own worker meanwhile. Waiting checks are taken round-robin
across clients, and across each client's batches (:class:`FairQueue`), so a batch of one
check waits for about one check of each other active batch, not for all of them; a client
has at most ``max_client_checks`` checks queued or running (a batch that would pass it is
refused whole, :class:`RewardBusy`).

Tasks are read from the store when first asked for, with the store open read-only for the
lookup only (``predict`` and ``score`` may write to it meanwhile), and kept in a bounded
cache: a task's id is a digest of its question, so a kept task stays right.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections import Counter, OrderedDict, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Iterable

from steptrace.errors import InputError
from steptrace.sandbox._limits import Limits
from steptrace.scoring._inputs import (UNSAFE_INPUT, input_requests, input_verdict,
                                       is_refused_answer, unsafe_input_verdict)
from steptrace.scoring._judges import same_value
from steptrace.scoring._load import TASK_FIELDS
from steptrace.scoring._verdicts import ScoreOptions, judge
from steptrace.tasks._answers import extract_answer
from steptrace.tasks._kinds import task_kind

# The statuses of a result that is not a sandbox run's (a run's are the sandbox's:
# docs/guides/sandbox.md).
JUDGED = "judged"            # judged by the kind's judge, without running anything
UNPARSEABLE = "unparseable"  # no answer (null, or none found in the response)
ERROR = "error"              # the item could not be judged; detail says why
CODE_KIND = "code"           # the kind a code check's result names

TASK_KEYS = {"task_id", "answer", "response"}
CODE_KEYS = {"code", "input", "expected_output", "entry"}
DETAIL_CHARS = 300


class RewardError(InputError):
    """A request the reward service refuses as a whole (the message says why)."""


class RewardBusy(RewardError):
    """A request refused for now: its client has too much under way; it may be sent again
    after ``retry_after`` seconds (HTTP 429 with ``Retry-After``)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RewardLimits:
    """Per-request limits of the reward service. ``sandbox`` is what each sandboxed check
    runs under (its ``timeout_s`` is the per-check time limit; 3 s as ``score``)."""

    max_items: int = 1_000             # items in one batch
    max_text_chars: int = 100_000      # characters of any one text field of an item
    max_body_bytes: int = 16 * 1024 * 1024  # bytes of one request body
    # sandboxed checks of one client (an IP address over HTTP) queued or running at once
    max_client_checks: int = 1_000
    # requests of one client read or judged at once (HTTP; more are 429)
    max_client_requests: int = 8
    sandbox: Limits = field(default_factory=lambda: Limits(timeout_s=3.0))

    def __post_init__(self) -> None:
        for name in ("max_items", "max_text_chars", "max_body_bytes", "max_client_checks",
                     "max_client_requests"):
            if getattr(self, name) < 1:
                raise InputError(f"reward limit {name} must be positive, got {getattr(self, name)}")

    @property
    def retry_after(self) -> int:
        """Seconds a busy client is told to wait (``Retry-After``): one check's time limit."""
        return max(1, math.ceil(self.sandbox.timeout_s))

    def describe(self) -> dict:
        return {"max_items": self.max_items, "max_text_chars": self.max_text_chars,
                "max_body_bytes": self.max_body_bytes,
                "max_client_checks": self.max_client_checks,
                "max_client_requests": self.max_client_requests,
                "timeout_s": self.sandbox.timeout_s, "memory_mb": self.sandbox.memory_mb}


def result(correct: bool, status: str, detail: str | None = None, kind: str | None = None
           ) -> dict:
    return {"correct": bool(correct), "status": status,
            "detail": None if detail is None else detail[:DETAIL_CHARS], "kind": kind}


# ---------------------------------------------------------------------- the sandbox workers
@dataclass
class Check:
    """One sandboxed check: the guest request, the package lock of its guest (None: the
    standard guest) and the Future of the guest's result."""

    request: dict
    lock: Any = None
    future: Future = field(default_factory=Future)


class FairQueue:
    """Checks waiting for a sandbox worker, taken round-robin: a client (an IP address)
    at a time, in turn, and within a client a batch at a time, in turn. A batch of one
    check therefore waits for about one check of each other client (and of each other
    batch of its own client) ahead of it, however many checks those have queued; first in,
    first out would make it wait for all of them.

    A client has at most ``max_client_checks`` checks queued or running: ``put`` refuses a
    batch that would pass it, whole (:class:`RewardBusy`; a batch larger than the bound on
    its own is a :class:`RewardError`). ``order`` keeps the (client, batch) of the last
    ``ORDER_KEPT`` checks taken, oldest first: what the scheduling did. ``pause()`` keeps
    checks queued until ``resume()`` (a drain, or a test queueing several batches before
    any runs)."""

    ORDER_KEPT = 1024

    def __init__(self, max_client_checks: int, retry_after: int) -> None:
        self.max_client_checks = max_client_checks
        self.retry_after = retry_after
        self._changed = threading.Condition()
        self._waiting: OrderedDict[Hashable, OrderedDict[int, deque[Check]]] = OrderedDict()
        self._held: Counter = Counter()  # per client: checks queued or running
        self._closed = False
        self._paused = False
        self.queued = 0
        self.running = 0
        self.order: deque[tuple[Hashable, int]] = deque(maxlen=self.ORDER_KEPT)

    def put(self, client: Hashable, batch: int, checks: list[Check]) -> None:
        """Queue ``checks``, the sandboxed checks of ``client``'s batch ``batch``, all or
        none."""
        if not checks:
            return
        if len(checks) > self.max_client_checks:
            raise RewardError(f"the request has {len(checks)} sandboxed checks (at most "
                              f"{self.max_client_checks} a client at once)")
        with self._changed:
            if self._closed:
                raise RewardError("the reward service is stopping")
            held = self._held[client]
            if held + len(checks) > self.max_client_checks:
                raise RewardBusy(f"too many checks under way: {held} of this client's are "
                                 f"queued or running, and {len(checks)} more would pass "
                                 f"{self.max_client_checks}; send again later",
                                 self.retry_after)
            self._held[client] += len(checks)
            self._waiting.setdefault(client, OrderedDict()).setdefault(
                batch, deque()).extend(checks)
            self.queued += len(checks)
            self._changed.notify(len(checks))

    def get(self) -> tuple[Hashable, Check] | None:
        """The next check, round-robin (waiting for one); None once closed and empty."""
        with self._changed:
            while not self._closed and (not self._waiting or self._paused):
                self._changed.wait()
            if not self._waiting:
                return None
            client, batches = next(iter(self._waiting.items()))
            batch, checks = next(iter(batches.items()))
            check = checks.popleft()
            if checks:
                batches.move_to_end(batch)    # the client's next batch goes next
            else:
                del batches[batch]
            if batches:
                self._waiting.move_to_end(client)  # the next client goes next
            else:
                del self._waiting[client]
            self.queued -= 1
            self.running += 1
            self.order.append((client, batch))
            return client, check

    def done(self, client: Hashable) -> None:
        """A check of ``client`` taken by ``get`` has ended."""
        with self._changed:
            self.running -= 1
            self._held[client] -= 1
            if self._held[client] <= 0:
                del self._held[client]

    def describe(self) -> dict:
        with self._changed:
            return {"queued": self.queued, "running": self.running,
                    "clients": len(self._held)}

    def pause(self) -> None:
        """Hand out no check until ``resume()`` (those running go on)."""
        with self._changed:
            self._paused = True

    def resume(self) -> None:
        with self._changed:
            self._paused = False
            self._changed.notify_all()

    def close(self) -> None:
        """No more checks: ``get`` gives what is queued (paused or not), then None."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()


class SandboxSlots:
    """``workers`` sandbox worker processes shared by every caller: ``submit(client,
    batch, checks)`` queues a batch's checks (:class:`FairQueue`), and each check's
    Future gets the guest's result. Each slot is a thread that owns a one-worker
    ``WorkerPool`` (per guest: the standard one, or a package lock's, started when first
    needed) and runs one job at a time, always in a fresh instance (job isolation); the
    pool's watchdog ends a job blocked past its limit and replaces the worker."""

    def __init__(self, workers: int, limits: Limits, max_client_checks: int = 1_000,
                 retry_after: int = 1) -> None:
        from steptrace.sandbox._pool import prepare  # the sandbox loads with the service
        if workers < 1:
            raise InputError("the reward service needs at least one sandbox worker")
        self.limits = limits
        self.workers = workers
        self._artifacts = {None: prepare(limits)}  # built (if need be) before any slot starts
        self._prepare_lock = threading.Lock()
        self.queue = FairQueue(max_client_checks, retry_after)
        self._threads = [threading.Thread(target=self._serve, name=f"steptrace-reward-slot-{i}",
                                          daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, client: Hashable, batch: int, checks: list[Check]) -> None:
        """Queue a batch's checks, all or none (RewardBusy, RewardError: see FairQueue)."""
        self.queue.put(client, batch, checks)

    def _artifacts_for(self, lock):
        from steptrace.sandbox._pool import prepare
        key = lock.digest if lock is not None else None
        with self._prepare_lock:
            if key not in self._artifacts:
                self._artifacts[key] = prepare(self.limits, packages=lock)
            return self._artifacts[key]

    def _serve(self) -> None:
        from steptrace.sandbox._pool import WorkerPool
        pools: dict = {}
        try:
            try:  # the standard guest's worker starts now, not at the first check
                pools[None] = WorkerPool(1, self.limits, "job", artifacts=self._artifacts[None])
            except Exception:  # noqa: BLE001 - tried again, and reported, at the first check
                pass
            while (taken := self.queue.get()) is not None:
                client, check = taken
                if not check.future.set_running_or_notify_cancel():
                    self.queue.done(client)
                    continue
                try:
                    found, failure = self._run(pools, check), None
                except BaseException as exc:  # noqa: BLE001 - the caller's item gets it
                    found, failure = None, exc
                # the client's count goes down before it hears: its next batch may follow
                self.queue.done(client)
                if failure is None:
                    check.future.set_result(found)
                else:
                    check.future.set_exception(failure)
        finally:
            for pool in pools.values():
                pool.close()

    def _run(self, pools: dict, check: Check) -> dict | None:
        """One check's guest result, run in a fresh instance (isolation ``job``, whoever
        wrote it)."""
        from steptrace.sandbox._pool import WorkerPool
        lock = check.lock
        key = lock.digest if lock is not None else None
        try:
            if key not in pools:
                pools[key] = WorkerPool(1, self.limits, "job", artifacts=self._artifacts_for(lock))
            found = None
            for _, outcomes in pools[key].run([[check.request]]):
                found = outcomes[0].result
            return found
        except BaseException:
            broken = pools.pop(key, None)  # a pool that failed is made anew next time
            if broken is not None:
                broken.close()
            raise

    def close(self) -> None:
        """Stop once the queued checks have run."""
        self.queue.close()
        for thread in self._threads:
            thread.join()


# ---------------------------------------------------------------------- the tasks
class TaskLookup:
    """Tasks (and the programs of input tasks) by id from a store's ``tasks`` table, read
    when first asked for with the store open read-only, kept in a bounded LRU cache."""

    def __init__(self, db: str | os.PathLike, cache_size: int = 200_000) -> None:
        from steptrace.store._store import connect
        self.db = Path(db)
        self.cache_size = cache_size
        self._cache: OrderedDict[str, tuple[dict, tuple | None]] = OrderedDict()
        self._lock = threading.Lock()
        con = connect(self.db, read_only=True)  # a missing or foreign file is refused now
        try:
            self._check(con)
        finally:
            con.close()

    def _check(self, con) -> None:
        from steptrace.store._store import has_table
        if not has_table(con, "tasks"):
            raise RewardError(f"{self.db} has no tasks table: run steptrace tasks --db "
                              f"{self.db} first")

    def get(self, task_ids: Iterable[str]) -> dict[str, tuple[dict, tuple | None]]:
        """(task, program or None) of each id found; ids not in the store are left out."""
        wanted = list(dict.fromkeys(task_ids))
        with self._lock:
            found = {t: self._cache[t] for t in wanted if t in self._cache}
            for task_id in found:
                self._cache.move_to_end(task_id)
        missing = [t for t in wanted if t not in found]
        if missing:
            # read without the lock: other batches keep using the cache meanwhile (two
            # batches missing the same task may both read it: the same rows)
            read = self._read(missing)
            with self._lock:
                for task_id, entry in read.items():
                    found[task_id] = self._cache[task_id] = entry
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return found

    def _read(self, task_ids: list[str]) -> dict[str, tuple[dict, tuple | None]]:
        import duckdb
        import pyarrow as pa
        from steptrace.scoring._load import load_programs
        from steptrace.store._store import StoreError, connect, first_line
        con = connect(self.db, read_only=True)
        try:
            con.register("wanted_tasks", pa.table({"task_id": task_ids}))
            columns = ", ".join(f"t.{c}" for c in TASK_FIELDS)
            cursor = con.execute(f"SELECT {columns} FROM tasks t JOIN wanted_tasks USING (task_id)")
            names = [d[0] for d in cursor.description]
            tasks = [dict(zip(names, row)) for row in cursor.fetchall()]
            con.unregister("wanted_tasks")
            # the programs of the tasks checked in the sandbox, and of those whose answer
            # may come as an assertion (its call must be of the program's entry)
            needed = [t for t in tasks if needs_program(t["kind"])]
            programs = load_programs(con, needed) if needed else {}
        except duckdb.Error as exc:
            raise StoreError(f"cannot read tasks from {self.db}: {first_line(exc)}") from exc
        finally:
            con.close()
        return {t["task_id"]: (t, programs.get(t["run_id"]) if needs_program(t["kind"])
                               else None) for t in tasks}


# ---------------------------------------------------------------------- the judge
class RewardJudge:
    """Judges batches of items (see the module docstring) against the tasks of store
    ``db``, as ``score`` would with ``options`` (``type_strict``, ``float_tolerance``),
    running sandboxed checks on ``workers`` sandbox worker processes (default: one per
    CPU) under ``limits.sandbox``. Safe to call from many threads at once; ``close()``
    (or ``with``) stops the workers."""

    def __init__(self, db: str | os.PathLike, *, workers: int | None = None,
                 limits: RewardLimits | None = None,
                 options: ScoreOptions | None = None) -> None:
        self.limits = limits or RewardLimits()
        self.options = options or ScoreOptions()
        self.tasks = TaskLookup(db)
        self._local = threading.local()
        self._batches = itertools.count(1)  # each batch's number in the fair queue
        self.slots = SandboxSlots(workers if workers is not None else (os.cpu_count() or 1),
                                  self.limits.sandbox, self.limits.max_client_checks,
                                  self.limits.retry_after)

    def __enter__(self) -> "RewardJudge":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self.slots.close()

    # ------------------------------------------------------------------ a batch
    def judge_batch(self, items: Any, client: Hashable = None) -> list[dict]:
        """One result per item, in order. RewardError when ``items`` is not a list or has
        more than ``limits.max_items`` items; RewardBusy when ``client`` (an IP address
        over HTTP; None: this process) has too many sandboxed checks under way for this
        batch's (nothing of the batch is run then); every problem of one item is that
        item's ``error`` result."""
        if not isinstance(items, list):
            raise RewardError(f"items must be a list, not {_json_type(items)}")
        if len(items) > self.limits.max_items:
            raise RewardError(f"too many items: {len(items)} (at most {self.limits.max_items} "
                              f"a request)")
        self._local.checks = {}  # this batch's sandboxed checks (this thread's batch)
        try:
            return self._judge_batch(items, client)
        finally:
            self._local.checks = {}

    def _judge_batch(self, items: list, client: Hashable = None) -> list[dict]:
        results: list[dict | None] = [None] * len(items)
        forms: list[str | None] = []
        for position, item in enumerate(items):
            form, problem = self._form(item)
            forms.append(form)
            if problem is not None:
                results[position] = result(False, ERROR, problem,
                                           CODE_KIND if form == "code" else None)
        task_ids = [item["task_id"] for item, form, done in zip(items, forms, results)
                    if form == "task" and done is None]
        try:
            known = self.tasks.get(task_ids) if task_ids else {}
        except Exception as exc:  # the store: every task item says why
            from steptrace.store._store import first_line
            known = {}
            for position, form in enumerate(forms):
                if form == "task" and results[position] is None:
                    results[position] = result(False, ERROR, f"cannot read the task: "
                                                             f"{first_line(exc)}")
        waiting: list[tuple[int, Future, str]] = []
        for position, (item, form) in enumerate(zip(items, forms)):
            if results[position] is not None:
                continue
            if form == "code":
                waiting.append((position, self._submit_code(item), CODE_KIND))
                continue
            entry = known.get(item["task_id"])
            if entry is None:
                results[position] = result(False, ERROR, f"unknown task_id {item['task_id']!r} "
                                                         f"(not in the store's tasks table)")
                continue
            task, program = entry
            try:
                judged = self._judge_task(task, program, item)
            except Exception as exc:  # e.g. a task of a kind this steptrace does not know
                from steptrace.store._store import first_line
                results[position] = result(False, ERROR, first_line(exc), task["kind"])
                continue
            if isinstance(judged, Future):
                waiting.append((position, judged, task["kind"]))
            else:
                results[position] = judged
        self.slots.submit(client, next(self._batches), list(self._local.checks.values()))
        for position, future, kind in waiting:
            try:
                found = future.result()
            except Exception as exc:  # a sandbox failure: this item's error
                from steptrace.store._store import first_line
                results[position] = result(False, ERROR, f"sandbox: {first_line(exc)}", kind)
                continue
            results[position] = (_code_result(found, items[position]["expected_output"],
                                              self.options) if kind == CODE_KIND
                                 else _input_result(found, kind))
        return results  # type: ignore[return-value]

    def _form(self, item: Any) -> tuple[str | None, str | None]:
        """("task" | "code" | None, the problem with it or None)."""
        if not isinstance(item, dict):
            return None, f"an item is a JSON object, not {_json_type(item)}"
        keys = set(item)
        if "task_id" in keys:
            form, allowed = "task", TASK_KEYS
            if ("answer" in keys) == ("response" in keys):
                return form, "a task item has one of answer and response"
            texts = {"task_id": False, "answer": True, "response": False}
        elif "code" in keys:
            form, allowed = "code", CODE_KEYS
            texts = {"code": False, "input": False, "expected_output": False, "entry": False}
            missing = [k for k in ("input", "expected_output") if k not in keys]
            if missing:
                return form, f"a code item needs {', '.join(missing)}"
        else:
            return None, "an item has task_id (a task's answer) or code (a code check)"
        unknown = sorted(keys - allowed)
        if unknown:
            return form, f"unknown field {unknown[0]!r}"
        for key in keys:
            value, nullable = item[key], texts[key]
            if value is None and nullable:
                continue
            if not isinstance(value, str):
                return form, f"{key} must be a string{' or null' if nullable else ''}, " \
                             f"not {_json_type(value)}"
            if len(value) > self.limits.max_text_chars:
                return form, f"{key} has {len(value)} characters (at most " \
                             f"{self.limits.max_text_chars})"
            if key == "task_id" and not _is_text(value):  # the store's lookup would fail
                return form, "task_id holds a lone surrogate (a \\ud800 escape alone): " \
                             "no task has it"
        if form == "code" and not item.get("entry", "f").isidentifier():
            return form, "entry must be a function's name"
        return form, None

    def _judge_task(self, task: dict, program: tuple | None, item: dict) -> dict | Future:
        kind = task["kind"]
        if "response" in item:
            entry = program[1] if program is not None else None
            answer = extract_answer(item["response"], kind, entry=entry)
        else:
            answer = item["answer"]
        if answer is None:
            return result(False, UNPARSEABLE, "no answer", kind)
        if not in_sandbox(kind):
            correct, distance = judge(task, answer, self.options)
            return result(correct, JUDGED, None if distance is None else f"distance {distance:g}",
                          kind)
        requests, order, locks = input_requests({task["task_id"]: task}, [(task, answer)],
                                                {task["run_id"]: program})
        if order[0] is None:  # not safe arguments: wrong, and never run
            correct, note = unsafe_input_verdict()
            return result(correct, UNSAFE_INPUT, note.partition(": ")[2], kind)
        return self._submit(requests[0], locks[0])

    def _submit_code(self, item: dict) -> Future:
        return self._submit({"code": item["code"], "entry": item.get("entry", "f"),
                             "input": item["input"], "mode": "run", "plain_output": True},
                            None)

    def _submit(self, request: dict, lock) -> Future:
        """The check's Future, queued with the batch's others once all are known; an
        identical check of the same batch shares it (each check runs in a fresh instance,
        so running it twice would give the same result)."""
        key = (request["code"], request["entry"], request["input"], request.get("expected"),
               lock.digest if lock is not None else None)
        batch = self._local.checks
        if key not in batch:
            batch[key] = Check(request, lock)
        return batch[key].future


def in_sandbox(kind: str) -> bool:
    """Whether answers of ``kind`` are checked by running them (its judge says so)."""
    known = task_kind(kind)
    return known is not None and known.judge.in_sandbox


def needs_program(kind: str) -> bool:
    """Whether judging an answer of ``kind`` reads its run's program: to run it in the
    sandbox, or to extract it from a response (an assertion's call, a whole call, must be
    of the program's entry)."""
    known = task_kind(kind)
    return known is not None and (known.judge.in_sandbox or known.assertion is not None)


def _input_result(found: dict, kind: str) -> dict:
    """An input check's result, from the guest's result as ``score`` reads it (an answer
    the guest refused for the values it built: status ``unsafe_input``, as one refused
    here)."""
    correct, note = input_verdict(found)
    if is_refused_answer(found):
        return result(False, UNSAFE_INPUT, note.partition(": ")[2], kind)
    return result(correct, str(found.get("status")), note, kind)


def _code_result(found: dict, expected: str, options: ScoreOptions) -> dict:
    """A code check: right when the run returned a plain value (built-in data all the way
    down, so its text is the runner's own repr and no ``__repr__`` of the code's: request
    ``plain_output``) whose repr (not cut) equals ``expected`` as the output judge
    compares them."""
    status = str(found.get("status"))
    if status != "ok":
        _, note = input_verdict(found)
        return result(False, status, note, CODE_KIND)
    output = found.get("output")
    if found.get("output_plain") is not True:
        return result(False, status, f"the return value is a {found.get('output_type')}, not "
                                     f"built-in data: a code check compares plain values",
                      CODE_KIND)
    if not isinstance(output, str) or found.get("output_truncated"):
        return result(False, status, "the return value's repr was cut at the output limit",
                      CODE_KIND)
    correct = same_value(output, expected, options)
    return result(correct, status, None if correct else f"returned {output}", CODE_KIND)


def _is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text (JSON's ``\\ud800`` escape alone gives a string
    UTF-8 cannot hold, which the store and the sandbox would refuse)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(value),
                                                                          type(value).__name__)


def judge_answers(db: str | os.PathLike, items: list, *, workers: int | None = None,
                  limits: RewardLimits | None = None,
                  options: ScoreOptions | None = None) -> list[dict]:
    """Judge one batch of ``items`` against the tasks of store ``db`` as the reward service
    does (see :class:`RewardJudge`; for many batches keep one ``RewardJudge``, whose
    sandbox workers stay up)."""
    with RewardJudge(db, workers=workers, limits=limits, options=options) as judge_:
        return judge_.judge_batch(items)
