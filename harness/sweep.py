"""A `harness run -m` sweep's runs, found again and compared in one table.

Each job of a sweep notes its run in the sweep folder (`hydra.sweep.dir`, by default `runs/.sweeps/NAME`, beside
Hydra's multirun.yaml): `jobs/<job number>.json` holds the run directory (relative to the sweep folder) and the
job's swept overrides, stamped with the sweep's id. A sweep run again under the same name rewrites them; the files
of the latest sweep are its runs, so `harness report runs/.sweeps/NAME` compares exactly the last sweep's runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from harness.report.metrics import RunMetrics

JOBS_DIR = "jobs"
_UNBOUNDED = 10_000  # columns: the widest a table may be measured at


@dataclass(frozen=True)
class SweepRun:
    """One job of a sweep: its run directory and what it swept (`search` -> `serial`)."""

    run_dir: Path
    overrides: dict[str, str]


def record_job(sweep_dir: str | Path, sweep_id: int, job: int, run_dir: str | Path, overrides: dict[str, str]) -> None:
    """Note a job's run in the sweep folder (atomically: a report may read the folder meanwhile)."""
    folder = Path(sweep_dir) / JOBS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"sweep": sweep_id, "job": job, "run_dir": os.path.relpath(Path(run_dir).resolve(), Path(sweep_dir).resolve()),
             "overrides": overrides}  # fmt: skip
    tmp = folder / f".{job}.json.tmp"
    tmp.write_text(json.dumps(entry), encoding="utf-8")
    os.replace(tmp, folder / f"{job}.json")


def sweep_runs(sweep_dir: str | Path) -> list[SweepRun]:
    """The latest sweep's runs noted in `sweep_dir`, in job order; [] when it is not a sweep folder."""
    folder = Path(sweep_dir) / JOBS_DIR
    entries = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            entries.append((int(entry["sweep"]), int(entry["job"]), str(entry["run_dir"]), dict(entry["overrides"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a job note (or a half-written one from an older version): not a run of the sweep
    latest = max((e[0] for e in entries), default=None)
    return [SweepRun(Path(sweep_dir) / d, {str(k): str(v) for k, v in o.items()})
            for s, _, d, o in sorted(entries, key=lambda e: e[1]) if s == latest]  # fmt: skip


def comparison_table(metrics: Sequence[RunMetrics], overrides: Sequence[dict[str, str]], sweep_dir: str | Path
                     ) -> Table:
    """The sweep's table for a terminal: one row per run (cells: `harness.report.tables.sweep_table`)."""
    from harness.report.tables import sweep_table

    headers, rows = sweep_table(metrics, overrides)
    keys = {k for o in overrides for k in o}
    table = Table(title=f"sweep {sweep_dir}")
    for h in headers:
        table.add_column(h, justify="left" if h == "run" or h in keys else "right")
    for row in rows:
        table.add_row(*row)
    return table


def print_sweep(console: Console, sweep_dir: str | Path) -> bool:
    """Print the table comparing the latest sweep's runs in `sweep_dir`; False when it holds none."""
    from harness.report.load import load_run  # imported here: `harness run` loads the report code only for a sweep
    from harness.report.metrics import compute_metrics

    runs = sweep_runs(sweep_dir)
    if not runs:
        return False
    metrics = [compute_metrics(load_run(r.run_dir), n_boot=1) for r in runs]  # the table shows no interval
    print_whole(console, comparison_table(metrics, [r.overrides for r in runs], sweep_dir))
    return True


def print_whole(console: Console, table: Table) -> None:
    """Print `table` with every cell whole where nothing limits the width: in a log (not a terminal) at the table's
    own width, however wide, since at a log's default 80 columns (or 120) rich cut every column to a few
    characters; a terminal gets its own width."""
    if console.is_terminal:
        console.print(table)
        return
    saved = console.width
    console.width = max(saved, console.measure(table, options=console.options.update(max_width=_UNBOUNDED)).maximum)
    try:
        console.print(table)
    finally:
        console.width = saved


def leaderboard_path(report_dir: str | Path) -> Path:
    """The leaderboard a report folder holds: the whole comparison (fast_p with intervals, cost, tokens)."""
    from harness.report import OUTPUT_NAMES

    return Path(report_dir) / OUTPUT_NAMES[0]
