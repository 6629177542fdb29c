"""Every task's answer re-derived from its prompt's text and the program alone, no store.

Each prompt is read as a model reads it: the program (from its numbered lines, or its
code block), how it is run (the call's text, a script and its stdin), and the question's
own words (the line, the function whose executions count, k, the variable or attribute
path, the condition). The program is then run so, in a plain CPython 3.14 of the tests'
own (tests/helpers/native.py), and the answer is worked out from what that run did, by
the rules the prompt states: lines as CPython 3.14 reports them, values written by the
rule the prompt spells out (``$values``: tests/helpers/native_guest/native_guest.py writes
them), an exception's ``type(e).__name__`` and ``str(e)``. A task whose stored answer is
not the one so derived fails, whatever the store holds.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

# ------------------------------------------------------------------ the question's words
FUNCTION_WORDS = (r"`[^`\n]+`|the (?:lambda|generator expression) on line \d+|"
                  r"the script's top level")
# What a state question names: a local of the function, or an attribute path through one.
WHAT = (r"(?:the (?:local|global) variable `(?P<var>[^`\n]+)` of (?P=function)|"
        r"`(?P<path>[^`\n]+)` \(where `(?P<root>[^`\n]+)` is the (?:local|global) variable "
        r"of (?P=function)\))")
QUESTIONS = {
    "state": re.compile(
        r"Count the executions of line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) by "
        rf"(?P<function>{FUNCTION_WORDS}) during this call, .* What is the value of {WHAT} "
        r"right after the (?P<k>\d+)(?:st|nd|rd|th) execution of line (?P=line), in the call"),
    "type": re.compile(
        r"Count the executions of line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) by "
        rf"(?P<function>{FUNCTION_WORDS}) during this call, .* What is the type of {WHAT} "
        r"right after the (?P<k>\d+)(?:st|nd|rd|th) execution of line (?P=line), in the call"),
    "alias": re.compile(
        r"Count the executions of line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) by "
        rf"(?P<function>{FUNCTION_WORDS}) during this call, .* Right after the "
        r"(?P<k>\d+)(?:st|nd|rd|th) execution of line (?P=line), in the call of (?P=function) "
        r"that executed it, do `(?P<var>[^`\n]+)` and `(?P<other>[^`\n]+)` refer to the same "
        r"object"),
    "next_line": re.compile(
        r"Count the executions of line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) by "
        rf"(?P<function>{FUNCTION_WORDS}) during this call, .* After the "
        r"(?P<k>\d+)(?:st|nd|rd|th) execution of line (?P=line), which line of (?P=function) "
        r"runs next in the same call"),
    "state_any": re.compile(
        r"Line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) is run several times by "
        rf"(?P<function>{FUNCTION_WORDS}) during this call\. .* Which values does {WHAT} "
        r"have right after line (?P=line) runs, over all these executions\?"),
    "next_line_any": re.compile(
        r"Line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) is run several times by "
        rf"(?P<function>{FUNCTION_WORDS}) during this call\. .* Over all these executions, "
        r"which lines of (?P=function) run right after it in the same call"),
    "line_count": re.compile(
        rf"How many times does (?P<function>{FUNCTION_WORDS}) run line (?P<line>\d+) "
        r"\(`(?P<text>[^\n]*)`\) during this call, counting every call of (?P=function)\?"),
    "coverage": re.compile(
        r"Does line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) run at least once during this call\?"),
    "branch": re.compile(
        r"The condition `(?P<condition>[^\n]*)` on line (?P<line>\d+) \(`(?P<text>[^\n]*)`\) "
        r"is evaluated during this call, .* is it true at its (?P<k>\d+)(?:st|nd|rd|th) "
        r"evaluation\?"),
}
# The whole-run kinds: the question each prompt asks, word for word.
WHOLE_RUN = {
    "steps": "How many line steps does the call take?",
    "trace": "List the lines the call executes, in order, each with its call depth",
    "exception": "Does the call end by raising an exception out of",
    "error": "The call raises an exception out of",
    "output_type": "What is the type of the value the call returns?",
    "stdout": "What does the program print to its standard output during this run?",
    "instruction_steps": "How many bytecode instructions does the call execute, as CPython "
                         "3.14 runs it?",
}


def parse_question(kind: str, prompt: str) -> dict | None:
    """The question a prompt asks, in its own words: line, function words, k, variable,
    condition (None for whole-run kinds). Only the text after the code block is read."""
    if kind not in QUESTIONS:
        return None
    question = prompt.rpartition("\n```\n")[2]
    match = QUESTIONS[kind].search(question)
    assert match, (kind, question)
    found = match.groupdict()
    found["line"] = int(found["line"])
    if found.get("k") is not None:
        found["k"] = int(found["k"])
    return found


# ------------------------------------------------------------------ the program and its run
@dataclass(frozen=True)
class Program:
    """What a prompt says is run: the code and how (a call's text, or a script), with the
    standard input it says."""

    code: str
    shape: str
    call: str | None
    stdin: str | None


def numbered_code(prompt: str) -> str:
    """The program of a prompt that shows its numbered lines (``N | text``), checked to
    be numbered 1, 2, ... from the first."""
    body = prompt.split("\n```\n", 1)[1]
    lines = []
    for number, line in enumerate(body.split("\n"), start=1):
        if line == "```":
            break
        match = re.fullmatch(r" *(\d+) \|(?: (.*))?", line)
        assert match and int(match[1]) == number, (number, line)
        lines.append(match[2] or "")
    return "\n".join(lines) + "\n"


def invocation(prompt: str) -> tuple[str, str | None, str | None]:
    """(shape, call text, stdin) of the prompt's invocation sentence."""
    after = prompt.split("\n```\n\n", 1)[1]
    stdin = None
    match = re.match(r"It is called as `(.*)`(\.|, with an empty standard input\.|, with this "
                     r"standard input:\n\n```\n)", after)
    if match:
        shape, call = "call", match[1]
    else:
        match = re.match(r"It is run as a script(, with an empty standard input\.|, with this "
                         r"standard input:\n\n```\n)", after)
        assert match, after[:200]
        shape, call = "script", None
    if match[0].endswith("```\n"):
        stdin = after[match.end():].split("\n```\n", 1)[0] + "\n"
    elif "empty standard input" in match[0]:
        stdin = ""
    return shape, call, stdin


def program_of(kind: str, style: str, prompt: str) -> tuple[Program, dict]:
    """The program a prompt shows and how it is run, and for output and input prompts
    what they show besides (``entry``, ``output``)."""
    extra: dict = {}
    if style == "cruxeval":
        block = prompt.split("```python\n", 1)[1].rsplit("\n```\n", 1)[0]
        code, _, assertion = block.rpartition("\n\n")
        if kind == "output":
            call = re.fullmatch(r"assert (.*) == \?\?", assertion)[1]
            return Program(code + "\n", "call", call, None), extra
        match = re.fullmatch(r"assert (\w+)\(\?\?\) == (.*)", assertion)
        extra.update(entry=match[1], output=match[2])
        return Program(code + "\n", "call", None, None), extra
    if kind == "output":
        code, _, rest = prompt.split("```python\n", 1)[1].rpartition(
            "\n```\n\nWhat does the call `")
        return Program(code + "\n", "call", rest.rsplit("` return?", 1)[0], None), extra
    if kind == "input":
        code, _, rest = prompt.split("```python\n", 1)[1].rpartition(
            "\n```\n\nFind arguments for `")
        entry, _, rest = rest.partition("` such that the call returns this value:\n\n```\n")
        extra.update(entry=entry, output=rest.split("\n```\n\nAnswer with", 1)[0])
        return Program(code + "\n", "call", None, None), extra
    if kind in WHOLE_RUN:
        assert WHOLE_RUN[kind] in prompt, (kind, prompt)
    shape, call, stdin = invocation(prompt)
    return Program(numbered_code(prompt), shape, call, stdin), extra


# ------------------------------------------------------------------ answers from a run
@dataclass
class Run:
    """What the native run of a program did, read for questions."""

    report: dict
    executions: dict = field(default_factory=dict)  # (qualname, line) -> [event index]

    def __post_init__(self) -> None:
        for index, (event, qualname, line, _, _) in enumerate(self.report["events"]):
            if event == "line":
                self.executions.setdefault((qualname, line), []).append(index)

    def lines(self) -> list[tuple[int, int]]:
        return [(line, depth) for event, _, line, _, depth in self.report["events"]
                if event == "line"]

    def by(self, words: str, line: int) -> list[int]:
        """The executions of ``line`` by the function the prompt's words name."""
        if words.startswith("`"):
            return self.executions.get((words.strip("`"), line), [])
        if words == "the script's top level":
            return self.executions.get(("<module>", line), [])
        kind = re.fullmatch(r"the (lambda|generator expression) on line (\d+)", words)
        assert kind and int(kind[2]) == line, words
        tag = {"lambda": "<lambda>", "generator expression": "<genexpr>"}[kind[1]]
        found = [indices for (qualname, at), indices in self.executions.items()
                 if at == line and qualname.rsplit(".", 1)[-1] == tag]
        assert len(found) <= 1, (words, found)
        return found[0] if found else []

    def after(self, index: int) -> dict:
        found = self.report["after"].get(str(index))
        assert isinstance(found, dict), (index, found)  # the line finished (no yield)
        return found

    def next_line(self, index: int) -> str | None:
        """What the frame of event ``index`` did next: a line, ``return`` or ``raise``."""
        events = self.report["events"]
        frame = events[index][3]
        for event, _, line, at, _ in events[index + 1:]:
            if at != frame:
                continue
            if event == "line":
                return str(line)
            if event in ("return", "unwind"):
                return "return" if event == "return" else "raise"
        return None


def watched(questions: list[tuple[str, dict]]) -> dict[int, list[str]]:
    """Line -> the names and paths the value questions ask about."""
    found: dict[int, set[str]] = defaultdict(set)
    for kind, q in questions:
        if kind in ("state", "state_any", "type", "alias"):
            found[q["line"]].add(q["var"] or q["path"])
            if q.get("other"):
                found[q["line"]].add(q["other"])
    return {line: sorted(names) for line, names in found.items()}


def derived(kind: str, q: dict | None, run: Run, extra: dict) -> str:
    """The answer of a question (``q``: its words; None for a whole-run kind) by the
    rules its prompt states, from the native run."""
    report = run.report
    if kind == "output":
        assert report["status"] == "ok", report["exception_message"]
        return report["output"]
    if kind == "output_type":
        return report["output_type"]
    if kind == "steps":
        return str(len(run.lines()))
    if kind == "trace":
        return json.dumps([list(pair) for pair in run.lines()])
    if kind == "instruction_steps":
        return str(report["instructions"])
    if kind == "exception":
        return report["exception_type"] or "none"
    if kind == "error":
        assert report["status"] == "exception"
        message = report["exception_message"]
        return f"{report['exception_type']}: {message}" if message else report["exception_type"]
    if kind == "stdout":
        return report["stdout"]
    if kind == "coverage":
        return json.dumps(any(line == q["line"] for line, _ in run.lines()))
    if kind == "branch":
        return json.dumps(report["branches"][f"{q['line']}:{q['condition']}"][q["k"] - 1])
    executions = run.by(q["function"], q["line"])
    if kind == "line_count":
        return str(len(executions))
    if kind == "next_line_any":
        found = {run.next_line(index) for index in executions}
        return json.dumps(sorted(int(a) for a in found if a.isdigit())
                          + sorted(a for a in found if not a.isdigit()))
    if kind == "state_any":
        values = [run.after(index)[q["var"] or q["path"]] for index in executions]
        assert all(value is not None for value in values)
        return json.dumps(sorted({value[0] for value in values}), ensure_ascii=False)
    assert q["k"] <= len(executions), (kind, q, len(executions))
    index = executions[q["k"] - 1]
    if kind == "next_line":
        return run.next_line(index)
    state = run.after(index)
    value = state[q["var"] or q["path"]]
    if kind == "state":
        return "unbound" if value is None else value[0]
    if kind == "type":
        return value[1]
    assert kind == "alias"
    other = state[q["other"]]
    return json.dumps(value[2] == other[2])


def _text(answer: str, kind: str) -> object:
    """An answer as compared: sets of an ``*_any`` answer in any order."""
    if kind in ("state_any", "next_line_any"):
        return sorted(json.loads(answer), key=str)
    return answer


def rederive(tasks: list[dict], native) -> Counter:
    """Assert that every task's answer is the one its prompt and program give, run in
    ``native`` (tests/helpers/native.py); the tasks checked, by kind. ``tasks``: records
    with ``kind``, ``prompt``, ``prompt_style`` and ``answer``."""
    by_program: dict[Program, list[tuple[dict, dict | None, dict]]] = defaultdict(list)
    for task in tasks:
        program, extra = program_of(task["kind"], task["prompt_style"], task["prompt"])
        by_program[program].append((task, parse_question(task["kind"], task["prompt"]), extra))
    checked: Counter = Counter()
    for program, asked in by_program.items():
        inputs = [(task, extra) for task, _, extra in asked if task["kind"] == "input"]
        for task, extra in inputs:  # the call of the answer's arguments gives the output
            report = native.run({"code": program.code, "shape": "call",
                                 "call": f"{extra['entry']}({task['answer']})",
                                 "expected": extra["output"]})
            assert report["status"] == "ok" and report["equal"] is True, (task, report)
            checked[task["kind"]] += 1
        asked = [item for item in asked if item[0]["kind"] != "input"]
        if not asked:
            continue
        questions = [(task["kind"], q) for task, q, _ in asked if q is not None]
        conditions = sorted({(q["line"], q["condition"]) for kind, q in questions
                             if kind == "branch"})
        run = Run(native.run({"code": program.code, "shape": program.shape,
                              "call": program.call, "stdin": program.stdin,
                              "watch": watched(questions), "conditions": conditions}))
        for task, q, extra in asked:
            if q is not None:
                lines = program.code.split("\n")
                assert lines[q["line"] - 1].strip() == q["text"], (q, task["prompt"])
            expected = derived(task["kind"], q, run, extra)
            assert _text(task["answer"], task["kind"]) == _text(expected, task["kind"]), (
                task["kind"], task["answer"], expected, q, program.call)
            checked[task["kind"]] += 1
    return checked
