"""Run chunks of guest requests: in worker processes (the pool, with its watchdog), or in
this process (``workers=0``). What tracing, analysis runs and scoring all run jobs with."""

from __future__ import annotations

from typing import Iterable, Iterator

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import PackageLock
from steptrace.sandbox._backends import open_sandbox
from steptrace.sandbox._outcome import JobOutcome
from steptrace.sandbox._pool import WorkerPool, prepare


def run_chunks(chunks: Iterable[list[dict]], workers: int, limits: Limits, isolation: str = "job",
               variant: str = "", pool: WorkerPool | None = None,
               packages: PackageLock | None = None) -> Iterator[tuple[int, list[JobOutcome]]]:
    """Run chunks of guest requests (in worker processes, or here with ``workers=0``);
    yield ``(chunk index, outcomes)`` as chunks finish, in any order. Only workers have
    the watchdog that ends a job blocked in a sleep or wait at its time limit
    (wasm_sandbox/_worker.py); here such a job ends, as ``timeout``, when its wait does. ``variant`` names
    a separately initialised build of the guest (see steptrace.sandbox._build), ``packages``
    the lock of a guest with packages (steptrace.sandbox._packages; a native lock's jobs run
    in the native backend, steptrace.native_sandbox). A ``pool``
    started earlier (``steptrace.tracing._trace.start_pool``) runs these chunks and is then told to finish, so
    that its workers exit while the caller stores the last results."""
    if pool is not None:
        yield from pool.run(chunks)
        pool.finish()
        return
    if workers == 0:
        with open_sandbox(prepare(limits, variant, packages), limits) as sandbox:
            for index, chunk in enumerate(chunks):
                yield index, [sandbox.run(request, isolation) for request in chunk]
        return
    size = min(workers, max(1, len(chunks))) if isinstance(chunks, list) else workers
    with WorkerPool(size, limits, isolation, variant=variant, packages=packages) as pool:
        yield from pool.run(chunks)
