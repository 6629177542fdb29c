"""2b. The native sandbox: the same guest tracer in the user's own CPython 3.12+, jailed
(bubblewrap, seccomp, resource limits), for programs that need packages with native code
(numpy, pandas, scipy, ...), which cannot run under WASI. Behind the WASI sandbox's
interface: ``NativeSandbox.run`` gives a ``steptrace.sandbox.JobOutcome``, checked as a
WASI result is, and ``steptrace.sandbox.WorkerPool`` runs a :class:`NativeGuest`'s jobs in
its workers. See docs/guides/sandbox.md (security model) for what it guarantees."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "Interpreter": "_python",
    "InterpreterError": "_python",
    "JailError": "_jail",
    "NativeError": "_runtime",
    "NativeGuest": "_runtime",
    "NativeSandbox": "_runtime",
    "find_python": "_python",
    "is_pure_literal": "_trust",
    "prepare": "_runtime",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
