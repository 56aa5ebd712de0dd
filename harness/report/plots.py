"""The report's plots, as inline SVG strings built from `RunMetrics`.

Each run keeps one colour in every plot. Runs without measured timings are drawn dashed and
the plots say so, rather than showing their zero fast_p as if their kernels were slow.
"""

from __future__ import annotations

import math
from typing import Sequence

from eval import DEFAULT_PS, Status
from harness.report import svg
from harness.report.metrics import MISSING, RunMetrics

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")

# Attempt statuses (and MISSING): colour and a short cell label (shared with the page's CSS for the transcript badges).
STATUS_STYLE: dict[str, tuple[str, str]] = {
    "correct": ("#2e7d32", "ok"),
    "incorrect": ("#ef6c00", "wrong"),
    "rejected": ("#6a1b9a", "rejected"),
    "runtime_error": ("#c62828", "runtime"),
    "compile_error": ("#8d6e63", "compile"),
    "format_error": ("#9e9e9e", "format"),
    "timeout": ("#ad1457", "timeout"),
    "crash": ("#4e342e", "crash"),
    "skipped": ("#90a4ae", "skipped"),
    "agent_error": ("#546e7a", "agent"),
    "problem_error": ("#37474f", "problem"),
    MISSING: ("#eceff1", "—"),
}
NOT_TIMED_FILL = "#90caf9"  # correct, but no speedup measured
NO_TIMING = "timings not measured (CPU): no speedups to plot"


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _series_name(m: RunMetrics) -> str:
    return m.name if m.timing_available else f"{m.name} (not timed)"


def fast_p_curve(metrics: Sequence[RunMetrics]) -> str:
    """fast_p against p (a step curve per run) with 95% intervals at the standard p."""
    speedups = [pb.speedup for m in metrics for pb in m.per_problem.values() if pb.speedup is not None]
    p_max = max(2.5, min(8.0, 1.1 * max(speedups, default=0.0)))
    lines = []
    for i, m in enumerate(metrics):
        s = sorted(pb.speedup for pb in m.per_problem.values() if pb.speedup is not None)
        n = m.n_problems or 1

        def share(p: float, s: list[float] = s, n: int = n) -> float:
            return sum(v > p for v in s) / n

        pts = [(0.0, share(0.0))]
        for b in sorted({v for v in s if 0 < v < p_max}):
            pts += [(b, pts[-1][1]), (b, share(b))]
        pts.append((p_max, pts[-1][1]))
        dodge = (i - (len(metrics) - 1) / 2) * p_max / 150  # side by side, so intervals at one p do not overlap
        bars = [(p + dodge, *m.fast_p_ci[p], f"fast_{p:g} = {m.fast_p[p]:.2f}") for p in DEFAULT_PS]
        bars = bars if m.timing_available else []
        lines.append(svg.Line(_series_name(m), color(i), dashed=not m.timing_available, points=pts, errorbars=bars))
    message = NO_TIMING if not any(m.timing_available for m in metrics) else None
    ax = svg.Axes(0, p_max, 0, 1)
    return svg.line_chart(
        "fast_p against p", lines, ax, x_label="p (speedup threshold)", y_label="fast_p", message=message
    )


def turn_curves(metrics: Sequence[RunMetrics], p: float | None) -> str:
    """Best so far after each turn: the correct rate (p None) or fast_p, one line per run."""
    max_turn = max((m.turns for m in metrics), default=1)
    lines = []
    for i, m in enumerate(metrics):
        pts = [(t.turn, t.correct_rate if p is None else t.fast_p[p]) for t in m.by_turn]
        dashed = p is not None and not m.timing_available
        lines.append(
            svg.Line(_series_name(m) if p is not None else m.name, color(i), dashed=dashed, points=pts, markers=True)
        )
    what = "correct rate" if p is None else f"fast_{p:g}"
    message = NO_TIMING if p is not None and not any(m.timing_available for m in metrics) else None
    ticks = list(range(1, max_turn + 1)) if max_turn <= 12 else None
    ax = svg.Axes(1, max(max_turn, 2), 0, 1)
    return svg.line_chart(
        f"{what} by turn (best so far)", lines, ax, x_label="turn", y_label=what, x_ticks=ticks, message=message
    )


def level_bars(metrics: Sequence[RunMetrics], p: float | None) -> str:
    """Per-level correct rate (p None) or fast_p, grouped by level, one bar per run."""
    levels = sorted({lv for m in metrics for lv in m.by_level})
    bars = []
    for i, m in enumerate(metrics):
        values = []
        for lv in levels:
            s = m.by_level.get(lv)
            values.append(None if s is None else (s.correct_rate if p is None else s.fast_p[p]))
        dashed = p is not None and not m.timing_available
        bars.append((svg.Series(_series_name(m) if p is not None else m.name, color(i), dashed=dashed), values))
    what = "correct rate" if p is None else f"fast_{p:g}"
    message = NO_TIMING if p is not None and not any(m.timing_available for m in metrics) else None
    return svg.bar_chart(f"{what} by level", levels, bars, y_label=what, message=message)


