"""A corpus record's metadata: every key the corpus format does not use.

A record may carry anything beside its program (``release_date``, ``source``,
``licence``, ``difficulty``, ...): LiveCodeBench splits results by release date, others
by source or difficulty. Those keys are kept as the program's metadata, JSON text of an
object with the keys sorted (``{"difficulty": 3, "release_date": "2025-02-01"}``), stored
in ``programs.meta`` (NULL when a record has none) and read by ``--where`` conditions as
``meta.KEY`` (steptrace.store._where).

The text is bounded: a record whose metadata is longer than ``MAX_META_CHARS`` characters
is a bad record (one line naming its size), never cut silently.

``model_written`` marks a record a model wrote (its code, its tests or its inputs): the
records of ``generate``, ``harvest`` and ``repair`` carry it, ``filter --out`` and the
other steps that copy records keep it, and ``trace`` never runs such a record in batch
isolation (docs/guides/sandbox.md, "Isolation"). Its value ``"inputs"`` (``harvest``'s
records: a package's own function, a model's literal inputs) says that only the inputs
are a model's: the native backend runs such a record when its inputs are pure literals,
and refuses every other model-written one (native_sandbox/_trust.py).
"""

from __future__ import annotations

import json

# The keys the corpus formats read (engine/corpus/_formats.py); every other key is metadata.
FORMAT_KEYS = frozenset({"id", "code", "entry", "input", "inputs", "output", "outputs",
                         "shape", "test", "stdin", "calls", "argv", "env", "files"})
MAX_META_CHARS = 64 * 1024
# The metadata key of a record a model wrote (any value but false or null marks it).
MODEL_WRITTEN = "model_written"
# Its value when only the record's inputs are a model's (its code is not).
INPUTS_ONLY = "inputs"


def record_meta(record: dict) -> str | None:
    """The metadata of ``record`` as JSON text (keys sorted), None if it has none;
    CorpusError when it is longer than ``MAX_META_CHARS`` characters or holds NaN or
    Infinity. A value JSON has no form for (a date of an in-memory record) is its
    ``str``."""
    from steptrace.corpus._formats import CorpusError
    extra = {key: value for key, value in record.items() if key not in FORMAT_KEYS}
    if not extra:
        return None
    try:
        text = json.dumps(extra, ensure_ascii=False, sort_keys=True, allow_nan=False,
                          default=str)
    except ValueError:
        raise CorpusError("metadata holds NaN or Infinity, which JSON text cannot") from None
    if len(text) > MAX_META_CHARS:
        raise CorpusError(f"metadata (the keys beside the program's) is {len(text):,} "
                          f"characters as JSON; at most {MAX_META_CHARS:,}")
    return text


def meta_values(text: str | None) -> dict[str, str | None]:
    """Metadata JSON text as ``--where`` reads it: each key's value as text (a string as
    it is, any other value as its JSON text, null as None)."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(key): value_text(value) for key, value in data.items()}


def value_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def is_model_written(text: str | None) -> bool:
    """Whether a program's metadata (JSON text, as ``record_meta`` makes it) marks it as a
    model's: ``model_written`` present and neither false nor null."""
    return model_written(text) is not None


def model_written(text: str | None) -> bool | str | None:
    """What a model wrote of a program, by its metadata: None (nothing), ``INPUTS_ONLY``
    (its inputs only: ``model_written`` is exactly ``"inputs"``) or True (anything else
    but false or null: its code, so the whole record)."""
    if not text or f'"{MODEL_WRITTEN}"' not in text:  # most metadata has none: not parsed
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    value = data.get(MODEL_WRITTEN)
    if value is None or value is False:
        return None
    return INPUTS_ONLY if value == INPUTS_ONLY else True
