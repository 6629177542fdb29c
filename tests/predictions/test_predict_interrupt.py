"""Ctrl-C in a real ``steptrace predict`` process: the answers received are stored, one
line says how many, and the same command asks only for the rest."""

from __future__ import annotations

import json
import threading
import time

from helpers.cli import invoke, new_store
from helpers.openai_stub import Reply, StubServer, answer
from helpers.predict import MODEL, prompt_of
from helpers.processes import HANG_GUARD_S, ctrl_c, steptrace_process


def test_ctrl_c_in_predict_keeps_the_answers_received(tmp_path):
    db = new_store(tmp_path / "store.duckdb")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"task_id": t, "kind": "output", "prompt": prompt_of(t)})
                             + "\n" for t in ("a", "b")))
    gate = threading.Event()  # b's answer is held until the test ends
    args = ["predict", "--tasks", str(tasks), "--model", MODEL, "--concurrency", "2",
            "--db", str(db), "--quiet", "--label", "run"]
    with StubServer({"a": answer("[ANSWER]1[/ANSWER]"),
                     "b": Reply(200, "[ANSWER]2[/ANSWER]", gate=gate)}) as server:
        try:
            with steptrace_process(*args, "--base-url", server.base_url) as process:
                deadline = time.monotonic() + HANG_GUARD_S
                stored = ""
                while stored != "n\n1\n" and time.monotonic() < deadline:
                    assert process.poll() is None, process.communicate()
                    time.sleep(0.1)
                    # the predictions table is made when predict starts
                    result = invoke("sql", "SELECT count(*) AS n FROM predictions", "--db", db,
                                    "--format", "csv")
                    assert result.exit_code == 0 or "predictions does not exist" in result.output
                    stored = result.stdout
                assert server.requests == {"a": 1, "b": 1}  # b is under way, held
                stdout, stderr = ctrl_c(process)
        finally:
            gate.set()  # the server's handler of b ends
        assert (process.returncode, stdout, stderr) == (
            130, "", "interrupted: 1 prediction stored; run the same command to resume\n")
        # the same command: a is kept, only b is asked again
        again = invoke(*args, "--base-url", server.base_url, "--format", "json")
        summary = json.loads(again.stdout)
        assert (summary["skipped"], summary["requests"], summary["errors"]) == (1, 1, 0)
        assert server.requests == {"a": 1, "b": 2}
    assert invoke("sql", "SELECT task_id, answer FROM predictions ORDER BY task_id", "--db", db,
                  "--format", "csv").stdout == "task_id,answer\na,1\nb,2\n"
