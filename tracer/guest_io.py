"""Objects the traced program can see: its stdout/stderr and its recursion limit.

They live in this module, apart from the tracer and the runner, because a program can
follow any object it holds to the globals of the module that defined it
(``sys.stdout.write.__func__.__globals__``; Python does not audit that). Nothing here
leads back to the tracer, the result being built, or the host protocol.
"""

from __future__ import annotations

import sys


class StopTracing(BaseException):
    """Raised into the program when a limit is hit; BaseException so ``except Exception``
    in the program does not swallow it. The tracer keeps raising it at every later event,
    so even ``except BaseException`` cannot keep the program going."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BoundedWriter:
    """A text stream for ``sys.stdout``/``sys.stderr`` that keeps at most ``limit``
    characters; writing more raises StopTracing (``output_limit``) and sets ``overflow``,
    which the tracer turns into a stop at the program's next event."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit
        self.name = name
        self.parts: list[str] = []
        self.size = 0
        self.overflow: str | None = None

    def write(self, text: str) -> int:
        if type(text) is not str:
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        room = self.limit - self.size
        if len(text) > room:
            self.parts.append(text[:room])
            self.size = self.limit
            self.overflow = f"{self.name} exceeds {self.limit} characters"
            raise StopTracing("output_limit", self.overflow)
        self.parts.append(text)
        self.size += len(text)
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        return "".join(self.parts)


class RecursionGuard:
    """Makes the program's recursion limit behave as in plain CPython, where a function
    called from a script's top level may nest ``limit - 1`` frames deep.

    Here the runner's own frames sit below the program and the tracer's callbacks run
    above its deepest frame, so the interpreter's real limit is set higher (by the runner's
    depth plus ``MARGIN``) and the program sees a limit of its own: ``sys.getrecursionlimit``
    and ``sys.setrecursionlimit`` are replaced for the job, and the tracer raises
    RecursionError when a program frame would be deeper than that limit allows."""

    MARGIN = 60

    def __init__(self) -> None:
        self.real_get = sys.getrecursionlimit
        self.real_set = sys.setrecursionlimit
        self.limit = self.limit_before = self.real_get()
        self.base_depth = 0
        self.tracing = False

    def install(self, base_depth: int) -> None:
        self.base_depth = base_depth
        self._apply()
        sys.getrecursionlimit = self.get
        sys.setrecursionlimit = self.set

    def restore(self) -> None:
        sys.getrecursionlimit = self.real_get
        sys.setrecursionlimit = self.real_set
        self.real_set(self.limit_before)

    def get(self) -> int:
        return self.limit

    def set(self, limit) -> None:
        if not isinstance(limit, int):
            raise TypeError(f"'{type(limit).__name__}' object cannot be interpreted as an integer")
        if limit < 1:
            raise ValueError("recursion limit must be greater or equal than 1")
        self.limit = int(limit)
        self._apply()

    def trace_mode(self, on: bool) -> None:
        """While tracing, the tracer enforces the program's limit itself and its callbacks
        get ``MARGIN`` frames of room; the program's top level runs under the plain limit."""
        self.tracing = on
        self._apply()

    def _apply(self) -> None:
        self.real_set(self.limit + self.base_depth + (self.MARGIN if self.tracing else 0))


def collect_arguments(*args, **kwargs) -> tuple:
    """Bound to ``__steptrace_args__`` while the input text is evaluated: ``f(<input>)``
    becomes ``__steptrace_args__(<input>)``."""
    return args, kwargs
