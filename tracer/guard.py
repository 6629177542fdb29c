"""The trust boundary while a job runs: what the interpreter looks like to the program,
and the audit hook that serves the program's channel to the runner and refuses the rest.

See job.py ("Trust boundary") for the design. This module holds the job's guarded state
(the stdout/stderr it keeps, the program's recursion limit, what was refused), swaps the
objects a program may use for the ones in exposed.py when a job starts
(``enter``), and puts the interpreter back when it ends (``leave``).

A job's ``sys.stdin`` is a fresh text stream over its stdin text (a C ``TextIOWrapper``
over a ``BytesIO``: it holds the text and nothing of the runner), replaced by the
interpreter's own when the job ends. Jobs without stdin text (most) share one empty
stream, made again only when a job left it other than as made (``_pristine``): making
one and tearing it down cost ~20 µs a job in the guest. The running asyncio loop of the
interpreter (componentize-py keeps one for its async exports) and asyncio's event loop
policy (which holds that loop as the current one) are taken away while a job runs, so
that ``asyncio.run`` starts the program's own loop (exposed.SandboxEventLoop) and
``asyncio.get_event_loop()`` finds none, as in a fresh interpreter.
Starting a thread stops the job (``unsupported``): WASI has no threads, and a thread
that could not start would otherwise be an ordinary RuntimeError a program could catch
and go on from, with a different behaviour than it would have anywhere else.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import _asyncio  # noqa: E402
import _io  # noqa: E402
import _random  # noqa: E402
import _weakref  # noqa: E402
import asyncio.events  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402

import exposed  # noqa: E402
from bounded_repr import address as _address  # noqa: E402
import shared_state  # noqa: E402
import sysmon_tracer as _tracer  # noqa: E402
import wire  # noqa: E402

RANDOM_SEED = 0  # every job's ``random`` starts from random.seed(0), unless it asks ("seed")
MARGIN = 60      # frames of room the tracer's callbacks get above the program

# ------------------------------------------------------------------ captured when built
_SYS = sys.__dict__            # sys's namespace: stores here cannot run a program's __setattr__
_GC = gc.__dict__
_STDOUT, _STDERR, _STDIN = sys.stdout, sys.stderr, sys.stdin
_TEXT_STREAM, _BYTES_STREAM = io.TextIOWrapper, io.BytesIO  # C classes: nothing to rebind
# their own getters and methods: an instance attribute cannot answer for them
_STREAM_GET = {name: _TEXT_STREAM.__dict__[name].__get__
               for name in ("buffer", "encoding", "errors", "line_buffering",
                            "write_through", "_CHUNK_SIZE")}
_INSTANCE_DICT = _io._IOBase.__dict__["__dict__"].__get__  # both streams' attributes
_RAW_CLOSED = _BYTES_STREAM.__dict__["closed"].__get__
_RAW_TELL, _RAW_GETVALUE = _BYTES_STREAM.tell, _BYTES_STREAM.getvalue
_weakref_count = _weakref.getweakrefcount
_get_running_loop, _set_running_loop = _asyncio._get_running_loop, _asyncio._set_running_loop
_ASYNCIO_EVENTS = asyncio.events.__dict__  # holds the event loop policy (and its loop)
_POLICY = "_event_loop_policy"
_MONITORING = sys.monitoring
_REFUSED_MONITORING = exposed.RefusedNamespace("sys.monitoring")
_GC_GARBAGE = gc.garbage
_gc_enable, _gc_disable = gc.enable, gc.disable
_SET_RECURSION = sys.setrecursionlimit
_BUILD_RECURSION = sys.getrecursionlimit()
_BUILTINS = builtins.__dict__
_BUILTINS_STATE = dict(_BUILTINS)
_getframe = sys._getframe
_seed = _random.Random.seed     # the C method: random.seed (Python) may be rebound
_RANDOM = random._inst
_JOIN = "".join
_EXPOSED = exposed.__dict__
_EXPOSED_STATE = dict(_EXPOSED)
# The runner's own classes, compared after every job (a change is ``tampered``). Not
# exposed.SandboxEventLoop and NoSelector: they are asyncio's event loop as a program
# sees it (``asyncio.SelectorEventLoop``), which a program may change as it may change
# any of the standard library's classes; batch isolation puts them back as it does those
# (shared_state.take).
_EXPOSED_CLASSES = [(shared_state.settle(cls) or cls, dict(cls.__dict__)) for cls in
                    (exposed.StopTracing, exposed.StdStream, exposed.StdErr,
                     exposed.RefusedNamespace, exposed.FrameView)]
_VIEW = exposed.FrameView
_TRACEBACK = types.TracebackType
_METHOD = types.MethodType
_METHOD_SELF = _METHOD.__dict__["__self__"].__get__
_THREAD = threading.Thread
_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
_TB_FRAME, _TB_NEXT, _TB_LINENO, _TB_LASTI = (_TRACEBACK.__dict__[name].__get__ for name in (
    "tb_frame", "tb_next", "tb_lineno", "tb_lasti"))
_VIEW_SLOTS = {name: _VIEW.__dict__[name].__set__ for name in _VIEW.__slots__}
_NEW_OBJECT = object.__new__
_CO_OPTIMIZED = 1  # a function's frame (its f_locals is not its globals)
# addresses (bounded_repr.address) of the runner's module namespaces (guest.py fills it
# when the guest is built): a frame running their code is below every frame a program may see
runner_globals: frozenset = frozenset()
_JOB_STDOUT, _JOB_STDERR = exposed.StdStream(), exposed.StdErr()  # they hold nothing
_TYPE_NAME = _tracer.type_name
# The job's file system (wasm_sandbox/_files.py): its working directory, entered at every
# job's start (a fresh instance starts in "/", a batch job may have left another one)
WORK_DIR = "/work"
PROGRAM_NAME = "main.py"  # sys.argv[0], as ``python main.py`` gives it
_chdir = os.chdir
_ENVIRON = os.environ
_ARGV = sys.argv  # the list componentize-py filled (empty: WASI gives no arguments)

# ------------------------------------------------------------------ state (one job)
guarding = False      # a job runs: the audit hook refuses introspection and serves channels
refused: list = []    # what the hook refused this job
streams = {1: [[], 0], 2: [[], 0]}  # fd -> [parts, characters]
max_stdout = 65_536
discard_writes = False  # after the job's stdout was taken: finalizers write nowhere
base_depth = 0        # Python frames below the program's top level
tracing = False       # the tracer enforces the program's recursion limit itself
outer_loop = None     # the interpreter's running asyncio loop, put back after the job
outer_policy = None   # ... and its event loop policy (which holds its current loop)
# (both kept after the job too: leave() checks that they are what is in place)
THREADS_MESSAGE = ("the program starts a thread; the sandbox (WASI) has no threads"
                   if sys.platform == "wasi" else "the program starts a thread; the "
                   "native backend's jail allows no threads")
# Threads packages start for themselves, by their class (module.qualname), and the way to
# go without (docs/guides/packages.md, "Threads")
KNOWN_THREADS = {
    "tqdm._monitor.TMonitor": "tqdm's monitor thread, started with the first progress bar: "
                              "set tqdm.tqdm.monitor_interval = 0 before it to go without "
                              "(it only refreshes bars that stall)",
}
files_used = False    # the job opened a file or directory, changed directory, or sqlite3
in_work_dir = False   # this instance has changed into WORK_DIR (_enter_work_dir)

# ------------------------------------------------------------------ the audit hook
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# What leaves a descriptor (a file, a directory iterator, a database) the program could
# keep, or another working directory: in batch isolation the next job gets a fresh
# instance (the result's ``files_used``; wasm_sandbox/_files.py)
_FILE_EVENTS = frozenset({"open", "os.scandir", "os.chdir", "sqlite3.connect"})
_REFUSED_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions",
                             "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                             "sys.settrace", "sys.setprofile", "sys.addaudithook",
                             "sys.monitoring.register_callback"})


def _audit(event: str, args: tuple) -> None:
    """The audit hook (installed once, for the life of the interpreter). While a job runs:
    serve the ``steptrace.*`` channel (exposed.py) and refuse what would lead a program to
    the runner (frames, object lists, tracing hooks)."""
    global files_used
    if _tracer.own or not guarding:
        return
    if event[:10] == "steptrace.":
        handler = _CHANNELS.get(event)
        if handler is not None:
            handler(args)
        return
    if event == "object.__getattr__":
        if len(args) < 2 or args[1] not in _FRAME_ATTRIBUTES:
            return
        what = "object.__getattr__ " + args[1]
    elif event == "object.__setattr__":
        # a function's __code__ swapped: in batch isolation a library function would keep
        # the program's code for later jobs, which no namespace comparison can see
        if len(args) < 2 or args[1] != "__code__":
            return
        what = "object.__setattr__ __code__"
    elif event in _FILE_EVENTS:
        files_used = True
        return
    elif event in _REFUSED_EVENTS:
        what = event
    elif event[:14] == "_thread.start_":  # start_new_thread, start_joinable_thread
        _tracer.halt("unsupported", _threads_message(args))
    else:
        return
    _refuse(what)


def _threads_message(args: tuple) -> str:
    """The ``unsupported`` message of a thread's start: which thread, when a subclass of
    ``threading.Thread`` starts it (its class, read with type's own getters: no program
    code runs), and the way around it for a known one."""
    start = args[0] if args else None
    if type(start) is not _METHOD:
        return THREADS_MESSAGE
    cls = type(_METHOD_SELF(start))
    # by identity only: a metaclass's __eq__ is program code
    if cls is _THREAD or not any(base is _THREAD for base in _TYPE_MRO(cls)):
        return THREADS_MESSAGE
    namespace = _TYPE_DICT(cls)
    module = namespace.get("__module__") if shared_state.plain(namespace) else None
    qualname = _TYPE_QUALNAME(cls)
    if type(qualname) is not str:  # a str subclass would format itself
        return THREADS_MESSAGE
    name = f"{module}.{qualname}" if type(module) is str else qualname
    known = KNOWN_THREADS.get(name)
    return (f"the program starts a thread ({wire.text(name, 200)}"
            f"{': ' + known if known else ''}); the sandbox (WASI) has no threads")


def _refuse(what: str):
    refused.append(what)
    raise RuntimeError(f"steptrace: {what} is not available to traced programs")


def _on_write(args: tuple) -> None:
    if len(args) != 2 or type(args[0]) is not int or not isinstance(args[1], str):
        return
    stream = streams.get(args[0])
    if stream is None or discard_writes:
        return
    text = args[1] if type(args[1]) is str else _JOIN((args[1],))
    room = max_stdout - stream[1]
    if len(text) > room:
        stream[0].append(text[:room])
        stream[1] = max_stdout
        name = "stdout" if args[0] == 1 else "stderr"
        _tracer.halt("output_limit", f"{name} exceeds {max_stdout} characters")
    stream[0].append(text)
    stream[1] += len(text)


def _on_get_recursion(args: tuple) -> None:
    if len(args) == 1 and type(args[0]) is list and len(args[0]) == 1:
        args[0][0] = _tracer.recursion_limit


def _on_set_recursion(args: tuple) -> None:
    """``sys.setrecursionlimit`` as CPython does it, for the program's own limit: the
    depth counted is the program's (its top level is depth 1)."""
    if len(args) != 1 or type(args[0]) is not int:
        return
    limit = args[0]
    if limit < 1:
        raise ValueError("recursion limit must be greater or equal than 1")
    depth = _absolute_depth(3) - base_depth + 1  # the caller of exposed.setrecursionlimit
    if depth >= limit:
        raise RecursionError(f"cannot set the recursion limit to {limit} at the recursion "
                             f"depth {depth}: the limit is too low")
    _tracer.recursion_limit = limit
    # CPython refuses a limit at or below the current depth, and this handler's frames
    # are on the stack: a limit just above the program's depth gets a few frames more.
    apply_recursion(floor=_absolute_depth(0) + 2)


