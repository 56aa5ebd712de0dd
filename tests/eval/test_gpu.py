"""Evaluator checks that need a CUDA GPU (run on the device machine: `pytest -m gpu`)."""

from __future__ import annotations

import pytest
import torch

from eval import Status
from harness.corpus import candidates
from harness.corpus.candidates import TRITON_LAUNCH, edit

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

FORWARD = "        return out\n"
ALLOC = "        out = torch.empty_like(a)\n"
LAUNCH = f"        {TRITON_LAUNCH.format(warps=4)}\n"
# Which defence fires first for these two: phase detection passes the trials and is caught by the
# check of randomly sampled timed repetitions (every repetition has fresh inputs, redrawn by the parent);
# the pointer-keyed memo is caught by the second correctness trial, whose inputs sit at the first one's
# addresses with new values. (Before the worker kept trial inputs at stable addresses, that depended on
# the allocator: on the H100, 2026-11-25, the memo missed every trial and only the timed check caught it.)
PHASE_DETECTION_STATUS, PHASE_DETECTION_PHRASE = Status.INCORRECT, "the output of timed repetition"
POINTER_CACHE_STATUS, POINTER_CACHE_PHRASE = Status.INCORRECT, "values differ"
# a correctness trial's reason (the first whose shapes repeat one seen); the timed repetitions' says "(fresh inputs)"
POINTER_CACHE_DEFENCE = "(trial "


EVALUATOR = dict(device="cuda")  # no cache_dir: a fresh result cache for this module


@pytest.fixture(scope="module")
def problem():
    return candidates.problem(1 << 24)


def _good(evaluator, problem):
    r = evaluator.evaluate(problem, candidates.triton_candidate(1024, 4) + f"\n# {id(object())}\n")
    assert r.status is Status.CORRECT, r.reason + r.error


def test_triton_candidate_timed(evaluator, problem):
    r = evaluator.evaluate(problem, candidates.triton_candidate(1024, 4))
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.timing_meaningful and r.speedup is not None
    # eager runs three memory-bound kernels, the fused kernel one: about 2-3x on a big input
    assert 1.5 < r.speedup < 4.5, r.speedup
    assert r.kernels.own_kernels_launched == ["add_relu_kernel"]
    assert r.kernels.own_time_fraction is not None and r.kernels.own_time_fraction > 0.9
    assert r.candidate_timing.rel_stderr < 0.05


def test_cuda_candidate(evaluator, problem):
    r = evaluator.evaluate(problem, candidates.cuda_candidate("gputest", 256), backend="cuda")
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.kernels.own_kernels_launched == ["add_relu_scale_cuda_gputest"]
    assert r.speedup is not None and r.speedup > 1.5


def _built(evaluator, tag: str) -> list[str]:
    """The extension folders the evaluator's builds of candidate `tag` made, by name."""
    return sorted(p.name for p in evaluator._builder.root.glob(f"*/add_relu_scale_{tag}*") if p.is_dir())


def test_cuda_candidate_runs_its_light_build(evaluator, problem):
    r = evaluator.evaluate(problem, candidates.cuda_candidate("lighttest", 256), backend="cuda")
    assert r.status is Status.CORRECT, r.reason + r.error
    assert _built(evaluator, "lighttest") == ["add_relu_scale_lighttest_kh_light"]  # the light .cu, and nothing else


def test_a_cuda_candidate_needing_torch_extension_h_falls_back_once(evaluator, problem):
    # torch::nn is in the C++ frontend, which torch/types.h lacks: the light .cu cannot build
    source = candidates.cuda_candidate("heavytest", 256, "using KhNeedsTheFrontend = torch::nn::ReLUOptions;")
    r = evaluator.evaluate(problem, source, backend="cuda")
    assert r.status is Status.CORRECT, r.reason + r.error
    built = _built(evaluator, "heavytest")
    assert built == ["add_relu_scale_heavytest", "add_relu_scale_heavytest_kh_light"], built
    folder = next(evaluator._builder.root.glob("*/add_relu_scale_heavytest"))
    # the GPU worker loaded the build made ahead under the same name: torch renames a rebuild name_v1
    assert not list(folder.glob("*_v1*")), sorted(p.name for p in folder.iterdir())


def test_cuda_compile_error(evaluator, problem):
    r = evaluator.evaluate(problem, candidates.cuda_candidate("broken", 256, "this is not C++;"), backend="cuda")
    assert r.status is Status.COMPILE_ERROR, r.reason
    assert "error" in r.error.lower()


@pytest.mark.parametrize("source", [
    edit(candidates.triton_candidate(), "tl.store(out_ptr + offsets,", "tl.store(out_ptr + offsets + (1 << 40),"),
    candidates.cuda_candidate("oobtest", 256).replace("out[i] =", "out[i + (1L << 40)] ="),
])
def test_illegal_memory_access_then_next_is_fine(evaluator, problem, source):
    r = evaluator.evaluate(problem, source, backend="cuda" if "load_inline" in source else "triton")
    # the sticky CUDA error surfaces at the worker's synchronisation after forward: a runtime error naming it
    assert r.status is Status.RUNTIME_ERROR, f"{r.status}: {r.reason}"
    assert "illegal memory access" in (r.reason + r.error).lower(), r.reason + r.error
    _good(evaluator, problem)


