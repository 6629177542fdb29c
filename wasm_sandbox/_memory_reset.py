"""Reset a freed instance's memory by copying back only the pages it wrote.

When an instance is dropped, wasmtime's pooling allocator resets its linear memory to the
component's snapshot, so that the next instance in the slot starts from the built
interpreter. By default it copies back the whole kept-resident region (the guest's
18.25 MiB, ~1.3 ms: half of what a fresh instance costs here), written or not. Its other
reset path asks Linux which pages were written (the ``PAGEMAP_SCAN`` ioctl, Linux 6.7+)
and copies only those: a CRUXEval check writes ~480 pages, and ~600 distinct pages over
hundreds of checks. That path is ``PoolingAllocationConfig::pagemap_scan`` in wasmtime's
Rust API; it is off by default, and wasmtime-py 50.0.1's C API has no setter for it.

Two steps turn it on. Each is checked, and when a check fails it is skipped and the
default reset stays (slower, equally correct):

* :func:`enable_pagemap_scan` writes ``Enabled::Auto`` into the ``pagemap_scan`` byte of
  a pooling config. The byte's offset was read from one libwasmtime build (the SHA-256 in
  ``LAYOUTS``; the offsets were found by writing probe values through every setter and
  seeing which bytes changed, and by the fact that setting the neighbouring
  ``memory_protection_keys`` byte makes engine creation fail on a machine without
  memory protection keys). Before writing, the layout is confirmed on a scratch config:
  the setters still land where they did, and both ``Enabled`` bytes hold ``No``. It also
  needs the ioctl to answer the same probe wasmtime makes. Another wasmtime build, another
  platform, an older kernel: nothing is written.
* :func:`prefault` is needed because wasmtime 50's scan does not ask for *present* pages:
  a page the guest never touched counts as written, is copied at the slot's first reset
  and, a private copy from then on, counts again at every reset (~3,000 pages a reset
  instead of ~500). Mapping every page of the slot readable once (``MADV_POPULATE_READ``),
  before its first reset, makes untouched pages file-backed or the zero page, which the
  scan skips. Without it the reset is still correct, only slower.

Correctness stays wasmtime's: which pages to copy back is decided by wasmtime's own code
from what the kernel reports; neither step changes what memory holds.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import wasmtime._bindings as wasmtime_ffi
from wasmtime._ffi import filename as WASMTIME_LIBRARY

from steptrace.sandbox._build import cache_dir, stamped_digest

ENABLED_AUTO = 0  # wasmtime's `enum Enabled { Auto, Yes, No }`
ENABLED_NO = 2


@dataclass(frozen=True)
class ConfigLayout:
    """Where one libwasmtime build keeps fields of its pooling-allocator config."""

    setters: tuple[tuple[str, int, int], ...]  # (setter, byte offset, width) of a field
    memory_protection_keys: int  # byte offset of an `Enabled`
    pagemap_scan: int  # byte offset of an `Enabled`
    size: int  # bytes read and compared


_X86_64_50_0_1 = ConfigLayout(
    setters=(("decommit_batch_size", 80, 8), ("async_stack_keep_resident", 96, 8),
             ("linear_memory_keep_resident", 104, 8), ("table_keep_resident", 112, 8),
             ("max_unused_warm_slots", 128, 4)),
    memory_protection_keys=132, pagemap_scan=133, size=136)

# SHA-256 of the native library -> its layout. wasmtime-py 50.0.1, Linux x86_64 wheel.
LAYOUTS = {
    "3127ca42fe7cdd3f0a43a358e79177dcfedd46c1746329826403b9d854de6178": _X86_64_50_0_1,
}

# `_IOWR('f', 16, struct pm_scan_arg)`, the struct being 12 u64 (96 bytes)
PAGEMAP_SCAN = 0xC0606610
MADV_POPULATE_READ = 22  # Linux 5.14+


class _PmScanArg(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "size", "flags", "start", "end", "walk_end", "vec", "vec_len", "max_pages",
        "category_inverted", "category_mask", "category_anyof_mask", "return_mask")]


class _PageRegion(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64),
                ("categories", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def kernel_has_pagemap_scan() -> bool:
    """The probe wasmtime makes before using the ioctl: an empty range, one region."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        region = _PageRegion()
        arg = _PmScanArg(size=ctypes.sizeof(_PmScanArg), vec=ctypes.addressof(region),
                         vec_len=1, max_pages=1, category_mask=0x7F)
        libc = _libc()
        libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
        return libc.ioctl(fd, PAGEMAP_SCAN, ctypes.byref(arg)) >= 0
    finally:
        os.close(fd)


