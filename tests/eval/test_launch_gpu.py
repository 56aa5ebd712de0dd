"""Launch-bound timings on a GPU: the host-bound flag and the CUDA-graph timing mode (`pytest -m gpu`)."""

from __future__ import annotations

import pytest
import torch

from eval import EvalConfig, Evaluator, Status
from eval.timing.host_share import HOST_FLOOR_MS, HOST_SHARE_AT
from harness.corpus import candidates
from harness.corpus.candidates import TRITON_LAUNCH, edit
from problems.problem import problem_from_source

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# 200 steps of two tiny elementwise kernels and an add each (600 launches of 4096 elements) and a view: the
# GPU finishes each kernel in a microsecond or two, the host needs several to dispatch the next one
LAUNCH_BOUND = '''
import torch
import torch.nn as nn

N = 4096
STEPS = 200


class Model(nn.Module):
    def __init__(self, decay: float):
        super().__init__()
        self.decay = decay

    def forward(self, x, y):
        out = x
        for _ in range(STEPS):
            out = (out * self.decay + y * (1.0 - self.decay)).view(1, -1)[0]  # a view: host work, no kernel
        return out


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return [0.99]
'''

LAUNCH_BOUND_TRITON = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relax(x_ptr, y_ptr, out_ptr, n, decay, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    out = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask) * (1.0 - decay)
    for _ in range(STEPS):
        out = out * decay + y
    tl.store(out_ptr + offs, out, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, decay: float):
        super().__init__()
        self.decay = decay

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = out.numel()
        relax[(triton.cdiv(n, 1024),)](x, y, out, n, self.decay, STEPS=200, BLOCK=1024)
        return out
'''

# relu(x + y) * 1.5 over 16M elements (the benchmark problem): three eager kernels of tens of microseconds each
# (GPU-bound); the candidate is the benchmark's fused Triton kernel (the prompts' worked example with a scale)
_LAUNCH = f"        {TRITON_LAUNCH.format(warps=4)}\n"


def _with(extra: str, tag: str) -> str:
    """The fused candidate with `extra` run in forward just before its kernel launch, made distinct by `tag`."""
    return edit(candidates.triton_candidate(), _LAUNCH, extra + _LAUNCH) + f"\n# {tag}\n"


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    with Evaluator(EvalConfig(device="cuda", workers_per_gpu=2, cache_dir=str(tmp_path_factory.mktemp("c")))) as ev:
        yield ev


@pytest.fixture(scope="module")
def graphed(tmp_path_factory):
    with Evaluator(EvalConfig(device="cuda", workers_per_gpu=2, cuda_graphs="auto",
                              cache_dir=str(tmp_path_factory.mktemp("g")))) as ev:
        yield ev


@pytest.fixture(scope="module")
def launch_bound():
    return problem_from_source(LAUNCH_BOUND, name="relax_steps", problem_id="test/relax_steps")


@pytest.fixture(scope="module")
def large():
    return candidates.problem(1 << 24)


def test_launch_bound_reference_is_flagged(eager, launch_bound):
    r = eager.evaluate(launch_bound, LAUNCH_BOUND_TRITON)
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.timing_mode == "eager"
    assert r.host_share["reference"] >= HOST_SHARE_AT, (r.host_share, r.gpu_busy)
    # the candidate's one launch may take longer on the host than its kernel on the GPU, but under the GPU lead
    assert r.host_bound == ["reference"], (r.host_share, r.gpu_busy)
    assert any(f.startswith("host-bound:") for f in r.flags), r.flags


def test_gpu_bound_reference_is_not_flagged(eager, large):
    r = eager.evaluate(large, _with("", "plain"))
    assert r.status is Status.CORRECT, r.reason + r.error
    # the three eager ops take the host about as long as the GPU (H100 host: ~0.17 ms each way), but that is
    # enqueued while the GPU spins before the start event (eval.timing.host_share.HOST_FLOOR_MS), so it is not flagged
    for side in ("reference", "candidate"):  # a side is profiled only when its host time is over the floor
        if r.host_ms[side] > HOST_FLOOR_MS:
            assert r.gpu_busy[side] > 0.8, (r.host_ms, r.gpu_busy)
        else:
            assert side not in r.gpu_busy and side not in r.host_share, (r.host_ms, r.gpu_busy)
    assert r.host_bound == [] and not any(f.startswith("host-bound:") for f in r.flags), (
        r.host_ms, r.host_share, r.gpu_busy, r.flags)


def test_graph_mode_times_an_honest_candidate(graphed, eager, large):
    r = graphed.evaluate(large, _with("", "graphed"))
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.timing_mode == "cuda_graph", r.flags
    assert 1.5 < r.speedup < 4.5, r.speedup  # GPU-bound: about what eager timing gives
    e = eager.evaluate(large, _with("", "eager twin"))
    assert abs(r.speedup / e.speedup - 1) < 0.2, (r.speedup, e.speedup)


def test_graph_mode_removes_the_reference_launch_overhead(graphed, eager, launch_bound):
    g = graphed.evaluate(launch_bound, LAUNCH_BOUND_TRITON + "\n# graphed\n")
    e = eager.evaluate(launch_bound, LAUNCH_BOUND_TRITON + "\n# eager\n")
    assert g.status is Status.CORRECT and e.status is Status.CORRECT, g.reason + e.reason
    assert g.timing_mode == "cuda_graph"
    assert g.reference_timing.median_ms < 0.8 * e.reference_timing.median_ms, (g.reference_timing, e.reference_timing)
    assert g.host_bound == ["reference"]  # the busy share is of an eager call, whatever the timing mode
    assert any("CUDA-graph replays" in f for f in g.flags), g.flags


def test_uncapturable_candidate_falls_back_to_eager(graphed, large):
    r = graphed.evaluate(large, _with("        torch.cuda.synchronize()\n", "sync in forward"))
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.timing_mode == "eager"
    assert any(f.startswith("cuda_graphs: the candidate's forward could not be captured") for f in r.flags), r.flags
    assert r.speedup is not None


def test_skipped_work_is_still_caught_in_graph_mode(graphed, large):
    # honest in every eager call (trials, own-kernel profile, hidden-work check), lazy only while being captured
    # (it zeroes its output instead of computing it, so the graph is not empty): only the parent's check of the
    # timed replays' outputs (every repetition on fresh inputs) can catch it
    lazy = _with("        if torch.cuda.is_current_stream_capturing():\n            return out.zero_()\n",
                 "lazy when captured")
    r = graphed.evaluate(large, lazy)
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    assert r.reason.startswith("the output of timed repetition "), r.reason
    assert r.speedup is None
