"""``score-cruxeval`` on generations whose input predictions make CRUXEval's own ``while``
loops cycle forever: the checks end as ``loops`` (not at the 3 s limit), and pass@1 and
pass@5 equal a run with ``--no-loop-detection``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.scoring._cruxeval import load_samples

pytestmark = pytest.mark.slow  # the run without detection waits 3 s per looping check

# CRUXEval samples and an input that makes their while loop repeat its state forever
CYCLIC = {
    "sample_63": "f('', '')",        # '' starts with '': text stays ''
    "sample_210": "f(1, 1, 1)",      # an index cycling modulo a length of 1
    "sample_331": "f('', '')",       # ''.find('') == 0 forever
    "sample_567": "f('one two three four five', 0)",  # ls[:-0] == []: out += [] forever
    "sample_650": "f('', '')",
    "sample_764": 'f("", "", "")',   # ''.replace('', '') == ''
}


def test_cyclic_checks_end_as_loops_with_the_same_pass_at_k(cruxeval_path, tmp_path: Path):
    samples = {s.sample_id: s for s in load_samples(cruxeval_path)}
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": s.sample_id, "code": s.code, "input": s.input,
                                        "output": s.output}) + "\n"
                            for s in (samples[i] for i in CYCLIC)))
    generations = {sample_id: [f"f({samples[sample_id].input})", call, call,
                               f"f({samples[sample_id].output})", call]
                   for sample_id, call in CYCLIC.items()}
    path = tmp_path / "generations.json"
    path.write_text(json.dumps(generations))
    runs = {}
    for flags in ((), ("--no-loop-detection",)):
        result = CliRunner().invoke(main, ["score-cruxeval", str(path), "--mode", "input",
                                           "--data", str(data), "--workers", "2",
                                           "--format", "json", *flags])
        assert result.exit_code == 0, result.output
        runs[flags] = json.loads(result.output[result.output.index("{"):])
    on, off = runs[()], runs[("--no-loop-detection",)]
    # outcomes count candidates: three a sample loop (one distinct check)
    assert on["outcomes"]["loops"] == 3 * len(CYCLIC)
    assert "timeout" not in on["outcomes"]
    assert off["outcomes"]["timeout"] == 3 * len(CYCLIC)
    assert "loops" not in off["outcomes"]
    assert {k: v for k, v in on["outcomes"].items() if k != "loops"} == {
        k: v for k, v in off["outcomes"].items() if k != "timeout"}
    assert (on["pass_at_1"], on["pass_at_5"]) == (off["pass_at_1"], off["pass_at_5"])
    assert (on["checks_run"], on["passed"]) == (off["checks_run"], off["passed"])
