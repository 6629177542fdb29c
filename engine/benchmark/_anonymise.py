"""Anonymised variants of a corpus (``steptrace anonymise``), CRUXEval's identifier
ablation: every name the program binds is replaced by a neutral one, and the variant is
checked to run exactly as the original, modulo the names.

**Renaming.** The names a program binds (functions, classes, parameters, variables,
``except ... as`` and ``match`` captures, ``global``/``nonlocal`` names) are renamed by
order of first appearance in the source: the entry function is ``f``, the other
functions ``f1, f2, ...``, classes ``C1, C2, ...``, everything else ``x1, x2, ...`` (a
generated name the program already uses for something kept is skipped). Kept as they
are: builtins, dunder names (``__init__``), attribute and method names (``.append``), names
bound in a class body (they are attributes), names bound by ``import``, and names the
program reads but never binds. A keyword argument of a call to the program's own function
or method follows its parameter's new name. The source is edited in place, name by name:
everything else (layout, comments, literals) is unchanged, so a step's line numbers are
the original's. A record's ``entry`` follows its function (``Stack.push`` ->
``C1.push``); its ``test`` code's references to the program's names, and a call's
``input``/``inputs`` (code: a module-level name it reads, a keyword argument), follow
their names too; every other key is kept.

**Check** (default; ``check=False`` skips it). The original and the variant are traced
in the sandbox on every input of the record, and their results compared after the
renaming: status, output and stdout (exactly: they are the record's expected answers),
exception type and message, step counts, every step (event, line, depth, frame,
function), every state, object, attribute and global row. Any other text (a value's
repr, a message, a type or function name) is equal when it is equal as it is, or when
each of its words is the original's word or that word renamed. A variant that
differs is not written: the report gives it the status ``differs`` and names the first
difference (a program that reads its own names: ``locals()``, ``getattr(x, 'name')``,
``eval``, a keyword argument in an input). Statuses: ``equal`` (checked, written),
``unchecked`` (written without a check), ``differs`` and ``unparsed`` (the program does
not parse here, or a name cannot be placed: not written).
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from steptrace.benchmark._candidates import read_objects
from steptrace.corpus._formats import CorpusError, jobs_from_record
from steptrace.corpus._text import user_file
from steptrace.errors import InputError

EQUAL, UNCHECKED, DIFFERS, UNPARSED = "equal", "unchecked", "differs", "unparsed"
_BUILTINS = frozenset(dir(builtins))
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


class AnonymiseError(InputError):
    """A program that cannot be renamed (it does not parse, or a name cannot be placed)."""


@dataclass(frozen=True)
class Renamed:
    code: str
    entry: str
    test: str | None
    names: dict[str, str]  # original name -> new name, in order of first appearance


# ------------------------------------------------------------------ renaming
def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class _Collector(ast.NodeVisitor):
    """Where each name the program binds occurs, and which names stay."""

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}      # name -> category (function, class, name)
        self.kept: set[str] = set()
        self.sites: list[tuple] = []         # (kind, node, name)
        self.class_depth = 0
        self.methods: set[str] = set()       # names of functions defined in class bodies
        self.keywords: list[tuple] = []      # (keyword argument, the called expression)

    def bind(self, name: str, category: str) -> None:
        self.bound.setdefault(name, category)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.bind(node.id, "name")
        self.sites.append(("name", node, node.id))

    def visit_arg(self, node: ast.arg) -> None:
        self.bind(node.arg, "name")
        self.sites.append(("name", node, node.arg))
        if node.annotation is not None:
            self.visit(node.annotation)

    def _function(self, node) -> None:
        self.bind(node.name, "function")
        self.sites.append(("def", node, node.name))
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        depth, self.class_depth = self.class_depth, 0
        for statement in node.body:
            self.visit(statement)
        self.class_depth = depth

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self.visit(node.body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bind(node.name, "class")
        self.sites.append(("def", node, node.name))
        for item in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(item)
        for statement in node.body:
            # what a class body binds is an attribute of the class: its name stays
            for target in _class_body_names(statement):
                self.kept.add(target)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.methods.add(statement.name)
        self.class_depth += 1
        for statement in node.body:
            self.visit(statement)
        self.class_depth -= 1

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.bind(node.name, "name")
            self.sites.append(("after_as", node, node.name))
        self.generic_visit(node)

    def _scope(self, node) -> None:
        for name in node.names:
            self.bind(name, "name")
            self.sites.append(("all", node, name))

    visit_Global = visit_Nonlocal = _scope

    def visit_Import(self, node) -> None:
        for alias in node.names:
            self.kept.add(alias.asname or alias.name.partition(".")[0])

    visit_ImportFrom = visit_Import

    def visit_MatchAs(self, node) -> None:
        if node.name:
            self.bind(node.name, "name")
            self.sites.append(("last", node, node.name))
        self.generic_visit(node)

    def visit_MatchStar(self, node) -> None:
        if node.name:
            self.bind(node.name, "name")
            self.sites.append(("last", node, node.name))

    def visit_MatchMapping(self, node) -> None:
        self.generic_visit(node)
        if node.rest:
            self.bind(node.rest, "name")
            self.sites.append(("last", node, node.rest))

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        for keyword in node.keywords:
            if keyword.arg is not None:
                self.keywords.append((keyword, node.func))

    def keyword_sites(self) -> list[tuple]:
        """The keyword arguments of calls to the program's own functions, classes and
        methods (known once the whole program is read): they follow the parameters."""
        sites = []
        for keyword, func in self.keywords:
            own = (isinstance(func, ast.Name) and
                   self.bound.get(func.id) in ("function", "class")) or (
                   isinstance(func, ast.Attribute) and func.attr in self.methods)
            if own:
                sites.append(("keyword", keyword, keyword.arg))
        return sites


def _class_body_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    targets = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _lines(code: str) -> list[str]:
    """The source's lines with their line breaks, numbered as Python numbers them."""
    lines = _LINE.findall(code)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


