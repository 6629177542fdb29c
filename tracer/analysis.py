"""The analysis run: the program again, untraced, with its conditions and operators wrapped.

Some questions about a run are not answered by line steps and variable states:

* which way did each condition go (``if``/``elif``/``while``, a conditional expression, a
  comprehension's ``if``), at each of its evaluations — several conditions can share a
  line, and a ternary or a comprehension filter never leaves a line of its own;
* what the program's binary operators worked on (CRUXEval's construction filters: no
  floats or true division, integer operations with a small operand, string/list
  operations with a short operand).

Both are answered exactly by rewriting the program's syntax tree so that each condition
``C`` becomes ``__steptrace_cond__(i, C)`` (which records ``bool(C)`` and returns it, so
``__bool__`` still runs exactly once) and each ``a op b`` / ``x op= b`` goes through a
recorder that applies the very same ``operator`` function. Evaluation order is kept:
an augmented assignment to an attribute or item evaluates its container and key once,
into temporaries, before the right-hand side, as CPython does. Line numbers are kept.

The rewritten program runs in its own fresh instance like any job, without the tracer
(the extra calls would change the instruction counts). Its result is compared with the
traced run's by the host; a program that behaves differently on a second run (time,
randomness) shows up there as a disagreement.
"""

from __future__ import annotations

import ast
import operator
from builtins import abs, bool, len, slice, type  # noqa: A004  (a program may rebind builtins)

COND = "__steptrace_cond__"
OP = "__steptrace_op__"
SLICE = "__steptrace_slice__"
TEMP = "_steptrace_t"

# ast operator class -> (index, binary function, in-place function)
_OPERATORS = [ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.Mod, ast.Pow, ast.LShift,
              ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.FloorDiv]
_NAMES = ["add", "sub", "mul", "matmul", "truediv", "mod", "pow", "lshift", "rshift", "or_",
          "xor", "and_", "floordiv"]
_BINARY = [getattr(operator, name) for name in _NAMES]
_INPLACE = [getattr(operator, "i" + name.rstrip("_")) for name in _NAMES]
_INDEX = {cls: i for i, cls in enumerate(_OPERATORS)}
_TRUEDIV = _INDEX[ast.Div]
_INTS = (int, bool)
_SEQUENCES = (str, list, tuple, bytes, bytearray)
SMALL = 3  # CRUXEval: an operand of absolute value / length at most 3
MAX_EVALUATIONS = 1_000_000  # condition outcomes kept per run; more are counted only


