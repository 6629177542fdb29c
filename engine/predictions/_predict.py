"""Model predictions for tasks, over any OpenAI-compatible API: chat completions, or
completions (``endpoint``: a prompt continued as it is, for base models), with the
request options of ``PredictOptions`` (stop sequences, extra body fields, a timeout per
request, a budget of requests per run).

One request per (task, sample index), because many servers ignore ``n``; at most
``concurrency`` in flight. Retries with backoff on 429, 5xx, timeouts and dropped
connections are the ``openai`` client's own (``max_retries``; it honours Retry-After), and
so is the base URL when none is given (``$OPENAI_BASE_URL``, else OpenAI's API).

Every prediction belongs to an experiment (engine/predictions/_experiments.py): the model, a label and
the settings the requests were sent with. Responses are stored in the ``predictions``
table keyed by (task, model, label, sample), committed in small batches by one writer, so
a crash loses at most the last unflushed batch and a re-run never duplicates a row: it
skips the experiment's pairs stored without an error and asks again, replacing the row,
for pairs whose last attempt ended in an error. Another experiment of the same model is
never skipped for this one. ``redo`` deletes the experiment's stored predictions of the
tasks (and their scores) first.

The store is opened only for the first look (the experiment and what is stored) and for
each batch's transaction, and closed in between: DuckDB lets one process open a file
for writing, or several for reading only, so a connection held for the whole run would
lock ``score``, ``query`` and every other command out of the store until it ends. A
batch that finds the store in use by another process is kept and tried again at the
next flush.

Errors that no retry can fix (the server cannot be reached, the model does not exist,
the key is refused) stop the run: requests already under way are allowed to finish and
are stored, nothing new is sent, and ``PredictError`` says what went wrong in one line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol

import duckdb
import pyarrow as pa

from steptrace.store._arrow import arrow_array
from steptrace.tasks._answers import extract_answer
from steptrace.predictions._experiments import (PREDICTIONS_DDL, SCORES_DDL, Experiment, ExperimentError,
                                check, check_label, default_label, drop_if_empty,
                                prompt_styles, register, sha256)
from steptrace.store._store import StoreError, StoreLockedError, connect, first_line
from steptrace.store._tables import PREDICTIONS
from steptrace.corpus._text import open_utf8
from steptrace.tasks._source import (TasksLike, in_memory_tasks, is_tasks_file, table_tasks,
                                    task_digest, tasks_name)
from steptrace.errors import InputError, Interrupted, PredictError

if TYPE_CHECKING:
    import openai
# ``openai`` is imported where a run starts, not here: importing this module (to read a
# store's predictions, say) should not cost openai's ~0.6 s.

# The settings of a run and their defaults live in _options, which the CLI reads at start.
from steptrace.predictions._options import DEFAULT_API_KEY_ENV, PredictOptions  # noqa: E402,F401
from steptrace.store._transaction import transaction
PLACEHOLDER_API_KEY = "steptrace-no-key"  # local servers need none, the client needs one

PREDICTION_TYPES = PREDICTIONS.arrow_types()  # the table's columns, in its order
PREDICTION_COLUMNS = PREDICTIONS.column_names

Progress = Callable[[int, int], None]


class TasksFileError(InputError):
    """The tasks file is missing or holds a bad record; the message names file and line."""


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class Task:
    """The fields of a task record that predicting needs: what to ask, and which run of
    which store it is about (``run`` is None for a record that names no run: prompts
    written by hand)."""

    task_id: str
    kind: str
    prompt: str
    prompt_style: str | None = None
    run: "AskedRun | None" = None
    entry: str | None = None  # what the run's program calls (answer extraction reads it)


@dataclass(frozen=True)
class AskedRun:
    """The run a task record names and its question, which with the store's key of that
    run give the record's task id (steptrace.tasks._source.task_digest): a record made
    from another store's run of another job does not."""

    run_id: int
    line: int | None
    var: str | None
    occurrence: int | None
    question: dict


