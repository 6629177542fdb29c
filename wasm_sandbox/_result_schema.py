"""The guest's result as the host accepts it: one declaration of every key, checked before
anything of it reaches the store.

Everything a traced program produces is untrusted, and the guest that builds the result
shares its interpreter with the program: the JSON text ``Sandbox.call`` returns is data
from an attacker. :func:`parse_result` turns it into a result dict or raises

* :class:`ResultTooLarge` (the job becomes ``output_limit``): more than
  ``max_result_bytes`` characters, or more than ``max_result_values`` JSON values. The
  second bound is counted before ``json.loads`` runs: a 128 MiB text of ``[],`` would
  parse into 2.7 GiB of empty lists (25 bytes of host memory for each byte of text);
  with at most ``max_result_values`` values the parse makes at most ~100 bytes of
  objects per value plus the text's own characters;
* :class:`ResultRejected` (the job becomes ``crashed``, with the first problem as its
  note): not JSON, not an object, a missing or unknown key, a value of the wrong type, an
  integer out of its range, columns of unequal length, an index outside its table, more
  steps or names than the limits allow.

Texts over their cap are not rejected (a program may legitimately raise a 25 MB message,
and the guest does not cap every text): they are cut to the cap, and the cut is recorded
in the field's flag where it has one (``output_truncated``, a state row's ``truncated``)
and otherwise in the run's ``note`` (``"cut to the host's caps: ..."``).

The declaration is the tables below (``RESULT``, ``BRIEF``): a key the guest adds must be
declared here (in one place) or the host rejects every result that has it. Unknown keys
are rejected rather than dropped, so that a guest and host that disagree about the format
fail loudly in the first test instead of losing data quietly.

After validation the result's texts and integers are shared objects where they repeat
(a name on every state row, a step index on each of its rows): what json.loads made one
object per occurrence is then one per distinct value, which is what the worker keeps
until its chunk is sent and what is pickled to the parent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import partial
from operator import is_not
from typing import Callable, Union

from steptrace.sandbox._limits import Limits

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
NOTE_PREVIEW = 60  # characters of an offending value quoted in a rejection's note
SHARE_FROM = 64  # shorter columns are not worth a pass to share their values
MAX_EVALUATIONS = 1_000_000  # condition outcomes the guest keeps (tracer/analysis.py)

# What the guest may report itself. ``timeout`` and ``exited`` are the host's (it sees the
# trap), and so is ``file_limit`` (it measures the job's files: wasm_sandbox/_files.py); a
# guest claiming them is rejected.
GUEST_STATUSES = ("ok", "exception", "invalid", "step_limit", "memory_limit", "output_limit",
                  "unsupported", "missing_module", "tampered", "crashed", "loops")
# Every status a run can have (the host adds ``timeout``, ``exited`` and ``file_limit``;
# the native backend ``refused``: what a model wrote that is not a pure literal,
# native_sandbox/_trust.py).
STATUSES = ("ok", "exception", "invalid", "timeout", "step_limit", "memory_limit",
            "output_limit", "unsupported", "missing_module", "exited", "tampered", "crashed",
            "loops", "file_limit", "refused")


class ResultRejected(ValueError):
    """The result is malformed; the message names the first problem (bounded length)."""


class ResultTooLarge(ValueError):
    """The result is larger than the host parses (``max_result_bytes``/``_values``)."""


# ------------------------------------------------------------------ the kinds of value
Cap = Union[int, str, Callable[[Limits], int]]  # a number, a Limits attribute, or derived


def cap_value(cap: Cap, limits: Limits) -> int:
    if isinstance(cap, int):
        return cap
    if isinstance(cap, str):
        return getattr(limits, cap)
    return cap(limits)


@dataclass(frozen=True)
class Text:
    """A string of at most ``cap`` characters; a longer one is cut to the cap and the cut
    recorded in ``flag`` (a boolean beside it: a sibling key, or a column of the same
    row) or, without a flag, in the run's note."""

    cap: Cap
    nullable: bool = False
    flag: str | None = None
    alphabet: str | None = None  # the only characters allowed, if given


@dataclass(frozen=True)
class Int:
    """An integer (not a boolean) in ``[low, high]``."""

    low: int
    high: int
    nullable: bool = False


@dataclass(frozen=True)
class Bool:
    nullable: bool = False


