"""Bench: which of the 100 most downloaded PyPI packages a guest can hold.

Run: ``.venv/bin/python bench/popular_packages.py > out.json``. For each name of ``TOP_100``
(PyPI's download ranking of 2025, from the public BigQuery statistics that pypistats
publishes; taken by hand, the order kept), pip resolves it for the guest as ``build
--with`` does (``resolve_packages``: pure-Python wheels for CPython 3.14, and the check
that nothing was held back to an older version): a package that needs native code
anywhere in its dependencies has no lock. Whether a resolved one imports and works in
the guest is tests/sandbox/test_popular_packages.py's (probes with real calls, compared
with CPython 3.13) and the build's (every top-level module is imported). One JSON line
per package: name, resolved (the lock, or the reason), held back.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from steptrace.sandbox._packages import PackageError, resolve_packages

TOP_100 = """boto3 urllib3 botocore requests setuptools certifi charset-normalizer idna
typing-extensions python-dateutil s3transfer packaging six aiobotocore numpy pyyaml s3fs
fsspec pip cryptography grpcio-status cffi pycparser google-api-core attrs pydantic
protobuf pandas jmespath rsa pyasn1 importlib-metadata zipp wheel markupsafe click
platformdirs jinja2 pytz filelock colorama tomli pluggy pyjwt virtualenv pydantic-core
googleapis-common-protos cachetools wrapt jsonschema pytest pyasn1-modules psutil
annotated-types google-auth sqlalchemy tzdata iniconfig requests-oauthlib oauthlib
pyarrow decorator greenlet exceptiongroup aiohttp multidict yarl frozenlist aiosignal
soupsieve beautifulsoup4 lxml tqdm pygments isodate openpyxl et-xmlfile docutils rich
markdown-it-py mdurl scipy grpcio more-itertools distlib h11 anyio sniffio httpx httpcore
pyparsing tomlkit regex pillow werkzeug flask itsdangerous blinker websocket-client
markdown""".split()


def one(name: str) -> dict:
    try:
        resolution = resolve_packages([name])
    except PackageError as exc:
        return {"name": name, "resolved": None, "reason": str(exc)}
    return {"name": name, "resolved": str(resolution.lock),
            "held_back": [str(item) for item in resolution.held_back]}


def main() -> None:
    with ThreadPoolExecutor(4) as pool:
        for found in pool.map(one, TOP_100):
            print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
