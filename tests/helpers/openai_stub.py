"""A real OpenAI-compatible chat-completions and completions server for tests, on 127.0.0.1.

It runs the standard library's ThreadingHTTPServer in a thread on an ephemeral port and
answers ``POST /v1/chat/completions`` (the messages' text is the prompt) and ``POST
/v1/completions`` (``prompt``; the content is what the model writes after it, cut at the
first of the request's ``stop`` sequences as a server does) from a script keyed by the
task id that the test's prompts embed as ``[[task_id]]``. Each key has a list of replies used in order, the last
one repeating, so "a 429 the first time, then an answer" is ``[Reply(429, ...),
Reply(content=...)]``. It counts the requests it received per key and can be "killed"
after a number of responses: the next request is cut off without an answer and the
server stops listening, as a crashed inference server would. A reply with a ``gate``
(a threading.Event) is held until the test sets it: a request the test knows is under
way, with no timing involved.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

MARKER = re.compile(r"\[\[(.+?)\]\]")


@dataclass(frozen=True)
class Reply:
    """One scripted reply: an answer (status 200) or an error status with a message."""

    status: int = 200
    content: str | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"
    message: str = "stub error"
    gate: threading.Event | None = None  # the reply waits until this is set


def answer(content: str, **kwargs) -> Reply:
    return Reply(200, content, **kwargs)


def marker_key(prompt: str) -> str | None:
    found = MARKER.search(prompt)
    return found.group(1) if found else None


class StubServer:
    """``with StubServer(script) as server:`` → ``server.base_url``, ``server.requests``."""

    def __init__(self, script: dict[str, list[Reply] | Reply], *,
                 models: tuple[str, ...] = ("stub-model",), api_key: str | None = None,
                 default: Reply | None = None, kill_after: int | None = None,
                 key_of: Callable[[str], str | None] = marker_key) -> None:
        self.script = {k: (v if isinstance(v, list) else [v]) for k, v in script.items()}
        self.models = models
        self.api_key = api_key
        self.default = default
        self.kill_after = kill_after
        self.key_of = key_of
        self.requests: Counter[str] = Counter()   # every request received, per key
        self.answered: list[str] = []             # keys answered with status 200, in order
        self.bodies: dict[str, dict] = {}         # the last request body per key
        self.responses = 0                        # responses sent or reserved (any status)
        self.killed = False
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "StubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop listening (idempotent); later connections are refused."""
        with self.lock:
            self.killed = True
        self.httpd.shutdown()
        self.httpd.server_close()

    # -------------------------------------------------------------- request handling
    def reply_for(self, body: dict, authorization: str | None) -> Reply | None:
        """The reply to one request, counting it; None when the server "dies" here."""
        prompt = request_prompt(body)
        key = self.key_of(prompt) or "?"
        with self.lock:
            self.requests[key] += 1
            self.bodies[key] = body
            if self.killed or (self.kill_after is not None and self.responses >= self.kill_after):
                self.killed = True
                return None
            self.responses += 1
            if self.api_key is not None and authorization != f"Bearer {self.api_key}":
                return Reply(401, message="Incorrect API key provided.")
            if body.get("model") not in self.models:
                return Reply(404, message=f"The model `{body.get('model')}` does not exist.")
            replies = self.script.get(key) or ([self.default] if self.default else None)
            if replies is None:
                return Reply(400, message=f"no scripted reply for {key!r}")
            reply = replies[min(self.requests[key], len(replies)) - 1]
            if reply.status == 200:
                self.answered.append(key)
            return reply


def _handler_for(server: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            route = self.path.rstrip("/")
            if route not in ("/v1/chat/completions", "/v1/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            reply = server.reply_for(body, self.headers.get("Authorization"))
            if reply is None:  # killed: cut the connection, stop listening
                self.close_connection = True
                threading.Thread(target=server.stop, daemon=True).start()
                return
            if reply.gate is not None:
                reply.gate.wait(timeout=300)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            if reply.status != 200:
                self._send(reply.status, {"error": {"message": reply.message,
                                                    "type": "stub_error", "code": reply.status}},
                           reply.headers)
                return
            self._send(200, _completion(body, reply) if route == "/v1/chat/completions"
                       else _text_completion(body, reply), reply.headers)

        def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout): nothing to do
    return Handler


def request_prompt(body: dict) -> str:
    """A request's prompt: a completions request's ``prompt``, a chat request's messages."""
    if "prompt" in body:
        return str(body["prompt"])
    return "".join(str(m.get("content", "")) for m in body.get("messages", []))


def _text_completion(body: dict, reply: Reply) -> dict:
    """A text_completion object: the reply's content cut before the first stop sequence
    the request names (``finish_reason`` "stop" then, as a server gives it)."""
    content = reply.content or ""
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else stops
    cut = min((content.find(stop) for stop in stops if stop in content), default=-1)
    finish = "stop" if cut >= 0 else reply.finish_reason
    text = content if cut < 0 else content[:cut]
    prompt = request_prompt(body)
    return {
        "id": "cmpl-stub", "object": "text_completion", "created": int(time.time()),
        "model": body.get("model"),
        "choices": [{"index": 0, "finish_reason": finish, "text": text, "logprobs": None}],
        "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split()),
                  "total_tokens": len(prompt.split()) + len(text.split())},
    }


def _completion(body: dict, reply: Reply) -> dict:
    """A chat.completion object; token counts are word counts, so tests can predict them."""
    prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    content = reply.content or ""
    return {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model"),
        "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                     "message": {"role": "assistant", "content": reply.content}}],
        "usage": {"prompt_tokens": len(prompt.split()),
                  "completion_tokens": len(content.split()),
                  "total_tokens": len(prompt.split()) + len(content.split())},
    }
