"""export-traces (steptrace.analytics._trace_export, _trace_formats, _pythontutor): the four
formats' exact output for small programs, each checked against the store it came from
(jsonl rebuilds the store's rows; Python Tutor's locals and heap and CWM's resolved
locals equal the store's replayed states), the selection, the batching, a shard
directory, and the command's errors."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import steptrace as st
from steptrace.analytics._defaults import TRACE_EXPORT_FORMATS
from steptrace.analytics._trace_export import export_traces, iter_run_batches, Selection
from steptrace.analytics._trace_formats import FORMATS, from_line_text, line_text
from steptrace.cli._main import main
from steptrace.errors import InputError, StoreError
from steptrace.store._runs import Run

LOOP = ("def f(xs):\n"
        "    total = 0\n"
        "    for x in xs:\n"
        "        if x % 2:\n"
        "            total += x\n"
        "    return total\n")
CALL = ("def sq(v):\n"
        "    return v * v\n"
        "\n"
        "def f(n):\n"
        "    y = sq(n)\n"
        "    return y + 1\n")
BOOM = ("def f(d):\n"
        "    x = 1\n"
        "    return x // d\n")
CLASS = ("class Acc:\n"
         "    def __init__(self):\n"
         "        self.total = 0\n"
         "\n"
         "def f(n):\n"
         "    a = Acc()\n"
         "    a.total += n\n"
         "    return a.total\n")
ALIAS = ("def f(a):\n"
         "    b = a\n"
         "    b.append(1)\n"
         "    return (a, b)\n")
SCRIPT = ("n = int(input())\n"
          "s = [n, n * 2]\n"
          "print(sum(s))\n")
# More shapes for the round trips: a generator, a global, nested and odd values, a
# linked structure, a deleted name, a method chain.
MORE = ("COUNT = [0]\n"
        "class Node:\n"
        "    def __init__(self, v, nxt=None):\n"
        "        self.v = v\n"
        "        self.nxt = nxt\n"
        "\n"
        "def gen(n):\n"
        "    for i in range(n):\n"
        "        yield i\n"
        "\n"
        "def f(n):\n"
        "    head = Node(1, Node(2))\n"
        "    head.nxt.nxt = head\n"
        "    vals = {'a': (1, [2.5, None]), 'b': {1, 2}, 'd': b'x'}\n"
        "    inf = float('inf')\n"
        "    box = [head]\n"
        "    COUNT[0] += 1\n"
        "    out = [g for g in gen(n)]\n"
        "    tmp = set()\n"
        "    del tmp\n"
        "    return out, 1.0, 'x' * 3\n")
STACK = ("class Stack:\n"
         "    def __init__(self):\n"
         "        self.items = []\n"
         "    def push(self, x):\n"
         "        self.items.append(x)\n"
         "        return self\n"
         "    def pop(self):\n"
         "        return self.items.pop()\n")
RECORDS = [
    {"id": "loop", "code": LOOP, "input": "[3, 4, 5]"},
    {"id": "call", "code": CALL, "input": "3"},
    {"id": "boom", "code": BOOM, "input": "0"},
    {"id": "cls", "code": CLASS, "input": "2"},
    {"id": "alias", "code": ALIAS, "input": "[]"},
    {"id": "script", "shape": "script", "code": SCRIPT, "input": "4\n"},
    {"id": "bad", "code": "def f(:\n", "input": "1"},
    {"id": "more", "code": MORE, "input": "2"},
    {"id": "stack", "code": STACK, "entry": "Stack",
     "calls": [{"method": "push", "input": "1"}, {"method": "pop", "input": ""}], "input": ""},
]
FINISHED = ["loop", "call", "boom", "cls", "alias", "script", "more", "stack"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("export") / "s.duckdb"
    st.trace(RECORDS, db, workers=0)
    return db


def export(store: Path, tmp_path: Path, fmt: str, **options) -> list[dict]:
    out = tmp_path / f"{fmt}.jsonl"
    export_traces(store, out, fmt, **options)
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def by_sample(records: list[dict]) -> dict[str, dict]:
    return {(r.get("steptrace") or r)["sample_id"]: r for r in records}


# ====================================================================== a replay of the store
def store_locals(run: Run) -> list[dict[str, tuple]]:
    """Each step's frame's locals, replayed from the store's Run: name -> (value, type,
    truncated, object_id)."""
    frames: dict[int, dict] = {}
    changes = run.changes()
    out = []
    for step in run.steps:
        held = frames.setdefault(step.frame, {})
        for state in changes.get(step.step, ()):
            if state.var.startswith("<"):
                continue
            if state.value is None:
                held.pop(state.var, None)
            else:
                held[state.var] = (state.value, state.type, state.truncated, state.object_id)
        out.append(dict(held))
    return out


def store_attributes(run: Run) -> list[dict[int, dict[str, tuple]]]:
    """Each step's attributes of every object seen so far: id -> attr -> (value, ref)."""
    objects: dict[int, dict] = {}
    by_step: dict[int, list] = {}
    for a in run.attributes:
        by_step.setdefault(a.step, []).append(a)
    out = []
    for step in run.steps:
        for a in by_step.get(step.step, ()):
            held = objects.setdefault(a.object_id, {})
            if a.value is None:
                held.pop(a.attr, None)
            else:
                held[a.attr] = (a.value, a.ref_id)
        out.append({k: dict(v) for k, v in objects.items()})
    return out


# ====================================================================== the registry
def test_every_format_is_registered_once_with_its_cli_name():
    assert tuple(FORMATS) == TRACE_EXPORT_FORMATS
    assert all(f.name == name and f.doc for name, f in FORMATS.items())