def rename_code(code: str, entry: str = "f", test: str | None = None) -> Renamed:
    """The renamed program (see the module docstring); AnonymiseError if it cannot be."""
    try:
        tree = ast.parse(code)
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (SyntaxError, ValueError, RecursionError, MemoryError, tokenize.TokenError) as exc:
        raise AnonymiseError(f"does not parse: {type(exc).__name__}") from None
    collector = _Collector()
    collector.visit(tree)
    used = {t.string for t in tokens if t.type == tokenize.NAME}
    if test is not None:
        used |= {m.group() for m in re.finditer(r"[A-Za-z_]\w*", test)}
    kept = collector.kept | {n for n in collector.bound if n in _BUILTINS or _is_dunder(n)}
    renamed = [n for n in _first_appearance(collector, tokens) if n not in kept]
    taken = used - set(renamed)
    head = entry.split(".")[0]
    names: dict[str, str] = {}
    counters = {"function": 0, "class": 0, "name": 0}
    prefixes = {"function": "f", "class": "C", "name": "x"}
    for name in renamed:
        category = collector.bound[name]
        if category == "function" and name == head and "f" not in taken:
            new = "f"
        else:
            while True:
                counters[category] += 1
                new = f"{prefixes[category]}{counters[category]}"
                if new not in taken:
                    break
        taken.add(new)
        names[name] = new
    new_code = _apply(code, collector.sites + collector.keyword_sites(), tokens, names)
    new_entry = ".".join([names.get(head, head), *entry.split(".")[1:]])
    new_test = None if test is None else _rename_test(test, names)
    return Renamed(new_code, new_entry, new_test, names)


def _first_appearance(collector: _Collector, tokens) -> list[str]:
    """The bound names in the order their first token appears."""
    order: list[str] = []
    seen: set[str] = set()
    for token in tokens:
        if token.type == tokenize.NAME and token.string in collector.bound \
                and token.string not in seen:
            seen.add(token.string)
            order.append(token.string)
    return order