@dataclass
class Prediction:
    """One row of the ``predictions`` table (``label`` None only for ``steptrace
    generate``'s rows, which go to its log, not to a store)."""

    task_id: str
    model: str
    sample_index: int
    kind: str
    raw_text: str | None = None
    answer: str | None = None
    parsed: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None
    error: str | None = None
    finish_reason: str | None = None
    created_at: dt.datetime = field(
        default_factory=lambda: dt.datetime.now(dt.timezone.utc).replace(tzinfo=None))
    label: str | None = None
    prompt_style: str | None = None
    prompt_sha256: str | None = None


class RequestCounter:
    """RequestRun's count of the requests a run made (answers and errors, after the
    client's retries) and their tokens, for a summary dataclass with the fields
    ``requests``, ``errors``, ``prompt_tokens`` and ``completion_tokens``."""

    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int

    def count(self, row: Prediction) -> None:
        self.requests += 1
        self.errors += row.error is not None
        self.prompt_tokens += row.prompt_tokens or 0
        self.completion_tokens += row.completion_tokens or 0


@dataclass
class PredictSummary(RequestCounter):
    tasks_file: str
    db: str
    model: str
    label: str
    tasks: int
    samples: int
    pairs: int = 0         # tasks × samples
    deleted: int = 0       # rows of the experiment deleted first (redo)
    skipped: int = 0       # pairs already stored without an error
    requests: int = 0      # pairs asked for in this run and stored (answers and errors)
    errors: int = 0        # of those, failed after the client's retries
    unparseable: int = 0   # of those, answered but with no answer found in the text
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    not_asked: int = 0     # pairs left for a later run by the request budget (max_requests)

    def count(self, row: Prediction) -> None:
        super().count(row)
        self.unparseable += row.error is None and not row.parsed

    def as_dict(self) -> dict:
        return asdict(self)

    def as_rows(self) -> list[tuple[str, object]]:
        rate = self.requests / self.seconds if self.seconds > 0 else 0.0
        return [("tasks file", self.tasks_file), ("db", self.db), ("model", self.model),
                ("label", self.label), ("tasks", self.tasks), ("samples per task", self.samples),
                ("pairs (task × sample)", self.pairs), ("deleted for --redo", self.deleted),
                ("already stored (skipped)", self.skipped), ("requests made", self.requests),
                ("errors", self.errors), ("unparseable", self.unparseable),
                ("prompt tokens", self.prompt_tokens),
                ("completion tokens", self.completion_tokens),
                ("seconds", f"{self.seconds:.2f}"), ("requests/s", f"{rate:.1f}")] + (
                    [("not asked (--max-requests; run again)", self.not_asked)]
                    if self.not_asked else [])


# ------------------------------------------------------------------ tasks file
def load_tasks(path: TasksLike) -> list[Task]:
    """Read the tasks JSONL, refusing the whole file at its first bad record: a tasks file
    is machine-written, so one bad line means the file is not what the user thinks.
    ``path`` may also be tasks in memory (steptrace.tasks._source), checked the same way."""
    if not is_tasks_file(path):
        return _unique(((where, number, _task_from_record(record, where)) for number, (
            where, record) in enumerate(in_memory_tasks(path), start=1)), "record")
    table = table_tasks(path)
    if table is not None:  # Parquet, a saved dataset
        return _unique(((where, number, _task_from_record(record, where)) for number, (
            where, record) in enumerate(table, start=1)), "row")
    path = Path(path)
    if not path.is_file():
        raise TasksFileError(f"tasks file not found: {path}")
    with open_utf8(path) as lines:
        return _unique(((f"{path}:{number}", number, _task_from_line(line, f"{path}:{number}"))
                        for number, line in enumerate(lines, start=1) if line.strip()), "line")


def _unique(found: Iterable[tuple[str, int, Task]], unit: str) -> list[Task]:
    """The tasks, read in order and refused at the first task_id seen before (``where``
    names the second, ``unit`` and number the first)."""
    tasks: list[Task] = []
    first_of: dict[str, int] = {}
    for where, number, task in found:
        if task.task_id in first_of:
            raise TasksFileError(f"{where}: duplicate task_id {task.task_id!r} "
                                 f"(first on {unit} {first_of[task.task_id]})")
        first_of[task.task_id] = number
        tasks.append(task)
    return tasks


