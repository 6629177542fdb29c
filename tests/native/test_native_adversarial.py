"""The adversarial suite against the native backend (slow): programs that try to reach the
host's files, network (loopback too), processes and signals, /proc and /sys, to ptrace,
to fork without end, to exhaust memory and disk, to block, to leave something for the next
job, or to forge their result. Each gets its exact status (and exception), nothing
escapes (the host's files, listener and processes are checked), and the next job in the
same sandbox runs and is traced exactly as in a fresh one.

What stops each (docs/guides/sandbox.md, the native backend's security model): the jail's
mounts (no host path but the read-only interpreter, system libraries and runner; a scratch
tmpfs), its namespaces (no network, its own pids), seccomp (sockets, processes, signals,
ptrace, mounts refused with EPERM; another architecture's calls kill the process, SIGSYS),
rlimits (address space, file size, CPU) and the fork server's time limit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from helpers.traces import assert_next_job_exact
from steptrace.native_sandbox import NativeSandbox, find_python, prepare
from steptrace.sandbox._limits import Limits

pytestmark = pytest.mark.slow

EPERM = ("PermissionError", "[Errno 1] Operation not permitted")
EPERM_CALL = ("ok", None, None, "(-1, 1)")  # a libc call through ctypes: -1, errno EPERM
LIBC = "import ctypes\n\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"


@pytest.fixture(scope="module")
def guest():
    return prepare(find_python(None, "3.13"))


@pytest.fixture(scope="module")
def box(guest):
    """Small limits but a time limit no job gets near: a job meant to hit the memory or
    disk limit must hit it, however busy the machine."""
    with NativeSandbox(Limits(timeout_s=60.0, memory_mb=256, max_stdout=1000), guest) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def quick_box(guest):
    """A 1 s time limit, for the jobs that can only end by time (nothing races it)."""
    with NativeSandbox(Limits(timeout_s=1.0, memory_mb=256, max_stdout=1000), guest) as sandbox:
        yield sandbox


def attack(box, code: str, input: str = "") -> tuple:
    result = box.run({"code": code, "input": input}).result
    return (result["status"], result.get("exception_type"), result.get("exception_message"),
            result.get("output"))


def raised(kind: str, message: str) -> tuple:
    return ("exception", kind, message, None)


# ------------------------------------------------------------------ files, /proc, /sys
def test_the_host_file_system_is_out_of_reach(box, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    home_file = os.path.expanduser("~/.steptrace-native-test-secret")
    stdlib = find_python(None, "3.13").stdlib
    cases = {
        f"open({str(secret)!r}).read()": raised(
            "FileNotFoundError", f"[Errno 2] No such file or directory: {str(secret)!r}"),
        f"open({str(secret)!r}, 'w')": raised(
            "FileNotFoundError", f"[Errno 2] No such file or directory: {str(secret)!r}"),
        f"open({home_file!r}, 'w')": raised(
            "OSError", f"[Errno 30] Read-only file system: {home_file!r}"),
        "open('/etc/passwd').read()": raised(
            "FileNotFoundError", "[Errno 2] No such file or directory: '/etc/passwd'"),
        f"open({os.getcwd() + '/README.md'!r}).read()": raised(
            "FileNotFoundError",
            f"[Errno 2] No such file or directory: {os.getcwd() + '/README.md'!r}"),
        "open('/usr/lib/x', 'w')": raised(
            "OSError", "[Errno 30] Read-only file system: '/usr/lib/x'"),
        "open('/steptrace/runner/job.py', 'a')": raised(
            "OSError", "[Errno 30] Read-only file system: '/steptrace/runner/job.py'"),
        "open(__import__('os').__file__, 'a')": raised(
            "OSError", f"[Errno 30] Read-only file system: {os.path.join(stdlib, 'os.py')!r}"),
        "sorted(__import__('os').listdir('/'))": (
            "ok", None, None, "['dev', 'etc', 'lib', 'lib64', 'root', 'steptrace', 'tmp', 'usr']"),
        "__import__('os').listdir('/etc')": ("ok", None, None, "['ld.so.cache']"),
        "__import__('os').listdir('/root')": ("ok", None, None, "['.pyenv']"),
        "__import__('os').listdir('/proc')": raised(
            "FileNotFoundError", "[Errno 2] No such file or directory: '/proc'"),
        "open('/proc/self/mem', 'rb')": raised(
            "FileNotFoundError", "[Errno 2] No such file or directory: '/proc/self/mem'"),
        "__import__('os').listdir('/sys')": raised(
            "FileNotFoundError", "[Errno 2] No such file or directory: '/sys'"),
        "open('/dev/tty', 'w')": raised(
            "OSError", "[Errno 6] No such device or address: '/dev/tty'"),
        "__import__('os').chroot('/tmp')": raised(
            "PermissionError", "[Errno 1] Operation not permitted: '/tmp'"),
    }
    for expression, expected in cases.items():
        assert attack(box, f"def f():\n    return {expression}\n") == expected, expression
    assert secret.read_text() == "host secret"
    assert not os.path.exists(home_file)
    assert_next_job_exact(box, "job")


def test_the_interpreters_own_packages_are_hidden(box):
    assert attack(box, "import pip\n\ndef f():\n    return 1\n") == (
        "missing_module", "ModuleNotFoundError", "No module named 'pip'", None)
    site = os.path.join(find_python(None, "3.13").prefix, "lib", "python3.13", "site-packages")
    assert attack(box, f"import os\n\ndef f():\n    return os.listdir({site!r})\n") == (
        "ok", None, None, "[]")
    assert attack(box, "import os\n\ndef f():\n    return dict(os.environ)\n") == (
        "ok", None, None, "{'PYTHONHASHSEED': '0', 'OPENBLAS_NUM_THREADS': '1', "
        "'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1', 'NUMEXPR_NUM_THREADS': '1', "
        "'LANG': 'C.UTF-8', 'PWD': '/tmp'}")


# ------------------------------------------------------------------ network
@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    yield server
    server.close()


def test_no_network_not_even_loopback(box, listener):
    port = listener.getsockname()[1]
    cases = [
        (f"import socket\n\ndef f():\n    return socket.create_connection(('127.0.0.1', {port}))\n",
         raised(*EPERM)),
        ("import socket\n\ndef f():\n    return socket.socket(socket.AF_UNIX)\n", raised(*EPERM)),
        ("import socket\n\ndef f():\n    return socket.socketpair()\n", raised(*EPERM)),
        ("import urllib.request\n\ndef f():\n    return urllib.request.urlopen("
         f"'http://127.0.0.1:{port}/')\n", raised("URLError", "<urlopen error [Errno 1] "
                                                               "Operation not permitted>")),
        (LIBC + "    return libc.syscall(41, 2, 1, 0), ctypes.get_errno()\n", EPERM_CALL),
        # io_uring could reach the network without socket(2)
        (LIBC + "    return libc.syscall(425, 1, ctypes.create_string_buffer(120)), "
                "ctypes.get_errno()\n", EPERM_CALL),
    ]
    for code, expected in cases:
        assert attack(box, code) == expected, code
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected
    assert_next_job_exact(box, "job")


# ------------------------------------------------------------------ processes, signals
@pytest.fixture
def host_process():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


def test_no_process_and_no_signal_reaches_anything(box, host_process):
    pid = host_process.pid
    cases = [
        "import os\n\ndef f():\n    return os.fork()\n",
        "import subprocess\n\ndef f():\n    return subprocess.run(['/bin/true'])\n",
        "import os, sys\n\ndef f():\n    os.execv(sys.executable, [sys.executable])\n",
        f"import os\n\ndef f():\n    os.kill({pid}, 9)\n",
        "import os\n\ndef f():\n    os.kill(1, 9)\n",  # the fork server, pid 1 of the jail
        "import os\n\ndef f():\n    os.kill(-1, 9)\n",
        "import os\n\ndef f():\n    os.killpg(0, 9)\n",
        "import os, signal\n\ndef f():\n    os.kill(os.getpid(), signal.SIGKILL)\n",
        "import signal\n\ndef f():\n    signal.raise_signal(signal.SIGTERM)\n",
        "import os\n\ndef f():\n    os.unshare(os.CLONE_NEWUSER)\n",
        "import resource\n\ndef f():\n    resource.prlimit(1, resource.RLIMIT_AS, (1, 1))\n",
    ]
    for code in cases:
        expected = raised(*EPERM)
        if "subprocess" in code:
            expected = raised("PermissionError", "[Errno 1] Operation not permitted: '/bin/true'")
        assert attack(box, code) == expected, code
    calls = {
        "libc.fork()": EPERM_CALL,
        "libc.syscall(56, 17, 0, 0, 0, 0)": EPERM_CALL,        # clone
        "libc.syscall(435, 0, 0)": EPERM_CALL,                  # clone3
        f"libc.syscall(62, {pid}, 9)": EPERM_CALL,              # kill
        f"libc.syscall(434, {pid}, 0)": EPERM_CALL,             # pidfd_open
        "libc.ptrace(16, 1, 0, 0)": EPERM_CALL,                 # PTRACE_ATTACH the server
        "libc.syscall(310, 1, 0, 0, 0, 0, 0)": EPERM_CALL,      # process_vm_readv
        "libc.mount(b'proc', b'/tmp', b'proc', 0, None)": EPERM_CALL,
        "libc.syscall(321, 0, 0, 0)": EPERM_CALL,               # bpf
    }
    for call, expected in calls.items():
        assert attack(box, LIBC + f"    return {call}, ctypes.get_errno()\n") == expected, call
    # os.system's child is never made: glibc reports the spawn's failure as exit 127
    assert attack(box, "import os\n\ndef f():\n    return os.system('true')\n") == (
        "ok", None, None, "32512")
    assert attack(box, "import threading\n\ndef f():\n    threading.Thread(target=print).start()\n"
                  ) == ("unsupported", None, "the program starts a thread; the native "
                        "backend's jail allows no threads", None)
    assert host_process.poll() is None  # alive
    assert_next_job_exact(box, "job")


def test_a_fork_bomb_stops_at_the_first_fork(box):
    code = "import os\n\ndef f():\n    n = 0\n    while True:\n        os.fork()\n        n += 1\n"
    assert attack(box, code) == raised(*EPERM)
    assert attack(box, LIBC + "    while libc.fork() != -1:\n        pass\n"
                              "    return ctypes.get_errno()\n") == ("ok", None, None, "1")
    assert_next_job_exact(box, "job")


def test_crashes_are_the_hosts_statuses(box):
    cases = {
        "import ctypes\n\ndef f():\n    return ctypes.string_at(0)\n": 11,
        # abort's SIGABRT cannot be sent (no signals): glibc ends the process by a fault
        "import os\n\ndef f():\n    os.abort()\n": 11,
        # a 32-bit system call (int 0x80): another architecture's calls kill the process
        ("import ctypes, mmap\n\ndef f():\n    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | "
         "mmap.PROT_WRITE | mmap.PROT_EXEC)\n    buf.write(b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80"
         "\\xc3')\n    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))\n"
         "    return ctypes.CFUNCTYPE(ctypes.c_int)(addr)()\n"): signal.SIGSYS,
    }
    for code, number in cases.items():
        assert attack(box, code) == (
            "crashed", None, f"the job's process ended with signal {int(number)}", None), code
        assert_next_job_exact(box, "job")


def test_a_forged_result_is_checked_as_any_result(box):
    """The job's process holds its result pipe: what it writes there is the result, checked
    by the host as every result is (a native program can forge its trace: runs are marked
    by backend, docs/guides/sandbox.md); a malformed one is refused whole."""
    code = ("import os\n\ndef f():\n    for fd in range(3, 64):\n        try:\n"
            "            os.write(fd, b'{\"status\": \"ok\"}')\n        except OSError:\n"
            "            pass\n    os._exit(0)\n")
    result = box.run({"code": code, "input": ""}).result
    assert (result["status"], result.get("output")) == ("crashed", None)
    assert result["note"].startswith("the guest's result was rejected: ")
    assert_next_job_exact(box, "job")


# ------------------------------------------------------------------ memory and disk
def test_memory_bombs(box):
    memory = ("memory_limit", "MemoryError", "MemoryError: the program ran out of memory", None)
    cases = {
        "def f():\n    return len(bytearray(4 << 30))\n": memory,
        "def f():\n    xs = []\n    while True:\n        xs.append(' ' * (1 << 20))\n": memory,
        "import ctypes\n\ndef f():\n    return len(ctypes.create_string_buffer(8 << 30))\n": memory,
        "import mmap\n\ndef f():\n    return len(mmap.mmap(-1, 8 << 30))\n": raised(
            "OSError", "[Errno 12] Cannot allocate memory"),
        "import resource\n\ndef f():\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n":
            raised("ValueError", "not allowed to raise maximum limit"),
    }
    for code, expected in cases.items():
        assert attack(box, code) == expected, code
        assert_next_job_exact(box, "job")


def test_disk_bombs_and_the_scratch_space_emptied(box):
    one_file = ("def f():\n    with open('/tmp/big', 'wb') as h:\n        for _ in range(200):\n"
                "            h.write(b'x' * (1 << 20))\n")
    assert attack(box, one_file) == raised("OSError", "[Errno 27] File too large")
    many = ("def f():\n    for i in range(100):\n        with open(f'/tmp/f{i}', 'wb') as h:\n"
            "            h.write(b'x' * (1 << 20))\n")
    assert attack(box, many) == raised("OSError", "[Errno 28] No space left on device")
    # what the bombs left is gone, the whole scratch space free again
    assert attack(box, "import os\n\ndef f():\n    return os.getcwd(), sorted(os.listdir('/tmp')), "
                       "os.listdir('.')\n") == ("ok", None, None, "('/tmp/job', ['job'], [])")
    assert attack(box, "def f():\n    with open('/tmp/fits', 'wb') as h:\n"
                       "        return h.write(b'x' * (60 << 20))\n") == (
        "ok", None, None, str(60 << 20))
    locked = ("import os\n\ndef f():\n    os.makedirs('a/b')\n    open('a/b/c', 'w').close()\n"
              "    os.chmod('a/b', 0)\n    os.chmod('a', 0)\n    return 1\n")
    assert attack(box, locked) == ("ok", None, None, "1")
    assert attack(box, "import os\n\ndef f():\n    return os.listdir('.')\n") == (
        "ok", None, None, "[]")
    assert_next_job_exact(box, "job")


# ------------------------------------------------------------------ blocking calls
def test_blocking_calls_end_at_the_time_limit(quick_box):
    timeout = ("timeout", None, "exceeded the 1 s time limit", None)
    cases = [
        "import time\n\ndef f():\n    time.sleep(100)\n",
        "import signal\n\ndef f():\n    signal.pause()\n",
        "import select\n\ndef f():\n    select.select([], [], [], 1000)\n",
        "import os\n\ndef f():\n    r, w = os.pipe()\n    os.read(r, 1)\n",
        "import threading\n\ndef f():\n    lock = threading.Lock()\n    lock.acquire()\n"
        "    lock.acquire()\n",
        "def f():\n    return sum(range(10 ** 14))\n",  # in C: no step to count
        "import signal\n\ndef f():\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
        "    return sum(range(10 ** 14))\n",
        "import ctypes\n\ndef f():\n    ctypes.CDLL(None).pause()\n",
    ]
    for code in cases:
        assert attack(quick_box, code) == timeout, code
    assert attack(quick_box, "import sys\n\ndef f():\n    return sys.stdin.read()\n") == (
        "ok", None, None, "''")
    assert_next_job_exact(quick_box, "job")


# ------------------------------------------------------------------ leaks between jobs
def test_nothing_a_job_leaves_reaches_the_next(box):
    leave = ("import os, sys, json, builtins\n\ndef f():\n    open('/tmp/leak', 'w').write('x')\n"
             "    open('leak', 'w').write('x')\n    os.environ['LEAK'] = '1'\n"
             "    json.dumps = None\n    builtins.len = None\n    sys.modules['leak'] = 1\n"
             "    sys.setrecursionlimit(50)\n    os.umask(0o777)\n    return 1\n")
    assert attack(box, leave) == ("ok", None, None, "1")
    look = ("import os, sys, json\n\ndef f():\n    return (os.path.exists('/tmp/leak'), "
            "os.listdir('.'), os.environ.get('LEAK'), json.dumps is None, len('ab'), "
            "'leak' in sys.modules, sys.getrecursionlimit() > 50, os.umask(0o22))\n")
    assert attack(box, look) == ("ok", None, None,
                                 "(False, [], None, False, 2, False, True, 18)")
    assert_next_job_exact(box, "job")


def test_a_fork_server_that_stops_answering_is_replaced(guest, monkeypatch):
    """The host's own deadline (``timeout_s + HOST_GRACE_S``, 10 s; 1 s here: the server
    never answers, stopped from the host): a fork server that does not answer has its jail
    killed, and the next job starts a new one, exact."""
    from steptrace.native_sandbox import _runtime
    assert _runtime.HOST_GRACE_S == 10.0
    monkeypatch.setattr(_runtime, "HOST_GRACE_S", 1.0)
    with NativeSandbox(Limits(timeout_s=1.0), guest) as box:
        server = box._jail.pid
        os.kill(server, signal.SIGSTOP)
        result = box.run({"code": "def f():\n    return 1\n", "input": ""}).result
        assert (result["status"], result["exception_message"]) == (
            "timeout", "exceeded the 1 s time limit: the native fork server did not answer in "
                       "time, so its jail was replaced")
        assert result.get("output") is None
        assert box._jail is None
        assert_next_job_exact(box, "job")
        assert box._jail.pid != server
