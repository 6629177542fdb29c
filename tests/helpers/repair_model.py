"""A stand-in model for ``repair`` over excerpts: the real HTTP test server
(openai_stub.StubServer) answering each repair prompt with a revision made from the
round's feedback and the package's own source.

What it does, per prompt (the example's id is its ``[[ID]]``):

* reads the names the feedback lists as missing ("Names the program uses but never
  defines or imports: ...", "Names the program imports from them: `n` from `m`") and the
  modules the guest lacks;
* drops the program's imports from those modules and puts in, above the program, the
  definition of each missing name as its project has it (a ``def``, ``class`` or
  assignment statement, read from the installed sources with ``ast``, never imported),
  found through the excerpt's ``project_names``, then the modules it already took
  definitions from (each marked ``# from MODULE``), following imports within the
  project; a name a module imports from the standard library gets that import; a name
  from another distribution cannot be put in (the example then keeps failing);
* writes a test calling the function with literals chosen by its annotations (the
  bench's ``calls_for``: round k takes the k-th candidate) and asserting that a second
  call returns an equal value (the type, after a round whose assertion failed).

Some replies are deliberately wrong: for the examples ``wrong`` selects, round 1's test
never calls the program (repair must not keep it). It is a stand-in for a model that
reads the repository: it knows where each name is defined, it has no judgement about
what a function should return.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
import threading
from pathlib import Path
from typing import Callable

from helpers.openai_stub import Reply, StubServer, marker_key
from steptrace.benchmark._missing import undefined_names

_PROGRAM = re.compile(r"The program:\n\[PYTHON\]\n(.*?)\n\[/PYTHON\]", re.DOTALL)
_FEEDBACK = re.compile(r"What happened when it ran:\n(.*?)\n\nRevise the example", re.DOTALL)
_ROUND = re.compile(r"revision (\d+) of at most")
_UNDEFINED = re.compile(r"Names the program uses but never defines or imports: (.*?) \(its")
_MODULES = re.compile(r"Modules the guest does not have: (.*?) \(put")
_IMPORTED = re.compile(r"Names the program imports from them: (.*)\.$", re.MULTILINE)
_TICKED = re.compile(r"`([^`]+)`")
_FROM = re.compile(r"^# from ([\w.]+)$", re.MULTILINE)
STDLIB = frozenset(sys.stdlib_module_names)


class ContextModel(StubServer):
    """The test server, revising excerpts from their packages' sources (module docstring).
    ``records``: the excerpts by id; ``modules``: every module tree of their
    distributions by name (``Exports.modules``); ``calls``: a ``def`` line and a count ->
    calls of it; ``wrong``: the ids whose round-1 test does not call the program."""

    def __init__(self, records: dict[str, dict], modules: dict, calls: Callable,
                 wrong: Callable[[str], bool] = lambda ident: False) -> None:
        super().__init__({}, key_of=marker_key)
        self.records = records
        self.modules = modules
        self.calls = calls
        self.wrong = wrong
        # one revision at a time: the host's ast is not safe to use from several
        # threads at once (CPython 3.11: "AST constructor recursion depth mismatch")
        self.revising = threading.Lock()

    def reply_for(self, body: dict, authorization: str | None) -> Reply | None:
        prompt = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        ident = marker_key(prompt) or "?"
        with self.lock:
            self.requests[ident] += 1
        record = self.records.get(ident)
        program, feedback = _PROGRAM.search(prompt), _FEEDBACK.search(prompt)
        if record is None or program is None or feedback is None:
            return Reply(200, "I cannot tell which example this is.")
        round_ = int(_ROUND.search(prompt).group(1))
        with self.revising:
            code = revise(program.group(1) + "\n", feedback.group(1), record, self.modules)
            test = self.test(code, record["entry"], round_, feedback.group(1),
                             self.wrong(ident) and round_ == 1)
        return Reply(200, f"[PYTHON]\n{code}[/PYTHON]\n[TEST]\n{test}[/TEST]\n")

    def test(self, code: str, entry: str, round_: int, feedback: str, wrong: bool) -> str:
        """The test code: a call by the function's annotations, checked against a second
        call (by type once an equality failed); none at all when ``wrong``."""
        head = "import unittest\n\n\nclass TestExample(unittest.TestCase):\n"
        if wrong:
            return head + f"    def test_example(self):\n        self.assertTrue({entry!r})\n"
        calls = self.calls(signature(code, entry), 3) or [f"{entry}()"]
        call = calls[(round_ - 1) % len(calls)]
        check = (f"self.assertIs(type(result), type({call}))" if "AssertionError" in feedback
                 else f"self.assertEqual(result, {call})")
        return head + f"    def test_example(self):\n        result = {call}\n        {check}\n"


def signature(code: str, entry: str) -> str:
    """The ``def`` line of ``entry`` in ``code`` (``def f()`` when it is not found)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return f"def {entry}()"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            bare = ast.parse(ast.unparse(node)).body[0]
            bare.decorator_list, bare.body = [], [ast.Pass()]
            return ast.unparse(bare).split("\n", 1)[0].removesuffix(":")
    return f"def {entry}()"


def listed(pattern: re.Pattern, feedback: str) -> list[str]:
    found = pattern.search(feedback)
    return _TICKED.findall(found.group(1)) if found else []


