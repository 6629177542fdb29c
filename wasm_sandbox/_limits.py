"""Per-job limits: what the sandbox enforces and where.

=====================  ==========  ================================================  ==============
limit                  default     enforced by                                       status when hit
=====================  ==========  ================================================  ==============
``timeout_s``          5.0 s       wasmtime epoch interruption (host ticker thread)  ``timeout``
``max_steps``          100,000     the tracer (steps recorded, all kinds)            ``step_limit``
``memory_mb``          512 MiB     wasmtime store limit on linear memory             ``memory_limit``
``max_stdout``         65,536      the guest's bounded stdout/stderr (characters)    ``output_limit``
``max_script_stdout``  16 MiB      the same for a script (``shape: "script"``)       ``output_limit``
``max_file_bytes``     64 MiB      the host: bytes of the job's files together       ``file_limit``
                                   (wasm_sandbox/_files.py; in workers also the
                                   kernel's RLIMIT_FSIZE for any one file)
``max_files``          1,000       the host: files, directories and symlinks the     ``file_limit``
                                   job has at once
``max_repr``           1,000       the tracer: one variable's repr (characters)      truncated flag
``max_output``         100,000     the guest: the return value's repr (characters)   truncated flag
``max_trace_chars``    16,000,000  the tracer: all recorded reprs together           ``output_limit``
``max_result_bytes``   32 MiB      the host: the guest's JSON result                 ``output_limit``
``max_result_values``  1,000,000   the host: JSON values in that result              ``output_limit``
``max_name``           1,000       the host: a function, variable, type, exception   cut, noted
                                   type or event name (characters)
``max_message``        10,000      the host: an exception message or a note          cut, noted
=====================  ==========  ================================================  ==============

``timeout_s`` has two enforcers. Epoch interruption stops guest code that runs, but it is
checked only in wasm code: a guest blocked in a host call (``time.sleep(60)``,
``select.select([], [], [], 60)``: WASI's ``poll`` on a clock) is not interrupted until
the call returns. In a worker process (wasm_sandbox/_worker.py) a watchdog thread ends such a
job ``WATCHDOG_GRACE_S`` after its limit: the worker reports the job as ``timeout`` and
exits, and the pool replaces it and runs the rest of the chunk elsewhere
(wasm_sandbox/_pool.py). A :class:`~steptrace.sandbox._runtime.Sandbox` used in the calling
process (``--workers 0``) has no watchdog: such a job still ends as ``timeout``, but only
when its wait ends (the first epoch check after it), however long that is.

The host checks every result against wasm_sandbox/_result_schema.py whatever the guest
claims to enforce: ``max_stdout``, ``max_repr`` and ``max_output`` are caps of the host
too (a longer text is cut; the value's or output's truncated flag is set, or for
stdout the run's note says so), and a result that breaks the schema is ``crashed``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from steptrace.errors import InputError

# Seconds a job may stay in the guest past its time limit before a worker's watchdog ends
# it. Epoch interruption ends a computing job within ~2 epoch ticks (20 ms) of its limit,
# so the watchdog only ever sees jobs blocked in a host call; the grace keeps it from
# racing the epoch for a job that is just returning from one at the limit.
WATCHDOG_GRACE_S = 0.5

# How jobs share an interpreter (Sandbox.call): "job", a fresh instance per job; "batch",
# one instance per chunk, reset between jobs (trusted code only). Defined here, beside the
# limits, rather than in _runtime: the CLI offers them as --isolation's choices when it
# starts, without loading wasmtime.
ISOLATIONS = ("job", "batch")
# The sandboxes a job can run in (steptrace.sandbox._backends): the WebAssembly guest, or
# the same tracer in a jailed native CPython (steptrace.native_sandbox). Here for the CLI.
BACKENDS = ("wasi", "native")


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0
    max_steps: int = 100_000
    memory_mb: int = 512
    max_stdout: int = 65_536
    max_repr: int = 1_000
    max_output: int = 100_000
    max_trace_chars: int = 16_000_000
    max_result_bytes: int = 32 * 1024 * 1024
    max_result_values: int = 1_000_000
    max_name: int = 1_000
    max_message: int = 10_000
    # A script's stdout is its answer, judged whole: sized for real judges' outputs (a
    # Codeforces or AtCoder answer of 10^6 numbers is ~7-11 MB; CodeNet's largest
    # expected outputs are a few MB), and as much as a script may read (the corpus's
    # MAX_STDIN, 16,777,216 characters). A call's stdout is incidental: 65,536.
    max_script_stdout: int = 16 * 1024 * 1024
    max_file_bytes: int = 64 * 1024 * 1024
    max_files: int = 1_000

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise InputError(f"limit {name} must be positive, got {value}")

    def guest(self) -> dict:
        """The part of the limits the guest enforces itself."""
        return {"max_steps": self.max_steps, "max_repr": self.max_repr,
                "max_stdout": self.max_stdout, "max_output": self.max_output,
                "max_trace_chars": self.max_trace_chars}

    def for_shape(self, shape: str | None) -> "Limits":
        """The limits of a job of this shape: a script's stdout cap is
        ``max_script_stdout`` (what the guest enforces and the host caps as
        ``max_stdout``)."""
        if shape != "script" or self.max_script_stdout == self.max_stdout:
            return self
        return replace(self, max_stdout=self.max_script_stdout)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb * 1024 * 1024
