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
