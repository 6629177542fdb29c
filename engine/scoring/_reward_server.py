"""The reward service over HTTP (``steptrace reward-server``; docs/guides/reward-server.md).

A ``ThreadingHTTPServer`` (standard library): each request is served in a thread of its
own, and their sandboxed checks share the judge's sandbox workers (engine/scoring/_reward.py).

``POST /v1/judge`` with ``{"items": [...]}`` answers ``200 {"results": [...]}``, one result
per item in order; ``GET /v1/health`` answers ``200 {"ok": true, "workers": N, "limits":
{...}, "checks": {...}}``. Every other answer is a one-line JSON error ``{"error": ...}``,
and the server goes on with the next request: a body the service refuses as a whole is
400 (not UTF-8 JSON, NaN or Infinity, a number of more than ``MAX_NUMBER_CHARS``
characters, nested too deeply, not an object with ``items``, more than ``max_items``
items, no ``Content-Length``, a malformed one, a ``Transfer-Encoding``, a body that ends
before its length, larger than ``max_body_bytes``); a ``Content-Type`` that is not JSON is
415; a body that does not arrive whole within ``body_seconds`` (30) is 408; a client with
``max_client_requests`` requests under way, or whose checks would pass
``max_client_checks``, is 429 with ``Retry-After``; an unknown path is 404, another method
405; a request line or headers ``http.server`` cannot read are its 4xx. A client is an IP
address. The connection is closed after any error (what is left of the body is not read).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from steptrace.scoring._reward import RewardBusy, RewardError, RewardJudge

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
# Characters of a number in a body: no field of a request is a number, and Python would
# spend quadratic time on a long integer before refusing one of more than 4,300 digits.
MAX_NUMBER_CHARS = 100
# The media types a body may be declared as (or no Content-Type at all).
JSON_TYPES = ("application/json",)


class _NotJson(ValueError):
    """A body JSON's grammar allows that the service does not read (NaN, a huge number)."""


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
        self._clients_lock = threading.Lock()
        self._requests: Counter = Counter()  # per client: its requests read or judged
        super().__init__((host, port), _Handler)

    def enter(self, client: str) -> bool:
        """Count a request of ``client`` in, unless it has ``max_client_requests`` under
        way already (then False)."""
        with self._clients_lock:
            if self._requests[client] >= self.judge.limits.max_client_requests:
                return False
            self._requests[client] += 1
            return True

    def leave(self, client: str) -> None:
        with self._clients_lock:
            self._requests[client] -= 1
            if self._requests[client] <= 0:
                del self._requests[client]

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

    def _send(self, code: int, payload: dict, headers: dict | None = None) -> None:
        body = json.dumps(payload, separators=(",", ":")).encode()  # ASCII: any text
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code: int, message: str, headers: dict | None = None) -> None:
        """A one-line JSON error; the connection is closed after it (the rest of a request
        refused may not have been read)."""
        self.close_connection = True
        self._send(code, {"error": " ".join(message.split())[:1000]}, headers)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None
                   ) -> None:
        """http.server's own errors (a request line or headers it cannot read, a method
        it has no handler for) as the service's one-line JSON errors."""
        if code == HTTPStatus.NOT_IMPLEMENTED:  # a method no handler takes
            code, message = 405, f"method {self.command[:20]!r} is not allowed"
        if self.request_version == "HTTP/0.9":  # a line it could not read: answer in 1.1
            self.request_version = "HTTP/1.1"
        reason = self.responses.get(code, ("error",))[0]
        self._error(code, message or reason, {"Allow": "GET, POST"} if code == 405 else None)

    def _refuse_method(self) -> None:
        method = "GET" if self.path == HEALTH_PATH else "POST"
        self._error(405, f"{self.path[:200]!r} takes {method}: POST {JUDGE_PATH}, "
                         f"GET {HEALTH_PATH}", {"Allow": "GET, POST"})

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = \
        _refuse_method

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.headers.get("Content-Length", "0").strip() != "0" \
                or "Transfer-Encoding" in self.headers:
            self.close_connection = True  # a body that is not read: no next request
        if self.path == HEALTH_PATH:
            judge = self.server.judge
            self._send(200, {"ok": True, "workers": judge.slots.workers,
                             "limits": judge.limits.describe(),
                             "checks": judge.slots.queue.describe()})
        elif self.path == JUDGE_PATH:
            self._refuse_method()
        else:
            self._error(404, f"no such path {self.path[:200]!r}: POST {JUDGE_PATH}, "
                             f"GET {HEALTH_PATH}")

    def do_POST(self) -> None:  # noqa: N802
        if self.path != JUDGE_PATH:
            if self.path == HEALTH_PATH:
                self._refuse_method()
            else:
                self._error(404, f"no such path {self.path[:200]!r}: POST {JUDGE_PATH}")
            return
        limits = self.server.judge.limits
        length, problem = _content_length(self.headers)
        if problem is None:
            problem = _content_type(self.headers)
            if problem is not None:
                self._error(415, problem)
                return
        if problem is None and length > limits.max_body_bytes:
            problem = f"the body has {length} bytes (at most {limits.max_body_bytes})"
        if problem is not None:
            self._error(400, problem)  # the body is not read: the connection cannot go on
            return
        client = self.client_address[0]
        if not self.server.enter(client):
            self._error(429, f"too many requests under way from {client} (at most "
                             f"{limits.max_client_requests} at once); send again later",
                        {"Retry-After": str(limits.retry_after)})
            return
        try:
            with self.server.turns:
                body, problem = self._body(length)
                if body is None:
                    self._error(408 if problem is None else 400, problem or
                                f"the body did not arrive within {self.server.body_seconds:g} s")
                    return
                self._judge(body, client)
        finally:
            self.server.leave(client)

    def _body(self, length: int) -> tuple[bytes | None, str | None]:
        """The request's body, read within ``body_seconds`` in all; None and None if it
        does not arrive in time, None and why if the client ended it early."""
        deadline = time.monotonic() + self.server.body_seconds
        parts, left = [], length
        try:
            while left:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, None
                self.connection.settimeout(min(remaining, SOCKET_TIMEOUT_S))
                part = self.rfile.read1(min(left, 1 << 16))
                if not part:
                    return None, (f"the body ended after {length - left} of the {length} "
                                  f"bytes of its Content-Length")
                parts.append(part)
                left -= len(part)
        except TimeoutError:
            return None, None
        finally:
            self.connection.settimeout(SOCKET_TIMEOUT_S)
        return b"".join(parts), None

    def _judge(self, body: bytes, client: str) -> None:
        request, problem = read_body(body)
        if problem is not None:
            self._error(400, problem)
            return
        try:
            results = self.server.judge.judge_batch(request["items"], client)
        except RewardBusy as exc:
            self._error(429, str(exc), {"Retry-After": str(exc.retry_after)})
            return
        except RewardError as exc:
            self._error(400, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a bug of ours: one line, and serve on
            from steptrace.store._store import first_line
            self._error(500, f"the request could not be judged: {type(exc).__name__}: "
                             f"{first_line(exc)}")
            return
        self._send(200, {"results": results})


def read_body(body: bytes) -> tuple[dict | None, str | None]:
    """A judge request's body as its JSON object, or None and why it is refused: not
    UTF-8, not JSON, JSON with NaN or Infinity (not JSON's own, which Python reads), a
    number longer than MAX_NUMBER_CHARS, nested deeper than the parser goes, or not an
    object of ``items`` alone."""
    try:
        request = json.loads(body.decode("utf-8"), parse_constant=_no_constant,
                             parse_int=_number(int), parse_float=_number(float))
    except UnicodeDecodeError as exc:
        return None, f"the body is not JSON: not UTF-8 (byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"the body is not JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
    except _NotJson as exc:
        return None, f"the body is not JSON: {exc}"
    except RecursionError:
        return None, "the body is not JSON: nested too deeply"
    except (ValueError, MemoryError) as exc:  # anything else the parser refuses
        return None, f"the body is not JSON: {type(exc).__name__}"
    if not isinstance(request, dict) or "items" not in request:
        return None, 'the body is a JSON object {"items": [...]}'
    unknown = sorted(set(request) - {"items"})
    if unknown:
        return None, f"unknown field {unknown[0][:100]!r} (the body has items only)"
    return request, None


def _no_constant(name: str):
    raise _NotJson(f"{name} is not a JSON value")


def _number(kind):
    def parse(text: str):
        if len(text) > MAX_NUMBER_CHARS:
            raise _NotJson(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
        return kind(text)
    return parse


def _content_length(headers) -> tuple[int, str | None]:
    """The body's length from the one Content-Length (ASCII digits), or why there is
    none the service reads: none, several, malformed, or a Transfer-Encoding (a chunked
    body is not read: its framing and a Content-Length could disagree)."""
    if headers.get_all("Transfer-Encoding"):
        return -1, "a Transfer-Encoding is not read: send the body with a Content-Length"
    values = headers.get_all("Content-Length") or []
    if not values:
        return -1, "the request needs a Content-Length (a JSON body)"
    if len(values) > 1:
        return -1, "the request has more than one Content-Length"
    text = values[0].strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        return -1, f"a Content-Length is a number of bytes, not {text[:30]!r}"
    return int(text), None


def _content_type(headers) -> str | None:
    """Why the declared Content-Type is not JSON in UTF-8 (None: it is, or none is
    declared)."""
    declared = headers.get("Content-Type")
    if declared is None:
        return None
    media, *parameters = [part.strip() for part in declared.split(";")]
    if media.lower() not in JSON_TYPES:
        return f"the body is JSON (Content-Type application/json), not {declared[:100]!r}"
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() != "utf-8":
            return f"the body is JSON in UTF-8, not {value.strip()[:30]!r}"
    return None


def serve_rewards(judge: RewardJudge, host: str = "127.0.0.1", port: int = 0,
                  body_seconds: float = BODY_SECONDS) -> RewardServer:
    """A :class:`RewardServer` for ``judge``, bound (not yet serving: call
    ``serve_forever()`` or ``serve_in_thread()``); a request's body must arrive within
    ``body_seconds`` (408 otherwise)."""
    return RewardServer(judge, host, port, body_seconds)
