"""leaderboard.html: one page with the tables, the plots and a transcript viewer, opened offline.

Nothing is fetched from a network: CSS and JS are inlined, plots are inline SVG, and the data the
script needs is embedded as JSON, except the transcripts: one file per problem beside the page,
loaded when opened (`harness.report.transcripts`). Replies and prompts are untrusted text, so:
- every string the page shows from a run is HTML-escaped (tables, SVG) or set with textContent
  (the transcript viewer);
- the embedded JSON escapes `<`, `>` and `&`, so no reply can close its `<script>` element;
- a Content-Security-Policy allows only the page's own script (by hash) and scripts beside it
  (the transcript files, whose texts are base64 inside a string literal), and no network at all.
"""

from __future__ import annotations

import base64
import hashlib
import json
from html import escape
from importlib import resources
from typing import Any, Sequence

from eval import DEFAULT_PS
from harness.progress import NOT_TIMED
from harness.report import plots, profiles, transcripts  # profile (issue 57): profiles
from harness.report.compare import Comparison
from harness.report.load import RunData
from harness.report.metrics import RunMetrics
from harness.report.tables import (backend_table, leaderboard_table, level_table, notes, samples_table,  # issue 56
                                   sweep_table, turn_table)

_TEXT_COLUMNS = {"run", "agent", "model", "search", "backend", "device", "setting", "level"}
# The leaderboard has more columns than fit a 1400 px window side by side: the page shows them as two tables,
# the scores and (in this set) how each run was made and what it cost, both keyed by the run's name.
_RUN_COLUMNS = {"agent", "model", "search", "backend", "eval", "device", "setting", "problems", "tokens", "cost",
                "wall"}


