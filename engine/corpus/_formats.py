"""Corpus loading: turn a file or directory into jobs (one program called on one input).

Accepted corpora:

* **CRUXEval JSONL**: one object a line with ``id``, ``code``, ``input``, ``output``.
* **Generic JSONL**: ``code``; optional ``entry`` (default ``f``; a name or a dotted path
  such as ``Stack.push``); one ``input`` (the text inside ``f(...)``) or a list
  ``inputs``; optional expected ``output`` (with ``input``) or ``outputs`` (a list as long
  as ``inputs``, entries may be null); optional ``id``. Program shapes (see
  docs/guides/corpus.md): ``calls`` (a method chain), ``test`` (test code run against the
  program), ``stdin``, and ``shape: "script"`` (module-level code; ``input`` is its stdin
  and ``output`` its expected stdout); ``files``, ``argv`` and ``env``, what the program
  starts with (steptrace.corpus._environment). CRUXEval lines are a special case of
  this format.
* **A directory of ``.py`` files**: each ``NAME.py`` is a program; its inputs are in
  ``NAME.json`` beside it, an object with the generic keys except ``code``
  (``{"entry": "f", "inputs": ["1, 2", "'abc'"], "outputs": ["3", null]}``).

Every other key of a record (``release_date``, ``source``, ``licence``, ``difficulty``,
...) is the program's metadata, kept and stored (``programs.meta``; see
steptrace.corpus._meta).

A bad line or file is reported (``CorpusError`` with file and line number) and skipped;
the rest of the corpus still loads.

A corpus may also be in memory (``Records``): a list (or any iterable) of dicts in the
record format above, or a polars DataFrame with those columns (a null cell is an absent
key, as a frame holds every column on every row). It is read as a JSONL file of the same
records would be: the same jobs, a record without ``id`` numbered from 1 as a file's lines
are, and a bad record reported and skipped. ``as_corpus_source`` turns any accepted corpus
into what ``iter_corpus`` reads, so every caller accepts them all.

A JSONL corpus may also be a stream: ``-`` (standard input), ``/dev/stdin``, a pipe or a
named pipe (FIFO). A stream can be read only once, and ``trace`` reads a corpus twice, so
``spool`` copies it to a private temporary file first (bounded by disk, not memory). In a
directory corpus a ``.py`` or ``.json`` that is not a regular file (a FIFO, socket,
device or directory) is a bad file: it is never read, so it cannot block.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Iterable, Iterator, Mapping, Sequence, Union

from steptrace.corpus._environment import record_environment, request_fields
from steptrace.corpus._frames import (frame_rows, hub_files, is_frame, is_hf_dataset,
                                      is_saved_dataset, parquet_rows, saved_dataset_rows)
from steptrace.corpus._meta import record_meta
from steptrace.corpus._statements import MODULE  # a script's entry: its module code's name
from steptrace.corpus._text import (NotRegularFileError, NotUtf8Error, decode_line, decode_text,
                                    read_regular)
from steptrace.errors import InputError

if TYPE_CHECKING:
    import polars as pl

DEFAULT_ENTRY = "f"
SHAPES = ("call", "script")
MAX_CALLS = 1_000  # methods in one chain (the guest refuses more)
MAX_STDIN = 16 * 1024 * 1024  # characters of one stdin text (the guest refuses more)
STDIN = "-"  # the corpus path that means standard input
STDIN_NAME = Path("<stdin>")  # how messages and program sources name it
MEMORY_NAME = "<memory>"  # how messages and program sources name an in-memory corpus


class CorpusError(InputError):
    """A corpus that cannot be read at all, or one bad record in it."""


def _digest(fields: list) -> str:
    """SHA-256 of a JSON list: unambiguous whatever characters the fields hold."""
    text = json.dumps(fields, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def source_lines(code: str) -> list[str]:
    """The program's lines as Python numbers them (\\n, \\r\\n or \\r ends a line).
    ``str.splitlines`` would also break at form feeds, \\x1c-\\x1e, \\x85 and
    \\u2028/\\u2029, which a string literal may hold, and shift every later line."""
    lines = _LINE_BREAK.split(code)
    if lines[-1] == "":
        lines.pop()  # a final line break ends the last line; it starts none
    return lines


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Program:
    """A program: its ``code``, the ``entry`` it is called by (``<module>`` for a
    script), its ``shape`` (``call`` or ``script``) and the ``test`` code run against it
    (None if none)."""

    source: str
    sample_id: str
    code: str
    entry: str = DEFAULT_ENTRY
    shape: str = "call"
    test: str | None = None
    # the record's metadata (its keys the format does not use) as JSON text, None if none;
    # stored in programs.meta and not part of the key (steptrace.corpus._meta)
    meta: str | None = field(default=None, compare=False)
    # the record's files, argv and env as JSON text, None if none; stored in
    # programs.environment and part of the key (steptrace.corpus._environment)
    environment: str | None = None

    # cached_property: a key is asked for several times a job (the trace's two passes over
    # the corpus, the resume check, the store's rows) and hashing it each time cost the
    # trace of the 800 CRUXEval samples ~35 ms; a frozen dataclass's fields cannot change
    @cached_property
    def code_sha256(self) -> str:
        return _sha256(self.code)

    @cached_property
    def key(self) -> str:
        """Identity of the program in a store: where it came from and what it is. A
        call-shaped program without test code keeps the key it had before shapes
        existed (so stores made then resume)."""
        fields: list = [self.source, self.sample_id, self.entry, self.code_sha256]
        if self.shape != "call":
            fields.append(["shape", self.shape])
        if self.test is not None:
            fields.append(["test", _sha256(self.test)])
        if self.environment is not None:
            fields.append(["environment", _sha256(self.environment)])
        return _digest(fields)


Chain = tuple[tuple[str, str], ...]  # a method chain: (method, input text) per call


@dataclass(frozen=True)
class Job:
    """One run: ``program`` called on ``input`` (a script: run with ``input`` as its
    stdin), then the methods of ``calls`` (None: no chain), with ``stdin`` (None:
    empty) as a call-shaped program's standard input."""

    program: Program
    input: str
    expected: str | None = None
    input_index: int = 0
    calls: Chain | None = None
    stdin: str | None = None

    @cached_property
    def key(self) -> str:
        """Identity of the run: resume skips a job whose key is already stored. A job
        without a chain or stdin keeps the key it had before they existed."""
        fields: list = [self.program.key, self.input_index, self.input, self.expected]
        if self.calls is not None:
            fields.append(["calls", [list(call) for call in self.calls]])
        if self.stdin is not None:
            fields.append(["stdin", self.stdin])
        return _digest(fields)

    @property
    def calls_json(self) -> str | None:
        """The chain as the store's ``runs.chain`` holds it: JSON text of
        ``[{"method": ..., "input": ...}, ...]``; None without one."""
        if self.calls is None:
            return None
        return json.dumps(chain_records(self.calls), ensure_ascii=False)

    def request(self) -> dict:
        """What the guest needs (see tracer/job.py)."""
        program = self.program
        return guest_request(program.code, program.entry, self.input, self.expected,
                             program.shape, program.test,
                             None if self.calls is None else chain_records(self.calls),
                             self.stdin, program.environment)


