"""Contamination of a harvest: when each release was published, and what an older
release of a package already held.

A model trained on text collected before a package's release cannot have seen the
functions that release added or changed. The harvest therefore records, for every
function, its package, version, module and source digest, and the release's upload
time (``released``, ISO 8601 UTC), so ``--where "meta.released > '2025-06-01'"`` makes a
time window; and ``harvest --since NAME==OLD`` keeps only the functions that are new or
changed (by the digest of their own source) since the release ``OLD``.

Upload times come from the user's list (``--released FILE``: a JSON object
``{"name==version": "2024-05-01T12:00:00Z", ...}``, or lines ``name==version TIME``) or
from the package index's JSON API (``--released pypi``: ``https://pypi.org/pypi/NAME/json``,
the upload time of the locked wheel among the release's files, found by its SHA-256; of
the release's first file when the wheel is not among them). The wheel itself carries no
upload time (its files' zip dates are build times), so nothing else says it.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from steptrace.corpus._text import NotUtf8Error, decode_text
from steptrace.errors import InputError

PYPI = "pypi"
PYPI_JSON = "https://pypi.org/pypi/{name}/json"  # every release's files (one request a package)
TIMEOUT_S = 20.0
MAX_LIST_BYTES = 4 << 20
MAX_RESPONSE_BYTES = 32 << 20


class ReleaseError(InputError):
    """A bad ``--released`` list or ``--since`` release."""


def released_times(lock, source: str | Path | None, json_api: str = PYPI_JSON
                   ) -> tuple[dict[str, str | None], list[str]]:
    """Each locked distribution's upload time (ISO 8601 UTC, None when unknown) from
    ``source`` (``"pypi"``: the index's JSON API at ``json_api``, a list file, or None:
    unknown), and notes on the unknown."""
    packages = {p.name: p for p in lock.packages}
    if source is None:
        return {name: None for name in packages}, []
    if str(source) == PYPI:
        return _from_index(packages, json_api)
    listed = read_list(Path(source))
    found = {name: listed.get(f"{name}=={p.version}", listed.get(name))
             for name, p in packages.items()}
    missing = sorted(f"{name}=={packages[name].version}" for name, t in found.items()
                     if t is None)
    return found, ([f"no upload time in {source} for {', '.join(missing)}"] if missing else [])


def read_list(path: Path) -> dict[str, str]:
    """A ``--released`` list: ``name==version`` (or a bare name) -> ISO 8601 UTC time."""
    from steptrace.sandbox._packages import normalise
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_LIST_BYTES + 1)
        text = decode_text(data, path)
    except FileNotFoundError:
        raise ReleaseError(f"--released list not found: {path}") from None
    except (OSError, NotUtf8Error) as exc:
        raise ReleaseError(f"cannot read --released list {path}: {exc}") from None
    if len(data) > MAX_LIST_BYTES:
        raise ReleaseError(f"--released list {path} is larger than {MAX_LIST_BYTES:,} bytes")
    if text.lstrip().startswith("{"):
        try:
            pairs = json.loads(text)
        except ValueError as exc:
            raise ReleaseError(f"--released list {path} is not JSON: {exc}") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in pairs.items()):
            raise ReleaseError(f"--released list {path}: every key and value must be a string")
        items = [(key, value, 0) for key, value in pairs.items()]
    else:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ReleaseError(f"{path}:{number}: expected 'name==version TIME', got "
                                   f"{line[:80]!r}")
            items.append((parts[0], parts[1], number))
    found = {}
    for key, value, number in items:
        where = f"{path}:{number}" if number else str(path)
        name, _, version = key.partition("==")
        if not name.strip():
            raise ReleaseError(f"{where}: {key[:80]!r} names no package")
        key = normalise(name.strip()) + (f"=={version.strip()}" if version else "")
        found[key] = iso_time(value, where)
    return found


def iso_time(value: str, where: str) -> str:
    """``value`` as ISO 8601 UTC (``2024-05-01T12:00:00Z``); a time without a zone is UTC."""
    try:
        moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ReleaseError(f"{where}: {value[:80]!r} is not an ISO 8601 time") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return moment.isoformat(timespec="seconds") + "Z"


def _from_index(packages: dict, json_api: str) -> tuple[dict[str, str | None], list[str]]:
    found: dict[str, str | None] = {}
    notes = []
    unreachable = None
    for name, package in sorted(packages.items()):
        if unreachable is not None:  # one failed connection: the others are not tried
            found[name] = None
            continue
        try:
            found[name] = _upload_time(json_api.format(name=name), package.version,
                                       package.sha256)
        except urllib.error.HTTPError as exc:
            found[name] = None
            notes.append(f"{name}=={package.version}: the index answered {exc.code}")
        except (ValueError, ReleaseError) as exc:  # this package's answer only
            found[name] = None
            notes.append(f"{name}=={package.version}: the index's answer is unreadable "
                         f"({str(exc)[:200]})")
        except OSError as exc:
            found[name] = None
            unreachable = exc
            notes.append(f"the index's JSON API could not be read ({exc}): upload times "
                         "unknown; give them with --released FILE")
    return found, notes


def _upload_time(url: str, version: str, sha256: str) -> str | None:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 (https)
        data = json.loads(response.read(MAX_RESPONSE_BYTES))
    releases = data.get("releases") if isinstance(data, dict) else None
    files = releases.get(version) if isinstance(releases, dict) else None
    if not isinstance(files, list) or not files:
        return None
    times = {}
    for item in files:
        if isinstance(item, dict) and isinstance(item.get("upload_time_iso_8601"), str):
            digest = (item.get("digests") or {}).get("sha256")
            times[digest] = item["upload_time_iso_8601"]
    if not times:
        return None
    value = times.get(sha256) or min(times.values())
    return iso_time(value, url)


def previous_digests(name: str, version: str, python: str | None = None) -> dict[str, str]:
    """The source digests of the functions the release ``name==version`` exposes (by
    id), found as the harvest finds them, in that release installed with its
    dependencies into a temporary directory (with ``python``: the native backend's
    wheels for that CPython, as a native lock's)."""
    from steptrace.benchmark._scan import scan_site
    from steptrace.sandbox._packages import PackageError, _resolve_pure, install
    try:
        lock = _resolve_pure([f"{name}=={version}"], python=python)
    except PackageError as exc:
        raise ReleaseError(f"--since {name}=={version}: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="steptrace-since-") as tmp:
        install(lock, Path(tmp))
        return dict(scan_site(Path(tmp), [name]).digests)


def since_releases(values: tuple[str, ...] | list[str], requirements=()
                   ) -> tuple[tuple[str, str], ...]:
    """``--since`` values as (distribution, version): ``NAME==VERSION``, or a bare
    ``VERSION`` when ``requirements`` name exactly one package."""
    from steptrace.sandbox._packages import normalise
    found = []
    for value in values:
        name, sep, version = value.partition("==")
        if not sep:
            names = {normalise(r.split("==")[0].split("[")[0].strip()) for r in requirements}
            if len(names) != 1:
                raise ReleaseError(f"--since {value}: give NAME==VERSION (a bare version "
                                   "needs exactly one --with package)")
            name, version = names.pop(), value
        name, version = normalise(name.strip()), version.strip()
        if not name or not version or any(c.isspace() or c in ",;<>=!" for c in version):
            raise ReleaseError(f"--since {value!r}: expected NAME==VERSION")
        found.append((name, version))
    if len({name for name, _ in found}) != len(found):
        raise ReleaseError("--since names a package twice")
    return tuple(found)
