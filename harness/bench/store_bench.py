"""`harness bench store`: a large synthetic run written through the run store, then resume, `harness report` and
the report page timed, with peak memory.

The run looks like a study's: every problem of the suite (`problems.spec=all`), `samples` chosen to reach about
`--attempts`, up to 10 turns with full-context prompts built by the real `PromptBuilder` (each turn's prompt holds
every earlier reply and feedback), distinct replies and code, mixed statuses with their feedback, and GPU-like
timings, tokens and cost. A trajectory ends at turn 10, at a refused request (`agent_error`), or when a correct
attempt reaches the target speedup (3.0x), so the stored run is finished and a resume plans nothing.

Each step is timed in a child process started by a small wrapper that reports the child's wall time and the
peak resident memory of its largest process (`RUSAGE_CHILDREN`); the page is loaded from its file in headless
Chromium (`harness.devtools`) and a transcript is opened, each timed in the page. The exact command that resumes
the synthetic run is printed. Progress goes to stderr as it happens, each line with its `[done/total, elapsed]`
counter: one per problem synthesized, then one per timed step and per comparison run.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from agents import PromptBuilder, TurnRecord
from eval import EvalResult, KernelShare, Mismatch, Status, Timing, render_feedback
from harness.loop import best_key
from harness.progress import Tally
from harness.store import Attempt, RunStore
from problems import select_problems

TURNS = 10
TARGET_SPEEDUP = 3.0
NAME = "bench-store"
DEVICE = "NVIDIA H100 80GB HBM3 (sm_90)"
VERSIONS = {"torch": "2.13.0+cu128", "triton": "3.9.0", "cuda": "12.8", "python": "3.11.7"}
PRICES = (2.5, 10.0)  # USD per million input / output tokens
# Targets on a 2-core machine: seconds and MB.
TARGETS = {"resume_s": 15, "resume_mb": 500, "report_s": 30, "report_mb": 1000, "page_mb": 25, "page_load_s": 5,
           "transcript_s": 1, "comparison_page_mb": 10}  # fmt: skip
COMPARED = 20  # runs in the comparison
COMPARED_ATTEMPTS = 500  # about this many each (whole trajectories: the count is approximate)
_STATUSES = [(Status.CORRECT, 0.36), (Status.INCORRECT, 0.24), (Status.COMPILE_ERROR, 0.2),
             (Status.RUNTIME_ERROR, 0.1), (Status.FORMAT_ERROR, 0.05), (Status.TIMEOUT, 0.02),
             (Status.REJECTED, 0.02), (Status.CRASH, 0.01)]  # fmt: skip
_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "with open(sys.argv[1], 'w') as out:\n"
    "    rc = subprocess.call(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)\n"
    "wall = time.perf_counter() - t\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
    "print(json.dumps({'rc': rc, 'wall_s': round(wall, 2), 'peak_mb': round(peak, 1)}))\n"
)


def resume_argv(out: Path, samples: int, name: str = NAME) -> list[str]:
    """`harness run` overrides of the synthetic run: the same config, so running them resumes it."""
    return [f"runs_dir={out}", f"name={name}", "agent=reference", "problems.spec=all", f"turns={TURNS}",
            f"samples={samples}", f"target_speedup={TARGET_SPEEDUP}", "prompt.hardware=null"]  # fmt: skip


def _config(argv: list[str], name: str) -> dict[str, Any]:
    """The config `harness run` resolves from these overrides (what it stores and compares on resume)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="harness.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=argv)
    config: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    config["name"] = name
    return config


