"""The fork server: the native backend's runner, inside the jail (never imported on the host).

bubblewrap starts the user's CPython with this file's directory (the runner: a copy of
``tracer/`` and this module) and the lock's packages as its only module path
(native_sandbox/_jail.py). It sets the interpreter up as the WASI guest is set up when it
is built (tracer/guest.py: audit hook, ``guard.seal``, the tracer's sys.monitoring tool,
the preloaded standard library and the lock's packages, the warm-up jobs, ``WitWorld``),
then serves jobs: for each one a child forked ahead (after the last job, while the host
stores its result: the fork is off the job's path) takes the request, installs the job filter
(seccomp: no new processes, no signals, no sockets; on top of the jail's), its
resource limits and a fresh scratch directory, runs ``job.handle`` on the request and
writes the result to a pipe. The server reads at most ``max_result_bytes + 1`` bytes of
it, ends the child at the time limit whatever it is doing, empties the scratch space
and answers the host. Every job starts from the same pre-initialised interpreter (a
copy-on-write copy of it): nothing a job does reaches the next one.

Frames, both ways: a kind byte, a length (8 bytes, big-endian), the data. From the host:
``S`` the set-up (JSON: the limits, the job filter's BPF program), ``J`` a request (its
JSON text). To the host: ``H`` ready (JSON: the interpreter's version, what was
preloaded), ``F`` failed to start (a message), ``R`` a job's result bytes, ``X`` a job
ended without one (JSON: ``status`` and ``exception_message``, decided here).

This module defines no classes and is removed from ``sys.modules`` before any job runs;
what it keeps is in the locals of ``main``'s frame, which no program reaches (frames are
refused, guard.py).
"""

import os
import sys


def main(request_fd: int, reply_fd: int) -> None:
    import json
    import select
    import signal
    import struct
    import time

    def send(kind: bytes, data: bytes) -> None:
        frame = kind + struct.pack(">Q", len(data)) + data
        while frame:
            frame = frame[os.write(reply_fd, frame):]

    def receive() -> tuple:
        head = _read_exactly(request_fd, 9)
        if head is None:
            return None, None
        body = _read_exactly(request_fd, struct.unpack(">Q", head[1:])[0])
        return head[:1], body

    for fd in range(3, 1024):  # what bubblewrap was handed besides the channel
        if fd not in (request_fd, reply_fd):
            try:
                os.close(fd)
            except OSError:
                pass
    # No Ctrl-C in the jail; and asyncio.run then installs no SIGINT handler (on 3.12 the
    # handler's check formats a task, which reads cr_frame: refused to programs).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import guest
        entry = guest.WitWorld()
        del guest
        preloaded = json.loads(entry.run(json.dumps({"command": "preloaded"})))
    except BaseException as exc:  # the host reports it and fails the run
        send(b"F", f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:4000])
        return
    sys.modules.pop(__name__, None)
    version = "%d.%d.%d" % sys.version_info[:3]
    send(b"H", json.dumps({"python": version, "preloaded": preloaded}).encode())
    kind, body = receive()
    if kind != b"S":
        return
    setup = json.loads(body)
    job_filter = bytes.fromhex(setup["filter"])
    prctl = _prctl()
    scratch = setup["scratch"]
    devnull = os.open("/dev/null", os.O_RDWR)
    # the next job's process, forked ahead (while the host stores the last result): it
    # waits for its request
    waiting = _spawn(entry, job_filter, prctl, scratch, devnull, (request_fd, reply_fd))
    while True:
        kind, body = receive()
        if kind != b"J":
            return
        pid, to_child, from_child = waiting
        limits = json.loads(body[:body.index(b"\n")])
        started = time.monotonic()
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(to_child, view):]
        except OSError:
            pass  # it is gone: _collect says how it ended
        os.close(to_child)
        data, status, running = _collect(from_child, pid, started, limits, select)
        os.close(from_child)
        send(b"R", data) if status is None else send(b"X", json.dumps(status).encode())
        # After the answer, while the host stores the result: the job's process ends (it
        # is exiting: it wrote its whole result), its scratch space is emptied and the
        # next job's process forked.
        if running:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        if not _wipe(scratch):
            send(b"F", b"the scratch directory could not be emptied")
            return
        waiting = _spawn(entry, job_filter, prctl, scratch, devnull, (request_fd, reply_fd))


def _spawn(entry, job_filter, prctl, scratch, devnull, channel):
    """Fork the next job's process: ``(pid, its request pipe, its result pipe)``. It reads
    its request (the limits' JSON line, then the guest request) to the end of the pipe,
    then runs it (``_child``)."""
    import json
    request_read, request_write = os.pipe()
    result_read, result_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(request_write)
            os.close(result_read)
            parts = []
            while chunk := os.read(request_read, 1 << 20):
                parts.append(chunk)
            os.close(request_read)
            body = b"".join(parts)
            limits = json.loads(body[:body.index(b"\n")])
            payload = body[body.index(b"\n") + 1:].decode()
            del parts, body
        except BaseException:
            os._exit(72)  # no request (the jail is ending)
        _child(entry, payload, limits, job_filter, prctl, scratch, devnull,
               channel, result_write)
    os.close(request_read)
    os.close(result_write)
    return pid, request_write, result_read


