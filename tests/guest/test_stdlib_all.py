"""All of the standard library the WASI build can hold (tracer/held_modules.py): every
module of ``sys.stdlib_module_names`` imports in the guest but the ones documented as
impossible under WASI (``UNAVAILABLE``, with the reason for each in
docs/guides/sandbox.md), which end as ``missing_module``; every module the guest holds
imports; and a behaviour check per module family prints in the sandbox what native
CPython prints (tests/helpers/native_python.py), in both isolations.

The programs print nothing that differs between CPython 3.13 (native) and 3.14 (the
guest), or between machines: no addresses, timestamps, absolute paths, compressed bytes
or hash-ordered sets.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from helpers.native_python import assert_as_native
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._runtime import Sandbox

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "tracer" / "held_modules.py"
SANDBOX_GUIDE = ROOT / "docs" / "guides" / "sandbox.md"


def unavailable() -> dict[str, str]:
    """UNAVAILABLE from tracer/held_modules.py, read without importing it on the host
    (its values are built from one constant: evaluated with it)."""
    tree = ast.parse(BUNDLE.read_text())
    names: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if target in ("_NO_C", "UNAVAILABLE"):
                names[target] = eval(compile(ast.Expression(node.value), "bundle", "eval"),
                                     {}, dict(names))
    return names["UNAVAILABLE"]


@pytest.fixture(scope="module")
def box():
    with Sandbox(Limits(timeout_s=120.0)) as sandbox:
        yield sandbox


IMPORT_EVERY = """
import importlib, sys

def f(names):
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            failed[name] = type(exc).__name__ + ': ' + str(exc)
    return failed
"""


def test_every_stdlib_module_imports_but_the_documented_ones(box):
    """Each name of the guest's own sys.stdlib_module_names, imported in a fresh instance:
    the ones that fail are exactly the documented ones (each a ModuleNotFoundError
    naming itself), and everything else imports."""
    code = "import sys\n\ndef f():\n    return sorted(sys.stdlib_module_names)\n"
    result = box.run({"code": code, "input": ""}, "job").result
    names = ast.literal_eval(result["output"])
    assert len(names) > 280 and "xml" in names and "tomllib" in names
    impossible = unavailable()
    assert set(impossible) <= set(names)
    result = box.run({"code": IMPORT_EVERY, "input": repr(names)}, "job").result
    assert result["status"] == "ok", result
    failed = ast.literal_eval(result["output"])
    assert failed == {name: f"ModuleNotFoundError: No module named '{name}'"
                      for name in sorted(impossible)}
    assert len(names) - len(failed) == 250


def test_every_held_module_imports(box):
    """Every module the guest holds (held_modules.names()), submodules included, imports
    in a fresh instance, but the submodules of a platform or a C extension the WASI build
    lacks, each with the error that says which."""
    code = ("import sys\n\ndef f():\n    finder = [f for f in sys.meta_path "
            "if hasattr(f, 'names')][0]\n    return list(finder.names())\n")
    result = box.run({"code": code, "input": ""}, "job").result
    assert result["status"] == "ok", result
    held = ast.literal_eval(result["output"])
    assert "xml.etree.ElementTree" in held and "email.mime.text" in held and len(held) > 200
    result = box.run({"code": IMPORT_EVERY, "input": repr(held)}, "job").result
    assert result["status"] == "ok", result
    assert ast.literal_eval(result["output"]) == HELD_BUT_FAILING


# Submodules held (their package imports) that need what WASI lacks, or that run a
# command when imported (a package's __main__, for ``python -m``: as natively).
_MISSING = "ModuleNotFoundError: No module named '{}'"
_TERMIOS = _MISSING.format("termios")
HELD_BUT_FAILING = {
    "_pyrepl.fancy_termios": _TERMIOS, "_pyrepl.readline": _TERMIOS,
    "_pyrepl.simple_interact": _TERMIOS, "_pyrepl.unix_console": _TERMIOS,
    "_pyrepl.unix_eventqueue": _TERMIOS, "_pyrepl.windows_console": _MISSING.format("ctypes"),
    "asyncio.__main__": _MISSING.format("_remote_debugging"),
    "asyncio.tools": _MISSING.format("_remote_debugging"),
    "asyncio.windows_events": "ImportError: win32 only",
    "asyncio.windows_utils": "ImportError: win32 only",
    "compression.bz2": _MISSING.format("bz2"), "compression.lzma": _MISSING.format("lzma"),
    "compression.zstd": _MISSING.format("_zstd"),
    "compression.zstd._zstdfile": _MISSING.format("_zstd"),
    "concurrent.futures.interpreter": _MISSING.format("_interpreters"),
    "concurrent.futures.process": _MISSING.format("multiprocessing"),
    "concurrent.interpreters": _MISSING.format("_interpreters"),
    "concurrent.interpreters._crossinterp": _MISSING.format("_interpreters"),
    "concurrent.interpreters._queues": _MISSING.format("_interpreters"),
    "dbm.gnu": _MISSING.format("_gdbm"), "dbm.ndbm": _MISSING.format("_dbm"),
    "encodings.bz2_codec": _MISSING.format("bz2"),
    "encodings.mbcs": "ImportError: cannot import name 'mbcs_encode' from 'codecs' "
                      "(/python/lib/python3.14/codecs.py)",
    "encodings.oem": "ImportError: cannot import name 'oem_encode' from 'codecs' "
                     "(/python/lib/python3.14/codecs.py)",
    "unittest.__main__": "SystemExit: 5",  # no tests found, as `python -m unittest`
    "venv.__main__": "SystemExit: 2",  # no directory given, as `python -m venv`
}


@pytest.mark.parametrize("name", ["ctypes", "tkinter", "multiprocessing", "ssl", "curses",
                                  "lzma", "readline", "winreg"])
def test_an_impossible_module_is_missing_module(box, name):
    """At a program's top level: status missing_module naming the module."""
    result = box.run({"code": f"import {name}\n\ndef f():\n    return 1\n", "input": ""},
                     "job").result
    assert (result["status"], result["exception_type"], result["exception_message"]) == (
        "missing_module", "ModuleNotFoundError", f"No module named '{name}'")


