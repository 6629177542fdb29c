"""The guest component's entry point: the WIT export ``run`` (see wit/steptrace.wit).

Imported once at build time: componentize-py pre-initialises the interpreter with it, so
the tracer, the preloaded standard library and a few warm-up jobs are part of the snapshot
every instance starts from. componentize-py then calls ``WitWorld()`` once and keeps what
it returns (in its own runtime, out of Python's reach); every call of the export is that
object's ``run``. Nothing else holds the runner: ``WitWorld()`` removes the runner's
modules (this one included) from ``sys.modules``, records the interpreter state that
batch isolation restores (shared_state.py), checks that no module a program can import
leads to the runner, and freezes the heap.
"""

import asyncio
import asyncio.unix_events
import gc
import importlib
import json
import sys
from types import BuiltinFunctionType, FunctionType, ModuleType, SimpleNamespace

import answer_values
import bounded_repr
import exposed
import guard
import job
import loops
import package_values
import shared_state
import held_modules
import stdlib_preload
import sysmon_tracer
import unittest_driver
import wire

_RUNNER_MODULES = ("guest", "job", "guard", "wire", "sysmon_tracer", "bounded_repr",
                   "shared_state", "stdlib_preload", "exposed", "analysis", "guest_packages",
                   "loops", "unittest_driver", "answer_values", "package_values",
                   # not the runner's, but no program's to import
                   "memory_resources", "held_modules")
_HIDDEN_MODULES = (job, guard, wire, sysmon_tracer, bounded_repr, shared_state, loops,
                   unittest_driver, answer_values, package_values)
_AFTER_INIT = ("componentize_py_types", "componentize_py_runtime", "os", "weakref", "random",
               "componentize_py_async_support", "componentize_py_async_support.streams",
               "componentize_py_async_support.futures")

WARM_UP_PROGRAM = """
def g(n):
    for i in range(n):
        yield {i: [i, (i,), {i}, 'x' * i]}

def f(a, b=2):
    c = [a, b]
    for i in c:
        a += i
    try:
        raise ValueError(a)
    except ValueError as e:
        print('caught', e)
    items = list(g(3))
    return a, items

class Box:
    def __init__(self):
        self.items = []

    def put(self, x):
        self.items.append(x)
        return len(self.items)
"""

WARM_UP_SCRIPT = """
import asyncio, sys
async def twice(x):
    await asyncio.sleep(0)
    return 2 * x
n = int(input())
for line in sys.stdin:
    n += len(line)
print(asyncio.run(twice(n)))
"""

WARM_UP_TEST = """
import unittest
class TestBox(unittest.TestCase):
    def test_put(self):
        self.assertEqual(Box().put(1), 1)
"""


def _warm_up() -> None:
    """Run jobs at build time, so the snapshot already holds what a first job would
    otherwise initialise lazily, and the runner's own code has answered DISABLE."""
    for request in ({"code": WARM_UP_PROGRAM, "input": "1, b=3", "expected": "(7, [])"},
                    {"code": WARM_UP_PROGRAM, "input": "x", "expected": None},
                    {"code": "def f(:", "input": "", "expected": None},
                    {"code": WARM_UP_PROGRAM, "input": "1, b=3", "mode": "analyse"},
                    {"code": WARM_UP_PROGRAM, "input": "1, b=3", "mode": "run"},
                    {"code": WARM_UP_SCRIPT, "input": "1\nab\n", "shape": "script"},
                    {"code": WARM_UP_PROGRAM, "entry": "Box", "input": "",
                     "calls": [{"method": "put", "input": "[1]"}], "expected": "1"},
                    {"code": WARM_UP_PROGRAM, "entry": "TestBox.test_put", "input": "",
                     "test": WARM_UP_TEST}):
        result = json.loads(job.handle(json.dumps(request)))
        if result.get("status") in ("crashed", "tampered") or (
                "shape" in request or "calls" in request or "test" in request) and (
                result.get("status") != "ok" or result.get("output_matches") is False):
            raise RuntimeError(f"the guest's warm-up job failed: {result}")
    # the interpreter as a batch job leaves it (a job-isolation job leaves its streams in
    # place: its instance is not used again), for the snapshot every instance starts from
    guard.wind_down(True)
    guard.leave(True)


