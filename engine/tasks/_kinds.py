"""The task kinds and prompt styles: the names ``steptrace tasks`` offers.

A module of its own, importing nothing: ``steptrace tasks --help`` lists them, and
_tasks.py, which makes the tasks, loads DuckDB and polars (~0.15 s) that a help text
should not pay for.
"""

KINDS = ("output", "input", "state", "state_any", "next_line", "next_line_any", "coverage",
         "line_count", "branch", "steps", "trace", "exception")
STYLES = ("direct", "cot", "cruxeval")
