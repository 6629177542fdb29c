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
