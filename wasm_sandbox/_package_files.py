"""A guest's package files, mounted read-only where its build saw them.

A guest with packages (wasm_sandbox/_packages.py) holds its packages' modules as
compiled code (tracer/held_modules.py); but package code also reads its own files at run
time: its data (certifi's ``cacert.pem``, pytz's zone files, jsonschema's schemas),
through ``importlib.resources`` or a path made from ``__file__``, its distribution's
metadata (``importlib.metadata.version()`` reads ``.dist-info``), and its directory
(``pkgutil.iter_modules`` lists a package's plugins; a traceback shows source lines). The
guest holds those files (everything of its packages' directory but bytecode) in its
snapshot. A
:class:`~steptrace.sandbox._runtime.Sandbox` asks for them once (the guest command
``package_files``, answered by a fresh instance of the verified component before any
program ran in it), writes them into ``packages/`` of its files root, and hands that
directory to every instance as a read-only preopen at the path the build mounted the
packages at (``/1``): the files are where ``__file__`` says, and a program can read them
but not change them (WASI refuses every write, rename or delete there).

The standard guest has no packages and mounts nothing. The answer is checked as any
guest output is: the root is ``/`` and digits, every path is relative with no ``..``
part (wasm_sandbox/_files.py ``check_path``), the files together are bounded
(``MAX_FILES``, ``MAX_BYTES`` once decompressed); a bad answer is a SandboxError naming
what was wrong, and the sandbox is not made.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import zlib

from steptrace.errors import InputError, SandboxError
from steptrace.sandbox._files import check_path

SUBDIR = "packages"  # in the sandbox's files root (wasm_sandbox/_files.py make_root)
MAX_FILES = 100_000
MAX_BYTES = 1 << 30  # of all files, decompressed
_ROOT = re.compile(r"/[0-9]{1,4}")


class PackageFilesError(SandboxError):
    """The guest's answer to ``package_files`` is not what a build makes."""


class PackageFiles:
    """The package files of one sandbox's guest, written under ``files_root``; ``root``
    is their guest path (None: the guest has no packages, nothing is mounted)."""

    def __init__(self, answer: bytes | str, files_root: str) -> None:
        try:
            found = json.loads(answer)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PackageFilesError(f"the guest's package files are not JSON: {exc}") from None
        self.root: str | None = None
        self.host: str | None = None
        if isinstance(found, dict) and found.get("exception_message") == "unknown command":
            return  # a guest built before package files were held (a shard's, say)
        if not isinstance(found, dict) or set(found) != {"root", "files"}:
            raise PackageFilesError("the guest's package files are not {root, files}")
        root, files = found["root"], found["files"]
        if root is None:
            return
        if not isinstance(root, str) or not _ROOT.fullmatch(root) or not isinstance(files, list):
            raise PackageFilesError(f"the guest's packages root {root!r} is not '/' and digits")
        if len(files) > MAX_FILES:
            raise PackageFilesError(f"the guest holds more than {MAX_FILES:,} package files")
        host = os.path.join(files_root, SUBDIR)
        shutil.rmtree(host, ignore_errors=True)
        os.mkdir(host, 0o700)
        left = MAX_BYTES
        for item in files:
            if (not isinstance(item, list) or len(item) != 2
                    or not all(isinstance(part, str) for part in item)):
                raise PackageFilesError("a package file is not [path, base64]")
            path, encoded = item
            try:
                parts = check_path(path)
                data = _inflate(base64.b64decode(encoded, validate=True), left)
                left -= len(data)
                target = os.path.join(host, *parts)
                os.makedirs(os.path.dirname(target), 0o700, exist_ok=True)
                with open(target, "xb") as handle:  # a path given twice is refused
                    handle.write(data)
            except (InputError, binascii.Error, zlib.error) as exc:
                raise PackageFilesError(f"package file {path!r}: {exc}") from None
            except OSError as exc:
                raise PackageFilesError(f"package file {path!r}: "
                                        f"{exc.strerror or exc}") from None
        self.root, self.host = root, host

    def preopen(self, config) -> None:
        """Hand the files to a ``wasmtime.WasiConfig``, read-only."""
        if self.root is not None:
            config.preopen_dir(self.host, self.root, False)


def _inflate(data: bytes, most: int) -> bytes:
    """``data`` decompressed, refused past ``most`` bytes (a zip bomb stops there)."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, most + 1)
    if len(out) > most or inflater.unconsumed_tail:
        raise zlib.error(f"the package files are larger than {MAX_BYTES:,} bytes")
    if not inflater.eof:
        raise zlib.error("truncated compressed data")
    return out