def _task_from_line(line: str, where: str) -> Task:
    try:
        record = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        raise TasksFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    return _task_from_record(record, where)


def _task_from_record(record: object, where: str) -> Task:
    if not isinstance(record, dict):
        raise TasksFileError(f"{where}: a task record must be a JSON object")
    for name in ("task_id", "kind", "prompt"):
        if not isinstance(record.get(name), str) or not record[name]:
            raise TasksFileError(f"{where}: field {name!r} must be a non-empty string")
    style = record.get("prompt_style")
    if style is not None and not isinstance(style, str):
        raise TasksFileError(f"{where}: field 'prompt_style' must be a string")
    return Task(record["task_id"], record["kind"], record["prompt"], style,
                _asked_run(record, where))


def _asked_run(record: dict, where: str) -> AskedRun | None:
    """The run (and question) a record names, None when it names no run."""
    if record.get("run_id") is None:
        return None
    for name in ("run_id", "line", "occurrence"):
        value = record.get(name)
        if value is not None and (type(value) is not int or value < 0):
            raise TasksFileError(f"{where}: field {name!r} must be an integer >= 0")
    var, question = record.get("var"), record.get("question")
    if var is not None and not isinstance(var, str):
        raise TasksFileError(f"{where}: field 'var' must be a string")
    if question is not None:
        try:
            question = json.loads(question) if isinstance(question, str) else None
        except ValueError:
            question = None
        if not isinstance(question, dict):
            raise TasksFileError(f"{where}: field 'question' must be the JSON text of an object")
    return AskedRun(record["run_id"], record.get("line"), var, record.get("occurrence"),
                    question or {})


def check_runs(tasks: list[Task], db: str | Path) -> list[Task]:
    """``tasks`` with their programs' entries (for answer extraction), after refusing,
    before anything is asked or stored, tasks that name a run ``db`` does not hold: its
    ``run_id`` missing from the store, or there another job than the one the record's
    task id was made from (the tasks were made from another store). One line, naming the
    first such task."""
    asked = [task for task in tasks if task.run is not None]
    if not asked:
        return tasks
    where = "--db"
    if not Path(db).exists():
        first = asked[0]
        raise TasksFileError(f"task {first.task_id} is about run {first.run.run_id}, but "
                             f"there is no store {db}: predict with the {where} the tasks "
                             "were made from")
    con = connect(db, read_only=True)
    try:
        con.register("asked_runs", pa.table({"run_id": arrow_array(
            sorted({task.run.run_id for task in asked}), pa.int64())}))
        found = {run_id: (key, entry) for run_id, key, entry in con.execute(
            "SELECT r.run_id, r.run_key, p.entry FROM runs r JOIN asked_runs a USING (run_id) "
            "JOIN programs p USING (program_id)").fetchall()}
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    for task in asked:
        run = task.run
        if run.run_id not in found:
            raise TasksFileError(f"task {task.task_id} is about run {run.run_id}, which {db} "
                                 f"does not hold: the tasks were made from another store "
                                 f"(predict with the {where} they were made from)")
        if task_digest(found[run.run_id][0], task.kind, run.line, run.var, run.occurrence,
                       run.question) != task.task_id:
            raise TasksFileError(f"task {task.task_id} is not about run {run.run_id} of {db} "
                                 "(that run is another job): the tasks were made from another "
                                 f"store (predict with the {where} they were made from)")
    return [task if task.run is None else replace(task, entry=found[task.run.run_id][1])
            for task in tasks]


def resolve_api_key(env_name: str) -> str | None:
    """The key in ``env_name``, or None when the variable is unset or empty."""
    return os.environ.get(env_name) or None