@dataclass(frozen=True)
class Choice:
    """One of ``values`` (strings)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    """An integer index into the sibling key ``table`` (checked before it): a name table,
    or ``steps`` (a step number, below the number of steps); counted from ``base``
    (``objects``: object ids are 1 .. rows), NULL allowed where ``nullable``."""

    table: str
    base: int = 0
    nullable: bool = False


@dataclass(frozen=True)
class Names:
    """A list of at most ``most`` texts of at most ``cap`` characters each."""

    cap: Cap
    most: Cap


@dataclass(frozen=True)
class Columns:
    """An object of equal-length lists, one per column, at most ``most`` rows: the
    guest's column-wise tables (``steps``, ``states``)."""

    columns: dict[str, "Spec"]
    most: Cap


@dataclass(frozen=True)
class Record:
    """An object with exactly the ``fields`` keys, plus any of the ``optional`` ones. A
    ``fields`` key named in ``empty_when_missing`` (a Columns) may be left out: it is then
    the table with no rows (the guest leaves out the tables a run has no rows of)."""

    fields: dict[str, "Spec"]
    optional: dict[str, "Spec"] = field(default_factory=dict)
    empty_when_missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Records:
    """A list of at most ``most`` objects of the same shape."""

    record: Record
    most: Cap


@dataclass(frozen=True)
class Snapshots:
    """``full_locals`` mode (tests): one ``[step, {name: repr}]`` pair per step."""

    name: Text
    value: Text


Spec = Union[Text, Int, Bool, Choice, Index, Names, Columns, Record, Records, Snapshots]


def _steps_plus_one(limits: Limits) -> int:
    # a function is named before its first step is recorded: at the step limit one more
    return limits.max_steps + 1


NAME = Text("max_name")
OBJECT_ID = Index("objects", base=1, nullable=True)  # an object id, or NULL: not an object
COUNT = Int(0, INT64_MAX)
ANALYSIS = Record({
    "conditions": Records(Record({
        "line": Int(0, INT32_MAX), "col": Int(0, INT32_MAX), "kind": NAME,
        "outcomes": Text(MAX_EVALUATIONS, alphabet="TF"),  # one letter per evaluation
    }), most="max_result_values"),
    "evaluations": COUNT, "evaluations_truncated": Bool(),
    "int_ops": COUNT, "int_ops_large": COUNT, "seq_ops": COUNT, "seq_ops_long": COUNT,
    "float_ops": COUNT, "true_divisions": COUNT,
})

# The full result (tracer/job.py new_result() and _fill_trace). Checked in this order: a
# table an Index refers to comes before it.
RESULT = Record(
    fields={
        "status": Choice(GUEST_STATUSES),
        "exception_type": Text("max_name", nullable=True),
        "exception_message": Text("max_message", nullable=True),
        "output": Text("max_output", nullable=True, flag="output_truncated"),
        "output_type": Text("max_name", nullable=True),
        "output_truncated": Bool(),
        "output_matches": Bool(nullable=True),
        "note": Text("max_message", nullable=True),
        "stdout": Text("max_stdout"),
        "line_steps": COUNT,
        "instruction_steps": COUNT,
        "calls": COUNT,
        "max_depth": Int(-1, INT32_MAX),
        "call_us": COUNT,
        "events": Names("max_name", most=64),
        "funcs": Names("max_name", most=_steps_plus_one),
        "steps": Columns({
            "event": Index("events"), "line": Int(0, INT32_MAX), "depth": Int(0, INT32_MAX),
            "frame": Int(0, INT32_MAX), "func": Index("funcs"),
        }, most="max_steps"),
        # one row per object id, 1 .. rows (tracer/sysmon_tracer.py, "Objects")
        "objects": Columns({"type": NAME, "step": Index("steps")}, most="max_result_values"),
        "states": Columns({
            "step": Index("steps"), "var": NAME,
            "value": Text("max_repr", nullable=True, flag="truncated"),
            "type": Text("max_name", nullable=True), "truncated": Bool(),
            "object_id": OBJECT_ID,
        }, most="max_result_values"),
        "attributes": Columns({
            "step": Index("steps"), "object_id": Index("objects", base=1), "attr": NAME,
            "value": Text("max_repr", nullable=True, flag="truncated"),
            "type": Text("max_name", nullable=True), "truncated": Bool(),
            "ref_id": OBJECT_ID,
        }, most="max_result_values"),
        "global_states": Columns({
            "step": Index("steps"), "name": NAME,
            "value": Text("max_repr", nullable=True, flag="truncated"),
            "type": Text("max_name", nullable=True), "truncated": Bool(),
            "object_id": OBJECT_ID,
        }, most="max_result_values"),
    },
    optional={
        "analysis": ANALYSIS,                         # mode "analyse"
        "snapshots": Snapshots(NAME, Text("max_repr")),  # option full_locals
        "shared_state_changed": Names("max_name", most=100_000),  # batch isolation
        # request "report_imports" (build --learn): modules imported on first use
        "imported": Names("max_name", most=100_000),
        # the settrace view's own line events (tracer/sysmon_tracer.py, _settrace_line),
        # each after the step ``step``; left out when they are more than max_steps
        "settrace_lines": Columns({
            "step": Index("steps"), "line": Int(0, INT32_MAX), "depth": Int(0, INT32_MAX),
            "frame": Int(0, INT32_MAX), "func": Index("funcs"),
        }, most="max_steps"),
        # request "plain_output": the returned value is built-in data all the way down
        # (tracer/answer_values.py), so its text is the runner's repr, not the program's
        "output_plain": Bool(),
        # batch isolation: the job opened a file, listed a directory with an iterator,
        # changed directory or connected sqlite3 (tracer/guard.py): the host gives the
        # next job a fresh instance (a descriptor it kept would outlive its files)
        "files_used": Bool(),
    },
    empty_when_missing=("objects", "attributes", "global_states"),
)