def _code(rng: random.Random, problem_id: str, sample: int, turn: int) -> str:
    """A distinct Triton-like candidate of about 2 KB."""
    block = rng.choice((64, 128, 256, 512, 1024))
    lines = [
        "import torch", "import triton", "import triton.language as tl", "",
        f"# {problem_id} sample {sample} turn {turn}: BLOCK={block}", "",
        "@triton.jit",
        "def _kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):",
        "    pid = tl.program_id(0)",
        "    offs = pid * BLOCK + tl.arange(0, BLOCK)",
        "    mask = offs < n",
        "    x = tl.load(x_ptr + offs, mask=mask)",
        "    y = tl.load(y_ptr + offs, mask=mask)",
    ]
    for i in range(rng.randint(8, 24)):
        lines.append(f"    x = x * {rng.uniform(0.5, 1.5):.6f} + y * {rng.uniform(-1, 1):.6f}  # step {i}")
    lines += [
        "    tl.store(out_ptr + offs, x, mask=mask)", "",
        "class ModelNew(torch.nn.Module):",
        "    def forward(self, x, y):",
        "        out = torch.empty_like(x)",
        "        n = out.numel()",
        f"        _kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block})",
        "        return out", "",
    ]  # fmt: skip
    return "\n".join(lines)


def _timing(rng: random.Random, median: float) -> Timing:
    return Timing(median_ms=median, iqr_ms=median * rng.uniform(0.005, 0.03), n=rng.randint(50, 400),
                  rel_stderr=rng.uniform(0.001, 0.01), min_ms=median * 0.97)  # fmt: skip


def _result(rng: random.Random, problem_id: str, status: Status) -> EvalResult:
    """A verdict shaped like a GPU evaluator's, with the details its status carries."""
    r = EvalResult(status=status, reason=f"synthetic {status}", problem_id=problem_id, device=DEVICE,
                   versions=dict(VERSIONS), trials=5, eval_seconds=rng.uniform(2, 12),
                   phase_seconds={"build": rng.uniform(1, 8), "trials": rng.uniform(0.5, 2), "time": rng.uniform(0.5, 2)})  # fmt: skip
    if status is Status.CORRECT:
        ref = rng.uniform(0.05, 5.0)
        speedup = math.exp(rng.gauss(-0.1, 0.5))
        r.speedup, r.timing_meaningful = speedup, True
        r.candidate_timing, r.reference_timing = _timing(rng, ref / speedup), _timing(rng, ref)
        r.sol_fraction = min(1.0, rng.uniform(0.05, 0.9))
        r.kernels = KernelShare(own_kernels_launched=["_kernel"], own_kernels_defined=["_kernel"],
                                own_time_fraction=rng.uniform(0.6, 1.0), top_kernels=[("_kernel", ref / speedup)])
        r.reason = f"correct on {r.trials} trials; {speedup:.2f}x the reference"
    elif status is Status.INCORRECT:
        r.mismatch = Mismatch(output=0, reason="values differ", max_abs_err=rng.uniform(0.01, 3),
                              max_rel_err=rng.uniform(0.01, 1), worst_index=[rng.randint(0, 99), rng.randint(0, 99)],
                              mismatch_fraction=rng.uniform(0.001, 1))
    elif status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.CRASH):
        r.error = "\n".join(f"  File \"candidate.py\", line {rng.randint(1, 60)}, in forward\n    x = x * y"
                            for _ in range(rng.randint(3, 12))) + "\nRuntimeError: synthetic failure"
    return r


def _reply(code: str, rng: random.Random) -> str:
    prose = " ".join(rng.choice(("fuse", "tile", "the loads", "vectorize", "mask", "the tail", "coalesce",
                                 "reduce", "registers", "occupancy")) for _ in range(rng.randint(40, 120)))
    return f"{prose}\n\n```python\n{code}```\n"


