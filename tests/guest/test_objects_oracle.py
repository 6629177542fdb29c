"""The store's object answers against an independent oracle: generated class programs,
questions "value of ``self.<attr>`` after line L (its k-th execution)", answered from the
store by SQL alone (docs/guides/runs.md, "Objects") and by the same program run on the
host's CPython under ``sys.settrace``.

The oracle records ``repr(getattr(self, attr))`` at the first event of the same frame
after the k-th execution of L (the line that follows it, or the frame's return); the store
answer resolves ``self`` to its object id from ``states`` (the frame's last row of
``self`` at or before L's step) and takes the last ``attributes`` row of that object and
attribute at or before the frame's next step. Attribute values are ints, strs, lists and
dicts, whose reprs the host's Python and the guest's agree on. Programs mutate the
attributes through ``self``, through aliases (``alias = self``, ``t = self.items``) and
through containers (``box = [self]``), and call each other's methods.
"""

from __future__ import annotations

import json
import random
import sys

import duckdb
import pytest

from steptrace.tracing._trace import TraceOptions, trace_corpus

ATTRS = ("n", "s", "items", "d")
PROGRAMS = 48
QUESTIONS_PER_PROGRAM = 6

STATEMENTS = [
    ["self.n += v"],
    ["self.n = self.n * 2 - v"],
    ["self.s = self.s + str(v)"],
    ["self.s = self.s[-6:]"],
    ["self.items.append(v)"],
    ["alias = self", "alias.n -= 1"],
    ["box = [self]", "box[0].items.append(self.n)"],
    ["self.d[str(v)] = self.n"],
    ["if self.n > 3:", "    self.n -= 3"],
    ["for i in range(2):", "    self.items.append(i)"],
    ["self.items = self.items[-4:]"],
    ["t = self.items", "t.append(len(t))"],
    ["self.d = {k: 1 for k in self.d}"],
    ["other = Obj(v, v)", "other.items.append(self.n)", "self.items = other.items"],
    ["self.helper(v)"],
]


def program(rng: random.Random) -> tuple[str, str]:
    """A class with a few generated methods and an entry that calls them on two
    instances; its input."""
    lines = ["class Obj:", "    def __init__(self, a, b):", "        self.n = a",
             "        self.s = 'x'", "        self.items = [b]", "        self.d = {}", "",
             "    def helper(self, v):", "        self.n += 1", "        self.s = self.s[-3:]",
             ""]
    methods = rng.randint(2, 4)
    for m in range(methods):
        lines.append(f"    def m{m}(self, v):")
        for _ in range(rng.randint(2, 5)):
            choice = rng.choice(STATEMENTS)
            if choice[0] == "self.helper(v)" and m == 0:
                choice = ["self.n += v"]
            lines.extend("        " + line for line in choice)
        lines.append("")
    lines.append("def f(a, b):")
    lines.append("    o = Obj(a, b)")
    lines.append("    p = Obj(b, a)")
    for _ in range(rng.randint(3, 7)):
        target = rng.choice("op")
        lines.append(f"    {target}.m{rng.randrange(methods)}({rng.randint(-3, 5)})")
    lines.append("    return o.n + p.n")
    return "\n".join(lines) + "\n", f"{rng.randint(0, 9)}, {rng.randint(0, 9)}"


def oracle(code: str, input_text: str) -> dict[tuple[int, int], dict[str, str]]:
    """(line, k) -> {attr: repr} of ``self`` at the frame's event after the k-th
    execution of a line in a method, on the host's CPython under sys.settrace."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(code, "<oracle>", "exec"), namespace)
    counts: dict[int, int] = {}
    pending: dict[int, tuple[int, int]] = {}  # id(frame) -> (line, k) waiting for its next event
    answers: dict[tuple[int, int], dict[str, str]] = {}

    def local(frame, event, arg):
        key = id(frame)
        if key in pending and event in ("line", "return"):
            where = pending.pop(key)
            me = frame.f_locals.get("self")
            if me is not None:
                answers[where] = {attr: repr(getattr(me, attr)) for attr in ATTRS
                                  if hasattr(me, attr)}
        if event == "line" and frame.f_code.co_name != "f":
            counts[frame.f_lineno] = counts.get(frame.f_lineno, 0) + 1
            pending[key] = (frame.f_lineno, counts[frame.f_lineno])
        elif event == "line":
            counts[frame.f_lineno] = counts.get(frame.f_lineno, 0) + 1
        return local

    def start(frame, event, arg):
        return local if frame.f_code.co_filename == "<oracle>" else None

    args = eval(f"({input_text},)")
    sys.settrace(start)
    try:
        namespace["f"](*args)
    finally:
        sys.settrace(None)
    return answers


STORE_ANSWER = """
WITH hit AS (  -- the k-th execution of the line: its step and frame
    SELECT step, frame FROM steps WHERE run_id = $run AND event = 'line' AND line = $line
    ORDER BY step LIMIT 1 OFFSET $k - 1),
next AS (     -- the frame's next step
    SELECT min(s.step) AS step FROM steps s, hit WHERE s.run_id = $run AND s.frame = hit.frame
    AND s.step > hit.step),
me AS (       -- self's object id in that frame
    SELECT st.object_id FROM states st JOIN steps s USING (run_id, step), hit
    WHERE st.run_id = $run AND s.frame = hit.frame AND st.var = 'self' AND st.step <= hit.step
    ORDER BY st.step DESC LIMIT 1)
SELECT a.value FROM attributes a, me, next
WHERE a.run_id = $run AND a.object_id = me.object_id AND a.attr = $attr AND a.step <= next.step
ORDER BY a.step DESC LIMIT 1
"""


@pytest.mark.slow
def test_attribute_answers_from_the_store_agree_with_the_host_oracle(tmp_path):
    rng = random.Random(19)
    corpus, questions = [], []
    for index in range(PROGRAMS):
        code, input_text = program(rng)
        answers = oracle(code, input_text)
        sample = f"obj{index}"
        corpus.append({"id": sample, "code": code, "input": input_text})
        keys = sorted(answers)
        for where in rng.sample(keys, min(QUESTIONS_PER_PROGRAM, len(keys))):
            attr = rng.choice(sorted(answers[where]))
            questions.append((sample, where[0], where[1], attr, answers[where][attr]))
    assert len(questions) >= 200
    path = tmp_path / "objects.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in corpus))
    db = tmp_path / "objects.duckdb"
    summary = trace_corpus(path, db, TraceOptions(workers=2, isolation="job"))
    assert summary.traced == PROGRAMS
    wrong = []
    with duckdb.connect(str(db), read_only=True) as con:
        runs = dict(con.execute("SELECT sample_id, run_id FROM runs WHERE status = 'ok'"
                                ).fetchall())
        assert len(runs) == PROGRAMS
        for sample, line, k, attr, expected in questions:
            found = con.execute(STORE_ANSWER, {"run": runs[sample], "line": line, "k": k,
                                               "attr": attr}).fetchall()
            got = found[0][0] if found else None
            if got != expected:
                wrong.append((sample, line, k, attr, expected, got))
    assert wrong == []
