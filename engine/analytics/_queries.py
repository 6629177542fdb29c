"""Named SQL queries: the ``.sql`` files of the repository's ``queries/`` folder.

Each file is one SQL statement preceded by a header of ``--`` comment lines:

    -- name: hottest_lines                      (must equal the file's stem)
    -- description: one line saying what the query answers
    -- param: limit int >= 1 = 20 (rows to return)
    -- requires: predictions(task_id, model, sample_index): run steptrace predict first

``param`` lines declare typed parameters (``int``, ``float``, ``bool``, ``str``; an
optional lower bound for numbers; a default), which the SQL uses as DuckDB prepared
statement parameters (``$limit``). User text is never pasted into SQL: each value is
validated against its declared type and bound by DuckDB. ``requires`` lines name tables
(and the columns the query reads) that not every store has; a missing one is a one-line
error with the hint, before DuckDB sees the query. Other comment lines are notes for
people.

The folder is the checkout's top-level ``queries/``, installed as the package data of
``steptrace.queries``. A query runs against a DuckDB store (``db``) or a Parquet export
(``parquet``, see engine/analytics/_export.py) — the same SQL either way.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import duckdb

import steptrace.queries
from steptrace.store._store import QueryResult, StoreError, connect, first_line
from steptrace.errors import InputError

QUERIES_DIR = Path(steptrace.queries.__file__).resolve().parent

_HEADER_LINE = re.compile(r"^--\s*(name|description|param|requires)\s*:\s*(.*?)\s*$")
_PARAM = re.compile(
    r"^(?P<name>[a-z_][a-z0-9_]*)\s+(?P<kind>int|float|bool|str)"
    r"(?:\s*>=\s*(?P<minimum>-?\d+(?:\.\d+)?))?\s*=\s*(?P<default>'[^']*'|\S+)"
    r"(?:\s*\((?P<help>.*)\))?$")
_REQUIRES = re.compile(r"^(?P<table>[a-z_][a-z0-9_]*)\s*\((?P<columns>[^)]*)\)\s*:\s*(?P<hint>.+)$")
_REFERENCE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class QueryDefinitionError(InputError):
    """A ``.sql`` file whose header is malformed or disagrees with its SQL."""


@dataclass(frozen=True)
class Param:
    """A typed parameter of a named query; ``parse`` is the only way a value gets in."""

    name: str
    kind: str
    default: object
    minimum: float | None = None
    help: str = ""

    def parse(self, text: str, query: str) -> object:
        """``text`` as a value of this parameter, or a one-line ValueError."""
        if self.kind == "str":
            return text
        if self.kind == "bool":
            lowered = text.strip().lower()
            if lowered in _TRUE or lowered in _FALSE:
                return lowered in _TRUE
            raise InputError(f"parameter {self.name} of query {query} must be true or false, "
                             f"got {text!r}")
        try:
            value = int(text) if self.kind == "int" else float(text)
        except ValueError:
            value = None
        if value is None or (self.minimum is not None and value < self.minimum):
            raise InputError(f"parameter {self.name} of query {query} must be "
                             f"{self._expected()}, got {text!r}")
        return value

    def _bound(self) -> str:
        if self.minimum is None:
            return ""
        return f">= {int(self.minimum) if self.kind == 'int' else self.minimum}"

    def _expected(self) -> str:
        noun = "an integer" if self.kind == "int" else "a number"
        return f"{noun} {self._bound()}".rstrip()

    def _shown_default(self) -> str:
        if self.kind == "str":
            return repr(self.default)
        return str(self.default).lower() if self.kind == "bool" else str(self.default)

    def describe(self) -> str:
        kind = f"{self.kind} {self._bound()}".rstrip()
        text = f"{self.name}: {kind} = {self._shown_default()}"
        return f"{text} ({self.help})" if self.help else text


@dataclass(frozen=True)
class Requirement:
    """A table (and the columns of it a query reads) that a store may not have yet."""

    table: str
    columns: tuple[str, ...]
    hint: str


@dataclass(frozen=True)
class NamedQuery:
    name: str
    description: str
    params: tuple[Param, ...]
    requires: tuple[Requirement, ...]
    sql: str
    path: Path

    def bind(self, values: Mapping[str, str]) -> dict[str, object]:
        """Every declared parameter's value: from ``values`` (text, validated) or its
        default. Unknown names are errors, so a typo never silently runs the default."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(values) - set(known))
        if unknown:
            accepted = ", ".join(known) or "none"
            raise InputError(f"unknown parameter {unknown[0]} for query {self.name} "
                             f"(parameters: {accepted})")
        return {name: (p.parse(values[name], self.name) if name in values else p.default)
                for name, p in known.items()}

    def params_text(self) -> str:
        return "; ".join(p.describe() for p in self.params)