def guest_request(code: str, entry: str, input: str, expected: str | None,
                  shape: str = "call", test: str | None = None,
                  calls: list[dict] | None = None, stdin: str | None = None,
                  environment: str | None = None) -> dict:
    """The request of one job as the guest reads it (tracer/job.py): a script has no
    entry; the shape fields only when given, so a plain call's request is as it was.
    ``environment`` (a program's, steptrace.corpus._environment) adds ``argv``, ``env``
    and ``files`` (the last read by the sandbox: wasm_sandbox/_files.py)."""
    request = {"code": code, "entry": entry, "input": input, "expected": expected}
    if shape != "call":
        request["shape"] = shape
        del request["entry"]
    if test is not None:
        request["test"] = test
    if calls is not None:
        request["calls"] = calls
    if stdin is not None:
        request["stdin"] = stdin
    if environment is not None:
        request.update(request_fields(environment))
    return request


def chain_records(calls: Chain) -> list[dict]:
    return [{"method": method, "input": text} for method, text in calls]


def stdout_matches(stdout: str | None, expected: str) -> bool:
    """Whether a script's stdout is its expected output, as LiveCodeBench and CodeNet
    judge it: line by line (``\n``, ``\r\n`` or ``\r`` ends a line), each line's
    trailing whitespace ignored, and empty lines at the end ignored; everything else
    (leading whitespace, empty lines between) must be exact."""
    return _judged_lines(stdout or "") == _judged_lines(expected)


