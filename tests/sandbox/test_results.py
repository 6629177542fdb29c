"""The host treats every guest result as untrusted data (wasm_sandbox/_result_schema.py).

Malformed results are injected where the guest's text comes back (``Sandbox.call``, for
jobs whose code carries a marker) and traced by the real CLI (``steptrace trace
--workers 0``) into a real DuckDB file, each followed in the same chunk by a real job:
the malformed run is ``crashed`` with a note naming the first problem (``output_limit``
when it is too large), over-cap texts are cut and flagged or noted, the CLI exits
normally, and the real run after it is stored exactly. The memory bombs at the end are
real programs in the real guest.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Callable

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.corpus._formats import Job, Program
from steptrace.store._store import TracedRun, TraceWriter, _Rows, connect
from steptrace.tracing._trace import TraceOptions, trace_corpus
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._result_schema import (ResultRejected, ResultTooLarge, count_values,
                                        parse_result, validate)
from steptrace.sandbox._runtime import Sandbox

MIB = 1 << 20
LIMITS = Limits()
# The result every forged one is made from: a real guest's, for this program.
BASE_CODE = "def g(a):\n    return a + 1\n\ndef f(x):\n    y = g(x)\n    return y\n"
BASE_INPUT = "1"
BASE_STEPS = [("call", "f", 4, 0, 0), ("line", "f", 5, 0, 0), ("call", "g", 1, 1, 1),
              ("line", "g", 2, 1, 1), ("return", "g", 2, 1, 1), ("line", "f", 6, 0, 0),
              ("return", "f", 6, 0, 0)]
BASE_STATES = [(0, "x", "1", "int", False), (2, "a", "1", "int", False),
               (4, "<return>", "2", "int", False), (5, "y", "2", "int", False),
               (6, "<return>", "2", "int", False)]
# The real job after each forged one.
CLEAN = "def f(x):\n    y = x * 2\n    return y\n"
MARK = "# forged: "
REJECTED = "the guest's result was rejected: "
CUT = "cut to the host's caps: "
GUEST_CUT = "cut to the guest's caps: "  # the guest cuts what it sends as the host would


def clean_steps() -> list[tuple]:
    return [("call", "f", 1, 0, 0), ("line", "f", 2, 0, 0), ("line", "f", 3, 0, 0),
            ("return", "f", 3, 0, 0)]


def clean_states(k: int) -> list[tuple]:
    return [(0, "x", str(k), "int", False), (2, "y", str(2 * k), "int", False),
            (3, "<return>", str(2 * k), "int", False)]


# ------------------------------------------------------------------ forging
Forge = Callable[[dict], "str | bytes"]


def raw(text: str | bytes) -> Forge:
    return lambda base: text


def _walk(result: dict, path: str) -> tuple[object, object]:
    *parents, last = path.split(".")
    node = result
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node, int(last) if isinstance(node, list) else last


def setting(path: str, value: object) -> Forge:
    """The base result with ``path`` (``steps.func.2``) set to ``value``."""
    def make(base: dict) -> str:
        result = copy.deepcopy(base)
        node, key = _walk(result, path)
        node[key] = value
        return json.dumps(result)
    return make


def deleting(path: str) -> Forge:
    def make(base: dict) -> str:
        result = copy.deepcopy(base)
        node, key = _walk(result, path)
        del node[key]
        return json.dumps(result)
    return make


def steps_of_length(count: int) -> Forge:
    def make(base: dict) -> str:
        result = copy.deepcopy(base)
        result["steps"] = {name: [0] * count for name in result["steps"]}
        result["states"] = {name: [] for name in result["states"]}
        return json.dumps(result)
    return make


STATUSES_LISTED = "ok, exception, invalid, step_limit, memory_limit, output_limit, unsupported, missing_module, tampered, crashed, loops"
# name -> (forged text, the rejection's note after "the guest's result was rejected: ")
MALFORMED: dict[str, tuple[Forge, str]] = {
    "not_json": (raw('{"status": "ok",'),
                 "the result is not JSON: Expecting property name enclosed in double quotes: "
                 "line 1 column 17 (char 16)"),
    "empty": (raw(""), "the result is not JSON: Expecting value: line 1 column 1 (char 0)"),
    "not_utf8": (raw(b'{"status": "\xff"}'),
                 "the result is not UTF-8 (invalid start byte at byte 12)"),
    "an_array": (raw("[1, 2]"), "the result is an array, not an object"),
    "a_string": (raw('"ok"'), "the result is a string, not an object"),
    "null": (raw("null"), "the result is null, not an object"),
    "nested_too_deep": (raw('{"status": ' + "[" * 100_000 + "]" * 100_000 + "}"),
                        "the result is nested too deeply to parse"),
    "integer_of_5000_digits": (raw('{"calls": ' + "7" * 5000 + "}"),
                               "the result is not JSON: Exceeds the limit (4300 digits) for "
                               "integer string conversion: value has 5000 digits; use sys.set_"
                               "int_max_str_digits() t... (140 characters)"),
    "missing_key": (deleting("steps"), "steps is missing"),
    "missing_column": (deleting("states.value"), "states.value is missing"),
    "unknown_key": (setting("forged", True), "forged is not a key of the result"),
    "unknown_column": (setting("steps.forged", []), "steps.forged is not a column of steps"),
    "status_not_a_string": (setting("status", 1), f"status is 1, not one of {STATUSES_LISTED}"),
    "status_of_the_host": (setting("status", "timeout"),
                           f"status is 'timeout', not one of {STATUSES_LISTED}"),
    "count_a_boolean": (setting("calls", True), "calls is a boolean, not an integer"),
    "count_a_fraction": (setting("call_us", 1.5),
                         "call_us is a number with a fraction, not an integer"),
    "count_a_string": (setting("line_steps", "3"), "line_steps is a string, not an integer"),
    "count_not_a_number": (setting("calls", float("nan")),  # NaN: JSON's extension
                           "calls is a number with a fraction, not an integer"),
    "negative_count": (setting("instruction_steps", -1),
                       "instruction_steps = -1 is outside [0, 9223372036854775807]"),
    "huge_count": (setting("calls", 10**30), "calls = 1000000000000000000000000000000 is "
                   "outside [0, 9223372036854775807]"),
    "max_depth_below_minus_one": (setting("max_depth", -2),
                                  "max_depth = -2 is outside [-1, 2147483647]"),
    "line_beyond_int32": (setting("steps.line.0", 2**31),
                          "steps.line[0] = 2147483648 is outside [0, 2147483647]"),
    "negative_depth": (setting("steps.depth.1", -1),
                       "steps.depth[1] = -1 is outside [0, 2147483647]"),
    "frame_a_fraction": (setting("steps.frame.3", 0.5),
                         "steps.frame[3] is a number with a fraction, not an integer"),
    "unequal_step_columns": (setting("steps.depth", [0, 0, 1]),
                             "steps.depth has length 3, steps.event 7"),
    "unequal_state_columns": (setting("states.type", ["int"]),
                              "states.type has length 1, states.step 5"),
    "func_index_beyond_funcs": (setting("steps.func.2", 2),
                                "steps.func[2] = 2 is outside [0, 1]"),
    "negative_event_index": (setting("steps.event.0", -1),
                             "steps.event[0] = -1 is outside [0, 7]"),
    "state_step_beyond_steps": (setting("states.step.4", 7),
                                "states.step[4] = 7 is outside [0, 6]"),
    "value_not_a_string": (setting("states.value.1", 1),
                           "states.value[1] is an integer, not a string"),
    "variable_name_null": (setting("states.var.0", None), "states.var[0] is null, not a string"),
    "flag_not_a_boolean": (setting("states.truncated.0", 0),
                           "states.truncated[0] is an integer, not a boolean"),
    "stdout_null": (setting("stdout", None), "stdout is null, not a string"),
    "funcs_not_a_list": (setting("funcs", "f"), "funcs is a string, not an array"),
    "func_name_not_a_string": (setting("funcs.1", ["g"]),
                               "funcs[1] is an array, not a string"),
    "steps_not_an_object": (setting("steps", [[0, 4, 0, 0, 0]]),
                            "steps is an array, not an object"),
    "too_many_steps": (steps_of_length(LIMITS.max_steps + 1),
                       "steps.event has 100,001 rows, more than 100,000"),
    "too_many_funcs": (setting("funcs", ["f"] * (LIMITS.max_steps + 2)),
                       "funcs has 100,002 names, more than 100,001"),
    "too_many_events": (setting("events", ["call"] * 65), "events has 65 names, more than 64"),
    "short_reply_with_a_guest_status": (
        raw('{"status": "ok", "exception_type": null, "exception_message": null}'),
        "status is 'ok', not one of crashed, memory_limit"),
    "outcomes_not_t_or_f": (setting("analysis", {
        "conditions": [{"line": 1, "col": 4, "kind": "if", "outcomes": "TX"}],
        "evaluations": 2, "evaluations_truncated": False, "int_ops": 0, "int_ops_large": 0,
        "seq_ops": 0, "seq_ops_long": 0, "float_ops": 0, "true_divisions": 0}),
        "analysis.conditions[0].outcomes holds other characters than T and F"),
    "snapshot_beyond_steps": (setting("snapshots", [[9, {}]]),
                              "snapshots[0][0] = 9 is outside [0, 6]"),
    "shared_state_not_names": (setting("shared_state_changed", [1]),
                               "shared_state_changed[0] is an integer, not a string"),
    # the guest leaves out tables without rows; an object id then has no row to name
    "object_id_without_objects": (setting("states.object_id.0", 1),
                                  "states.object_id[0] = 1 is outside [1, 0]"),
    "empty_table_with_an_extra_column": (
        setting("attributes", {name: [] for name in ("step", "object_id", "attr", "value",
                                                     "type", "truncated", "ref_id", "x")}),
        "attributes.x is not a column of attributes"),
    "empty_table_with_a_column_renamed": (
        setting("global_states", {name: [] for name in ("step", "name", "value", "type",
                                                        "truncated", "object")}),
        "global_states.object_id is missing"),
    "empty_table_not_an_object": (setting("objects", []), "objects is an array, not an object"),
}

# name -> (forged text, the run's exception_message): results larger than the host parses
TOO_LARGE: dict[str, tuple[Forge, str]] = {
    "over_max_result_bytes": (raw('{"stdout": "' + "x" * LIMITS.max_result_bytes + '"}'),
                              "trace result exceeds 33554432 bytes"),
    "over_max_result_values": (raw('{"steps": [' + "[]," * LIMITS.max_result_values + "[]]}"),
                               "trace result has more than 1,000,000 JSON values"),
}

# name -> (forged text, the runs columns that differ from the base result's, and the state
# row that differs: (its index, (step, var, value, type, truncated)), or None)
CUT_TEXTS: dict[str, tuple[Forge, dict, tuple | None]] = {
    "long_exception_type": (setting("exception_type", "E" * 1500), {
        "exception_type": "E" * 1000,
        "note": CUT + "exception_type (1,500 characters) to 1,000"}, None),
    "long_exception_message": (setting("exception_message", "m" * 20_000), {
        "exception_message": "m" * 10_000,
        "note": CUT + "exception_message (20,000 characters) to 10,000"}, None),
    "long_note": (setting("note", "n" * 20_000), {
        "note": "n" * 10_000 + "; " + CUT + "note (20,000 characters) to 10,000"}, None),
    "long_output": (setting("output", "o" * 100_001), {
        "output": "o" * 100_000, "output_truncated": True}, None),
    "long_output_type": (setting("output_type", "t" * 1001), {
        "output_type": "t" * 1000, "note": CUT + "output_type (1,001 characters) to 1,000"},
        None),
    "long_stdout": (setting("stdout", "s" * 70_000), {
        "stdout": "s" * 65_536, "note": CUT + "stdout (70,000 characters) to 65,536"}, None),
    "long_function_name": (setting("funcs.1", "g" * 5000), {
        "note": CUT + "funcs (1 of 2, the longest 5,000 characters) to 1,000"}, None),
    "long_variable_name": (setting("states.var.1", "a" * 3000), {
        "note": CUT + "states.var (1 of 5, the longest 3,000 characters) to 1,000"},
        (1, (2, "a" * 1000, "1", "int", False))),
    "long_value": (setting("states.value.3", "v" * 1001), {},
                   (3, (5, "y", "v" * 1000, "int", True))),
    "long_type_name": (setting("states.type.0", "T" * 1001), {
        "note": CUT + "states.type (1 of 5, the longest 1,001 characters) to 1,000"},
        (0, (0, "x", "1", "T" * 1000, False))),
    # a program can print one, or name a variable's type with one: stored escaped
    "lone_surrogates": (setting("stdout", "\ud800 and \udfff"), {
        "stdout": "\\ud800 and \\udfff"}, None),
    "lone_surrogate_in_a_name": (setting("states.type.1", "T\udc80"), {},
                                 (1, (2, "a", "1", "T\\udc80", False))),
}


@pytest.fixture(scope="module")
def base_result(sandbox) -> dict:
    """The real guest's result for BASE_CODE, as the host parses it."""
    text, trapped, _ = sandbox.call(json.dumps({"code": BASE_CODE, "input": BASE_INPUT,
                                                "limits": LIMITS.guest()}))
    assert trapped is None
    return json.loads(text)


