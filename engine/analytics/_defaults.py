"""Defaults of the analytics commands that ``steptrace`` shows when it starts.

A module of its own, importing nothing: _export.py loads DuckDB, which ``steptrace --help``
and ``steptrace export --help`` should not pay for.
"""

DEFAULT_RUNS_PER_BUCKET = 10_000  # consecutive run ids per Parquet partition of an export
# The formats of export-traces (steptrace.analytics._trace_formats.FORMATS), named here for
# the CLI's help, which must not import DuckDB.
TRACE_EXPORT_FORMATS = ("jsonl", "pythontutor", "cwm", "scratchpad", "lines")
# The configs of export-dataset (steptrace.analytics._dataset.DATASET_CONFIGS) and those
# written unless --tables says otherwise.
DATASET_CONFIG_NAMES = ("corpus", "runs", "programs", "tasks", "predictions", "scores")
DEFAULT_DATASET_CONFIGS = ("corpus", "tasks", "predictions", "scores")
