"""The leaderboard as text: Markdown (to paste into a paper), CSV and JSON (for scripts).

The Markdown and HTML tables share `leaderboard_table`, so both show the same cells. CSV and
JSON carry raw numbers: a run judged on a CPU has fast_p = 0 there, with `timing_available`
false beside it; the text tables print `n/t` (not timed) instead.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Callable, Sequence  # issue 56: Callable

from eval import DEFAULT_PS, Status
from harness.report.compare import Comparison
from harness.progress import NOT_TIMED, duration_text
from harness.report.metrics import RunMetrics, ks_for

NOT_TIMED_NOTE = (
    f"{NOT_TIMED}: timings not measured (CPU: the Triton interpreter checks correctness only). fast_p is 0 by "
    "definition because no speedup was measured; it says nothing about how fast the kernels are. "
    "See the correct rate."
)


PRESET_NOTE = (
    "eval: the evaluator preset that judged the run. `default` is our strict rules; `kernelbench` follows "
    "KernelBench's published rules (atol = rtol = 1e-2, PyTorch's default TF32, public seed, no own-kernel, "
    "hidden-shape or integrity checks, mean of 100 synchronised calls without L2 flush): its numbers can be set "
    "beside published KernelBench results, not beside `default` ones. `harness presets compare` pairs the two."
)


def ci_text(value: float, ci: tuple[float, float]) -> str:
    """`0.50 [0.25, 0.75]`: a rate with its 95% interval."""
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def speed_text(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def fraction_text(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def tokens_text(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e3:.1f}k" if n >= 1000 else str(n)


def cost_text(m: RunMetrics) -> str:
    if m.cost_usd is None:
        return "unknown"
    digits = 2 if m.cost_usd >= 0.01 or m.cost_usd == 0 else 4
    return f"{'' if m.cost_complete else '≥ '}${m.cost_usd:.{digits}f}"


def leaderboard_table(metrics: Sequence[RunMetrics], comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Headers and text cells of the leaderboard, one row per run."""
    show_setting = not comparison.comparable
    headers = ["run", "agent", "model", "search", "backend", "eval", "device"] + (["setting"] if show_setting else [])
    headers += ["problems"] + [f"fast_{p:g}" for p in DEFAULT_PS]
    headers += ["geomean", "compile", "correct", "rejected", "SOL (median)", "own share (median)", "tokens", "cost",
                "wall"]
    rows = []
    for m in metrics:
        row = [m.name + (" (unfinished)" if m.in_progress else ""), m.agent, m.model, m.search, m.backend, m.preset,
               m.device]
        row += [comparison.setting_of[m.name]] if show_setting else []
        row.append(str(m.n_problems))
        row += [ci_text(m.fast_p[p], m.fast_p_ci[p]) if m.timing_available else NOT_TIMED for p in DEFAULT_PS]
        row += [
            speed_text(m.geomean_speedup),
            f"{m.compile_rate:.2f}",
            ci_text(m.correct_rate, m.correct_rate_ci),
            str(m.rejected),
            fraction_text(m.median_sol_fraction),
            fraction_text(m.median_own_time_fraction),
            tokens_text(m.tokens),
            cost_text(m),
            duration_text(m.wall_s),
        ]
        rows.append(row)
    return headers, rows


def sweep_table(metrics: Sequence[RunMetrics], overrides: Sequence[dict[str, str]]) -> tuple[list[str], list[list[str]]]:
    """A `harness run -m` sweep, one row per run: its swept values, correct share and fast_p (as the leaderboard
    computes them), attempts, and attempts that were not correct."""
    keys = list(dict.fromkeys(k for o in overrides for k in o))
    headers = ["run", *keys, "correct"] + [f"fast_{p:g}" for p in DEFAULT_PS] + ["attempts", "failed"]
    rows = []
    for m, o in zip(metrics, overrides):
        fast = [f"{m.fast_p[p]:.2f}" if m.timing_available else NOT_TIMED for p in DEFAULT_PS]
        failed = m.attempts - m.statuses.get(Status.CORRECT, 0)
        rows.append([m.name, *(o.get(k, "-") for k in keys), f"{m.correct_rate:.2f}", *fast, str(m.attempts),
                     str(failed)])
    return headers, rows


def samples_table(metrics: Sequence[RunMetrics]) -> tuple[list[str], list[list[str]]]:
    """pass@k and fast_p@k (unbiased estimator) for every run with several samples per problem."""
    headers = ["run", "samples", "k", "pass@k"] + [f"fast_{p:g}@k" for p in DEFAULT_PS]
    rows = []
    for m in metrics:
        for a in m.at_k:
            fast = [ci_text(a.fast_p[p], a.fast_p_ci[p]) if m.timing_available else NOT_TIMED for p in DEFAULT_PS]
            rows.append([m.name, str(m.samples), str(a.k), ci_text(a.pass_at_k, a.pass_at_k_ci), *fast])
    return headers, rows


