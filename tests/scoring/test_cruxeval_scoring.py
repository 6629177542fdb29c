"""CRUXEval-compatible scoring (engine/scoring/_cruxeval.py, ``steptrace score --cruxeval``)
on generations built here for the real 800 samples, every check in the real sandbox.

The expected figures come from a separate, straightforward implementation of the issue's
rules in this file (its own dropping filter, its own scored lists, pass@k with math.comb):
it shares no code with the module. Which generation passes is known by construction for
most kinds (the sample's own input or output passes; ``... and False`` fails; an unclosed
bracket is a syntax error; ...) and checked against each check's outcome in the sandbox;
for the "natural" kind (the output passed as the input) it is decided by running the
official check program with plain ``exec`` in a host Python subprocess.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.scoring._cruxeval import (CHECK_TIMEOUT_S, CruxSample, check_mode, check_program,
                                     load_generations, load_samples, pass_at_k, run_checks,
                                     run_order, score_cruxeval, score_samples,
                                     validate_generations)
from steptrace.sandbox._limits import Limits

pytestmark = pytest.mark.slow  # seconds to minutes: left out by make test-fast

TIMING = ("seconds", "checks_per_second")

# ------------------------------------------------------------------ generation kinds
# kind -> (generation text for a sample, truth): True/False known by construction, None =
# dropped by the rules, "host" = decided by running the official check on the host.
INPUT_KINDS = {
    "correct": (lambda s: f"f({s.input})", True),
    "spaced": (lambda s: f"f( {s.input} )  # same call, other text", True),
    "wrong": (lambda s: f"f({s.input}) and False", False),
    "error": (lambda s: f"f({s.input}) + None", False),
    "syntax": (lambda s: f"f({s.input}", False),
    "bare": (lambda s: s.input, None),            # no "f(": dropped
    "other": (lambda s: f"g({s.input})", None),   # no "f(": dropped
    "natural": (lambda s: f"f({s.output})", "host"),
    "loop": (lambda s: f"f({s.input}) if any(iter(int, 1)) else None", False),
}
OUTPUT_KINDS = {
    "correct": (lambda s: s.output, True),
    "paren": (lambda s: f"({s.output})", True),
    "message": (lambda s: f"{s.output}, 'a message'", True),  # assert x == y, 'a message'
    "wrong": (lambda s: f"[{s.output}]", False),
    "syntax": (lambda s: f"{s.output})", False),
    "call": (lambda s: f"f({s.input})", None),    # contains f(<input>): dropped
    "loop": (lambda s: "any(iter(int, 1))", False),
}
# The check outcome each by-construction kind must have in the sandbox.
EXPECTED_OUTCOME = {"correct": "ok", "spaced": "ok", "paren": "ok", "message": "ok",
                    "wrong": "AssertionError", "error": "TypeError", "syntax": "SyntaxError",
                    "loop": "timeout"}

INPUT_PATTERNS = [
    ["correct"],
    ["correct", "correct", "wrong", "wrong", "wrong"],
    ["wrong", "syntax", "bare"],
    ["bare", "correct", "spaced", "error", "wrong", "correct", "other"],
    ["syntax", "syntax", "error", "error", "error", "error"],
    ["bare", "bare", "other"],
    ["spaced"] + ["wrong"] * 9,
    ["correct"] * 10,
    ["error", "bare", "correct", "bare"],
]
OUTPUT_PATTERNS = [
    ["call"],
    ["correct", "call", "wrong"],
    ["call", "call"],
    ["paren", "message", "syntax", "wrong", "wrong"],
    ["call"] * 5 + ["correct"],
    ["wrong", "call", "syntax"],
    ["wrong"] * 3 + ["syntax"] * 3,
    ["call", "correct"] + ["wrong"] * 6,
]
NATURAL_EVERY = 25   # samples 0, 25, 50, ... also get a "natural" generation
LOOP_SAMPLE = 401    # the one sample (per mode) with an infinite loop


def build(samples: list[CruxSample], kinds: dict, patterns: list[list[str]],
          natural: bool) -> tuple[dict[str, list[str]], dict[tuple[str, str], str]]:
    """Generations for every sample (a pattern chosen by index, varying counts) and the
    kind of each (sample id, generation)."""
    generations, kind_of = {}, {}
    for index, sample in enumerate(samples):
        names = list(patterns[index % len(patterns)])
        if natural and index % NATURAL_EVERY == 0:
            names.append("natural")
        if index == LOOP_SAMPLE:
            names.append("loop")
        listed = []
        for name in names:
            text = kinds[name][0](sample)
            listed.append(text)
            kind_of[(sample.sample_id, text)] = name
        generations[sample.sample_id] = listed
    return generations, kind_of


HOST_CHECK = textwrap.dedent("""
    import json, signal, sys
    def alarm(*_):
        raise TimeoutError
    signal.signal(signal.SIGALRM, alarm)
    verdicts = []
    for program in json.load(sys.stdin):
        signal.setitimer(signal.ITIMER_REAL, 3)
        try:
            exec(program, {})
            verdicts.append(True)
        except BaseException:
            verdicts.append(False)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    json.dump(verdicts, sys.stdout)
