"""The harvest's soundness and contamination (steptrace.benchmark._examples, _releases):
examples judged after their runs in the real sandbox (run twice, the error's owner),
upload times read from a user's list or from a JSON API served on 127.0.0.1, and
``--since``: a harvest of two real releases of one package keeps only what changed."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

import steptrace as st
from steptrace.benchmark._examples import verdicts
from steptrace.benchmark._releases import (ReleaseError, read_list, released_times,
                                           since_releases)
from steptrace.cli._main import main
from steptrace.sandbox._packages import LockedPackage, PackageLock
from steptrace.tracing._analysis import AnalysisOptions, analyse_store

from helpers.openai_stub import StubServer, answer


# ------------------------------------------------------------------ which examples are kept
EXAMPLES = [
    {"id": "ok", "code": "def f(x: int) -> int:\n    return x + 1\n", "entry": "f",
     "inputs": ["1"]},
    # its own error: raised by its body
    {"id": "own", "code": "def g(x: int) -> int:\n    raise ValueError(f'bad {x}')\n",
     "entry": "g", "inputs": ["2"]},
    # the first line raises: still the function's own (its body began)
    {"id": "first_line", "code": "def k(x: int) -> int:\n    return 1 // x\n",
     "entry": "k", "inputs": ["0"]},
    # a bad call: the arguments do not bind, a TypeError before the body begins
    {"id": "bad_call", "code": "def h(x: int) -> int:\n    return x\n", "entry": "h",
     "inputs": ["1, 2", "y=1"]},
    # the program's own import fails before the call: its own status, never an example
    {"id": "bad_import", "code": "from nowhere_at_all import x\n\n\ndef m(y: int) -> int:\n"
                                 "    return y\n", "entry": "m", "inputs": ["1"]},
    # random numbers: the variant guest starts from another seed
    {"id": "random", "code": "import random\n\n\ndef n(x: int) -> float:\n"
                             "    return random.random() + x\n", "entry": "n", "inputs": ["0"]},
    # a limit: dropped by its status
    {"id": "loops", "code": "def w(x: int) -> int:\n    while True:\n        x += 1\n",
     "entry": "w", "inputs": ["0"]},
]


@pytest.mark.slow  # the variant guest (built once per cache)
def test_examples_are_kept_when_deterministic_and_their_errors_their_own(tmp_path):
    db = tmp_path / "checks.duckdb"
    st.trace(EXAMPLES, db, workers=1, limits={"max_steps": 2_000})
    analyse_store(db, AnalysisOptions(determinism=True, workers=1))
    found = [(v.sample_id, v.input, v.verdict, v.note, v.kept) for v in verdicts(db)]
    assert found == [
        ("ok", "1", "ok", None, True),
        ("own", "2", "error", None, True),
        ("first_line", "0", "error", None, True),
        ("bad_call", "1, 2", "bad call", None, False),
        ("bad_call", "y=1", "bad call", None, False),
        ("bad_import", "1", "status missing_module", None, False),
        ("random", "0", "nondeterministic", "return value differs", False),
        ("loops", "0", "status step_limit", None, False)]


# ------------------------------------------------------------------ upload times
LOCK = PackageLock((LockedPackage("alpha", "1.0", "a" * 64), LockedPackage("beta", "2.0", "b" * 64),
                    LockedPackage("gamma", "3.0", "c" * 64), LockedPackage("delta", "4.0", "d" * 64)))
INDEX = {
    # the locked wheel among the release's files: its time, not the sdist's
    "alpha": {"releases": {"1.0": [
        {"digests": {"sha256": "f" * 64}, "upload_time_iso_8601": "2024-01-01T00:00:00Z"},
        {"digests": {"sha256": "a" * 64}, "upload_time_iso_8601": "2024-03-05T10:11:12.5Z"}],
        "0.9": [{"digests": {"sha256": "e" * 64}, "upload_time_iso_8601": "2020-01-01T00:00:00Z"}]}},
    # the wheel not among them (another build): the release's first upload
    "beta": {"releases": {"2.0": [
        {"digests": {"sha256": "1" * 64}, "upload_time_iso_8601": "2023-06-01T08:00:00+02:00"},
        {"digests": {"sha256": "2" * 64}, "upload_time_iso_8601": "2023-07-01T00:00:00Z"}]}},
    "gamma": "not json",  # an unreadable answer: unknown, the others still asked
    # delta: 404
}


class _Index(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        name = self.path.strip("/").split("/")[1]
        if name not in INDEX:
            self.send_error(404)
            return
        body = INDEX[name] if isinstance(INDEX[name], str) else json.dumps(INDEX[name])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_upload_times_come_from_the_index_json_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}/pypi/{{name}}/json"
        times, notes = released_times(LOCK, "pypi", api)
    finally:
        server.shutdown()
        server.server_close()
    assert times == {"alpha": "2024-03-05T10:11:12Z", "beta": "2023-06-01T06:00:00Z",
                     "gamma": None, "delta": None}
    assert notes[0] == "delta==4.0: the index answered 404"
    assert notes[1].startswith("gamma==3.0: the index's answer is unreadable (")


def test_an_unreachable_index_is_asked_once_and_noted():
    times, notes = released_times(LOCK, "pypi", "http://127.0.0.1:9/pypi/{name}/json")
    assert times == {"alpha": None, "beta": None, "gamma": None, "delta": None}
    assert len(notes) == 1 and notes[0].startswith("the index's JSON API could not be read (")
    assert notes[0].endswith("upload times unknown; give them with --released FILE")
    assert released_times(LOCK, None) == ({"alpha": None, "beta": None, "gamma": None,
                                           "delta": None}, [])


def test_upload_times_from_a_users_list(tmp_path):
    listed = tmp_path / "released.txt"
    listed.write_text("# name==version TIME\nAlpha==1.0 2024-03-05T10:11:12Z\n\n"
                      "beta 2023-06-01T08:00:00+02:00  # any version of beta\n"
                      "gamma==9.9 2020-01-01\n")
    assert released_times(LOCK, listed) == (
        {"alpha": "2024-03-05T10:11:12Z", "beta": "2023-06-01T06:00:00Z", "gamma": None,
         "delta": None},
        [f"no upload time in {listed} for delta==4.0, gamma==3.0"])
    as_json = tmp_path / "released.json"
    as_json.write_text('{"delta==4.0": "2021-02-03T04:05:06"}')
    assert released_times(LOCK, as_json)[0]["delta"] == "2021-02-03T04:05:06Z"


@pytest.mark.parametrize("text, message", [
    ("alpha==1.0\n", "released.txt:1: expected 'name==version TIME', got 'alpha==1.0'"),
    ("alpha==1.0 yesterday\n", "released.txt:1: 'yesterday' is not an ISO 8601 time"),
    ("==1.0 2024-01-01\n", "released.txt:1: '==1.0' names no package"),
    ('{"alpha": 3}', "every key and value must be a string"),
    ('{"alpha": ', "is not JSON"),
    ("\udcff", "cannot read --released list"),
])
def test_a_bad_list_is_one_line_error(tmp_path, text, message):
    listed = tmp_path / "released.txt"
    listed.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ReleaseError) as caught:
        read_list(listed)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_or_huge_list_is_refused(tmp_path):
    with pytest.raises(ReleaseError, match="--released list not found"):
        read_list(tmp_path / "missing.txt")
    huge = tmp_path / "huge.txt"
    huge.write_bytes(b"#" * (5 << 20))
    with pytest.raises(ReleaseError, match="is larger than"):
        read_list(huge)


@pytest.mark.parametrize("values, requirements, expected", [
    (("humanize==4.16.0",), (), (("humanize", "4.16.0"),)),
    (("4.16.0",), ("humanize==4.17.0",), (("humanize", "4.16.0"),)),
    (("More_Itertools == 10.0",), (), (("more-itertools", "10.0"),)),
])
def test_since_names_a_release(values, requirements, expected):
    assert since_releases(values, requirements) == expected


@pytest.mark.parametrize("values, requirements, message", [
    (("4.16.0",), (), "a bare version needs exactly one --with package"),
    (("4.16.0",), ("a==1", "b==2"), "a bare version needs exactly one --with package"),
    (("a==",), (), "expected NAME==VERSION"),
    (("a==1 ; rm",), (), "expected NAME==VERSION"),
    (("a==1", "A==2"), (), "names a package twice"),
])
def test_a_bad_since_is_one_line_error(values, requirements, message):
    with pytest.raises(ReleaseError, match=message):
        since_releases(values, requirements)


# ------------------------------------------------------------------ two real releases
# humanize 4.16.0 -> 4.17.0 (registry wheels): of the 13 functions kept in 4.17.0, these
# 4 have the same code in 4.16.0 (a digest of their normalised code) and are left out
UNCHANGED = ["humanize.apnumber", "humanize.naturaltime", "humanize.precisedelta",
             "humanize.scientific"]
CHANGED = ["humanize.clamp", "humanize.fractional", "humanize.intcomma", "humanize.intword",
           "humanize.metric", "humanize.natural_list", "humanize.naturaldelta",
           "humanize.naturalsize", "humanize.ordinal"]


@pytest.mark.slow  # two releases from the registry
def test_since_keeps_only_the_functions_new_or_changed_between_two_releases(tmp_path):
    out = tmp_path / "h"
    asked = []

    def function_of(prompt: str) -> str:
        name = prompt.split("the function `", 1)[1].split("`", 1)[0]
        asked.append(name)
        return name
    with StubServer({"humanize.intcomma": answer("[CALLS]\nintcomma(1234)\n[/CALLS]")},
                    default=answer("[CALLS]\n[/CALLS]"), key_of=function_of) as server:
        result = CliRunner().invoke(main, [
            "harvest", "--with", "humanize==4.17.0", "--since", "4.16.0", "--model",
            "stub-model", "--base-url", server.base_url, "--out", str(out), "--no-trace",
            "--released", "none", "--quiet", "--format", "json"])
    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout)
    assert (done["since"], done["unchanged"], done["kept"]) == ({"humanize": "4.16.0"}, 4, 9)
    written = json.loads((out / "harvest.json").read_text())
    assert written["unchanged_functions"] == UNCHANGED
    assert written["kept_functions"] == CHANGED
    assert sorted(asked) == CHANGED  # nothing asked of the unchanged ones
    record = json.loads((out / "corpus.jsonl").read_text())
    assert (record["id"], record["version"], record["inputs"]) == (
        "humanize.intcomma", "4.17.0", ["1234"])
    # the release named is the one harvested, or not a harvested package: one line
    for since, message in (
            ("4.17.0", "--since humanize==4.17.0 is the version harvested"),
            ("roman==5.2", "--since roman==5.2: roman is not among the packages harvested "
                           "(humanize==4.17.0)")):
        result = CliRunner().invoke(main, [
            "harvest", "--with", "humanize==4.17.0", "--since", since, "--model", "m",
            "--out", str(tmp_path / "x"), "--no-trace", "--released", "none", "--quiet"])
        assert (result.exit_code, result.output) == (1, f"Error: {message}\n")
