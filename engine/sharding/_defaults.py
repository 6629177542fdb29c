"""The sharded trace's defaults, in a module the CLI can import at start-up (no pyarrow,
no wasmtime)."""

DEFAULT_SHARD_SIZE = 1000  # jobs per shard
ENGINES = ("local", "ray")  # where the shards run: this machine's worker pool, or Ray