""")


def host_verdicts(programs: list[str]) -> list[bool]:
    """Run official check programs with plain exec in a host Python subprocess."""
    done = subprocess.run([sys.executable, "-c", HOST_CHECK], input=json.dumps(programs),
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONHASHSEED": "0"}, check=True)
    return json.loads(done.stdout)


def official_text(sample: CruxSample, generation: str) -> str:
    """The harness's check program, written out here independently of the module."""
    return sample.code + "\nassert " + sample.output + " == " + generation


# ------------------------------------------------------------------ the reference
def reference_estimate(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def reference_score(samples, generations, mode, passes) -> tuple[dict, float, float]:
    """The issue's rules, straightforwardly: scored lists and pass@1/pass@5 (percent)."""
    scored, at1, at5 = {}, [], []
    for sample in samples:
        given = generations[sample.sample_id]
        if mode == "input":
            kept = [g for g in given if "f(" in g]
        else:
            kept = [g for g in given if "f(" + sample.input + ")" not in g]
        results = [passes(sample, g) for g in kept]
        if True not in results:
            results = [False] * len(given)
        scored[sample.sample_id] = results
        at1.append(reference_estimate(len(results), results.count(True), 1))
        at5.append(reference_estimate(len(results), results.count(True), 5))
    return scored, 100 * sum(at1) / len(at1), 100 * sum(at5) / len(at5)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def samples(cruxeval_path) -> list[CruxSample]:
    loaded = load_samples(cruxeval_path)
    assert [s.sample_id for s in loaded] == [f"sample_{i}" for i in range(800)]
    return loaded


def scored_mode(samples, cruxeval_path, mode: str):
    kinds, patterns = ((INPUT_KINDS, INPUT_PATTERNS) if mode == "input"
                       else (OUTPUT_KINDS, OUTPUT_PATTERNS))
    generations, kind_of = build(samples, kinds, patterns, natural=mode == "input")
    result = score_cruxeval(json.loads(json.dumps(generations)), mode, cruxeval_path,
                            workers=2)
    naturals = sorted({(sid, g) for (sid, g), kind in kind_of.items() if kind == "natural"})
    by_id = {s.sample_id: s for s in samples}
    verdicts = host_verdicts([official_text(by_id[sid], g) for sid, g in naturals])
    truth = {key: kinds[kind][1] for key, kind in kind_of.items()}
    truth.update(dict(zip(naturals, verdicts)))
    return generations, kind_of, truth, result


@pytest.fixture(scope="module")
def input_run(samples, cruxeval_path):
    return scored_mode(samples, cruxeval_path, "input")


@pytest.fixture(scope="module")
def output_run(samples, cruxeval_path):
    return scored_mode(samples, cruxeval_path, "output")


def write_generations(path: Path, generations) -> Path:
    path.write_text(json.dumps(generations))
    return path


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, message: str | None = None, code: int = 1) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    if message is not None:
        assert lines[0] == f"Error: {message}"


def table_items(text: str) -> dict[str, str]:
    items = {}
    for line in text.splitlines():
        if line.startswith("│"):
            _, item, value, _ = line.split("│")
            items[item.strip()] = value.strip()
    return items


# ------------------------------------------------------------------ the 800 samples
@pytest.mark.parametrize("mode", ["input", "output"])
def test_all_800_samples_match_the_reference(mode, request, samples):
    """pass@1, pass@5 and every sample's scored list equal the reference implementation's;
    every check's outcome in the sandbox is the one its kind must have."""
    generations, kind_of, truth, result = request.getfixturevalue(f"{mode}_run")
    scored, at1, at5 = reference_score(samples, generations, mode,
                                       lambda s, g: truth[(s.sample_id, g)])
    official = result.official()
    assert official["raw_scored_generations"] == scored
    assert list(official["raw_scored_generations"]) == [f"sample_{i}" for i in range(800)]
    assert official["raw_generations"] == generations
    assert result.pass_at_1 == pytest.approx(at1, rel=1e-12, abs=1e-12)
    assert result.pass_at_5 == pytest.approx(at5, rel=1e-12, abs=1e-12)
    for sample, score in zip(samples, result.samples):
        for generation, outcome in zip(generations[sample.sample_id], score.outcomes):
            kind = kind_of[(sample.sample_id, generation)]
            if truth[(sample.sample_id, generation)] is None:
                assert outcome is None, (sample.sample_id, generation)
            elif kind == "natural":
                assert (outcome == "ok") == truth[(sample.sample_id, generation)], (
                    sample.sample_id, generation, outcome)
            else:
                assert outcome == EXPECTED_OUTCOME[kind], (sample.sample_id, kind, outcome)


