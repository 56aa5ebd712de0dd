"""The GPU-idle probe, worker side: run in the clean reference process only (the parent reads it,
`eval.timing._gpu_idle`).

One round launches a one-element kernel and synchronises, timed on the host. Without MPS the kernels of different
CUDA contexts never run at once: the GPU takes turns between contexts, so while another process has work resident
or queued, a round waits for that process's turn (up to a time slice, milliseconds); on an idle GPU it takes
microseconds. The probe reports raw round times and its calibration; the parent decides what they mean.
"""

from __future__ import annotations

import statistics
import time

import torch

CALIBRATION_ROUNDS = 32  # about 0.5 ms on an idle H100


class IdleProbe:
    """The probe of one process; on the CPU it has nothing to probe and every answer is empty."""

    def __init__(self, device: torch.device):
        self._one = torch.zeros(1, device=device) if device.type == "cuda" else None
        self.idle_us = 0.0  # the lowest median of the calibration rounds so far (0: never calibrated)

    def rounds(self, n: int) -> list[float]:
        """Host time of `n` rounds, in microseconds (none on the CPU)."""
        if self._one is None:
            return []
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            self._one.add_(1.0)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e6)
        return times

    def calibrate(self) -> None:
        """One calibration round. The lowest median is kept: a round beside another process's work is only ever
        slower, so the calibration converges on the idle GPU's time."""
        times = self.rounds(CALIBRATION_ROUNDS)
        if times:
            median = statistics.median(times)
            self.idle_us = median if not self.idle_us else min(self.idle_us, median)