def _on_refuse(args: tuple) -> None:
    _refuse(wire.text(args[0], 100) if args else "?")


def _on_getframe(args: tuple) -> None:
    """``sys._getframe(depth)`` for a job (exposed.getframe): FrameViews of the frames
    from the caller's (``depth`` below it) down to the first frame of the runner (its
    module namespaces: ``runner_globals``) — the tracer's callbacks when the tracer runs a
    program's ``__repr__``, else the runner's frame that called the program — which no
    view shows. Frames are read here, with the audit hook's own access; the views hold
    copies (a function frame's locals copied, no frame)."""
    if (len(args) != 2 or type(args[0]) is not int or type(args[1]) is not list
            or len(args[1]) != 1):
        return
    _tracer.own = True
    try:
        frame = _getframe(3)  # this handler, _audit, exposed.getframe, then its caller
    finally:
        _tracer.own = False
    depth = args[0]
    frames = []
    while frame is not None and _address(frame.f_globals) not in runner_globals:
        frames.append(frame)
        frame = frame.f_back
    if depth >= len(frames):
        raise ValueError("call stack is not deep enough")
    args[1][0] = _frame_view(frames[max(depth, 0)], {})


def _frame_view(frame, made: dict):
    """The FrameView of ``frame`` (a frame below the runner's), whose ``f_back`` is the
    view of the frame below it, down to the first frame of the runner's (None there).
    ``made``: views already made in this call, by the frame's address (a traceback's
    frames share their callers)."""
    chain = []
    while (frame is not None and _address(frame.f_globals) not in runner_globals
           and _address(frame) not in made):
        chain.append(frame)
        frame = frame.f_back
    below = made.get(_address(frame)) if frame is not None else None
    for frame in reversed(chain):
        view = _NEW_OBJECT(_VIEW)
        names = frame.f_globals
        _VIEW_SLOTS["f_code"](view, frame.f_code)
        _VIEW_SLOTS["f_lineno"](view, frame.f_lineno)
        _VIEW_SLOTS["f_lasti"](view, frame.f_lasti)
        _VIEW_SLOTS["f_globals"](view, names)
        _VIEW_SLOTS["f_locals"](view, dict(frame.f_locals)
                                if frame.f_code.co_flags & _CO_OPTIMIZED else frame.f_locals)
        _VIEW_SLOTS["f_back"](view, below)
        made[_address(frame)] = below = view
    return below


