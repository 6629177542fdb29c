"""CRUXEval-style construction filters over a trace store (README, "Filters").

CRUXEval (Gu et al. 2024, §3.2; its ``data/README.md`` and ``data/filter/analyze_ops.py``)
kept a generated sample only if it passed compile-time checks (length, arguments used,
no syntax error, no imports or forbidden names, printable text) and run-time checks made
by tracing every bytecode under ``sys.settrace`` on Python 3.9 (no float operations or
true division, integer operations with an operand of absolute value <= 3, string/list
operations with an operand of length <= 3, done within 2 s, no uncaught exception,
deterministic). Here each check is a named ``Rule`` over stored runs: the static ones
read ``programs.code`` and ``runs.input``, the dynamic ones the stored trace and the
``analyses`` row of the run's instrumented second execution (engine/tracing/_analysis.py), the
determinism rule the reseeded re-run's verdict.

Every rule is one SQL predicate over a per-run relation (``_FACTS``), so a store is
filtered set-wise in one query; the only per-row Python is parsing each distinct
program once (arguments, imports) and ``str.isprintable``, which SQL has no equal of.
A rule removes a run only on evidence: a rule that cannot judge a run (a program that
does not parse has no arguments to check; a run that did not finish has no analysis)
leaves it to the rule that explains why (``valid``, ``no_exception``, ``time``).
"""

from __future__ import annotations

import ast
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

import duckdb
import pyarrow as pa

from steptrace.store._arrow import arrow_array
from steptrace.tracing._analysis import ensure_analysed
from steptrace.store._store import StoreError, connect, first_line, has_table, shape_columns
from steptrace.errors import InputError
from steptrace.corpus._text import user_file

STATIC, DYNAMIC, DETERMINISM, SQL = "static", "dynamic", "determinism", "sql"
KINDS = (STATIC, DYNAMIC, DETERMINISM)
# Substrings refused in code or input: CRUXEval's analyze_ops.py refuses '__builtins__',
# 'input(', 'hash(', 'set(' (and 'import ': the no_imports rule here); issue 3 adds
# the other side effects. Plain substrings, as there: 'issubset(' contains 'set('.
FORBIDDEN = ("__builtins__", "globals()", "locals()", "open(", "exec(", "eval(", "input(",
             "hash(", "set(")


@dataclass(frozen=True)
class Range:
    """Inclusive bounds; None on a side means unbounded."""

    low: int | None = None
    high: int | None = None

    def __post_init__(self) -> None:
        if self.low is not None and self.high is not None and self.low > self.high:
            raise InputError(f"empty range {self}: {self.low} > {self.high}")

    def __str__(self) -> str:
        return f"{'' if self.low is None else self.low}:{'' if self.high is None else self.high}"

    @property
    def bounded(self) -> bool:
        return self.low is not None or self.high is not None

    def outside(self, column: str) -> str:
        """SQL true when ``column`` is outside the range (NULL: not judged, false)."""
        tests = ([f"{column} < {int(self.low)}"] if self.low is not None else []) + (
            [f"{column} > {int(self.high)}"] if self.high is not None else [])
        return f"coalesce({' OR '.join(tests)}, false)" if tests else "false"


def parse_range(text: str) -> Range:
    """``'5:100'``, ``':100'``, ``'5:'`` or ``':'`` → Range; ValueError otherwise."""
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        bounds = [int(part) if part.strip() else None for part in (low, high)]
    except ValueError:
        raise InputError(f"bad range {text!r}: use MIN:MAX, either side may be empty") from None
    return Range(*bounds)


@dataclass(frozen=True)
class FilterOptions:
    """Which rules run and their parameters.

    ``rules``: rule names or groups (``all``, ``default``, ``static``, ``dynamic``,
    ``determinism``) to apply; None means ``default``. ``without`` removes rules from
    that selection. ``where`` adds the SQL rule. ``workers`` is passed to the analysis
    run when one is needed (None: one per CPU)."""

    rules: tuple[str, ...] | None = None
    without: tuple[str, ...] = ()
    where: str | None = None
    length: Range = Range(75, 300)
    max_seconds: float = 2.0
    line_steps: Range = Range()
    instruction_steps: Range = Range()
    workers: int | None = None