def revise(code: str, feedback: str, record: dict, modules: dict) -> str:
    """``code`` with the imports from missing modules dropped and the definitions of the
    names the feedback lists put in above it (module docstring)."""
    missing_modules = listed(_MODULES, feedback)
    wanted: list[tuple[str, str | None, str | None]] = []  # (name, module, name there)
    for item in _IMPORTED.findall(feedback):
        for name, module in re.findall(r"`([^`]+)` from `([^`]+)`", item):
            wanted.append((name, module, name))
    for name in listed(_UNDEFINED, feedback):
        wanted.append((name, None, None))
    lines = code.splitlines(keepends=True)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    drop = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _from_missing(node, missing_modules):
            drop.update(range(node.lineno - 1, node.end_lineno))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    contexts = [record["defined_in"]] + _FROM.findall(code)
    imports: dict[str, None] = {}
    blocks = []
    for name, module, original in wanted:
        for text in define(name, module, original, record, contexts, modules) or []:
            if text.startswith("# from "):
                blocks.append(text)
            else:
                imports.setdefault(text, None)
    if not imports and not blocks:
        return "".join(kept)
    at = _first_statement(kept)
    before, marker, function = "".join(kept[at:]).rpartition(EXCERPT)
    if not marker:
        before, function = "", function
    blocks += [b.strip("\n") for b in re.split(r"(?m)^(?=# from )", before) if b.strip()]
    block = "".join(f"{text}\n\n\n" for text in _ordered(blocks))
    return "".join(imports) + "".join(kept[:at]) + block + EXCERPT + function


EXCERPT = "# the excerpt\n"  # above the function, below the definitions put in


def _ordered(blocks: list[str]) -> list[str]:
    """The definitions, each after those defining a name it uses (a class's base, a
    default value, ...), else in the order given (the newest first)."""
    defines = [_defined(block) for block in blocks]
    uses = [set(undefined_names(block)) for block in blocks]
    pending, order = list(range(len(blocks))), []
    while pending:
        ready = next((i for i in pending if not any(
            uses[i] & defines[j] for j in pending if j != i)), pending[0])  # a cycle
        order.append(blocks[ready])
        pending.remove(ready)
    return order


def _defined(text: str) -> set[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    return {target.id for node in tree.body for target in ast.walk(node)
            if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store)
            and not isinstance(node, (ast.FunctionDef, ast.ClassDef))} | {
        node.name for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _from_missing(node: ast.stmt, missing: list[str]) -> bool:
    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
        a.name for a in node.names]
    return any(n == m or n.startswith(m + ".") for n in names for m in missing)


def _first_statement(lines: list[str]) -> int:
    """The index of the first line that is not an import, blank or comment (a
    ``# from MODULE`` line starts a definition put in before)."""
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("# from ") or stripped and not stripped.startswith(
                ("import ", "from ", "#")):
            return index
    return len(lines)


def define(name: str, module: str | None, original: str | None, record: dict,
           contexts: list[str], modules: dict, hops: int = 0) -> list[str] | None:
    """The lines that bind ``name``: an import of the standard library, or the project's
    definition (``# from MODULE`` and its source) with the standard-library imports it
    uses; from ``module``'s ``original`` when given, else where the record's project
    names say, else the first context module binding it. None when its project does not
    define it (another distribution's name, or nowhere)."""
    if hops > 8:
        return None
    places = [(module, original)] if module is not None else []
    if module is None:
        origin = (record.get("project_names") or {}).get(name)
        if origin:
            head, _, tail = origin.rpartition(".")
            places.append((head, tail))
        places += [(context, name) for context in dict.fromkeys(contexts)]
    for where, there in places:
        tree = modules.get(where)
        found = None if tree is None else _binding(tree, there)
        if found is None:
            continue
        if isinstance(found, str):
            rename = "" if there == name else f"\n{name} = {there}"
            return [*_stdlib_imports(found, tree), f"# from {where}\n{found}{rename}"]
        source, imported = found  # an import in that module
        if source.split(".")[0] in STDLIB:
            return [_import_text(name, source, imported)]
        if source in modules or any(m.startswith(source + ".") for m in modules):
            return define(name, source, imported or name, record, contexts, modules, hops + 1)
        return None
    return None


def _import_text(name: str, source: str, imported: str | None) -> str:
    if imported is None:
        plain = name == source.split(".")[0]
        return f"import {source}\n" if plain else f"import {source} as {name}\n"
    return f"from {source} import {imported}" + ("" if imported == name else f" as {name}") + "\n"


def _stdlib_imports(text: str, tree) -> list[str]:
    """The standard-library imports of ``tree``'s module that the definition ``text``
    uses."""
    lines = []
    for used in undefined_names(text):
        found = _binding(tree, used)
        if isinstance(found, tuple) and found[0].split(".")[0] in STDLIB:
            lines.append(_import_text(used, *found))
    return lines


def _binding(tree, name: str):
    """How ``tree`` (a ModuleTree) binds ``name`` at module level: the source of its
    ``def``/``class``/assignment statement, or (module, name taken) of an import of it;
    None when it does not."""
    for node in tree.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return _lines(tree.source, first, node.end_lineno)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return _lines(tree.source, node.lineno, node.end_lineno)
        if isinstance(node, ast.ImportFrom) and tree.absolute(node) is not None:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return tree.absolute(node), alias.name
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    return alias.name, None
    return None


def _lines(source: str, first: int, last: int) -> str:
    return textwrap.dedent("".join(source.splitlines(keepends=True)[first - 1:last])).rstrip()