def _default(kind: str, text: str, where: str) -> object:
    if text.startswith("'") and text.endswith("'") and len(text) >= 2:
        text = text[1:-1]
    probe = Param("default", kind, None)
    try:
        return probe.parse(text, where)
    except ValueError:
        raise QueryDefinitionError(f"{where}: default {text!r} is not of type {kind}") from None


def _param(text: str, where: str) -> Param:
    match = _PARAM.match(text)
    if not match:
        raise QueryDefinitionError(
            f"{where}: bad param line {text!r} (expected 'NAME TYPE [>= MIN] = DEFAULT (help)')")
    kind = match["kind"]
    minimum = match["minimum"]
    if minimum is not None and kind not in ("int", "float"):
        raise QueryDefinitionError(f"{where}: only numbers take a lower bound ({text!r})")
    param = Param(match["name"], kind, _default(kind, match["default"], where),
                  None if minimum is None else float(minimum), (match["help"] or "").strip())
    if minimum is not None and param.default < param.minimum:
        raise QueryDefinitionError(f"{where}: default of {param.name} is below its bound")
    return param


def _requirement(text: str, where: str) -> Requirement:
    match = _REQUIRES.match(text)
    if not match:
        raise QueryDefinitionError(
            f"{where}: bad requires line {text!r} (expected 'TABLE(col, ...): hint')")
    columns = tuple(c.strip() for c in match["columns"].split(",") if c.strip())
    return Requirement(match["table"], columns, match["hint"].strip())


def _sql_without_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def parse_query(text: str, path: Path) -> NamedQuery:
    """A named query from the text of its file; QueryDefinitionError names the file."""
    where = str(path)
    fields: dict[str, str] = {}
    params: list[Param] = []
    requires: list[Requirement] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            if line.strip():
                break  # the header ends at the first line of SQL
            continue
        match = _HEADER_LINE.match(line)
        if not match:
            continue  # a note for people
        key, value = match.groups()
        if key == "param":
            params.append(_param(value, where))
        elif key == "requires":
            requires.append(_requirement(value, where))
        elif key in fields:
            raise QueryDefinitionError(f"{where}: '{key}' given twice")
        else:
            fields[key] = value
    for key in ("name", "description"):
        if not fields.get(key):
            raise QueryDefinitionError(f"{where}: header has no '-- {key}:' line")
    if fields["name"] != path.stem or not _NAME.match(fields["name"]):
        raise QueryDefinitionError(f"{where}: name {fields['name']!r} must be the file's stem")
    referenced = set(_REFERENCE.findall(_sql_without_comments(text)))
    declared = [p.name for p in params]
    if len(set(declared)) != len(declared) or referenced != set(declared):
        raise QueryDefinitionError(
            f"{where}: declared parameters {sorted(declared)} differ from those the SQL uses "
            f"{sorted(referenced)}")
    return NamedQuery(fields["name"], fields["description"], tuple(params), tuple(requires),
                      text, path)


def load_queries(directory: Path = QUERIES_DIR) -> dict[str, NamedQuery]:
    """Every named query of ``directory``, by name (sorted)."""
    if not directory.is_dir():
        raise InputError(f"query folder not found: {directory}")
    queries = [parse_query(path.read_text(encoding="utf-8"), path)
               for path in sorted(directory.glob("*.sql"))]
    return {q.name: q for q in queries}