def experiment_for(options: PredictOptions, tasks: list[Task]) -> Experiment:
    """The experiment a run of ``options`` over ``tasks`` adds to: its label is
    ``options.label``, or spelled from the settings (steptrace.predictions._experiments.default_label)."""
    style = prompt_styles([task.prompt_style for task in tasks])
    temperature = float(options.temperature)
    label = options.label or default_label(style, temperature, options.top_p,
                                           options.max_tokens, options.system_prompt)
    settings = options.request_settings()
    if options.label is None and settings is not None:
        # the endpoint, and a digest of the stop sequences and extra fields: other request
        # settings, another default label
        label += "-" + options.endpoint + ("" if not (options.stop or options.extra_body) else
                                           "-r" + sha256(json.dumps(settings, sort_keys=True))[:8])
    return Experiment(options.model, check_label(label), style, options.system_prompt,
                      temperature, options.top_p, options.max_tokens)


# ------------------------------------------------------------------ the store
class PredictionStore:
    """The single writer of the ``predictions`` table. It holds no connection: each call
    opens the store, runs one transaction and closes it (see the module docstring)."""

    def __init__(self, db: str | Path) -> None:
        self.path = db
        self.experiment: Experiment | None = None  # recorded with the first rows written
        with self._open() as con:
            self._execute(con, "initialise predictions in", lambda: con.execute(PREDICTIONS_DDL))

    def _open(self) -> duckdb.DuckDBPyConnection:
        return connect(self.path)  # waits a while for a store another process has open

    def _execute(self, con: duckdb.DuckDBPyConnection, doing: str, work: Callable[[], object]):
        """``work()`` in one transaction, its DuckDB error as one line naming the store."""
        try:
            with transaction(con):
                return work()
        except duckdb.Error as exc:
            raise StoreError(f"cannot {doing} database {self.path}: {first_line(exc)}") from exc

    def begin(self, experiment: Experiment, prompts: dict[str, str],
              redo: bool = False) -> tuple[set[tuple[str, int]], int]:
        """Start a run of ``experiment`` over the tasks of ``prompts`` (task id → SHA-256
        of its prompt), in one transaction: check the experiment (refused if its label
        names other settings; it is recorded with the first predictions :meth:`write`
        stores), with ``redo`` delete its stored predictions of these tasks and their
        scores, and refuse the run if a task was asked under this label with another
        prompt. Returns the (task_id, sample_index) pairs stored without an error, and
        the number of rows deleted."""
        wanted = pa.table({"task_id": arrow_array(list(prompts), pa.string()),
                           "prompt_sha256": arrow_array(list(prompts.values()), pa.string())})
        key = [experiment.model, experiment.label]

        def work() -> tuple[set[tuple[str, int]], int]:
            check(con, experiment)
            deleted = 0
            if redo:
                deleted = con.execute(
                    "DELETE FROM predictions WHERE model = ? AND label = ? AND task_id IN "
                    "(SELECT task_id FROM wanted_prompts)", key).fetchall()[0][0]
                con.execute(SCORES_DDL)
                con.execute("DELETE FROM scores WHERE model = ? AND label = ? AND task_id IN "
                            "(SELECT task_id FROM wanted_prompts)", key)
            changed, example = con.execute(
                "SELECT count(DISTINCT p.task_id), min(p.task_id) FROM predictions p "
                "JOIN wanted_prompts w USING (task_id) WHERE p.model = ? AND p.label = ? "
                "AND p.prompt_sha256 IS DISTINCT FROM w.prompt_sha256", key).fetchone()
            if changed:
                raise ExperimentError(
                    f"label {experiment.label!r} of model {experiment.model!r} holds "
                    f"predictions of {changed} of these tasks asked with other prompts or "
                    f"request settings (task {example}): the tasks were made from another "
                    "template, or the endpoint, stop sequences or extra body differ; give "
                    "another --label, or --redo to replace them")
            rows = con.execute(
                "SELECT p.task_id, p.sample_index FROM predictions p JOIN wanted_prompts w "
                "USING (task_id) WHERE p.model = ? AND p.label = ? AND p.error IS NULL",
                key).fetchall()
            return {(task_id, sample) for task_id, sample in rows}, deleted

        with self._open() as con:
            con.register("wanted_prompts", wanted)
            try:
                found = self._execute(con, "start predictions in", work)
            finally:
                con.unregister("wanted_prompts")
        self.experiment = experiment
        return found

    def drop_if_empty(self) -> None:
        """After a run that failed: no experiment is left that holds no prediction (one
        ``--redo`` emptied, before the run stored anything)."""
        if self.experiment is None:
            return
        with self._open() as con:
            self._execute(con, "clean up", lambda: drop_if_empty(con, self.experiment))

    def write(self, rows: list[Prediction]) -> None:
        """Insert ``rows`` in one transaction, replacing stored rows with the same key
        (earlier attempts that ended in an error), and record the run's experiment in the
        same transaction if it is not recorded yet."""
        if not rows:
            return
        table = pa.table({name: arrow_array([getattr(r, name) for r in rows], kind)
                          for name, kind in PREDICTION_TYPES.items()})
        columns = ", ".join(PREDICTION_COLUMNS)

        def work() -> None:
            if self.experiment is not None:
                register(con, self.experiment)
            con.execute(f"INSERT OR REPLACE INTO predictions ({columns}) "
                        f"SELECT {columns} FROM incoming_predictions")

        with self._open() as con:
            con.register("incoming_predictions", table)
            self._execute(con, "write to", work)


