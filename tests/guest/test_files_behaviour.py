"""The standard library on files, arguments, environment and time zones behaves in the
sandbox as in native CPython: each program here runs as a script in the sandbox (in both
isolations) and natively, in an empty working directory with the same arguments and
environment, and prints the same text.

Native is CPython 3.13 where the machine has it (closest to the guest's 3.14), else this
interpreter; the programs print nothing that differs between CPython versions or
machines (no absolute paths, no compressed sizes, no timestamps), and their zones are
ones whose rules have not changed for decades (the host's IANA data and the guest's
tzdata package agree on them).
"""

from __future__ import annotations

import textwrap

import pytest

from helpers.native_python import assert_as_native
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

PROGRAMS: dict[str, tuple[str, list[str], dict[str, str]]] = {}


def program(name: str, argv: list[str] | None = None, env: dict[str, str] | None = None):
    def register(code: str) -> str:
        PROGRAMS[name] = (textwrap.dedent(code), argv or [], env or {})
        return code
    return register


program("json")("""
    import json
    data = {"b": [1, 2.5, None, True], "a": {"x": "é", "y": []}}
    with open("data.json", "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True, ensure_ascii=False)
    with open("data.json", encoding="utf-8") as f:
        text = f.read()
    print(text)
    with open("data.json", "rb") as f:
        print(json.load(f) == data, len(text.encode()))
    try:
        json.loads(text[:-3])
    except json.JSONDecodeError as exc:
        print("error:", exc)
""")

program("csv")("""
    import csv
    rows = [{"name": "ann", "score": "3", "note": 'says "hi", twice'},
            {"name": "bob", "score": "10", "note": "line\\nbreak"}]
    with open("scores.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["name", "score", "note"])
        writer.writeheader()
        writer.writerows(rows)
    with open("scores.csv", "rb") as f:
        print(f.read())
    with open("scores.csv", newline="") as f:
        read = list(csv.DictReader(f))
    print(read == rows, sum(int(row["score"]) for row in read))
    with open("scores.csv", newline="") as f:
        print(csv.Sniffer().sniff(f.read(20)).delimiter)
""")

program("tempfile")("""
    import os, tempfile
    print(tempfile.gettempdir() == os.path.realpath("/tmp"), os.getcwd() != tempfile.gettempdir())
    with tempfile.NamedTemporaryFile("w+", suffix=".txt", prefix="t-") as f:
        f.write("named")
        f.flush()
        f.seek(0)
        name = f.name
        print(os.path.basename(name).startswith("t-"), name.endswith(".txt"), f.read(),
              os.path.dirname(name) == tempfile.gettempdir(), os.path.exists(name))
    print(os.path.exists(name))
    with tempfile.TemporaryDirectory() as d:
        for i in range(3):
            with open(os.path.join(d, f"f{i}"), "w") as f:
                f.write(str(i) * i)
        print(sorted(os.listdir(d)), [os.path.getsize(os.path.join(d, n)) for n in sorted(os.listdir(d))])
    print(os.path.exists(d))
    fd, path = tempfile.mkstemp(text=True)
    os.write(fd, b"mkstemp")
    os.close(fd)
    print(open(path).read())
    os.remove(path)
    with tempfile.TemporaryFile() as f:
        f.write(b"anonymous")
        f.seek(0)
        print(f.read())
    with tempfile.SpooledTemporaryFile(max_size=4) as f:
        f.write(b"spooled past its size")
        f.seek(0)
        print(f.read(), f._rolled)
    local = tempfile.mkdtemp(dir=".")
    print(os.path.dirname(local) == os.getcwd(), len(os.listdir(".")))
    os.rmdir(local)
""")

program("pathlib")("""
    from pathlib import Path
    root = Path("project")
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("VERSION = '1.0'\\n")
    (root / "README.md").write_text("# project\\n")
    (root / "notes.txt").write_bytes(b"a\\r\\nb\\r\\n")
    print(sorted(str(p) for p in root.rglob("*")))
    print(sorted(p.name for p in root.iterdir()), [p.name for p in root.glob("*.md")])
    print((root / "notes.txt").read_text().splitlines(), (root / "notes.txt").stat().st_size)
    moved = (root / "notes.txt").rename(root / "notes.md")
    print(moved, moved.exists(), (root / "notes.txt").exists(), moved.with_suffix(".rst").name)
    moved.unlink()
    print(sorted(p.name for p in root.iterdir()), root.is_dir(), (root / "README.md").is_file())
    print(Path.cwd() == Path(".").resolve(), (root / "src").resolve().relative_to(Path.cwd()))
    try:
        (root / "missing.txt").read_text()
    except FileNotFoundError as exc:
        print(type(exc).__name__, exc.filename)
    try:
        root.rmdir()
    except OSError as exc:
        print(type(exc).__name__)
""")

