"""Helpers for tests of worker processes and stores left by them: a store is whole,
worker processes found, waited for and killed through /proc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb


HANG_GUARD_S = 60.0


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def assert_store_whole(db: Path) -> list[tuple]:
    """Every run is whole: unique run ids and run keys, ``n_steps`` steps numbered 0..n-1,
    no step or state without its run, every state at an existing step, every run's program
    stored. Returns ``(run_id, sample_id, status, output, n_steps, exception_message)``
    rows by run id."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = con.execute("SELECT run_id, sample_id, status, output, n_steps, exception_message "
                           "FROM runs ORDER BY run_id").fetchall()
        keys = con.execute("SELECT count(*), count(DISTINCT run_id), count(DISTINCT run_key) "
                           "FROM runs").fetchone()
        assert keys == (len(runs), len(runs), len(runs))
        partial = con.execute(
            "SELECT r.run_id, r.n_steps, count(s.step), min(s.step), max(s.step), "
            "count(DISTINCT s.step) FROM runs r LEFT JOIN steps s USING (run_id) "
            "GROUP BY r.run_id, r.n_steps HAVING r.n_steps <> count(s.step) OR (r.n_steps > 0 "
            "AND (min(s.step) <> 0 OR max(s.step) <> r.n_steps - 1 "
            "OR count(DISTINCT s.step) <> r.n_steps))").fetchall()
        assert partial == []
        assert con.execute("SELECT count(*) FROM steps WHERE run_id NOT IN "
                           "(SELECT run_id FROM runs)").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM states t WHERE NOT EXISTS (SELECT 1 FROM "
                           "steps s WHERE s.run_id = t.run_id AND s.step = t.step)").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM runs WHERE program_id NOT IN "
                           "(SELECT program_id FROM programs)").fetchone() == (0,)
    finally:
        con.close()
    return runs


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[19])


def children_of(pid: int) -> dict[int, tuple[int, str]]:
    """Live children of ``pid``: {pid: (start time, command line)}."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is None or stat[1] != pid or stat[0] == "Z":
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found[int(entry)] = (stat[2], cmdline.strip())
    return found


def spawn_workers(pid: int) -> dict[int, tuple[int, str]]:
    return {p: v for p, v in children_of(pid).items() if "steptrace.sandbox._worker" in v[1]}


def still_running(processes: dict[int, tuple[int, str]]) -> list[str]:
    """The command lines of those ``processes`` still running (not exited, not zombies)."""
    alive = []
    for pid, (started, cmdline) in processes.items():
        stat = proc_stat(pid)
        if stat is not None and stat[0] != "Z" and stat[2] == started:
            alive.append(f"{pid}: {cmdline}")
    return alive


def wait_until_gone(processes: dict[int, tuple[int, str]], bound: float = HANG_GUARD_S) -> list[str]:
    deadline = time.monotonic() + bound
    while still_running(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return still_running(processes)


def kill_processes(processes: dict[int, tuple[int, str]]) -> None:
    for pid, (started, _) in processes.items():
        stat = proc_stat(pid)
        if stat is not None and stat[2] == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _default_ctrl_c() -> None:
    """In the child before it runs: SIGINT's default action. An ignored signal stays
    ignored across exec, and CPython then installs no KeyboardInterrupt handler: a test
    process that some earlier code left ignoring SIGINT would start a steptrace that
    Ctrl-C cannot reach."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def steptrace_process(*args) -> Iterator[subprocess.Popen]:
    """``steptrace ARGS`` in a session of its own (its own process group, as a terminal's
    foreground job is), stdout and stderr piped; killed with its group if it is still
    running when the block ends."""
    process = subprocess.Popen([sys.executable, "-m", "steptrace.cli", *map(str, args)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=_default_ctrl_c)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def ctrl_c(process: subprocess.Popen) -> tuple[str, str]:
    """SIGINT to ``process``'s group, as a terminal's Ctrl-C sends it; its stdout and
    stderr once it has ended."""
    os.killpg(process.pid, signal.SIGINT)
    return process.communicate(timeout=HANG_GUARD_S)