def test_the_impossible_modules_are_documented_with_their_reasons():
    """docs/guides/sandbox.md's table lists each of UNAVAILABLE with its reason, and no
    other module."""
    text = SANDBOX_GUIDE.read_text()
    rows = dict(re.findall(r"^\| `([\w.]+)` \| (.+?) \|$", text.split(
        "### Modules that cannot exist under WASI", 1)[1].split("\n## ", 1)[0], re.M))
    assert rows == unavailable()


# ------------------------------------------------------------------ behaviour per family
PROGRAMS: dict[str, str] = {}


def program(name: str):
    def register(code: str) -> str:
        PROGRAMS[name] = textwrap.dedent(code)
        return code
    return register


program("json")("""
    import json
    from decimal import Decimal
    class Encoder(json.JSONEncoder):
        def default(self, o):
            return str(o) if isinstance(o, Decimal) else super().default(o)
    text = json.dumps({"z": [1, 2.5, None], "a": Decimal("1.10")}, cls=Encoder,
                      sort_keys=True, separators=(",", ":"))
    print(text)
    print(json.loads(text, parse_float=Decimal, object_pairs_hook=list))
    print(json.dumps("é\\u2028", ensure_ascii=True), json.dumps(float("nan")))
    try:
        json.loads('{"a": 1,}')
    except json.JSONDecodeError as exc:
        print(exc.msg, exc.lineno, exc.colno)
""")

program("re")("""
    import re
    text = "2024-01-05 alice=3, bob=10; carol=7"
    print(re.findall(r"(\\w+)=(\\d+)", text))
    print([m.groupdict() for m in re.finditer(r"(?P<who>\\w+)=(?P<n>\\d+)", text)])
    print(re.sub(r"\\d+", lambda m: str(int(m.group()) * 2), text))
    print(re.split(r"[,;]\\s*", text), re.fullmatch(r"\\d{4}-\\d\\d-\\d\\d", text[:10]) is not None)
    print(re.search(r"(?i)BOB(?==)", text).span(), re.escape("a.b*c"), re.compile(r"(?m)^x", re.M).flags & re.M)
    print(re.subn(r"(?<=a)l", "L", text), re.match(r"(a)(b)?", "ac").groups())
""")

