"""The report's view of profiles (`eval.profile`): a table per attempt in the transcript viewer, a roofline per run.

Profiles come from the stored results (`EvalResult.profile`), read as the run store keeps them; a run without any
gets no roofline, and a result without one (stored before profiles existed, or profiled off) shows nothing. Kernel
names are the candidate's text: the viewer sets them with textContent, the plot escapes them (`svg.esc`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from harness.report import svg
from harness.report.load import RunData

COLUMNS = ["side", "kernel", "share", "time (us)", "DRAM % of peak", "SM % of peak", "occupancy %", "registers",
           "shared / block", "spills", "FLOP/byte", "top stalls"]
_OWN, _LIBRARY, _REFERENCE = "#1565c0", "#9e9e9e", "#ef6c00"


def _fmt(value: float | None, digits: int = 0) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _sides(profile: Any) -> list[Any]:
    return [s for s in (profile.candidate, profile.reference) if s is not None]


def viewer(profile: Any) -> dict[str, Any] | None:
    """An attempt's profile as the transcript viewer shows it: its note and one row per kernel (None: no profile)."""
    if profile is None:
        return None
    rows = []
    for side in _sides(profile):
        for k in side.kernels:
            label = "reference" if side.side == "reference" else ("own" if k.own else "library")
            rows.append([label, k.name, f"{k.share:.1%}", _fmt(k.time_ns / 1e3, 1), _fmt(k.dram_pct), _fmt(k.sm_pct),
                         _fmt(k.occupancy_pct), _fmt(k.registers), _fmt(k.shared_bytes),
                         _fmt(k.spills), "" if k.intensity is None else f"{k.intensity:.3g}",
                         ", ".join(f"{r} {s:.0%}" for r, s in k.stalls)])
    ridge = profile.ridge
    summary = (f"{profile.level}; {profile.tool or 'ncu'}; added {profile.seconds:.1f} s to the evaluation"
               + (f"; ridge at {ridge:.0f} FLOP/byte" if ridge else ""))
    return {"summary": summary, "note": profile.note, "columns": COLUMNS, "rows": rows}


def _points(run: RunData) -> tuple[list[tuple[str, str, float, float]], Any]:
    """(label, colour, FLOP/byte, FLOP/s) of each profiled kernel of the run's correct attempts, and a profile that
    holds the device's peaks (None without any)."""
    points, peaks = [], None
    for a in run.attempts:
        profile = a.result.profile if a.result is not None else None
        if profile is None:
            continue
        if profile.ridge:
            peaks = profile
        for side in _sides(profile):
            for k in side.kernels:
                x, y = k.intensity, k.flops_per_s
                if x is None or y is None or x <= 0 or y <= 0:
                    continue
                color = _REFERENCE if side.side == "reference" else (_OWN if k.own else _LIBRARY)
                label = f"{a.problem_id} turn {a.turn} sample {a.sample}: {k.name[:80]} ({side.side})"
                points.append((label, color, x, y))
    return points, peaks


def has_profiles(runs: Sequence[RunData]) -> bool:
    return any(a.result is not None and a.result.profile is not None for run in runs for a in run.attempts)


def roofline(run: RunData) -> str:
    """A log-log roofline of the run's profiled kernels: FLOP/s against FLOPs per DRAM byte, under the device's
    measured ceilings (memory slope and compute roof, meeting at the ridge)."""
    points, peaks = _points(run)
    label = f"roofline of {run.name}: own kernels, library kernels in candidates' calls, the references' kernels"
    xs = [p[2] for p in points] + ([peaks.ridge] if peaks else [])
    ys = [p[3] for p in points] + ([peaks.peak_flops_per_s] if peaks else [])
    if not xs:
        ax = svg.Axes(-2, 3, 9, 15)
        body = svg.frame(ax, x_label="FLOP per DRAM byte (log)", y_label="FLOP/s (log)")
        return svg.svg(body + [svg.note(ax, "no kernel with counted FLOPs and bytes was profiled")], ax.height, label)
    lx = [math.log10(x) for x in xs]
    ly = [math.log10(y) for y in ys]
    ax = svg.Axes(math.floor(min(lx)) - 0.5, math.ceil(max(lx)) + 0.5,
                  math.floor(min(ly)) - 0.5, math.ceil(max(ly)) + 0.3)
    ticks_x = list(range(math.ceil(ax.x0), math.floor(ax.x1) + 1))
    ticks_y = list(range(math.ceil(ax.y0), math.floor(ax.y1) + 1))
    body = svg.frame(ax, x_label="FLOP per DRAM byte", y_label="FLOP/s", x_ticks=ticks_x, y_ticks=ticks_y,
                     x_fmt=lambda v: f"1e{v:g}", y_fmt=lambda v: f"1e{v:g}")
    if peaks is not None:
        roof = math.log10(peaks.peak_flops_per_s)
        ridge = math.log10(peaks.ridge)
        bandwidth = math.log10(peaks.peak_bytes_per_s)
        start = max(ax.x0, ax.y0 - bandwidth)  # the memory slope, FLOP/s = FLOP/byte x bytes/s, from the frame's edge
        body.append(f'<polyline fill="none" stroke="#212121" stroke-width="1.5" points="{svg.num(ax.sx(start))},'
                    f'{svg.num(ax.sy(start + bandwidth))} {svg.num(ax.sx(ridge))},{svg.num(ax.sy(roof))} '
                    f'{svg.num(ax.sx(ax.x1))},{svg.num(ax.sy(roof))}"><title>measured ceilings: '
                    f'{peaks.peak_bytes_per_s / 1e12:.2f} TB/s, {peaks.peak_flops_per_s / 1e12:.0f} TFLOP/s, ridge at '
                    f'{peaks.ridge:.0f} FLOP/byte</title></polyline>')
    for name, color, x, y in points:
        body.append(f'<circle cx="{svg.num(ax.sx(math.log10(x)))}" cy="{svg.num(ax.sy(math.log10(y)))}" r="4" '
                    f'fill="{color}" fill-opacity="0.75"><title>{svg.esc(name)}: {x:.3g} FLOP/byte, '
                    f'{y / 1e12:.3g} TFLOP/s</title></circle>')
    series = [svg.Series("own kernels", _OWN), svg.Series("library kernels in candidates' calls", _LIBRARY),
              svg.Series("references' kernels", _REFERENCE)]
    items, h = svg.legend(series, ax.height)
    return svg.svg(body + items, ax.height + h, label)
