"""Timed repetitions in C (eval/worker/native/timed_loop.c), for the sandboxed worker.

With the timing loop in Python, a candidate's forward() could walk the stack to the loop's
frame and patch its hooks, flush buffer or events: for instance return an unwritten tensor while
timed and have the correct values written outside the events. Here one C call runs the whole
block: per repetition the input copies, checks of the current stream and the persisting-L2 settings,
the L2 flush, a spin kernel as lead, start event, forward, end event, and the launch of the kernels
that capture the output (eval/crossing/_capture.py defines them), all on the device's default stream. The
only Python frame between forward() and the caller is `block`'s, which holds no event, buffer or
hook; the key lives only in C.

The copies, the flush and the lead are kernels of capture.cu launched to fill every SM (`info()`:
`fills_sms`), so no other kernel's block is resident while they run. The lead alone is 200 us a
repetition in which a kernel of one thread left the rest of the GPU idle: work a candidate queued on
another stream ran there for free, outside its events and without adding wall time. Now such work
waits for SMs and adds to the block's wall time, which the parent bounds (`eval.timing.claim_bounds.wall_bound`).
"""

from __future__ import annotations

from typing import Any, Callable

import array

import torch

from eval.crossing._capture import CAPTURE_EXTRA, SUPPORTED_DTYPES
from eval.crossing import _native_build as build
from eval.worker.timing import CAPTURE_SAMPLES, BlockResult, Copies, check_copies, span_bytes


class NativeLoop:
    """The timed loop of one CUDA device. Build it in trusted code, before any candidate import. `cubin` holds its
    kernels (default: capture.cu as shipped, compiled once per machine); benches pass variants."""

    def __init__(self, device: torch.device, key: int, samples: int = CAPTURE_SAMPLES, lead_us: float = 200.0,
                 cubin: bytes | None = None):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"NativeLoop needs a CUDA device, not {device}")
        index = device.index if device.index is not None else torch.cuda.current_device()
        device = torch.device("cuda", index)
        torch.cuda.set_device(index)
        torch.cuda.init()
        torch.empty(1, device=device)  # the primary context is current on this thread
        if torch.cuda.current_stream(device) != torch.cuda.default_stream(device):
            raise RuntimeError("NativeLoop must be built while the default stream is current")
        props = torch.cuda.get_device_properties(index)
        l2 = int(getattr(props, "L2_cache_size", 0) or (64 << 20))
        module = build.load(build.ensure_built())
        base = torch._C.TensorBase
        self.samples = samples
        self._loop = module.Loop(
            cubin=cubin or build.cached_cubin(f"sm_{props.major}{props.minor}"),
            key=key, samples=samples, flush_bytes=max(2 * l2, 8 << 20), device_index=index, device=device,
            get_stream=torch._C._cuda_getCurrentRawStream, tensor_type=torch.Tensor,
            data_ptr=base.data_ptr, size=base.size, stride=base.stride,
            device_descr=base.__dict__["device"], layout_descr=base.__dict__["layout"],
            dtype_descr=base.__dict__["dtype"], strided=torch.strided, dtypes=SUPPORTED_DTYPES,
            dtype_names=tuple(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES),
        )
        self.lead_measured_us = self._loop.set_lead(lead_us)

    def rekey(self, key: int) -> None:
        """Key the captures anew (the reference process serves each evaluation with that candidate worker's key)."""
        self._loop.rekey(key)

    def info(self) -> dict[str, Any]:
        """The GPU lead (set and measured), flush size, and whether this device lets the L2 checks run."""
        return self._loop.info()

    def block(self, forward: Callable[..., Any], args: list[Any], reps: int, *, first_rep: int, flush: bool = True,
              flush_bytes: int = 0, lead: bool = True, sync_each: bool = False, capture: bool = True,
              copies: Copies | None = None) -> BlockResult:
        """Time `reps` calls forward(*args) (repetitions first_rep, first_rep + 1, ...) in one C call; `copies[i]`
        are repetition i's input copies, enqueued in C before its call. `flush_bytes` (0: twice the L2) are written
        before each call when `flush`; `lead` queues the spin before each start event."""
        plan = None
        if copies:
            check_copies(copies)
            if len(copies) != reps or len({len(pairs) for pairs in copies}) != 1:
                raise ValueError("copies must give the same number of input copies for every repetition")
            plan = array.array("Q", [v for pairs in copies for dst, src in pairs
                                     for v in (dst.data_ptr(), src.data_ptr(), span_bytes(src))]).tobytes()
        flush_arg = (flush_bytes or -1) if flush else 0
        times, raw, leaves, violations, outside = self._loop.run(forward, tuple(args), reps, first_rep, flush_arg,
                                                                 lead, sync_each, capture, plan)
        if capture:
            captures = torch.frombuffer(raw, dtype=torch.float64) if len(raw) else torch.empty(0, dtype=torch.float64)
            captures = captures.view(len(times), len(leaves), self.samples + CAPTURE_EXTRA)
        else:
            captures = torch.empty(0, dtype=torch.float64)
        return BlockResult(times_ms=times, captures=captures, leaves=leaves, violations=violations,
                           outside_ms=list(outside))
