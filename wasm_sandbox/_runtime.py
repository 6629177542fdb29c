"""Host the guest component with wasmtime and run jobs in it.

One :class:`Sandbox` per process: a wasmtime engine (epoch interruption on, the pooling
instance allocator so a fresh instance is cheap), the compiled component loaded once, and
a ticker thread that advances the engine's epoch every ``TICK_S`` seconds, which is what
turns a runaway job into a ``timeout`` trap.

Isolation:

* ``job`` (default): every job gets a new store and a new instance of the pre-initialised
  component, so nothing can pass from one job to the next.
* ``batch``: one instance runs job after job (faster, for trusted corpora). The guest
  restores ``builtins``, ``sys.stdout``/``sys.stderr`` and the recursion limit after each
  job, but module state a program mutates stays. An instance that traps is discarded and
  the next job gets a fresh one.

The guest sees WASI with two preopened directories, its own for the job (``/work``, its
working directory, and ``/tmp``: wasm_sandbox/_files.py), no environment variables, no
arguments (the guest sets ``sys.argv`` and ``os.environ`` from the request), an empty
stdin, and stdout/stderr that go nowhere; it has no sockets. The ticker thread also
measures the job's files while it runs and interrupts a job over ``max_file_bytes`` or
``max_files`` (status ``file_limit``).

Blocking host calls. The epoch is checked in wasm code only. A guest waiting in a WASI host
call (``time.sleep``, ``select``/``poll``/``selectors`` with a timeout, all of them
``wasi:io/poll`` on a ``monotonic-clock`` pollable; stdin is empty and stdout/stderr take
any write, so they never wait) is not interrupted: the wait runs to its end and the trap
fires at the first check after it. The job is still ``timeout``, but late, by as long as
it asked to wait. Nothing in this process can end that call early: wasmtime-wasi blocks
the calling thread until the wait is over, ``WasiConfig`` has no setting that caps a
wait, and the component ``Linker`` cannot replace just the blocking functions. Defining
``wasi:io/poll`` (or ``monotonic-clock``) replaces the whole instance (there is no
merging with what ``add_wasip2`` defined), and a ``pollable`` resource defined in Python
is a different type from the one wasmtime-wasi's ``wasi:io/streams`` and
``wasi:sockets`` subscribe functions return, so the guest no longer instantiates unless
streams, stdio, filesystem and sockets are all reimplemented as well; a Python host
function can neither create wasmtime-wasi's pollables nor call its ``poll``. (Wrapping the
guest in an outer component whose own wasm forwards ``poll`` and the clock's
``subscribe-*`` with the wait capped at the deadline could bound it in any process; that
changes the built artifact and is not done.) So the bound is kept where the call can be
ended, by ending the process: a worker's watchdog (wasm_sandbox/_worker.py) watches
:attr:`Sandbox.busy_since`. A Sandbox used directly (``--workers 0``) has no watchdog.
"""

from __future__ import annotations

import hashlib
import json
import math
import resource
import threading
import time
from ctypes import POINTER, byref, c_char_p, cast, string_at
from pathlib import Path

import wasmtime
import wasmtime._bindings as wasmtime_ffi
from wasmtime import component as wc
from wasmtime._ffi import WASMTIME_COMPONENT_STRING

from steptrace.sandbox._build import (GuestArtifacts, ensure_component, hold, is_verified,
                                      write_verified)
from steptrace.sandbox._files import FileBounds, JobFiles
from steptrace.sandbox._package_files import PackageFiles, PackageFilesError
from steptrace.sandbox._limits import ISOLATIONS, Limits
from steptrace.sandbox._memory_reset import enable_pagemap_scan, prefault
from steptrace.sandbox._outcome import FRESH_AFTER, PACK_FROM, JobOutcome, checked_outcome  # noqa: F401
from steptrace.errors import InputError

TICK_S = 0.01
WASM_STACK_BYTES = 6 * 1024 * 1024