# ====================================================================== exact output
def test_jsonl_record_of_a_function_call(store, tmp_path):
    record = by_sample(export(store, tmp_path, "jsonl"))["call"]
    steps = record.pop("steps")
    assert record == {
        "run_id": 2, "sample_id": "call", "input_index": 0, "status": "ok",
        "program": {"code": CALL, "entry": "f", "shape": "call", "test": None},
        "input": "3", "chain": None, "stdin": None, "call": "f(3)", "output": "10",
        "output_type": "int", "output_truncated": False, "exception_type": None,
        "exception_message": None, "expected": None, "output_matches": None, "note": None,
        "stdout": "", "line_steps": 3, "instruction_steps": 11, "calls": 2, "max_depth": 1,
        "n_steps": 7, "settrace_line_steps": 3, "objects": [], "settrace_lines": []}

    def change(var, value):
        return {"var": var, "value": value, "type": "int", "truncated": False, "object_id": None}
    empty = {"attributes": [], "globals": []}
    assert steps == [
        {"step": 0, "event": "call", "func": "f", "line": 4, "depth": 0, "frame": 0,
         "locals": {"n": "3"}, "changes": [change("n", "3")], **empty},
        {"step": 1, "event": "line", "func": "f", "line": 5, "depth": 0, "frame": 0,
         "locals": {"n": "3"}, "changes": [], **empty},
        {"step": 2, "event": "call", "func": "sq", "line": 1, "depth": 1, "frame": 1,
         "locals": {"v": "3"}, "changes": [change("v", "3")], **empty},
        {"step": 3, "event": "line", "func": "sq", "line": 2, "depth": 1, "frame": 1,
         "locals": {"v": "3"}, "changes": [], **empty},
        {"step": 4, "event": "return", "func": "sq", "line": 2, "depth": 1, "frame": 1,
         "locals": {"v": "3"}, "changes": [change("<return>", "9")], **empty},
        {"step": 5, "event": "line", "func": "f", "line": 6, "depth": 0, "frame": 0,
         "locals": {"n": "3", "y": "9"}, "changes": [change("y", "9")], **empty},
        {"step": 6, "event": "return", "func": "f", "line": 6, "depth": 0, "frame": 0,
         "locals": {"n": "3", "y": "9"}, "changes": [change("<return>", "10")], **empty}]


def test_jsonl_loop_locals_at_every_step(store, tmp_path):
    steps = by_sample(export(store, tmp_path, "jsonl"))["loop"]["steps"]
    xs = "[3, 4, 5]"
    assert [(s["event"], s["line"], s["locals"]) for s in steps] == [
        ("call", 1, {"xs": xs}), ("line", 2, {"xs": xs}), ("line", 3, {"xs": xs, "total": "0"}),
        ("line", 4, {"xs": xs, "total": "0", "x": "3"}),
        ("line", 5, {"xs": xs, "total": "0", "x": "3"}),
        ("line", 3, {"xs": xs, "total": "3", "x": "3"}),
        ("line", 4, {"xs": xs, "total": "3", "x": "4"}),
        ("line", 3, {"xs": xs, "total": "3", "x": "4"}),
        ("line", 4, {"xs": xs, "total": "3", "x": "5"}),
        ("line", 5, {"xs": xs, "total": "3", "x": "5"}),
        ("line", 3, {"xs": xs, "total": "8", "x": "5"}),
        ("line", 6, {"xs": xs, "total": "8", "x": "5"}),
        ("return", 6, {"xs": xs, "total": "8", "x": "5"})]


def test_cwm_text_of_a_call_an_exception_and_a_script(store, tmp_path):
    records = by_sample(export(store, tmp_path, "cwm"))
    assert records["call"]["text"] == (
        '<|trace_context_start|>def sq(v):\n    return v * v\n\ndef f(n):  # << START_OF_TRACE\n'
        '    y = sq(n)\n    return y + 1\n<|frame_sep|>'
        '<|call_sep|>{"n": "3"}<|action_sep|>def f(n):<|frame_sep|>'
        '<|line_sep|>{"n": ".."}<|action_sep|>    y = sq(n)<|frame_sep|>'
        '<|call_sep|>{"v": "3"}<|action_sep|>def sq(v):<|frame_sep|>'
        '<|line_sep|>{"v": ".."}<|action_sep|>    return v * v<|frame_sep|>'
        '<|return_sep|><|action_sep|>    return v * v<|arg_sep|>"9"<|frame_sep|>'
        '<|line_sep|>{"n": "3", "y": "9"}<|action_sep|>    return y + 1<|frame_sep|>'
        '<|return_sep|><|action_sep|>    return y + 1<|arg_sep|>"10"<|frame_sep|><|end_of_text|>')
    assert records["boom"]["text"] == (
        '<|trace_context_start|>def f(d):  # << START_OF_TRACE\n    x = 1\n    return x // d\n'
        '<|frame_sep|><|call_sep|>{"d": "0"}<|action_sep|>def f(d):<|frame_sep|>'
        '<|line_sep|>{"d": ".."}<|action_sep|>    x = 1<|frame_sep|>'
        '<|line_sep|>{"d": "..", "x": "1"}<|action_sep|>    return x // d<|frame_sep|>'
        '<|exception_sep|><|action_sep|>    return x // d'
        '<|arg_sep|>"ZeroDivisionError(\'division by zero\')"<|frame_sep|>'
        '<|return_sep|><|action_sep|>    return x // d<|arg_sep|>"None"<|frame_sep|><|end_of_text|>')
    assert records["script"]["text"] == (
        '<|trace_context_start|>n = int(input())  # << START_OF_TRACE\ns = [n, n * 2]\n'
        'print(sum(s))\n<|frame_sep|><|call_sep|>{}<|action_sep|>n = int(input())<|frame_sep|>'
        '<|line_sep|>{}<|action_sep|>n = int(input())<|frame_sep|>'
        '<|line_sep|>{"n": "4"}<|action_sep|>s = [n, n * 2]<|frame_sep|>'
        '<|line_sep|>{"n": "..", "s": "[4, 8]"}<|action_sep|>print(sum(s))<|frame_sep|>'
        '<|return_sep|><|action_sep|>print(sum(s))<|arg_sep|>"None"<|frame_sep|><|end_of_text|>')
    assert records["boom"]["frames"][3] == {
        "event": "exception", "locals": None, "source": "    return x // d", "line": 3,
        "arg": "ZeroDivisionError('division by zero')"}
    assert {key: records["call"][key] for key in ("run_id", "sample_id", "status", "call")} == \
        {"run_id": 2, "sample_id": "call", "status": "ok", "call": "f(3)"}


