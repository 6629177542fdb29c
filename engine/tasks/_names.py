"""The names of the task kinds and prompt styles, and nothing else.

A module of its own, importing nothing: ``steptrace tasks --help`` lists them, and the
registry (_kinds.py), which holds each kind's builder and judge, loads the code that makes
and scores tasks (DuckDB, polars, numba), which a help text should not pay for. The
registry declares its kinds in this order and checks that it does.
"""

KINDS = ("output", "input", "state", "state_any", "next_line", "next_line_any", "coverage",
         "line_count", "branch", "steps", "trace", "exception", "error", "type",
         "alias", "output_type", "stdout", "instruction_steps")
STYLES = ("direct", "cot", "cruxeval")
# The line events the line-sequence kinds count (docs/guides/runs.md, "The settrace view"):
# the steps' (sys.monitoring's, the default) or sys.settrace's.
LINE_VIEWS = ("monitoring", "settrace")
# REval's question chain (coverage, state, path, output about one line of one run), in
# order: what `tasks --chains` makes and incremental consistency scores.
CHAIN_KINDS = ("coverage", "state", "next_line", "output")
