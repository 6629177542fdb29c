"""numpy's values rendered as numpy prints them, with none of the program's code run (the
native backend: the WASI guest has no numpy, and registers nothing).

bounded_repr's rule 6 prints an object of a C type by its own repr only where that repr
reads nothing but the object; numpy's does more: an array's repr runs numpy's printing
code (``numpy._core.arrayprint`` and the functions it calls, written in Python), which
reads the print options (``numpy.set_printoptions``) and module globals that a program
can change. So the rendering here, registered with ``bounded_repr.package_renderers`` when
the interpreter is set up (``register``, before any program runs):

* a numpy scalar (``np.int64(3)``, ``np.float64(2.5)``, ``np.True_``, ``np.str_('a')``,
  ``np.datetime64('2020-01-01')``; not ``np.void``) is its repr, which numpy writes in C;
* an ``ndarray`` (the exact type: a subclass is a class written in Python, rule 2) of a
  built-in dtype of booleans, numbers, text or dates (not objects, not structured) is its
  repr (``array([[0, 1],\\n       [2, 3]])``), under the program's print options when they
  are plain values (``np.set_printoptions(precision=3)`` applies) and numpy's defaults
  when one is not (a ``formatter`` or ``override_repr`` function: it would run the
  program's code);
* either is ``object.__repr__``'s text (``<numpy.ndarray object>``) when numpy's printing
  code is not as it was set up — a program rebound a function or class attribute of a
  module that code runs (found when it is registered), a builtin, the ``finfo`` cache
  holds what numpy does not put there, a recursion guard is not empty — or when the
  array would print more than ``MAX_PRINTED`` items (numpy's summary leaves out the
  middle of an array larger than its ``threshold``, 1,000 items by default, but prints
  every item of a dimension shorter than ``2 * edgeitems``) or items longer than
  ``MAX_ITEMSIZE`` bytes.

Checking costs a few microseconds (identity comparisons at C speed); numpy's repr of a
small array some tens of microseconds, paid at each step an array may have changed.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import sys as _sys  # noqa: E402
from contextvars import Context as _Context  # noqa: E402
from operator import is_ as _is  # noqa: E402
from types import FunctionType  # noqa: E402

import bounded_repr as _br  # noqa: E402
import shared_state as _shared  # noqa: E402

MAX_PRINTED = 10_000  # items an array's repr may print
MAX_ITEMSIZE = 1024   # bytes of one item (a text dtype's width)
_KINDS = frozenset("biufcmMUS")  # bool, int, uint, float, complex, timedelta, datetime, str, bytes
_PLAIN_OPTIONS = frozenset({int, float, str, bool, type(None)})

_BUILTINS_STATE = dict(builtins.__dict__)
_TYPE_DICT = type.__dict__["__dict__"].__get__
_SET_LEN = set.__len__
_DICT_ITEMS = dict.items

# set by register()
_ndarray_repr = None      # ndarray.__repr__ (C: it calls arrayprint's repr, held by numpy)
_get_options = None       # arrayprint's print options (a ContextVar's C ``get``)
_defaults = None          # numpy's default options: the ContextVar's default (a dict)
_defaults_state: dict = {}
_dtype_of = _shape_of = _size_of = _itemsize_of = _kind_of = _fields_of = _subdtype_of = None
_dtype_types: frozenset = frozenset()
_modules: list = []       # (module dict, its state) of the modules numpy's printing runs
_classes: list = []       # (class, its dict's state) of their classes
_guards: list = []        # the recursion guards' sets (empty but while printing)
_finfo_cache = None       # getlimits.finfo's cache: dtype -> finfo
_finfo = _finfo_dict = None
_finfo_plain: frozenset = frozenset()
_dtype_meta = None        # numpy's metaclass of dtype classes (C)


def _kept(namespace, state: dict) -> bool:
    """Whether ``namespace`` still binds every name of ``state`` to the same object, and
    binds no other name that is a builtin's (a module global named ``len`` would be
    looked up before the builtin). Identity only: no program code runs."""
    if len(namespace) == len(state) and all(map(_is, namespace, state)) and all(
            map(_is, namespace.values(), state.values())):
        return True
    if not _shared.plain(namespace):
        return False
    for key, value in state.items():
        if namespace.get(key, state) is not value:
            return False
    for key in namespace:
        if key not in state and key in _BUILTINS_STATE:
            return False
    return True


def _intact() -> bool:
    """Whether numpy's printing code is as it was set up (see the module doc)."""
    if not _kept(builtins.__dict__, _BUILTINS_STATE):
        return False
    if _shared.differs(_defaults, _defaults_state):
        return False
    for namespace, state in _modules:
        if not _kept(namespace, state):
            return False
    for cls, state in _classes:
        if _shared.differs(_TYPE_DICT(cls), state):
            return False
    for guard in _guards:
        if type(guard) is not set or _SET_LEN(guard):
            return False
    cache = _finfo_cache
    if type(cache) is not dict:
        return False
    for key, value in _DICT_ITEMS(cache):
        if not _known(type(key), _finfo_plain) or type(value) is not _finfo:
            return False
        attributes = _finfo_dict(value)
        if type(attributes) is not dict or not _shared.plain(attributes):
            return False
        for item in attributes.values():
            if not _known(type(item), _finfo_plain):
                return False
    return True


