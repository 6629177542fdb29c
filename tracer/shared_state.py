"""Interpreter-wide state one job could leave to the next in batch isolation.

In job isolation every job gets a fresh instance of the built snapshot, so none of this
applies. In batch isolation one interpreter runs job after job; after each one:

Restored, every job (cheap, and done whether or not the job touched them), while the job
is still guarded so that what this frees runs its finalizers there (``restore_cheap``;
``guard.wind_down`` does the builtins, ``sys.stdin`` and asyncio's loop):
  the int/str digit limit (``sys.set_int_max_str_digits``), the decimal context, the
  warnings filters and once-registry, the ``re`` module's pattern caches, the garbage
  collector's switch, thresholds and ``gc.callbacks``, ``os.environ`` and ``sys.argv``, and
  ``random``'s state (every job starts from the same seed, see job.py). After the job's
  last collection ``cheap_changed`` compares them again, by identity: a finalizer that
  changed them once more is reported as a change.

After a job no program code runs (see guard.leave): every comparison here is by identity,
a namespace is looked into only when all its keys are exact ``str`` (``plain``), and what
is put back is buried (``bury``: kept alive, so no finalizer or weak reference callback
runs).
Compared with the snapshot, and put back when they differ (the job's run gets a note
and the host gives the next job a fresh instance):
  * ``sys.modules`` (entries added, removed or replaced);
  * the namespace of every module, and of every class a module exposes, compared key by
    key by identity (never with ``==``: a program's object may claim to equal anything),
    when the job's code could reach them (an import, an attribute store, or a name such
    as ``setattr``, ``vars``, ``exec``, ``getattr``, ``tb_frame`` or a dunder name that
    is not one of the data model's: see ``reaches_shared_state``);
  * the lists, dicts and sets held in those namespaces (their length and the identity of
    their items, one level deep), for every module whose name the job's code mentions
    (``import copyreg``, ``os.sys.path``);
  * ABC registrations (``abc.get_cache_token()`` changes with every ``register``).
Not detected: state held inside C objects that Python cannot list (a registered codec
search function, ``locale.setlocale``), containers nested deeper than one level, and
containers of modules the job reached without naming them (through an object it was
given). Batch isolation is for trusted corpora; job isolation is exact.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import abc  # noqa: E402
import decimal  # noqa: E402
import gc  # noqa: E402
import opcode  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from itertools import repeat as _repeat  # noqa: E402
from operator import is_ as _is  # noqa: E402
from types import CodeType, ModuleType, SimpleNamespace  # noqa: E402

_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: built-in types refuse attribute stores
_CONTAINERS = (list, dict, set)

_modules = sys.modules
_get_int_digits = sys.get_int_max_str_digits
_set_int_digits = sys.set_int_max_str_digits
_setcontext, _getcontext = decimal.setcontext, decimal.getcontext
_gc_isenabled, _gc_enable, _gc_disable = gc.isenabled, gc.enable, gc.disable
_gc_get_threshold, _gc_set_threshold = gc.get_threshold, gc.set_threshold
_abc_token = abc.get_cache_token
_warn_filters = warnings.filters
_filters_mutated = getattr(warnings, "_filters_mutated", None)  # takes warnings' lock
_once_registry = getattr(warnings, "_onceregistry", None)
_re_caches = [cache for cache in (getattr(re, "_cache", None), getattr(re, "_cache2", None))
              if type(cache) is dict]
_environ_data = getattr(os.environ, "_data", None)
_argv = sys.argv
_type_dict = type.__dict__["__dict__"].__get__  # a class's namespace, by type's own getter
_type_flags = type.__dict__["__flags__"].__get__
_type_annotations = type.__dict__["__annotations__"].__get__
_subclasses = type.__dict__["__subclasses__"]
_address = object.__hash__  # an object's address (bounded_repr.address), without id()'s audit event
_module_dict = ModuleType.__dict__["__dict__"].__get__
_set_class = object.__dict__["__class__"].__set__  # the C setter: no program descriptor runs
_gc_callbacks = gc.callbacks

# What a program needs in order to reach state it did not make: an import, an attribute
# store or delete (``math.pi = 3``), or a name (of a global, an attribute, or a constant:
# a class pattern's keywords and ``__match_args__`` are strings) that leads out of the
# program's own objects and the builtins' values. Without any of them the program holds
# only objects it made and the builtins' (immutable types, functions that touch nothing
# shared), so no library code can change a module for it (``pickle.loads`` setting
# ``json.__dict__['dumps']``, ``functools.update_wrapper`` on a module): the (costly)
# comparison, and the namespace checks of guard.wind_down/leave, are skipped. Dunder
# names are judged by an allow-list (the data model's methods and the names the compiler
# puts in class bodies), so a name nobody listed counts as reaching out.
_STATE_OPCODES = bytes(opcode.opmap[name] for name in (
    "STORE_ATTR", "DELETE_ATTR", "IMPORT_NAME", "IMPORT_FROM"))
_STATE_NAMES = frozenset({
    # the builtins that lead to modules, frames, code or the job's streams
    "setattr", "delattr", "vars", "exec", "eval", "compile", "getattr", "globals", "locals",
    "open", "help", "breakpoint", "exit", "quit", "license", "credits", "copyright",
    # names of modules (as attributes: ``os.sys``) and of what leads to them
    "importlib", "modules", "builtins", "reload",
    # frames, tracebacks, generators' and coroutines' frames and code
    "tb_frame", "tb_next", "f_back", "f_globals", "f_builtins", "f_locals", "f_code",
    "f_trace", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await",
    "cr_origin", "ag_frame", "ag_code", "ag_await", "mro",
})
_SAFE_DUNDERS = frozenset({
    # the data model's methods a program defines or calls on its own objects
    "__new__", "__init__", "__del__", "__repr__", "__str__", "__bytes__", "__format__",
    "__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__", "__hash__", "__bool__",
    "__getattr__", "__dir__", "__get__", "__set__", "__delete__", "__set_name__",
    "__slots__", "__init_subclass__", "__class_getitem__", "__call__", "__len__",
    "__length_hint__", "__getitem__", "__setitem__", "__delitem__", "__missing__",
    "__iter__", "__reversed__", "__contains__", "__next__", "__enter__", "__exit__",
    "__await__", "__aiter__", "__anext__", "__aenter__", "__aexit__", "__match_args__",
    "__post_init__", "__sizeof__", "__copy__", "__deepcopy__", "__index__", "__int__",
    "__float__", "__complex__", "__round__", "__trunc__", "__floor__", "__ceil__",
    "__neg__", "__pos__", "__abs__", "__invert__", "__divmod__", "__rdivmod__",
    *(f"__{kind}{name}__" for kind in ("", "r", "i") for name in (
        "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift",
        "rshift", "and", "xor", "or")),
    # what the compiler puts in a class body or a module, and the names they are read by
    "__name__", "__qualname__", "__module__", "__doc__", "__firstlineno__",
    "__static_attributes__", "__classcell__", "__classdictcell__", "__annotations__",
    "__annotate__", "__type_params__", "__main__",
    # the runner's helpers in a job's namespace, functions of the runner's (job.py's
    # ARGS_HELPER, the input's arguments; analysis.py's COND, OP and SLICE)
    "__steptrace_args__", "__steptrace_cond__", "__steptrace_op__", "__steptrace_slice__",
})


def _reaching(name) -> bool:
    """Whether the name or string constant ``name`` may lead out of the program's own
    objects (see above)."""
    if name in _STATE_NAMES:
        return True
    return (name[:2] == "__" and name[-2:] == "__" and name.strip("_") != ""
            and name not in _SAFE_DUNDERS)


# No classes in this module: every class is reachable (object.__subclasses__()) and a
# program could change how its instances answer. The snapshot is a SimpleNamespace.
_snapshot = None
_set_type_attr = type.__setattr__  # not the class's metaclass (Enum's refuses some names)
_del_type_attr = type.__delattr__
_type_qualname = type.__dict__["__qualname__"].__get__


def take(classes: tuple = ()) -> None:
    """Record the state as built (called once, when the guest is built); ``classes``:
    classes a program can reach that no module's namespace holds (compared as the
    modules' classes are)."""
    global _snapshot
    snap = SimpleNamespace()
    snap.modules = dict(_modules)
    # C getters only: a package's lazy module objects (six.moves) run code on other reads
    snap.namespaces = [(name, module, type(module), _module_dict(module),
                        dict(_module_dict(module)))
                       for name, module in _modules.items()
                       if issubclass(type(module), ModuleType)
                       and type(_module_dict(module)) is dict]
    seen: set[int] = set()
    snap.classes = []
    held = [value for *_, state in snap.namespaces for value in state.values()]
    for value in held + list(classes):
        if (issubclass(type(value), type) and not _type_flags(value) & _IMMUTABLE_TYPE
                and id(value) not in seen):
            seen.add(id(value))
            settle(value)
            snap.classes.append((value, dict(_type_dict(value))))
    # per module name: the containers its namespace (and its classes') hold, as built
    snap.containers = {}
    for name, _module, _kind, _namespace, state in snap.namespaces:
        found = []
        for key, value in state.items():
            if value is _argv:
                continue  # see first_job
            if type(value) in _CONTAINERS:
                found.append((f"{name}.{key}", value, _items(value)))
            elif issubclass(type(value), type) and id(value) in seen:
                found.extend((f"{name}.{key}.{attr}", inner, _items(inner))
                             for attr, inner in _type_dict(value).items()
                             if type(inner) in _CONTAINERS)
        if found:
            snap.containers.setdefault(name.rpartition(".")[2], []).extend(found)
    snap.int_digits = _get_int_digits()
    snap.decimal = decimal.getcontext().copy()
    snap.filters = list(_warn_filters)
    snap.once = dict(_once_registry) if type(_once_registry) is dict else None
    snap.re = [dict(cache) for cache in _re_caches]
    snap.gc = (_gc_isenabled(), _gc_get_threshold())
    # sys.argv and os.environ are filled by componentize-py when an instance starts (after
    # this snapshot): recorded by the first job of each instance instead (``first_job``)
    snap.environ = snap.argv = None
    snap.abc = _abc_token()
    _snapshot = snap