def test_input_mode_counts_and_figures(input_run, samples):
    """Exact totals of the input-mode set: candidates, drops, checks needed and run (each
    distinct check program once), outcomes, and the pass@k figures to 12 digits."""
    generations, kind_of, truth, result = input_run
    kept = [(s.sample_id, g) for s in samples for g in generations[s.sample_id] if "f(" in g]
    by_id = {s.sample_id: s for s in samples}
    distinct = {(by_id[sid].code, by_id[sid].output, g) for sid, g in kept}
    assert result.candidates == sum(len(v) for v in generations.values()) == 4390
    assert result.dropped == 4390 - len(kept) == 710
    assert result.checks_needed == len(kept) == 3680
    assert result.checks_run == len(distinct) == 1454
    assert dict(result.outcomes) == {"ok": 1604, "AssertionError": 1254, "SyntaxError": 267,
                                     "TypeError": 551, "AttributeError": 3, "timeout": 1}
    assert result.outcomes["ok"] == sum(truth[key] is True for key in kept)
    natural = [key for key, kind in kind_of.items() if kind == "natural"]
    assert (len(natural), sum(truth[k] for k in natural)) == (32, 3)  # f(output) == output
    assert round(result.pass_at_1, 12) == 39.7
    assert round(result.pass_at_5, 12) == 83.329545454545


def test_output_mode_counts_and_figures(output_run):
    """Output mode: a generation calling f on the sample's input is dropped although it
    would pass; 'x, "a message"' passes as the harness's assert reads it."""
    generations, kind_of, truth, result = output_run
    # 100 samples per pattern: pass@1 = (99 × 1/2 + 1/3 [the loop sample] + 100 × (2/5
    # + 1 + 1/7)) / 800 × 100; pass@5 = 100 × (6 + (1 − C(6,5)/C(7,5))) / 800 × 100
    assert (result.candidates, result.dropped, result.checks_needed) == (3401, 1100, 2301)
    assert result.checks_run == 1301
    assert dict(result.outcomes) == {"ok": 500, "AssertionError": 1300, "SyntaxError": 500,
                                     "timeout": 1}
    assert result.pass_at_1 == pytest.approx((99 / 2 + 1 / 3 + 100 * (2 / 5 + 1 + 1 / 7))
                                             / 8, rel=1e-12)
    assert result.pass_at_5 == pytest.approx(100 * (6 + 15 / 21) / 8, rel=1e-12)


# ------------------------------------------------------------------ hand-picked cases
def test_hand_picked_exact_values(samples):
    """Exact figures on a few real samples (each through the sandbox)."""
    s0, s1, s2, s3 = samples[:4]
    correct = lambda s: f"f({s.input})"  # noqa: E731
    wrong = lambda s: f"f({s.input}) and False"  # noqa: E731
    cases = [
        # all correct: 100 / 100
        ({s0.sample_id: [correct(s0)] * 3, s1.sample_id: [correct(s1)]}, 100.0, 100.0),
        # 5 generations, 2 correct: 40 / 100
        ({s0.sample_id: [correct(s0)] * 2 + [wrong(s0)] * 3}, 40.0, 100.0),
        # 10 generations, 1 correct: 10 / 50
        ({s1.sample_id: [correct(s1)] + [wrong(s1)] * 9}, 10.0, 50.0),
        # a dropped generation does not count when another passes: n = 3, c = 1
        ({s2.sample_id: [s2.input, correct(s2), wrong(s2), wrong(s2)]}, 100 / 3, 100.0),
        # nothing passes: n = all 6 generations, pass@5 = 0
        ({s3.sample_id: [s3.input, wrong(s3), "f(", wrong(s3), s3.input, s3.input]}, 0.0, 0.0),
        # nothing passes, n = 3 < 5: the harness's estimator says pass@5 = 1.0
        ({s3.sample_id: [s3.input, wrong(s3), "f("]}, 0.0, 100.0),
    ]
    for generations, at1, at5 in cases:
        chosen = [s for s in samples if s.sample_id in generations]
        result = score_samples(chosen, generations, "input", workers=0)
        assert result.pass_at_1 == pytest.approx(at1, rel=1e-12, abs=1e-12), generations
        assert result.pass_at_5 == pytest.approx(at5, rel=1e-12, abs=1e-12), generations
    one = score_samples([s0], {s0.sample_id: [correct(s0)] * 2 + [wrong(s0)] * 3}, "input",
                        workers=0)
    assert one.official()["raw_scored_generations"] == {"sample_0": [True, True, False,
                                                                     False, False]}
    assert (one.checks_needed, one.checks_run) == (5, 2)
    # the harness's own arithmetic, to the last bit; it prints round(x, 1) = 40.0
    assert (one.pass_at_1, one.pass_at_5) == (39.99999999999999, 100.0)
    dropped = score_samples([s3], {s3.sample_id: [s3.input, wrong(s3), "f("]}, "input",
                            workers=0)
    assert dropped.official()["raw_scored_generations"] == {"sample_3": [False] * 3}
    assert dropped.samples[0].outcomes == (None, "AssertionError", "SyntaxError")


