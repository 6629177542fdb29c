"""Every table of a store, declared once: its columns with their DuckDB types, what they
hold, and its keys.

The store's schema is a public contract (README, "Schema"), and before this module each
table was spelled several times: a ``CREATE TABLE`` string, a tuple of column names, a
dict of Arrow types for the writer, and a table in the README, kept in step by hand. Now a
:class:`Table` is the only declaration and everything else is derived from it:

* ``Table.ddl()`` the ``CREATE TABLE`` statement (connect, tasks, predict, score,
  features run it);
* ``Table.arrow_types()`` / ``Table.arrow_schema()`` the Arrow columns writers build
  their batches with, in the table's column order (``INSERT ... SELECT *`` relies on it);
* ``Table.doc_rows()`` a (column, type, description) row per column for the schema page.

:func:`tables` gives every declaration in pipeline order (the order the schema page
lists them in). The Arrow type of a column follows from its DuckDB type
(:data:`ARROW_TYPES`), so the two can never disagree. This module imports only pyarrow
and the standard library: the store, the experiments upgrade and the docs generator all
read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# The Arrow type a writer gives a column of each DuckDB type: DuckDB reads each back as
# exactly that type (TIMESTAMP is microseconds, without a time zone: UTC by convention).
ARROW_TYPES: dict[str, pa.DataType] = {
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "VARCHAR": pa.string(),
    "TIMESTAMP": pa.timestamp("us"),
    "BLOB": pa.binary(),
}


@dataclass(frozen=True)
class Column:
    """One column: its name, DuckDB type, whether it may be NULL, whether its values are
    unique, and what it holds (one line of the schema page)."""

    name: str
    type: str
    doc: str = ""
    nullable: bool = True
    unique: bool = False

    def __post_init__(self) -> None:
        if self.type not in ARROW_TYPES:
            raise ValueError(f"column {self.name}: unknown type {self.type!r}")

    @property
    def arrow(self) -> pa.DataType:
        return ARROW_TYPES[self.type]


@dataclass(frozen=True)
class Table:
    """One table of the store.

    ``made_by`` is the command that writes its rows (``connect``: the store itself);
    ``primary_key`` names its key columns. A
    one-column key is written on its column, as in the DDL the store has always had; a
    longer one as a ``PRIMARY KEY (...)`` clause. ``doc`` says what one row is."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    made_by: str = "connect"

    def __post_init__(self) -> None:
        names = self.column_names
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: a column is declared twice")
        missing = [key for key in self.primary_key if key not in names]
        if missing:
            raise ValueError(f"table {self.name}: key column {missing[0]} is not declared")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"table {self.name} has no column {name}")

    def ddl(self, replace: bool = False) -> str:
        """``CREATE TABLE IF NOT EXISTS`` (or ``CREATE OR REPLACE TABLE``) of the table."""
        inline_key = self.primary_key[0] if len(self.primary_key) == 1 else None
        width = max(len(column.name) for column in self.columns)
        lines = []
        for column in self.columns:
            text = f"{column.name:<{width}}  {column.type}"
            if column.name == inline_key:
                text += " PRIMARY KEY"  # implies NOT NULL
            elif not column.nullable:
                text += " NOT NULL"
            if column.unique:
                text += " UNIQUE"
            lines.append(text)
        if len(self.primary_key) > 1:
            lines.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        create = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
        body = ",\n".join(f"    {line}" for line in lines)
        return f"{create} {self.name} (\n{body}\n);\n"

    def arrow_types(self) -> dict[str, pa.DataType]:
        """Column name → Arrow type, in column order."""
        return {column.name: column.arrow for column in self.columns}

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(column.name, column.arrow, nullable=column.nullable)
                          for column in self.columns])

    def doc_rows(self) -> list[tuple[str, str, str]]:
        """(column, DuckDB type, description) per column, for the schema page; the key
        columns say so."""
        rows = []
        for column in self.columns:
            notes = []
            if column.name in self.primary_key:
                notes.append("primary key" if len(self.primary_key) == 1
                             else f"primary key ({', '.join(self.primary_key)})")
            if column.unique:
                notes.append("unique")
            if column.doc:
                notes.append(column.doc)
            rows.append((column.name, column.type, "; ".join(notes)))
        return rows