def all_classes() -> set[int]:
    """The addresses (bounded_repr.address) of every class there is now: ``object``'s
    subclasses, recursively, read with type's own method (no program code runs)."""
    seen = {_address(object)}
    pending = [object]
    while pending:
        for cls in _subclasses(pending.pop()):
            where = _address(cls)
            if where not in seen:
                seen.add(where)
                pending.append(cls)
    return seen


def settle(cls) -> None:
    """Read ``cls.__annotations__`` once, when the guest is built: in 3.14 the first read
    stores ``__annotate_func__`` and ``__annotations_cache__`` in the class's dict, so a
    program that only reads a class's annotations would otherwise look as if it had
    changed the class."""
    try:
        _type_annotations(cls)
    except Exception:  # annotations that do not evaluate: read as the program would
        pass


def first_job() -> None:
    """At the start of an instance's first job: what componentize-py put in ``sys.argv``
    and ``os.environ`` for this instance, as batch isolation restores them."""
    snap = _snapshot
    if snap is not None and snap.argv is None:
        snap.argv = tuple(_argv)
        snap.environ = dict(_environ_data) if type(_environ_data) is dict else {}


def _items(container) -> tuple:
    if type(container) is dict:
        return tuple(container.items())
    return tuple(container)


def _same_items(current: tuple, saved: tuple) -> bool:
    if len(current) != len(saved):
        return False
    for now, then in zip(current, saved):
        if type(then) is tuple:  # a dict's (key, value)
            if type(now) is not tuple or now[0] is not then[0] or now[1] is not then[1]:
                return False
        elif now is not then:
            return False
    return True