def test_pass_at_k_is_the_harness_arithmetic():
    """Bit for bit the product form 1 − ∏(1 − k/i) over numpy's arange, and equal to
    1 − C(n−c,k)/C(n,k) to 1e-12; 1.0 whenever n − c < k."""
    for n in range(0, 25):
        for c in range(0, n + 1):
            for k in (1, 5):
                ours = pass_at_k(n, c, k)
                if n - c < k:
                    assert ours == 1.0
                    continue
                assert ours == float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
                assert ours == pytest.approx(reference_estimate(n, c, k), abs=1e-12)


def test_identical_checks_run_once(samples):
    """With deduplication each distinct check program runs once; without it every kept
    candidate runs. The scores are the same."""
    s0, s1 = samples[:2]
    generations = {s0.sample_id: [f"f({s0.input})"] * 4 + ["f(0)", "f(0)", "nothing"],
                   s1.sample_id: [f"f({s1.input})", f"f({s1.input})"]}
    once = score_samples([s0, s1], generations, "input", workers=0)
    every = score_samples([s0, s1], generations, "input", workers=0, deduplicate=False)
    assert (once.checks_needed, once.checks_run) == (8, 3)
    assert (every.checks_needed, every.checks_run) == (8, 8)
    assert once.official() == every.official()
    assert [s.outcomes for s in once.samples] == [s.outcomes for s in every.samples]


def test_checks_keep_the_harness_module_level_semantics(samples):
    """The check runs at module level as the harness's exec does: a yield, an indented
    second line or a trailing backslash is a syntax error (inside a function they would
    not be); a second statement runs; the text is spliced in as the harness splices it, so
    "f([]) or True" passes (assert (x == f([])) or True). The sandbox agrees with plain exec
    of the official program on the host for each."""
    s0 = samples[0]
    call = f"f({s0.input})"
    generations = ["f((yield))", f"{call}\n    pass", f"{call} \\", f"{call}; y = 1",
                   f"{call}\nassert False", f"{call}, 'message'", "f([]) or True"]
    result = score_samples([s0], {s0.sample_id: generations}, "input", workers=0)
    outcomes = result.samples[0].outcomes
    assert outcomes == ("SyntaxError", "IndentationError", "SyntaxError", "ok",
                        "AssertionError", "ok", "ok")
    host = host_verdicts([official_text(s0, g) for g in generations])
    assert [o == "ok" for o in outcomes] == host
    program = check_program(s0, "G")
    assert program.startswith(s0.code + "\n") and program.endswith(f"\nassert {s0.output} == G")


def test_checks_with_a_while_loop_run_first_and_outcomes_keep_their_place():
    """run_order puts the programs with the word ``while`` first, each group in its own
    order; run_checks returns each outcome at its program's place whatever the run order
    (here chunks of 2 over 2 workers, so chunks also come back out of order)."""
    codes = ["def f(x):\n    return x",
             "def f(x):\n    while x < 3:\n        x += 1\n    return x",
             "def f(x):\n    return x + None",
             "def f(x):\n    while True:\n        return x",
             "def f(x):\n    awhile = x\n    return awhile",   # not the keyword
             "def f(x):\n    return {}[x]"]
    programs = [check_program(CruxSample(f"s{i}", code, "1", "1"), "f(1)")
                for i, code in enumerate(codes)]
    assert run_order(programs) == [1, 3, 0, 2, 4, 5]
    assert run_order([]) == []
    outcomes = run_checks(programs, workers=2, limits=Limits(timeout_s=CHECK_TIMEOUT_S),
                          chunk_size=2)
    assert outcomes == ["ok", "AssertionError", "TypeError", "ok", "ok", "KeyError"]