def wasm_stack_bytes() -> int:
    """``WASM_STACK_BYTES``, but 1 MiB below this process's stack limit: wasm code runs on
    the calling thread's stack, and overrunning it would crash the host process."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY:
        return WASM_STACK_BYTES
    return max(512 * 1024, min(WASM_STACK_BYTES, soft - 1024 * 1024))
def engine_fingerprint(limits: Limits) -> str:
    """Compiled code depends on the engine's settings: keep one ``.cwasm`` per setting."""
    setting = f"epoch=1;pool=1;mem={limits.memory_mb};stack={wasm_stack_bytes()}"
    return hashlib.sha256(setting.encode()).hexdigest()[:8]


# Bytes of a freed instance's linear memory the pooling allocator resets in place and keeps
# mapped for the next instance in its slot: all of it (the guest's memory is ~27 MiB).
# Otherwise every page a fresh instance writes copy-on-write faults from the snapshot: ~500
# faults for a CRUXEval check, ~750 for a traced job, ~2.4 µs each here and more when two
# workers fault at once. Kept resident, the pages are copied back from the snapshot at
# teardown instead: only the pages the slot has written, where wasmtime's PAGEMAP_SCAN
# reset is on (memory_reset.py; ~1,300 after the 800 CRUXEval jobs), else every page of
# the region (wasmtime-py 50's default: one whole-memory copy, ~1.3 ms at 18 MiB). With the whole-memory copy, one process: the same
# either way (~2.5 ms a check); two workers: 2.6 s against 3.1 s for the 2,343 checks of
# bench/score_cruxeval.py, 1.87 s against 2.25 s (2 MiB kept) for tracing the 800
# (bench/README.md). Linux only; elsewhere wasmtime ignores it.
LINEAR_MEMORY_KEEP_RESIDENT = 64 << 20


def _pooling_config(limits: Limits):
    """The pooling allocator keeps instance slots (and the first pages of linear memory)
    resident between instances: instantiating and tearing down is then mostly a reset
    instead of mmap/munmap and page faults. Not exposed by wasmtime-py's ``Config``, so
    set through its C-API bindings."""
    ffi = wasmtime_ffi
    pool = ffi.wasmtime_pooling_allocation_config_new()
    ffi.wasmtime_pooling_allocation_config_total_component_instances_set(pool, 4)
    ffi.wasmtime_pooling_allocation_config_total_core_instances_set(pool, 256)
    ffi.wasmtime_pooling_allocation_config_total_memories_set(pool, 16)
    ffi.wasmtime_pooling_allocation_config_total_tables_set(pool, 256)
    ffi.wasmtime_pooling_allocation_config_total_stacks_set(pool, 16)
    ffi.wasmtime_pooling_allocation_config_max_memories_per_component_set(pool, 4)
    ffi.wasmtime_pooling_allocation_config_max_tables_per_component_set(pool, 64)
    ffi.wasmtime_pooling_allocation_config_max_core_instances_per_component_set(pool, 64)
    ffi.wasmtime_pooling_allocation_config_max_memory_size_set(pool, limits.memory_bytes)
    ffi.wasmtime_pooling_allocation_config_max_component_instance_size_set(pool, 1 << 20)
    ffi.wasmtime_pooling_allocation_config_max_core_instance_size_set(pool, 1 << 20)
    ffi.wasmtime_pooling_allocation_config_table_elements_set(pool, 100_000)
    ffi.wasmtime_pooling_allocation_config_linear_memory_keep_resident_set(
        pool, LINEAR_MEMORY_KEEP_RESIDENT)
    ffi.wasmtime_pooling_allocation_config_table_keep_resident_set(pool, 1 << 20)
    return pool


RESET_WRITTEN_PAGES = "written pages"
RESET_WHOLE_MEMORY = "whole memory"


