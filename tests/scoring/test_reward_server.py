"""The reward service (engine/scoring/_reward.py, _reward_server.py): a real server on
127.0.0.1 (an ephemeral port) with real sandbox workers, over a real store whose tasks,
predictions and scores ``trace``, ``tasks``, ``predict`` (against the stub model server)
and ``score`` made. Its verdicts must equal ``score``'s, exactly; forging answers are
wrong; malformed requests are one-line 400s; a check that never ends is ``timeout`` and
does not hold up other requests."""

from __future__ import annotations

import http.client
import json
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from steptrace.cli._main import main
from steptrace.sandbox._limits import Limits
from steptrace.scoring._reward import (Check, FairQueue, RewardBusy, RewardError,
                                       RewardJudge, RewardLimits, judge_answers)
from steptrace.scoring import _reward_server as reward_server
from steptrace.scoring._reward_server import serve_rewards
from helpers.openai_stub import answer
from helpers.predict import predict_with_stub
from helpers.programs import LOOP  # f([1, 2, 3]) == 3; f([3]) == 3 too

COUNTDOWN = """\
def g(n):
    while n != 0:
        n -= 1
    return n
"""  # g(3) == 0; g(-1) never returns
TYPED = """\
class Node:
    def __init__(self, v):
        self.v = v

def h(xs):
    out = [x * 2 for x in xs]
    node = Node(out)
    alias = out
    if len(xs) > 2:
        raise ValueError("too long")
    return node.v
"""
KINDS = ("output", "input", "state", "state_any", "next_line", "next_line_any", "coverage",
         "line_count", "branch", "steps", "trace", "exception", "error", "type", "alias")
FORGE_EQ = "type('F', (), {'__eq__': lambda s, o: True, '__hash__': lambda s: 0})()"
TIMEOUT_S = 8.0  # score's --timeout and the service's: the same limits, the same verdicts;
# a short limit could time out a right check on a busy machine (3 s did, at a load of 6)
RETRY_AFTER = str(math.ceil(TIMEOUT_S))  # a busy client waits one check's time limit
LIMITS = RewardLimits(max_items=40, max_text_chars=4_000, max_body_bytes=100_000,
                      sandbox=Limits(timeout_s=TIMEOUT_S))


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def block(text: str):
    return answer(f"[ANSWER]\n{text}\n[/ANSWER]")


