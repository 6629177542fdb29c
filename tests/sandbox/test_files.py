"""The job's own file system (wasm_sandbox/_files.py): /work and /tmp, what a job may do in
them, what is recorded, the byte, file and depth bounds (status ``file_limit``), nothing
of one job visible to the next in either isolation, and no host path reachable.

Every job runs through the real sandbox; the host side (the sandbox's directory, host
files next to it) is checked on the host. Statuses that depend on the ticker's timing are
never asserted: a job over a bound is ``file_limit`` whether the ticker or the job's end
sees it, because the programs here stay over the bound until they end.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from steptrace.sandbox._files import (CONTENT_CAP, MAX_DEPTH, RUN_CONTENT_CAP, FileBounds,
                                      JobFiles, check_path)
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._pool import WorkerPool
from steptrace.sandbox._runtime import Sandbox
from steptrace.errors import InputError

MAX_BYTES = 200_000
MAX_FILES = 40
LIMITS = Limits(timeout_s=60.0, memory_mb=128, max_file_bytes=MAX_BYTES, max_files=MAX_FILES)
ISOLATIONS = ("job", "batch")


@pytest.fixture(scope="module")
def box():
    with Sandbox(LIMITS) as sandbox:
        yield sandbox


@pytest.fixture(autouse=True)
def _collect_trapped_instances():
    gc.collect()
    yield
    gc.collect()


def script(box, code: str, isolation: str = "job", **request):
    """Run ``code`` as a script; the outcome (result, fresh instance)."""
    outcome = box.run({"code": textwrap.dedent(code), "input": "", "shape": "script",
                       **request}, isolation)
    return outcome.result, outcome.fresh_instance


def recorded(result: dict) -> list[tuple]:
    files = result.get("files")
    if files is None:
        return []
    return list(zip(files["path"], files["kind"], files["size"], files["sha256"],
                    files["content"], files["truncated"], files["utf8"]))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_empty(box) -> None:
    """The sandbox's directories hold nothing between jobs."""
    for host in box.files.hosts:
        assert os.listdir(host) == []


