"""The inspect_ai tasks (`harness.inspect`), run by real inspect on its `mockllm` and `none` models, judged by the
real evaluator: on a CPU through the Triton interpreter, and (`gpu`) on a CUDA machine against `harness run`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalLog, list_eval_logs, read_eval_log
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT

from agents import TurnRecord, make_agent, visible_source
from eval import DEFAULT_PS, render_feedback
from harness.app import prompt_builder
from harness.cli import main
from harness.inspect.selfcheck import fixtures
from harness.verdict import extract_candidate
from harness.overrides import compose_config
from problems import Problem, select_problems
from tests.serve_fixtures import Server, cpu_overrides

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # sandboxed evaluations; the bound only catches hangs

TASKS = str(Path(__file__).resolve().parents[2] / "harness" / "inspect" / "tasks.py")
FAST = [f"fast_{p:g}" for p in DEFAULT_PS]


def scripted(problems: list[Problem], replies: dict[str, list[str]]) -> Callable[..., ModelOutput]:
    """mockllm's `custom_outputs`: for the problem whose source the first prompt shows, the reply of this turn."""

    def reply(messages: list[ChatMessage], *_: Any) -> ModelOutput:
        first = next(m.text for m in messages if m.role == "user")
        [problem] = [p for p in problems if visible_source(p.source).strip() in first]
        turn = 1 + sum(m.role == "assistant" for m in messages)
        output = ModelOutput.from_content(model="mockllm", content=replies[problem.id][turn - 1])
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # else mockllm fetches a tokenizer
        return output

    return reply


def run_kernels(tmp_path: Path, replies: dict[str, list[str]], **task_args: Any) -> EvalLog:
    """The `kernels` task loaded from its file, as `inspect eval` loads it; the log as the viewer reads it."""
    problems = select_problems(task_args["problems"])
    model = get_model("mockllm/model", custom_outputs=scripted(problems, replies))
    [log] = inspect_eval(f"{TASKS}@kernels", model=model, task_args=task_args, log_dir=str(tmp_path / "logs"),
                         display="none")
    return read_eval_log(log.location)


def selfcheck_cli(tmp_path: Path, *task_args: str) -> tuple[subprocess.CompletedProcess[str], EvalLog]:
    """The documented self-check command (`inspect eval-set`, which exits 1 when the task fails), and its log."""
    logs = tmp_path / "selfcheck-logs"
    args = [arg for value in task_args for arg in ("-T", value)]
    proc = subprocess.run([sys.executable, "-m", "inspect_ai", "eval-set", f"{TASKS}@kernels_selfcheck",
                           "--model", "none/none", "--retry-attempts", "0", "--log-dir", str(logs),
                           "--display", "plain", *args], capture_output=True, text=True)
    [info] = list_eval_logs(str(logs))
    return proc, read_eval_log(info)


def test_kernels_task_sends_our_prompts_and_feedback_and_scores_our_verdicts(tmp_path: Path) -> None:
    """Two turns on mockllm: a reply without code (format_error, and its feedback in the next prompt), then the
    hand-written solution (correct). The transcript is what `harness run` sends for the same replies."""
    [softmax] = select_problems("L1/13_softmax")
    no_code = "I would fuse the max and the sum into one pass, but I have no code yet."
    solution = make_agent({"kind": "reference"}).respond([], problem_id=softmax.id, sample=1, turn=2).text
    log = run_kernels(tmp_path, {softmax.id: [no_code, solution]}, problems=softmax.id, turns=2,
                      overrides=f"eval.device=cpu eval.cache_dir={tmp_path / 'cache'}")
    assert log.status == "success", log.error
    [sample] = log.samples
    score = sample.scores["kernel_scorer"]
    assert score.value == CORRECT and score.answer == "correct", score.explanation
    assert score.explanation.startswith("Status: correct\nReason: correct (CPU interpreter")
    assert [(t["turn"], t["status"]) for t in score.metadata["turns"]] == [(1, "format_error"), (2, "correct")]
    assert score.metadata["turn"] == 2 and score.metadata["speedup"] is None  # the interpreter times nothing
    # both of the solution's kernels: the wide rows past its own shapes take its path for rows past its widest tile
    assert score.metadata["result"]["kernels"]["own_kernels_launched"] == ["_softmax_online_kernel",
                                                                           "_softmax_row_kernel"]

    _, refused = extract_candidate(no_code, softmax.id, "triton")
    history = [TurnRecord(turn=1, reply=no_code, code=None, feedback=render_feedback(refused))]
    sent = prompt_builder(compose_config([]), "triton").messages(softmax.source, history)
    assert [(m.role, m.text) for m in sample.messages] == [(m.role, m.content) for m in sent] + [("assistant", solution)]

    metrics = log.results.scores[0].metrics
    assert metrics["correct"].value == 1.0 and metrics["compiled"].value == 1.0
    assert {name: metrics[name].value for name in FAST} == dict.fromkeys(FAST, 0.0)  # correct, but untimed


