"""Model predictions for tasks, over any OpenAI-compatible chat-completions API.

One request per (task, sample index), because many servers ignore ``n``; at most
``concurrency`` in flight. Retries with backoff on 429, 5xx, timeouts and dropped
connections are the ``openai`` client's own (``max_retries``; it honours Retry-After).

Every response is stored in the ``predictions`` table of the store, committed in small
batches by one writer, so a crash loses at most the last unflushed batch and a re-run
never duplicates a row: it skips (task, model, sample) pairs stored without an error and
asks again, replacing the row, for pairs whose last attempt ended in an error.

Errors that no retry can fix (the server cannot be reached, the model does not exist,
the key is refused) stop the run: requests already under way are allowed to finish and
are stored, nothing new is sent, and ``PredictError`` says what went wrong in one line.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import duckdb
import pyarrow as pa

from engine.answers import extract_answer
from engine.store import StoreError, connect, first_line
from engine.textfiles import open_utf8

if TYPE_CHECKING:
    import openai
# ``openai`` is imported where a run starts, not here: the CLI imports this module for
# PredictOptions' defaults, and importing openai would add ~0.6 s to every command.

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_API_KEY = "steptrace-no-key"  # local servers need none, the client needs one

PREDICTIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS predictions (
    task_id            VARCHAR NOT NULL,
    model              VARCHAR NOT NULL,
    sample_index       INTEGER NOT NULL,
    kind               VARCHAR NOT NULL,
    raw_text           VARCHAR,
    answer             VARCHAR,
    parsed             BOOLEAN NOT NULL,
    prompt_tokens      BIGINT,
    completion_tokens  BIGINT,
    latency_ms         DOUBLE,
    error              VARCHAR,
    finish_reason      VARCHAR,
    created_at         TIMESTAMP,
    PRIMARY KEY (task_id, model, sample_index)
)
"""
PREDICTION_TYPES = {
    "task_id": pa.string(), "model": pa.string(), "sample_index": pa.int32(),
    "kind": pa.string(), "raw_text": pa.string(), "answer": pa.string(),
    "parsed": pa.bool_(), "prompt_tokens": pa.int64(), "completion_tokens": pa.int64(),
    "latency_ms": pa.float64(), "error": pa.string(), "finish_reason": pa.string(),
    "created_at": pa.timestamp("us"),
}
PREDICTION_COLUMNS = tuple(PREDICTION_TYPES)

Progress = Callable[[int, int], None]


class PredictError(RuntimeError):
    """A failure that stops the run (unreachable server, unknown model, refused key)."""


class TasksFileError(ValueError):
    """The tasks file is missing or holds a bad record; the message names file and line."""


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class Task:
    """The fields of a task record that predicting needs."""

    task_id: str
    kind: str
    prompt: str
    prompt_style: str | None = None