program("zipfile")("""
    import io, zipfile
    with open("input.txt", "w") as f:
        f.write("compress me " * 100)
    with zipfile.ZipFile("archive.zip", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.write("input.txt", arcname="docs/input.txt")
        z.writestr(zipfile.ZipInfo("hello.txt", date_time=(2024, 1, 2, 3, 4, 6)), "hello")
        z.writestr("empty/", "")
    with zipfile.ZipFile("archive.zip") as z:
        print(z.namelist(), z.testzip())
        for info in z.infolist():
            print(info.filename, info.file_size, info.CRC, info.is_dir(), info.compress_type)
        print(z.read("hello.txt"), len(z.read("docs/input.txt")))
        z.extractall("out")
    print(open("out/docs/input.txt").read()[:24], zipfile.is_zipfile("archive.zip"),
          zipfile.is_zipfile("input.txt"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "a") as z:
        z.writestr("m.txt", "in memory")
    print(zipfile.ZipFile(buffer).read("m.txt"))
""")

program("sqlite3")("""
    import os, sqlite3
    con = sqlite3.connect("shop.db")
    con.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    con.executemany("INSERT INTO items (name, price) VALUES (?, ?)",
                    [("apple", 1.5), ("pear", 2.25), ("fig", 0.75)])
    con.commit()
    con.close()
    con = sqlite3.connect("shop.db")
    print(con.execute("SELECT name, price FROM items ORDER BY price").fetchall())
    print(con.execute("SELECT count(*), round(sum(price), 2) FROM items").fetchone())
    try:
        with con:
            con.execute("UPDATE items SET price = price * 2")
            raise ValueError("roll back")
    except ValueError:
        pass
    print(con.execute("SELECT max(price) FROM items").fetchone())
    con.execute("CREATE INDEX by_name ON items (name)")
    con.commit()
    print(con.execute("SELECT type, name FROM sqlite_master ORDER BY name").fetchall())
    con.row_factory = sqlite3.Row
    row = con.execute("SELECT * FROM items WHERE name = ?", ("fig",)).fetchone()
    print(dict(row))
    con.close()
    print(sorted(os.listdir(".")), os.path.getsize("shop.db") % 512 == 0)
    other = sqlite3.connect("shop.db")
    other.execute("DELETE FROM items WHERE price > 1")
    other.commit()
    print(other.execute("SELECT name FROM items").fetchall())
    other.close()
""")

program("argparse", argv=["build", "--jobs", "4", "-v", "-v", "src/a.py", "src/b.py",
                          "--mode=fast"])("""
    import argparse, io, sys, contextlib
    parser = argparse.ArgumentParser(description="a tool")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build")
    build.add_argument("--jobs", type=int, default=1)
    build.add_argument("--mode", choices=["fast", "slow"], default="slow")
    build.add_argument("-v", "--verbose", action="count", default=0)
    build.add_argument("files", nargs="+")
    args = parser.parse_args()
    print(parser.prog, sorted(vars(args).items()))
    print(argparse.ArgumentParser().prog)
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            parser.parse_args(["build", "--jobs", "many", "x"])
        except SystemExit as exc:
            print("exit", exc.code)
    print(errors.getvalue().splitlines()[-1])
    print(parser.parse_known_args(["build", "x", "--unknown"])[1])
""")

program("getopt", argv=["-a", "-b", "value", "--long=12", "--flag", "rest", "-c"])("""
    import getopt, sys
    print(sys.argv[1:])
    opts, args = getopt.getopt(sys.argv[1:], "ab:c", ["long=", "flag"])
    print(opts, args)
    print(getopt.gnu_getopt(sys.argv[1:], "ab:c", ["long=", "flag"]))
    try:
        getopt.getopt(["-x"], "ab:")
    except getopt.GetoptError as exc:
        print("error:", exc.msg, exc.opt)
""")

# LC_CTYPE: native CPython sets it to C.UTF-8 itself in a C locale (PEP 538)
program("environment", env={"GREETING": "hello", "COUNT": "3", "EMPTY": "",
                            "LC_CTYPE": "C.UTF-8"})("""
    import os
    print(sorted(os.environ.items()))
    print(os.getenv("GREETING"), int(os.environ["COUNT"]) * 2, repr(os.environ["EMPTY"]),
          os.getenv("MISSING", "default"))
    os.environ["NEW"] = "set"
    print(os.environ.get("NEW"), "NEW" in os.environ)
    del os.environ["GREETING"]
    print("GREETING" in os.environ, os.path.expandvars("$COUNT-$NEW"))
""")

