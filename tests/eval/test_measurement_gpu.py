"""Hostile candidates against the measurement design, on a CUDA GPU (`pytest -m gpu tests/eval/test_measurement_gpu.py`).

The design under test (`eval.timing.measure`, `eval.steps.timing_steps.time_candidate`,
`eval.process._reference_process`):

- the reference is timed in a separate, clean reference process that never imports candidate code, so
  nothing a candidate does to its own process (new `torch.Tensor` methods, dispatch modes, backend
  switches, patched `statistics`, a patched `Model.forward`) can change the reference's time;
- every candidate gets a fresh worker process, so nothing one candidate leaves behind reaches the next;
- timed repetitions run in a native C loop; every timed output is captured (sampled elements plus secret
  projections over all elements) and compared in the parent with the reference process's capture for the
  same repetition's inputs, so a candidate that is wrong only while it is timed is caught;
- the parent bounds the times a worker reports by the wall time it observed itself (`claim_bounds.wall_bound`),
  so forged times are caught.

Each hostile candidate is the honest one (`HONEST`, a one-kernel Triton elementwise op) with one named change
(`variant`, whose anchor must occur exactly once). Where a static check of the source would refuse a plain
form of an attack (`gc.get_objects`, `setattr(torch.Tensor, "__mul__", ...)`, `inspect.stack`), the candidate
uses a disguised form, so the run-time defence named in the test's docstring is the one exercised. Where an
attack is about speed, a candidate that comes out correct must also be no faster than the honest kernel:
`speedup <= SPEED_MARGIN x` the honest candidate's speedup, measured once per module.
"""

from __future__ import annotations

import pytest
import torch

from eval import EvalResult, Status
from harness.corpus.candidates import edit
from problems.problem import problem_from_source

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SPEED_MARGIN = 1.15  # a hostile candidate judged correct may be at most this much faster than the honest one
# 2**26 float32 elements (256 MiB a tensor): the honest kernel takes ~0.1-0.2 ms a call, far above the wall
# bound's 30 us floor, so dividing reported times by 8 leaves ~7/8 of a call unexplained in every block
N_LARGE = 1 << 26
N_MID = 1 << 24  # 64 MiB a tensor: the loop's own GPU time per repetition is several calls' worth
N_SMALL = 1 << 12  # at most `timing.CAPTURE_SAMPLES` (4096) elements: every element of every timed output is captured
N_WEIGHT = 4 << 20  # 16 MiB of float32: a weight that fits the H100's persisting L2 share

# -- problems ---------------------------------------------------------------------------------------------------
_AFFINE = '''
import torch
import torch.nn as nn

N = @N@


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

_WEIGHTED = '''
import torch
import torch.nn as nn

N = @N@


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(N))

    def forward(self, x):
        return x * self.w


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def affine_problem(n: int):
    """y = x * 2.0 + 1.0 over n float32 elements: two eager kernels for the reference, one fused for HONEST."""
    return problem_from_source(_AFFINE.replace("@N@", str(n)), name=f"affine_{n}", problem_id=f"measure/affine_{n}")


# -- the honest candidate and its anchors --------------------------------------------------------------------------
HONEST = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = out.numel()
        grid = (triton.cdiv(n_elements, 1024),)
        affine_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)
        return out
'''

TOP = "class ModelNew(nn.Module):\n"  # code put before it runs at import
LAUNCH = "        affine_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)\n"  # the kernel launch in forward
RETURN = "        return out\n"  # the last line of forward, after the kernel ran
assert all(HONEST.count(anchor) == 1 for anchor in (TOP, LAUNCH, RETURN))


def variant(old: str, new: str, base: str = HONEST) -> str:
    """The honest candidate with `old` (which must occur exactly once) replaced by `new`."""
    return edit(base, old, new)


def at_import(code: str, base: str = HONEST) -> str:
    """The honest candidate with `code` run at import, before ModelNew is defined."""
    return variant(TOP, code.strip("\n") + "\n\n\n" + TOP, base)


def why(r: EvalResult) -> str:
    """A result's status, reason and error tail, for assertion messages."""
    return f"{r.status}: {r.reason} | speedup {r.speedup} | flags {r.flags} | error: {r.error[-1500:]}"


# -- 1. reference sabotage at import -------------------------------------------------------------------------------
# (a) the plain form: `setattr(torch.Tensor, "__mul__", ...)` (refused by the static check of the source)
TENSOR_OPS_TWICE_PLAIN = at_import('''
_mul, _add = torch.Tensor.__mul__, torch.Tensor.__add__