@pytest.fixture(scope="module")
def forged_store(tmp_path_factory, base_result) -> dict:
    """Every forged case followed by a real job, traced by the CLI in this process into
    a fresh store with Sandbox.call answering for the marked jobs."""
    cases = {**{n: f for n, (f, _) in MALFORMED.items()},
             **{n: f for n, (f, _) in TOO_LARGE.items()},
             **{n: f for n, (f, _, _) in CUT_TEXTS.items()}}
    texts = {name: forge(base_result) for name, forge in cases.items()}
    records = []
    for k, name in enumerate(texts):
        records.append({"id": name, "code": f"{BASE_CODE}{MARK}{name}\n", "input": BASE_INPUT})
        records.append({"id": f"after_{name}", "code": CLEAN, "input": str(k)})
    directory = tmp_path_factory.mktemp("forged")
    corpus = directory / "forged.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    db = directory / "forged.duckdb"
    real_call = Sandbox.call

    def call(self, payload: str, isolation: str = "job"):
        code = json.loads(payload).get("code", "")
        if MARK in code:
            return texts[code.split(MARK)[1].strip()], None, True
        return real_call(self, payload, isolation)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Sandbox, "call", call)
        outcome = CliRunner().invoke(main, ["trace", str(corpus), "--db", str(db),
                                            "--workers", "0", "--format", "json"])
    return {"db": db, "outcome": outcome, "index": {n: k for k, n in enumerate(texts)},
            "count": len(records)}


def rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def run_of(db: Path, sample_id: str) -> dict:
    with duckdb.connect(str(db), read_only=True) as con:
        cursor = con.execute("SELECT * FROM runs WHERE sample_id = ?", [sample_id])
        names = [d[0] for d in cursor.description]
        found = cursor.fetchall()
    assert len(found) == 1, (sample_id, found)
    return dict(zip(names, found[0]))


def steps_of_run(db: Path, run_id: int) -> list[tuple]:
    return rows(db, "SELECT event, func, line, depth, frame FROM steps WHERE run_id = ? "
                    "ORDER BY step", [run_id])


def states_of_run(db: Path, run_id: int) -> list[tuple]:
    return rows(db, "SELECT step, var, value, type, truncated FROM states WHERE run_id = ? "
                    "ORDER BY step, rowid", [run_id])


def assert_next_run_exact(forged_store: dict, name: str) -> None:
    """The real job after the forged one, in the same chunk, is stored exactly."""
    db, k = forged_store["db"], forged_store["index"][name]
    run = run_of(db, f"after_{name}")
    assert (run["status"], run["output"], run["note"], run["n_steps"], run["line_steps"],
            run["exception_message"]) == ("ok", str(2 * k), None, 4, 2, None)
    assert steps_of_run(db, run["run_id"]) == clean_steps()
    assert states_of_run(db, run["run_id"]) == clean_states(k)


