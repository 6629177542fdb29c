"""The written-page reset of freed instances (wasm_sandbox/_memory_reset.py): switched on
only for the library build whose config layout was read, and, once on, exact: a fresh
instance after any job (one that filled and grew memory, one that trapped) is the same
interpreter, down to where its allocator places the next object."""

from __future__ import annotations

import ctypes
import gc
import os
import struct
from dataclasses import replace

import pytest
import wasmtime._bindings as wasmtime_ffi
from wasmtime._ffi import filename as WASMTIME_LIBRARY

from steptrace.sandbox import _memory_reset as memory_reset
from steptrace.sandbox._build import file_digest
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._memory_reset import (ENABLED_AUTO, ENABLED_NO, LAYOUTS, enable_pagemap_scan,
                                       kernel_has_pagemap_scan, layout_holds, library_layout,
                                       slot_ranges)
from steptrace.sandbox._runtime import RESET_WHOLE_MEMORY, RESET_WRITTEN_PAGES, Sandbox

pytestmark = pytest.mark.slow  # low-level: the allocator's pages, its own sandboxes

LIMITS = Limits(timeout_s=60.0, memory_mb=64)  # no job here gets near it

# What a fresh interpreter does first: where its allocator puts new objects, small and
# after a large allocation, and the modules it has. A page left as a job wrote it shows in
# some of it. (Not random numbers: the guest reseeds from the host at each job.)
PROBE = ("import sys\n\ndef f():\n    a, b, c = object(), [1, 2], {'k': (1,)}\n"
         "    big = list(range(20_000))\n    d = object()\n"
         "    return id(a), id(b), id(c), id(big), id(d), len(sys.modules)\n")
DIRTY = ("import json, random, string, sys\n\ndef f():\n    random.seed(5)\n"
         "    junk = [str(i) * 10 for i in range(300_000)]\n    string.junk = junk[:10]\n"
         "    sys.modules['junk'] = string\n    json.dumps(junk[:1000])\n    return len(junk)\n")
# A job that ends in a trap (the instance's exit) after writing memory: deterministic, where
# one stopped by the timeout would have written as much as the machine's speed allowed.
RUNAWAY = ("import os\n\ndef f():\n    junk = [str(i) for i in range(50_000)]\n"
           "    os._exit(3)\n")


def kernel_at_least(major: int, minor: int) -> bool:
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


def config_bytes(pool, size: int) -> bytes:
    return ctypes.string_at(ctypes.cast(pool, ctypes.c_void_p).value, size)


@pytest.fixture
def pool():
    made = wasmtime_ffi.wasmtime_pooling_allocation_config_new()
    yield made
    wasmtime_ffi.wasmtime_pooling_allocation_config_delete(made)


def test_the_installed_library_is_the_one_whose_layout_was_read():
    """wasmtime is pinned (pyproject.toml) to the build in LAYOUTS; if this fails after
    an upgrade, the reset silently fell back to copying the whole memory: read the new
    build's layout (see the module docstring) before changing the pin."""
    layout = library_layout()
    assert layout is LAYOUTS[file_digest(WASMTIME_LIBRARY)]
    assert layout_holds(layout)


def test_the_kernel_probe_agrees_with_the_kernel_version():
    """PAGEMAP_SCAN came with Linux 6.7."""
    assert kernel_has_pagemap_scan() == kernel_at_least(6, 7)


def test_enabling_writes_auto_into_the_pagemap_byte_only(pool):
    layout = library_layout()
    before = config_bytes(pool, layout.size)
    assert enable_pagemap_scan(pool) == kernel_has_pagemap_scan()
    after = config_bytes(pool, layout.size)
    if kernel_has_pagemap_scan():
        assert after[layout.pagemap_scan] == ENABLED_AUTO
        assert after[layout.memory_protection_keys] == ENABLED_NO
    assert [i for i in range(layout.size) if after[i] != before[i]] == (
        [layout.pagemap_scan] if kernel_has_pagemap_scan() else [])


