"""The stored profile of one evaluation: plain data, so that it round-trips through JSON with its `EvalResult`.

A result stored before profiles existed has none (`EvalResult.profile` is None), and a profile that could not be
taken is a `Profile` whose `note` says why, never an error.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

LEVELS = ("off", "basic", "full")


@dataclass
class KernelProfile:
    """One kernel of the profiled forward call, its launches summed (times, bytes, FLOPs) or time-weighted (rates).

    share: of the call's GPU time (all kernels ncu profiled in it); dram_pct / sm_pct: DRAM and SM throughput as % of
    the device's peak; occupancy_pct: achieved occupancy (active warps, % of the SM's maximum); spills: local-memory
    load and store instructions (register spills, or local arrays); flops: FP32/FP64/FP16 instructions (an FMA counts
    two) plus tensor-core operations where ncu counts them; stalls: the top stall reasons (`eval.profile=full`), each
    a share of the stalled warps per issued instruction.
    """

    name: str
    own: bool
    launches: int = 1
    time_ns: float = 0.0
    share: float = 0.0
    dram_pct: float | None = None
    sm_pct: float | None = None
    occupancy_pct: float | None = None
    tensor_pct: float | None = None
    registers: int | None = None
    shared_bytes: int | None = None
    spills: int | None = None
    dram_bytes: float | None = None
    flops: float | None = None
    grid: int | None = None
    block: int | None = None
    stalls: list[tuple[str, float]] = field(default_factory=list)

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity: FLOPs per DRAM byte (None without both)."""
        if self.flops is None or not self.dram_bytes:
            return None
        return self.flops / self.dram_bytes

    @property
    def flops_per_s(self) -> float | None:
        return self.flops / (self.time_ns * 1e-9) if self.flops is not None and self.time_ns > 0 else None

    @property
    def bytes_per_s(self) -> float | None:
        return self.dram_bytes / (self.time_ns * 1e-9) if self.dram_bytes is not None and self.time_ns > 0 else None


@dataclass
class SideProfile:
    """The kernels of one side's profiled call (`candidate` or `reference`), by GPU time; `note`: what is missing."""

    side: str
    kernels: list[KernelProfile] = field(default_factory=list)
    note: str = ""

    @property
    def total_ns(self) -> float:
        return sum(k.time_ns for k in self.kernels)


@dataclass
class Profile:
    """A correct candidate's profile and its reference's, with the device's roofline for reading them.

    peak_flops_per_s / peak_bytes_per_s: the evaluator's measured ceilings (`eval.timing.roofline`) for the problem's
    dtype, whose ratio is the ridge; seconds: the time the profile added to the evaluation; note: why there is no
    profile (no ncu, no counter access, no GPU), or what went wrong."""

    level: str = "basic"
    tool: str = ""
    candidate: SideProfile | None = None
    reference: SideProfile | None = None
    peak_flops_per_s: float | None = None
    peak_bytes_per_s: float | None = None
    seconds: float = 0.0
    note: str = ""

    @property
    def ridge(self) -> float | None:
        """FLOPs per byte where the roofline turns from memory-bound to compute-bound."""
        if not self.peak_flops_per_s or not self.peak_bytes_per_s:
            return None
        return self.peak_flops_per_s / self.peak_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Profile":
        """The inverse of `to_dict`, tolerant of fields added or dropped since it was stored."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        for side in ("candidate", "reference"):
            if values.get(side) is not None:
                values[side] = _side(values[side])
        return cls(**values)


def _side(d: dict[str, Any]) -> SideProfile:
    known = {f.name for f in dataclasses.fields(KernelProfile)}
    kernels = []
    for k in d.get("kernels", []):
        k = {name: v for name, v in k.items() if name in known}
        k["stalls"] = [(str(r), float(s)) for r, s in k.get("stalls", [])]
        kernels.append(KernelProfile(**k))
    return SideProfile(side=str(d.get("side", "")), kernels=kernels, note=str(d.get("note", "")))
