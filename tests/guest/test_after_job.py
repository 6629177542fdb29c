"""After a job ends no program code runs, and the runner holds nothing a program can reach.

A program's objects meet the runner's checks after its job (keys it put in module
namespaces, objects it hung finalizers and callbacks on, the exposed module's dict): each
attack here arms its objects at the end of the job so that any code of theirs that runs
after the job would show (an infinite loop: ``timeout``; an exception: ``crashed``), and
the result must be what running the program gives. In both isolation modes the next job
in the same Sandbox is traced exactly as in a fresh instance. The walk then looks at
everything a program can reach and finds no object of the runner's."""

from __future__ import annotations

import pytest

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

pytestmark = pytest.mark.slow  # the walks take tens of seconds: left out by make test-fast

KNOWN = "def f(n=3):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n"

# A str subclass that is harmless while the job runs and, once armed at the job's end,
# loops forever if anything hashes it and raises if anything compares it.
EVIL = '''
ARMED = []
class Evil(str):
    def __hash__(self):
        if ARMED:
            while True:
                pass
        return str.__hash__(self)
    def __eq__(self, other):
        if ARMED:
            raise SystemExit("ran after the job")
        return False
    def __ne__(self, other):
        return not self.__eq__(other)
'''

# name -> (program, {isolation: (status, exception_message, note)})
FRESH = "; later jobs ran in a fresh instance"
ATTACKS = {
    "module_key": (EVIL + '''
import json
def f():
    vars(json)[Evil('dumps')] = 1
    ARMED.append(1)
    return 1
''', {"job": ("ok", None, None),
      "batch": ("ok", None, "changed shared interpreter state (json)" + FRESH)}),
    "sys_key": (EVIL + '''
import sys
def f():
    sys.__dict__[Evil('stdout')] = 1
    ARMED.append(1)
    return 1
''', {"job": ("ok", None, None),
      "batch": ("ok", None, "changed shared interpreter state (sys (a key that is not a str), "
                            "sys)" + FRESH)}),
    "asyncio_key": (EVIL + '''
import asyncio.events
def f():
    asyncio.events.__dict__[Evil('_event_loop_policy')] = 1
    ARMED.append(1)
    return 1
''', {"job": ("ok", None, None),
      "batch": ("ok", None, "changed shared interpreter state (asyncio.events (a key that is "
                            "not a str), asyncio.events)" + FRESH)}),
    # the builtins are put back every job, by clearing them: no key is compared
    "builtins_key": (EVIL + '''
import builtins
def f():
    builtins.__dict__[Evil('len')] = 1
    ARMED.append(1)
    return 1
''', {"job": ("ok", None, None), "batch": ("ok", None, None)}),
    # the same name, a key that claims to equal the runner's: still a change (it was
    # not noticed at all in job isolation)
    "exposed_key": ('''
import sys
ARMED = []
class Liar(str):
    def __hash__(self):
        return str.__hash__(self)
    def __eq__(self, other):
        return True if ARMED else str.__eq__(self, other)
def f():
    g = sys.getrecursionlimit.__globals__
    g[Liar('getframe')] = g.pop('getframe')
    ARMED.append(1)
    return 1
''', {isolation: ("tampered", "the program changed the runner's exposed module", None)
      for isolation in ("job", "batch")}),
    "exposed_class_key": (EVIL + '''
import sys
def f():
    type(sys.stdout).__dict__  # a mappingproxy: the store goes through type's setattr
    setattr(type(sys.stdout), Evil('flush'), 1)
    ARMED.append(1)
    return 1
''', {isolation: ("tampered", "the program changed the runner's class StdStream", None)
      for isolation in ("job", "batch")}),
    # finalizers, gc callbacks, weak reference callbacks and warnings filters left to run
    # after the job, each trying to switch the tracer off for later jobs
    "finalizers_and_callbacks": ('''
import gc, sys, json, weakref, re, warnings, decimal
def off(*args):
    try:
        sys.monitoring.set_events(3, 0)
    except BaseException as e:
        json.seen = repr(e)
class D:
    def __del__(self):
        off()
class Context(decimal.Context):
    def __del__(self):
        off()
def f():
    a = D(); a.me = a
    json.holder = D()
    gc.callbacks.append(off)
    weakref.ref(re.compile('x+y+z'), off)
    warnings.filters.insert(0, ('ignore', None, Warning, None, 0))
    decimal.setcontext(Context())
    return 1
''', {"job": ("ok", None, None),
      "batch": ("ok", None, "changed shared interpreter state (json)" + FRESH)}),
    # a library function changes a module for the program, whose code names nothing but
    # the library: pickle's GLOBAL opcode reads json.__dict__, SETITEM rebinds dumps
    "library_rebinds": ('''
import pickle
def f():
    pickle.loads(b"cjson\\n__dict__\\nS'dumps'\\ncbuiltins\\nlen\\ns.")
    return 1
''', {"job": ("ok", None, None),
      "batch": ("ok", None, "changed shared interpreter state (json)" + FRESH)}),
    # no import, no attribute store, no name: a class pattern's keywords are constants,
    # and they reach the builtins' dict through a builtin's __self__ (the next job's
    # range would be this one's)
    "pattern_keywords": ('''
def f():
    match len:
        case object(__self__=object(__dict__=d)):
            d['range'] = lambda n: [n]
    return 1
''', {"job": ("ok", None, None), "batch": ("ok", None, None)}),
}