def level_table(metrics: Sequence[RunMetrics]) -> tuple[list[str], list[list[str]]]:
    """Per-level scores of every run."""
    headers = ["run", "level", "problems", "correct"] + [f"fast_{p:g}" for p in DEFAULT_PS]
    rows = []
    for m in metrics:
        for level, s in m.by_level.items():
            fast = [f"{s.fast_p[p]:.2f}" if m.timing_available else NOT_TIMED for p in DEFAULT_PS]
            rows.append([m.name, level, str(s.n_problems), f"{s.correct_rate:.2f}", *fast])
    return headers, rows


def backend_table(metrics: Sequence[RunMetrics]) -> tuple[list[str], list[list[str]]]:  # issue 56
    """fast_p by backend: every (run, problem) of the runs in that language counts once, so the shares pool across
    runs (a run is in one backend)."""
    headers = ["backend", "runs", "problems", "correct"] + [f"fast_{p:g}" for p in DEFAULT_PS]
    rows = []
    for backend in sorted({m.backend for m in metrics}):
        group = [m for m in metrics if m.backend == backend]
        n = sum(m.n_problems for m in group)

        def pooled(share: Callable[[RunMetrics], float]) -> str:
            return f"{sum(share(m) * m.n_problems for m in group) / n:.2f}" if n else "-"

        timed = any(m.timing_available for m in group)
        fast = [pooled(lambda m, p=p: m.fast_p[p]) if timed else NOT_TIMED for p in DEFAULT_PS]
        rows.append([backend, str(len(group)), str(n), pooled(lambda m: m.correct_rate), *fast])
    return headers, rows


def turn_table(metrics: Sequence[RunMetrics]) -> tuple[list[str], list[list[str]]]:
    """Best-so-far scores after each turn, for every run."""
    headers = ["run", "turn", "correct"] + [f"fast_{p:g}" for p in DEFAULT_PS]
    rows = []
    for m in metrics:
        for t in m.by_turn:
            fast = [f"{t.fast_p[p]:.2f}" if m.timing_available else NOT_TIMED for p in DEFAULT_PS]
            rows.append([m.name, str(t.turn), f"{t.correct_rate:.2f}", *fast])
    return headers, rows


def notes(metrics: Sequence[RunMetrics], comparison: Comparison) -> list[str]:
    """Footnotes: untimed runs, differing settings, costs that are lower bounds, run warnings."""
    out = []
    if any(not m.timing_available for m in metrics):
        out.append(NOT_TIMED_NOTE)
    if not comparison.comparable:
        out.append(
            "These runs were measured under different settings (column `setting`); compare numbers only within "
            "one setting. What differs:"
        )
        out += [f"  {d}" for d in comparison.differences]
    if any(m.preset != "default" for m in metrics):
        out.append(PRESET_NOTE)
    if any(m.cost_usd is not None and not m.cost_complete for m in metrics):
        out.append("≥ $: some attempts had no prices configured, so the cost is a lower bound.")
    for m in metrics:
        out += [f"{m.name}: {w}" for w in m.warnings]
    out += [host_bound_note(m) for m in metrics if m.host_bound_problems]
    return out


def host_bound_note(m: RunMetrics) -> str:
    """Which best results were timed with a host-bound side (their speedups depend on the host's speed)."""
    from eval import HOST_SHARE_AT

    items = "; ".join(f"{pid} ({', '.join(sides)})" for pid, sides in sorted(m.host_bound_problems.items()))
    return (f"{m.name}: host-bound timings (the host's time to make a call at least {HOST_SHARE_AT:.0%} of its GPU "
            f"time) in "
            f"{len(m.host_bound_problems)} best result(s): {items}. Their speedups depend on the host's speed and "
            "move between runs; eval.cuda_graphs=auto times CUDA-graph replays instead.")


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(metrics: Sequence[RunMetrics], comparison: Comparison, *, n_boot: int, seed: int,
                sweep: Sequence[dict[str, str]] | None = None) -> str:
    """The whole leaderboard as Markdown: main table, notes, a sweep's table (runs of `harness run -m`), then
    samples, levels and turns."""
    parts = [
        "# Leaderboard",
        "",
        f"fast_p: share of all problems in the selection solved correctly with a measured speedup strictly above p "
        f"(best over samples and turns; problems without results count as failures). Brackets: 95% bootstrap "
        f"interval over problems ({n_boot} resamples, seed {seed}). compile / correct: share of problems with an "
        f"attempt that compiled / was correct. rejected: attempts that failed an integrity check.",
        "",
        _md_table(*leaderboard_table(metrics, comparison)),
    ]
    if note_lines := notes(metrics, comparison):
        parts += ["", "Notes:", ""] + [f"- {n}" if not n.startswith("  ") else f"  - {n.strip()}" for n in note_lines]
    if sweep is not None:
        parts += ["", "## Sweep", "", _md_table(*sweep_table(metrics, sweep))]
    headers, rows = samples_table(metrics)
    if rows:
        parts += [
            "",
            "## Several samples per problem: pass@k and fast_p@k (unbiased estimator)",
            "",
            _md_table(headers, rows),
        ]
    parts += ["", "## By backend", "", _md_table(*backend_table(metrics))]  # issue 56
    parts += ["", "## By level", "", _md_table(*level_table(metrics))]
    parts += ["", "## By turn (best so far over samples)", "", _md_table(*turn_table(metrics))]
    return "\n".join(parts) + "\n"