program("datetime_zoneinfo")("""
    from datetime import date, datetime, timedelta, timezone
    from zoneinfo import ZoneInfo
    d = datetime(2024, 3, 10, 1, 30, tzinfo=ZoneInfo("America/New_York"))
    later = (d.astimezone(timezone.utc) + timedelta(hours=1)).astimezone(d.tzinfo)
    print(d.isoformat(), later.isoformat(), later.tzname(), d.utcoffset())
    print(datetime.strptime("05/01/24 13:05", "%d/%m/%y %H:%M").strftime("%A %d %B %Y %I:%M %p"))
    print(date(2024, 2, 29) + timedelta(days=365), date(2024, 1, 1).isocalendar())
    print(datetime.fromisoformat("2024-06-01T12:00:00+02:00").astimezone(ZoneInfo("Asia/Tokyo")))
    print(datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=ZoneInfo("America/Chicago")).utcoffset())
""")

program("decimal_fractions_statistics")("""
    import statistics
    from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, localcontext
    from fractions import Fraction
    print(Decimal("2.675").quantize(Decimal("0.01"), ROUND_HALF_UP),
          Decimal("2.675").quantize(Decimal("0.01"), ROUND_HALF_EVEN))
    with localcontext() as ctx:
        ctx.prec = 5
        print(Decimal(1) / Decimal(7), Decimal(2).sqrt())
    print(Decimal("1.1") + Decimal("2.2"), Decimal("-0"), Decimal("1e3").normalize())
    print(Fraction(3, 4) + Fraction(1, 6), Fraction("0.125"), Fraction(1, 3).limit_denominator(2))
    data = [2, 4, 4, 4, 5, 5, 7, 9]
    print(statistics.mean(data), statistics.median(data), statistics.pstdev(data),
          statistics.mode(data), statistics.quantiles(data, n=4))
""")

program("csv_io")("""
    import csv, io
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\\n")
    writer.writerows([["a", 1, 2.5], ['q"uote', None, -3]])
    print(repr(out.getvalue()))
    print(list(csv.reader(io.StringIO(out.getvalue()), quoting=csv.QUOTE_NONNUMERIC)))
    csv.register_dialect("pipes", delimiter="|", quotechar="'")
    print(list(csv.DictReader(io.StringIO("x|y\\n1|'a|b'\\n"), dialect="pipes")))
""")

program("sqlite3")("""
    import sqlite3
    con = sqlite3.connect(":memory:")
    con.row_factory = sqlite3.Row
    con.execute("CREATE TABLE t (name TEXT, score INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [("ann", 3), ("bob", 10), ("ann", 4)])
    rows = con.execute("SELECT name, sum(score) AS total, count(*) AS n FROM t "
                       "GROUP BY name ORDER BY name").fetchall()
    print([dict(row) for row in rows])
    con.create_function("double", 1, lambda x: 2 * x)
    print(con.execute("SELECT double(score) FROM t ORDER BY score").fetchall()[0][0])
    try:
        con.execute("SELECT nope FROM t")
    except sqlite3.OperationalError as exc:
        print(exc)
""")

program("xml_etree")("""
    import xml.etree.ElementTree as ET
    doc = ET.fromstring('<lib xmlns:d="urn:d"><book id="1"><title>A</title><d:p>9</d:p></book>'
                        '<book id="2"><title>B &amp; C</title></book></lib>')
    print([(b.get("id"), b.findtext("title")) for b in doc.findall("book")])
    print(doc.find(".//{urn:d}p").text, [e.tag for e in doc.iter()])
    ET.SubElement(doc, "book", id="3").text = "new"
    ET.indent(doc)
    print(ET.tostring(doc, encoding="unicode"))
    print([e.get("id") for e in doc.findall("./book[@id='2']")])
    try:
        ET.fromstring("<a><b></a>")
    except ET.ParseError as exc:
        print(exc.position)
""")

