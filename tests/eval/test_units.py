"""Unit tests of the evaluator's parts: scoring, comparison, wire protocol, static checks, sandbox env."""

from __future__ import annotations

import math
import os
import socket

import pytest
import torch

from eval import EvalConfig, EvalResult, Evaluator, Status
from problems import compare
from eval.scoring import fast_p, geomean_speedup, score
from eval.process._worker_env import is_secret_name, scrubbed_env
from eval.static_checks import analyze
from eval.crossing.wire import PREFIX, Channel, ChannelClosed, ProtocolError
from problems.problem import ProblemError, problem_from_source
from harness.corpus.hostile import GOOD, PROBLEM
from tests.paths import KERNELBENCH


def _r(status: str, speedup: float | None = None) -> EvalResult:
    return EvalResult(status=Status(status), speedup=speedup)


def test_fast_p_is_strict_and_counts_missing_problems():
    results = {"a": _r("correct", 1.0), "b": _r("correct", 2.0), "c": _r("incorrect", 5.0), "d": None}
    assert fast_p(results, 1.0) == 0.25  # 1.0 is not > 1.0; c is incorrect; d missing counts as failure
    assert fast_p(results, 0.0) == 0.5
    assert fast_p(results, 2.0) == 0.0
    assert geomean_speedup(results) == pytest.approx(math.sqrt(2.0))
    s = score(results)
    assert s.n_problems == 4 and s.correct_rate == 0.5 and s.compile_rate == 0.75
    assert s.fast_p[0.5] == 0.5


def test_fast_p_ignores_correct_results_without_timing():
    assert fast_p({"a": _r("correct", None)}, 0.0) == 0.0
    assert geomean_speedup({"a": _r("correct", None)}) is None


def test_compare_reports_where_and_how_much():
    exp = [torch.zeros(4, 5)]
    got = [torch.zeros(4, 5)]
    got[0][2, 3] = 0.5
    m = compare(exp, got, atol=1e-4, rtol=1e-4)
    assert m is not None and m.worst_index == [2, 3] and m.max_abs_err == pytest.approx(0.5)
    assert m.mismatch_fraction == pytest.approx(1 / 20)
    assert compare(exp, [torch.zeros(4, 5) + 5e-5], 1e-4, 1e-4) is None


def test_compare_nan_inf_shape_dtype_count():
    nan = torch.tensor([1.0, float("nan")])
    assert compare([nan], [nan.clone()], 1e-4, 1e-4) is None
    assert "NaN" in compare([nan], [torch.tensor([1.0, 2.0])], 1e-4, 1e-4).reason
    assert "NaN" in compare([torch.tensor([1.0, 2.0])], [nan], 1e-4, 1e-4).reason
    inf = torch.tensor([float("inf")])
    assert "Inf" in compare([inf], [-inf], 1e-4, 1e-4).reason
    assert "shape" in compare([torch.zeros(3)], [torch.zeros(4)], 1e-4, 1e-4).reason
    assert "dtype" in compare([torch.zeros(3)], [torch.zeros(3, dtype=torch.float64)], 1e-4, 1e-4).reason
    assert "outputs" in compare([torch.zeros(3)], [], 1e-4, 1e-4).reason
    assert compare([torch.arange(3)], [torch.arange(3)], 0, 0) is None
    assert compare([torch.arange(3)], [torch.arange(3) + 1], 0, 0) is not None


def _channel_pair() -> tuple[Channel, Channel]:
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    return Channel(r1, w2), Channel(r2, w1)


def test_wire_roundtrip_all_dtypes():
    a, b = _channel_pair()
    tensors = [torch.randn(3, 4), torch.randn(5).to(torch.bfloat16), torch.arange(6).reshape(2, 3), torch.tensor(True),
               torch.empty(0, 3)]
    a.send({"cmd": "x", "v": 1}, tensors)
    header, got = b.recv(timeout=5)
    assert header == {"cmd": "x", "v": 1}
    for t, g in zip(tensors, got):
        assert g.dtype == t.dtype and g.shape == t.shape and torch.equal(g, t)


