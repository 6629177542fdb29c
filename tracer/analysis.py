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
(the extra calls would change the instruction counts).

Nothing here is a class, and nothing the program is handed leads here: every class is
reachable through ``object.__subclasses__()`` (a program patching a rewriter's method would
run its code in every later job of a batch), and every function's ``__globals__`` leads to
its module. So the rewriting is plain functions over the C node types of ``_ast``, and
the recorder's helpers, which the program calls and can see, are made for each job from
their own code with globals of their own (``recorder``): what a program changes there is
its own analysis, read back by the runner as untrusted values (job.py). Its result is compared with the
traced run's by the host; a program that behaves differently on a second run (time,
randomness) shows up there as a disagreement.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import _ast  # noqa: E402
import operator  # noqa: E402

COND = "__steptrace_cond__"
OP = "__steptrace_op__"
SLICE = "__steptrace_slice__"
TEMP = "_steptrace_t"

# ast operator class -> (index, binary function, in-place function)
_OPERATORS = [_ast.Add, _ast.Sub, _ast.Mult, _ast.MatMult, _ast.Div, _ast.Mod, _ast.Pow,
              _ast.LShift, _ast.RShift, _ast.BitOr, _ast.BitXor, _ast.BitAnd, _ast.FloorDiv]
_NAMES = ["add", "sub", "mul", "matmul", "truediv", "mod", "pow", "lshift", "rshift", "or_",
          "xor", "and_", "floordiv"]
_BINARY = tuple(getattr(operator, name) for name in _NAMES)
_INPLACE = tuple(getattr(operator, "i" + name.rstrip("_")) for name in _NAMES)
_INDEX = {cls: i for i, cls in enumerate(_OPERATORS)}
_TRUEDIV = _INDEX[_ast.Div]
SMALL = 3  # CRUXEval: an operand of absolute value / length at most 3
MAX_EVALUATIONS = 1_000_000  # condition outcomes kept per run; more are counted only
_AST, _EXPR = _ast.AST, _ast.expr
_LOAD, _STORE = _ast.Load, _ast.Store
_ONLY_AST = _ast.PyCF_ONLY_AST
_LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")
_isinstance, _getattr, _setattr, _hasattr, _list = isinstance, getattr, setattr, hasattr, list


# ---------------------------------------------------------------------- rewriting
def instrument(source: str, filename: str) -> tuple[object, list[tuple[int, int, str]]]:
    """Compile ``source`` with its conditions and operators wrapped; ``conditions[i]`` is
    (line, col, kind) of the condition numbered ``i``. Raises SyntaxError (and ValueError
    for NUL bytes) exactly where ``compile`` would."""
    tree = compile(source, filename, "exec", _ONLY_AST, dont_inherit=True)
    rewrite = {"lines": source.splitlines(), "conditions": [], "temps": 0}
    tree = _visit(tree, rewrite)
    _fill_locations(tree, 1, 0, 1, 0)
    return compile(tree, filename, "exec", dont_inherit=True), rewrite["conditions"]


def _visit(node, rewrite: dict):
    """A node rewritten: its children first, then the node by its kind's rule (if any).
    Returns a node, or a list of statements in place of one."""
    for field in type(node)._fields:
        value = _getattr(node, field, None)
        if type(value) is _list:
            items = []
            for item in value:
                if _isinstance(item, _AST):
                    item = _visit(item, rewrite)
                    if type(item) is _list:
                        items.extend(item)
                        continue
                items.append(item)
            value[:] = items
        elif _isinstance(value, _AST):
            _setattr(node, field, _visit(value, rewrite))
    rule = _RULES.get(type(node))
    return node if rule is None else rule(node, rewrite)


def _copy_location(new, old):
    for name in _LOCATION:
        if name in type(new)._attributes and _hasattr(old, name):
            _setattr(new, name, _getattr(old, name))
    return new


def _fill_locations(node, line: int, col: int, end_line: int, end_col: int) -> None:
    """Every node without a location takes its parent's (as ``ast.fix_missing_locations``)."""
    attributes = type(node)._attributes
    if "lineno" in attributes:
        for name, inherited in (("lineno", line), ("col_offset", col),
                                ("end_lineno", end_line), ("end_col_offset", end_col)):
            if _getattr(node, name, None) is None:
                _setattr(node, name, inherited)
        line, col = node.lineno, node.col_offset
        end_line, end_col = node.end_lineno, node.end_col_offset
    for field in type(node)._fields:
        value = _getattr(node, field, None)
        if type(value) is _list:
            for item in value:
                if _isinstance(item, _AST):
                    _fill_locations(item, line, col, end_line, end_col)
        elif _isinstance(value, _AST):
            _fill_locations(value, line, col, end_line, end_col)


def _cond(test, kind: str, rewrite: dict):
    conditions = rewrite["conditions"]
    index = len(conditions)
    conditions.append((test.lineno, test.col_offset, kind))
    call = _ast.Call(_ast.Name(COND, _LOAD()), [_ast.Constant(index), test], [])
    return _copy_location(call, test)


def _if(node, rewrite: dict):
    lines = rewrite["lines"]
    line = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
    kind = "elif" if line[node.col_offset:node.col_offset + 4] == "elif" else "if"
    node.test = _cond(node.test, kind, rewrite)
    return node


def _while(node, rewrite: dict):
    node.test = _cond(node.test, "while", rewrite)
    return node


def _ifexp(node, rewrite: dict):
    node.test = _cond(node.test, "ifexp", rewrite)
    return node


