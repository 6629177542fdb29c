"""steptrace: sandboxed, step-traced execution of Python functions, stored in DuckDB, made
into prediction tasks, asked of models and scored.

The library API (``steptrace._api``), for a notebook as much as for the CLI::

    import steptrace as st
    run = st.trace_one("def f(x):\n    return x + 1", "3")   # a decoded Run
    st.trace("cruxeval.jsonl", "crux.duckdb")                  # -> TraceSummary
    store = st.open_store("crux.duckdb")                       # .sql(), .runs(), .run(id), ...
    tasks = st.make_tasks(store, kinds=["state", "next_line"])
    st.predict(tasks, store, "my-model", base_url="http://127.0.0.1:8000/v1")
    st.score(store, tasks).tables()

Every name is imported on first use (PEP 562): ``import steptrace`` loads neither DuckDB,
polars nor wasmtime. Errors a caller can cause are ``SteptraceError``s.
"""

from steptrace._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    # the pipeline (steptrace/_api.py)
    "trace_one": "_api",
    "trace": "_api",
    "trace_sharded": "_api",
    "trace_shard": "_api",
    "import_shards": "_api",
    "analyse": "_api",
    "make_tasks": "_api",
    "predict": "_api",
    "score": "_api",
    "report": "_api",
    "export_traces": "analytics._trace_export",
    # contamination (steptrace/_api.py)
    "decontaminate": "_api",
    "anonymise": "_api",
    "ngram_overlap": "_api",
    "select_runs": "store._where",
    # the reward service (steptrace reward-server)
    "judge_answers": "scoring._reward",
    "RewardJudge": "scoring._reward",
    "RewardLimits": "scoring._reward",
    # reading a store, and the records a run is read into
    "open_store": "store._reader",
    "Store": "store._reader",
    "Run": "store._runs",
    "Step": "store._runs",
    "State": "store._runs",
    "Object": "store._runs",
    "Attribute": "store._runs",
    "GlobalState": "store._runs",
    "SettraceLine": "store._runs",
    # inputs
    "Limits": "sandbox._limits",
    "Records": "corpus._formats",
    # errors
    "SteptraceError": "errors",
    "InputError": "errors",
    "StoreError": "errors",
    "SandboxError": "errors",
    "PredictError": "errors",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
