"""Popular pure-Python packages in the guest, probed with real calls: the same pinned wheels
run natively (CPython 3.13) and in a guest built with them must print the same. Four
guests (the snapshot of one with all of them would be large), each built once and cached
(tests/helpers/package_guests.py). The packages are from the top of PyPI's download
ranking that have pure-Python wheels; bench/README.md ("Popular packages") has the share
of the top 100 that work and why the others do not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from helpers.package_guests import PackageGuest
from steptrace.sandbox._packages import parse_lock

pytestmark = pytest.mark.slow  # two guests with packages to build (cached after the first)

PROBES_A = {
    "requests": """
        import requests
        prepared = requests.Request("POST", "https://example.com/api", params={"q": "a b", "n": 2},
                                    json={"k": [1, 2]}, headers={"X-Id": "7"}).prepare()
        print(prepared.url, prepared.body, sorted(prepared.headers.items()))
        print(requests.utils.quote("a/b c"), requests.utils.requote_uri("http://h/a b"),
              requests.codes.not_found, requests.utils.parse_header_links('<http://a>; rel="next"'))
    """,
    "urllib3_idna_charset": """
        import urllib3, idna, charset_normalizer
        url = urllib3.util.parse_url("https://user:pw@host.example:8443/p?q=1#f")
        print(url.host, url.port, url.path, url.query, url.auth, urllib3.util.Retry(total=3).total)
        print(idna.encode("ドメイン.テスト"), idna.decode("xn--eckwd4c7c.xn--zckzah"))
        best = charset_normalizer.from_bytes("Ceci est un texte en français, déjà lu.".encode("cp1252")).best()
        print(best.encoding, str(best))
    """,
    "dateutil_six": """
        from datetime import datetime
        from dateutil import parser, relativedelta, rrule
        import six
        when = parser.parse("2024-02-29T10:30:00+05:30")
        print(when.isoformat(), when + relativedelta.relativedelta(years=1, months=1))
        print(list(rrule.rrule(rrule.MONTHLY, count=3, dtstart=datetime(2024, 1, 31))))
        print(parser.parse("March 5, 2023 4pm").isoformat(), six.ensure_str(b"x"), six.PY3)
    """,
    "packaging_attrs_typing": """
        import attrs, typing_extensions
        from packaging.version import Version
        from packaging.specifiers import SpecifierSet
        from packaging.requirements import Requirement
        print(sorted(["1.10", "1.9", "1.10rc1"], key=Version), Version("2.0.post1") > Version("2.0"))
        print(list(SpecifierSet(">=1.0,<2").filter(["0.9", "1.5", "2.0"])), Requirement("a[b]>=1; python_version>'3'"))
        @attrs.define
        class Point:
            x: int
            y: int = attrs.field(default=0, converter=int)
        print(Point(1, "2"), attrs.asdict(Point(3)), attrs.evolve(Point(1), x=5))
        print(typing_extensions.get_origin(typing_extensions.Annotated[int, "m"]) is typing_extensions.Annotated)
    """,
    "jmespath_rsa": """
        import jmespath, rsa, pyasn1
        data = {"people": [{"name": "a", "age": 30}, {"name": "b", "age": 20}]}
        print(jmespath.search("people[?age > `25`].name", data), jmespath.search("sort_by(people, &age)[0].name", data))
        print(rsa.transform.int2bytes(65537), rsa.common.bit_size(1023), pyasn1.__version__ > "0")
    """,
    "click": """
        import click
        from click.testing import CliRunner
        @click.command()
        @click.option("--count", default=1, type=int)
        @click.argument("name")
        def hello(count, name):
            for _ in range(count):
                click.echo(f"Hello {name}")
        result = CliRunner().invoke(hello, ["--count", "2", "Ann"])
        print(result.exit_code, repr(result.output))
        bad = CliRunner().invoke(hello, ["--count", "x", "Ann"])
        print(bad.exit_code, bad.output.splitlines()[-1])
    """,
    "colorama_tomli_pluggy": """
        import colorama, tomli, pluggy
        print(repr(colorama.Fore.RED + "x" + colorama.Style.RESET_ALL))
        print(tomli.loads('a = 1\\n[t]\\nb = ["x", 2.5]\\n'))
        spec, impl = pluggy.HookspecMarker("demo"), pluggy.HookimplMarker("demo")
        class Spec:
            @spec
            def compute(self, x): ...
        class One:
            @impl
            def compute(self, x):
                return x + 1
        class Two:
            @impl
            def compute(self, x):
                return x * 10
        manager = pluggy.PluginManager("demo")
        manager.add_hookspecs(Spec)
        manager.register(One())
        manager.register(Two())
        print(manager.hook.compute(x=3))
    """,
    "cachetools_wrapt_decorator": """
        import cachetools, wrapt, decorator
        cache = cachetools.LRUCache(maxsize=2)
        for k in "abca":
            cache[k] = k.upper()
        print(sorted(cache.items()), cache.currsize)
        clock = [0]
        ttl = cachetools.TTLCache(maxsize=10, ttl=5, timer=lambda: clock[0])
        ttl["k"] = 1
        clock[0] = 6
        print("k" in ttl)
        @wrapt.decorator
        def twice(wrapped, instance, args, kwargs):
            return 2 * wrapped(*args, **kwargs)
        @twice
        def add(a, b):
            return a + b
        print(add(2, 3), add.__name__)
        @decorator.decorator
        def logged(func, *args, **kw):
            return ("logged", func(*args, **kw))
        @logged
        def mul(a, b=2):
            return a * b
        print(mul(4), mul.__name__)
    """,
    "pyparsing_more_itertools_zipp": """
        import io, zipfile
        import pyparsing as pp
        import more_itertools as mi
        import zipp, importlib_metadata
        integer = pp.Word(pp.nums).set_parse_action(lambda t: int(t[0]))
        expr = pp.infix_notation(integer, [(pp.one_of("* /"), 2, pp.OpAssoc.LEFT), (pp.one_of("+ -"), 2, pp.OpAssoc.LEFT)])
        print(expr.parse_string("1 + 2 * 3").as_list())
        print(list(mi.chunked(range(7), 3)), list(mi.windowed("abcd", 2)), mi.first_true([0, "", 5]))
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as z:
            z.writestr("a/b.txt", "x")
        print([p.name for p in zipp.Path(zipfile.ZipFile(buffer)).iterdir()])
        print(importlib_metadata.version("requests"))
    """,
}

PROBES_B = {
    "tqdm_without_monitor": """
        import io, tqdm
        tqdm.tqdm.monitor_interval = 0
        out = io.StringIO()
        total = 0
        for i in tqdm.tqdm(range(5), file=out, mininterval=0, ncols=40, bar_format="{n}/{total}"):
            total += i
        print(total, out.getvalue().replace("\\r", "|"))
        print(tqdm.tqdm.format_sizeof(123456), tqdm.tqdm.format_interval(3725))
    """,
    "pygments": """
        from pygments import highlight, lex
        from pygments.lexers import get_lexer_by_name, guess_lexer_for_filename
        from pygments.formatters import HtmlFormatter, get_formatter_by_name
        from pygments.styles import get_style_by_name
        code = "def f(x):\\n    return x + 1\\n"
        print(highlight(code, get_lexer_by_name("python"), HtmlFormatter(nowrap=True)))
        print([str(t) for t, _ in lex("x = 1", get_lexer_by_name("py"))][:3])
        print(guess_lexer_for_filename("a.rs", "fn main() {}").name, get_style_by_name("monokai").background_color)
        print(highlight("SELECT 1;", get_lexer_by_name("sql"), get_formatter_by_name("terminal")).encode())
    """,
    "docutils": """
        from docutils.core import publish_parts, publish_string
        parts = publish_parts("Title\\n=====\\n\\nSome *text* and ``code``.\\n", writer_name="html")
        print(parts["title"], parts["body"])
        print(publish_string("A *b*.", writer_name="pseudoxml").decode())
    """,
    "rich": """
        import io
        from rich.console import Console
        from rich.table import Table
        from rich.markdown import Markdown
        console = Console(file=io.StringIO(), width=40, color_system=None, force_terminal=False)
        table = Table(title="T")
        table.add_column("name")
        table.add_column("n", justify="right")
        table.add_row("ann", "3")
        table.add_row("bob :smile:", "10")
        console.print(table)
        console.print(Markdown("# Head\\n\\n* one\\n* **two**"))
        console.print("[bold]x[/bold] :thumbs_up:", emoji=True)
        print(console.file.getvalue())
    """,
    "bs4_soupsieve": """
        from bs4 import BeautifulSoup
        soup = BeautifulSoup('<div id="a"><p class="x">one</p><p>two <b>three</b></p><a href="/u">l</a></div>', "html.parser")
        print([p.get_text() for p in soup.find_all("p")], soup.select_one("p.x").text, soup.select("div > p:nth-of-type(2) b"))
        print(soup.a["href"], soup.prettify().splitlines()[:3])
    """,
    "openpyxl": """
        import io, openpyxl
        book = openpyxl.Workbook()
        sheet = book.active
        sheet.title = "S"
        sheet.append(["name", "n"])
        for row in (["a", 1], ["b", 2]):
            sheet.append(row)
        sheet["C2"] = "=B2*2"
        buffer = io.BytesIO()
        book.save(buffer)
        loaded = openpyxl.load_workbook(io.BytesIO(buffer.getvalue()))
        print(loaded.sheetnames, [[c.value for c in row] for row in loaded["S"].iter_rows()])
    """,
    "tomlkit_isodate_tabulate": """
        import tomlkit, isodate, tabulate
        doc = tomlkit.parse('# c\\n[a]\\nx = 1 # keep\\n')
        doc["a"]["y"] = [1, 2]
        print(tomlkit.dumps(doc))
        print(isodate.parse_duration("P1DT2H"), isodate.parse_datetime("2024-01-02T03:04:05Z"), isodate.duration_isoformat(isodate.parse_duration("PT90M")))
        print(tabulate.tabulate([["a", 1.5], ["bb", 10]], headers=["k", "v"], tablefmt="github"))
    """,
    "sniffio_h11_exceptiongroup": """
        import asyncio, sniffio, h11, exceptiongroup
        async def main():
            return sniffio.current_async_library()
        print(asyncio.run(main()))
        conn = h11.Connection(h11.CLIENT)
        data = conn.send(h11.Request(method="GET", target="/", headers=[("Host", "example.com")]))
        print(data, conn.our_state)
        print(exceptiongroup.ExceptionGroup("g", [ValueError(1)]).exceptions)
    """,
    "text_formats": """
        import xmltodict, slugify, chardet, markdown, itsdangerous
        print(xmltodict.parse("<a x='1'><b>2</b><b>3</b></a>"), xmltodict.unparse({"r": {"@k": "v", "c": "t"}}))
        print(slugify.slugify("Héllo Wörld — 2024!"), chardet.detect("déjà vu".encode("latin-1"))["encoding"])
        print(markdown.markdown("# T\\n\\n*x* and `y`\\n\\n- a\\n- b", extensions=["extra"]))
        signer = itsdangerous.Signer("key")
        signed = signer.sign("value")
        print(signed, signer.unsign(signed), itsdangerous.URLSafeSerializer("k").dumps([1, "a"]))
    """,
    "tools": """
        import os, pycparser, distlib.version, oauthlib.common, filelock, iniconfig
        ast = pycparser.CParser().parse("int f(int a) { return a * 2; }")
        print(type(ast.ext[0]).__name__, ast.ext[0].decl.name)
        print(distlib.version.NormalizedVersion("1.0.post2") > distlib.version.NormalizedVersion("1.0"))
        print(oauthlib.common.urldecode("a=1&b=x%20y"), oauthlib.common.add_params_to_uri("http://h/p", [("q", "1")]))
        with filelock.FileLock("job.lock", timeout=1):
            print("locked", os.path.exists("job.lock"))
        open("t.ini", "w").write("[pytest]\\naddopts = -q\\n")
        print(iniconfig.IniConfig("t.ini")["pytest"]["addopts"])
    """,
}


PROBES_C = {
    "setuptools_wheel": """
        import os
        import setuptools
        from setuptools.dist import Distribution
        from wheel.wheelfile import WHEEL_INFO_RE
        for path in ("pkg/sub", "other"):
            os.makedirs(path)
            open(os.path.join(path, "__init__.py"), "w").close()
        print(sorted(setuptools.find_packages(".")))
        dist = Distribution({"name": "demo", "version": "1.0", "install_requires": ["a>=1"]})
        print(dist.get_name(), dist.get_version(), dist.install_requires)
        print(WHEEL_INFO_RE.match("demo-1.0-py3-none-any.whl").group("name", "ver", "pyver"))
    """,
    "protobuf_common_protos": """
        from google.protobuf import json_format, struct_pb2, timestamp_pb2
        from google.rpc import status_pb2
        from google.type import date_pb2
        message = struct_pb2.Struct()
        message.update({"a": 1, "b": [True, "x"], "c": {"d": None}})
        data = message.SerializeToString()
        back = struct_pb2.Struct()
        back.ParseFromString(data)
        print(json_format.MessageToJson(back, sort_keys=True, indent=None), len(data))
        stamp = timestamp_pb2.Timestamp()
        stamp.FromJsonString("2024-02-29T10:30:00Z")
        print(stamp.seconds, stamp.ToJsonString())
        print(status_pb2.Status(code=5, message="not found"), date_pb2.Date(year=2024, month=2, day=29))
    """,
    "annotated_types_inspection_doc": """
        from typing import Annotated, Optional
        import annotated_types as at
        from annotated_doc import Doc
        from typing_inspection import introspection, typing_objects
        hint = Annotated[Optional[int], at.Gt(3), Doc("a count")]
        found = introspection.inspect_annotation(hint, annotation_source=introspection.AnnotationSource.ANY)
        print(found.type == Optional[int], found.metadata)  # (its repr is 3.14's own)
        print(at.Len(1, 5), at.Interval(gt=0, le=9), typing_objects.is_annotated(Annotated))
    """,
    "pathspec_dotenv_trove": """
        import io, pathspec
        from dotenv import dotenv_values
        from trove_classifiers import classifiers
        spec = pathspec.PathSpec.from_lines("gitwildmatch", ["*.py", "!keep.py", "build/"])
        print(sorted(spec.match_files(["a.py", "keep.py", "b.txt", "build/x.c", "src/c.py"])))
        print(dotenv_values(stream=io.StringIO("A=1\\nB='x y'\\nexport C=${A}2\\n# c\\n")))
        print(len(classifiers) > 500, "License :: OSI Approved :: MIT License" in classifiers)
    """,
    "starlette": """
        import asyncio
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route
        async def item(request):
            return JSONResponse({"id": int(request.path_params["id"]), "q": request.query_params.get("q")})
        app = Starlette(routes=[Route("/items/{id}", item)])
        async def call(path, query):
            sent = []
            async def receive():
                return {"type": "http.request", "body": b"", "more_body": False}
            async def send(message):
                sent.append(message)
            scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
                     "query_string": query, "headers": [], "root_path": "", "scheme": "http",
                     "server": ("t", 80), "client": ("c", 1), "http_version": "1.1", "app": app}
            await app(scope, receive, send)
            return sent[0]["status"], sent[1]["body"]
        print(asyncio.run(call("/items/7", b"q=x")), asyncio.run(call("/nope", b"")))
    """,
    "sqlalchemy": """
        from sqlalchemy import Column, ForeignKey, Integer, String, create_engine, func, select
        from sqlalchemy.orm import DeclarativeBase, Session, relationship
        class Base(DeclarativeBase):
            pass
        class User(Base):
            __tablename__ = "users"
            id = Column(Integer, primary_key=True)
            name = Column(String(30))
            posts = relationship("Post", back_populates="user")
        class Post(Base):
            __tablename__ = "posts"
            id = Column(Integer, primary_key=True)
            user_id = Column(ForeignKey("users.id"))
            user = relationship("User", back_populates="posts")
        engine = create_engine("sqlite://")
        Base.metadata.create_all(engine)
        with Session(engine) as session:
            session.add_all([User(name="ann", posts=[Post(), Post()]), User(name="bob")])
            session.commit()
            rows = session.execute(select(User.name, func.count(Post.id)).outerjoin(Post).group_by(User.id).order_by(User.name)).all()
            print(rows)
        print(select(User).where(User.name == "x"))
    """,
    "oauth_tenacity_pyasn1_modules": """
        import tenacity
        from requests_oauthlib import OAuth2Session
        from pyasn1.codec.der import decoder, encoder
        from pyasn1_modules import rfc2459
        oauth = OAuth2Session("client", redirect_uri="https://app/cb", scope=["read"], state="s1")
        print(oauth.authorization_url("https://auth.example/authorize"))
        attempts = []
        @tenacity.retry(stop=tenacity.stop_after_attempt(3), retry=tenacity.retry_if_exception_type(ValueError), reraise=True)
        def flaky():
            attempts.append(1)
            if len(attempts) < 3:
                raise ValueError("again")
            return "done"
        print(flaky(), len(attempts))
        algorithm = rfc2459.AlgorithmIdentifier()
        algorithm["algorithm"] = rfc2459.rsaEncryption
        data = encoder.encode(algorithm)
        print(data.hex(), decoder.decode(data, asn1Spec=rfc2459.AlgorithmIdentifier())[0]["algorithm"])
    """,
    "opentelemetry_api": """
        from opentelemetry import baggage, context, trace
        from opentelemetry.semconv.attributes import http_attributes, server_attributes
        tracer = trace.get_tracer("demo")
        with tracer.start_as_current_span("outer") as span:
            print(span.is_recording(), trace.get_current_span() is span, span.get_span_context().is_valid)
        token = context.attach(baggage.set_baggage("user", "ann"))
        print(baggage.get_baggage("user"), dict(baggage.get_all()))
        context.detach(token)
        print(baggage.get_baggage("user"), http_attributes.HTTP_REQUEST_METHOD, server_attributes.SERVER_PORT)
    """,
    "hatchling": """
        from hatchling.version.scheme.standard import StandardScheme
        from hatchling.metadata.core import ProjectMetadata
        scheme = StandardScheme("", {})
        print(scheme.update("minor", "1.2.3", {}), scheme.update("major,rc", "1.2.3", {}))
        metadata = ProjectMetadata(".", None, {"project": {"name": "Demo_Pkg", "version": "0.1", "dependencies": ["a>=1"]}})
        print(metadata.name, metadata.version, metadata.core.dependencies)
    """,
}
PROBES_D = {
    "aiohttp_yarl_multidict": """
        import aiohttp, frozenlist, multidict, propcache, yarl
        from aiohttp import web
        url = yarl.URL("https://user@example.com:8443/a/b?x=1#f")
        print(url.host, url.port, url.path, url.query, url.with_query(y="2 3"), url / "c")
        headers = multidict.CIMultiDict([("Accept", "a"), ("accept", "b")])
        print(headers.getall("ACCEPT"), len(headers))
        frozen = frozenlist.FrozenList([1, 2])
        frozen.freeze()
        print(frozen.frozen, aiohttp.ClientTimeout(total=5))
        async def hello(request):
            return web.Response(text="hi")
        app = web.Application()
        app.router.add_get("/", hello)
        app.router.add_post("/items/{id}", hello)
        print(sorted((r.method, r.resource.canonical) for r in app.router.routes()))
    """,
}


def _lock(path: str):
    return parse_lock((Path(__file__).parent / "data" / path).read_text())


def _group(letter: str):
    """The module's guest of ``popular_LETTER.lock`` (fixture ``group_LETTER``), built once."""
    @pytest.fixture(scope="module", name=f"group_{letter}")
    def group(tmp_path_factory):
        guest = PackageGuest(_lock(f"popular_{letter}.lock"),
                             tmp_path_factory.mktemp(f"popular-{letter}"))
        yield guest
        guest.close()
    return group


