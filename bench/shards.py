"""Bench: sharded traces (issue 21), the built-in pool against Ray, and what 100,000,000 runs cost.

Run: ``.venv/bin/python bench/shards.py`` (the 800 x 50 CRUXEval jobs, 2 workers), or
``--copies 2`` for a quick check. Options: ``--workers``, ``--shard-size``, ``--repeat``,
``--engines trace,local,ray``, ``--cores-per-node``.

The corpus is each CRUXEval sample ``--copies`` times, each copy a distinct record id
(``sample_7#12``), so every job has its own key and is traced (800 x 50 = 40,000 jobs),
written to a temporary directory. Each round traces it three ways, each into a fresh
temporary directory, with ``--workers`` workers and job isolation:

* ``trace``: ``steptrace.trace`` into a DuckDB file (``steptrace trace --db``), the reference;
* ``local``: ``steptrace.trace_sharded(..., engine="local")`` (one worker pool on this machine);
* ``ray``: ``steptrace.trace_sharded(..., engine="ray")`` on a local Ray cluster the script
  starts for that round with ``num_cpus = --workers`` (its start is timed apart and left
  out of the engine's figures) and shuts down after it.

While each runs, a thread samples every process below this one in ``/proc`` (the pool's
workers; for Ray the cluster's services, the ``ray::ShardWorker`` actors and the pool
worker each actor starts) and ``/proc/stat``. The figures:

* *wall*: the call, planning included; *runs/s per core*: runs/s / ``--workers``;
* *CPU per run*: the machine's busy CPU time over the call (``/proc/stat``: user, nice,
  system, irq, softirq), the same method for every engine, since Ray's processes are not
  this process's children; it includes other sessions' load, so the idle machine's busy
  rate, measured before, is printed and subtracted (*net*); *tree* is the CPU time of
  this process and every process below it (``/proc/PID/stat``, sampled), which other
  load does not touch; the sampling thread's own CPU is left out of both;
* *peak memory*: this process's (the driver's) peak RSS (``VmHWM``, reset before each
  call), and the sum over the worker processes of each one's peak (``VmHWM``), and for
  Ray the sum over its services.

Results are checked equal: the runs by status and the rows of each table, of the DuckDB
file and of each shard directory. Then the per-worker figures and, from them, what a
trace of 100,000,000 runs costs: CPU-hours, wall-hours on N nodes of C cores, output
bytes (the shard directory's Parquet and input bytes per run), the memory of a node, and
the planner (time per job on this corpus; its peak memory per job with tracemalloc, on
1,200,000 made-up jobs: it grows linearly with the jobs). The median of ``--repeat`` rounds; a JSON
line of the figures last. Figures go to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
ENGINES = ("trace", "local", "ray")
TABLES = ("runs", "steps", "states", "programs", "objects", "attributes", "global_states")
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1 << 20
TARGET_RUNS = 100_000_000


# ---------------------------------------------------------------------- the corpus
def write_corpus(source: Path, copies: int, out: Path) -> int:
    """Each record of ``source`` ``copies`` times, copy ``c`` with id ``ID#c``; the jobs."""
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()
               if line.strip()]
    with out.open("w", encoding="utf-8") as handle:
        for copy in range(copies):
            for record in records:
                handle.write(json.dumps({**record, "id": f"{record['id']}#{copy}"}) + "\n")
    return len(records) * copies