program("xml_dom_sax")("""
    import io
    import xml.dom.minidom
    import xml.sax
    dom = xml.dom.minidom.parseString("<r><i n='1'>x</i><i n='2'/></r>")
    print([i.getAttribute("n") for i in dom.getElementsByTagName("i")])
    print(dom.documentElement.toprettyxml(indent="  "))
    class Count(xml.sax.ContentHandler):
        def __init__(self):
            super().__init__()
            self.seen = []
        def startElement(self, name, attrs):
            self.seen.append((name, dict(attrs)))
    handler = Count()
    xml.sax.parse(io.BytesIO(b"<a x='1'><b/><b y='2'/></a>"), handler)
    print(handler.seen)
""")

program("email")("""
    import email
    import email.policy
    from email.message import EmailMessage
    from email.utils import formataddr, getaddresses, parseaddr, parsedate_to_datetime
    msg = EmailMessage()
    msg["From"] = formataddr(("Ann Lee", "ann@example.com"))
    msg["To"] = "bob@example.com, Carol <carol@example.com>"
    msg["Subject"] = "Héllo"
    msg.set_content("Line one\\nLine two\\n")
    text = msg.as_string()
    print(text)
    parsed = email.message_from_string(text, policy=email.policy.default)
    print(parsed["subject"], parsed.get_content_type(), parsed.get_content())
    print(parseaddr("Ann <ann@example.com>"), getaddresses([msg["To"]]))
    print(parsedate_to_datetime("Fri, 05 Jan 2024 10:00:00 +0100").isoformat())
""")

program("urllib")("""
    from urllib.parse import (parse_qs, quote, unquote_plus, urlencode, urljoin, urlparse,
                              urlsplit)
    from urllib.request import Request
    import urllib.robotparser
    u = urlparse("https://user@example.com:8080/a/b;p?q=1&q=2&r=x%20y#frag")
    print(u, u.port, u.hostname, parse_qs(u.query))
    print(urlencode({"a": "1 2", "b": ["x", "y"]}, doseq=True), quote("a b/é"), unquote_plus("a+b%2F"))
    print(urljoin("http://h/a/b/c", "../d?x"), urlsplit("mailto:x@y").scheme)
    req = Request("http://example.com/api", data=b"x=1", headers={"X-Key": "v"})
    print(req.get_method(), req.host, req.full_url, req.header_items())
    robots = urllib.robotparser.RobotFileParser()
    robots.parse(["User-agent: *", "Disallow: /private"])
    print(robots.can_fetch("bot", "http://h/private/x"), robots.can_fetch("bot", "http://h/pub"))
""")

program("html_http")("""
    import html
    import http
    import http.cookies
    from html.parser import HTMLParser
    class Links(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found = []
        def handle_starttag(self, tag, attrs):
            if tag == "a":
                self.found.append(dict(attrs).get("href"))
        def handle_data(self, data):
            if data.strip():
                self.found.append(data.strip())
    parser = Links()
    parser.feed('<p>Hi <a href="/x?a=1&amp;b=2">one</a><br><a href=/y>two</a></p>')
    print(parser.found)
    print(html.escape("<a href='x'>&</a>"), html.unescape("&lt;&eacute;&#x41;&amp;"))
    print(http.HTTPStatus(404).phrase, http.HTTPStatus.OK.value)
    cookie = http.cookies.SimpleCookie()
    cookie.load('session=abc123; theme="dark mode"')
    print(sorted((k, v.value) for k, v in cookie.items()))
""")

program("configparser_tomllib")("""
    import configparser, io, tomllib
    config = configparser.ConfigParser()
    config.read_string("[DEFAULT]\\nroot = /srv\\n[app]\\npath = %(root)s/app\\nport = 8080\\ndebug = yes\\n")
    print(config["app"]["path"], config.getint("app", "port"), config.getboolean("app", "debug"))
    config["new"] = {"k": "v"}
    out = io.StringIO()
    config.write(out)
    print(out.getvalue())
    print(tomllib.loads('title = "t"\\n[owner]\\nname = "x"\\ndob = 1979-05-27T07:32:00-08:00\\n'
                        '[[items]]\\nn = 1\\n[[items]]\\nn = [1.5, true]\\n'))
    try:
        tomllib.loads("a = ")
    except tomllib.TOMLDecodeError as exc:
        print(type(exc).__name__)
""")