def _c(name: str, type_: str, doc: str = "", *, null: bool = True,
       unique: bool = False) -> Column:
    return Column(name, type_, doc, nullable=null, unique=unique)


# ====================================================================== made by connect
META = Table(
    "meta", "one row per setting of the store: `schema_version` (the store's schema version)",
    (_c("key", "VARCHAR", "the setting's name", null=False),
     _c("value", "VARCHAR", "its value")),
    primary_key=("key",))

PROGRAMS = Table(
    "programs", "one row per program of a corpus",
    (_c("program_id", "BIGINT", null=False),
     _c("source", "VARCHAR", "corpus file (or directory) name", null=False),
     _c("sample_id", "VARCHAR", "the record's `id` (CRUXEval `sample_N`), or the line number "
        "/ file stem", null=False),
     _c("code", "VARCHAR", "program text", null=False),
     _c("entry", "VARCHAR", "what is called: a function name, or a dotted path (`Stack.push`, "
        "`TestCalc.test_add`); `<module>` for a script", null=False),
     _c("code_sha256", "VARCHAR", "SHA-256 of `code`", null=False),
     _c("program_key", "VARCHAR", "unique identity (source, sample id, entry, code hash; "
        "shape and test code hash when not `call` and none)", null=False, unique=True),
     _c("shape", "VARCHAR", "`call` (the entry is called on the input) or `script` (the "
        "module is the program, the input its stdin); added in schema 4", null=False),
     _c("test", "VARCHAR", "test code run against the program (never traced); NULL if none; "
        "added in schema 4"),
     _c("meta", "VARCHAR", "the corpus record's metadata: its keys the format does not use "
        "(`release_date`, `source`, ...) as JSON text of an object, keys sorted, at most "
        "65,536 characters; NULL if none; `--where` reads it as `meta.KEY`; added in schema 6"),
     _c("environment", "VARCHAR", "what the program starts with: the record's `files` "
        "(path → text, written into `/work`), `argv` and `env`, JSON text of an object, "
        "keys sorted (docs/guides/corpus.md, \"Files, arguments and environment\"); NULL if "
        "none; part of `program_key`; added in schema 7")),
    primary_key=("program_id",), made_by="trace")