def test_scratchpad_text_of_a_loop_an_exception_a_class_and_a_script(store, tmp_path):
    records = by_sample(export(store, tmp_path, "scratchpad"))
    assert records["loop"]["prompt"] == (
        "Consider the following Python function:\n\n" + LOOP.rstrip("\n")
        + "\n\noutput = f([3, 4, 5])\nWhat is the execution trace?\n")
    xs = '"xs": [3, 4, 5]'
    assert records["loop"]["target"] == "\n".join([
        "[BEGIN]",
        f"state: {{{xs}}}", "line: total = 0",
        f'state: {{{xs}, "total": 0}}', "line: for x in xs:",
        f'state: {{{xs}, "total": 0, "x": 3}}', "line: if x % 2:",
        f'state: {{{xs}, "total": 0, "x": 3}}', "line: total += x",
        f'state: {{{xs}, "total": 3, "x": 3}}', "line: for x in xs:",
        f'state: {{{xs}, "total": 3, "x": 4}}', "line: if x % 2:",
        f'state: {{{xs}, "total": 3, "x": 4}}', "line: for x in xs:",
        f'state: {{{xs}, "total": 3, "x": 5}}', "line: if x % 2:",
        f'state: {{{xs}, "total": 3, "x": 5}}', "line: total += x",
        f'state: {{{xs}, "total": 8, "x": 5}}', "line: for x in xs:",
        f'state: {{{xs}, "total": 8, "x": 5}}', "line: return total",
        f'state: {{{xs}, "total": 8, "x": 5}}', "return: 8",
        "[DONE]", ""])
    assert records["loop"]["text"] == records["loop"]["prompt"] + records["loop"]["target"]
    assert records["boom"]["target"] == (
        '[BEGIN]\nstate: {"d": 0}\nline: x = 1\nstate: {"d": 0, "x": 1}\nline: return x // d\n'
        "exception: ZeroDivisionError('division by zero')\n[DONE]\n")
    assert records["cls"]["target"] == (
        '[BEGIN]\nstate: {"n": 2}\nline: a = Acc()\nstate: {"self": Acc()}\n'
        'line: self.total = 0\nstate: {"self": Acc(total=0)}\nreturn: None\n'
        'state: {"n": 2, "a": Acc(total=0)}\nline: a.total += n\n'
        'state: {"n": 2, "a": Acc(total=2)}\nline: return a.total\n'
        'state: {"n": 2, "a": Acc(total=2)}\nreturn: 2\n[DONE]\n')
    assert records["script"]["prompt"] == (
        "Consider the following Python program:\n\n" + SCRIPT.rstrip("\n")
        + "\n\nIt runs with stdin '4\\n'.\nWhat is the execution trace?\n")
    assert records["script"]["target"] == (
        '[BEGIN]\nstate: {}\nline: n = int(input())\nstate: {"n": 4}\nline: s = [n, n * 2]\n'
        'state: {"n": 4, "s": [4, 8]}\nline: print(sum(s))\nstate: {"n": 4, "s": [4, 8]}\n'
        "return: None\n[DONE]\n")


def _frames(entry: dict) -> list[tuple]:
    return [(f["func_name"], f["frame_id"], f["encoded_locals"], f["ordered_varnames"],
             f["is_highlighted"]) for f in entry["stack_to_render"]]


def test_pythontutor_aliasing_and_a_script(store, tmp_path):
    records = by_sample(export(store, tmp_path, "pythontutor"))
    alias = records["alias"]
    assert alias["code"] == ALIAS
    assert alias["steptrace"] == {"run_id": 5, "sample_id": "alias", "input_index": 0,
                                  "status": "ok", "call": "f([])"}
    a, both = ["REF", 1], {"a": ["REF", 1], "b": ["REF", 1]}
    assert [(e["event"], e["line"], e["func_name"], e["globals"], e["ordered_globals"],
             _frames(e), e["heap"], e["stdout"]) for e in alias["trace"]] == [
        ("call", 1, "f", {}, [], [("f", 1, {"a": a}, ["a"], True)], {"1": ["LIST"]}, ""),
        ("step_line", 2, "f", {}, [], [("f", 1, {"a": a}, ["a"], True)], {"1": ["LIST"]}, ""),
        ("step_line", 3, "f", {}, [], [("f", 1, both, ["a", "b"], True)], {"1": ["LIST"]}, ""),
        ("step_line", 4, "f", {}, [], [("f", 1, both, ["a", "b"], True)],
         {"1": ["LIST", 1]}, ""),
        ("return", 4, "f", {}, [],
         [("f", 1, {**both, "__return__": ["REF", 5]}, ["a", "b", "__return__"], True)],
         {"1": ["LIST", 1], "3": ["LIST", 1], "4": ["LIST", 1],
          "5": ["TUPLE", ["REF", 3], ["REF", 4]]}, "")]
    script = records["script"]["trace"]
    s = {"n": 4, "s": ["REF", 1]}
    assert [(e["event"], e["line"], e["func_name"], e["globals"], e["ordered_globals"],
             e["stack_to_render"], e["heap"], e["stdout"]) for e in script] == [
        ("call", 1, "<module>", {}, [], [], {}, ""),
        ("step_line", 1, "<module>", {}, [], [], {}, ""),
        ("step_line", 2, "<module>", {"n": 4}, ["n"], [], {}, ""),
        ("step_line", 3, "<module>", s, ["n", "s"], [], {"1": ["LIST", 4, 8]}, ""),
        ("return", 3, "<module>", s, ["n", "s"], [], {"1": ["LIST", 4, 8]}, "12\n")]


def test_pythontutor_class_function_call_and_uncaught_exception(store, tmp_path):
    records = by_sample(export(store, tmp_path, "pythontutor"))
    cls = records["cls"]["trace"]
    assert [(e["event"], e["line"], e["func_name"]) for e in cls] == [
        ("call", 5, "f"), ("step_line", 6, "f"), ("call", 2, "__init__"),
        ("step_line", 3, "__init__"), ("return", 3, "__init__"), ("step_line", 7, "f"),
        ("step_line", 8, "f"), ("return", 8, "f")]
    assert _frames(cls[4]) == [
        ("f", 1, {"n": 2}, ["n"], False),
        ("__init__", 2, {"self": ["REF", 1], "__return__": None}, ["self", "__return__"], True)]
    assert cls[4]["heap"] == {"1": ["INSTANCE", "Acc", ["total", 0]]}
    assert cls[3]["heap"] == {"1": ["INSTANCE", "Acc"]}
    assert cls[7]["heap"] == {"1": ["INSTANCE", "Acc", ["total", 2]]}
    assert cls[7]["stack_to_render"][0]["unique_hash"] == "f_f1"
    call = records["call"]["trace"]
    assert [(e["event"], _frames(e)) for e in call[3:5]] == [
        ("step_line", [("f", 1, {"n": 3}, ["n"], False), ("sq", 2, {"v": 3}, ["v"], True)]),
        ("return", [("f", 1, {"n": 3}, ["n"], False),
                    ("sq", 2, {"v": 3, "__return__": 9}, ["v", "__return__"], True)])]
    boom = records["boom"]["trace"]
    assert [(e["event"], e["line"], e.get("exception_msg")) for e in boom] == [
        ("call", 1, None), ("step_line", 2, None), ("step_line", 3, None),
        ("exception", 3, "ZeroDivisionError('division by zero')"),
        ("exception", 3, "ZeroDivisionError('division by zero')"),
        ("uncaught_exception", 3, "ZeroDivisionError: division by zero")]
    assert boom[-1]["stack_to_render"] == [] and boom[-1]["heap"] == {}


