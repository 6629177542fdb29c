"""Lazy re-exports for the package ``__init__`` modules (PEP 562).

A package's public names come from its private modules, imported the first time a name is
used: ``import steptrace.store`` costs nothing until ``steptrace.store.connect`` is asked
for, so light commands do not pay for DuckDB, polars or wasmtime, and the packages can
import one another's private modules without import cycles through their ``__init__``.
"""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_exports(namespace: dict, exports: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for the package whose globals are ``namespace``;
    ``exports`` maps each public name to the private module (relative to the package)
    that defines it."""
    package = namespace["__name__"]

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
