"""Bench: which of the 100 most downloaded PyPI packages a guest can hold.

Run: ``.venv/bin/python bench/popular_packages.py > out.json``. For each name of ``TOP_100``
(PyPI's download ranking: the 100 most downloaded projects of the 30 days to
2026-04-01, from PyPI's public BigQuery download statistics as published by
hugovk/top-pypi-packages, ``top-pypi-packages.min.json`` at commit 5501c5c9, the order
kept), pip resolves it for the guest as ``build
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

TOP_100 = """boto3 packaging setuptools urllib3 certifi typing-extensions requests charset-normalizer
idna botocore aiobotocore python-dateutil cryptography six numpy cffi pyyaml grpcio-status
pycparser pydantic pluggy s3transfer pygments click attrs protobuf pydantic-core anyio
fsspec pandas pytest h11 markupsafe iniconfig s3fs platformdirs annotated-types pip wheel
jinja2 jmespath importlib-metadata filelock pathspec pyjwt httpx typing-inspection
python-dotenv httpcore pytz zipp rich pyasn1 jsonschema yarl multidict aiohttp google-auth
uvicorn markdown-it-py google-api-core tzdata tqdm tomli colorama googleapis-common-protos
mdurl starlette virtualenv awscli pillow propcache frozenlist scipy rpds-py
trove-classifiers fastapi rsa referencing wrapt pyasn1-modules aiosignal
jsonschema-specifications greenlet grpcio sqlalchemy requests-oauthlib pyarrow pyparsing
aiohappyeyeballs opentelemetry-api tenacity annotated-doc cachetools regex psutil
opentelemetry-semantic-conventions hatchling oauthlib opentelemetry-sdk""".split()


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