def _judged_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in _LINE_BREAK.split(text)]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass
class Corpus:
    """The jobs of a corpus and the records that could not be read."""

    jobs: list[Job] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def demo_corpus_path() -> Path:
    return Path(str(resources.files("steptrace.corpus") / "data" / "demo.jsonl"))


def load_corpus(path: CorpusLike) -> Corpus:
    """Load a JSONL file, a directory of ``.py`` files or in-memory records (see
    ``as_corpus_source``); see the module docstring."""
    corpus = Corpus()
    for job_or_error in iter_corpus(path):
        _collect(corpus, job_or_error)
    return corpus


@dataclass(frozen=True)
class Spooled:
    """A stream corpus copied once to a private file: read from ``copy``; messages and
    program sources name the stream (``name``), as they would have without the copy."""

    name: Path
    copy: Path


@dataclass(frozen=True, eq=False)
class Records:
    """An in-memory corpus: ``rows``, a sequence of records (dicts in the record format)
    or a polars DataFrame with those columns, read like a JSONL file of them, once or
    as often as needed. ``name`` plays the file name's part: it is the programs'
    ``source`` (part of every job's key, so a list traced under a file's name makes the
    same store as that file) and what messages name."""

    rows: "Sequence[Mapping[str, Any]] | pl.DataFrame"
    name: str = MEMORY_NAME

    def __iter__(self) -> Iterator[object]:
        """The records; a frame's rows without their null cells (an absent key)."""
        if is_polars_frame(self.rows):
            for row in self.rows.iter_rows(named=True):
                yield {key: value for key, value in row.items() if value is not None}
        elif is_frame(self.rows):  # pandas, Hugging Face datasets
            yield from frame_rows(self.rows)
        else:
            yield from self.rows

    def __len__(self) -> int:
        return self.rows.height if is_polars_frame(self.rows) else len(self.rows)

    def __repr__(self) -> str:
        return f"Records({len(self)} records, name={self.name!r})"


def is_polars_frame(value: object) -> bool:
    """Whether ``value`` is a polars DataFrame, told without importing polars (the corpus
    module is imported by light commands)."""
    return type(value).__module__.partition(".")[0] == "polars" and hasattr(value, "iter_rows")


# What a corpus may be given as: a path (file, directory, ``-``), a spooled stream, or
# records in memory.
CorpusLike = Union[str, Path, Spooled, Records, Iterable[Mapping[str, Any]], "pl.DataFrame"]


def as_corpus_source(corpus: CorpusLike, name: str | None = None) -> str | Path | Spooled | Records:
    """What ``iter_corpus`` reads for ``corpus``: a path (``str``, ``Path``), a
    ``Spooled`` stream and ``Records`` as they are; a polars DataFrame, a list or any
    other iterable of dicts as ``Records`` named ``name`` (default ``<memory>``; an
    iterator is read into a list once, since a corpus is read twice). CorpusError for
    anything else. ``name`` names an in-memory corpus only: a file is named by its path."""
    if isinstance(corpus, (str, Path, Spooled)):
        return corpus
    if isinstance(corpus, Records):
        return corpus if name is None else Records(corpus.rows, name)
    if is_polars_frame(corpus) or is_frame(corpus):
        if is_hf_dataset(corpus) and type(corpus).__name__ != "Dataset":
            try:
                next(frame_rows(corpus))
            except InputError as exc:  # a DatasetDict: which split
                raise CorpusError(str(exc)) from None
            raise CorpusError(f"a corpus is a Dataset (it is read twice), not "
                              f"{type(corpus).__name__}")
        return Records(corpus, name or MEMORY_NAME)
    if isinstance(corpus, (bytes, bytearray, Mapping)) or not isinstance(corpus, Iterable):
        raise CorpusError(f"a corpus is a path, a list of records (dicts), a polars or pandas "
                          f"DataFrame or a Hugging Face Dataset, not {type(corpus).__name__}")
    rows = corpus if isinstance(corpus, Sequence) else list(corpus)
    return Records(rows, name or MEMORY_NAME)