def _mul_twice(self, other):
    _mul(self, other)  # the work done twice, the second result kept
    return _mul(self, other)


def _add_twice(self, other):
    _add(self, other)
    return _add(self, other)


setattr(torch.Tensor, "__mul__", _mul_twice)
setattr(torch.Tensor, "__add__", _add_twice)
''')

# (a) disguised: the class and the method names computed, so only the run-time design stands in the way
TENSOR_OPS_TWICE = at_import('''
_T = getattr(__import__("tor" + "ch"), "Ten" + "sor")
_mul, _add = _T.__mul__, _T.__add__


def _mul_twice(self, other):
    _mul(self, other)  # the work done twice, the second result kept
    return _mul(self, other)


def _add_twice(self, other):
    _add(self, other)
    return _add(self, other)


setattr(_T, "__m" + "ul__", _mul_twice)
setattr(_T, "__a" + "dd__", _add_twice)
''')

# (b) a dispatch mode entered at import and never left: every add and multiply of this process runs twice
DISPATCH_MODE_TWICE = at_import('''
from torch.utils._python_dispatch import TorchDispatchMode


class _Twice(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in (torch.ops.aten.add, torch.ops.aten.mul):
            func(*args, **kwargs)
        return func(*args, **kwargs)


_MODE = _Twice()
_MODE.__enter__()  # never left
''')

# (c) backend switches a shared reference would run under
BACKENDS_OFF = at_import('''
torch.backends.cudnn.enabled = False
torch.backends.cuda.enable_flash_sdp(False)
torch.backends.cuda.enable_mem_efficient_sdp(False)
''')

# (d) a harness statistic inflated for every caller but the candidate (which never calls it)
MEDIAN_TIMES_3 = at_import('''
import statistics

_true_median = statistics.median


def _inflated_median(data):
    return 3.0 * _true_median(data)


statistics.median = _inflated_median
''')

# (e) the problem's Model, found through the garbage collector (disguised), made 5 ms slower a call
SLOW_REFERENCE_FORWARD = at_import('''
import time as _time


def _slow_down_the_reference():
    g = __import__("g" + "c")
    patched = 0
    for obj in getattr(g, "get_" + "objects")():
        if isinstance(obj, type) and obj.__name__ == "Model" and issubclass(obj, nn.Module) and "forward" in vars(obj):
            original = obj.forward

            def slow_forward(self, *args, _original=original, **kwargs):
                _time.sleep(0.005)
                return _original(self, *args, **kwargs)

            obj.forward = slow_forward
            patched += 1
    return patched


_PATCHED = _slow_down_the_reference()
''')

SABOTAGE = {
    "a_tensor_ops_plain": TENSOR_OPS_TWICE_PLAIN,
    "a_tensor_ops_disguised": TENSOR_OPS_TWICE,
    "b_dispatch_mode": DISPATCH_MODE_TWICE,
    "c_backends_off": BACKENDS_OFF,
    "d_statistics_median": MEDIAN_TIMES_3,
}

# -- 2. lazy only while timed -----------------------------------------------------------------------------------
_TIMED_PROBE = '''
import os
import threading
import traceback


def _being_timed():
    """Whether a timed block of the worker is on the stack (its Python frames stay there while the loop runs)."""
    for frame, _ in traceback.walk_stack(None):
        code = frame.f_code
        where = code.co_filename.replace(os.sep, "/")
        if code.co_name == "cmd_time_block" or ("eval/worker" in where and code.co_name == "block"):
            return True
    return False
'''

LAZY_TIMER = variant(LAUNCH, '''        if _being_timed():
            def late(x=x, out=out, grid=grid, n_elements=n_elements):
                with torch.cuda.device(out.device):
                    affine_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)

            threading.Timer(0.002, late).start()  # the result is written 2 ms later, from a thread
            return out