def _on_tbframes(args: tuple) -> None:
    """The entries of a traceback for a job (exposed.walk_tb): (FrameView, line number,
    last instruction) of each, read here with the audit hook's own access to
    ``tb_frame``; an entry whose frame is the runner's is left out. Only an exact
    traceback is read (its fields are C members: no program code runs)."""
    if len(args) != 2 or type(args[1]) is not list or len(args[1]) != 1:
        return
    tb, found = args[0], []
    _tracer.own = True
    try:
        while type(tb) is _TRACEBACK:
            found.append((_TB_FRAME(tb), _TB_LINENO(tb), _TB_LASTI(tb)))
            tb = _TB_NEXT(tb)
    finally:
        _tracer.own = False
    made: dict = {}
    args[1][0] = [(_frame_view(frame, made), lineno, lasti) for frame, lineno, lasti in found
                  if _address(frame.f_globals) not in runner_globals]


_CHANNELS = {"steptrace.write": _on_write, "steptrace.getrecursionlimit": _on_get_recursion,
             "steptrace.setrecursionlimit": _on_set_recursion, "steptrace.refuse": _on_refuse,
             "steptrace.getframe": _on_getframe, "steptrace.tbframes": _on_tbframes}


def _absolute_depth(skip: int) -> int:
    """Python frames on the stack from ``skip`` frames above the caller down."""
    _tracer.own = True
    try:
        frame = _getframe(skip + 1)
    finally:
        _tracer.own = False
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def apply_recursion(floor: int = 0) -> None:
    """The interpreter's real limit: the program's, plus the runner's frames below it, plus
    room for the tracer's callbacks while tracing; at least ``floor``."""
    _SET_RECURSION(max(floor, _tracer.recursion_limit + base_depth + (MARGIN if tracing else 0)))