def test_kernels_task_through_harness_serve_gets_the_servers_prompts_and_verdicts(tmp_path: Path) -> None:
    [softmax] = select_problems("L1/13_softmax")
    solution = make_agent({"kind": "reference"}).respond([], problem_id=softmax.id, sample=1, turn=1).text
    with Server([*cpu_overrides(tmp_path, workers=1), "problems=smoke"]) as server:
        log = run_kernels(tmp_path, {softmax.id: [solution]}, problems=softmax.id, server=server.url)
        with server.http() as http:
            sent = http.post("/v1/messages", json={"problem": softmax.id, "history": []}).json()["messages"]
    assert log.status == "success", log.error
    [sample] = log.samples
    score = sample.scores["kernel_scorer"]
    assert score.answer == "correct" and score.metadata["result"]["device"] == "cpu (Triton interpreter)", score.explanation
    assert [(m.role, m.text) for m in sample.messages] == [(m["role"], m["content"]) for m in sent] + [("assistant", solution)]


def test_selfcheck_passes_on_a_cpu_through_the_documented_command(tmp_path: Path) -> None:
    proc, log = selfcheck_cli(tmp_path, "gpu=false", "overrides=eval.device=cpu")
    assert proc.returncode == 0 and log.status == "success", proc.stdout[-4000:] + proc.stderr[-4000:]
    verdicts = {s.id: s.scores["selfcheck_scorer"].answer for s in log.samples}
    assert verdicts == {f.name: f.expected.status.value for f in fixtures(gpu=False)}
    assert set(verdicts.values()) == {"correct", "incorrect", "rejected"}
    assert log.results.scores[0].metrics["accuracy"].value == 1.0


def test_selfcheck_fails_loudly_when_the_gpu_path_it_expects_is_missing(tmp_path: Path) -> None:
    """Told to expect a GPU (`gpu=true`) on a CPU: the honest fixtures come back untimed (and the side-stream one
    correct), so the task fails, names the fixture, and the command exits 1."""
    proc, log = selfcheck_cli(tmp_path, "gpu=true", "overrides=eval.device=cpu")
    assert proc.returncode == 1 and log.status == "error", proc.stdout[-4000:]
    assert "SelfCheckFailed" in log.error.message and "self-check fixture" in log.error.message, log.error.message


@pytest.mark.gpu
def test_on_a_gpu_the_selfcheck_passes_and_the_task_scores_match_harness_run(tmp_path: Path) -> None:
    """The smoke problems' reference replies through `harness run agent=reference` and through the task: the same
    verdicts, and speedups within run-to-run noise (a factor of 1.5)."""
    proc, log = selfcheck_cli(tmp_path, "gpu=true")
    assert proc.returncode == 0 and log.status == "success", proc.stdout[-4000:] + proc.stderr[-4000:]

    runs = tmp_path / "runs"
    assert main(["run", "agent=reference", "problems=smoke", "name=reference", f"runs_dir={runs}",
                 "eval.cache_dir=null", "quiet=true"]) == 0
    rows = [json.loads(line) for line in (runs / "reference" / "results.jsonl").read_text().splitlines()]
    run = {r["problem_id"]: r for r in rows}
    log = run_kernels(tmp_path, {pid: [r["reply"]] for pid, r in run.items()}, problems="smoke",
                      overrides="eval.cache_dir=null")
    assert log.status == "success", log.error
    scores = {s.id: s.scores["kernel_scorer"] for s in log.samples}
    assert {pid: s.answer for pid, s in scores.items()} == {pid: r["status"] for pid, r in run.items()}
    for pid, s in scores.items():
        ours, theirs = s.metadata["speedup"], run[pid]["speedup"]
        assert (ours is None) == (theirs is None), (pid, ours, theirs)
        assert ours is None or 1 / 1.5 <= ours / theirs <= 1.5, (pid, ours, theirs)