def test_the_cli_stores_every_run_and_exits_normally(forged_store):
    """No traceback, no lost chunk: the CLI exits 0 with every run stored, each with the
    status its result earned."""
    outcome = forged_store["outcome"]
    assert outcome.exit_code == 0, outcome.output
    summary = json.loads(outcome.output)
    assert summary["traced"] == summary["jobs"] == forged_store["count"]
    assert summary["store"] == {"crashed": len(MALFORMED), "output_limit": len(TOO_LARGE),
                                "ok": len(CUT_TEXTS) + forged_store["count"] // 2}
    assert rows(forged_store["db"], "SELECT count(*) FROM runs") == [(forged_store["count"],)]


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_result_is_crashed_with_its_first_problem(forged_store, name):
    """The run is crashed, its note names the first problem, nothing of the result is
    kept, and the next job of the chunk is stored exactly."""
    run = run_of(forged_store["db"], name)
    assert {key: run[key] for key in ("status", "note", "exception_type", "exception_message",
                                      "output", "stdout", "n_steps", "line_steps")} == {
        "status": "crashed", "note": REJECTED + MALFORMED[name][1], "exception_type": None,
        "exception_message": None, "output": None, "stdout": None, "n_steps": 0,
        "line_steps": None}
    assert steps_of_run(forged_store["db"], run["run_id"]) == []
    assert states_of_run(forged_store["db"], run["run_id"]) == []
    assert_next_run_exact(forged_store, name)


@pytest.mark.parametrize("name", list(TOO_LARGE))
def test_a_result_larger_than_the_host_parses_is_output_limit(forged_store, name):
    run = run_of(forged_store["db"], name)
    assert (run["status"], run["exception_message"], run["note"], run["n_steps"]) == (
        "output_limit", TOO_LARGE[name][1], None, 0)
    assert_next_run_exact(forged_store, name)


@pytest.mark.parametrize("name", list(CUT_TEXTS))
def test_over_cap_texts_are_cut_and_flagged_or_noted(forged_store, name):
    """The run keeps its status and trace; the over-cap text is stored cut to its cap,
    with the flag set where the field has one and a note otherwise."""
    _, changed, state = CUT_TEXTS[name]
    run = run_of(forged_store["db"], name)
    want = {"status": "ok", "output": "2", "output_type": "int", "output_truncated": False,
            "exception_type": None, "exception_message": None, "note": None, "stdout": "",
            "n_steps": 7, "line_steps": 3, "calls": 2, "max_depth": 1, **changed}
    assert {key: run[key] for key in want} == want
    steps = [(e, "g" * 1000 if f == "g" and name == "long_function_name" else f, *rest)
             for e, f, *rest in BASE_STEPS]
    assert steps_of_run(forged_store["db"], run["run_id"]) == steps
    states = list(BASE_STATES)
    if state is not None:
        states[state[0]] = state[1]
    assert states_of_run(forged_store["db"], run["run_id"]) == states
    assert_next_run_exact(forged_store, name)


def test_a_rejected_result_retires_its_batch_instance(sandbox, monkeypatch):
    """In batch isolation the instance that gave a malformed result runs nothing more:
    the next job gets a fresh one (and is traced exactly)."""
    request = {"code": CLEAN, "input": "3"}
    sandbox.run(request, "batch")
    assert sandbox.run(request, "batch").fresh_instance is False  # reused
    real_call = Sandbox.call
    monkeypatch.setattr(Sandbox, "call", lambda self, payload, isolation="job": (
        b"[]", None, False))
    rejected = sandbox.run(request, "batch")
    assert (rejected.result, rejected.fresh_instance) == (
        {"status": "crashed", "note": REJECTED + "the result is an array, not an object"},
        False)
    monkeypatch.setattr(Sandbox, "call", real_call)
    after = sandbox.run(request, "batch")
    assert after.fresh_instance is True
    assert (after.result["status"], after.result["output"], after.result["states"]) == (
        "ok", "6", {"step": [0, 2, 3], "var": ["x", "y", "<return>"],
                    "value": ["3", "6", "6"], "type": ["int"] * 3,
                    "truncated": [False] * 3, "object_id": [None] * 3})


# ------------------------------------------------------------------ the parse itself
def test_the_value_count_is_exact_when_strings_hold_punctuation():
    """Punctuation inside strings does not count against max_result_values: a result of
    reprs full of commas parses; the same number of real values does not."""
    limits = Limits(max_result_values=50)
    values = ["[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"] * 9
    text = json.dumps({"status": "crashed", "exception_type": None,
                       "exception_message": json.dumps(values)})
    assert count_values(text) > 50
    assert parse_result(text, limits)["status"] == "crashed"
    with pytest.raises(ResultTooLarge, match="more than 50 JSON values"):
        parse_result(json.dumps({"status": "crashed", "exception_type": None,
                                 "exception_message": None, "x": list(range(60))}), limits)


def test_a_deeply_nested_result_small_enough_to_count_is_rejected_not_raised():
    with pytest.raises(ResultRejected, match="nested too deeply"):
        parse_result("[" * 50_000 + "]" * 50_000, LIMITS)


def test_tables_without_rows_are_left_out_and_read_as_empty(base_result):
    """The guest sends no objects, attributes or global_states table a run has no rows of
    (BASE_CODE has none); the host reads each as the empty table, exactly as if sent."""
    assert {"objects", "attributes", "global_states"}.isdisjoint(base_result)
    sent = copy.deepcopy(base_result)
    sent["objects"] = {"type": [], "step": []}
    sent["attributes"] = {name: [] for name in ("step", "object_id", "attr", "value", "type",
                                                "truncated", "ref_id")}
    sent["global_states"] = {name: [] for name in ("step", "name", "value", "type",
                                                   "truncated", "object_id")}
    left_out = validate(copy.deepcopy(base_result), LIMITS)
    assert left_out == validate(sent, LIMITS)
    assert left_out["objects"] == {"type": [], "step": []}


def test_the_guest_key_order_does_not_matter(base_result):
    """Indices are checked against their tables whatever order the guest wrote the keys
    in (a table after the indices into it)."""
    reordered = dict(reversed(list(copy.deepcopy(base_result).items())))
    assert validate(reordered, LIMITS) == validate(copy.deepcopy(base_result), LIMITS)


def test_a_flag_that_is_not_a_boolean_is_not_hidden_by_a_cut(base_result):
    """A cut sets the row's flag; a flag that was not a boolean is still found."""
    result = copy.deepcopy(base_result)
    result["states"]["value"][0] = "v" * 2000
    result["states"]["truncated"][0] = "yes"
    with pytest.raises(ResultRejected, match=r"states.truncated\[0\] is a string"):
        validate(result, LIMITS)


# ------------------------------------------------------------------ memory
def test_a_large_result_is_held_pickled_and_unpickles_to_the_same(sandbox):
    """A result of 64 KiB or more travels and waits pickled; ``result`` and
    ``take_result`` give the checked dict, also after a pickle round trip (the pipe)."""
    code = "def f(n):\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n"
    outcome = sandbox.run({"code": code, "input": "3000"})
    again = pickle.loads(pickle.dumps(outcome))
    assert repr(again).startswith("JobOutcome(result=packed, ")
    taken = again.take_result()
    assert repr(again).startswith("JobOutcome(result=packed, ")  # not kept
    assert taken == again.result == outcome.result
    assert (taken["status"], taken["output"], len(taken["steps"]["event"])) == (
        "ok", "4498500", 6005)


def test_a_name_on_every_step_is_held_once(tmp_path):
    """10,000 steps in a function with a 1,000-character name: the held Arrow rows hold
    the name once (dictionary-encoded), and DuckDB stores it on every row."""
    name = "h" * 1000
    count = 10_000
    result = validate({
        "status": "ok", "exception_type": None, "exception_message": None, "output": "1",
        "output_type": "int", "output_truncated": False, "output_matches": None,
        "note": None, "stdout": "", "line_steps": count, "instruction_steps": 0,
        "calls": 1, "max_depth": 0, "call_us": 1, "events": ["call", "line"],
        "funcs": [name], "steps": {"event": [0] + [1] * (count - 1), "line": [1] * count,
                                   "depth": [0] * count, "frame": [0] * count,
                                   "func": [0] * count},
        "objects": {"type": [], "step": []},
        "states": {"step": [], "var": [], "value": [], "type": [], "truncated": [],
                   "object_id": []},
        "attributes": {"step": [], "object_id": [], "attr": [], "value": [], "type": [],
                       "truncated": [], "ref_id": []},
        "global_states": {"step": [], "name": [], "value": [], "type": [], "truncated": [],
                          "object_id": []}}, LIMITS)
    job = Job(Program("t", "one", "def f():\n    return 1\n"), "")
    con = connect(tmp_path / "one.duckdb")
    try:
        writer = TraceWriter(con)
        assert writer.add([TracedRun(job, result, 5, "job")]) == 1
        # ~32 bytes a row (run id, step, line, depth, frame, two indices) and the name
        # once: 10,000 copies of it would be 10,000,000 more
        assert writer.held_bytes < count * 40
        writer.commit()
        assert con.execute("SELECT count(*), count(DISTINCT func), min(func), "
                           "sum(length(func)) FROM steps").fetchone() == (
            count, 1, name, count * 1000)
    finally:
        con.close()


def test_held_rows_past_commit_bytes_are_committed_within_a_chunk(tmp_path, monkeypatch):
    """Once the rows held reach ``commit_bytes`` they are committed, also in the middle of
    a chunk (here every run's rows become Arrow at once: FLUSH_ROWS 1)."""
    corpus = tmp_path / "three.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"j{k}", "code": CLEAN, "input": str(k)})
                              + "\n" for k in range(3)), encoding="utf-8")
    committed: list[list[int]] = []
    real_commit = TraceWriter.commit
    monkeypatch.setattr(TraceWriter, "commit",
                        lambda self, **how: committed.append(real_commit(self, **how))
                        or committed[-1])
    monkeypatch.setattr(_Rows, "FLUSH_ROWS", 1)
    db = tmp_path / "three.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(
        workers=0, chunk_size=3, commit_bytes=1, commit_every=10**9, commit_seconds=10**9))
    assert (summary.traced, committed) == (3, [[1], [2], [3], []])
    assert rows(db, "SELECT run_id, output, n_steps FROM runs ORDER BY run_id") == [
        (1, "0", 4), (2, "2", 4), (3, "4", 4)]


