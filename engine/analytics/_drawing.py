"""Where the report's plots are drawn: here, or in one drawing process beside the report.

Drawing (matplotlib laying out and writing SVG) is half of a large report's time and
needs nothing but each section's table. So a large report queues each table as soon as
it is computed and goes on with the next section's statistics while a second process
draws from the head of the queue; once every section is computed, the report draws from
its tail too: two CPUs work at once, and neither waits while plots are left. The
process is a plain ``python -m steptrace.analytics._drawing`` speaking length-prefixed
pickles over its stdin and stdout (not ``multiprocessing``, whose spawned children
re-run the caller's main script when it lacks a ``__main__`` guard). What it draws is
the same bytes as drawing here; a plot it cannot give (the process died, or drawing
raised there) is drawn here, so the page never depends on it.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future

HEADER = 8  # bytes of each message's length, big-endian
# a plot not back in this long is drawn here (a stuck drawing process never stops the
# report; a large report's slowest plot takes two seconds)
PATIENCE = 300.0
# -P: the working directory is not put on the path (a stray steptrace/ folder there must
# not stand in for the package)
WORKER = [sys.executable, "-P", "-m", "steptrace.analytics._drawing"]


def _send(stream, payload: object) -> None:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(HEADER, "big") + data)
    stream.flush()


def _receive(stream) -> object:
    """The next message, or EOFError when the stream ended (even mid-message)."""
    header = stream.read(HEADER)
    if len(header) < HEADER:
        raise EOFError
    size = int.from_bytes(header, "big")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class Drawing:
    """The plots of one report, shared between this process and a drawing process when
    ``parallel``: ``submit`` queues a section's table; the drawing process takes the
    queue from its head, one plot at a time, and ``finish`` (once every section is
    queued) has this process draw from its tail until the queue is empty, so neither
    waits while the other has plots left. ``result`` gives a section's SVG (None:
    nothing to plot); ``close`` ends the drawing process."""

    def __init__(self, parallel: bool) -> None:
        self._process: subprocess.Popen | None = None
        self._queue: deque[tuple[Future, str, object]] = deque()
        self._ready = threading.Condition()
        self._closed = False
        if parallel:
            try:
                self._process = subprocess.Popen(WORKER, stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE,
                                                 stderr=subprocess.DEVNULL)
            except (OSError, TypeError, ValueError):  # no interpreter to start: drawn here
                return
            threading.Thread(target=self._serve, daemon=True).start()

    def submit(self, section_id: str, result) -> Future:
        future: Future = Future()
        with self._ready:
            self._queue.append((future, section_id, result))
            self._ready.notify()
        return future

    def finish(self) -> None:
        """Draw here, from the tail of the queue, what the drawing process has not
        taken (everything, without one)."""
        while True:
            with self._ready:
                if not self._queue:
                    return
                future, section_id, result = self._queue.pop()
            future.set_result(("ok", _draw_here(section_id, result)))

    def result(self, future: Future, section_id: str, result) -> str | None:
        """The section's SVG: the drawing process's, or drawn here when it has none."""
        try:
            outcome, value = future.result(timeout=PATIENCE)
        except TimeoutError:
            outcome, value = "late", None
        if outcome == "ok" and (value is None or isinstance(value, str)):
            return value
        return _draw_here(section_id, result)

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()
        if self._process is None:
            return
        try:
            self._process.stdin.close()
        except OSError:
            pass
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _serve(self) -> None:
        """The drawing process's side: the head of the queue, one plot at a time, until
        the report closes or the process fails (then the rest is drawn here)."""
        process = self._process
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                future, section_id, result = self._queue.popleft()
            try:
                _send(process.stdin, (section_id, result))
                answer = _receive(process.stdout)
            except Exception:  # ended, or not our pickles: drawn here from now on
                answer = None
            if not (isinstance(answer, tuple) and len(answer) == 2):
                future.set_result(("lost", None))
                return
            future.set_result(answer)


def _draw_here(section_id: str, result) -> str | None:
    from steptrace.analytics._figures import plot_svg
    return plot_svg(section_id, result)


def main() -> None:
    """The drawing process: a (section id, table) in, ("ok", svg) or ("error", why) out,
    until its stdin ends."""
    from steptrace.analytics._figures import plot_svg
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed may corrupt the answers
    while True:
        try:
            section_id, result = _receive(stdin)
        except EOFError:
            return
        try:
            answer = ("ok", plot_svg(section_id, result))
        except Exception as exc:  # drawn again by the report, which then shows the error
            answer = ("error", f"{type(exc).__name__}: {exc}")
        _send(stdout, answer)


if __name__ == "__main__":
    main()
