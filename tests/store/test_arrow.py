"""engine/store/_arrow.py: the store's Arrow columns built without pyarrow's pandas probe,
equal to ``pa.array``'s, and a trace that writes a store without importing pandas."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steptrace.store._arrow import arrow_array, from_buffers

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def same_as_pyarrow(values, kind: pa.DataType, built_here: bool = True) -> None:
    """The array built from buffers is ``pa.array``'s, and none is built where
    ``pa.array`` fails; ``built_here``: values of the types and kinds the buffers take
    (so that a path that refused everything would fail). This process has pandas
    imported by then, so ``arrow_array`` itself would only call ``pa.array``: the
    buffers are called directly."""
    try:
        expected = pa.array(values, kind)
    except Exception:
        assert from_buffers(values, kind) is None
        return
    built = from_buffers(values, kind)
    assert (built is not None) == built_here
    if built is None:
        return
    built.validate(full=True)
    assert built.type == kind
    assert built.equals(expected)
    assert built.null_count == expected.null_count
    assert built.to_pylist() == expected.to_pylist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), INT64)))
def test_int64_columns_are_pyarrows(values):
    same_as_pyarrow(values, pa.int64())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40))))
def test_int32_columns_are_pyarrows_and_too_large_values_fail_as_there(values):
    same_as_pyarrow(values, pa.int32())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=False),
                          st.integers(-(1 << 60), 1 << 60))))
def test_float64_columns_are_pyarrows(values):
    same_as_pyarrow(values, pa.float64())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(), st.text(alphabet="abc \n"))))
def test_string_columns_are_pyarrows(values):
    same_as_pyarrow(values, pa.string())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary())))
def test_binary_columns_are_pyarrows(values):
    same_as_pyarrow(values, pa.binary())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.booleans())))
def test_boolean_columns_are_pyarrows(values):
    same_as_pyarrow(values, pa.bool_())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.datetimes(),
                          st.datetimes(timezones=st.just(dt.timezone(dt.timedelta(hours=-5)))))))
def test_timestamp_columns_are_pyarrows(values):
    same_as_pyarrow(values, pa.timestamp("us"))


@pytest.mark.parametrize("values, kind", [
    ([True, 1], pa.int64()),                      # a bool where a number goes: refused
    ([1.5, 2.0], pa.int64()),                     # a float as an int: pyarrow truncates
    ([True], pa.float64()),
    ([1 << 31], pa.int32()),                      # what the type cannot hold: refused
    ([1 << 63], pa.int64()),
    ([(1 << 53) + 1], pa.float64()),              # or hold exactly
    (["a", 1], pa.string()),
    (["\ud800"], pa.string()),                    # a lone surrogate is not UTF-8
    (["a"], pa.binary()),
    ([1, True], pa.bool_()),
    (["2020-01-01"], pa.timestamp("us")),
    ([5, None], pa.timestamp("us")),              # a number as microseconds
])
def test_edge_values_get_pyarrows_answer(values, kind):
    """The buffers take no value they would convert otherwise than pyarrow: such values
    get pyarrow's own array or error."""
    same_as_pyarrow(values, kind, built_here=False)
    try:
        expected = pa.array(values, kind)
    except Exception:
        with pytest.raises(Exception):
            arrow_array(values, kind)
    else:
        assert arrow_array(values, kind).equals(expected)


@pytest.mark.parametrize("values, kind, expected", [
    (range(3), pa.int64(), [0, 1, 2]),
    ((None, 7), pa.int32(), [None, 7]),
    (iter(["x", None]), pa.string(), ["x", None]),
    ([[1, 2], None], pa.list_(pa.int64()), [[1, 2], None]),   # another type: pa.array's
])
def test_ranges_tuples_iterators_and_other_types(values, kind, expected):
    array = arrow_array(values, kind)
    assert array.type == kind
    assert array.to_pylist() == expected
    if isinstance(values, (range, tuple)):  # the buffers take them as they are
        assert from_buffers(values, kind).to_pylist() == expected
    if isinstance(kind, pa.ListType):  # not a type the buffers build
        assert from_buffers(values, kind) is None


PROBE = """
import json, sys
import pyarrow as pa
import datetime as dt
from steptrace.store._arrow import arrow_array
arrow_array([1, None], pa.int64()); arrow_array([1, None], pa.int32())
arrow_array([1.0, None], pa.float64()); arrow_array([True, None], pa.bool_())
arrow_array(["é", None], pa.string()); arrow_array([b"x", None], pa.binary())
arrow_array([dt.datetime(2020, 1, 1), None], pa.timestamp("us"))
print(json.dumps("pandas" in sys.modules))
"""


def pandas_is_installed() -> None:
    """The test extra installs pandas; without it pyarrow's probe would import nothing
    and these tests could not fail."""
    assert importlib.util.find_spec("pandas") is not None


def test_building_the_columns_does_not_import_pandas():
    pandas_is_installed()
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) is False


SWITCH = """
import json, sys
import pyarrow as pa
from steptrace.store import _arrow
_arrow.arrow_array(list(range(_arrow.BUFFER_VALUES - 1)), pa.int64())
before = "pandas" in sys.modules
_arrow.arrow_array([1, 2], pa.int64())   # past BUFFER_VALUES: pa.array from here on
after = _arrow.arrow_array([3], pa.int64())
print(json.dumps([before, "pandas" in sys.modules, after.to_pylist()]))
"""


def test_a_process_past_buffer_values_goes_to_pyarrow():
    """The buffers' extra passes stop costing once they would have paid for the import:
    the process then converts with pa.array (which imports pandas, once)."""
    pandas_is_installed()
    out = subprocess.run([sys.executable, "-c", SWITCH], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == [False, True, [3]]


TRACE = """
import json, sys
import steptrace
summary = steptrace.trace(sys.argv[1], sys.argv[2], workers=0)
print(json.dumps([summary.traced, "pandas" in sys.modules]))
"""


@pytest.mark.slow
def test_a_trace_writes_its_store_without_importing_pandas(tmp_path):
    """The probe cost a trace's main process 0.5-0.7 s where pandas is installed."""
    pandas_is_installed()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"s{i}", "code": f"def f(x):\n    return x + {i}\n",
                                          "input": "1", "output": str(1 + i)}) + "\n"
                              for i in range(3)))
    out = subprocess.run([sys.executable, "-c", TRACE, str(corpus), str(tmp_path / "t.duckdb")],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [3, False]
