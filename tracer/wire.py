"""The wire between host and guest: the request read and the result written by json's C
scanner and encoder, bound when the guest is built (json's Python classes and module
attributes are a program's to change: ``json.encoder.JSONEncoder.encode = ...``), and
the result's texts made plain, capped ``str``s.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import json.decoder  # noqa: E402
import json.encoder  # noqa: E402
import json.scanner  # noqa: E402

import sysmon_tracer as _tracer  # noqa: E402

MAX_MESSAGE = 10_000  # characters kept of an exception message or a note
_JOIN = "".join
_TYPE_NAME = _tracer.type_name


def _unencodable(value):
    raise TypeError(f"steptrace result holds a {_TYPE_NAME(type(value), None)}")


_ENCODE = json.encoder.c_make_encoder(None, _unencodable, json.encoder.encode_basestring_ascii,
                                      None, ":", ",", False, False, True)


def _reject_constant(name):
    raise ValueError(f"steptrace request holds {name}")


# the host writes requests with json.dumps
_SCAN = json.scanner.c_make_scanner(json.decoder.JSONDecoder(parse_constant=_reject_constant))
_WHITESPACE = frozenset(" \t\n\r")


def decode(text) -> object:
    """The request, or None if it is not one JSON value."""
    if type(text) is not str:
        return None
    value, end = _SCAN(text, 0)
    for char in text[end:]:
        if char not in _WHITESPACE:
            return None
    return value


def encode(result: dict) -> str:
    """The result as JSON text: it holds only plain values the runner made."""
    return _JOIN(_ENCODE(result, 0))


STATE_COLUMNS = ("step", "var", "value", "type", "truncated", "object_id")
ATTRIBUTE_COLUMNS = ("step", "object_id", "attr", "value", "type", "truncated", "ref_id")
GLOBAL_COLUMNS = ("step", "name", "value", "type", "truncated", "object_id")


def new_result() -> dict:
    return {
        "status": None, "exception_type": None, "exception_message": None,
        "output": None, "output_type": None, "output_truncated": False,
        "output_matches": None, "note": None, "stdout": "",
        "line_steps": 0, "instruction_steps": 0, "calls": 0, "max_depth": -1,
        "call_us": 0, "events": list(_tracer.EVENT_NAMES), "funcs": [],
        "steps": {"event": [], "line": [], "depth": [], "frame": [], "func": []},
        "states": {name: [] for name in STATE_COLUMNS},
        # objects, attributes and global_states: left out while they have no rows (the
        # host reads a missing one as empty; most runs have none of the last two)
    }


def crashed(message: str) -> dict:
    return {"status": "crashed", "exception_type": None, "exception_message": message}


# Built at init time so it needs no allocation when memory is exhausted.
OUT_OF_MEMORY = encode({"status": "memory_limit", "exception_type": "MemoryError",
                        "exception_message": "the guest ran out of memory building the result"})


def text(value, limit: int = MAX_MESSAGE, field: str | None = None) -> str:
    """``value`` (a str, or a str subclass a program made) as a plain ``str`` of at most
    ``limit`` characters; a cut text of ``field`` is said in the run's note."""
    if type(value) is not str:
        value = _JOIN((value,)) if isinstance(value, str) else "?"
    if len(value) <= limit:
        return value
    if field is not None:
        _tracer.cut(field, len(value))
    return value[:limit]


_CUT_FIELDS = ("exception_type", "exception_message", "output_type", "funcs", "states.type",
               "objects.type", "attributes.type", "global_states.type", "missing_module")


def cut_note(result: dict) -> str | None:
    """What was cut to the guest's caps, as the host words its own cuts."""
    parts = []
    for field in _CUT_FIELDS:
        seen = _tracer.cuts.get(field)
        if seen is None:
            continue
        count, longest = seen
        cap = MAX_MESSAGE if field == "exception_message" else _tracer.MAX_NAME
        if field == "funcs" or field.endswith(".type"):
            table = field.split(".")[0]
            total = (len(result["funcs"]) if field == "funcs"
                     else len(result.get(table, {}).get("step", ())))
            parts.append(f"{field} ({count} of {total}, the longest {longest:,} characters) "
                         f"to {cap:,}")
        else:
            parts.append(f"{field} ({longest:,} characters) to {cap:,}")
    return "cut to the guest's caps: " + ", ".join(parts) if parts else None


def add_note(result: dict, note: str) -> None:
    result["note"] = text(f"{result['note']}; {note}" if result["note"] else note)
