"""CRUXEval's protocol end to end: the official prompts read from a copy of the official
repository's prompts.py (a fixture the test writes), tasks rendered with them, a base
model asked on /v1/completions with the official stop sequence (a real server on
127.0.0.1 answering as such a model does, in the official format), the answers exported as
CRUXEval generations and scored as the official harness scores them; and the request
options (stop sequences, extra body, budget) as the server receives them."""

from __future__ import annotations

import hashlib
import json
from itertools import islice

from helpers.cli import assert_one_line_error, invoke, new_store
from helpers.openai_stub import Reply, StubServer, answer
from helpers.predict import MODEL, prompt_of

# The direct prompts of facebookresearch/cruxeval's prompts.py, as the repository has them.
PROMPTS_PY = '''def make_direct_output_prompt(s):
    code, input = s
    return f"""You are given a Python function and an assertion containing an input to the function. Complete the assertion with a literal (no unsimplified expressions, no function calls) containing the output when executing the provided code on the given input, even if the function is incorrect or incomplete. Do NOT output any extra information. Provide the full assertion with the correct output in [ANSWER] and [/ANSWER] tags, following the examples.

[PYTHON]
def f(n):
    return n
assert f(17) == ??
[/PYTHON]
[ANSWER]
assert f(17) == 17
[/ANSWER]

[PYTHON]
def f(s):
    return s + "a"
assert f("x9j") == ??
[/PYTHON]
[ANSWER]
assert f("x9j") == "x9ja"
[/ANSWER]

[PYTHON]
{code}
assert f({input}) == ??
[/PYTHON]
[ANSWER]
"""

def make_direct_input_prompt(s):
    code, output = s
    return f"""You will be given a function f and an output in the form f(??) == output. Find any input such that executing f on the input leads to the given output. There may be multiple answers, but you should only output one. In [ANSWER] and [/ANSWER] tags, complete the assertion with one such input that will produce the output when executing the function.

[PYTHON]
def f(my_list):
    count = 0
    for i in my_list:
        if len(i) % 2 == 0:
            count += 1
    return count
assert f(??) == 3
[/PYTHON]
[ANSWER]
assert f(["mq", "px", "zy"]) == 3
[/ANSWER]

[PYTHON]
def f(s1, s2):
    return s1 + s2
assert f(??) == "banana"
[/PYTHON]
[ANSWER]
assert f("ba", "nana") == "banana"
[/ANSWER]

[PYTHON]
{code}
assert f(??) == {output}
[/PYTHON]
[ANSWER]
"""
'''
STOP = "[/ANSWER]"
SAMPLES = 5
# What the base model writes after each prompt, sample 0 and sample 1: the assertion, the
# closing tag (the stop sequence: the server ends the text before it) and, as a base model
# does, the next few-shot block it would go on to write.
RIGHT, WRONG = True, False
VERDICTS = {"sample_0": (RIGHT, WRONG), "sample_1": (RIGHT, RIGHT), "sample_2": (WRONG, WRONG),
            "sample_3": (RIGHT, RIGHT), "sample_4": (WRONG, RIGHT)}


def continuation(record: dict, right: bool) -> str:
    value = record["output"] if right else "0"
    return f"assert f({record['input']}) == {value}\n{STOP}\n\n[PYTHON]\ndef f(x):\n"


def official_postprocess(generation: str) -> str:
    """The repository's OutputPrediction.postprocess_generation (direct prompts) of the
    text after the prompt."""
    if "==" in generation:
        generation = generation.split("==")[1].strip()
    return generation.strip()


