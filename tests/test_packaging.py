"""What ``pip install`` of the project installs: one import package, ``steptrace``, with the
guest's sources, the named queries, prompt templates and bundled data as package data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
import pytest

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_one_top_level_package_and_its_data(tmp_path):
    """The wheel built from the checkout (what ``pip install .`` installs): every file is
    under ``steptrace/`` or its ``.dist-info``; the guest is there whole (every ``.py`` of
    tracer/ and its WIT), as are queries/*.sql, the prompt templates and the data files."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    wheel, = tmp_path.glob("steptrace-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"steptrace",
                                                     "steptrace-0.1.0.dist-info"}
    inside = {name for name in names if name.startswith("steptrace/")}
    guest = {f"steptrace/guest/{p.relative_to(ROOT / 'tracer')}"
             for p in (ROOT / "tracer").rglob("*") if p.suffix in (".py", ".wit")}
    queries = {f"steptrace/queries/{p.name}" for p in (ROOT / "queries").glob("*.sql")}
    prompts = {f"steptrace/tasks/prompts/{p.name}"
               for p in (ROOT / "engine" / "tasks" / "prompts").glob("*.txt")}
    assert guest <= inside and queries <= inside and prompts <= inside
    assert {"steptrace/corpus/data/demo.jsonl", "steptrace/benchmark/data/generate_fewshot.jsonl",
            "steptrace/benchmark/prompts/generate.txt", "steptrace/sandbox/_worker.py",
            "steptrace/cli/__main__.py"} <= inside
    assert len(queries) >= 10 and len(prompts) >= 20
