"""Popular pure-Python packages in the guest, probed with real calls: the same pinned wheels
run natively (CPython 3.13) and in a guest built with them must print the same. Two
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


def _lock(path: str):
    return parse_lock((Path(__file__).parent / "data" / path).read_text())


@pytest.fixture(scope="module")
def group_a(tmp_path_factory):
    guest = PackageGuest(_lock("popular_a.lock"), tmp_path_factory.mktemp("popular-a"))
    yield guest
    guest.close()


@pytest.fixture(scope="module")
def group_b(tmp_path_factory):
    guest = PackageGuest(_lock("popular_b.lock"), tmp_path_factory.mktemp("popular-b"))
    yield guest
    guest.close()


@pytest.mark.parametrize("name", sorted(PROBES_A))
def test_popular_packages_a_as_native(group_a, name):
    group_a.assert_as_native(textwrap.dedent(PROBES_A[name]))


@pytest.mark.parametrize("name", sorted(PROBES_B))
def test_popular_packages_b_as_native(group_b, name):
    group_b.assert_as_native(textwrap.dedent(PROBES_B[name]))


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