def synthesize(out: Path, attempts: int, seed: int = 0, name: str = NAME,
               progress: TextIO | None = None) -> tuple[Path, list[str], int]:
    """Write the synthetic run `out/name`; return its directory, the `harness run` overrides that resume it,
    and how many attempts it holds. With `progress`, a counter line there as each problem's trajectories are
    written (the large run takes minutes)."""
    problems = select_problems("all")
    tally = Tally(len(problems))
    samples = max(1, round(attempts / (len(problems) * 9.8)))  # trajectories average about 9.8 turns
    argv = resume_argv(out, samples, name)
    config = _config(argv, name)
    prompts = PromptBuilder("triton", hardware=None)
    rng = random.Random(seed)
    clock = time.time() - 86400.0
    n = 0
    weights = [w for _, w in _STATUSES]
    with RunStore.open(out / name, config, durable=False) as store:
        store.begin_session()
        for problem in problems:
            before = n
            for sample in range(1, samples + 1):
                history: list[Attempt] = []
                for turn in range(1, TURNS + 1):
                    records = [TurnRecord(turn=a.turn, reply=a.reply, code=a.code, feedback=a.feedback) for a in history]
                    prompt = [{"role": m.role, "content": m.content} for m in prompts.messages(problem.source, records)]
                    prompt_chars = sum(len(m["content"]) for m in prompt)
                    base = dict(problem_id=problem.id, sample=sample, turn=turn, prompt=prompt,
                                problem_hash=problem.source_hash, model="gpt-4o", requests=1)  # fmt: skip
                    if rng.random() < 0.002:
                        attempt = Attempt(status=Status.AGENT_ERROR, error="HTTP 400: the request was rejected (synthetic)",
                                          started_at=clock, finished_at=clock + 1, **base)  # fmt: skip
                    else:
                        status = rng.choices([s for s, _ in _STATUSES], weights)[0]
                        code = _code(rng, problem.id, sample, turn)
                        result = _result(rng, problem.id, status)
                        reply = _reply(code, rng)
                        latency, eval_s = rng.lognormvariate(2.5, 0.6), result.eval_seconds
                        tokens_in, tokens_out = prompt_chars // 4, len(reply) // 4
                        attempt = Attempt(
                            status=status, reply=reply, code=code, result=result, feedback=render_feedback(result),
                            speedup=result.speedup, input_tokens=tokens_in, output_tokens=tokens_out,
                            cost_usd=(tokens_in * PRICES[0] + tokens_out * PRICES[1]) / 1e6, latency_s=latency,
                            finish_reason="stop", eval_s=eval_s, started_at=clock, finished_at=clock + latency + eval_s,
                            **base,
                        )  # fmt: skip
                    best = max([*history, attempt], key=lambda a: best_key(a.status, a.speedup))
                    if best.status is Status.CORRECT:
                        attempt.best_turn, attempt.best_status, attempt.best_speedup = best.turn, best.status, best.speedup
                    clock = attempt.finished_at
                    store.record(attempt)
                    history.append(attempt)
                    n += 1
                    reached = attempt.best_speedup is not None and attempt.best_speedup >= TARGET_SPEEDUP
                    if attempt.status is Status.AGENT_ERROR or reached:
                        break
            if progress is not None:
                print(f"{tally.step()} synthesized {problem.id}: {n - before} attempts", file=progress, flush=True)
        store.end_session("finished")
    return out / name, argv, n


def measure(argv: list[str], log: Path) -> dict[str, Any]:
    """Run `argv` (output to `log`); its wall time, exit code and the peak memory of its largest process."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(log), *argv], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def page_timings(page: Path, profile: Path) -> dict[str, Any]:
    """Load the page from its file in headless Chromium; the load time, and the time to open a transcript (the
    last problem of the heatmap, clicked)."""
    from harness.devtools import Browser

    browser = Browser(profile, timeout=120)
    try:
        for domain in ("Runtime", "Page"):
            browser.call(f"{domain}.enable")
        t0 = time.perf_counter()
        browser.call("Page.navigate", url=page.resolve().as_uri())
        browser.wait_for("Page.loadEventFired")
        load_s = time.perf_counter() - t0
        opened = browser.js(
            "(async () => { const cells = document.querySelectorAll('#plot-heatmap g.cell[data-run]');"
            " const t = performance.now(); cells[cells.length - 1].dispatchEvent(new MouseEvent('click', {bubbles: true}));"
            " while (!document.querySelector('#tx-view article.turn')) { await new Promise(r => setTimeout(r, 5)); }"
            " return [performance.now() - t, document.querySelectorAll('#tx-view article.turn').length]; })()"
        )
        heap = browser.call("Runtime.getHeapUsage")
    finally:
        browser.close()
    return {"page_load_s": round(load_s, 2), "transcript_s": round(opened[0] / 1000, 3), "turns_shown": opened[1],
            "js_heap_mb": round(heap.get("usedSize", 0) / 2**20, 1)}  # fmt: skip


class _Steps:
    """The timed steps' counter: a line on `progress` (if any) as each step finishes."""

    def __init__(self, total: int, progress: TextIO | None) -> None:
        self._tally, self._progress = Tally(total), progress

    def done(self, text: str) -> None:
        if self._progress is not None:
            print(f"{self._tally.step()} {text}", file=self._progress, flush=True)