RUNS = Table(
    "runs", "one row per (program, input)",
    (_c("run_id", "BIGINT", null=False),
     _c("program_id", "BIGINT", "→ programs", null=False),
     _c("sample_id", "VARCHAR", "as in programs", null=False),
     _c("input_index", "INTEGER", "position in the record's `inputs` (0 for `input`)",
        null=False),
     _c("input", "VARCHAR", "the argument text (a script: its stdin text)", null=False),
     _c("status", "VARCHAR", "see Statuses", null=False),
     _c("output", "VARCHAR", "`repr` of the return value (a method chain: of the last "
        "call's; cut at 100,000 characters, `output_truncated`); NULL unless `ok`, and for "
        "scripts (their output is `stdout`)"),
     _c("output_type", "VARCHAR", "type name of the return value; NULL unless `ok`"),
     _c("output_truncated", "BOOLEAN", "whether `output` was cut"),
     _c("exception_type", "VARCHAR", "the exception's type name, for `exception` and "
        "`missing_module` (cut at 1,000 characters)"),
     _c("exception_message", "VARCHAR", "its message, for `exception` (cut at 10,000 "
        "characters); the message of every other non-`ok` status (`missing_module`: "
        "`No module named 'NAME'`)"),
     _c("expected", "VARCHAR", "expected output text, NULL if none was given"),
     _c("output_matches", "BOOLEAN", "`output == expected` evaluated in the guest (a script: "
        "`stdout` compared with `expected` line by line, trailing whitespace and trailing "
        "empty lines ignored); NULL when no expected output; false for any run that did "
        "not return"),
     _c("note", "VARCHAR", "e.g. \"expected output does not evaluate: …\"; \"the guest's "
        "result was rejected: …\" (`crashed`); \"cut to the host's caps: …\""),
     _c("stdout", "VARCHAR", "what the call printed (bounded)"),
     _c("line_steps", "BIGINT", "`line` events, see Steps"),
     _c("instruction_steps", "BIGINT", "bytecode instructions executed in the program's "
        "code, see Steps"),
     _c("calls", "BIGINT", "activations, see Steps"),
     _c("max_depth", "INTEGER", "deepest call depth (-1 when nothing was traced)"),
     _c("n_steps", "BIGINT", "rows of this run in `steps`"),
     _c("duration_us", "BIGINT", "host wall time of the job: instantiate, run, collect"),
     _c("call_us", "BIGINT", "guest time of the traced call alone"),
     _c("isolation", "VARCHAR", "`job` or `batch`"),
     _c("run_key", "VARCHAR", "unique identity of the job; resume skips stored keys",
        null=False, unique=True),
     _c("traced_at", "TIMESTAMP", "UTC"),
     _c("chain", "VARCHAR", "the method chain (the record's `calls`) called on what the "
        "entry returned, JSON `[{\"method\": ..., \"input\": ...}, ...]`; NULL if none; "
        "added in schema 4"),
     _c("stdin", "VARCHAR", "stdin text of a call-shaped run; NULL if none (a script's "
        "stdin is `input`); added in schema 4"),
     _c("guest", "VARCHAR", "the key of the guest build that traced the run: SHA-256 "
        "(24 hex digits) over the guest's sources, componentize-py's and wasmtime's "
        "versions, the machine and the package lock of a guest with packages "
        "(`steptrace build --with`); NULL for runs stored before schema 5. A native run's: "
        "SHA-256 over the guest's sources, the fork server, the interpreter's version and "
        "path and the lock"),
     _c("settrace_line_steps", "BIGINT", "line events of the run's settrace view (see The "
        "settrace view): `line_steps` plus its rows in `settrace_lines`; NULL when the view "
        "is not recorded (more than `--max-steps` events of its own, a trace that was "
        "dropped, runs stored before schema 7)"),
     _c("backend", "VARCHAR", "the sandbox that ran it: `wasi` (the WebAssembly guest) or "
        "`native` (the same tracer in a jailed native CPython, for packages with native "
        "code: docs/guides/sandbox.md says what each guarantees); `wasi` for runs stored "
        "before schema 7"),
     _c("python", "VARCHAR", "the version of the CPython that ran it (`3.14.0` for the WASI "
        "guest, the native interpreter's, e.g. `3.13.0`); NULL for runs stored before "
        "schema 7")),
    primary_key=("run_id",), made_by="trace")

STEPS = Table(
    "steps", "one row per step of a run (see Steps)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("step", "INTEGER", "counts from 0 within a run", null=False),
     _c("event", "VARCHAR", "`call`, `line`, `return`, `yield`, `resume`, `throw`, `raise` "
        "or `unwind`", null=False),
     _c("func", "VARCHAR", "the code object's qualified name (`f`, `f.<locals>.g`, "
        "`Stack.push`, `f.<locals>.<lambda>`; cut at 1,000 characters)", null=False),
     _c("line", "INTEGER", "1-based line in the program text", null=False),
     _c("depth", "INTEGER", "call depth (0 = the entry function, each call of a method "
        "chain, or a script's module frame)", null=False),
     _c("frame", "INTEGER", "one activation of a function, unique within the run",
        null=False)),
    made_by="trace")

