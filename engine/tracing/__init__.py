"""3. Tracing: a corpus run in the sandbox and stored, run by run (``trace_corpus``), and the
second runs that analyse stored runs (branches, operands, determinism)."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "AnalysisOptions": "_analysis",
    "AnalysisSummary": "_analysis",
    "TraceOptions": "_trace",
    "TraceSummary": "_trace",
    "analyse_store": "_analysis",
    "trace_corpus": "_trace",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