def embed_json(data: Any) -> str:
    """JSON safe inside a `<script type="application/json">` element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, code in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, code)
    return text


def _cell(text: str) -> str:
    """A cell's escaped text; a rate's 95% interval (`0.50 [0.25, 0.75]`) goes on a line of its own, so that the
    columns of rates stay narrow."""
    value, bracket, interval = text.partition(" [")
    if bracket and interval.endswith("]"):
        return f'{escape(value)} <span class="ci">[{escape(interval)}</span>'
    return escape(text)


def _columns(headers: list[str], rows: list[list[str]], keep: list[int]) -> tuple[list[str], list[list[str]]]:
    """The columns at `keep` of a table."""
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]


def _table(headers: list[str], rows: list[list[str]], table_id: str) -> str:
    head = "".join(f"<th{' class=text' if h in _TEXT_COLUMNS else ''}>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for h, c in zip(headers, row):
            cls = "text" if h in _TEXT_COLUMNS else ("nt" if c == NOT_TIMED else "")
            title = ' title="timings not measured (CPU)"' if c == NOT_TIMED else ""
            cells.append(f'<td class="{cls}"{title}>{_cell(c)}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table class="data" id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _variants(group: str, caption: str, options: list[tuple[str, str, str]], default: str) -> str:
    """A figure whose plot is picked with a select (options: key, label, svg)."""
    opts = "".join(
        f'<option value="{escape(k)}"{" selected" if k == default else ""}>{escape(lbl)}</option>'
        for k, lbl, _ in options
    )
    divs = "".join(
        f'<div class="variant" data-group="{group}" data-key="{escape(k)}"{"" if k == default else " hidden"}>{s}</div>'
        for k, _, s in options
    )
    return (
        f'<figure id="plot-{group}"><figcaption>{escape(caption)}<select class="variant-select" '
        f'data-group="{group}" aria-label="metric">{opts}</select></figcaption>{divs}</figure>'
    )


def _figure(fig_id: str, caption: str, content: str, *, wide: bool = False, wrap: str = "") -> str:
    inner = f'<div class="{wrap}">{content}</div>' if wrap else content
    cls = ' class="wide"' if wide else ""
    return f'<figure id="{fig_id}"{cls}><figcaption>{escape(caption)}</figcaption>{inner}</figure>'


def _plots_html(metrics: Sequence[RunMetrics]) -> str:
    timed = any(m.timing_available for m in metrics)
    metric_options = [("correct", "correct rate")] + [(f"{p:g}", f"fast_{p:g}") for p in DEFAULT_PS]
    default = "1" if timed else "correct"

    def by_metric(draw: Any) -> list[tuple[str, str, str]]:
        return [(k, lbl, draw(metrics, None if k == "correct" else float(k))) for k, lbl in metric_options]

    parts = [
        _figure("plot-fastp", "fast_p against p (95% intervals at the standard p)", plots.fast_p_curve(metrics)),
        _variants("turns", "By turn, best so far", by_metric(plots.turn_curves), default),
        _variants("levels", "By level", by_metric(plots.level_bars), default),
        _figure(
            "plot-heatmap",
            "Best result per problem and run (click a cell for its transcript)",
            plots.heatmap(metrics),
            wide=True,
            wrap="heatwrap",
        ),
        _figure("plot-speedups", "Distribution of speedups (correct, timed)", plots.speedup_histogram(metrics)),
        _figure("plot-sol", "Distribution of SOL fractions", plots.sol_histogram(metrics)),
        _figure("plot-cost", "Cost against fast_1", plots.cost_scatter(metrics)),
    ]
    return '<div class="plots">' + "".join(parts) + "</div>"


def _roofline_section(runs: Sequence[RunData]) -> list[str]:
    """profile (issue 57): a roofline per run of its profiled kernels (`eval.profile`), none without profiles."""
    if not profiles.has_profiles(runs):
        return []
    options = [(str(i), run.name, profiles.roofline(run)) for i, run in enumerate(runs)]
    figure = _variants("roofline", "Roofline of the profiled kernels (hover a point for its kernel)", options, "0")
    return [f'<section id="roofline"><h2>Roofline</h2><div class="plots">{figure}</div>'
            '<p class="explain">Each point is one kernel of a profiled forward call (Nsight Compute): its FLOPs per '
            "DRAM byte against its FLOP/s, under the device's measured copy bandwidth and matmul throughput for the "
            "problem's dtype. Kernels whose FLOPs ncu does not count (integer work, comparisons) are left out.</p>"
            "</section>"]


def _status_css() -> str:
    rules = [f".st-{s} {{ background: {c}; }}" for s, (c, _) in plots.STATUS_STYLE.items()]
    rules.append(".st-unknown { background: #757575; }")
    return "\n".join(rules)


def _asset(name: str) -> str:
    return resources.files("harness.report").joinpath("static", name).read_text(encoding="utf-8")


def _csp(script: str) -> str:
    """The page's Content-Security-Policy: no network, and no script but the page's own (by its hash) and the
    transcript files beside it, so that no reply or prompt shown on the page can run."""
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
            f"script-src 'sha256-{script_hash}' 'self'")  # 'self': the transcript files beside the page


def _notes_html(metrics: Sequence[RunMetrics], comparison: Comparison) -> str:
    """The leaderboard's notes as a list (a note indented by two spaces nests under the one before), or "" without
    any, so that a leaderboard without notes shows no empty box."""
    note_items = "".join(
        f"<li>{escape(n.strip())}</li>" if not n.startswith("  ") else f"<ul><li>{escape(n.strip())}</li></ul>"
        for n in notes(metrics, comparison)
    )
    return f'<div class="notes"><ul>{note_items}</ul></div>' if note_items else ""


def _leaderboard_section(metrics: Sequence[RunMetrics], comparison: Comparison, n_boot: int, seed: int) -> list[str]:
    """The leaderboard, split in two tables keyed by the run's name (too many columns for one window): the scores,
    then how each run was made and what it cost."""
    board_headers, board_rows = leaderboard_table(metrics, comparison)
    scores = [i for i, h in enumerate(board_headers) if h not in _RUN_COLUMNS]
    made = [i for i, h in enumerate(board_headers) if h == "run" or h in _RUN_COLUMNS]
    return [
        '<section id="leaderboard"><h2>Leaderboard</h2>',
        _table(*_columns(board_headers, board_rows, scores), "leaderboard-table"),
        f'<p class="explain">fast_p: share of all problems in the selection solved correctly with a measured speedup '
        f"strictly above p (best over samples and turns); problems, samples and turns without results count as "
        f"failures. Brackets: 95% bootstrap interval over problems ({n_boot} resamples, seed {seed}). compile / "
        f"correct: share of problems with an attempt that compiled / was correct. rejected: attempts that failed an "
        f"integrity check. SOL: median fraction of the roofline speed of light over correct results.</p>",
        _notes_html(metrics, comparison),
        '<h3>The runs: how each was made, and its cost</h3>',
        _table(*_columns(board_headers, board_rows, made), "runs-table"),
        "</section>",
    ]


def _sweep_section(metrics: Sequence[RunMetrics], sweep: Sequence[dict[str, str]] | None) -> list[str]:
    """A sweep's table (one row per run, with its swept values), none when the runs are not a sweep's."""
    if sweep is None:
        return []
    return [f'<section id="sweep"><h2>Sweep</h2>{_table(*sweep_table(metrics, sweep), "sweep-table")}'
            '<p class="explain">One row per run of the sweep: its swept values, correct share, fast_p, attempts, and '
            "attempts that were not correct.</p></section>"]


def _samples_section(metrics: Sequence[RunMetrics]) -> list[str]:
    """pass@k and fast_p@k, none when no run drew several samples per problem (the table would have no rows)."""
    samples_headers, samples_rows = samples_table(metrics)
    if not samples_rows:
        return []
    return [
        '<section id="samples"><h2>Several samples per problem: pass@k and fast_p@k</h2>',
        _table(samples_headers, samples_rows, "samples-table"),
        '<p class="explain">Unbiased estimator (Chen et al., 2021): 1 − C(n−c, k)/C(n, k) per problem, averaged '
        "over problems; missing samples count as failures.</p></section>",
    ]


def _detail_sections(runs: Sequence[RunData], metrics: Sequence[RunMetrics]) -> list[str]:
    """What follows the headline tables: the plots, the roofline (with profiles), the breakdowns by backend, level
    and turn, and the transcript viewer, whose controls the page's script fills from the embedded index."""
    # issue 56: the breakdown by backend
    backends = f'<section id="backends"><h2>By backend</h2>{_table(*backend_table(metrics), "backend-table")}</section>'
    return [
        f'<section id="plots"><h2>Plots</h2>{_plots_html(metrics)}</section>',
        *_roofline_section(runs),  # profile (issue 57)
        backends,
        f'<section id="levels"><h2>By level</h2>{_table(*level_table(metrics), "level-table")}</section>',
        f'<section id="turns"><h2>By turn (best so far)</h2>{_table(*turn_table(metrics), "turn-table")}</section>',
        '<section id="transcripts"><h2>Transcripts</h2><div class="controls">'
        '<label>Run <select id="tx-run"></select></label>'
        '<label>Problem <select id="tx-problem"></select></label>'
        '<label>Sample <select id="tx-sample"></select></label></div><div id="tx-view"></div></section>',
    ]