def test_a_cruxeval_row_through_the_completions_endpoint(tmp_path, cruxeval_path):
    official: dict = {}
    exec(PROMPTS_PY, official)  # the fixture's own functions: the prompts expected
    repo = tmp_path / "cruxeval"
    repo.mkdir()
    (repo / "prompts.py").write_text(PROMPTS_PY, encoding="utf-8")
    templates = tmp_path / "templates"
    made = invoke("cruxeval-prompts", repo, "--out", templates, "--format", "csv")
    assert (made.exit_code, made.stdout) == (0, (
        "template,from\noutput.cruxeval.txt,make_direct_output_prompt\n"
        "input.cruxeval.txt,make_direct_input_prompt\n"))
    with open(cruxeval_path, encoding="utf-8") as lines:
        records = [json.loads(line) for line in islice(lines, SAMPLES)]
    data = tmp_path / "cruxeval5.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    db = tmp_path / "crux.duckdb"
    assert invoke("trace", data, "--db", db, "--workers", 0, "--quiet").exit_code == 0
    tasks = tmp_path / "tasks.jsonl"
    made = invoke("tasks", "--db", db, "--kinds", "output,input", "--prompt", "cruxeval",
                  "--template-dir", templates, "--out", tasks)
    assert made.exit_code == 0, made.output
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    by_id = {r["id"]: r for r in records}
    for row in rows:  # every prompt is the official function's, exactly
        record = by_id[row["sample_id"]]
        expected = (official["make_direct_output_prompt"]((record["code"], record["input"]))
                    if row["kind"] == "output" else
                    official["make_direct_input_prompt"]((record["code"], record["output"])))
        assert row["prompt"] == expected
    assert sorted((r["kind"], r["sample_id"]) for r in rows) == sorted(
        (kind, r["id"]) for kind in ("input", "output") for r in records)
    output_prompts = {r["prompt"]: r["sample_id"] for r in rows if r["kind"] == "output"}
    script = {sample: [answer(continuation(by_id[sample], verdict)) for verdict in verdicts]
              for sample, verdicts in VERDICTS.items()}
    with StubServer(script, key_of=output_prompts.get,
                    default=Reply(200, "assert f(1) == 1\n[/ANSWER]")) as server:
        asked = invoke("predict", "--tasks", tasks, "--model", MODEL, "--base-url",
                       server.base_url, "--endpoint", "completions", "--stop", STOP,
                       "--temperature", 0.2, "--max-tokens", 100, "--samples", 2,
                       "--concurrency", 1, "--db", db, "--quiet", "--format", "json")
        assert asked.exit_code == 0, asked.output
        body = server.bodies["sample_0"]
    summary = json.loads(asked.stdout)
    settings = json.dumps({"endpoint": "completions", "stop": [STOP], "extra_body": {}},
                          sort_keys=True)
    assert (summary["label"], summary["requests"], summary["errors"],
            summary["unparseable"]) == (
        f"cruxeval-t0.2-m100-completions-r{hashlib.sha256(settings.encode()).hexdigest()[:8]}",
        20, 0, 0)
    assert {key: body[key] for key in ("model", "prompt", "stop", "temperature", "max_tokens")
            } == {"model": MODEL, "prompt": official["make_direct_output_prompt"](
                (by_id["sample_0"]["code"], by_id["sample_0"]["input"])),
                  "stop": [STOP], "temperature": 0.2, "max_tokens": 100}
    assert "messages" not in body
    generations = tmp_path / "generations.json"
    exported = invoke("export-generations", "--db", db, "--model", MODEL, "--mode", "output",
                      "--out", generations, "--format", "json")
    assert exported.exit_code == 0, exported.output
    # the generations are what the official post-processing makes of the same texts
    assert json.loads(generations.read_text()) == {
        sample: [official_postprocess(continuation(by_id[sample], v).split(STOP)[0])
                 for v in verdicts] for sample, verdicts in VERDICTS.items()}
    scored = invoke("score-cruxeval", generations, "--mode", "output", "--data", data,
                    "--workers", 0, "--format", "json")
    assert scored.exit_code == 0, scored.output
    result = json.loads(scored.stdout)
    # pass@1 with n=2: 0.5, 1, 0, 1, 0.5 -> 60.0; pass@5 with n=2: 1.0 for every sample,
    # since n - c < 5 (the harness's arithmetic) -> 100.0
    assert (result["pass_at_1"], result["pass_at_5"]) == (60.0, 100.0)


