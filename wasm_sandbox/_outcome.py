"""What a job's run comes to on the host, whichever backend ran it: the guest's result
text checked against the result schema (wasm_sandbox/_result_schema.py) and held in a
:class:`JobOutcome`. The WASI sandbox (``_runtime.Sandbox``) and the native one
(``steptrace.native_sandbox``) both hand their guest's bytes to :func:`checked_outcome`,
so a result is validated, capped and given its status in one place."""

from __future__ import annotations

import pickle

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._result_schema import ResultRejected, ResultTooLarge, parse_result

FRESH_AFTER = frozenset({"tampered", "step_limit", "memory_limit", "output_limit",
                         "unsupported", "loops"})


# Result texts from this many characters on are held pickled in their JobOutcome.
PACK_FROM = 64 << 10


class JobOutcome:
    """The guest's result dict (checked: wasm_sandbox/_result_schema.py) plus what only
    the host knows.

    A large result is held pickled (:meth:`pack`, done by ``Sandbox.run`` for results of
    ``PACK_FROM`` characters or more): a worker keeps its chunk's outcomes until the last
    job of the chunk is done, and a pickled result is 2-4 times smaller than its dict of
    lists (a list slot is 8 bytes, a pickled small integer or repeated name 2-5). It is
    pickled once either way: here instead of when the chunk is sent. ``result`` unpickles
    it on first use and keeps the dict; ``take_result`` returns it without keeping it,
    for a caller that uses it once (the trace loop, so that a chunk's large results are
    not all dicts at once)."""

    __slots__ = ("_result", "_packed", "duration_us", "fresh_instance")

    def __init__(self, result: dict, duration_us: int, fresh_instance: bool = True) -> None:
        self._result: dict | None = result
        self._packed: bytes | None = None
        self.duration_us = duration_us
        self.fresh_instance = fresh_instance

    def pack(self) -> "JobOutcome":
        if self._result is not None:
            self._packed = pickle.dumps(self._result, protocol=pickle.HIGHEST_PROTOCOL)
            self._result = None
        return self

    @property
    def result(self) -> dict:
        if self._result is None:
            self._result = pickle.loads(self._packed)
            self._packed = None
        return self._result

    def take_result(self) -> dict:
        return self._result if self._result is not None else pickle.loads(self._packed)

    def __getstate__(self) -> tuple:
        return self._result, self._packed, self.duration_us, self.fresh_instance

    def __setstate__(self, state: tuple) -> None:
        self._result, self._packed, self.duration_us, self.fresh_instance = state

    def __repr__(self) -> str:
        held = "packed" if self._result is None else repr(self._result)
        return (f"JobOutcome(result={held}, duration_us={self.duration_us}, "
                f"fresh_instance={self.fresh_instance})")




def checked_outcome(text: bytes | str, limits: Limits, duration_us: int, fresh: bool,
                    files: list | None = None) -> tuple[JobOutcome, bool]:
    """The outcome of the guest's result ``text`` (checked: a result too large is
    ``output_limit``, one that breaks the schema ``crashed``, nothing of it kept), and
    whether the interpreter that made it may run another job (batch isolation: not after
    a rejected result, a change of shared state, a stopped job or one that used the file
    system: its descriptors and working directory, wasm_sandbox/_files.py). ``files`` is
    what the host found the job left in its directories (the result's ``files``)."""
    reusable = True
    size = len(text)
    try:
        result = parse_result(text, limits)
    except ResultTooLarge as exc:
        return JobOutcome({"status": "output_limit", "exception_message": str(exc)},
                          duration_us, fresh), reusable
    except ResultRejected as exc:
        # The guest broke the result format: nothing of it is kept, and in batch
        # isolation its instance is not used again.
        return JobOutcome({"status": "crashed", "note": f"the guest's result was "
                           f"rejected: {exc}"}, duration_us, fresh), False
    del text
    if result.pop("files_used", False):
        reusable = False
    if files is not None:
        result["files"] = files
    changed = result.pop("shared_state_changed", None)
    if changed:
        # batch isolation: the job rebound module state the next job would see. Its own
        # trace stands (that is what the program did); the rest runs in a new instance.
        reusable = False
        note = ("changed shared interpreter state (" + ", ".join(changed[:5])
                + (", ..." if len(changed) > 5 else "") + "); later jobs ran in a fresh instance")
        result["note"] = f"{result['note']}; {note}" if result.get("note") else note
    if result.get("status") in FRESH_AFTER:
        # a job stopped mid-way (or one that tampered) may have left the interpreter in
        # any state: in batch isolation the next job gets a fresh instance
        reusable = False
    outcome = JobOutcome(result, duration_us, fresh)
    return (outcome.pack() if size >= PACK_FROM else outcome), reusable
