"""``harvest --source``: a local source tree (a plain package directory made here, a
project with a pyproject.toml, its sdist, its wheel) built with pip, locked with the wheel
in ``OUT/wheels``, scanned, checked and traced in the WASI guest against the local test
server, with exact records; every bad source one line (``HarvestError``), never a
traceback, and nothing written but what was asked."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from helpers.benchmark import function_of
from helpers.cli import assert_one_line_error, invoke, ok, rows
from helpers.openai_stub import StubServer, answer
from steptrace.benchmark._harvest import CallReport, HarvestError, HarvestOptions
from steptrace.benchmark._source import harvest_source, local_wheel, wheel_metadata
from steptrace.predictions._predict import PredictOptions
from steptrace.sandbox._packages import parse_lock

INIT = '''"""A tiny package: its functions live in a private module, re-exported here."""
from ._core import clamp, shout, unannotated

__version__ = "1.2.3"
__all__ = ["clamp", "shout", "unannotated"]
'''
CORE = '''def clamp(value: int, low: int = 0, high: int = 10) -> int:
    """The value, held between low and high."""
    if low > high:
        raise ValueError("low is above high")
    return max(low, min(value, high))


def shout(text: str) -> str:
    return text.upper() + "!"


def unannotated(x):
    return x


def _helper(x: int) -> int:
    return x
'''
PYPROJECT = '''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "Tiny_Pkg"
version = "2.0.1"

[tool.setuptools.packages.find]
include = ["tinypkg", "tinypkg.*"]
'''
SCRIPT = {
    "tinypkg.clamp": "[CALLS]\nclamp(42)\nclamp(-3, low=0, high=5)\nclamp(1, 5, 2)\n"
                     "clamp('7')\n[/CALLS]",
    "tinypkg.shout": "[CALLS]\nshout('hi')\nshout(text='ok')\n[/CALLS]",
}
RUNS = [("tinypkg.clamp", "42", "ok", "10", None, None),
        ("tinypkg.clamp", "-3, low=0, high=5", "ok", "0", None, None),
        ("tinypkg.clamp", "1, 5, 2", "exception", None, "ValueError", "low is above high"),
        ("tinypkg.shout", "'hi'", "ok", "'HI!'", None, None),
        ("tinypkg.shout", "text='ok'", "ok", "'OK!'", None, None)]


def make_package(root: Path) -> Path:
    """A plain package directory (no project file): tinypkg, version 1.2.3."""
    package = root / "tinypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(INIT)
    (package / "_core.py").write_text(CORE)
    return package


def make_sdist(root: Path, name: str = "tiny_pkg-2.0.1") -> Path:
    """An sdist of the project Tiny_Pkg 2.0.1 (pyproject.toml, the package): NAME/..."""
    project = root / "project"
    make_package(project)
    (project / "pyproject.toml").write_text(PYPROJECT)
    sdist = root / f"{name}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(project, arcname=name)
    return sdist


def stub() -> StubServer:
    return StubServer({name: answer(text) for name, text in SCRIPT.items()},
                      default=answer("[CALLS]\n[/CALLS]"), key_of=function_of)


@pytest.mark.slow  # pip builds the wheel (setuptools from the index), the guest is built
def test_a_plain_package_directory_is_built_harvested_and_traced(tmp_path):
    out = tmp_path / "harvest"
    with stub() as server:
        summary = harvest_source(out, make_package(tmp_path / "src"),
                                 PredictOptions("stub-model", base_url=server.base_url),
                                 HarvestOptions(inputs=3, workers=1))
        assert sum(server.requests.values()) == 2
    assert (summary.packages, summary.modules, summary.found, summary.reexported,
            summary.kept) == ("tinypkg==1.2.3", 2, 3, 3, 2)
    assert summary.rejected == {"annotation missing": 1}
    assert summary.calls == CallReport(lines=6, inputs=5, type_mismatch=1)
    assert summary.checked == {"error": 1, "ok": 4}
    assert summary.traced == {"exception": 1, "ok": 4}
    # no upload time: the index's tinypkg (if any) is not this code
    assert summary.released == {"tinypkg": None}
    assert summary.notes == ["no upload time for tinypkg: built from a local source "
                             "(--released FILE gives one)"]
    assert sorted(p.name for p in (out / "wheels").iterdir()) == [
        "tinypkg-1.2.3-py3-none-any.whl"]
    lock = parse_lock((out / "guest.lock").read_text())
    assert (lock.find_links, [(p.name, p.version) for p in lock.packages], lock.imports) == (
        str((out / "wheels").resolve()), [("tinypkg", "1.2.3")], ("tinypkg",))
    records = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [{k: r[k] for k in ("id", "entry", "module", "defined_in", "distribution",
                               "version", "released", "inputs", "model_written")}
            for r in records] == [
        {"id": "tinypkg.clamp", "entry": "clamp", "module": "tinypkg",
         "defined_in": "tinypkg._core", "distribution": "tinypkg", "version": "1.2.3",
         "released": None, "inputs": ["42", "-3, low=0, high=5", "1, 5, 2"],
         "model_written": "inputs"},
        {"id": "tinypkg.shout", "entry": "shout", "module": "tinypkg",
         "defined_in": "tinypkg._core", "distribution": "tinypkg", "version": "1.2.3",
         "released": None, "inputs": ["'hi'", "text='ok'"], "model_written": "inputs"}]
    assert records[1]["code"] == ("def shout(text: str) -> str:\n"
                                  "    return text.upper() + '!'\n".replace("'!'", '"!"'))
    assert rows(out / "store.duckdb", "SELECT sample_id, input, status, output, "
                "exception_type, exception_message FROM runs ORDER BY run_id") == RUNS


@pytest.mark.slow  # pip builds the wheel from the sdist, the guest is built
def test_an_sdist_and_its_wheel_are_harvested_with_the_listed_release_time(tmp_path):
    sdist = make_sdist(tmp_path)
    released = tmp_path / "released.txt"
    released.write_text("tiny-pkg==2.0.1 2026-03-04T05:06:07Z\n")
    out = tmp_path / "from-sdist"
    with stub() as server:
        done = json.loads(ok("harvest", "--source", sdist, "--model", "stub-model",
                             "--base-url", server.base_url, "--inputs", 3, "--out", out,
                             "--released", released, "--workers", 1, "--quiet",
                             "--format", "json"))
    assert (done["packages"], done["found"], done["kept"], done["checked"],
            done["traced"], done["released"], done["notes"]) == (
        "tiny-pkg==2.0.1", 3, 2, {"error": 1, "ok": 4}, {"exception": 1, "ok": 4},
        {"tiny-pkg": "2026-03-04T05:06:07Z"}, [])
    records = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [(r["id"], r["distribution"], r["version"], r["released"]) for r in records] == [
        ("tinypkg.clamp", "tiny-pkg", "2.0.1", "2026-03-04T05:06:07Z"),
        ("tinypkg.shout", "tiny-pkg", "2.0.1", "2026-03-04T05:06:07Z")]
    assert rows(out / "store.duckdb", "SELECT sample_id, input, status, output, "
                "exception_type, exception_message FROM runs ORDER BY run_id") == RUNS
    assert rows(out / "store.duckdb", "SELECT DISTINCT json_extract_string(meta, "
                "'$.released') FROM programs") == [("2026-03-04T05:06:07Z",)]
    # the wheel it built, given as the source: the same functions (not traced here)
    wheel = next((out / "wheels").iterdir())
    again = tmp_path / "from-wheel"
    with stub() as server:
        done = json.loads(ok("harvest", "--source", wheel, "--model", "stub-model",
                             "--base-url", server.base_url, "--inputs", 3, "--out", again,
                             "--released", "none", "--no-trace", "--quiet", "--format",
                             "json"))
    assert (done["packages"], done["kept"], done["calls"]["inputs"]) == (
        "tiny-pkg==2.0.1", 2, 5)
    assert wheel_metadata(next((again / "wheels").iterdir())) == ("tiny-pkg", "2.0.1")


# ------------------------------------------------------------------ bad sources
def tarball(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for info, data in members:
            archive.addfile(info, None if data is None else io.BytesIO(data))
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x = 1\n",
           link: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


def test_bad_sources_are_one_line_errors(tmp_path):
    """Each bad source is one HarvestError line (the CLI: 'Error: ...', exit 1), before
    anything runs; an sdist's members are checked before any is unpacked."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("no Python here")
    odd = tmp_path / "bad-name"
    odd.mkdir()
    (odd / "__init__.py").write_text("")
    cases = {
        tmp_path / "missing": "does not exist",
        plain: "is not a Python project (no pyproject.toml, setup.py, setup.cfg) nor a "
               "package (no __init__.py)",
        odd: "a package directory's name must be a Python identifier, not 'bad-name'",
        tmp_path / "notes.txt": "is not a directory, an sdist (.tar.gz, .tgz) or a wheel "
                                "(.whl)",
        tarball(tmp_path / "up.tar.gz", [member("p-1/setup.py"), member("p-1/../../evil.py")]):
            "member 'p-1/../../evil.py' would be unpacked outside its directory",
        tarball(tmp_path / "abs.tar.gz", [member("/etc/evil.py")]):
            "member '/etc/evil.py' would be unpacked outside its directory",
        tarball(tmp_path / "sym.tar.gz", [member("p-1/setup.py"),
                                          member("p-1/link", tarfile.SYMTYPE, link="/etc")]):
            "member 'p-1/link' is a link (an sdist's members are files and directories)",
        tarball(tmp_path / "hard.tar.gz", [member("p-1/setup.py"),
                                           member("p-1/h", tarfile.LNKTYPE, link="p-1/setup.py")]):
            "member 'p-1/h' is a link (an sdist's members are files and directories)",
        tarball(tmp_path / "dev.tar.gz", [member("p-1/null", tarfile.CHRTYPE)]):
            "member 'p-1/null' is not a file (an sdist's members are files and directories)",
        tarball(tmp_path / "two.tar.gz", [member("a-1/setup.py"), member("b-1/setup.py")]):
            "an sdist holds one top directory (NAME-VERSION/); this one holds 2 entries",
        tmp_path / "x-1-py3-none-any.whl": "is not a readable wheel: File is not a zip file",
        tmp_path / "wheel.whl": "is not a wheel's file name (NAME-VERSION-PYTHON-ABI-"
                                "PLATFORM.whl)",
    }
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "x-1-py3-none-any.whl").write_bytes(b"not a zip")
    (tmp_path / "wheel.whl").write_bytes(b"")
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not gzip at all")
    for source, message in cases.items():
        with pytest.raises(HarvestError) as raised:
            local_wheel(source, tmp_path / "wheels")
        text = str(raised.value)
        shown = source.name if source.suffix == ".whl" else source
        assert text == f"--source {shown}: {message}" or text == f"--source {shown} {message}", (
            source, text)
        assert "\n" not in text
        assert not (tmp_path / "evil.py").exists() and not (tmp_path / "wheels").exists()
    with pytest.raises(HarvestError, match=r"^--source .*garbage.tar.gz is not a readable "
                                           r"sdist: "):
        local_wheel(garbage, tmp_path / "wheels")
    # through the CLI: one line, exit status 1, nothing made
    out = tmp_path / "out"
    assert_one_line_error(invoke("harvest", "--source", tmp_path / "up.tar.gz", "--model", "m",
                                 "--base-url", "http://127.0.0.1:9/v1", "--out", out),
                          f"--source {tmp_path / 'up.tar.gz'}: member 'p-1/../../evil.py' "
                          "would be unpacked outside its directory")
    assert sorted(p.name for p in out.iterdir()) == []
    # one of --with, --lock, --source; --backend not with a lock
    result = invoke("harvest", "--source", plain, "--with", "idna", "--model", "m", "--out", out)
    assert result.exit_code == 2 and "give the packages with --with, --lock or --source" in (
        result.output)
    lock = tmp_path / "in.lock"
    lock.write_text(parse_lock("idna==3.20 --hash=sha256:" + "a" * 64).text)
    result = invoke("harvest", "--lock", lock, "--backend", "native", "--model", "m",
                    "--out", out)
    assert result.exit_code == 2 and "--backend goes with --with or --source" in result.output