def restore_cheap() -> None:
    """The state every batch job gets back, whatever it did (see the module docstring)."""
    snap = _snapshot
    if _get_int_digits() != snap.int_digits:
        _set_int_digits(snap.int_digits)
    snap.decimal_set = snap.decimal.copy()
    _setcontext(snap.decimal_set)
    if len(_warn_filters) != len(snap.filters) or not _same_items(tuple(_warn_filters),
                                                                   tuple(snap.filters)):
        _warn_filters[:] = snap.filters
        if _filters_mutated is not None:
            _filters_mutated()
    if snap.once is not None and len(_once_registry) != len(snap.once):
        _once_registry.clear()
        _once_registry.update(snap.once)
    for cache, saved in zip(_re_caches, snap.re):
        # new patterns are cached by any job that uses re; a poisoned entry (same length)
        # needs the program to name ``re``, and is found by ``changed``
        if len(cache) != len(saved):
            cache.clear()
            cache.update(saved)
    enabled, threshold = snap.gc
    if _gc_get_threshold() != threshold:
        _gc_set_threshold(*threshold)
    if _gc_isenabled() != enabled:
        (_gc_enable if enabled else _gc_disable)()
    if _gc_callbacks:  # a program's callback would run at every later collection
        _gc_callbacks.clear()
    if type(_environ_data) is dict and (len(_environ_data) != len(snap.environ) or not
                                        _same_items(tuple(_environ_data.items()),
                                                    tuple(snap.environ.items()))):
        _environ_data.clear()
        _environ_data.update(snap.environ)
    if not _same_items(tuple(_argv), snap.argv):
        _argv[:] = snap.argv