def csv_rows(metrics: Sequence[RunMetrics], comparison: Comparison) -> list[dict[str, Any]]:
    """One flat record of raw numbers per run (k columns are the union over runs)."""
    all_ks = sorted({k for m in metrics for k in (ks_for(m.samples) if m.samples > 1 else [])})
    records = []
    for m in metrics:
        r: dict[str, Any] = {
            "run": m.name,
            "run_dir": m.run_dir,
            "agent": m.agent,
            "model": m.model,
            "search": m.search,
            "backend": m.backend,
            "preset": m.preset,
            "device": m.device,
            "setting": comparison.setting_of[m.name],
            "problems": m.n_problems,
            "samples": m.samples,
            "turns": m.turns,
            "attempts": m.attempts,
            "timing_available": m.timing_available,
            "timings_measured": m.timings_measured,
            "in_progress": m.in_progress,
        }
        for p in DEFAULT_PS:
            r[f"fast_{p:g}"] = m.fast_p[p]
            r[f"fast_{p:g}_lo"], r[f"fast_{p:g}_hi"] = m.fast_p_ci[p]
        r.update(
            geomean_speedup=m.geomean_speedup,
            compile_rate=m.compile_rate,
            correct_rate=m.correct_rate,
            correct_rate_lo=m.correct_rate_ci[0],
            correct_rate_hi=m.correct_rate_ci[1],
            rejected=m.rejected,
            median_sol_fraction=m.median_sol_fraction,
            median_own_time_fraction=m.median_own_time_fraction,
            input_tokens=m.input_tokens,
            output_tokens=m.output_tokens,
            tokens=m.tokens,
            cost_usd=m.cost_usd,
            cost_complete=m.cost_complete,
            wall_s=round(m.wall_s, 3),
            agent_s=round(m.agent_s, 3),
            eval_s=round(m.eval_s, 3),
        )
        by_k = {a.k: a for a in m.at_k}
        for k in all_ks:
            a = by_k.get(k)
            r[f"pass@{k}"] = None if a is None else a.pass_at_k
            r[f"pass@{k}_lo"], r[f"pass@{k}_hi"] = (None, None) if a is None else a.pass_at_k_ci
            for p in DEFAULT_PS:
                r[f"fast_{p:g}@{k}"] = None if a is None else a.fast_p[p]
                r[f"fast_{p:g}@{k}_lo"], r[f"fast_{p:g}@{k}_hi"] = (None, None) if a is None else a.fast_p_ci[p]
        records.append(r)
    return records


def to_csv(metrics: Sequence[RunMetrics], comparison: Comparison) -> str:
    """The leaderboard as CSV (empty cells: not available)."""
    records = csv_rows(metrics, comparison)
    out = io.StringIO()
    fields = list(records[0]) if records else ["run"]
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return out.getvalue()


def to_json_data(
    metrics: Sequence[RunMetrics], comparison: Comparison, *, n_boot: int, seed: int, generated_at: str
) -> dict[str, Any]:
    """Everything computed, as plain data (also embedded in the HTML page)."""
    runs = []
    for m in metrics:
        d = m.to_dict()
        d["setting"] = comparison.setting_of[m.name]
        runs.append(d)
    return {
        "generated_at": generated_at,
        "ps": list(DEFAULT_PS),
        "bootstrap": {"level": 0.95, "n_boot": n_boot, "seed": seed, "over": "problems"},
        "comparison": comparison.to_dict(),
        "notes": notes(metrics, comparison),
        "runs": runs,
    }


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