# ------------------------------------------------------------------ real memory bombs
BOMBS = {
    # a 1 MiB function name, called 150 times: 450 steps name it
    "long_name_calls": (
        f"def {'g' * MIB}(x):\n    return x\n\ndef f(n):\n    t = 0\n    for i in range(n):\n"
        f"        t += {'g' * MIB}(i)\n    return t\n", "150"),
    # an exception whose message is 25 MiB
    "huge_message": ("def f(n):\n    raise ValueError('x' * (25 * 2**20))\n", "0"),
    # an exception class whose name is 1 MiB
    "huge_exception_type": ("def f(n):\n    E = type('E' * 2**20, (Exception,), {})\n"
                            "    raise E('boom')\n", "0"),
}


# f's call and first line; each time round, f's two lines and g's call, line and return;
# the loop's last test, the return line and the return
N_LONG_NAME_STEPS = 2 + 150 * 5 + 3


@pytest.fixture(scope="module")
def bomb_store(tmp_path_factory) -> Path:
    """The bombs, each followed by a real job, traced by the CLI (workers 0)."""
    records = []
    for k, (name, (code, input_text)) in enumerate(BOMBS.items()):
        records.append({"id": name, "code": code, "input": input_text})
        records.append({"id": f"after_{name}", "code": CLEAN, "input": str(k)})
    directory = tmp_path_factory.mktemp("bombs")
    corpus = directory / "bombs.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    db = directory / "bombs.duckdb"
    outcome = CliRunner().invoke(main, ["trace", str(corpus), "--db", str(db), "--workers",
                                        "0", "--format", "json"])
    assert outcome.exit_code == 0, outcome.output
    return db


