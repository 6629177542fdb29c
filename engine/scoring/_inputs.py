"""Input predictions checked in the sandbox: ``f(predicted input)`` runs untraced, in a
fresh instance per distinct candidate, and is right when it returns a value equal to the
task's output (any input that gives the output is right).

A predicted input must be *safe arguments* (:func:`safe_arguments`): literals, and
expressions over them that can only give values of the builtin types or the program's
own: the tasks' inputs are such (CRUXEval's include ``dict(e=1)``, ``range(100, 120)``,
``lambda x: x < 2``, ``'abc'.split('-')`` and a name of the program, ``xs[:]``). Anything
else is wrong without being run: an input that is code could build an object whose
``__eq__`` answers True to the expected output (``type('F', (), {'__eq__': ...})()``,
``__import__('unittest.mock').mock.ANY``), and be judged right without the program ever
computing that output. The program's names include the modules it imports, and some of
those make classes (``abc.ABCMeta(...)``, ``types.new_class``, ``dataclasses.make_dataclass``):
so the guest checks the values themselves too (request ``answer``: no class made by the
answer, in the arguments or in what the call returns; tracer/answer_values.py), and an
answer it refuses is wrong with the note ``unsafe_input: ...``."""

from __future__ import annotations

import ast
import functools
import json
import os

from steptrace.corpus._environment import request_fields
from steptrace.scoring._verdicts import Progress, ScoreOptions

UNSAFE_INPUT = "unsafe_input"  # the note (and the reward service's status) of such an input

# The builtins an input may name: constructors of builtin values and functions over them.
# Not type, object, getattr, vars, globals, eval, exec, compile, __import__, open, ...:
# whatever could make a class, reach a module or read attributes by computed names.
SAFE_BUILTINS = frozenset({
    "None", "True", "False", "dict", "list", "tuple", "set", "frozenset", "range", "str",
    "int", "float", "bool", "bytes", "bytearray", "complex", "len", "sorted", "reversed",
    "enumerate", "zip", "map", "filter", "min", "max", "sum", "abs", "round", "chr", "ord",
    "any", "all", "repr", "hex", "oct", "bin", "divmod", "pow", "iter", "next", "slice",
    "isinstance"})
# Attribute prefixes an input may not use: private and special names (``__class__``,
# ``__globals__``, ...) and frames, code objects and tracebacks, which lead to globals.
UNSAFE_ATTRIBUTES = ("_", "f_", "gi_", "cr_", "ag_", "tb_", "co_")
# The expression nodes an input may hold (with the rules of _safe for names, attributes,
# lambdas and comprehensions); anything else (a walrus, await, yield) is unsafe.
_PLAIN = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.JoinedStr,
          ast.FormattedValue, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp,
          ast.Call, ast.Subscript, ast.Slice, ast.Starred, ast.keyword, ast.expr_context,
          ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def safe_arguments(text: str, program_names: frozenset[str] = frozenset()) -> bool:
    """Whether ``text`` (the text inside a call's parentheses) is safe arguments: made of
    literals, the names in SAFE_BUILTINS and ``program_names`` (the program's top-level
    names, :func:`program_names`), lambdas and comprehensions over such expressions,
    operators, calls, subscripts, and attributes that are not UNSAFE_ATTRIBUTES."""
    try:
        call = ast.parse(f"_({text.strip()}\n)", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    if not isinstance(call, ast.Call) or not (isinstance(call.func, ast.Name)
                                              and call.func.id == "_"):
        return False  # e.g. "1)(2": the text closed the call and began another expression
    allowed = SAFE_BUILTINS | program_names
    try:
        return all(_safe(node, allowed) for node in (*call.args, *call.keywords))
    except RecursionError:
        return False


def _safe(node: ast.AST, names: frozenset[str]) -> bool:
    if isinstance(node, ast.Name):
        return isinstance(node.ctx, ast.Load) and node.id in names
    if isinstance(node, ast.Attribute):
        return (not node.attr.startswith(UNSAFE_ATTRIBUTES) and isinstance(node.ctx, ast.Load)
                and _safe(node.value, names))
    if isinstance(node, ast.Lambda):
        params = node.args
        bound = [a.arg for a in (*params.posonlyargs, *params.args, *params.kwonlyargs)]
        bound += [a.arg for a in (params.vararg, params.kwarg) if a is not None]
        defaults = [d for d in (*params.defaults, *params.kw_defaults) if d is not None]
        return (all(_safe(d, names) for d in defaults)
                and _safe(node.body, names | frozenset(bound)))
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        scope = names
        for generator in node.generators:
            targets = [n for n in ast.walk(generator.target)]
            if not all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.expr_context))
                       for n in targets) or generator.is_async:
                return False
            if not _safe(generator.iter, scope):
                return False
            scope = scope | frozenset(n.id for n in targets if isinstance(n, ast.Name))
            if not all(_safe(condition, scope) for condition in generator.ifs):
                return False
        parts = (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)
        return all(_safe(part, scope) for part in parts)
    if isinstance(node, _PLAIN):
        return all(_safe(child, names) for child in ast.iter_child_nodes(node))
    return False


