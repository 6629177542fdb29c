"""The small corpus the query and report tests trace, and the tasks, predictions and
scores they add to it."""

from __future__ import annotations

from pathlib import Path

import duckdb

from helpers.cli import rows as sql_rows


COUNT_A = ("def f(s):\n"                        # 1
           "    n = 0\n"                        # 2
           "    for ch in s.lower():\n"         # 3
           "        if ch == 'a':\n"            # 4
           "            n += 1\n"               # 5
           "    return n\n")                    # 6


COLLATZ = ("def f(n):\n"                                     # 1
           "    steps = 0\n"                                 # 2
           "    while n != 1:\n"                             # 3
           "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"  # 4
           "        steps += 1\n"                            # 5
           "    return steps\n")                             # 6


WORDS = ("def shout(w):\n"                                       # 1
         "    return w.upper() + '!'\n"                          # 2
         "\n"                                                    # 3
         "def f(text):\n"                                        # 4
         "    words = text.lower().split()\n"                    # 5
         "    out = []\n"                                        # 6
         "    for w in words:\n"                                 # 7
         "        out.append(shout(w))\n"                        # 8
         "    return ' '.join([o for o in out if len(o) > 2])\n")  # 9


BOOM = ("def f(d):\n"                           # 1
        "    d.setdefault('k', 0)\n"            # 2
        "    x = d['k']\n"                      # 3
        "    x = str(x)\n"                      # 4
        "    del x\n"                           # 5
        "    return d['k'] // d.get('z', 0)\n")  # 6: ZeroDivisionError


BAD = "def f(:\n    return 1\n"                 # a syntax error: status invalid


RECORDS = [
    {"id": "count_a", "code": COUNT_A, "inputs": ["'abca'", "''"], "outputs": ["2", None]},
    {"id": "collatz", "code": COLLATZ, "input": "6", "output": "8"},
    {"id": "words", "code": WORDS, "input": "'hi a yo'", "output": "'HI! YO!'"},
    {"id": "boom", "code": BOOM, "input": "{}", "output": "0"},
    {"id": "bad", "code": BAD, "input": "1", "output": "1"},
]


def _add_tasks_predictions_scores(db: Path) -> dict[str, str]:
    """Tasks (steptrace.tasks._tasks), predictions (steptrace.predictions._predict) and scores (by hand: no
    module writes them yet) for the accuracy queries; returns the short names below.

    Output, steps and exception tasks, one of each per finished run (runs 1-5): output
    for the four ok runs, steps and exception for all five. Predictions are made for
    t1 = output of run 1 (count_a 'abca'), t2 = output and t3 = exception of run 3
    (collatz), t4 = output of run 4 (words), t5 = steps of run 2 (count_a '')."""
    from steptrace.predictions._predict import Prediction, PredictionStore
    from steptrace.tasks._tasks import TaskOptions, generate_tasks
    generate_tasks(db, TaskOptions(kinds=("output", "steps", "exception"), per_run=1, seed=0))
    ids = {(kind, run): task for task, kind, run in sql_rows(
        db, "SELECT task_id, kind, run_id FROM tasks")}
    t = {"t1": ids["output", 1], "t2": ids["output", 3], "t3": ids["exception", 3],
         "t4": ids["output", 4], "t5": ids["steps", 2]}
    con = duckdb.connect(str(db))
    try:
        con.execute("CREATE TABLE scores (task_id VARCHAR, model VARCHAR, label VARCHAR, "
                    "sample_index INTEGER, correct BOOLEAN)")
        con.executemany("INSERT INTO scores VALUES (?, ?, 'l1', ?, ?)", [
            (t["t1"], "m1", 0, True), (t["t1"], "m1", 1, True),
            (t["t2"], "m1", 0, True), (t["t2"], "m1", 1, False),
            (t["t3"], "m1", 0, False), (t["t3"], "m1", 1, False),
            (t["t4"], "m1", 0, True), (t["t4"], "m1", 1, False),
            (t["t1"], "m2", 0, False), (t["t2"], "m2", 0, True)])
    finally:
        con.close()
    kinds = {"t1": "output", "t2": "output", "t3": "exception", "t4": "output", "t5": "steps"}
    rows = [Prediction(t[n], "m1", s, kinds[n], answer="x", parsed=True)
            for n in ("t1", "t2", "t4") for s in (0, 1)]
    rows += [Prediction(t["t3"], "m1", 0, "exception", answer="x", parsed=True),
             Prediction(t["t3"], "m1", 1, "exception", raw_text="no idea", parsed=False),
             Prediction(t["t5"], "m1", 0, "steps", answer="3", parsed=True),  # not scored
             Prediction(t["t4"], "m1", 2, "output", error="HTTP 500"),        # not an answer
             Prediction(t["t1"], "m2", 0, "output", answer="x", parsed=True),
             Prediction(t["t2"], "m2", 0, "output", answer="x", parsed=True)]
    for row in rows:
        row.label = "l1"  # one experiment per model (engine/predictions/_experiments.py)
    PredictionStore(db).write(rows)
    return t
