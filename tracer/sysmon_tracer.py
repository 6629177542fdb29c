"""The step tracer: a PEP 669 (``sys.monitoring``) tool that records what a program did.

Runs inside the sandbox (CPython 3.12+ for WASI); pure standard library.

Design, after coverage.py's ``sysmon.py``:

* ``PY_START`` is the only global local-event. Its callback decides once per code object
  whether the code belongs to the traced program (by its ``co_filename``). Foreign code
  (the standard library, this tracer, the job runner) gets ``DISABLE`` back and never
  fires again; program code gets its local events switched on with
  ``sys.monitoring.set_local_events``. Untraced code therefore pays nothing.
* Exception events (RAISE, PY_UNWIND, PY_THROW) cannot be set
  per code object, so they are global and filtered by a set lookup; exceptions are rare.
* Callbacks are small: append to flat column lists, one dict lookup for the frame id.

Step kinds (the ``event`` column of the ``steps`` table):

=============  ============================================================================
``call``       a program function starts a new activation (PY_START); line = ``def`` line
``line``       a line is about to run (LINE); the state recorded is the one *before* it runs
``return``     the activation returns (PY_RETURN); carries ``<return>``
``yield``      a generator/coroutine suspends (PY_YIELD); carries ``<yield>``
``resume``     a suspended generator/coroutine resumes (PY_RESUME)
``throw``      an exception is thrown into a suspended generator (PY_THROW); thrown into
               one that never started, its activation's ``call`` step comes first
``raise``      an exception is raised in, or propagates into, the frame (RAISE); ``<exception>``
``unwind``     the activation ends by an exception (PY_UNWIND); carries ``<exception>``
=============  ============================================================================

CPython's EXCEPTION_HANDLED and RERAISE events are not steps: they also fire for the
handlers the compiler adds itself (an ``except`` clause that does not match, ``as e``
cleanup, the StopIteration guard of every generator), so they do not say what the source
did. An exception caught in a frame shows as its ``raise`` step followed by a ``line``
step of the same frame; one that escapes shows as ``unwind``.

A generator abandoned by a finished activation is closed when it is freed, after the
activation's ``return``; when no program activation is running at that moment, its
clean-up is not recorded (it is not part of what the call did).

Variable states are delta-encoded per frame: a step lists the locals of its frame whose
value (``repr`` and type) differs from that frame's previous step, and names that became
unbound (value ``None``). Names in angle brackets are event values, not locals.
"""

from __future__ import annotations

import sys
# Bound here, not looked up in builtins at each use: a program may rebind builtins.
from builtins import len, range, type, zip  # noqa: A004

from bounded_repr import bounded_repr
from guest_io import StopTracing

TOOL_ID = 3  # not one of the reserved ids (debugger 0, coverage 1, profiler 2, optimizer 5)
TOOL_NAME = "steptrace"

EVENT_NAMES = ("call", "line", "return", "yield", "resume", "throw", "raise", "unwind")
CALL, LINE, RETURN, YIELD, RESUME, THROW, RAISE, UNWIND = range(8)

# Objects of these types never change while the same object is bound: if a local still
# holds the very same object, its repr cannot have changed and is not recomputed.
_ATOMIC_TYPES = frozenset(
    {int, float, complex, str, bytes, bool, type(None), range, type(...)}
)


_getframe = sys._getframe
# sys.monitoring's functions, bound once: a program may rebind the module's attributes to
# make a freed or silenced tool look intact. Its namespace is also restored after a job.
_MONITORING = sys.monitoring
_MON_STATE = dict(_MONITORING.__dict__)
_get_tool = _MONITORING.get_tool
_use_tool_id = _MONITORING.use_tool_id
_free_tool_id = _MONITORING.free_tool_id
_register_callback = _MONITORING.register_callback
_set_events = _MONITORING.set_events
_get_events = _MONITORING.get_events
_set_local_events = _MONITORING.set_local_events
_get_local_events = _MONITORING.get_local_events
_EVENTS = _MONITORING.events
_DISABLE = _MONITORING.DISABLE
_CALLBACKS = (("PY_START", "_on_start"), ("PY_RESUME", "_on_resume"), ("PY_THROW", "_on_throw"),
              ("LINE", "_on_line"), ("PY_RETURN", "_on_return"), ("PY_YIELD", "_on_yield"),
              ("RAISE", "_on_raise"), ("PY_UNWIND", "_on_unwind"),
              ("INSTRUCTION", "_on_instruction"))
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_REFUSED_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions",
                             "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                             "sys.settrace", "sys.setprofile", "sys.addaudithook"})