def make_engine(limits: Limits) -> tuple[wasmtime.Engine, str]:
    """The engine, and how it resets a freed instance's memory: ``RESET_WRITTEN_PAGES``
    where memory_reset.enable_pagemap_scan could switch that on, else
    ``RESET_WHOLE_MEMORY``."""
    config = wasmtime.Config()
    config.epoch_interruption = True
    # The guest's native stack: CPython needs it for every Python call made through C
    # (map, sorted(key=...), list(generator), __repr__): wasmtime's 2 MiB default
    # overflows ~250 such levels deep, before Python's own limit of 1000.
    stack = wasm_stack_bytes()
    # the async stack (which wasmtime-py's WASI uses) must be at least as large
    wasmtime_ffi.wasmtime_config_async_stack_size_set(config.ptr(), stack + 1024 * 1024)
    config.max_wasm_stack = stack
    pool = _pooling_config(limits)
    written_pages = enable_pagemap_scan(pool)
    wasmtime_ffi.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)
    return wasmtime.Engine(config), RESET_WRITTEN_PAGES if written_pages else RESET_WHOLE_MEMORY


def compiled_path(found: GuestArtifacts, limits: Limits) -> Path:
    """The ``.cwasm`` for this component and engine setting."""
    return found.cwasm.with_name(f"guest-{found.key}-{engine_fingerprint(limits)}.cwasm")


def load_component(engine: wasmtime.Engine, limits: Limits,
                   found: GuestArtifacts) -> wc.Component:
    """Deserialise the verified ``.cwasm``; compile (and cache) it when missing or bad."""
    cwasm = compiled_path(found, limits)
    if is_verified(cwasm):
        try:
            return wc.Component.deserialize_file(engine, str(cwasm))
        except wasmtime.WasmtimeError:
            pass  # made by another wasmtime or for another engine setting: recompile
    component = wc.Component.from_file(engine, str(found.wasm))
    write_verified(cwasm, bytes(component.serialize()))
    return component


class EpochTicker:
    """Daemon thread: ``engine.increment_epoch()`` every ``TICK_S`` seconds, then
    ``on_tick()`` if given (the sandbox's look at the job's files)."""

    def __init__(self, engine: wasmtime.Engine, on_tick=None) -> None:
        self._engine = engine
        self._on_tick = on_tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steptrace-epoch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            self._engine.increment_epoch()
            if self._on_tick is not None:
                try:
                    self._on_tick()
                except Exception:  # never stop ticking: the epoch is every job's time limit
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def classify_trap(exc: Exception, limits: Limits) -> dict:
    """Turn a wasmtime trap into a result with a status the user can act on."""
    if isinstance(exc, wasmtime.ExitTrap):
        return {"status": "exited", "exception_type": "SystemExit",
                "exception_message": f"the program ended the interpreter (exit status {exc.code})"}
    text = str(exc)
    if "interrupt" in text:
        status, message = "timeout", f"exceeded the {limits.timeout_s:g} s time limit"
    elif "call stack exhausted" in text or "stack overflow" in text:
        status, message = "crashed", "the guest's stack overflowed"
    elif "memory" in text and ("limit" in text or "grow" in text):
        status, message = "memory_limit", f"exceeded the {limits.memory_mb} MiB memory limit"
    else:
        first = next((ln for ln in text.splitlines() if "trap" in ln), text.splitlines()[0] if text else "")
        status, message = "crashed", f"the guest trapped: {first.strip()[:300]}"
    return {"status": status, "exception_message": message}


_STRING = WASMTIME_COMPONENT_STRING.value