# ------------------------------------------------------------------ predicting
class RowSink(Protocol):
    """Where a run's rows go: the predictions table, or a generation log."""

    def write(self, rows: list[Prediction]) -> None: ...


class RowCounter(Protocol):
    def count(self, row: Prediction) -> None: ...


Extract = Callable[[str | None, Task], str | None] | None


def predict(tasks_path: TasksLike, db: str | Path, options: PredictOptions,
            progress: Progress | None = None) -> PredictSummary:
    """Ask ``options.model`` every (task, sample) pair of the run's experiment not yet
    stored without an error, and store the responses; see the module docstring for the
    experiment, retries, resuming and errors. ``tasks_path`` is a tasks file or tasks in
    memory (``load_tasks``)."""
    started = time.perf_counter()
    tasks = load_tasks(tasks_path)
    experiment = experiment_for(options, tasks)
    tasks = check_runs(tasks, db)  # another store's runs: refused before anything is asked
    summary = PredictSummary(tasks_name(tasks_path), str(db), options.model, experiment.label,
                             len(tasks), options.samples)
    store = PredictionStore(db)
    done: set[tuple[str, int]] = set()
    if tasks:  # an empty tasks file records no experiment
        done, summary.deleted = store.begin(
            experiment, {task.task_id: options.prompt_digest(task.prompt) for task in tasks},
            options.redo)
    pairs = [(task, sample) for task in tasks for sample in range(options.samples)]
    todo = [(task, sample) for task, sample in pairs if (task.task_id, sample) not in done]
    summary.pairs, summary.skipped = len(pairs), len(pairs) - len(todo)
    if options.max_requests is not None and len(todo) > options.max_requests:
        # the budget: the first pairs now, the rest by a later run (the same command)
        summary.not_asked = len(todo) - options.max_requests
        todo = todo[:options.max_requests]
    run = RequestRun(options, store, summary, progress or (lambda done, total: None),
                     label=experiment.label)
    try:
        fatal = run.run(todo)
    except KeyboardInterrupt:  # the answers received were flushed (RequestRun.execute)
        raise Interrupted(summary.requests, "predictions") from None
    summary.seconds = time.perf_counter() - started
    if fatal is not None:
        if not run.write_failed:
            store.drop_if_empty()
        raise PredictError(f"{fatal}; stopped with {summary.requests} new predictions stored "
                           "(run again to resume)")
    return summary