def install() -> None:
    """Install the audit hook (once, when the guest is built; it cannot be removed)."""
    sys.addaudithook(_audit)


def new_stdin(text: str):
    """A job's ``sys.stdin``: a text stream over ``text`` as a real one reads it (UTF-8,
    universal newlines, ``.buffer`` the bytes), named ``<stdin>``."""
    raw = _BYTES_STREAM(text.encode("utf-8", "surrogatepass"))
    raw.name = _STDIN_NAME
    stream = _TEXT_STREAM(raw, encoding="utf-8", errors="surrogatepass", newline=None)
    stream.mode = _STDIN_MODE
    return stream


_STDIN_NAME, _STDIN_MODE = "<stdin>", "r"
_CHUNK_SIZE = _STREAM_GET["_CHUNK_SIZE"](new_stdin(""))
empty_stdin = new_stdin("")  # the stdin of jobs without stdin text, while _pristine


def _pristine(stream) -> bool:
    """Whether an empty stdin is as ``new_stdin`` made it: attached and open, nothing
    written to its bytes, configured as made, no attribute but its name and mode (the
    very objects set), and no weak reference (a program's finalizer on it would run in a
    later job). Read with the C types' own getters: no program code runs. Reading an
    empty stream changes nothing a program can see."""
    get = _STREAM_GET
    raw = get["buffer"](stream)
    if type(raw) is not _BYTES_STREAM or _RAW_CLOSED(raw) or _RAW_TELL(raw) != 0:
        return False
    if _RAW_GETVALUE(raw) or _weakref_count(stream) or _weakref_count(raw):
        return False
    if get["line_buffering"](stream) or get["write_through"](stream):
        return False
    encoding, errors = get["encoding"](stream), get["errors"](stream)
    if type(encoding) is not str or encoding != "utf-8" or type(errors) is not str \
            or errors != "surrogatepass" or get["_CHUNK_SIZE"](stream) != _CHUNK_SIZE:
        return False
    return _only(_INSTANCE_DICT(stream), "mode", _STDIN_MODE) and \
        _only(_INSTANCE_DICT(raw), "name", _STDIN_NAME)