# ---------------------------------------------------------------------- what a job can do
OPERATIONS = """
    import os, pathlib
    print(os.getcwd(), sorted(os.listdir('.')), sorted(os.listdir('/tmp')))
    with open('a.txt', 'w') as f:
        f.write('alpha\\n')
    pathlib.Path('sub/deeper').mkdir(parents=True)
    pathlib.Path('sub/deeper/b.bin').write_bytes(bytes([0, 255, 1, 254]))
    with open('/tmp/scratch.txt', 'w') as f:
        f.write('scratch')
    print(sorted(os.listdir('.')), open('a.txt').read().strip())
    os.rename('a.txt', 'renamed.txt')
    os.replace('/tmp/scratch.txt', 'moved.txt')
    with open('renamed.txt', 'a') as f:
        f.write('beta\\n')
    open('gone.txt', 'w').close()
    os.remove('gone.txt')
    print(sorted(os.listdir('.')), sorted(os.listdir('/tmp')), os.path.getsize('renamed.txt'))
    print(sorted(str(p) for p in pathlib.Path('.').rglob('*')))
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_write_read_list_rename_delete(box, isolation):
    """Every operation works in /work (the working directory) and /tmp, and what the job
    left is recorded exactly: path, kind, size, digest, content, UTF-8 flag."""
    result, _ = script(box, OPERATIONS, isolation)
    assert (result["status"], result["exception_message"]) == ("ok", None)
    assert result["stdout"] == (
        "/work [] []\n"
        "['a.txt', 'sub'] alpha\n"
        "['moved.txt', 'renamed.txt', 'sub'] [] 11\n"
        "['moved.txt', 'renamed.txt', 'sub', 'sub/deeper', 'sub/deeper/b.bin']\n")
    assert recorded(result) == [
        ("/work/moved.txt", "file", 7, sha(b"scratch"), b"scratch", False, True),
        ("/work/renamed.txt", "file", 11, sha(b"alpha\nbeta\n"), b"alpha\nbeta\n", False, True),
        ("/work/sub", "dir", 0, None, None, False, None),
        ("/work/sub/deeper", "dir", 0, None, None, False, None),
        ("/work/sub/deeper/b.bin", "file", 4, sha(bytes([0, 255, 1, 254])),
         bytes([0, 255, 1, 254]), False, False),
    ]
    assert_empty(box)


def test_a_job_that_touches_no_file_records_nothing(box):
    result, _ = script(box, "print(sum(range(10)))\n")
    assert (result["status"], result["stdout"], result.get("files")) == ("ok", "45\n", None)


def test_content_is_cut_at_the_cap_and_the_digest_covers_everything(box):
    """A file longer than CONTENT_CAP bytes: its first CONTENT_CAP bytes, truncated, and
    the SHA-256 of all of it; a cut inside a UTF-8 character still counts as text."""
    data = ("é" * CONTENT_CAP).encode()  # two bytes a character: the cap cuts one
    result, _ = script(box, f"open('big.txt', 'w', encoding='utf-8').write('é' * {CONTENT_CAP})\n")
    assert result["status"] == "ok"
    assert recorded(result) == [("/work/big.txt", "file", len(data), sha(data),
                                 data[:CONTENT_CAP], True, True)]


def test_a_runs_content_is_bounded_as_a_whole():
    """RUN_CONTENT_CAP bytes of content for all of a run's files (in path order): the
    files past it keep their size and digest, their content cut where the budget ended."""
    count = RUN_CONTENT_CAP // CONTENT_CAP + 2
    with Sandbox(Limits(timeout_s=60.0)) as roomy:
        result, _ = script(roomy, f"for i in range({count}):\n"
                                  f"    open(f'f{{i:02d}}', 'wb').write(bytes([i]) * {CONTENT_CAP})\n")
    assert result["status"] == "ok"
    files = recorded(result)
    assert [path for path, *_ in files] == [f"/work/f{i:02d}" for i in range(count)]
    assert [(size, digest) for _, _, size, digest, *_ in files] == [
        (CONTENT_CAP, sha(bytes([i]) * CONTENT_CAP)) for i in range(count)]
    kept = [(len(content), truncated) for *_, content, truncated, _ in files]
    assert kept == [(CONTENT_CAP, False)] * (count - 2) + [(0, True)] * 2
    assert sum(length for length, _ in kept) == RUN_CONTENT_CAP


# ---------------------------------------------------------------------- the record's files
def test_the_records_files_are_there_and_only_changes_are_recorded(box):
    """The request's files are in /work before the job (directories made for them); the
    ones it leaves unchanged, and those directories, are not recorded; a changed one and
    a new one are."""
    files = {"data/in.txt": "3\n4\n", "keep.txt": "same", "data/edit.txt": "old"}
    result, _ = script(box, """
        import os
        print(sorted(os.listdir('.')), sorted(os.listdir('data')))
        print(sum(int(line) for line in open('data/in.txt')))
        open('data/edit.txt', 'w').write('new')
        open('out.txt', 'w').write('7')
    """, files=files)
    assert result["stdout"] == "['data', 'keep.txt'] ['edit.txt', 'in.txt']\n7\n"
    assert recorded(result) == [
        ("/work/data/edit.txt", "file", 3, sha(b"new"), b"new", False, True),
        ("/work/out.txt", "file", 1, sha(b"7"), b"7", False, True)]
    assert_empty(box)


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../b", "", "a//b", "./a", "a\0b",
                                  "x" * 256])
def test_a_bad_record_path_is_refused(path):
    with pytest.raises(InputError):
        check_path(path)


def test_a_bad_record_path_that_reaches_the_sandbox_is_invalid(box):
    """A request the corpus loader would have refused: the job is invalid, nothing is
    written anywhere, and the sandbox goes on."""
    result, _ = script(box, "print(1)\n", files={"../escape.txt": "x"})
    assert result["status"] == "invalid"
    assert result["exception_message"] == "file path '../escape.txt' may not have an empty, '.' or '..' part"
    assert not (Path(box.files.root) / "escape.txt").exists()
    assert_empty(box)
    result, _ = script(box, "print(1)\n")
    assert (result["status"], result["stdout"]) == ("ok", "1\n")


# ---------------------------------------------------------------------- between jobs
LEAVE_BEHIND = """
    import os
    open('secret.txt', 'w').write('job one')
    open('/tmp/secret.txt', 'w').write('job one')
    os.mkdir('dir')
    keep = open('held.txt', 'w+')
    keep.write('held by an open descriptor')
    keep.flush()
    os.remove('held.txt')
    # kept where batch isolation's checks do not look (a module the code does not name)
    getattr(__import__('line' + 'cache'), 'cache')['stash'] = keep
    os.chdir('dir')
    print('left')