def _read_exactly(fd: int, size: int):
    parts = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _prctl():
    """prctl through libc (ctypes, loaded before any job)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    function = libc.prctl
    function.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                         ctypes.c_ulong)
    return function, ctypes


PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def _child(entry, payload, limits, job_filter, prctl, scratch, devnull, close, write_end):
    """The job's process, once its request came: limits, scratch directory, the job
    filter, the job, the result. Never returns."""
    status = 70
    try:
        import json
        import resource
        import signal
        for fd in close:
            os.close(fd)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file too large: EFBIG, not death
        for name, value in (("RLIMIT_AS", limits["address_space"]),
                            ("RLIMIT_CPU", limits["cpu_s"]),
                            ("RLIMIT_FSIZE", limits["file_bytes"]),
                            ("RLIMIT_NOFILE", limits["open_files"]),
                            ("RLIMIT_NPROC", limits["processes"]),
                            ("RLIMIT_CORE", 0)):
            hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU, then SIGKILL
            resource.setrlimit(getattr(resource, name), (value, hard))
        work = os.path.join(scratch, "job")
        os.mkdir(work, 0o700)
        os.chdir(work)
        written = _write_files(limits.get("files", ()))
        if written is not None:  # before the program ran (crashed: the schema takes no
            # other status without a trace; the host checks it as any result)
            os.write(write_end, json.dumps({"status": "crashed", "exception_type": None,
                                            "exception_message": written}).encode())
            os.close(write_end)
            status = 0
            return
        function, ctypes = prctl
        program = ctypes.create_string_buffer(job_filter, len(job_filter))
        # struct sock_fprog: the count of 8-byte instructions, padding, their address
        fprog = ctypes.create_string_buffer(
            (len(job_filter) // 8).to_bytes(2, sys.byteorder) + bytes(6)
            + ctypes.addressof(program).to_bytes(8, sys.byteorder))
        if function(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0 or function(
                PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
            os._exit(71)
        result = entry.run(payload).encode("utf-8", "surrogatepass")
        view = memoryview(result)
        while view:
            view = view[os.write(write_end, view):]
        os.close(write_end)  # the server answers now, not once this process is torn down
        status = 0
    finally:
        os._exit(status)


def _write_files(files) -> str | None:
    """Write the record's files (``[[path parts, text], ...]``, paths checked by the host)
    into the working directory; None, or why they could not be (the scratch space full)."""
    for parts, text in files:
        try:
            for depth in range(1, len(parts)):
                os.makedirs(os.path.join(*parts[:depth]), 0o700, exist_ok=True)
            out = os.open(os.path.join(*parts), os.O_WRONLY | os.O_CREAT | os.O_EXCL
                          | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(out, "wb") as handle:
                handle.write(text.encode("utf-8", "surrogatepass"))
        except OSError as exc:
            return (f"cannot write the record's file {'/'.join(parts)!r}: "
                    f"{exc.strerror or exc}")
    return None


def _collect(read_end, pid, started, limits, select):
    """The child's result and whether its process may still run: ``(data, None, True)``
    when it wrote a result and closed its pipe (its whole result; or more than
    ``max_bytes``: the host's schema check says ``output_limit``), else ``(b"", status
    dict, False)``. The child is killed at the time limit, whatever it is doing (a
    sleep, a wait, a closed result pipe)."""
    import time
    deadline = started + limits["timeout_s"]
    most = limits["max_bytes"] + 1
    process = os.pidfd_open(pid)
    parts, size = [], 0
    try:
        while size < most:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, min(1 << 20, most - size))
            if not chunk:
                if parts:
                    return b"".join(parts), None, True
                break
            parts.append(chunk)
            size += len(chunk)
        if size >= most:
            return b"".join(parts), None, True
        left = deadline - time.monotonic()
        exited = left > 0 and bool(select.select([process], [], [], left)[0])
        if not exited:
            os.kill(pid, 9)
    finally:
        os.close(process)
    _, code = os.waitpid(pid, 0)
    if not exited:
        return b"", {"status": "timeout", "exception_message":
                     f"exceeded the {limits['timeout_s']:g} s time limit"}, False
    if os.WIFSIGNALED(code):
        number = os.WTERMSIG(code)
        if number == 24:  # SIGXCPU: the CPU-time limit
            return b"", {"status": "timeout", "exception_message":
                         f"exceeded the {limits['timeout_s']:g} s time limit (CPU time)"}, False
        return b"", {"status": "crashed", "exception_message":
                     f"the job's process ended with signal {number}"}, False
    exit_code = os.WEXITSTATUS(code)
    if exit_code == 71:
        return b"", {"status": "crashed", "exception_message":
                     "the job's seccomp filter could not be installed"}, False
    return b"", {"status": "exited", "exception_type": "SystemExit", "exception_message":
                 f"the program ended the interpreter (exit status {exit_code})"}, False


def _wipe(scratch: str) -> bool:
    """Empty the scratch directory (whatever modes the job left); whether it is empty."""
    import shutil
    import stat
    for name in os.listdir(scratch):
        path = os.path.join(scratch, name)
        try:
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)
                continue
            os.chmod(path, stat.S_IRWXU)
        except OSError:
            continue
        # top-down: a directory is made listable before the walk goes into it
        for root, dirs, _files in os.walk(path):
            for item in dirs:
                inner = os.path.join(root, item)
                try:
                    if not os.path.islink(inner):
                        os.chmod(inner, stat.S_IRWXU)
                except OSError:
                    pass
        shutil.rmtree(path, ignore_errors=True)
    return not os.listdir(scratch)
