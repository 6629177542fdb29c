"""Helpers for tests that ask the stub model server (tests/helpers/openai_stub.py)."""

from __future__ import annotations

import socket

from click.testing import CliRunner

from steptrace.cli._main import main


MODEL = "stub-model"


def prompt_of(task_id: str) -> str:
    return f"[[{task_id}]] What is the answer?"  # 5 words: the stub's prompt_tokens


def invoke(*args, env: dict[str, str | None] | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def predict_with_stub(tasks_file, db, replies, model: str = MODEL, samples: int = 1) -> list[dict]:
    """``steptrace predict`` of the tasks in ``tasks_file`` into ``db`` against a real
    stub server on 127.0.0.1 that answers each task's samples with ``replies(task)``, in
    order (one request at a time); returns the tasks. Asserts every sample was asked."""
    import json
    from helpers.openai_stub import StubServer
    tasks = [json.loads(line) for line in tasks_file.read_text().splitlines()]
    by_prompt = {t["prompt"]: t["task_id"] for t in tasks}
    with StubServer({t["task_id"]: replies(t) for t in tasks}, models=(model,),
                    key_of=by_prompt.get) as server:
        asked = invoke("predict", "--tasks", tasks_file, "--model", model, "--base-url",
                       server.base_url, "--samples", samples, "--concurrency", 1, "--db", db,
                       "--quiet")
        assert asked.exit_code == 0, asked.output
        assert sum(server.requests.values()) == samples * len(tasks)
    return tasks