def test_request_options_as_the_server_receives_them(tmp_path):
    """--stop (\\n written as an escape), --extra-body, the chat endpoint; a budget asks the
    first pairs and the same command the rest; bad options are one-line errors."""
    db = new_store(tmp_path / "s.duckdb")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"task_id": t, "kind": "output", "prompt": prompt_of(t)})
                             + "\n" for t in ("a", "b", "c")))
    extra = '{"chat_template_kwargs": {"enable_thinking": false}, "reasoning_effort": "low"}'
    args = ["predict", "--tasks", tasks, "--model", MODEL, "--stop", "\\n\\n", "--stop", "END",
            "--extra-body", extra, "--concurrency", 1, "--db", db, "--quiet", "--format", "json"]
    with StubServer({}, default=answer("[ANSWER]1[/ANSWER]")) as server:
        first = invoke(*args, "--base-url", server.base_url, "--max-requests", 2)
        assert first.exit_code == 0, first.output
        summary = json.loads(first.stdout)
        assert (summary["requests"], summary["not_asked"], summary["skipped"]) == (2, 1, 0)
        assert server.requests == {"a": 1, "b": 1}
        assert {k: v for k, v in server.bodies["a"].items() if k != "messages"} == {
            "model": MODEL, "temperature": 0.0, "max_tokens": 2048, "stop": ["\n\n", "END"],
            "chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "low"}
        rest = json.loads(invoke(*args, "--base-url", server.base_url).stdout)
        assert (rest["requests"], rest["not_asked"], rest["skipped"]) == (1, 0, 2)
        assert server.requests == {"a": 1, "b": 1, "c": 1}
        # the same label with other request settings is refused, not resumed
        other = invoke("predict", "--tasks", tasks, "--model", MODEL, "--label", rest["label"],
                       "--base-url", server.base_url, "--db", db, "--quiet")
        assert_one_line_error(other, (
            f"label {rest['label']!r} of model {MODEL!r} holds predictions of 3 of these tasks "
            "asked with other prompts or request settings (task a): the tasks were made from "
            "another template, or the endpoint, stop sequences or extra body differ; give "
            "another --label, or --redo to replace them"))
    base = ["predict", "--tasks", tasks, "--model", MODEL, "--db", db]
    for extra_args, message in (
            (("--extra-body", "[1]"), "--extra-body must be a JSON object, e.g. "
             "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'"),
            (("--extra-body", "{"), "--extra-body is not JSON (Expecting property name "
             "enclosed in double quotes: line 1 column 2 (char 1))"),
            (("--extra-body", '{"stream": true}'), "--extra-body may not set 'stream': "
             "steptrace sets it (from its own option, where there is one)"),
            (("--endpoint", "completions", "--system-prompt", "Be brief."),
             "a system prompt goes with the chat endpoint (a completions request has no "
             "messages: put it in the prompt template)")):
        assert_one_line_error(invoke(*base, *extra_args), message)


def test_official_prompts_that_cannot_be_read(tmp_path):
    """A path without prompts.py, and a prompts.py whose f-string uses another name."""
    assert_one_line_error(invoke("cruxeval-prompts", tmp_path, "--out", tmp_path / "t"), (
        f"no CRUXEval prompts at {tmp_path}: give the repository's directory (a checkout of "
        "facebookresearch/cruxeval) or its prompts.py"))
    bad = tmp_path / "prompts.py"
    bad.write_text(PROMPTS_PY.replace("assert f({input}) == ??", "assert f({input!r}) == ??"))
    assert_one_line_error(invoke("cruxeval-prompts", bad, "--out", tmp_path / "t"), (
        f"{bad}:3: make_direct_output_prompt's f-string may only use {{code}}, {{input}}"))
    assert not (tmp_path / "t").exists()