def cheap_changed() -> list[str]:
    """After ``restore_cheap`` and the job's last collection (whose finalizers may have
    changed it again): what of that state is not as restored, compared by identity and
    plain numbers only (no program code runs; nothing is put back: the host gives the
    next job a fresh instance)."""
    snap = _snapshot
    found = []
    if _get_int_digits() != snap.int_digits:
        found.append("sys.set_int_max_str_digits")
    if _getcontext() is not snap.decimal_set:
        found.append("decimal's context")
    if not _same_items(tuple(_warn_filters), tuple(snap.filters)) or (
            snap.once is not None and len(_once_registry) != len(snap.once)):
        found.append("warnings' filters")
    if any(len(cache) != len(saved) for cache, saved in zip(_re_caches, snap.re)):
        found.append("re's caches")
    if _gc_get_threshold() != snap.gc[1] or _gc_callbacks:
        found.append("gc's thresholds or callbacks")
    if type(_environ_data) is dict and not _same_items(tuple(_environ_data.items()),
                                                       tuple(snap.environ.items())):
        found.append("os.environ")
    if not _same_items(tuple(_argv), snap.argv):
        found.append("sys.argv")
    return found


def reaches_shared_state(codes: list) -> bool:
    """Conservative: True if any code object (or one nested in it) could reach state that
    is not the program's own (see ``_STATE_NAMES``): only then can a job have changed a
    module, a class or the runner's streams for the next job."""
    stack = list(codes)
    while stack:
        code = stack.pop()
        operations = code.co_code[::2]
        if any(op in operations for op in _STATE_OPCODES):
            return True
        if any(map(_reaching, code.co_names)):
            return True
        constants = list(code.co_consts)
        while constants:  # a constant's strings, in tuples and frozensets at any depth
            const = constants.pop()
            kind = type(const)
            if kind is CodeType:
                stack.append(const)
            elif kind is str:
                if _reaching(const):
                    return True
            elif kind is tuple or kind is frozenset:
                constants.extend(const)
    return False


def _names(codes: list) -> set[str]:
    found: set[str] = set()
    stack = list(codes)
    while stack:
        code = stack.pop()
        found.update(code.co_names)
        stack.extend(const for const in code.co_consts if type(const) is CodeType)
    return found


def changed(codes: list, rebinds: bool) -> list[str]:
    """After a batch job: what it changed of the state above that is compared (not the
    cheap part), put back as built. ``codes`` are the job's code objects; ``rebinds``
    whether they reach shared state (``reaches_shared_state``)."""
    snap = _snapshot
    found: list[str] = []
    if len(_modules) != len(snap.modules) or rebinds and differs(_modules, snap.modules):
        found.append("sys.modules")
        put_back(_modules, snap.modules)
    if rebinds:
        for name, module, kind, namespace, state in snap.namespaces:
            if type(module) is not kind:
                found.append(f"{name} (its class)")
                bury(type(module))
                _set_class(module, kind)
            if differs(namespace, state):
                found.append(name)
                put_back(namespace, state)
        for cls, state in snap.classes:
            if put_back_class(cls, state):
                found.append(f"{_qualified(cls)}")
    for name in _names(codes):
        for label, container, items in snap.containers.get(name, ()):
            if not _same_items(_items(container), items):
                found.append(label)
                _refill(container, items)
    if _abc_token() != snap.abc:
        found.append("abc registrations")
    return found