def _install_event_loop() -> None:
    """asyncio's loop in the sandbox is exposed.SandboxEventLoop (the selector loop's
    self-pipe needs ``socket.socketpair``, which WASI refuses): what ``asyncio.run``,
    ``asyncio.new_event_loop()`` and ``asyncio.EventLoop``/``SelectorEventLoop`` make."""
    loop = exposed.SandboxEventLoop
    asyncio.unix_events._UnixDefaultEventLoopPolicy._loop_factory = loop
    for module in (asyncio, asyncio.unix_events):
        module.SelectorEventLoop = module.EventLoop = loop


_install_event_loop()
package_values.register()  # numpy's values as numpy prints them (a native guest's packages)
guard.runner_globals = frozenset(bounded_repr.address(module.__dict__) for module in
                                 (job, guard, wire, sysmon_tracer, bounded_repr, shared_state,
                                  loops, stdlib_preload, unittest_driver, answer_values,
                                  package_values,
                                  sys.modules["analysis"], sys.modules[__name__]))
guard.install()
guard.seal()
sysmon_tracer.install()
_warm_up()
job.PRELOADED = {"imported": list(stdlib_preload.imported),
                 "failed": {**stdlib_preload.failed, **held_modules.failed},
                 "packages": list(stdlib_preload.packages),
                 "bundled": len(held_modules.names())}
job.PACKAGE_FILES = held_modules.package_files()

_ENTRY = SimpleNamespace(run=job.handle)
_THIS = sys.modules[__name__]


def _hidden_ids() -> set[int]:
    """Objects no program may reach: the runner's module namespaces and functions, the
    entry object, sys.monitoring's namespace."""
    found = {id(_ENTRY), id(guard._MONITORING)}  # (its ``events``, plain numbers, are not)
    for module in _HIDDEN_MODULES + (_THIS,):
        found.add(id(module))
        found.add(id(module.__dict__))
        for value in module.__dict__.values():
            if type(value) is FunctionType and value.__globals__ is module.__dict__:
                found.add(id(value))
    return found


_BUILTIN_SELF = BuiltinFunctionType.__dict__["__self__"].__get__
_MODULE_DICT = ModuleType.__dict__["__dict__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__


def _monitoring_function(value) -> bool:
    """A function of sys.monitoring (read with C getters: a package's lazy objects, such
    as six's moved modules, run code on any other attribute read)."""
    return type(value) is BuiltinFunctionType and _BUILTIN_SELF(value) is guard._MONITORING


def exposure() -> list[str]:
    """Where a module a program can reach (anything in ``sys.modules``), or a class it
    exposes, holds one of the hidden objects (or a sys.monitoring function; ``sys``
    itself holds the stand-in, guard.seal). Run when the guest is built: the build
    fails if anything is found. Only C getters read the modules and classes: no
    package's code runs (and imports what it would otherwise import lazily)."""
    hidden = _hidden_ids()
    found = []
    for name, module in list(sys.modules.items()):
        if not issubclass(type(module), ModuleType):
            continue
        namespace = _MODULE_DICT(module)
        if type(namespace) is not dict:
            continue
        for key, value in list(namespace.items()):
            if id(value) in hidden or _monitoring_function(value):
                found.append(f"{name}.{key}")
            elif issubclass(type(value), type):
                for attr, inner in list(_TYPE_DICT(value).items()):
                    if id(inner) in hidden or _monitoring_function(inner):
                        found.append(f"{name}.{key}.{attr}")
    return found


def WitWorld():  # noqa: N802 (the name componentize-py looks for)
    """componentize-py's constructor for the export: called once, when the component is
    built; what it returns is kept by componentize-py and nowhere else."""
    for name in _RUNNER_MODULES:
        sys.modules.pop(name, None)
    # componentize-py imports these after this call returns: here first, so that the
    # snapshot batch isolation compares with (shared_state.take) already has them
    for name in _AFTER_INIT:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # What a program can import from now on: a ModuleNotFoundError naming anything else
    # is status missing_module (job.py)
    job.HELD_MODULES = frozenset(held_modules.names())
    job.AVAILABLE_MODULES = (frozenset(sys.modules) | frozenset(sys.builtin_module_names)
                             | job.HELD_MODULES)
    found = exposure()
    if found:
        raise RuntimeError("the guest exposes its runner to programs through: "
                           + ", ".join(found))
    gc.enable()  # as a program finds it (jobs leave it off between them: guard.leave)
    shared_state.take(classes=(exposed.NoSelector,),  # asyncio's, reached through its loop
                      modules=(("held_modules", held_modules),))
    # Objects of the snapshot are never garbage: keep the collector off them, so a fresh
    # instance does not touch (and copy-on-write fault) the whole heap on its first
    # collection.
    gc.collect()
    gc.freeze()
    return _ENTRY