# ---------------------------------------------------------------------- /proc
def machine_busy() -> tuple[float, float]:
    """(busy CPU seconds, all CPU seconds) of the whole machine since boot, ``/proc/stat``."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    busy = user + nice + system + irq + softirq
    return busy / TICK, (busy + idle + iowait + steal) / TICK


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds: utime + stime) of ``pid``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK


def _memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in bytes; zeros when it is gone."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, hwm


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class Sampler(threading.Thread):
    """Samples every process below this one: CPU, peak memory, role; see the docstring."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.me = os.getpid()
        self.halt = threading.Event()
        self.procs: dict[int, dict] = {}  # pid -> parent, cpu0, cpu, hwm, actor
        self.driver_rss = 0
        self.thread_cpu = 0.0
        self.first = threading.Event()

    def run(self) -> None:
        started = time.thread_time()
        while True:
            self.sample()
            self.first.set()
            if self.halt.wait(self.interval):
                break
        self.sample()
        self.thread_cpu = time.thread_time() - started

    def sample(self) -> None:
        parents: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                found = _stat(int(name))
                if found is not None:
                    parents[int(name)], cpu[int(name)] = found
        below = {self.me}
        grew = True
        while grew:  # the descendants of this process
            grew = False
            for pid, parent in parents.items():
                if parent in below and pid not in below:
                    below.add(pid)
                    grew = True
        self.driver_rss = max(self.driver_rss, _memory(self.me)[0])
        for pid in below - {self.me}:
            rss, hwm = _memory(pid)
            proc = self.procs.get(pid)
            if proc is None:
                # processes there before the call count from what they had used then
                proc = self.procs[pid] = {"parent": parents[pid], "actor": False,
                                          "cpu0": cpu[pid] if not self.first.is_set() else 0.0}
            proc["cpu"] = cpu[pid]
            proc["hwm"] = max(proc.get("hwm", 0), hwm, rss)
            if not proc["actor"] and _cmdline(pid).startswith("ray::ShardWorker"):
                proc["actor"] = True

    def stop(self) -> None:
        self.halt.set()
        self.join()

    def roles(self) -> dict[str, list[dict]]:
        """The processes sampled, by role: ``pool`` (the worker processes of a pool: this
        process's, or a Ray actor's), ``actors`` (Ray's ShardWorker actors) and
        ``services`` (Ray's own processes: raylet, GCS, agents, idle workers)."""
        out: dict[str, list[dict]] = {"pool": [], "actors": [], "services": []}
        actors = {pid for pid, p in self.procs.items() if p["actor"]}
        for pid, proc in self.procs.items():
            if pid in actors:
                out["actors"].append(proc)
            elif proc["parent"] in actors or proc["parent"] == self.me and not actors:
                out["pool"].append(proc)
            else:
                out["services"].append(proc)
        return out

    def tree_cpu(self) -> float:
        return sum(p["cpu"] - p["cpu0"] for p in self.procs.values())