SIDE_STREAM = edit(
    candidates.triton_candidate(), LAUNCH,
    "        side = self.__dict__.setdefault('side', torch.cuda.Stream())\n"
    "        side.wait_stream(torch.cuda.current_stream())\n"
    "        with torch.cuda.stream(side):\n"
    "            for _ in range(30):\n"
    "                torch.sin(a)\n"
    "    " + LAUNCH,
)


def test_side_stream_work_is_rejected(evaluator, problem):
    assert "torch.cuda.stream(side)" in SIDE_STREAM
    r = evaluator.evaluate(problem, SIDE_STREAM)
    # correctness trials synchronise the device, so they pass; the hidden-work check, before any timing, must fire
    assert r.status is Status.REJECTED and r.reason.startswith("integrity: "), f"{r.status}: {r.reason}"
    assert "hidden_work" in r.phase_seconds and "timing" not in r.phase_seconds, (r.phase_seconds, r.reason)
    _good(evaluator, problem)


def test_phase_detection_is_caught(evaluator, problem):
    """Honest for as many calls as the correctness trials take (an honest twin's count, plus two), then it skips the
    kernel: lazy from a call that falls inside the timing checks, whose outputs are checked too."""
    honest = evaluator.evaluate(problem, candidates.triton_candidate() + "\n# phase twin\n")
    assert honest.status is Status.CORRECT, honest.reason
    source = edit(
        candidates.triton_candidate(), ALLOC,
        ALLOC + "        self.calls = getattr(self, 'calls', 0) + 1\n"
        f"        if self.calls > {honest.trials + 2}:\n            return out\n",
    )
    r = evaluator.evaluate(problem, source)
    assert r.status is PHASE_DETECTION_STATUS, f"{r.status}: {r.reason}"
    assert PHASE_DETECTION_PHRASE in r.reason, r.reason


def test_memo_keyed_on_sampled_values_gains_nothing(evaluator, problem):
    """A memo keyed on pointers plus a few sampled values (one host sync) used to pass at ~10x with 3 rotating
    input sets; every timed repetition now has unseen inputs, so it can only compute, and its outputs are checked."""
    honest = evaluator.evaluate(problem, candidates.triton_candidate() + "\n# honest twin\n")
    source = edit(edit(
        candidates.triton_candidate(), ALLOC,
        "        key = (a.data_ptr(), b.data_ptr(), tuple(a.view(-1)[:4].tolist()), tuple(b.view(-1)[-4:].tolist()))\n"
        "        memo = self.__dict__.setdefault('memo', {})\n"
        "        if key in memo:\n            return memo[key].clone()\n" + ALLOC,
    ), FORWARD, "        memo[key] = out.clone()\n" + FORWARD)
    r = evaluator.evaluate(problem, source)
    assert honest.status is Status.CORRECT and r.status is Status.CORRECT, f"{r.status}: {r.reason}"
    assert r.speedup < honest.speedup * 1.05, (r.speedup, honest.speedup)


def test_pointer_keyed_cache_is_caught(evaluator, problem):
    source = edit(edit(
        candidates.triton_candidate(), ALLOC,
        "        key = (a.data_ptr(), b.data_ptr())\n        memo = self.__dict__.setdefault('memo', {})\n"
        "        if key in memo:\n            return memo[key].clone()\n" + ALLOC,
    ), FORWARD, "        memo[key] = out\n" + FORWARD)
    r = evaluator.evaluate(problem, source)
    assert r.status is POINTER_CACHE_STATUS, f"{r.status}: {r.reason}"
    assert POINTER_CACHE_PHRASE in r.reason and POINTER_CACHE_DEFENCE in r.reason, r.reason


def test_sandbox_reports_isolation(evaluator, problem):
    """The device runs as root with `unshare` and no bubblewrap: mount namespace, uid 65534, no network."""
    r = evaluator.evaluate(problem, candidates.triton_candidate(512, 4))
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.network_isolated is True
    assert r.filesystem_isolated is True
    assert r.unprivileged is True


@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_writes_outside_the_worker_folder_fail_on_the_gpu(evaluator, problem, backend, tmp_path):
    target = f"/var/tmp/kh-gpu-planted-{backend}"  # outside its view (its /tmp is private and writable)
    base = candidates.triton_candidate(512, 4) if backend == "triton" else candidates.cuda_candidate("fswrite", 256)
    head = next(line for line in base.splitlines(keepends=True) if line.startswith("    def forward("))
    source = edit(base, head, head + f"        open({target!r}, 'w').write('x')\n")
    r = evaluator.evaluate(problem, source, backend=backend)
    assert r.status is Status.RUNTIME_ERROR, f"{r.status}: {r.reason} {r.error}"
    assert any(e in r.error for e in ("Read-only file system", "Permission denied", "No such file")), r.error
    import os

    assert not os.path.exists(target)


