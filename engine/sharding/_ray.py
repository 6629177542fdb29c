"""The Ray engine: one actor per worker, each holding a warm sandbox, running shards.

Ray is an optional dependency (``pip install 'steptrace[ray]'``); this module imports it
only when it runs. The driver decides whether the plan's guest may run at all
(``_shard.guest_trust``: a build of its machine, or one the user trusts), reads the
plan's component once and puts it in Ray's object store (41 MB, about 0.1 s): an actor
whose machine's cache lacks that component fetches those bytes and installs them in its
cache's ``foreign/`` folder after checking them against the digest the driver trusted
(``_shard.plan_guest``; nothing wasmtime holds can be pickled, so each actor loads the
component itself). An actor keeps a one-worker
``WorkerPool`` across shards: the pool's worker process has the watchdog that ends a job
blocked in a host call, and a guest that crashes its process takes down the worker, not
the actor.

Failures: an actor that dies (its process killed, its node lost) is restarted by Ray and
its shard run again (``max_restarts``, ``max_task_retries``); the shard's files are written
under a private name and renamed when complete (``_shard.run_shard``), so the retry starts
clean and a run is stored once. An error a user can fix (a guest that is not the plan's,
a broken input file) comes back as a message, not a retry.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from steptrace.errors import InputError, SteptraceError
from steptrace.sharding._plan import GuestMismatchError, Plan, ShardError, read_guest
from steptrace.sharding._shard import ShardResult

MAX_RESTARTS = 4  # per actor: a node lost now and then, not a guest that kills it every time
MAX_TASK_RETRIES = 4


class ShardWorker:
    """A Ray actor's state: the plan and, once set up, a one-worker pool running its guest.

    Every call takes ``payload``, ``[ObjectRef]`` of the component's bytes (in a list so
    that Ray hands the reference over unresolved: fetched once, at set-up), rather than
    the constructor: Ray restarts an actor by calling its constructor again with the same
    arguments, and prints an error-level warning on the driver's stderr for every
    restartable actor whose constructor takes an object-store reference (which would
    make a one-line error two lines)."""

    def __init__(self, directory: str, trusted: str) -> None:
        """``trusted``: the digest of the guest the driver allows (the plan's)."""
        self.directory = Path(directory)
        self.trusted = trusted
        self.plan: Plan | None = None
        self.pool = None

    def _ensure(self, payload: list) -> None:
        if self.pool is not None:
            return
        from steptrace.sandbox._pool import WorkerPool
        from steptrace.sharding._plan import read_plan
        from steptrace.sharding._shard import guest_on_hand, guest_trust, plan_guest
        import ray
        self.plan = read_plan(self.directory)
        guest_trust(self.directory, self.plan, self.trusted)  # before anything is fetched
        # the component's bytes only when this machine's cache lacks it: fetching them
        # costs each actor ~60 MB of peak memory (the object store's pages and a copy)
        guest = plan_guest(self.directory, self.plan, self.trusted,
                           None if guest_on_hand(self.plan) else ray.get(payload[0]))
        self.pool = WorkerPool(1, self.plan.limits, self.plan.isolation,
                               artifacts=guest.artifacts)

    def setup(self, payload: list) -> tuple[str, str] | None:
        """Install the guest and start the pool; ``(error type, message)`` if it cannot."""
        try:
            self._ensure(payload)
        except SteptraceError as exc:
            return type(exc).__name__, str(exc)
        return None

    def run(self, index: int, payload: list) -> dict:
        """Run shard ``index``; its ``ShardResult`` as a dict, or ``{"error": ...}``."""
        from dataclasses import asdict
        from steptrace.sharding._shard import run_shard
        try:
            self._ensure(payload)
            return asdict(run_shard(self.directory, index, self.pool, self.plan))
        except SteptraceError as exc:
            return {"error": [type(exc).__name__, str(exc)]}

    def pid(self) -> int:
        return os.getpid()


def _raise(error: tuple[str, str] | list[str]) -> None:
    kind, message = error
    raise (GuestMismatchError if kind == GuestMismatchError.__name__ else ShardError)(message)


def require_ray():
    """The ``ray`` module; InputError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError as exc:
        raise InputError("--engine ray needs Ray: pip install 'steptrace[ray]'") from exc
    return ray


def connect(address: str | None, workers: int | None):
    """``ray`` initialised: an existing cluster at ``address`` (``auto``: the one this
    machine belongs to), else a local one with ``workers`` CPUs (default: this machine's)."""
    ray = require_ray()
    if not ray.is_initialized():
        if address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        else:
            # "local": a new one even where ray.init() alone would join another cluster
            # (RAY_ADDRESS set, a `ray start` on this machine) and refuse num_cpus there
            ray.init(address="local", num_cpus=workers or os.cpu_count() or 1,
                     logging_level="ERROR", log_to_driver=False, include_dashboard=False)
    return ray


def run_shards(directory: Path, plan: Plan, pending: list[int], workers: int | None,
               address: str | None, trusted: str) -> Iterator[ShardResult]:
    """Run the ``pending`` shards on a Ray cluster; yield each result as it finishes.
    ``trusted``: the plan's guest digest, once the driver has found it may run
    (``_shard.guest_trust``)."""
    ray = connect(address, workers)
    count = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    count = min(count, len(pending)) or 1
    payload = ray.put(read_guest(directory, plan.guest))
    actor_class = ray.remote(num_cpus=1, max_restarts=MAX_RESTARTS,
                             max_task_retries=MAX_TASK_RETRIES)(ShardWorker)
    # absolute: the actors run in their raylet's working directory, not the driver's
    actors = [actor_class.remote(str(directory.absolute()), trusted) for _ in range(count)]
    try:
        for error in ray.get([actor.setup.remote([payload]) for actor in actors]):
            if error is not None:
                _raise(error)
        queue = list(pending)
        running = {}  # the shard's result reference -> (its actor, its index)
        for actor in actors:
            if queue:
                index = queue.pop(0)
                running[actor.run.remote(index, [payload])] = (actor, index)
        while running:
            ready, _ = ray.wait(list(running), num_returns=1)
            actor, index = running.pop(ready[0])
            try:
                outcome = ray.get(ready[0])
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
                # retries spent: its actor kept dying (a bug inside one keeps its traceback)
                text = str(exc).strip().splitlines()
                raise ShardError(f"shard {index} failed on Ray after "
                                 f"{MAX_TASK_RETRIES} retries: {text[0] if text else type(exc).__name__}"
                                 ) from exc
            if "error" in outcome:
                _raise(outcome["error"])
            yield ShardResult(**outcome)
            if queue:
                index = queue.pop(0)
                running[actor.run.remote(index, [payload])] = (actor, index)
    finally:
        for actor in actors:
            ray.kill(actor)
