"""Profiles on a GPU with Nsight Compute (`eval.profile`, issue 57; run on the device: `pytest -m gpu`, as root).

A 3-turn `harness run` against a local mock LLM whose turn-2 prompt carries the profile of turn 1, and the profiles of
the 15 reference solutions, checked against their problems' bytes and FLOPs. Each test prints its figures (the time a
profile adds among them); with KH_PROFILE_SUMMARY set, the solutions' table is also written there as JSON, and
KH_PROFILE_PROBLEMS picks some of the solutions (a problem selection: `L1/*`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from eval import EvalConfig, Evaluator, Job, Status
from eval.profiling.render import HEADER
from harness.cli import main
from harness.corpus import candidates
from problems import select_problems, solution_path
from tests.fakes.llm_server import FakeLLMServer, reply
from tests.run_fixtures import fenced

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")]

KEY = "sk-profile-test-1a2b3c"
N = 1 << 24  # 16M float32 elements a side: memory-bound, well past the L2


def _user_messages(server: FakeLLMServer, i: int) -> list[str]:
    return [m["content"] for m in server.requests[i].body["messages"] if m["role"] == "user"]


def test_the_turn_2_prompt_carries_turn_1s_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = tmp_path / "add_relu_scale.py"
    problem.write_text(candidates.problem_source(N))
    kernels = [candidates.triton_candidate(1024, 4), candidates.triton_candidate(2048, 8),
               candidates.triton_candidate(4096, 8)]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeLLMServer(api_key=KEY) as server:
        server.script(*[reply(fenced(k, f"Attempt {i + 1}.")) for i, k in enumerate(kernels)])
        code = main(["run", f"runs_dir={tmp_path / 'runs'}", f"problems.spec=file:{problem}", "turns=3", "samples=1",
                     "agent=openai", f"agent.base_url={server.openai_base_url}", "agent.model=fake-coder",
                     "name=profiled", f"eval.cache_dir={tmp_path / 'cache'}", "eval.profile=full",
                     "prompt.profile_chars=1200", "prompt.hardware=null", "quiet=true"])
        assert code == 0
        turn2 = _user_messages(server, 1)[-1]
    lines = [json.loads(line) for line in (tmp_path / "runs" / "profiled" / "results.jsonl").read_text().splitlines()]
    assert [x["status"] for x in lines] == ["correct"] * 3, [x["result"]["reason"] for x in lines]
    profile = lines[0]["result"]["profile"]
    added = [x["result"]["profile"]["seconds"] for x in lines]
    print(f"\nturn-2 feedback:\n{turn2}\nprofile seconds per evaluation: {added}; evaluation seconds: "
          f"{[round(x['result']['eval_seconds'], 1) for x in lines]}")
    assert HEADER in turn2, turn2
    block = turn2[turn2.index(HEADER):]
    assert "Not available" not in block, f"no profile on this GPU: {profile['note']}"
    assert "Your kernels:" in block and "- add_relu_kernel:" in block and "DRAM " in block and "stalls:" in block
    assert "The reference's main kernels (PyTorch):" in block
    assert len(block) <= 1200 + 80  # prompt.profile_chars, and the line that says it was cut
    own = [k for k in profile["candidate"]["kernels"] if k["own"]]
    assert [k["name"] for k in own] == ["add_relu_kernel"] and profile["seconds"] > 0


def _solution_jobs() -> list[Job]:
    """The solutions of KH_PROFILE_PROBLEMS (a selection, `all` by default: all 15, in one call of a few minutes)."""
    spec = os.environ.get("KH_PROFILE_PROBLEMS", "all")
    problems = [p for p in select_problems(spec) if solution_path(p) is not None]
    assert len(problems) == 15 or spec != "all", [p.id for p in problems]
    return [Job(p, solution_path(p).read_text()) for p in problems]


def test_the_reference_solutions_profiles_are_plausible_against_their_bytes_and_flops(tmp_path: Path) -> None:
    config = EvalConfig(device="cuda", profile="basic", cache_dir=str(tmp_path / "cache"))
    jobs = _solution_jobs()
    with Evaluator(config) as ev:
        results = ev.evaluate_many(jobs)
    rows = []
    for job, r in zip(jobs, results):
        problem = job.problem
        assert r.status is Status.CORRECT, (r.problem_id, r.reason)
        p = r.profile
        assert p is not None and p.candidate is not None and p.candidate.kernels, (r.problem_id, p and p.note)
        call = p.candidate.kernels
        own = [k for k in call if k.own]
        assert own, (r.problem_id, [k.name for k in call])
        moved = sum(k.dram_bytes or 0 for k in call)
        counted = sum(k.flops or 0 for k in call)
        seconds = sum(k.time_ns for k in call) * 1e-9
        rows.append({"problem": r.problem_id, "own_share": sum(k.share for k in own), "dram_bytes": moved,
                     "meta_bytes": problem.bytes_moved, "flops": counted, "meta_flops": problem.flops,
                     "ncu_time_us": seconds * 1e6, "timed_us": r.candidate_timing.median_ms * 1e3,
                     "dram_pct": max(k.dram_pct or 0 for k in own), "sm_pct": max(k.sm_pct or 0 for k in own),
                     "occupancy_pct": [k.occupancy_pct for k in own], "registers": [k.registers for k in own],
                     "spills": [k.spills for k in own], "profile_s": p.seconds, "eval_s": r.eval_seconds,
                     "note": p.note})
        for k in own:  # what a counter can be at all
            assert 0 <= (k.dram_pct or 0) <= 101 and 0 <= (k.sm_pct or 0) <= 101, (r.problem_id, k)
            assert k.occupancy_pct is None or 0 < k.occupancy_pct <= 101, (r.problem_id, k)
            assert k.registers is None or 1 <= k.registers <= 255, (r.problem_id, k)
            assert k.spills is None or k.spills >= 0, (r.problem_id, k)
            if k.time_ns > 20_000 and k.bytes_per_s is not None:  # no kernel moves its bytes faster than the memory
                assert k.bytes_per_s <= 1.25 * p.peak_bytes_per_s, (r.problem_id, k.name, k.bytes_per_s)
        # every byte a correct forward must move came from DRAM (ncu flushes the caches before each pass), and not
        # much more than that moved: the solutions read and write each tensor a few times at most
        if problem.bytes_moved:
            assert 0.5 * problem.bytes_moved <= moved <= 20 * problem.bytes_moved, rows[-1]
        if problem.flops and counted:
            assert counted <= 20 * problem.flops, rows[-1]
        # a memory-bound solution runs near the bandwidth: its main own kernel's DRAM throughput is a good share of
        # the peak (the problem's FLOPs per byte far under the ridge, and its own kernels doing most of the work)
        if problem.bytes_moved and p.ridge and (problem.flops or 0) / problem.bytes_moved < p.ridge / 4:
            main_kernel = max(own, key=lambda k: k.time_ns)
            if main_kernel.time_ns > 20_000 and sum(k.share for k in own) > 0.8:
                assert (main_kernel.dram_pct or 0) >= 40, rows[-1]
        # the profiled call takes about the time the harness measured (no clock control, caches flushed per pass)
        assert 0.3 <= seconds * 1e3 / r.candidate_timing.median_ms <= 5, rows[-1]
    table = "\n".join(f"{x['problem']:34} own {x['own_share']:.0%}  DRAM {x['dram_bytes'] / 1e6:9.1f} MB (META "
                      f"{(x['meta_bytes'] or 0) / 1e6:9.1f})  FLOP {x['flops']:.3g} (META {x['meta_flops'] or 0:.3g})  "
                      f"ncu {x['ncu_time_us']:8.1f} us, timed {x['timed_us']:8.1f} us  DRAM {x['dram_pct']:.0f}% "
                      f"SM {x['sm_pct']:.0f}%  profile {x['profile_s']:.1f} s of {x['eval_s']:.1f} s" for x in rows)
    print("\n" + table)
    if os.environ.get("KH_PROFILE_SUMMARY"):
        Path(os.environ["KH_PROFILE_SUMMARY"]).write_text(json.dumps(rows, indent=1))