# Statuses whose trace the host does not keep: the guest itself says it cannot be
# trusted, and a program that tampered with the tracer may have left its columns
# inconsistent (``t.ev = []``). The run's status, messages and counts are kept.
UNTRUSTED_TRACE = ("tampered",)


def _drop_trace(result: dict) -> None:
    if "steps" in result:
        result["steps"] = {name: [] for name in RESULT.fields["steps"].columns}
    for table in ("objects", "states", "attributes", "global_states"):
        if table in result:
            result[table] = {name: [] for name in RESULT.fields[table].columns}
    if "funcs" in result:
        result["funcs"] = []
    result.pop("snapshots", None)
    result.pop("settrace_lines", None)


# The short reply of a guest that could not build a result (guest.py: out of memory, or
# its own error): these three keys only.
BRIEF = Record({
    "status": Choice(("crashed", "memory_limit")),
    "exception_type": Text("max_name", nullable=True),
    "exception_message": Text("max_message", nullable=True),
})


# ------------------------------------------------------------------ parsing
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"')


def count_values(text: str) -> int:
    """An upper bound on the values and keys ``json.loads(text)`` makes: each one but the
    first of its container follows a ``,`` or ``:``; the first follows ``[`` or ``{``.
    The punctuation inside strings counts too (four ``str.count`` passes, ~15 ms for
    60 MiB), so the bound is exact only for texts without it."""
    return text.count(",") + text.count(":") + text.count("[") + text.count("{") + 1