def is_stream(path: CorpusLike) -> bool:
    """Whether reading ``path`` consumes it: ``-``, a pipe, a FIFO, a socket or a device
    (a regular file, a directory or records in memory can be read again)."""
    if not isinstance(path, (str, Path)):
        return False
    if str(path) == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # missing: iter_corpus says so
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextmanager
def spool(path: CorpusLike) -> Iterator[str | Path | Spooled | Records]:
    """``path`` itself when it can be read twice (records in memory as ``Records``); a
    stream (``is_stream``) copied to a private temporary file (mode 0600, in
    ``tempfile.gettempdir()``, removed on exit), so that it is read from its source
    exactly once. CorpusError when it cannot be."""
    if not is_stream(path):
        yield as_corpus_source(path)
        return
    name = STDIN_NAME if str(path) == STDIN else Path(path)
    with tempfile.NamedTemporaryFile(prefix="steptrace-corpus-", suffix=".jsonl") as copy:
        with _open_bytes(path) as source:
            try:
                shutil.copyfileobj(source, copy, 1 << 20)
                copy.flush()
            except OSError as exc:
                raise CorpusError(f"cannot copy corpus {name} to {copy.name}: "
                                  f"{exc.strerror or exc}") from exc
        yield Spooled(name, Path(copy.name))


@contextmanager
def _open_bytes(path: str | Path) -> Iterator[BinaryIO]:
    """``path`` opened for reading bytes (standard input for ``-``, left open when
    done); CorpusError naming it when it cannot be opened."""
    if str(path) == STDIN:
        if sys.stdin is None:
            raise CorpusError("corpus '-' is standard input, and this process has none")
        yield sys.stdin.buffer
        return
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc.strerror or exc}") from exc
    with handle:
        yield handle


def iter_corpus(path: CorpusLike) -> Iterator[Job | str]:
    """The jobs of a corpus (any ``as_corpus_source`` accepts) one at a time, with a
    message (str) in place of each bad record: reading a corpus of any size holds one
    record at a time. CorpusError when the corpus cannot be read at all. A stream is
    read as it comes (once: see ``spool`` for reading it twice)."""
    path = as_corpus_source(path)
    if isinstance(path, Records):
        yield from _iter_records(path)
        return
    if isinstance(path, Spooled):
        with _open_bytes(path.copy) as handle:
            yield from _iter_jsonl(handle, path.name)
        return
    if str(path) == STDIN:
        with _open_bytes(path) as handle:
            yield from _iter_jsonl(handle, STDIN_NAME)
        return
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"corpus not found: {path}")
    try:
        table = is_table(path)
    except InputError as exc:
        raise CorpusError(str(exc)) from None
    if table:
        try:
            yield from _iter_table(path)
        except CorpusError:
            raise
        except InputError as exc:
            raise CorpusError(str(exc)) from None
        return
    if path.is_dir():
        empty = True
        for job_or_error in _iter_directory(path):
            empty = False
            yield job_or_error
        if empty:
            raise CorpusError(f"no .py files in corpus directory {path}")
        return
    with _open_bytes(path) as handle:
        yield from _iter_jsonl(handle, path)


def _collect(corpus: Corpus, item: Job | str) -> None:
    if isinstance(item, str):
        corpus.errors.append(item)
    else:
        corpus.jobs.append(item)


