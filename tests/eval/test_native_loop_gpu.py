"""The native timed loop on a GPU: its captures agree with eval/crossing/_capture.py, its checks find what a
candidate changed, nothing of the loop is reachable from forward()'s stack, and its times are right."""

from __future__ import annotations

import ctypes
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from eval.crossing._capture import CAPTURE_EXTRA, SUM_ABS, capture
from eval.worker.timing import _cycles_per_us

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

KEY = 0x5EC12E7_0DDBA11_5
S = 1024
DEV = torch.device("cuda", 0)


@pytest.fixture(scope="module")
def loop() -> Any:
    from eval.worker.native_loop import NativeLoop

    return NativeLoop(DEV, KEY, samples=S)


def test_init_clears_the_persisting_l2_limit(loop: Any) -> None:
    limit = ctypes.c_size_t(1)
    assert _driver().cuCtxGetLimit(ctypes.byref(limit), 6) == 0 and limit.value == 0
    assert loop.block(lambda: torch.ones(1, device=DEV), [], 2, first_rep=0).violations == []


def assert_captures(res: Any, outs: list[list[torch.Tensor]], first_rep: int) -> None:
    """res.captures[i, l] equals capture(outs[i][l]) of eval/crossing/_capture.py to fp64 rounding."""
    assert res.captures.shape == (len(outs), len(outs[0]), S + CAPTURE_EXTRA)
    for i, rep_outs in enumerate(outs):
        for l, t in enumerate(rep_outs):
            want = capture(t, KEY, first_rep + i, l, S)
            got = res.captures[i, l]
            assert torch.equal(torch.isnan(got), torch.isnan(want)), (i, l)
            scale = max(1.0, float(want[S + SUM_ABS]))
            assert torch.allclose(got.nan_to_num(0), want.nan_to_num(0), rtol=1e-9, atol=1e-12 * scale), (i, l, t.dtype)
            assert torch.equal(got[:S].nan_to_num(0), want[:S].nan_to_num(0)), "samples are exact values"