def parse_result(text: str | bytes, limits: Limits) -> dict:
    """The guest's result text as a validated result dict (see the module docstring)."""
    if len(text) > limits.max_result_bytes:
        raise ResultTooLarge(f"trace result exceeds {limits.max_result_bytes} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ResultRejected(f"the result is not UTF-8 ({exc.reason} at byte {exc.start})")
    if count_values(text) > limits.max_result_values:
        # Punctuation inside strings (reprs of lists, dicts) inflates the quick count:
        # count again with every string emptied (~50-500 MiB/s).
        if count_values(_STRING.sub('""', text)) > limits.max_result_values:
            raise ResultTooLarge(f"trace result has more than {limits.max_result_values:,} "
                                 "JSON values")
    try:
        result = json.loads(text)
    except RecursionError:
        raise ResultRejected("the result is nested too deeply to parse") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of over 4,300 digits
        raise ResultRejected(f"the result is not JSON: {_preview(str(exc), 120)}") from None
    del text
    return validate(result, limits)


def validate(result: object, limits: Limits) -> dict:
    """Check ``result`` against ``RESULT`` (or ``BRIEF``), cut over-cap texts, share
    repeated values; return it. Raises ResultRejected."""
    if type(result) is not dict:
        raise ResultRejected(f"the result is {_kind(result)}, not an object")
    if result.get("status") in UNTRUSTED_TRACE:
        _drop_trace(result)
    spec = BRIEF if result.keys() == BRIEF.fields.keys() else RESULT
    checker = _Checker(limits)
    checker.record(spec, result, "")
    if checker.cuts:
        cuts = "cut to the host's caps: " + ", ".join(checker.cuts)
        result["note"] = f"{result['note']}; {cuts}" if result.get("note") else cuts
    return result


# ------------------------------------------------------------------ checking
def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", int: "an integer",
            float: "a number with a fraction", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _preview(text: str, most: int = NOTE_PREVIEW) -> str:
    return text if len(text) <= most else text[:most] + f"... ({len(text):,} characters)"


def _show(value: object) -> str:
    if isinstance(value, str):
        return repr(_preview(value))
    if type(value) is int:
        return _preview(str(value))
    return _kind(value)


class _Checker:
    """One validation: the limits, the tables checked so far, and the cuts made (for the
    note). Paths (``steps.func[3]``) are spelled out only for a problem: ``where`` is the
    parent's path and ``key`` the key or index within it."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.cuts: list[str] = []
        self.lengths: dict[str, int] = {}  # checked tables an Index may refer to
        self._caps = _caps(limits)

    def cap(self, cap: Cap) -> int:
        found = self._caps.get(cap)
        if found is None:
            found = self._caps[cap] = cap_value(cap, self.limits)
        return found

    # -------------------------------------------------------------- objects
    def record(self, spec: Record, value: object, path: str) -> None:
        if type(value) is not dict:
            raise ResultRejected(f"{path or 'the result'} is {_kind(value)}, not an object")
        filled = ()
        for key in spec.empty_when_missing:
            if key not in value:
                value[key] = {name: [] for name in spec.fields[key].columns}
                filled += (key,)
        for key in spec.fields:
            if key not in value:
                raise ResultRejected(f"{_join(path, key)} is missing")
        if len(value) > len(spec.fields):
            for key in value:
                if key not in spec.fields and key not in spec.optional:
                    raise ResultRejected(f"{_join(path, key)} is not a key of "
                                         f"{path or 'the result'}")
        lengths, self.lengths = self.lengths, {}
        check = _CHECKS
        for key, item in _in_order(spec, value):
            if filled and key in filled:
                self.lengths[key] = 0  # made empty above: nothing to check
                continue
            check[type(item)](self, item, value, key, path)
        self.lengths = lengths

    def nested(self, spec: Record, parent: dict, key: str, where: str) -> None:
        self.record(spec, parent[key], _join(where, key))

    # -------------------------------------------------------------- scalars
    def text(self, spec: Text, parent: dict, key, where: str) -> None:
        value = parent[key]
        if type(value) is not str:
            if value is None and spec.nullable:
                return
            raise ResultRejected(f"{_join(where, key)} is {_kind(value)}, not a string")
        if spec.alphabet is not None and value.strip(spec.alphabet):
            raise ResultRejected(f"{_join(where, key)} holds other characters than "
                                 + " and ".join(spec.alphabet))
        cap = self.cap(spec.cap)
        if len(value) > cap:
            parent[key] = value[:cap]
            if spec.flag is not None:
                parent[spec.flag] = True
            else:
                self.cuts.append(f"{_join(where, key)} ({len(value):,} characters) to {cap:,}")

    def int_field(self, spec: Int, parent: dict, key, where: str) -> None:
        value = parent[key]
        if value is None and spec.nullable:
            return
        _integer(spec.low, spec.high, value, where, key)

    def bool_field(self, spec: Bool, parent: dict, key, where: str) -> None:
        value = parent[key]
        if not (type(value) is bool or (value is None and spec.nullable)):
            raise ResultRejected(f"{_join(where, key)} is {_kind(value)}, not a boolean")

    def choice(self, spec: Choice, parent: dict, key, where: str) -> None:
        value = parent[key]
        if type(value) is not str or value not in spec.values:
            raise ResultRejected(f"{_join(where, key)} is {_show(value)}, not one of "
                                 + ", ".join(spec.values))

    def index(self, spec: Index, parent: dict, key, where: str) -> None:
        if parent[key] is None and spec.nullable:
            return
        _integer(spec.base, self.length(spec.table) - 1 + spec.base, parent[key], where, key)

    def length(self, table: str) -> int:
        if table not in self.lengths:  # pragma: no cover - the declaration's order is wrong
            raise TypeError(f"an index into {table} is declared before {table}")
        return self.lengths[table]

    # -------------------------------------------------------------- lists
    def names(self, spec: Names, parent: dict, key: str, where: str) -> None:
        names = _list(parent[key], self.cap(spec.most), where, key, "names")
        self.text_column(self.cap(spec.cap), False, names, None, where, key)
        self.lengths[key] = len(names)

    def records(self, spec: Records, parent: dict, key: str, where: str) -> None:
        path = _join(where, key)
        for index, item in enumerate(_list(parent[key], self.cap(spec.most), where, key,
                                           "entries")):
            self.record(spec.record, item, f"{path}[{index}]")

    def snapshots(self, spec: Snapshots, parent: dict, key: str, where: str) -> None:
        path = _join(where, key)
        steps = self.length("steps")
        name_cap = self.cap(spec.name.cap)
        for index, pair in enumerate(_list(parent[key], steps, where, key, "snapshots")):
            at = f"{path}[{index}]"
            if type(pair) is not list or len(pair) != 2:
                raise ResultRejected(f"{at} is not a [step, locals] pair")
            _integer(0, steps - 1, pair[0], at, 0)
            local = pair[1]
            if type(local) is not dict:
                raise ResultRejected(f"{at}[1] is {_kind(local)}, not an object")
            for name in list(local):
                if len(name) > name_cap:
                    raise ResultRejected(f"{at}[1] has a name of {len(name):,} characters")
                self.text(spec.value, local, name, f"{at}[1]")

    def columns(self, spec: Columns, parent: dict, key: str, where: str) -> None:
        """Every column's type, range and caps, and one length for all of them."""
        table = parent[key]
        path = _join(where, key) if where else key
        if type(table) is not dict:
            raise ResultRejected(f"{path} is {_kind(table)}, not an object")
        order = _orders(spec)[1]
        first = order[0][0]
        if table.get(first) == [] and len(table) == len(spec.columns) and all(
                type(table.get(name)) is list and not table[name] for name in spec.columns):
            self.lengths[key] = 0  # the table with no rows: nothing more to check
            return
        for name in spec.columns:
            if name not in table:
                raise ResultRejected(f"{path}.{name} is missing")
        if len(table) > len(spec.columns):
            for name in table:
                if name not in spec.columns:
                    raise ResultRejected(f"{_join(path, name)} is not a column of {path}")
        most = self.cap(spec.most)
        rows = None
        for name, _ in order:
            values = _list(table[name], most, path, name, "rows")
            if rows is None:
                rows = len(values)
            elif len(values) != rows:
                raise ResultRejected(f"{path}.{name} has length {len(values):,}, {path}.{first} "
                                     f"{rows:,}")
        for name, column in order:
            values = table[name]
            kind = type(column)
            if kind is Index:
                _int_column(column.base, self.length(column.table) - 1 + column.base, values,
                            path, name, column.nullable)
            elif kind is Int:
                _int_column(column.low, column.high, values, path, name)
            elif kind is Bool:
                if values and not set(map(type, values)) <= {bool}:
                    bad = next(i for i, v in enumerate(values) if type(v) is not bool)
                    raise ResultRejected(f"{path}.{name}[{bad}] is {_kind(values[bad])}, "
                                         "not a boolean")
            elif kind is Text:
                flags = table[column.flag] if column.flag is not None else None
                self.text_column(self.cap(column.cap), column.nullable, values, flags, path,
                                 name)
            else:  # pragma: no cover - a column kind declared above but not handled here
                raise TypeError(f"unknown column spec {column!r}")
        self.lengths[key] = rows or 0

    def text_column(self, cap: int, nullable: bool, values: list, flags: list | None,
                    where: str, key: str) -> None:
        """Every value a string (or null where allowed); over-cap ones cut (flagged or
        noted); repeated ones made one object."""
        if not values:
            return
        allowed = _NULLABLE_TEXT if nullable else _TEXT
        if not set(map(type, values)) <= allowed:
            bad = next(i for i, v in enumerate(values) if type(v) not in allowed)
            raise ResultRejected(f"{_join(where, key)}[{bad}] is {_kind(values[bad])}, "
                                 "not a string")
        longest = max(map(len, filter(None, values)), default=0)
        if longest > cap:
            cut = 0
            for index, text in enumerate(values):
                if text is not None and len(text) > cap:
                    values[index] = text[:cap]
                    cut += 1
                    if flags is not None:
                        flags[index] = True
            if flags is None:
                self.cuts.append(f"{_join(where, key)} ({cut:,} of {len(values):,}, the "
                                 f"longest {longest:,} characters) to {cap:,}")
        _share(values)


_CHECKS = {Text: _Checker.text, Int: _Checker.int_field, Bool: _Checker.bool_field,
           Choice: _Checker.choice, Index: _Checker.index, Names: _Checker.names,
           Columns: _Checker.columns, Record: _Checker.nested, Records: _Checker.records,
           Snapshots: _Checker.snapshots}
_CAPS: dict[int, tuple[Limits, dict]] = {}


def _caps(limits: Limits) -> dict:
    """The caps worked out for ``limits`` so far (a sandbox keeps one Limits object;
    looked up by identity, since hashing a Limits costs more than the lookup saves)."""
    found = _CAPS.get(id(limits))
    if found is None or found[0] is not limits:
        if len(_CAPS) > 64:
            _CAPS.clear()
        found = _CAPS[id(limits)] = (limits, {})
    return found[1]


_TEXT = frozenset({str})
_NOT_NONE = partial(is_not, None)
_NULLABLE_TEXT = frozenset({str, type(None)})


def _integer(low: int, high: int, value: object, where: str, key) -> None:
    if type(value) is not int:
        raise ResultRejected(f"{_join(where, key)} is {_kind(value)}, not an integer")
    if not low <= value <= high:
        raise ResultRejected(f"{_join(where, key)} = {_show(value)} is outside [{low}, {high}]")


def _int_column(low: int, high: int, values: list, where: str, key: str,
                nullable: bool = False) -> None:
    """Every value an integer in [low, high] (or null where allowed); repeated values
    made one object."""
    if not values:
        return
    kinds = set(map(type, values))
    if nullable and type(None) in kinds:
        kinds.discard(type(None))
        numbers = list(filter(_NOT_NONE, values))
    else:
        numbers = values
    if kinds - {int}:
        bad = next(i for i, v in enumerate(values) if type(v) is not int
                   and not (nullable and v is None))
        raise ResultRejected(f"{where}.{key}[{bad}] is {_kind(values[bad])}, not an integer")
    if not numbers:
        return
    smallest, largest = min(numbers), max(numbers)
    if smallest < low or largest > high:
        bad = next(i for i, v in enumerate(values) if v is not None and not low <= v <= high)
        raise ResultRejected(f"{where}.{key}[{bad}] = {_show(values[bad])} is outside "
                             f"[{low}, {high}]")
    if largest > 256:  # CPython shares -5..256 already
        _share(values)


def _list(value: object, most: int, where: str, key, what: str) -> list:
    if type(value) is not list:
        raise ResultRejected(f"{_join(where, key)} is {_kind(value)}, not an array")
    if len(value) > most:
        raise ResultRejected(f"{_join(where, key)} has {len(value):,} {what}, more than "
                             f"{most:,}")
    return value


_ORDERS: dict[int, tuple[object, list, list]] = {}


def _order(specs: dict[str, Spec]) -> list[tuple[str, Spec]]:
    """``specs`` in declaration order, but a Text with a flag after the flag itself: a
    cut sets the flag to true, which must not hide a flag that was not a boolean."""
    return sorted(specs.items(), key=lambda item: isinstance(item[1], Text)
                  and item[1].flag is not None)


def _orders(spec: Record | Columns) -> tuple[object, list, list]:
    """(spec, the order of its required keys, of all its keys), worked out once per
    declaration; the spec is kept so that its id is not reused."""
    found = _ORDERS.get(id(spec))
    if found is None:
        if isinstance(spec, Columns):
            order = _order(spec.columns)
            found = (spec, order, order)
        else:
            found = (spec, _order(spec.fields),
                     _order({**spec.fields, **spec.optional}))
        _ORDERS[id(spec)] = found
    return found


def _in_order(spec: Record, value: dict) -> list[tuple[str, Spec]]:
    """The keys of ``value`` in the declaration's order (a table before the indices into
    it), whatever order the guest wrote them in."""
    _, fields, every = _orders(spec)
    if len(value) == len(spec.fields):
        return fields
    return [(key, item) for key, item in every if key in value]


def _share(values: list) -> None:
    """Make equal values one object (json.loads makes one per occurrence)."""
    if len(values) < SHARE_FROM:
        return
    seen: dict = {}
    values[:] = [seen.setdefault(v, v) for v in values]


def _join(path: str, key) -> str:
    """``path.key``, or ``path[key]`` for a list index."""
    if type(key) is int:
        return f"{path}[{key}]"
    key = _preview(key)
    return f"{path}.{key}" if path else key