def _comprehension(node, rewrite: dict):
    node.ifs = [_cond(test, "filter", rewrite) for test in node.ifs]
    return node


def _binop(node, rewrite: dict):
    call = _ast.Call(_ast.Name(OP, _LOAD()),
                     [_ast.Constant(_INDEX[type(node.op)]), node.left, node.right,
                      _ast.Constant(False)], [])
    return _copy_location(call, node)


def _temp(value, at, rewrite: dict) -> tuple:
    name = f"{TEMP}{rewrite['temps']}"
    rewrite["temps"] += 1
    store = _ast.Assign([_ast.Name(name, _STORE())], value)
    return _copy_location(store, at), name


def _augassign(node, rewrite: dict):
    target, before = node.target, []
    if type(target) is _ast.Attribute:
        stmt, holder = _temp(target.value, node, rewrite)
        before.append(stmt)
        load = _ast.Attribute(_ast.Name(holder, _LOAD()), target.attr, _LOAD())
        store = _ast.Attribute(_ast.Name(holder, _LOAD()), target.attr, _STORE())
    elif type(target) is _ast.Subscript:
        stmt, holder = _temp(target.value, node, rewrite)
        key = target.slice
        if type(key) is _ast.Slice:
            key = _ast.Call(_ast.Name(SLICE, _LOAD()),
                            [key.lower or _ast.Constant(None), key.upper or _ast.Constant(None),
                             key.step or _ast.Constant(None)], [])
        key_stmt, key_name = _temp(key, node, rewrite)
        before += [stmt, key_stmt]
        load = _ast.Subscript(_ast.Name(holder, _LOAD()), _ast.Name(key_name, _LOAD()), _LOAD())
        store = _ast.Subscript(_ast.Name(holder, _LOAD()), _ast.Name(key_name, _LOAD()),
                               _STORE())
    else:  # a plain name: loaded before the right-hand side runs, as in CPython
        load, store = _ast.Name(target.id, _LOAD()), _ast.Name(target.id, _STORE())
    value = _ast.Call(_ast.Name(OP, _LOAD()),
                      [_ast.Constant(_INDEX[type(node.op)]), load, node.value,
                       _ast.Constant(True)], [])
    assign = _ast.Assign([store], value)
    statements = before + [assign]
    for statement in statements:
        _copy_location(statement, node)
    return statements if before else assign


_RULES = {_ast.If: _if, _ast.While: _while, _ast.IfExp: _ifexp,
          _ast.comprehension: _comprehension, _ast.BinOp: _binop, _ast.AugAssign: _augassign}


# ---------------------------------------------------------------------- recording
# The recorder's helpers, compiled once; ``recorder`` runs this code in a new globals dict
# for each job, so the functions it makes lead to nothing but that dict.
_RECORDER_CODE = compile("""
def cond(index, value):
    truth = _bool(value)
    if _active[0]:
        _counts[0] += 1
        if _counts[0] <= _MAX:
            _outcomes[index].append(truth)
    return truth

def size(value):
    kind = _type(value)
    if kind in _SEQUENCES:
        return _len(value)
    if kind in _INTS:
        return _abs(value)
    return 0

def op(index, left, right, inplace):
    apply = (_INPLACE if inplace else _BINARY)[index]
    if not _active[0]:
        return apply(left, right)
    # operands are measured before the operation: an in-place one mutates its left
    kinds = (_type(left), _type(right))
    sizes = (size(left), size(right))
    result = apply(left, right)
    if index == _TRUEDIV:
        _counts[6] += 1
    if float in kinds or _type(result) is float:
        _counts[5] += 1
    elif kinds[0] in _INTS and kinds[1] in _INTS:
        _counts[1] += 1
        if sizes[0] > _SMALL and sizes[1] > _SMALL:
            _counts[2] += 1
    elif kinds[0] in _SEQUENCES or kinds[1] in _SEQUENCES:
        _counts[3] += 1
        if sizes[0] > _SMALL and sizes[1] > _SMALL:
            _counts[4] += 1
    return result
""", "<steptrace analysis>", "exec", dont_inherit=True)
# what the counts list holds, by position
COUNTS = ("evaluations", "int_ops", "int_ops_large", "seq_ops", "seq_ops_long", "float_ops",
          "true_divisions")


def recorder(conditions: int) -> tuple[dict, list, list, list]:
    """The runtime half for one job: ``(helpers, active, counts, outcomes)``. ``helpers``
    go into the program's namespace (COND, OP, SLICE); ``active[0]`` says whether calls
    are recorded (only the entry call is, not the top level); ``counts`` holds the
    COUNTS; ``outcomes[i]`` the truth values of condition ``i``. The runner keeps the
    three lists; the helpers' globals (which the program can reach and change) hold them
    too, so a program can change only what its own analysis says."""
    active, counts = [False], [0] * len(COUNTS)
    outcomes = [[] for _ in range(conditions)]
    names = {"__builtins__": {}, "_bool": bool, "_len": len, "_abs": abs, "_type": type,
             "float": float, "_INTS": (int, bool), "_SEQUENCES": (str, list, tuple, bytes,
                                                                  bytearray),
             "_BINARY": _BINARY, "_INPLACE": _INPLACE, "_TRUEDIV": _TRUEDIV, "_SMALL": SMALL,
             "_MAX": MAX_EVALUATIONS, "_active": active, "_counts": counts,
             "_outcomes": outcomes}
    exec(_RECORDER_CODE, names)
    helpers = {COND: names["cond"], OP: names["op"], SLICE: slice}
    return helpers, active, counts, outcomes