def replies(task: dict) -> list:
    """Four samples: the right answer, a wrong one, no answer, and a forgery."""
    wrong = {"input": "[2]", "trace": "[[1, 0]]", "coverage": "maybe"}.get(task["kind"], "12345")
    forged = FORGE_EQ if task["kind"] == "input" else "__import__('os').getcwd()"
    return [block(task["answer"]), block(wrong), answer("no idea at all"), block(forged)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with tasks of every kind, four predictions each, scored by ``score``."""
    tmp = tmp_path_factory.mktemp("reward")
    corpus, db, tasks_file = tmp / "corpus.jsonl", tmp / "r.duckdb", tmp / "tasks.jsonl"
    samples = [{"id": "loop", "code": LOOP, "input": "[1, 2, 3]"},
               {"id": "loop2", "code": LOOP, "input": "[4, 5]"},
               {"id": "count", "code": COUNTDOWN, "input": "3", "entry": "g"},
               {"id": "typed", "code": TYPED, "input": "[1, 2]", "entry": "h"},
               {"id": "raises", "code": TYPED, "input": "[1, 2, 3]", "entry": "h"}]
    corpus.write_text("".join(json.dumps(s) + "\n" for s in samples))
    assert invoke("trace", corpus, "--db", db, "--workers", 0).exit_code == 0
    made = invoke("tasks", "--db", db, "--kinds", ",".join(KINDS), "--per-run", 2,
                  "--out", tasks_file)
    assert made.exit_code == 0, made.output
    tasks = predict_with_stub(tasks_file, db, replies, model="m", samples=4)
    scored = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 2, "--timeout",
                    TIMEOUT_S, "--format", "json")
    assert scored.exit_code == 0, scored.output
    return db, tasks


@contextmanager
def serving(db: Path, workers: int, limits: RewardLimits = LIMITS):
    """A real server on 127.0.0.1 (an ephemeral port) over its own judge: (judge, server)."""
    with RewardJudge(db, workers=workers, limits=limits) as judge:
        httpd = serve_rewards(judge)
        httpd.serve_in_thread()
        try:
            yield judge, httpd
        finally:
            httpd.shutdown()
            httpd.server_close()


@pytest.fixture(scope="module")
def server(store):
    with serving(store[0], workers=2) as (_, httpd):
        yield httpd


def post(server, body: bytes | dict, path: str = "/v1/judge") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        assert "\n" not in text.strip()  # one line
        return error.code, json.loads(text)


def judge_items(server, items: list[dict]) -> list[dict]:
    status, body = post(server, {"items": items})
    assert status == 200, body
    assert len(body["results"]) == len(items)
    return body["results"]


def stored(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


# ------------------------------------------------------------------ the same verdicts as score
def test_concurrent_batches_equal_score(store, server):
    """Every stored prediction, sent as its parsed answer and as its whole response, in
    batches of 7 from 4 client threads at once: each verdict equals ``score``'s."""
    db, tasks = store
    rows = stored(db, "SELECT p.task_id, p.sample_index, p.answer, p.raw_text, s.correct, "
                      "s.kind FROM predictions p JOIN scores s USING (task_id, model, label, "
                      "sample_index) ORDER BY p.task_id, p.sample_index")
    assert len(rows) == 4 * len(tasks) and {r[5] for r in rows} == set(KINDS)
    items = ([{"task_id": t, "answer": a} for t, _, a, _, _, _ in rows]
             + [{"task_id": t, "response": raw} for t, _, _, raw, _, _ in rows])
    want = [correct for *_, correct, _ in rows] * 2
    batches = [items[i:i + 7] for i in range(0, len(items), 7)]
    got: dict[int, list[dict]] = {}

    def client(start: int) -> None:
        for index in range(start, len(batches), 4):
            got[index] = judge_items(server, batches[index])

    threads = [threading.Thread(target=client, args=(start,)) for start in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = [r for index in range(len(batches)) for r in got[index]]
    assert [r["correct"] for r in results] == want, [
        (index, items[index], result) for index, (result, correct)
        in enumerate(zip(results, want)) if result["correct"] != correct]
    kinds = [kind for *_, kind in rows] * 2
    assert [r["kind"] for r in results] == kinds
    # the right answers are right, and every kind had one
    right = {r[5] for r, result in zip(rows, results) if result["correct"]}
    assert right == set(KINDS)
    statuses = {(k, r["status"]) for k, r in zip(kinds, results)}
    assert ("input", "ok") in statuses and ("output", "judged") in statuses
    assert ("output", "unparseable") in statuses and ("input", "unsafe_input") in statuses


def test_library_function_judges_as_the_server(store, server):
    db, tasks = store
    task = next(t for t in tasks if t["kind"] == "output")
    items = [{"task_id": task["task_id"], "answer": task["answer"]},
             {"task_id": task["task_id"], "answer": "12345"}]
    assert judge_answers(db, items, workers=1, limits=LIMITS) == judge_items(server, items)


# ------------------------------------------------------------------ forgeries
def test_forging_answers_are_wrong(store, server):
    db, tasks = store
    output = next(t for t in tasks if t["kind"] == "output" and t["sample_id"] == "loop")
    state = next(t for t in tasks if t["kind"] == "state")
    identity = next(t for t in tasks if t["kind"] == "input" and t["sample_id"] == "count")
    assert output["answer"] == "3" and identity["answer"] == "3"
    forged_output = [
        "__import__('os').system('touch /tmp/steptrace-reward-forged')",
        FORGE_EQ,
        "'3'",                                  # the repr, as a string: equal only as text
        "3 # " + "x" * 10,                      # a comment is no value either way (literal 3)
        "(" * 1_000 + ")" * 1_000,              # nested past the parser's depth
        "[" * 1_000 + "]" * 1_000,
        "3\x00",
        "\ud800",
    ]
    results = judge_items(server, [{"task_id": output["task_id"], "answer": a}
                                   for a in forged_output])
    assert [(r["correct"], r["status"]) for r in results] == [(False, "judged")] * 3 + [
        (True, "judged")] + [(False, "judged")] * 4
    assert not Path("/tmp/steptrace-reward-forged").exists()
    # an input that could build an object equal to everything (g(F()) returns F(), and
    # F() == 0) is never run: it is not made of literals, safe builtins and g's names
    forged_input = [FORGE_EQ, "__import__('unittest.mock').mock.ANY", "type(3)(3)",
                    "getattr(3, 'real')", "(lambda: 0).__globals__", "n=3) or (1", "3), (3",
                    "(x for x in [3]).gi_frame.f_globals", "(n := 3)", "undefined_name"]
    results = judge_items(server, [{"task_id": identity["task_id"], "answer": a}
                                   for a in forged_input])
    assert [(r["correct"], r["status"]) for r in results] == [(False, "unsafe_input")] * 10
    # expressions over literals, safe builtins and the program's names run as they are
    results = judge_items(server, [{"task_id": identity["task_id"], "answer": a}
                                   for a in ("3", "n=3", "*[3]", "[3][0]", "int('3')",
                                             "len('abc')", "(lambda x: x)(3)", "g(5) + 3",
                                             "[1, 2]")]
                          + [{"task_id": state["task_id"], "answer": FORGE_EQ}])
    assert [(r["correct"], r["status"]) for r in results] == [(True, "ok")] * 8 + [
        (False, "exception"), (False, "judged")]


def test_every_cruxeval_input_is_safe_arguments(cruxeval_path):
    """The rule that refuses forging inputs accepts every CRUXEval sample's own input (and
    its output passed as the input), with its program's names: none of the 800 is wrong
    for its form."""
    from steptrace.scoring._inputs import program_names, safe_arguments
    samples = [json.loads(line) for line in cruxeval_path.read_text().splitlines()]
    assert len(samples) == 800
    assert [s["id"] for s in samples
            if not safe_arguments(s["input"], program_names(s["code"]))] == []
    assert [s["id"] for s in samples
            if not safe_arguments(s["output"], program_names(s["code"]))] == []
    # among them: dict(...), range(...), lambdas, str methods and a global of the program
    assert safe_arguments("thigh_o_two[:], 3, 3, 2", frozenset({"thigh_o_two"}))
    assert not safe_arguments("thigh_o_two[:], 3, 3, 2")


def test_code_checks_compare_as_the_output_judge(server):
    code = "def f(x):\n    return x * 2\n"
    eq = ("class F:\n    def __eq__(self, o):\n        return True\n"
          "    def __repr__(self):\n        return 'F()'\n"
          "def f(x):\n    return F()\n")
    items = [{"code": code, "input": "21", "expected_output": "42"},
             {"code": code, "input": "21", "expected_output": "42.0"},     # 42 == 42.0
             {"code": code, "input": "21", "expected_output": "'42'"},
             {"code": code, "input": "'ab'", "expected_output": "'abab'"},
             {"code": code, "input": "None", "expected_output": "0"},
             {"code": eq, "input": "1", "expected_output": "5"},           # __eq__ never asked
             {"code": eq, "input": "1", "expected_output": "F()"},         # nor its __repr__
             {"code": "def f(:", "input": "1", "expected_output": "1"},
             {"code": "def k(x):\n    return x\n", "entry": "k", "input": "[1]",
              "expected_output": "[1]"}]
    items.append(dict(items[1]))  # the same check again in the batch: run once, both judged
    results = judge_items(server, items)
    assert [(r["correct"], r["status"], r["kind"]) for r in results] == [
        (True, "ok", "code"), (True, "ok", "code"), (False, "ok", "code"),
        (True, "ok", "code"), (False, "exception", "code"), (False, "ok", "code"),
        (False, "ok", "code"), (False, "invalid", "code"), (True, "ok", "code"),
        (True, "ok", "code")]
    assert results[2]["detail"] == "returned 42"
    assert results[4]["detail"].startswith("exception: TypeError")
    assert results[6]["detail"] == ("the return value is a F, not built-in data: a code "
                                    "check compares plain values")


# Values whose text a program wrote about itself: a code check judges the value.
LYING = {
    "repr_says_12": "class N:\n    def __repr__(self):\n        return '12'\n"
                    "def f(x):\n    return N()\n",
    "int_subclass": "class N(int):\n    def __repr__(self):\n        return '12'\n"
                    "def f(x):\n    return N(5)\n",
    "str_subclass": "class S(str):\n    def __repr__(self):\n        return '12'\n"
                    "def f(x):\n    return S('x')\n",
    "in_a_list": "class N:\n    def __repr__(self):\n        return '12'\n"
                 "def f(x):\n    return [N()]\n",
    "dict_key": "class N:\n    def __repr__(self):\n        return '12'\n"
                "    def __hash__(self):\n        return 1\n"
                "def f(x):\n    return {N(): 1}\n",
}


def test_a_code_check_never_takes_a_programs_word_for_its_value(server):
    """A value whose ``__repr__`` says ``12`` is not 12, in a container or not; built-in
    data equal to the expected output is still right."""
    items = [{"code": LYING[name], "input": "1",
              "expected_output": "[12]" if name == "in_a_list" else
              "{12: 1}" if name == "dict_key" else "12"} for name in LYING]
    items.append({"code": "def f(x):\n    return [x, {'a': (x, 1.5)}]\n", "input": "12",
                  "expected_output": "[12, {'a': (12, 1.5)}]"})
    results = judge_items(server, items)
    assert [(r["correct"], r["status"]) for r in results] == [(False, "ok")] * len(LYING) + [
        (True, "ok")]
    assert [r["detail"].split(",")[0] for r in results[:len(LYING)]] == [
        "the return value is a N", "the return value is a N", "the return value is a S",
        "the return value is a list", "the return value is a dict"]


def test_a_check_that_never_ends_times_out_beside_other_requests(store, server):
    """``g(-1)`` counts down forever (its state grows: never ``loops``): its checks end
    as ``timeout``, and batches sent while they run are judged right."""
    _, tasks = store
    countdown = next(t for t in tasks if t["kind"] == "input" and t["sample_id"] == "count")
    looping = [{"task_id": countdown["task_id"], "answer": "-1"},
               {"code": COUNTDOWN, "entry": "g", "input": "-1", "expected_output": "0"}]
    found: dict[str, list[dict]] = {}

    def send(name: str, items: list[dict]) -> None:
        found[name] = judge_items(server, items)

    loop_thread = threading.Thread(target=send, args=("loop", looping))
    loop_thread.start()
    for index in range(3):
        send(f"quick{index}", [{"code": COUNTDOWN, "entry": "g", "input": "3",
                                "expected_output": "0"},
                               {"task_id": countdown["task_id"], "answer": "5"}])
    loop_thread.join()
    assert [(r["correct"], r["status"]) for r in found["loop"]] == [(False, "timeout")] * 2
    for index in range(3):
        assert [(r["correct"], r["status"]) for r in found[f"quick{index}"]] == [
            (True, "ok"), (True, "ok")]


# ------------------------------------------------------------------ malformed requests
def raw(server, method: str, path: str, body: bytes | None = None,
        headers: dict | None = None) -> tuple[int, str]:
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@pytest.mark.parametrize("body, message", [
    (b"{not json", "the body is not JSON: Expecting property name enclosed in double quotes "
                   "(line 1 column 2)"),
    (b"\xff\xfe", "the body is not JSON: not UTF-8 (byte 0)"),
    (b"[" * 100_000 + b"]" * 0, None),  # too large (100,000 bytes is the limit: 100,000 is fine)
    (b"[1, 2]", 'the body is a JSON object {"items": [...]}'),
    (b'{"item": []}', 'the body is a JSON object {"items": [...]}'),
    (b'{"items": {}}', "items must be a list, not an object"),
    (b'{"items": "abc"}', "items must be a list, not a string"),
    (b'{"items": [], "extra": 1}', "unknown field 'extra' (the body has items only)"),
    (json.dumps({"items": [{"code": "x"}] * 41}).encode(),
     "too many items: 41 (at most 40 a request)"),
    (b"x" * 100_001, "the body has 100001 bytes (at most 100000)"),
])
def test_malformed_requests_are_one_line_400s(server, body, message):
    status, text = raw(server, "POST", "/v1/judge", body)
    assert "\n" not in text
    if message is None:  # 100,000 bytes of "[": allowed in, then refused as JSON
        assert status == 400 and json.loads(text)["error"].startswith("the body is not JSON")
        return
    assert (status, json.loads(text)) == (400, {"error": message})


def test_a_body_that_trickles_in_is_cut_off_and_frees_its_turn(store, monkeypatch):
    """A client that sends part of its body and stalls gets 408 once the body deadline
    passes (not the socket timeout), and its turn goes to the next request: with one
    turn, a stalled client and then a well-formed request, the request is judged."""
    monkeypatch.setattr(reward_server, "MAX_CONCURRENT_REQUESTS", 1)
    db, tasks = store
    task = next(t for t in tasks if t["kind"] == "output" and t["sample_id"] == "loop")
    with RewardJudge(db, workers=1, limits=LIMITS) as judge:
        httpd = serve_rewards(judge, body_seconds=0.5)
        httpd.serve_in_thread()
        try:
            stalled = socket.create_connection(httpd.server_address[:2], timeout=60)
            stalled.sendall(b"POST /v1/judge HTTP/1.1\r\nHost: x\r\nContent-Length: 100"
                            b"\r\n\r\n{\"items\": [")
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
                part = stalled.recv(4096)
                if not part:
                    break
                reply += part
            stalled.close()
            head, _, body = reply.partition(b"\r\n\r\n")
            assert head.split(b"\r\n")[0] == b"HTTP/1.1 408 Request Timeout"
            assert json.loads(body) == {"error": "the body did not arrive within 0.5 s"}
            results = judge_items(httpd, [{"task_id": task["task_id"], "answer": "3"}])
            assert [(r["correct"], r["status"]) for r in results] == [(True, "judged")]
        finally:
            httpd.shutdown()
            httpd.server_close()


def test_other_paths_methods_and_health(server):
    assert raw(server, "GET", "/v1/judge")[0] == 405
    status, text = raw(server, "POST", "/elsewhere", b"{}")
    assert status == 404 and "\n" not in text and json.loads(text)["error"]
    status, text = raw(server, "GET", "/v1/health")
    assert status == 200 and json.loads(text) == {
        "ok": True, "workers": 2,
        "limits": {"max_items": 40, "max_text_chars": 4_000, "max_body_bytes": 100_000,
                   "max_client_checks": 1_000, "max_client_requests": 8,
                   "timeout_s": TIMEOUT_S, "memory_mb": 512},
        "checks": {"queued": 0, "running": 0, "clients": 0}}
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    try:  # no Content-Length
        conn.putrequest("POST", "/v1/judge")
        conn.endheaders()
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())) == (
            400, {"error": "the request needs a Content-Length (a JSON body)"})
    finally:
        conn.close()