def test_pythontutor_values_that_do_not_read_back_fall_back_to_heap_primitives(store, tmp_path):
    more = by_sample(export(store, tmp_path, "pythontutor"))["more"]["trace"]
    last = more[-1]
    assert last["event"] == "return"
    frame = last["stack_to_render"][0]
    heap = last["heap"]
    assert frame["ordered_varnames"] == ["n", "head", "vals", "inf", "box", "out", "__return__"]
    vals = heap[str(frame["encoded_locals"]["vals"][1])]
    assert vals[0] == "DICT"
    items = {key: value for key, value in vals[1:]}
    assert heap[str(items["a"][1])][0] == "TUPLE"
    inner = heap[str(items["a"][1])]
    assert inner[1] == 1 and heap[str(inner[2][1])] == ["LIST", 2.5, None]
    assert heap[str(items["b"][1])] == ["SET", 1, 2]
    assert frame["encoded_locals"]["inf"] == ["SPECIAL_FLOAT", "inf"]
    box = heap[str(frame["encoded_locals"]["box"][1])]  # a list of instances: its repr
    assert box[:2] == ["HEAP_PRIMITIVE", "list"] and box[2].startswith("[Node(v=1, ")
    assert heap[str(items["d"][1])] == ["HEAP_PRIMITIVE", "bytes", "b'x'"]
    returned = heap[str(frame["encoded_locals"]["__return__"][1])]
    assert returned[0] == "TUPLE" and returned[2:] == [["SPECIAL_FLOAT", "1.0"], "xxx"]
    assert heap[str(returned[1][1])] == ["LIST", 0, 1]
    head = heap[str(frame["encoded_locals"]["head"][1])]
    assert head[:3] == ["INSTANCE", "Node", ["v", 1]]
    second = heap[str(head[3][1][1])]
    assert second[:3] == ["INSTANCE", "Node", ["v", 2]] and second[3] == \
        ["nxt", frame["encoded_locals"]["head"]]  # the cycle refers back to the head
    assert last["globals"] == {"COUNT": last["globals"]["COUNT"]}
    assert heap[str(last["globals"]["COUNT"][1])] == ["LIST", 1]
    assert any(e["event"] == "return" and e["func_name"] == "gen" for e in more)


# ====================================================================== a Python Tutor validator
PRIMITIVE = (int, float, str, bool, type(None))
HEAP_KINDS = {"LIST", "TUPLE", "SET", "DICT", "INSTANCE", "HEAP_PRIMITIVE"}
EVENTS = {"call", "step_line", "return", "exception", "uncaught_exception"}
FRAME_KEYS = {"func_name", "frame_id", "unique_hash", "encoded_locals", "ordered_varnames",
              "is_highlighted", "is_parent", "is_zombie", "parent_frame_id_list"}
ENTRY_KEYS = {"event", "line", "func_name", "stack_to_render", "globals", "ordered_globals",
              "heap", "stdout"}


def check_value(value, heap: dict) -> None:
    """An encoded value: a JSON primitive, ["SPECIAL_FLOAT", text] or ["REF", id] to a
    heap object."""
    if isinstance(value, list):
        assert value[0] in ("REF", "SPECIAL_FLOAT") and len(value) == 2, value
        if value[0] == "REF":
            assert isinstance(value[1], int) and str(value[1]) in heap, value
        else:
            assert value[1] in ("inf", "-inf", "nan") or float(value[1]) == int(float(value[1]))
    else:
        assert isinstance(value, PRIMITIVE) and not (isinstance(value, float)
                                                     and value == int(value)), value


def check_heap_object(encoding: list, heap: dict) -> None:
    kind = encoding[0]
    assert kind in HEAP_KINDS, encoding
    if kind in ("LIST", "TUPLE", "SET"):
        for item in encoding[1:]:
            check_value(item, heap)
    elif kind == "DICT":
        for pair in encoding[1:]:
            assert isinstance(pair, list) and len(pair) == 2
            check_value(pair[0], heap)
            check_value(pair[1], heap)
    elif kind == "INSTANCE":
        assert isinstance(encoding[1], str)
        for pair in encoding[2:]:
            assert isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
            check_value(pair[1], heap)
    else:
        assert len(encoding) == 3 and all(isinstance(part, str) for part in encoding[1:])


def reachable(entry: dict) -> set[str]:
    """The heap ids the entry's frames and globals refer to, directly or through the heap."""
    found: set[str] = set()

    def visit(value) -> None:
        if not (isinstance(value, list) and value[0] == "REF") or str(value[1]) in found:
            return
        found.add(str(value[1]))
        encoding = entry["heap"][str(value[1])]
        if encoding[0] in ("LIST", "TUPLE", "SET"):
            parts = encoding[1:]
        elif encoding[0] == "DICT":
            parts = [part for pair in encoding[1:] for part in pair]
        elif encoding[0] == "INSTANCE":
            parts = [pair[1] for pair in encoding[2:]]
        else:
            parts = []
        for part in parts:
            visit(part)
    for value in entry["globals"].values():
        visit(value)
    for frame in entry["stack_to_render"]:
        for value in frame["encoded_locals"].values():
            visit(value)
    return found


def validate_pythontutor(record: dict) -> None:
    """The trace object's structure as v3/docs/opt-trace-format.md documents it."""
    assert set(record) == {"code", "trace", "steptrace"} and isinstance(record["code"], str)
    lines = record["code"].count("\n") + 1
    for entry in record["trace"]:
        assert ENTRY_KEYS <= set(entry) <= ENTRY_KEYS | {"exception_msg"}, set(entry)
        assert entry["event"] in EVENTS
        assert ("exception_msg" in entry) == (entry["event"] in ("exception", "uncaught_exception"))
        assert isinstance(entry["line"], int) and 1 <= entry["line"] <= lines
        assert isinstance(entry["func_name"], str) and isinstance(entry["stdout"], str)
        assert list(entry["globals"]) == entry["ordered_globals"]
        heap = entry["heap"]
        assert all(isinstance(key, str) and key.isdigit() for key in heap)
        for encoding in heap.values():
            check_heap_object(encoding, heap)
        for value in entry["globals"].values():
            check_value(value, heap)
        highlighted = [f for f in entry["stack_to_render"] if f["is_highlighted"]]
        assert len(highlighted) <= 1
        if entry["stack_to_render"]:
            assert highlighted == [entry["stack_to_render"][-1]]
        ids = [f["frame_id"] for f in entry["stack_to_render"]]
        assert len(set(ids)) == len(ids)
        for frame in entry["stack_to_render"]:
            assert set(frame) == FRAME_KEYS
            assert isinstance(frame["frame_id"], int) and frame["frame_id"] >= 1
            assert frame["unique_hash"] == f"{frame['func_name']}_f{frame['frame_id']}"
            assert frame["is_parent"] is False and frame["is_zombie"] is False
            assert frame["parent_frame_id_list"] == []
            assert list(frame["encoded_locals"]) == frame["ordered_varnames"]
            for value in frame["encoded_locals"].values():
                check_value(value, heap)
        assert reachable(entry) == set(heap), "the heap holds exactly what is reachable"


