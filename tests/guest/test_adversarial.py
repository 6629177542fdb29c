"""Adversarial programs: each attack gets its exact status, no effect on the host, and the
next job in the same Sandbox still runs (and is traced) correctly."""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from pathlib import Path

import duckdb
import pytest

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

ROOT = Path(__file__).resolve().parents[2]

KNOWN = """def f(n):
    s = 0
    for i in range(n):
        s += i
    return s
"""


@pytest.fixture(scope="module")
def box():
    """One sandbox for the module, with small limits but a time limit no job gets near:
    a job meant to hit the step, memory, stack or output limit must hit it, however slow
    or busy the machine (a 1 s limit used to fire first on a loaded one)."""
    with Sandbox(Limits(timeout_s=60.0, memory_mb=128, max_stdout=1000)) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def quick_box():
    """The same limits with a 1 s time limit, for the jobs that must end by time (they
    could never end otherwise, so nothing races it)."""
    with Sandbox(Limits(timeout_s=1.0, memory_mb=128, max_stdout=1000)) as sandbox:
        yield sandbox


def box_for(want: dict, box, quick_box):
    return quick_box if want.get("status") == "timeout" else box


def _run(box, code, input="", isolation="job", expected=None) -> dict:
    request = {"code": code, "input": input, "expected": expected, "entry": "f"}
    return box.run(request, isolation).result


def _steps(result: dict) -> list[tuple]:
    s = result["steps"]
    return list(zip(s["event"], s["func"], s["line"], s["depth"], s["frame"]))


def _states(result: dict) -> list[tuple]:
    s = result["states"]
    return list(zip(s["step"], s["var"], s["value"], s["type"]))


@pytest.fixture(scope="module")
def baseline(box) -> dict:
    """The known program's trace, in a fresh instance."""
    result = _run(box, KNOWN, "3")
    assert result["status"] == "ok" and result["output"] == "3"
    assert result["line_steps"] == 9
    return result


def assert_next_job_ok(box, isolation, baseline) -> None:
    """The next job in the same Sandbox returns ok and is traced exactly as in a fresh one."""
    result = _run(box, KNOWN, "3", isolation)
    assert result["status"] == "ok"
    assert result["output"] == "3"
    assert result["line_steps"] == baseline["line_steps"]
    assert result["instruction_steps"] == baseline["instruction_steps"]
    assert _steps(result) == _steps(baseline)
    assert _states(result) == _states(baseline)


def assert_fields(result: dict, want: dict) -> None:
    got = {key: result.get(key) for key in want}
    assert got == want