def test_a_build_that_fails_is_one_line(tmp_path):
    """A project whose build backend does not exist: pip's error, in one line."""
    project = tmp_path / "broken"
    make_package(project)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "no_such_backend"\n')
    with pytest.raises(HarvestError) as raised:
        local_wheel(project, tmp_path / "wheels")
    text = str(raised.value)
    assert text.startswith(f"--source {project}: pip could not build a wheel of {project}: ")
    assert "\n" not in text and not (tmp_path / "wheels").exists()


@pytest.mark.parametrize("assigned, version", [
    ('__version__ = "1.2.3"', "1.2.3"), ("__version__ = '2.0rc1+local'", "2.0rc1+local"),
    ('__version__ = "1\\"\\nname = \\"evil"', "0"), ('__version__ = "dev"', "0"),
    ("__version__ = VERSION", "0"), ("", "0"), ("def f(:", "0")])
def test_a_plain_package_is_made_a_project_named_and_versioned_from_its_files(
        tmp_path, assigned, version):
    """The project made around a plain package (read, never imported): the directory's
    name, the ``__version__`` string when it looks like a version, else 0 (nothing it
    holds reaches the pyproject.toml but a version's characters)."""
    from steptrace.benchmark._source import PLAIN_PROJECT, _project
    package = make_package(tmp_path / "src")
    (package / "__init__.py").write_text(assigned + "\n")
    project = _project(package, tmp_path / "work")
    assert (project / "pyproject.toml").read_text() == PLAIN_PROJECT.format(
        name="tinypkg", version=version)
    assert sorted(p.name for p in (project / "tinypkg").iterdir()) == ["__init__.py",
                                                                       "_core.py"]


def test_an_sdist_made_with_a_dot_entry_unpacks_to_its_top_directory(tmp_path):
    """``tar -C dir .`` writes a ``./`` entry first: the directory itself, not a member
    outside it; the files under ``./p-1/`` unpack there."""
    from steptrace.benchmark._source import _unpack
    sdist = tarball(tmp_path / "dot.tar.gz", [member("./", tarfile.DIRTYPE),
                                               member("./p-1/", tarfile.DIRTYPE),
                                               member("./p-1/setup.py")])
    top = _unpack(sdist, tmp_path / "unpacked")
    assert top == tmp_path / "unpacked" / "p-1"
    assert (top / "setup.py").read_text() == "x = 1\n"