STATES = Table(
    "states", "one row per local whose value changed at a step (see Variable states)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("step", "INTEGER", "the step it was recorded at", null=False),
     _c("var", "VARCHAR", "the name (cut at 1,000 characters); `<return>`, `<yield>`, "
        "`<exception>` are values of the step's event", null=False),
     _c("value", "VARCHAR", "its `repr`, cut to `--max-repr` characters; NULL when the name "
        "became unbound"),
     _c("type", "VARCHAR", "its type name (cut at 1,000 characters); NULL when unbound"),
     _c("truncated", "BOOLEAN", "whether `value` was cut", null=False),
     _c("object_id", "INTEGER", "→ objects: the object the name is bound to, when it is a "
        "tracked object (a program instance or a mutable built-in container); NULL "
        "otherwise and in runs traced before schema 4")),
    made_by="trace")

OBJECTS = Table(
    "objects", "one row per tracked object of a run (see Objects)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("object_id", "INTEGER", "1, 2, ... in the order the tracer first saw the objects "
        "(never a memory address)", null=False),
     _c("type", "VARCHAR", "its type name (cut at 1,000 characters)", null=False),
     _c("step", "INTEGER", "the step it was first seen at", null=False)),
    primary_key=("run_id", "object_id"), made_by="trace")

ATTRIBUTES = Table(
    "attributes", "one row per attribute of a program instance whose value changed since "
    "the object was last seen (all of them at its first sight; see Objects)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("step", "INTEGER", "the step the change was seen at", null=False),
     _c("object_id", "INTEGER", "→ objects", null=False),
     _c("attr", "VARCHAR", "the attribute's name (an instance `__dict__` key or a slot)",
        null=False),
     _c("value", "VARCHAR", "its rendering, cut to `--max-repr` characters; NULL when the "
        "attribute was deleted"),
     _c("type", "VARCHAR", "its type name; NULL when deleted"),
     _c("truncated", "BOOLEAN", "whether `value` was cut", null=False),
     _c("ref_id", "INTEGER", "→ objects: the value's object id when it is a tracked object")),
    made_by="trace")

GLOBAL_STATES = Table(
    "global_states", "one row per change of a program global its code uses (see Objects)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("step", "INTEGER", "the step it was recorded at (the first step: the values "
        "the call started with)", null=False),
     _c("name", "VARCHAR", "the global's name", null=False),
     _c("value", "VARCHAR", "its rendering, cut to `--max-repr` characters; NULL when the "
        "name became unbound"),
     _c("type", "VARCHAR", "its type name; NULL when unbound"),
     _c("truncated", "BOOLEAN", "whether `value` was cut", null=False),
     _c("object_id", "INTEGER", "→ objects, when the value is a tracked object")),
    made_by="trace")

SETTRACE_LINES = Table(
    "settrace_lines", "one row per line event of a run's settrace view that is not a `line` "
    "step: a backward jump that stays on its line, which `sys.settrace` reports and "
    "sys.monitoring does not (see The settrace view; added in schema 7)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("step", "INTEGER", "the step it follows: the view lists it after that step and "
        "before the next (rows after the same step in their order)", null=False),
     _c("func", "VARCHAR", "the function, as in `steps`", null=False),
     _c("line", "INTEGER", "its line", null=False),
     _c("depth", "INTEGER", "its call depth, as in `steps`", null=False),
     _c("frame", "INTEGER", "its activation, as in `steps`", null=False)),
    made_by="trace")

FILES = Table(
    "files", "one row per file, directory or symlink a run left in its working directory "
    "(`/work`) or `/tmp` when it ended (see Files; added in schema 7): the record's own "
    "files only when the run changed them; none for a run stopped by `file_limit`",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("path", "VARCHAR", "where the program saw it: `/work/...` or `/tmp/...`", null=False),
     _c("kind", "VARCHAR", "`file`, `dir` or `symlink` (never followed)", null=False),
     _c("size", "BIGINT", "bytes: a file's length, a symlink's target's; 0 for a directory",
        null=False),
     _c("sha256", "VARCHAR", "SHA-256 (hex) of a file's whole content; NULL otherwise"),
     _c("content", "BLOB", "a file's first 65,536 bytes (1 MiB for all of a run's files, in "
        "path order), a symlink's target; NULL for a directory"),
     _c("truncated", "BOOLEAN", "whether `content` is shorter than the file", null=False),
     _c("utf8", "BOOLEAN", "whether `content` is UTF-8 text (read it with "
        "`decode(content)`; a cut one may end inside a character); NULL for a directory")),
    primary_key=("run_id", "path"), made_by="trace")