def speedup_fill(speedup: float) -> tuple[str, bool]:
    """Diverging colour for a speedup on a log scale: red below 1×, green above (saturating at 4× / ¼×)."""
    t = max(-1.0, min(1.0, math.log2(speedup) / 2)) if speedup > 0 else -1.0
    r, g, b = _mix((245, 245, 245), (27, 120, 55) if t >= 0 else (178, 24, 43), abs(t))
    return f"#{r:02x}{g:02x}{b:02x}", abs(t) > 0.55


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b))  # type: ignore[return-value]


def heatmap(metrics: Sequence[RunMetrics]) -> str:
    """Problems by runs: the best result's speedup (coloured on a log scale) or its status."""
    problems = list(dict.fromkeys(pid for m in metrics for pid in m.per_problem))
    cells = []
    for pid in problems:
        row = []
        for j, m in enumerate(metrics):
            pb = m.per_problem.get(pid)
            data = {"run": str(j), "problem": pid}
            if pb is None:
                row.append(svg.Cell("#ffffff", "", f"{pid} is not in {m.name}'s selection"))
                continue
            where = "" if pb.turn is None else f" (sample {pb.sample}, turn {pb.turn})"
            if pb.status is Status.CORRECT and pb.speedup is not None:
                fill, dark = speedup_fill(pb.speedup)
                row.append(
                    svg.Cell(
                        fill,
                        f"{pb.speedup:.2f}×",
                        f"{m.name} · {pid}: correct, {pb.speedup:.3g}× faster{where}",
                        data,
                        dark,
                    )
                )
            elif pb.status is Status.CORRECT:
                row.append(svg.Cell(NOT_TIMED_FILL, "ok (n/t)", f"{m.name} · {pid}: correct, not timed{where}", data))
            else:
                status = MISSING if pb.status is None else pb.status.value
                fill, text = STATUS_STYLE.get(status, ("#bdbdbd", status))
                tooltip = f"{m.name} · {pid}: {'no attempt yet' if pb.status is None else status}{where}"
                row.append(
                    svg.Cell(
                        fill,
                        text,
                        tooltip,
                        data if pb.status is not None else {},
                        dark=pb.status not in (None, Status.FORMAT_ERROR, Status.SKIPPED),
                    )
                )
        cells.append(row)
    return svg.heatmap("speedup per problem and run", problems, [m.name for m in metrics], cells)


def speedup_histogram(metrics: Sequence[RunMetrics]) -> str:
    """Distribution of the measured speedups of correct results (log2 bins)."""
    series = []
    logs: list[float] = []
    for i, m in enumerate(metrics):
        values = [math.log2(pb.speedup) for pb in m.per_problem.values() if pb.speedup is not None and pb.speedup > 0]
        logs += values
        series.append((svg.Series(_series_name(m), color(i), dashed=not m.timing_available), values))
    lo = math.floor(min(logs, default=-2.0))
    hi = math.ceil(max(logs, default=2.0))
    lo, hi = min(lo, -2), max(hi, 2)
    edges = [lo + k * 0.25 for k in range(int((hi - lo) / 0.25) + 1)]
    message = (
        None if logs else NO_TIMING if not any(m.timing_available for m in metrics) else "no correct timed results"
    )
    return svg.histogram(
        "distribution of speedups",
        series,
        edges,
        x_label="speedup over PyTorch eager (log scale)",
        x_ticks=list(range(lo, hi + 1)),
        x_fmt=lambda v: f"{2**v:g}×",
        message=message,
    )


def sol_histogram(metrics: Sequence[RunMetrics]) -> str:
    """Distribution of speed-of-light fractions of correct results."""
    series = []
    for i, m in enumerate(metrics):
        values = [pb.sol_fraction for pb in m.per_problem.values() if pb.sol_fraction is not None]
        series.append((svg.Series(m.name, color(i)), values))
    edges = [k / 20 for k in range(21)]
    empty = not any(v for _, v in series)
    message = (
        (
            "no SOL fractions: timings not measured (CPU)"
            if not any(m.timing_available for m in metrics)
            else "no SOL fractions (problems without FLOP/byte counts)"
        )
        if empty
        else None
    )
    return svg.histogram(
        "distribution of SOL fractions",
        series,
        edges,
        x_label="fraction of speed of light",
        x_ticks=[0, 0.25, 0.5, 0.75, 1.0],
        x_fmt=lambda v: f"{v:g}",
        message=message,
    )


def cost_scatter(metrics: Sequence[RunMetrics]) -> str:
    """fast_1 (with its interval) against the run's cost; runs without a known cost are left out."""
    points = []
    for i, m in enumerate(metrics):
        if m.cost_usd is None:
            continue
        lo, hi = m.fast_p_ci[1.0]
        points.append(
            svg.Point(
                _series_name(m),
                color(i),
                dashed=not m.timing_available,
                x=m.cost_usd,
                y=m.fast_p[1.0],
                y_lo=lo,
                y_hi=hi,
            )
        )
    x_max = max((p.x for p in points), default=0.0)
    ax = svg.Axes(0, x_max * 1.15 if x_max > 0 else 1.0, 0, 1)
    left_out = [m.name for m in metrics if m.cost_usd is None]
    message = None
    if not points:
        message = "no run has a known cost (no prices configured)"
    elif not any(m.timing_available for m in metrics):
        message = "fast_1 is 0: timings not measured (CPU)"
    label = "cost against fast_1" + (f" (left out, no cost: {', '.join(left_out)})" if left_out else "")
    return svg.scatter(label, points, ax, x_label="cost (USD)", y_label="fast_1", message=message)
