"""A Ray actor (``ShardWorker``) fetches the guest's bytes from Ray's object store only when
its machine's cache lacks the plan's guest: a fetch costs each actor ~60 MB of peak memory
(bench/shards.py). The actor's methods are called here in this process, ``ray.get``
stubbed: what it would fetch is recorded."""

from __future__ import annotations

import pytest

import steptrace as st
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


def test_an_actor_whose_cache_holds_the_guest_does_not_fetch_it(tmp_path, monkeypatch):
    from steptrace.sharding._ray import ShardWorker
    out = _planned(tmp_path)  # planning built the guest into this cache
    fetched = _stub_get(monkeypatch, b"")
    worker = ShardWorker(str(out))
    try:
        assert worker.setup(["the component's ref"]) is None
        result = worker.run(0, ["the component's ref"])
    finally:
        if worker.pool is not None:
            worker.pool.close()
    assert fetched == []
    assert (result["runs"], result["by_status"], result["matched"]) == (3, {"ok": 3}, 3)


def test_an_actor_whose_cache_lacks_the_guest_fetches_and_checks_it(tmp_path, monkeypatch):
    from steptrace.sharding._ray import ShardWorker
    out = _planned(tmp_path)
    monkeypatch.setenv("STEPTRACE_CACHE_DIR", str(tmp_path / "empty-cache"))
    fetched = _stub_get(monkeypatch, b"not the plan's component")
    worker = ShardWorker(str(out))
    error = worker.setup(["the component's ref"])
    assert fetched == ["the component's ref"]
    assert error is not None and error[0] == "GuestMismatchError"
    assert error[1].startswith("the guest component given has digest ")
    assert worker.pool is None