"""

LOOK = """
    import os
    stash = getattr(__import__('line' + 'cache'), 'cache').get('stash')
    text = None
    if stash is not None:
        stash.seek(0)
        text = stash.read()
    print(os.getcwd(), sorted(os.listdir('.')), sorted(os.listdir('/tmp')), text)
    for name in ('secret.txt', '/tmp/secret.txt', 'dir'):
        print(name, os.path.exists(name))
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_nothing_of_one_job_is_visible_to_the_next(box, isolation):
    """Files, directories, a descriptor kept open on a deleted file and the working
    directory: none of them reaches the next job (in batch isolation the next job runs
    in a fresh instance, because the first used the file system)."""
    first, _ = script(box, LEAVE_BEHIND, isolation)
    assert (first["status"], first["stdout"]) == ("ok", "left\n")
    assert_empty(box)
    second, fresh = script(box, LOOK, isolation)
    assert fresh is True
    assert second["stdout"] == ("/work [] [] None\n"
                                "secret.txt False\n/tmp/secret.txt False\ndir False\n")


def test_batch_keeps_its_instance_after_a_job_without_files(box):
    script(box, "print(1)\n", "batch")
    result, fresh = script(box, "print(2)\n", "batch")
    assert (result["stdout"], fresh) == ("2\n", False)
    result, fresh = script(box, "open('x', 'w').close()\n", "batch")
    assert (result["status"], fresh) == ("ok", False)
    result, fresh = script(box, "import os\nprint(os.listdir('.'))\n", "batch")
    assert (result["stdout"], fresh) == ("[]\n", True)


# ---------------------------------------------------------------------- bounds
OVER_BYTES = f"open('big', 'wb').write(b'x' * {MAX_BYTES + 1})\nprint('written')\n"
OVER_TOGETHER = (f"for i in range(3):\n    open(f'part{{i}}', 'wb').write(b'x' * {MAX_BYTES // 3 + 1})\n"
                 "print('written')\n")
OVER_FILES = f"import os\nfor i in range({MAX_FILES + 1}):\n    open(f'f{{i}}', 'w').close()\n"
OVER_DIRS = f"import os\nos.makedirs('/tmp/' + '/'.join(['d'] * {MAX_FILES + 1}))\n"
OVER_SPARSE = "f = open('sparse', 'wb')\nf.seek(10**9)\nf.write(b'x')\nf.close()\n"
FOREVER_BYTES = "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 65536)\n"
FOREVER_FILES = "i = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1\n"
BYTES_MESSAGE = f"the program's files hold more than {MAX_BYTES:,} bytes"
FILES_MESSAGE = f"the program made more than {MAX_FILES:,} files and directories"


@pytest.mark.slow  # a bound reached: seconds (a worker pool: its start)
@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("code, message", [
    (OVER_BYTES, BYTES_MESSAGE), (OVER_TOGETHER, BYTES_MESSAGE), (OVER_SPARSE, BYTES_MESSAGE),
    (FOREVER_BYTES, BYTES_MESSAGE), (OVER_FILES, FILES_MESSAGE), (OVER_DIRS, FILES_MESSAGE),
    (FOREVER_FILES, FILES_MESSAGE),
], ids=["one_file", "together", "sparse", "forever_bytes", "files", "dirs", "forever_files"])
def test_a_job_over_a_bound_ends_with_file_limit(box, code, message, isolation):
    """Over the byte or the file bound (at its end, or while it runs: the ticker ends a
    job that would write forever, within its 60 s time limit): status file_limit with
    the bound's message, nothing recorded, the directories emptied, and the next job is
    exact (in batch isolation, in a fresh instance)."""
    result, _ = script(box, code, isolation)
    assert result == {"status": "file_limit", "exception_message": message}
    assert_empty(box)
    after, fresh = script(box, "import os\nprint(os.listdir('.'), os.listdir('/tmp'))\n",
                          isolation)
    assert (after["status"], after["stdout"], fresh) == ("ok", "[] []\n", True)