def reset_peak() -> None:
    """Reset this process's VmHWM to its current RSS (Linux: clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def idle_busy(seconds: float) -> float:
    """The machine's busy cores while this script waits (other sessions' load)."""
    busy0, _ = machine_busy()
    time.sleep(seconds)
    busy1, _ = machine_busy()
    return (busy1 - busy0) / seconds


# ---------------------------------------------------------------------- one traced call
def measure(engine: str, corpus: Path, tmp: Path, args) -> dict:
    import steptrace
    out = tmp / f"{engine}.duckdb" if engine == "trace" else tmp / engine
    ray_start = None
    if engine == "ray":
        import ray
        from steptrace.sharding._ray import connect
        started = time.perf_counter()
        connect(None, args.workers)  # what trace_sharded does without an address
        ray_start = time.perf_counter() - started
    marks: list[float] = []
    progress = lambda done, total: marks.append(time.perf_counter())  # noqa: E731
    gc_collect()
    reset_peak()
    sampler = Sampler(args.interval)
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, _ = machine_busy()
    sampler.start()
    sampler.first.wait()
    started = time.perf_counter()
    try:
        if engine == "trace":
            summary = steptrace.trace(corpus, out, workers=args.workers, isolation="job")
        else:
            summary = steptrace.trace_sharded(corpus, out, engine=engine, workers=args.workers,
                                              shard_size=args.shard_size, isolation="job",
                                              progress=progress)
        wall = time.perf_counter() - started
    finally:
        sampler.stop()
    busy1, _ = machine_busy()
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    driver_cpu = (self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime
                  - sampler.thread_cpu)
    children_cpu = (children1.ru_utime + children1.ru_stime
                    - children0.ru_utime - children0.ru_stime)
    roles = sampler.roles()
    roles["workers"] = roles["pool"] + roles["actors"]

    def cpu(procs: list[dict]) -> float:
        return sum(p["cpu"] - p["cpu0"] for p in procs)

    found = {
        "engine": engine, "wall": wall, "runs": summary.traced,
        "by_status": dict(sorted(summary.by_status.items())),
        "machine_cpu": busy1 - busy0 - sampler.thread_cpu,
        "tree_cpu": driver_cpu + sampler.tree_cpu(),
        "driver_cpu": driver_cpu, "children_cpu": children_cpu,
        "driver_peak": max(_memory(os.getpid())[1], sampler.driver_rss),
        "workers": len(roles["workers"]),
        "workers_peak": sum(p["hwm"] for p in roles["workers"]),
        "largest_worker": max((p["hwm"] for p in roles["workers"]), default=0),
        "services": len(roles["services"]),
        "services_peak": sum(p["hwm"] for p in roles["services"]),
        "services_cpu": cpu(roles["services"]), "pool_cpu": cpu(roles["pool"]),
        "actors_cpu": cpu(roles["actors"]),
        "ray_start": ray_start, "sampler_cpu": sampler.thread_cpu,
    }
    if engine == "trace":
        found.update(tables_of_store(out))
        found["bytes"] = {"duckdb": out.stat().st_size}
    else:
        found.update(tables_of_shards(out))
        found["plan_s"] = marks[0] - started if marks else None
        found["shards"] = summary.shards
    if engine == "ray":
        import ray
        found["actor_setup"] = actor_setup(out, args.workers)
        ray.shutdown()
    if out.is_dir():
        shutil.rmtree(out)
    else:
        out.unlink(missing_ok=True)
    return found


def actor_setup(directory: Path, count: int) -> float:
    """Seconds to start ``count`` ShardWorker actors and set them up (a worker process,
    its imports, the guest's checks, its one-worker pool), as ``run_shards`` does before
    the first shard; on the running cluster, after the measured call."""
    import ray
    from steptrace.sharding._plan import guest_path, read_plan
    from steptrace.sharding._ray import ShardWorker
    plan = read_plan(directory)
    payload = ray.put(guest_path(directory, plan.guest).read_bytes())
    # no CPU asked: set-up is the same, and the call's actors may not have handed theirs back
    actor_class = ray.remote(num_cpus=0)(ShardWorker)
    started = time.perf_counter()
    actors = [actor_class.remote(str(directory), plan.guest.digest) for _ in range(count)]
    errors = ray.get([actor.setup.remote([payload]) for actor in actors])
    seconds = time.perf_counter() - started
    for actor in actors:
        ray.kill(actor)
    if any(errors):
        raise SystemExit(f"actor set-up failed: {errors}")
    return seconds


def gc_collect() -> None:
    import gc
    gc.collect()


def tables_of_store(db: Path) -> dict:
    import duckdb
    with duckdb.connect(str(db), read_only=True) as con:
        statuses = dict(con.execute("SELECT status, count(*) FROM runs GROUP BY ALL").fetchall())
        rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    return {"stored_status": dict(sorted(statuses.items())), "rows": rows}


def tables_of_shards(directory: Path) -> dict:
    """What the shard directory holds: the manifest's counts, the Parquet rows and bytes
    per table, the inputs' bytes, plan.json's bytes, the shards' own seconds."""
    import pyarrow.parquet as pq
    manifest = json.loads((directory / "steptrace_shards.json").read_text())
    rows: Counter = Counter()
    nbytes: Counter = Counter()
    shard_seconds = []
    for shard in sorted((directory / "shards").iterdir()):
        for path in shard.glob("*.parquet"):
            rows[path.stem] += pq.ParquetFile(path).metadata.num_rows
            nbytes[path.stem] += path.stat().st_size
        shard_seconds.append(json.loads((shard / "done.json").read_text())["seconds"])
    nbytes["inputs"] = sum(p.stat().st_size for p in (directory / "inputs").iterdir())
    nbytes["plan.json"] = (directory / "plan.json").stat().st_size
    return {"stored_status": manifest["by_status"], "rows": {t: rows[t] for t in TABLES},
            "manifest_rows": {t["name"]: t["rows"] for t in manifest["tables"]},
            "bytes": dict(nbytes), "shard_seconds": shard_seconds}


# ---------------------------------------------------------------------- the planner
def planner_figures(corpus: Path, tmp: Path, shard_size: int) -> dict:
    """The planner's time per job on ``corpus`` (reading it, keying each job, the spool,
    the duplicates' sort, writing the inputs)."""
    from steptrace.corpus._formats import iter_corpus
    from steptrace.sharding._plan import _Planner
    folder = tmp / "plan"
    (folder / "inputs").mkdir(parents=True)
    gc_collect()
    planner = _Planner(folder, shard_size)
    started = time.perf_counter()
    for item in iter_corpus(corpus):
        planner.add(item)
    planner.finish()
    planner.close()
    seconds = time.perf_counter() - started
    figures = {"seconds": seconds, "jobs": planner.jobs, "s_per_job": seconds / planner.jobs}
    shutil.rmtree(folder)
    return figures


def planner_peak_bytes(tmp: Path, jobs: int = 1_200_000, shard_size: int = 1000) -> float:
    """The planner's peak memory per job (tracemalloc), on ``jobs`` made-up jobs (a tenth
    of them duplicates): what it holds grows linearly with the jobs (two 8-byte key
    arrays, then the sort's index arrays), so the figure per job holds at 10**8. More than
    a million jobs, so that the second pass reads its mask as it will at scale."""
    import numpy  # noqa: F401  (imported before tracing: its import is not the planner's)
    from steptrace.corpus._formats import Job, Program
    from steptrace.sharding._plan import _Planner
    program = Program("bench", "s", "def f(x):\n    return x\n")
    made = [Job(program, str(number % (jobs - jobs // 10))) for number in range(jobs)]
    for job in made:
        job.key  # noqa: B018  (computed before tracing)
    folder = tmp / "plan-peak"
    (folder / "inputs").mkdir(parents=True)
    gc_collect()
    tracemalloc.start()
    planner = _Planner(folder, shard_size)
    for job in made:
        planner.add(job)
    planner.finish()
    planner.close()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    shutil.rmtree(folder)
    return peak / jobs


# ---------------------------------------------------------------------- printing
def median_of(rounds: list[dict], key: str) -> float:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1000
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CRUXEVAL)
    parser.add_argument("--copies", type=int, default=50, help="copies of each sample (50)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes, Ray actors and the Ray cluster's CPUs (2)")
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1, help="rounds (the median is printed)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help="which of trace,local,ray to run (all)")
    parser.add_argument("--cores-per-node", type=int, default=32)
    parser.add_argument("--interval", type=float, default=0.1, help="sampling period, s")
    parser.add_argument("--idle", type=float, default=3.0,
                        help="seconds of the idle machine's load measured first")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or set(engines) - set(ENGINES):
        parser.error(f"--engines takes some of {','.join(ENGINES)}")

    from steptrace.sandbox._limits import Limits
    from steptrace.sandbox._pool import prepare
    prepare(Limits())  # build and compile the component once; every figure below is warm
    results: dict[str, list[dict]] = {e: [] for e in engines}
    with tempfile.TemporaryDirectory(prefix="steptrace-bench-shards-") as name:
        tmp = Path(name)
        corpus = tmp / f"cruxeval_x{args.copies}.jsonl"
        jobs = write_corpus(args.corpus, args.copies, corpus)
        background = idle_busy(args.idle)
        for number in range(args.repeat):
            for engine in engines:
                found = measure(engine, corpus, tmp, args)
                results[engine].append(found)
                print(f"round {number + 1} {engine}: {found['wall']:.2f} s, "
                      f"{found['runs']} runs", file=sys.stderr, flush=True)
        background = (background + idle_busy(args.idle)) / 2
        planner = planner_figures(corpus, tmp, args.shard_size)
        planner["peak_bytes_per_job"] = planner_peak_bytes(tmp)

    cores = args.workers
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"python {sys.version.split()[0]}; idle machine's busy CPU (other sessions): "
          f"{background:.2f} cores")
    print(f"corpus: {args.corpus.name} x {args.copies} copies = {jobs:,} jobs (distinct ids); "
          f"workers {args.workers}; shard size {args.shard_size}; job isolation; "
          f"median of {args.repeat} round(s)")
    print("CPU: 'machine' = busy CPU time of the whole machine over the call (/proc/stat; "
          "Ray's workers are not this process's children, so every engine is measured so), "
          "'net' = machine less the idle machine's busy rate x wall; 'tree' = this process "
          "and every process below it (/proc/PID/stat, sampled every "
          f"{args.interval} s). Memory: peak RSS (VmHWM); 'workers' = sum over the worker "
          "processes of each one's peak (Ray: the ShardWorker actors and their pool workers).")
    print()
    head = (f"{'engine':<7} {'wall s':>8} {'runs/s':>8} {'/core':>7} {'CPU ms/run':>11} "
            f"{'net':>6} {'tree':>6} {'driver':>7} {'driver MB':>10} {'workers MB':>11} "
            f"{'procs':>5} {'Ray svc MB':>10}")
    print(head)
    print("-" * len(head))
    rows = {}
    for engine in engines:
        rounds = results[engine]
        wall = median_of(rounds, "wall")
        runs = rounds[-1]["runs"]
        for r in rounds:
            r["net_cpu"] = r["machine_cpu"] - background * r["wall"]
        row = rows[engine] = {
            "wall": wall, "runs": runs, "rate": runs / wall, "per_core": runs / wall / cores,
            "cpu_run": median_of(rounds, "machine_cpu") / runs,
            "net_run": median_of(rounds, "net_cpu") / runs,
            "tree_run": median_of(rounds, "tree_cpu") / runs,
            "driver_run": median_of(rounds, "driver_cpu") / runs,
            "driver_peak": median_of(rounds, "driver_peak"),
            "workers_peak": median_of(rounds, "workers_peak"),
            "largest_worker": median_of(rounds, "largest_worker"),
            "workers": rounds[-1]["workers"],
            "services_peak": median_of(rounds, "services_peak"),
            "services_cpu": median_of(rounds, "services_cpu"),
            "pool_cpu": median_of(rounds, "pool_cpu"),
            "rusage_run": statistics.median(r["driver_cpu"] + r["children_cpu"]
                                            for r in rounds) / runs,
            "actors_cpu": median_of(rounds, "actors_cpu"),
            "last": rounds[-1]}
        services = f"{row['services_peak'] / MB:>10.0f}" if engine == "ray" else f"{'':>10}"
        print(f"{engine:<7} {wall:>8.2f} {row['rate']:>8.0f} {row['per_core']:>7.0f} "
              f"{row['cpu_run'] * 1e3:>11.2f} {row['net_run'] * 1e3:>6.2f} "
              f"{row['tree_run'] * 1e3:>6.2f} {row['driver_run'] * 1e3:>7.2f} "
              f"{row['driver_peak'] / MB:>10.0f} {row['workers_peak'] / MB:>11.0f} "
              f"{row['workers']:>5} {services}")
    print("('driver' = this process's own CPU ms per run; 'procs' = worker processes sampled)")
    print("tree CPU ms a run by process: " + "; ".join(
        f"{engine}: driver {row['driver_run'] * 1e3:.2f}, pool workers "
        f"{row['pool_cpu'] / row['runs'] * 1e3:.2f}"
        + (f", actors {row['actors_cpu'] / row['runs'] * 1e3:.2f}, Ray services "
           f"{row['services_cpu'] / row['runs'] * 1e3:.2f}" if engine == "ray" else
           f" (getrusage self + children: {row['rusage_run'] * 1e3:.2f})")
        for engine, row in rows.items()))
    if "ray" in rows:
        print(f"Ray: cluster start {median_of(results['ray'], 'ray_start'):.2f} s, not in the "
              f"figures above; its services: {rows['ray']['last']['services']} processes")
    for engine in ("local", "ray"):
        if engine in rows:
            last = rows[engine]["last"]
            seconds = last["shard_seconds"]
            run_s = rows[engine]["wall"] - (last["plan_s"] or 0)
            # local runs its shards one after another, each on the whole pool; Ray runs
            # one shard per actor at a time
            busy = sum(seconds) / run_s / (cores if engine == "ray" else 1)
            print(f"{engine}: planning {last['plan_s']:.2f} s, then {run_s:.2f} s running "
                  f"{last['shards']} shards; the shards' own seconds sum to {sum(seconds):.2f} "
                  f"(median shard {statistics.median(seconds):.2f} s): shards ran "
                  f"{busy * 100:.0f}% of the run time"
                  + (" per actor" if engine == "ray" else "")
                  + (f"; actor set-up (measured again after the call) "
                     f"{median_of(results['ray'], 'actor_setup'):.2f} s"
                     if engine == "ray" else ""))
    if "local" in rows and "ray" in rows:
        ratio = rows["ray"]["per_core"] / rows["local"]["per_core"]
        print(f"\nRay / local, runs/s per core: {ratio:.3f} "
              f"({(ratio - 1) * 100:+.1f}%; goal: within 10%: "
              f"{'met' if ratio >= 0.9 else 'NOT met'}); CPU per run (machine): "
              f"{rows['ray']['cpu_run'] / rows['local']['cpu_run']:.3f}x, "
              f"(tree): {rows['ray']['tree_run'] / rows['local']['tree_run']:.3f}x")
    if "trace" in rows and "local" in rows:
        print(f"local / trace into DuckDB, runs/s: "
              f"{rows['local']['rate'] / rows['trace']['rate']:.3f}")

    # equal results
    print()
    equal = True
    reference = engines[0]
    want = rows[reference]["last"]
    for engine in engines:
        last = rows[engine]["last"]
        same_status = last["stored_status"] == want["stored_status"] == last["by_status"]
        same_rows = last["rows"] == want["rows"]
        if "manifest_rows" in last:
            same_rows &= all(last["manifest_rows"][t] == last["rows"][t] for t in TABLES)
        equal &= same_status and same_rows
        print(f"{engine}: runs by status {last['stored_status']}; rows "
              + ", ".join(f"{t} {last['rows'][t]:,}" for t in TABLES)
              + f"  -> {'equal to' if same_status and same_rows else 'NOT EQUAL to'} {reference}")
    print(f"results equal across engines: {'yes' if equal else 'NO'}")

    # per worker, and the 100,000,000-run plan
    print()
    plan = print_plan(rows, planner, args)
    keep = ("wall", "rate", "per_core", "cpu_run", "net_run", "tree_run", "driver_run",
            "driver_peak", "workers_peak", "services_peak")
    print(json.dumps({"jobs": jobs, "workers": cores, "shard_size": args.shard_size,
                      "equal": equal, "engines": {e: {k: round(r[k], 6) for k in keep}
                                                  for e, r in rows.items()},
                      "ray_over_local_per_core": (rows["ray"]["per_core"]
                                                  / rows["local"]["per_core"]
                                                  if "ray" in rows and "local" in rows
                                                  else None),
                      "plan": plan}))
    return 0 if equal else 1


def print_plan(rows: dict, planner: dict, args) -> dict:
    """The per-worker figures and the plan of a 100,000,000-run trace; returns its figures."""
    n = TARGET_RUNS
    cores = args.workers
    print(f"== Per worker (one core), measured here with {cores} workers on "
          f"{os.cpu_count()} CPUs ==")
    for engine, row in rows.items():
        print(f"{engine:<6} {row['per_core']:>7.0f} runs/s; CPU {row['cpu_run'] * 1e3:.2f} ms "
              f"a run (net {row['net_run'] * 1e3:.2f}, tree {row['tree_run'] * 1e3:.2f}; "
              f"driver {row['driver_run'] * 1e3:.2f}); peak RSS "
              f"{row['workers_peak'] / max(1, cores) / MB:.0f} MB a worker (largest process "
              f"{row['largest_worker'] / MB:.0f} MB), driver {row['driver_peak'] / MB:.0f} MB"
              + (f", Ray's services {row['services_peak'] / MB:.0f} MB" if engine == "ray"
                 else ""))
    sharded = [e for e in ("ray", "local") if e in rows]
    if not sharded:
        return {}
    last = rows[sharded[0]]["last"]
    runs = last["runs"]
    parquet = sum(v for k, v in last["bytes"].items() if k not in ("inputs", "plan.json"))
    per_run = parquet / runs
    inputs_per_job = last["bytes"]["inputs"] / runs
    plan_per_shard = last["bytes"]["plan.json"] / last["shards"]
    shards = -(-n // args.shard_size)
    plan_hours = planner["s_per_job"] * n / 3600
    c = args.cores_per_node
    print()
    print(f"== A trace of {n:,} runs (CRUXEval-like jobs, job isolation, shards of "
          f"{args.shard_size:,}), from the figures above ==")
    print("Assumes each core of a larger node runs what a core ran here and that the runs "
          "cost what these CRUXEval runs cost; measured on this machine, under its load.")
    for engine in sharded:
        row = rows[engine]
        print(f"CPU ({engine}): {row['cpu_run'] * n / 3600:,.0f} CPU-hours "
              f"(net of other load: {row['net_run'] * n / 3600:,.0f}; process tree: "
              f"{row['tree_run'] * n / 3600:,.0f})")
    print(f"\nwall hours on N nodes of {c} cores, a worker per core (planning: "
          f"{plan_hours:.2f} h on one core before any shard runs, not included):")
    print(f"{'N nodes':>8} {'cores':>7} " + " ".join(f"{e + ' h':>10}" for e in sharded)
          + f" {'Parquet MB/s':>13}")
    table = []
    for count in (1, 10, 100):
        total = count * c
        hours = [n / (rows[e]["per_core"] * total) / 3600 for e in sharded]
        rate = rows[sharded[0]]["per_core"] * total * per_run / 1e6
        table.append({"nodes": count, "cores": total, **dict(zip(sharded, hours))})
        print(f"{count:>8} {total:>7} " + " ".join(f"{h:>10.2f}" for h in hours)
              + f" {rate:>13.1f}")
    print(f"('Parquet MB/s': what the workers write into the shard directory, which every "
          f"node must see, at {sharded[0]}'s rate. 'local h' is the built-in pool's rate: "
          "across nodes that is `trace-shard DIR --index I` under a batch scheduler, whose "
          "start per shard is not counted)")
    if "local" in rows and rows["local"]["driver_run"] > 0:
        local = rows["local"]
        driver, worker = local["driver_run"], local["pool_cpu"] / local["runs"]
        print(f"local engine: its one driver process plans and writes every shard's Parquet, "
              f"{driver * 1e3:.2f} ms CPU a run against a worker's {worker * 1e3:.2f}, so it "
              f"keeps at most {worker / driver:.0f} workers busy on one machine")
    memory = {}
    for engine in sharded:
        row = rows[engine]
        node = (c * row["workers_peak"] / max(1, cores)
                + (row["services_peak"] if engine == "ray" else 0) + row["driver_peak"])
        memory[engine] = node
        print(f"memory of a {c}-core node ({engine}): {c} x "
              f"{row['workers_peak'] / max(1, cores) / MB:.0f} MB"
              + (f" + Ray's services {row['services_peak'] / MB:.0f} MB" if engine == "ray"
                 else "")
              + f" + a driver {row['driver_peak'] / MB:.0f} MB = {node / 1e9:.1f} GB")
    print(f"\noutput: Parquet {per_run:,.0f} B a run -> {human_bytes(per_run * n)}; shard "
          f"inputs {inputs_per_job:,.0f} B a job -> {human_bytes(inputs_per_job * n)}; "
          f"{shards:,} shards ({len(TABLES) + 3} files each: its input, its Parquet files, "
          f"done.json: {shards * (len(TABLES) + 3):,} files); plan.json ~{plan_per_shard:.0f} "
          f"B a shard -> {human_bytes(plan_per_shard * shards)}")
    if "trace" in rows:
        duck = rows["trace"]["last"]["bytes"]["duckdb"] / rows["trace"]["runs"]
        print(f"(the DuckDB file of the reference trace: {duck:,.0f} B a run)")
    by_table = sorted(((k, v) for k, v in last["bytes"].items()
                       if k not in ("inputs", "plan.json")), key=lambda kv: -kv[1])
    print("Parquet bytes a run by table: " + ", ".join(f"{k} {v / runs:,.0f}"
                                                       for k, v in by_table))
    print(f"\nplanner (one process, one core, before any shard runs; measured on "
          f"{planner['jobs']:,} jobs: read the corpus, key each job, write the shard inputs): "
          f"{planner['s_per_job'] * 1e6:.1f} us a job -> {plan_hours:.2f} hours for "
          f"{n:,} jobs")
    print(f"planner memory at its peak (tracemalloc, 1,200,000 made-up jobs: two 8-byte "
          f"key arrays, then the duplicates' sort): {planner['peak_bytes_per_job']:.0f} B a "
          f"job -> {human_bytes(planner['peak_bytes_per_job'] * n)} of driver memory")
    return {"runs": n, "cpu_hours": {e: rows[e]["cpu_run"] * n / 3600 for e in sharded},
            "wall_hours": table, "node_memory_gb": {e: m / 1e9 for e, m in memory.items()},
            "parquet_bytes": per_run * n, "input_bytes": inputs_per_job * n,
            "plan_hours": plan_hours,
            "planner_bytes": planner["peak_bytes_per_job"] * n}


if __name__ == "__main__":
    sys.exit(main())
