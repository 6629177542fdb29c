"""numpy, pandas and scipy traced by the native backend, through its real jail: the lock
resolved and installed by ``steptrace build --backend native`` (platform wheels from the
package index, pinned), exact outputs, steps and states (an ndarray's state as numpy prints
it), the packages calling the program's functions back (traced, the packages' own frames
not), print options and changes to numpy's printing code that recording does not follow
into the program's code, and a pure-Python package traced the same by both backends.

Cost: the lock's wheels are ~70 MB to download once (pip's cache keeps them) and 212 MB
installed into the session's cache; resolving and installing them takes ~15 s with the
wheels in pip's cache, starting the fork server with numpy, pandas and scipy.optimize
preloaded ~5 s; the jobs ~20-50 ms each."""

from __future__ import annotations

import json

import pytest

import steptrace as st
from helpers.cli import ok, rows
from helpers.traces import states_of, steps_of
from steptrace.native_sandbox import NativeSandbox, find_python, prepare
from steptrace.sandbox._limits import Limits
from steptrace.sandbox._packages import read_lock

pytestmark = pytest.mark.slow  # the wheels come from the package index (~15-45 s)

PINNED = ("numpy==2.5.5", "pandas==3.1.1", "scipy==1.18.1")


@pytest.fixture(scope="module")
def science_lock(tmp_path_factory):
    """The lock ``build --backend native`` writes for numpy, pandas and scipy (and
    scipy.optimize, imported when the jail starts) on the machine's CPython 3.13."""
    lock = tmp_path_factory.mktemp("lock") / "science.lock"
    python = find_python(None, "3.13").executable
    args = ["build", "--backend", "native", "--python", python, "--lock", lock,
            "--import", "scipy.optimize", "--format", "json"]
    for spec in PINNED:
        args += ["--with", spec]
    report = {item["item"]: item["value"] for item in json.loads(ok(*args))}
    assert report["backend"] == "native"
    assert report["native_code"] == "numpy, pandas, scipy"
    assert report["packages"] == ("numpy==2.5.5, pandas==3.1.1, python-dateutil==4.0.0, "
                                  "scipy==1.18.1, tzdata==2026.6")
    return lock


@pytest.fixture(scope="module")
def science(science_lock):
    with NativeSandbox(Limits(timeout_s=30), prepare(None, read_lock(science_lock))) as box:
        yield box


def run(box, code: str, input: str) -> dict:
    result = box.run({"code": code, "input": input}).result
    assert result["status"] == "ok", result
    return result


def lines(result: dict) -> list[tuple]:
    return [(event, func, line, depth) for event, func, line, depth, _ in steps_of(result)]


NUMPY = """import numpy as np

def f(rows):
    m = np.array(rows, dtype=float)
    m[0, 0] = 0.5
    col = m.sum(axis=0)
    return col / col.max()
"""


def test_numpy_arrays_are_states_as_numpy_prints_them(science):
    result = run(science, NUMPY, "[[1, 2], [3, 4]]")
    assert (result["output"], result["output_type"]) == ("array([0.58333333, 1.        ])",
                                                         "ndarray")
    assert lines(result) == [("call", "f", 3, 0), ("line", "f", 4, 0), ("line", "f", 5, 0),
                             ("line", "f", 6, 0), ("line", "f", 7, 0), ("return", "f", 7, 0)]
    # m changed in place (its item set at line 5) is a new state at the next step
    assert states_of(result) == [
        (0, "rows", "[[1, 2], [3, 4]]", "list"),
        (2, "m", "array([[1., 2.],\n       [3., 4.]])", "ndarray"),
        (3, "m", "array([[0.5, 2. ],\n       [3. , 4. ]])", "ndarray"),
        (4, "col", "array([3.5, 6. ])", "ndarray"),
        (5, "<return>", "array([0.58333333, 1.        ])", "ndarray")]