@pytest.mark.slow  # a bound reached: seconds (a worker pool: its start)
def test_directories_nested_deeper_than_the_bound(box):
    """MAX_DEPTH levels: file_limit, with a limit of files high enough not to be hit
    first; the host removes the tree however deep."""
    with Sandbox(Limits(timeout_s=60.0, memory_mb=128, max_files=10_000)) as deep:
        result, _ = script(deep, f"import os\nos.makedirs('/'.join(['d'] * {MAX_DEPTH + 5}))\n")
        assert result == {"status": "file_limit", "exception_message":
                          f"the program nested directories more than {MAX_DEPTH} deep"}
        assert_empty(deep)
        result, _ = script(deep, f"import os\nos.makedirs('/'.join(['d'] * {MAX_DEPTH - 2}))\n")
        assert result["status"] == "ok"
        assert len(result["files"]["path"]) == MAX_DEPTH - 2
        assert_empty(deep)


def test_at_the_bounds_is_not_over(box):
    code = (f"open('exact', 'wb').write(b'x' * {MAX_BYTES})\n"
            f"for i in range({MAX_FILES - 1}):\n    open(f'e{{i}}', 'w').close()\n")
    result, _ = script(box, code)
    assert result["status"] == "ok"
    assert len(result["files"]["path"]) == MAX_FILES
    assert sum(result["files"]["size"]) == MAX_BYTES