program("zoneinfo")("""
    import datetime as dt
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones
    paris, new_york, utc = ZoneInfo("Europe/Paris"), ZoneInfo("America/New_York"), ZoneInfo("UTC")
    print(paris, paris.key, repr(utc))
    for zone in (paris, new_york):
        for month in (1, 7):
            moment = dt.datetime(2021, month, 15, 12, tzinfo=zone)
            print(zone, moment.isoformat(), moment.utcoffset(), moment.tzname(), moment.dst())
    before = dt.datetime(2021, 3, 28, 0, 30, tzinfo=dt.timezone.utc)
    for minutes in (0, 30, 60, 90):
        print((before + dt.timedelta(minutes=minutes)).astimezone(paris).isoformat())
    ambiguous = dt.datetime(2021, 11, 7, 1, 30, tzinfo=new_york)
    print(ambiguous.utcoffset(), ambiguous.replace(fold=1).utcoffset())
    print(dt.datetime(2021, 3, 14, 2, 30, tzinfo=new_york).astimezone(utc).isoformat())
    wall = dt.datetime(2021, 3, 27, 12, tzinfo=paris) + dt.timedelta(days=1)
    print(wall.isoformat(), (wall.astimezone(utc) - dt.datetime(2021, 3, 27, 12, tzinfo=paris)))
    print(dt.datetime(2000, 1, 1, tzinfo=ZoneInfo("Asia/Kolkata")).utcoffset(),
          dt.datetime(2000, 1, 1, tzinfo=ZoneInfo("Australia/Sydney")).tzname())
    print(dt.datetime.fromisoformat("2021-06-01T12:00:00+02:00").astimezone(new_york).isoformat())
    zones = available_timezones()
    print(all(name in zones for name in ("Europe/Paris", "America/New_York", "Asia/Tokyo")))
    try:
        ZoneInfo("Mars/Olympus_Mons")
    except ZoneInfoNotFoundError as exc:
        print(type(exc).__name__, exc)
    print(ZoneInfo("Europe/Paris") is paris)
""")

program("shutil")("""
    import os, shutil
    os.makedirs("tree/a/b")
    for path, text in (("tree/top.txt", "top"), ("tree/a/mid.txt", "mid" * 10),
                       ("tree/a/b/low.txt", "low")):
        with open(path, "w") as f:
            f.write(text)
    shutil.copyfile("tree/top.txt", "copy.txt")
    shutil.copy2("tree/a/mid.txt", "copy2.txt")
    print(open("copy.txt").read(), os.path.getsize("copy2.txt"))
    shutil.copytree("tree", "tree2", ignore=shutil.ignore_patterns("low*"))
    print(sorted(os.path.join(d, f) for d, _, files in os.walk("tree2") for f in files))
    shutil.move("tree2/a", "moved")
    print(sorted(os.listdir("moved")), os.path.exists("tree2/a"))
    shutil.rmtree("tree2")
    archive = shutil.make_archive("bundle", "zip", root_dir="tree")
    print(os.path.basename(archive))
    shutil.unpack_archive("bundle.zip", "unpacked")
    print(sorted(os.path.join(d, f) for d, _, files in os.walk("unpacked") for f in files))
    print(sorted(os.listdir(".")))
    try:
        shutil.copyfile("nothere", "x")
    except FileNotFoundError as exc:
        print(type(exc).__name__, exc.filename)
""")

program("glob_walk_scandir")("""
    import glob, os, fnmatch
    for name in ("a.py", "b.py", "c.txt", "sub/d.py", "sub/deep/e.py"):
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        open(name, "w").close()
    print(sorted(glob.glob("*.py")), sorted(glob.glob("**/*.py", recursive=True)))
    print(sorted((d, sorted(ds), sorted(fs)) for d, ds, fs in os.walk(".")))
    with os.scandir("sub") as entries:
        print(sorted((e.name, e.is_dir(), e.is_file()) for e in entries))
    print(fnmatch.filter(sorted(os.listdir(".")), "*.py"))
""")


@pytest.fixture(scope="module")
def box():
    with Sandbox(Limits(timeout_s=60.0)) as sandbox:
        yield sandbox


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_same_output_as_native_cpython(box, name, isolation, tmp_path):
    code, argv, env = PROGRAMS[name]
    assert_as_native(box, code, isolation, tmp_path, argv, env)