def test_a_check_importing_a_missing_module_is_its_exception_type():
    """A generation that imports a module the sandbox does not have fails at the check's
    top level (status missing_module): its outcome is the exception type, as for every
    other top-level failure."""
    programs = [check_program(CruxSample("s0", "def f(x):\n    return x", "1", "1"), generation)
                for generation in ("__import__('numpy')", "(__import__('json') and 1)")]
    assert run_checks(programs, workers=0, limits=Limits(timeout_s=CHECK_TIMEOUT_S)) == [
        "ModuleNotFoundError", "ok"]


# ------------------------------------------------------------------ bad inputs
def test_malformed_generations_are_refused(samples, tmp_path):
    """One-line ValueErrors for everything the harness would crash on or score wrongly."""
    good = {s.sample_id: ["x"] for s in samples}
    cases = [
        ([["x"]] * 800, "generations must be a JSON object mapping sample ids to lists of "
                        "generated strings, not a list"),
        ({**good, "sample_800": ["x"], "foo": []},
         "unknown sample ids in the generations: 'sample_800', 'foo'"),
        ({k: v for k, v in good.items() if k not in ("sample_3", "sample_9")},
         "generations missing for 2 of 800 samples: 'sample_3', 'sample_9'"),
        ({**good, "sample_5": "f(1)"}, "sample_5: expected a list of generated strings, got str"),
        ({**good, "sample_5": ["f(1)", 3]}, "sample_5: generation 1 is int, not a string"),
        ({**good, "sample_7": []}, "sample_7: no generations (pass@k is undefined; the official "
                                   "harness would count the sample as passed)"),
    ]
    for generations, message in cases:
        with pytest.raises(ValueError) as caught:
            validate_generations(generations, samples)
        assert str(caught.value) == message
    missing = {k: v for k, v in good.items() if int(k.split("_")[1]) >= 10}
    with pytest.raises(ValueError, match=r"^generations missing for 10 of 800 samples: "
                                         r"'sample_0', 'sample_1', 'sample_2', 'sample_3', "
                                         r"'sample_4' \(and 5 more\)$"):
        validate_generations(missing, samples)
    with pytest.raises(ValueError, match="^unknown mode 'inputs'; use 'input' or 'output'$"):
        check_mode("inputs")
    bad = tmp_path / "bad.json"
    bad.write_text('{"sample_0": ["f(1)"],')
    with pytest.raises(ValueError, match=rf"^malformed generations file {bad}: Expecting"):
        load_generations(bad)


# ------------------------------------------------------------------ the CLI
@pytest.fixture(scope="module")
def cheap_generations(samples) -> dict[str, list[str]]:
    """Every sample answered, almost everything dropped: 4 checks run."""
    generations = {s.sample_id: [s.input] for s in samples}   # no "f(": dropped
    s0, s1 = samples[:2]
    generations["sample_0"] = [f"f({s0.input})", "f(1, 2, 3, 4, 5)", s0.input, "f("]
    generations["sample_1"] = [f"f({s1.input})"] * 3 + [f"f({s1.input}) and False"] * 2
    return generations


CHEAP_SUMMARY = {
    "mode": "input", "samples": 800, "generations": 807, "dropped": 799, "checks_needed": 8,
    "checks_run": 5, "checks_reused": 0, "store": None, "deduplicated": True,
    "outcomes": {"AssertionError": 2, "SyntaxError": 1, "TypeError": 1, "ok": 4},
    "passed": 4, "samples_n_below_5": 799,
    # sample_0: n=3, c=1; sample_1: n=5, c=3; the other 798: n=1, c=0, so pass@5 = 1.0
    # for every sample (n − c < 5), as the harness's estimator has it
    "pass_at_1": pytest.approx((1 / 3 + 0.6) / 800 * 100, rel=1e-12), "pass_at_5": 100.0,
}