def _apply(code: str, sites: list[tuple], tokens, names: dict[str, str]) -> str:
    lines = _lines(code)
    edits: dict[tuple[int, int], tuple[str, str]] = {}
    name_tokens = [t for t in tokens if t.type == tokenize.NAME]
    for kind, node, name in sites:
        if name not in names:
            continue
        if kind in ("name", "keyword"):
            row = node.lineno
            col = _char_col(lines[row - 1], node.col_offset)
            places = [(row, col)]
        else:
            start = (node.lineno, _char_col(lines[node.lineno - 1], node.col_offset))
            end = (node.end_lineno, _char_col(lines[node.end_lineno - 1], node.end_col_offset))
            inside = [t for t in name_tokens if start <= t.start and t.end <= end]
            if kind == "def":
                found = [t for t in inside if t.string == name][:1]
            elif kind == "after_as":
                found = [b for a, b in zip(inside, inside[1:])
                         if a.string == "as" and b.string == name][:1]
            elif kind == "last":
                found = [t for t in inside if t.string == name][-1:]
            else:  # all: global, nonlocal
                found = [t for t in inside if t.string == name]
            if not found:
                raise AnonymiseError(f"cannot place the name {name!r} at line {node.lineno}")
            places = [t.start for t in found]
        for row, col in places:
            if lines[row - 1][col:col + len(name)] != name:
                raise AnonymiseError(f"cannot place the name {name!r} at line {row}, "
                                     f"column {col + 1}")
            edits[(row, col)] = (name, names[name])
    for (row, col), (old, new) in sorted(edits.items(), reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old):]
    return "".join(lines)