def get_query(name: str, directory: Path = QUERIES_DIR) -> NamedQuery:
    """The query called ``name``; an unknown name is a one-line ValueError."""
    if not _NAME.match(name):
        raise InputError(f"unknown query {name!r}; see steptrace query --list")
    path = directory / f"{name}.sql"
    if not path.is_file():
        raise InputError(f"unknown query {name!r}; see steptrace query --list")
    return parse_query(path.read_text(encoding="utf-8"), path)


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["k=v", ...]`` (the CLI's ``--param``) as a dict; a repeated key is an error."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"bad --param {item!r}: expected NAME=VALUE")
        if key in values:
            raise InputError(f"--param {key} given twice")
        values[key] = value
    return values


def default_params(text: str, path: Path) -> dict[str, object]:
    """The declared defaults of a ``.sql`` file with ``-- param:`` lines (empty for plain
    SQL), so ``steptrace sql -f queries/X.sql`` runs a named query as it stands."""
    params = [_param(m.group(2), str(path)) for m in map(_HEADER_LINE.match, text.splitlines())
              if m and m.group(1) == "param"]
    return {p.name: p.default for p in params}


@contextmanager
def open_source(db: str | Path | None = None,
                parquet: str | Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only view of a store: the DuckDB file, or views over a Parquet export."""
    if parquet is not None:
        from steptrace.analytics._export import open_parquet
        con = open_parquet(parquet)
    elif db is not None:
        con = connect(db, read_only=True)
    else:
        raise InputError("give a database or a Parquet directory")
    try:
        yield con
    finally:
        con.close()


def missing_requirement(con: duckdb.DuckDBPyConnection, query: NamedQuery) -> str | None:
    """The first requirement of ``query`` the connection's tables do not meet, as a message."""
    found: dict[str, set[str]] = {}
    for table, column in con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main'").fetchall():
        found.setdefault(table, set()).add(column)
    for req in query.requires:
        if req.table not in found:
            return f"table {req.table} does not exist: {req.hint}"
        absent = [c for c in req.columns if c not in found[req.table]]
        if absent:
            return (f"table {req.table} has no column {', '.join(absent)} "
                    f"(query {query.name} reads {', '.join(req.columns)})")
    return None


def _execute(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, object],
             what: str) -> QueryResult:
    try:
        cursor = con.execute(sql, dict(params)) if params else con.execute(sql)
        if cursor.description is None:
            return QueryResult([], [])
        return QueryResult([d[0] for d in cursor.description], cursor.fetchall())
    except duckdb.Error as exc:
        raise StoreError(f"{what}: {first_line(exc)}") from exc


def _where(db: str | Path | None, parquet: str | Path | None) -> str:
    return f"Parquet export {parquet}" if parquet is not None else str(db)


def run_query(name: str, db: str | Path | None = None, parquet: str | Path | None = None,
              params: Mapping[str, str] | None = None,
              directory: Path = QUERIES_DIR) -> QueryResult:
    """Run the named query (parameters as text, validated) on a store or an export."""
    with open_source(db, parquet) as con:
        return run_query_on(con, name, _where(db, parquet), params, directory)


def run_query_on(con: duckdb.DuckDBPyConnection, name: str, source: str,
                 params: Mapping[str, str] | None = None,
                 directory: Path = QUERIES_DIR) -> QueryResult:
    """The named query on an open connection (``source`` names it in errors): the
    report runs all its queries on one connection, over its filtered views."""
    query = get_query(name, directory)
    values = query.bind(params or {})
    missing = missing_requirement(con, query)
    if missing:
        raise StoreError(missing)
    return _execute(con, query.sql, values, f"query {name} failed on {source}")


def run_sql(sql: str, db: str | Path | None = None, parquet: str | Path | None = None,
            params: Mapping[str, object] | None = None) -> QueryResult:
    """One SQL statement, read-only, on a store or an export (``steptrace sql``)."""
    with open_source(db, parquet) as con:
        return _execute(con, sql, params or {}, f"query failed on {_where(db, parquet)}")


def list_rows(directory: Path = QUERIES_DIR) -> tuple[list[str], list[tuple]]:
    """``steptrace query --list``: name, description and parameters of every query."""
    rows = [(q.name, q.description, q.params_text())
            for q in load_queries(directory).values()]
    return ["name", "description", "params"], rows


# --------------------------------------------------------- standard-library methods
def stdlib_methods() -> list[tuple[str, str]]:
    """(method, owners) for every public method of str, list and dict, owners being the
    types that have it ('list,str' for ``count``). The ``stdlib_methods`` and
    ``accuracy_by_method`` queries carry this list as a VALUES table (the tests check
    they match it); regenerate the block with :func:`methods_values_sql`."""
    owners: dict[str, list[str]] = {}
    for kind in (dict, list, str):
        for method in dir(kind):
            if not method.startswith("_"):
                owners.setdefault(method, []).append(kind.__name__)
    return [(m, ",".join(owners[m])) for m in sorted(owners)]


def methods_values_sql(indent: str = "    ") -> str:
    """The VALUES rows of :func:`stdlib_methods`, four to a line, to paste into a query."""
    items = [f"('{m}', '{o}')" for m, o in stdlib_methods()]
    lines = [", ".join(items[i:i + 4]) for i in range(0, len(items), 4)]
    return (",\n" + indent).join(lines)