def _figures(figures: dict[str, Any]) -> str:
    """A measured step in a progress line: `4.2s, 310 MB, rc 0`."""
    return f"{figures['wall_s']}s, {figures['peak_mb']:.0f} MB, rc {figures['rc']}"


def _comparison(out: Path, steps: _Steps) -> dict[str, Any]:
    """`harness report` of `COMPARED` smaller synthetic runs at once: its time, memory and page size."""
    dirs, n = [], 0
    for i in range(COMPARED):
        run_dir, _, count = synthesize(out, COMPARED_ATTEMPTS, seed=1000 + i, name=f"run{i:02d}")
        dirs.append(str(run_dir))
        n += count
        steps.done(f"comparison run {i + 1}/{COMPARED} synthesized: {count} attempts")
    figures = measure([sys.executable, "-m", "harness.cli", "report", *dirs, "--out", str(out / "report")],
                      out / "report.log")  # fmt: skip
    steps.done(f"comparison report: {_figures(figures)}")
    page = out / "report" / "leaderboard.html"
    return {"runs": COMPARED, "attempts": n, **figures,
            "page_mb": round(page.stat().st_size / 2**20, 2) if page.exists() else None}  # fmt: skip


def run_store_bench(attempts: int, out: Path, *, browser: bool = True,
                    progress: TextIO | None = None) -> dict[str, Any]:
    """Synthesize, then time resume, report and the page; the figures beside the targets. With `progress`, a
    counter line there per problem synthesized, then per step (resume, report, page, each comparison run and
    the comparison's report)."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run_dir, argv, n = synthesize(out, attempts, progress=progress)
    report: dict[str, Any] = {"attempts": n, "synthesize_s": round(time.perf_counter() - t0, 1),
                              "db_mb": round((run_dir / "attempts.sqlite").stat().st_size / 2**20, 1)}  # fmt: skip
    steps = _Steps(2 + int(browser) + COMPARED + 1, progress)
    resume = [sys.executable, "-m", "harness.cli", "run", *argv]
    report["resume_command"] = shlex.join(["harness", "run", *argv])
    report["resume"] = measure(resume, out / "resume.log")
    steps.done(f"resume: {_figures(report['resume'])}")
    report_dir = out / "report"
    report["report"] = measure([sys.executable, "-m", "harness.cli", "report", str(run_dir), "--out", str(report_dir)],
                               out / "report.log")  # fmt: skip
    steps.done(f"report: {_figures(report['report'])}")
    page = report_dir / "leaderboard.html"
    report["page_mb"] = round(page.stat().st_size / 2**20, 2) if page.exists() else None
    if browser:
        if page.exists():
            report["page"] = page_timings(page, out / "chromium-profile")
            steps.done(f"page: loaded in {report['page']['page_load_s']}s")
        else:
            steps.done("page: not loaded (the report wrote none)")
    report["comparison"] = _comparison(out / "compare", steps)
    report["targets"] = TARGETS
    return report


def main(attempts: int, out: str, browser: bool = True) -> int:
    """Print the figures as JSON and the command that resumes the synthetic run; 1 if a step failed."""
    report = run_store_bench(attempts, Path(out), browser=browser, progress=sys.stderr)
    json.dump(report, sys.stdout, indent=2)
    print(f"\nresume the synthetic run with:\n  {report['resume_command']}")
    return 0 if report["resume"]["rc"] == 0 and report["report"]["rc"] == 0 else 1
