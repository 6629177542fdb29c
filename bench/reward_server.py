"""Bench: judged items a second through ``steptrace reward-server``'s HTTP service, for
``output`` answers (judged on the host) and ``input`` answers (each run in the sandbox).

Run: ``.venv/bin/python bench/reward_server.py [--workers 2] [--clients 4] [--batch 50]``.

The 800 CRUXEval samples are traced into a temporary store and given one ``output`` and
one ``input`` task each (``steptrace tasks --kinds output,input --per-run 1``). The answers
are built from the data, two per task: the right one and a wrong one (``output``: a
string no sample returns; ``input``: the sample's output passed as its input,
the typical wrong answer of bench/score_cruxeval.py; checks that loop are left in and hit
the 3 s limit). A real server on 127.0.0.1 (``RewardServer`` in a thread of this process,
``--workers`` sandbox workers) is sent the items in batches of ``--batch`` from
``--clients`` threads, each over one kept-alive HTTP connection, and every result is
checked against the expected verdict. Each kind is sent twice: the first pass reads the
tasks from the store (cold), the second finds them in the service's cache (warm).
Figures go to bench/README.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from steptrace.sandbox._limits import Limits  # noqa: E402
from steptrace.scoring._reward import RewardJudge, RewardLimits  # noqa: E402
from steptrace.scoring._reward_server import serve_rewards  # noqa: E402
from steptrace.tasks._tasks import TaskOptions, generate_tasks  # noqa: E402
from steptrace.tracing._trace import TraceOptions, trace_corpus  # noqa: E402

WRONG_OUTPUT = "'no sample returns this'"
CRUXEVAL = ROOT.parent / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"


def build_store(folder: Path, workers: int) -> tuple[Path, list[dict]]:
    db = folder / "bench.duckdb"
    trace_corpus(CRUXEVAL, db, TraceOptions(workers=workers))
    summary = generate_tasks(db, TaskOptions(kinds=("output", "input"), per_run=1))
    return db, summary.tasks.to_dicts()


def items_of(tasks: list[dict], kind: str) -> list[tuple[dict, bool | None]]:
    """(item, expected verdict: None where it is not known beforehand) per answer."""
    items = []
    for task in tasks:
        if task["kind"] != kind:
            continue
        question = json.loads(task["question"])
        items.append(({"task_id": task["task_id"], "answer": task["answer"]}, True))
        if kind == "output":
            items.append(({"task_id": task["task_id"], "answer": WRONG_OUTPUT}, False))
        else:  # the output as the input: usually wrong; right for a few (f(x) == x)
            items.append(({"task_id": task["task_id"], "answer": question["output"]}, None))
    return items


def send_all(url: str, items: list[tuple[dict, bool | None]], clients: int, batch: int
             ) -> tuple[float, Counter, int]:
    """Send ``items`` in batches from ``clients`` threads; (wall s, statuses, mismatches)."""
    host, port = url.removeprefix("http://").split(":")
    batches = [items[i:i + batch] for i in range(0, len(items), batch)]
    statuses: Counter = Counter()
    mismatches = [0]
    lock = threading.Lock()

    def client(start: int) -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=600)
        for index in range(start, len(batches), clients):
            body = json.dumps({"items": [item for item, _ in batches[index]]})
            connection.request("POST", "/v1/judge", body=body,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            results = json.loads(response.read())["results"]
            assert response.status == 200
            with lock:
                for (_, want), got in zip(batches[index], results):
                    statuses[got["status"]] += 1
                    if want is not None and got["correct"] != want:
                        mismatches[0] += 1
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, statuses, mismatches[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers")
    parser.add_argument("--clients", type=int, default=4, help="client threads")
    parser.add_argument("--batch", type=int, default=50, help="items a request")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db, tasks = build_store(Path(folder), args.workers)
        limits = RewardLimits(sandbox=Limits(timeout_s=3.0))
        started = time.perf_counter()
        with RewardJudge(db, workers=args.workers, limits=limits) as judge:
            server = serve_rewards(judge)
            server.serve_in_thread()
            print(f"server up in {time.perf_counter() - started:.2f} s ({args.workers} "
                  f"workers); {len(tasks)} tasks; {args.clients} clients, batches of "
                  f"{args.batch}; {platform.machine()}, {os.cpu_count()} CPUs, load "
                  f"{os.getloadavg()[0]:.2f}")
            print(f"{'kind':<8} {'pass':<5} {'items':>6} {'wall s':>8} {'items/s':>9}  statuses")
            for kind in ("output", "input"):
                items = items_of(tasks, kind)
                for name in ("cold", "warm"):
                    wall, statuses, wrong = send_all(server.url, items, args.clients,
                                                     args.batch)
                    assert wrong == 0, f"{wrong} verdicts differ from the expected ones"
                    shown = ", ".join(f"{s} {n}" for s, n in statuses.most_common())
                    print(f"{kind:<8} {name:<5} {len(items):>6} {wall:>8.2f} "
                          f"{len(items) / wall:>9.0f}  {shown}")
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    main()
