"""2. Sandbox: build the guest (``steptrace.guest``) into a WebAssembly component, host it
under wasmtime with its limits, and run chunks of jobs in worker processes."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "BuildError": "_build",
    "JobOutcome": "_runtime",
    "Limits": "_limits",
    "PackageError": "_packages",
    "PackageLock": "_packages",
    "PoolError": "_pool",
    "Sandbox": "_runtime",
    "WorkerPool": "_pool",
    "ensure_component": "_build",
    "read_lock": "_packages",
    "resolve": "_packages",
    "run_chunks": "_runner",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