class RequestRun:
    """One run's requests, its writer and its stop flag (no state outlives the run).
    ``steptrace predict`` and ``steptrace generate`` share it: the rows go to ``store``
    (anything with ``write(rows)``), ``extract`` finds the answer in a response, and
    ``label`` names the experiment of the rows (None for generate's log)."""

    def __init__(self, options: PredictOptions, store: RowSink, summary: RowCounter,
                 progress: Progress, extract: Extract = None, label: str | None = None) -> None:
        self.options = options
        self.store = store
        self.summary = summary
        self.progress = progress
        self.extract = extract or _extract_task_answer
        self.label = label
        self.where = options.base_url or "the default base URL"  # the client's, once made
        self.fatal: str | None = None
        self.write_failed = False
        self.answered = 0
        self.total = 0
        self.queue: asyncio.Queue[Prediction | None] = asyncio.Queue()

    def run(self, todo: list[tuple[Task, int]]) -> str | None:
        """:meth:`execute` to the end, from synchronous code: under ``asyncio.run``, in a
        thread of its own when this thread already runs an event loop (a notebook's),
        which ``asyncio.run`` refuses."""
        try:
            asyncio.get_running_loop()
            running = True
        except RuntimeError:
            running = False
        # run outside the except clause: a failed request's error must not carry "no
        # running event loop" as its context (its root cause is what the run reports)
        if not running:
            return asyncio.run(self.execute(todo))
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="steptrace") as pool:
            return pool.submit(asyncio.run, self.execute(todo)).result()

    async def execute(self, todo: list[tuple[Task, int]]) -> str | None:
        """Send every pair; return the fatal error that stopped the run, if one did."""
        self.total = len(todo)
        self.progress(0, self.total)
        if not todo:
            return None
        import openai
        options = self.options
        key = resolve_api_key(options.api_key_env) or PLACEHOLDER_API_KEY
        writer = asyncio.create_task(self._write_batches())
        try:
            # base_url None: the client reads $OPENAI_BASE_URL, else uses OpenAI's API
            async with openai.AsyncOpenAI(api_key=key, base_url=options.base_url,
                                          timeout=options.timeout_s,
                                          max_retries=options.max_retries) as client:
                self.where = options.base_url or str(client.base_url).rstrip("/")
                pending = iter(todo)
                async with asyncio.TaskGroup() as group:
                    for _ in range(min(options.concurrency, len(todo))):
                        group.create_task(self._worker(client, pending))
        finally:
            self.queue.put_nowait(None)  # the writer flushes what it holds, then ends
            await writer
        return self.fatal

    async def _worker(self, client: openai.AsyncOpenAI,
                      pending: Iterator[tuple[Task, int]]) -> None:
        for task, sample in pending:  # shared: each pair goes to exactly one worker
            if self.fatal is not None:
                return
            row = await self._ask(client, task, sample)
            if row is not None:
                self.answered += 1
                self.progress(self.answered, self.total)
                await self.queue.put(row)

    async def _ask(self, client: openai.AsyncOpenAI, task: Task,
                   sample: int) -> Prediction | None:
        """The row for one pair, or None after a fatal error (which stops the run)."""
        import openai
        options = self.options
        started = time.perf_counter()
        optional = {"max_tokens": options.max_tokens, "top_p": options.top_p,
                    "stop": list(options.stop) or None,
                    "extra_body": options.request_fields() or None}
        sent = {name: value for name, value in optional.items() if value is not None}
        try:
            if options.endpoint == "completions":
                response = await client.completions.create(
                    model=options.model, prompt=task.prompt, temperature=options.temperature,
                    **sent)
            else:
                response = await client.chat.completions.create(
                    model=options.model, messages=messages(task.prompt, options.system_prompt),
                    temperature=options.temperature, **sent)
        except openai.OpenAIError as exc:
            fatal = fatal_message(exc, options, self.where)
            if fatal is not None:
                self.fatal = self.fatal or fatal
                return None
            row = Prediction(task.task_id, options.model, sample, task.kind,
                             latency_ms=_ms_since(started),
                             error=f"{type(exc).__name__}: {first_line(exc)}")
        else:
            row = _prediction(task, sample, options.model, response, _ms_since(started),
                              self.extract)
        row.label, row.prompt_style, row.prompt_sha256 = (self.label, task.prompt_style,
                                                          options.prompt_digest(task.prompt))
        return row

    async def _write_batches(self) -> None:
        """The single writer: commits a batch every ``flush_rows`` rows or
        ``flush_every_s`` after its first row, and what is left at the end. A batch the
        store refused because another process had it open is kept, grows, and is tried
        again ``flush_every_s`` later (not at every further row)."""
        loop = asyncio.get_running_loop()
        every = self.options.flush_every_s
        batch: list[Prediction] = []
        deadline: float | None = None  # when the batch is due; None while it is empty
        refused = False                # the last commit found the store in use
        while True:
            wait = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                row = await asyncio.wait_for(self.queue.get(), wait)
            except TimeoutError:
                due = True
            else:
                if row is None:
                    await self._flush(batch, last=True)
                    return
                batch.append(row)
                if deadline is None:
                    deadline = loop.time() + every
                due = len(batch) >= self.options.flush_rows and not refused
            if due:
                batch = await self._flush(batch)
                refused = bool(batch)
                deadline = loop.time() + every if batch else None

    async def _flush(self, batch: list[Prediction], last: bool = False) -> list[Prediction]:
        """Commit ``batch`` and return what is left to commit: nothing, or, when another
        process had the store open (past connect's wait), the whole batch unless it is the
        last. After any other failed write, stop the run and store nothing more (the rows
        are lost either way, and asking for more would waste the requests)."""
        if batch and not self.write_failed:
            try:
                await asyncio.to_thread(self.store.write, batch)
            except StoreLockedError as exc:
                if not last:
                    return batch
                self.write_failed = True
                self.fatal = f"{exc}; {len(batch)} answers not stored"
                return []
            except (StoreError, OSError) as exc:
                self.write_failed = True
                self.fatal = str(exc)
                return []
            for row in batch:
                self.summary.count(row)
        return []


