"""The library API: the pipeline from Python, without the CLI or the wire format.

::

    import steptrace as st
    run = st.trace_one("def f(x):\\n    return x + 1", "3")     # one run, decoded
    store = st.open_store("crux.duckdb")                         # read it as polars
    st.trace("cruxeval.jsonl", store, isolation="job")           # -> TraceSummary
    tasks = st.make_tasks(store, kinds=["state", "next_line"])   # -> TaskSummary
    st.predict(tasks, store, "my-model", base_url="http://127.0.0.1:8000/v1")
    st.score(store, tasks)                                       # -> ScoreSummary

Each function here is what one ``steptrace`` command calls between parsing its options
and printing the summary it returns, so the CLI and a notebook run the same code. A store
may be given as a path or as the ``Store`` ``open_store`` returned; a corpus as a path or
in memory (a list of records, a polars DataFrame); tasks as a tasks file or in memory
(what ``make_tasks`` returned, a DataFrame, a list of records). Errors a caller can cause
are ``steptrace.SteptraceError``s with a one-line message.
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from steptrace.corpus._formats import (MEMORY_NAME, Corpus, CorpusError, CorpusLike,
                                       as_corpus_source, jobs_from_record)
from steptrace.errors import InputError, Interrupted
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._backends import choose as choose_backend
from steptrace.sandbox._backends import interpreter
from steptrace.sandbox._packages import PackageLock, as_lock
from steptrace.store._runs import Run

if TYPE_CHECKING:
    from steptrace.analytics._report import ReportSummary
    from steptrace.benchmark._anonymise import AnonymiseReport
    from steptrace.benchmark._decontaminate import DecontaminationReport
    from steptrace.benchmark._ngram_report import OverlapReport
    from steptrace.predictions._predict import PredictOptions, PredictSummary
    from steptrace.sandbox._runtime import Sandbox
    from steptrace.scoring._score import ScoreSummary
    from steptrace.store._reader import Store
    from steptrace.tasks._source import TasksLike
    from steptrace.tasks._tasks import TaskSummary
    from steptrace.tracing._analysis import AnalysisSummary
    from steptrace.tracing._trace import TraceSummary
    from steptrace.sharding._run import ShardSummary
    from steptrace.sharding._shard import ShardResult
    from steptrace.sharding._store import ImportSummary

Progress = Callable[[int, int], None]

TRACE_ONE_SOURCE = "<trace_one>"  # the program source of a run made by trace_one


# ====================================================================== arguments
def store_path(store: Store | str | os.PathLike) -> str:
    """The file of ``store`` (a ``Store``, which is path-like, or a path) as the text
    the user wrote, which summaries and messages repeat. InputError for anything else."""
    if isinstance(store, (str, os.PathLike)):
        return os.fspath(store)
    raise InputError(f"a store is a path or what open_store returned, not {type(store).__name__}")


LIMIT_NAMES = tuple(f.name for f in fields(Limits))


def as_limits(limits: Limits | Mapping[str, float] | None) -> Limits:
    """``limits`` as a ``Limits``: None is the defaults, a dict overrides some of them
    (``{"timeout_s": 2, "max_steps": 1000}``). InputError for an unknown name or a value
    that is not positive."""
    if limits is None:
        return Limits()
    if isinstance(limits, Limits):
        return limits
    if not isinstance(limits, Mapping):
        raise InputError(f"limits are a Limits or a dict of them, not {type(limits).__name__}")
    unknown = sorted(set(limits) - set(LIMIT_NAMES))
    if unknown:
        raise InputError(f"unknown limit {unknown[0]!r}; the limits are {', '.join(LIMIT_NAMES)}")
    return Limits(**limits)


def _options(**given: Any) -> dict[str, Any]:
    """The keyword arguments that were given (not None): the rest keep the defaults of
    the options dataclass they go to."""
    return {name: value for name, value in given.items() if value is not None}


# ====================================================================== one run
class _SharedSandbox:
    """One in-process ``Sandbox`` for ``trace_one``, made on first use and kept (loading
    the component costs ~0.1-0.3 s; a run ~ms), made again when other limits are asked
    for. A Sandbox runs one job at a time: the lock makes concurrent callers take turns."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.limits: Limits | None = None
        self.sandbox: Sandbox | None = None

    def run(self, request: dict, limits: Limits):
        with self.lock:
            if self.sandbox is None or self.limits != limits:
                from steptrace.sandbox._runtime import Sandbox  # wasmtime loads only here
                self.close_locked()
                self.sandbox, self.limits = Sandbox(limits), limits
            return self.sandbox.run(request, "job")

    def close_locked(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        self.sandbox, self.limits = None, None

    def close(self) -> None:
        with self.lock:
            self.close_locked()


_SANDBOX = _SharedSandbox()
atexit.register(_SANDBOX.close)


def trace_one(code: str, input: str, entry: str = "f", expected: str | None = None,
              limits: Limits | Mapping[str, float] | None = None, *, shape: str = "call",
              calls: list | None = None, test: str | None = None,
              stdin: str | None = None, files: Mapping[str, str] | None = None,
              argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> Run:
    """Run one call of a program in the sandbox, traced, and return it decoded as a
    ``Run`` (status, output, exception, stdout, counts, ``steps`` and ``states``, and the
    object state: ``objects``, ``attributes``, ``globals``).

    code: the program's source, defining ``entry``.
    input: the text of the call's arguments, as inside ``entry(...)`` (``"1, 'a'"``).
    entry: the function to call.
    expected: the expected return value's repr, if any: ``run.output_matches`` says
        whether the output equals it.
    limits: a ``Limits``, or a dict of the ones to change (``{"max_steps": 1000}``).
    shape, calls, test, stdin: the record keys of docs/guides/corpus.md ("Program
        shapes"): ``shape="script"`` runs ``code`` as a script with ``input`` as its stdin
        (``expected``: its expected stdout); ``calls`` a method chain
        (``[{"method": "push", "input": "1"}]``); ``test`` test code; ``stdin`` a call's
        standard input.
    files, argv, env: what the program starts with (docs/guides/corpus.md, "Files,
        arguments and environment"): files written into its working directory
        (``{"data/in.txt": "1 2\\n"}``), ``sys.argv[1:]`` and ``os.environ``. What it
        leaves in its directories is ``run.files``.

    The run is made as ``steptrace trace`` makes it (a fresh interpreter, the same
    request) and decoded by the code that stores runs, so it equals the same job read
    back from a store (``Store.run``). It runs in this process, in one sandbox kept for
    the next call; unlike a worker process this has no watchdog: a program blocked in a
    ``time.sleep`` ends as ``timeout`` only when the sleep does."""
    from steptrace.store._store import TracedRun, run_rows
    limits = as_limits(limits)
    record = {"code": code, "input": input, "output": expected, "shape": shape,
              "calls": calls, "test": test, "stdin": stdin,
              "files": None if files is None else dict(files), "argv": argv,
              "env": None if env is None else dict(env)}
    if shape != "script":
        record["entry"] = entry
    try:
        (job,) = jobs_from_record(record, TRACE_ONE_SOURCE, "1")
    except CorpusError as exc:
        raise InputError(str(exc)) from None
    outcome = _SANDBOX.run(job.request(), limits)
    row, steps, states, objects, attributes, globals_, settrace, files_ = run_rows(
        TracedRun(job, outcome.result, outcome.duration_us, "job"))
    row.update(shape=job.program.shape, test=job.program.test)
    return Run.from_rows(row, job.program.code, job.program.entry, steps.to_pylist(),
                         states.to_pylist(), stored=False, objects=objects.to_pylist(),
                         attributes=attributes.to_pylist(), globals=globals_.to_pylist(),
                         settrace_lines=settrace.to_pylist(), files=files_.to_pylist())


# ====================================================================== the pipeline
def trace(corpus: CorpusLike, store: Store | str | os.PathLike, *, workers: int | None = None,
          isolation: str = "job", limits: Limits | Mapping[str, float] | None = None,
          force: bool = False, name: str | None = None,
          progress: Progress | None = None,
          packages: PackageLock | str | os.PathLike | None = None,
          loop_detection: bool = True, backend: str | None = None,
          python: str | os.PathLike | None = None) -> TraceSummary:
    """Trace every job of ``corpus`` not yet in ``store`` (``steptrace trace``); return the
    summary the CLI prints (jobs, skipped, traced, by status, steps, bad records).

    corpus: a corpus file (JSONL; a directory of ``.py`` files; ``-`` for standard
        input), or records in memory: a list of dicts in the corpus record format (id,
        code, input or inputs, output or outputs, entry), a polars or pandas DataFrame of
        them or a Hugging Face ``Dataset`` (a Parquet file or a ``save_to_disk`` directory
        is a corpus path)
        (or the ``Corpus`` of ``steptrace.corpus.load_corpus``).
    store: the store to write (created if missing): a path or an opened ``Store``.
    workers: worker processes (default: one per CPU; 0 runs the jobs in this process).
    isolation: ``job`` (a fresh interpreter per job) or ``batch`` (one per chunk of jobs,
        for trusted code; a corpus holding records marked ``model_written`` is traced in
        job isolation all the same, and ``summary.notes`` says so).
    limits: a ``Limits``, or a dict of the ones to change (``{"timeout_s": 2}``).
    force: trace again the jobs already stored, replacing them.
    name: what the summary calls the corpus (default: its path, or ``<memory>``); for
        records in memory also their programs' source, which a file's name is for its
        records (part of each job's identity: records traced under a file's name are
        the same jobs as that file's).
    progress: called as ``progress(done, total)`` while runs are stored.
    packages: a package lock (``steptrace build --with ... --lock FILE``: its path, or a
        ``steptrace.sandbox.PackageLock``): trace in the guest that bundles those
        packages (built now if it is not cached); default the standard guest.
    loop_detection: end a run the guest proves to loop forever (its complete state
        repeated: status ``loops``); False: it runs on to its step or time limit.
    backend: ``wasi`` (the WebAssembly guest) or ``native`` (the same tracer in a jailed
        native CPython 3.12+, for packages with native code); default: ``native`` for a
        lock resolved for it (``steptrace build --backend native``: ``summary.notes``
        says so), else ``wasi``. docs/guides/sandbox.md says what each guarantees.
    python: the native backend's interpreter (a path; default ``$STEPTRACE_PYTHON``, else
        the newest CPython 3.12+ found: docs/guides/sandbox.md).

    Bad records do not stop the trace: they are listed in ``summary.corpus_errors``;
    but a corpus whose first 5 records are all bad (or that holds no good one) is not a
    corpus: CorpusError, before a store is made. Ctrl-C: ``Interrupted``, saying how many
    runs were stored."""
    from steptrace.sandbox._runtime import ISOLATIONS
    from steptrace.tracing._trace import TraceOptions, trace_corpus
    if isolation not in ISOLATIONS:
        raise InputError(f"isolation must be one of {', '.join(ISOLATIONS)}, not {isolation!r}")
    if workers is not None and workers < 0:
        raise InputError(f"workers must be 0 or more, not {workers}")
    python = None if python is None else os.fspath(python)
    with interpreter(python):
        lock, note = choose_backend(backend, None if packages is None else as_lock(packages),
                                    python)
        options = TraceOptions(limits=as_limits(limits), isolation=isolation, force=force,
                               packages=lock, loop_detection=loop_detection,
                               notes=() if note is None else (note,), **_options(workers=workers))
        if not isinstance(corpus, (str, os.PathLike, Corpus)):
            corpus = as_corpus_source(corpus, name)
        if isinstance(corpus, Corpus) and name is None:
            name = MEMORY_NAME  # a loaded corpus does not know where it came from
        return trace_corpus(corpus, store_path(store), options, progress=progress,
                            corpus_name=name)


def trace_sharded(corpora: CorpusLike | Iterable[CorpusLike], out: str | os.PathLike, *,
                  engine: str = "local", address: str | None = None,
                  shard_size: int | None = None, workers: int | None = None,
                  isolation: str = "job", limits: Limits | Mapping[str, float] | None = None,
                  progress: Progress | None = None,
                  packages: PackageLock | str | os.PathLike | None = None,
                  plan_only: bool = False,
                  shard_progress: Progress | None = None,
                  on_note: Callable[[str], None] | None = None,
                  trust_guest: str | None = None, backend: str | None = None,
                  python: str | os.PathLike | None = None) -> ShardSummary:
    """Trace ``corpora`` (corpus files or directories) into the shard directory ``out``
    (``steptrace trace CORPUS... --out DIR``): a plan of fixed shards of jobs, then each
    shard's runs as Parquet files, on ``engine`` ``local`` (this machine's worker pool) or
    ``ray`` (a Ray cluster: ``address``, default a local one); the same command again
    resumes. docs/guides/shards.md has the layout and its guarantees.

    shard_size: jobs per shard (default 1,000). workers: worker processes, or Ray actors
    (default: one per CPU). isolation, limits, packages, backend, python: as for ``trace``.
    progress: ``progress(runs done, runs planned)`` after each shard.
    plan_only: write the plan and stop (``trace_shard`` then runs each shard).
    shard_progress: ``shard_progress(shards done, shards planned)``, before ``progress``.
    on_note: called with each note on what the trace does otherwise than asked (batch
        isolation asked for corpora holding records marked ``model_written``: the plan
        is made in job isolation); default: a warning.
    trust_guest: the SHA-256 of the plan's guest, to run it when it is not a build made on
        this machine (a directory planned elsewhere): docs/guides/shards.md."""
    from steptrace.sharding._defaults import DEFAULT_SHARD_SIZE
    from steptrace.sharding._run import ShardOptions, trace_shards
    if isinstance(corpora, (str, os.PathLike)):
        corpora = [corpora]
    corpora = list(corpora)
    for corpus in corpora:
        if not isinstance(corpus, (str, os.PathLike)):
            raise InputError("a sharded trace reads corpus files or directories, not "
                             f"{type(corpus).__name__}")
        if os.fspath(corpus) == "-":
            raise InputError("a sharded trace reads corpus files, not standard input")
    if isolation == "batch":  # a model's code never shares an instance (the plan keeps it)
        from steptrace.tracing._trace import count_model_written, isolation_for
        isolation, note = isolation_for(isolation, *count_model_written(corpora))
        if note is not None:
            if on_note is None:
                warnings.warn(note, stacklevel=2)
            else:
                on_note(note)
    python = None if python is None else os.fspath(python)
    with interpreter(python):
        lock, note = choose_backend(backend, None if packages is None else as_lock(packages),
                                    python)
        if note is not None:
            if on_note is None:
                warnings.warn(note, stacklevel=2)
            else:
                on_note(note)
        options = ShardOptions(
            shard_size=DEFAULT_SHARD_SIZE if shard_size is None else shard_size,
            workers=workers, limits=as_limits(limits), isolation=isolation, packages=lock,
            engine=engine, address=address, plan_only=plan_only, trust_guest=trust_guest)
        return trace_shards(corpora, out, options, progress, shard_progress)


def trace_shard(directory: str | os.PathLike, index: int, *, workers: int | None = None,
                trust_guest: str | None = None) -> ShardResult:
    """Run shard ``index`` of the shard directory ``directory`` on this machine (``steptrace
    trace-shard``: one process per shard index under a batch scheduler); a done shard is
    not run again. ``workers``: worker processes (default one per CPU). ``trust_guest``:
    as for ``trace_sharded``."""
    from steptrace.sharding._run import run_one
    if workers is not None and workers < 1:
        raise InputError(f"workers must be 1 or more, not {workers}")
    return run_one(directory, index, workers, trust_guest)


def import_shards(directory: str | os.PathLike, store: Store | str | os.PathLike, *,
                  force: bool = False) -> ImportSummary:
    """Load the finished shards of ``directory`` into ``store`` (``steptrace import``): runs
    it does not hold yet (``force``: replace those it does), renumbered as the store's."""
    from steptrace.sharding._store import import_shards as _import
    return _import(directory, store_path(store), force=force)


def analyse(store: Store | str | os.PathLike, *, determinism: bool = False,
            workers: int | None = None, timeout_s: float | None = None,
            progress: Progress | None = None) -> AnalysisSummary:
    """Record the condition outcomes and operand checks of every finished run not yet
    analysed, by a second, instrumented run of it (``steptrace analyse``).

    store: the store (it must exist): a path or an opened ``Store``.
    determinism: also run each job again in a separately seeded build of the guest and
        record whether its result and trace are the same.
    workers: worker processes (default: one per CPU; 0 runs the jobs in this process).
    timeout_s: seconds per job (default: the ``Limits`` default).
    progress: called as ``progress(done, total)``."""
    from steptrace.store._store import require_store
    from steptrace.tracing._analysis import AnalysisOptions, analyse_store
    db = store_path(store)
    require_store(db)
    options = AnalysisOptions(limits=Limits(**_options(timeout_s=timeout_s)),
                              determinism=determinism, **_options(workers=workers))
    return analyse_store(db, options, progress=progress)


def make_tasks(store: Store | str | os.PathLike, kinds: str | Iterable[str] = "all", *,
               per_run: int = 3, seed: int = 0, chains: int = 0, prompt_style: str = "direct",
               template_dir: str | os.PathLike | None = None,
               out: str | os.PathLike | None = None, max_trace_lines: int = 200,
               workers: int | None = None, engine: str = "local",
               address: str | None = None, where: str | None = None,
               lines: str = "monitoring") -> TaskSummary:
    """Make prediction tasks with exact answers from the store's finished runs, store them
    in its ``tasks`` table and return the summary (``steptrace tasks``); the tasks
    themselves are ``summary.tasks``, a polars DataFrame, which ``predict`` and ``score``
    take as they are.

    store: the store (it must exist): a path or an opened ``Store``.
    kinds: ``"all"``, or task kinds as a list or a comma-separated string: output,
        input, state, state_any, next_line, next_line_any, coverage, line_count, branch,
        steps, trace, exception.
    per_run: at most this many tasks of each kind per run.
    seed: the seed of the question selection (per run and kind).
    chains: also ask REval's question chains on up to this many lines per run (coverage,
        state and next_line questions about one line, with the run's output question:
        the chains of score's incremental consistency).
    prompt_style: ``direct``, ``cot`` (chain of thought) or ``cruxeval`` (output and
        input only).
    template_dir: a directory of your own ``<kind>.<style>.txt`` prompt templates (for
        a missing file the bundled one is used).
    out: also write the tasks as JSONL here, and as Parquet next to it.
    max_trace_lines: no ``trace`` task for a run with more line steps than this.
    workers: worker processes for the analysis run that ``branch`` tasks need.
    engine, address: for a shard directory (``trace --out``), where its shards' tasks are
        made: ``local`` (here, shard by shard) or ``ray`` (a Ray task per shard, on the
        cluster at ``address``; default a local Ray).
    where: only the runs this SQL condition selects, e.g. ``"meta.release_date >=
        '2025-01-01'"`` (columns: the run's, its program's, ``meta.KEY`` of its corpus
        record's metadata; see docs/guides/contamination.md).
    lines: the line events the line-sequence kinds (next_line, next_line_any, coverage,
        line_count, steps, trace) are asked of: ``"monitoring"``, the steps' line events,
        or ``"settrace"``, those ``sys.settrace`` reports (docs/guides/runs.md, "The
        settrace view"); a run whose settrace view was not recorded gets none of them."""
    from steptrace.tasks._tasks import TaskOptions, generate_tasks, parse_kinds
    options = TaskOptions(kinds=parse_kinds(kinds), per_run=per_run, seed=seed, chains=chains,
                          prompt_style=prompt_style,
                          template_dir=None if template_dir is None else Path(template_dir),
                          out=None if out is None else Path(out),
                          max_trace_lines=max_trace_lines, workers=workers, engine=engine,
                          address=address, where=where, lines=lines)
    from steptrace.sharding._plan import is_shard_directory
    if (engine, address) != ("local", None) and not is_shard_directory(store_path(store)):
        raise InputError("--engine and --address go with a shard directory (trace --out DIR)")
    return generate_tasks(store_path(store), options)


def predict(tasks: TasksLike, store: Store | str | os.PathLike, model: str | None = None, *,
            base_url: str | None = None, api_key_env: str | None = None, samples: int = 1,
            temperature: float = 0.0, max_tokens: int | None = 2048,
            top_p: float | None = None, system_prompt: str | None = None,
            label: str | None = None, redo: bool = False, concurrency: int = 8,
            timeout_s: float = 120.0, max_retries: int = 3,
            options: PredictOptions | None = None,
            progress: Progress | None = None) -> PredictSummary:
    """Ask a model every task over an OpenAI-compatible chat API (one request per task
    and sample) and store the responses and their parsed answers in the ``predictions``
    table, under the experiment's label (``steptrace predict``). A second call asks only
    for what is not stored yet, or ended in an error.

    tasks: what ``make_tasks`` returned, a tasks file (JSONL), a polars DataFrame of
        task rows or a list of task records (task_id, kind, prompt, prompt_style).
    store: the store (it must exist): a path or an opened ``Store``.
    model: the model's name, as the server knows it.
    base_url: the API's root, e.g. ``http://127.0.0.1:8000/v1`` (default:
        ``$OPENAI_BASE_URL``, else OpenAI's API).
    api_key_env: the environment variable holding the API key (default
        ``OPENAI_API_KEY``); unset, a placeholder key is sent (local servers need none).
    samples: requests per task.
    temperature, max_tokens, top_p: sampling settings (``top_p`` None: not sent).
    system_prompt: a system message sent before each task's prompt.
    label: the experiment's name (default: spelled from the settings, e.g.
        ``direct-t0.0-m2048``); one label always names the same settings.
    redo: delete this experiment's stored predictions (and scores) of these tasks first.
    concurrency: requests in flight at once.
    timeout_s, max_retries: per request attempt; retries after a 429, a 5xx, a timeout
        or a dropped connection.
    options: all the settings as one ``PredictOptions`` (what the CLI builds) instead of
        ``model`` and the keywords.
    progress: called as ``progress(done, total)`` as responses come.

    PredictError when the server cannot be used (unreachable, unknown model, refused
    key): the responses so far are stored. Works from a notebook, whose event loop is
    running: the requests then run in a thread of their own."""
    from steptrace.predictions._predict import DEFAULT_API_KEY_ENV, PredictOptions
    from steptrace.predictions._predict import predict as predict_tasks
    from steptrace.store._store import require_store
    if options is None:
        if model is None:
            raise InputError("predict needs a model (or options)")
        options = PredictOptions(
            model=model, base_url=base_url, api_key_env=api_key_env or DEFAULT_API_KEY_ENV,
            samples=samples, temperature=temperature, max_tokens=max_tokens, top_p=top_p,
            system_prompt=system_prompt, label=label, redo=redo, concurrency=concurrency,
            timeout_s=timeout_s, max_retries=max_retries)
    elif model is not None:
        raise InputError("give predict a model and its settings, or options, not both")
    db = store_path(store)
    require_store(db)
    return predict_tasks(tasks, db, options, progress)  # (RequestRun.run: also in a notebook)


def score(store: Store | str | os.PathLike, tasks: TasksLike, *,
          models: Iterable[str] = (), labels: Iterable[str] = (), ks: Iterable[int] = (1, 5),
          type_strict: bool = False, float_tolerance: float = 0.0,
          workers: int | None = None, timeout_s: float = 3.0,
          progress: Progress | None = None, where: str | None = None) -> ScoreSummary:
    """Judge the stored predictions of ``tasks`` against their answers, store the verdicts
    in the ``scores`` table and return the summary: pass@k by experiment and kind, by
    difficulty, incremental consistency, paired comparisons (``steptrace score --tasks``;
    ``summary.summary()`` is the table it prints by default, ``summary.tables()`` every
    table, ``summary.as_dict()`` its JSON; ``summary.trivial_kinds`` the kinds whose every
    task has one answer, left out of ``all``).

    store: the store holding the predictions: a path or an opened ``Store``.
    tasks: what ``make_tasks`` returned, a tasks file, a polars DataFrame of task rows
        or a list of task records.
    models: only these models (default: every model).
    labels: only the experiments of these labels (default: every one of the models).
    ks: the k of pass@k (tasks with fewer samples are left out of it).
    type_strict: values must also have the same types (1 != 1.0 != True).
    float_tolerance: floats are equal within this relative and absolute tolerance.
    workers: worker processes for the input checks (default: one per CPU; 0: this one).
    timeout_s: seconds per sandboxed input check.
    progress: called as ``progress(done, total)`` during the input checks.
    where: only the tasks of the runs this SQL condition selects (as ``make_tasks``'s)."""
    from steptrace.scoring._score import ScoreOptions, score_predictions
    options = ScoreOptions(models=tuple(models), labels=tuple(labels), ks=tuple(ks),
                           type_strict=type_strict, float_tolerance=float_tolerance,
                           workers=workers, limits=Limits(timeout_s=timeout_s), where=where)
    try:
        return score_predictions(store_path(store), tasks, options, progress)
    except KeyboardInterrupt:  # the verdicts are stored together, at the end
        raise Interrupted(0, "verdicts") from None


def report(store: Store | str | os.PathLike, out: str | os.PathLike, *,
           models: Iterable[str] = (), labels: Iterable[str] = (),
           kinds: Iterable[str] = (), where: str | None = None) -> ReportSummary:
    """Write one self-contained HTML page of plots over the store (statuses, step
    distributions, tasks, accuracy by kind and difficulty with 95% intervals and n,
    coverage precision/recall/F1, incremental consistency, paired comparisons, accuracy
    by standard-library method per kind) with the tables behind them
    (``steptrace report``); return what it holds.

    store: the store: a path or an opened ``Store``.
    out: the HTML file to write (its directory must exist).
    models, labels: only these models' and labels' predictions (default: all).
    kinds: only the tasks of these kinds (default: all).
    where: only the runs this SQL condition selects (as ``make_tasks``'s), and their tasks."""
    from steptrace.analytics._report import write_report  # matplotlib loads only here
    from steptrace.analytics._report_filter import ReportFilter
    return write_report(store_path(store), Path(out),
                        selection=ReportFilter(tuple(models), tuple(labels), tuple(kinds), where))


# ------------------------------------------------------------------ contamination
def decontaminate(records: str | os.PathLike, against: str | os.PathLike,
                  out: str | os.PathLike, *, ngram: int = 5,
                  threshold: float = 0.5) -> DecontaminationReport:
    """Drop the benchmark ``records`` (JSONL with ``id`` and ``code``) that the training
    set ``against`` (JSONL with ``code``) holds a copy of, exact, normalised (renamed
    identifiers, literals by type) or near (``renamed_tokens`` n-gram Jaccard similarity
    at least ``threshold``, n = ``ngram``); write the others to ``out`` and return the
    report of the matches (``steptrace dedupe --against``; see
    steptrace.benchmark._decontaminate)."""
    from steptrace.benchmark._decontaminate import decontaminate_file
    return decontaminate_file(records, against, out, ngram=ngram, threshold=threshold)


def anonymise(corpus: str | os.PathLike, out: str | os.PathLike, *, check: bool = True,
              workers: int | None = None, timeout_s: float = 3.0) -> AnonymiseReport:
    """Write renamed variants of the JSONL ``corpus`` to ``out`` (every name a program
    binds replaced by ``f``, ``f1``, ``C1``, ``x1``, ...; CRUXEval's ablation) and return
    the report (``steptrace anonymise``). With ``check`` each variant is traced against
    its original in the sandbox (``workers``, ``timeout_s`` per run) and written only when
    the traces are equal modulo the names; the others are reported (``differs``,
    ``unparsed``). See steptrace.benchmark._anonymise."""
    from steptrace.benchmark._anonymise import anonymise_file
    return anonymise_file(corpus, out, check=check, workers=workers, timeout_s=timeout_s)


def ngram_overlap(corpus: CorpusLike, dump: str | os.PathLike, *, n: int = 13) -> OverlapReport:
    """Per program of ``corpus``, the share of its code's distinct token n-grams that occur
    in the text file ``dump`` (streamed), and the totals (``steptrace overlap``; see
    steptrace.benchmark._ngram_report)."""
    from steptrace.benchmark._ngram_report import ngram_overlap as overlap
    return overlap(corpus, dump, n)