def _only(namespace, key: str, value) -> bool:
    """``namespace`` is ``{key: value}``, the very key and value objects (compared by
    identity: a program's str subclass key would answer ``==``)."""
    if type(namespace) is not dict or len(namespace) != 1:
        return False
    for found, item in namespace.items():
        return found is key and item is value
    return False


def stdin_for(text: str):
    """The ``sys.stdin`` of a job with this stdin text (``leave`` keeps the empty one
    pristine)."""
    return new_stdin(text) if text else empty_stdin


def _enter_work_dir() -> None:
    """Change into ``WORK_DIR`` once per instance (a WASI call, a few µs): an instance
    starts from the snapshot in ``/``, and a batch job that changed directory (the audit
    event ``os.chdir``) has the next job run in a fresh instance (``files_used``)."""
    global in_work_dir
    if not in_work_dir:
        try:
            _chdir(WORK_DIR)
            in_work_dir = True
        except OSError:  # a guest run without its directories (the build's warm-up)
            pass


def enter(limits: dict, seed: object, stdin: str = "", argv: tuple = (),
          env: dict | None = None) -> None:
    """A job starts: forget the last one, and hand the program its objects (exposed.py)
    in place of the interpreter's own, ``stdin`` as its standard input, its working
    directory, ``sys.argv`` (``PROGRAM_NAME`` and ``argv``) and ``os.environ`` (``env``;
    batch isolation puts both back after the job: shared_state.restore_cheap)."""
    global max_stdout, discard_writes, base_depth, tracing, outer_loop, outer_policy
    global files_used
    shared_state.first_job()
    _enter_work_dir()
    files_used = False
    _ARGV[:] = (PROGRAM_NAME, *argv)
    if env:
        for key, value in env.items():
            _ENVIRON[key] = value
    _tracer.cuts = {}
    _tracer.reset_stop()
    refused.clear()
    streams[1] = [[], 0]
    streams[2] = [[], 0]
    max_stdout = limits["max_stdout"]
    discard_writes = False
    tracing = False
    _tracer.recursion_limit = _BUILD_RECURSION
    # The program's top level runs three levels above this frame (run_job, _run, then
    # exec's entry into the interpreter from C), as a script's top level runs above the
    # interpreter's own entry: calibrated so that top-level recursion fails where plain
    # CPython's does.
    base_depth = _absolute_depth(1) + 2
    apply_recursion()
    _seed(_RANDOM, seed if type(seed) is int else RANDOM_SEED)
    _RANDOM.gauss_next = None
    _SYS["stdout"], _SYS["stderr"] = _JOB_STDOUT, _JOB_STDERR
    _SYS["stdin"] = stdin_for(stdin)
    outer_loop = _get_running_loop()
    _set_running_loop(None)
    outer_policy = _ASYNCIO_EVENTS.get(_POLICY)
    _ASYNCIO_EVENTS[_POLICY] = None  # the job's policy is made afresh when first asked for
    if _GC_GARBAGE:  # nothing can have put the runner's garbage there; never keep any
        _GC_GARBAGE.clear()
    _gc_enable()  # off between jobs (leave)