program("optparse_shlex_fnmatch")("""
    import fnmatch, optparse, shlex
    parser = optparse.OptionParser()
    parser.add_option("-n", type="int", dest="count", default=1)
    parser.add_option("-q", action="store_false", dest="verbose", default=True)
    options, args = parser.parse_args(["-n", "3", "-q", "file.txt"])
    print(options.count, options.verbose, args)
    print(shlex.split("cp 'a b' \\"c d\\" e\\\\ f"), shlex.quote("it's"), shlex.join(["a b", "c"]))
    print(fnmatch.fnmatch("data_01.csv", "data_[0-9]*.csv"), fnmatch.filter(["a.py", "b.txt", ".c.py"], "*.py"))
""")

program("archives")("""
    import gzip, io, tarfile, zipfile, zlib
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("a.txt", b"alpha"), ("dir/b.txt", b"beta" * 100)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r:gz") as tar:
        print(tar.getnames(), tar.extractfile("dir/b.txt").read()[:8])
    memory = io.BytesIO()
    with zipfile.ZipFile(memory, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x/y.txt", "why" * 50)
    with zipfile.ZipFile(memory) as z:
        print(z.namelist(), z.read("x/y.txt")[:6], z.getinfo("x/y.txt").file_size)
    print(gzip.decompress(gzip.compress(b"gz" * 10)), zlib.decompress(zlib.compress(b"z" * 9)))
    print(zlib.crc32(b"hello"), zlib.adler32(b"hello"))
""")

program("logging")("""
    import io, logging, logging.handlers
    stream = io.StringIO()
    logging.basicConfig(stream=stream, level=logging.INFO,
                        format="%(levelname)s:%(name)s:%(message)s")
    log = logging.getLogger("app.db")
    log.debug("hidden")
    log.info("connected to %s", "db1")
    log.getChild("pool").warning("size=%d", 3)
    log.error("failed: %r", ZeroDivisionError("division by zero"))
    print(stream.getvalue().splitlines())
    handler = logging.handlers.RotatingFileHandler("app.log", maxBytes=60, backupCount=2)
    handler.setFormatter(logging.Formatter("%(message)s"))
    other = logging.getLogger("rot")
    other.addHandler(handler)
    other.propagate = False
    for i in range(8):
        other.warning("message number %d", i)
    handler.close()
    import os
    print(sorted(os.listdir(".")), open("app.log").read().splitlines())
    memory = logging.handlers.MemoryHandler(capacity=10)
    print(memory.capacity, logging.getLevelName(25), logging.getLevelName("WARNING"))
""")

program("unittest_mock")("""
    import json
    from unittest import mock
    m = mock.Mock(return_value=3)
    print(m(1, k=2), m.call_args, m.call_count)
    m.assert_called_once_with(1, k=2)
    magic = mock.MagicMock()
    magic.__len__.return_value = 7
    magic.method.side_effect = [1, ValueError("boom")]
    print(len(magic), magic.method())
    try:
        magic.method()
    except ValueError as exc:
        print("raised", exc)
    with mock.patch("json.dumps", return_value="patched") as fake:
        print(json.dumps({"a": 1}), fake.call_args)
    print(json.dumps({"a": 1}))
    with mock.patch.object(json, "loads", side_effect=lambda s: s[::-1]):
        print(json.loads("abc"))
    spec = mock.create_autospec(json.dumps)
    spec({"x": 1}, indent=2)
    print(spec.call_args_list, mock.call(1) == mock.call(1), mock.sentinel.token is mock.sentinel.token)
""")