class Instrument(ast.NodeTransformer):
    """Wraps conditions and binary operators; ``conditions[i]`` = (line, col, kind)."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines()
        self.conditions: list[tuple[int, int, str]] = []
        self.temps = 0

    # ------------------------------------------------------------------ conditions
    def _cond(self, test: ast.expr, kind: str) -> ast.expr:
        index = len(self.conditions)
        self.conditions.append((test.lineno, test.col_offset, kind))
        call = ast.Call(ast.Name(COND, ast.Load()), [ast.Constant(index), test], [])
        return ast.copy_location(call, test)

    def _if_kind(self, node: ast.If) -> str:
        line = self.lines[node.lineno - 1] if node.lineno <= len(self.lines) else ""
        return "elif" if line[node.col_offset:node.col_offset + 4] == "elif" else "if"

    def visit_If(self, node: ast.If) -> ast.AST:
        kind = self._if_kind(node)
        self.generic_visit(node)
        node.test = self._cond(node.test, kind)
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        self.generic_visit(node)
        node.test = self._cond(node.test, "while")
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        node.test = self._cond(node.test, "ifexp")
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.ifs = [self._cond(test, "filter") for test in node.ifs]
        return node

    # ------------------------------------------------------------------ operators
    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        call = ast.Call(ast.Name(OP, ast.Load()),
                        [ast.Constant(_INDEX[type(node.op)]), node.left, node.right,
                         ast.Constant(False)], [])
        return ast.copy_location(call, node)

    def _temp(self, value: ast.expr, at: ast.AST) -> tuple[ast.stmt, str]:
        name = f"{TEMP}{self.temps}"
        self.temps += 1
        store = ast.Assign([ast.Name(name, ast.Store())], value)
        return ast.copy_location(store, at), name

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        target, before = node.target, []
        if isinstance(target, ast.Attribute):
            stmt, holder = self._temp(target.value, node)
            before.append(stmt)
            load = ast.Attribute(ast.Name(holder, ast.Load()), target.attr, ast.Load())
            store = ast.Attribute(ast.Name(holder, ast.Load()), target.attr, ast.Store())
        elif isinstance(target, ast.Subscript):
            stmt, holder = self._temp(target.value, node)
            key = target.slice
            if isinstance(key, ast.Slice):
                key = ast.Call(ast.Name(SLICE, ast.Load()),
                               [key.lower or ast.Constant(None), key.upper or ast.Constant(None),
                                key.step or ast.Constant(None)], [])
            key_stmt, key_name = self._temp(key, node)
            before += [stmt, key_stmt]
            load = ast.Subscript(ast.Name(holder, ast.Load()), ast.Name(key_name, ast.Load()),
                                 ast.Load())
            store = ast.Subscript(ast.Name(holder, ast.Load()), ast.Name(key_name, ast.Load()),
                                  ast.Store())
        else:  # a plain name: loaded before the right-hand side runs, as in CPython
            load, store = ast.Name(target.id, ast.Load()), ast.Name(target.id, ast.Store())
        value = ast.Call(ast.Name(OP, ast.Load()),
                         [ast.Constant(_INDEX[type(node.op)]), load, node.value,
                          ast.Constant(True)], [])
        assign = ast.Assign([store], value)
        statements = before + [assign]
        for statement in statements:
            ast.copy_location(statement, node)
            ast.fix_missing_locations(statement)
        return statements if before else assign


def instrument(source: str, filename: str) -> tuple[object, list[tuple[int, int, str]]]:
    """Compile ``source`` with its conditions and operators wrapped. Raises SyntaxError
    (and ValueError for NUL bytes) exactly where ``compile`` would."""
    tree = ast.parse(source, filename)
    rewriter = Instrument(source)
    tree = ast.fix_missing_locations(rewriter.visit(tree))
    return compile(tree, filename, "exec", dont_inherit=True), rewriter.conditions


class Recorder:
    """The runtime half: what the wrapped conditions and operators saw during one call.

    Its helpers sit in the program's namespace, so the program can reach (and change) it:
    a program can only change its own analysis, and the runner reads these counts and
    lists as untrusted values (job.py ``_analysis_report``). Nothing here leads back to the
    runner."""

    def __init__(self, conditions: int) -> None:
        self.outcomes: list[list[bool]] = [[] for _ in range(conditions)]
        self.evaluations = 0
        self.active = False  # only the entry call is recorded, not the top level
        self.int_ops = self.int_ops_large = 0
        self.seq_ops = self.seq_ops_long = 0
        self.float_ops = self.true_divisions = 0

    def names(self) -> dict:
        """The helpers, as the program's globals see them."""
        return {COND: self.cond, OP: self.op, SLICE: slice}

    def cond(self, index: int, value) -> bool:
        truth = bool(value)
        if self.active:
            self.evaluations += 1
            if self.evaluations <= MAX_EVALUATIONS:
                self.outcomes[index].append(truth)
        return truth

    def op(self, index: int, left, right, inplace: bool):
        if not self.active:
            return (_INPLACE if inplace else _BINARY)[index](left, right)
        # operands are measured before the operation: an in-place one mutates its left
        kinds = (type(left), type(right))
        sizes = (_size(left), _size(right))
        result = (_INPLACE if inplace else _BINARY)[index](left, right)
        self._classify(index, kinds, sizes, type(result))
        return result

    def _classify(self, index: int, kinds: tuple, sizes: tuple, result_kind: type) -> None:
        if index == _TRUEDIV:
            self.true_divisions += 1
        if float in kinds or result_kind is float:
            self.float_ops += 1
        elif kinds[0] in _INTS and kinds[1] in _INTS:
            self.int_ops += 1
            if sizes[0] > SMALL and sizes[1] > SMALL:
                self.int_ops_large += 1
        elif kinds[0] in _SEQUENCES or kinds[1] in _SEQUENCES:
            self.seq_ops += 1
            if sizes[0] > SMALL and sizes[1] > SMALL:
                self.seq_ops_long += 1


def _size(value) -> int:
    """Length of a built-in sequence, magnitude of an int (``'ab' * 5``), else 0 (an
    operand of another kind, say a ``%`` argument, counts as small)."""
    kind = type(value)
    if kind in _SEQUENCES:
        return len(value)
    if kind in _INTS:
        return abs(value)
    return 0