@functools.lru_cache(maxsize=4096)
def program_names(code: str) -> frozenset[str]:
    """The names a program binds at its top level (functions, classes, imports,
    assignments, loop and ``with`` targets); none if the host cannot parse it."""
    try:
        module = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return frozenset()
    found: set[str] = set()
    for statement in module.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(statement.name)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            found.update((a.asname or a.name).split(".")[0] for a in statement.names)
        else:
            found.update(n.id for n in ast.walk(statement)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return frozenset(n for n in found if not n.startswith("__"))


def is_refused_answer(result: dict) -> bool:
    """Whether the guest refused the answer's values (tracer/answer_values.py)."""
    message = result.get("exception_message")
    return (result.get("status") == "invalid" and isinstance(message, str)
            and message.startswith(UNSAFE_INPUT + ": "))


def unsafe_input_verdict() -> tuple[bool, str]:
    """The verdict of an input that is not safe arguments (never run)."""
    return False, (f"{UNSAFE_INPUT}: the input is not made of literals, safe builtins and "
                   f"the program's names")


def input_requests(tasks: dict[str, dict], pending: list[tuple[dict, str]],
                   programs: dict[int, tuple]) -> tuple[list[dict], list[int], list]:
    """Distinct guest requests (mode ``run``) for the (task, predicted input) pairs, for
    each pair the index of its request (None: the input is not safe arguments, and is
    not run), and for each request the package lock of the guest it runs in (the one that
    traced the task's run; None: the standard guest)."""
    index: dict[tuple, int] = {}
    requests: list[dict] = []
    locks: list = []
    order: list[int | None] = []
    for task, predicted in pending:
        code, entry, lock, environment = programs[task["run_id"]]
        if not safe_arguments(predicted, program_names(code)):
            order.append(None)
            continue
        output = json.loads(task["question"])["output"]
        key = (code, entry, predicted, output, lock.digest if lock is not None else None,
               environment)
        if key not in index:
            index[key] = len(requests)
            # "answer": the guest refuses values of classes the answer made
            # (tracer/answer_values.py); the program's files, argv and env as it was traced
            requests.append({"code": code, "entry": entry, "input": predicted,
                             "expected": output, "mode": "run", "answer": True,
                             **request_fields(environment)})
            locks.append(lock)
        order.append(index[key])
    return requests, order, locks


def run_input_checks(requests: list[dict], options: ScoreOptions,
                     progress: Progress | None = None, chunk_size: int = 8,
                     locks: list | None = None) -> list[dict]:
    """Each request in a fresh sandbox instance (of the guest with ``locks[i]``'s packages,
    or the standard guest); the guest's results in order."""
    from steptrace.sandbox._runner import run_chunks  # the sandbox loads only when inputs are checked
    from steptrace.sandbox._packages import by_lock
    results: list[dict] = [{} for _ in requests]
    locks = locks or [None] * len(requests)
    workers = options.workers if options.workers is not None else (os.cpu_count() or 1)
    done = 0
    if progress and requests:
        progress(0, len(requests))
    for lock, positions in by_lock(range(len(requests)), locks.__getitem__):
        chunks = [positions[i:i + chunk_size] for i in range(0, len(positions), chunk_size)]
        for index, outcomes in run_chunks([[requests[p] for p in chunk] for chunk in chunks],
                                          workers, options.limits, isolation="job",
                                          packages=lock):
            for position, outcome in zip(chunks[index], outcomes):
                results[position] = outcome.result
            done += len(outcomes)
            if progress:
                progress(done, len(requests))
    return results


def input_verdict(result: dict) -> tuple[bool, str | None]:
    """(right?, note) of an input check's guest result. An answer the guest refused for
    building a value of its own making (status ``invalid``, message ``unsafe_input: ...``)
    gets that message as its note, as an input refused here does."""
    status = result.get("status")
    if is_refused_answer(result):
        return False, str(result["exception_message"])[:300]
    if status == "ok":
        matches = result.get("output_matches") is True
        return matches, None if matches else f"returned {str(result.get('output'))[:200]}"
    detail = result.get("exception_type") or result.get("exception_message") or ""
    return False, f"{status}: {detail}"[:300]
