"""``steptrace view``: one run as a self-contained HTML page to step through.

The page (inline CSS and JavaScript, nothing fetched, works from ``file://``) shows the
program with the current step's line marked, the call stack with each frame's locals at
that step, the objects reachable from them (ids, types, attributes; a name bound to a
tracked object links to its one box, so aliases point at the same box), the run's stdout
and its outcome. Controls: first/previous/next/last buttons, a slider, and the keys
ArrowLeft/ArrowRight (also ArrowUp/ArrowDown), Home and End.

The host does the reconstruction. The store's states are deltas: a frame's locals at step
S are, per name, its last change at or before S. The page gets, for each frame, each name
and each global, and each attribute of each object, the *history* of its changes (the
steps, values, types), and finds the value at a step by binary search: opening a
100,000-step run decodes no step and builds no snapshot, and moving to any step costs a
few binary searches per shown name. The call stack at a step is a node of a tree of stacks
(a node is a parent node and a frame), built from each step's ``depth`` and ``frame``: the
frames below a step are the latest ones seen at the smaller depths. A step is one index
into a table of distinct (event, line, stack node) triples.

The event values (``<return>``, ``<yield>``, ``<exception>``) belong to their step only and
are shown in its frame as such, not as locals. Per-step stdout is not recorded by the
tracer: the page shows the run's whole stdout, labelled so.

Everything from the trace is untrusted text: the data goes into the page as JSON inside a
``<script type="application/json">`` with ``<``, ``>``, ``&`` and the line separators
escaped (so no ``</script>`` can end it), and the page's script renders it with
``textContent`` only, never as HTML. The page's Content-Security-Policy allows its own
script only (by its SHA-256), so no other script could run even if one got in.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb

from steptrace.analytics._show import find_run_id, run_rows
from steptrace.corpus._formats import source_lines
from steptrace.corpus._text import user_file
from steptrace.errors import InputError
from steptrace.store._runs import call_text
from steptrace.store._store import StoreError, connect, first_line

FORMAT_VERSION = 1
EVENTS = ("call", "line", "return", "yield", "resume", "throw", "raise", "unwind")


@dataclass
class ViewSummary:
    out: str
    run_id: int
    steps: int
    bytes: int = 0

    def as_rows(self) -> list[tuple[str, object]]:
        return [("view", self.out), ("run_id", self.run_id), ("steps", self.steps),
                ("bytes", self.bytes)]


class _Strings:
    """Interned strings: each distinct one stored once, referred to by index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.items: list[str] = []

    def __call__(self, text: str | None) -> int:
        if text is None:
            return -1
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.items)
            self.items.append(text)
        return found


def view_data(db: str | Path, run_id: int | None = None, sample_id: str | None = None,
              input_index: int = 0) -> dict:
    """The page's data for one run (a store file or a shard directory): the JSON the page
    decodes (its format: ``_encode``)."""
    if run_id is None and sample_id is None:
        raise InputError("give a run id or a sample id")
    con = connect(db, read_only=True)
    try:
        return _encode(*_read(con, run_id, sample_id, input_index))
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {db}: {first_line(exc)}") from exc
    finally:
        con.close()


def _read(con, run_id, sample_id, input_index):
    return run_rows(con, find_run_id(con, run_id, sample_id, input_index))


