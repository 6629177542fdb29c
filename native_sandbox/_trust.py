"""What a model wrote runs natively only when it is a pure literal, checked here on the host.

The native backend's wall is the kernel's (native_sandbox/_jail.py), not WebAssembly's: a
program with native code can write its own process's memory, and so could forge its own
trace. Code a model wrote is therefore never run natively; a model's *answer* (a predicted
input, a reward-service request's input) runs only when every piece of it is a literal
that ``ast.literal_eval`` accepts: numbers, strings, bytes, booleans, None, and tuples,
lists, sets and dicts of them (no names, calls, attributes, comprehensions, lambdas or
operators but a sign on a number and ``+``/``-`` of a complex literal). A request is marked
by the host (never by the guest): ``model_written`` true (the program is a model's:
``generate`` candidates, ``repair``'s revisions, anything traced from a corpus whose
records say ``model_written``), ``model_written`` ``"inputs"`` (a package's own function
with a model's inputs: ``harvest``'s corpus; checked as an answer is) or ``answer`` (its
``input`` and ``calls`` inputs are a model's). Refused requests get status ``refused``
and the reason, and nothing runs.
"""

from __future__ import annotations

import ast

MAX_LITERAL_CHARS = 1_000_000


def is_pure_literal(argument_text: str) -> bool:
    """Whether ``argument_text`` (what stands between a call's parentheses: ``1, 'a',
    k=[2]``) is arguments each of which ``ast.literal_eval`` accepts (no ``*``/``**``)."""
    if type(argument_text) is not str or len(argument_text) > MAX_LITERAL_CHARS:
        return False
    try:
        tree = ast.parse(f"_({argument_text}\n)", mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        return False
    nodes = list(call.args) + [keyword.value for keyword in call.keywords]
    if any(isinstance(node, ast.Starred) for node in call.args) or any(
            keyword.arg is None for keyword in call.keywords):
        return False
    for node in nodes:
        try:
            ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
    return True


def refusal(request: dict) -> str | None:
    """Why the native backend does not run ``request`` (None: it runs)."""
    written = request.get("model_written")
    if written is not None and written is not False and written != "inputs":
        return ("the native backend does not run code a model wrote (its trust boundary is "
                "the kernel's, not WebAssembly's): trace it with --backend wasi")
    if request.get("answer") is True or written == "inputs":
        pieces = [request.get("input", "")] + [call.get("input", "") if type(call) is dict
                                               else None for call in request.get("calls") or ()]
        if request.get("shape") == "script" or not all(is_pure_literal(piece)
                                                       for piece in pieces):
            return ("a model's answer runs natively only as pure literals (what "
                    "ast.literal_eval reads: numbers, strings, bytes, True, False, None and "
                    "containers of them), and this one is not")
    return None