GUESTS = Table(
    "guests", "one row per guest build that traced runs of the store (added in schema 5)",
    (_c("guest", "VARCHAR", "its key, as in `runs.guest`", null=False),
     _c("lock", "VARCHAR", "the package lock it bundles (the text `steptrace build --lock` "
        "writes: docs/guides/packages.md); NULL for the standard guest"),
     _c("first_used", "TIMESTAMP", "UTC, when a trace first used it")),
    primary_key=("guest",), made_by="trace")

ANALYSES = Table(
    "analyses", "one row per analysed run (see Analysis runs)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("status", "VARCHAR", "status of the analysis run", null=False),
     _c("agrees", "BOOLEAN", "whether it behaved as the traced run"),
     _c("disagreement", "VARCHAR", "if not, how"),
     _c("int_ops", "BIGINT", "binary int operations"),
     _c("int_ops_large", "BIGINT", "those with both operands' absolute value > 3"),
     _c("seq_ops", "BIGINT", "str/list/tuple/bytes operations"),
     _c("seq_ops_long", "BIGINT", "those with both operands' length > 3"),
     _c("float_ops", "BIGINT", "operations with a float operand or result"),
     _c("true_divisions", "BIGINT", "`/` operations"),
     _c("evaluations", "BIGINT", "condition evaluations (rows in `branches`, up to "
        "1,000,000)"),
     _c("deterministic", "BOOLEAN", "NULL until checked with `--determinism`"),
     _c("determinism_note", "VARCHAR", "the first difference of a nondeterministic run; "
        "NULL until checked with `--determinism`"),
     _c("note", "VARCHAR", "e.g. the analysis run's error"),
     _c("analysed_at", "TIMESTAMP", "UTC")),
    primary_key=("run_id",), made_by="analyse")

BRANCHES = Table(
    "branches", "one row per evaluation of a condition in the analysis run",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("line", "INTEGER", "the line the condition starts on", null=False),
     _c("col", "INTEGER", "its 0-based UTF-8 column", null=False),
     _c("kind", "VARCHAR", "`if`, `elif`, `while`, `ifexp` or `filter`", null=False),
     _c("evaluation", "INTEGER", "the condition's evaluation, counted from 1", null=False),
     _c("taken", "BOOLEAN", "its truth value", null=False)),
    made_by="analyse")

# ====================================================================== made by commands
TASKS = Table(
    "tasks", "one row per task (see Tasks)",
    (_c("task_id", "VARCHAR", "SHA-256 (hex) of run key, kind and question", null=False),
     _c("kind", "VARCHAR", "the task kind", null=False),
     _c("run_id", "BIGINT", "→ runs", null=False),
     _c("sample_id", "VARCHAR", "as in runs", null=False),
     _c("line", "INTEGER", "the line asked about (`branch`: the condition's); NULL for "
        "whole-run kinds"),
     _c("var", "VARCHAR", "`state`, `state_any`"),
     _c("occurrence", "INTEGER", "k (`state`, `next_line`, `branch`)"),
     _c("question", "VARCHAR", "JSON object of the other question fields: `func` (state and "
        "next-line kinds), `col`, `condition`, `condition_kind` (`branch`), `input` "
        "(`output`), `output` (`input`); NULL otherwise"),
     _c("answer", "VARCHAR", "the canonical answer (see Kinds)", null=False),
     _c("answer_type", "VARCHAR", "`repr`, `unbound`, `input`, `set` (the `*_any` lists), "
        "`line`, `bool`, `int`, `trace`, `exception`, `error`, `type` (`type`, "
        "`output_type`), `stdout`", null=False),
     _c("value_type", "VARCHAR", "type name of the return value (`output`, `output_type`) "
        "or of a bound `state` (`type`) value; NULL otherwise"),
     _c("line_steps", "BIGINT", "the run's line steps"),
     _c("loop_nesting", "INTEGER", "`for`/`while` bodies and comprehensions around `line`, "
        "from the `ast` (a loop's header is outside its body); 0 without a line"),
     _c("distinct_lines", "INTEGER", "distinct lines with a line step in the run"),
     _c("branch_count", "BIGINT", "the run's condition evaluations (rows in `branches`); "
        "NULL if none or not analysed"),
     _c("prompt_style", "VARCHAR", "`direct`, `cot` or `cruxeval`", null=False),
     _c("prompt", "VARCHAR", "the rendered prompt", null=False),
     _c("seed", "BIGINT", "`--seed`", null=False),
     _c("created_at", "TIMESTAMP", "UTC, first generation", null=False)),
    primary_key=("task_id",), made_by="tasks")