''' + LAUNCH, at_import(_TIMED_PROBE))

LAZY_SIDE_STREAM = variant(LAUNCH, '''        if _being_timed():
            side = self.__dict__.setdefault("side", torch.cuda.Stream(device=out.device))
            with torch.cuda.stream(side):  # not ordered after the timed stream, and not waited for
                torch.cuda._sleep(2_000_000)  # about a millisecond
                affine_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)
            return out
''' + LAUNCH, at_import(_TIMED_PROBE))

# -- 3. drift after validation ----------------------------------------------------------------------------------
DRIFT = variant(RETURN, '''        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 20 and self.calls % 5 == 0:  # honest through the trials, then every 5th call is wrong
            idx = torch.arange(16, device=out.device) * (n_elements // 16) + 7
            out[idx] = 1e6
''' + RETURN)

# -- 4. L2 persistence ------------------------------------------------------------------------------------------
_WEIGHT_CUDA = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

N = @N@

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cstring>

__global__ void weight_mul_@TAG@(const float* __restrict__ x, const float* __restrict__ w,
                                 float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * w[i];
}

static void keep_in_l2(const torch::Tensor& w, cudaStream_t stream) {
@PERSIST@
}

torch::Tensor weight_mul(torch::Tensor x, torch::Tensor w) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    keep_in_l2(w, stream);
    weight_mul_@TAG@<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                         y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor weight_mul(torch::Tensor x, torch::Tensor w);"
ext = load_inline(name="weight_mul_@TAG@", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["weight_mul"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(N))

    def forward(self, x):
        return ext.weight_mul(x.contiguous(), self.w)
'''

# every call: the largest persisting L2 share (prop.persistingL2CacheMaxSize, read as a device attribute) and an
# access-policy window over the whole weight on the current stream, hits persisting; failures are ignored (cleared)
_PERSIST = '''
    static int max_persisting = -1, max_window = 0;
    if (max_persisting < 0) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, device);
        cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, device);
    }
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)max_persisting);
    cudaLaunchAttributeValue attr;
    std::memset(&attr, 0, sizeof(attr));
    size_t bytes = (size_t)w.numel() * sizeof(float);
    attr.accessPolicyWindow.base_ptr = (void*)w.data_ptr<float>();
    attr.accessPolicyWindow.num_bytes = bytes < (size_t)max_window ? bytes : (size_t)max_window;
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStreamSetAttribute(stream, cudaLaunchAttributeAccessPolicyWindow, &attr);
    (void)cudaGetLastError();
'''


def weight_cuda_candidate(tag: str, persist: bool) -> str:
    """y = x * w as one CUDA kernel; with `persist`, each call asks the L2 to keep the 16 MiB weight resident."""
    source = _WEIGHT_CUDA.replace("@N@", str(N_WEIGHT)).replace("@TAG@", tag)
    return source.replace("@PERSIST@", _PERSIST if persist else "    (void)w; (void)stream;")


# -- 5. one candidate poisons the next ---------------------------------------------------------------------------
POISONER = at_import('''
import os
import pathlib

from torch.utils._python_dispatch import TorchDispatchMode


class _Poison(TorchDispatchMode):
    """Every add and multiply of this process comes out 1 too large; every copy too (input buffers, refills)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            if func.overloadpacket in (torch.ops.aten.add, torch.ops.aten.mul):
                out = out + 1.0  # the mode is off inside its own handler: a plain add
            elif func.overloadpacket is torch.ops.aten.copy_:
                out.add_(1.0)
        return out


_POISONED = "import torch\\ntorch._kh_poison = True\\nraise SystemExit('left behind by an earlier candidate')\\n"
for _folder in (os.getcwd(), os.path.dirname(os.getcwd()), "/tmp", "/dev/shm"):
    for _name in ("candidate.py", "candidate_1.py", "candidate_prepare.py"):
        try:
            pathlib.Path(_folder, _name).write_text(_POISONED)
        except OSError:
            pass
    for _name in ("candidate_2.py", "kh_candidate"):
        try:
            os.makedirs(os.path.join(_folder, _name), exist_ok=True)
        except OSError:
            pass
torch._kh_poison = True
_MODE = _Poison()
_MODE.__enter__()  # never left
''')

# -- 6. output containers -----------------------------------------------------------------------------------------
DICT_OF_TUPLE = variant(RETURN, '        return {"y": (out,)}\n')

# -- 7. forged times ----------------------------------------------------------------------------------------------
FORGER = at_import('''
import dataclasses


class _ForgedResult:
    """What the worker reads of a block's result, for when the loop's own result type cannot be rebuilt."""

    def __init__(self, times_ms, captures, leaves, violations):
        self.times_ms, self.captures, self.leaves, self.violations = times_ms, captures, leaves, violations


def _forged(result):
    times = [float(t) / 8.0 for t in result.times_ms]
    try:
        return dataclasses.replace(result, times_ms=times)
    except Exception:
        pass
    try:
        return type(result)(times_ms=times, captures=result.captures, leaves=result.leaves,
                            violations=result.violations)
    except Exception:
        return _ForgedResult(times, result.captures, result.leaves, result.violations)


class _LoopProxy:
    """Stands in for a loop whose `block` cannot be replaced on the instance."""

    def __init__(self, loop):
        self._loop = loop

    def __getattr__(self, name):
        return getattr(self._loop, name)

    def block(self, *args, **kwargs):
        return _forged(self._loop.block(*args, **kwargs))


def _forge_the_timing_loop():
    g = __import__("g" + "c")
    loops, owners = {}, []
    for obj in getattr(g, "get_" + "objects")():
        try:
            kind = type(obj).__name__
            if kind == "NativeLoop":
                loops[id(obj)] = obj
            elif kind == "Worker" and type(vars(obj).get("loop")).__name__ == "NativeLoop":
                owners.append(obj)
        except Exception:
            continue
    for owner in owners:
        loops.setdefault(id(owner.loop), owner.loop)
    patched = set()
    for key, loop in loops.items():
        try:
            original = loop.block

            def forged_block(*args, _block=original, **kwargs):
                return _forged(_block(*args, **kwargs))

            loop.block = forged_block
            patched.add(key)
        except Exception:
            pass
    for owner in owners:
        if id(owner.loop) not in patched:
            owner.loop = _LoopProxy(owner.loop)
            patched.add(id(owner.loop))
    return len(patched)


if not _forge_the_timing_loop():
    raise ImportError("kh-forge: found no NativeLoop to patch")
''')


# The timed block's input copies (the `copies` of a frame that calls forward, a new list each block; the frame access
# disguised from the static check) and the honest kernel on one input: what classes 8 and 9 run at import.
_BLOCK_PLAN = '''
import traceback


def _block_plan():
    for frame, _ in traceback.walk_stack(None):
        names = getattr(frame, "f_" + "locals")  # disguised from the static check
        if "copies" in names:
            return names["copies"]
    return None


def _affine(src):
    o = torch.empty_like(src)
    n = o.numel()
    affine_kernel[(triton.cdiv(n, 1024),)](src, o, n, BLOCK_SIZE=1024)
    return o
'''


# -- 8. work concentrated in one call of each block --------------------------------------------------------------
# The first call of each block finds the block's input copies (the `copies` of a frame that calls it, a new list each
# block; the frame access disguised from the static check) and computes every repetition's output there; the later calls of the block return those.
FRONT_LOADER = variant(LAUNCH, '''        plan = _block_plan()
        if plan and plan is not getattr(self, "_plan", None):  # a new block: do all of its work in this call
            self._plan, self._k, self._outs = plan, 0, [_affine(pairs[0][1]) for pairs in plan]
        if plan and plan is getattr(self, "_plan", None) and self._k < len(self._outs):
            self._k += 1
            return self._outs[self._k - 1]
''' + LAUNCH, at_import(_BLOCK_PLAN))


# -- 9. work moved into the loop's own GPU time -------------------------------------------------------------------
# Each call of a block finds the block's input copies (a frame's `copies`, as FRONT_LOADER does) and queues the
# next repetition's output on a side stream that nothing waits for then; the next call waits for it (done by then)
# and spins ~30 % of the byte floor's time, to stay over the floor's rejection. The work runs while the loop's own
# kernels hold the GPU before that call: the lead (200 us a repetition), the flush, the input copies. The events see
# a wait and a spin, every output is right, and each call takes about the same time (no concentration).
AHEAD_ON_SIDE_STREAM = variant(LAUNCH, '''        plan = _block_plan()
        if plan is not None:
            if plan is not getattr(self, "_plan", None):  # a new block: its first call is honest
                self._plan, self._k, self._next = plan, 0, None
                self._side = getattr(self, "_side", None) or torch.cuda.Stream(device=x.device)
                self._side.wait_stream(torch.cuda.current_stream())  # after the block's input draws
            k, ready = self._k, self._next
            self._k += 1
            if k + 1 < len(plan):  # the next repetition's output, queued aside now
                done = torch.cuda.Event()
                with torch.cuda.stream(self._side):
                    out_next = _affine(plan[k + 1][0][1])
                    done.record(self._side)
                self._next = (out_next, done)
            if ready is not None:
                torch.cuda.current_stream().wait_event(ready[1])
                torch.cuda._sleep(max(1, n_elements // 840))  # ~10 us at 2**24, ~40 us at 2**26
                return ready[0]
''' + LAUNCH, at_import(_BLOCK_PLAN))


# -- fixtures -----------------------------------------------------------------------------------------------------
EVALUATOR = dict(device="cuda", cache_dir=None)


@pytest.fixture(scope="module")
def problem():
    return affine_problem(N_LARGE)


@pytest.fixture(scope="module")
def small_problem():
    return affine_problem(N_SMALL)


@pytest.fixture(scope="module")
def weight_problem():
    return problem_from_source(_WEIGHTED.replace("@N@", str(N_WEIGHT)), name=f"weighted_{N_WEIGHT}",
                               problem_id=f"measure/weighted_{N_WEIGHT}")


@pytest.fixture(scope="module")
def honest_speedup(evaluator, problem) -> float:
    r = evaluator.evaluate(problem, HONEST)
    assert r.status is Status.CORRECT, why(r)
    assert r.timing_meaningful and r.speedup is not None, why(r)
    return r.speedup


def assert_not_faster(r: EvalResult, honest: float) -> None:
    """A hostile candidate judged correct gains nothing over the honest kernel."""
    assert r.status is not Status.CORRECT or (r.speedup is not None and r.speedup <= SPEED_MARGIN * honest), (
        f"honest speedup {honest:.3f}; " + why(r))


def assert_rejected_or_no_gain(r: EvalResult, honest: float) -> None:
    """Rejected by an integrity check, or correct and no faster than the honest kernel."""
    if r.status is Status.REJECTED:
        assert "integrity" in r.reason, why(r)
    else:
        assert r.status is Status.CORRECT, why(r)
        assert r.timing_meaningful and r.speedup is not None, why(r)
    assert_not_faster(r, honest)


# -- 1. reference sabotage at import -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SABOTAGE))
def test_sabotage_at_import_cannot_slow_the_reference(evaluator, problem, honest_speedup, name):
    """Class 1 (a-d), reference sabotage at import: new Tensor.__mul__/__add__ doing the work twice (plain: refused
    by the static check; disguised: past it), a dispatch mode entered and never left, cuDNN and the fused SDPA
    kernels switched off, statistics.median inflated 3x. Defence: the reference is timed in the clean reference
    process, which never imports candidate code, so the sabotage stays in the candidate's own worker: the
    candidate is rejected by an integrity check, or correct with a speedup no better than the honest kernel's."""
    r = evaluator.evaluate(problem, SABOTAGE[name])
    assert_rejected_or_no_gain(r, honest_speedup)
    if name == "a_tensor_ops_plain":
        assert r.status is Status.REJECTED, why(r)  # the static check refuses the plain rebinding


def test_a_patched_model_forward_never_reaches_the_timed_reference(evaluator, problem, honest_speedup):
    """Class 1 (e), reference sabotage at import: the candidate finds the problem's `Model` class through the
    garbage collector (disguised from the static check) and makes its forward sleep 5 ms first. Defence: the
    reference is timed in the clean reference process, where that patch does not exist, so its median stays
    far under 5 ms (it is ~0.3 ms) and the candidate gains nothing; an integrity rejection is accepted too."""
    r = evaluator.evaluate(problem, SLOW_REFERENCE_FORWARD)
    if r.status is Status.REJECTED:
        assert "integrity" in r.reason, why(r)
        return
    assert r.status is Status.CORRECT, why(r)
    assert r.reference_timing is not None, why(r)
    assert r.reference_timing.median_ms < 5.0, (r.reference_timing, why(r))
    assert_not_faster(r, honest_speedup)


# -- 2. lazy only while timed --------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [LAZY_TIMER, LAZY_SIDE_STREAM], ids=["timer_thread", "side_stream"])
def test_lazy_only_while_timed_is_caught(evaluator, problem, honest_speedup, source):
    """Class 2, lazy only while timed: forward walks the stack (traceback.walk_stack) and, inside the worker's
    timed block (`cmd_time_block`), returns torch.empty_like(x) with the result written later, from a
    threading.Timer 2 ms on or on an unsynchronised side stream after a ~1 ms spin. Trials, the kernel profile
    and the back-to-back batches see an honest kernel. Defence: every timed output is captured right after its
    end event and compared with the reference process's capture for the same inputs ("timed repetition"), and
    threads left running are tamper evidence ("integrity"): never correct."""
    r = evaluator.evaluate(problem, source)
    assert r.status in (Status.INCORRECT, Status.REJECTED), why(r)
    assert "timed repetition" in r.reason or "integrity" in r.reason, why(r)
    assert_not_faster(r, honest_speedup)


# -- 3. drift after validation -------------------------------------------------------------------------------------
def test_drift_after_validation_is_caught_on_a_fully_captured_output(evaluator, small_problem):
    """Class 3, drift after validation: correct for the first 20 calls (the correctness trials), then every 5th
    call overwrites 16 scattered elements with 1e6 after the correct kernel. Defence: the captures of the timed
    outputs; with 2**12 elements every element of every timed output is sampled, so the first wrong timed
    repetition shows ("the output of timed repetition r is wrong")."""
    r = evaluator.evaluate(small_problem, DRIFT)
    assert r.status is Status.INCORRECT, why(r)
    assert "timed repetition" in r.reason, why(r)


def test_drift_after_validation_is_caught_on_a_large_output(evaluator, problem):
    """Class 3, drift after validation, on 2**26 elements: the same 16 wrong elements per wrong repetition are
    hit by the 4096 sampled elements with probability ~16 * 4096 / 2**26 = 0.1% per repetition, so sampling
    alone would mostly miss them. Defence: the 8 secret-sign projections over ALL elements of each timed output;
    a 1e6 error on 16 elements moves them by ~1e6-1e7, against a limit of ~10 (8 sigma of the tolerance's
    spread), so every wrong repetition is caught. (On the sampling argument alone this would be an expected
    failure; the projections are there to close exactly this gap, so it is a plain test.)"""
    r = evaluator.evaluate(problem, DRIFT + "\n# on the large problem\n")
    assert r.status is Status.INCORRECT, why(r)
    assert "timed repetition" in r.reason, why(r)


# -- 4. L2 persistence ---------------------------------------------------------------------------------------------
def test_l2_persistence_gains_nothing(evaluator, weight_problem):
    """Class 4, L2 persistence: a CUDA candidate for y = x * w (w a 16 MiB weight) that, every call, sets the
    persisting-L2 limit to the device's maximum and puts an access-policy window with hitProp persisting over
    the weight on the current stream, so the weight would stay in L2 across the L2 flush between timed
    repetitions. Defence: the timing loop resets persisting L2 lines before each repetition (and may refuse the
    setting outright): rejected naming "persisting", or correct and no faster than its honest twin (the same
    kernel without the persistence calls), measured here."""
    twin = evaluator.evaluate(weight_problem, weight_cuda_candidate("l2twin", persist=False), backend="cuda")
    assert twin.status is Status.CORRECT, why(twin)
    assert twin.speedup is not None, why(twin)
    r = evaluator.evaluate(weight_problem, weight_cuda_candidate("l2persist", persist=True), backend="cuda")
    if r.status is Status.REJECTED and "persisting" in r.reason:
        return
    assert r.status is Status.CORRECT, why(r)
    assert r.speedup is not None and r.speedup <= SPEED_MARGIN * twin.speedup, (
        f"honest twin {twin.speedup:.3f}; " + why(r))


# -- 5. one candidate poisons the next -----------------------------------------------------------------------------
def test_a_poisoning_candidate_leaves_the_next_ones_clean(evaluator, problem):
    """Class 5, one candidate poisons the next: candidate A, at import, enters a dispatch mode (never left) that
    makes every add, multiply and copy of its process wrong, writes candidate.py / candidate_1.py and makes
    candidate_2.py directories in its folder, the folder above, /tmp and /dev/shm, and sets torch._kh_poison.
    Defence: a fresh worker process per candidate (and the sandbox's read-only file system outside the worker's
    own folder): the honest candidate, evaluated twice after A, is correct both times."""
    poisoned = evaluator.evaluate(problem, POISONER)
    assert poisoned.status is not Status.PENDING, why(poisoned)  # judged somehow; A's own verdict is not the point
    for k in range(2):
        r = evaluator.evaluate(problem, HONEST + f"\n# honest, evaluation {k + 1} after the poisoner\n")
        assert r.status is Status.CORRECT, f"evaluation {k + 1} after the poisoner ({poisoned.status}): " + why(r)
        assert r.timing_meaningful and r.speedup is not None, why(r)


# -- 6. output containers ------------------------------------------------------------------------------------------
def test_an_output_container_unlike_the_references_is_incorrect(evaluator, problem):
    """Class 6, output containers: the candidate returns {"y": (out,)} with the right tensor inside, where the
    reference returns the tensor itself. Defence: the output's structure (container types and keys, not only
    its flattened leaves) must match the reference's: incorrect, the reason naming the structure."""
    r = evaluator.evaluate(problem, DICT_OF_TUPLE)
    assert r.status is Status.INCORRECT, why(r)
    assert "structure" in r.reason, why(r)


# -- 7. forged times -----------------------------------------------------------------------------------------------
def test_forged_block_times_are_rejected(evaluator, problem, honest_speedup):
    """Class 7, forged times: at import the candidate finds the worker's timing loop through the garbage collector
    (disguised from the static check; an object whose type is named NativeLoop, or the Worker's `loop`) and
    wraps its `block` so every reported time is divided by 8. Defence: the parent's wall bound
    (`claim_bounds.wall_bound`): each block's wall time observed in the parent, less the reported times, leaves ~7/8
    of every call unexplained beyond the clean reference process's loop overhead; or the tamper snapshot.
    Rejected, naming integrity ("reported times" / "outside its timed intervals" from the wall bound). A wall-bound
    finding is judged again alone, in a new worker (honest candidates beside other evaluations can exceed the bound):
    the forger is rejected there too."""
    r = evaluator.evaluate(problem, FORGER)
    print(f"\nforger: {why(r)}\n  wall bound {r.wall_bound}")
    if r.status is Status.COMPILE_ERROR and "kh-forge" in r.error:
        pytest.fail("the attack was not mounted: the candidate found no NativeLoop (by type name, or as a "
                    "Worker's `loop`) to patch; update the attack to the worker's current layout. " + why(r))
    assert r.status is Status.REJECTED, why(r)
    assert "integrity" in r.reason, why(r)
    if "outside its timed intervals" in r.reason:  # the wall bound's verdict is the one taken alone
        assert any("wall bound found" in f and "evaluated again alone" in f for f in r.flags), r.flags
    assert_not_faster(r, honest_speedup)


# -- 8. work concentrated in one call of each block ------------------------------------------------------------------
def test_work_concentrated_in_one_call_per_block_is_rejected(evaluator, problem, honest_speedup):
    """Class 8, concentration: the first call of each block computes every repetition's output of that block (it
    finds their inputs through the garbage collector), the other calls return them. Every output is right and the
    events are honest, but the median call is nearly free. Defence: `claim_bounds.concentration` (a block's calls may
    take at most 1.5x their median in total, in every block): rejected, naming it, on the evaluation again alone
    that the first finding asks for (`timing_steps.judge_concentration`)."""
    r = evaluator.evaluate(problem, FRONT_LOADER)
    assert r.status is Status.REJECTED, why(r)
    assert "concentrated in a few calls" in r.reason, why(r)
    assert any("concentrated in a few calls" in f and "evaluated again alone" in f for f in r.flags), r.flags
    assert_not_faster(r, honest_speedup)


# -- 9. work moved into the loop's own GPU time --------------------------------------------------------------------
@pytest.mark.parametrize("n", [N_LARGE, N_MID], ids=["67M", "16M"])
def test_work_queued_ahead_into_the_loops_own_gpu_time_gains_nothing(evaluator, n):
    """Class 9, work hidden in the loop's own GPU time: each call queues the next repetition's output on a side
    stream (its input found through a frame's `copies`, disguised), which runs while the loop's own kernels hold
    the GPU before the next call; that call waits for it and spins ~30 % of the byte floor. Outputs are right, the
    events honest, the calls even. With a lead of one thread and a capture in waves the work ran beside them for
    free: correct at 5.9x against an honest 2.0x at 2**26 elements (H200, 2026-11-28). Defence: the loop's copies,
    flush, lead and capture fill every SM (`eval/worker/native/capture.cu`), so the side work waits for them and
    stretches the loop's own GPU time, which `measure._loop_gpu_bound` judges without the host noise the wall bound
    must allow (at 2**26 elements, 2026-11-28: the lead-in 99 us longer, inside the wall bound's 68 us only because
    the candidate process's host part ran 94 us faster; correct at 5.8x against an honest 2.0x before this bound).
    Rejected ("integrity"), or correct and no faster than the honest kernel. At 2**24 elements the side work showed
    ~22-29 us a repetition against the wall bound's ~38 us; the loop's GPU limit there is ~5 % of its ~0.45 ms."""
    problem = affine_problem(n)
    honest = evaluator.evaluate(problem, HONEST + "\n# the honest twin of class 9\n")
    assert honest.status is Status.CORRECT and honest.speedup is not None, why(honest)
    r = evaluator.evaluate(problem, AHEAD_ON_SIDE_STREAM)
    print(f"\nclass 9 at {n} elements: honest {why(honest)}\n  hostile {why(r)}\n  wall bound {r.wall_bound}")
    assert_rejected_or_no_gain(r, honest.speedup)
