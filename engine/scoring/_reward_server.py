"""The reward service over HTTP (``steptrace reward-server``; docs/guides/reward-server.md).

A ``ThreadingHTTPServer`` (standard library): each request is served in a thread of its
own, and their sandboxed checks share the judge's sandbox workers (engine/scoring/_reward.py).

``POST /v1/judge`` with ``{"items": [...]}`` answers ``200 {"results": [...]}``, one result
per item in order; ``GET /v1/health`` answers ``200 {"ok": true, "workers": N, "limits":
{...}}``. A request the service refuses as a whole (a body that is not JSON, not an
object with ``items``, larger than ``max_body_bytes``, more than ``max_items`` items) is
``400 {"error": "one line"}``; a body that does not arrive whole within ``body_seconds``
(30) is 408; an unknown path is 404, another method 405, all with the same one-line JSON
error.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from steptrace.scoring._reward import RewardError, RewardJudge

JUDGE_PATH = "/v1/judge"
HEALTH_PATH = "/v1/health"
SOCKET_TIMEOUT_S = 120.0
# A body must arrive whole within this many seconds of its turn: a client trickling its
# body (a byte now and then) would otherwise keep one of the turns for SOCKET_TIMEOUT_S a
# read, and MAX_CONCURRENT_REQUESTS such clients would keep every other request out.
BODY_SECONDS = 30.0
# Requests read and judged at once; more wait for a turn before their bodies are read, so
# memory stays bounded by about this many bodies (max_body_bytes each).
MAX_CONCURRENT_REQUESTS = 32


class RewardServer(ThreadingHTTPServer):
    """The HTTP server of one :class:`RewardJudge`. ``server_address`` has the bound port
    (port 0: an ephemeral one)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, judge: RewardJudge, host: str = "127.0.0.1", port: int = 0,
                 body_seconds: float = BODY_SECONDS) -> None:
        self.judge = judge
        self.turns = threading.BoundedSemaphore(MAX_CONCURRENT_REQUESTS)
        self.body_seconds = body_seconds
        super().__init__((host, port), _Handler)

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client that went away or stalled
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def serve_in_thread(self) -> threading.Thread:
        """Serve from a daemon thread (for tests and notebooks); ``shutdown()`` stops it."""
        thread = threading.Thread(target=self.serve_forever, name="steptrace-reward-server",
                                  daemon=True)
        thread.start()
        return thread


class _Handler(BaseHTTPRequestHandler):
    server: RewardServer
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S  # a client that stops sending mid-request is dropped

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: no log per request
        pass

    def _send(self, code: int, payload: dict) -> None:
        body = json.dumps(payload, separators=(",", ":")).encode()  # ASCII: any text
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, message: str) -> None:
        self._send(code, {"error": " ".join(message.split())})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == HEALTH_PATH:
            judge = self.server.judge
            self._send(200, {"ok": True, "workers": judge.slots.workers,
                             "limits": judge.limits.describe()})
        elif self.path == JUDGE_PATH:
            self._error(405, f"{JUDGE_PATH} takes POST")
        else:
            self._error(404, f"no such path {self.path[:200]!r}: POST {JUDGE_PATH}, "
                             f"GET {HEALTH_PATH}")

    def do_POST(self) -> None:  # noqa: N802
        if self.path != JUDGE_PATH:
            self.close_connection = True
            self._error(404 if self.path != HEALTH_PATH else 405,
                        f"no such path {self.path[:200]!r}: POST {JUDGE_PATH}")
            return
        limits = self.server.judge.limits
        length_text = self.headers.get("Content-Length")
        try:
            length = int(length_text) if length_text is not None else -1
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._error(400, "the request needs a Content-Length (a JSON body)")
            return
        if length > limits.max_body_bytes:
            self.close_connection = True  # the body is not read: the connection cannot go on
            self._error(400, f"the body has {length} bytes (at most {limits.max_body_bytes})")
            return
        with self.server.turns:
            body = self._body(length)
            if body is None:
                self.close_connection = True  # what is left of it is not read
                self._error(408, f"the body did not arrive within "
                                 f"{self.server.body_seconds:g} s")
                return
            self._judge(body)

    def _body(self, length: int) -> bytes | None:
        """The request's body, read within ``body_seconds`` in all; None if it does not
        arrive (too slowly, or the client stopped)."""
        deadline = time.monotonic() + self.server.body_seconds
        parts, left = [], length
        try:
            while left:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.connection.settimeout(min(remaining, SOCKET_TIMEOUT_S))
                part = self.rfile.read1(min(left, 1 << 16))
                if not part:
                    return None
                parts.append(part)
                left -= len(part)
        except TimeoutError:
            return None
        finally:
            self.connection.settimeout(SOCKET_TIMEOUT_S)
        return b"".join(parts)

    def _judge(self, body: bytes) -> None:
        try:
            request = json.loads(body.decode("utf-8"))  # UTF-8 only, as JSON requires
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            self._error(400, f"the body is not JSON: {message}")
            return
        except RecursionError:
            self._error(400, "the body is not JSON: nested too deeply")
            return
        if not isinstance(request, dict) or "items" not in request:
            self._error(400, 'the body is a JSON object {"items": [...]}')
            return
        unknown = sorted(set(request) - {"items"})
        if unknown:
            self._error(400, f"unknown field {unknown[0]!r} (the body has items only)")
            return
        try:
            results = self.server.judge.judge_batch(request["items"])
        except RewardError as exc:
            self._error(400, str(exc))
            return
        self._send(200, {"results": results})


def serve_rewards(judge: RewardJudge, host: str = "127.0.0.1", port: int = 0,
                  body_seconds: float = BODY_SECONDS) -> RewardServer:
    """A :class:`RewardServer` for ``judge``, bound (not yet serving: call
    ``serve_forever()`` or ``serve_in_thread()``); a request's body must arrive within
    ``body_seconds`` (408 otherwise)."""
    return RewardServer(judge, host, port, body_seconds)
