"""Processes that share a component cache, for the tests of its leases and eviction
(tests/sandbox/test_cache_sharing.py). Run as ``python cache_users.py MODE ARGS`` with
``STEPTRACE_CACHE_DIR`` set; each prints one JSON line per phase on stdout and, where it
says so, waits for a line on stdin before going on, so a test decides when it ends.

* ``hold``: a real worker pool (two workers) on the standard guest runs a chunk, says
  ``ready``, waits; then a new pool (new worker processes, loading the build again) runs
  another chunk and says ``again``.
* ``lease KEY``: holds KEY's lease (``_cache.lease``), says ``held``, waits.
* ``building GROUP``: holds GROUP's build lock, says ``building``, waits.
* ``build KEY [GO_FILE]``: ``ensure_component`` with the guest's key taken to be KEY and a
  stand-in for componentize-py that writes ``fake build of KEY by PID`` (after GO_FILE
  exists, when given); says what it found or built.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from steptrace.sandbox import _build as build
from steptrace.sandbox import _cache as cache


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def wait() -> None:
    sys.stdin.readline()


def double(pool, inputs: list[int]) -> list[str]:
    requests = [{"code": "def f(x):\n    return x * 2\n", "input": str(i)} for i in inputs]
    outcomes = [o for _, chunk in pool.run([requests]) for o in chunk]
    return [o.result.get("output") for o in outcomes]


def hold() -> None:
    from steptrace.sandbox._limits import Limits
    from steptrace.sandbox._pool import WorkerPool
    limits = Limits(timeout_s=5.0)
    with WorkerPool(2, limits) as pool:
        say(phase="ready", key=pool.artifacts.key, outputs=double(pool, [1, 2, 3]))
        wait()
    with WorkerPool(1, limits) as pool:  # a new worker loads the build after the waiting
        say(phase="again", key=pool.artifacts.key, outputs=double(pool, [4, 5]))


def fake_build(key: str, go: Path | None) -> None:
    def componentize(out: Path, packages=None) -> None:
        while go is not None and not go.exists():
            time.sleep(0.05)
        out.write_bytes(f"fake build of {key} by {os.getpid()}".encode())

    build.cache_key = lambda packages=None: key
    build.componentize = componentize
    found = build.ensure_component()
    say(phase="done", key=found.key, built=found.built,
        digest=build.sidecar(found.wasm).read_text().strip())


def main(mode: str, *args: str) -> None:
    root = build.cache_dir()
    if mode == "hold":
        hold()
    elif mode == "lease":
        assert cache.lease(root, args[0])
        say(phase="held", pid=os.getpid())
        wait()
    elif mode == "building":
        with cache.building(root, args[0]):
            say(phase="building", pid=os.getpid())
            wait()
    elif mode == "build":
        fake_build(args[0], Path(args[1]) if len(args) > 1 else None)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(*sys.argv[1:])