def messages(prompt: str, system_prompt: str | None) -> list[dict[str, str]]:
    """The chat messages of one request: the prompt as the user's, after the system prompt."""
    user = [{"role": "user", "content": prompt}]
    return user if system_prompt is None else [{"role": "system", "content": system_prompt}] + user


def fatal_message(exc: openai.OpenAIError, options: PredictOptions, where: str) -> str | None:
    """One line for an error no retry can fix; None for a per-request failure (timeouts,
    429 and 5xx still failing after the client's retries, a rejected prompt). ``where`` is
    the base URL the client used."""
    import openai
    if isinstance(exc, openai.APITimeoutError):
        return None
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach {where}: {_root_cause(exc)}"
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return (f"{where} refused the API key from ${options.api_key_env} "
                f"({exc.status_code}: {_server_message(exc)})")
    if isinstance(exc, openai.NotFoundError):
        return (f"model {options.model!r} not found at {where} (404: {_server_message(exc)}); "
                "check the model name and that the base URL ends in /v1")
    return None


def _root_cause(exc: BaseException) -> str:
    """The innermost cause of a connection error: the layers above it (openai, httpx,
    httpcore) only say "Connection error." or "All connection attempts failed"."""
    seen: list[BaseException] = [exc]
    while (inner := seen[-1].__cause__ or seen[-1].__context__) is not None and inner not in seen:
        seen.append(inner)
    root = seen[-1]
    return "connection refused" if isinstance(root, ConnectionRefusedError) else first_line(root)


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return first_line(Exception(str(message)))
    return first_line(exc)


def _extract_task_answer(text: str | None, task: Task) -> str | None:
    return extract_answer(text, task.kind, entry=task.entry)


def _prediction(task: Task, sample: int, model: str, response, latency_ms: float,
                extract: Callable[[str | None, Task], str | None]) -> Prediction:
    """A row from a chat completion or a completion (its choice's ``text``), tolerating
    servers that leave fields out."""
    choices = getattr(response, "choices", None) or []
    choice = choices[0] if choices else None
    message = getattr(choice, "message", None)
    text = getattr(message, "content", None) if message is not None else getattr(
        choice, "text", None)
    usage = getattr(response, "usage", None)
    answer = extract(text, task)
    return Prediction(
        task.task_id, model, sample, task.kind, raw_text=text, answer=answer,
        parsed=answer is not None,
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
        latency_ms=latency_ms, finish_reason=getattr(choice, "finish_reason", None),
        error=None if choice is not None else "no choices in the response")


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
