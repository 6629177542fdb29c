"""The store file the commands use when ``--db`` is not given.

A module of its own, importing nothing: every command's ``--db`` option shows this default
when ``steptrace`` starts, and _store.py, which defines the schema, loads DuckDB and
pyarrow (~0.1 s) that ``steptrace --help`` should not pay for.
"""

DEFAULT_DB = "steptrace.duckdb"