def test_item_errors_do_not_fail_the_batch(store, server):
    _, tasks = store
    task = next(t for t in tasks if t["kind"] == "output" and t["sample_id"] == "loop")
    items = [{"task_id": task["task_id"], "answer": "3"},
             {"task_id": "nope", "answer": "3"},
             {"task_id": task["task_id"]},
             {"task_id": task["task_id"], "answer": "3", "response": "3"},
             {"task_id": task["task_id"], "answer": 3},
             {"task_id": task["task_id"], "answer": "3" * 4_001},
             {"task_id": task["task_id"], "answer": None},
             {"task_id": task["task_id"], "answer": "3", "model": "m"},
             {"code": "def f(x):\n    return x\n", "input": "1"},
             {"code": "def f(x):\n    return x\n", "input": "1", "expected_output": "1",
              "entry": "os.system"},
             [1], "text", None, {},
             {"task_id": task["task_id"], "answer": "3"}]
    results = judge_items(server, items)
    assert [(r["correct"], r["status"], r["detail"]) for r in results] == [
        (True, "judged", None),
        (False, "error", "unknown task_id 'nope' (not in the store's tasks table)"),
        (False, "error", "a task item has one of answer and response"),
        (False, "error", "a task item has one of answer and response"),
        (False, "error", "answer must be a string or null, not a number"),
        (False, "error", "answer has 4001 characters (at most 4000)"),
        (False, "unparseable", "no answer"),
        (False, "error", "unknown field 'model'"),
        (False, "error", "a code item needs expected_output"),
        (False, "error", "entry must be a function's name"),
        (False, "error", "an item is a JSON object, not an array"),
        (False, "error", "an item is a JSON object, not a string"),
        (False, "error", "an item is a JSON object, not null"),
        (False, "error", "an item has task_id (a task's answer) or code (a code check)"),
        (True, "judged", None)]