def test_a_cuda_candidate_that_builds_under_tmp_builds(evaluator, problem):
    """CUDA-L1's kernels that pass `build_directory="/tmp/cuda_extensions"` to load_inline failed with "Read-only
    file system": each worker's /tmp is now a private writable tmpfs, so they build as they do outside a sandbox."""
    base = candidates.cuda_candidate("tmpbuild", 256)
    source = edit(base, 'extra_cuda_cflags=["-O3"], verbose=False)',
                  'extra_cuda_cflags=["-O3"], verbose=False,\n                  '
                  'build_directory=__import__("os").makedirs("/tmp/cuda_extensions", exist_ok=True) '
                  'or "/tmp/cuda_extensions")')
    r = evaluator.evaluate(problem, source, backend="cuda")
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error}"


def test_the_gpu_worker_sees_every_build_folder_read_only(evaluator, problem):
    """It imports its extension from the build made ahead (`eval.worker.prebuilt`) and cannot alter that build,
    nor any other candidate's: the first write, into its own candidate's build folder, fails."""
    base = candidates.cuda_candidate("robuild", 256)
    head = next(line for line in base.splitlines(keepends=True) if line.startswith("    def forward("))
    plant = ("        import pathlib\n"
             "        for folder in sorted(pathlib.Path(ext.__file__).parents[2].iterdir(),\n"
             "                             key=lambda f: f != pathlib.Path(ext.__file__).parents[1]):\n"
             "            (folder / 'planted').write_text('altered')\n")
    r = evaluator.evaluate(problem, edit(base, head, head + plant), backend="cuda")
    assert r.status is Status.RUNTIME_ERROR, f"{r.status}: {r.reason} {r.error}"
    assert "Read-only file system" in r.error, r.error
    assert not list(evaluator._builder.root.glob("**/planted"))
    assert _built(evaluator, "robuild") == ["add_relu_scale_robuild_kh_light"]


def test_fp8_outputs_are_compared_on_the_gpu(evaluator):
    """fp8 tensors have no CUDA isnan/nan_to_num: the worker's exact comparisons must upcast them."""
    from problems.suite import solution_path, suite_problem

    fp8 = suite_problem("LLM/07_fp8_quantize")
    r = evaluator.evaluate(fp8, solution_path(fp8).read_text())
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.speedup is not None and r.speedup > 1.0


# KernelBench's scaled level 1 (19_ReLU): a 4096 x 393216 float32 input, 6 GiB, and an output as large
_HUGE_RELU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(4096, 393216)]

def get_init_inputs():
    return []
'''
_HUGE_RELU_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096, num_warps=8)
        return y
'''


def test_an_honest_candidate_on_a_6_gib_problem_is_timed_within_the_devices_memory(evaluator):
    """Three staged sets a side, and three kept outputs, of 6 GiB each ran the H100 out of memory (2026-11-25:
    runtime_error for an honest kernel). Now one set a side is staged and the kept outputs wait in host memory."""
    from problems.problem import problem_from_source

    r = evaluator.evaluate(problem_from_source(_HUGE_RELU, name="huge_relu"), _HUGE_RELU_CANDIDATE)
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error}"
    assert any("timed on 1 input set(s) per side, not 3" in f for f in r.flags), r.flags
    assert r.speedup is not None and 0.8 < r.speedup < 1.25, r.speedup  # both sides stream 12 GiB per call
    assert "ran out of device memory" not in " ".join(r.flags), r.flags  # it fit without a retry alone


def test_lazy_build_made_ahead(problem, tmp_path):
    """A candidate that builds its extension on its first forward call (CUDA-L1's habit) is built ahead by the build
    worker (`eval.worker.lazy_builds`): with a 15 s call limit, which its nvcc build alone exceeds, it is correct,
    and the GPU worker imported the library built ahead (no build of its own)."""
    from eval import EvalConfig, Evaluator

    base = candidates.cuda_candidate("lazytest", 256)
    source = edit(base, 'ext = load_inline(name=',
                  '_EXT = []\n\n\ndef _ext():\n    if not _EXT:\n        _EXT.append(load_inline(name=')
    source = edit(source, 'extra_cuda_cflags=["-O3"], verbose=False)',
                  'extra_cuda_cflags=["-O3"], verbose=False))\n    return _EXT[0]')
    source = edit(source, "return ext.add_relu_scale(", "return _ext().add_relu_scale(")
    with Evaluator(EvalConfig(device="cuda", call_timeout_s=15, cache_dir=str(tmp_path))) as ev:
        r = ev.evaluate(problem, source, backend="cuda")
        assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error}"
        assert _built(ev, "lazytest") == ["add_relu_scale_lazytest_kh_light"]
