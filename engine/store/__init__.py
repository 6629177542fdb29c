"""4. Store: the DuckDB file runs, steps, states and everything made from them live in;
``open_store`` reads it from Python (polars DataFrames, ``Run`` records)."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "Attribute": "_runs",
    "Column": "_tables",
    "DEFAULT_DB": "_store",
    "GlobalState": "_runs",
    "Object": "_runs",
    "QueryResult": "_store",
    "Run": "_runs",
    "SCHEMA_VERSION": "_store",
    "SettraceLine": "_runs",
    "State": "_runs",
    "Step": "_runs",
    "Store": "_reader",
    "StoreError": "_store",
    "StoreLockedError": "_store",
    "Table": "_tables",
    "TraceWriter": "_store",
    "TracedRun": "_store",
    "connect": "_store",
    "open_store": "_reader",
    "query": "_store",
    "require_store": "_store",
    "run_rows": "_store",
    "status_counts": "_store",
    "table": "_tables",
    "tables": "_tables",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