def library_layout(library: Path = WASMTIME_LIBRARY) -> ConfigLayout | None:
    """The layout known for this exact native library, or None."""
    try:
        digest = stamped_digest(library, cache_dir() / "libwasmtime.checked")
    except OSError:
        return None
    return LAYOUTS.get(digest)


def _config_bytes(pool, size: int) -> bytes:
    return ctypes.string_at(ctypes.cast(pool, ctypes.c_void_p).value, size)


def layout_holds(layout: ConfigLayout) -> bool:
    """Write a probe value through each listed setter of a scratch config and check that
    exactly the expected bytes changed, and that both ``Enabled`` bytes read ``No``."""
    ffi = wasmtime_ffi
    pool = ffi.wasmtime_pooling_allocation_config_new()
    try:
        before = _config_bytes(pool, layout.size)
        if (before[layout.memory_protection_keys], before[layout.pagemap_scan]) != (
                ENABLED_NO, ENABLED_NO):
            return False
        for index, (name, offset, width) in enumerate(layout.setters):
            probe = 0x5EED0000 + index
            getattr(ffi, f"wasmtime_pooling_allocation_config_{name}_set")(pool, probe)
            after = _config_bytes(pool, layout.size)
            changed = [i for i in range(layout.size) if after[i] != before[i]]
            if (after[offset:offset + width] != probe.to_bytes(width, sys.byteorder)
                    or not all(offset <= i < offset + width for i in changed)):
                return False
            before = after
        return True
    finally:
        ffi.wasmtime_pooling_allocation_config_delete(pool)


def enable_pagemap_scan(pool, library: Path = WASMTIME_LIBRARY) -> bool:
    """Set ``pagemap_scan`` to ``Auto`` in ``pool`` (a pooling config not yet handed to an
    engine) when every check passes; True if it was set."""
    layout = library_layout(library)
    if layout is None or not kernel_has_pagemap_scan() or not layout_holds(layout):
        return False
    address = ctypes.cast(pool, ctypes.c_void_p).value
    if _config_bytes(pool, layout.size)[layout.pagemap_scan] != ENABLED_NO:
        return False
    ctypes.memset(address + layout.pagemap_scan, ENABLED_AUTO, 1)
    return True


def _mappings() -> list[tuple[int, int, str, str]]:
    """(start, end, permissions, path) of each mapping of this process."""
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            found.append((start, end, fields[1], fields[5].strip() if len(fields) > 5 else ""))
    return found


def slot_ranges(image: Path) -> list[tuple[int, int]]:
    """Address ranges of the memory slots whose snapshot is mapped from ``image`` (the
    ``.cwasm``; or wasmtime's memfd for a component compiled in this process): the
    image's private writable mapping, and the anonymous writable mappings right before
    it (the guest's stack) and after it (memory above the snapshot)."""
    names = {os.path.realpath(image), "/memfd:wasm-memory-image (deleted)"}
    mappings = _mappings()
    ranges = []
    for index, (start, end, perms, path) in enumerate(mappings):
        if perms != "rw-p" or path not in names:
            continue
        ranges.append((start, end))
        for near in (index - 1, index + 1):
            if 0 <= near < len(mappings):
                n_start, n_end, n_perms, n_path = mappings[near]
                if n_perms == "rw-p" and not n_path and (n_end == start or n_start == end):
                    ranges.append((n_start, n_end))
    return ranges


def prefault(image: Path) -> int:
    """Map every page of the slots of ``image`` readable (see the module docstring);
    return how many pages that covered (0 when none was found or the kernel refused)."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = _libc()
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    pages = 0
    for start, end in slot_ranges(image):
        if libc.madvise(start, end - start, MADV_POPULATE_READ) == 0:
            pages += (end - start) // os.sysconf("SC_PAGE_SIZE")
    return pages
