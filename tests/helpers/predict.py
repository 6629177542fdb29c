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
