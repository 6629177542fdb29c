"""3b. Sharding: a trace cut into fixed shards of jobs and written as Parquet files per
shard, on this machine's worker pool, a Ray cluster or a batch scheduler
(``trace_shards``, ``run_one``); a shard directory is read as a store (``open_shards``)
or loaded into one (``import_shards``)."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "ENGINES": "_defaults",
    "GuestMismatchError": "_plan",
    "Plan": "_plan",
    "ShardError": "_plan",
    "ShardOptions": "_run",
    "ShardResult": "_shard",
    "ShardSummary": "_run",
    "is_shard_directory": "_plan",
    "read_plan": "_plan",
    "run_one": "_run",
    "trace_shards": "_run",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
