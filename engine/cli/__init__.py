"""The ``steptrace`` command: thin click wrappers over the library functions."""

from steptrace.cli._main import main

__all__ = ["main"]
