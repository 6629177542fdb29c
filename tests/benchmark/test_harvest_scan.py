"""The harvest's scan on a package made here (steptrace.benchmark._scan, _exports,
_annotations): functions found where users call them (re-exports through ``__init__``
and ``__all__``, star imports, private modules), each once; entry points, I/O,
randomness and time refused with their reasons; generic annotations read into type specs
and a model's calls checked against them before anything runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from steptrace.benchmark._annotations import (A_CALLABLE, A_CLASS, A_TYPEVAR, A_UNION,
                                              AN_ITERATOR, OBJECT_RETURN, NotLiteral,
                                              conforms, spec_of)
from steptrace.benchmark._exports import entry_points
from steptrace.benchmark._harvest import CallReport, admitted, parse_calls, scan_site
from steptrace.benchmark._scan import _ModuleFacts, source_digest

from helpers.benchmark import installed_site

INIT = '''
from ._impl import url_parse as parse
from ._impl import helper, Tools
from .api import *
from lib.cli import run
import json
from json import dumps
'''
IMPL = '''
import re
from typing import Callable, Optional, TypeVar

T = TypeVar("T")
N = TypeVar("N", bound=float)
S = TypeVar("S", str, bytes)
P = TypeVar("P", bound=Callable)


def url_parse(url: str, slashes: bool = False) -> Optional[str]:
    return url if slashes else None


def helper(x: int) -> int:
    return x


def helper(x: int) -> int:
    return x + 1


class Tools:
    @staticmethod
    def double(x: int) -> int:
        return 2 * x
'''
API = '''
import random
import re
import time
from typing import Any, Iterable, Mapping, Sequence, Union

from ._impl import N, P, S, T

__all__ = ["first", "total", "mapping", "pick", "apply", "roll", "stamp", "either"]


def first(xs: Iterable[T]) -> T:
    for x in xs:
        return x
    raise ValueError("empty")


def total(xs: Sequence[N]) -> N:
    return sum(xs)


def mapping(m: Mapping[str, T], key: str) -> Any:
    return m[key]


def pick(s: S) -> S:
    return s[:1]


def apply(f: P, x: int) -> int:
    return f(x)


def roll(n: int) -> int:
    return int(random.random() * n)


def stamp(x: int) -> float:
    return time.time() + x


def either(x: Union[str, re.Pattern]) -> int:
    return len(x)


def hidden(x: int) -> int:
    return x
'''
CORE = '''
import click
from typing import Iterator

from ._impl import helper


def square(x: int) -> int:
    return x * x


def main(argv: list[str]) -> int:
    return 0


def parse_args(argv: list[str]) -> int:
    import argparse
    return len(argparse.ArgumentParser().parse_args(argv).__dict__)


@click.command()
def cmd(x: int) -> int:
    return x


def gen_it(n: int) -> Iterator[int]:
    return iter(range(n))
'''
CLI = "def run(argv: list[str]) -> int:\n    return len(argv)\n"
ENTRY_POINTS = "[console_scripts]\nlib-run = lib.cli:run\n\n[lib.plugins]\nx = lib.core:square\n"


def make_lib(root: Path) -> Path:
    files = {"lib/__init__.py": INIT, "lib/_impl.py": IMPL, "lib/api.py": API,
             "lib/core.py": CORE, "lib/cli.py": CLI}
    return installed_site(root, "lib-2.0", files, ENTRY_POINTS)


def test_functions_are_found_by_their_public_names_each_once(tmp_path):
    report = scan_site(make_lib(tmp_path))
    kept = {h.id: h for h in report.kept}
    assert sorted(kept) == ["lib.Tools.double", "lib.core.square", "lib.either", "lib.first",
                            "lib.helper", "lib.mapping", "lib.parse", "lib.pick", "lib.total"]
    assert report.rejected == {
        "lib.apply": "annotation not literal-able: f: P (a type variable no literal "
                     "satisfies)",
        "lib.roll": "randomness: random.random",
        "lib.stamp": "time: time.time",
        "lib.run": "entry point: console script lib-run",
        "lib.core.main": "entry point: named main",
        "lib.core.parse_args": "entry point: argparse",
        "lib.core.cmd": "entry point: @click.command",
        "lib.core.gen_it": "annotation not literal-able: return: Iterator[int] (an iterator "
                           "or generator)"}
    # 17 functions: lib.api.hidden is not in __all__, json.dumps is another distribution's,
    # helper (defined twice) is one, and every re-export of one function is that one
    assert (report.found, report.reexported, report.aliases) == (17, 12, 9)
    assert report.by_reason() == {"entry point": 4, "annotation not literal-able": 2,
                                  "randomness": 1, "time": 1}
    assert dict(report.annotations) == {A_TYPEVAR: 1, AN_ITERATOR: 1}
    # a re-export under another name: the id is the public name, the program the def
    parse = kept["lib.parse"]
    assert (parse.entry, parse.module, parse.defined_in, parse.name, parse.aliases) == (
        "url_parse", "lib", "lib._impl", "parse", ())
    assert parse.code.startswith("def url_parse(url: str, slashes: bool = False)")
    assert kept["lib.first"].aliases == ("lib.api.first",)
    # the last definition is the one the module binds
    assert kept["lib.helper"].code == "def helper(x: int) -> int:\n    return x + 1\n"
    assert kept["lib.Tools.double"].defined_in == "lib._impl"
    # type variables (imported from another module of the package), bounds, constraints
    specs = {ident: dict(h.specs) for ident, h in kept.items()}
    assert specs["lib.first"] == {"xs": ("items", "iterable", ("any",))}
    assert specs["lib.total"] == {"xs": ("items", "sequence", ("atom", "float"))}
    assert specs["lib.pick"] == {"s": ("union", (("atom", "str"), ("atom", "bytes")))}
    assert specs["lib.mapping"] == {"m": ("map", "dict", ("atom", "str"), ("any",)),
                                    "key": ("atom", "str")}
    assert specs["lib.either"] == {"x": ("atom", "str")}  # a literal satisfies one member
    # the digest is of the function's own code, normalised, whatever module re-exports it
    assert parse.source_digest == source_digest(parse.code)
    assert report.digests["lib.run"] == source_digest(CLI)  # rejected ones have one too
    assert set(report.digests) == set(report.rejected) | set(kept)


def test_the_source_digest_ignores_formatting_comments_and_the_docstring():
    code = "def f(x: int) -> int:\n    return x + 1\n"
    same = ('def f(x:int)->int:\n    """Add one."""\n    # a comment\n'
            "    return (x+1)\n")
    assert source_digest(same) == source_digest(code)
    assert source_digest("def f(x: int) -> int:\n    return x + 2\n") != source_digest(code)
    assert source_digest("def f(x: int) -> int:\n    return 'x' + 1\n") != source_digest(code)
    # a function whose body is only its docstring keeps it (the body cannot be empty)
    assert source_digest('def f():\n    "a"\n') != source_digest('def f():\n    "b"\n')


def test_calls_are_checked_against_the_annotations_before_they_run(tmp_path):
    kept = {h.id: h for h in scan_site(make_lib(tmp_path)).kept}
    cases = {
        "lib.first": ("first([1, 2])\nfirst('ab')\nfirst({'a': 1})\nfirst(5)\nfirst(None)",
                      ["[1, 2]", "'ab'", "{'a': 1}"], 2),
        "lib.total": ("total([1, 2.5])\ntotal((True,))\ntotal(['a'])\ntotal({1, 2})",
                      ["[1, 2.5]", "(True,)"], 2),
        "lib.pick": ("pick(b'x')\npick('y')\npick(3)\npick(['y'])", ["b'x'", "'y'"], 2),
        "lib.mapping": ("mapping({'a': [1]}, 'a')\nmapping({1: 2}, 'a')\n"
                        "mapping({'a': 1}, key=2)\nmapping(m={}, key='k')",
                        ["{'a': [1]}, 'a'", "m={}, key='k'"], 2),
        "lib.either": ("either('x')\neither(1)", ["'x'"], 1),
        # by its public name or its def's, with keywords
        "lib.parse": ("parse('http://x')\nurl_parse('y', slashes=True)\nparse('z', 1)",
                      ["'http://x'", "'y', slashes=True"], 1),
    }
    for ident, (text, inputs, mismatched) in cases.items():
        report = CallReport()
        assert parse_calls(text, kept[ident], 10, report) == inputs, ident
        assert report.type_mismatch == mismatched, ident
    # a value the host cannot make (an unhashable set element, dict key) is a bad call
    report = CallReport()
    assert parse_calls("helper({[1]})\nhelper({[1]: 2})\nhelper('1')", kept["lib.helper"],
                       5, report) == []
    assert (report.bad_arguments, report.type_mismatch) == (2, 1)
    assert admitted(kept["lib.total"], {"xs": ["a"]}) == "xs=['a'] is not sequence[float]"


IMPORTS = ("from typing import (Any, AnyStr, Annotated, Callable, Iterable, Iterator, List, "
           "Literal, NewType, Optional, TypeVar, Union)\nimport collections.abc as abc\n"
           "import typing_extensions as te\nfrom re import Pattern\n")


def read(annotation: str, returns: bool = False, aliases: dict[str, str] | None = None):
    """The spec of ``annotation`` in a module with IMPORTS and the ``aliases`` assigned."""
    module = IMPORTS + "".join(f"{k} = {v}\n" for k, v in (aliases or {}).items())
    facts = _ModuleFacts(ast.parse(module))
    return spec_of(ast.parse(annotation, mode="eval").body, facts.origin, facts.aliases,
                   returns)


@pytest.mark.parametrize("annotation, spec", [
    ("int", ("atom", "int")),
    ("Optional[List[int]]", ("union", (("items", "list", ("atom", "int")), ("atom", "none")))),
    ("abc.Sequence[str]", ("items", "sequence", ("atom", "str"))),
    ("te.Literal['a', 1]", ("literal", ("a", 1))),
    ("tuple[int, ...]", ("items", "tuple", ("atom", "int"))),
    ("tuple[int, str]", ("tuple", (("atom", "int"), ("atom", "str")))),
    ("'dict[str, int] | None'", ("union", (("map", "dict", ("atom", "str"), ("atom", "int")),
                                           ("atom", "none")))),
    ("Annotated[int, 'meta']", ("atom", "int")),
    ("AnyStr", ("union", (("atom", "str"), ("atom", "bytes")))),
    ("Any", ("any",)), ("object", ("any",)),
    ("Union[int, Callable]", ("atom", "int")),    # a parameter: the members a literal fits
    ("Union[int, int, str]", ("union", (("atom", "int"), ("atom", "str")))),
])
def test_parameter_annotations_read_into_specs(annotation, spec):
    assert read(annotation) == spec


@pytest.mark.parametrize("annotation, aliases, spec", [
    ("Iterable[_T]", {"_T": "TypeVar('_T')"}, ("items", "iterable", ("any",))),
    ("T", {"T": "TypeVar('T', bound='int')"}, ("atom", "int")),
    ("T", {"T": "TypeVar('T', int, Callable)"}, ("atom", "int")),
    ("UserId", {"UserId": "NewType('UserId', int)"}, ("atom", "int")),
    ("Pair", {"Pair": "tuple[int, int]"}, ("tuple", (("atom", "int"), ("atom", "int")))),
])
def test_type_variables_and_aliases(annotation, aliases, spec):
    assert read(annotation, aliases=aliases) == spec


@pytest.mark.parametrize("annotation, returns, aliases, reason", [
    ("Callable[[int], int]", False, {}, A_CALLABLE),
    ("Iterator[int]", False, {}, AN_ITERATOR),
    ("Pattern", False, {}, A_CLASS),
    ("Union[Pattern, Callable]", False, {}, A_CLASS),       # no member fits: the first's why
    ("object", True, {}, OBJECT_RETURN),
    ("Union[int, Pattern]", True, {}, A_UNION),             # a return: every member
    ("T", True, {"T": "TypeVar('T', int, Pattern)"}, A_TYPEVAR),
    ("T", False, {"T": "TypeVar('T', bound=Callable)"}, A_TYPEVAR),
    ("'int +'", False, {}, "a string annotation that does not parse"),
    ("List[int, str]", False, {}, "another typing construct"),
])
def test_annotations_no_literal_satisfies_say_why(annotation, returns, aliases, reason):
    with pytest.raises(NotLiteral) as caught:
        read(annotation, returns, aliases)
    assert caught.value.reason == reason


@pytest.mark.parametrize("value, annotation, fits", [
    (1, "int", True), (True, "int", True), (1.0, "int", False), (1, "float", True),
    (1j, "float", False), (None, "Optional[int]", True), ("1", "Optional[int]", False),
    ([1, "a"], "List[int]", False), ((1, 2), "List[int]", False), ((1, "a"), "tuple[int, str]", True),
    ((1,), "tuple[int, str]", False), ((), "tuple[int, ...]", True),
    ("ab", "Iterable[str]", True), (b"ab", "Iterable[int]", True), ({"a": 1}, "Iterable[str]", True),
    ({"a": 1}, "Iterable[int]", False), (frozenset({1}), "abc.Set[int]", True),
    ({1: 2}, "dict[int, int]", True), ({1: "2"}, "dict[int, int]", False),
    ("a", "te.Literal['a', 'b']", True), ("c", "te.Literal['a', 'b']", False),
    (1, "te.Literal[True]", False), (True, "te.Literal[True]", True),
    ([[[[1]]]], "List[List[List[List[int]]]]", True), ([[[["x"]]]], "List[List[List[List[int]]]]", False),
])
def test_values_are_checked_against_specs(value, annotation, fits):
    assert conforms(value, read(annotation)) is fits


def test_conformance_of_a_deep_value_is_bounded():
    deep: list = []
    node = deep
    for _ in range(500):
        node.append([])
        node = node[0]
    assert conforms(deep, read("Iterable[Any]")) is True   # elements are Any: not walked
    assert conforms(deep, read("List[List[Any]]")) is True
    nested = ("items", "list", ("any",))
    for _ in range(200):
        nested = ("items", "list", nested)
    assert conforms(deep, nested) is False                # past the depth bound: refused


def test_entry_points_are_read_from_console_and_gui_scripts():
    text = ("[console_scripts]\na = pkg.cli:main\nb=pkg.cli:Tool.run [extra]\n"
            "[gui_scripts]\nc = pkg.gui:start\n[pkg.plugins]\nd = pkg.x:y\nnot a line\n")
    assert entry_points(text) == [("a", "pkg.cli", "main"), ("b", "pkg.cli", "Tool.run"),
                                  ("c", "pkg.gui", "start")]


def test_cycles_of_re_exports_end_and_star_imports_are_followed_once(tmp_path):
    # a and b star-import each other, c and d re-export each other's name: nothing
    # loops, and what is defined is found once
    files = {"cyc/__init__.py": "from .a import *\nfrom .c import g\n",
             "cyc/a.py": "from .b import *\n\ndef f(x: int) -> int:\n    return x\n",
             "cyc/b.py": "from .a import *\nfrom . import a\n",
             "cyc/c.py": "from .d import g\n", "cyc/d.py": "from .c import g\n"}
    for i in range(40):  # many modules star-importing each other
        files[f"cyc/m{i}.py"] = "".join(f"from .m{j} import *\n" for j in range(40) if j != i)
    report = scan_site(installed_site(tmp_path, "cyc-1", files))
    assert [h.id for h in report.kept] == ["cyc.f"]
    assert (report.found, report.aliases, report.kept[0].aliases) == (
        1, 2, ("cyc.a.f", "cyc.b.f"))


def test_relative_imports_in_a_function_are_made_absolute(tmp_path):
    """The program runs outside its package: a relative import in its body (numpy's
    ``set_default_printstyle`` imports ``from ._polybase import ABCPolyBase``) is made
    absolute from its defining module (a package's ``__init__`` or a module), every
    form: ``from . import``, ``from ..x``, spaces after the dots; other lines as they
    were."""
    init = ("def style(name: str) -> str:\n"
            "    from ._base import Base  # the base\n"
            "    from . import sub\n"
            "    return name\n")
    sub = ("def deep(n: int) -> int:\n"
           "    if n:\n"
           "        from .. import lib ; from ..lib.x import y as z\n"
           "    from .  _base import ( Base,\n"
           "        Other)\n"
           "    s = 'from .x import y'\n"
           "    return n\n")
    site = installed_site(tmp_path, "lib-1.0", {
        "lib/__init__.py": "", "lib/pkg/__init__.py": init, "lib/pkg/_base.py": "",
        "lib/pkg/sub.py": sub, "lib/x.py": ""})
    kept = {h.id: h.code for h in scan_site(site).kept}
    assert kept["lib.pkg.style"] == ("def style(name: str) -> str:\n"
                                     "    from lib.pkg._base import Base  # the base\n"
                                     "    from lib.pkg import sub\n"
                                     "    return name\n")
    assert kept["lib.pkg.sub.deep"] == (
        "def deep(n: int) -> int:\n"
        "    if n:\n"
        "        from lib import lib ; from lib.lib.x import y as z\n"
        "    from lib.pkg._base import ( Base,\n"
        "        Other)\n"
        "    s = 'from .x import y'\n"
        "    return n\n")