@pytest.fixture(scope="module")
def box():
    """Time enough for the walks; an armed hash that loops would end as timeout."""
    with Sandbox(Limits(timeout_s=120.0)) as sandbox:
        yield sandbox


def _run(box, code, isolation="job", mode=None):
    request = {"code": code, "input": "", "entry": "f"}
    if mode is not None:
        request["mode"] = mode
    return box.run(request, isolation)


@pytest.fixture(scope="module")
def clean(box) -> dict:
    return _run(box, KNOWN).result


def assert_next_job_exact(box, isolation, clean) -> None:
    result = _run(box, KNOWN, isolation).result
    for field in ("status", "output", "line_steps", "instruction_steps", "steps", "states"):
        assert result[field] == clean[field], field


def start_batch(box) -> None:
    assert _run(box, "def f():\n    return 0\n").fresh_instance
    assert _run(box, "def f():\n    return 1\n", "batch").fresh_instance


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", ATTACKS)
def test_no_program_code_runs_after_the_job(box, clean, name, isolation):
    program, wanted = ATTACKS[name]
    if isolation == "batch":
        start_batch(box)
    result = _run(box, program, isolation).result
    status, message, note = wanted[isolation]
    assert (result["status"], result["output"], result["exception_message"],
            result.get("note")) == (status, "1", message, note)
    assert_next_job_exact(box, isolation, clean)


# What the standard library held for first use (tracer/held_modules.py) gives a program
# to reach: unittest.mock's patches, the finder on sys.meta_path, the import system's
# lists, a module the job imported. name -> (program, the batch run's note, a later
# job's program and the output it must have).
CHANGED = "changed shared interpreter state ({}); later jobs ran in a fresh instance"
IMPORTS_XML = ("import xml.dom\ndef f():\n    return xml.dom.Node.ELEMENT_NODE\n", "1")
NEW_REACH = {
    # a patch started and never stopped: json.dumps replaced for later jobs
    "mock_patch_left_started": ('''
from unittest import mock
def f():
    mock.patch("json.dumps", return_value="patched").start()
    return 1
''', CHANGED.format("sys.modules, json, unittest, pkgutil"),
        "import json\ndef f():\n    return json.dumps([1])\n", "'[1]'"),
    # the standard library's finder taken off sys.meta_path, naming neither sys nor it
    "finder_removed": ('''
import importlib
def f():
    finders = importlib.import_module("s" + "ys").meta_path
    finders[:] = [x for x in finders if not hasattr(x, "names")]
    return 1
''', CHANGED.format("sys.meta_path"), *IMPORTS_XML),
    # the finder's held modules emptied through a module's loader
    "finder_emptied": ('''
import xml
def f():
    loader = xml.__spec__.loader
    loader._NAMES = loader._ENTRIES = ()
    return 1
''', CHANGED.format("sys.modules, held_modules"), *IMPORTS_XML),
    # the finder's loading replaced: every later import of a held module would be the
    # program's module
    "finder_replaced": ('''
import email
def f():
    loader = email.__loader__
    loader.exec_module = lambda module: module.__dict__.update(ELEMENT_NODE=99)
    return 1
''', CHANGED.format("sys.modules, held_modules"), *IMPORTS_XML),
    # a module imported on first use, changed: the next job imports it again
    "held_module_changed": ('''
import xml.dom
def f():
    xml.dom.Node.ELEMENT_NODE = 99
    return 1
''', CHANGED.format("sys.modules"), *IMPORTS_XML),
    # the job's directory put first on the import path, naming nothing of sys
    "path_changed": ('''
import importlib
def f():
    importlib.import_module("s" + "ys").path.insert(0, "/work")
    return 1
''', CHANGED.format("sys.path"), *IMPORTS_XML),
}