@dataclass(frozen=True)
class Rule:
    """A filter: ``removes(options)`` is SQL over ``_FACTS``, true for a run it removes."""

    name: str
    kind: str
    describe: Callable[[FilterOptions], str]
    removes: Callable[[FilterOptions], str]
    needs_analysis: bool = False
    default: bool = True


def _length_text(o: FilterOptions) -> str:
    low, high = o.length.low, o.length.high
    if low is not None and high is not None:
        return f"code is {low}-{high} characters long"
    if not o.length.bounded:
        return "code length (no bounds set)"
    return f"code is at least {low} characters long" if high is None else \
        f"code is at most {high} characters long"


def _steps_text(o: FilterOptions) -> str:
    def bound(value: int | None, open_end: str) -> str:
        return open_end if value is None else str(value)
    bounds = [f"{name} in {bound(r.low, '-inf')}..{bound(r.high, 'inf')}"
              for name, r in (("line_steps", o.line_steps),
                              ("instruction_steps", o.instruction_steps)) if r.bounded]
    return ", ".join(bounds) if bounds else "line/instruction steps within bounds (none set)"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _forbidden_sql(_: FilterOptions) -> str:
    return " OR ".join(f"contains(code, {_quoted(t)}) OR contains(input, {_quoted(t)})"
                       for t in FORBIDDEN)


_RULES = (
    Rule("length", STATIC, _length_text, lambda o: o.length.outside("code_length")),
    Rule("args_used", STATIC,
         lambda o: "every parameter of the entry function is read in its body",
         lambda o: "coalesce(unused_args <> '', false)"),
    Rule("valid", STATIC,
         lambda o: "no syntax error: program, entry and input compile (status not invalid)",
         lambda o: "status = 'invalid'"),
    Rule("no_imports", STATIC,
         lambda o: "no import statement, no __import__ in code or input",
         lambda o: "coalesce(imports, false)"),
    Rule("no_forbidden", STATIC,
         lambda o: "none of " + " ".join(FORBIDDEN) + " in code or input",
         _forbidden_sql),
    Rule("printable", STATIC,
         lambda o: "code, input and output printable (str.isprintable; tab, newline allowed)",
         lambda o: "NOT printable"),
    Rule("no_float_values", DYNAMIC,
         lambda o: "no float among recorded locals, arguments and the return value",
         lambda o: "float_state OR coalesce(output_type = 'float', false)"),
    Rule("no_float_ops", DYNAMIC,
         lambda o: "no executed operation with a float operand or result",
         lambda o: "coalesce(float_ops > 0, false)", needs_analysis=True),
    Rule("no_true_division", DYNAMIC,
         lambda o: "no executed true division (/)",
         lambda o: "coalesce(true_divisions > 0, false)", needs_analysis=True),
    Rule("small_int_ops", DYNAMIC,
         lambda o: "every int operation has an operand with |x| <= 3",
         lambda o: "coalesce(int_ops_large > 0, false)", needs_analysis=True),
    Rule("short_seq_ops", DYNAMIC,
         lambda o: "every str/list/tuple/bytes operation has an operand of length <= 3",
         lambda o: "coalesce(seq_ops_long > 0, false)", needs_analysis=True),
    Rule("time", DYNAMIC,
         lambda o: f"the traced call finished within {o.max_seconds:g} s",
         lambda o: f"status IN ('timeout', 'loops') "
                   f"OR coalesce(call_us > {int(o.max_seconds * 1e6)}, false)"),
    Rule("no_exception", DYNAMIC,
         lambda o: "the call returned (status ok)",
         lambda o: "status <> 'ok'"),
    Rule("steps", DYNAMIC, _steps_text,
         lambda o: f"{o.line_steps.outside('line_steps')} OR "
                   f"{o.instruction_steps.outside('instruction_steps')}"),
    Rule("deterministic", DETERMINISM,
         lambda o: "same result, stdout and trace in a reseeded guest build",
         lambda o: "coalesce(NOT deterministic, false)", needs_analysis=True),
)
RULES: Mapping[str, Rule] = MappingProxyType({rule.name: rule for rule in _RULES})
GROUPS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "all": tuple(RULES),
    "default": tuple(name for name, rule in RULES.items() if rule.default),
    **{kind: tuple(name for name, rule in RULES.items() if rule.kind == kind) for kind in KINDS},
})
WHERE = "where"