@pytest.mark.parametrize("payload", [
    b"not json",
    b'{"tensors": [{"dtype": "object", "shape": [1], "nbytes": 8}]}',
    b'{"tensors": [{"dtype": "float32", "shape": [4], "nbytes": 8}]}',
    b'{"tensors": [{"dtype": "float32", "shape": [-1], "nbytes": 0}]}',
    b"[1, 2]",
])
def test_wire_rejects_malformed_frames(payload):
    a, b = _channel_pair()
    os.write(a.write_fd, PREFIX.pack(len(payload), 0) + payload)
    with pytest.raises(ProtocolError):
        b.recv(timeout=5)


def test_wire_detects_closed_channel():
    a, b = _channel_pair()
    os.close(a.write_fd)
    with pytest.raises(ChannelClosed):
        b.recv(timeout=5)


def test_static_checks():
    assert analyze(GOOD).status is None and analyze(GOOD).triton_kernels == ["add_relu_kernel"]
    cuda = 'src = """__global__ void my_kernel(float* x) {}"""\nload_inline\nclass ModelNew: pass\n'
    assert analyze(cuda).cuda_kernels == ["my_kernel"]
    assert analyze("class ModelNew:\n  pass\nimport gc\ngc.get_objects()\n").status is Status.REJECTED


def test_secrets_never_reach_the_worker_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    monkeypatch.setenv("GITHUB_TOKEN", "x")
    monkeypatch.setenv("DB_PASSWORD", "x")
    monkeypatch.setenv("PATH", os.environ.get("PATH", "/usr/bin"))
    env = scrubbed_env({"EXTRA_SECRET": "x", "TRITON_INTERPRET": "1"})
    assert not any(is_secret_name(k) for k in env)
    assert "OPENAI_API_KEY" not in env and "EXTRA_SECRET" not in env and env["TRITON_INTERPRET"] == "1"


def test_problem_errors_name_the_file_and_what_is_missing(tmp_path):
    with pytest.raises(ProblemError, match="missing get_inputs"):
        problem_from_source("class Model: pass\ndef get_init_inputs(): return []\n", path="p.py")
    with pytest.raises(ProblemError, match="p.py: syntax error"):
        problem_from_source("def (", path="p.py")


SMALL_PROBLEM = PROBLEM.replace("N = 4096", "N = 1 << 30").replace("import torch\n", 'import torch\nMETA = {"small": {"N": 1000}}\n', 1)


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_cpu_mode_uses_reduced_sizes_and_caches(tmp_path):
    problem = problem_from_source(SMALL_PROBLEM, name="big")
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path))) as ev:
        first = ev.evaluate(problem, GOOD)
        assert first.status is Status.CORRECT, first.reason + first.error
        assert first.problem_scale == "small" and "reduced sizes" in first.reason
        again = ev.evaluate(problem, GOOD)
    assert again.cached and again.status is Status.CORRECT and again.node == first.node == socket.gethostname()
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path), trials=6)) as ev:
        assert not ev.evaluate(problem, GOOD).cached  # other settings, other key


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="problem_scale"):
        Evaluator(EvalConfig(device="cpu", problem_scale="tiny"))


def test_roofline_floor_takes_the_larger_term():
    from eval.timing.roofline import Ceilings

    c = Ceilings(device="x", copy_bytes_per_s=2e12, matmul_flops_per_s={"float32": 50e12, "bfloat16": 800e12})
    assert c.floor_s(flops=1e12, nbytes=1e9, dtype="float32") == pytest.approx(0.02)  # compute-bound
    assert c.floor_s(flops=1e9, nbytes=4e9, dtype="bfloat16") == pytest.approx(0.002)  # memory-bound
    assert c.floor_s(flops=None, nbytes=None, dtype="float32") is None