class _IdOwners:
    """Which program each record id of a corpus names, to refuse a record that gives an
    id already given to another program (other code, entry or shape): its runs would be
    stored beside the first one's under one ``sample_id``, and every later look-up by id
    (``show --sample-id``, tasks, scores) would mix two programs. A record repeating a
    program with its id (more inputs) is fine. Holds the id and a hash of the program's
    key per id."""

    def __init__(self) -> None:
        self.owners: dict[str, tuple[int, str]] = {}  # id -> (hash of the program key, where)

    def conflict(self, jobs: list[Job], where: str) -> str | None:
        """The message for a record whose ``jobs`` reuse another program's id, else None
        (the id is now taken)."""
        if not jobs:
            return None
        program = jobs[0].program
        owner = self.owners.setdefault(program.sample_id, (hash(program.key), where))
        if owner[0] == hash(program.key):
            return None
        return (f"{where}: id {program.sample_id!r} is already the id of another program "
                f"({owner[1]}); the record is skipped (give each program its own id)")


def _iter_jsonl(lines, path: Path) -> Iterator[Job | str]:
    """Records of a JSONL file read as bytes: a line that is not UTF-8 or not JSON is one
    bad record (reported with its line number), and so is a record whose id another
    program has (``_IdOwners``); the others still load."""
    owners = _IdOwners()
    for lineno, raw in enumerate(lines, start=1):
        try:
            line = decode_line(raw, path, lineno).rstrip("\r\n")
        except NotUtf8Error as exc:
            yield str(exc)
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
            continue
        try:
            jobs = jobs_from_record(record, source=path.name, default_id=str(lineno))
        except CorpusError as exc:
            yield f"{path}:{lineno}: {exc}"
            continue
        conflict = owners.conflict(jobs, f"{path}:{lineno}")
        yield from jobs if conflict is None else (conflict,)


# Keys that tell a file steptrace wrote for another step from a corpus, and the hint for it.
_OTHER_FILES = ((("task_id", "prompt"), "it looks like a tasks file (steptrace tasks --out): "
                 "give it to steptrace predict --tasks"),
                (("task_id", "raw_text"), "it looks like predictions, not a corpus"))


# bad records before any job after which a file is taken for something else than a
# corpus (a tasks or predictions file given by mistake): one error, nothing made
NOT_A_CORPUS = 5


def refuse_not_a_corpus(corpus: "str | Path | Spooled | Records | Corpus", name: str,
                        jobs: int, errors: list[str], ended: bool, nothing: str) -> None:
    """Raise CorpusError when ``corpus`` (called ``name``) is not a corpus: its first
    NOT_A_CORPUS records are bad with no job before them, or, once read to its end
    (``ended``), every record is. One error with the first bad record and a hint, in
    place of a warning per record; ``nothing`` ends it ("nothing was traced")."""
    if jobs or not errors or not (ended or len(errors) >= NOT_A_CORPUS):
        return
    found = "none of its records is" if ended else f"none of its first {NOT_A_CORPUS} records is"
    hint = ("see docs/guides/corpus.md" if isinstance(corpus, Corpus)
            else not_a_corpus_hint(corpus))
    raise CorpusError(f"{name}: {found} a corpus record ({errors[0]}); {hint}; {nothing}")


def not_a_corpus_hint(corpus: "str | Path | Spooled | Records") -> str:
    """What to do with a corpus whose first records are all bad: read its first record
    and say what file it looks like (a tasks file), else what a corpus record holds."""
    first: object = None
    try:
        if isinstance(corpus, Records):
            first = next(iter(corpus), None)
        else:
            path = corpus.copy if isinstance(corpus, Spooled) else Path(corpus)
            if path.is_file():
                with open(path, "rb") as handle:
                    line = next((raw for raw in handle if raw.strip()), b"")
                first = json.loads(line.decode("utf-8", "replace"))
    except (OSError, ValueError):
        first = None
    if isinstance(first, Mapping):
        for keys, hint in _OTHER_FILES:
            if all(key in first for key in keys):
                return hint
    return ("a corpus record is a JSON object with 'code' and 'input' or 'inputs' "
            "(docs/guides/corpus.md)")


