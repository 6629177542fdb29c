"""A corpus record's environment: the files, arguments and environment variables its
program starts with.

``files`` (an object of relative path -> text: written into the job's working
directory, ``/work``, before the job; wasm_sandbox/_files.py), ``argv`` (a list of
strings: the arguments after the program's name, ``sys.argv`` is ``["main.py", *argv]``)
and ``env`` (an object of strings: ``os.environ``). They are checked here, with one line
naming the first problem, and kept as canonical JSON text (keys sorted) on the
program: stored in ``programs.environment``, part of the program's key, and sent with
every job of the program (``request_fields``).
"""

from __future__ import annotations

import json

from steptrace.errors import InputError
from steptrace.sandbox._files import check_path

ENVIRONMENT_KEYS = ("argv", "env", "files")
MAX_FILES = 1_000  # files a record may give
MAX_FILES_CHARS = 16 * 1024 * 1024  # characters of all of them together
MAX_ARGS = 10_000  # arguments, or environment variables (the guest refuses more)
MAX_ARG_CHARS = 1024 * 1024  # characters of all arguments and variables together


def record_environment(record: dict) -> str | None:
    """The record's ``argv``, ``env`` and ``files`` as canonical JSON text (None when it
    gives none of them); CorpusError naming the first problem."""
    from steptrace.corpus._formats import CorpusError
    given = {key: record[key] for key in ENVIRONMENT_KEYS if record.get(key) is not None}
    if not given:
        return None
    try:
        if "argv" in given:
            _check_argv(given["argv"])
        if "env" in given:
            _check_env(given["env"])
        if "files" in given:
            _check_files(given["files"])
    except InputError as exc:
        raise CorpusError(str(exc)) from None
    return json.dumps(given, ensure_ascii=False, sort_keys=True)


def request_fields(environment: str | None) -> dict:
    """The guest request's ``argv``, ``env`` and ``files`` from a program's environment
    text (empty without one)."""
    return json.loads(environment) if environment else {}


def _check_argv(argv: object) -> None:
    if not isinstance(argv, list) or not all(isinstance(arg, str) for arg in argv):
        raise InputError("'argv' must be a list of strings (the arguments after the "
                         "program's name)")
    if len(argv) > MAX_ARGS:
        raise InputError(f"'argv' has {len(argv):,} arguments; at most {MAX_ARGS:,}")
    if any("\0" in arg for arg in argv):
        raise InputError("an 'argv' argument holds a NUL character")
    if sum(map(len, argv)) > MAX_ARG_CHARS:
        raise InputError(f"'argv' is longer than {MAX_ARG_CHARS:,} characters")


def _check_env(env: object) -> None:
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        raise InputError("'env' must be an object of strings (variable name -> value)")
    if len(env) > MAX_ARGS:
        raise InputError(f"'env' has {len(env):,} variables; at most {MAX_ARGS:,}")
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise InputError(f"'env' variable name {name!r} must be non-empty, without "
                             "'=' or NUL")
        if "\0" in value:
            raise InputError(f"'env' variable {name!r} holds a NUL character")
    if sum(len(name) + len(value) for name, value in env.items()) > MAX_ARG_CHARS:
        raise InputError(f"'env' is longer than {MAX_ARG_CHARS:,} characters")


def _check_files(files: object) -> None:
    if not isinstance(files, dict):
        raise InputError("'files' must be an object of relative path -> text")
    if len(files) > MAX_FILES:
        raise InputError(f"'files' has {len(files):,} files; at most {MAX_FILES:,}")
    total = 0
    seen: dict[str, str] = {}
    for path, text in files.items():
        parts = check_path(path)
        if not isinstance(text, str):
            raise InputError(f"file {path!r} must be text (a string), got "
                             f"{type(text).__name__}")
        total += len(text)
        if total > MAX_FILES_CHARS:
            raise InputError(f"'files' hold more than {MAX_FILES_CHARS:,} characters")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            kind = "file" if depth == len(parts) else "dir"
            if seen.setdefault(prefix, kind) != kind:
                raise InputError(f"file path {path!r} clashes with another file's path "
                                 f"({prefix!r} is both a file and a directory)")