def test_gpu_commands_explain_themselves_without_a_gpu(capsys):
    from harness.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["device", "probe"]) == 2
    assert main(["baseline", "smoke"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


def test_channel_close_is_idempotent():
    """A second close must not close a descriptor number the process has since reused (a double close
    once closed the result cache's temporary file under a concurrent evaluation)."""
    import os

    a, b = _channel_pair()
    a.close()
    reused_r, reused_w = os.pipe()  # likely the numbers a just released
    a.close()
    os.write(reused_w, b"x")
    assert os.read(reused_r, 1) == b"x"
    os.close(reused_r)
    os.close(reused_w)
    b.close()


def test_a_problem_without_meta_still_gets_a_floor_a_flag_and_a_rejection():
    """KernelBench problems carry no FLOPs or bytes: they are traced from the source, so a 2111x-style result on a
    KernelBench problem is judged like one on ours: under a quarter of the byte floor (every input and output moved
    once at the measured copy bandwidth) it is rejected, naming the floor; a time that beats only the FLOP floor is
    a flag (an algebraic shortcut may do less arithmetic); and without an L2 flush the byte floor proves nothing."""
    from eval.steps.timing_steps import judge_speed
    from eval.timing.roofline import Ceilings
    from problems.problem import load_problem_file

    path = KERNELBENCH / "KernelBench/level1/1_Sound_matmul.py"
    problem = load_problem_file(path)
    assert problem.flops is None and problem.bytes_moved is None
    ceilings = Ceilings(device="test", copy_bytes_per_s=3e12, matmul_flops_per_s={"float32": 5e13})
    byte_floor = ceilings.byte_floor_s(problem_bytes(problem))
    from eval._reference import problem_size

    flops, nbytes = problem_size(problem)
    assert flops and ceilings.floor_s(flops, nbytes, "float32") == byte_floor  # bytes bound this one, FLOPs traced
    fraction, flag, rejection = judge_speed(problem, ceilings, 0.2 * byte_floor)
    assert fraction is not None and fraction > 1 and flag == ""
    assert rejection.startswith("implausible") and f"{byte_floor * 1e6:.1f} us" in rejection, rejection
    fraction, flag, rejection = judge_speed(problem, ceilings, 0.2 * byte_floor, flushed=False)
    assert flag.startswith("implausible") and rejection == ""
    fraction, flag, rejection = judge_speed(problem, ceilings, 0.3 * byte_floor)  # under the floor, over a quarter
    assert flag.startswith("implausible") and rejection == ""
    fraction, flag, rejection = judge_speed(problem, ceilings, 10.0)
    assert 0 < fraction < 1 and flag == "" and rejection == ""


def problem_bytes(problem) -> float:
    from eval._reference import problem_size

    return problem_size(problem)[1]


def test_an_input_declared_unread_leaves_the_byte_floor():
    """META['unread_inputs'] takes an input out of the byte floor: a kernel that may skip it is not rejected."""
    source = (KERNELBENCH / "KernelBench/level1/1_Sound_matmul.py").read_text()
    whole = problem_from_source(source, name="m", problem_id="t/whole")
    declared = problem_from_source(source + "\nMETA = {'unread_inputs': [1]}\n", name="m", problem_id="t/declared")
    assert problem_bytes(whole) - problem_bytes(declared) == 48 * 32 * 4  # B, one float32 matrix
    with pytest.raises(ProblemError, match="unread_inputs"):
        problem_from_source(source + "\nMETA = {'unread_inputs': 'B'}\n", name="m", problem_id="t/bad")


@pytest.mark.parametrize("profiled, base", [
    ("void add_relu<16>(float*, int)", "add_relu"),
    ("void (anonymous namespace)::k<16>(float const*, float*)", "k"),
    ("void ns::inner::k(float*)", "k"),
    ("_Z1kPfS_i", "k"),
    ("_ZN2ns9my_kernelIfEEvPfi", "my_kernel"),
    ("_ZN12_GLOBAL__N_16kernelEPf", "kernel"),
    ("ck", "ck"),
])
def test_profiled_kernel_names_in_every_form(profiled, base):
    """Templates, namespaces, anonymous namespaces, extern "C" and mangled names all reduce to the defined name."""
    from eval.steps.kernel_evidence import kernel_base_name

    assert kernel_base_name(profiled) == base


@pytest.mark.parametrize("profiled, library", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)", True),
    ("void at::native::(anonymous namespace)::fused_dropout_kernel<float>(float*)", True),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4EEEvi", True),
    ("void cub::DeviceReduceKernel<float>(float*)", True),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)", True),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas", True),
    ("nvjet_tst_128x64_64x8_1x2_h_bz_TNT", True),
    ("ampere_sgemm_128x64_nn", True),
    ("vectorized_elementwise_kernel", False),  # a Triton kernel's name: no namespace, so the candidate's
    ("void elementwise_kernel(float const*, float*, long)", False),
    ("void kh::inner::gemm_kernel<16>(float*)", False),
    ("void (anonymous namespace)::k<16>(float const*, float*)", False),
    ("_ZN12_GLOBAL__N_16kernelEPf", False),
    ("add_relu_kernel", False),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>(Flash_fwd_params)", True),
    ("void flash::flash_fwd_kernel<Kernel_traits<128>>(Params)", False),  # a candidate's own copy of FlashAttention
    ("ampere_gemm_kernel", False),  # an honest name: no vendor tile shape
    ("sm90_tiled_matmul", False),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>(float*)", True),
])
def test_library_kernels_are_told_apart_from_candidates_kernels_of_the_same_name(profiled, library):
    """A decoy named like the library kernel doing the work must not have that work counted as its own."""
    from eval.steps.kernel_evidence import is_library_kernel

    assert is_library_kernel(profiled) is library