def test_a_store_without_tasks_is_refused(tmp_path):
    corpus, db = tmp_path / "c.jsonl", tmp_path / "s.duckdb"
    corpus.write_text(json.dumps({"id": "loop", "code": LOOP, "input": "[1]"}) + "\n")
    assert invoke("trace", corpus, "--db", db, "--workers", 0).exit_code == 0
    result = invoke("reward-server", "--db", db, "--port", 0)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {db} has no tasks table: run steptrace tasks --db {db} first"]
    missing = invoke("reward-server", "--db", tmp_path / "none.duckdb", "--port", 0)
    assert missing.exit_code == 1 and "database not found" in missing.output


def test_a_shard_directory_serves_as_a_store(tmp_path):
    """Tasks made on a shard directory (its companion store.duckdb) are judged from it,
    input answers with the programs of its shards."""
    from steptrace.sharding._run import ShardOptions, trace_shards
    corpus, out = tmp_path / "c.jsonl", tmp_path / "shards"
    corpus.write_text("".join(json.dumps(s) + "\n" for s in (
        {"id": "loop", "code": LOOP, "input": "[1, 2, 3]"},
        {"id": "count", "code": COUNTDOWN, "input": "3", "entry": "g"})))
    trace_shards([corpus], out, ShardOptions(shard_size=1, workers=1))
    made = invoke("tasks", "--db", out, "--kinds", "output,input", "--per-run", 1)
    assert made.exit_code == 0, made.output
    tasks = stored(out / "store.duckdb", "SELECT task_id, kind, answer FROM tasks ORDER BY ALL")
    assert len(tasks) == 4
    items = [{"task_id": t, "answer": a} for t, _, a in tasks]
    items += [{"task_id": t, "answer": "[2]" if k == "input" else "0"} for t, k, _ in tasks]
    results = judge_answers(out, items, workers=1, limits=LIMITS)
    # [2] is no input of either (g([2]) raises, f([2]) is -1); 0 is g(3)'s output only
    assert [r["correct"] for r in results] == [True] * 4 + [
        k == "output" and a == "0" for _, k, a in tasks]
    assert sum(r["correct"] for r in results) == 5