def _nav() -> str:
    """The links at the top of the page to its main sections."""
    return "".join(
        f'<a href="#{i}">{t}</a>'
        for i, t in (
            ("leaderboard", "Leaderboard"),
            ("plots", "Plots"),
            ("levels", "Levels"),
            ("turns", "Turns"),
            ("transcripts", "Transcripts"),
        )
    )


def render_page(
    runs: Sequence[RunData],
    metrics: Sequence[RunMetrics],
    comparison: Comparison,
    leaderboard_json: dict[str, Any],
    sweep: Sequence[dict[str, str]] | None = None,
) -> str:
    """The whole HTML document (with a sweep's table when the runs are a `harness run -m` sweep's)."""
    script = _asset("report.js")
    n_boot, seed = leaderboard_json["bootstrap"]["n_boot"], leaderboard_json["bootstrap"]["seed"]
    sections = [
        *_leaderboard_section(metrics, comparison, n_boot, seed),
        *_sweep_section(metrics, sweep),
        *_samples_section(metrics),
        *_detail_sections(runs, metrics),
    ]
    run_names = ", ".join(m.name for m in metrics)
    generated = leaderboard_json["generated_at"]
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{_csp(script)}">
<title>Leaderboard · {escape(run_names)}</title>
<style>
{_asset("report.css")}
{_status_css()}
</style>
</head>
<body>
<header class="top"><h1>Leaderboard</h1>
<p class="meta">{len(metrics)} run(s): {escape(run_names)} · generated {escape(generated)}</p></header>
<nav>{_nav()}</nav>
<main>
{"".join(sections)}
</main>
<script type="application/json" id="leaderboard-data">{embed_json(leaderboard_json)}</script>
<script type="application/json" id="transcript-data">{embed_json(transcripts.index(runs, metrics))}</script>
<script>{script}</script>
</body>
</html>
"""
