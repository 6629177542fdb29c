"""``steptrace view``: the page of one run, driven in headless Chromium (Debian's package,
as test_report does; one browser for the module). At given steps, reached by the buttons,
the keys and the slider, the marked line, each frame's locals and the object boxes equal
the store's (written out by hand for a few steps, and for every step of the small runs
equal to a replay of the store's ``Run`` record written here independently of the page's
decoding); no console errors, nothing fetched but the page; hostile reprs, names and
source stay text; a 100,004-step run opens and goes to its last step."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers.chromium import Browser
from helpers.cli import assert_one_line_error
from steptrace.analytics._viewer import _encode, view_data, write_view
from steptrace.cli._main import main
from steptrace.sandbox._limits import Limits
from steptrace.store._reader import open_store
from steptrace.tracing._trace import TraceOptions, trace_corpus

pytestmark = pytest.mark.slow  # traces a 100,000-step run and drives a browser

LOOP = ("def f(n):\n"                  # 1
        "    s = 0\n"                  # 2
        "    for i in range(n):\n"     # 3
        "        s += i\n"             # 4
        "    print('s', s)\n"          # 5
        "    return s\n")              # 6
NESTED = ("def sq(x):\n"               # 1
          "    y = x * x\n"            # 2
          "    return y\n"             # 3
          "\n"                         # 4
          "def f(a, b):\n"             # 5
          "    t = sq(a)\n"            # 6
          "    return t + sq(b)\n")    # 7
CLASSES = ("class Acc:\n"                        # 1
           "    def __init__(self):\n"           # 2
           "        self.total = 0\n"            # 3
           "        self.items = []\n"           # 4
           "\n"                                  # 5
           "    def add(self, x):\n"             # 6
           "        self.total += x\n"           # 7
           "        self.items.append(x)\n"      # 8
           "\n"                                  # 9
           "def f(xs):\n"                        # 10
           "    a = Acc()\n"                     # 11
           "    b = a\n"                         # 12
           "    for x in xs:\n"                  # 13
           "        b.add(x)\n"                  # 14
           "    return a.total\n")               # 15
BOOM = ("def g(d):\n"                  # 1
        "    return d['k']\n"          # 2
        "\n"                           # 3
        "def f(d):\n"                  # 4
        "    d['j'] = 1\n"             # 5
        "    return g(d)\n")           # 6
HOSTILE_TEXT = "</script><script>alert(1)</script>"
HOSTILE = ("class X:\n"
           "    def __repr__(self):\n"
           f"        return {HOSTILE_TEXT!r}\n"
           "\n"
           "def f(s):\n"
           f"    # {HOSTILE_TEXT}<img src=x onerror=alert(2)>\n"
           "    v = X()\n"
           "    w = {s: [s]}\n"
           "    setattr(v, s, [s])\n"
           "    return s\n")
BIG = ("def f(n):\n"           # 1
       "    s = 0\n"           # 2
       "    while s < n:\n"    # 3
       "        s += 1\n"      # 4
       "        u = n\n"       # 5
       "    return s\n")       # 6: 3 steps, 1 change an iteration (the sandbox's result
                               # holds at most 1,000,000 JSON values)
RECORDS = [{"id": "loop", "code": LOOP, "input": "3", "output": "3"},
           {"id": "nested", "code": NESTED, "input": "2, 3", "output": "13"},
           {"id": "classes", "code": CLASSES, "input": "[1, 2]", "output": "3"},
           {"id": "boom", "code": BOOM, "input": "{}", "output": "1"},
           {"id": "hostile", "code": HOSTILE, "input": repr(HOSTILE_TEXT), "output": "1"},
           {"id": "big", "code": BIG, "input": "33333", "output": "1"}]
RUN = {r["id"]: i for i, r in enumerate(RECORDS, start=1)}  # run ids in corpus order


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("view")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    db = root / "store.duckdb"
    trace_corpus(corpus, db, TraceOptions(workers=0, limits=Limits(max_steps=200_000)))
    return db


@pytest.fixture(scope="module")
def browser():
    with Browser() as b:
        yield b


# What the page shows: the marked line, the frames (innermost first) with their rows, the
# object boxes with theirs. A row: [name, value, object id or None].
SHOWN = """(() => {
  const rows = table => Array.from(table.querySelectorAll('tr')).map(tr => {
    const ref = tr.querySelector('a.ref');
    return [tr.children[0].textContent, tr.children[1].firstChild.textContent,
            ref ? Number(ref.dataset.oid) : null];
  });
  const current = document.querySelector('#code li.current');
  return {
    step: window.steptraceViewer.step(),
    line: current ? Array.from(current.parentNode.children).indexOf(current) + 1 : null,
    slider: Number(document.getElementById('slider').value),
    frames: Array.from(document.querySelectorAll('#stack .frame')).map(f => ({
      title: f.querySelector('h3').textContent, rows: rows(f.querySelector('table'))})),
    objects: Array.from(document.querySelectorAll('#objects .object')).map(o => ({
      title: o.querySelector('h3').textContent, rows: rows(o.querySelector('table')),
      rendering: o.querySelector('code.rendering')
        ? o.querySelector('code.rendering').textContent : null})),
    where: document.getElementById('where').textContent,
  };
})()"""


def shown(browser, page) -> dict:
    return browser.evaluate(page, SHOWN)


def click(browser, page, button: str) -> dict:
    browser.evaluate(page, f"document.getElementById({button!r}).click()")
    return shown(browser, page)


def key(browser, page, name: str) -> dict:
    codes = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowUp": 38, "ArrowDown": 40, "Home": 36,
             "End": 35}
    for kind in ("rawKeyDown", "keyUp"):
        browser.send("Input.dispatchKeyEvent", {"type": kind, "key": name, "code": name,
                                                "windowsVirtualKeyCode": codes[name]},
                     session=page.session)
    return shown(browser, page)


def slide(browser, page, step: int) -> dict:
    browser.evaluate(page, "(() => { const s = document.getElementById('slider'); "
                           f"s.value = '{step}'; s.dispatchEvent(new Event('input')); }})()")
    return shown(browser, page)


def open_view(browser, store, tmp_path, name: str):
    out = tmp_path / f"{name}.html"
    write_view(store, RUN[name], out)
    return browser.open(out.as_uri()), out


# ---------------------------------------------------------------- the store's replay
def expected(run, step: int) -> dict:
    """What the page must show at ``step``, replayed from the store's rows: the frames
    below a step are the last frames seen at each smaller depth; a frame's locals are the
    last value of each name it changed (names in <> are the step's own values; deleted
    names gone); the objects are those reachable from the shown names through attributes
    (breadth first), each with its attributes' last values."""
    steps = run.steps
    this = steps[step]
    frames = [this.frame]
    for depth in range(this.depth - 1, -1, -1):
        frames.append(next(s.frame for s in reversed(steps[:step]) if s.depth == depth))
    shown_frames, roots = [], []
    for i, frame in enumerate(frames):
        values: dict[str, tuple] = {}
        for state in run.states:
            if state.step <= step and steps[state.step].frame == frame \
                    and not state.var.startswith("<"):
                values.pop(state.var, None)
                values[state.var] = state
        # the page lists names in the order they first changed
        order = []
        for state in run.states:
            if state.step <= step and steps[state.step].frame == frame \
                    and state.var in values and state.var not in order:
                order.append(state.var)
        rows = []
        for name in order:
            state = values[name]
            if state.value is None:
                continue
            rows.append([name, state.value + ("…" if state.truncated else ""), state.object_id])
            if state.object_id is not None:
                roots.append(state.object_id)
        if i == 0:
            for state in run.states:
                if state.step == step and state.var.startswith("<"):
                    rows.append([state.var, state.value, state.object_id])
                    if state.object_id is not None:
                        roots.append(state.object_id)
        func = steps[next(s.step for s in steps if s.frame == frame)].func
        shown_frames.append({"title": f"{func}  (frame {frame})", "rows": rows})
    global_rows: dict[str, list] = {}
    for g in run.globals:
        if g.step <= step:
            global_rows.setdefault(g.name, [])
            global_rows[g.name] = [g.name, g.value, g.object_id]
    global_rows = {k: v for k, v in global_rows.items() if v[1] is not None}
    if global_rows:
        shown_frames.append({"title": "globals", "rows": list(global_rows.values())})
        roots += [v[2] for v in global_rows.values() if v[2] is not None]
    types = {o.object_id: (o.type, o.step) for o in run.objects}
    boxes, seen, queue = [], set(), list(roots)
    while queue:
        oid = queue.pop(0)
        if oid in seen:
            continue
        seen.add(oid)
        if oid not in types or types[oid][1] > step:
            continue
        attrs: dict[str, list] = {}
        for a in run.attributes:
            if a.object_id == oid and a.step <= step:
                attrs[a.attr] = [a.attr, a.value, a.ref_id]
        attrs = {k: v for k, v in attrs.items() if v[1] is not None}
        queue += [v[2] for v in attrs.values() if v[2] is not None]
        rendering = None
        if not any(a.object_id == oid for a in run.attributes):
            seen_values = [(s.step, s.value) for s in run.states if s.object_id == oid]
            seen_values += [(g.step, g.value) for g in run.globals if g.object_id == oid]
            seen_values += [(a.step, a.value) for a in run.attributes if a.ref_id == oid]
            before = [v for st, v in sorted(seen_values, key=lambda p: p[0])
                      if st <= step and v is not None]
            rendering = before[-1] if before else None
        boxes.append({"title": f"#{oid} {types[oid][0]}", "rows": list(attrs.values()),
                      "rendering": rendering})
    return {"line": this.line, "frames": shown_frames, "objects": boxes}


