"""The guest component's build cache: content-addressed, verified, rebuilt when stale."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from steptrace.sandbox import _build as build
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox, engine_fingerprint

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast


def test_key_changes_when_a_tracer_source_changes(tmp_path, monkeypatch):
    """Editing any guest source (or adding one) gives a new cache key, so it rebuilds."""
    copy = tmp_path / "tracer"
    shutil.copytree(build.tracer_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(build, "tracer_dir", lambda: copy)
    original = build.cache_key()
    assert build.cache_key() == original  # deterministic
    job = copy / "job.py"
    job.write_text(job.read_text() + "\n# a comment changes the guest\n")
    edited = build.cache_key()
    assert edited != original
    (copy / "extra.py").write_text("X = 1\n")
    assert build.cache_key() not in (original, edited)


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "c"))
    assert build.cache_dir() == tmp_path / "c"
    monkeypatch.delenv(build.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "steptrace"


def test_verification_detects_truncation_and_corruption(tmp_path):
    target = tmp_path / "a.bin"
    build.write_verified(target, b"component bytes")
    assert build.is_verified(target)
    target.write_bytes(b"component byte")  # truncated
    assert not build.is_verified(target)
    target.write_bytes(b"component bytez")  # same size, corrupted
    assert not build.is_verified(target)
    build.sidecar(target).unlink()
    assert not build.is_verified(target)


def test_corrupted_compiled_cache_is_recompiled(tmp_path, monkeypatch):
    """A .cwasm whose bytes do not match its digest is never deserialised (wasmtime trusts
    those bytes): it is compiled again from the verified component, and jobs run."""
    real = build.ensure_component()
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    copy = build.artifacts(real.key)
    for path in (real.wasm, build.sidecar(real.wasm)):
        shutil.copyfile(path, Path(tmp_path) / path.name)
    limits = Limits(timeout_s=2.0)
    cwasm = copy.cwasm.with_name(f"guest-{copy.key}-{engine_fingerprint(limits)}.cwasm")
    build.write_verified(cwasm, b"\0" * 4096)
    cwasm.write_bytes(b"\1" * 4096)  # corrupt after the digest was written
    with Sandbox(limits, copy) as sandbox:
        result = sandbox.run({"code": "def f(x):\n    return x * 2\n", "input": "21"}).result
    assert (result["status"], result["output"]) == ("ok", "42")
    assert build.is_verified(cwasm)
    assert cwasm.stat().st_size > 1_000_000


def test_build_error_for_an_unusable_cache_directory(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(build.CACHE_ENV, str(blocker / "cache"))
    with pytest.raises(build.BuildError, match="cannot create cache directory"):
        build.ensure_component()


def test_a_checked_file_is_hashed_again_only_when_its_status_changes(tmp_path, monkeypatch):
    """Once a file matched its digest (and had settled), its status is stamped and it is not
    hashed again; an in-place rewrite of the same size changes its ctime, so it is hashed
    again and found corrupt. A file changed just before it was hashed gets no stamp."""
    hashed: list[Path] = []
    real_digest = build.file_digest

    def counting_digest(path):
        hashed.append(path)
        return real_digest(path)

    monkeypatch.setattr(build, "file_digest", counting_digest)
    target = tmp_path / "a.cwasm"
    build.write_verified(target, b"compiled bytes")
    assert build.is_verified(target) and build.is_verified(target)
    assert len(hashed) == 2  # just written: not settled, so not stamped
    assert not build.checked_stamp(target).exists()

    monkeypatch.setattr(build, "STAMP_SETTLE_NS", 0)
    assert build.is_verified(target)
    assert build.is_verified(target) and build.is_verified(target)
    assert len(hashed) == 3  # stamped by the third check; the next two trusted it

    with open(target, "r+b") as handle:  # same size, corrupted in place
        handle.write(b"X")
    assert not build.is_verified(target)
    assert len(hashed) == 4
    build.write_verified(target, b"compiled bytes")  # replaced: a new inode and digest

    def read_only(target, payload):
        raise PermissionError(13, "Read-only file system", str(target))

    monkeypatch.setattr(build, "_write_atomic", read_only)  # no stamp can be written
    assert build.is_verified(target) and build.is_verified(target)
    assert len(hashed) == 6  # both hashed, both verified


def test_a_stamped_digest_is_hashed_once_per_change(tmp_path, monkeypatch):
    """``stamped_digest`` (the native library's digest, memory_reset.py): hashed, stamped
    once settled, trusted while the file's status holds, hashed again after a change."""
    hashed: list[Path] = []
    real_digest = build.file_digest
    monkeypatch.setattr(build, "file_digest", lambda path: hashed.append(path) or real_digest(path))
    library, stamp = tmp_path / "lib.so", tmp_path / "lib.checked"
    library.write_bytes(b"one build")
    one = hashlib.sha256(b"one build").hexdigest()
    assert build.stamped_digest(library, stamp) == one and not stamp.exists()  # not settled
    monkeypatch.setattr(build, "STAMP_SETTLE_NS", 0)
    assert build.stamped_digest(library, stamp) == one and stamp.exists()
    assert build.stamped_digest(library, stamp) == one
    assert len(hashed) == 2
    library.write_bytes(b"another build")
    assert build.stamped_digest(library, stamp) == hashlib.sha256(b"another build").hexdigest()
    assert len(hashed) == 3
    stamp.write_text("garbage")
    assert build.stamped_digest(library, stamp) == hashlib.sha256(b"another build").hexdigest()
    assert len(hashed) == 4


def test_a_rebuilt_component_drops_its_stale_compiled_forms(tmp_path, monkeypatch):
    """``ensure_component(force=True)`` rebuilds the ``.wasm``; the ``.cwasm`` files compiled
    from the old one (one per engine setting, ``guest-KEY-FINGERPRINT.cwasm``, with their
    sidecars) go, or a verified stale one would still be loaded. Another key's files,
    including the variant's (``guest-KEY-reseeded-…``), stay."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(build, "componentize", lambda out, env=None: out.write_bytes(b"new"))
    main = build.artifacts("k" * 24)
    variant = build.artifacts("k" * 24, variant="reseeded")
    names = ["-0badf00d.cwasm", "-0badf00d.cwasm.sha256", "-0badf00d.cwasm.checked",
             "-12345678.cwasm", "-12345678.cwasm.sha256"]
    for found in (main, variant):
        for suffix in names:
            (tmp_path / f"guest-{found.key}{suffix}").write_bytes(b"old")
    monkeypatch.setattr(build, "cache_key", lambda packages=None: "k" * 24)
    rebuilt = build.ensure_component(force=True)
    assert rebuilt == main and main.wasm.read_bytes() == b"new"
    assert rebuilt.built == "asked to (--force)"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted(
        [main.wasm.name, build.sidecar(main.wasm).name, f"guest-{main.key}.lock",
         f"guest-{main.key}.build", "builds.jsonl"]
        + [f"guest-{variant.key}{suffix}" for suffix in names])