@pytest.mark.parametrize("name", NEW_REACH)
def test_what_the_held_standard_library_reaches_is_put_back(box, name):
    """In batch isolation each attack is reported in its run's note and the next job,
    in the same sandbox, runs as in a fresh instance; in job isolation nothing is noted
    and the next job is exact too."""
    program, note, later, output = NEW_REACH[name]
    start_batch(box)
    result = _run(box, program, "batch").result
    assert (result["status"], result["output"], result.get("note")) == ("ok", "1", note)
    after = _run(box, later, "batch")
    assert (after.result["status"], after.result["output"]) == ("ok", output)
    assert after.fresh_instance
    result = _run(box, program, "job").result
    assert (result["status"], result["output"], result.get("note")) == ("ok", "1", None)
    assert _run(box, later, "job").result["output"] == output


# ---------------------------------------------------------------------- what a program reaches
# Everything reachable from a program's namespace: its builtins, every module, every class
# (object.__subclasses__(), recursively) and their dicts, functions' globals, closures and
# defaults, bound methods' selves, slots, containers' items, the stand-ins it is handed
# (sys.stdout, sys._getframe's frame views, sys.monitoring's stand-in). The walk reports
# any function whose code comes from a runner module, any runner module's namespace or
# module object, any class a runner module defines; and, as the proof that the walk goes
# where the runner's objects would be, the exposed module's functions (the program's by
# design, one step from the runner).
WALK = r'''
import sys, builtins
RUNNER = {'guest', 'job', 'guard', 'wire', 'sysmon_tracer', 'bounded_repr', 'shared_state',
          'stdlib_preload', 'analysis', 'guest_packages', 'loops', 'unittest_driver',
          'answer_values'}
ATTRS = ('__dict__', '__globals__', '__closure__', '__defaults__', '__kwdefaults__',
         '__self__', '__func__', '__wrapped__', '__code__', '__mro__', '__bases__',
         '__class__', 'fget', 'fset', 'fdel', 'cell_contents', '__objclass__', '__module__',
         '__annotations__', '__origin__', '__args__', 'buffer', 'raw', '__weakref__',
         '__all__', 'f_back', 'f_globals', 'f_locals', 'f_code', '__loader__', '__spec__',
         'loader', '__builtins__', '__traceback__', '__context__', '__cause__', 'args',
         '__orig_bases__', '_loop_factory', '__self_class__', '__thisclass__')
LEAVES = {str, int, float, bool, type(None), bytes, complex}
SLOT = type(type('S', (), {'__slots__': ('x',)}).__dict__['x'])
EXPOSED = set()

def origin(obj):
    try:
        code = object.__getattribute__(obj, '__code__')
    except BaseException:
        code = None
    if type(code).__name__ == 'code':
        name = code.co_filename.rsplit('/', 1)[-1].rsplit('.', 1)[0]
        if name in RUNNER:
            return 'function ' + name + '.' + code.co_qualname
        if name == 'exposed':
            EXPOSED.add(code.co_qualname)
    if type(obj) is dict and all(type(k) is str for k in obj):
        name = obj.get('__name__')
        if type(name) is str and name in RUNNER and '__builtins__' in obj:
            return 'namespace ' + name
    if isinstance(obj, type):
        module = type.__dict__['__module__'].__get__(obj)
        if type(module) is str and module in RUNNER:
            return 'class ' + module + '.' + obj.__qualname__
    if type(obj).__name__ == 'module':
        name = getattr(obj, '__name__', None)
        if name in RUNNER or name == 'sys.monitoring':
            return 'module ' + str(name)
    return None

def children(obj):
    out = []
    kind = type(obj)
    if kind in (list, tuple, set, frozenset):
        out.extend(obj)
    elif kind is dict or kind.__name__ == 'mappingproxy':
        for key, value in list(obj.items()):
            out.append(key)
            out.append(value)
    if isinstance(obj, type):
        try:
            out.extend(type.__subclasses__(obj))
        except TypeError:
            pass
        out.append(type.__dict__['__dict__'].__get__(obj))
    for name in ATTRS:
        try:
            out.append(object.__getattribute__(obj, name))
        except BaseException:
            pass
    try:
        for klass in kind.__mro__:
            for value in list(type.__dict__['__dict__'].__get__(klass).values()):
                if type(value) is SLOT:
                    try:
                        out.append(value.__get__(obj))
                    except BaseException:
                        pass
    except BaseException:
        pass
    if kind.__name__ == 'code':
        out.extend(obj.co_consts)
    return out

def walk():
    roots = [globals(), builtins, sys.modules, object, type, sys.stdin, sys.stdout,
             sys.stderr, sys.getrecursionlimit, sys.setrecursionlimit, sys._getframe,
             sys.monitoring]
    try:
        roots.append(sys._getframe(0))
    except BaseException:
        pass
    seen, hits, todo = set(), set(), roots
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        try:
            found = origin(obj)
        except BaseException:
            found = None
        if found:
            hits.add(found)
        try:
            todo.extend(c for c in children(obj) if type(c) not in LEAVES)
        except BaseException:
            pass
    return len(seen), sorted(hits), sorted(EXPOSED)

WALKED = walk()

def f():
    return WALKED
'''
# the exposed module's functions and methods a program reaches (by design)
EXPOSED = ['FrameView.__repr__', 'NoSelector.close', 'NoSelector.get_map',
           'NoSelector.register', 'NoSelector.select', 'NoSelector.unregister',
           'RefusedNamespace.__getattribute__', 'RefusedNamespace.__init__',
           'RefusedNamespace.__setattr__', 'SandboxEventLoop.__init__',
           'SandboxEventLoop._close_self_pipe', 'SandboxEventLoop._make_self_pipe',
           'SandboxEventLoop.add_signal_handler', 'StdStream.fileno', 'StdStream.flush',
           'StdStream.isatty', 'StdStream.name', 'StdStream.readable', 'StdStream.seekable',
           'StdStream.writable', 'StdStream.write', 'StdStream.writelines', '_tb_entries',
           'collect_arguments', 'getframe', 'getrecursionlimit', 'no_name_lookup',
           'refused_set_debug',
           'setrecursionlimit', 'walk_tb', 'walk_tb_with_full_positions']


