"""Nsight Compute's side of a profile: the metrics asked for, its command line, and its raw CSV read back.

`ncu --csv --page raw` prints one header row (the launch's columns, then one column per metric, sorted), a row of
units, and one row per profiled kernel launch; numbers carry thousands separators ("2,048") and a missing value is
"n/a". Lines that are not CSV (`==PROF==` notes, whatever the profiled process printed) are skipped. Its output
reaches the parent through the sandbox's capped pipe, and the candidate can print a CSV of its own there: what is
read here is a diagnostic, and nothing of a verdict ever depends on it.

Metrics are named, not taken from sections, so that a profile costs only the passes it needs. Those in `OPTIONAL`
are groups an ncu version or GPU may not know; ncu then refuses the whole run ("Failed to find metric"), and the
profiler runs it once more without the groups it named (`retry_without`).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any, Iterable

from eval.profile_record import KernelProfile

# every level: time, throughput against the peaks, occupancy, launch resources, DRAM bytes, spills, FLOP counts
_FLOP_OPS = ("fadd", "fmul", "ffma", "dadd", "dmul", "dfma", "hadd", "hmul", "hfma")
BASIC = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__grid_size",
    "launch__block_size",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__sass_inst_executed_op_local_ld.sum",
    "smsp__sass_inst_executed_op_local_st.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    *(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in _FLOP_OPS),
)
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle", "long_scoreboard",
                 "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction", "short_scoreboard",
                 "sleeping", "tex_throttle", "wait")
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
# groups of metrics some ncu versions or GPUs lack (ncu then refuses the run): tensor-core operations (the FLOPs of
# tensor-core kernels) at every level; the stall reasons at `full`
_TENSOR_OPS = tuple(f"sm__ops_path_tensor_src_{path}.sum" for path in (
    "fp16_dst_fp16", "fp16_dst_fp32", "bf16_dst_fp32", "tf32_dst_fp32", "fp64"))
OPTIONAL: dict[str, tuple[str, ...]] = {
    "tensor_ops": _TENSOR_OPS,
    "stalls": tuple(_STALL.format(r) for r in STALL_REASONS),
}
_LEVEL_GROUPS = {"basic": ("tensor_ops",), "full": ("tensor_ops", "stalls")}
_LOCAL = ("smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum")
MAX_LAUNCHES = 64  # kernel launches profiled per call; more are left unprofiled (and said so)
_NAME_COLUMNS = ("Kernel Name", "Function Name", "Demangled Name")  # as ncu versions call it
_UNKNOWN_METRIC = re.compile(r"Failed to find metric\s+'?\"?([A-Za-z0-9_.:]+)")

_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_BYTES = {"byte": 1.0, "B": 1.0, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9,
          "Tbyte": 1e12, "TB": 1e12, "Kibyte": 1024.0, "KiB": 1024.0, "Mibyte": 1024.0**2, "MiB": 1024.0**2,
          "Gibyte": 1024.0**3, "GiB": 1024.0**3}


def metrics(level: str, dropped: Iterable[str] = ()) -> list[str]:
    """The metrics of a level, less the optional groups `dropped`."""
    names = list(BASIC)
    for group in _LEVEL_GROUPS[level]:
        if group not in dropped:
            names += OPTIONAL[group]
    return names


def command(ncu: str, level: str, dropped: Iterable[str] = ()) -> list[str]:
    """ncu's command line, the profiled command to follow it. Clocks are left alone (`--clock-control none`: locking
    them would change every other process's timings on the GPU); only what runs between cudaProfilerStart and Stop
    is profiled, each kernel replayed with the caches flushed between passes (ncu's defaults)."""
    return [ncu, "--csv", "--page", "raw", "--profile-from-start", "off", "--clock-control", "none",
            "--target-processes", "application-only", "--launch-count", str(MAX_LAUNCHES),
            "--metrics", ",".join(metrics(level, dropped))]


def retry_without(output: str, level: str, dropped: Iterable[str]) -> set[str] | None:
    """The optional groups to drop for a second run when ncu refused metrics it does not know, or None (no such
    refusal, or nothing optional left to drop)."""
    if "Failed to find metric" not in output:
        return None
    named = set(_UNKNOWN_METRIC.findall(output))
    left = [g for g in _LEVEL_GROUPS[level] if g not in dropped]
    hit = {g for g in left if named & set(OPTIONAL[g])} or set(left)  # unnamed: every optional group left
    return hit or None


def failure_note(output: str) -> str:
    """What ncu's output says went wrong, in a sentence for the note (or "")."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("no access to the GPU's performance counters here (ERR_NVGPUCTRPERM): the driver keeps them for "
                "administrators, and candidate code never runs with privileges; load the nvidia module with "
                "NVreg_RestrictProfilingToAdminUsers=0 to profile")
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("==ERROR=="):
            return f"ncu failed: {line[len('==ERROR=='):].strip()[:300]}"
    if "No kernels were profiled" in output:
        return "ncu profiled no kernel (none ran between cudaProfilerStart and cudaProfilerStop)"
    return ""


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _in_base_units(value: float, unit: str) -> float:
    """Times in ns, bytes in bytes; percentages, counts and ratios as they are."""
    unit = unit.strip().split("/")[0]  # "byte/block" -> "byte"
    return value * _TIME_NS.get(unit, _BYTES.get(unit, 1.0))


def parse_raw_csv(text: str, max_rows: int = 4 * MAX_LAUNCHES) -> list[dict[str, Any]]:
    """The launches of `ncu --csv --page raw` output: per row, `Kernel Name` (text) and each metric in base units
    (None where ncu had no value). Raises ValueError when the output holds no such table."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ValueError("no ncu raw CSV table in the output")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    name_column = next((header.index(c) for c in _NAME_COLUMNS if c in header), None)
    if name_column is None:
        raise ValueError("the ncu CSV table has no kernel name column")
    body = rows[1:]
    units = body.pop(0) if body and body[0] and body[0][0] == "" else [""] * len(header)
    metric_columns = [i for i, name in enumerate(header) if "__" in name]
    launches = []
    for row in body[:max_rows]:
        if len(row) != len(header) or not row[0].strip():
            continue
        launch: dict[str, Any] = {"Kernel Name": row[name_column]}
        for i in metric_columns:
            value = _number(row[i])
            launch[header[i]] = None if value is None else _in_base_units(value, units[i] if i < len(units) else "")
        launches.append(launch)
    return launches


def _total(launch: dict[str, Any], names: Iterable[str], weights: Iterable[float] | None = None) -> float | None:
    values = [(launch.get(n), w) for n, w in zip(names, weights or [1.0] * 1000)]
    present = [(v, w) for v, w in values if v is not None]
    return sum(v * w for v, w in present) if present else None


def _flops(launch: dict[str, Any]) -> float | None:
    """FLOPs of a launch: adds and multiplies count one, an FMA two; tensor-core operations as ncu counts them."""
    names = [f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in _FLOP_OPS]
    scalar = _total(launch, names, [2.0 if op.endswith("fma") else 1.0 for op in _FLOP_OPS])
    tensor = _total(launch, _TENSOR_OPS)
    return None if scalar is None and tensor is None else (scalar or 0.0) + (tensor or 0.0)


def _as_int(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def kernels(launches: list[dict[str, Any]], is_own: Any) -> list[KernelProfile]:
    """One `KernelProfile` per kernel name, by GPU time: times, bytes, FLOPs and spills summed over its launches,
    throughputs and occupancy weighted by time, launch resources the largest seen. `is_own(name)` says whether a
    profiled kernel is the candidate's own."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for launch in launches:
        by_name.setdefault(str(launch["Kernel Name"]), []).append(launch)
    total = sum(launch.get("gpu__time_duration.sum") or 0.0 for launch in launches)
    out = []
    for name, group in by_name.items():
        times = [launch.get("gpu__time_duration.sum") or 0.0 for launch in group]
        time_ns = sum(times)

        def weighted(metric: str) -> float | None:
            pairs = [(launch.get(metric), t) for launch, t in zip(group, times) if launch.get(metric) is not None]
            if not pairs:
                return None
            weight = sum(t for _, t in pairs)
            return sum(v * t for v, t in pairs) / weight if weight > 0 else sum(v for v, _ in pairs) / len(pairs)

        def summed(metric_names: Iterable[str]) -> float | None:
            parts = [_total(launch, metric_names) for launch in group]
            present = [p for p in parts if p is not None]
            return sum(present) if present else None

        def largest(metric: str) -> float | None:
            values = [launch.get(metric) for launch in group if launch.get(metric) is not None]
            return max(values) if values else None

        flops = [f for f in (_flops(launch) for launch in group) if f is not None]
        static = largest("launch__shared_mem_per_block_static")
        dynamic = largest("launch__shared_mem_per_block_dynamic")
        stalls = {r: weighted(_STALL.format(r)) for r in STALL_REASONS}
        stalled = sum(v for v in stalls.values() if v)
        top = sorted(((r, v / stalled) for r, v in stalls.items() if v and stalled > 0), key=lambda x: -x[1])[:3]
        out.append(KernelProfile(
            name=name, own=bool(is_own(name)), launches=len(group), time_ns=time_ns,
            share=time_ns / total if total > 0 else 0.0,
            dram_pct=weighted("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            sm_pct=weighted("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            occupancy_pct=weighted("sm__warps_active.avg.pct_of_peak_sustained_active"),
            tensor_pct=weighted("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
            registers=_as_int(largest("launch__registers_per_thread")),
            shared_bytes=None if static is None and dynamic is None else _as_int((static or 0) + (dynamic or 0)),
            spills=_as_int(summed(_LOCAL)),
            dram_bytes=summed(["dram__bytes_read.sum", "dram__bytes_write.sum"]),
            flops=sum(flops) if flops else None,
            grid=_as_int(largest("launch__grid_size")), block=_as_int(largest("launch__block_size")),
            stalls=[(r, round(s, 4)) for r, s in top]))
    return sorted(out, key=lambda k: -k.time_ns)
