"""Where the report's plots are drawn: here, or in one drawing process beside the report.

Drawing (matplotlib laying out and writing SVG) is a third of a large report's time and
needs nothing but each section's table, so a large report sends each table to a second
process as soon as it is computed and goes on with the next section's statistics: two
CPUs work at once. The process is a plain ``python -m steptrace.analytics._drawing``
speaking length-prefixed pickles over its stdin and stdout (not ``multiprocessing``,
whose spawned children re-run the caller's main script when it lacks a ``__main__``
guard). What it draws is the same bytes as drawing here; a plot it cannot give (the
process died, or drawing raised there) is drawn here, so the page never depends on it.
"""

from __future__ import annotations

import pickle
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future

HEADER = 8  # bytes of each message's length, big-endian
# a plot not back in this long is drawn here (a stuck drawing process never stops the
# report; a large report's slowest plot takes two seconds)
PATIENCE = 300.0
WORKER = [sys.executable, "-m", "steptrace.analytics._drawing"]


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
    """The plots of one report, drawn in a drawing process when ``parallel``, else here
    when asked (``result``). ``submit`` a section's table, ``result`` its SVG (or None:
    nothing to plot), ``close`` at the end."""

    def __init__(self, parallel: bool) -> None:
        self._process: subprocess.Popen | None = None
        self._out: queue.Queue = queue.Queue()
        self._waiting: queue.Queue = queue.Queue()  # the futures, in the order sent
        if parallel:
            try:
                self._process = subprocess.Popen(WORKER, stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE,
                                                 stderr=subprocess.DEVNULL)
            except OSError:
                return
            # a writer and a reader thread: a big table or SVG never blocks the report
            threading.Thread(target=self._write, daemon=True).start()
            threading.Thread(target=self._read, daemon=True).start()

    def submit(self, section_id: str, result) -> Future:
        future: Future = Future()
        if self._process is None:
            return future  # drawn here, by ``result``
        self._waiting.put(future)
        self._out.put((section_id, result))
        return future

    def result(self, future: Future, section_id: str, result) -> str | None:
        """The section's SVG: the drawing process's, or drawn here when it has none."""
        if self._process is not None:
            try:
                outcome, value = future.result(timeout=PATIENCE)
            except TimeoutError:
                outcome, value = "late", None
            if outcome == "ok" and (value is None or isinstance(value, str)):
                return value
        from steptrace.analytics._report import plot_svg
        return plot_svg(section_id, result)

    def close(self) -> None:
        if self._process is None:
            return
        self._out.put(None)
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _write(self) -> None:
        stdin = self._process.stdin
        try:
            while (item := self._out.get()) is not None:
                _send(stdin, item)
        except (OSError, ValueError):  # the process died: the reader answers the rest
            pass
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def _read(self) -> None:
        stdout = self._process.stdout
        while True:
            future = self._waiting.get()
            try:
                answer = _receive(stdout)
            except Exception:  # ended, or not our pickles: drawn here from now on
                answer = ("lost", None)
            if not (isinstance(answer, tuple) and len(answer) == 2):
                answer = ("lost", None)
            future.set_result(answer)
            if answer[0] == "lost":  # every later plot is drawn here too
                self._drain()
                return

    def _drain(self) -> None:
        while True:
            self._waiting.get().set_result(("lost", None))


def main() -> None:
    """The drawing process: a (section id, table) in, ("ok", svg) or ("error", why) out,
    until its stdin ends."""
    from steptrace.analytics._report import plot_svg
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
