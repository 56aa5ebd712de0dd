"""Speed of light: the device's measured ceilings and a problem's roofline floor.

`probe()` measures, once per device and software versions, the device-to-device copy bandwidth
(bytes read plus bytes written) and dense matmul throughput per dtype (fp32 with TF32 off,
as the checker runs it). A problem's floor is max(FLOPs / peak, bytes / bandwidth); a timing's
SOL fraction is floor / time, and a time well under the floor is physically implausible.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from eval.cache import JsonCache, cache_key
from problems import strict_precision

# a measured time this far under the floor is flagged (measurement noise stays well inside it)
IMPLAUSIBLE_BELOW_FLOOR = 0.9
# A time under this share of the byte floor (every input and parameter read once, every output written once, at the
# measured copy bandwidth, with the L2 flushed before the call) is rejected: no correct kernel moves its bytes that
# fast. Why not closer to 1: the copy bandwidth counts reads and writes, a read-only stream runs ~10 % faster, and
# an output that fits the L2 may not reach memory inside the timed call, so an elementwise kernel's physical limit
# is about half its byte floor. The FLOP floor is never a rejection: an algebraic shortcut (a diagonal matmul as a
# scaling) legitimately does less arithmetic than the reference.
REJECT_BELOW_BYTE_FLOOR = 0.25
_MATMUL_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class Ceilings:
    """Measured ceilings of one device."""

    device: str
    copy_bytes_per_s: float
    matmul_flops_per_s: dict[str, float]

    def byte_floor_s(self, nbytes: float | None) -> float | None:
        """Seconds to move `nbytes` at the measured copy bandwidth, or None without a byte count."""
        return nbytes / self.copy_bytes_per_s if nbytes else None

    def floor_s(self, flops: float | None, nbytes: float | None, dtype: str) -> float | None:
        """Roofline floor in seconds, or None when the problem gives neither FLOPs nor bytes."""
        terms = []
        if flops:
            peak = self.matmul_flops_per_s.get(dtype) or self.matmul_flops_per_s.get("float32")
            if peak:
                terms.append(flops / peak)
        if nbytes:
            terms.append(self.byte_floor_s(nbytes))
        return max(terms) if terms else None


def _median_event_ms(fn: Any, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _copy_bytes_per_s(device: torch.device) -> float:
    src = torch.randn(1 << 28, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    ms = _median_event_ms(lambda: dst.copy_(src), 20)
    return 2 * src.numel() * src.element_size() / (ms / 1000.0)


def _matmul_flops_per_s(device: torch.device, dtype: torch.dtype, n: int = 8192) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    ms = _median_event_ms(lambda: a @ b, 10)
    return 2 * n**3 / (ms / 1000.0)


def probe(device: torch.device | None = None) -> Ceilings:
    """Measure copy bandwidth and matmul throughput on random data (never zeros)."""
    device = device or torch.device("cuda")
    strict_precision()  # the ceilings of full-precision float32 matmuls, as the problems are timed
    copy_bps = _copy_bytes_per_s(device)
    flops = {name: _matmul_flops_per_s(device, getattr(torch, name)) for name in _MATMUL_DTYPES}
    torch.cuda.empty_cache()
    return Ceilings(device=torch.cuda.get_device_name(device), copy_bytes_per_s=copy_bps, matmul_flops_per_s=flops)


def _key(device_name: str) -> str:
    import triton

    return cache_key(device=device_name, torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda)


def cached_ceilings(cache_dir: str | Path, device_name: str) -> Ceilings | None:
    """Ceilings measured earlier for this device and these versions, if any."""
    hit = JsonCache(cache_dir, "device").get(_key(device_name))
    return Ceilings(**{k: v for k, v in hit.items() if k != "measured_at"}) if hit else None


def probe_and_cache(cache_dir: str | Path, device: torch.device | None = None) -> Ceilings:
    """Measure the ceilings now and store them for later evaluations."""
    ceilings = probe(device)
    JsonCache(cache_dir, "device").put(_key(ceilings.device), {**asdict(ceilings), "measured_at": time.time()})
    return ceilings