def _rename_test(test: str, names: dict[str, str]) -> str:
    """Test code with its references (Name nodes) to the program's names renamed."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise AnonymiseError("its test code does not parse") from None
    sites = [("name", node, node.id) for node in ast.walk(tree) if isinstance(node, ast.Name)]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(test).readline))
    except tokenize.TokenError:
        raise AnonymiseError("its test code does not parse") from None
    return _apply(test, sites, tokens, names)


def anonymise_record(record: dict) -> tuple[dict, Renamed]:
    """The variant record: ``code``, ``entry`` (when given or not ``f``) and ``test``
    renamed, every other key as it was."""
    code = record.get("code")
    if not isinstance(code, str):
        raise AnonymiseError("a record needs a string 'code'")
    script = record.get("shape") == "script"
    entry = "<module>" if script else (record.get("entry") or "f")
    renamed = rename_code(code, entry, record.get("test"))
    variant = dict(record)
    variant["code"] = renamed.code
    if not script and ("entry" in record or renamed.entry != entry):
        variant["entry"] = renamed.entry
    if renamed.test is not None:
        variant["test"] = renamed.test
    if record.get("shape") != "script":  # a call's input is code: f(INPUT)
        if isinstance(record.get("input"), str):
            variant["input"] = _rename_input(record["input"], renamed.names)
        if isinstance(record.get("inputs"), list):
            variant["inputs"] = [_rename_input(text, renamed.names) if isinstance(text, str)
                                 else text for text in record["inputs"]]
    return variant, renamed


def _rename_input(text: str, names: dict[str, str]) -> str:
    """A call's input (the text inside ``f(...)``) with the program's names it reads (a
    module-level list, a keyword argument) renamed; as it was if it does not parse."""
    call = f"f({text})"
    try:
        tree = ast.parse(call, mode="eval")
        tokens = list(tokenize.generate_tokens(io.StringIO(call).readline))
    except (SyntaxError, ValueError, RecursionError, MemoryError, tokenize.TokenError):
        return text
    node = tree.body
    if not isinstance(node, ast.Call):
        return text
    inner = [n for arg in (*node.args, *node.keywords) for n in ast.walk(arg)]
    # what the input binds itself (a lambda's parameter, a comprehension's variable) is its own
    own = {n.arg for n in inner if isinstance(n, ast.arg)} | {
        n.id for n in inner if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    sites = [("name", n, n.id) for n in inner if isinstance(n, ast.Name) and n.id not in own]
    sites += [("keyword", k, k.arg) for k in node.keywords if k.arg is not None]
    try:
        return _apply(call, sites, tokens, names)[2:-1]
    except AnonymiseError:
        return text


# ------------------------------------------------------------------ the check
def _renamer(names: dict[str, str]):
    """A text with every renamed name (a whole word) replaced by its new name."""
    changed = {old: new for old, new in names.items() if old != new}
    if not changed:
        return lambda text: text
    pattern = re.compile(r"(?<![\w])(" + "|".join(re.escape(n) for n in
                                                    sorted(changed, key=len, reverse=True))
                         + r")(?![\w])")
    return lambda text: text if not isinstance(text, str) else pattern.sub(
        lambda m: changed[m.group(1)], text)


_WORDS = re.compile(r"\w+|\W")


def _same(original, variant, rename) -> bool:
    """Equal, or equal word by word where each word is the same or its renaming (a repr
    may hold an attribute name that is also a renamed variable's)."""
    if original == variant or rename(original) == variant:
        return True
    if not (isinstance(original, str) and isinstance(variant, str)):
        return False
    words_a, words_b = _WORDS.findall(original), _WORDS.findall(variant)
    return len(words_a) == len(words_b) and all(
        a == b or rename(a) == b for a, b in zip(words_a, words_b))


# the output and stdout are the record's expected answers: equal as they are
_SCALARS = ("status", "output", "output_truncated", "stdout", "line_steps",
            "instruction_steps", "calls", "max_depth")
_TEXTS = ("exception_type", "exception_message", "output_type")


def _qualified(rename):
    """A function's qualified name with each dotted part renamed."""
    return lambda text: text if not isinstance(text, str) else ".".join(
        rename(part) for part in text.split("."))


def compare_results(original: dict, variant: dict, names: dict[str, str]) -> str | None:
    """The first difference between two results modulo ``names`` (None: equal)."""
    rename = _renamer(names)
    for key in _SCALARS:
        if original.get(key) != variant.get(key):
            return f"{key}: {original.get(key)!r} != {variant.get(key)!r}"
    for key in _TEXTS:
        if not _same(original.get(key), variant.get(key), rename):
            return f"{key}: {_short(original.get(key))} != {_short(variant.get(key))}"
    steps = _rows(original, "steps")
    other = _rows(variant, "steps")
    funcs_a, funcs_b = original.get("funcs") or [], variant.get("funcs") or []
    events_a, events_b = original.get("events") or [], variant.get("events") or []
    if len(steps) != len(other):
        return f"steps: {len(steps)} != {len(other)}"
    qualified = _qualified(rename)
    for index, (a, b) in enumerate(zip(steps, other)):
        a = dict(a, func=funcs_a[a["func"]], event=events_a[a["event"]])
        b = dict(b, func=funcs_b[b["func"]], event=events_b[b["event"]])
        if a.keys() != b.keys() or any(
                not (_same(a[k], b[k], qualified) if k == "func" else a[k] == b[k]) for k in a):
            return f"step {index}: {a} != {b}"
    for table in ("states", "objects", "attributes", "global_states"):
        rows_a, rows_b = _rows(original, table), _rows(variant, table)
        if len(rows_a) != len(rows_b):
            return f"{table}: {len(rows_a)} rows != {len(rows_b)}"
        for index, (a, b) in enumerate(zip(rows_a, rows_b)):
            if a.keys() != b.keys() or any(not _same(a[k], b[k], rename) for k in a):
                return f"{table} row {index}: {_short(a)} != {_short(b)}"
    return None


def _rows(result: dict, table: str) -> list[dict]:
    columns = result.get(table) or {}
    if not columns:
        return []
    keys = list(columns)
    return [dict(zip(keys, values)) for values in zip(*(columns[k] for k in keys))]


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(frozen=True)
class VariantStatus:
    id: str
    status: str              # equal, unchecked, differs, unparsed
    detail: str | None       # the first difference, or why it could not be renamed
    names: dict[str, str]    # original name -> new name


@dataclass
class AnonymiseReport:
    records_in: int = 0
    written: int = 0
    variants: list[VariantStatus] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for v in self.variants if v.status == status)

    def as_rows(self) -> list[tuple[str, int]]:
        return [("records in", self.records_in),
                *((status, self.count(status)) for status in (EQUAL, UNCHECKED, DIFFERS,
                                                             UNPARSED)),
                ("written", self.written)]

    def problem_rows(self) -> list[tuple]:
        return [(v.id, v.status, v.detail or "") for v in self.variants
                if v.status in (DIFFERS, UNPARSED)]

    def as_dict(self) -> dict:
        return {"records_in": self.records_in, "written": self.written,
                "by_status": {s: self.count(s) for s in (EQUAL, UNCHECKED, DIFFERS, UNPARSED)},
                "variants": [v.__dict__ for v in self.variants]}