def child_pids() -> set[int]:
    """PIDs whose parent is this test process."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[1]) == os.getpid():
            pids.add(int(stat.parent.name))
    return pids


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def exc(type_, message):
    return {"status": "exception", "exception_type": type_, "exception_message": message}


def missing(message):
    """An import of a module the guest does not have (the runner's own modules included)."""
    return {"status": "missing_module", "exception_type": "ModuleNotFoundError",
            "exception_message": message}


ENOENT = "[Errno 44] No such file or directory: "

# ----------------------------------------------------------------------------- file system


@pytest.fixture
def host_files(tmp_path, monkeypatch):
    """A host temp file, a real DuckDB store and an empty cwd, with their fingerprints."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"host data\n")
    store = tmp_path / "store.duckdb"
    con = duckdb.connect(str(store))
    con.execute("create table t as select 42 as x")
    con.close()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    snapshot = {
        "victim": (victim.read_bytes(), victim.stat().st_mtime_ns),
        "store": sha256(store),
        "tmp": sorted(p.name for p in tmp_path.iterdir()),
        "cwd": sorted(os.listdir(cwd)),
        "root": sorted(os.listdir(ROOT)),
    }
    return {"victim": victim, "store": store, "cwd": cwd, "tmp": tmp_path, "snapshot": snapshot}


def assert_host_files_unchanged(files, relative_name=None) -> None:
    snap = files["snapshot"]
    victim = files["victim"]
    assert victim.exists()
    assert (victim.read_bytes(), victim.stat().st_mtime_ns) == snap["victim"]
    assert sha256(files["store"]) == snap["store"]
    con = duckdb.connect(str(files["store"]), read_only=True)
    assert con.execute("select x from t").fetchall() == [(42,)]
    con.close()
    assert sorted(p.name for p in files["tmp"].iterdir()) == snap["tmp"]
    assert sorted(os.listdir(files["cwd"])) == snap["cwd"] == []
    if relative_name is not None:
        assert not (ROOT / relative_name).exists()
        assert not (Path("/") / relative_name).exists()


FS_ATTACKS = {
    "read_etc_passwd": ("def f():\n    return open('/etc/passwd').read()\n",
                        exc("FileNotFoundError", ENOENT + "'/etc/passwd'")),
    "list_root": ("import os\ndef f():\n    return os.listdir('/')\n",
                  exc("FileNotFoundError", ENOENT + "'/'")),
    "write_host_file": ("def f():\n    open({victim!r}, 'w').write('pwned')\n",
                        exc("FileNotFoundError", ENOENT + "{victim!r}")),
    "append_host_file": ("def f():\n    open({victim!r}, 'a').write('pwned')\n",
                         exc("FileNotFoundError", ENOENT + "{victim!r}")),
    # the job's own working directory (/work) and /tmp: written there, never on the host
    "write_relative": ("def f():\n    return open({rel!r}, 'w').write('pwned')\n",
                       {"status": "ok", "output": "5"}),
    "recreate_host_path": ("import os\ndef f():\n    os.makedirs(os.path.dirname({victim!r}))\n"
                           "    return open({victim!r}, 'w').write('pwned')\n",
                           {"status": "ok", "output": "5"}),
    "escape_by_dotdot": ("import os\ndef f():\n    return open('../' * 8 + {victim!r}[1:]).read()\n",
                         exc("PermissionError", "[Errno 63] Operation not permitted: '"
                             + "../" * 8 + "{victim_rel}'")),
    "delete_host_file": ("import os\ndef f():\n    os.remove({victim!r})\n",
                         exc("FileNotFoundError", ENOENT + "{victim!r}")),
    "open_duckdb_store": ("def f():\n    return open({store!r}, 'rb').read(16)\n",
                          exc("FileNotFoundError", ENOENT + "{store!r}")),
    "write_duckdb_store": ("def f():\n    open({store!r}, 'r+b').write(b'x' * 4096)\n",
                           exc("FileNotFoundError", ENOENT + "{store!r}")),
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", FS_ATTACKS)
def test_file_system(box, baseline, host_files, name, isolation):
    """No file of the host can be read, listed, written or deleted."""
    rel = f"steptrace_adv_{uuid.uuid4().hex}.txt"
    fmt = {"victim": str(host_files["victim"]), "store": str(host_files["store"]), "rel": rel,
           "victim_rel": str(host_files["victim"])[1:]}
    code, want = FS_ATTACKS[name]
    want = {k: v.format(**fmt) if isinstance(v, str) else v for k, v in want.items()}
    result = _run(box, code.format(**fmt), isolation=isolation)
    assert_fields(result, want)
    assert "host data" not in result["stdout"] and "host data" not in (result["output"] or "")
    assert_host_files_unchanged(host_files, rel)
    assert_next_job_ok(box, isolation, baseline)


# ----------------------------------------------------------------------------- environment


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_environ_is_empty(box, baseline, monkeypatch, isolation):
    """A host environment variable is not visible: os.environ is empty."""
    name = f"STEPTRACE_SECRET_{uuid.uuid4().hex}"
    monkeypatch.setenv(name, "hunter2")
    code = "import os\ndef f():\n    return (dict(os.environ), os.getenv({name!r}))\n"
    result = _run(box, code.format(name=name), isolation=isolation)
    assert_fields(result, {"status": "ok", "output": "({}, None)"})
    assert os.environ[name] == "hunter2"
    assert_next_job_ok(box, isolation, baseline)


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_getcwd_and_listdir(box, baseline, tmp_path, monkeypatch, isolation):
    """cwd is the job's own '/work' inside the guest and lists nothing; the host's cwd is
    not reached."""
    monkeypatch.chdir(tmp_path)
    result = _run(box, "import os\ndef f():\n    return os.getcwd()\n", isolation=isolation)
    assert_fields(result, {"status": "ok", "output": "'/work'"})
    result = _run(box, "import os\ndef f():\n    return os.listdir('.')\n", isolation=isolation)
    assert_fields(result, {"status": "ok", "output": "[]"})
    assert os.listdir(tmp_path) == []
    assert_next_job_ok(box, isolation, baseline)


# ----------------------------------------------------------------------------- network


@pytest.fixture
def listener():
    """A real listening TCP socket on 127.0.0.1 (non-blocking)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


# every name lookup: the error of a machine without network (tracer/exposed.py)
NO_NETWORK = "[Errno -3] Temporary failure in name resolution (the sandbox has no network)"
NET_ATTACKS = {
    "socket_connect": ("import socket\ndef f():\n    s = socket.socket()\n"
                       "    s.connect(('127.0.0.1', {port}))\n",
                       exc("PermissionError", "[Errno 2] Permission denied")),
    "create_connection": ("import socket\ndef f():\n"
                          "    socket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n",
                          exc("gaierror", NO_NETWORK)),
    "getaddrinfo": ("import socket\ndef f():\n    return socket.getaddrinfo('localhost', {port})\n",
                    exc("gaierror", NO_NETWORK)),
    "dns_lookup": ("import socket\ndef f():\n    return socket.gethostbyname('example.com')\n",
                   exc("gaierror", NO_NETWORK)),
}


@pytest.mark.parametrize("name", NET_ATTACKS)
def test_network(box, baseline, listener, name):
    """No connection reaches a real listening socket on the host; no name resolution."""
    code, want = NET_ATTACKS[name]
    result = _run(box, code.format(port=listener.getsockname()[1]))
    assert_fields(result, want)
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert_next_job_ok(box, "job", baseline)


# ----------------------------------------------------------------------------- processes

PROC_ATTACKS = {
    "subprocess_run": ("import subprocess\ndef f():\n    return subprocess.run(['/bin/sh', '-c', 'true'])\n",
                       exc("OSError", "[Errno 58] wasi does not support processes.")),
    "os_system": ("import os\ndef f():\n    return os.system('true')\n",
                  exc("AttributeError", "module 'os' has no attribute 'system'")),
    "os_fork": ("import os\ndef f():\n    return os.fork()\n",
                exc("AttributeError", "module 'os' has no attribute 'fork'")),
    "os_posix_spawn": ("import os\ndef f():\n    return os.posix_spawn('/bin/true', ['true'], {})\n",
                       exc("AttributeError", "module 'os' has no attribute 'posix_spawn'")),
    "os_execv": ("import os\ndef f():\n    os.execv('/bin/true', ['true'])\n",
                 exc("AttributeError", "module 'os' has no attribute 'execv'")),
    "thread_start": ("import threading\ndef f():\n    threading.Thread(target=print).start()\n",
                     {"status": "unsupported", "exception_type": None, "exception_message":
                      "the program starts a thread; the sandbox (WASI) has no threads"}),
    "os_kill": ("import os\ndef f():\n    os.kill(1, 9)\n",
                exc("AttributeError", "module 'os' has no attribute 'kill'")),
    # WASI's raise() aborts the instance: the guest traps (no host signal is sent)
    "signal_raise_signal": ("import signal\ndef f():\n    signal.raise_signal(signal.SIGTERM)\n",
                            {"status": "crashed", "exception_message":
                             "the guest trapped: wasm trap: wasm `unreachable` instruction executed"}),
    "import_ctypes": ("def f():\n    import ctypes\n",
                      missing("No module named 'ctypes'")),
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", PROC_ATTACKS)
def test_processes(box, baseline, name, isolation):
    """No process, thread or signal: the test process gains no child."""
    before = child_pids()
    code, want = PROC_ATTACKS[name]
    result = _run(box, code, isolation=isolation)
    assert_fields(result, want)
    assert child_pids() == before
    assert_next_job_ok(box, isolation, baseline)


# ----------------------------------------------------------------------------- resources

TIMEOUT = {"status": "timeout", "exception_message": "exceeded the 1 s time limit"}
RESOURCE_ATTACKS = {
    # one line (no line events), its state growing (not proved to loop)
    "infinite_loop": ("def f():\n    i = 0\n    while True: i += 1\n", "", TIMEOUT),
    # its state repeats: proved to loop (tracer/loops.py; tests/guest/test_loops.py)
    "infinite_loop_multiline": ("def f():\n    while True:\n        pass\n", "",
                                {"status": "loops",
                                 "exception_message": "the program loops forever: the "
                                 "complete state of f at line 2 repeated (proved at "
                                 "backward jump 1060 of the run)",
                                 "line_steps": 2120}),
    "infinite_loop_growing": ("def f():\n    n = 0\n    while True:\n        n += 1\n", "",
                              {"status": "step_limit",
                               "exception_message": "trace exceeds 100000 steps",
                               "line_steps": 100000}),
    "allocate_forever": ("def f():\n    a = []\n    while True: a.append(bytearray(10**6))\n", "",
                         {"status": "memory_limit", "exception_type": "MemoryError",
                          "exception_message": "MemoryError: the program ran out of memory"}),
    "allocate_huge": ("def f():\n    return len(bytearray(10**9))\n", "",
                      {"status": "memory_limit", "exception_type": "MemoryError",
                       "exception_message": "MemoryError: the program ran out of memory"}),
    "python_recursion": ("def f(n=0):\n    return f(n + 1)\n", "",
                         {**exc("RecursionError", "maximum recursion depth exceeded"),
                          "line_steps": 999}),
    "c_recursion_repr": ("X = []\nfor _ in range(10**5):\n    X = [X]\n"
                         "def f():\n    return len(repr(X))\n", "",
                         {"status": "crashed",
                          "exception_message": "the guest's stack overflowed"}),
    "huge_print": ("def f():\n    print('x' * 5000)\n", "",
                   {"status": "output_limit", "exception_message": "stdout exceeds 1000 characters",
                    "stdout": "x" * 1000}),
    "huge_stderr": ("import sys\ndef f():\n    sys.stderr.write('e' * 5000)\n", "",
                    {"status": "output_limit",
                     "exception_message": "stderr exceeds 1000 characters"}),
    "giant_int_str": ("def f():\n    return str(10**100000)\n", "",
                      exc("ValueError", "Exceeds the limit (4300 digits) for integer string "
                          "conversion; use sys.set_int_max_str_digits() to increase the limit")),
    "giant_str_to_int": ("def f():\n    return int('1' * 10**5)\n", "",
                         exc("ValueError", "Exceeds the limit (4300 digits) for integer string "
                             "conversion: value has 100000 digits; use "
                             "sys.set_int_max_str_digits() to increase the limit")),
    "giant_int_input": ("def f(x):\n    return x % 7\n", "1" * 5000,
                        {"status": "invalid", "exception_message":
                         "input does not parse as call arguments: Exceeds the limit (4300 "
                         "digits) for integer string conversion: value has 5000 digits; use "
                         "sys.set_int_max_str_digits() to increase the limit - Consider "
                         "hexadecimal for huge integer literals to avoid decimal conversion "
                         "limits."}),
    "giant_int_returned": ("def f():\n    return 10**100000\n", "",
                           {"status": "ok", "output": "<repr failed: ValueError>",
                            "output_type": "int"}),
    "huge_input_string": ("def f(x):\n    return len(x)\n", "'" + "a" * 10**6 + "'",
                          {"status": "ok", "output": "1000000"}),
    "large_input_list": ("def f(x):\n    return len(x)\n", "[" + "0," * 20000 + "]",
                         {"status": "ok", "output": "20000"}),
    # CPython's parser gives up on 10**5 levels of brackets with MemoryError (3.13 on the
    # host says SyntaxError "too many nested parentheses"); the input is never evaluated
    "deeply_nested_input": ("def f(x):\n    return len(x)\n", "[" * 10**5 + "]" * 10**5,
                            {"status": "memory_limit",
                             "exception_message": "MemoryError while parsing the input"}),
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", RESOURCE_ATTACKS)
def test_resources(box, quick_box, baseline, name, isolation):
    """Every runaway job ends within its limit with the right status."""
    code, input, want = RESOURCE_ATTACKS[name]
    box = box_for(want, box, quick_box)
    result = _run(box, code, input, isolation)
    assert_fields(result, want)
    assert_next_job_ok(box, isolation, baseline)


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_direct_fd_writes_reach_nothing_on_the_host(box, baseline, capfd, isolation):
    """os.write to fds 1 and 2 bypasses sys.stdout: it goes to WASI's stdout/stderr, which
    the sandbox discards (a write is taken 64 KiB at a time). Nothing reaches the host
    process's own fds, and the job's captured stdout stays empty."""
    capfd.readouterr()
    code = ("import os\ndef f():\n"
            "    return os.write(1, b'x' * 10**6) + os.write(2, b'y' * 10)\n")
    result = _run(box, code, isolation=isolation)
    assert_fields(result, {"status": "ok", "output": "65546", "stdout": ""})
    assert capfd.readouterr() == ("", "")
    assert_next_job_ok(box, isolation, baseline)


def test_huge_repr_returned(box, baseline):
    """A 200,000-character return value is cut to max_output (100,000) characters."""
    result = _run(box, "def f():\n    return 'a' * 200000\n")
    assert_fields(result, {"status": "ok", "output_truncated": True, "output_type": "str"})
    assert len(result["output"]) == 100000
    assert result["output"] == "'" + "a" * 99999
    assert_next_job_ok(box, "job", baseline)


# ----------------------------------------------------------------------------- exits

EXIT_ATTACKS = {
    "sys_exit": ("import sys\ndef f():\n    sys.exit(3)\n", exc("SystemExit", "3")),
    # WASI preview 2's exit() only tells success from failure: every non-zero code is 1
    "os__exit": ("import os\ndef f():\n    os._exit(3)\n",
                 {"status": "exited", "exception_type": "SystemExit",
                  "exception_message": "the program ended the interpreter (exit status 1)"}),
    "os__exit_0": ("import os\ndef f():\n    os._exit(0)\n",
                   {"status": "exited", "exception_type": "SystemExit",
                    "exception_message": "the program ended the interpreter (exit status 0)"}),
    "raise_system_exit": ("def f():\n    raise SystemExit\n", exc("SystemExit", "")),
    "keyboard_interrupt": ("def f():\n    raise KeyboardInterrupt('k')\n",
                           exc("KeyboardInterrupt", "k")),
    "base_exception_subclass": ("class Boom(BaseException):\n    pass\n"
                                "def f():\n    raise Boom('b')\n", exc("Boom", "b")),
    "exit_at_top_level": ("import sys\nsys.exit(3)\ndef f():\n    return 1\n",
                          {"status": "invalid", "exception_type": "SystemExit",
                           "exception_message": "program failed at top level: SystemExit: 3"}),
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", EXIT_ATTACKS)
def test_exits(box, baseline, name, isolation):
    """Exits end only the job (or the instance); the host process lives on."""
    before = child_pids()
    code, want = EXIT_ATTACKS[name]
    result = _run(box, code, isolation=isolation)
    assert_fields(result, want)
    assert child_pids() == before
    assert_next_job_ok(box, isolation, baseline)


# ----------------------------------------------------------------------------- tracer


def refused(what, status="exception", **more):
    """A refused attempt: an ordinary RuntimeError in the program (here uncaught), named
    in the run's note."""
    want = {"status": status, "note": f"refused to the program: {what}"}
    if status == "exception":
        want.update(exception_type="RuntimeError",
                    exception_message=f"steptrace: {what} is not available to traced programs")
    want.update(more)
    return want


MONITORING_REFUSED = refused("sys.monitoring")

TRACER_ATTACKS = {
    # sys.monitoring is replaced for the job by an object that refuses every use
    "free_tool_id": ("import sys\ndef f():\n    sys.monitoring.free_tool_id(3)\n    return 1\n",
                     MONITORING_REFUSED),
    "set_events": ("import sys\ndef f():\n    sys.monitoring.set_events(3, 0)\n    return 1\n",
                   MONITORING_REFUSED),
    "register_callback": ("import sys\ndef f():\n"
                          "    sys.monitoring.register_callback(3, sys.monitoring.events.LINE, None)\n",
                          MONITORING_REFUSED),
    "set_local_events": ("import sys\ndef f():\n"
                         "    sys.monitoring.set_local_events(3, f.__code__, 0)\n    return 1\n",
                         MONITORING_REFUSED),
    # switched off and on again before the call returns: no check at the end could see it
    "events_off_and_on": ("import sys\ndef f():\n    m = sys.monitoring\n"
                          "    old = m.get_events(3)\n    m.set_events(3, 0)\n"
                          "    x = 1\n    x = 2\n    m.set_events(3, old)\n    return x\n",
                          MONITORING_REFUSED),
    "monitoring_swallowed": ("import sys\ndef f():\n    try:\n        sys.monitoring.set_events(3, 0)\n"
                             "    except RuntimeError:\n        pass\n    x = 1\n    x = 2\n"
                             "    return x\n",
                             refused("sys.monitoring", "ok", output="2", line_steps=7)),
    "monitoring_at_top_level": (
        "import sys\nE = sys.monitoring.events\ndef f():\n    return 1\n",
        {"status": "invalid", "exception_type": "RuntimeError",
         "exception_message": "program failed at top level: RuntimeError: steptrace: "
                              "sys.monitoring is not available to traced programs",
         "note": "refused to the program: sys.monitoring"}),
    "settrace": ("import sys\ndef f():\n    sys.settrace(lambda *a: None)\n",
                 refused("sys.settrace")),
    "setprofile": ("import sys\ndef f():\n    sys.setprofile(lambda *a: None)\n",
                   refused("sys.setprofile")),
    # CPython's addaudithook swallows a RuntimeError from an existing hook: the new hook
    # is simply not added
    "addaudithook": ("import sys\ndef f():\n    sys.addaudithook(lambda *a: None)\n    return 1\n",
                     refused("sys.addaudithook", "ok", output="1")),
    # sys._getframe gives frame views (exposed.FrameView) of the program's frames only:
    # the frame below the entry function is the runner's, so there is none
    "getframe_f_back_f_locals": ("import sys\ndef f():\n    fr = sys._getframe(1)\n"
                                 "    return fr.f_back.f_locals\n",
                                 {"status": "exception", "exception_type": "ValueError",
                                  "exception_message": "call stack is not deep enough",
                                  "note": None}),
    "getframe_views_end_at_the_program": (
        "import sys\ndef g():\n    view, seen = sys._getframe(), []\n"
        "    while view is not None:\n"
        "        seen.append((view.f_code.co_name, view.f_globals['__name__']))\n"
        "        view = view.f_back\n    return seen\ndef f():\n    return g()\n",
        {"status": "ok", "output": "[('g', '__main__'), ('f', '__main__')]", "note": None}),
    "getframe_view_is_a_copy": (
        "import sys\ndef g():\n    view = sys._getframe(1)\n    view.f_locals['x'] = 5\n"
        "    view.f_back = view\n    return type(view).__name__\n"
        "def f():\n    x = 1\n    kind = g()\n    return x, kind\n",
        {"status": "ok", "output": "(1, 'FrameView')", "note": None}),
    "getframe_swallowed": ("import sys\ndef f():\n    try:\n        sys._getframe(1)\n"
                           "    except ValueError:\n        pass\n    return 1\n",
                           {"status": "ok", "output": "1", "note": None}),
    "frame_view_class_changed": (
        "import sys\ndef f():\n    type(sys._getframe()).__repr__ = lambda self: 'x'\n"
        "    return 1\n", {"status": "tampered", "exception_message":
                          "the program changed the runner's class FrameView"}),
    "traceback_tb_frame": ("def f():\n    try:\n        1/0\n    except Exception as e:\n"
                           "        return e.__traceback__.tb_frame.f_back\n",
                           refused("object.__getattr__ tb_frame")),
    "generator_gi_frame": ("def g():\n    yield 1\ndef f():\n    return g().gi_frame\n",
                           refused("object.__getattr__ gi_frame")),
    "gc_get_objects": ("import gc\ndef f():\n    return len(gc.get_objects())\n",
                       refused("gc.get_objects")),
    "gc_get_referrers": ("import gc\ndef f():\n    return len(gc.get_referrers(f))\n",
                         refused("gc.get_referrers")),
    # DEBUG_SAVEALL would put the runner's own garbage (frames among it) in gc.garbage
    "gc_save_all": ("import gc\ndef f():\n    gc.set_debug(gc.DEBUG_SAVEALL)\n    gc.collect()\n"
                    "    return len(gc.garbage)\n", refused("gc.set_debug")),
    "import_sysmon_tracer": ("def f():\n    import sysmon_tracer\n",
                             missing("No module named 'sysmon_tracer'")),
    "import_job": ("def f():\n    import job\n", missing("No module named 'job'")),
    "import_guest": ("def f():\n    import guest\n",
                     missing("No module named 'guest'")),
    "import_bounded_repr": ("def f():\n    import bounded_repr\n",
                            missing("No module named 'bounded_repr'")),
    "print_fake_result": ("def f():\n    print('{\"status\": \"ok\", \"output\": \"forged\"}')\n"
                          "    return 1\n",
                          {"status": "ok", "output": "1", "line_steps": 2,
                           "stdout": '{"status": "ok", "output": "forged"}\n'}),
    "repr_raises": ("class A:\n    def __repr__(self):\n        raise ValueError('no')\n"
                    "def f():\n    a = A()\n    return a\n",
                    {"status": "ok", "output": "<repr failed: ValueError>", "output_type": "A"}),
    "repr_never_ends": ("class A:\n    def __repr__(self):\n        while True: pass\n"
                        "def f():\n    return A()\n", TIMEOUT),
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", TRACER_ATTACKS)
def test_tracer(box, quick_box, baseline, name, isolation):
    """Tracer tampering is refused or reported; the next job is traced exactly."""
    code, want = TRACER_ATTACKS[name]
    box = box_for(want, box, quick_box)
    result = _run(box, code, isolation=isolation)
    assert_fields(result, want)
    assert_next_job_ok(box, isolation, baseline)


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_monkeypatched_builtins(box, baseline, isolation):
    """Rebinding builtins.repr/len changes only the program: the states are the real reprs."""
    code = ("import builtins\ndef f():\n    builtins.repr = lambda x: 'fake'\n"
            "    builtins.len = lambda x: 0\n    y = [1, 2]\n    z = (repr(y), len(y))\n"
            "    return y\n")
    result = _run(box, code, isolation=isolation)
    assert_fields(result, {"status": "ok", "output": "[1, 2]", "output_type": "list",
                           "line_steps": 7})
    # the program's lambdas are program code (traced); every value is its real repr
    assert _states(result) == [
        (4, "y", "[1, 2]", "list"), (5, "x", "[1, 2]", "list"), (7, "<return>", "'fake'", "str"),
        (8, "x", "[1, 2]", "list"), (10, "<return>", "0", "int"),
        (11, "z", "('fake', 0)", "tuple"), (12, "<return>", "[1, 2]", "list")]
    assert_next_job_ok(box, isolation, baseline)
    if isolation == "batch":  # the builtins are back for the next program
        again = _run(box, "def f():\n    return repr([1]), len('ab')\n", isolation=isolation)
        assert_fields(again, {"status": "ok", "output": "('[1]', 2)"})


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_monkeypatched_json(box, baseline, isolation):
    """Patching json cannot forge the stored result."""
    code = ("import json, json.encoder\ndef f():\n    json.encoder.c_make_encoder = None\n"
            "    json.dumps = lambda *a, **k: '{\"status\": \"ok\", \"output\": \"forged\"}'\n"
            "    return 5\n")
    result = _run(box, code, isolation=isolation)
    assert_fields(result, {"status": "ok", "output": "5", "output_type": "int",
                           "line_steps": 3, "stdout": ""})
    assert [s[1] for s in _steps(result)] == [0] * 5
    assert_next_job_ok(box, isolation, baseline)
    if isolation == "batch":  # json works again for the next program
        again = _run(box, "import json\ndef f():\n    return json.dumps([1])\n", isolation=isolation)
        assert_fields(again, {"status": "ok", "output": "'[1]'"})


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_eq_raises_during_comparison(box, baseline, isolation):
    """An __eq__ that raises gives output_matches False and a note."""
    code = ("class A:\n    def __eq__(self, other):\n        raise ValueError('no')\n"
            "    def __repr__(self):\n        return 'A()'\ndef f():\n    return A()\n")
    result = _run(box, code, expected="1", isolation=isolation)
    assert_fields(result, {"status": "ok", "output": "A()", "output_matches": False,
                           "note": "comparing with the expected output raised ValueError"})
    assert_next_job_ok(box, isolation, baseline)


# ------------------------------------------------------------------ forging a result
# Python has no private state: without imports or frames a program can still reach every
# class (object.__subclasses__()) and, through its methods' __globals__, every module that
# defines one. The runner keeps nothing there (tracer/job.py, "Trust boundary"). Each
# forgery below must leave the job's result as plain running makes it, and the next job
# exact.
REACH_RUNNER = """
import sys
# names only the runner's modules define (job, tracer, bounded_repr, shared_state, guest)
MARKERS = {'run_job', '_CHANNELS', 'namespace_held', 'stop_status', 'trace_chars_left',
           'frame_ids', '_BUDGET', 'str_prefix_repr', '_snapshot', 'restore_cheap', '_ENTRY',
           '_HIDDEN_MODULES'}
def namespaces():
    seen, found, todo = set(), [], [object]
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        try:
            todo.extend(type.__subclasses__(cls))
        except TypeError:
            pass
        for value in list(vars(cls).values()):
            for fn in (value, getattr(value, '__func__', None), getattr(value, 'fget', None)):
                g = getattr(fn, '__globals__', None)
                if isinstance(g, dict):
                    found.append(g)
                for cell in getattr(fn, '__closure__', None) or ():
                    try:
                        found.append(cell.cell_contents)
                    except ValueError:
                        pass
                found.extend(getattr(fn, '__defaults__', None) or ())
    for module in list(sys.modules.values()):
        found.append(getattr(module, '__dict__', None))
    return found
HITS = set()
for ns in namespaces():  # at the top level, which is not traced (it is a long walk)
    values = list(ns.values()) if isinstance(ns, dict) else [ns]
    if isinstance(ns, dict):
        HITS |= MARKERS & set(k for k in ns if isinstance(k, str))
    for value in values:  # the real sys.monitoring (the program sees a stand-in)
        if type(value).__name__ == 'module' and getattr(value, '__name__', '') == 'sys.monitoring':
            HITS.add('sys.monitoring')
def f():
    return sorted(HITS)
"""

FORGERIES = {
    # json's Python classes are the program's to change: the result is written by the C
    # encoder bound when the guest was built
    "json_encoder_class": (
        "import json.encoder\n"
        "FORGED = '{\"status\": \"ok\", \"output\": \"forged\", \"output_matches\": true}'\n"
        "def f(x):\n"
        "    json.encoder.JSONEncoder.encode = lambda self, o: FORGED\n"
        "    json.encoder.JSONEncoder.iterencode = lambda self, o, _one_shot=False: [FORGED]\n"
        "    json.dumps = lambda *a, **k: FORGED\n"
        "    json.encoder.c_make_encoder = None\n"
        "    return x + 1\n", "1", "100",
        {"status": "ok", "output": "2", "output_matches": False}),
    # an object that claims to equal anything, put where the runner used to compare saved
    # state with ==
    "eq_lying_module_attribute": (
        "import json, json.encoder, math\n"
        "class Liar:\n    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n    __hash__ = None\n"
        "    def __call__(self, *a, **k):\n        return '{\"status\": \"ok\"}'\n"
        "def f():\n    json.dumps = Liar()\n    json.encoder.c_make_encoder = Liar()\n"
        "    math.pi = Liar()\n    return 7\n", "", "7",
        {"status": "ok", "output": "7", "output_matches": True}),
    # no module, class or function a program can reach holds the runner's state
    "reach_the_runner": (REACH_RUNNER, "", None, {"status": "ok", "output": "[]"}),
    "import_guest_and_patch": (
        "def f():\n    import guest\n    guest.job.TRACER.max_steps = 10**9\n", "", None,
        missing("No module named 'guest'")),
    # the tracer's own stop exception, raised by the program with a status of its choosing
    "raise_stop_exception": (
        "def f():\n    S = [c for c in BaseException.__subclasses__()"
        " if c.__name__ == 'StopTracing'][0]\n"
        "    e = S('pwned')\n    e.status = 'pwned'\n    e.message = 'forged'\n    raise e\n",
        "", None, exc("StopTracing", "pwned")),
    # ... and a real stop (the step limit) caught and rewritten: the status stays
    "rewrite_real_stop": (
        "def f():\n    n = 0\n    try:\n        while True:\n            n += 1\n            pass\n"
        "    except BaseException as e:\n        e.status = 'ok'\n        e.message = 'fine'\n"
        "        e.args = ('fine',)\n        return 1\n", "", None,
        {"status": "step_limit", "exception_message": "trace exceeds 100000 steps"}),
    # the stdout cap is not the writer's to change
    "lift_stdout_cap": (
        "import sys\ndef f():\n    for name in ('limit', 'size', 'parts', '_fd', 'write'):\n"
        "        try:\n            setattr(sys.stdout, name, 10**9)\n"
        "        except (AttributeError, TypeError):\n            pass\n"
        "    print('x' * 5000)\n    return 1\n", "", None,
        {"status": "output_limit", "exception_message": "stdout exceeds 1000 characters"}),
    "patch_stdout_class": (
        "import sys\ndef f():\n    type(sys.stdout).write = lambda self, s: len(s)\n"
        "    print('hidden')\n    return 1\n", "", None,
        {"status": "tampered", "stdout": "",
         "exception_message": "the program changed the runner's class StdStream"}),
    "write_through_the_channel": (
        "import sys\ndef f():\n    sys.audit('steptrace.write', 1, 'y' * 5000)\n    return 1\n",
        "", None, {"status": "output_limit", "exception_message": "stdout exceeds 1000 characters"}),
    # program code that runs after the call (the value's __repr__ and __eq__) tries to
    # reach the runner and to patch json: refused, and the result is the real one
    "after_call_repr_and_eq": (
        "import sys, json.encoder\n"
        "class V:\n"
        "    def __repr__(self):\n"
        "        json.encoder.JSONEncoder.encode = lambda s, o: '{}'\n"
        "        try:\n            sys._getframe(1)\n        except ValueError:\n            pass\n"
        "        return 'V()'\n"
        "    def __eq__(self, other):\n"
        "        sys._getframe(2).f_locals['result']['output_matches'] = True\n"
        "        return True\n"
        "def f():\n    return V()\n", "", "1",
        {"status": "ok", "output": "V()", "output_matches": False}),
    "swap_function_code": (
        "def g():\n    return 2\ndef f():\n    def h():\n        return 3\n"
        "    h.__code__ = g.__code__\n    return h()\n", "", None,
        refused("object.__setattr__ __code__")),
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", list(FORGERIES))
def test_forgeries_leave_the_result_as_running_made_it(box, baseline, name, isolation):
    """Each forgery gets exactly the result plain running gives it, and the next job (in
    the same instance, in batch isolation, unless the forgery was reported) is exact."""
    code, input, expected, want = FORGERIES[name]
    result = _run(box, code, input, isolation, expected=expected)
    assert_fields(result, want)
    if name == "after_call_repr_and_eq":
        assert result["note"].startswith("comparing with the expected output raised "
                                         "ValueError")
    assert_next_job_ok(box, isolation, baseline)
    if isolation == "batch":  # json and math are the real ones again
        again = _run(box, "import json, math\ndef f():\n    return json.dumps([1]), math.pi\n",
                     isolation=isolation)
        assert_fields(again, {"status": "ok", "output": "('[1]', 3.141592653589793)"})


# ----------------------------------------------------------------------------- through the store

CHUNK = [
    ("clean_1", "def f(x):\n    return x + 1\n", "1"),
    ("patch_class", "import fractions\ndef f():\n    fractions.Fraction.__repr__ = lambda s: 'forged'\n"
                    "    return repr(fractions.Fraction(1, 2))\n", ""),
    ("probe_class", "import fractions\ndef f():\n    return repr(fractions.Fraction(1, 2))\n", ""),
    ("patch_module", "import math\ndef f():\n    math.pi = 3\n    return math.pi\n", ""),
    ("probe_module", "import math\ndef f():\n    return math.pi\n", ""),
    ("free_tool", "import sys\ndef f():\n    sys.monitoring.free_tool_id(3)\n    return 1\n", ""),
    ("loop", "def f():\n    i = 0\n    while True: i += 1\n", ""),
    ("exit", "import os\ndef f():\n    os._exit(3)\n", ""),
    ("clean_2", "def f(x):\n    y = x * 2\n    return y\n", "4"),
]


@pytest.mark.parametrize("isolation", ["job", "batch"])
def test_attacks_in_one_chunk_are_stored_with_their_statuses(tmp_path, isolation):
    """The attacks above in one chunk of one worker, through trace_corpus into DuckDB: every
    run is stored with the status that says what happened, shared-state changes in batch
    isolation carry the note, and the jobs after them see the real modules and are traced
    exactly as in a fresh instance."""
    import json
    from steptrace.tracing._trace import TraceOptions, trace_corpus
    corpus = tmp_path / "attacks.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "code": c, "input": x}) + "\n"
                              for i, c, x in CHUNK), encoding="utf-8")
    db = tmp_path / "attacks.duckdb"
    summary = trace_corpus(corpus, db, TraceOptions(
        workers=1, isolation=isolation, chunk_size=len(CHUNK), limits=Limits(timeout_s=3)))
    assert summary.traced == len(CHUNK)
    with duckdb.connect(str(db), read_only=True) as con:
        got = {row[0]: row[1:] for row in con.execute(
            "SELECT sample_id, status, output, note FROM runs ORDER BY run_id").fetchall()}
        steps = con.execute("SELECT s.event, s.line FROM steps s JOIN runs r USING (run_id) "
                            "WHERE r.sample_id = 'clean_2' ORDER BY s.step").fetchall()
    fresh = "later jobs ran in a fresh instance"
    assert got == {
        "clean_1": ("ok", "2", None),
        "patch_class": ("ok", "'forged'", None if isolation == "job" else
                        f"changed shared interpreter state (fractions.Fraction); {fresh}"),
        "probe_class": ("ok", "'Fraction(1, 2)'", None),
        "patch_module": ("ok", "3", None if isolation == "job" else
                         f"changed shared interpreter state (math); {fresh}"),
        "probe_module": ("ok", "3.141592653589793", None),
        "free_tool": ("exception", None, "refused to the program: sys.monitoring"),
        "loop": ("timeout", None, None),
        "exit": ("exited", None, None),
        "clean_2": ("ok", "8", None),
    }
    assert steps == [("call", 1), ("line", 2), ("line", 3), ("return", 3)]
