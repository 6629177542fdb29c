"""What the host's ``ast`` says about a program that a question may name: the statement
lines a question can point at (engine/corpus/_statements.py defines the statements),
which of them always run, return lines, loop spans, condition texts, the function each
line belongs to, and the anonymous functions (lambdas, generator expressions) on a line.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field

from steptrace.corpus._formats import source_lines
from steptrace.corpus._statements import STATEMENT_LISTS, parse_program, statements


@dataclass
class ProgramInfo:
    """What the host's ``ast`` says about a program: the lines a question may name."""
    lines: list[str]
    # one-line statement headers inside functions, and those of them in the entry's body
    # outside any branch or loop (they run whenever the call does)
    question_lines: set[int] = field(default_factory=set)
    unconditional: set[int] = field(default_factory=set)
    return_lines: set[int] = field(default_factory=set)
    loops: list[tuple[int, int]] = field(default_factory=list)  # line spans inside a loop
    conditions: dict[tuple[int, int], str] = field(default_factory=dict)  # (line, col) -> text
    # question line -> qualified name of the function whose statement it is (the outermost
    # one if a one-line nested def puts a second function's statement on the line)
    owners: dict[int, str] = field(default_factory=dict)
    # line -> how many lambdas, generator expressions, ... (by qualname tag) it holds: a
    # prompt can name "the lambda on line 3" only if there is one
    anonymous: dict[int, Counter] = field(default_factory=dict)

    def loop_nesting(self, line: int | None) -> int:
        if line is None:
            return 0
        return sum(first <= line <= last for first, last in self.loops)

    def text(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# The last part of an anonymous code object's qualified name, the syntax that makes it and
# the words a prompt names it with. List, set and dict comprehensions have no frame of
# their own since CPython 3.12 (PEP 709), so the guest never shows them; they are here for
# a guest that does.
ANONYMOUS = {"<lambda>": (ast.Lambda, "lambda"),
             "<genexpr>": (ast.GeneratorExp, "generator expression"),
             "<listcomp>": (ast.ListComp, "list comprehension"),
             "<setcomp>": (ast.SetComp, "set comprehension"),
             "<dictcomp>": (ast.DictComp, "dict comprehension")}


def program_info(code: str, entry: str, script: bool = False) -> ProgramInfo | None:
    """Question lines, loop spans and condition texts; None if the host cannot parse the
    program (the guest is a newer CPython). A ``script``'s module-level statements are
    question lines too (its top level is traced)."""
    tree = parse_program(code)
    if tree is None:
        return None
    info = ProgramInfo(source_lines(code))
    for statement in statements(tree, entry, script):
        _add_header(info, _header_span(statement.node), statement.conditional, statement.scope)
        if isinstance(statement.node, ast.Return):
            info.return_lines.add(statement.line)
    anonymous = {node_type: tag for tag, (node_type, _) in ANONYMOUS.items()}
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            info.loops.append((node.body[0].lineno, _last_line(node.body)))
        elif isinstance(node, _COMPREHENSIONS):
            info.loops.append((node.lineno, node.end_lineno))
        if type(node) in anonymous:
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                info.anonymous.setdefault(line, Counter())[anonymous[type(node)]] += 1
        _add_conditions(node, code, info)
    return info


def _header_span(node: ast.AST) -> tuple[int, int]:
    """First and last line of a statement's own text: the whole of a simple statement,
    the header (decorators to colon) of a compound one."""
    first = getattr(node, "lineno", None) or node.pattern.lineno
    compound = any(hasattr(node, name) for name in STATEMENT_LISTS)
    last = first if compound else node.end_lineno or first
    for name, value in ast.iter_fields(node):
        if name in STATEMENT_LISTS:
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                for sub in ast.walk(child):
                    if getattr(sub, "lineno", None):
                        first = min(first, sub.lineno)
                        last = max(last, sub.end_lineno or sub.lineno)
    return first, last


def _add_header(info: ProgramInfo, span: tuple[int, int], conditional: bool,
                scope: str) -> None:
    """A statement whose own text is one line is a question line (a multi-line
    statement's steps land on several of its lines)."""
    first, last = span
    if first == last:
        info.question_lines.add(first)
        info.owners.setdefault(first, scope)  # statements come outer first
        if not conditional:
            info.unconditional.add(first)


def _last_line(body: list[ast.stmt]) -> int:
    return max(node.end_lineno or node.lineno for node in body)


def _add_conditions(node: ast.AST, code: str, info: ProgramInfo) -> None:
    tests = ([node.test] if isinstance(node, (ast.If, ast.While, ast.IfExp))
             else list(node.ifs) if isinstance(node, ast.comprehension) else [])
    for test in tests:
        text = ast.get_source_segment(code, test)
        if text:
            info.conditions[(test.lineno, test.col_offset)] = " ".join(text.split())
