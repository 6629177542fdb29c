"""Headless Chromium driven over the DevTools protocol, standard library only.

Chromium started with ``--remote-debugging-pipe`` reads protocol messages (JSON, each
ended by a NUL byte) from its fd 3 and writes replies and events to its fd 4; a small
Python launcher moves our pipe ends onto those numbers and execs it. ``Browser.open(url)`` attaches to a new
tab, records console errors, uncaught exceptions, log errors and every request the page
makes, and returns once the load event has fired.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

CHROMIUM = "chromium"
TIMEOUT_S = 60.0
# Put the pipe ends passed as argv[1] and argv[2] on fds 3 and 4 (by way of fds >= 10, so
# that neither overwrites the other), then exec argv[3:].
_EXEC_ON_FDS_3_AND_4 = """
import fcntl, os, sys
high = [fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3]]
for target, fd in zip((3, 4), high):
    os.dup2(fd, target)
for fd in high + [int(fd) for fd in sys.argv[1:3]]:
    if fd not in (3, 4):
        os.close(fd)
os.execv(sys.argv[3], sys.argv[3:])
"""


class BrowserError(RuntimeError):
    pass


@dataclass
class Page:
    session: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    loaded: bool = False


class Browser:
    """``with Browser() as browser: page = browser.open(url); browser.evaluate(page, js)``"""

    def __init__(self) -> None:
        path = shutil.which(CHROMIUM)
        if path is None:
            raise BrowserError("chromium is not installed: `make test` installs Debian's "
                               "chromium package (apt-get install chromium)")
        self.profile = tempfile.TemporaryDirectory(prefix="steptrace-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [path, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
                f"--user-data-dir={self.profile.name}", "about:blank"]
        self.process = subprocess.Popen([sys.executable, "-c", _EXEC_ON_FDS_3_AND_4,
                                         str(to_browser_r), str(from_browser_w), *args],
                                        pass_fds=(to_browser_r, from_browser_w),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.pages: dict[str, Page] = {}

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except BrowserError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.stderr:
            self.process.stderr.close()
        self.profile.cleanup()

    # ------------------------------------------------------------ the protocol
    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and return its result, handling events until it comes."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        except OSError as exc:
            raise BrowserError(f"chromium is not reading commands: {exc}; "
                               f"{self._stderr()}") from None
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._event(reply)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError(f"no answer from chromium in {TIMEOUT_S:.0f} s")
            chunk = os.read(self._from_browser, 65536)
            if not chunk:
                raise BrowserError(f"chromium exited: {self._stderr()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        return (self.process.stderr.read() or b"").decode(errors="replace")[-2000:]

    def _event(self, message: dict) -> None:
        page = self.pages.get(message.get("sessionId", ""))
        if page is None:
            return
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            page.console_errors.append(" ".join(str(a.get("value", a.get("description")))
                                                for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            page.console_errors.append(details.get("exception", {}).get("description")
                                       or details.get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            page.console_errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            page.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Page.loadEventFired":
            page.loaded = True

    # ------------------------------------------------------------ pages
    def open(self, url: str) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        page = self.pages[session] = Page(session)
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        deadline = time.monotonic() + TIMEOUT_S
        while not page.loaded:
            self._event(self._read(deadline))
        return page

    def evaluate(self, page: Page, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True}, session=page.session)
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")
