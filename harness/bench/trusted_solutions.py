"""The 15 reference solutions through the two-process measurement on a GPU, twice in one session: verdicts,
speedups, repeatability (max/min per problem) and the batch rate with fresh workers.

Run on a GPU machine from the project root: `PYTHONPATH=. python3 -m harness.bench.trusted_solutions`."""
import json, statistics, sys, time
from pathlib import Path
from eval import EvalConfig, Evaluator, Status
from eval.evaluator import Job
from problems.suite import suite_problem
from tests.test_problems_solutions import LEVELS, _solutions

out = {}
t0 = time.time()
with Evaluator(EvalConfig(device="cuda", cache_dir=None)) as ev:
    ev.wait_warm(300)
    print("warm", round(time.time() - t0, 1), flush=True)
    jobs = [Job(suite_problem(f"{LEVELS[p.parent.name]}/{p.stem}"), p.read_text(), "triton") for p in _solutions()]
    for rnd in range(2):
        t = time.time()
        res = ev.evaluate_many(jobs)
        wall = time.time() - t
        for j, r in zip(jobs, res):
            out.setdefault(j.problem.id, []).append(r.speedup)
            print(rnd, j.problem.id, r.status.value, r.reason[:200], "speedup", r.speedup,
                  "wall", r.wall_bound, "phases", {k: v for k, v in r.phase_seconds.items() if v > 0.05}, flush=True)
        ok = sum(r.status is Status.CORRECT for r in res)
        print(f"round {rnd}: {ok}/{len(res)} correct, {len(res)} in {wall:.1f}s = {len(res) / wall * 60:.1f}/min", flush=True)
for pid, s in out.items():
    if None not in s:
        print("repeat", pid, [round(x, 3) for x in s], "max/min", round(max(s) / min(s), 4))