class StringExport:
    """The guest's ``run: func(request: string) -> string``, called through wasmtime's C
    API directly. ``wasmtime.component.Func.__call__`` asks the function for its type on
    every call and copies the result string out through a ctypes array type made for its
    length: ~10 µs a call for a no-op request (25 -> 15 µs), ~60 µs for a traced job's
    ~1 KB result. Errors and traps are raised as wasmtime-py raises them. The result is
    returned as bytes: decoding them is part of checking the guest's result
    (``parse_result``), where text that is not UTF-8 makes the job ``crashed``."""

    def __init__(self, func: wc.Func) -> None:
        self._func = func._func

    def __call__(self, store: wasmtime.Store, payload: str) -> bytes:
        data = payload.encode()
        param = wasmtime_ffi.wasmtime_component_val_t()
        param.kind = _STRING
        wasmtime_ffi.wasm_byte_vec_new(byref(param.of.string), len(data),
                                       cast(c_char_p(data), POINTER(wasmtime_ffi.wasm_byte_t)))
        result = wasmtime_ffi.wasmtime_component_val_t()
        try:
            error = wasmtime_ffi.wasmtime_component_func_call(
                byref(self._func), store._context(), byref(param), 1, byref(result), 1)
        finally:
            wasmtime_ffi.wasmtime_component_val_delete(byref(param))
        if error:
            raise wasmtime.WasmtimeError._from_ptr(error)
        try:
            if result.kind != _STRING:
                raise wasmtime.WasmtimeError(f"the guest's run returned value kind {result.kind}, "
                                             "not a string")
            text = result.of.string
            return string_at(text.data, text.size)
        finally:
            wasmtime_ffi.wasmtime_component_val_delete(byref(result))


