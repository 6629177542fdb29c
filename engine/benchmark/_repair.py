"""The repair loop (CodeBenchGen-style, Xie et al. 2024): examples that do not run as
given are revised by a model, with the sandbox's feedback, until each runs and its tests
pass, in at most ``rounds`` revisions.

An example is a corpus record (docs/guides/corpus.md). Its **tests** are fixed by the
record, once, as one of three forms:

* ``test``: the record has ``test`` code; its entry (``Case.test_x``) is the test run as
  the test driver. The model may revise the program and the test code, not the entry.
* ``output``: the record has an expected ``output`` (or ``outputs``, some may be null).
  The expected outputs are the specification: the model revises the program only.
* ``write``: a call-shaped record with neither: the model must write the tests, test code
  whose ``TestExample.test_example`` is then the entry (the record's inputs, calls and
  expected outputs are dropped: the repaired example is a test driver). A script with no
  expected output cannot be repaired (nothing says what it should print).

An example **passes** when every one of its runs is ``ok`` and its tests hold:

* ``output``: each expected output matches (the guest's ``output_matches``; a script's
  stdout as ``trace`` judges it) and, for a call whose expected output is a Python
  literal, the returned value's repr is a literal equal to it, compared on the host
  (``ast.literal_eval`` of both): a program cannot pass with an object whose ``__eq__``
  says yes to everything.
* ``test`` and ``write``: the test method (the entry) holds at least one ``assert``
  statement or ``self.assert*(...)`` call in its own body (read by ``ast`` on the host,
  never run there), and the test ran at least one line of the program (``line_steps``
  > 0: a test that never calls the program tests nothing). This is a minimum, not a
  proof: it refuses tests that assert nothing, not a reply written to defeat it.

The loop: round 0 runs every example as given, in the sandbox (the guest with the lock's
packages, if one is given). An example that passes is done without asking. Each further
round sends every unfinished example's current version (the newest that parsed), its
tests and the feedback of its last round (how its runs failed: status, exception, the
last program line run, the end of stdout; or why the reply could not be used) to the
model, parses the reply strictly (``[PYTHON]...[/PYTHON]``, plus ``[TEST]...[/TEST]``
for the ``test`` and ``write`` forms and never for ``output``), and runs the revision.
After ``rounds`` revisions without passing an example is given up.

Model output is untrusted code: it only ever runs in the sandbox; on the host it is only
parsed by ``ast``. Prompts and replies are capped (``MAX_CODE``, ``MAX_REPLY``, the
feedback's quoted texts).

Every round of every example is one line of the log (JSONL, appended): the request and
response (none for round 0), the example it ran, the parse error, the outcome. A re-run
with the same log resumes: done and given-up examples are not asked again, the others
continue from their last logged round; a round whose request failed (after the client's
retries) is asked again; a larger ``rounds`` continues given-up examples. A round is
logged once its revision has run: a reply received but not yet run when the process dies
is asked again. The log belongs to one corpus, model and guest: an example whose record
changed, another model, or another package lock is an error naming the log.

The output, rebuilt from the log at the end of every run, is a corpus of the examples
that are done (in corpus order), each the record as repaired, with ``rounds`` (the round
it passed at, 0 for as given), ``repair`` (the model, the original record's SHA-256) and,
for a revised one, ``model_written`` (true), so that ``steptrace trace`` never runs the
model's code in batch isolation.

Every revision runs in job isolation (a fresh instance per run): a reply never shares an
interpreter with another example's, nor with the next round's.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import string
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from steptrace.corpus._formats import CorpusError, Job, jobs_from_record, stdout_matches
from steptrace.corpus._meta import MODEL_WRITTEN
from steptrace.benchmark._log import drop_partial_line, log_records
from steptrace.benchmark._missing import missing_feedback
from steptrace.corpus._text import NotUtf8Error, decode_line, user_file
from steptrace.errors import InputError
from steptrace.predictions._options import PredictOptions
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import PackageLock

REPAIR_KIND = "repair"
DEFAULT_ROUNDS = 3
FORMS = ("test", "output", "write")
WRITE_ENTRY = "TestExample.test_example"  # the test a `write` example's model writes
MAX_CODE = 16_000      # characters of a program plus its test code, given or accepted
MAX_REPLY = 40_000     # characters of a reply that is parsed at all
MAX_QUOTE = 600        # characters of one message, output or input quoted in a prompt
MAX_STDOUT = 1_000     # last characters of a run's stdout quoted
MAX_RUNS_SHOWN = 3     # failing runs described in the feedback
CHUNK = 8              # guest requests per sandbox chunk
SOURCE = "<repair>"    # the programs' source while they are checked

Progress = Callable[[int, int], None]


class RepairError(InputError):
    """Bad repair settings, or a log written for another corpus, model or guest."""


# ================================================================ examples
@dataclass(frozen=True)
class Example:
    """One record to repair: its id, the record as read, its tests' form and the
    SHA-256 of the record (what the log is checked against)."""

    id: str
    record: dict
    form: str
    sha256: str

    @property
    def code(self) -> str:
        return self.record["code"]

    @property
    def test(self) -> str | None:
        return self.record.get("test")

    @property
    def entry(self) -> str:
        """The test method a test driver runs (``test``, ``write``), else the record's."""
        if self.form == "write":
            return WRITE_ENTRY
        return self.record.get("entry") or "f"

    def revised(self, code: str, test: str | None) -> dict:
        """The record of a revision: the program (and test code) replaced; a ``write``
        example becomes a test driver of ``TestExample.test_example``."""
        record = {**self.record, "id": self.id, "code": code}
        if self.form == "test":
            record["test"] = test
        elif self.form == "write":
            for key in ("input", "inputs", "output", "outputs", "calls", "entry"):
                record.pop(key, None)
            if test is not None:
                record.update(entry=WRITE_ENTRY, input="", test=test)
            else:  # round 0 of a `write` example: the record as given
                record = {**self.record, "id": self.id, "code": code}
        return record