def _known(kind, allowed: frozenset) -> bool:
    """``kind in allowed``, hashing ``kind`` only when its metaclass is ``type`` or
    numpy's (a metaclass of the program's could answer ``__hash__``)."""
    meta = type(kind)
    return (meta is type or meta is _dtype_meta) and kind in allowed


def _options_plain(options) -> bool:
    """Whether the print options are numpy's own kind of values (no function of the
    program's, no subclass whose methods numpy's code would call)."""
    if type(options) is not dict or not _shared.plain(options):
        return False
    for value in options.values():
        if not _known(type(value), _PLAIN_OPTIONS):
            return False
    return True


def _printable(value, options) -> bool:
    """Whether the array's repr prints at most MAX_PRINTED items of at most MAX_ITEMSIZE
    bytes, of a built-in dtype of plain items."""
    dtype = _dtype_of(value)
    if not _known(type(dtype), _dtype_types) or _kind_of(dtype) not in _KINDS:
        return False
    if _fields_of(dtype) is not None or _subdtype_of(dtype) is not None:
        return False
    if _itemsize_of(dtype) > MAX_ITEMSIZE:
        return False
    size = _size_of(value)
    threshold, edge = options.get("threshold"), options.get("edgeitems")
    if type(threshold) is not int or type(edge) is not int:
        return False
    if size <= threshold:
        return size <= MAX_PRINTED
    printed = 1
    for length in _shape_of(value):
        printed *= min(length, 2 * edge)
        if printed > MAX_PRINTED:
            return False
    return True


def render_array(value) -> str | None:
    """An ndarray's repr (see the module doc), or None: ``object.__repr__``'s text."""
    try:
        options = _get_options()
        if not _options_plain(options) or options.get("formatter") is not None or \
                options.get("override_repr") is not None:
            if not _printable(value, _defaults) or not _intact():
                return None
            return _Context().run(_ndarray_repr, value)  # numpy's defaults
        if not _printable(value, options) or not _intact():
            return None
        text = _ndarray_repr(value)
    except (MemoryError, RecursionError):
        raise
    except BaseException:
        return None
    return text if type(text) is str else None


def render_scalar(value) -> str | None:
    """A numpy scalar's repr (numpy's C code; it reads the print options' ``legacy``),
    or None."""
    try:
        options = _get_options()
        text = repr(value) if _options_plain(options) else _Context().run(repr, value)
    except (MemoryError, RecursionError):
        raise
    except BaseException:
        return None
    return text if type(text) is str else None


# what register() prints to find the code numpy's printing runs: (items, dtype)
_SAMPLES = (([1, 2, 3], None), ([[0.5, -1e-05], [float("nan"), float("inf")]], None),
            ([1e20, 3.0], None), ([1 + 2j, 3.5j], None), ([True, False], None),
            (["a", "bc"], None), ([b"a"], None), (7, None), ([[], []], None),
            (list(range(2000)), None), ([1.5] * 3, "float16"), ([2, 3], "longdouble"),
            (["2020-01-01", "NaT"], "datetime64[D]"), ([1, 2], "timedelta64[s]"),
            ([255], "uint8"), ([[1.0] * 1100] * 2, "float32"))