group_a, group_b, group_c, group_d = map(_group, "abcd")


@pytest.mark.parametrize("name", sorted(PROBES_A))
def test_popular_packages_a_as_native(group_a, name):
    group_a.assert_as_native(textwrap.dedent(PROBES_A[name]))


@pytest.mark.parametrize("name", sorted(PROBES_B))
def test_popular_packages_b_as_native(group_b, name):
    group_b.assert_as_native(textwrap.dedent(PROBES_B[name]))


@pytest.mark.parametrize("name", sorted(PROBES_C))
def test_popular_packages_c_as_native(group_c, name):
    group_c.assert_as_native(textwrap.dedent(PROBES_C[name]))


@pytest.mark.parametrize("name", sorted(PROBES_D))
def test_popular_packages_d_as_native(group_d, name):
    group_d.assert_as_native(textwrap.dedent(PROBES_D[name]))


def test_the_batch_isolation_runs_the_same(group_a, group_b):
    """A probe per guest in batch isolation, after the others: the same output."""
    group_a.assert_as_native(textwrap.dedent(PROBES_A["click"]), "batch")
    group_b.assert_as_native(textwrap.dedent(PROBES_B["rich"]), "batch")


def test_tqdm_with_its_monitor_thread_names_it_and_the_way_around(group_b):
    """tqdm's first bar starts its monitor thread: unsupported, naming the thread and how
    to go without it (the probe above sets tqdm.tqdm.monitor_interval = 0)."""
    result = group_b.guest("import io, tqdm\nfor _ in tqdm.tqdm(range(3), file=io.StringIO()):\n"
                           "    pass\n")
    assert (result["status"], result["exception_message"]) == (
        "unsupported", "the program starts a thread (tqdm._monitor.TMonitor: tqdm's monitor "
        "thread, started with the first progress bar: set tqdm.tqdm.monitor_interval = 0 "
        "before it to go without (it only refreshes bars that stall)); the sandbox (WASI) "
        "has no threads")


def test_requests_to_a_closed_port_is_a_connection_error(group_a):
    """No network in the sandbox: requests.get fails as on a machine without one (the name
    lookup's error: it used to trap the instance, status crashed)."""
    result = group_a.guest(
        "import requests\ntry:\n    requests.get('http://127.0.0.1:9/', timeout=1)\n"
        "except requests.exceptions.ConnectionError as exc:\n"
        "    print(type(exc).__name__, 'name resolution' in str(exc))\n")
    assert (result["status"], result["stdout"]) == ("ok", "ConnectionError True\n")
