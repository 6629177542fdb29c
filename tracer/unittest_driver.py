"""Running a job's unittest test so that its verdict is unittest's own.

A job whose entry is ``Case.test_x`` of a ``unittest.TestCase`` runs that test (job.py).
Its program runs first, in the same interpreter, and could make a failing test pass
without fixing anything: rebind ``TestCase.debug`` or ``assertEqual`` to do nothing, put a
class of its own between the test's class and ``TestCase`` (through the ``unittest`` name
the test code reads, or as a mixin), replace ``unittest`` in ``sys.modules``, or change a
builtin that unittest's code calls. The repair loop keeps an example when its tests pass,
so that would be its reward. Here:

* the test runs by unittest's own ``TestCase.debug``, taken when the guest was built, not
  by whatever ``Case("test_x").debug`` would find;
* before it runs and after it ends, unittest's modules (as ``sys.modules`` has them, and
  their namespaces), every class they define and the builtins are compared, by identity,
  with the build: a difference means the verdict would not be unittest's, and the job is
  ``invalid`` with a message naming what changed;
* when the job has test code, every class of the test class's MRO is unittest's own,
  ``object``, or made while the test code ran (``classes`` before it runs): a class of
  the program's there could answer for ``TestCase``.

No program code runs in these checks (C getters, identity comparisons, exact-type keys).
What a program does to unittest while its own code runs inside the test and undoes before
the test ends is not seen: an interpreter cannot watch every store into a class.
"""

from __future__ import annotations

import builtins

__builtins__ = dict(builtins.__dict__)  # the builtins as built: a program may rebind them

import sys  # noqa: E402
import unittest  # noqa: E402
from types import MethodType, ModuleType  # noqa: E402

import shared_state  # noqa: E402
from bounded_repr import address as _address  # noqa: E402

_TYPE_GET = type.__dict__
_MRO = _TYPE_GET["__mro__"].__get__
_MODULE_OF = _TYPE_GET["__module__"].__get__
_QUALNAME = _TYPE_GET["__qualname__"].__get__
_TYPE_DICT = _TYPE_GET["__dict__"].__get__
_MODULE_DICT = ModuleType.__dict__["__dict__"].__get__
_DEBUG = unittest.TestCase.__dict__["debug"]  # the function: no descriptor of the program's
_TEST_CASE = unittest.TestCase
_BUILTINS = builtins.__dict__
_BUILTINS_STATE = dict(_BUILTINS)
_MODULES = sys.modules


def _family() -> tuple[list, list]:
    """unittest's modules ``(name, module, namespace, copy)`` and the classes they define
    ``(class, name, copy of its dict)``, as built."""
    modules, classes, seen = [], [], set()
    for name, module in list(_MODULES.items()):
        if (name == "unittest" or name.startswith("unittest.")) and type(module) is ModuleType:
            namespace = _MODULE_DICT(module)
            modules.append((name, module, namespace, dict(namespace)))
            for value in namespace.values():
                if (issubclass(type(value), type) and id(value) not in seen
                        and type(_MODULE_OF(value)) is str
                        and (_MODULE_OF(value) == "unittest"
                             or _MODULE_OF(value).startswith("unittest."))):
                    seen.add(id(value))
                    shared_state.settle(value)
                    classes.append((value, f"{_MODULE_OF(value)}.{_QUALNAME(value)}",
                                    dict(_TYPE_DICT(value))))
    return modules, classes


_UNITTEST_MODULES, _UNITTEST_CLASSES = _family()
_OWN = frozenset(_address(cls) for cls, _name, _state in _UNITTEST_CLASSES) | {
    _address(object), _address(type)}


def changed() -> list[str]:
    """What of unittest and the builtins is not as built (names, in order)."""
    found = []
    plain_modules = shared_state.plain(_MODULES)
    for name, module, namespace, state in _UNITTEST_MODULES:
        if not plain_modules or _MODULES.get(name) is not module:
            found.append(f"sys.modules[{name!r}]")
        if type(module) is not ModuleType or shared_state.differs(namespace, state):
            found.append(name)
    for cls, name, state in _UNITTEST_CLASSES:
        if shared_state.differs(_TYPE_DICT(cls), state):
            found.append(name)
    if shared_state.differs(_BUILTINS, _BUILTINS_STATE):
        found.append("builtins")
    return found


def foreign_bases(case, before: set[int]) -> list[str]:
    """The classes of ``case``'s MRO, and of its metaclass's, that are neither unittest's
    own nor ``object`` or ``type`` and existed before the test code ran (``before``, from
    shared_state.all_classes: the program's, or any other's)."""
    return [_QUALNAME(cls) if type(_QUALNAME(cls)) is str else "?"
            for cls in _MRO(case) + _MRO(type(case))
            if _address(cls) not in _OWN and _address(cls) in before]


def test_runner(case, name: str):
    """``case(name)``'s test, run as unittest runs it (its own ``debug``)."""
    return MethodType(_DEBUG, case(name))


def message(changes: list[str], when: str) -> str:
    shown = ", ".join(changes[:5]) + (", ..." if len(changes) > 5 else "")
    return (f"the program changed {shown} {when} its test ran: the test's verdict would "
            f"not be unittest's")