def register() -> list[str]:
    """Register numpy's renderers with bounded_repr when numpy is loaded (a native guest
    with numpy among its packages), and take the state ``_intact`` compares with; the
    names of the modules whose code numpy's printing runs (none: no numpy)."""
    global _ndarray_repr, _get_options, _defaults, _defaults_state, _dtype_of, _shape_of
    global _size_of, _itemsize_of, _kind_of, _fields_of, _subdtype_of, _dtype_types
    global _finfo_cache, _finfo, _finfo_dict, _finfo_plain, _dtype_meta
    numpy = _sys.modules.get("numpy")
    if numpy is None:
        return []
    import numpy._core.arrayprint as arrayprint
    import numpy._core.getlimits as getlimits
    ndarray, dtype = numpy.ndarray, numpy.dtype
    _ndarray_repr = ndarray.__repr__
    _get_options = arrayprint.format_options.get
    _defaults = _Context().run(_get_options)
    _defaults_state = dict(_defaults)
    members = ndarray.__dict__
    _dtype_of, _shape_of, _size_of = (members[name].__get__ for name in ("dtype", "shape",
                                                                        "size"))
    members = dtype.__dict__
    _itemsize_of, _kind_of, _fields_of, _subdtype_of = (
        members[name].__get__ for name in ("itemsize", "kind", "fields", "subdtype"))
    scalars = set()  # the concrete scalar types (a dtype's ``type``), but void and object
    for value in list(numpy.__dict__.values()) + list(numpy._core.numerictypes.sctypeDict.values()):
        if type(value) is type and issubclass(value, numpy.generic) and value is not numpy.void \
                and value is not numpy.object_ and not _br._mutable(value):
            try:
                if dtype(value).type is value:
                    scalars.add(value)
            except TypeError:  # an abstract one (np.generic, np.floating)
                continue
    _dtype_types = frozenset(type(dtype(scalar)) for scalar in scalars
                             if dtype(scalar).kind in _KINDS)
    _dtype_meta = type(type(dtype("int64")))
    _finfo, _finfo_cache = getlimits.finfo, getlimits.finfo._finfo_cache
    _finfo_dict = next(klass.__dict__["__dict__"] for klass in _finfo.__mro__
                       if "__dict__" in klass.__dict__).__get__
    _finfo_plain = frozenset(scalars) | _dtype_types | _PLAIN_OPTIONS | {type}

    # the Python code numpy's printing runs: its modules, their classes, the recursion
    # guards' sets (found by printing a few arrays of every kind once, now)
    modules: dict = {}

    def seen(frame, event, arg):
        if event == "call":
            name = frame.f_globals.get("__name__")
            if type(name) is str:
                modules[name] = _sys.modules.get(name)
    arrays = [numpy.array(items, dtype=kind) for items, kind in _SAMPLES]
    _sys.setprofile(seen)
    try:
        for array in arrays:
            _ndarray_repr(array)
            if array.size:
                repr(array.ravel()[0])
    finally:
        _sys.setprofile(None)
    for name, module in sorted(modules.items()):
        if module is None or name == __name__:
            continue
        namespace = module.__dict__
        _modules.append((namespace, dict(namespace)))
        for value in list(namespace.values()):
            if type(value) is type and _br._mutable(value) and value.__module__ == name:
                for klass in value.__mro__:
                    if _br._mutable(klass) and all(klass is not c for c, _ in _classes):
                        _shared.settle(klass)  # (its dict as shared_state.take leaves it)
                        _classes.append((klass, dict(_TYPE_DICT(klass))))
            if type(value) is FunctionType and value.__closure__:
                for cell in value.__closure__:
                    try:
                        contents = cell.cell_contents
                    except ValueError:
                        continue
                    if type(contents) is set:
                        _guards.append(contents)
    if not _intact():
        raise RuntimeError("steptrace: numpy's printing state could not be taken")
    _br.package_renderers.append((ndarray, render_array))
    for scalar in sorted(scalars, key=lambda kind: kind.__name__):
        _br.package_renderers.append((scalar, render_scalar))
    return sorted(name for name, module in modules.items() if module is not None)