EXPERIMENTS = Table(
    "experiments", "one row per (model, label): the settings a model was asked with",
    (_c("model", "VARCHAR", "as in predictions", null=False),
     _c("label", "VARCHAR", "as in predictions", null=False),
     _c("prompt_style", "VARCHAR", "the tasks' style (`direct`, `cot`, `cruxeval`; styles "
        "joined by `+`); NULL only for `legacy`"),
     _c("system_prompt", "VARCHAR", "`--system-prompt`, NULL if none"),
     _c("temperature", "DOUBLE", "as sent (NULL: `legacy`)"),
     _c("top_p", "DOUBLE", "as sent; NULL when not sent"),
     _c("max_tokens", "INTEGER", "as sent"),
     _c("created_at", "TIMESTAMP", "UTC, the first run", null=False)),
    primary_key=("model", "label"), made_by="predict")

PREDICTIONS = Table(
    "predictions", "one row per (task, model, label, sample)",
    (_c("task_id", "VARCHAR", "→ the tasks file / `tasks` table", null=False),
     _c("model", "VARCHAR", "`--model`", null=False),
     _c("label", "VARCHAR", "the experiment, → `experiments` (`legacy`: stored before "
        "schema 3)", null=False),
     _c("sample_index", "INTEGER", "0 .. samples−1", null=False),
     _c("kind", "VARCHAR", "task kind", null=False),
     _c("prompt_style", "VARCHAR", "the task's prompt style (NULL for `legacy` rows)"),
     _c("prompt_sha256", "VARCHAR", "SHA-256 of the task's prompt as sent: stands for the "
        "template (NULL for `legacy` rows)"),
     _c("raw_text", "VARCHAR", "the response text (NULL after an error)"),
     _c("answer", "VARCHAR", "parsed answer, NULL if none was found"),
     _c("parsed", "BOOLEAN", "whether an answer was found", null=False),
     _c("prompt_tokens", "BIGINT", "as the server reports them"),
     _c("completion_tokens", "BIGINT", "as the server reports them"),
     _c("latency_ms", "DOUBLE", "including the client's retries"),
     _c("error", "VARCHAR", "`Type: message` of a request that failed after its retries"),
     _c("finish_reason", "VARCHAR", "e.g. `stop`, `length`"),
     _c("created_at", "TIMESTAMP", "UTC")),
    primary_key=("task_id", "model", "label", "sample_index"), made_by="predict")

SCORES = Table(
    "scores", "one verdict per (task, model, label, sample)",
    (_c("task_id", "VARCHAR", "as in predictions", null=False),
     _c("model", "VARCHAR", "as in predictions", null=False),
     _c("label", "VARCHAR", "as in predictions", null=False),
     _c("sample_index", "INTEGER", "as in predictions", null=False),
     _c("kind", "VARCHAR", "task kind", null=False),
     _c("parsed", "BOOLEAN", "whether the prediction had an answer", null=False),
     _c("correct", "BOOLEAN", "the verdict (an unparseable answer is wrong)", null=False),
     _c("distance", "DOUBLE", "normalised edit distance to the true trace (`trace` tasks)"),
     _c("note", "VARCHAR", "`unparseable`, or what a wrong input returned or raised"),
     _c("scored_at", "TIMESTAMP", "UTC", null=False),
     _c("type_correct", "BOOLEAN", "`error` tasks: whether the exception type alone is "
        "right (EXE); NULL for other kinds; added in schema 6"),
     _c("message_correct", "BOOLEAN", "`error` tasks: whether the message alone is right "
        "(EXE); NULL for other kinds; added in schema 6")),
    primary_key=("task_id", "model", "label", "sample_index"), made_by="score")

