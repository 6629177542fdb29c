"""8. Analytics: named queries, per-run trace features, Parquet export, training-data
exports of the traces (export_traces), the HTML report, showing one run, and one run as
a page to step through (write_view)."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "export_parquet": "_export",
    "export_traces": "_trace_export",
    "run_query": "_queries",
    "run_sql": "_queries",
    "write_view": "_viewer",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