def selected_rules(options: FilterOptions) -> list[Rule]:
    """The rules ``options`` switch on, in RULES order; ValueError for an unknown name."""
    chosen: set[str] = set()
    for name in options.rules if options.rules is not None else ("default",):
        chosen.update(_expand(name))
    for name in options.without:
        chosen.difference_update(_expand(name))
    return [rule for name, rule in RULES.items() if name in chosen]


def _expand(name: str) -> tuple[str, ...]:
    if name in RULES:
        return (name,)
    if name in GROUPS:
        return GROUPS[name]
    raise InputError(f"unknown rule {name!r}; rules: {', '.join(RULES)}; "
                     f"groups: {', '.join(GROUPS)}")


# ---------------------------------------------------------------- the report
@dataclass(frozen=True)
class RuleCount:
    rule: str
    kind: str
    description: str
    removed: int   # runs this rule removes (whatever other rules say)
    kept: int      # runs this rule keeps; in the final "kept" row: runs every rule keeps


@dataclass
class FilterReport:
    """Per enabled rule, what it removes (a run may count under several rules, as in
    CRUXEval's counter of reasons), then the runs every rule keeps."""

    total: int
    counts: list[RuleCount] = field(default_factory=list)
    removed: dict[str, list[int]] = field(default_factory=dict)  # rule → run ids
    kept: list[int] = field(default_factory=list)                # run ids
    analysed: int = 0  # analysis and determinism re-runs the filter had done first

    COLUMNS = ("rule", "kind", "description", "removed", "kept")

    def rows(self) -> list[tuple]:
        rows = [(c.rule, c.kind, c.description, c.removed, c.kept) for c in self.counts]
        return rows + [("kept", "", "runs that pass every rule above",
                        self.total - len(self.kept), len(self.kept))]


# ---------------------------------------------------------------- filtering
def filter_runs(db: str | Path, options: FilterOptions | None = None,
                progress: Callable[[int, int], None] | None = None) -> FilterReport:
    """Apply the selected rules to every run of ``db``. Runs the analysis first
    (``analyse_store``, which writes to the store) when a selected rule needs it and a
    finished run lacks it; everything else reads the store read-only."""
    options = options or FilterOptions()
    rules = selected_rules(options)
    where = _checked_where(options.where)
    analysed = _ensure_analysis(db, rules, options, progress)
    con = connect(db, read_only=True)
    try:
        report = _evaluate(con, db, rules, options, where)
    finally:
        con.close()
    report.analysed = analysed
    return report


def _checked_where(where: str | None) -> str | None:
    if where is None:
        return None
    if not where.strip():
        raise InputError("--where needs a condition, e.g. \"line_steps BETWEEN 5 AND 100\"")
    if ";" in where:
        raise InputError("--where takes one SQL condition over runs; ';' is not allowed")
    return where


def _ensure_analysis(db, rules: list[Rule], options: FilterOptions, progress) -> int:
    """Analyse (and check determinism of) finished runs lacking it, if a rule needs it."""
    if not any(rule.needs_analysis for rule in rules):
        return 0
    determinism = any(rule.kind == DETERMINISM for rule in rules)
    return ensure_analysed(db, determinism, options.workers, progress)


_NO_ANALYSES = ("(SELECT NULL::BIGINT AS run_id, NULL::BIGINT AS float_ops, "
                "NULL::BIGINT AS true_divisions, NULL::BIGINT AS int_ops_large, "
                "NULL::BIGINT AS seq_ops_long, NULL::BOOLEAN AS deterministic WHERE false)")

# One row per run with every fact a rule reads. ``program_facts`` and ``text_facts``
# are Arrow tables computed in Python (parsing, str.isprintable).
_FACTS = """
SELECT r.run_id, r.status, r.input, r.output_type, r.call_us, r.line_steps,
       r.instruction_steps, p.code, pf.code_length, pf.unused_args, pf.imports
           OR contains(r.input, '__import__') AS imports,
       tf.printable, fs.run_id IS NOT NULL AS float_state,
       a.float_ops, a.true_divisions, a.int_ops_large, a.seq_ops_long, a.deterministic
FROM runs r
JOIN programs p USING (program_id)
JOIN program_facts pf USING (program_id)
JOIN text_facts tf USING (run_id)
LEFT JOIN {analyses} a USING (run_id)
LEFT JOIN (SELECT DISTINCT run_id FROM states WHERE type = 'float') fs USING (run_id)
"""


