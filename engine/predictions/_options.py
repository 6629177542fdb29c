"""The settings of a run of requests to a model (``PredictOptions``) and their defaults.

A module of its own, importing only the standard library: the ``predict`` and ``generate``
commands show these defaults when ``steptrace`` starts (``--help``), and _predict.py,
which sends the requests and stores the answers, loads DuckDB and pyarrow (~0.1 s) that a
help text should not pay for. The label check (DuckDB's module) is imported only when a
label is given.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from steptrace.errors import InputError

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
# The API a request goes to: chat completions (messages), or completions (a prompt the
# model continues: base models, as CRUXEval's published numbers were made).
ENDPOINTS = ("chat", "completions")
# Request fields steptrace sets from its own options: --extra-body may not set them (a
# "stream" or "n" would also change what the response is).
RESERVED_FIELDS = ("model", "messages", "prompt", "stream", "n", "temperature", "top_p",
                   "max_tokens", "stop", "extra_body")


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
    endpoint: str = "chat"            # ENDPOINTS
    stop: tuple[str, ...] = ()        # stop sequences, sent as "stop" when given
    # more fields of the request body, as JSON object text (vLLM's chat_template_kwargs,
    # a reasoning_effort): sent as they are, after the checks of request_fields()
    extra_body: str | None = None
    max_requests: int | None = None   # predict: ask at most this many pairs in this run

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
        if self.endpoint not in ENDPOINTS:
            raise InputError(f"endpoint must be one of {', '.join(ENDPOINTS)}, "
                             f"not {self.endpoint!r}")
        if self.endpoint == "completions" and self.system_prompt is not None:
            raise InputError("a system prompt goes with the chat endpoint (a completions "
                             "request has no messages: put it in the prompt template)")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise InputError("stop sequences must be non-empty strings")
        if self.max_requests is not None and self.max_requests < 1:
            raise InputError("max_requests must be at least 1")
        self.request_fields()
        if self.label is not None:
            from steptrace.predictions._experiments import check_label
            check_label(self.label)

    def request_fields(self) -> dict:
        """The extra request fields (--extra-body) as a dict: a JSON object whose keys are
        none of the fields steptrace sets itself (``RESERVED_FIELDS``); InputError else."""
        if self.extra_body is None:
            return {}
        try:
            fields = json.loads(self.extra_body)
        except ValueError as exc:
            raise InputError(f"--extra-body is not JSON ({exc})") from None
        if not isinstance(fields, dict):
            raise InputError("--extra-body must be a JSON object, e.g. "
                             "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'")
        taken = sorted(set(fields) & set(RESERVED_FIELDS))
        if taken:
            raise InputError(f"--extra-body may not set {taken[0]!r}: steptrace sets it "
                             "(from its own option, where there is one)")
        return fields

    def request_settings(self) -> dict | None:
        """The request settings besides the experiment's recorded ones (endpoint, stop
        sequences, extra fields), None when all are the defaults: part of each
        prediction's prompt digest and of the default label, so that answers made with
        other ones are never resumed or mixed as the same experiment's."""
        if self.endpoint == "chat" and not self.stop and self.extra_body is None:
            return None
        return {"endpoint": self.endpoint, "stop": list(self.stop),
                "extra_body": self.request_fields()}

    def prompt_digest(self, prompt: str) -> str:
        """The ``prompt_sha256`` of a prediction of ``prompt``: the prompt's SHA-256, or
        with other request settings (``request_settings``) that of the prompt and them."""
        settings = self.request_settings()
        text = prompt if settings is None else json.dumps(
            {"prompt": prompt, **settings}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
