"""A traced result's steps and states as tuples, for exact comparisons."""

from __future__ import annotations


def steps_of(result: dict) -> list[tuple]:
    """The step sequence as (event, func, line, depth, frame) tuples."""
    s = result["steps"]
    names, funcs = result["events"], result["funcs"]
    return [(names[e], funcs[f], line, depth, frame)
            for e, f, line, depth, frame in zip(s["event"], s["func"], s["line"], s["depth"], s["frame"])]


def states_of(result: dict) -> list[tuple]:
    """State deltas as (step, var, value, type) tuples, in recorded order."""
    s = result["states"]
    return list(zip(s["step"], s["var"], s["value"], s["type"]))


def state_rows(result: dict) -> list[tuple]:
    """State deltas with their object ids: (step, var, value, type, truncated, object id)."""
    s = result["states"]
    return list(zip(s["step"], s["var"], s["value"], s["type"], s["truncated"], s["object_id"]))


def objects_of(result: dict) -> list[tuple]:
    """``objects`` rows as (object id, type, step first seen), ids from 1."""
    o = result["objects"]
    return [(index + 1, kind, step) for index, (kind, step) in enumerate(zip(o["type"], o["step"]))]


def attributes_of(result: dict) -> list[tuple]:
    """``attributes`` rows: (step, object id, attr, value, type, truncated, ref id)."""
    a = result["attributes"]
    return list(zip(a["step"], a["object_id"], a["attr"], a["value"], a["type"], a["truncated"],
                    a["ref_id"]))


def globals_of(result: dict) -> list[tuple]:
    """``global_states`` rows: (step, name, value, type, truncated, object id)."""
    g = result["global_states"]
    return list(zip(g["step"], g["name"], g["value"], g["type"], g["truncated"], g["object_id"]))


def job(sandbox, isolation: str = "job", **request) -> dict:
    """One request's result in ``sandbox`` (``input`` empty unless given)."""
    request.setdefault("input", "")
    return sandbox.run(request, isolation).result


def outcome(result: dict) -> tuple:
    return (result["status"], result["exception_type"], result["exception_message"],
            result["output"], result["stdout"])


KNOWN = "def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n"


def assert_next_job_exact(sandbox, isolation: str) -> dict:
    """The next job in the same sandbox runs and is traced as in a fresh instance; its
    result, for more checks."""
    result = job(sandbox, isolation, code=KNOWN, input="2")
    assert outcome(result) == ("ok", None, None, "1", "")
    assert steps_of(result) == [
        ("call", "f", 1, 0, 0), ("line", "f", 2, 0, 0), ("line", "f", 3, 0, 0),
        ("line", "f", 4, 0, 0), ("line", "f", 3, 0, 0), ("line", "f", 4, 0, 0),
        ("line", "f", 3, 0, 0), ("line", "f", 5, 0, 0), ("return", "f", 5, 0, 0)]
    assert states_of(result) == [
        (0, "n", "2", "int"), (2, "s", "0", "int"), (3, "i", "0", "int"),
        (5, "i", "1", "int"), (6, "s", "1", "int"), (8, "<return>", "1", "int")]
    return result