def test_a_long_function_name_on_every_step_is_stored_cut(bomb_store):
    """150 calls of the 1 MiB name: its 450 steps (call, line, return) name it cut to
    1,000 characters, and the note says so."""
    run = run_of(bomb_store, "long_name_calls")
    assert (run["status"], run["output"], run["n_steps"], run["calls"], run["note"]) == (
        "ok", str(sum(range(150))), N_LONG_NAME_STEPS, 151,
        GUEST_CUT + "funcs (1 of 2, the longest 1,048,576 characters) to 1,000")
    assert dict(rows(bomb_store, "SELECT func, count(*) FROM steps WHERE run_id = ? "
                                 "GROUP BY func", [run["run_id"]])) == {
        "f": N_LONG_NAME_STEPS - 450, "g" * 1000: 450}
    assert_next_bomb_exact(bomb_store, "long_name_calls")


def assert_next_bomb_exact(db: Path, name: str) -> None:
    k = list(BOMBS).index(name)
    run = run_of(db, f"after_{name}")
    assert (run["status"], run["output"], run["note"], run["n_steps"]) == (
        "ok", str(2 * k), None, 4)
    assert steps_of_run(db, run["run_id"]) == clean_steps()
    assert states_of_run(db, run["run_id"]) == clean_states(k)


def test_a_25_mib_exception_message_is_stored_cut(bomb_store):
    run = run_of(bomb_store, "huge_message")
    assert (run["status"], run["exception_type"], run["exception_message"], run["note"]) == (
        "exception", "ValueError", "x" * 10_000,
        GUEST_CUT + "exception_message (26,214,400 characters) to 10,000")
    assert_next_bomb_exact(bomb_store, "huge_message")


def test_a_1_mib_exception_type_name_is_stored_cut(bomb_store):
    run = run_of(bomb_store, "huge_exception_type")
    assert (run["status"], run["exception_type"], run["exception_message"]) == (
        "exception", "E" * 1000, "boom")
    # the exception's state rows (at the raise and the unwind) name its type too, and so
    # does its objects row (an instance of a class of the program)
    assert run["note"] == GUEST_CUT + (
        "exception_type (1,048,576 characters) to 1,000, states.type "
        "(2 of 4, the longest 1,048,576 characters) to 1,000, objects.type "
        "(1 of 1, the longest 1,048,576 characters) to 1,000")
    assert_next_bomb_exact(bomb_store, "huge_exception_type")