def _evaluate(con, db, rules: list[Rule], options: FilterOptions,
              where: str | None) -> FilterReport:
    """Every rule's verdict on every run, in one query over the facts relation."""
    try:
        con.register("program_facts", _program_facts(con))
        con.register("text_facts", _text_facts(con))
        analyses = "analyses" if has_table(con, "analyses") else _NO_ANALYSES
        checks = [(rule.name, rule.removes(options)) for rule in rules]
        if where is not None:
            con.register("where_kept", _where_kept(con, where))
            checks.append((WHERE, "run_id NOT IN (SELECT run_id FROM where_kept)"))
        columns = "".join(f", ({sql}) AS r{i}" for i, (_, sql) in enumerate(checks))
        verdicts = con.execute(f"SELECT run_id{columns} FROM ({_FACTS.format(analyses=analyses)}) "
                               "ORDER BY run_id").fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"cannot filter {db}: {first_line(exc)}") from exc
    report = FilterReport(total=len(verdicts))
    report.removed = {name: [row[0] for row in verdicts if row[i + 1]]
                      for i, (name, _) in enumerate(checks)}
    report.kept = [row[0] for row in verdicts if not any(row[1:])]
    described = {rule.name: (rule.kind, rule.describe(options)) for rule in rules}
    described[WHERE] = (SQL, f"runs WHERE {where}")
    for name, _ in checks:
        removed = len(report.removed[name])
        report.counts.append(RuleCount(name, *described[name], removed, report.total - removed))
    return report


def _where_kept(con: duckdb.DuckDBPyConnection, where: str) -> pa.Table:
    """Run ids for which ``where`` is true, over the columns of ``runs`` and ``meta``, the
    program's metadata as ``tasks --where`` reads it. The connection is read-only (no writes) and
    external access is switched off first (no reading or writing files, no network):
    the condition is untrusted text. The switch lasts as long as the database instance
    (until every connection to this file in this process is closed)."""
    from steptrace.store._where import run_meta
    try:  # meta.KEY: the program's corpus metadata (steptrace.store._where)
        con.register("where_meta", run_meta(con, where))
    except duckdb.Error as exc:
        raise StoreError(f"cannot read the runs' metadata: {first_line(exc)}") from exc
    con.execute("SET enable_external_access = false")
    try:
        found = con.execute("SELECT run_id FROM (SELECT r.*, m.meta FROM runs r LEFT JOIN "
                            f"where_meta m USING (run_id)) AS runs WHERE (\n{where}\n)"
                            ).fetchall()
    except duckdb.Error as exc:
        raise InputError(f"invalid --where condition {where!r}: {first_line(exc)}") from exc
    return pa.table({"run_id": arrow_array([row[0] for row in found], pa.int64())})


# ---------------------------------------------------------------- per-row facts
@dataclass(frozen=True)
class ProgramFacts:
    """What the static rules need from a program's text; None where it does not parse."""

    code_length: int
    unused_args: str | None   # comma-separated parameter names never read
    imports: bool | None