program("asyncio")("""
    import asyncio
    async def worker(name, queue, out):
        while True:
            item = await queue.get()
            out.append((name, item))
            await asyncio.sleep(0)
            queue.task_done()
    async def slow():
        await asyncio.sleep(10)
    async def main():
        queue, out = asyncio.Queue(), []
        for i in range(6):
            queue.put_nowait(i)
        workers = [asyncio.create_task(worker(f"w{i}", queue, out)) for i in range(2)]
        await queue.join()
        for w in workers:
            w.cancel()
        print(sorted(out), await asyncio.gather(asyncio.sleep(0, "a"), asyncio.sleep(0, "b")))
        try:
            await asyncio.wait_for(slow(), timeout=0.01)
        except TimeoutError:
            print("timed out")
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(asyncio.sleep(0, n * n)) for n in range(4)]
        print([t.result() for t in tasks])
        lock, sem = asyncio.Lock(), asyncio.Semaphore(2)
        async with lock, sem:
            print(lock.locked(), sem.locked())
    asyncio.run(main())
""")

program("collections_itertools_functools")("""
    import collections, functools, heapq, bisect, itertools, operator
    c = collections.Counter("mississippi")
    print(c.most_common(2), sorted(c.elements())[:4], collections.OrderedDict(a=1, b=2))
    Point = collections.namedtuple("Point", "x y", defaults=[0])
    print(Point(1), Point._make([3, 4])._asdict(), collections.deque(range(5), maxlen=3))
    print(list(itertools.accumulate([1, 2, 3], operator.mul)), list(itertools.batched("abcde", 2)),
          list(itertools.pairwise("abc")), list(itertools.product("ab", repeat=2)))
    @functools.lru_cache(maxsize=None)
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)
    print(fib(80), fib.cache_info(), functools.reduce(operator.add, range(5)))
    print(heapq.nsmallest(3, [5, 1, 4, 2, 3]), bisect.bisect_left([1, 2, 4], 3),
          list(heapq.merge([1, 4], [2, 3])))
""")

program("dataclasses_enum_typing")("""
    import dataclasses, enum, typing
    @dataclasses.dataclass(order=True, frozen=True)
    class Item:
        name: str
        qty: int = 0
        tags: tuple = dataclasses.field(default=(), compare=False)
    items = sorted([Item("b", 2), Item("a", 5, ("x",))])
    print(items, dataclasses.asdict(items[0]), dataclasses.replace(items[1], qty=9))
    class Color(enum.Enum):
        RED = 1
        GREEN = enum.auto()
    class Perm(enum.IntFlag):
        R = 4
        W = 2
    print(Color.GREEN, Color(1).name, list(Color), int(Perm.R | Perm.W), Perm(6).value)
    class Movie(typing.TypedDict):
        title: str
        year: int
    def f(x: int, y: list[str] | None = None) -> dict[str, int]: ...
    print(typing.get_type_hints(f), Movie.__required_keys__ == {"title", "year"},
          typing.get_origin(list[int]), typing.get_args(dict[str, int]))
""")

program("pickle_copy_struct")("""
    import array, base64, binascii, copy, pickle, pprint, struct
    data = {"a": [1, 2, {3}], "b": (b"x", 2.5), "c": None}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(data, protocol)) == data
    deep = copy.deepcopy(data)
    print(deep == data, deep["a"] is data["a"], copy.copy(data)["a"] is data["a"])
    print(struct.pack("<hIf", -2, 7, 1.5), struct.unpack(">Q", b"\\0" * 7 + b"\\x05"),
          struct.calcsize("@i"))
    print(base64.b64encode(b"steptrace"), base64.b32decode("MFRGG==="), binascii.hexlify(b"\\x01\\xff"))
    print(array.array("i", [1, 2, 3]).tobytes().hex(), pprint.pformat({"k": list(range(30))}, width=40))
""")

program("hashing_uuid_random")("""
    import hashlib, hmac, random, uuid
    print(hashlib.sha256(b"abc").hexdigest(), hashlib.md5(b"abc").hexdigest(),
          hashlib.blake2b(b"abc", digest_size=8).hexdigest(), hashlib.sha3_256(b"").hexdigest()[:16])
    print(hmac.new(b"key", b"msg", "sha256").hexdigest(), hmac.compare_digest("a", "a"))
    print(uuid.uuid5(uuid.NAMESPACE_DNS, "example.com"), uuid.UUID(int=255).hex)
    rng = random.Random(42)
    print(rng.random(), rng.randint(1, 100), rng.choice("abcdef"), rng.sample(range(20), 4))
    items = list(range(10))
    rng.shuffle(items)
    print(items, rng.gauss(0, 1))
""")