# ------------------------------------------------------------------ hostile clients
def exchange(server, data: bytes, half_close: bool = False) -> tuple[int, dict, dict]:
    """Send ``data`` as it is (a whole request, or a broken one) on a new connection and
    read the reply until the server closes it: (status, headers, JSON body)."""
    connection = socket.create_connection(server.server_address[:2], timeout=120)
    try:
        connection.sendall(data)
        if half_close:
            connection.shutdown(socket.SHUT_WR)
        reply = b""
        while part := connection.recv(65536):
            reply += part
    finally:
        connection.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert b"\n" not in body.strip()  # one line
    assert int(headers["Content-Length"]) == len(body)
    return int(lines[0].split()[1]), headers, json.loads(body)


def judge_request(body: bytes, headers: str = "") -> bytes:
    return (b"POST /v1/judge HTTP/1.1\r\nHost: x\r\n" + headers.encode()
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


DEEP = b'{"items": ' + b"[" * 40_000 + b"]" * 40_000 + b"}"
HOSTILE = [
    (judge_request(b'{"items": [' + b"1" * 5000 + b"]}"),
     400, "the body is not JSON: a number of 5000 characters (at most 100)"),
    (judge_request(b'{"items": -' + b"9" * 5000 + b"}"),
     400, "the body is not JSON: a number of 5001 characters (at most 100)"),
    (judge_request(b'{"items": [0.' + b"5" * 5000 + b"]}"),
     400, "the body is not JSON: a number of 5002 characters (at most 100)"),
    (judge_request(b'{"items": [NaN]}'), 400, "the body is not JSON: NaN is not a JSON value"),
    (judge_request(b'{"items": Infinity}'),
     400, "the body is not JSON: Infinity is not a JSON value"),
    (judge_request(b'{"items": [{"code": -Infinity}]}'),
     400, "the body is not JSON: -Infinity is not a JSON value"),
    (judge_request(DEEP), 400, "the body is not JSON: nested too deeply"),
    (judge_request(b'{"items": ["\xff"]}'), 400, "the body is not JSON: not UTF-8 (byte 12)"),
    (judge_request('{"items": []}'.encode("utf-16")), 400,
     "the body is not JSON: not UTF-8 (byte 0)"),
    (judge_request(b'\xef\xbb\xbf{"items": []}'), 400,
     "the body is not JSON: Unexpected UTF-8 BOM (decode using utf-8-sig) (line 1 column 1)"),
    (judge_request(b""), 400, "the body is not JSON: Expecting value (line 1 column 1)"),
    (judge_request(b'{"items": []} []'), 400,
     "the body is not JSON: Extra data (line 1 column 15)"),
    (judge_request(b'{"items": [], "items": 5}'), 400, "items must be a list, not a number"),
    (judge_request(b'{"items": []}', "Content-Type: text/plain\r\n"), 415,
     "the body is JSON (Content-Type application/json), not 'text/plain'"),
    (judge_request(b'{"items": []}', "Content-Type: application/x-www-form-urlencoded\r\n"),
     415, "the body is JSON (Content-Type application/json), not "
          "'application/x-www-form-urlencoded'"),
    (judge_request(b'{"items": []}', "Content-Type: application/json; charset=latin-1\r\n"),
     415, "the body is JSON in UTF-8, not 'latin-1'"),
    (b"POST /v1/judge HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n[]",
     400, "the request has more than one Content-Length"),
    (b"POST /v1/judge HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n[]",
     400, "a Content-Length is a number of bytes, not '1_0'"),
    (b"POST /v1/judge HTTP/1.1\r\nContent-Length: +2\r\n\r\n[]",
     400, "a Content-Length is a number of bytes, not '+2'"),
    (b"POST /v1/judge HTTP/1.1\r\nContent-Length: -1\r\n\r\n[]",
     400, "a Content-Length is a number of bytes, not '-1'"),
    (b"POST /v1/judge HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n[]",
     400, "a Content-Length is a number of bytes, not '" + "9" * 30 + "'"),
    (b"POST /v1/judge HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n",
     400, "a Transfer-Encoding is not read: send the body with a Content-Length"),
    (b"POST /v1/judge HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n[]",
     400, "a Transfer-Encoding is not read: send the body with a Content-Length"),
    (b"GARBAGE\r\n\r\n", 400, "Bad request syntax ('GARBAGE')"),
    (b"POST /v1/judge HTTP/9.9\r\nContent-Length: 2\r\n\r\n[]", 505,
     "Invalid HTTP version (9.9)"),
    (b"BREW /v1/judge HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405,
     "method 'BREW' is not allowed"),
    (b"PUT /v1/judge HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405,
     "'/v1/judge' takes POST: POST /v1/judge, GET /v1/health"),
    (b"GET /v1/health HTTP/1.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", 431, "Line too long"),
]


@pytest.fixture(scope="module")
def lone_server(store):
    """A server of one sandbox worker, for the tests that count or order its checks."""
    with serving(store[0], workers=1) as (_, httpd):
        yield httpd


def test_every_malformed_request_gets_a_one_line_4xx_and_the_server_serves_on(
        store, lone_server, capfd):
    """Each hostile request gets its status and exact one-line JSON error (no traceback,
    the connection closed), and the next request on a new connection is judged."""
    _, tasks = store
    task = next(t for t in tasks if t["kind"] == "output" and t["sample_id"] == "loop")
    good = {"task_id": task["task_id"], "answer": "3"}
    for data, status, message in HOSTILE:
        found = exchange(lone_server, data)
        assert (found[0], found[2]) == (status, {"error": message}), data[:80]
        assert found[1]["Connection"] == "close" and found[1]["Content-Type"] == "application/json"
        assert judge_items(lone_server, [good])[0]["correct"] is True
    # a body that ends before its Content-Length (the client closed its side)
    found = exchange(lone_server, b"POST /v1/judge HTTP/1.1\r\nContent-Length: 10\r\n\r\n[]",
                     half_close=True)
    assert (found[0], found[2]) == (
        400, {"error": "the body ended after 2 of the 10 bytes of its Content-Length"})
    # JSON with a charset in its media type, and a method's 405 names what is allowed
    accepted = exchange(lone_server, judge_request(json.dumps({"items": [good]}).encode(),
                                                   "Content-Type: Application/JSON; "
                                                   "charset=UTF-8\r\nConnection: close\r\n"))
    assert accepted[0] == 200 and accepted[2]["results"][0]["correct"] is True
    assert exchange(lone_server, b"DELETE /v1/health HTTP/1.1\r\n\r\n")[1]["Allow"] == "GET, POST"
    assert raw(lone_server, "GET", "/v1/health")[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_a_lone_surrogate_task_id_is_that_items_error(store, lone_server):
    """JSON's ``\\ud800`` escape alone is valid JSON but no Unicode text: a task_id holding
    one is that item's error (the store is not asked for it), and the batch's other task
    items are still read and judged; an answer holding one is a wrong answer, as in
    ``score``, and code holding one is ``invalid`` in the sandbox."""
    _, tasks = store
    task = next(t for t in tasks if t["kind"] == "output" and t["sample_id"] == "loop")
    items = [{"task_id": "\ud800", "answer": "3"},
             {"task_id": task["task_id"], "answer": "3\udfff"},
             {"code": "def f(x):\n    return '\ud800'\n", "input": "1", "expected_output": "1"},
             {"task_id": task["task_id"], "answer": "3"}]
    status, body = post(lone_server, json.dumps({"items": items}).encode())
    assert status == 200
    assert [(r["correct"], r["status"], r["detail"], r["kind"]) for r in body["results"]] == [
        (False, "error", "task_id holds a lone surrogate (a \\ud800 escape alone): no task "
                         "has it", None),
        (False, "judged", None, "output"),
        (False, "invalid", "invalid: UnicodeEncodeError", "code"),
        (True, "judged", None, "output")]


def test_the_fair_queue_takes_clients_and_their_batches_in_turn():
    """The scheduler alone: three clients, one with two batches; the exact order taken,
    the per-client bound (all or nothing, freed as checks end) and closing."""
    fair = FairQueue(max_client_checks=5, retry_after=2)
    checks = {name: [Check({"n": f"{name}{i}"}) for i in range(count)]
              for name, count in (("x1", 3), ("x2", 2), ("y3", 1), ("z4", 2))}
    fair.put("x", 1, checks["x1"])
    fair.put("x", 2, checks["x2"])
    fair.put("y", 3, checks["y3"])
    fair.put("z", 4, checks["z4"])
    with pytest.raises(RewardBusy) as busy:
        fair.put("x", 5, [Check({})])
    assert (str(busy.value), busy.value.retry_after) == (
        "too many checks under way: 5 of this client's are queued or running, and 1 more "
        "would pass 5; send again later", 2)
    with pytest.raises(RewardError, match=r"^the request has 6 sandboxed checks \(at most 5 "):
        fair.put("w", 6, [Check({}) for _ in range(6)])
    assert fair.describe() == {"queued": 8, "running": 0, "clients": 3}
    taken = [fair.get() for _ in range(8)]
    assert [(client, check.request["n"]) for client, check in taken] == [
        ("x", "x10"), ("y", "y30"), ("z", "z40"), ("x", "x20"), ("z", "z41"), ("x", "x11"),
        ("x", "x21"), ("x", "x12")]
    assert list(fair.order) == [("x", 1), ("y", 3), ("z", 4), ("x", 2), ("z", 4), ("x", 1),
                                ("x", 2), ("x", 1)]
    assert fair.describe() == {"queued": 0, "running": 8, "clients": 3}
    with pytest.raises(RewardBusy):
        fair.put("x", 7, [Check({})])  # x's five still run
    fair.done("x")
    fair.put("x", 7, [Check({"n": "x7"})])
    fair.close()
    assert fair.get()[1].request == {"n": "x7"}  # what is queued still runs
    assert fair.get() is None
    with pytest.raises(RewardError, match="stopping"):
        fair.put("y", 8, [Check({})])


def post_from(server, address: str, items: list[dict]) -> tuple[int, dict, dict]:
    """POST ``items`` from the loopback address ``address`` (a client of its own)."""
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=120,
                                            source_address=(address, 0))
    try:
        connection.request("POST", "/v1/judge", body=json.dumps({"items": items}).encode(),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read()), dict(response.getheaders())
    finally:
        connection.close()


def wait_for_checks(server, **expected: int) -> None:
    """Poll the health endpoint until its check counts are ``expected`` (a safety-net
    deadline only: the counts are what the test waits for, not a time)."""
    deadline = time.monotonic() + 120
    while True:
        checks = json.loads(raw(server, "GET", "/v1/health")[1])["checks"]
        if all(checks[name] == value for name, value in expected.items()):
            return
        assert time.monotonic() < deadline, checks
        time.sleep(0.01)


def add_one(first: int, count: int) -> list[dict]:
    """``count`` distinct quick code checks, ``f(n) == n + 1``."""
    return [{"code": "def f(n):\n    return n + 1\n", "input": str(n),
             "expected_output": str(n + 1)} for n in range(first, first + count)]


def test_checks_are_taken_round_robin_across_clients_and_their_requests(store):
    """One worker; client A (127.0.0.2) queues two requests of three checks and then
    client B (127.0.0.3) one of one, all before any runs: B's check is taken second,
    right after A's first, not after A's six, and A's two requests alternate. Asserted
    on the order the scheduler took the checks, not on times."""
    db, _ = store
    a, b = "127.0.0.2", "127.0.0.3"
    with serving(db, workers=1) as (judge, httpd):
        judge.slots.queue.pause()
        found: dict[str, tuple] = {}
        threads = []
        for name, address, items, queued in (("a1", a, add_one(0, 3), 3),
                                             ("a2", a, add_one(10, 3), 6),
                                             ("b", b, add_one(20, 1), 7)):
            thread = threading.Thread(target=lambda n=name, ad=address, it=items:
                                      found.__setitem__(n, post_from(httpd, ad, it)))
            thread.start()
            threads.append(thread)
            wait_for_checks(httpd, queued=queued, running=0)  # queued in this order
        judge.slots.queue.resume()
        for thread in threads:
            thread.join()
        assert list(judge.slots.queue.order) == [(a, 1), (b, 3), (a, 2), (a, 1), (a, 2),
                                                 (a, 1), (a, 2)]
    for name, count in (("a1", 3), ("a2", 3), ("b", 1)):
        status, body, _ = found[name]
        assert status == 200
        assert [(r["correct"], r["status"]) for r in body["results"]] == [(True, "ok")] * count


def test_a_client_over_its_bounds_is_told_to_retry_and_others_are_not(store):
    """``max_client_checks`` 4 and ``max_client_requests`` 2, the checks held queued: a
    client's batch that would pass 4 checks under way is 429 with Retry-After (nothing of
    it runs), one larger than 4 on its own is 400, a third request under way is 429;
    another client is served all the while, and once the checks ran the first client is
    served again."""
    db, _ = store
    a, b = "127.0.0.2", "127.0.0.3"
    limits = RewardLimits(max_items=40, max_client_checks=4, max_client_requests=2,
                          sandbox=Limits(timeout_s=TIMEOUT_S))
    with serving(db, workers=1, limits=limits) as (judge, httpd):
        judge.slots.queue.pause()
        found: dict[str, tuple] = {}

        def send(name: str, address: str, items: list[dict]) -> threading.Thread:
            thread = threading.Thread(target=lambda: found.__setitem__(
                name, post_from(httpd, address, items)))
            thread.start()
            return thread

        waiting = [send("a3", a, add_one(0, 3))]
        wait_for_checks(httpd, queued=3, clients=1)
        status, body, headers = post_from(httpd, a, add_one(10, 2))
        assert (status, body, headers["Retry-After"]) == (429, {
            "error": "too many checks under way: 3 of this client's are queued or "
                     "running, and 2 more would pass 4; send again later"}, RETRY_AFTER)
        status, body, _ = post_from(httpd, a, add_one(20, 5))
        assert (status, body) == (400, {"error": "the request has 5 sandboxed checks (at "
                                                 "most 4 a client at once)"})
        waiting.append(send("a1", a, add_one(30, 1)))
        wait_for_checks(httpd, queued=4, clients=1)
        status, body, headers = post_from(httpd, a, add_one(40, 1))  # a third request
        assert (status, body, headers["Retry-After"]) == (429, {
            "error": "too many requests under way from 127.0.0.2 (at most 2 at once); "
                     "send again later"}, RETRY_AFTER)
        waiting.append(send("b2", b, add_one(50, 2)))
        wait_for_checks(httpd, queued=6, clients=2)
        judge.slots.queue.resume()
        for thread in waiting:
            thread.join()
        status, body, _ = post_from(httpd, a, add_one(60, 4))  # under way again: 4
        assert status == 200 and [r["correct"] for r in body["results"]] == [True] * 4
    assert [(found[n][0], [r["correct"] for r in found[n][1]["results"]])
            for n in ("a3", "a1", "b2")] == [(200, [True] * 3), (200, [True]), (200, [True] * 2)]


# ------------------------------------------------------------------ model-written code runs alone
# (a check that leaves state behind, a check that reads it, what that returns in a fresh
# instance). The first two are the examples of docs/guides/sandbox.md's batch isolation,
# which it would catch; the last three it would not (a function's defaults, reached through
# the function: batch isolation compares namespaces, not the objects in them).
LEAKS = [
    ("import json\ndef f(x):\n    json.leak = x\n    return x\n",
     "import json\ndef f(x):\n    return getattr(json, 'leak', 0)\n", "0"),
    ("import sys\ndef f(x):\n    sys.modules['leak'] = x\n    return x\n",
     "import sys\ndef f(x):\n    return sys.modules.get('leak', 0)\n", "0"),
    ("import textwrap\ndef f(x):\n    d = textwrap.TextWrapper.__init__.__defaults__\n"
     "    textwrap.TextWrapper.__init__.__defaults__ = (x,) + d[1:]\n    return x\n",
     "import textwrap\ndef f(x):\n    return textwrap.TextWrapper().width\n", "70"),
    ("import textwrap\ndef f(x):\n    textwrap.wrap.__kwdefaults__ = {'leak': x}\n    return x\n",
     "import textwrap\ndef f(x):\n    return (textwrap.wrap.__kwdefaults__ or {}).get('leak', 0)\n",
     "0"),
    ("import json\ndef f(x):\n    json.dumps.__kwdefaults__['indent'] = x\n    return x\n",
     "import json\ndef f(x):\n    return json.dumps([1, 2]).count(' ')\n", "1"),
]


def test_code_checks_of_one_request_and_of_the_next_never_share_an_instance(lone_server):
    """With one worker every check runs in the same worker process, one after another:
    what a check leaves in a module (an attribute of ``json``, an entry of
    ``sys.modules``, a function's defaults) is not there for the next check of the same
    request, nor for the next request's."""
    items = []
    for number, (writer, reader, fresh) in enumerate(LEAKS, start=7):
        items += [{"code": writer, "input": str(number), "expected_output": str(number)},
                  {"code": reader, "input": "1", "expected_output": fresh}]
    assert [(r["correct"], r["status"], r["detail"]) for r in judge_items(lone_server, items)] \
        == [(True, "ok", None)] * len(items)
    readers = [{"code": reader, "input": "2", "expected_output": fresh}
               for _, reader, fresh in LEAKS]
    assert [(r["correct"], r["status"]) for r in judge_items(lone_server, readers)] == \
        [(True, "ok")] * len(LEAKS)


HANDLERS = "import logging\n\ndef f(x):\n    return len(logging.root.handlers)\n"


def test_predicted_inputs_never_share_an_instance_in_score_or_the_service(tmp_path):
    """An input answer that leaves a handler on the root logger (safe arguments: the
    program imports ``logging``; batch isolation would not see it) and a right answer
    checked after it, by ``score`` (one worker, one chunk) and by the service (one worker,
    one batch): the right answer is right, in both."""
    corpus, db, tasks_file = tmp_path / "c.jsonl", tmp_path / "m.duckdb", tmp_path / "t.jsonl"
    corpus.write_text(json.dumps({"id": "log", "code": HANDLERS, "input": "5"}) + "\n")
    assert invoke("trace", corpus, "--db", db, "--workers", 0).exit_code == 0
    assert invoke("tasks", "--db", db, "--kinds", "input", "--out", tasks_file).exit_code == 0
    leaking = "logging.root.handlers.append(1) or 5"
    tasks = predict_with_stub(tasks_file, db, lambda task: [block(leaking), block("1")],
                              model="m", samples=2)
    assert len(tasks) == 1
    scored = invoke("score", "--tasks", tasks_file, "--db", db, "--workers", 1, "--timeout",
                    TIMEOUT_S, "--format", "json")
    assert scored.exit_code == 0, scored.output
    assert stored(db, "SELECT p.sample_index, p.answer, s.correct, s.note FROM predictions p "
                      "JOIN scores s USING (task_id, model, label, sample_index) "
                      "ORDER BY p.sample_index") == [(0, leaking, False, "returned 1"),
                                                     (1, "1", True, None)]
    results = judge_answers(db, [{"task_id": tasks[0]["task_id"], "answer": leaking},
                                 {"task_id": tasks[0]["task_id"], "answer": "1"},
                                 {"task_id": tasks[0]["task_id"], "answer": leaking}],
                            workers=1, limits=LIMITS)
    assert [(r["correct"], r["status"], r["detail"]) for r in results] == [
        (False, "ok", "returned 1"), (True, "ok", None), (False, "ok", "returned 1")]