def test_an_unknown_library_changes_nothing(pool, tmp_path, monkeypatch):
    monkeypatch.setenv("STEPTRACE_CACHE_DIR", str(tmp_path / "cache"))
    other = tmp_path / "libwasmtime-other.so"
    other.write_bytes(b"another build")
    before = config_bytes(pool, 136)
    assert library_layout(other) is None
    assert enable_pagemap_scan(pool, library=other) is False
    assert config_bytes(pool, 136) == before


def test_a_layout_that_moved_is_refused(pool, monkeypatch):
    """A setter that no longer lands at its recorded offset, or Enabled bytes elsewhere:
    the check fails and the config is left alone."""
    layout = library_layout()
    moved = replace(layout, setters=(("linear_memory_keep_resident", 96, 8),))
    assert not layout_holds(moved)
    assert not layout_holds(replace(layout, pagemap_scan=layout.pagemap_scan + 1))
    monkeypatch.setattr(memory_reset, "library_layout", lambda library: moved)
    before = config_bytes(pool, layout.size)
    assert enable_pagemap_scan(pool) is False
    assert config_bytes(pool, layout.size) == before


@pytest.fixture(scope="module")
def box():
    with Sandbox(LIMITS) as sandbox:
        yield sandbox


def probe(box: Sandbox) -> str:
    outcome = box.run({"code": PROBE, "input": ""}, "job")
    assert outcome.result["status"] == "ok" and outcome.fresh_instance
    return outcome.result["output"]


def test_the_sandbox_resets_written_pages_where_it_can(box):
    assert box.memory_reset == (RESET_WRITTEN_PAGES if kernel_has_pagemap_scan()
                                else RESET_WHOLE_MEMORY)


def test_a_fresh_instance_after_any_job_is_the_same_interpreter(box):
    first = probe(box)
    assert probe(box) == first
    dirty = box.run({"code": DIRTY, "input": "", "mode": "run"}, "job")  # untraced: fast
    assert (dirty.result["status"], dirty.result["output"]) == ("ok", "300000")
    assert probe(box) == first
    runaway = box.run({"code": RUNAWAY, "input": ""}, "job")
    assert runaway.result["status"] == "exited"
    gc.collect()  # a trapped instance is freed by the cycle collector (test_limits.py)
    assert probe(box) == first


def private_pages(ranges: list[tuple[int, int]]) -> int:
    """Pages of ``ranges`` that are present and not the file's page: the slot's own copies
    (what wasmtime 50's scan counts as written), and the zero page where memory that is
    not part of the snapshot (the guest's stack, 240 pages) was only read."""
    count = 0
    with open("/proc/self/pagemap", "rb") as pagemap:
        for start, end in ranges:
            pagemap.seek(start // 4096 * 8)
            entries = pagemap.read((end - start) // 4096 * 8)
            for (entry,) in struct.iter_unpack("<Q", entries):
                count += bool(entry >> 63 & 1) and not entry >> 61 & 1
    return count


def test_the_slot_keeps_only_written_pages_as_its_own_copies(box):
    """After many jobs, the slot's private pages are the ones jobs wrote (~1,900-2,100 for
    the jobs of this module as the guest's build and the kernel's page cache fall, the
    probe's 20,000-element list among them; under 2,500 here), not the whole
    memory (4,672 pages) nor every page the first reset met (~3,000 without the
    pre-fault). With the whole-memory reset every page of the slot is a private copy."""
    for value in range(30):
        assert box.run({"code": "def f(x):\n    return [x] * 3\n", "input": str(value)},
                       "job").result["output"] == str([value] * 3)
    ranges = slot_ranges(box.cwasm)
    total = sum(end - start for start, end in ranges) // 4096
    assert total >= 4600
    if box.memory_reset == RESET_WRITTEN_PAGES:
        assert 100 < private_pages(ranges) < 2500
    else:
        assert private_pages(ranges) == total
