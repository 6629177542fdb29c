"""steptrace host engine: corpus loading, job orchestration, the DuckDB store, the CLI."""

__version__ = "0.1.0"
