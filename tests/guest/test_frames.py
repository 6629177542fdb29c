"""Frame views (exposed.FrameView, guard._on_getframe): what ``sys._getframe`` gives a
job. Code that reads its caller works (logging, traceback.extract_stack); no view leads
to the runner's frames, also when the tracer runs a program's ``__repr__``."""

from __future__ import annotations

import pytest

import steptrace as st

LOGGING = ('import logging, sys\n'
           'logging.basicConfig(stream=sys.stdout, format="%(funcName)s:%(lineno)d %(message)s")\n'
           'log = logging.getLogger("x")\n\n'
           'def helper(a):\n    log.warning("in helper %s", a)\n\n'
           'def f(a):\n    log.warning("hi %s", a)\n    helper(a + 1)\n    return a\n')


def test_logging_finds_the_line_that_logged():
    run = st.trace_one(LOGGING, "1")
    assert (run.status, run.output, run.note) == ("ok", "1", None)
    assert run.stdout == "f:9 hi 1\nhelper:6 in helper 2\n"


def test_a_view_copies_the_caller_frame():
    code = ("import sys\n\ndef g():\n    view = sys._getframe(1)\n"
            "    return (view.f_code.co_name, view.f_lineno, view.f_locals,\n"
            "            view.f_globals is globals(), view.f_back)\n\n"
            "def f(a):\n    b = a + 1\n    return g()\n")
    run = st.trace_one(code, "1")
    assert (run.status, run.output) == ("ok", "('f', 10, {'a': 1, 'b': 2}, True, None)")


def test_traceback_extract_stack_and_inspect():
    code = ("import inspect, traceback\n\ndef f(a):\n"
            "    frames = [(s.name, s.lineno) for s in traceback.extract_stack()]\n"
            "    here = inspect.currentframe().f_code.co_name\n"
            "    try:\n        inspect.stack()\n    except TypeError as exc:\n"
            "        refused = str(exc)\n    return frames, here, refused\n")
    run = st.trace_one(code, "1")
    assert run.status == "ok"
    assert run.output == ("([('f', 4)], 'f', \"<frame view, file '<program>', line 7, "
                          "code f> is not a frame or traceback object\")")


@pytest.mark.parametrize("depth, expected", [
    ("0", "('f', 'f')"), ("-5", "('f', 'f')"),
])
def test_depths(depth, expected):
    code = f"import sys\n\ndef f():\n    return sys._getframe({depth}).f_code.co_name, 'f'\n"
    assert st.trace_one(code, "").output == expected


def test_a_repr_run_for_the_output_sees_only_itself():
    """The tracer never runs a program's ``__repr__`` (``x`` is recorded as ``A()``); the
    output's repr runs it after the call, inside the runner: the views stop at the
    runner's frames."""
    code = ("import sys\n\nclass A:\n    def __repr__(self):\n"
            "        view, names = sys._getframe(), []\n"
            "        while view is not None:\n"
            "            names.append(view.f_code.co_name)\n"
            "            view = view.f_back\n"
            "        return 'A' + str(names)\n\n"
            "def f():\n    x = A()\n    return x\n")
    run = st.trace_one(code, "")
    assert (run.status, run.output) == ("ok", "A['__repr__']")
    assert [s.value for s in run.states if s.var in ("x", "<return>")] == ["A()", "A()"]


def test_real_frames_stay_refused():
    code = ("def f():\n    try:\n        1 / 0\n    except ZeroDivisionError as exc:\n"
            "        return exc.__traceback__.tb_frame\n")
    run = st.trace_one(code, "")
    assert (run.status, run.exception_type, run.note) == (
        "exception", "RuntimeError", "refused to the program: object.__getattr__ tb_frame")


def test_a_tracebacks_frames_are_views():
    """traceback's walks (format_exc, extract_tb, logging's exception) read a traceback
    through frame views: each entry's frame view, its f_back chain ending above the
    runner, its locals a copy; tb_frame itself stays refused."""
    code = ("import traceback\n\ndef g(x):\n    y = x * 2\n    return 1 // (y - y)\n\n"
            "def f(a):\n    try:\n        g(a)\n    except ZeroDivisionError as exc:\n"
            "        views = [v for v, _ in traceback.walk_tb(exc.__traceback__)]\n"
            "        chain, view = [], views[-1]\n"
            "        while view is not None:\n"
            "            chain.append(view.f_code.co_name)\n"
            "            view = view.f_back\n"
            "        return ([(v.f_code.co_name, line) for v, line in "
            "traceback.walk_tb(exc.__traceback__)],\n"
            "                chain, views[-1].f_locals, views[-1].f_back is views[0],\n"
            "                traceback.format_exc().splitlines())\n")
    run = st.trace_one(code, "3")
    assert (run.status, run.note) == ("ok", None)
    assert run.output == (
        "([('f', 9), ('g', 5)], ['g', 'f'], {'x': 3, 'y': 6}, True, "
        "['Traceback (most recent call last):', '  File \"<program>\", line 9, in f', "
        "'  File \"<program>\", line 5, in g', "
        "'ZeroDivisionError: division by zero'])")


def test_the_traceback_channel_takes_only_tracebacks():
    """The channel itself, called with anything but a traceback, gives nothing."""
    code = ("import sys\n\ndef f():\n    box = [[]]\n"
            "    sys.audit('steptrace.tbframes', sys.modules, box)\n"
            "    sys.audit('steptrace.tbframes', None, box)\n    return box\n")
    run = st.trace_one(code, "")
    assert (run.status, run.output) == ("ok", "[[]]")
