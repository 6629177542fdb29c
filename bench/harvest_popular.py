"""Bench: ``harvest`` over the popular pure-Python packages of tests/sandbox/data's two
locks (popular_a.lock, popular_b.lock: the packages of PyPI's top 100 that work in a
guest, with their dependencies), against a local test model server.

Run: ``.venv/bin/python bench/harvest_popular.py [--inputs 3] [--out DIR]``. Each lock is
harvested as ``steptrace harvest --lock`` does (scan, guest build, inputs, checks: the
examples run twice more, the final trace). The model is tests/helpers/openai_stub.py's
real HTTP server on 127.0.0.1 with a reply made from each prompt's signature (below): a
stand-in that writes plausible literal calls by annotation, some of them wrong for the
function (so the host's checks and the run-twice checks have something to do), not a
model's judgement. Prints one JSON object per lock and the totals: found, re-exported,
kept, rejected by reason, annotations rejected by why, calls by fate, examples by
verdict, runs by status, and the diversity.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from helpers.openai_stub import Reply, StubServer  # noqa: E402
from steptrace.benchmark._harvest import HarvestOptions, harvest  # noqa: E402
from steptrace.predictions._predict import PredictOptions  # noqa: E402
from steptrace.sandbox._packages import read_lock  # noqa: E402

LOCKS = {name: ROOT / "tests" / "sandbox" / "data" / f"{name}.lock"
         for name in ("popular_a", "popular_b", "popular_c", "popular_d")}
_SIGNATURE = re.compile(r"```python\n(def .*?)\n```", re.DOTALL)

# candidate literals by the words of an annotation, in order of preference
CANDIDATES = [
    (("bool",), ["True", "False", "True"]),
    (("int", "Integral", "SupportsIndex"), ["3", "0", "-7"]),
    (("float", "Real", "Number"), ["2.5", "0.0", "-1"]),
    (("bytes",), ["b'abc'", "b''", "b'\\xff\\x00'"]),
    (("dict", "Mapping"), ["{'a': 1, 'b': 2}", "{}", "{'key': 'value'}"]),
    (("tuple",), ["(1, 2)", "()", "('a', 'b')"]),
    (("list", "Sequence", "Iterable", "Collection"), ["[3, 1, 2]", "[]", "['a', 'b', 'a']"]),
    (("set", "Set"), ["{1, 2}", "set()", "{'x'}"]),
    (("str", "Text", "AnyStr"), ["'Hello World'", "''", "'a-b_c.d'"]),
]


def calls_for(signature: str, n: int) -> list[str]:
    """``n`` calls of the function of a ``def ...`` line: its parameters without a default,
    each given the i-th candidate of the first kind its annotation names."""
    try:
        node = ast.parse(signature + ":\n    pass\n").body[0]
    except SyntaxError:
        return []
    args = node.args
    positional = args.posonlyargs + args.args
    required = positional[:len(positional) - len(args.defaults)]
    required += [a for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    calls = []
    for i in range(n):
        texts = []
        for arg in required:
            annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            values = next((v for words, v in CANDIDATES
                           if any(re.search(rf"\b{w}\b", annotation) for w in words)),
                          ["1", "'x'", "None"])
            value = values[i % len(values)]
            texts.append(value if arg in positional else f"{arg.arg}={value}")
        calls.append(f"{node.name}({', '.join(texts)})")
    return calls


class SignatureModel(StubServer):
    """The test server, answering each harvest prompt with calls made from its signature."""

    def __init__(self, n: int) -> None:
        super().__init__({}, key_of=lambda prompt: "harvest")
        self.n = n

    def reply_for(self, body: dict, authorization: str | None) -> Reply | None:
        prompt = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        with self.lock:
            self.requests["harvest"] += 1
        found = _SIGNATURE.search(prompt)
        calls = calls_for(found.group(1), self.n) if found else []
        return Reply(200, "[CALLS]\n" + "\n".join(calls) + "\n[/CALLS]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--released", default="pypi")
    parser.add_argument("--locks", nargs="+", choices=sorted(LOCKS), default=sorted(LOCKS),
                        help="the locks to harvest (default: all four)")
    options = parser.parse_args()
    from popular_packages import TOP_100  # PyPI's ranking the locks were made from
    top = {_normal(name) for name in TOP_100}
    out = options.out or Path(tempfile.mkdtemp(prefix="harvest-popular-"))
    totals: dict[str, Counter] = {k: Counter() for k in (
        "counts", "rejected", "rejected_annotations", "calls", "checked", "traced")}
    for lock_path in (LOCKS[name] for name in options.locks):
        lock = read_lock(lock_path)
        started = time.perf_counter()
        with SignatureModel(options.inputs) as server:
            summary = harvest(out / lock_path.stem, lock,
                              PredictOptions("stub-model", base_url=server.base_url),
                              HarvestOptions(inputs=options.inputs, workers=2,
                                             released=options.released))
        result = summary.as_dict()
        result["wall_s"] = round(time.perf_counter() - started, 1)
        ranked = sorted(p.name for p in lock.packages if _normal(p.name) in top)
        print(json.dumps({"lock": lock_path.name, "packages": len(lock.packages),
                          "top_100": ranked,
                          **{k: result[k] for k in (
                              "found", "reexported", "aliases", "kept", "rejected",
                              "rejected_annotations", "calls", "functions_with_inputs",
                              "checked", "examples", "traced", "functions_ok",
                              "functions_raising", "diversity", "notes", "wall_s")}}),
              flush=True)
        totals["counts"].update({"packages": len(lock.packages), "top_100": len(ranked),
                                 "found": summary.found,
                                 "reexported": summary.reexported, "kept": summary.kept,
                                 "examples": summary.examples,
                                 "functions_with_inputs": summary.functions_with_inputs})
        totals["rejected"].update(summary.rejected)
        totals["rejected_annotations"].update(summary.rejected_annotations)
        totals["calls"].update({k: v for k, v in result["calls"].items()})
        totals["checked"].update(summary.checked)
        totals["traced"].update(summary.traced)
    print(json.dumps({"totals": {k: dict(v) for k, v in totals.items()}, "out": str(out)}))


def _normal(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


if __name__ == "__main__":
    main()