def _record_sha256(record: Mapping) -> str:
    text = json.dumps(record, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _form(record: dict) -> str:
    if record.get("test") is not None:
        return "test"
    outputs = record.get("outputs") if "inputs" in record else [record.get("output")]
    if any(output is not None for output in outputs or []):
        return "output"
    if record.get("shape") == "script":
        raise CorpusError("a script with no expected output cannot be repaired (nothing "
                          "says what it should print)")
    return "write"


def example_from_record(record: object, default_id: str) -> Example:
    """The example of one corpus record; CorpusError naming what is wrong with it."""
    jobs_from_record(record, SOURCE, default_id)  # the corpus format's own checks
    assert isinstance(record, dict)
    size = len(record["code"]) + len(record.get("test") or "")
    if size > MAX_CODE:
        raise CorpusError(f"too long to repair: {size:,} characters of code and test code "
                          f"(at most {MAX_CODE:,})")
    sample_id = record.get("id")
    return Example(default_id if sample_id is None else str(sample_id), record,
                   _form(record), _record_sha256(record))


def read_examples(corpus: str | os.PathLike | Iterable[Mapping[str, Any]]
                  ) -> tuple[list[Example], list[str]]:
    """The examples of a JSONL corpus file (or records in memory), and a one-line message
    for each record that cannot be repaired (a bad record, a script with no expected
    output, one too long, an id seen before), which is skipped."""
    examples: list[Example] = []
    errors: list[str] = []
    seen: dict[str, str] = {}
    for where, default_id, record in _records(corpus):
        try:
            if isinstance(record, _Unreadable):
                raise CorpusError(record.message)
            example = example_from_record(record, default_id)
        except CorpusError as exc:
            errors.append(f"{where}: {exc}")
            continue
        if example.id in seen:
            errors.append(f"{where}: id {example.id!r} was used before ({seen[example.id]}); "
                          "the log needs one example per id")
            continue
        seen[example.id] = where
        examples.append(example)
    return examples, errors


@dataclass(frozen=True)
class _Unreadable:
    """A line that is no record (not UTF-8, not JSON): its message."""

    message: str


def _records(corpus) -> Iterable[tuple[str, str, object]]:
    """(where, default id, record) of each record, an ``_Unreadable`` in place of a line
    that is not one."""
    if isinstance(corpus, (str, os.PathLike)):
        path = Path(corpus)
        if not path.is_file():
            raise CorpusError(f"corpus not found: {path} (repair reads a JSONL file)")
        with user_file(path, "read"):
            lines = path.read_bytes().split(b"\n")
        for number, raw in enumerate(lines, start=1):
            where = f"{path}:{number}"
            try:
                line = decode_line(raw, path, number).rstrip("\r")
            except NotUtf8Error as exc:
                yield where, str(number), _Unreadable(str(exc).removeprefix(f"{where}: "))
                continue
            if not line.strip():
                continue
            try:
                yield where, str(number), json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, str(number), _Unreadable(f"not valid JSON ({exc.msg} at column "
                                                      f"{exc.colno})")
        return
    if isinstance(corpus, (bytes, str, Mapping)) or not isinstance(corpus, Iterable):
        raise CorpusError("a corpus to repair is a JSONL file or a list of records, not "
                          f"{type(corpus).__name__}")
    for number, record in enumerate(corpus, start=1):
        yield f"record {number}", str(number), record


# ================================================================ replies
@dataclass(frozen=True)
class Revision:
    code: str
    test: str | None


_BLOCK = {name: re.compile(rf"\[{name}\]\n?(.*?)\n?\[/{name}\]", re.DOTALL)
          for name in ("PYTHON", "TEST")}


def parse_reply(text: str | None, form: str) -> Revision | str:
    """The revision in a reply, or why it cannot be used (a one-line message, which is
    the next round's feedback): exactly one ``[PYTHON]`` block, and exactly one
    ``[TEST]`` block for the ``test`` and ``write`` forms and none for ``output``; text
    around the blocks is ignored."""
    if not text or not text.strip():
        return "the reply is empty"
    if len(text) > MAX_REPLY:
        return f"the reply is longer than {MAX_REPLY:,} characters ({len(text):,})"
    blocks = {}
    for name, pattern in _BLOCK.items():
        found = pattern.findall(text)
        opened = text.count(f"[{name}]")
        if len(found) > 1 or opened > 1:
            return f"the reply has {max(len(found), opened)} [{name}] blocks; give one"
        if opened and not found:
            return f"the reply's [{name}] block is not closed by [/{name}]"
        blocks[name] = found[0] if found else None
    code, test = blocks["PYTHON"], blocks["TEST"]
    if code is None or not code.strip():
        return "the reply has no program in a [PYTHON] ... [/PYTHON] block"
    if form == "output" and test is not None:
        return ("the reply has a [TEST] block, but this example's tests are its expected "
                "outputs, which do not change: give the program only")
    if form != "output" and (test is None or not test.strip()):
        return "the reply has no test code in a [TEST] ... [/TEST] block"
    code, test = _ended(code), None if test is None else _ended(test)
    size = len(code) + len(test or "")
    if size > MAX_CODE:
        return f"the revised example is {size:,} characters; at most {MAX_CODE:,}"
    return Revision(code, test)


def _ended(text: str) -> str:
    """Block text ends with a line break, as a source file does."""
    return text if text.endswith("\n") else text + "\n"


# ================================================================ judging a run
def assertion_problem(test: str, entry: str) -> str | None:
    """Why the test method ``entry`` (``Case.test_x``) of ``test`` asserts nothing, or
    None: its own body (not nested functions or classes) must hold an ``assert``
    statement or a ``self.assert*(...)`` call. Test code that does not parse is left to
    the run to report."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    case, _, method = entry.partition(".")
    found = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == case:
            for item in node.body:
                if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and item.name == method):
                    found = item  # the last definition is the one the class holds
    if found is None:
        return f"the test code defines no test method {entry} (class {case}, method {method})"
    self_name = found.args.args[0].arg if found.args.args else "self"
    pending: list[ast.AST] = list(found.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Assert):
            return None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == self_name
                and node.func.attr.startswith("assert")):
            return None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        pending.extend(ast.iter_child_nodes(node))
    return (f"the test {entry} asserts nothing: its body has no assert statement and no "
            f"{self_name}.assert*(...) call")


def _literal(text: str | None) -> tuple[bool, object]:
    if text is None:
        return False, None
    try:
        return True, ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _cap(text: object, most: int = MAX_QUOTE) -> str:
    text = str(text)
    return text if len(text) <= most else text[:most] + f"... ({len(text):,} characters)"


def _tail(text: str, most: int = MAX_STDOUT) -> str:
    return text if len(text) <= most else f"...{text[-most:]}"


def describe_job(job: Job) -> str:
    """How a run calls the program, as the prompt shows it."""
    program = job.program
    if program.shape == "script":
        return f"the script, with stdin {_cap(repr(job.input))}"
    if program.test is not None and not job.input:
        return f"the test {program.entry}"
    text = f"{program.entry}({_cap(job.input)})"
    for method, arguments in job.calls or ():
        text += f".{method}({_cap(arguments)})"
    if job.stdin is not None:
        text += f" with stdin {_cap(repr(job.stdin))}"
    return text


def _run_problem(job: Job, result: dict) -> str | None:
    """Why one run fails its example's tests (None: it passes)."""
    status = result.get("status")
    if status != "ok":
        return f"ended with status {status}"
    if job.expected is None:
        return None
    if job.program.shape == "script":
        if stdout_matches(result.get("stdout"), job.expected):
            return None
        return (f"printed {_cap(repr(result.get('stdout') or ''))}, expected "
                f"{_cap(repr(job.expected))}")
    output = result.get("output")
    if result.get("output_matches") is not True:
        return f"returned {_cap(output)}, expected {_cap(job.expected)}"
    expected_is_literal, expected = _literal(job.expected)
    if expected_is_literal:
        output_is_literal, value = _literal(output)
        try:
            equal = output_is_literal and value == expected
        except (RecursionError, MemoryError):
            equal = False
        if not equal:
            return (f"returned {_cap(output)}, which is not a plain value equal to the "
                    f"expected {_cap(job.expected)} (its repr must be a Python literal)")
    return None


def judge(example: Example, jobs: list[Job], results: list[dict],
          test: str | None) -> dict:
    """The outcome of one round: ``passed``, ``status`` (the first run's that is not
    ok; else ``failed_tests`` or ``ok``), ``problem`` (why it did not pass, one line),
    ``feedback`` (the text the next prompt shows) and ``runs`` (each run's status,
    exception, output, match)."""
    lines: list[str] = []
    problems: list[str] = []
    status = next((r.get("status") for r in results if r.get("status") != "ok"), None)
    failing = 0
    for number, (job, result) in enumerate(zip(jobs, results), start=1):
        problem = _run_problem(job, result)
        if problem is None:
            continue
        problems.append(problem)
        failing += 1
        if failing > MAX_RUNS_SHOWN:
            continue
        lines.append(f"Run {number} of {len(jobs)}: {describe_job(job)} {problem}.")
        lines += _run_details(job, result)
    if failing > MAX_RUNS_SHOWN:
        lines.append(f"({failing - MAX_RUNS_SHOWN} more runs failed.)")
    if not problems and example.form != "output" and test is not None:
        problem = assertion_problem(test, jobs[0].program.entry)
        if problem is None and not all((r.get("line_steps") or 0) > 0 for r in results):
            problem = ("the test passed without running a single line of the program: "
                       "it must call the program and check what it returns")
        if problem is not None:
            problems.append(problem)
            lines.append(f"The test ran, but {problem}.")
    if not problems and example.form == "write" and test is None:
        problems.append("it has no tests")
        lines.append("Every run ended ok, but the example has no tests.")
    if not problems:
        lines.append("Every run ended ok and the tests passed.")
    else:  # every name and module it lacks at once, not one error a round
        lines += missing_feedback(jobs[0].program.code,
                                  [r.get("exception_message") for r in results])
    runs = [{"status": r.get("status"), "exception_type": r.get("exception_type"),
             "exception_message": _cap(r.get("exception_message")) if r.get(
                 "exception_message") is not None else None,
             "output": _cap(r.get("output")) if r.get("output") is not None else None,
             "output_matches": r.get("output_matches"),
             "line_steps": r.get("line_steps")} for r in results]
    if status is None:
        status = "failed_tests" if problems else "ok"
    return {"passed": not problems, "status": status,
            "problem": problems[0] if problems else None,
            "feedback": "\n".join(lines), "runs": runs}


def _run_details(job: Job, result: dict) -> list[str]:
    lines = []
    if result.get("exception_type") or result.get("exception_message"):
        lines.append(f"  {result.get('exception_type') or 'error'}: "
                     f"{_cap(result.get('exception_message') or '')}")
    if result.get("note"):
        lines.append(f"  note: {_cap(result['note'])}")
    steps = result.get("steps") or {}
    line_numbers = steps.get("line") if isinstance(steps, dict) else None
    if result.get("status") != "ok" and line_numbers:
        number = line_numbers[-1]
        source = job.program.code.split("\n")
        text = source[number - 1].strip() if 0 < number <= len(source) else ""
        lines.append(f"  the last program line it ran: line {number}: {_cap(text, 200)}")
    stdout = result.get("stdout")
    if stdout and job.program.shape != "script":
        lines.append(f"  its stdout (the end): {_tail(stdout)!r}")
    return lines


# ================================================================ prompts
def default_template_path() -> Path:
    return Path(str(resources.files("steptrace.benchmark") / "prompts" / "repair.txt"))


def _template() -> string.Template:
    return string.Template(default_template_path().read_text(encoding="utf-8"))


def _tests_text(example: Example, current: dict, jobs: list[Job]) -> str:
    if example.form == "output":
        script = jobs[0].program.shape == "script"
        calls = [f"- {describe_job(job)} must give "
                 f"{_cap(repr(job.expected) if script else job.expected)}"
                 for job in jobs if job.expected is not None]
        shown = calls[:20] + ([f"- ... and {len(calls) - 20} more"] if len(calls) > 20 else [])
        what = "print (stdout)" if script else "return"
        return ("Its tests are these runs and what they must " + what + "; they do not "
                "change:\n" + "\n".join(shown))
    if example.form == "test":
        return (f"Its tests (unittest; the test run is {example.entry}):\n[TEST]\n"
                f"{current['test']}\n[/TEST]")
    if current.get("test") is not None:
        return (f"Its tests (unittest; the test run is {WRITE_ENTRY}):\n[TEST]\n"
                f"{current['test']}\n[/TEST]")
    runs = "\n".join(f"- {describe_job(job)}" for job in jobs[:5])
    return ("It has no tests yet. It was run as:\n" + runs + "\nWrite them: test code that "
            "imports unittest and defines class TestExample(unittest.TestCase) with a "
            "method test_example that calls the program and asserts what it returns.")


def _reply_text(example: Example) -> str:
    if example.form == "output":
        return ("Reply with the whole revised program between [PYTHON] and [/PYTHON] and "
                "nothing else; no [TEST] block.")
    return ("Reply with the whole revised program between [PYTHON] and [/PYTHON], then "
            "the whole test code between [TEST] and [/TEST] (class "
            f"{example.entry.split('.')[0]}, method {example.entry.split('.')[1]}, with at "
            "least one assertion about the program's results).")


def build_prompt(example: Example, history: list[dict], rounds: int,
                 packages: PackageLock | None) -> str:
    """The prompt of the round after ``history``: the example's newest version that
    parsed, its tests, and the last round's feedback."""
    current = _current(example, history)
    jobs = jobs_from_record(current, SOURCE, example.id)
    last = history[-1]
    if last.get("parse_error"):
        feedback = (f"Your last reply could not be used: {last['parse_error']}. The program "
                    "above is the last version that could.")
        ran = next((line for line in reversed(history) if line.get("outcome")), None)
        if ran is not None:  # round 0 always ran
            feedback += "\nWhen that version ran:\n" + ran["outcome"]["feedback"]
    else:
        feedback = last["outcome"]["feedback"]
    environment = "the Python 3.14 standard library"
    if packages is not None and packages.packages:
        environment += f" and these packages: {packages}"
    return _template().substitute(
        environment=environment, id=example.id, round=len(history), rounds=rounds,
        code=current["code"].rstrip("\n"), tests=_tests_text(example, current, jobs),
        feedback=feedback, reply=_reply_text(example))


def _current(example: Example, history: list[dict]) -> dict:
    """The newest version of the example that parsed (the record as given at first)."""
    for line in reversed(history):
        if line.get("example") is not None:
            return example.revised(line["example"]["code"], line["example"].get("test"))
    return example.revised(example.code, example.test)


# ================================================================ the log
def read_log(path: Path) -> dict[str, dict[int, dict]]:
    """The newest line per (example, round) (the log's reading: _log.py)."""
    logged: dict[str, dict[int, dict]] = {}
    for record in log_records(path, _is_log_line, RepairError, "repair log"):
        logged.setdefault(record["id"], {})[record["round"]] = record
    return logged


def _is_log_line(record: object) -> bool:
    return (isinstance(record, dict) and isinstance(record.get("id"), str)
            and type(record.get("round")) is int and record["round"] >= 0)



def _append(path: Path, lines: list[dict]) -> None:
    if lines:
        with user_file(path), path.open("a", encoding="utf-8") as log:
            log.write("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
            log.flush()


def history_of(rounds: dict[int, dict]) -> list[dict]:
    """The example's rounds 0, 1, ... up to the first missing one or one whose request
    failed (asked again)."""
    history = []
    while len(history) in rounds and not rounds[len(history)].get("error"):
        history.append(rounds[len(history)])
    return history


def _check_log(examples: list[Example], logged: dict[str, dict[int, dict]], path: Path,
               model: str, packages: str | None) -> None:
    for example in examples:
        for line in logged.get(example.id, {}).values():
            if line.get("record_sha256") != example.sha256:
                raise RepairError(
                    f"{path} holds example {example.id!r} of another record (its code, tests "
                    "or inputs changed): use another --log for this corpus")
            if line["round"] > 0 and line.get("model") != model:
                raise RepairError(
                    f"{path} holds example {example.id!r} revised by model "
                    f"{line.get('model')!r}, not {model!r}: use another --log for another model")
            if line.get("packages") != packages:
                raise RepairError(
                    f"{path} holds example {example.id!r} run in a guest with "
                    f"{_guest_name(line.get('packages'))}, not {_guest_name(packages)}: "
                    "use the same --packages, or another --log")


def _guest_name(digest: str | None) -> str:
    return f"the packages of lock {digest[:12]}" if digest else "no packages"


# ================================================================ running
@dataclass(frozen=True)
class RepairOptions:
    rounds: int = DEFAULT_ROUNDS
    log_path: Path | None = None           # None: log_path_for(out)
    packages: PackageLock | None = None    # the guest with these packages
    workers: int | None = None             # None: one per CPU; 0: in this process
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise RepairError("rounds must be at least 1")
        if self.workers is not None and self.workers < 0:
            raise RepairError("workers must be 0 or more")


def log_path_for(out: Path) -> Path:
    """``repaired.jsonl`` → ``repaired.log.jsonl``."""
    return out.with_name(out.name.removesuffix(".jsonl") + ".log.jsonl")


@dataclass
class RepairSummary:
    corpus: str
    out: str
    log: str
    model: str
    rounds: int
    examples: int = 0
    bad_records: list[str] = field(default_factory=list)
    done: int = 0              # in the output: passed at some round
    as_given: int = 0          # of those, at round 0 (never sent)
    fixed: dict[int, int] = field(default_factory=dict)  # round -> examples passed then
    given_up: int = 0          # failed every one of `rounds` revisions
    unfinished: int = 0        # stopped by a failed request: run again
    final_status: dict[str, int] = field(default_factory=dict)  # of every example's last run
    executions: int = 0        # example versions run in this run
    requests: int = 0          # asked in this run and logged
    errors: int = 0            # of those, failed after the client's retries
    unparseable: int = 0       # of those, answered without a usable revision
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def count(self, row) -> None:  # RequestRun's counter, per logged response
        self.prompt_tokens += row.prompt_tokens or 0
        self.completion_tokens += row.completion_tokens or 0

    @property
    def next_step(self) -> str:
        return f"steptrace trace {self.out} --db FILE (traces the repaired examples)"

    def as_dict(self) -> dict:
        from dataclasses import asdict
        data = asdict(self)
        data["fixed"] = {str(k): v for k, v in sorted(self.fixed.items())}
        data["next"] = self.next_step
        return data

    def as_rows(self) -> list[tuple[str, object]]:
        rows = [("corpus", self.corpus), ("repaired corpus", self.out), ("log", self.log),
                ("model", self.model), ("rounds", self.rounds), ("examples", self.examples),
                ("bad records (skipped)", len(self.bad_records)), ("done", self.done),
                ("ran as given", self.as_given)]
        rows += [(f"fixed at round {k}", v) for k, v in sorted(self.fixed.items())]
        rows += [("given up", self.given_up), ("unfinished (run again)", self.unfinished)]
        rows += [(f"final status {k}", v) for k, v in sorted(self.final_status.items())]
        rows += [("runs of examples", self.executions), ("requests made", self.requests),
                 ("request errors", self.errors), ("unparseable replies", self.unparseable),
                 ("prompt tokens", self.prompt_tokens),
                 ("completion tokens", self.completion_tokens),
                 ("seconds", f"{self.seconds:.2f}"), ("next", self.next_step)]
        return rows


class _Collect:
    """RequestRun's sink: the responses of one round, kept until the round's revisions
    have run (then logged with their outcomes)."""

    def __init__(self) -> None:
        self.rows: list = []

    def write(self, rows: list) -> None:
        self.rows.extend(rows)


def repair(corpus: str | os.PathLike | Iterable[Mapping[str, Any]], out: str | os.PathLike,
           request: PredictOptions, options: RepairOptions = RepairOptions(),
           progress: Progress | None = None) -> RepairSummary:
    """Repair the examples of ``corpus`` (a JSONL corpus file or records in memory) with
    ``request.model``, logging every round, and write the examples that end done to
    ``out`` (see the module docstring). PredictError when the server cannot be used
    (what was answered is run and logged first: run again to resume)."""
    from steptrace.predictions._predict import PredictError, RequestRun, Task
    started = time.perf_counter()
    out = Path(out)
    log_path = options.log_path or log_path_for(out)
    for path in (out, log_path):
        if not path.parent.is_dir():
            raise RepairError(f"cannot write {path}: no directory {path.parent}")
    if out.resolve() == log_path.resolve():
        raise RepairError(f"the repaired corpus and the log are the same file: {out}")
    examples, bad = read_examples(corpus)
    packages = options.packages
    if packages is not None and packages.native:
        raise RepairError("repair runs the code a model writes, which the native backend "
                          "refuses (docs/guides/sandbox.md): repair with a lock for the WASI "
                          "guest (steptrace build --with ... --lock FILE)")
    digest = packages.digest if packages is not None else None
    logged = read_log(log_path)
    _check_log(examples, logged, log_path, request.model, digest)
    drop_partial_line(log_path)
    summary = RepairSummary(str(corpus) if isinstance(corpus, (str, os.PathLike)) else
                            "<memory>", str(out), str(log_path), request.model,
                            options.rounds, examples=len(examples), bad_records=bad)
    histories = {example.id: history_of(logged.get(example.id, {})) for example in examples}
    context = _Context(options, request.model, digest, log_path, summary)

    # round 0: every example not yet run as given
    first = [example for example in examples if not histories[example.id]]
    for example, line in zip(first, context.run_round(
            [(example, example.code, example.test, 0, None, None) for example in first])):
        histories[example.id].append(line)

    fatal = None
    while fatal is None:
        todo = [example for example in examples
                if _state(histories[example.id], options.rounds) == "todo"
                and example.id not in context.stopped]
        if not todo:
            break
        prompts = {example.id: build_prompt(example, histories[example.id], options.rounds,
                                            packages) for example in todo}
        sink = _Collect()
        run = RequestRun(request, sink, summary, progress or (lambda done, total: None),
                         extract=lambda text, task: None)
        fatal = run.run([(Task(example.id, REPAIR_KIND, prompts[example.id]), 0)
                         for example in todo])
        answered = {row.task_id: row for row in sink.rows}
        batch = []
        for example in todo:
            row = answered.get(example.id)
            if row is None:
                continue  # not asked: the run stopped first
            summary.requests += 1
            round_ = len(histories[example.id])
            if row.error is not None:
                summary.errors += 1
                context.stopped.add(example.id)
                context.log([context.line(example, round_, prompts[example.id], row)])
                continue
            parsed = parse_reply(row.raw_text, example.form)
            if isinstance(parsed, str):
                summary.unparseable += 1
            batch.append((example, parsed, round_, prompts[example.id], row))
        runnable = [(example, parsed.code, parsed.test, round_, prompt, row)
                    for example, parsed, round_, prompt, row in batch
                    if not isinstance(parsed, str)]
        outcomes = iter(context.run_round(runnable))
        lines = []
        for example, parsed, round_, prompt, row in batch:
            if isinstance(parsed, str):
                line = context.line(example, round_, prompt, row, parse_error=parsed)
                lines.append(line)
            else:
                line = next(outcomes)
            histories[example.id].append(line)
        context.log(lines)

    write_repaired(examples, histories, out)
    _count(summary, examples, histories, options.rounds)
    summary.seconds = time.perf_counter() - started
    if fatal is not None:
        raise PredictError(f"{fatal}; stopped with {summary.requests} new replies logged "
                           "(run again to resume)")
    return summary


def _state(history: list[dict], rounds: int) -> str:
    if history and (history[-1].get("outcome") or {}).get("passed"):
        return "done"
    if len(history) > rounds:
        return "given_up"
    return "todo"


class _Context:
    """One run's settings and its writes to the log."""

    def __init__(self, options: RepairOptions, model: str, packages: str | None,
                 log_path: Path, summary: RepairSummary) -> None:
        self.options = options
        self.model = model
        self.packages = packages
        self.log_path = log_path
        self.summary = summary
        self.stopped: set[str] = set()   # a request failed: not asked again in this run

    def line(self, example: Example, round_: int, prompt: str | None, row=None, *,
             revision: dict | None = None, outcome: dict | None = None,
             parse_error: str | None = None) -> dict:
        line = {"id": example.id, "round": round_, "record_sha256": example.sha256,
                "form": example.form, "model": self.model if round_ > 0 else None,
                "packages": self.packages, "prompt": prompt}
        if row is not None:
            line.update(raw_text=row.raw_text, error=row.error, finish_reason=row.finish_reason,
                        prompt_tokens=row.prompt_tokens,
                        completion_tokens=row.completion_tokens, latency_ms=row.latency_ms,
                        created_at=row.created_at.isoformat())
        line.update(parse_error=parse_error, example=revision, outcome=outcome)
        return line

    def log(self, lines: list[dict]) -> None:
        _append(self.log_path, lines)

    def run_round(self, items: list[tuple]) -> list[dict]:
        """Run each (example, code, test, round, prompt, row) in the sandbox, log its
        line and return the lines, in order."""
        if not items:
            return []
        from steptrace.sandbox._runner import run_chunks  # wasmtime loads only here
        from steptrace.tracing._trace import job_request
        jobs_of = []
        for example, code, test, *_ in items:
            jobs_of.append(jobs_from_record(example.revised(code, test), SOURCE, example.id))
        # a revision is the model's (round 0: the example's own record says)
        requests = [{**job_request(job), **({"model_written": True} if item[3] else {})}
                    for item, jobs in zip(items, jobs_of) for job in jobs]
        chunks = [requests[i:i + CHUNK] for i in range(0, len(requests), CHUNK)]
        workers = self.options.workers
        if workers is None:
            workers = os.cpu_count() or 1
        results: list[dict] = [{} for _ in requests]
        for index, outcomes in run_chunks(chunks, workers, self.options.limits, "job",
                                          packages=self.options.packages):
            for offset, outcome in enumerate(outcomes):
                results[index * CHUNK + offset] = outcome.result
        lines = []
        start = 0
        for (example, code, test, round_, prompt, row), jobs in zip(items, jobs_of):
            mine = results[start:start + len(jobs)]
            start += len(jobs)
            outcome = judge(example, jobs, mine, test)
            lines.append(self.line(example, round_, prompt, row,
                                   revision={"code": code, "test": test}, outcome=outcome))
        self.summary.executions += len(items)
        self.log(lines)
        return lines


def write_repaired(examples: list[Example], histories: dict[str, list[dict]],
                   out: Path) -> int:
    """Write the done examples to ``out`` (whole: a temporary file, then a rename), in
    corpus order; return how many."""
    records = []
    for example in examples:
        history = histories[example.id]
        if _state(history, len(history)) != "done":
            continue
        last = history[-1]
        record = example.revised(last["example"]["code"], last["example"].get("test"))
        record["rounds"] = last["round"]
        record["repair"] = {"model": last.get("model"), "record_sha256": example.sha256}
        if last["round"] > 0:  # the model's code (and tests)
            record[MODEL_WRITTEN] = True
        records.append(record)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    with user_file(out):
        with partial.open("w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        os.replace(partial, out)
    return len(records)


def _count(summary: RepairSummary, examples: list[Example], histories: dict[str, list[dict]],
           rounds: int) -> None:
    finals: Counter[str] = Counter()
    for example in examples:
        history = histories[example.id]
        state = _state(history, rounds)
        last = history[-1] if history else None
        if state == "done":
            summary.done += 1
            if last["round"] == 0:
                summary.as_given += 1
            else:
                summary.fixed[last["round"]] = summary.fixed.get(last["round"], 0) + 1
        elif state == "given_up":
            summary.given_up += 1
        else:
            summary.unfinished += 1
        if last is None:
            finals["not run"] += 1
        elif last.get("outcome") is not None:
            finals[last["outcome"]["status"]] += 1
        else:
            finals["unparseable"] += 1
    summary.final_status = dict(sorted(finals.items()))
