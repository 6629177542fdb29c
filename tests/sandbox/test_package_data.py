"""A package's own files in the guest (tracer/held_modules.py, wasm_sandbox/_package_files.py):
its data (certifi's ``cacert.pem``, pytz's zone files, jsonschema's schemas) read through
``importlib.resources`` or a path made from ``__file__``, and its metadata
(``importlib.metadata``), as natively: real pinned packages, the same wheels installed for
CPython 3.13, the same output in both isolations. The files are mounted read-only where
the build saw them; nothing a program does there reaches the next job."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from helpers.package_guests import PackageGuest
from steptrace.sandbox._packages import parse_lock

pytestmark = pytest.mark.slow  # builds a guest with packages (cached after the first)

# the popular packages' first guest (tests/sandbox/test_popular_packages.py) holds these
# (and jsonschema pinned to 4.17.3, the last before native code): one build for both
LOCK = parse_lock((Path(__file__).parent / "data" / "popular_a.lock").read_text())


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    found = PackageGuest(LOCK, tmp_path_factory.mktemp("package-data"))
    yield found
    found.close()


PROGRAMS = {
    "metadata": """
        import importlib.metadata as md
        print([(name, md.version(name)) for name in ("attrs", "certifi", "jsonschema", "pytz")])
        print(sorted(d.metadata["Name"].lower() for d in md.distributions()))
        print(md.metadata("jsonschema")["Requires-Python"], md.requires("jsonschema")[:2])
        print(sorted(str(p) for p in md.files("certifi") if p.suffix == ".pem"))
        print(md.packages_distributions()["pytz"], sorted(md.entry_points(group="console_scripts").names))
    """,
    "certifi": """
        import hashlib, os, certifi
        text = certifi.contents()
        print(len(text), text.count("BEGIN CERTIFICATE"), hashlib.sha256(text.encode()).hexdigest())
        path = certifi.where()
        print(os.path.basename(path), os.path.getsize(path), open(path).read() == text)
    """,
    "pytz": """
        from datetime import datetime
        import pytz
        paris, tokyo = pytz.timezone("Europe/Paris"), pytz.timezone("Asia/Tokyo")
        summer = paris.localize(datetime(2024, 7, 1, 12))
        print(summer.isoformat(), summer.astimezone(tokyo).isoformat(), summer.tzname())
        print(paris.normalize(paris.localize(datetime(2024, 3, 31, 1, 30)).replace(hour=3)).isoformat())
        print(len(pytz.all_timezones), len(pytz.common_timezones), pytz.country_timezones["nz"])
        print(pytz.country_names["fr"], "US/Eastern" in pytz.all_timezones_set)
        try:
            pytz.timezone("Mars/Olympus")
        except pytz.UnknownTimeZoneError as exc:
            print("unknown", exc)
    """,
    "jsonschema": """
        import importlib.resources, json, jsonschema
        schema = {"type": "object", "required": ["n"],
                  "properties": {"n": {"type": "integer", "minimum": 0},
                                 "tags": {"type": "array", "items": {"type": "string"}}}}
        validator = jsonschema.Draft7Validator(schema)
        print(sorted(e.message for e in validator.iter_errors({"n": -1, "tags": [1]})))
        print(validator.is_valid({"n": 3, "tags": ["a"]}), jsonschema.Draft7Validator.META_SCHEMA["$schema"])
        folder = importlib.resources.files("jsonschema") / "schemas"
        print(sorted(p.name for p in folder.iterdir()))
        print(json.loads((folder / "draft4.json").read_text())["id"])
        try:
            jsonschema.validate({"n": "x"}, schema)
        except jsonschema.ValidationError as exc:
            print(exc.message, list(exc.path))
    """,
}


@pytest.mark.parametrize("isolation", ["job", "batch"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_package_data_and_metadata_as_native(guest, name, isolation):
    guest.assert_as_native(textwrap.dedent(PROGRAMS[name]), isolation)


def test_the_package_files_are_mounted_read_only(guest):
    """Where __file__ says, read-only: writing, removing, renaming and making a file there
    all fail (PermissionError); the next job reads the files unchanged."""
    code = textwrap.dedent("""
        import os, pytz, certifi
        here = os.path.dirname(pytz.__file__)
        print(here, sorted(os.listdir(here))[:3], os.path.isfile(os.path.join(here, "zoneinfo", "UTC")))
        pem = os.path.join(os.path.dirname(certifi.__file__), "cacert.pem")
        for attempt in (lambda: open(pem, "a"), lambda: os.remove(pem),
                        lambda: os.rename(pem, pem + ".x"), lambda: open(os.path.join(here, "new"), "w"),
                        lambda: os.mkdir(os.path.join(here, "d"))):
            try:
                attempt()
                print("allowed")
            except OSError as exc:
                print(type(exc).__name__)
    """)
    result = guest.guest(code)
    assert result["status"] == "ok", result
    assert result["stdout"] == (
        "/1/pytz ['__init__.py', 'exceptions.py', 'lazy.py'] True\n"
        + "PermissionError\n" * 5)
    assert guest.guest(PROGRAMS_CERTIFI_SIZE)["stdout"] == guest.native(PROGRAMS_CERTIFI_SIZE).stdout


PROGRAMS_CERTIFI_SIZE = "import os, certifi\nprint(os.path.getsize(certifi.where()))\n"
