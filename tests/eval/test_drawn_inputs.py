"""Timing inputs drawn by the worker from seeds the parent chose (so large inputs never cross the boundary; the
correctness trials are always carried, `tests/eval/test_trial_requests.py`): the draw matches the parent's, a problem
whose draw is not reproducible across processes falls back to carried inputs without a false verdict, and a candidate
that tampers with the worker's draw gains nothing."""

from __future__ import annotations

import pytest
import torch

from eval import Status
from harness.corpus import candidates
from problems import runtime
from problems.problem import problem_from_source
from tests.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # every test runs sandboxed evaluator workers
N = 1 << 12


EVALUATOR = dict(device="cpu", cache_dir=None, workers_per_gpu=1, call_timeout_s=20, import_timeout_s=60)


def test_fingerprint_is_exact_and_short():
    problem = runtime.load_source(candidates.problem_source(N), "<p>")
    a = runtime.draw_inputs(problem, 7, "cpu")
    assert runtime.input_fingerprint(a) == runtime.input_fingerprint(runtime.draw_inputs(problem, 7, "cpu"))
    assert runtime.input_fingerprint(a) != runtime.input_fingerprint(runtime.draw_inputs(problem, 8, "cpu"))
    b = [t.clone() for t in a]
    b[1][-1] += 1e-6  # the last element is always among the values sampled
    assert runtime.input_fingerprint(a) != runtime.input_fingerprint(b)
    odd = [torch.zeros(0), torch.ones(3, dtype=torch.bool), torch.randn(5, dtype=torch.complex64), 3, None,
           torch.randn(4, 4).t()]
    prints = runtime.input_fingerprint(odd)
    assert len(prints) == len(odd) and prints[3:5] == ["3", "None"]
    assert all(len(p) < 4096 for p in runtime.input_fingerprint([torch.randn(1 << 20)]))


def test_honest_candidate_with_worker_draws(evaluator):
    result = evaluator.evaluate(candidates.problem(N), candidates.triton_candidate())
    assert result.status is Status.CORRECT, result.reason
    assert not any("inputs carried" in f for f in result.flags)


def test_a_draw_that_differs_between_processes_falls_back_to_carried_inputs():
    """The trials are carried, so they judge such a problem as any other; the timing sets (staged where timings are
    taken: `eval.cpu_timing` runs that pipeline on the CPU) fall back to carried sets, and the result says so."""
    from eval import EvalConfig, Evaluator

    # get_inputs() adds a number each process draws once from the OS: the worker's draw from a seed is not the
    # parent's. (Not the process id: a worker's id in its own PID namespace can equal the parent's modulo anything.)
    source = candidates.problem_source(N).replace(
        "    return [torch.randn(N), torch.randn(N)]",
        "    return [torch.randn(N) + _PER_PROCESS, torch.randn(N)]") + (
        "\nimport os\n_PER_PROCESS = 1 + int.from_bytes(os.urandom(6), 'little') / 2 ** 48\n")
    assert source != candidates.problem_source(N)
    problem = problem_from_source(source, name="unrepeatable_draw", problem_id="test/unrepeatable_draw")
    with Evaluator(EvalConfig(**EVALUATOR, cpu_timing=True)) as timed:
        result = timed.evaluate(problem, candidates.triton_candidate() + "\n# unrepeatable\n")
        assert result.status is Status.CORRECT, result.reason
        assert any("inputs carried" in f for f in result.flags)
        wrong = candidates.triton_candidate().replace("tl.maximum(a + b, 0.0)", "tl.maximum(a - b, 0.0)")
        assert wrong != candidates.triton_candidate()
        assert timed.evaluate(problem, wrong).status is Status.INCORRECT


TAMPER_RUNTIME = '''
import torch
from problems import runtime

_real = runtime.draw_inputs


def _zeros(module, seed, device, extra_index=None, on_cpu=False):
    return [torch.zeros_like(t) if isinstance(t, torch.Tensor) else t for t in _real(module, seed, device, extra_index, on_cpu)]


runtime.draw_inputs = _zeros
'''

TAMPER_WORKER = '''
import sys, torch

_serve = sys.modules["eval.worker.serve"]
_real = _serve.Worker._draw


def _zeros(self, seed, extra, on_cpu):
    return [torch.zeros_like(t) if isinstance(t, torch.Tensor) else t for t in _real(self, seed, extra, on_cpu)]


_serve.Worker._draw = _zeros
'''


@pytest.mark.parametrize("tamper, replaced", [(TAMPER_RUNTIME, "problems.runtime.draw_inputs"),
                                              (TAMPER_WORKER, "eval.worker.serve.Worker._draw")])
def test_a_candidate_that_makes_the_draw_easy_is_rejected(evaluator, tamper, replaced):
    # inputs of zeros, and a kernel that is right only for them
    lazy = candidates.triton_candidate().replace("tl.maximum(a + b, 0.0)", "tl.maximum(a + b, 0.0) * 0.0")
    assert lazy != candidates.triton_candidate()
    result = evaluator.evaluate(candidates.problem(N), tamper + lazy)
    assert result.status is Status.REJECTED and f"replaced {replaced}" in result.reason, (result.status, result.reason)


def test_a_candidate_whose_parameters_refuse_the_copy_keeps_its_own_same_seed_ones(evaluator):
    """A published kernel (CUDA-L1) builds its parameters under `torch.inference_mode()`: copying the reference's
    parameters into them raises "Inplace update to inference tensor outside InferenceMode". KernelBench copies
    nothing (both models are built after the same seed), so the candidate keeps its own, built after the same seed
    as the reference, is judged on them, and the result says which state was used."""
    from problems.suite import suite_problem

    solution = (REPO / "problems/solutions/level1/16_rms_norm.py").read_text()
    built_under_inference = candidates.edit(solution, "        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)\n",
                                            "        with torch.inference_mode():\n"
                                            "            self.weight = nn.Parameter(torch.rand(hidden) + 0.5)\n")
    r = evaluator.evaluate(suite_problem("L1/16_rms_norm"), built_under_inference)
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-600:]}"
    assert any(f.startswith("state: the reference's parameters could not be copied") and "inference tensor" in f
               for f in r.flags), r.flags


def test_a_problem_too_big_for_a_cpu_worker_is_skipped_with_its_size(evaluator):
    """A KernelBench problem has no reduced sizes: at full size on a CPU its inputs alone can exceed a worker's
    memory (a 6.4 GB softmax input on a laptop). It is skipped before any worker draws them, naming the size, the
    limit and how to proceed."""
    big = problem_from_source(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return torch.softmax(x, dim=-1)\n\n\nbatch_size = 4096\ndim = 393216\n\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n",
        name="big_softmax", problem_id="t/big_softmax")
    r = evaluator.evaluate(big, candidates.triton_candidate())
    assert r.status is Status.SKIPPED, f"{r.status}: {r.reason}"
    assert "this problem needs about" in r.reason and "eval.max_worker_memory_gib" in r.reason, r.reason
    assert "META['small']" in r.reason and r.trials == 0