# What the runner takes out of shared state after a job is kept here, never freed: its
# finalizers and weak references' callbacks would be program code running outside the
# job. Only what a reported change took out comes here, and the host runs no further job
# in an instance that reported one (wasm_sandbox/_runtime.py).
_graveyard: list = []


def bury(objects) -> None:
    """Keep ``objects`` alive for the life of the instance (see ``_graveyard``)."""
    _graveyard.append(objects)


def plain(namespace) -> bool:
    """Whether every key of ``namespace`` (a dict or a class's mappingproxy) is an exact
    ``str``: only then may the runner look keys up in it or store into it. A program's
    ``str`` subclass key would run its ``__hash__``/``__eq__`` in any lookup that meets it.
    Checked at C speed; no program code runs."""
    return all(map(_is, map(type, namespace), _repeat(str)))


def differs(namespace, state: dict) -> bool:
    """Whether ``namespace`` (a dict or a class's mappingproxy) no longer holds exactly
    ``state``'s objects, compared by identity (never with ``==``: a program's object may
    claim to equal anything), and its keys exact strings (``plain``): no program code
    runs."""
    if len(namespace) != len(state):
        return True
    # At C speed: the same keys in the same order holding the same objects (the usual
    # case, every job); a reordered but equal namespace falls to the loop below.
    if all(map(_is, namespace, state)) and all(map(_is, namespace.values(), state.values())):
        return False
    if not plain(namespace):
        return True
    for key, value in state.items():
        if namespace.get(key, state) is not value:
            return True
    return False


def put_back(namespace: dict, state: dict) -> None:
    """Make the dict ``namespace`` hold ``state`` again: what it holds now is buried
    first, so clearing it frees nothing, and filling the empty dict compares no keys."""
    bury(tuple(namespace.items()))
    namespace.clear()
    namespace.update(state)


def put_back_class(cls, state: dict) -> bool:
    """Whether ``cls``'s namespace is not ``state``, its copy as built; if so, put back
    as built (through type's own setattr, not a metaclass's) where that runs no program
    code: the class's metaclass is exactly ``type`` (a metaclass's descriptors would
    answer the stores) and its keys are plain. Otherwise it stays as it is: the change is
    reported, and the instance is not used again."""
    namespace = _type_dict(cls)
    if not differs(namespace, state):
        return False
    if type(cls) is type and plain(namespace):
        bury(tuple(namespace.items()))
        for key in [key for key in namespace if key not in state]:
            _del_type_attr(cls, key)
        for key, value in state.items():
            if namespace.get(key, state) is not value:
                _set_type_attr(cls, key, value)
    return True


def _refill(container, items: tuple) -> None:
    """Put a list, dict or set back as built, burying what it holds now. A dict or set is
    refilled only when hashing what it held runs no program code (keys of exact built-in
    types, or classes whose metaclass is exactly ``type``); otherwise it is left as it is
    (the change is reported)."""
    kind = type(container)
    if kind is not list:
        keys = [item[0] for item in items] if kind is dict else list(items)
        if not all(type(key) in _HASHED_IN_C or type(key) is type and type(type(key)) is type
                   for key in keys):
            return
    bury(_items(container))
    container.clear()
    if kind is dict:
        container.update(items)
    else:
        (container.extend if kind is list else container.update)(items)


# keys whose hash and equality are C code, whatever a program did
_HASHED_IN_C = frozenset({str, int, bytes, float, bool, type(None)})


def _qualified(cls) -> str:
    module = _type_dict(cls).get("__module__")
    qualname = _type_qualname(cls)
    return f"{module}.{qualname}" if type(module) is str and type(qualname) is str else "?"