def _encode(run, steps, states, objects, attributes, globals_) -> dict:
    """The page's data. ``s`` is the string table (every other string is an index into
    it, -1 for none). A *history* is a flat list of 5 numbers per change: step, value,
    type, truncated (0/1), object id (-1: none); a value of -1 is unbound/deleted.

    - ``kinds``: distinct steps as [event, line, stack node]; ``steps``: one kind per step
    - ``nodes``: the stacks as [parent node (-1: none), frame]
    - ``frames``: frame -> [func, [[name, history], ...] in first-change order]
    - ``events``: step -> [[name, value, type, truncated, object id]]: <return> etc.
    - ``globals``: [[name, history]]
    - ``objects``: [[object id, type, first step, [[attr, history]], rendering history]];
      the rendering history: [step, value, truncated] per row that gave the object a
      value (a state, a global, an attribute), by step
    """
    s = _Strings()
    kinds: dict[tuple, int] = {}
    nodes: dict[tuple[int, int], int] = {}
    step_kinds: list[int] = []
    frames: dict[int, list] = {}
    below: list[int] = []  # the stack node of each depth's latest frame
    for step, event, func, line, depth, frame in steps:
        depth = max(depth, 0)
        del below[depth:]
        parent = below[-1] if below else -1
        while len(below) < depth:  # a depth with no frame seen (should not happen)
            below.append(parent)
        node = nodes.setdefault((parent, frame), len(nodes))
        below.append(node)
        step_kinds.append(kinds.setdefault((EVENTS.index(event) if event in EVENTS else -1,
                                            line, node), len(kinds)))
        if frame not in frames:
            frames[frame] = [s(func), {}]
    frame_of = {step: frame for step, _e, _f, _l, _d, frame in steps}
    renderings: dict[int, list[int]] = {}

    def rendered(oid, step, value, truncated):
        if oid is not None and value is not None:
            renderings.setdefault(oid, []).extend((step, s(value), int(bool(truncated))))

    events: dict[int, list] = {}
    for step, var, value, type_, truncated, oid in states:
        rendered(oid, step, value, truncated)
        row = [s(value), s(type_), int(bool(truncated)), -1 if oid is None else oid]
        if var.startswith("<") and var.endswith(">"):
            events.setdefault(step, []).append([s(var), *row])
            continue
        frame = frames.get(frame_of.get(step))
        if frame is not None:
            frame[1].setdefault(s(var), []).extend([step, *row])
    globals_out: dict[int, list[int]] = {}
    for step, name, value, type_, truncated, oid in globals_:
        rendered(oid, step, value, truncated)
        globals_out.setdefault(s(name), []).extend(
            [step, s(value), s(type_), int(bool(truncated)), -1 if oid is None else oid])
    object_attrs: dict[int, dict[int, list[int]]] = {}
    for step, oid, attr, value, type_, truncated, ref in attributes:
        rendered(ref, step, value, truncated)
        object_attrs.setdefault(oid, {}).setdefault(s(attr), []).extend(
            [step, s(value), s(type_), int(bool(truncated)), -1 if ref is None else ref])
    for oid, flat in renderings.items():  # by step (stable: states, globals, attributes)
        triples = sorted((flat[i:i + 3] for i in range(0, len(flat), 3)), key=lambda t: t[0])
        renderings[oid] = [n for triple in triples for n in triple]
    code = run["code"]
    outcome = _outcome(run)
    header = {"run_id": run["run_id"], "sample_id": run["sample_id"],
              "call": call_text(run["entry"], run["input"], run.get("shape") or "call",
                                run.get("chain")),
              "status": run["status"], "outcome": outcome,
              "stdout": run["stdout"] or "", "note": run["note"]}
    return {
        "v": FORMAT_VERSION, "run": header, "code": source_lines(code), "events_names": EVENTS,
        "kinds": [list(k) for k in kinds], "steps": step_kinds,
        "nodes": [list(k) for k in nodes],
        "frames": {str(f): [func, [[name, h] for name, h in names.items()]]
                   for f, (func, names) in frames.items()},
        "events": {str(step): rows for step, rows in events.items()},
        "globals": [[name, h] for name, h in globals_out.items()],
        "objects": [[oid, s(type_), step,
                     [[attr, h] for attr, h in object_attrs.get(oid, {}).items()],
                     renderings.get(oid, [])] for oid, type_, step in objects],
        "s": s.items,
    }


def _outcome(run) -> str:
    if run["status"] == "ok":
        return f"returned {run['output']}" + (" (cut)" if run["output_truncated"] else "")
    if run["status"] == "exception":
        return f"raised {run['exception_type']}: {run['exception_message']}"
    message = run["exception_message"] or run["note"]
    return run["status"] + (f": {message}" if message else "")