def _walked(result: dict) -> tuple:
    import ast
    assert result["status"] == "ok", result
    return ast.literal_eval(result["output"])


@pytest.mark.parametrize("mode", ["trace", "analyse"])
def test_nothing_a_program_reaches_is_the_runners(box, mode):
    """In a fresh instance, traced and in the analysis run (whose recorder's helpers sit
    in the program's namespace): tens of thousands of objects, none of the runner's."""
    count, hits, exposed = _walked(_run(box, WALK, mode=mode).result)
    assert hits == []
    assert exposed == EXPOSED
    assert count > 30_000


def test_nothing_a_program_reaches_is_the_runners_after_other_jobs(box):
    """In batch isolation, after jobs of every mode and shape have run in the instance."""
    start_batch(box)
    for request in ({"code": KNOWN, "input": ""}, {"code": KNOWN, "input": "", "mode": "analyse"},
                    {"code": KNOWN, "input": "", "mode": "run", "expected": "3"},
                    {"code": "print(input())", "input": "x\n", "shape": "script"}):
        outcome = box.run(request, "batch")
        assert outcome.result["status"] == "ok" and not outcome.fresh_instance
    outcome = _run(box, WALK, "batch")
    assert not outcome.fresh_instance
    count, hits, exposed = _walked(outcome.result)
    assert (hits, exposed) == ([], EXPOSED)
    assert count > 30_000


def test_the_analysis_helpers_lead_only_to_their_own_globals(box):
    """What the analysis run hands the program (its condition and operator recorders) is
    the program's own: patching what they lead to changes that job's analysis at most,
    and the next analysis run in the instance records as a fresh one."""
    patch = ("def f(n=3):\n    g = __steptrace_cond__.__globals__\n"
             "    g['_outcomes'].clear()\n    g['_counts'][:] = [10**9] * 7\n"
             "    g['_bool'] = lambda v: False\n"
             "    __steptrace_op__.__globals__['_BINARY'] = ()\n"
             "    s = 0\n    for i in range(n):\n        if i:\n            s += i\n    return s\n")
    start_batch(box)
    patched = box.run({"code": patch, "input": "", "mode": "analyse"}, "batch")
    # its own analysis says what it made it say (every condition false, its counts)
    assert (patched.result["status"], patched.result["output"]) == ("ok", "0")
    assert patched.result["analysis"]["conditions"] == []
    assert patched.result["analysis"]["int_ops"] == 10**9
    clean_code = "def f(n=3):\n    s = 0\n    for i in range(n):\n        if i:\n" \
                 "            s += i\n    return s\n"
    fresh = box.run({"code": clean_code, "input": "", "mode": "analyse"}, "job").result
    again = box.run({"code": clean_code, "input": "", "mode": "analyse"}, "batch").result
    assert again["analysis"] == fresh["analysis"]
    assert fresh["analysis"]["conditions"] == [
        {"line": 4, "col": 11, "kind": "if", "outcomes": "FTT"}]
    assert (fresh["analysis"]["int_ops"], fresh["analysis"]["evaluations"]) == (2, 3)
