"""The formats of ``steptrace export-traces``: a registry (``FORMATS``, name -> ``Format``)
of renderers, each turning one run (``RunTrace``) into one JSON line. What each holds and
where it comes from: docs/guides/exports.md.

* ``jsonl``: steptrace's own record: the program, the call, the outcome, the objects,
  and every step with its frame's full locals (replayed from the deltas) and the deltas
  themselves (states, attributes, globals), so the store's rows can be rebuilt from it.
* ``pythontutor``: Python Tutor's execution trace JSON (``_pythontutor.py``).
* ``cwm``: the execution-trace frames of Meta's Code World Model (CWM), as its prompting
  guide (facebookresearch/cwm, PROMPTING_GUIDE.md) and trace debugger demo
  (demos/cwmdbg.py) define them.
* ``scratchpad``: a line-by-line text trace in the style of the execution scratchpads
  of Nye et al. 2021 ("Show your work") on Austin et al. 2021's programs.
* ``lines``: the run's line events alone, of the steps or of the settrace view
  (``--lines settrace``: the line events ``sys.settrace`` reports, as trace benchmarks
  such as REval recorded their ground truth; docs/guides/runs.md, "The settrace view").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

from steptrace.analytics._trace_export import RunTrace, replay
from steptrace.corpus._formats import source_lines
from steptrace.store._runs import call_text, settrace_view


@dataclass(frozen=True)
class Format:
    """An export format: its name, one line on what it is, and its renderer (one run ->
    the JSON text of its line, without the line break); ``line_views``: it renders the
    line view the export asks for (``RunTrace.view``; the others render the steps)."""
    name: str
    doc: str
    render: Callable[[RunTrace], str]
    line_views: bool = False


# ====================================================================== line breaks
# Every character some common reader ends a line at: ``str.splitlines()`` breaks at all of
# them, ``bytes.splitlines()`` and ``open()``'s universal newlines at \n and \r. Text
# a run holds (a value's repr, a program's string literal, stdout, a message) may hold any
# of them, and would start a line of its own, forging lines of a line-oriented format.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# Line text escapes a character as ``⟦U+XXXX⟧``; ``⟦`` itself is escaped too, so the
# escaping is reversible (text with neither is left as it is: a repr keeps its own
# backslashes, and reads as Python wrote it).
ESCAPE_OPEN, ESCAPE_CLOSE = "\u27e6", "\u27e7"
_LINE_UNSAFE = re.compile(f"[{re.escape(LINE_BREAKS + ESCAPE_OPEN)}]")
_LINE_ESCAPE = re.compile(f"{ESCAPE_OPEN}U\\+([0-9A-F]{{4}}){ESCAPE_CLOSE}")
# JSON text may hold these raw (JSON's own escapes cover the rest of LINE_BREAKS): written
# as JSON escapes, they are the same JSON string
_JSON_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


def line_text(text: str) -> str:
    """``text`` as part of one line of a text format: each character of LINE_BREAKS, and
    ``⟦``, written ``⟦U+XXXX⟧`` (``"a\\u2028b"`` -> ``"a⟦U+2028⟧b"``);
    :func:`from_line_text` reverses it."""
    return _LINE_UNSAFE.sub(lambda found: f"{ESCAPE_OPEN}U+{ord(found.group()):04X}"
                                          f"{ESCAPE_CLOSE}", text)


def from_line_text(text: str) -> str:
    """The text :func:`line_text` was given."""
    return _LINE_ESCAPE.sub(lambda found: chr(int(found.group(1), 16)), text)


def json_text(value, ascii: bool = False) -> str:
    """``json.dumps(value)`` on one line: also U+0085, U+2028 and U+2029, which JSON allows
    raw in a string, are written as JSON escapes (``\\u2028``), the same JSON value."""
    return json.dumps(value, ensure_ascii=ascii).translate(_JSON_BREAKS)


def _dumps(record: dict) -> str:
    """One JSON line (:func:`json_text`): non-ASCII text as itself, unless the record
    holds a lone surrogate (a program's string ``'\\ud800'`` read back from its repr),
    which UTF-8 cannot hold: then every non-ASCII character is escaped."""
    text = json_text(record)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json_text(record, ascii=True)
    return text


def run_fields(run: dict) -> dict:
    """Where a run sits and how it ended: the fields every format's record starts with."""
    return {"run_id": run["run_id"], "sample_id": run["sample_id"],
            "input_index": run["input_index"], "status": run["status"]}


# ====================================================================== jsonl
def _value(row: tuple) -> dict:
    value, type_, truncated, ref = row
    return {"value": value, "type": type_, "truncated": truncated, "object_id": ref}


def render_jsonl(trace: RunTrace) -> str:
    """steptrace's own record of a run (docs/guides/exports.md, "jsonl")."""
    run = trace.run
    record = run_fields(run)
    record.update({
        "program": {"code": run["code"], "entry": run["entry"], "shape": run["shape"],
                    "test": run["test"]},
        "input": run["input"], "chain": run["chain"], "stdin": run["stdin"],
        "call": call_text(run["entry"], run["input"], run["shape"], run["chain"]),
        **{name: run[name] for name in (
            "output", "output_type", "output_truncated", "exception_type",
            "exception_message", "expected", "output_matches", "note", "stdout",
            "line_steps", "instruction_steps", "calls", "max_depth", "n_steps",
            "settrace_line_steps")},
        "objects": [{"object_id": object_id, "type": type_, "step": step}
                    for object_id, type_, step in trace.objects],
        "settrace_lines": [{"step": step, "func": func, "line": line, "depth": depth,
                            "frame": frame}
                           for step, func, line, depth, frame in trace.settrace_lines],
        "steps": []})
    for state in replay(trace):
        number, event, func, line, depth, frame = state.step
        record["steps"].append({
            "step": number, "event": event, "func": func, "line": line, "depth": depth,
            "frame": frame,
            "locals": {name: value[0] for name, value in state.frame.locals.items()},
            "changes": [{"var": var, **_value(rest)} for var, *rest in state.changes],
            "attributes": [{"object_id": object_id, "attr": attr, "value": value,
                            "type": type_, "truncated": truncated, "ref_id": ref_id}
                           for object_id, attr, value, type_, truncated, ref_id
                           in state.attribute_changes],
            "globals": [{"name": name, **_value(rest)} for name, *rest in state.global_changes]})
    return _dumps(record)


# ====================================================================== cwm
# CWM's trace tokens (PROMPTING_GUIDE.md, "Trace Prediction Tokens").
CWM_FRAME = "<|frame_sep|>"
CWM_ACTION = "<|action_sep|>"
CWM_RETURN = "<|return_sep|>"
CWM_CALL = "<|call_sep|>"
CWM_LINE = "<|line_sep|>"
CWM_EXCEPTION = "<|exception_sep|>"
CWM_ARG = "<|arg_sep|>"
CWM_CONTEXT = "<|trace_context_start|>"
CWM_END = "<|end_of_text|>"
CWM_START_MARKER = "  # << START_OF_TRACE"
CWM_UNCHANGED = ".."
# steptrace's events as the sys.settrace events CWM's frames are: a generator's yield is
# a return and its resumption (or a throw into it) a call, as settrace reports them; an
# exception raised in or propagating into a frame is an exception, and the frame it
# unwinds ends with a return of None, as settrace's ``return`` event of an unwound frame.
CWM_EVENTS = {"call": "call", "resume": "call", "throw": "call", "line": "line",
              "return": "return", "yield": "return", "raise": "exception",
              "unwind": "return"}
_CWM_TOKENS = {"call": CWM_CALL, "line": CWM_LINE, "return": CWM_RETURN,
               "exception": CWM_EXCEPTION}


def cwm_frames(trace: RunTrace) -> list[dict]:
    """The run's CWM frames: ``event`` (call, line, return, exception), ``locals`` (call
    and line frames: the frame's locals as JSON strings of their reprs, ``".."`` for one
    unchanged since the previous frame when that frame was a call or line frame of the
    same activation; None for return and exception frames), ``source`` (the line's
    text), ``line``, and ``arg`` (return and exception frames: the value's repr)."""
    lines = source_lines(trace.run["code"])
    frames: list[dict] = []
    previous: tuple[int, str] | None = None  # (activation, CWM event) of the last frame
    for state in replay(trace):
        _number, event, _func, line, _depth, frame_id = state.step
        kind = CWM_EVENTS.get(event, "line")
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        entry = {"event": kind, "locals": None, "source": source, "line": line, "arg": None}
        if kind in ("call", "line"):
            changed = {change[0] for change in state.changes}
            diff = previous is not None and previous[0] == frame_id and \
                previous[1] in ("call", "line") and kind == "line"
            entry["locals"] = {name: (CWM_UNCHANGED if diff and name not in changed else value[0])
                               for name, value in state.frame.locals.items()}
        elif event == "unwind":
            entry["arg"] = "None"
        else:
            entry["arg"] = state.value[0] if state.value is not None else "None"
        frames.append(entry)
        previous = (frame_id, kind)
    return frames


def cwm_context(trace: RunTrace) -> str:
    """The program with CWM's ``# << START_OF_TRACE`` marker on the line of the run's
    first step (the entry's ``def`` line; a script's first line), a line of the program a
    line: line breaks Python does not end a line at (a string literal's U+2028) are
    escaped (:func:`line_text`)."""
    lines = [line_text(line) for line in source_lines(trace.run["code"])]
    if trace.steps and 0 < trace.steps[0][3] <= len(lines):
        lines[trace.steps[0][3] - 1] += CWM_START_MARKER
    return "\n".join(lines) + "\n"


def _cwm_json(value) -> str:
    """JSON text in a CWM trace, on one line (:func:`json_text`): ``<|`` inside a string
    (a program's repr can hold ``<|frame_sep|>``) is written ``<\\u007c``, the same JSON
    value, so no value can spell one of the trace's tokens."""
    return json_text(value).replace("<|", "<\\u007c")


def cwm_frame_text(frame: dict) -> str:
    """One frame in CWM's wire format, on one line (the source line's own line breaks
    escaped: :func:`line_text`)."""
    text = _CWM_TOKENS[frame["event"]]
    if frame["locals"] is not None:
        text += _cwm_json(frame["locals"])
    text += CWM_ACTION + line_text(frame["source"])
    if frame["arg"] is not None:
        text += CWM_ARG + _cwm_json(frame["arg"])
    return text + CWM_FRAME


def render_cwm(trace: RunTrace) -> str:
    """A run as CWM trace frames (docs/guides/exports.md, "cwm")."""
    run = trace.run
    frames = cwm_frames(trace)
    finished = run["status"] in ("ok", "exception")
    context = cwm_context(trace)
    text = (CWM_CONTEXT + context + CWM_FRAME
            + "".join(cwm_frame_text(frame) for frame in frames) + (CWM_END if finished else ""))
    record = run_fields(run)
    record.update({"call": call_text(run["entry"], run["input"], run["shape"], run["chain"]),
                   "context": context, "text": text, "frames": frames})
    return _dumps(record)


# ====================================================================== scratchpad
def _state_text(locals_: dict) -> str:
    """``{"x": 3, "s": 'ab'}``: the names as JSON strings, the values as their reprs
    (a repr cut to ``--max-repr`` ends with ``…``)."""
    return "{" + ", ".join(f"{json.dumps(name, ensure_ascii=False)}: {value[0]}"
                           + ("…" if value[2] else "")
                           for name, value in locals_.items()) + "}"


def _lines(lines: list[str]) -> str:
    """Lines of a text format, each escaped (:func:`line_text`), each ended by ``\\n``."""
    return "".join(line_text(line) + "\n" for line in lines)


def scratchpad_prompt(run: dict) -> str:
    """What the trace is asked for: the program (its lines as Python numbers them) and
    how it is run, a line of text a line."""
    program = source_lines(run["code"])
    while program and program[-1] == "":
        program.pop()
    if run["shape"] == "script":
        return _lines(["Consider the following Python program:", "", *program, "",
                       f"It runs with stdin {run['input']!r}.", "What is the execution trace?"])
    return _lines(["Consider the following Python function:", "", *program, "",
                   "output = " + call_text(run["entry"], run["input"], run["shape"], run["chain"]),
                   "What is the execution trace?"])


def scratchpad_target(trace: RunTrace) -> str:
    """The trace as scratchpad text: ``[BEGIN]``, then per ``line`` step the state of its
    frame as the line finds it (``state: {...}``) and the line (``line: ...``), per
    ``return`` the state and ``return: VALUE``, per ``raise`` ``exception: VALUE``,
    per ``yield`` ``yield: VALUE``, then ``[DONE]`` when the run finished. Each line is
    escaped (:func:`line_text`): no value or source text starts a line."""
    lines = source_lines(trace.run["code"])
    out = ["[BEGIN]"]
    for state in replay(trace):
        _number, event, _func, line, _depth, _frame = state.step
        value = state.value[0] if state.value is not None else "None"
        if event == "line":
            source = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            out += [f"state: {_state_text(state.frame.locals)}", f"line: {source}"]
        elif event == "return":
            out += [f"state: {_state_text(state.frame.locals)}", f"return: {value}"]
        elif event in ("raise", "yield"):
            out.append(f"{'exception' if event == 'raise' else 'yield'}: {value}")
    if trace.run["status"] in ("ok", "exception"):
        out.append("[DONE]")
    return _lines(out)


def render_scratchpad(trace: RunTrace) -> str:
    """A run as a scratchpad trace (docs/guides/exports.md, "scratchpad")."""
    run = trace.run
    record = run_fields(run)
    prompt, target = scratchpad_prompt(run), scratchpad_target(trace)
    record.update({"prompt": prompt, "target": target, "text": prompt + target})
    return _dumps(record)


# ====================================================================== lines
def render_lines(trace: RunTrace) -> str:
    """A run's line events alone (docs/guides/exports.md, "lines"): ``[line, depth,
    function]`` per event in order, of the steps or of the settrace view (``view``)."""
    run = trace.run
    steps = trace.steps
    if trace.view == "settrace":
        steps = settrace_view(steps, trace.settrace_lines)
    record = run_fields(run)
    record.update({"call": call_text(run["entry"], run["input"], run["shape"], run["chain"]),
                   "view": trace.view,
                   "lines": [[line, depth, func] for _, event, func, line, depth, _ in steps
                             if event == "line"]})
    return _dumps(record)


def _render_pythontutor(trace: RunTrace) -> str:
    from steptrace.analytics._pythontutor import render_pythontutor
    return render_pythontutor(trace)


FORMATS: dict[str, Format] = {format.name: format for format in (
    Format("jsonl", "steptrace's own record: program, call, outcome, objects, every step "
                    "with its frame's full locals and the deltas", render_jsonl),
    Format("pythontutor", "Python Tutor's execution trace JSON (code, trace, heap)",
           _render_pythontutor),
    Format("cwm", "Meta CWM execution-trace frames (observation: locals, action: line)",
           render_cwm),
    Format("scratchpad", "line-by-line state text (Nye et al. 2021 scratchpads)",
           render_scratchpad),
    Format("lines", "the line events alone, of the steps or of the settrace view (--lines)",
           render_lines, line_views=True),
)}
