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
from problems import Problem, select_problems


def _judge(config: dict[str, Any], problems: dict[str, Problem], server: str | None) -> Judge:
    """The judge of these problems (by sample id): in process under this `harness run` config, or served."""
    return ServedJudge(server, config["backend"], problems) if server else LocalJudge(config, problems)


@task
def kernels(problems: str = "smoke", turns: int = 1, backend: str = DEFAULT_BACKEND, overrides: str = "",
            server: str | None = None) -> Task:
    """Each problem of the selection over `turns` turns, scored by our evaluator; fast_p as metrics."""
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    config = compose_config([f"problems.spec='{problems}'", f"backend={backend}", *shlex.split(overrides)])
    judge = _judge(config, {p.id: p for p in select_problems(str(config["problems"]["spec"]))}, server)
    dataset = [Sample(id=p.id, input=chat(judge.messages(p, [])), metadata={"level": p.level, "name": p.name})
               for p in judge.problems.values()]
    return Task(dataset=dataset, solver=kernel_turns(judge, turns), scorer=kernel_scorer(judge))


@task
def kernels_selfcheck(gpu: bool | None = None, overrides: str = "", server: str | None = None) -> Task:
    """Known-verdict fixtures through the real scorer; fails loudly when a verdict differs. `gpu=true` on a GPU
    machine (the default is what torch sees, so a machine whose CUDA is broken would be checked as a CPU)."""
    found = fixtures(torch.cuda.is_available() if gpu is None else gpu)
    config = compose_config(["eval.cache_dir=null", *shlex.split(overrides)])  # judged now, never from a cache
    judge = _judge(config, {f.name: f.problem for f in found}, server)
    dataset = [Sample(id=f.name, input=f"The self-check's {f.name} fixture ({f.problem.id})",
                      target=f.expected.status.value, metadata={"timed": f.expected.timed}) for f in found]
    return Task(dataset=dataset, solver=fixture_reply({f.name: f.code for f in found}),
                scorer=selfcheck_scorer(judge, {f.name: f.expected for f in found}), fail_on_error=True)
