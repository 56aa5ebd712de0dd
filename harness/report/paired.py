"""Two runs of the same attempts judged under two evaluator presets, side by side.

The usual pair is a run judged by our strict rules (`eval=default`) and its replay under
`eval=kernelbench` (`harness presets rescore`). Per problem: both verdicts, both speedups and,
where they disagree, why. Disagreeing rows come first: they are the point of the report.

A disagreement is a problem solved under one preset and not the other, or (with timings) one
whose speedup is above 1 under one preset and not the other. Its reason is derived from the
two results of the same attempt (problem, sample, turn): the failing side's status, reason and
mismatch against the passing side's rules:

- `own kernel`: rejected because none of the candidate's own kernels ran (or it defines none);
- `integrity`: rejected by an integrity check (hidden work, drifting or wrong timed outputs, tampering);
- `hidden shapes`: wrong only on the problem's hidden input shapes;
- `tolerance`: wrong by an error within the other preset's tolerance;
- `precision`: wrong beyond the other tolerance where the two presets use different TF32 settings on a GPU;
- `seeding`: wrong beyond the other tolerance with the same precision: the presets seed weights or
  inputs differently (no state copy, public seed);
- `timing`: both correct, but the speedups fall on different sides of 1;
- `other`: anything else (a timeout, a crash, a missing attempt), with both statuses.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from eval import DEFAULT_PS, EvalResult, Status
from harness.report.load import RunData
from harness.report.metrics import MISSING, RunMetrics, compute_metrics, config_value, rank
from harness.progress import NOT_TIMED
from harness.report.tables import speed_text

Key = tuple[int, int]  # (sample, turn)


@dataclass
class PairedRow:
    """One problem under both presets."""

    problem_id: str
    status_a: Status | None  # None: the problem has no attempt in that run (MISSING in the text)
    status_b: Status | None
    speedup_a: float | None
    speedup_b: float | None
    agree: bool
    reason: str = ""  # the category (own kernel, integrity, ...) when they disagree
    detail: str = ""  # the failing side's own words
    attempt: Key | None = None  # the (sample, turn) the reason was derived from


@dataclass
class PairedReport:
    """The two runs' names, presets and fast_p, and one row per problem (disagreements first)."""

    run_a: str
    run_b: str
    preset_a: str
    preset_b: str
    timing_available: bool
    fast_p_a: dict[float, float]
    fast_p_b: dict[float, float]
    correct_a: float
    correct_b: float
    rows: list[PairedRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def disagreements(self) -> list[PairedRow]:
        return [r for r in self.rows if not r.agree]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for row in d["rows"]:
            row["status_a"], row["status_b"] = _label(row["status_a"]), _label(row["status_b"])
        d["fast_p_a"] = {f"{p:g}": v for p, v in self.fast_p_a.items()}
        d["fast_p_b"] = {f"{p:g}": v for p, v in self.fast_p_b.items()}
        d["reasons"] = reason_counts(self.rows)
        return d


def paired_report(run_a: RunData, run_b: RunData, *, n_boot: int = 200, seed: int = 0) -> PairedReport:
    """Pair two runs problem by problem (usually one run and its replay under another preset)."""
    ma, mb = compute_metrics(run_a, n_boot=n_boot, seed=seed), compute_metrics(run_b, n_boot=n_boot, seed=seed)
    report = PairedReport(run_a=ma.name, run_b=mb.name, preset_a=ma.preset, preset_b=mb.preset,
                          timing_available=ma.timing_available and mb.timing_available,
                          fast_p_a=ma.fast_p, fast_p_b=mb.fast_p, correct_a=ma.correct_rate, correct_b=mb.correct_rate)
    if ma.preset == mb.preset:
        report.warnings.append(f"both runs were judged under the same preset ({ma.preset}): differences are noise "
                               "or changed code, not rules")
    by_a, by_b = _by_attempt(run_a), _by_attempt(run_b)
    if set(by_a) != set(by_b):
        only = len(set(by_a) ^ set(by_b))
        report.warnings.append(f"{only} attempt(s) exist in one run only (a replay stops where the recording "
                               "stopped); they count as failures on the side that lacks them")
    ids = list(dict.fromkeys([p.id for p in run_a.problems] + [p.id for p in run_b.problems]))
    rows = [_row(pid, by_a, by_b, ma, mb, report.timing_available, run_a.config, run_b.config) for pid in ids]
    report.rows = sorted(rows, key=lambda r: (r.agree, r.reason, r.problem_id))
    return report


def _by_attempt(run: RunData) -> dict[tuple[str, int, int], EvalResult | None]:
    return {(a.problem_id, a.sample, a.turn): a.result for a in run.attempts}


def _best(pid: str, by: dict[tuple[str, int, int], EvalResult | None]) -> tuple[Key | None, EvalResult | None]:
    items = [((s, t), r) for (p, s, t), r in by.items() if p == pid]
    if not items:
        return None, None
    key, result = max(items, key=lambda kv: (rank(kv[1]), -kv[0][0], -kv[0][1]))
    return key, result


def _status(result: EvalResult | None, missing: bool) -> Status | None:
    if missing:
        return None
    return Status.AGENT_ERROR if result is None else result.status


def _label(status: Status | None) -> str:
    return MISSING if status is None else status.value


def _solved(result: EvalResult | None) -> bool:
    return result is not None and result.is_correct


def _row(pid: str, by_a: dict, by_b: dict, ma: RunMetrics, mb: RunMetrics, timed: bool,
         config_a: dict[str, Any], config_b: dict[str, Any]) -> PairedRow:
    key_a, best_a = _best(pid, by_a)
    key_b, best_b = _best(pid, by_b)
    row = PairedRow(problem_id=pid, status_a=_status(best_a, key_a is None), status_b=_status(best_b, key_b is None),
                    speedup_a=best_a.speedup if _solved(best_a) else None,
                    speedup_b=best_b.speedup if _solved(best_b) else None, agree=True)
    if _solved(best_a) != _solved(best_b):
        key = key_a if _solved(best_a) else key_b  # the attempt that passed on one side: why not on the other?
        ra, rb = by_a.get((pid, *key)), by_b.get((pid, *key))  # type: ignore[misc]
        passed, failed = (ra, rb) if _solved(best_a) else (rb, ra)
        passed_cfg, failed_by = (config_a, by_b) if _solved(best_a) else (config_b, by_a)
        row.agree, row.attempt = False, key
        row.reason, row.detail = explain(failed, passed, passed_cfg, config_a, config_b,
                                         missing=(pid, *key) not in failed_by)  # type: ignore[misc]
    elif timed and row.speedup_a is not None and row.speedup_b is not None and (row.speedup_a > 1) != (row.speedup_b > 1):
        row.agree, row.reason = False, "timing"
        row.detail = f"speedup {row.speedup_a:.2f}x under {ma.preset}, {row.speedup_b:.2f}x under {mb.preset}"
    elif row.status_a != row.status_b:
        row.detail = f"both unsolved ({_label(row.status_a)} / {_label(row.status_b)})"
    return row


def explain(failed: EvalResult | None, passed: EvalResult | None, passed_config: dict[str, Any],
            config_a: dict[str, Any], config_b: dict[str, Any], *, missing: bool = False) -> tuple[str, str]:
    """(category, detail) for an attempt correct under one preset (`passed`) and not the other (`failed`)."""
    if failed is None:
        return "other", "no result on the failing side (" + ("attempt not recorded" if missing else "agent error") + ")"
    text = failed.reason
    if failed.status is Status.REJECTED:
        if "own kernels ran" in text or "defines no kernel" in text:
            return "own kernel", text
        return "integrity", text
    if failed.status is Status.INCORRECT:
        if "hidden input shapes" in text or "on a hidden workload" in text:  # shapes the agent never saw
            return "hidden shapes", text
        if "output of a timed run" in text:
            return "integrity", text
        m = failed.mismatch
        atol, rtol = _explicit_tolerance(passed_config)
        if m is not None and m.expected is not None and m.got is not None and atol is not None and rtol is not None:
            err = abs(m.got - m.expected)
            if math.isfinite(err) and err <= atol + rtol * abs(m.expected):
                return "tolerance", f"{text}; within the other preset's atol={atol:g}, rtol={rtol:g}"
        elif m is not None and "values differ beyond" in text and _tolerances_differ(config_a, config_b):
            return "tolerance", text
        on_gpu = passed is not None and passed.device and not passed.device.startswith("cpu")
        precision_a, precision_b = (config_value(c, "eval.precision", "strict") for c in (config_a, config_b))
        if on_gpu and precision_a != precision_b:
            return "precision", text
        return "seeding", text
    return "other", f"{failed.status.value}: {text}"


def _explicit_tolerance(config: dict[str, Any]) -> tuple[float | None, float | None]:
    """A preset's atol/rtol when it sets them for every dtype (KernelBench's does); else unknown."""
    atol, rtol = config_value(config, "eval.atol"), config_value(config, "eval.rtol")
    return (None if atol is None else float(atol)), (None if rtol is None else float(rtol))


def _tolerances_differ(config_a: dict[str, Any], config_b: dict[str, Any]) -> bool:
    return any(config_value(config_a, f"eval.{k}") != config_value(config_b, f"eval.{k}") for k in ("atol", "rtol"))


def reason_counts(rows: list[PairedRow]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        if not r.agree:
            counts[r.reason] = counts.get(r.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def to_markdown(report: PairedReport) -> str:
    """The paired report as Markdown: fast_p of each preset, then one row per problem, disagreements first."""
    a, b = report.preset_a, report.preset_b
    fast = [f"fast_{p:g}" for p in DEFAULT_PS]

    def fp(values: dict[float, float]) -> list[str]:
        return [f"{values[p]:.2f}" if report.timing_available else NOT_TIMED for p in DEFAULT_PS]

    lines = [f"# {report.run_a} ({a}) against {report.run_b} ({b})", "",
             "| run | eval | correct | " + " | ".join(fast) + " |", "|" + "---|" * (3 + len(fast)),
             f"| {report.run_a} | {a} | {report.correct_a:.2f} | " + " | ".join(fp(report.fast_p_a)) + " |",
             f"| {report.run_b} | {b} | {report.correct_b:.2f} | " + " | ".join(fp(report.fast_p_b)) + " |", ""]
    n = len(report.disagreements)
    counts = ", ".join(f"{k}: {v}" for k, v in reason_counts(report.rows).items()) or "none"
    lines += [f"{n} of {len(report.rows)} problems disagree ({counts}).", ""]
    lines += [f"| problem | {a} | {b} | speedup {a} | speedup {b} | agree | reason | detail |", "|" + "---|" * 8]
    for r in report.rows:
        detail = r.detail.replace("|", "\\|").replace("\n", " ")
        where = f" (sample {r.attempt[0]}, turn {r.attempt[1]})" if r.attempt else ""
        lines.append(f"| {r.problem_id} | {_label(r.status_a)} | {_label(r.status_b)} | {_speed(r.speedup_a, report)} | "
                     f"{_speed(r.speedup_b, report)} | {'yes' if r.agree else 'NO'} | {r.reason} | "
                     f"{detail[:300]}{where if not r.agree else ''} |")
    if not report.timing_available:
        lines += ["", f"{NOT_TIMED}: timings not measured (CPU); only verdicts are compared."]
    lines += [f"- {w}" for w in ([""] if report.warnings else []) + report.warnings if w]
    return "\n".join(lines) + "\n"


def _speed(x: float | None, report: PairedReport) -> str:
    return speed_text(x) if report.timing_available or x is not None else NOT_TIMED


def to_json(report: PairedReport) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
