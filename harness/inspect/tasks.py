"""The inspect tasks: `kernels` (our problems, prompts, feedback and verdicts) and `kernels_selfcheck`.

    inspect eval harness/inspect/tasks.py@kernels -T problems=smoke -T turns=3 --model openai/gpt-4o
    inspect eval harness/inspect/tasks.py@kernels_selfcheck --model none -T gpu=true

`problems` is any selection `harness run` takes (`smoke`, `level1`, `'L2/*norm*'`, `kernelbench:/abs/path`); inspect
runs a task file's tasks in the file's folder, so give paths in it absolute. `overrides` are `harness run`'s
(`"eval=thorough prompt.hardware=H200 context.policy=last_k"`), so a task and a run with the same settings send the
same prompts and get the same verdicts. With `server=URL` a `harness serve` judges instead, with its own settings.
"""

from __future__ import annotations

import shlex
from typing import Any

import torch
from inspect_ai import Task, task
from inspect_ai.dataset import Sample

from eval import DEFAULT_BACKEND
from harness.inspect.judge import Judge, LocalJudge, ServedJudge
from harness.inspect.scorer import kernel_scorer
from harness.inspect.selfcheck import fixture_reply, fixtures, selfcheck_scorer
from harness.inspect.solver import chat, kernel_turns
from harness.overrides import compose_config
from problems import select_problems


def _judge(overrides: list[str], server: str | None) -> tuple[Judge, dict[str, Any]]:
    """The judge, in process or served, and the `harness run` config these overrides give."""
    config = compose_config(overrides)
    return (ServedJudge(server, config["backend"]) if server else LocalJudge(config)), config


@task
def kernels(problems: str = "smoke", turns: int = 1, backend: str = DEFAULT_BACKEND, overrides: str = "",
            server: str | None = None) -> Task:
    """Each problem of the selection over `turns` turns, scored by our evaluator; fast_p as metrics."""
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    judge, config = _judge([f"problems.spec='{problems}'", f"backend={backend}", *shlex.split(overrides)], server)
    selected = {p.id: p for p in select_problems(str(config["problems"]["spec"]))}
    dataset = [Sample(id=p.id, input=chat(judge.messages(p, [])), metadata={"level": p.level, "name": p.name})
               for p in selected.values()]
    return Task(dataset=dataset, solver=kernel_turns(judge, selected, turns), scorer=kernel_scorer(judge, selected))


@task
def kernels_selfcheck(gpu: bool | None = None, overrides: str = "", server: str | None = None) -> Task:
    """Known-verdict fixtures through the real scorer; fails loudly when a verdict differs. `gpu=true` on a GPU
    machine (the default is what torch sees, so a machine whose CUDA is broken would be checked as a CPU)."""
    expected = fixtures(torch.cuda.is_available() if gpu is None else gpu)
    by_name = {f.name: f for f in expected}
    judge, _ = _judge(["eval.cache_dir=null", *shlex.split(overrides)], server)  # judged now, never from a cache
    dataset = [Sample(id=f.name, input=f"The self-check's {f.name} fixture ({f.problem.id})", target=f.expected.value,
                      metadata={"expected": f.expected.value, "timed": f.timed}) for f in expected]
    return Task(dataset=dataset, solver=fixture_reply(by_name), scorer=selfcheck_scorer(judge, by_name),
                fail_on_error=True)