def _iter_records(records: Records) -> Iterator[Job | str]:
    """Records in memory, as ``_iter_jsonl`` reads the lines of a file of them: a record
    without ``id`` is numbered from 1, and a bad one is reported by that number."""
    return _iter_rows(records, records.name, f"{records.name} record")


def _iter_table(path: Path) -> Iterator[Job | str]:
    """The rows of a table on disk (steptrace.corpus._frames): a dataset saved with
    ``save_to_disk``, a Parquet file, or the data files of a directory in the Hub's
    layout (Parquet or JSONL), read as records named ``FILE row N``."""
    if path.is_dir() and is_saved_dataset(path):
        yield from _iter_rows(saved_dataset_rows(path), path.name, f"{path} row")
        return
    if path.is_file():
        yield from _iter_rows(parquet_rows(path), path.name, f"{path} row")
        return
    for file in hub_files(path) or ():
        if file.suffix == ".parquet":
            yield from _iter_rows(parquet_rows(file), file.name, f"{file} row")
        else:
            with _open_bytes(file) as handle:
                yield from _iter_jsonl(handle, file)


def is_table(path: Path) -> bool:
    """Whether ``path`` is read by ``_iter_table``: a Parquet file, a ``save_to_disk``
    directory, or a directory of data files in the Hub's layout (and no ``.py`` files)."""
    if path.is_file():
        return path.suffix == ".parquet"
    if not path.is_dir():
        return False
    if is_saved_dataset(path):
        return True
    return not any(path.glob("*.py")) and hub_files(path) is not None


def _iter_rows(rows: Iterable[object], source: str, where: str) -> Iterator[Job | str]:
    """Records read one at a time, as ``_iter_jsonl`` reads a file's lines: a record
    without ``id`` is numbered from 1, and a bad one is reported as ``{where} N``."""
    owners = _IdOwners()
    for number, record in enumerate(rows, start=1):
        where_this = f"{where} {number}"
        try:
            jobs = jobs_from_record(record, source=source, default_id=str(number))
        except CorpusError as exc:
            yield f"{where_this}: {exc}"
            continue
        conflict = owners.conflict(jobs, where_this)
        yield from jobs if conflict is None else (conflict,)


def _iter_directory(root: Path) -> Iterator[Job | str]:
    for file in sorted(root.glob("*.py")):
        sidecar = file.with_suffix(".json")
        try:
            code = _read_regular(file)
        except (CorpusError, NotUtf8Error) as exc:
            yield str(exc)
            continue
        if not sidecar.exists():
            yield f"{file}: no inputs (write them in {sidecar.name})"
            continue
        try:
            record = json.loads(_read_regular(sidecar))
        except (CorpusError, NotUtf8Error) as exc:
            yield str(exc)
            continue
        except json.JSONDecodeError as exc:
            yield f"{sidecar}: not readable JSON ({exc})"
            continue
        if not isinstance(record, dict):
            yield f"{sidecar}: expected a JSON object"
            continue
        try:
            yield from jobs_from_record({**record, "code": code}, source=root.name,
                                        default_id=file.stem)
        except CorpusError as exc:
            yield f"{sidecar}: {exc}"


def _read_regular(file: Path) -> str:
    """The UTF-8 text of ``file`` if it is a regular file (``read_regular``: a FIFO named
    ``x.py`` would otherwise block the open, or the read, until some writer came, that is,
    forever). CorpusError naming the file and what it is for anything but a regular file;
    NotUtf8Error for bad bytes."""
    try:
        data = read_regular(file)
    except NotRegularFileError as exc:
        raise CorpusError(f"{file}: {exc.strerror}") from None
    except OSError as exc:
        raise CorpusError(f"{file}: cannot read ({exc.strerror or exc})") from None
    return decode_text(data, file)


def _text(record: dict, key: str) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise CorpusError(f"'{key}' must be a string, got {type(value).__name__}")
    return value