program("text_tools")("""
    import difflib, string, textwrap, unicodedata
    a, b = "the quick brown fox".split(), "the quick red fox jumps".split()
    print(list(difflib.unified_diff(a, b, lineterm="", n=1)))
    print(difflib.SequenceMatcher(None, "abcd", "bcde").ratio(), difflib.get_close_matches("appel", ["apple", "ape", "peach"]))
    print(textwrap.fill("word " * 12, width=22), textwrap.dedent("  a\\n    b"), textwrap.shorten("a b c d e f", 7))
    print(string.Template("$who likes ${what}").substitute(who="ann", what="tea"), string.capwords("hello  world"))
    print(unicodedata.name("é"), unicodedata.normalize("NFD", "é").encode(), unicodedata.category("A"))
""")

program("ast_inspect_tokenize")("""
    import ast, inspect, io, keyword, tokenize
    tree = ast.parse("x = [i * 2 for i in range(3) if i]")
    print(ast.unparse(tree), ast.literal_eval("{'a': (1, 2.5, None)}"))
    print([type(n).__name__ for n in ast.walk(tree)][:6])
    def f(a, /, b: int = 2, *args, c, **kw) -> str:
        return ""
    print(inspect.signature(f), inspect.isfunction(f), [p.kind.name for p in inspect.signature(f).parameters.values()])
    tokens = tokenize.generate_tokens(io.StringIO("x = 1 + y\\n").readline)
    print([(tokenize.tok_name[t.type], t.string) for t in tokens])
    print(keyword.iskeyword("match"), keyword.issoftkeyword("match"))
""")

program("calendar_time")("""
    import calendar, time
    print(calendar.month(2024, 2))
    print(calendar.isleap(2100), calendar.monthrange(2024, 2), calendar.weekday(2024, 1, 1))
    print(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(86400 * 365)), time.mktime(time.gmtime(0)) == time.mktime(time.gmtime(0)))
    print(calendar.timegm((2024, 1, 1, 0, 0, 0)), time.strptime("2024-07-04", "%Y-%m-%d").tm_yday)
""")

program("ipaddress_graphlib_contextlib")("""
    import contextlib, graphlib, io, ipaddress
    net = ipaddress.ip_network("192.168.0.0/29")
    print(list(net.hosts())[:3], net.num_addresses, ipaddress.ip_address("10.0.0.1") in ipaddress.ip_network("10.0.0.0/8"))
    print([str(s) for s in net.subnets(prefixlen_diff=1)], ipaddress.ip_address("::1").exploded)
    print(list(graphlib.TopologicalSorter({"b": {"a"}, "c": {"b"}, "a": set()}).static_order()))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print("captured")
    with contextlib.suppress(KeyError), contextlib.ExitStack() as stack:
        stack.callback(lambda: print("closed"))
        {}["x"]
    print(repr(out.getvalue()))
""")

program("formats")("""
    import io, plistlib, quopri, wave, xmlrpc.client, mimetypes
    data = {"name": "x", "n": [1, 2], "ok": True}
    text = plistlib.dumps(data)
    print(plistlib.loads(text) == data, text.splitlines()[-4:])
    print(quopri.encodestring("héllo = world".encode()))
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\\x00\\x01" * 100)
    buffer.seek(0)
    with wave.open(buffer) as r:
        print(r.getnframes(), r.getframerate(), r.readframes(2))
    print(xmlrpc.client.loads(xmlrpc.client.dumps((1, "two", [3.0]), "m")))
    types = mimetypes.MimeTypes()
    print(types.guess_type("a.html"), types.guess_type("b.png"), types.guess_extension("text/plain"))
""")

