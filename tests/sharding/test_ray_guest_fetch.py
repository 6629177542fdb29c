"""A Ray actor (``ShardWorker``) fetches the guest's bytes from Ray's object store only when
its machine's cache lacks the plan's component (as its build, or a copy in ``foreign/``):
a fetch costs each actor ~60 MB of peak memory (bench/shards.py). It runs the digest the
driver trusted and no other. The actor's methods are called here in this process,
``ray.get`` stubbed: what it would fetch is recorded."""

from __future__ import annotations

import pytest

import steptrace as st
from steptrace.sharding._plan import guest_path, read_plan
from helpers.processes import write_jsonl

ray = pytest.importorskip("ray")

RECORDS = [{"id": f"s{i}", "code": "def f(x):\n    return x + 1\n", "input": str(i),
            "output": str(i + 1)} for i in range(3)]


def _planned(tmp_path):
    out = tmp_path / "shards"
    st.trace_sharded(write_jsonl(tmp_path / "c.jsonl", RECORDS), out, plan_only=True)
    return out


def _stub_get(monkeypatch, payload: bytes) -> list:
    fetched: list = []

    def get(ref):
        fetched.append(ref)
        return payload
    monkeypatch.setattr(ray, "get", get)
    return fetched


def run_first_shard(out, trusted: str) -> dict:
    """A ShardWorker trusting ``trusted`` set up and run on shard 0; its result."""
    from steptrace.sharding._ray import ShardWorker
    worker = ShardWorker(str(out), trusted)
    try:
        assert worker.setup(["the component's ref"]) is None
        return worker.run(0, ["the component's ref"])
    finally:
        if worker.pool is not None:
            worker.pool.close()


def test_an_actor_whose_cache_holds_the_guest_does_not_fetch_it(tmp_path, monkeypatch):
    out = _planned(tmp_path)  # planning built the guest into this cache
    fetched = _stub_get(monkeypatch, b"")
    result = run_first_shard(out, read_plan(out).guest.digest)
    assert fetched == []
    assert (result["runs"], result["by_status"], result["matched"]) == (3, {"ok": 3}, 3)


def test_an_actor_whose_cache_lacks_the_guest_fetches_and_checks_it(tmp_path, monkeypatch):
    from steptrace.sharding._ray import ShardWorker
    out = _planned(tmp_path)
    monkeypatch.setenv("STEPTRACE_CACHE_DIR", str(tmp_path / "empty-cache"))
    fetched = _stub_get(monkeypatch, b"not the plan's component")
    worker = ShardWorker(str(out), read_plan(out).guest.digest)
    error = worker.setup(["the component's ref"])
    assert fetched == ["the component's ref"]
    assert error is not None and error[0] == "GuestMismatchError"
    assert error[1].startswith("the guest component given has digest ")
    assert worker.pool is None
    assert not (tmp_path / "empty-cache" / "foreign").exists()


def test_an_actor_runs_only_the_digest_the_driver_trusted(tmp_path, monkeypatch):
    """An actor whose machine lacks the guest installs the driver's bytes in its cache's
    ``foreign/`` folder, never under the plan's key; a plan whose guest is not the digest
    the driver trusted (changed since) is refused, nothing fetched."""
    from steptrace.sandbox._build import file_digest
    from steptrace.sharding._ray import ShardWorker
    out = _planned(tmp_path)
    plan = read_plan(out)
    payload = guest_path(out, plan.guest).read_bytes()
    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("STEPTRACE_CACHE_DIR", str(cache))
    fetched = _stub_get(monkeypatch, payload)
    refused = ShardWorker(str(out), "0" * 64)
    error = refused.setup(["the component's ref"])
    assert error == ("GuestMismatchError", f"--trust-guest {'0' * 16}... is not the plan's "
                                           f"guest: its component has sha256 {plan.guest.digest}")
    assert fetched == [] and not cache.exists()
    result = run_first_shard(out, plan.guest.digest)
    assert fetched == ["the component's ref"]
    assert (result["runs"], result["by_status"], result["matched"]) == (3, {"ok": 3}, 3)
    assert file_digest(cache / "foreign" / f"guest-{plan.guest.digest}.wasm") == plan.guest.digest
    assert not (cache / f"guest-{plan.guest.key}.wasm").exists()
    run_first_shard(out, plan.guest.digest)  # now on hand: not fetched again
    assert fetched == ["the component's ref"]