CHECKS = Table(
    "checks", "one row per sandboxed check judged (`score`'s input checks, `score-cruxeval "
    "--db`'s checks; added in schema 6): its verdict, reused while the same check would "
    "run again",
    (_c("check_key", "VARCHAR", "SHA-256 (hex) of the check's guest request as JSON (the "
        "exact program text, entry, input, expected output and mode), what asked it "
        "(`source`), the guest build's key and every sandbox limit", null=False),
     _c("source", "VARCHAR", "`input` (`score`'s input checks) or `cruxeval` "
        "(`score-cruxeval`)", null=False),
     _c("status", "VARCHAR", "`ok` or why the check failed: the guest status (for "
        "`cruxeval`, the exception type of a program that failed at its top level)",
        null=False),
     _c("passed", "BOOLEAN", "the verdict", null=False),
     _c("note", "VARCHAR", "what a failed input check returned or raised"),
     _c("guest", "VARCHAR", "the key of the guest build that ran it", null=False),
     _c("timeout_s", "DOUBLE", "its time limit (seconds)", null=False),
     _c("memory_mb", "INTEGER", "its memory limit (MiB)", null=False),
     _c("checked_at", "TIMESTAMP", "UTC", null=False)),
    primary_key=("check_key",), made_by="score")

RUN_FEATURES = Table(
    "run_features", "one row per run: trace features (replaced by each `steptrace features`)",
    (_c("run_id", "BIGINT", "→ runs", null=False),
     _c("transitions", "BIGINT", "line → next-line transitions within frames"),
     _c("distinct_transitions", "INTEGER", "distinct (line, next line) pairs among them"),
     _c("loop_depth", "INTEGER", "the deepest loop nesting observed (backward jumps)"),
     _c("longest_cycle", "INTEGER", "the longest period of a line cycle repeated "
        "immediately; 0 if none"),
     _c("distinct_lines", "INTEGER", "distinct lines with a `line` step"),
     _c("statement_lines", "INTEGER", "the program's statement lines inside functions; "
        "NULL if the host cannot parse it"),
     _c("coverage", "DOUBLE", "share of the statement lines that ran; NULL without "
        "statement lines"),
     _c("conditions", "INTEGER", "distinct conditions evaluated; NULL if not analysed"),
     _c("branch_entropy", "DOUBLE", "mean Shannon entropy (bits) of their outcomes; NULL "
        "if not analysed")),
    primary_key=("run_id",), made_by="features")

# The tables every store opened for writing has (connect creates what is missing).
CONNECT_TABLES = (META, PROGRAMS, RUNS, STEPS, STATES, OBJECTS, ATTRIBUTES, GLOBAL_STATES,
                  SETTRACE_LINES, FILES, GUESTS, ANALYSES, BRANCHES)
# Pipeline order: what the schema page lists, in this order.
_ALL = CONNECT_TABLES + (TASKS, EXPERIMENTS, PREDICTIONS, SCORES, CHECKS, RUN_FEATURES)


def tables() -> tuple[Table, ...]:
    """Every table of a store, in pipeline order: meta, then what ``trace`` writes
    (programs, runs, steps, states, objects, attributes, global_states, settrace_lines,
    files, guests), ``analyse`` (analyses, branches), ``tasks``,
    ``predict`` (experiments, predictions), ``score`` (scores, checks) and ``features``
    (run_features)."""
    return _ALL


def table(name: str) -> Table:
    """The declaration of the table called ``name``."""
    for declared in _ALL:
        if declared.name == name:
            return declared
    raise KeyError(f"no table {name} in a steptrace store")