def jobs_from_record(record: object, source: str, default_id: str) -> list[Job]:
    """The jobs of one generic/CRUXEval record; raises CorpusError naming the problem."""
    if not isinstance(record, dict):
        raise CorpusError(f"expected a JSON object, got {type(record).__name__}")
    code = _text(record, "code")
    if code is None:
        raise CorpusError("missing 'code'")
    shape = _text(record, "shape") or "call"
    if shape not in SHAPES:
        raise CorpusError(f"'shape' must be one of {', '.join(SHAPES)}, got {shape!r}")
    test = _text(record, "test")
    stdin = _text(record, "stdin")
    if shape == "script":
        extra = [key for key in ("entry", "calls", "test", "stdin") if record.get(key) is not None]
        if extra:
            raise CorpusError(f"a script takes no '{extra[0]}' (its 'input' is its stdin, "
                              "its 'output' the expected stdout)")
        entry = MODULE
    else:
        entry = _text(record, "entry") or DEFAULT_ENTRY
        if not all(part.isidentifier() for part in entry.split(".")):
            raise CorpusError("'entry' must be a Python identifier or a dotted path of "
                              f"them (Stack.push), got {entry!r}")
    if "inputs" in record:
        inputs = record["inputs"]
        if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
            raise CorpusError("'inputs' must be a list of strings")
        if not inputs:  # a record that runs nothing is a mistake to report, not to skip
            raise CorpusError("'inputs' is empty: the record has nothing to run")
        outputs = record.get("outputs", [None] * len(inputs))
        if not isinstance(outputs, list) or len(outputs) != len(inputs):
            raise CorpusError("'outputs' must be a list as long as 'inputs'")
        if not all(o is None or isinstance(o, str) for o in outputs):
            raise CorpusError("'outputs' entries must be strings or null")
    elif "input" in record:
        text = _text(record, "input")
        if text is None:
            raise CorpusError("'input' must be a string, got null")
        inputs = [text]
        outputs = [_text(record, "output")]
    else:
        raise CorpusError("missing 'input' or 'inputs'")
    for text in ([stdin] if stdin is not None else []) + (inputs if shape == "script" else []):
        if len(text) > MAX_STDIN:
            raise CorpusError(f"a stdin text is longer than {MAX_STDIN:,} characters "
                              f"({len(text):,})")
    chains = _chains(record.get("calls"), len(inputs))
    sample_id = record.get("id")
    program = Program(source=source, sample_id=default_id if sample_id is None else str(sample_id),
                      code=code, entry=entry, shape=shape, test=test, meta=record_meta(record),
                      environment=record_environment(record))
    return [Job(program, text, expected, index, chain, stdin)
            for index, (text, expected, chain) in enumerate(zip(inputs, outputs, chains))]


def _chains(value: object, count: int) -> list[Chain | None]:
    """``calls`` as one chain per input: one chain (a list of ``{"method", "input"}``)
    for every input, or a list of chains, one per input. CorpusError for anything else."""
    if value is None:
        return [None] * count
    if not isinstance(value, list):
        raise CorpusError("'calls' must be a list of {\"method\": ..., \"input\": ...} "
                          "(or a list of such lists, one per input)")
    if value and all(isinstance(item, list) for item in value):
        if len(value) != count:
            raise CorpusError(f"'calls' has {len(value)} chains for {count} inputs: give "
                              "one chain per input, or one chain for all")
        return [_chain(item, f"calls[{index}]") for index, item in enumerate(value)]
    chain = _chain(value, "calls")
    return [chain] * count


def _chain(items: list, where: str) -> Chain:
    if len(items) > MAX_CALLS:
        raise CorpusError(f"'{where}' has {len(items):,} calls; at most {MAX_CALLS:,}")
    chain = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not set(item) <= {"method", "input"}:
            raise CorpusError(f"'{where}[{index}]' must be {{\"method\": name, "
                              "\"input\": arguments}")
        method, text = item.get("method"), item.get("input", "")
        if not isinstance(method, str) or not method.isidentifier():
            raise CorpusError(f"'{where}[{index}].method' must be a method name, got {method!r}")
        if not isinstance(text, str):
            raise CorpusError(f"'{where}[{index}].input' must be a string, got "
                              f"{type(text).__name__}")
        chain.append((method, text))
    return tuple(chain)