program("misc_modules")("""
    import cmath, colorsys, filecmp, fileinput, gettext, math, numbers, operator, reprlib, sched, queue, timeit, platform, weakref
    open("a.txt", "w").write("1\\n2\\n")
    open("b.txt", "w").write("1\\n2\\n")
    print(filecmp.cmp("a.txt", "b.txt", shallow=False), list(fileinput.input(["a.txt", "b.txt"])))
    print(gettext.NullTranslations().gettext("hi"), reprlib.repr(list(range(100))))
    print(cmath.sqrt(-4), colorsys.rgb_to_hsv(1.0, 0.5, 0.0), math.comb(10, 3), isinstance(3, numbers.Integral))
    q = queue.PriorityQueue()
    for item in (3, 1, 2):
        q.put(item)
    print([q.get() for _ in range(3)], operator.itemgetter(1, 0)("ab"))
    events = []
    clock = [0]
    s = sched.scheduler(timefunc=lambda: clock[0], delayfunc=lambda d: clock.__setitem__(0, clock[0] + d))
    s.enter(2, 1, events.append, ("second",))
    s.enter(1, 1, events.append, ("first",))
    s.run()
    print(events, timeit.timeit("x = 1", number=10) >= 0, platform.python_implementation())
    class A:
        pass
    a = A()
    ref = weakref.ref(a)
    print(ref() is a)
""")

program("traceback_logging_exception")("""
    import io, logging, re, sys, traceback
    def inner(x):
        return {"a": 1}[x]
    def outer():
        try:
            return inner("b")
        except KeyError as exc:
            raise ValueError("wrapped") from exc
    def plain(text):
        # the frames and the exception, without the file's name and the source lines
        # (native CPython shows them; the sandbox has no source file)
        return [re.sub(r'File "[^"]*"', "File F", line) for line in text.splitlines()
                if not line.startswith("    ")]
    try:
        outer()
    except ValueError as exc:
        print(plain(traceback.format_exc()))
        print([(f.name, f.lineno) for f in traceback.extract_tb(exc.__traceback__)])
        print(traceback.format_exception_only(exc), len(traceback.format_tb(exc.__traceback__)))
        stream = io.StringIO()
        logging.basicConfig(stream=stream, format="%(levelname)s %(funcName)s %(message)s")
        logging.getLogger("x").exception("failed: %s", exc)
        print(plain(stream.getvalue()))
        out = io.StringIO()
        traceback.print_exc(file=out, limit=1)
        print(plain(out.getvalue()))
    print([(f.name, f.lineno) for f in traceback.extract_stack()][-1:])
""")


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_same_output_as_native_cpython(box, name, isolation, tmp_path):
    assert_as_native(box, PROGRAMS[name], isolation, tmp_path)


# ------------------------------------------------------------------ threads
THREADS = "the sandbox (WASI) has no threads"
EQ_META = ("class Meta(type):\n    def __eq__(cls, other):\n        raise SystemExit('ran')\n"
           "    __hash__ = type.__hash__\n")


@pytest.mark.parametrize("code, message", [
    ("import threading\nthreading.Thread(target=print).start()\n",
     f"the program starts a thread; {THREADS}"),
    ("import _thread\n_thread.start_new_thread(print, ())\n",
     f"the program starts a thread; {THREADS}"),
    ("import threading\nclass Worker(threading.Thread):\n    pass\nWorker().start()\n",
     f"the program starts a thread (__main__.Worker); {THREADS}"),
    # the class is named without running its metaclass's code, nor a qualname's
    ("import threading\n" + EQ_META + "class Worker(threading.Thread, metaclass=Meta):\n"
     "    pass\nWorker().start()\n", f"the program starts a thread (__main__.Worker); {THREADS}"),
    ("import threading\nclass S(str):\n    def __format__(self, spec):\n        raise SystemExit('ran')\n"
     "class Worker(threading.Thread):\n    pass\nWorker.__qualname__ = S('W')\nWorker().start()\n",
     f"the program starts a thread; {THREADS}"),
])
def test_a_thread_is_unsupported_naming_its_class(box, code, message):
    """A thread's start stops the job (status unsupported); a Thread subclass is named."""
    result = box.run({"code": code, "input": "", "shape": "script"}, "job").result
    assert (result["status"], result["exception_message"]) == ("unsupported", message)