@dataclass(frozen=True)
class PredictOptions:
    model: str
    base_url: str
    api_key_env: str = DEFAULT_API_KEY_ENV
    samples: int = 1
    temperature: float = 0.0
    max_tokens: int | None = 2048
    concurrency: int = 8
    timeout_s: float = 120.0
    max_retries: int = 3
    flush_rows: int = 50      # commit a batch after this many responses ...
    flush_every_s: float = 1.0  # ... or this long after its first one

    def __post_init__(self) -> None:
        """Library callers get the checks the CLI's option types make."""
        for name, low in (("samples", 1), ("concurrency", 1), ("max_retries", 0),
                          ("flush_rows", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be at least {low}")
        if self.timeout_s <= 0 or self.temperature < 0 or self.flush_every_s < 0:
            raise ValueError("timeout_s must be > 0, temperature and flush_every_s >= 0")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")


@dataclass
class Prediction:
    """One row of the ``predictions`` table."""

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


@dataclass
class PredictSummary:
    tasks_file: str
    db: str
    model: str
    tasks: int
    samples: int
    pairs: int = 0         # tasks × samples
    skipped: int = 0       # pairs already stored without an error
    requests: int = 0      # pairs asked for in this run and stored (answers and errors)
    errors: int = 0        # of those, failed after the client's retries
    unparseable: int = 0   # of those, answered but with no answer found in the text
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def count(self, row: Prediction) -> None:
        self.requests += 1
        self.errors += row.error is not None
        self.unparseable += row.error is None and not row.parsed
        self.prompt_tokens += row.prompt_tokens or 0
        self.completion_tokens += row.completion_tokens or 0

    def as_dict(self) -> dict:
        return asdict(self)

    def as_rows(self) -> list[tuple[str, object]]:
        rate = self.requests / self.seconds if self.seconds > 0 else 0.0
        return [("tasks file", self.tasks_file), ("db", self.db), ("model", self.model),
                ("tasks", self.tasks), ("samples per task", self.samples),
                ("pairs (task × sample)", self.pairs),
                ("already stored (skipped)", self.skipped), ("requests made", self.requests),
                ("errors", self.errors), ("unparseable", self.unparseable),
                ("prompt tokens", self.prompt_tokens),
                ("completion tokens", self.completion_tokens),
                ("seconds", f"{self.seconds:.2f}"), ("requests/s", f"{rate:.1f}")]


# ------------------------------------------------------------------ tasks file
def load_tasks(path: str | Path) -> list[Task]:
    """Read the tasks JSONL, refusing the whole file at its first bad record: a tasks file
    is machine-written, so one bad line means the file is not what the user thinks."""
    path = Path(path)
    if not path.is_file():
        raise TasksFileError(f"tasks file not found: {path}")
    tasks: list[Task] = []
    first_line_of: dict[str, int] = {}
    with open_utf8(path) as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            task = _task_from_line(line, f"{path}:{number}")
            if task.task_id in first_line_of:
                raise TasksFileError(f"{path}:{number}: duplicate task_id {task.task_id!r} "
                                     f"(first on line {first_line_of[task.task_id]})")
            first_line_of[task.task_id] = number
            tasks.append(task)
    return tasks


def _task_from_line(line: str, where: str) -> Task:
    try:
        record = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        raise TasksFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise TasksFileError(f"{where}: a task record must be a JSON object")
    for name in ("task_id", "kind", "prompt"):
        if not isinstance(record.get(name), str) or not record[name]:
            raise TasksFileError(f"{where}: field {name!r} must be a non-empty string")
    style = record.get("prompt_style")
    if style is not None and not isinstance(style, str):
        raise TasksFileError(f"{where}: field 'prompt_style' must be a string")
    return Task(record["task_id"], record["kind"], record["prompt"], style)


def resolve_api_key(env_name: str) -> str | None:
    """The key in ``env_name``, or None when the variable is unset or empty."""
    return os.environ.get(env_name) or None


# ------------------------------------------------------------------ the store
class PredictionStore:
    """The single writer of the ``predictions`` table."""

    def __init__(self, db: str | Path) -> None:
        self.path = db
        self.con = connect(db)
        try:
            self.con.execute(PREDICTIONS_SCHEMA)
        except duckdb.Error as exc:
            self.con.close()
            raise StoreError(f"cannot initialise predictions in {db}: {first_line(exc)}") from exc

    def close(self) -> None:
        self.con.close()

    def stored_ok(self, model: str) -> set[tuple[str, int]]:
        """(task_id, sample_index) pairs of ``model`` stored without an error."""
        try:
            rows = self.con.execute("SELECT task_id, sample_index FROM predictions "
                                    "WHERE model = ? AND error IS NULL", [model]).fetchall()
        except duckdb.Error as exc:
            raise StoreError(f"cannot read database {self.path}: {first_line(exc)}") from exc
        return {(task_id, sample) for task_id, sample in rows}

    def write(self, rows: list[Prediction]) -> None:
        """Insert ``rows`` in one transaction, replacing stored rows with the same key
        (earlier attempts that ended in an error)."""
        if not rows:
            return
        table = pa.table({name: pa.array([getattr(r, name) for r in rows], kind)
                          for name, kind in PREDICTION_TYPES.items()})
        columns = ", ".join(PREDICTION_COLUMNS)
        con = self.con
        try:
            con.register("incoming_predictions", table)
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f"INSERT OR REPLACE INTO predictions ({columns}) "
                            f"SELECT {columns} FROM incoming_predictions")
                con.execute("COMMIT")
            except BaseException:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # already aborted: keep the real error
                raise
        except duckdb.Error as exc:
            raise StoreError(f"cannot write to database {self.path}: {first_line(exc)}") from exc
        finally:
            con.unregister("incoming_predictions")


# ------------------------------------------------------------------ predicting
class RowSink(Protocol):
    """Where a run's rows go: the predictions table, or a generation log."""

    def write(self, rows: list[Prediction]) -> None: ...


class RowCounter(Protocol):
    def count(self, row: Prediction) -> None: ...


Extract = Callable[[str | None, Task], str | None] | None


def predict(tasks_path: str | Path, db: str | Path, options: PredictOptions,
            progress: Progress | None = None) -> PredictSummary:
    """Ask ``options.model`` every (task, sample) pair not yet stored without an error,
    and store the responses; see the module docstring for retries, resuming and errors."""
    started = time.perf_counter()
    tasks = load_tasks(tasks_path)
    summary = PredictSummary(str(tasks_path), str(db), options.model, len(tasks), options.samples)
    store = PredictionStore(db)
    try:
        done = store.stored_ok(options.model)
        pairs = [(task, sample) for task in tasks for sample in range(options.samples)]
        todo = [(task, sample) for task, sample in pairs if (task.task_id, sample) not in done]
        summary.pairs, summary.skipped = len(pairs), len(pairs) - len(todo)
        run = RequestRun(options, store, summary, progress or (lambda done, total: None))
        fatal = asyncio.run(run.execute(todo))
    finally:
        store.close()
    summary.seconds = time.perf_counter() - started
    if fatal is not None:
        raise PredictError(f"{fatal}; stopped with {summary.requests} new predictions stored "
                           "(run again to resume)")
    return summary


class RequestRun:
    """One run's requests, its writer and its stop flag (no state outlives the run).
    ``steptrace predict`` and ``steptrace generate`` share it: the rows go to ``store``
    (anything with ``write(rows)``) and ``extract`` finds the answer in a response."""

    def __init__(self, options: PredictOptions, store: RowSink, summary: RowCounter,
                 progress: Progress, extract: Extract = None) -> None:
        self.options = options
        self.store = store
        self.summary = summary
        self.progress = progress
        self.extract = extract or _extract_task_answer
        self.fatal: str | None = None
        self.write_failed = False
        self.answered = 0
        self.total = 0
        self.queue: asyncio.Queue[Prediction | None] = asyncio.Queue()

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
            async with openai.AsyncOpenAI(api_key=key, base_url=options.base_url,
                                          timeout=options.timeout_s,
                                          max_retries=options.max_retries) as client:
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
        try:
            response = await client.chat.completions.create(
                model=options.model, messages=[{"role": "user", "content": task.prompt}],
                temperature=options.temperature,
                **({} if options.max_tokens is None else {"max_tokens": options.max_tokens}))
        except openai.OpenAIError as exc:
            fatal = fatal_message(exc, options)
            if fatal is not None:
                self.fatal = self.fatal or fatal
                return None
            return Prediction(task.task_id, options.model, sample, task.kind,
                              latency_ms=_ms_since(started),
                              error=f"{type(exc).__name__}: {first_line(exc)}")
        return _prediction(task, sample, options.model, response, _ms_since(started),
                           self.extract)

    async def _write_batches(self) -> None:
        """The single writer: commits a batch every ``flush_rows`` rows or
        ``flush_every_s`` after its first row, and what is left at the end."""
        loop = asyncio.get_running_loop()
        batch: list[Prediction] = []
        deadline = 0.0
        while True:
            wait = None if not batch else max(0.0, deadline - loop.time())
            try:
                row = await asyncio.wait_for(self.queue.get(), wait)
            except TimeoutError:
                batch = await self._flush(batch)
                continue
            if row is None:
                await self._flush(batch)
                return
            if not batch:
                deadline = loop.time() + self.options.flush_every_s
            batch.append(row)
            if len(batch) >= self.options.flush_rows:
                batch = await self._flush(batch)

    async def _flush(self, batch: list[Prediction]) -> list[Prediction]:
        """Commit ``batch``; after a failed write, stop the run and store nothing more
        (the rows are lost either way, and asking for more would waste the requests)."""
        if batch and not self.write_failed:
            try:
                await asyncio.to_thread(self.store.write, batch)
            except (StoreError, OSError) as exc:
                self.write_failed = True
                self.fatal = str(exc)
                return []
            for row in batch:
                self.summary.count(row)
        return []


def fatal_message(exc: openai.OpenAIError, options: PredictOptions) -> str | None:
    """One line for an error no retry can fix; None for a per-request failure (timeouts,
    429 and 5xx still failing after the client's retries, a rejected prompt)."""
    import openai
    where = options.base_url
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
    return extract_answer(text, task.kind, task.prompt_style)


def _prediction(task: Task, sample: int, model: str, response, latency_ms: float,
                extract: Callable[[str | None, Task], str | None]) -> Prediction:
    """A row from a completion, tolerating servers that leave fields out."""
    choices = getattr(response, "choices", None) or []
    choice = choices[0] if choices else None
    message = getattr(choice, "message", None)
    text = getattr(message, "content", None)
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
