"""Package data held in the snapshot: a package's files, read through
``importlib.resources``, served from memory.

componentize-py pre-initialises the interpreter while the packages' directories are
mounted; at run time they are not (the guest has only the job's own directories,
wasm_sandbox/_files.py), so a package that reads its data files through
``importlib.resources`` (tzdata's zone files, which ``zoneinfo`` reads) would find
nothing. :func:`hold` reads every file of a package tree when the guest is built and
gives each of its packages a loader whose resource reader serves those bytes: then
``importlib.resources.files("tzdata.zoneinfo.Europe").joinpath("Paris").open("rb")``,
and so ``zoneinfo.ZoneInfo("Europe/Paris")``, work as on any machine with the package
installed. The data is read-only (``open`` gives a new stream over the bytes; nothing
writes back).

This module is not part of the runner: it holds the packages' data and nothing else,
and its classes are the program's to use (guest.py removes the module's name from
``sys.modules``, as no program imports it by name).
"""

from __future__ import annotations

import errno
import importlib
import io
import os
from importlib.resources.abc import Traversable, TraversableResources


class MemoryPath(Traversable):
    """A file or directory of a held package tree: ``path`` is relative to the tree's
    top (``""`` is the top itself)."""

    def __init__(self, tree: "HeldTree", path: str) -> None:
        self._tree = tree
        self._path = path

    @property
    def name(self) -> str:
        return self._path.rpartition("/")[2] or self._tree.top

    def is_file(self) -> bool:
        return self._path in self._tree.files

    def is_dir(self) -> bool:
        return self._path in self._tree.dirs

    def iterdir(self):
        if not self.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(self))
        return iter([MemoryPath(self._tree, child) for child in self._tree.dirs[self._path]])

    def joinpath(self, *descendants) -> "MemoryPath":
        parts = [self._path] if self._path else []
        for descendant in descendants:
            parts += [part for part in str(descendant).split("/") if part not in ("", ".")]
        return MemoryPath(self._tree, "/".join(parts))

    def __truediv__(self, child) -> "MemoryPath":
        return self.joinpath(child)

    def open(self, mode: str = "r", *args, **kwargs):
        data = self._tree.files.get(self._path)
        if data is None:
            if self.is_dir():
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(self))
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(self))
        if mode not in ("r", "rb"):
            raise ValueError(f"a package's data is read-only: mode {mode!r} is not 'r' or 'rb'")
        stream = io.BytesIO(data)
        return stream if mode == "rb" else io.TextIOWrapper(stream, *args, **kwargs)

    def __str__(self) -> str:
        return f"{self._tree.origin}/{self._path}" if self._path else self._tree.origin

    def __repr__(self) -> str:
        return f"MemoryPath({str(self)!r})"


class HeldTree:
    """A package tree's files (path -> bytes) and directories (path -> sorted child
    paths), as read when the guest was built; ``origin`` is where it was read from."""

    def __init__(self, top: str, origin: str, files: dict, dirs: dict) -> None:
        self.top = top
        self.origin = origin
        self.files = files
        self.dirs = dirs


class MemoryReader(TraversableResources):
    """A package's resource reader: its directory of a held tree."""

    def __init__(self, root: MemoryPath) -> None:
        self._root = root

    def files(self) -> MemoryPath:
        return self._root


class MemoryLoader:
    """The loader a held package's spec names: it serves the package's resources (the
    package itself is already imported, into the snapshot)."""

    def __init__(self, root: MemoryPath) -> None:
        self._root = root

    def get_resource_reader(self, name: str) -> MemoryReader:
        return MemoryReader(self._root)


def hold(top: str) -> int:
    """Import package ``top`` and all its subpackages and hold its files in memory
    (``__pycache__`` left out); return the number of files held. Called when the guest
    is built; ImportError if ``top`` is not there."""
    package = importlib.import_module(top)
    base = package.__path__[0]
    files: dict[str, bytes] = {}
    dirs: dict[str, list[str]] = {}
    packages: list[tuple[str, str]] = []  # (module name, path in the tree)
    for current, subdirs, names in os.walk(base):
        subdirs[:] = sorted(name for name in subdirs if name != "__pycache__")
        relative = os.path.relpath(current, base).replace(os.sep, "/")
        relative = "" if relative == "." else relative
        prefix = f"{relative}/" if relative else ""
        dirs[relative] = sorted(prefix + name for name in subdirs + names)
        for name in names:
            with open(os.path.join(current, name), "rb") as handle:
                files[prefix + name] = handle.read()
        if "__init__.py" in names:
            packages.append((".".join([top, *relative.split("/")]) if relative else top,
                             relative))
    tree = HeldTree(top, base, files, dirs)
    for name, relative in packages:
        module = importlib.import_module(name)
        loader = MemoryLoader(MemoryPath(tree, relative))
        module.__spec__.loader = loader
        module.__loader__ = loader
    return len(files)
