"""Everything of the runner that a traced program can see, and nothing else.

A program can follow any object it holds to the class that made it and to the globals of
the module that defined its functions (``sys.stdout.write.__func__.__globals__``), and can
find every class through ``object.__subclasses__()``: Python does not audit either path.
So the objects a job hands to the program (its ``sys.stdout``/``sys.stderr``, its
recursion-limit functions, the stand-ins for ``sys.monitoring`` and ``gc.set_debug``, the
argument collector) live here, in a module that holds no runner state and leads back to
none. What they do for the runner goes through one channel the program cannot reach into:
``sys.audit`` with a ``steptrace.*`` event, handled by the runner's audit hook (guard.py),
which cannot be read, replaced or removed. A program that changes these objects, or calls
the channel itself, changes only what it sends: writing to stdout through
``sys.audit("steptrace.write", 1, "x")`` is printing ``x``; it cannot lift a limit or touch
what was already recorded.

``SandboxEventLoop`` is asyncio's event loop inside the sandbox (guest.py makes it the one
``asyncio.run``, ``asyncio.new_event_loop`` and ``asyncio.EventLoop`` give): the selector
loop without its self-pipe (WASI refuses ``socket.socketpair``, which is why
``asyncio.run`` failed with PermissionError) and without file descriptors to wait on;
waiting for a timer is a sleep. Single-threaded, as every loop in the sandbox is.
"""

from __future__ import annotations

import _socket
import asyncio.unix_events
import io
import selectors
import sys
import time
from itertools import islice as _islice
from operator import index as _index

_audit = sys.audit


class StopTracing(BaseException):
    """Raised into the program when a limit is hit (BaseException, so ``except Exception``
    does not swallow it; the tracer raises it again at the program's every later event).
    Its instances carry nothing the runner reads back: the status of a stopped job is kept
    where the program cannot reach, so raising one of these yourself is an ordinary
    exception."""