def test_cli_json_and_out_file(tmp_path, cruxeval_path, cheap_generations):
    """--format json prints the summary; --out holds the official scored format, written
    as the harness's json.dump writes it."""
    path = write_generations(tmp_path / "gen.json", cheap_generations)
    out = tmp_path / "scored.json"
    result = invoke("score", "--cruxeval", path, "--mode", "input", "--data", cruxeval_path,
                    "--out", out, "--workers", 1, "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    for key in TIMING:
        assert isinstance(summary.pop(key), (int, float))
    assert summary.pop("analyses")[0] == {  # CRUXEval's analyses: tests/scoring/test_metrics.py
        "measure": "pass@1 fraction", "value": round((1 / 3 + 0.6) / 800, 4),
        "ci_low": 0.0, "ci_high": 0.0031, "n": 800}
    assert summary == {**CHEAP_SUMMARY, "data": str(cruxeval_path), "out": str(out)}
    text = out.read_text()
    scored = json.loads(text)
    assert text == json.dumps(scored)  # json.dump's default style: one line, ", " and ": "
    assert list(scored) == ["raw_generations", "raw_scored_generations", "pass_at_1",
                            "pass_at_5"]
    assert scored["raw_generations"] == cheap_generations
    assert list(scored["raw_scored_generations"]) == [f"sample_{i}" for i in range(800)]
    assert scored["raw_scored_generations"]["sample_0"] == [True, False, False]
    assert scored["raw_scored_generations"]["sample_1"] == [True] * 3 + [False] * 2
    assert all(scored["raw_scored_generations"][f"sample_{i}"] == [False]
               for i in range(2, 800))
    assert (scored["pass_at_1"], scored["pass_at_5"]) == (CHEAP_SUMMARY["pass_at_1"],
                                                          CHEAP_SUMMARY["pass_at_5"])


def test_cli_table_and_csv(tmp_path, cruxeval_path, cheap_generations):
    """The table shows the counts and pass@k to one decimal; csv gives exact values."""
    path = write_generations(tmp_path / "gen.json", cheap_generations)
    result = invoke("score", "--cruxeval", path, "--mode", "input", "--data", cruxeval_path,
                    "--workers", 0)
    assert result.exit_code == 0, result.output
    items = table_items(result.stdout)
    assert {k: items[k] for k in ("mode", "samples", "generations", "dropped by the rules",
                                  "checks needed", "checks run (identical checks once)",
                                  "outcome ok", "passed", "pass@1", "pass@5")} == {
        "mode": "input", "samples": "800", "generations": "807", "dropped by the rules": "799",
        "checks needed": "8", "checks run (identical checks once)": "5", "outcome ok": "4",
        "passed": "4", "pass@1": "0.1", "pass@5": "100.0"}
    assert items["samples with n < 5 (pass@5 = 1.0, as in the harness)"] == "799"
    result = invoke("score", "--cruxeval", path, "--mode", "input", "--data", cruxeval_path,
                    "--workers", 0, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = dict(line.split(",", 1) for line in result.stdout.splitlines()[1:])
    assert float(rows["pass@1"]) == CHEAP_SUMMARY["pass_at_1"]
    assert float(rows["pass@5"]) == 100.0
    assert rows["checks run (identical checks once)"] == "5"


def test_cli_output_mode(tmp_path, cruxeval_path, samples):
    """Output mode through the CLI: a literal passes, a call on the input is dropped."""
    generations = {s.sample_id: [f"f({s.input})"] for s in samples}
    generations["sample_2"] = [samples[2].output, f"f({samples[2].input})"]
    path = write_generations(tmp_path / "out.json", generations)
    result = invoke("score", "--cruxeval", path, "--mode", "output", "--data", cruxeval_path,
                    "--workers", 0, "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["dropped"], summary["checks_run"], summary["passed"]) == (800, 1, 1)
    assert (summary["pass_at_1"], summary["pass_at_5"]) == (100 / 800, 100.0)


def test_cli_errors_are_one_line(tmp_path, cruxeval_path, cheap_generations):
    """Bad input: one line 'Error: ...' and exit 1; a missing input or --mode: usage, 2."""
    good = write_generations(tmp_path / "good.json", cheap_generations)
    malformed = tmp_path / "malformed.json"
    malformed.write_text("{not json")
    missing = write_generations(tmp_path / "missing.json",
                                {k: v for k, v in cheap_generations.items() if k != "sample_9"})
    unknown = write_generations(tmp_path / "unknown.json", {**cheap_generations, "x": ["f(1)"]})
    data = ("--data", cruxeval_path)
    cases = [
        (("--cruxeval", malformed, "--mode", "input", *data),
         f"malformed generations file {malformed}: Expecting property name enclosed in double "
         "quotes: line 1 column 2 (char 1)"),
        (("--cruxeval", missing, "--mode", "input", *data),
         "generations missing for 1 of 800 samples: 'sample_9'"),
        (("--cruxeval", unknown, "--mode", "output", *data),
         "unknown sample ids in the generations: 'x'"),
        (("--cruxeval", good, "--mode", "inputs", *data),
         "unknown mode 'inputs'; use 'input' or 'output'"),
        (("--cruxeval", tmp_path / "nope.json", "--mode", "input", *data),
         f"generations file not found: {tmp_path / 'nope.json'}"),
        (("--cruxeval", good, "--mode", "input", "--data", tmp_path / "nope.jsonl"),
         f"CRUXEval data not found: {tmp_path / 'nope.jsonl'} (give --data)"),
        (("--cruxeval", good, "--mode", "input", *data, "--out", tmp_path / "no" / "s.json"),
         f"cannot write {tmp_path / 'no' / 's.json'}: no directory {tmp_path / 'no'}"),
    ]
    for args, message in cases:
        assert_one_line_error(invoke("score", *args), message)
    usage = invoke("score", "--mode", "input")
    assert usage.exit_code == 2 and "give one of --tasks, --cruxeval" in usage.stderr
    usage = invoke("score", "--cruxeval", good)
    assert usage.exit_code == 2 and "--cruxeval needs --mode input or --mode output" in usage.stderr


# ------------------------------------------------------------------ score-cruxeval
DEPRECATED = ("warning: `steptrace score --cruxeval GENERATIONS` is deprecated; use "
              "`steptrace score-cruxeval GENERATIONS`\n")


def test_score_cruxeval_is_what_score_cruxeval_option_was(tmp_path, cruxeval_path,
                                                          cheap_generations):
    """`score-cruxeval GENERATIONS` prints the summary and writes the scored file that
    `score --cruxeval GENERATIONS` does; the old spelling still runs and, after its
    result, says on stderr that it is deprecated. The new command says nothing there."""
    path = write_generations(tmp_path / "gen.json", cheap_generations)
    scored, stderr = {}, {}
    for name, command in (("new", ("score-cruxeval", path)),
                          ("old", ("score", "--cruxeval", path))):
        out = tmp_path / f"{name}.json"
        result = invoke(*command, "--mode", "input", "--data", cruxeval_path, "--out", out,
                        "--workers", 1, "--format", "json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        for key in TIMING:
            assert isinstance(summary.pop(key), (int, float))
        assert [m["measure"] for m in summary.pop("analyses")] == [
            "pass@1 fraction", "pass@5 fraction", "fully solved", "unsolved",
            "distinct generations", "distinct share"]
        assert summary == {**CHEAP_SUMMARY, "data": str(cruxeval_path), "out": str(out)}
        scored[name], stderr[name] = out.read_text(), result.stderr
    assert scored["new"] == scored["old"]
    assert json.loads(scored["new"])["raw_scored_generations"]["sample_1"] == \
        [True] * 3 + [False] * 2
    assert stderr == {"new": "", "old": DEPRECATED}


def test_score_cruxeval_table_and_csv(tmp_path, cruxeval_path, cheap_generations):
    """The table is titled by the command, with the counts and pass@k to one decimal;
    csv gives exact values."""
    path = write_generations(tmp_path / "gen.json", cheap_generations)
    result = invoke("score-cruxeval", path, "--mode", "input", "--data", cruxeval_path,
                    "--workers", 0)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].strip() == "steptrace score-cruxeval"
    items = table_items(result.stdout)
    assert {k: items[k] for k in ("mode", "samples", "generations", "dropped by the rules",
                                  "checks run (identical checks once)", "passed", "pass@1",
                                  "pass@5")} == {
        "mode": "input", "samples": "800", "generations": "807", "dropped by the rules": "799",
        "checks run (identical checks once)": "5", "passed": "4", "pass@1": "0.1",
        "pass@5": "100.0"}
    result = invoke("score-cruxeval", path, "--mode", "input", "--data", cruxeval_path,
                    "--workers", 0, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = dict(line.split(",", 1) for line in result.stdout.splitlines()[1:])
    assert (float(rows["pass@1"]), float(rows["pass@5"])) == (CHEAP_SUMMARY["pass_at_1"], 100.0)


def test_score_cruxeval_errors(tmp_path, cruxeval_path, cheap_generations):
    """The same one-line errors as `score --cruxeval`; a missing GENERATIONS or --mode is
    click's usage error (exit 2)."""
    good = write_generations(tmp_path / "good.json", cheap_generations)
    malformed = tmp_path / "malformed.json"
    malformed.write_text("{not json")
    data = ("--data", cruxeval_path)
    cases = [
        ((malformed, "--mode", "input", *data),
         f"malformed generations file {malformed}: Expecting property name enclosed in double "
         "quotes: line 1 column 2 (char 1)"),
        ((good, "--mode", "inputs", *data), "unknown mode 'inputs'; use 'input' or 'output'"),
        ((tmp_path / "nope.json", "--mode", "input", *data),
         f"generations file not found: {tmp_path / 'nope.json'}"),
        ((good, "--mode", "input", "--data", tmp_path / "nope.jsonl"),
         f"CRUXEval data not found: {tmp_path / 'nope.jsonl'} (give --data)"),
        ((good, "--mode", "input", *data, "--out", tmp_path / "no" / "s.json"),
         f"cannot write {tmp_path / 'no' / 's.json'}: no directory {tmp_path / 'no'}"),
    ]
    for args, message in cases:
        assert_one_line_error(invoke("score-cruxeval", *args), message)
    usage = invoke("score-cruxeval", "--mode", "input", *data)
    assert usage.exit_code == 2 and "Error: Missing argument 'GENERATIONS'." in usage.stderr
    usage = invoke("score-cruxeval", good, *data)
    assert usage.exit_code == 2 and "Error: Missing option '--mode'." in usage.stderr


def test_score_help_leaves_the_deprecated_options_out():
    """`score --help` shows --tasks and points to score-cruxeval; the old options are
    hidden. Their --data default is the library's."""
    from steptrace.cli._score import CRUXEVAL_DATA
    from steptrace.scoring._cruxeval import DEFAULT_DATA
    result = invoke("score", "--help")
    assert result.exit_code == 0, result.output
    assert "see score-cruxeval" in result.stdout
    listed = result.stdout.split("\nOptions:\n")[1]
    options = [line.split()[0] for line in listed.splitlines() if line.startswith("  -")]
    assert options == ["--tasks", "--db", "--model", "--label", "--k", "--type-strict",
                       "--float-tolerance", "--table", "--timeout", "--workers", "--quiet",
                       "--where", "--format", "--help"]
    assert CRUXEVAL_DATA == DEFAULT_DATA


# ------------------------------------------------------------------ forging generations
# Generations are untrusted text that runs in the guest. These try to make a failing check
# pass by forging the guest's result instead of by computing the output: patching the
# json encoder the result used to be written with, raising the tracer's own stop exception
# with the status "ok", reaching the runner through sys.modules, switching the tracer off,
# exiting the interpreter with status 0, reading the runner's frame. The official harness
# fails every one of them (checked here by running each official check program the way the
# harness does: its own Python process, passed only if it gets to the end).
FORGING_GENERATIONS = [
    "f([setattr(__import__('json').encoder.JSONEncoder, 'encode', "
    "lambda s, o: '{\"status\": \"ok\"}'), setattr(__import__('json').encoder, "
    "'c_make_encoder', None), setattr(__import__('json'), 'dumps', "
    "lambda *a, **k: '{\"status\": \"ok\"}'), 0][3:])",
    "f([1]) if (_ for _ in ()).throw(next(c for c in BaseException.__subclasses__() "
    "if c.__name__ == 'StopTracing')('ok', 'forged')) else 0",
    "f(__import__('sys').modules['guest'].WitWorld.run.__globals__['json'].__dict__"
    ".__setitem__('dumps', lambda *a, **k: '{\"status\": \"ok\"}') or [1])",
    "f([1]) if __import__('sys').monitoring.set_events(3, 0) is None else 0",
    "f(__import__('os')._exit(0))",
    "f(__import__('sys')._getframe(0).f_back.f_locals['request']['expected'])",
    "f([1]) if __import__('sys').audit('steptrace.write', 1, 'ok') is None else 0",
]
HARNESS_RUN = ("import sys\nprogram = sys.stdin.read()\nexec(program, {})\n"
               "print('PASSED')\n")


def harness_passes(program: str) -> bool:
    """The official harness's verdict: the check program, exec'd in a Python process of its
    own, runs to the end (an os._exit or a crash does not)."""
    done = subprocess.run([sys.executable, "-c", HARNESS_RUN], input=program,
                          capture_output=True, text=True, timeout=60)
    return done.returncode == 0 and done.stdout.endswith("PASSED\n")


def test_forging_generations_fail_as_in_the_official_harness(samples):
    """Each forging generation fails, as it does in the official harness; the correct
    generation between them still passes, and the sample's pass@1 counts one pass."""
    s0 = samples[0]
    generations = FORGING_GENERATIONS + [f"f({s0.input})"]
    truth = [harness_passes(official_text(s0, g)) for g in generations]
    assert truth == [False] * len(FORGING_GENERATIONS) + [True]
    result = score_samples([s0], {s0.sample_id: generations}, "input", workers=0)
    outcomes = result.samples[0].outcomes
    assert [o == "ok" for o in outcomes] == truth
    # sys._getframe(0).f_back: the frame view below the input's is None (the runner's
    # frames are never shown), so .f_locals is an AttributeError
    assert outcomes == ("AssertionError", "StopTracing", "KeyError", "RuntimeError", "exited",
                        "AttributeError", "AssertionError", "ok")
    assert result.official()["pass_at_1"] == pytest.approx(100 / len(generations))
