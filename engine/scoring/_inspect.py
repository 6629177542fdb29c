"""steptrace's tasks as an inspect_ai task, judged by steptrace's judges (the optional
extra ``inspect``: ``pip install 'steptrace[inspect]'``).

``steptrace_tasks(tasks=..., db=...)`` is an inspect ``Task``: one sample per task of a
tasks file (``steptrace tasks --out``; its Parquet file or a saved dataset too), the
prompt as the sample's input, the task's exact answer as its target, the model asked once
(``generate()``), and :func:`steptrace_judge` as the scorer. The judge is the reward
service's (engine/scoring/_reward.py): the model's whole response is read as ``predict``
reads it (steptrace.tasks._answers) and judged by the task's kind's judge, as ``score``
judges it, an ``input`` answer run in the sandbox (safe arguments only, a fresh instance
per check). So ``inspect eval`` over steptrace tasks gives the verdicts ``steptrace
score`` gives the same responses. The tasks must be in ``db``'s ``tasks`` table (the
store they were made from).

From the command line::

    inspect eval "$(python -c 'import steptrace.scoring._inspect as m; print(m.__file__)')@steptrace_tasks" \\
        -T tasks=tasks.jsonl -T db=crux.duckdb --model openai-api/vllm/MODEL
"""

from __future__ import annotations

import asyncio
import atexit
import os

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate

from steptrace.scoring._load import load_task_file
from steptrace.scoring._reward import RewardJudge


@task
def steptrace_tasks(tasks: str, db: str, workers: int = 1) -> Task:
    """The tasks of ``tasks`` (a tasks file) about the runs of store ``db``, asked once
    each and judged by steptrace's judges with ``workers`` sandbox workers."""
    records = load_task_file(tasks)
    samples = [Sample(id=task_id, input=record["prompt"], target=str(record["answer"]),
                      metadata={"kind": record["kind"]})
               for task_id, record in records.items()]
    return Task(dataset=MemoryDataset(samples, name=os.fspath(tasks)), solver=generate(),
                scorer=steptrace_judge(db, workers))


@scorer(metrics=[accuracy(), stderr()])
def steptrace_judge(db: str, workers: int = 1):
    """A scorer judging a sample's completion as ``steptrace score`` judges a prediction
    of the task whose id is the sample's id; the score's metadata is the judge's result
    (``correct``, ``status``, ``detail``, ``kind``). Its sandbox workers are started on
    the first input check and stopped when the process exits."""
    judge = RewardJudge(db, workers=workers)
    atexit.register(judge.close)

    async def score(state: TaskState, target: Target) -> Score:
        item = {"task_id": str(state.sample_id), "response": state.output.completion or ""}
        verdict, = await asyncio.to_thread(judge.judge_batch, [item])
        return Score(value=CORRECT if verdict["correct"] else INCORRECT,
                     answer=state.output.completion,
                     explanation=verdict["detail"] or verdict["status"], metadata=verdict)
    return score