def program_facts(code: str, entry: str) -> ProgramFacts:
    """Parse once: unused parameters of the entry function and import statements."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes etc.: not this module's concern
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ProgramFacts(len(code), None, None)
    imports = any(isinstance(node, (ast.Import, ast.ImportFrom))
                  or (isinstance(node, ast.Name) and node.id == "__import__")
                  for node in ast.walk(tree))
    function = _entry_function(tree, entry)
    unused = None if function is None else ",".join(_unused_parameters(function))
    return ProgramFacts(len(code), unused, imports)


def _entry_function(tree: ast.Module, entry: str) -> ast.AST | None:
    """The last top-level ``def entry`` or ``entry = lambda ...`` (the one called)."""
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            found = node
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda)
              and any(isinstance(t, ast.Name) and t.id == entry for t in node.targets)):
            found = node.value
    return found


def _unused_parameters(function: ast.AST) -> list[str]:
    """Parameters never read in the body: a name-level check (a read in a nested
    function counts, shadowing is not resolved); ``x += 1`` reads ``x``."""
    args = function.args
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                              args.vararg, args.kwarg) if a is not None]
    body = function.body if isinstance(function.body, list) else [function.body]
    read = set()
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                read.add(node.id)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                read.add(node.target.id)
    return [name for name in params if name not in read]


def printable(text: str | None) -> bool:
    """CRUXEval's test: printable once tabs and newlines are removed (non-ASCII letters
    are printable; control characters, including a carriage return, are not)."""
    return text is None or text.replace("\t", "").replace("\n", "").isprintable()


def _program_facts(con) -> pa.Table:
    rows = con.execute("SELECT program_id, code, entry FROM programs").fetchall()
    facts = [program_facts(code, entry) for _, code, entry in rows]
    return pa.table({
        "program_id": arrow_array([row[0] for row in rows], pa.int64()),
        "code_length": arrow_array([f.code_length for f in facts], pa.int64()),
        "unused_args": arrow_array([f.unused_args for f in facts], pa.string()),
        "imports": arrow_array([f.imports for f in facts], pa.bool_()),
    })


def _text_facts(con) -> pa.Table:
    rows = con.execute("SELECT r.run_id, p.code, r.input, r.output FROM runs r "
                       "JOIN programs p USING (program_id)").fetchall()
    programs: dict[str, bool] = {}  # each program's text is checked once, not once per run
    for _, code, _, _ in rows:
        if code not in programs:
            programs[code] = printable(code)
    ok = [programs[code] and printable(text) and printable(output)
          for _, code, text, output in rows]
    return pa.table({"run_id": arrow_array([row[0] for row in rows], pa.int64()),
                     "printable": arrow_array(ok, pa.bool_())})


# ---------------------------------------------------------------- writing the kept runs
def _meta_column(con) -> str:
    """``p.meta``, or NULL in a store made before schema 6 (read without upgrading it)."""
    present = con.execute("SELECT count(*) FROM information_schema.columns WHERE "
                          "table_schema = 'main' AND table_name = 'programs' AND "
                          "column_name = 'meta'").fetchall()[0][0]
    return "p.meta" if present else "CAST(NULL AS VARCHAR)"


def _metadata(text: str | None) -> dict:
    """A program's stored metadata as the record keys it came from."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def write_kept(db: str | Path, run_ids: list[int], out: str | Path) -> int:
    """Write runs as corpus JSONL (``id``, ``code``, ``input``, ``output``, ``entry`` when
    it is not ``f``, a program shape's keys: ``shape``, ``calls``, ``test``, ``stdin``,
    and the program's metadata keys, programs.meta) that ``steptrace trace`` reads back; ``output`` is the run's own return
    value (a script's: its stdout; NULL if it did not return or its repr was cut).
    Returns the count."""
    con = connect(db, read_only=True)
    try:
        rows = con.execute(
            "SELECT r.sample_id, p.code, p.entry, r.input, "
            "CASE WHEN r.output_truncated THEN NULL ELSE r.output END, r.status, r.stdout, "
            f"{shape_columns(con, 'p', 'r')}, {_meta_column(con)} "
            "FROM runs r JOIN programs p USING (program_id) "
            "WHERE r.run_id IN (SELECT unnest(?::BIGINT[])) ORDER BY r.run_id",
            [list(run_ids)]).fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()
    lines = []
    for (sample_id, code, entry, text, output, status, stdout, shape, test, chain, stdin,
         meta) in rows:
        if shape == "script":
            record = {"id": sample_id, "shape": shape, "code": code, "input": text,
                      "output": stdout if status == "ok" else None}
            lines.append(json.dumps({**record, **_metadata(meta)}) + "\n")
            continue
        record = {"id": sample_id, "code": code, "input": text, "output": output}
        if entry != "f":
            record["entry"] = entry
        for key, value in (("calls", None if chain is None else json.loads(chain)),
                           ("test", test), ("stdin", stdin)):
            if value is not None:
                record[key] = value
        lines.append(json.dumps({**record, **_metadata(meta)}) + "\n")
    with user_file(out):
        Path(out).write_text("".join(lines), encoding="utf-8")
    return len(lines)