def anonymise_records(records: list[dict], *, check: bool = True, workers: int | None = None,
                      timeout_s: float = 3.0) -> tuple[list[dict], AnonymiseReport]:
    """The variants to write (see the module docstring) and the report, a variant per
    record in record order (records may share an id: one per input, as ``filter --out``
    writes them)."""
    report = AnonymiseReport(records_in=len(records))
    pairs = []  # (number, id, record, variant, renamed)
    found: list[tuple[int, VariantStatus]] = []
    for number, record in enumerate(records, start=1):
        rid = str(record.get("id", number))
        try:
            variant, renamed = anonymise_record(record)
        except AnonymiseError as exc:
            found.append((number, VariantStatus(rid, UNPARSED, str(exc), {})))
            continue
        pairs.append((number, rid, record, variant, renamed))
    statuses = _check(pairs, workers, timeout_s) if check and pairs else {}
    kept = []
    for number, rid, _, variant, renamed in pairs:
        status, detail = statuses[number] if check else (UNCHECKED, None)
        found.append((number, VariantStatus(rid, status, detail, renamed.names)))
        if status in (EQUAL, UNCHECKED):
            kept.append(variant)
    report.variants = [status for _, status in sorted(found, key=lambda item: item[0])]
    report.written = len(kept)
    return kept, report


def _check(pairs, workers: int | None, timeout_s: float) -> dict[int, tuple[str, str | None]]:
    """(status, first difference) by record number: each pair traced and compared."""
    from steptrace.sandbox._limits import Limits
    from steptrace.tracing._trace import TraceOptions, run_jobs
    jobs = {}
    plan = []  # (number, names, [(original key, variant key)], error)
    for number, rid, record, variant, renamed in pairs:
        try:
            originals = jobs_from_record(record, "anonymise", rid)
            variants = jobs_from_record(variant, "anonymise", rid)
        except CorpusError as exc:
            plan.append((number, renamed.names, [], f"not a corpus record: {exc}"))
            continue
        for job in (*originals, *variants):
            jobs.setdefault(job.key, job)
        plan.append((number, renamed.names,
                     [(a.key, b.key) for a, b in zip(originals, variants)], None))
    options = TraceOptions(limits=Limits(timeout_s=timeout_s))
    if workers is not None:
        options = TraceOptions(workers=workers, limits=Limits(timeout_s=timeout_s))
    results = {}
    for chunk in run_jobs(list(jobs.values()), options):
        for traced in chunk:
            results[traced.job.key] = traced.result
    statuses = {}
    for number, names, keys, error in plan:
        if error is not None:
            statuses[number] = (DIFFERS, error)
            continue
        difference = None
        for index, (a, b) in enumerate(keys):
            found = compare_results(results[a], results[b], names)
            if found is not None:
                difference = found if len(keys) == 1 else f"input {index}: {found}"
                break
        statuses[number] = (EQUAL, None) if difference is None else (DIFFERS, difference)
    return statuses


def read_corpus_records(path: str | Path) -> list[dict]:
    return read_objects(path, "corpus", lambda r: isinstance(r.get("code"), str),
                        "a record needs a string 'code'")


def anonymise_file(path: str | Path, out: str | Path, *, check: bool = True,
                   workers: int | None = None, timeout_s: float = 3.0) -> AnonymiseReport:
    """``anonymise_records`` from a JSONL corpus to ``out`` (JSONL)."""
    kept, report = anonymise_records(read_corpus_records(path), check=check, workers=workers,
                                     timeout_s=timeout_s)
    with user_file(out):
        Path(out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept),
                             encoding="utf-8")
    return report