def _json_for_script(data: dict) -> str:
    """JSON that cannot end or break out of the ``<script>`` element holding it."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def render_page(data: dict) -> str:
    """The HTML page of ``view_data``'s data."""
    title = f"steptrace run {int(data['run']['run_id'])}"
    digest = base64.b64encode(hashlib.sha256(_JS.encode("utf-8")).digest()).decode()
    return (_PAGE.replace("__TITLE__", title).replace("__SCRIPT_HASH__", f"sha256-{digest}")
            .replace("__CSS__", _CSS).replace("__JS__", _JS)
            .replace("__DATA__", _json_for_script(data)))


def write_view(db: str | Path, run_id: int | None = None, out: str | Path | None = None, *,
               sample_id: str | None = None, input_index: int = 0) -> ViewSummary:
    """Write the viewer page of one run of ``db`` (a store or a shard directory), by run id
    or by sample id (its newest run of input ``input_index``), to ``out`` (default:
    ``run-<id>.html``)."""
    data = view_data(db, run_id, sample_id, input_index)
    rid = data["run"]["run_id"]
    out = Path(out if out is not None else f"run-{rid}.html")
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: no directory {out.parent}")
    page = render_page(data)
    with user_file(out):
        out.write_text(page, encoding="utf-8")
    return ViewSummary(str(out), rid, len(data["steps"]), len(page.encode("utf-8")))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src '__SCRIPT_HASH__'; img-src data:">
<link rel="icon" href="data:,">
<title>__TITLE__</title>
<style>__CSS__</style></head>
<body>
<header><h1 id="title"></h1><p id="call"></p><p id="outcome"></p></header>
<nav id="controls">
<button id="first" title="first step (Home)">&laquo; first</button>
<button id="prev" title="previous step (ArrowLeft)">&lsaquo; prev</button>
<button id="next" title="next step (ArrowRight)">next &rsaquo;</button>
<button id="last" title="last step (End)">last &raquo;</button>
<input id="slider" type="range" min="0" max="0" value="0" aria-label="step">
<span id="where"></span>
</nav>
<main>
<section id="source"><h2>Program</h2><ol id="code"></ol></section>
<section id="state"><h2>Call stack</h2><div id="stack"></div>
<h2>Objects</h2><div id="objects"></div></section>
</main>
<section id="output"><h2>stdout <small>(the run's whole output: the trace does not record
it per step)</small></h2><pre id="stdout"></pre><p id="note"></p></section>
<script type="application/json" id="data">__DATA__</script>
<script>__JS__</script>
</body></html>
"""

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;padding:0 1em 1em;color:#222}
header h1{font-size:1.2em;margin:.6em 0 .2em}header p{margin:.1em 0}
#call,#code,#stdout,.value,.objects code{font-family:ui-monospace,monospace}
#controls{position:sticky;top:0;background:#fff;padding:.4em 0;border-bottom:1px solid #ddd;
display:flex;gap:.4em;align-items:center}
#slider{flex:1}#where{min-width:14em;font-variant-numeric:tabular-nums}
main{display:flex;gap:1.5em;align-items:flex-start}#source{flex:1;min-width:0}#state{flex:1;min-width:0}
#code{margin:0;padding-left:3.5em;white-space:pre;overflow-x:auto;font-size:13px}
#code li.current{background:#fff3a0;outline:1px solid #e0c000}
h2{font-size:1em;margin:.8em 0 .3em}
.frame{border:1px solid #bbb;border-radius:4px;margin:.3em 0;padding:.2em .5em}
.frame.active{border-color:#c90;background:#fffbe6}
.frame h3,.object h3{font-size:.95em;margin:.1em 0}.object code{display:block}
table{border-collapse:collapse}td{padding:.05em .5em;vertical-align:top}
td.name{font-weight:600}td.value{white-space:pre-wrap;word-break:break-all}
td.event{font-style:italic}
.object{border:1px solid #88a;border-radius:4px;margin:.3em 0;padding:.2em .5em}
.object.flash{background:#e6efff}
a.ref{color:#24c;cursor:pointer;margin-left:.4em}
#outcome.exception{color:#b00}#stdout{background:#f6f6f6;padding:.4em;white-space:pre-wrap}
#stdout:empty{display:none}
"""