def restore_monitoring() -> bool:
    """Put back sys.monitoring's namespace as the guest was built; True if it was changed."""
    if _MONITORING.__dict__ == _MON_STATE:
        return False
    _MONITORING.__dict__.clear()
    _MONITORING.__dict__.update(_MON_STATE)
    return True


def GLOBAL_EVENTS() -> int:  # noqa: N802 (a constant, computed when monitoring exists)
    ev = _EVENTS
    return ev.PY_START | ev.PY_THROW | ev.RAISE | ev.PY_UNWIND


class Tracer:
    """Records steps and delta-encoded locals for code compiled under ``filename``."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.own = False        # the tracer itself is calling sys._getframe
        self.audit_installed = False
        self.callbacks: dict = {}
        self.guarding = False   # program code may run: the audit hook refuses introspection
        self.refused: list[str] = []
        self.writers: tuple = ()
        self.base_frame = None   # the runner's frame that calls the entry function
        self.recursion = None    # job.RecursionGuard: the program's recursion limit
        self.active = False
        self.installed = False
        self.begin_state(max_steps=0, max_repr=0, max_trace_chars=0)
        self.active = False

    def begin_state(self, max_steps: int, max_repr: int, max_trace_chars: int,
                    count_instructions: bool = True, full_locals: bool = False) -> None:
        """Forget the previous job and record from now on."""
        self.max_steps = max_steps
        self.max_repr = max_repr
        self.trace_chars_left = max_trace_chars
        self.count_instructions = count_instructions
        self.full_locals = full_locals  # tests: also record complete locals per step
        # step columns
        self.ev: list[int] = []
        self.ln: list[int] = []
        self.dp: list[int] = []
        self.fr: list[int] = []
        self.fn: list[int] = []
        # state rows: (step, name, repr or None, type name or None, truncated)
        self.states: list[tuple] = []
        self.snapshots: list[tuple] = []  # full_locals mode: (step, {name: repr})
        self.funcs: list[str] = []
        self.code_index: dict = {}      # traced code object -> index into funcs
        self.offset_lines: dict = {}    # code object -> {offset: line}
        self.frame_ids: dict = {}       # live frame object -> frame id
        self.frame_depths: dict = {}    # running program frame -> Python depth above base
        self.prev: dict = {}            # frame id -> {name: (obj, repr, type)}
        self.stack: list[tuple] = []    # (frame id, frame) of active program frames
        self.next_frame = 0
        self.line_steps = 0
        self.instructions = 0
        self.calls = 0
        self.max_depth = -1
        self.quiet = 0  # > 0 while the tracer itself runs program code (a __repr__)
        self.stop: StopTracing | None = None
        self.active = True
        self.expected_state = self._own_state()

    # ------------------------------------------------------------------ lifecycle
    def install(self) -> None:
        """Register the tool and its global events once, for the life of the interpreter.

        Done while the guest is pre-initialised, so the snapshot already has it: foreign
        code run during the warm-up job has answered ``DISABLE`` and stays disabled in
        every instance. Switching events on and off per job instead would make CPython
        re-instrument every code object twice per job."""
        self.own = True
        try:
            self._install()
        finally:
            self.own = False

    def _install(self) -> None:
        ev = _EVENTS
        if _get_tool(TOOL_ID) is not None:
            _free_tool_id(TOOL_ID)
        _use_tool_id(TOOL_ID, TOOL_NAME)
        _set_events(TOOL_ID, GLOBAL_EVENTS())
        self.callbacks = {getattr(ev, name): getattr(self, method) for name, method in _CALLBACKS}
        for event, callback in self.callbacks.items():
            _register_callback(TOOL_ID, event, callback)
        if not self.audit_installed:
            sys.addaudithook(self._audit)  # cannot be removed: installed once
            self.audit_installed = True
        self.installed = True

    def local_events(self) -> int:
        ev = _EVENTS
        return (ev.PY_RESUME | ev.LINE | ev.PY_RETURN | ev.PY_YIELD
                | (ev.INSTRUCTION if self.count_instructions else 0))

    def intact(self) -> bool:
        """Is the tool still registered as installed (a program may free it)?"""
        self.own = True
        try:
            return _get_tool(TOOL_ID) == TOOL_NAME
        finally:
            self.own = False

    def tamper_report(self) -> str | None:
        """After a job: why its trace cannot be trusted, or None. Restores the tool for
        the next job (batch isolation) whatever the program did to it."""
        self.own = True  # the checks below use sys.monitoring, which the audit hook guards
        try:
            return self._tamper_reasons()
        finally:
            self.own = False

    def _own_state(self) -> tuple:
        """What a job may not change in the tracer: its limits (compared by value) and its
        recording lists (compared by identity in ``_state_changed``)."""
        return ((self.max_steps, self.max_repr, self.count_instructions, self.filename),
                (self.ev, self.ln, self.dp, self.fr, self.fn, self.states, self.funcs,
                 self.code_index, self.callbacks))

    def _state_changed(self) -> bool:
        """Objects are compared with ``is``, not by ``id()``: every ``id()`` call raises
        an audit event, that is a call of the audit hook (18 a job, ~3% of a batch job)."""
        (limits, objects), (expected_limits, expected_objects) = (self._own_state(),
                                                                  self.expected_state)
        if limits != expected_limits:
            return True
        for current, expected in zip(objects, expected_objects):
            if current is not expected:
                return True
        return False

    def _tamper_reasons(self) -> str | None:
        reasons = []
        if self._state_changed():
            reasons.append("the program changed the tracer's state")
        if self.refused:
            reasons.append("the program tried to reach interpreter internals ("
                           + ", ".join(sorted(set(self.refused))) + ")")
        if restore_monitoring():
            reasons.append("the program rebound sys.monitoring's functions")
        if _get_tool(TOOL_ID) != TOOL_NAME:
            reasons.append("the program freed or took over the tracer's sys.monitoring tool id")
        else:
            if _get_events(TOOL_ID) != GLOBAL_EVENTS():
                reasons.append("the program changed the tracer's sys.monitoring events")
            replaced = [event for event, callback in self.callbacks.items()
                        if _register_callback(TOOL_ID, event, callback) != callback]
            if replaced:
                reasons.append("the program replaced the tracer's sys.monitoring callbacks")
            wanted = self.local_events()
            if any(_get_local_events(TOOL_ID, code) != wanted for code in self.code_index):
                reasons.append("the program changed the tracer's local events")
        if reasons:
            self.installed = False  # reinstalled before the next job
            return "; ".join(reasons)
        return None

    def finish(self) -> None:
        """Stop recording; drop references to the program's frames and values."""
        self.active = False
        self.frame_ids.clear()
        self.frame_depths.clear()
        self.prev.clear()
        self.stack.clear()

    # ------------------------------------------------------------------ recording
    def _record(self, kind: int, code, line: int, frame, fid: int) -> int:
        """Append one step; enforce the step limit. Returns the step index."""
        index = len(self.ev)
        for writer in self.writers:
            if writer.overflow is not None and self.stop is None:
                self._halt("output_limit", writer.overflow)
        if index >= self.max_steps:
            self._halt("step_limit", f"trace exceeds {self.max_steps} steps")
        depth = len(self.stack) - 1
        if depth > self.max_depth:
            self.max_depth = depth
        self.ev.append(kind)
        self.ln.append(line)
        self.dp.append(depth)
        self.fr.append(fid)
        self.fn.append(self.code_index[code])
        self._delta(frame, fid, index)
        return index

    def _delta(self, frame, fid: int, index: int) -> None:
        """Record the locals of ``frame`` that changed since its previous step."""
        prev = self.prev[fid]
        local_vars = frame.f_locals
        seen = 0
        for name, value in local_vars.items():
            seen += 1
            old = prev.get(name)
            kind = type(value)
            if old is not None and old[0] is value and old[2] is kind and kind in _ATOMIC_TYPES:
                continue
            text, truncated = self.bounded_repr(value)
            # only immutable atomic values are kept (for the identity shortcut above):
            # holding any other object would delay its __del__ past the line that drops it
            kept = value if kind in _ATOMIC_TYPES else None
            if old is not None and old[1] == text and old[2] is kind:
                prev[name] = (kept, text, kind)
                continue
            prev[name] = (kept, text, kind)
            self._state(index, name, text, kind.__name__, truncated)
        if seen != len(prev):
            for name in [n for n in prev if n not in local_vars]:
                del prev[name]
                self.states.append((index, name, None, None, False))
        if self.full_locals:  # computed afresh, independently of the deltas' bookkeeping
            self.snapshots.append((index, {n: self.bounded_repr(v)[0]
                                           for n, v in local_vars.items()}))

    def _state(self, index: int, name: str, text: str, type_name: str,
               truncated: bool) -> None:
        self.trace_chars_left -= len(text) + len(name)
        if self.trace_chars_left < 0:
            self._halt("output_limit", "trace exceeds its size limit (variable states)")
        self.states.append((index, name, text, type_name, truncated))

    def bounded_repr(self, value) -> tuple[str, bool]:
        """``repr`` cut to ``max_repr`` characters, computed within that budget for
        built-in types; a program's ``__repr__`` runs untraced (``quiet``)."""
        self.quiet += 1
        try:
            text, truncated = bounded_repr(value, self.max_repr)
        except StopTracing:
            raise
        except BaseException as exc:  # a program's __repr__ may raise anything
            text, truncated = f"<repr failed: {type(exc).__name__}>", False
        finally:
            self.quiet -= 1
        if type(text) is not str:
            return "<repr returned a non-string>", False
        return text, truncated

    def _halt(self, status: str, message: str):
        self.stop = StopTracing(status, message)
        raise self.stop

    def line_of(self, code, offset: int, default: int | None = -1) -> int | None:
        """The line of the instruction at ``offset``; ``default`` (-1: the ``def`` line)
        for instructions that have none."""
        table = self.offset_lines.get(code)
        if table is None:
            table = {}
            for start, end, line in code.co_lines():
                if line is not None:
                    for off in range(start, end, 2):
                        table[off] = line
            self.offset_lines[code] = table
        line = table.get(offset)
        if line is None:
            return code.co_firstlineno if default == -1 else default
        return line

    def _check_depth(self, frame, enforce: bool = True) -> None:
        """Raise RecursionError where plain CPython would: the entry function stands for a
        function called from a script's top level (depth 2), and every Python frame
        between counts, program or not. A resumed generator is not checked: CPython
        refuses to resume it in the caller, which a callback (already inside the
        generator's frame) cannot reproduce; it may run one level deeper instead."""
        depths = self.frame_depths
        depth = 0
        current = frame
        while current is not None:
            known = depths.get(current)
            if known is not None:
                depth += known
                break
            if current is self.base_frame:
                break
            depth += 1
            current = current.f_back
        depths[frame] = depth
        guard = self.recursion
        if enforce and guard is not None and depth + 1 > guard.limit:
            del depths[frame]
            raise RecursionError("maximum recursion depth exceeded")

    def _frame(self, depth: int):
        """``sys._getframe(depth)`` as the tracer's own call, which the audit hook allows."""
        self.own = True
        try:
            return _getframe(depth)
        finally:
            self.own = False

    def _audit(self, event: str, args: tuple) -> None:
        """Audit hook (installed once, for the life of the interpreter). While program code
        may run (``guarding``), refuse what would let it reach the tracer, the runner or
        the monitoring machinery: frames (``sys._getframe``, ``tb_frame``, ``gi_frame``,
        ...), the garbage collector's object lists, other tracing hooks, sys.monitoring.
        The attempt is remembered where the program cannot reach, and the run is reported
        as ``tampered``; the program gets a RuntimeError."""
        if not self.guarding or self.own:
            return
        if event == "object.__getattr__":
            if len(args) < 2 or args[1] not in _FRAME_ATTRIBUTES:
                return
            what = f"{event} {args[1]}"
        elif event == "object.__setattr__":
            if len(args) < 2 or args[1] != "__code__":
                return
            what = f"{event} __code__"
        elif event in _REFUSED_EVENTS or event.startswith("sys.monitoring"):
            what = event
        else:
            return
        self.refused.append(what)
        raise RuntimeError(f"steptrace: {what} is not available to traced programs")

    # ------------------------------------------------------------------ callbacks
    def _on_start(self, code, offset):
        if code.co_filename != self.filename:
            return _DISABLE
        if self.quiet or not self.active:
            return None
        if self.stop is not None:
            raise self.stop
        if not self.stack and code.co_name == "__del__":
            # a finalizer run while no program activation is running (an object freed as
            # the call's frames are torn down) is not part of the call
            return None
        frame = self._frame(2)
        caller = frame.f_back
        if (caller is not None and caller.f_code.co_filename == self.filename
                and caller not in self.frame_ids):
            # called from a program frame that is not traced: the clean-up of a generator
            # abandoned by a finished activation (see _on_throw) is not part of the call
            return None
        self._register(code)
        self._check_depth(frame)
        fid = self.next_frame
        self.next_frame += 1
        self.frame_ids[frame] = fid
        self.prev[fid] = {}
        self.stack.append((fid, frame))
        self.calls += 1
        self._record(CALL, code, code.co_firstlineno, frame, fid)
        return None

    def _register(self, code) -> None:
        """First sight of a program code object: give it an index and turn its local
        events on (only program code pays for them)."""
        if code not in self.code_index:
            self.code_index[code] = len(self.funcs)
            self.funcs.append(code.co_qualname)
            self.own = True
            try:
                _set_local_events(TOOL_ID, code, self.local_events())
            finally:
                self.own = False

    def _enter(self, kind: int, code, offset: int) -> None:
        frame = self._frame(3)
        fid = self.frame_ids.get(frame)
        adopted = fid is None
        if adopted:
            # A generator frame the trace has not seen start: one thrown into before it
            # ever ran (no PY_START fires then), or one started before tracing began.
            # Its activation begins here for the trace: a `call` step (with its
            # arguments) comes first, so every frame starts with `call`.
            fid = self.next_frame
            self.next_frame += 1
            self.frame_ids[frame] = fid
            self.prev[fid] = {}
        self.stack.append((fid, frame))
        self.frame_depths.pop(frame, None)  # a generator may resume elsewhere
        self._check_depth(frame, enforce=False)
        if adopted:
            self.calls += 1
            self._record(CALL, code, code.co_firstlineno, frame, fid)
        self._record(kind, code, self.line_of(code, offset), frame, fid)

    def _on_resume(self, code, offset):
        if self.quiet or not self.active:
            return None
        if self.stop is not None:
            raise self.stop
        self._enter(RESUME, code, offset)
        return None

    def _on_throw(self, code, offset, exc):
        if (self.quiet or not self.active or code.co_filename != self.filename
                or self.stop is not None):
            return None
        if not self.stack:
            # No program activation is running: this is a generator that a finished
            # activation abandoned, being closed as it is freed. Its clean-up is not part
            # of the call; forgetting the frame drops its later events too.
            self.frame_ids.pop(self._frame(2), None)
            return None
        self._register(code)  # a generator function thrown into before any of its runs
        self._enter(THROW, code, offset)
        return None

    def _on_line(self, code, line):
        if self.quiet or not self.active:
            return None
        if self.stop is not None:
            raise self.stop
        stack = self.stack
        if stack:
            # The running frame is the innermost one the trace follows: every program frame
            # that runs while the trace is on and not quiet entered it through PY_START,
            # PY_RESUME or PY_THROW, which push it here (or, started from an untraced
            # program frame, only while nothing is on this stack). Asking the interpreter
            # (sys._getframe, an audit event each: ~11 a job) is needed only where a frame
            # begins or ends. With an empty stack the line is not the call's (a frame
            # begun in a quiet section, or being finalised after the call).
            fid, frame = stack[-1]
            self.line_steps += 1
            self._record(LINE, code, line, frame, fid)
        return None

    def _on_instruction(self, code, offset):
        if self.active and self.stack and not self.quiet:
            self.instructions += 1
        return None

    def _leave(self, kind: int, code, offset: int, key: str, value) -> None:
        frame = self._frame(3)
        fid = self.frame_ids.get(frame)
        if fid is None:  # a frame begun inside a quiet section
            return
        line = self.line_of(code, offset, None)
        if line is None:
            line = self._last_line(fid, code)
        index = self._record(kind, code, line, frame, fid)
        text, truncated = self.bounded_repr(value)
        self._state(index, key, text, type(value).__name__, truncated)
        self.stack.pop()
        self.frame_depths.pop(frame, None)
        if kind != YIELD:
            del self.frame_ids[frame]
            del self.prev[fid]

    def _on_return(self, code, offset, value):
        if self.quiet or not self.active:
            return None
        if self.stop is not None:
            raise self.stop
        self._leave(RETURN, code, offset, "<return>", value)
        return None

    def _on_yield(self, code, offset, value):
        if self.quiet or not self.active:
            return None
        if self.stop is not None:
            raise self.stop
        self._leave(YIELD, code, offset, "<yield>", value)
        return None

    def _on_unwind(self, code, offset, exc):
        if self.quiet or not self.active or code not in self.code_index or self.stop is not None:
            return None
        self._leave(UNWIND, code, offset, "<exception>", exc)
        return None

    def _exception_step(self, kind: int, code, offset: int, exc) -> None:
        frame = self._frame(3)
        fid = self.frame_ids.get(frame)
        if fid is None:
            return
        line = self.line_of(code, offset, None)
        if line is None:  # a handler's first instruction has no line: use the raising one
            line = self._last_line(fid, code)
        index = self._record(kind, code, line, frame, fid)
        text, truncated = self.bounded_repr(exc)
        self._state(index, "<exception>", text, type(exc).__name__, truncated)

    def _last_line(self, fid: int, code) -> int:
        frames = self.fr
        for index in range(len(frames) - 1, -1, -1):
            if frames[index] == fid:
                return self.ln[index]
        return code.co_firstlineno

    def _on_raise(self, code, offset, exc):
        if self.quiet or not self.active or code not in self.code_index or self.stop is not None:
            return None
        self._exception_step(RAISE, code, offset, exc)
        return None