def set_tracing(on: bool) -> None:
    """While tracing, the tracer enforces the program's limit itself and its callbacks get
    ``MARGIN`` frames of room."""
    global tracing
    tracing = on
    apply_recursion()


def stdout_text() -> str:
    """What the program wrote to its stdout; from now on its writes go nowhere (a
    finalizer run after the job must not add to the job's output)."""
    global discard_writes
    discard_writes = True
    return _JOIN(streams[1][0])


def wind_down(reaches: bool) -> None:
    """The job's end, still guarded (its stdout taken, its writes going nowhere): what
    the program may have left in the interpreter's shared objects is taken back now — its
    stdin, its asyncio loop and policy, the builtins as built — so that whatever that
    frees (a finalizer, a weak reference's callback) runs here, under the job's guard,
    and not in the middle of the runner's checks or of a later job. A namespace whose
    keys are not all plain strings is left alone (a lookup would run the program's
    ``__eq__``): ``leave`` reports it. A job whose code cannot reach shared state
    (``reaches`` false: shared_state.reaches_shared_state) cannot have changed any of it:
    only what ``enter`` set (``sys.stdin``, asyncio's loop and policy) is put back."""
    global empty_stdin
    if not reaches:
        _SYS["stdin"] = _STDIN
        _set_running_loop(outer_loop)
        _ASYNCIO_EVENTS[_POLICY] = outer_policy
        return
    if shared_state.plain(_SYS):
        _SYS["stdin"] = _STDIN
    if not _pristine(empty_stdin):
        empty_stdin = new_stdin("")
    _set_running_loop(outer_loop)
    if shared_state.plain(_ASYNCIO_EVENTS):
        _ASYNCIO_EVENTS[_POLICY] = outer_policy
    if shared_state.differs(_BUILTINS, _BUILTINS_STATE):
        _BUILTINS.clear()
        _BUILTINS.update(_BUILTINS_STATE)