def test_numpy_scalars_kinds_and_a_summarised_array(science):
    code = ("import numpy as np\n\ndef f(n):\n    big = np.arange(n)\n"
            "    total = big.sum()\n    mean = big.mean()\n    flag = total > 10\n"
            "    when = np.datetime64('2024-02-29') + np.timedelta64(n, 'D')\n"
            "    text = np.array(['ab', 'c'])\n    return total, mean, flag, when, text\n")
    result = run(science, code, "2000")
    assert result["output"] == ("(np.int64(1999000), np.float64(999.5), np.True_, "
                                "np.datetime64('2029-08-21'), array(['ab', 'c'], dtype='<U2'))")
    assert states_of(result)[1:] == [
        (2, "big", "array([   0,    1,    2, ..., 1997, 1998, 1999], shape=(2000,))", "ndarray"),
        (3, "total", "np.int64(1999000)", "int64"),
        (4, "mean", "np.float64(999.5)", "float64"),
        (5, "flag", "np.True_", "bool"),
        (6, "when", "np.datetime64('2029-08-21')", "datetime64"),
        (7, "text", "array(['ab', 'c'], dtype='<U2')", "ndarray"),
        (8, "<return>", result["output"], "tuple")]


def test_print_options_apply_to_the_job_that_set_them_only(science):
    """A program's own print options (plain values) are numpy's printing for its states;
    the next job starts from numpy's defaults (a fresh process)."""
    code = ("import numpy as np\n\ndef f(x):\n    np.set_printoptions(precision=2)\n"
            "    a = np.array([x, 1 / 3])\n    return a\n")
    result = run(science, code, "2.0")
    assert states_of(result) == [(0, "x", "2.0", "float"),
                                 (3, "a", "array([2.  , 0.33])", "ndarray"),
                                 (4, "<return>", "array([2.  , 0.33])", "ndarray")]
    after = run(science, "import numpy as np\n\ndef f(x):\n    return np.array([x, 1 / 3])\n",
                "2.0")
    assert states_of(after)[-1] == (2, "<return>", "array([2.        , 0.33333333])",
                                    "ndarray")


def test_recording_runs_no_formatter_of_the_program(science):
    """A formatter function is the program's code: states are printed with numpy's
    defaults instead, and the formatter is never called by the tracer."""
    code = ("import numpy as np\ncalls = []\n\ndef fmt(v):\n    calls.append(v)\n"
            "    return 'X'\n\ndef f(n):\n    np.set_printoptions(formatter={'int': fmt})\n"
            "    a = np.arange(n)\n    b = a + 1\n    return len(calls)\n")
    result = run(science, code, "3")
    assert result["output"] == "0"
    assert states_of(result) == [(0, "n", "3", "int"), (3, "a", "array([0, 1, 2])", "ndarray"),
                                 (4, "b", "array([1, 2, 3])", "ndarray"),
                                 (5, "<return>", "0", "int")]
    assert [step[1] for step in steps_of(result)] == ["f"] * 6  # fmt never ran


def test_a_changed_printing_code_is_not_run_by_recording(science):
    """Once the program rebinds a function numpy's printing runs, arrays are
    ``<numpy.ndarray object>``: the program's function runs only when the program itself
    asks for a repr (traced, at depth 1)."""
    code = ("import numpy as np\n\ndef forged(*args, **kwargs):\n    return 'forged'\n\n"
            "def f(n):\n    a = np.arange(n)\n    np._core.arrayprint._formatArray = forged\n"
            "    b = a + 1\n    return repr(b)\n")
    result = run(science, code, "3")
    assert result["output"] == "'array(forged)'"
    assert lines(result) == [
        ("call", "f", 6, 0), ("line", "f", 7, 0), ("line", "f", 8, 0), ("line", "f", 9, 0),
        ("line", "f", 10, 0), ("call", "forged", 3, 1), ("line", "forged", 4, 1),
        ("return", "forged", 4, 1), ("return", "f", 10, 0)]
    assert states_of(result)[:4] == [
        (0, "n", "3", "int"), (2, "a", "array([0, 1, 2])", "ndarray"),
        (3, "a", "<numpy.ndarray object>", "ndarray"),
        (4, "b", "<numpy.ndarray object>", "ndarray")]
    for rebind in ("import builtins\n    builtins.max = lambda *a, **k: 0",
                   "np._core.arrayprint.FloatingFormat.fillFormat = lambda self, d: None",
                   "np.finfo._finfo_cache[np.dtype('float16')] = object()"):
        changed = run(science, f"import numpy as np\n\ndef f():\n    {rebind}\n"
                               "    return np.array([1.5])\n", "")
        assert states_of(changed)[-1] == (3 + rebind.count("\n"), "<return>",
                                          "<numpy.ndarray object>", "ndarray"), rebind