def random_like(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(shape, generator=gen, device=DEV) * 40
    if dtype == torch.bool:
        return x > 0
    if dtype == torch.uint8:
        return x.abs().to(dtype)
    return x.to(dtype)


DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_captures_match_the_specification(loop: Any, dtype: torch.dtype) -> None:
    gen = torch.Generator(device=DEV).manual_seed(0)
    x = random_like((37, 129), dtype, gen)
    outs: list[list[torch.Tensor]] = []
    sources = [random_like((37, 129), dtype, gen) for _ in range(3)]
    seen: list[torch.Tensor] = []

    def forward(a: torch.Tensor) -> Any:
        seen.append(a.clone())  # the repetition's input copy is enqueued before its call
        y = a.clone()
        kept = [y, y.t(), y[1:, ::3], y[:3, :5]]
        outs.append(kept)
        return {"whole": y, "views": (y.t(), [y[1:, ::3]]), "small": y[:3, :5]}

    res = loop.block(forward, [x], 3, first_rep=5, copies=[[(x, s)] for s in sources])
    assert res.violations == [] and len(res.times_ms) == 3
    assert all(torch.equal(a, s) for a, s in zip(seen, sources))
    name = str(dtype).removeprefix("torch.")
    assert res.leaves == [(name, [37, 129]), (name, [129, 37]), (name, [36, 43]), (name, [3, 5])]
    assert_captures(res, outs, 5)


@pytest.mark.parametrize("dtype", (torch.float8_e4m3fn, torch.float8_e5m2))
def test_fp8_captures_decode_every_bit_pattern(loop: Any, dtype: torch.dtype) -> None:
    """All 256 codes (zeros, subnormals, the largest values, infinities and NaNs) decode as torch converts them."""
    codes = torch.arange(256, dtype=torch.uint8, device=DEV).view(dtype)
    outs: list[list[torch.Tensor]] = []

    def forward() -> torch.Tensor:
        y = codes.clone()
        outs.append([y])
        return y

    res = loop.block(forward, [], 2, first_rep=3)
    assert res.violations == []
    assert_captures(res, outs, 3)


def test_large_and_odd_outputs(loop: Any) -> None:
    big = torch.randn(3_000_017, device=DEV)
    big[[5, 100_000]] = float("nan")
    big[7] = float("inf")
    big[2_999_999] = float("-inf")
    odd = torch.randn(2, 1, 3, 1, 5, 4, 1, 2, device=DEV).permute(7, 3, 5, 0, 2, 6, 1, 4)
    scalar = torch.tensor(3.5, device=DEV)
    empty = torch.empty(0, 4, device=DEV)
    outs = [big, odd, scalar, empty]
    res = loop.block(lambda: tuple(outs), [], 2, first_rep=-3)
    assert res.violations == []
    assert_captures(res, [outs, outs], -3)


def test_a_self_overlapping_output_is_a_violation(loop: Any) -> None:
    """A stride-0 view (one value shown 300 times) is not a dense output: the loop names it, as the trials do."""
    dense = torch.randn(7, device=DEV)
    expanded = torch.randn(5, 1, device=DEV).expand(5, 300)
    res = loop.block(lambda: (dense, expanded), [], 2, first_rep=0)
    assert res.violations == ["output tensor 1 overlaps itself (a stride-0 or overlapping view)"]


def test_capture_off_and_sync_each(loop: Any) -> None:
    x = torch.ones(10, device=DEV)
    res = loop.block(lambda: x + 1, [], 4, first_rep=0, capture=False, sync_each=True)
    assert res.violations == [] and len(res.times_ms) == 4 and res.captures.numel() == 0
    assert res.leaves == [("float32", [10])]


class Sub(torch.Tensor):
    pass


def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


@pytest.mark.parametrize("case", ["stream", "subclass", "cpu", "l2_limit", "window", "other_device_tensor_type"])
def test_violations(loop: Any, case: str) -> None:
    x = torch.ones(8, device=DEV)
    side = torch.cuda.Stream(DEV)

    def forward() -> Any:
        if case == "stream":
            torch.cuda.set_stream(side)
            return x * 2
        if case == "subclass":
            return (x, x.as_subclass(Sub))
        if case == "cpu":
            return x.cpu()
        if case == "l2_limit":
            assert _driver().cuCtxSetLimit(ctypes.c_int(6), ctypes.c_size_t(1 << 20)) == 0
            return x + 1
        if case == "window":
            value = (ctypes.c_char * 64)()
            ctypes.c_void_p.from_buffer(value, 0).value = x.data_ptr()
            ctypes.c_size_t.from_buffer(value, 8).value = 32
            ctypes.c_float.from_buffer(value, 16).value = 1.0
            ctypes.c_int.from_buffer(value, 20).value = 2  # CU_ACCESS_PROPERTY_PERSISTING
            assert _driver().cuStreamSetAttribute(ctypes.c_void_p(0), 1, value) == 0
            return x + 1
        return torch.nn.Parameter(x.clone())

    if case == "window" and not loop.info()["checks_window"]:
        pytest.skip("the default stream's access-policy window cannot be read on this device")
    try:
        res = loop.block(forward, [], 2, first_rep=0)
    finally:
        torch.cuda.set_stream(torch.cuda.default_stream(DEV))
    expect = {"stream": "current CUDA stream changed", "subclass": "not an exact torch.Tensor",
              "cpu": "not on the timed device", "l2_limit": "persisting L2 cache limit found set",
              "window": "access-policy window found set", "other_device_tensor_type": "not an exact torch.Tensor"}[case]
    assert any(expect in v for v in res.violations), res.violations
    if case in ("l2_limit", "window"):
        assert len(res.times_ms) == 2  # recorded, reset, and timing goes on
        limit = ctypes.c_size_t()
        assert _driver().cuCtxGetLimit(ctypes.byref(limit), 6) == 0 and limit.value == 0
    else:
        assert res.times_ms == [] and res.captures.shape[0] == 0


def test_forward_sees_no_loop_state_on_its_stack(loop: Any) -> None:
    x = torch.ones(8, device=DEV)
    flush_bytes = loop.info()["flush_bytes"]
    seen: dict[str, Any] = {}

    def forward() -> torch.Tensor:
        caller = sys._getframe(1)
        seen["caller"] = (caller.f_code.co_name, Path(caller.f_code.co_filename).name)
        seen["caller_locals"] = set(caller.f_locals)
        values = []
        frame = sys._getframe(0)
        while frame is not None:
            values.extend(frame.f_locals.values())
            frame = frame.f_back
        seen["events"] = [v for v in values if isinstance(v, torch.cuda.Event)]
        seen["flush"] = [v for v in values if isinstance(v, torch.Tensor) and v.numel() * v.element_size() >= flush_bytes]
        return x + 1

    res = loop.block(forward, [], 1, first_rep=0)
    assert res.violations == []
    assert seen["caller"] == ("block", "native_loop.py")  # no loop frame between forward and block
    assert seen["caller_locals"] <= {"self", "forward", "args", "reps", "first_rep", "flush", "flush_bytes", "flush_arg",
                                     "lead", "sync_each", "capture", "copies", "plan"}
    assert seen["events"] == [] and seen["flush"] == []


def test_errors_propagate_and_the_loop_is_not_reentrant(loop: Any) -> None:
    def boom() -> None:
        raise KeyError("from forward")

    with pytest.raises(KeyError, match="from forward"):
        loop.block(boom, [], 3, first_rep=0)
    with pytest.raises(RuntimeError, match="no re-entry"):
        loop.block(lambda: loop.block(lambda: None, [], 1, first_rep=0), [], 1, first_rep=0)
    x = torch.ones(4, device=DEV)
    assert loop.block(lambda: x, [], 2, first_rep=0).violations == []


def test_times_hide_launch_latency(loop: Any) -> None:
    cycles_1ms = int(_cycles_per_us() * 1000)
    res = loop.block(lambda: torch.cuda._sleep(cycles_1ms) or torch.zeros(1, device=DEV), [], 20, first_rep=0,
                     capture=False)
    med = statistics.median(res.times_ms)
    assert 0.97 < med < 1.05, res.times_ms
    x = torch.ones(1024, device=DEV)
    tiny = statistics.median(loop.block(lambda: x + 1, [], 50, first_rep=0).times_ms)
    assert tiny < 0.03, tiny  # a few microseconds of GPU work, not the host's launch latency
    print(f"1 ms sleep: {med:.4f} ms; x + 1 on 1024 floats: {tiny * 1000:.1f} us; info {loop.info()}")


def test_the_lead_lasts_its_time_whatever_the_clock(loop: Any) -> None:
    """The lead spins on the global timer: it lasts its set time in every process, however the SM clock moved
    since it was set (a clock64 spin calibrated once per process did not, and offset the wall bound)."""
    import time

    busy = torch.empty(1 << 28, device=DEV)
    x = torch.ones(1024, device=DEV)
    for _ in range(20):  # load the GPU so its clocks move from where they were when the lead was set
        busy.mul_(1.0001)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = loop.block(lambda: x + 1, [], 200, first_rep=0, capture=False, flush=False)
    per_rep_us = (time.perf_counter() - t0) * 1e6 / 200
    info = loop.info()
    assert info["lead_us"] == 200.0 and abs(info["lead_measured_us"] - 200.0) < 10.0, info
    assert 195.0 < per_rep_us < 230.0, (per_rep_us, info)  # the GPU spends the lead on every repetition
    assert max(res.times_ms) < 0.03, res.times_ms  # and it stays outside the events


def test_the_loops_own_kernels_fill_every_sm() -> None:
    """The copies, the flush, the lead and the capture's partial sums are launched to take every SM whole."""
    from eval.worker.native_loop import NativeLoop

    info = NativeLoop(DEV, KEY, samples=S).info()
    props = torch.cuda.get_device_properties(DEV)
    assert info["fills_sms"] == 1, info
    assert info["fill_blocks"] * info["fill_threads"] == props.multi_processor_count * props.max_threads_per_multi_processor, info
    assert info["capture_blocks"] % props.multi_processor_count == 0 and info["capture_blocks"] <= 2048, info


@pytest.mark.parametrize("n, flush, capture", [(1024, False, False), (1 << 24, True, True)],
                         ids=["lead", "whole_repetition_16M"])
def test_work_queued_on_a_side_stream_cannot_hide_in_the_loops_gpu_time(loop: Any, n: int, flush: bool,
                                                                          capture: bool) -> None:
    """Class 9 of the measurement attacks, at the loop: each call queues ~150 us of GPU work on a side stream that
    nothing waits for, while the loop's own kernels (lead; with a large output also the flush, the input copy and
    the capture) hold the GPU around the next call. With a lead of one thread that work ran beside it for free;
    with the loop's kernels filling every SM it cannot run beside them, so the block takes longer by about that
    work (the wall time the parent bounds), though the events stay the same."""
    import time

    side = torch.cuda.Stream(device=DEV)
    x = torch.ones(n, device=DEV)
    src = torch.ones(n, device=DEV)
    cycles = int(_cycles_per_us() * 150)

    def hiding(a: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
        return a + 1

    def per_rep_us(forward: Any) -> tuple[float, float, float]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = loop.block(forward, [x], 50, first_rep=0, capture=capture, flush=flush, copies=[[(x, src)]] * 50)
        torch.cuda.synchronize()
        return ((time.perf_counter() - t0) * 1e6 / 50, 1000 * statistics.median(res.times_ms),
                1000 * sum(res.outside_ms) / 50)

    honest = min(per_rep_us(lambda a: a + 1) for _ in range(3))
    hidden = min(per_rep_us(hiding) for _ in range(3))
    print(f"per repetition (wall us, median event us, loop's own GPU us) at {n}: honest {honest}, "
          f"with 150 us queued aside {hidden}")
    assert hidden[0] - honest[0] > 100.0, (honest, hidden)  # the side work shows in the wall time
    assert hidden[1] < honest[1] + 10.0, (honest, hidden)  # while the events still see a + 1
    assert hidden[2] - honest[2] > 100.0, (honest, hidden)  # and in the loop's own GPU time, at GPU precision


def test_the_loops_own_gpu_time_is_measured_by_part(loop: Any) -> None:
    """`outside_ms`: the lead-in holds the 200 us lead (plus the flush and copies), the capture and the gaps between
    repetitions are small and positive, and together they are no more than the block's wall time."""
    import time

    x, src = torch.ones(1 << 20, device=DEV), torch.ones(1 << 20, device=DEV)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = loop.block(lambda a: a + 1, [x], 40, first_rep=0, copies=[[(x, src)]] * 40)
    wall_us = (time.perf_counter() - t0) * 1e6
    lead_in, captured, between = (1000 * t for t in res.outside_ms)
    print(f"40 repetitions on 2**20 elements: wall {wall_us:.0f} us, lead-in {lead_in:.0f}, capture {captured:.0f}, "
          f"between {between:.0f}, calls {1000 * sum(res.times_ms):.0f}")
    assert 200.0 * 40 <= lead_in < 400.0 * 40, res.outside_ms
    assert 0.0 < captured < 100.0 * 40 and 0.0 <= between, res.outside_ms
    assert lead_in + captured + between + 1000 * sum(res.times_ms) <= wall_us, (wall_us, res.outside_ms)
