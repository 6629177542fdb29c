"""The guest component's entry point: the WIT export ``run`` (see wit/steptrace.wit).

Imported once at build time (componentize-py pre-initialises the interpreter with it), so
the tracer and the preloaded standard library are part of the snapshot every instance
starts from.
"""

import gc
import json
import sys

import analysis as _analysis
import bounded_repr as _bounded_repr
import guest_io as _guest_io
import job as _job
import stdlib_preload  # noqa: F401  (imported for its side effect: the preloaded stdlib)
import sysmon_tracer as _sysmon_tracer
import wit_world
from job import TRACER, may_touch_shared_state, run_job

# Built at init time so it needs no allocation when memory is exhausted.
_OUT_OF_MEMORY = json.dumps({"status": "memory_limit", "exception_type": "MemoryError",
                             "exception_message": "the guest ran out of memory building the result"})


def preloaded() -> dict:
    return {"imported": stdlib_preload.imported, "failed": stdlib_preload.failed}


# What the result encoding depends on, as it was when the guest was built: a program may
# patch these modules (json.encoder.c_make_encoder, ...) to forge the result of its job.
_JSON_MODULES = [sys.modules[name] for name in ("json", "json.encoder", "json.decoder",
                                                "json.scanner", "_json")]
_JSON_STATE = [dict(module.__dict__) for module in _JSON_MODULES]


def _restore_json() -> None:
    for module, state in zip(_JSON_MODULES, _JSON_STATE):
        if module.__dict__ != state:
            module.__dict__.clear()
            module.__dict__.update(state)


class WitWorld(wit_world.WitWorld):
    def run(self, request: str) -> str:
        _restore_json()
        try:
            req = json.loads(request)
            if req.get("command") == "noop":
                return "{}"
            if req.get("command") == "preloaded":
                return json.dumps(preloaded())
            result = run_job(req)
            _restore_json()
            changed = own_code_changed()
            if changed:
                result["status"] = "tampered"
                result["exception_message"] = ("the program changed the tracer's code ("
                                               + ", ".join(changed) + ")")
            codes = result.pop("codes", None)
            if req.get("check_shared_state") and (codes is None or may_touch_shared_state(codes)):
                changed = changed_modules()
                if changed:
                    result["shared_state_changed"] = changed
            return json.dumps(result, ensure_ascii=True)
        except MemoryError:
            return _OUT_OF_MEMORY
        except BaseException as exc:  # never trap on a guest bug: report it
            return json.dumps({"status": "crashed", "exception_type": type(exc).__name__,
                               "exception_message": f"guest error: {exc}"})


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
"""


def _warm_up() -> None:
    """Run jobs at build time, so the snapshot already holds what a first job would
    otherwise initialise lazily, and the runner's own code has answered DISABLE."""
    run_job({"code": WARM_UP_PROGRAM, "input": "1, b=3", "expected": "(7, [])"})
    run_job({"code": WARM_UP_PROGRAM, "input": "x", "expected": None})
    run_job({"code": "def f(:", "input": "", "expected": None})
    run_job({"code": WARM_UP_PROGRAM, "input": "1, b=3", "mode": "analyse"})


TRACER.install()
_warm_up()
# Objects of the snapshot are never garbage: keep the collector off them, so a fresh
# instance does not touch (and copy-on-write fault) the whole heap on its first collection.
# The guest's own modules are not importable by traced programs (a fresh copy of one,
# found on the path, would be a different module whose state the runner never uses).
for _name in ("job", "sysmon_tracer", "bounded_repr", "stdlib_preload", "analysis"):
    sys.modules.pop(_name, None)
# Every module's namespace as built: in batch isolation a job that rebinds a module
# attribute (math.pi = 3, json.dumps = ...) has changed what the next job would see.
_MODULE_STATE = [(name, module, dict(module.__dict__)) for name, module in sys.modules.items()
                 if name != __name__ and getattr(module, "__dict__", None) is not None]


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: built-in types refuse attribute stores


def _mutable_classes() -> list:
    """Every class a module exposes whose namespace a program could rebind
    (``fractions.Fraction.__repr__ = ...``), once each, with its namespace as built."""
    seen: set[int] = set()
    found = []
    for _name, _module, state in _MODULE_STATE:
        for value in state.values():
            if (isinstance(value, type) and not value.__flags__ & _IMMUTABLE_TYPE
                    and id(value) not in seen):
                seen.add(id(value))
                found.append((value, dict(value.__dict__)))
    return found


def changed_modules() -> list[str]:
    """Modules whose namespace, or the namespace of a class they expose, differs from the
    built guest's (or that were replaced)."""
    modules = sys.modules
    changed = [name for name, module, state in _MODULE_STATE
               if modules.get(name) is not module or module.__dict__ != state]
    changed.extend(f"{cls.__module__}.{cls.__qualname__}" for cls, state in _CLASS_STATE
                   if cls.__dict__ != state)
    return changed


# The guest's own code, as built. A program can reach it without imports or frames
# (object.__subclasses__(), function __globals__) and monkeypatch it to forge its trace;
# any change is found after the job and the run is reported as tampered.
_OWN_CODE = [_job, _sysmon_tracer, _bounded_repr, _guest_io, _sysmon_tracer.Tracer,
             _guest_io.BoundedWriter, _guest_io.RecursionGuard, _guest_io.StopTracing,
             _analysis, _analysis.Recorder, _analysis.Instrument]
_OWN_STATE: list = []
_RUN = WitWorld.run  # componentize-py adds WitWorld.__init__ itself: only `run` is checked


def own_code_changed() -> list[str]:
    """Names of the guest's modules and classes whose namespace differs from the build."""
    for owner in _OWN_CODE:  # warnings (e.g. a SyntaxWarning from compile()) note
        if "__warningregistry__" in owner.__dict__ and not isinstance(owner, type):
            del owner.__dict__["__warningregistry__"]  # themselves in the caller's module
    changed = [getattr(owner, "__name__", "?") for owner, state in zip(_OWN_CODE, _OWN_STATE)
               if owner.__dict__ != state]
    if WitWorld.__dict__.get("run") is not _RUN:
        changed.append("WitWorld")
    return changed


# Taken last, after the warm-up and every import, so that what classes cache in their
# namespace lazily (at first use) is already there.
_CLASS_STATE = _mutable_classes()
gc.collect()
gc.freeze()
# Last: the snapshot of the guest's own code includes everything defined above. This
# module's own namespace is not in it (it is still being executed); its only function
# that runs per job is WitWorld.run, whose class is.
_OWN_STATE.extend(dict(owner.__dict__) for owner in _OWN_CODE)
