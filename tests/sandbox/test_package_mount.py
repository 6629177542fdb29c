"""The guest's package files as the host mounts them (wasm_sandbox/_package_files.py): the
guest's answer is checked like any guest output before anything is written, and the
standard guest mounts nothing. (Real packages read through the mount:
tests/sandbox/test_package_data.py.)"""

from __future__ import annotations

import base64
import json
import os
import zlib

import pytest

from steptrace.sandbox._limits import Limits
from steptrace.sandbox._package_files import (MAX_BYTES, SUBDIR, PackageFiles,
                                              PackageFilesError)
from steptrace.sandbox._runtime import Sandbox


def answer(root, files) -> str:
    return json.dumps({"root": root, "files": [
        [path, base64.b64encode(zlib.compress(data)).decode()] for path, data in files]})


def test_files_are_written_where_the_guest_will_see_them(tmp_path):
    mounted = PackageFiles(answer("/1", [("pkg/data.json", b"{}"), ("pkg/sub/x.bin", b"\0\1"),
                                         ("pkg-1.0.dist-info/METADATA", b"Name: pkg\n")]),
                           str(tmp_path))
    assert (mounted.root, mounted.host) == ("/1", str(tmp_path / SUBDIR))
    found = sorted(os.path.relpath(os.path.join(d, f), mounted.host)
                   for d, _, names in os.walk(mounted.host) for f in names)
    assert found == ["pkg-1.0.dist-info/METADATA", "pkg/data.json", "pkg/sub/x.bin"]
    assert (tmp_path / SUBDIR / "pkg" / "sub" / "x.bin").read_bytes() == b"\0\1"


@pytest.mark.parametrize("text, message", [
    ("not json", "the guest's package files are not JSON: Expecting value: line 1 column 1 "
                 "(char 0)"),
    (json.dumps([1]), "the guest's package files are not {root, files}"),
    (answer("/etc", []), "the guest's packages root '/etc' is not '/' and digits"),
    (answer("/1/../2", []), "the guest's packages root '/1/../2' is not '/' and digits"),
    (answer("/1", [("../escape", b"x")]),
     "package file '../escape': file path '../escape' may not have an empty, '.' or '..' part"),
    (answer("/1", [("/abs", b"x")]),
     "package file '/abs': file path '/abs' must be relative (files are written into the "
     "working directory, /work)"),
    (answer("/1", [("a", b"x"), ("a", b"y")]), "package file 'a': File exists"),
    (answer("/1", [("a", b"x"), ("a/b", b"y")]), "package file 'a/b': File exists"),
    (json.dumps({"root": "/1", "files": [["a", "not base64!"]]}),
     "package file 'a': Only base64 data is allowed"),
    (json.dumps({"root": "/1", "files": [["a", base64.b64encode(b"raw").decode()]]}),
     "package file 'a': Error -3 while decompressing data: incorrect header check"),
    (json.dumps({"root": "/1", "files": [["a"]]}), "a package file is not [path, base64]"),
])
def test_a_bad_answer_is_one_error_and_mounts_nothing(tmp_path, text, message):
    with pytest.raises(PackageFilesError) as caught:
        PackageFiles(text, str(tmp_path))
    assert str(caught.value) == message


def test_a_compressed_bomb_stops_at_the_bound(tmp_path):
    bomb = zlib.compress(b"\0" * (MAX_BYTES + 1), 9)
    text = json.dumps({"root": "/1", "files": [["bomb", base64.b64encode(bomb).decode()]]})
    with pytest.raises(PackageFilesError) as caught:
        PackageFiles(text, str(tmp_path))
    assert str(caught.value) == (
        f"package file 'bomb': the package files are larger than {MAX_BYTES:,} bytes")


def test_an_older_guest_and_the_standard_guest_mount_nothing(tmp_path):
    older = json.dumps({"status": "crashed", "exception_message": "unknown command"})
    assert PackageFiles(older, str(tmp_path)).root is None
    assert PackageFiles(answer(None, []), str(tmp_path)).root is None
    with Sandbox(Limits()) as box:
        assert box.package_files.root is None
        result = box.run({"code": "import os\nprint(os.path.exists('/1'), os.path.exists('/0'))",
                          "input": "", "shape": "script"}).result
        assert (result["status"], result["stdout"]) == ("ok", "False False\n")
