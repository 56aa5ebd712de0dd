"""`harness report`: leaderboards (Markdown, CSV, JSON) and one self-contained HTML page from runs.

    from harness.report import build_report, write_report
    report = build_report(["runs/a", "runs/b"], n_boot=2000, seed=0)
    paths = write_report(report, "reports/ab")   # leaderboard.{md,csv,json,html} and transcripts/

Runs are only read (SQLite read-only), so a report can be made while a run is still going.
Modules: `load` (reading a run), `metrics` (the numbers), `compare` (which runs are comparable),
`tables` (text formats), `svg` and `plots` (charts), `page` (the HTML page), `transcripts` (the
transcript files beside the page, one per problem, read from the runs when the report is written).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.report.compare import Comparison, compare
from harness.report.load import RunData, load_run
from harness.report.metrics import RunMetrics, compute_metrics
from harness.report.page import render_page
from harness.report.tables import to_csv, to_json, to_json_data, to_markdown
from harness.report.transcripts import write_transcripts

OUTPUT_NAMES = ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "leaderboard.html")

__all__ = ["OUTPUT_NAMES", "Report", "build_report", "write_report"]


@dataclass
class Report:
    """The loaded runs, their metrics, how they compare, and the rendered documents."""

    runs: list[RunData]
    metrics: list[RunMetrics]
    comparison: Comparison
    data: dict[str, Any]  # leaderboard.json's content
    markdown: str
    csv: str
    html: str
    sweep: list[dict[str, str]] | None = None  # a sweep's swept values per run (harness.sweep), in run order


def build_report(run_dirs: Sequence[str | Path], *, n_boot: int = 2000, seed: int = 0,
                 sweep: Sequence[dict[str, str]] | None = None) -> Report:
    """Read the runs (never modifying them) and render every output; `StoreError` for a bad run dir. `sweep`: the
    runs are a `harness run -m` sweep's, with these swept values each (the outputs get the sweep's table)."""
    if not run_dirs:
        raise ValueError("no run directory given")
    runs = [load_run(d) for d in run_dirs]
    _unique_names(runs)
    metrics = [compute_metrics(r, n_boot=n_boot, seed=seed) for r in runs]
    comparison = compare(runs, metrics)
    generated = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    data = to_json_data(metrics, comparison, n_boot=n_boot, seed=seed, generated_at=generated)
    return Report(
        runs=runs,
        metrics=metrics,
        comparison=comparison,
        data=data,
        markdown=to_markdown(metrics, comparison, n_boot=n_boot, seed=seed, sweep=sweep),
        csv=to_csv(metrics, comparison),
        html=render_page(runs, metrics, comparison, data, sweep=sweep),
        sweep=None if sweep is None else list(sweep),
    )


def write_report(report: Report, out_dir: str | Path) -> list[Path]:
    """Write the four files into `out_dir` (created if needed), each atomically, and the transcripts beside the page
    (`transcripts/`, first: the page refers to them); return the four paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_transcripts(report.runs, out)
    texts = (report.markdown, report.csv, to_json(report.data), report.html)
    paths = []
    for name, text in zip(OUTPUT_NAMES, texts):
        path = out / name
        tmp = out / f".{name}.tmp"
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)  # a full disk leaves no temporary file behind
        paths.append(path)
    return paths


def _unique_names(runs: list[RunData]) -> None:
    """Runs with the same name (from different runs_dir) are told apart by their parent folder."""
    counts = Counter(r.name for r in runs)
    for r in runs:
        if counts[r.name] > 1:
            r.name = f"{r.run_dir.resolve().parent.name}/{r.name}"
    if len({r.name for r in runs}) < len(runs):  # same parent folder too: number them
        for i, r in enumerate(runs):
            r.name = f"{r.name} #{i + 1}"