def test_every_pythontutor_record_has_the_documented_structure(store, tmp_path):
    records = export(store, tmp_path, "pythontutor")
    assert [r["steptrace"]["sample_id"] for r in records] == FINISHED
    for record in records:
        validate_pythontutor(record)


def decode(value, heap: dict):
    """A value encoded from a repr, read back as the Python value (a heap primitive: its
    repr text, marked)."""
    if isinstance(value, list) and value[0] == "SPECIAL_FLOAT":
        return float(value[1])
    if not isinstance(value, list):
        return value
    encoding = heap[str(value[1])]
    kind, items = encoding[0], encoding[1:]
    if kind == "LIST":
        return [decode(item, heap) for item in items]
    if kind == "TUPLE":
        return tuple(decode(item, heap) for item in items)
    if kind == "SET":
        return {decode(item, heap) for item in items}
    if kind == "DICT":
        return {decode(k, heap): decode(v, heap) for k, v in items}
    return ("HEAP_PRIMITIVE", encoding[1], encoding[2])


def agrees(encoded, value: str, type_: str, truncated: bool, object_id, heap: dict) -> bool:
    """Whether an encoded local (or attribute) says what the store's row says."""
    if object_id is not None:
        return encoded == ["REF", object_id] and str(object_id) in heap
    try:
        expected = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        expected = None
    if truncated or expected is None and value != "None" or type(expected).__name__ != type_:
        if type_ == "float" and value in ("inf", "-inf", "nan"):
            return encoded == ["SPECIAL_FLOAT", value]
        return decode(encoded, heap) == ("HEAP_PRIMITIVE", type_, value + ("…" if truncated else ""))
    return decode(encoded, heap) == expected


def test_pythontutor_locals_and_heap_agree_with_the_store(store, tmp_path):
    stored = st.open_store(store)
    for record in export(store, tmp_path, "pythontutor"):
        run = stored.run(record["steptrace"]["run_id"])
        locals_, attributes = store_locals(run), store_attributes(run)
        entries = [e for e in record["trace"] if e["event"] != "uncaught_exception"]
        assert len(entries) == len(run.steps)
        script = run.shape == "script"
        for entry, step, held, objects in zip(entries, run.steps, locals_, attributes):
            assert (entry["line"], entry["func_name"]) == (step.line, step.func.rsplit(".", 1)[-1])
            if script and step.depth == 0:
                shown = entry["globals"]  # a script's module frame is its globals
            else:
                shown = {k: v for k, v in entry["stack_to_render"][-1]["encoded_locals"].items()
                         if k != "__return__"}
                assert entry["stack_to_render"][-1]["frame_id"] == step.frame + 1
            assert list(shown) == list(held) if not script else set(held) <= set(shown)
            for name, row in held.items():
                assert agrees(shown[name], *row, entry["heap"]), (run.run_id, step, name)
            for key, encoding in entry["heap"].items():
                if encoding[0] == "INSTANCE":
                    attrs = objects.get(int(key), {})
                    assert [pair[0] for pair in encoding[2:]] == list(attrs)
                    for attr, value in encoding[2:]:
                        text, ref = attrs[attr]
                        if ref is not None:
                            assert value == ["REF", ref]


# ====================================================================== round trips
def test_jsonl_rebuilds_the_store_and_its_locals_are_the_replay(store, tmp_path):
    stored = st.open_store(store)
    records = export(store, tmp_path, "jsonl")
    assert [r["sample_id"] for r in records] == FINISHED
    for record in records:
        run = stored.run(record["run_id"])
        steps = [{k: s[k] for k in ("step", "event", "func", "line", "depth", "frame")}
                 for s in record["steps"]]
        states = [{"step": s["step"], **c} for s in record["steps"] for c in s["changes"]]
        attributes = [{"step": s["step"], **a} for s in record["steps"] for a in s["attributes"]]
        globals_ = [{"step": s["step"], **g} for s in record["steps"] for g in s["globals"]]
        fields = {**record, **record["program"], "duration_us": None, "call_us": None,
                  "isolation": None, "traced_at": None}
        rebuilt = Run.from_rows(fields, record["program"]["code"], record["program"]["entry"],
                                steps, states, objects=record["objects"],
                                attributes=attributes, globals=globals_,
                                settrace_lines=record["settrace_lines"])
        assert rebuilt == run
        assert (rebuilt.run_id, rebuilt.sample_id) == (run.run_id, run.sample_id)
        assert [s["locals"] for s in record["steps"]] == \
            [{name: row[0] for name, row in held.items()} for held in store_locals(run)]


def cwm_resolved(frames: list[dict]) -> list[dict]:
    """Each call and line frame's locals with ``..`` resolved as CWM's trace debugger
    (demos/cwmdbg.py) resolves them: from earlier frames, stopping at a call or return."""
    out = []
    for i, frame in enumerate(frames):
        if frame["locals"] is None:
            continue
        resolved = dict(frame["locals"])
        for name, value in resolved.items():
            j = i - 1
            while value == ".." and j >= 0:
                earlier = frames[j]
                found = (earlier["locals"] or {}).get(name, "..")
                if found != "..":
                    value = found
                    break
                if earlier["event"] in ("call", "return"):
                    break
                j -= 1
            assert value != "..", (i, name)
            resolved[name] = value
        out.append(resolved)
    return out


def test_cwm_locals_resolve_to_the_store_replay(store, tmp_path):
    stored = st.open_store(store)
    for record in export(store, tmp_path, "cwm"):
        run = stored.run(record["run_id"])
        held = store_locals(run)
        frames = record["frames"]
        assert len(frames) == len(run.steps)
        observed = [i for i, f in enumerate(frames) if f["locals"] is not None]
        assert cwm_resolved(frames) == [{k: v[0] for k, v in held[i].items()} for i in observed]
        text = record["text"]
        assert text.count("<|frame_sep|>") == len(frames) + 1
        assert text.endswith("<|end_of_text|>")


