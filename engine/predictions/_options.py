"""The settings of a run of requests to a model (``PredictOptions``) and their defaults.

A module of its own, importing only the standard library: the ``predict`` and ``generate``
commands show these defaults when ``steptrace`` starts (``--help``), and _predict.py,
which sends the requests and stores the answers, loads DuckDB and pyarrow (~0.1 s) that a
help text should not pay for. The label check (DuckDB's module) is imported only when a
label is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from steptrace.errors import InputError

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True)
class PredictOptions:
    model: str
    base_url: str | None = None  # None: the openai client's ($OPENAI_BASE_URL, else OpenAI)
    api_key_env: str = DEFAULT_API_KEY_ENV
    samples: int = 1
    temperature: float = 0.0
    max_tokens: int | None = 2048
    top_p: float | None = None        # None: not sent (the server's default)
    system_prompt: str | None = None  # sent as a system message before each prompt
    label: str | None = None          # the experiment's name; None: spelled from settings
    redo: bool = False                # delete the experiment's stored rows of the tasks first
    concurrency: int = 8
    timeout_s: float = 120.0
    max_retries: int = 3
    flush_rows: int = 50      # commit a batch after this many responses ...
    flush_every_s: float = 1.0  # ... or this long after its first one

    def __post_init__(self) -> None:
        """Library callers get the checks the CLI's option types make."""
        for name, low in (("samples", 1), ("concurrency", 1), ("max_retries", 0),
                          ("flush_rows", 1)):
            if getattr(self, name) < low:
                raise InputError(f"{name} must be at least {low}")
        if self.timeout_s <= 0 or self.temperature < 0 or self.flush_every_s < 0:
            raise InputError("timeout_s must be > 0, temperature and flush_every_s >= 0")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InputError("max_tokens must be at least 1")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise InputError("top_p must be > 0 and <= 1")
        if self.label is not None:
            from steptrace.predictions._experiments import check_label
            check_label(self.label)
