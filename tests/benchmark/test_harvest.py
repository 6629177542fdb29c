"""Harvesting (steptrace.benchmark._harvest, ``steptrace harvest``): the static scan of an
installed site (what is kept, why the rest is not, the programs), parsing the model's
calls, the log and resuming, and a real harvest of six pinned registry packages with
inputs from the local test server, traced, with tasks (``error`` ones too) scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import steptrace as st
from steptrace.benchmark._harvest import (CallReport, Harvested, HarvestError, HarvestOptions,
                                          harvest, parse_calls, read_log, scan_site)
from steptrace.cli._main import main
from steptrace.predictions._predict import PredictOptions
from steptrace.sandbox._packages import LOCK_HEADER, parse_lock
from steptrace.scoring._judges import error_parts, judge_error

from helpers.benchmark import function_of, installed_site
from helpers.cli import rows
from helpers.openai_stub import StubServer, answer


# ------------------------------------------------------------------ the scan
MODULE = '''
import os
import typing as t
from typing import Optional, List
from .helpers import scale

LIMIT = 10
Pair = tuple[int, int]


def kept(xs: list[int], k: int = LIMIT) -> int:
    """Sum of the first k, scaled."""
    total = 0
    for x in xs[:k]:
        total += scale(x)
    return total + len(xs)


def aliased(p: Pair, name: "Optional[str]" = None) -> t.List[int]:
    return [p[0], p[1]]


def recursive(n: int) -> int:
    return 1 if n < 2 else n * recursive(n - 1)


def literal(mode: t.Literal["a", "b"], flags: frozenset[str] | None) -> bool:
    def inner(y):
        return y in ("a",) and LIMIT
    return inner(mode)


def gen(n: int) -> int:
    yield n


async def run(n: int) -> int:
    return n


@property
def decorated(n: int) -> int:
    return n


def star(*xs: int) -> int:
    return 0


def nothing() -> int:
    return 1


def bare(x, y: int) -> int:
    return x


def obj(x: object) -> int:
    return 1


def reads(path: str) -> str:
    return open(path).read()


def environ(name: str) -> str:
    return os.environ[name]


def later(x: int) -> float:
    import time
    return time.time() + x


def unknown(x: int) -> int:
    return x + undefined_name


def setter(x: int) -> None:
    global LIMIT
    LIMIT = x


def _private(x: int) -> int:
    return x


class Tools:
    @staticmethod
    def double(x: int) -> int:
        return x * 2

    def method(self, x: int) -> int:
        return x


class _Hidden:
    @staticmethod
    def double(x: int) -> int:
        return x * 2
'''
STUBBED = "def both(a, b=1):\n    return a + b\n\ndef over(a):\n    return a\n"
STUB = ("from typing import overload\ndef both(a: int, b: int = ...) -> int: ...\n"
        "@overload\ndef over(a: int) -> int: ...\n@overload\ndef over(a: str) -> str: ...\n")
# a module that would do harm if the host imported it: the scan only parses it
HOSTILE = ("import pathlib\npathlib.Path(__file__).with_name('IMPORTED').write_text('x')\n"
           "def harmless(x: int) -> int:\n    return x\n")


def make_site(root: Path) -> Path:
    files = {"pkg/__init__.py": "", "pkg/core.py": MODULE, "pkg/helpers.py": "def scale(x):\n    return x * 3\n",
             "pkg/stubbed.py": STUBBED, "pkg/stubbed.pyi": STUB, "pkg/hostile.py": HOSTILE,
             "pkg/_impl.py": "def hidden(x: int) -> int:\n    return x\n",
             "pkg/tests/test_x.py": "def test(x: int) -> int:\n    return x\n",
             "pkg/broken.py": "def f(:\n"}
    return installed_site(root, "pkg-1.0", files)


def test_the_scan_keeps_literal_annotated_io_free_functions_and_says_why_not(tmp_path):
    report = scan_site(make_site(tmp_path))
    assert not (tmp_path / "pkg" / "IMPORTED").exists()  # nothing was imported
    # pkg._impl is parsed too (a private module's functions are found by their re-exports:
    # pkg/__init__.py exports none of them here)
    assert (report.modules, report.unparsed_modules, report.found) == (6, ["pkg.broken"], 21)
    kept = {h.id: h for h in report.kept}
    assert sorted(kept) == ["pkg.core.Tools.double", "pkg.core.aliased", "pkg.core.kept",
                            "pkg.core.literal", "pkg.core.obj", "pkg.core.recursive",
                            "pkg.hostile.harmless", "pkg.stubbed.both"]
    assert kept["pkg.core.obj"].specs == (("x", ("any",)),)  # any literal is an object
    assert report.rejected == {
        "pkg.core.gen": "generator", "pkg.core.run": "async",
        "pkg.core.decorated": "decorated: @property", "pkg.core.star": "*args or **kwargs",
        "pkg.core.nothing": "no parameters", "pkg.core.bare": "annotation missing: x",
        "pkg.core.reads": "I/O: open()", "pkg.core.environ": "I/O: os.environ",
        "pkg.core.later": "time: time",
        "pkg.core.unknown": "name not bound in its module: undefined_name",
        "pkg.core.setter": "global statement",
        "pkg.stubbed.over": "annotation missing: overloaded in its stub",
        "pkg.helpers.scale": "annotation missing: x"}
    assert report.found == len(report.kept) + len(report.rejected)  # private ones not found
    assert report.by_reason() == {
        "async": 1, "generator": 1, "decorated": 1, "*args or **kwargs": 1, "no parameters": 1,
        "annotation missing": 3, "global statement": 1, "I/O": 2, "time": 1,
        "name not bound in its module": 1}
    # the program: the names it uses from its module imported, then its own source
    assert kept["pkg.core.kept"].code == (
        "from pkg.core import LIMIT, scale\n\n\n"
        "def kept(xs: list[int], k: int = LIMIT) -> int:\n"
        '    """Sum of the first k, scaled."""\n    total = 0\n    for x in xs[:k]:\n'
        "        total += scale(x)\n    return total + len(xs)\n")
    assert (kept["pkg.core.kept"].entry, kept["pkg.core.kept"].module,
            kept["pkg.core.kept"].distribution, kept["pkg.core.kept"].doc) == (
        "kept", "pkg.core", "pkg", "Sum of the first k, scaled.")
    assert kept["pkg.core.kept"].signature == "def kept(xs: list[int], k: int=LIMIT) -> int"
    assert kept["pkg.core.recursive"].code.startswith("def recursive(")  # defines itself
    assert kept["pkg.core.literal"].code.startswith("from pkg.core import LIMIT\n")
    assert kept["pkg.core.Tools.double"].code == (
        "def double(x: int) -> int:\n    return x * 2\n")
    # a .py function without annotations takes its stub's, defaults from the .py
    assert kept["pkg.stubbed.both"].signature == "def both(a: int, b: int=1) -> int"
    assert kept["pkg.stubbed.both"].params == (("a", "either", False), ("b", "either", True))


# ------------------------------------------------------------------ parsing calls
FUNC = Harvested("m.f", "m", "m", "f", "def f(a, /, b=1, *, c=2):\n    return a\n",
                 "def f(a: int, /, b: int=1, *, c: int=2) -> int", None,
                 (("a", "positional", False), ("b", "either", True), ("c", "keyword", True)))


def test_calls_are_literal_calls_of_the_function_that_bind():
    report = CallReport()
    text = ("Sure!\n[CALLS]\n```python\nf(1)\nf(1, b=2)\nf( 1 , 'x' )\nf(1, \"x\")\n"
            "m.f(3, c=4)\n>>> f(5)\ng(1)\nf(x)\nf(1, *xs)\nf(**{'a': 1})\nf(a=1)\nf(1, 2, 3)\n"
            "f(1, z=2)\nf({1: [2, (3,)]}, frozenset({1}))\nf(set())\nf(len('x'))\nf(-1.5e3)\n"
            "not python at all (\nf(9)\nf(10)\n```\n[/CALLS]\nf(11)\n")
    assert parse_calls(text, FUNC, limit=10, report=report) == [
        "1", "1, b=2", "1, 'x'", "3, c=4", "5", "{1: [2, (3,)]}, frozenset({1})", "set()",
        "-1500.0", "9", "10"]
    assert report == CallReport(lines=20, inputs=10, duplicates=1, not_a_call=2,
                                not_literal=4, bad_arguments=3, extra=0)
    # past the limit, counted as extra; no block: every line of the response
    report = CallReport()
    assert parse_calls("f(1)\nf(2)\nf(3)", FUNC, limit=2, report=report) == ["1", "2"]
    assert (report.extra, report.inputs) == (1, 2)
    assert parse_calls(None, FUNC, 3) == [] and parse_calls("", FUNC, 3) == []
    # a huge argument text is no input
    assert parse_calls(f"f('{'x' * 3000}')", FUNC, 3) == []


# ------------------------------------------------------------------ the error judge
ERROR_TASK = {"answer": "InvalidRomanNumeralError: Invalid Roman numeral: IIII"}


@pytest.mark.parametrize("predicted, right", [
    ("InvalidRomanNumeralError: Invalid Roman numeral: IIII", True),
    ("  roman.InvalidRomanNumeralError :  Invalid Roman numeral: IIII \n", True),
    ("`InvalidRomanNumeralError: Invalid Roman numeral: IIII`", True),
    ("InvalidRomanNumeralError", False),                       # the message is part of it
    ("InvalidRomanNumeralError: invalid roman numeral: iiii", False),  # case counts
    ("ValueError: Invalid Roman numeral: IIII", False),
    ("Invalid Roman numeral: IIII", False),
    # hostile: a non-identifier type, an answer smuggling both, a huge text
    ("Invalid Roman numeral:IIII: Invalid Roman numeral: IIII", False),
    ("InvalidRomanNumeralError: Invalid Roman numeral: IIII\nValueError: x", False),
    ("InvalidRomanNumeralError: " + "Invalid Roman numeral: IIII" * 10_000, False),
    (": Invalid Roman numeral: IIII", False),
])
def test_the_error_judge_is_exact_on_type_and_message(predicted, right):
    assert judge_error(ERROR_TASK, predicted, None) == (right, None)


def test_an_error_without_a_message_is_its_type_alone():
    task = {"answer": "ValueError"}
    assert error_parts("ValueError") == ("ValueError", "")
    assert judge_error(task, "ValueError", None) == (True, None)
    assert judge_error(task, "builtins.ValueError:", None) == (True, None)
    assert judge_error(task, "ValueError: n must be positive", None) == (False, None)


# ------------------------------------------------------------------ six real packages
LOCK_TEXT = f"""{LOCK_HEADER}
humanize==4.17.0 --hash=sha256:02d0899527760efe18011944f882df4970943b4cdff7b5a0ba7fed43a576ef98
idna==3.20 --hash=sha256:ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c
inflection==0.5.1 --hash=sha256:f38b2b640938a4f35ade69ac3d053042959b62a0f1076a5bbaa1b9526605a8a2
mdurl==0.1.2 --hash=sha256:84008a41e51615a49fc9966191ff91509e3c40b939176e643fd50a5c2196b8f8
more-itertools==11.2.1 --hash=sha256:35a7377edd1dd6608dcb2cdf534ded55ea32d49448875ad042cd3f879fb1ded0
packaging==26.3 --hash=sha256:d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c
roman==5.2 --hash=sha256:89d3b47400388806d06ff77ea77c79ab080bc127820dea6bf34e1f1c1b8e676e
"""
# the model's replies, scripted per function (every other function: an empty block)
SCRIPT = {
    "roman.toRoman": "[CALLS]\ntoRoman(1994)\ntoRoman(0)\ntoRoman(4)\n[/CALLS]",
    "roman.fromRoman": "[CALLS]\nfromRoman('MCMXCIV')\nfromRoman('IIII')\nfromRoman(s=\"XL\")\n[/CALLS]",
    "inflection.pluralize": "Here you go:\n[CALLS]\npluralize('octopus')\npluralize('sheep')\npluralize('person')\n[/CALLS]",
    "inflection.ordinal": "[CALLS]\nordinal(1)\nordinal(-12)\nordinal(1)\n[/CALLS]",
    "inflection.underscore": "[CALLS]\nunderscore('DeviceType')\nunderscore(word=\"IOError\")\nThese cover camel case.\n[/CALLS]",
    # re-exported: humanize.number.intcomma is called as humanize.intcomma
    "humanize.intcomma": "```python\nintcomma(1000000)\nintcomma('1234.5', ndigits=1)\nintcomma(x)\nintcomma([1])\n```",
    "humanize.ordinal": "[CALLS]\nordinal(3)\nordinal('111')\nordinal(2, 'female', 1)\n[/CALLS]",
    "idna.alabel": "[CALLS]\nalabel('bücher')\nalabel('')\nalabel('a' * 64)\n[/CALLS]",
    "idna.valid_label_length": "[CALLS]\nvalid_label_length(b'abc')\nvalid_label_length('x')\nvalid_label_length(3)\n[/CALLS]",
    "idna.intranges.intranges_from_list": "[CALLS]\nintranges_from_list([1, 2, 3, 7, 8])\nintranges_from_list([])\n[/CALLS]",
    "more_itertools.is_prime": "[CALLS]\nis_prime(97)\nis_prime(1)\nis_prime(-7)\nis_prime(2)\n[/CALLS]",
    "more_itertools.subfactorial": "[CALLS]\nsubfactorial(4)\nsubfactorial(-1)\n[/CALLS]",
    # generics: take(n: int, iterable: Iterable[_T]) -> list[_T]
    "more_itertools.take": "[CALLS]\ntake(2, [1, 2, 3])\ntake(2, 'abc')\ntake('2', [1])\n[/CALLS]",
    "more_itertools.all_equal": "[CALLS]\nall_equal([1, 1, 1])\nall_equal('aab')\n[/CALLS]",
    # its code draws random numbers in a helper: dropped by the run in the variant guest
    "more_itertools.sample": "[CALLS]\nsample([1, 2, 3, 4, 5, 6, 7, 8], 3)\n[/CALLS]",
    "packaging.version.normalize_pre": "[CALLS]\nnormalize_pre('alpha')\nnormalize_pre('RC')\nnormalize_pre(letter='c')\n[/CALLS]",
    "packaging.utils.is_normalized_name": "[CALLS]\nis_normalized_name('foo-bar')\nis_normalized_name('Foo_Bar')\n[/CALLS]",
    # defined in mdurl/_decode.py, _encode.py: found through mdurl/__init__.py
    "mdurl.decode": "[CALLS]\ndecode('%41%20b')\ndecode(5)\n[/CALLS]",
    "mdurl.encode": "[CALLS]\nencode('a b')\n[/CALLS]",
}


RUNS = [
    ("humanize.intcomma", "1000000", "ok", "'1,000,000'", None, None),
    ("humanize.intcomma", "'1234.5', ndigits=1", "ok", "'1,234.5'", None, None),
    ("humanize.ordinal", "3", "ok", "'3rd'", None, None),
    ("humanize.ordinal", "'111'", "ok", "'111th'", None, None),
    ("idna.alabel", "'bücher'", "ok", "b'xn--bcher-kva'", None, None),
    ("idna.alabel", "''", "exception", None, "IDNAError", "Empty Label"),
    ("idna.intranges.intranges_from_list", "[1, 2, 3, 7, 8]", "ok",
     "(4294967300, 30064771081)", None, None),
    ("idna.intranges.intranges_from_list", "[]", "ok", "()", None, None),
    ("idna.valid_label_length", "b'abc'", "ok", "True", None, None),
    ("idna.valid_label_length", "'x'", "ok", "True", None, None),
    ("inflection.ordinal", "1", "ok", "'st'", None, None),
    ("inflection.ordinal", "-12", "ok", "'th'", None, None),
    ("inflection.underscore", "'DeviceType'", "ok", "'device_type'", None, None),
    ("inflection.underscore", "word='IOError'", "ok", "'io_error'", None, None),
    ("mdurl.decode", "'%41%20b'", "ok", "'A b'", None, None),
    ("mdurl.encode", "'a b'", "ok", "'a%20b'", None, None),
    ("more_itertools.all_equal", "[1, 1, 1]", "ok", "True", None, None),
    ("more_itertools.all_equal", "'aab'", "ok", "False", None, None),
    ("more_itertools.is_prime", "97", "ok", "True", None, None),
    ("more_itertools.is_prime", "1", "ok", "False", None, None),
    ("more_itertools.is_prime", "-7", "ok", "False", None, None),
    ("more_itertools.subfactorial", "4", "ok", "9", None, None),
    ("more_itertools.subfactorial", "-1", "exception", None, "ValueError", ""),
    ("more_itertools.take", "2, [1, 2, 3]", "ok", "[1, 2]", None, None),
    ("more_itertools.take", "2, 'abc'", "ok", "['a', 'b']", None, None),
    ("packaging.utils.is_normalized_name", "'foo-bar'", "ok", "True", None, None),
    ("packaging.utils.is_normalized_name", "'Foo_Bar'", "ok", "False", None, None),
    ("packaging.version.normalize_pre", "'alpha'", "ok", "'a'", None, None),
    ("packaging.version.normalize_pre", "'RC'", "ok", "'rc'", None, None),
    ("roman.fromRoman", "'MCMXCIV'", "ok", "1994", None, None),
    ("roman.fromRoman", "'IIII'", "exception", None, "InvalidRomanNumeralError",
     "Invalid Roman numeral: IIII"),
    ("roman.fromRoman", "s='XL'", "ok", "40", None, None),
    ("roman.toRoman", "1994", "ok", "'MCMXCIV'", None, None),
    ("roman.toRoman", "0", "ok", "'N'", None, None),
    ("roman.toRoman", "4", "ok", "'IV'", None, None),
]
# the upload times the test gives (--released FILE): two packages after 2026-01-01
RELEASED = ("humanize==4.17.0 2026-11-12T12:33:32Z\nidna==3.20 2026-09-17T14:11:03Z\n"
            "inflection 2020-08-22T08:16:27+00:00\nmdurl==0.1.2 2022-08-14T12:40:09\n"
            "more-itertools==11.2.1 2025-10-14T18:50:29Z\n"
            "packaging==26.3 2025-08-04T18:15:27Z\nroman==5.2 2025-11-11T08:03:56Z\n")


def stub() -> StubServer:
    return StubServer({name: answer(text) for name, text in SCRIPT.items()},
                      default=answer("[CALLS]\n[/CALLS]"), key_of=function_of)


@pytest.mark.slow
def test_a_harvest_of_seven_real_packages_checked_traced_with_tasks_and_error_scores(tmp_path):
    """Seven pinned registry packages: 247 functions found by their public names (200
    through a re-export), 79 kept, 19 given inputs by the scripted model; 4 calls against
    the annotations never run; 39 examples traced and run twice more, the 4 whose runs
    differ dropped, 35 kept (3 raising their own errors) and traced into the store with
    their release metadata; tasks made from them, the error tasks scored right and
    wrong."""
    out = tmp_path / "harvest"
    released = tmp_path / "released.txt"
    released.write_text(RELEASED)
    with stub() as server:
        summary = harvest(out, parse_lock(LOCK_TEXT),
                          PredictOptions("stub-model", base_url=server.base_url),
                          HarvestOptions(inputs=3, workers=1, released=released))
        assert sum(server.requests.values()) == 79
    assert (summary.modules, summary.unparsed_modules, summary.found, summary.kept,
            summary.reexported) == (49, 0, 247, 79, 200)
    assert summary.rejected == {"entry point": 2, "generator": 60, "*args or **kwargs": 14,
                                "no parameters": 7, "annotation missing": 14,
                                "annotation not literal-able": 65, "I/O": 2, "randomness": 4}
    assert summary.rejected_annotations == {
        "an iterator or generator": 38, "a class": 14, "a callable": 11,
        "a union with a member no literal satisfies (return)": 1,
        "a type variable no literal satisfies": 1}
    assert summary.kept_by_distribution == {"humanize": 13, "idna": 19, "inflection": 12,
                                            "mdurl": 2, "more-itertools": 27, "packaging": 4,
                                            "roman": 2}
    assert (summary.asked, summary.requests, summary.request_errors) == (79, 79, 0)
    assert summary.calls == CallReport(lines=50, inputs=39, duplicates=1, not_a_call=1,
                                       not_literal=2, bad_arguments=2, type_mismatch=4,
                                       extra=1)
    # each example run twice more: more_itertools.sample draws random numbers (its return
    # differs), inflection.pluralize's module global UNCOUNTABLES is a set of str (its
    # order, so the trace's globals, differ with another hash secret)
    assert summary.checked == {"error": 3, "nondeterministic": 4, "ok": 32}
    assert summary.examples == 35
    assert (summary.functions_with_inputs, summary.traced, summary.functions_ok,
            summary.functions_raising) == (19, {"exception": 3, "ok": 32}, 17, 3)
    assert summary.released["inflection"] == "2020-08-22T08:16:27Z"
    assert summary.released["mdurl"] == "2022-08-14T12:40:09Z"  # no zone: UTC
    written = json.loads((out / "harvest.json").read_text())
    assert written["found"] == 247 and len(written["kept_functions"]) == 79
    assert len(written["rejected_functions"]) == 168
    assert written["rejected_functions"]["idna.cli.main"] == "entry point: console script idna"
    assert written["aliases"]["humanize.intcomma"] == ["humanize.number.intcomma"]
    assert "mdurl.decode" not in written["aliases"]  # mdurl._decode is private
    assert sorted((d["function"], d["input"], d["verdict"])
                  for d in written["dropped_examples"]) == [
        ("inflection.pluralize", "'octopus'", "nondeterministic"),
        ("inflection.pluralize", "'person'", "nondeterministic"),
        ("inflection.pluralize", "'sheep'", "nondeterministic"),
        ("more_itertools.sample", "[1, 2, 3, 4, 5, 6, 7, 8], 3", "nondeterministic")]
    assert {d["note"] for d in written["dropped_examples"]} == {
        "globals differ (step 0, UNCOUNTABLES)", "return value differs"}
    diversity = written["diversity"]
    assert diversity["packages"] == {"humanize": 2, "idna": 3, "inflection": 2, "mdurl": 2,
                                     "more-itertools": 4, "packaging": 2, "roman": 2}
    assert diversity["call_depth"] == {"0": 34, "1": 1}
    assert sum(diversity["steps"].values()) == 35 and diversity["constructs"]["if"] == 10
    lock = parse_lock((out / "guest.lock").read_text())
    assert lock.packages == parse_lock(LOCK_TEXT).packages
    assert lock.imports == ("humanize", "idna", "idna.compat", "idna.intranges", "inflection",
                            "mdurl", "more_itertools", "packaging.utils",
                            "packaging.version", "roman")
    records = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [r["model_written"] for r in records] == ["inputs"] * 17  # the model's inputs
    decode = next(r for r in records if r["id"] == "mdurl.decode")
    assert (decode["entry"], decode["module"], decode["defined_in"], decode["version"],
            decode["released"], decode["inputs"]) == (
        "decode", "mdurl", "mdurl._decode", "0.1.2", "2022-08-14T12:40:09Z", ["'%41%20b'"])
    assert decode["code"].startswith("from mdurl._decode import DECODE_DEFAULT_CHARS, ")
    db = out / "store.duckdb"
    assert rows(db, "SELECT sample_id, input, status, output, exception_type, "
                    "exception_message FROM runs ORDER BY run_id") == RUNS
    assert rows(db, "SELECT isolation, count(*) FROM runs GROUP BY ALL") == [("job", 35)]
    # the check store holds every example the host admitted, the dropped ones too
    assert rows(out / "checks.duckdb", "SELECT count(*) FROM runs") == [(39,)]
    # traced again with batch isolation asked for: job isolation, one note, the same runs
    again = tmp_path / "again.duckdb"
    retraced = st.trace(out / "corpus.jsonl", again, workers=1, isolation="batch",
                        packages=out / "guest.lock")
    assert retraced.notes == ["batch isolation is not used for model-written code: 35 of the "
                              "35 jobs are of records marked model_written, so every job ran "
                              "in job isolation"]
    assert rows(again, "SELECT sample_id, input, status, output, exception_type, "
                       "exception_message FROM runs ORDER BY run_id") == RUNS
    # only the function's own code is traced: its module's helpers are not
    assert rows(db, "SELECT DISTINCT func FROM steps s JOIN runs r USING (run_id) "
                    "WHERE r.sample_id = 'roman.fromRoman'") == [("fromRoman",)]
    # a time window over the releases: humanize and idna were uploaded after 2026-01-01
    window = st.make_tasks(db, kinds="output", per_run=1,
                           where="meta.released > '2026-01-01'")
    assert sorted(set(window.tasks["sample_id"])) == [
        "humanize.intcomma", "humanize.ordinal", "idna.alabel",
        "idna.intranges.intranges_from_list", "idna.valid_label_length"]

    tasks = st.make_tasks(db, kinds="output,exception,error", per_run=1)
    assert tasks.rows() == [("output", 32, 32), ("exception", 35, 35), ("error", 3, 3),
                            ("total", 70, 35)]
    errors = tasks.tasks.filter(tasks.tasks["kind"] == "error")
    assert sorted(errors["answer"]) == ["IDNAError: Empty Label",
                                        "InvalidRomanNumeralError: Invalid Roman numeral: IIII",
                                        "ValueError"]
    records = list(errors.iter_rows(named=True))
    by_prompt = {t["prompt"]: t["task_id"] for t in records}
    right = {t["task_id"]: answer(f"[ANSWER]\nroman.{t['answer']} \n[/ANSWER]")
             for t in records}
    wrong = {t["task_id"]: answer("[ANSWER]\nValueError: Empty Label\n[/ANSWER]")
             for t in records}
    for model, script in (("right", right), ("wrong", wrong)):
        with StubServer(script, models=(model,), key_of=by_prompt.get) as server:
            st.predict(records, db, model, base_url=server.base_url)
    scored = st.score(db, records, ks=(1,), workers=0).as_dict()
    assert {(r["model"], r["kind"]): r["pass@1"] for r in scored["by_kind"]} == {
        ("right", "error"): 1.0, ("right", "all"): 1.0,
        ("wrong", "error"): 0.0, ("wrong", "all"): 0.0}


def test_the_command_writes_the_corpus_and_resumes_from_its_log(tmp_path):
    """harvest --lock --no-trace: scan and ask (no build); a second run asks nothing."""
    lock_file = tmp_path / "in.lock"
    lock_file.write_text(LOCK_TEXT)
    out = tmp_path / "h"
    args = ["harvest", "--lock", str(lock_file), "--model", "stub-model", "--inputs", "3",
            "--out", str(out), "--no-trace", "--released", "none", "--quiet", "--format",
            "json"]
    with stub() as server:
        first = CliRunner().invoke(main, args + ["--base-url", server.base_url])
        assert first.exit_code == 0, first.output
        again = CliRunner().invoke(main, args + ["--base-url", server.base_url])
        assert sum(server.requests.values()) == 79
    done = json.loads(first.stdout)
    assert (done["found"], done["kept"], done["requests"], done["calls"]["inputs"],
            done["calls"]["type_mismatch"], done["functions_with_inputs"], done["db"],
            done["checked"]) == (247, 79, 79, 39, 4, 19, None, {})
    assert done["notes"] == ["not traced: the corpus's inputs were not run twice nor their "
                             "errors judged"]
    assert set(done["released"].values()) == {None}
    resumed = json.loads(again.stdout)
    assert (resumed["already_logged"], resumed["requests"], resumed["calls"]["inputs"]) == (
        79, 0, 39)
    assert len(read_log(out / "harvest.log.jsonl")) == 79
    corpus = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [r["model_written"] for r in corpus] == ["inputs"] * 19
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl", "guest.lock",
                                                     "harvest.json", "harvest.log.jsonl"]
    # the same log asked by another model: one line, exit status 1
    result = CliRunner().invoke(main, args[:3] + ["--model", "other"] + args[5:]
                                + ["--base-url", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 1
    assert result.output == (f"Error: {out / 'harvest.log.jsonl'} holds "
                             "humanize.apnumber from model 'stub-model', not "
                             "'other'; use another --out for another model\n")


def test_bad_settings_are_one_line_errors(tmp_path):
    result = CliRunner().invoke(main, ["harvest", "--model", "m", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "give the packages with --with, --lock or --source" in result.output
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    lock_file = tmp_path / "in.lock"
    lock_file.write_text(LOCK_TEXT)
    result = CliRunner().invoke(main, ["harvest", "--lock", str(lock_file), "--model", "m",
                                       "--out", str(not_a_dir)])
    assert result.exit_code != 0
    with pytest.raises(HarvestError, match="is not a directory"):
        harvest(not_a_dir, lock_file, PredictOptions("m"))
    with pytest.raises(HarvestError, match="inputs must be at least 1"):
        HarvestOptions(inputs=0)