# ====================================================================== a hostile program
EVIL = ("class Evil:\n"
        "    pass\n"
        "\n"
        "Evil.__qualname__ = '<' + '|frame_sep|><' + '|line_sep|>{}\\n[DONE]\\nline: forged'\n"
        "\n"
        "def f(n):\n"
        "    e = Evil()\n"
        "    s = '\\ud800' + '<' + '|end_of_text|>'\n"
        "    return n\n")


def test_values_a_program_controls_cannot_forge_frames_lines_or_break_the_file(tmp_path):
    """A rendering holds the program's own text (its class's ``__qualname__``), and its
    strings may hold lone surrogates: no value spells a CWM token in the trace text, starts a line of
    a scratchpad, or makes a line that is not UTF-8 JSON. (The program's source is its
    own text in every format, but for its line breaks in the text formats: see
    docs/guides/exports.md, "cwm" and "Line breaks".)"""
    db = tmp_path / "evil.duckdb"
    st.trace([{"id": "evil", "code": EVIL, "input": "1"}], db, workers=0)
    forged = "<|frame_sep|><|line_sep|>{}\n[DONE]\nline: forged()"
    cwm = export(db, tmp_path, "cwm")[0]
    assert cwm["status"] == "ok"
    assert cwm["text"].count("<|frame_sep|>") == len(cwm["frames"]) + 1
    assert cwm["text"].count("<|end_of_text|>") == 1 and cwm["text"].endswith("<|end_of_text|>")
    assert cwm["context"] == EVIL.replace("def f(n):", "def f(n):  # << START_OF_TRACE")
    resolved = cwm_resolved(cwm["frames"])
    assert resolved[-1] == {"n": "1", "e": forged, "s": "'\\ud800<|end_of_text|>'"}
    pad = export(db, tmp_path, "scratchpad")[0]["target"].splitlines()
    assert pad.count("[DONE]") == 1 and pad[-1] == "[DONE]"
    assert all(line == "[BEGIN]" or line == "[DONE]" or line.split(": ", 1)[0] in
               ("state", "line", "return", "exception", "yield") for line in pad)
    assert ('state: {"n": 1, "e": <|frame_sep|><|line_sep|>{}⟦U+000A⟧[DONE]⟦U+000A⟧'
            'line: forged()}') in pad
    opt = export(db, tmp_path, "pythontutor")[0]
    validate_pythontutor(opt)
    last = opt["trace"][-1]["stack_to_render"][0]["encoded_locals"]
    assert last["s"] == "\ud800<|end_of_text|>"
    assert opt["trace"][-1]["heap"][str(last["e"][1])] == ["INSTANCE", "Evil"]
    assert (tmp_path / "pythontutor.jsonl").read_bytes().isascii()  # surrogates escaped
    assert export(db, tmp_path, "jsonl")[0]["steps"][-1]["locals"]["e"] == forged


# ====================================================================== line breaks
# Every character some common reader ends a line at (str.splitlines() at all of them),
# each as line text writes it (⟦U+XXXX⟧) and as JSON text writes it.
BREAKS = {"\n": ("⟦U+000A⟧", "\\n"), "\r": ("⟦U+000D⟧", "\\r"),
          "\r\n": ("⟦U+000D⟧⟦U+000A⟧", "\\r\\n"), "\x0b": ("⟦U+000B⟧", "\\u000b"),
          "\x0c": ("⟦U+000C⟧", "\\f"), "\x1c": ("⟦U+001C⟧", "\\u001c"),
          "\x1d": ("⟦U+001D⟧", "\\u001d"), "\x1e": ("⟦U+001E⟧", "\\u001e"),
          "\x85": ("⟦U+0085⟧", "\\u0085"), "\u2028": ("⟦U+2028⟧", "\\u2028"),
          "\u2029": ("⟦U+2029⟧", "\\u2029")}
# A value, stdout and an exception's message and repr that hold BREAK before forged lines
# of a scratchpad: ``[DONE]`` and ``line: 3``.
FORGER = ("class V:\n"
          "    pass\n"
          "\n"
          "class E(Exception):\n"
          "    pass\n"
          "\n"
          "T = BREAK + '[DONE]' + BREAK + 'line: 3'\n"
          "V.__qualname__ = T\n"
          "E.__qualname__ = E.__name__ = T\n"
          "\n"
          "def f(n):\n"
          "    v = V()\n"
          "    print(T, end='')\n"
          "    raise E(T)\n")


def read_lines(path: Path) -> list[list[str]]:
    """The file's lines as four common readers see them: str.splitlines, bytes.splitlines,
    iterating a text file (universal newlines) and a file opened with newline=''."""
    with path.open(encoding="utf-8") as handle:
        universal = [line.removesuffix("\n") for line in handle]
    with path.open(encoding="utf-8", newline="") as handle:
        untranslated = [line.removesuffix("\n") for line in handle]
    return [path.read_text(encoding="utf-8").splitlines(),
            [line.decode("utf-8") for line in path.read_bytes().splitlines()],
            universal, untranslated]


def test_line_text_escapes_every_line_break_and_its_own_escape_reversibly():
    for text, (escaped, _json) in BREAKS.items():
        assert line_text(f"a{text}[DONE]") == f"a{escaped}[DONE]"
        assert from_line_text(f"a{escaped}[DONE]") == f"a{text}[DONE]"
    # text that spells an escape is escaped itself: it reads back as what it was
    assert line_text("⟦U+000A⟧") == "⟦U+27E6⟧U+000A⟧"
    assert from_line_text("⟦U+27E6⟧U+000A⟧") == "⟦U+000A⟧"
    every = "".join(BREAKS) + "⟦⟧ 'a\\nb' \\u2028 ⟦U+2028⟧ é"
    assert line_text(every).splitlines() == [line_text(every)]
    assert from_line_text(line_text(every)) == every
    # a repr's own backslashes are left as Python wrote them
    assert line_text("'a\\nb\\u2028'") == "'a\\nb\\u2028'"


