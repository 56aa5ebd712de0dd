"""Small SVG charts written as text: lines, grouped bars, histograms, scatter and a heatmap.

No plotting library: the report must open offline in any browser, so every chart is inline SVG.
All text passes through `esc`, so labels taken from runs (problem ids, run names) cannot inject
markup. Every chart has a legend below its plot area and native tooltips (`<title>`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Callable, Sequence

WIDTH = 600
PLOT_HEIGHT = 300
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 20, 16, 44
LEGEND_ROW = 18


def esc(text: object) -> str:
    """Text safe inside SVG/HTML elements and attribute values."""
    return escape(str(text), quote=True)


def num(x: float) -> str:
    """A coordinate with two decimals (keeps the files small and stable)."""
    return f"{x:.2f}".rstrip("0").rstrip(".") if math.isfinite(x) else "0"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values covering [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + 1e-9 * step:
        ticks.append(round(t, 10))
        t += step
    return ticks


@dataclass
class Series:
    """One named, coloured series; `dashed` for runs whose values are not measured (shown anyway)."""

    name: str
    color: str
    dashed: bool = False


@dataclass
class Line(Series):
    points: list[tuple[float, float]] = field(default_factory=list)
    errorbars: list[tuple[float, float, float, str]] = field(default_factory=list)  # (x, lo, hi, tooltip)
    markers: bool = False


@dataclass
class Point(Series):
    x: float = 0.0
    y: float = 0.0
    y_lo: float | None = None
    y_hi: float | None = None


@dataclass
class Axes:
    """Linear scales from data to pixels for one plot area."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: int = WIDTH
    height: int = PLOT_HEIGHT

    def sx(self, x: float) -> float:
        span = self.x1 - self.x0 or 1.0
        return MARGIN_LEFT + (x - self.x0) / span * (self.width - MARGIN_LEFT - MARGIN_RIGHT)

    def sy(self, y: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return MARGIN_TOP + (1 - (y - self.y0) / span) * (self.height - MARGIN_TOP - MARGIN_BOTTOM)

    @property
    def bottom(self) -> float:
        return self.height - MARGIN_BOTTOM


def _dash(s: Series) -> str:
    return ' stroke-dasharray="5 4"' if s.dashed else ""


def frame(
    ax: Axes,
    *,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[float] | None = None,
    y_ticks: Sequence[float] | None = None,
    x_fmt: Callable[[float], str] = lambda v: f"{v:g}",
    y_fmt: Callable[[float], str] = lambda v: f"{v:g}",
) -> list[str]:
    """Grid, axes, ticks and axis labels."""
    out = []
    for t in y_ticks if y_ticks is not None else nice_ticks(ax.y0, ax.y1):
        y = num(ax.sy(t))
        out.append(f'<line class="grid" x1="{MARGIN_LEFT}" x2="{num(ax.width - MARGIN_RIGHT)}" y1="{y}" y2="{y}"/>')
        out.append(
            f'<text class="tick" x="{MARGIN_LEFT - 6}" y="{y}" text-anchor="end" dy="0.32em">{esc(y_fmt(t))}</text>'
        )
    for t in x_ticks if x_ticks is not None else nice_ticks(ax.x0, ax.x1):
        x = num(ax.sx(t))
        out.append(f'<line class="tickmark" x1="{x}" x2="{x}" y1="{num(ax.bottom)}" y2="{num(ax.bottom + 4)}"/>')
        out.append(f'<text class="tick" x="{x}" y="{num(ax.bottom + 16)}" text-anchor="middle">{esc(x_fmt(t))}</text>')
    out.append(
        f'<line class="axis" x1="{MARGIN_LEFT}" x2="{num(ax.width - MARGIN_RIGHT)}" '
        f'y1="{num(ax.bottom)}" y2="{num(ax.bottom)}"/>'
    )
    out.append(f'<line class="axis" x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT}" y1="{MARGIN_TOP}" y2="{num(ax.bottom)}"/>')
    mid_x = (MARGIN_LEFT + ax.width - MARGIN_RIGHT) / 2
    out.append(
        f'<text class="label" x="{num(mid_x)}" y="{num(ax.bottom + 34)}" text-anchor="middle">{esc(x_label)}</text>'
    )
    mid_y = (MARGIN_TOP + ax.bottom) / 2
    out.append(
        f'<text class="label" transform="translate(14 {num(mid_y)}) rotate(-90)" '
        f'text-anchor="middle">{esc(y_label)}</text>'
    )
    return out


def legend(series: Sequence[Series], top: float, width: int = WIDTH) -> tuple[list[str], float]:
    """Legend entries in rows under the plot (fewer columns for long names); elements and height used."""
    longest = max((len(s.name) for s in series), default=0)
    columns = 3 if longest <= 22 else 2 if longest <= 38 else 1
    col_w = (width - MARGIN_LEFT) / columns
    fits = int((col_w - 30) / 6.5)
    out = []
    for i, s in enumerate(series):
        x = MARGIN_LEFT + (i % columns) * col_w
        y = top + (i // columns) * LEGEND_ROW + 10
        out.append(
            f'<line x1="{num(x)}" x2="{num(x + 18)}" y1="{num(y)}" y2="{num(y)}" stroke="{s.color}" '
            f'stroke-width="3"{_dash(s)}/>'
        )
        label = s.name if len(s.name) <= fits else s.name[: fits - 1] + "…"
        out.append(
            f'<text class="legend" x="{num(x + 24)}" y="{num(y)}" dy="0.32em">{esc(label)}'
            f"<title>{esc(s.name)}</title></text>"
        )
    rows = math.ceil(len(series) / columns)
    return out, rows * LEGEND_ROW + (8 if rows else 0)


def svg(body: list[str], height: float, label: str, width: int = WIDTH) -> str:
    """Wrap elements in a sized, labelled `<svg>`."""
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {num(height)}" '
        f'width="{width}" height="{num(height)}" role="img" aria-label="{esc(label)}"><title>{esc(label)}</title>'
        + "".join(body)
        + "</svg>"
    )


def note(ax: Axes, text: str) -> str:
    """A message centred in the plot area (for example: nothing was measured)."""
    x, y = (MARGIN_LEFT + ax.width - MARGIN_RIGHT) / 2, (MARGIN_TOP + ax.bottom) / 2
    return f'<text class="note" x="{num(x)}" y="{num(y)}" text-anchor="middle">{esc(text)}</text>'


def line_chart(
    label: str,
    lines: Sequence[Line],
    ax: Axes,
    *,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[float] | None = None,
    message: str | None = None,
) -> str:
    """Lines (with optional markers and vertical error bars) over a grid."""
    body = frame(ax, x_label=x_label, y_label=y_label, x_ticks=x_ticks)
    for ln in lines:
        if ln.points:
            pts = " ".join(f"{num(ax.sx(x))},{num(ax.sy(y))}" for x, y in ln.points)
            body.append(
                f'<polyline fill="none" stroke="{ln.color}" stroke-width="2"{_dash(ln)} points="{pts}">'
                f"<title>{esc(ln.name)}</title></polyline>"
            )
        if ln.markers:
            for x, y in ln.points:
                body.append(
                    f'<circle cx="{num(ax.sx(x))}" cy="{num(ax.sy(y))}" r="3.5" fill="{ln.color}">'
                    f"<title>{esc(ln.name)}: {x:g} → {y:.2f}</title></circle>"
                )
        for x, lo, hi, tip in ln.errorbars:
            px, ylo, yhi = num(ax.sx(x)), num(ax.sy(lo)), num(ax.sy(hi))
            body.append(
                f'<g stroke="{ln.color}" stroke-width="1.5"><title>{esc(ln.name)}: {esc(tip)}, 95% CI '
                f'[{lo:.2f}, {hi:.2f}]</title><line x1="{px}" x2="{px}" y1="{ylo}" y2="{yhi}"/>'
                f'<line x1="{num(ax.sx(x) - 4)}" x2="{num(ax.sx(x) + 4)}" y1="{ylo}" y2="{ylo}"/>'
                f'<line x1="{num(ax.sx(x) - 4)}" x2="{num(ax.sx(x) + 4)}" y1="{yhi}" y2="{yhi}"/></g>'
            )
    if message:
        body.append(note(ax, message))
    items, h = legend(lines, ax.height)
    return svg(body + items, ax.height + h, label)


def bar_chart(
    label: str,
    categories: Sequence[str],
    bars: Sequence[tuple[Series, Sequence[float | None]]],
    *,
    y_label: str,
    message: str | None = None,
) -> str:
    """Grouped bars: one group per category, one bar per series (None: no bar, the run lacks it)."""
    ax = Axes(0, max(len(categories), 1), 0, 1)
    body = frame(ax, x_label="", y_label=y_label, x_ticks=[])
    group_w = ax.sx(1) - ax.sx(0)
    bar_w = group_w * 0.8 / max(len(bars), 1)
    for ci, cat in enumerate(categories):
        body.append(
            f'<text class="tick" x="{num(ax.sx(ci + 0.5))}" y="{num(ax.bottom + 16)}" '
            f'text-anchor="middle">{esc(cat)}</text>'
        )
        for si, (s, values) in enumerate(bars):
            v = values[ci]
            if v is None:
                continue
            x = ax.sx(ci) + group_w * 0.1 + si * bar_w
            y = ax.sy(v)
            body.append(
                f'<rect x="{num(x)}" y="{num(y)}" width="{num(bar_w * 0.92)}" height="{num(ax.bottom - y)}" '
                f'fill="{s.color}" fill-opacity="{0.35 if s.dashed else 0.85}">'
                f"<title>{esc(s.name)} · {esc(cat)}: {v:.2f}</title></rect>"
            )
    if message:
        body.append(note(ax, message))
    items, h = legend([s for s, _ in bars], ax.height)
    return svg(body + items, ax.height + h, label)


def histogram(
    label: str,
    series: Sequence[tuple[Series, Sequence[float]]],
    edges: Sequence[float],
    *,
    x_label: str,
    x_ticks: Sequence[float],
    x_fmt: Callable[[float], str],
    message: str | None = None,
) -> str:
    """Overlaid histograms (share of each series' values per bin), drawn as outlined steps."""
    counts = []
    for _, values in series:
        c = [0] * (len(edges) - 1)
        for v in values:
            i = min(max(_bin(edges, v), 0), len(c) - 1)
            c[i] += 1
        total = sum(c) or 1
        counts.append([x / total for x in c])
    y_max = max((max(c) for c in counts if c), default=0) or 1.0
    ax = Axes(edges[0], edges[-1], 0, min(1.0, y_max * 1.15))
    body = frame(ax, x_label=x_label, y_label="share of problems", x_ticks=x_ticks, x_fmt=x_fmt)
    for (s, values), c in zip(series, counts):
        if not values:
            continue
        pts = [(edges[0], 0.0)]
        for i, share in enumerate(c):
            pts += [(edges[i], share), (edges[i + 1], share)]
        pts.append((edges[-1], 0.0))
        poly = " ".join(f"{num(ax.sx(x))},{num(ax.sy(y))}" for x, y in pts)
        body.append(
            f'<polygon points="{poly}" fill="{s.color}" fill-opacity="0.18" stroke="{s.color}" '
            f'stroke-width="2"><title>{esc(s.name)}: {len(values)} problem(s)</title></polygon>'
        )
    if message:
        body.append(note(ax, message))
    items, h = legend([s for s, _ in series], ax.height)
    return svg(body + items, ax.height + h, label)


def _bin(edges: Sequence[float], v: float) -> int:
    for i in range(len(edges) - 1):
        if v < edges[i + 1]:
            return i
    return len(edges) - 2


def scatter(
    label: str, points: Sequence[Point], ax: Axes, *, x_label: str, y_label: str, message: str | None = None
) -> str:
    """Labelled points with optional vertical intervals."""
    body = frame(ax, x_label=x_label, y_label=y_label)
    for p in points:
        x, y = ax.sx(p.x), ax.sy(p.y)
        if p.y_lo is not None and p.y_hi is not None:
            body.append(
                f'<line x1="{num(x)}" x2="{num(x)}" y1="{num(ax.sy(p.y_lo))}" y2="{num(ax.sy(p.y_hi))}" '
                f'stroke="{p.color}" stroke-width="1.5"/>'
            )
        body.append(
            f'<circle cx="{num(x)}" cy="{num(y)}" r="5" fill="{p.color}"{_dash(p)}>'
            f"<title>{esc(p.name)}: {p.x:g}, {p.y:.2f}</title></circle>"
        )
    if message:
        body.append(note(ax, message))
    items, h = legend(points, ax.height)
    return svg(body + items, ax.height + h, label)


@dataclass
class Cell:
    """One heatmap cell: its colour, short text, tooltip, and data attributes for the page's script."""

    fill: str
    text: str
    tooltip: str
    data: dict[str, str] = field(default_factory=dict)
    dark: bool = False  # light text on a dark fill


def heatmap(label: str, rows: Sequence[str], columns: Sequence[str], cells: Sequence[Sequence[Cell]]) -> str:
    """A grid of cells: rows (problems) by columns (runs), with row and column labels."""
    row_h, col_w, left, top = 22, 96, 230, 64
    width = left + col_w * len(columns) + 10
    height = top + row_h * len(rows) + 10
    body = []
    for j, col in enumerate(columns):
        x = left + j * col_w + col_w / 2
        short = col if len(col) <= 14 else col[:13] + "…"
        body.append(
            f'<text class="colhead" x="{num(x)}" y="{top - 8}" text-anchor="start" '
            f'transform="rotate(-25 {num(x)} {top - 8})">{esc(short)}<title>{esc(col)}</title></text>'
        )
    for i, row in enumerate(rows):
        y = top + i * row_h
        short = row if len(row) <= 34 else row[:33] + "…"
        body.append(
            f'<text class="rowhead" x="{left - 6}" y="{num(y + row_h / 2)}" text-anchor="end" '
            f'dy="0.32em">{esc(short)}<title>{esc(row)}</title></text>'
        )
        for j, cell in enumerate(cells[i]):
            x = left + j * col_w
            attrs = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in cell.data.items())
            body.append(
                f'<g class="cell"{attrs}><title>{esc(cell.tooltip)}</title>'
                f'<rect x="{num(x + 1)}" y="{num(y + 1)}" width="{col_w - 2}" height="{row_h - 2}" '
                f'fill="{cell.fill}" rx="2"/><text x="{num(x + col_w / 2)}" y="{num(y + row_h / 2)}" '
                f'text-anchor="middle" dy="0.32em" class="celltext{" dark" if cell.dark else ""}">'
                f"{esc(cell.text)}</text></g>"
            )
    return svg(body, height, label, width=width)