def leave(batch: bool, reaches: bool = True) -> list[str]:
    """The job is over: from here until the next job's ``enter`` no program code runs. The
    garbage collector is off (a collection would run the program's finalizers and
    ``gc.callbacks``) and the runner's real recursion limit is back. In job isolation that
    is all: the instance is not used again. In batch isolation (after ``wind_down``, or in
    its place when the job did not end normally) sys's streams are put back, and what
    ``wind_down`` put back is compared by identity, namespaces looked into only when their
    keys are plain strings: a finalizer that changed it again is reported, and what is put
    back now is kept alive (shared_state.bury), never freed. Returns what was not as
    ``wind_down`` left it (the host then gives the next job a fresh instance). A job
    whose code cannot reach shared state (``reaches`` false) gets its streams put back
    and nothing compared: it had none of those objects."""
    global empty_stdin
    _gc_disable()
    _SET_RECURSION(_BUILD_RECURSION)
    found = []
    if not batch:
        return found
    if not reaches:
        _SYS["stdout"], _SYS["stderr"], _SYS["stdin"] = _STDOUT, _STDERR, _STDIN
        return found
    if not shared_state.plain(_SYS):
        found.append("sys (a key that is not a str)")
    else:
        _SYS["stdout"], _SYS["stderr"] = _STDOUT, _STDERR
        if _SYS.get("stdin") is not _STDIN:
            found.append("sys.stdin")
            shared_state.bury(_SYS.get("stdin"))
            _SYS["stdin"] = _STDIN
    if not _pristine(empty_stdin):
        found.append("the empty stdin")
        shared_state.bury(empty_stdin)
        empty_stdin = new_stdin("")
    if not shared_state.plain(_ASYNCIO_EVENTS):
        found.append("asyncio.events (a key that is not a str)")
    elif _get_running_loop() is not outer_loop or _ASYNCIO_EVENTS.get(_POLICY) is not outer_policy:
        found.append("asyncio's event loop")
        shared_state.bury((_get_running_loop(), _ASYNCIO_EVENTS.get(_POLICY)))
        _set_running_loop(outer_loop)
        _ASYNCIO_EVENTS[_POLICY] = outer_policy
    if shared_state.differs(_BUILTINS, _BUILTINS_STATE):
        found.append("builtins")
        shared_state.put_back(_BUILTINS, _BUILTINS_STATE)
    return found


def exposed_changed() -> list[str]:
    """exposed.py's module and classes as built (put back if not: no program code runs,
    and what is taken out is kept alive, shared_state.bury)."""
    found = []
    if shared_state.differs(_EXPOSED, _EXPOSED_STATE):
        found.append("the program changed the runner's exposed module")
        shared_state.put_back(_EXPOSED, _EXPOSED_STATE)
    for cls, state in _EXPOSED_CLASSES:
        if shared_state.put_back_class(cls, state):
            found.append(f"the program changed the runner's class {_TYPE_NAME(cls, None)}")
    return found


def seal() -> None:
    """Hand programs, for good, the stand-ins of what would lead them to the runner:
    ``sys.monitoring`` (a program that could switch the tracer's events off and on would
    hide steps), ``sys._getframe`` (frames lead to the runner's), the recursion-limit
    functions (the program's own limit) and ``gc.set_debug`` (``DEBUG_SAVEALL`` would hand
    over the runner's garbage). Called once, when the guest is built: they are never the
    real ones again, so no program code that runs at any time — a finalizer, a hook,
    a ``__eq__`` met by a check — can reach the real ones. The runner holds its own
    references, taken when its modules were imported."""
    _SYS["getrecursionlimit"] = exposed.getrecursionlimit
    _SYS["_getframe"] = exposed.getframe
    # traceback's walks read tb_frame, refused to programs: the same walks over frame
    # views (traceback.format_exc, print_exc, logging's exception)
    traceback.walk_tb = exposed.walk_tb
    traceback._walk_tb_with_full_positions = exposed.walk_tb_with_full_positions
    _SYS["setrecursionlimit"] = exposed.setrecursionlimit
    _SYS["monitoring"] = _REFUSED_MONITORING
    _GC["set_debug"] = exposed.refused_set_debug