def test_the_kernel_stops_one_file_at_the_bound_in_a_worker(tmp_path):
    """limit_file_size (a worker's RLIMIT_FSIZE): a write past max_file_bytes + 1 fails
    with EFBIG (not SIGXFSZ, which would kill the worker) and the file stops there."""
    target = tmp_path / "grow"
    code = textwrap.dedent(f"""
        import errno
        from steptrace.sandbox._worker import limit_file_size
        limit_file_size(1000)
        with open({str(target)!r}, 'wb', buffering=0) as f:
            assert f.write(b'x' * 5000) == 1001
            try:
                f.write(b'x')
            except OSError as exc:
                print(errno.errorcode[exc.errno])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "EFBIG\n", "")
    assert target.stat().st_size == 1001


@pytest.mark.slow  # a bound reached: seconds (a worker pool: its start)
def test_in_worker_processes_the_bounds_hold_and_the_worker_goes_on():
    """Through the worker pool (RLIMIT_FSIZE set, the pool's directories): a job that
    writes forever is file_limit, the jobs around it are exact, and the pool's
    directories are gone once it is closed."""
    requests = [{"code": "print(open('/tmp/x', 'w').write('abc'))\n", "input": "",
                 "shape": "script"},
                {"code": FOREVER_BYTES, "input": "", "shape": "script"},
                {"code": "import os\nprint(os.listdir('/tmp'))\n", "input": "", "shape": "script"}]
    with WorkerPool(1, LIMITS) as pool:
        roots = [worker.files_root for worker in pool._workers.values()]
        [(_, outcomes)] = list(pool.run([requests]))
        assert all(os.path.isdir(root) for root in roots)
    assert [o.result["status"] for o in outcomes] == ["ok", "file_limit", "ok"]
    assert outcomes[0].result["stdout"] == "3\n"
    assert outcomes[1].result["exception_message"] == BYTES_MESSAGE
    assert outcomes[2].result["stdout"] == "[]\n"
    assert not any(os.path.exists(root) for root in roots)


# ---------------------------------------------------------------------- no way out
@pytest.fixture
def host_secret(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    return secret


ESCAPES = """
    import os
    secret = {secret!r}
    def attempt(name, action):
        try:
            print(name, 'ok', repr(action())[:40])
        except OSError as exc:
            print(name, type(exc).__name__, exc.errno)
    attempt('absolute', lambda: open(secret).read())
    attempt('etc', lambda: open('/etc/passwd').read())
    attempt('root', lambda: os.listdir('/'))
    attempt('dotdot', lambda: os.listdir('..'))
    attempt('dotdot_secret', lambda: open('../' * 10 + secret[1:]).read())
    attempt('tmp_dotdot', lambda: os.listdir('/tmp/..'))
    attempt('chdir_up', lambda: os.chdir('..'))
    attempt('symlink_absolute', lambda: os.symlink(secret, 'abs'))
    attempt('symlink_relative', lambda: os.symlink('../' * 10 + secret[1:], 'rel'))
    attempt('through_symlink', lambda: open('rel').read())
    attempt('symlink_dir', lambda: os.symlink('../' * 10 + 'etc', 'etcdir'))
    attempt('through_symlink_dir', lambda: os.listdir('etcdir'))
    attempt('hardlink', lambda: os.link(secret, 'hard'))
    attempt('hardlink_etc', lambda: os.link('/etc/passwd', 'hard'))
    attempt('rename_out', lambda: os.rename('/tmp', '/tmp2'))
    attempt('rename_root', lambda: os.rename('/work', '/tmp/work'))
    attempt('rename_dot', lambda: os.rename('.', '/tmp/work'))
    attempt('write_secret', lambda: open(secret, 'w').write('pwned'))
    attempt('loop', lambda: os.symlink('loop', 'loop'))
    attempt('through_loop', lambda: open('loop').read())
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_no_host_path_is_reachable(box, host_secret, isolation):
    """Absolute and relative paths, '..' from /work and /tmp, symlinks (absolute ones are
    refused; relative ones that lead out cannot be followed), hard links and renames:
    nothing reaches the host. The host records a symlink by its target and never
    follows it; the secret file is unchanged."""
    before = (host_secret.read_bytes(), host_secret.stat().st_mtime_ns)
    result, _ = script(box, ESCAPES.format(secret=str(host_secret)), isolation)
    assert result["status"] == "ok"
    eperm, enoent = errno.EPERM, errno.ENOENT
    wasi_eperm, wasi_enoent = 63, 44  # WASI's numbers, which the guest's errno uses
    assert (eperm, enoent) != (wasi_eperm, wasi_enoent)
    assert result["stdout"].splitlines() == [
        f"absolute FileNotFoundError {wasi_enoent}",
        f"etc FileNotFoundError {wasi_enoent}",
        f"root FileNotFoundError {wasi_enoent}",
        f"dotdot PermissionError {wasi_eperm}",
        f"dotdot_secret PermissionError {wasi_eperm}",
        f"tmp_dotdot PermissionError {wasi_eperm}",
        f"chdir_up PermissionError {wasi_eperm}",
        f"symlink_absolute PermissionError {wasi_eperm}",
        "symlink_relative ok None",
        f"through_symlink PermissionError {wasi_eperm}",
        "symlink_dir ok None",
        f"through_symlink_dir PermissionError {wasi_eperm}",
        f"hardlink FileNotFoundError {wasi_enoent}",
        f"hardlink_etc FileNotFoundError {wasi_enoent}",
        f"rename_out FileNotFoundError {wasi_enoent}",
        "rename_root OSError 10",  # WASI's EBUSY: a preopened directory cannot move
        "rename_dot OSError 10",
        f"write_secret FileNotFoundError {wasi_enoent}",
        "loop ok None",
        "through_loop OSError 32",  # WASI's ELOOP
    ]
    target = ("../" * 10 + str(host_secret)[1:]).encode()
    etc = ("../" * 10 + "etc").encode()
    assert recorded(result) == [
        ("/work/etcdir", "symlink", len(etc), None, etc, False, True),
        ("/work/loop", "symlink", 4, None, b"loop", False, True),
        ("/work/rel", "symlink", len(target), None, target, False, True)]
    assert (host_secret.read_bytes(), host_secret.stat().st_mtime_ns) == before
    assert "host secret" not in result["stdout"]
    assert_empty(box)


def test_the_host_walk_never_follows_a_symlink(tmp_path):
    """JobFiles' own reads, with symlinks planted in its directories as a program could:
    measured by their own size, recorded by their target, removed without touching what
    they point at (a host file, a host directory holding files)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x" * 5000)
    files = JobFiles(FileBounds(1000, 10))
    try:
        work = Path(files.hosts[0])
        (work / "to_dir").symlink_to(outside)
        (work / "to_file").symlink_to(outside / "keep.txt")
        assert files.over() is None  # 5,000 bytes behind the links: not counted
        finished = files.finish()
        assert finished.over is None
        assert [(r.path, r.kind, r.content) for r in finished.records] == [
            ("/work/to_dir", "symlink", str(outside).encode()),
            ("/work/to_file", "symlink", str(outside / "keep.txt").encode())]
        assert os.listdir(work) == []
        assert sorted(os.listdir(outside)) == ["keep.txt"]
        assert (outside / "keep.txt").read_text() == "x" * 5000
    finally:
        files.close()
    assert not os.path.exists(files.root)


def test_a_sandboxs_own_directory_is_removed_when_it_is_closed():
    with Sandbox(LIMITS) as sandbox:
        root = sandbox.files.root
        assert sorted(os.listdir(root)) == ["tmp", "work"]
        assert os.stat(root).st_mode & 0o777 == 0o700
    assert not os.path.exists(root)