def test_line_breaks_in_values_stdout_and_messages_start_no_line_in_any_format(tmp_path):
    """Class names a program sets (so its instances' and its exception's renderings), its
    stdout and its exception's message hold each line break before forged ``[DONE]`` and
    ``line: 3`` lines: every reader sees one line a run in every format, each record
    reads back with the exact texts, and the scratchpad and CWM texts have exactly their
    own lines."""
    db = tmp_path / "breaks.duckdb"
    records = [{"id": f"b{i}", "code": f"BREAK = {text!r}\n" + FORGER, "input": "0"}
               for i, text in enumerate(BREAKS)]
    st.trace(records, db, workers=0)
    ids = [r["id"] for r in records]
    for fmt in FORMATS:
        out = tmp_path / f"{fmt}.jsonl"
        export_traces(store=db, out=out, format=fmt)
        for lines in read_lines(out):
            assert len(lines) == len(BREAKS)
            loaded = [json.loads(line) for line in lines]
            assert [(r.get("steptrace") or r)["sample_id"] for r in loaded] == ids
    for (text, (escaped, as_json)), record in zip(BREAKS.items(),
                                                  export(db, tmp_path, "jsonl")):
        forged = f"{text}[DONE]{text}line: 3"
        assert record["status"] == "exception"
        assert (record["stdout"], record["exception_type"], record["exception_message"]) == \
            (forged, forged, forged)
        assert record["steps"][-1]["locals"] == {"n": "0", "v": f"{forged}()"}
        assert record["steps"][-1]["changes"][0]["value"] == f"{forged}({forged!r})"
    for (text, (escaped, as_json)), record in zip(BREAKS.items(),
                                                  export(db, tmp_path, "pythontutor")):
        forged = f"{text}[DONE]{text}line: 3"
        assert record["trace"][-1] == {
            "event": "uncaught_exception", "line": 15, "func_name": "f",
            "globals": {"T": forged}, "ordered_globals": ["T"], "stack_to_render": [],
            "heap": {}, "stdout": forged, "exception_msg": f"{forged}: {forged}"}
        assert record["code"] == f"BREAK = {text!r}\n" + FORGER
    for (text, (escaped, as_json)), record in zip(BREAKS.items(),
                                                  export(db, tmp_path, "scratchpad")):
        forged = f"{text}[DONE]{text}line: 3"
        value = f"{escaped}[DONE]{escaped}line: 3"
        assert record["target"].splitlines() == [
            "[BEGIN]", 'state: {"n": 0}', "line: v = V()", f'state: {{"n": 0, "v": {value}()}}',
            "line: print(T, end='')", f'state: {{"n": 0, "v": {value}()}}', "line: raise E(T)",
            f"exception: {value}({forged!r})", "[DONE]"]
        assert from_line_text(record["target"].splitlines()[-2]) == \
            f"exception: {forged}({forged!r})"
        assert record["prompt"].splitlines() == [
            "Consider the following Python function:", "", f"BREAK = {text!r}",
            *FORGER.splitlines(), "", "output = f(0)", "What is the execution trace?"]
    for (text, (escaped, as_json)), record in zip(BREAKS.items(), export(db, tmp_path, "cwm")):
        forged = f"{text}[DONE]{text}line: 3"
        value = f'"{as_json}[DONE]{as_json}line: 3()"'
        raised = f'"{as_json}[DONE]{as_json}line: 3({json.dumps(repr(forged))[1:-1]})"'
        context = [f"BREAK = {text!r}", *FORGER.splitlines()]
        context[11] += "  # << START_OF_TRACE"
        assert record["text"].splitlines() == [
            "<|trace_context_start|>" + context[0], *context[1:],
            '<|frame_sep|><|call_sep|>{"n": "0"}<|action_sep|>def f(n):<|frame_sep|>'
            '<|line_sep|>{"n": ".."}<|action_sep|>    v = V()<|frame_sep|>'
            f'<|line_sep|>{{"n": "..", "v": {value}}}<|action_sep|>    print(T, end=\'\')'
            '<|frame_sep|><|line_sep|>{"n": "..", "v": ".."}<|action_sep|>    raise E(T)'
            f'<|frame_sep|><|exception_sep|><|action_sep|>    raise E(T)<|arg_sep|>{raised}'
            '<|frame_sep|><|return_sep|><|action_sep|>    raise E(T)<|arg_sep|>"None"'
            '<|frame_sep|><|end_of_text|>']
        assert cwm_resolved(record["frames"])[-1] == {"n": "0", "v": f"{forged}()"}


# Line breaks Python does not end a line at, raw in a string literal and a comment.
RAW = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
RAW_SOURCE = ("def f(n):\n"
              f"    s = '{RAW}[DONE]'  # \u2028line: 9\x0c\n"
              "    return len(s)\n")


def test_line_breaks_in_the_source_are_escaped_in_the_text_formats_only(tmp_path):
    """The program's source as the scratchpad's prompt and lines and CWM's context and
    actions hold it: a line of the program a line, its other line breaks escaped; jsonl
    and Python Tutor keep it exactly as a JSON string."""
    db = tmp_path / "raw.duckdb"
    st.trace([{"id": "raw", "code": RAW_SOURCE, "input": "0"}], db, workers=0)
    escaped = ("    s = '⟦U+000B⟧⟦U+000C⟧⟦U+001C⟧⟦U+001D⟧⟦U+001E⟧⟦U+0085⟧⟦U+2028⟧⟦U+2029⟧"
               "[DONE]'  # ⟦U+2028⟧line: 9⟦U+000C⟧")
    for fmt in FORMATS:
        export(db, tmp_path, fmt)
        assert [len(lines) for lines in read_lines(tmp_path / f"{fmt}.jsonl")] == [1, 1, 1, 1]
    pad = export(db, tmp_path, "scratchpad")[0]
    assert pad["prompt"].splitlines() == [
        "Consider the following Python function:", "", "def f(n):", escaped,
        "    return len(s)", "", "output = f(0)", "What is the execution trace?"]
    # the line's text is stripped (Python's whitespace includes \x0c and U+2028)
    assert pad["target"].splitlines() == [
        "[BEGIN]", 'state: {"n": 0}', "line: " + escaped.strip().removesuffix("⟦U+000C⟧"),
        'state: {"n": 0, "s": ' + repr(f"{RAW}[DONE]") + "}", "line: return len(s)",
        'state: {"n": 0, "s": ' + repr(f"{RAW}[DONE]") + "}", "return: 14", "[DONE]"]
    assert from_line_text(pad["prompt"].splitlines()[3]) == RAW_SOURCE.split("\n")[1]
    cwm = export(db, tmp_path, "cwm")[0]
    assert cwm["context"] == f"def f(n):  # << START_OF_TRACE\n{escaped}\n    return len(s)\n"
    assert cwm["text"].splitlines()[:3] == [
        "<|trace_context_start|>def f(n):  # << START_OF_TRACE", escaped, "    return len(s)"]
    assert f"<|action_sep|>{escaped}<|frame_sep|>" in cwm["text"]
    assert cwm["frames"][1]["source"] == RAW_SOURCE.split("\n")[1]  # the field: exact
    assert export(db, tmp_path, "jsonl")[0]["program"]["code"] == RAW_SOURCE
    assert export(db, tmp_path, "pythontutor")[0]["code"] == RAW_SOURCE