class StdStream:
    """``sys.stdout`` of a job (``StdErr``: ``sys.stderr``): a text stream whose writes go
    to the runner, which keeps at most the job's ``max_stdout`` characters of each and
    stops the job (``output_limit``) past that. Its instances hold nothing (no attribute
    can be set on them); what the class holds is compared with the build after the job."""

    __slots__ = ()
    _fd = 1
    encoding = "utf-8"
    errors = "strict"
    newlines = None
    line_buffering = False
    closed = False
    mode = "w"

    @property
    def name(self) -> str:
        return "<stdout>" if self._fd == 1 else "<stderr>"

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        _audit("steptrace.write", self._fd, text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


class StdErr(StdStream):
    __slots__ = ()
    _fd = 2


def getrecursionlimit() -> int:
    """``sys.getrecursionlimit`` for a job: the program's own limit (see guard.py)."""
    box = [None]
    _audit("steptrace.getrecursionlimit", box)
    return box[0]


def setrecursionlimit(limit) -> None:
    """``sys.setrecursionlimit`` for a job, with CPython's checks (see guard.py)."""
    _audit("steptrace.setrecursionlimit", _index(limit))


class FrameView:
    """What ``sys._getframe`` gives a job in place of a frame: a copy of the frame's public
    fields, made when it was asked for. ``f_back`` is the view of the frame below, down to
    the frames of the program, of the standard library and of packages; below those (the
    runner's frames) it is None. ``f_locals`` is a copy of a function frame's locals (a
    module frame's are its globals). Enough for code that reads its caller (``logging``
    finding where a log call was made, ``traceback.extract_stack``); not a frame
    (``inspect.getframeinfo`` refuses it)."""

    __slots__ = ("f_code", "f_lineno", "f_lasti", "f_globals", "f_locals", "f_back")

    def __repr__(self) -> str:
        code = self.f_code
        return (f"<frame view, file {code.co_filename!r}, line {self.f_lineno}, "
                f"code {code.co_name}>")


def walk_tb(tb):
    """``traceback.walk_tb`` for a job: (frame view, line number) for each entry of the
    traceback ``tb``. A traceback's frames are refused to programs (``tb_frame`` leads to
    the runner's frames), so the runner reads them and hands FrameViews, as
    ``sys._getframe`` does; an entry in a frame of the runner's is left out."""
    for view, lineno, _lasti in _tb_entries(tb):
        yield view, lineno


def walk_tb_with_full_positions(tb):
    """``traceback._walk_tb_with_full_positions`` for a job (what ``extract_tb``,
    ``format_exception``, ``print_exc``, ``format_exc`` and ``logging``'s
    ``exception`` read): as CPython's, over the frame views of ``walk_tb``."""
    for view, lineno, lasti in _tb_entries(tb):
        if lasti < 0:
            positions = (None, None, None, None)
        else:
            positions = next(_islice(view.f_code.co_positions(), lasti // 2, None))
        if positions[0] is None:
            yield view, (lineno,) + positions[1:]
        else:
            yield view, positions


def _tb_entries(tb) -> list:
    """(frame view, line number, last instruction) of each entry of ``tb`` (guard.py)."""
    box = [[]]
    _audit("steptrace.tbframes", tb, box)
    return box[0]


def getframe(depth=0) -> FrameView:
    """``sys._getframe`` for a job: a FrameView of the caller's frame (``depth`` 0) or
    of one below it; ValueError below the program's frames, as CPython's below the
    stack's bottom."""
    box = [None]
    _audit("steptrace.getframe", _index(depth), box)
    return box[0]


class RefusedNamespace:
    """Stands in for ``sys.monitoring`` while a program runs: any use is refused (the
    program gets RuntimeError). A program that could switch the tracer's events off and
    on again would hide steps from the trace, which no check after the job could see."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        object.__setattr__(self, "_what", what)

    def __getattribute__(self, name: str):
        _audit("steptrace.refuse", object.__getattribute__(self, "_what"))
        raise RuntimeError("steptrace: not available to traced programs")

    def __setattr__(self, name: str, value) -> None:
        _audit("steptrace.refuse", object.__getattribute__(self, "_what"))


def refused_set_debug(flags) -> None:
    """``gc.set_debug`` while a program runs: ``DEBUG_SAVEALL`` would hand the program the
    runner's own garbage (its frames among them) through ``gc.garbage``."""
    _audit("steptrace.refuse", "gc.set_debug")


def collect_arguments(*args, **kwargs) -> tuple:
    """Bound to ``__steptrace_args__`` while the input text is evaluated: ``f(<input>)``
    becomes ``__steptrace_args__(<input>)``."""
    return args, kwargs


def no_name_lookup(*args, **kwargs):
    """``socket.getaddrinfo``, ``gethostbyname``, ``gethostbyname_ex``, ``gethostbyaddr``
    and ``getnameinfo`` in the sandbox: WASI's name lookup traps this CPython build's
    instance (a program calling ``requests.get`` ended ``crashed``), and the sandbox has
    no network: the error a machine without one gives (requests: ``ConnectionError``)."""
    raise _socket.gaierror(_socket.EAI_AGAIN, "Temporary failure in name resolution "
                           "(the sandbox has no network)")


NAME_LOOKUPS = ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr",
                "getnameinfo")


class NoSelector(selectors.BaseSelector):
    """The selector of ``SandboxEventLoop``: no file descriptor can be waited on (WASI
    gives a program none to wait for); ``select`` sleeps until the next timer. With no
    timer and nothing ready the loop could never go on: that is an error, where a real
    loop would wait forever."""

    def register(self, fileobj, events, data=None):
        raise OSError("the sandbox has no file descriptors to wait on")

    def unregister(self, fileobj):
        raise KeyError(fileobj)

    def select(self, timeout=None):
        if timeout is None:
            raise RuntimeError("the event loop would wait forever: no task is ready and "
                               "no timer is set")
        if timeout > 0:
            time.sleep(timeout)
        return []

    def get_map(self):
        return {}

    def close(self) -> None:
        return None


class SandboxEventLoop(asyncio.unix_events._UnixSelectorEventLoop):
    """asyncio's event loop in the sandbox: see the module docstring."""

    def __init__(self, selector=None) -> None:
        super().__init__(NoSelector() if selector is None else selector)

    def _make_self_pipe(self) -> None:
        self._ssock = self._csock = None  # no other thread can wake the loop

    def _close_self_pipe(self) -> None:
        return None

    def add_signal_handler(self, sig, callback, *args):
        raise RuntimeError("signal handlers are not available in the sandbox")