def view_of(state: dict) -> dict:
    return {k: state[k] for k in ("line", "frames", "objects")}


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("name", ["loop", "nested", "classes", "boom", "hostile"])
def test_every_step_equals_the_store(store, browser, tmp_path, name):
    """Next through every step, then back with prev: each equals the store's replay."""
    run = open_store(store).run(RUN[name])
    page, out = open_view(browser, store, tmp_path, name)
    state = shown(browser, page)
    assert state["step"] == 0 and view_of(state) == expected(run, 0)
    for step in range(1, len(run.steps)):
        state = click(browser, page, "next")
        assert (state["step"], state["slider"]) == (step, step)
        assert view_of(state) == expected(run, step), step
    assert click(browser, page, "next")["step"] == len(run.steps) - 1  # stays at the end
    for step in range(len(run.steps) - 2, -1, -1):
        state = click(browser, page, "prev")
        assert view_of(state) == expected(run, step), step
    assert page.console_errors == []
    assert page.requests == [out.as_uri()]


def test_keys_slider_and_exact_values(store, browser, tmp_path):
    """The class run, by hand: aliases a and b show one box (#2), whose attributes follow
    the method's mutation; the keys and the slider move as the buttons do."""
    page, out = open_view(browser, store, tmp_path, "classes")
    assert key(browser, page, "End")["step"] == 21
    state = key(browser, page, "Home")
    assert (state["step"], state["line"]) == (0, 10)
    assert state["frames"] == [{"title": "f  (frame 0)", "rows": [["xs", "[1, 2]", 1]]}]
    assert state["objects"] == [{"title": "#1 list", "rows": [], "rendering": "[1, 2]"}]
    assert key(browser, page, "ArrowRight")["step"] == 1
    assert key(browser, page, "ArrowDown")["step"] == 2
    assert key(browser, page, "ArrowLeft")["step"] == 1
    assert key(browser, page, "ArrowUp")["step"] == 0
    state = slide(browser, page, 13)
    assert (state["step"], state["line"]) == (13, 13)
    assert state["frames"] == [{"title": "f  (frame 0)", "rows": [
        ["xs", "[1, 2]", 1], ["a", "Acc(total=1, items=[1])", 2],
        ["b", "Acc(total=1, items=[1])", 2], ["x", "1", None]]}]
    assert state["objects"] == [
        {"title": "#1 list", "rows": [], "rendering": "[1, 2]"},
        {"title": "#2 Acc", "rows": [["total", "1", None], ["items", "[1]", 3]],
         "rendering": None},
        {"title": "#3 list", "rows": [], "rendering": "[1]"}]
    assert browser.evaluate(page, "document.querySelectorAll('#objects .object').length") == 3
    state = slide(browser, page, 17)  # in add: self.total += x has run, append not yet
    assert state["line"] == 8
    assert [f["title"] for f in state["frames"]] == ["Acc.add  (frame 3)", "f  (frame 0)"]
    assert state["frames"][0]["rows"] == [["self", "Acc(total=3, items=[1])", 2],
                                          ["x", "2", None]]
    assert state["objects"][0] == {"title": "#2 Acc", "rows": [["total", "3", None],
                                                               ["items", "[1]", 3]],
                                   "rendering": None}
    state = key(browser, page, "End")
    assert state["frames"][0]["rows"][-1] == ["<return>", "3", None]
    assert state["where"] == "step 21 of 21: return at line 15  [end: returned 3]"
    assert page.console_errors == [] and page.requests == [out.as_uri()]
    shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=page.session)
    (tmp_path / "classes.png").write_bytes(base64.b64decode(shot["data"]))
    assert (tmp_path / "classes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nested_calls_and_an_exception(store, browser, tmp_path):
    page, _ = open_view(browser, store, tmp_path, "nested")
    state = slide(browser, page, 5)  # sq(2) returns
    assert [f["title"] for f in state["frames"]] == ["sq  (frame 1)", "f  (frame 0)"]
    assert state["frames"][0]["rows"] == [["x", "2", None], ["y", "4", None],
                                          ["<return>", "4", None]]
    assert state["frames"][1]["rows"] == [["a", "2", None], ["b", "3", None]]
    page, _ = open_view(browser, store, tmp_path, "boom")
    state = key(browser, page, "End")
    assert state["frames"] == [{"title": "f  (frame 0)", "rows": [
        ["d", "{'j': 1}", 1], ["<exception>", "KeyError('k')", None]]}]
    assert state["where"].endswith("[end: raised KeyError: 'k']")
    assert browser.evaluate(page, "document.getElementById('outcome').textContent") == \
        "exception: raised KeyError: 'k'"
    page, _ = open_view(browser, store, tmp_path, "loop")
    assert browser.evaluate(page, "document.getElementById('stdout').textContent") == "s 3\n"


def test_hostile_text_stays_text(store, browser, tmp_path):
    """An attribute's name (in its instance's rendering too), a dict key, the input and a
    source comment that are HTML (the class's ``__repr__`` returning HTML never runs): the
    page still has its two scripts, and shows them as text."""
    page, out = open_view(browser, store, tmp_path, "hostile")
    text = out.read_text(encoding="utf-8")
    assert text.count("<script") == 2 and HOSTILE_TEXT not in text
    state = key(browser, page, "End")
    assert browser.evaluate(page, "document.scripts.length") == 2
    assert browser.evaluate(page, "document.images.length") == 0
    values = [row[1] for frame in state["frames"] for row in frame["rows"]]
    attributes = [row[0] for box in state["objects"] for row in box["rows"]]
    assert f"X({HOSTILE_TEXT}=[{HOSTILE_TEXT!r}])" in values  # v, rendered
    assert HOSTILE_TEXT in attributes  # its attribute
    assert repr(HOSTILE_TEXT) in values
    code = browser.evaluate(page, "document.getElementById('code').textContent")
    assert f"# {HOSTILE_TEXT}<img src=x onerror=alert(2)>" in code
    assert page.console_errors == [] and page.requests == [out.as_uri()]


def test_a_100000_step_run(store, browser, tmp_path):
    run = open_store(store).run(RUN["big"])
    assert len(run.steps) == 100_004
    page, out = open_view(browser, store, tmp_path, "big")
    state = key(browser, page, "End")
    assert state["step"] == 100_003 and view_of(state) == {
        "line": 6, "frames": [{"title": "f  (frame 0)", "rows": [
            ["n", "33333", None], ["s", "33333", None], ["u", "33333", None],
            ["<return>", "33333", None]]}], "objects": []}
    assert view_of(state) == expected(run, 100_003)
    state = slide(browser, page, 50_001)
    assert view_of(state) == expected(run, 50_001)
    assert view_of(key(browser, page, "ArrowLeft")) == expected(run, 50_000)
    assert page.console_errors == [] and page.requests == [out.as_uri()]


def test_the_data_is_compact(store):
    """Steps are indexes into a few distinct (event, line, stack) kinds; each value once."""
    data = view_data(store, RUN["big"])
    assert len(data["steps"]) == 100_004 and len(data["kinds"]) == 7
    assert data["nodes"] == [[-1, 0]]


def test_cli_view(store, tmp_path):
    out = tmp_path / "v.html"
    result = CliRunner().invoke(main, ["view", "--sample-id", "nested", "--db", str(store),
                                       "--out", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"item": "view", "value": str(out)}, {"item": "run_id", "value": RUN["nested"]},
        {"item": "steps", "value": 12}, {"item": "bytes", "value": out.stat().st_size}]
    assert re.search(r"<title>steptrace run 2</title>", out.read_text(encoding="utf-8"))
    assert_one_line_error(CliRunner().invoke(main, ["view", "99", "--db", str(store),
                                                    "--out", str(out)]),
                          "no run with run_id 99")
    assert_one_line_error(CliRunner().invoke(main, ["view", "--sample-id", "nope", "--db",
                                                    str(store), "--out", str(out)]),
                          "no run for sample_id 'nope' (input 0)")
    bad = tmp_path / "no" / "v.html"
    assert_one_line_error(CliRunner().invoke(main, ["view", "1", "--db", str(store),
                                                    "--out", str(bad)]),
                          f"cannot write {bad}: no directory {bad.parent}")
    missing = tmp_path / "none.duckdb"
    assert_one_line_error(CliRunner().invoke(main, ["view", "1", "--db", str(missing)]),
                          f"database not found: {missing}")
    assert_one_line_error(CliRunner().invoke(main, ["serve", "--db", str(missing)]),
                          f"database not found: {missing}")
    both = CliRunner().invoke(main, ["view", "1", "--sample-id", "x", "--db", str(store)])
    assert both.exit_code == 2 and "give a RUN_ID or --sample-id (not both)" in both.output


def test_a_shard_directory_views_as_its_store(store, tmp_path):
    """The same jobs traced into a shard directory give the same pages' data."""
    from steptrace.sharding._run import ShardOptions, trace_shards
    corpus = tmp_path / "small.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:-1]), encoding="utf-8")
    shards = tmp_path / "shards"
    trace_shards([corpus], shards, ShardOptions(shard_size=2, workers=1))
    for name in ("loop", "classes", "boom"):
        assert view_data(shards, RUN[name]) == view_data(store, RUN[name]), name
    write_view(shards, out=tmp_path / "s.html", sample_id="classes")
    assert (tmp_path / "s.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_pages_policy_stops_any_other_script(store, browser, tmp_path):
    """The control of the hostile test: a script that got into the page would not run
    (the Content-Security-Policy allows the page's own script only, by its hash), and the
    refusal is a console error the tests above would see."""
    _page, out = open_view(browser, store, tmp_path, "loop")
    text = out.read_text(encoding="utf-8")
    assert text.count("Content-Security-Policy") == 1
    injected = tmp_path / "injected.html"
    injected.write_text(text.replace("</body>", "<script>window.injected = 1;</script></body>"),
                        encoding="utf-8")
    page = browser.open(injected.as_uri())
    assert browser.evaluate(page, "typeof window.injected") == "undefined"
    assert browser.evaluate(page, "window.steptraceViewer.steps") == 12
    assert len(page.console_errors) == 1
    assert "Content Security Policy" in page.console_errors[0]


def test_serve_lists_runs_and_serves_their_pages(store, browser):
    """``steptrace serve``'s server on a free port: the list with its filters, a run's
    page (the same bytes as ``view`` writes), and one-line refusals."""
    import threading
    import urllib.error
    import urllib.request
    from steptrace.analytics._serve import make_server
    from steptrace.analytics._viewer import render_page
    server = make_server(store, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=30) as reply:
                return reply.status, reply.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8")

    def listed(text: str) -> list[str]:
        return re.findall(r'<a href="/run/(\d+)">', text)

    try:
        status, text = get("/")
        assert status == 200 and listed(text) == ["1", "2", "3", "4", "5", "6"]
        assert '<p id="count">6 runs; 1-6 shown.</p>' in text
        assert HOSTILE_TEXT not in text and html_escaped(HOSTILE_TEXT) in text
        assert listed(get("/?status=exception")[1]) == ["4"]
        assert listed(get("/?max_steps=10&status=")[1]) == ["1", "2", "4", "5"]  # line steps
        status, text = get("/run/3")
        assert status == 200 and text == render_page(view_data(store, 3))
        assert get("/run/99") == (404, "no run with run_id 99\n")
        assert get("/?max_steps=x") == (400, "max_steps must be a whole number, not 'x'\n")
        assert get("/etc/passwd") == (404, "no page /etc/passwd\n")
        page = browser.open(base + "/run/3")
        assert browser.evaluate(page, "window.steptraceViewer.steps") == 22
        assert page.console_errors == [] and page.requests == [base + "/run/3"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def html_escaped(text: str) -> str:
    import html
    return html.escape(text)


def test_an_objects_renderings_are_ordered_by_step():
    """Object 1's values come from a local (steps 0, 4), a global (step 2) and an
    attribute (step 3): its rendering history is by step, for the page's binary search."""
    run = {"run_id": 1, "sample_id": "s", "entry": "f", "input": "", "code": "def f():\n",
           "status": "ok", "output": "1", "output_truncated": False, "stdout": "", "note": None}
    steps = [(i, "line", "f", 1, 0, 0) for i in range(5)]
    states = [(0, "xs", "[1]", "list", False, 1), (4, "xs", "[1, 2, 3]", "list", False, 1)]
    globals_ = [(2, "g", "[1, 2]", "list", False, 1)]
    attributes = [(3, 2, "items", "[1, 2, 3]", "list", True, 1)]
    data = _encode(run, steps, states, [(1, "list", 0), (2, "Box", 3)], attributes, globals_)
    s = data["s"]
    history = data["objects"][0][4]
    assert [(history[i], s[history[i + 1]], history[i + 2]) for i in range(0, len(history), 3)] \
        == [(0, "[1]", 0), (2, "[1, 2]", 0), (3, "[1, 2, 3]", 1), (4, "[1, 2, 3]", 0)]