# ====================================================================== selection
def test_selection_by_status_and_steps(store, tmp_path):
    assert [r["sample_id"] for r in export(store, tmp_path, "jsonl", statuses=["exception"])] \
        == ["boom"]
    assert [r["sample_id"] for r in export(store, tmp_path, "jsonl",
                                           statuses=["invalid", "ok"], max_steps=7)] == \
        ["call", "alias", "script", "bad"]
    assert [r["sample_id"] for r in export(store, tmp_path, "jsonl", max_trace_lines=3)] == \
        ["call", "boom", "alias", "script"]
    bad = by_sample(export(store, tmp_path, "cwm", statuses=["invalid"]))["bad"]
    assert bad["frames"] == [] and bad["text"] == \
        "<|trace_context_start|>def f(:\n<|frame_sep|>"  # no end: the entry never ran
    with pytest.raises(InputError, match="unknown status nope: choose from ok, exception"):
        export_traces(store, tmp_path / "x.jsonl", statuses=["nope"])
    with pytest.raises(InputError, match="max_steps must be at least 0"):
        Selection(max_steps=-1)


# ====================================================================== batches
def test_runs_are_read_in_bounded_batches_and_the_output_does_not_depend_on_them(tmp_path):
    db = tmp_path / "many.duckdb"
    st.trace([{"id": "loop", "code": LOOP, "inputs": [f"[{i}]" for i in range(12)]},
              {"id": "call", "code": CALL, "inputs": [str(i) for i in range(6)]}], db,
             workers=0)
    seen: list[list[int]] = []
    summary = export_traces(db, tmp_path / "a.jsonl", "jsonl", batch_runs=5,
                            on_batch=lambda batch: seen.append([t.run["run_id"] for t in batch]))
    assert seen == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15], [16, 17, 18]]
    assert (summary.runs, summary.batches) == (18, 4)
    assert summary.steps == sum(t for t, in st.open_store(db).sql(
        "SELECT sum(n_steps) FROM runs").rows())
    # A step budget closes a batch early (a loop over [i] takes 9 steps); its first run
    # always goes in, however long.
    steps = dict(st.open_store(db).sql("SELECT run_id, n_steps FROM runs").rows())
    seen.clear()
    export_traces(db, tmp_path / "b.jsonl", "jsonl", batch_runs=5, batch_steps=20,
                  on_batch=lambda batch: seen.append([t.run["run_id"] for t in batch]))
    assert [run for batch in seen for run in batch] == list(range(1, 19))
    for batch in seen:
        assert len(batch) <= 5
        assert len(batch) == 1 or sum(steps[run] for run in batch) <= 20
    assert seen[0] == [1, 2]
    seen.clear()
    export_traces(db, tmp_path / "c.jsonl", "jsonl", batch_runs=1, batch_steps=1,
                  on_batch=lambda batch: seen.append([t.run["run_id"] for t in batch]))
    assert seen == [[run] for run in range(1, 19)]
    texts = {(tmp_path / name).read_bytes() for name in ("a.jsonl", "b.jsonl", "c.jsonl")}
    assert len(texts) == 1
    # A batch's detail rows are its runs' own, each in its run's order.
    for batch in iter_run_batches(db, batch_runs=4):
        for trace in batch:
            assert [s[0] for s in trace.steps] == list(range(trace.run["n_steps"]))


# ====================================================================== a shard directory
def test_a_shard_directory_exports_as_its_store_does(store, tmp_path):
    corpus, shards = tmp_path / "corpus.jsonl", tmp_path / "shards"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    st.trace_sharded(corpus, shards, shard_size=4, workers=1)
    for fmt in TRACE_EXPORT_FORMATS:
        from_store = export(store, tmp_path, fmt)
        from_shards = export(shards, tmp_path, fmt)

        def key(record):
            meta = record.get("steptrace") or record
            return meta["sample_id"], meta["input_index"]

        def without_ids(record):
            record = json.loads(json.dumps(record))
            (record.get("steptrace") or record).pop("run_id")
            return record
        assert sorted(map(key, from_shards)) == sorted(map(key, from_store))
        ids = [(r.get("steptrace") or r)["run_id"] for r in from_shards]
        assert ids == sorted(ids)
        assert {key(r): without_ids(r) for r in from_shards} == \
            {key(r): without_ids(r) for r in from_store}


# ====================================================================== the command
def test_the_command_writes_the_export_and_reports_it(store, tmp_path):
    out = tmp_path / "t.jsonl"
    result = CliRunner().invoke(main, ["export-traces", "--trace-format", "cwm", "--db",
                                       str(store), "--out", str(out), "--statuses",
                                       "ok, exception", "--batch-runs", "3"])
    assert result.exit_code == 0, result.output
    assert "runs    │ 8" in result.output and "batches │ 3" in result.output
    export_traces(store, tmp_path / "library.jsonl", "cwm")
    assert out.read_bytes() == (tmp_path / "library.jsonl").read_bytes()
    assert len(out.read_text(encoding="utf-8").splitlines()) == 8


@pytest.mark.parametrize("args, message", [
    (["--trace-format", "opt"], "Error: unknown export format 'opt': choose from jsonl, pythontutor, "
                          "cwm, scratchpad"),
    (["--trace-format", "cwm", "--statuses", "ok,nope"], "Error: unknown status nope: choose from "),
    (["--trace-format", "cwm", "--db", "{tmp}/missing.duckdb"], "Error: database not found: "),
    (["--trace-format", "cwm", "--out", "{tmp}/no/such/dir/t.jsonl"], "Error: cannot write "),
    (["--trace-format", "cwm", "--out", "{tmp}"], "Error: cannot write "),
])
def test_the_command_refuses_bad_input_in_one_line(store, tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--db" not in args:
        args += ["--db", str(store)]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "t.jsonl")]
    result = CliRunner().invoke(main, ["export-traces", *args])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(message) and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "t.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_a_file_that_is_not_a_store_is_refused(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(StoreError):
        export_traces(text, tmp_path / "t.jsonl", "jsonl")
    assert not (tmp_path / "t.jsonl").exists()