def test_defined_cuda_kernels_in_every_form():
    source = '''import torch
cuda_src = r"""
template <int N> __global__ void tk(float* x) {}
namespace ns { __global__ void nk(float* x) {} }
namespace { __global__ void ak(float* x) {} }
extern "C" __global__ void ck(float* x) {}
__global__ __launch_bounds__(256, 2) void lk(float* x) {}
__global__ void __launch_bounds__(128) lk2(float* x) {}
"""
class ModelNew(torch.nn.Module):
    pass
'''
    assert analyze(source).cuda_kernels == ["ak", "ck", "lk", "lk2", "nk", "tk"]


def test_a_worker_sees_its_parents_gpu_under_cuda_visible_devices():
    from eval.process._worker_env import visible_device_entry

    assert visible_device_entry(1, None) == "1"  # no restriction: indices are the machine's
    assert visible_device_entry(0, "2,3") == "2"  # a Ray actor for GPU 2, or a user's restriction
    assert visible_device_entry(1, " 2, 3 ") == "3"
    assert visible_device_entry(0, "GPU-8c1f2e,GPU-77aa") == "GPU-8c1f2e"
    with pytest.raises(RuntimeError, match="not among"):
        visible_device_entry(2, "2,3")


def test_a_result_names_the_hosts_gpu_where_ray_renumbered_them():
    from eval.evaluator import host_gpu_index

    assert host_gpu_index(["2", "3"], 1) == 3  # a Ray actor holding the host's GPUs 2 and 3 sees them as 0 and 1
    assert host_gpu_index([], 1) == 1  # no renumbering (executor=local)
    assert host_gpu_index(["GPU-8c1f2e"], 0) == 0  # a UUID is no index: the visible one stays
    assert host_gpu_index(["2"], None) is None  # the CPU


@pytest.mark.slow  # starts two evaluators
def test_a_crash_is_never_cached_and_an_evaluation_cut_by_close_has_no_verdict(tmp_path):
    """A process's end may be the host's doing: a stop signal to the whole process group, or `close()` stopping
    the worker under an evaluation. On a CPU evaluator: a candidate whose worker exits is a `crash`, evaluated
    again rather than answered from the cache; an evaluation that `close()` cuts raises `EvaluatorClosed` instead
    of a `crash` verdict, caches nothing, and the same candidate is correct in the next evaluator."""
    import threading
    import time

    from eval import EvaluatorClosed

    problem = problem_from_source(PROBLEM, name="add_relu")
    exits = "import os\nos._exit(3)\n" + GOOD
    slow = "import time\ntime.sleep(8)\n" + GOOD + "\n# slow\n"
    config = EvalConfig(device="cpu", cache_dir=str(tmp_path), workers_per_gpu=1)
    with Evaluator(config) as ev:
        first = ev.evaluate(problem, exits)
        assert first.status is Status.CRASH, first.reason
        assert not ev.evaluate(problem, exits).cached
    ev = Evaluator(config)
    ended: dict[str, object] = {}

    def evaluate() -> None:
        try:
            ended["result"] = ev.evaluate(problem, slow)
        except EvaluatorClosed as exc:
            ended["closed"] = exc

    thread = threading.Thread(target=evaluate)
    thread.start()
    time.sleep(3)  # the worker is importing the candidate (8 s); an earlier close only makes the start fail sooner
    ev.close()
    thread.join(120)
    assert "closed" in ended and "result" not in ended, ended
    with Evaluator(config) as ev:
        again = ev.evaluate(problem, slow)
    assert again.status is Status.CORRECT and not again.cached, again.reason
