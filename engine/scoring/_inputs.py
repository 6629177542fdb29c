"""Input predictions checked in the sandbox: ``f(predicted input)`` runs untraced, in a
fresh instance per distinct candidate, and is right when it returns a value equal to the
task's output (any input that gives the output is right).

A predicted input must be *literal arguments*: each positional argument and each keyword
argument's value a Python literal (what ``ast.literal_eval`` reads; the tasks' own inputs
are such), no ``*``/``**`` unpacking. Anything else is wrong without being run: an input
that is code could build an object whose ``__eq__`` answers True to the expected output,
and be judged right without the program ever computing that output."""

from __future__ import annotations

import ast
import json
import os

from steptrace.scoring._judges import NO_LITERAL, literal
from steptrace.scoring._verdicts import Progress, ScoreOptions

NOT_LITERAL = "not_literal"  # the note (and the reward service's status) of such an input


def literal_arguments(text: str) -> bool:
    """Whether ``text`` (the text inside a call's parentheses) is literal arguments."""
    try:
        call = ast.parse(f"_({text.strip()}\n)", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        return False  # e.g. "1)(2": the text closed the call and began another expression
    values = [*call.args, *(k.value for k in call.keywords)]
    if any(isinstance(v, ast.Starred) for v in call.args) or any(k.arg is None
                                                               for k in call.keywords):
        return False
    return all(literal(ast.unparse(v)) is not NO_LITERAL for v in values)


def not_literal_verdict() -> tuple[bool, str]:
    """The verdict of an input that is not literal arguments (never run)."""
    return False, f"{NOT_LITERAL}: the input is not literal arguments"


def input_requests(tasks: dict[str, dict], pending: list[tuple[dict, str]],
                   programs: dict[int, tuple]) -> tuple[list[dict], list[int], list]:
    """Distinct guest requests (mode ``run``) for the (task, predicted input) pairs, for
    each pair the index of its request (None: the input is not literal arguments, and is
    not run), and for each request the package lock of the guest it runs in (the one that
    traced the task's run; None: the standard guest)."""
    index: dict[tuple, int] = {}
    requests: list[dict] = []
    locks: list = []
    order: list[int | None] = []
    for task, predicted in pending:
        if not literal_arguments(predicted):
            order.append(None)
            continue
        code, entry, lock = programs[task["run_id"]]
        output = json.loads(task["question"])["output"]
        key = (code, entry, predicted, output, lock.digest if lock is not None else None)
        if key not in index:
            index[key] = len(requests)
            requests.append({"code": code, "entry": entry, "input": predicted,
                             "expected": output, "mode": "run"})
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
    status = result.get("status")
    if status == "ok":
        matches = result.get("output_matches") is True
        return matches, None if matches else f"returned {str(result.get('output'))[:200]}"
    detail = result.get("exception_type") or result.get("exception_message") or ""
    return False, f"{status}: {detail}"[:300]