class Sandbox:
    """Runs jobs in fresh (or, with ``batch`` isolation, reused) guest instances."""

    def __init__(self, limits: Limits | None = None,
                 artifacts: GuestArtifacts | None = None, files_root: str | None = None) -> None:
        """``files_root``: the directory for the jobs' files (wasm_sandbox/_files.py
        ``make_root``), kept by the caller (a worker pool's, removed when its worker is
        gone); by default the sandbox makes its own and removes it when closed."""
        self.limits = limits or Limits()
        self._script_limits = self.limits.for_shape("script")
        self.files = JobFiles(FileBounds(self.limits.max_file_bytes, self.limits.max_files),
                              files_root)
        # The job in progress (numbered) and the file bound it broke, as the ticker saw
        # it: the ticker interrupts only the job it measured (_watch_files).
        self._files_lock = threading.Lock()
        self._job_number = 0
        self.files_over: str | None = None
        self.engine, self.memory_reset = make_engine(self.limits)
        found = artifacts or ensure_component()
        hold(found)  # leased while this process lives: no other process evicts it
        self.component = load_component(self.engine, self.limits, found)
        self.cwasm = compiled_path(found, self.limits)  # its snapshot is what slots map
        self._prefaulted = self.memory_reset != RESET_WRITTEN_PAGES
        self.linker = wc.Linker(self.engine)
        self.linker.add_wasip2()
        self._deadline = max(1, math.ceil(self.limits.timeout_s / TICK_S)) + 1
        self._reused: tuple | None = None
        # time.monotonic() when the guest began the request it is running, None between
        # requests. Epoch interruption cannot stop a guest blocked in a host call (a sleep,
        # a select); a worker process's watchdog thread reads this to end such a job
        # (wasm_sandbox/_worker.py). Only the guest call itself counts, not the host's
        # parsing of its result.
        self.busy_since: float | None = None
        self.ticker = EpochTicker(self.engine, self._watch_files)
        # the packages' files, mounted read-only in every instance (_package_files.py):
        # asked of a fresh instance before any job ran
        self.package_files: PackageFiles | None = None
        try:
            text, trapped, _ = self.call(json.dumps({"command": "package_files"}))
            if trapped is not None:
                raise PackageFilesError("the guest trapped when asked for its package "
                                        f"files: {trapped['exception_message']}")
            self.package_files = PackageFiles(text, self.files.root)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._reused = None
        self.ticker.stop()
        self.files.close()

    def _watch_files(self) -> None:
        """On the ticker's thread: measure the job's files while a job runs; one over a
        bound is interrupted (the epoch moved past its deadline, as a runaway job's is)
        and its outcome is ``file_limit``. The job measured is the one interrupted: its
        number is checked under the lock the guest call holds to start and to end."""
        with self._files_lock:
            if self.busy_since is None or self.files_over is not None:
                return
            number = self._job_number
        over = self.files.over()
        if over is None:
            return
        with self._files_lock:
            if number != self._job_number or self.busy_since is None:
                return
            self.files_over = over
            for _ in range(self._deadline + 1):
                self.engine.increment_epoch()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _instantiate(self) -> tuple:
        store = wasmtime.Store(self.engine)
        store.set_epoch_deadline(self._deadline)
        store.set_limits(memory_size=self.limits.memory_bytes)
        wasi = wasmtime.WasiConfig()  # nothing inherited: no files, env, args, stdio
        self.files.preopen(wasi)  # but the job's own directories
        if self.package_files is not None:
            self.package_files.preopen(wasi)  # and its packages' files, read-only
        store.set_wasi(wasi)
        instance = self.linker.instantiate(store, self.component)
        if not self._prefaulted:  # the slot's first instance, before its first reset
            self._prefaulted = True
            prefault(self.cwasm)
        func = instance.get_func(store, "run")
        if func is None:
            raise wasmtime.WasmtimeError("the guest component exports no function 'run'")
        return store, StringExport(func)

    def call(self, payload: str, isolation: str = "job"
             ) -> tuple[bytes | str | None, dict | None, bool]:
        """Send one JSON request; return (result text, trap result, fresh instance?). The
        text is the guest's bytes, unchecked (``run`` checks them)."""
        if isolation not in ISOLATIONS:
            raise InputError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
        fresh = isolation == "job" or self._reused is None
        try:
            store, func = self._instantiate() if fresh else self._reused
            store.set_epoch_deadline(self._deadline)
            with self._files_lock:
                self._job_number += 1
                self.files_over = None
                self.busy_since = time.monotonic()
            try:
                text = func(store, payload)
            finally:
                with self._files_lock:
                    self.busy_since = None
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            self._reused = None
            trapped = classify_trap(exc, self.limits)
            if self.files_over is not None:  # the ticker interrupted it (_watch_files)
                trapped = {"status": "file_limit", "exception_message": self.files_over}
            # The traceback's frames hold the store (wasmtime-py's enter_wasm closure) in a
            # reference cycle; left to the cycle collector, dead instances would fill the
            # pooling allocator's slots and every later job would fail.
            exc.__traceback__ = None
            del exc
            return None, trapped, fresh
        self._reused = (store, func) if isolation == "batch" else None
        return text, None, fresh

    def run(self, request: dict, isolation: str = "job") -> JobOutcome:
        """Run one job: ``request`` has ``code``, ``input`` and optionally ``entry``,
        ``expected``, ``options``, ``argv`` and ``env`` (the guest's), and ``files``
        (``{relative path: text}``, written into the job's ``/work`` here); the sandbox's
        limits are added here. What the job left in its directories is the result's
        ``files`` (wasm_sandbox/_files.py ``FILE_COLUMNS``)."""
        limits = self._script_limits if request.get("shape") == "script" else self.limits
        started = time.perf_counter_ns()
        if "files" in request:
            request = dict(request)
            try:
                self.files.write(request.pop("files") or {})
            except InputError as exc:
                self.files.finish()
                return JobOutcome({"status": "invalid", "exception_message": str(exc)},
                                  (time.perf_counter_ns() - started) // 1000)
        payload = json.dumps({**request, "limits": limits.guest(),
                              "check_shared_state": isolation == "batch"})
        text, trapped, fresh = self.call(payload, isolation)
        files = self.files.finish()
        duration_us = (time.perf_counter_ns() - started) // 1000
        over = self.files_over or files.over
        if over is not None:
            self._reused = None
            return JobOutcome({"status": "file_limit", "exception_message": over},
                              duration_us, fresh)
        if files.touched and isolation == "batch":
            self._reused = None  # its descriptors, its working directory: see _files.py
        recorded = files.columns()
        if trapped is not None:
            if recorded is not None:
                trapped["files"] = recorded
            return JobOutcome(trapped, duration_us, fresh)
        outcome, reusable = checked_outcome(text, limits, duration_us, fresh, recorded)
        if not reusable:
            self._reused = None
        return outcome

    def preloaded_modules(self) -> dict:
        text, trapped, _ = self.call(json.dumps({"command": "preloaded"}))
        if trapped is not None:
            raise RuntimeError(trapped["exception_message"])
        return json.loads(text)