PANDAS = """import pandas as pd

def double(v):
    return v * 2

def f(rows):
    df = pd.DataFrame(rows)
    df['w'] = df['v'].apply(double)
    totals = df.groupby('k')['w'].sum()
    return totals.to_dict()
"""


def test_pandas_calls_the_program_back_traced(science):
    result = run(science, PANDAS, "[{'k': 'a', 'v': 1}, {'k': 'b', 'v': 2}, {'k': 'a', 'v': 3}]")
    assert result["output"] == "{'a': 8, 'b': 4}"
    # apply calls double once an item: traced at depth 1, pandas' own frames not steps
    assert lines(result) == [("call", "f", 6, 0), ("line", "f", 7, 0), ("line", "f", 8, 0)] + [
        ("call", "double", 3, 1), ("line", "double", 4, 1), ("return", "double", 4, 1)] * 3 + [
        ("line", "f", 9, 0), ("line", "f", 10, 0), ("return", "f", 10, 0)]
    flags = "_flags=Flags(_allows_duplicate_labels=True, _obj=<weakref.ReferenceType object>)"
    index = ("Index(_data=StringArray(), _name='k', _cache={'dtype': StringDtype("
             "_storage='python', _na_value=nan, _cache={'index_class': <class 'pandas.Index'>})"
             "}, _id=<object object>, _references=BlockValuesRefs())")
    assert states_of(result) == [
        (0, "rows", "[{'k': 'a', 'v': 1}, {'k': 'b', 'v': 2}, {'k': 'a', 'v': 3}]", "list"),
        (2, "df", f"DataFrame(_mgr=BlockManager(), _attrs={{}}, {flags})", "DataFrame"),
        (3, "v", "1", "int"), (5, "<return>", "2", "int"), (6, "v", "2", "int"),
        (8, "<return>", "4", "int"), (9, "v", "3", "int"), (11, "<return>", "6", "int"),
        (13, "totals", f"Series(_mgr=SingleBlockManager(axes=[{index}], blocks=(NumpyBlock(),)), "
                       f"_attrs={{}}, {flags}, _name='w')", "Series"),
        # to_dict fills the block's cached dtype: the Series' state changed
        (14, "totals", f"Series(_mgr=SingleBlockManager(axes=[{index}], blocks=(NumpyBlock("
                       "_cache={'dtype': <numpy.dtypes.Int64DType object>}),), _cache={'_block': "
                       "NumpyBlock(_cache={'dtype': <numpy.dtypes.Int64DType object>})}), "
                       f"_attrs={{}}, {flags}, _name='w')", "Series"),
        (14, "<return>", "{'a': 8, 'b': 4}", "dict")]


SCIPY = """from scipy import optimize

def loss(x):
    return (x - 3) ** 2

def f(a, b):
    found = optimize.minimize_scalar(loss, bounds=(a, b), method='bounded')
    return round(float(found.x), 4)
"""