_JS = r"""
"use strict";
(function () {
const D = JSON.parse(document.getElementById("data").textContent);
const S = D.s, N = D.steps.length;
const str = i => (i < 0 ? null : S[i]);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
};
// the last change of a history (5 numbers a change) at or before step; -1 if none
function lastAt(h, step) {
  let lo = 0, hi = h.length / 5 - 1, found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (h[mid * 5] <= step) { found = mid; lo = mid + 1; } else hi = mid - 1;
  }
  return found < 0 ? null : h.slice(found * 5, found * 5 + 5);
}
function lastRendering(h, step) {
  let lo = 0, hi = h.length / 3 - 1, found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (h[mid * 3] <= step) { found = mid; lo = mid + 1; } else hi = mid - 1;
  }
  return found < 0 ? null : S[h[found * 3 + 1]] + (h[found * 3 + 2] ? "\u2026" : "");
}
const objects = new Map();
for (const [oid, type, first, attrs, rendering] of D.objects)
  objects.set(oid, {oid, type: S[type], first, attrs, rendering});

const run = D.run;
document.getElementById("title").textContent = "run " + run.run_id +
  (run.sample_id ? "  (sample " + run.sample_id + ")" : "");
document.getElementById("call").textContent = run.call;
const outcome = document.getElementById("outcome");
outcome.textContent = run.status + ": " + run.outcome;
if (run.status !== "ok") outcome.classList.add("exception");
document.getElementById("stdout").textContent = run.stdout;
document.getElementById("note").textContent = run.note ? "note: " + run.note : "";

const code = document.getElementById("code");
const lines = D.code.map(text => {
  const li = el("li", null, text === "" ? " " : text);
  code.appendChild(li);
  return li;
});
const slider = document.getElementById("slider");
slider.max = String(Math.max(N - 1, 0));
let current = -1, marked = null;

function valueCell(value, type, truncated, oid) {
  const td = el("td", "value");
  td.appendChild(document.createTextNode(value === null ? "<unbound>" : value + (truncated ? "\u2026" : "")));
  td.title = type === null ? "" : type;
  if (oid >= 0) {
    const a = el("a", "ref", "\u2192 #" + oid);
    a.dataset.oid = String(oid);
    td.appendChild(a);
  }
  return td;
}
function row(name, value, type, truncated, oid, cls) {
  const tr = el("tr");
  tr.dataset.name = name;
  tr.appendChild(el("td", cls || "name", name));
  tr.appendChild(valueCell(value, type, truncated, oid));
  return tr;
}
function varsAt(history, step, roots) {
  const shown = [];
  for (const [name, h] of history) {
    const last = lastAt(h, step);
    if (last === null || last[1] < 0) continue;
    if (last[4] >= 0) roots.push(last[4]);
    shown.push([S[name], S[last[1]], str(last[2]), last[3], last[4]]);
  }
  return shown;
}
function render(step) {
  const [event, line, node] = D.kinds[D.steps[step]];
  if (marked) marked.classList.remove("current");
  marked = lines[line - 1] || null;
  if (marked) marked.classList.add("current");
  const frames = [];
  for (let n = node; n >= 0; n = D.nodes[n][0]) frames.push(D.nodes[n][1]);
  const stack = document.getElementById("stack");
  stack.textContent = "";
  const roots = [];
  frames.forEach((frame, i) => {
    const [func, history] = D.frames[String(frame)];
    const box = el("div", "frame" + (i === 0 ? " active" : ""));
    box.dataset.frame = String(frame);
    box.appendChild(el("h3", null, S[func] + "  (frame " + frame + ")"));
    const table = el("table", "locals");
    for (const [name, value, type, truncated, oid] of varsAt(history, step, roots))
      table.appendChild(row(name, value, type, truncated, oid));
    if (i === 0)
      for (const [name, value, type, truncated, oid] of (D.events[String(step)] || [])) {
        if (oid >= 0) roots.push(oid);
        table.appendChild(row(S[name], str(value), str(type), truncated, oid, "event"));
      }
    box.appendChild(table);
    stack.appendChild(box);
  });
  const globals = varsAt(D.globals, step, roots);
  if (globals.length) {
    const box = el("div", "frame globals");
    box.appendChild(el("h3", null, "globals"));
    const table = el("table", "locals");
    for (const [name, value, type, truncated, oid] of globals)
      table.appendChild(row(name, value, type, truncated, oid));
    box.appendChild(table);
    stack.appendChild(box);
  }
  renderObjects(step, roots);
  const name = D.events_names[event] || "?";
  document.getElementById("where").textContent =
    "step " + step + " of " + (N - 1) + ": " + name + " at line " + line +
    (step === N - 1 ? "  [end: " + run.outcome + "]" : "");
}
function renderObjects(step, roots) {
  const box = document.getElementById("objects");
  box.textContent = "";
  const seen = new Set(), order = [];
  const queue = roots.slice();
  while (queue.length) {  // the objects reachable from the shown names, in order seen
    const oid = queue.shift();
    if (seen.has(oid)) continue;
    seen.add(oid);
    const object = objects.get(oid);
    if (!object || object.first > step) continue;
    order.push(object);
    for (const [, h] of object.attrs) {
      const last = lastAt(h, step);
      if (last !== null && last[1] >= 0 && last[4] >= 0) queue.push(last[4]);
    }
  }
  for (const object of order) {
    const div = el("div", "object");
    div.id = "object-" + object.oid;
    div.dataset.oid = String(object.oid);
    div.appendChild(el("h3", null, "#" + object.oid + " " + object.type));
    const table = el("table", "attributes");
    for (const [attr, h] of object.attrs) {
      const last = lastAt(h, step);
      if (last === null || last[1] < 0) continue;
      table.appendChild(row(S[attr], S[last[1]], str(last[2]), last[3], last[4]));
    }
    if (!object.attrs.length) {
      const rendering = lastRendering(object.rendering, step);
      if (rendering !== null) div.appendChild(el("code", "rendering", rendering));
    }
    div.appendChild(table);
    box.appendChild(div);
  }
}
function go(step) {
  if (N === 0) return;
  step = Math.max(0, Math.min(N - 1, step));
  if (step === current) return;
  current = step;
  slider.value = String(step);
  render(step);
}
document.getElementById("first").onclick = () => go(0);
document.getElementById("prev").onclick = () => go(current - 1);
document.getElementById("next").onclick = () => go(current + 1);
document.getElementById("last").onclick = () => go(N - 1);
slider.addEventListener("input", () => go(Number(slider.value)));
document.addEventListener("keydown", event => {
  const moves = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1};
  if (event.key in moves) go(current + moves[event.key]);
  else if (event.key === "Home") go(0);
  else if (event.key === "End") go(N - 1);
  else return;
  event.preventDefault();
});
document.addEventListener("click", event => {
  const ref = event.target.closest && event.target.closest("a.ref");
  if (!ref) return;
  const target = document.getElementById("object-" + ref.dataset.oid);
  if (!target) return;
  target.scrollIntoView({block: "nearest"});
  target.classList.add("flash");
  setTimeout(() => target.classList.remove("flash"), 800);
});
if (N === 0) document.getElementById("where").textContent = "no steps recorded";
// #step=N opens the page at step N (the failures pages link a question's step so)
const fromHash = () => {
  const asked = /^#step=(\d{1,12})$/.exec(location.hash);
  return asked ? Number(asked[1]) : 0;
};
window.addEventListener("hashchange", () => go(fromHash()));
go(fromHash());
window.steptraceViewer = {go, step: () => current, steps: N};
})();
"""