def test_scipy_minimises_a_program_function_traced(science):
    result = run(science, SCIPY, "0, 5")
    assert result["output"] == "3.0"
    assert lines(result) == [("call", "f", 6, 0), ("line", "f", 7, 0)] + [
        ("call", "loss", 3, 1), ("line", "loss", 4, 1), ("return", "loss", 4, 1)] * 6 + [
        ("line", "f", 8, 0), ("return", "f", 8, 0)]
    # the bounded Brent search's points (golden section, then parabolic steps)
    points = [("1.9098300562505255", "1.1884705062547325"),
              ("3.0901699437494736", "0.008130618755783237"),
              ("3.819660112501051", "0.6718427000252355"), ("3.0", "0.0"),
              ("3.000003377830524", "1.140973905005553e-11"),
              ("2.999996622169476", "1.140973905005553e-11")]
    expected = [(0, "a", "0", "int"), (0, "b", "5", "int")]
    for call, (x, y) in enumerate(points):
        expected += [(2 + 3 * call, "x", f"np.float64({x})", "float64"),
                     (4 + 3 * call, "<return>", f"np.float64({y})", "float64")]
    expected += [(20, "found", "OptimizeResult({'fun': np.float64(0.0), 'status': 0, "
                               "'success': True, 'message': 'Solution found.', 'x': "
                               "np.float64(3.0), 'nfev': 6, 'nit': 6})", "OptimizeResult"),
                 (21, "<return>", "3.0", "float")]
    assert states_of(result) == expected


def test_trace_with_the_lock_chooses_the_native_backend(science_lock, tmp_path):
    corpus = tmp_path / "science.jsonl"
    # (an array's == is an array: no expected output for it)
    records = [{"id": "numpy", "code": NUMPY, "input": "[[1, 2], [3, 4]]"},
               {"id": "scipy", "code": SCIPY, "input": "0, 5", "output": "3.0"}]
    corpus.write_text("".join(json.dumps(record) + "\n" for record in records))
    db = tmp_path / "science.duckdb"
    summary = st.trace(corpus, db, workers=1, packages=science_lock)
    assert summary.notes == [
        "the lock holds packages with native code (numpy, pandas, scipy): traced by the "
        "native backend (CPython 3.13, jailed; docs/guides/sandbox.md)"]
    version = find_python(None, "3.13").version
    assert rows(db, "SELECT sample_id, status, output, output_matches, backend, python, "
                    "line_steps FROM runs ORDER BY sample_id") == [
        ("numpy", "ok", "array([0.58333333, 1.        ])", None, "native", version, 4),
        ("scipy", "ok", "3.0", True, "native", version, 8)]
    assert rows(db, "SELECT value FROM states JOIN runs USING (run_id) WHERE sample_id = "
                    "'numpy' AND var = 'col'") == [("array([3.5, 6. ])",)]
    # a downstream command on the native runs: the output tasks, from the stored runs
    tasks = tmp_path / "tasks.jsonl"
    ok("tasks", "--db", db, "--kinds", "output", "--out", tasks)
    answers = sorted(json.loads(line)["answer"] for line in tasks.read_text().splitlines())
    assert answers == ["3.0", "array([0.58333333, 1.        ])"]


TOOLZ = """from toolz import pipe

def double(x):
    return x * 2

def f(xs):
    return pipe(xs, lambda v: list(map(double, v)))
"""


def test_a_pure_python_package_traces_the_same_in_both_backends():
    """toolz (pure Python) in the WASI guest that bundles it and in the native backend
    (the same lock's wheels, run natively): the same output, steps and states."""
    from dataclasses import replace

    from helpers.package_locks import LOCK
    from steptrace.sandbox import Sandbox
    from steptrace.sandbox._build import ensure_component
    request = {"code": TOOLZ, "input": "[1, 2]", "expected": "[2, 4]"}
    with Sandbox(Limits(timeout_s=30), ensure_component(packages=LOCK)) as box:
        wasi = box.run(request).result
    native_lock = replace(LOCK, python=find_python(None, "3.13").minor)
    with NativeSandbox(Limits(timeout_s=30), prepare(None, native_lock)) as box:
        native = box.run(request).result
    assert (native["status"], native["output"], native["output_matches"]) == ("ok", "[2, 4]", True)
    assert steps_of(native) == steps_of(wasi)
    assert states_of(native) == states_of(wasi)
    assert [step[1] for step in steps_of(native)] == (
        ["f"] * 2 + ["f.<locals>.<lambda>"] * 2 + ["double"] * 6 + ["f.<locals>.<lambda>", "f"])
