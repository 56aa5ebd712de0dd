"""The numbers of a report, per run: fast_p with bootstrap intervals, rates, usage, and breakdowns.

Definitions (every rate is over all problems of the run's selection; a problem, sample or turn
without a result counts as a failure):

- A sample's result is its best attempt over its turns: correct beats incorrect, which beats what
  did not compile; among correct ones the higher measured speedup wins.
- A problem's result is its best sample. fast_p is the share of problems whose result is correct
  with a measured speedup strictly above p (`eval.scoring.fast_p`), so with n samples it is
  fast_p@n; the unbiased fast_p@k and pass@k for k < n are reported separately.
- compile and correct rates: share of problems with at least one attempt that compiled / was
  correct. `rejected` counts attempts that failed an integrity check.
- Intervals: 95% percentile bootstrap over problems, with a fixed seed (`eval.scoring.bootstrap_ci`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from eval import DEFAULT_PS, EvalResult, Status, at_k_per_problem, bootstrap_ci, fast_p, score
from harness.report.load import RunData
from harness.store import Attempt

Interval = tuple[float, float]
MISSING = "missing"  # a problem's status in the report's data and heatmap when it has no attempt


@dataclass
class ProblemBest:
    """A problem's best result in one run (what the heatmap and the distributions show)."""

    level: str
    status: Status | None  # the best attempt's; None when the problem has no attempt (`missing` in JSON)
    speedup: float | None = None  # measured speedup of a correct result (None: not timed / not correct)
    sol_fraction: float | None = None
    own_time_fraction: float | None = None
    sample: int | None = None
    turn: int | None = None
    # sides of a correct result whose GPU was mostly idle (eval.timing.measure)
    host_bound: list[str] = field(default_factory=list)


@dataclass
class AtK:
    """pass@k and fast_p@k (unbiased estimator) with their intervals, for one k."""

    k: int
    pass_at_k: float
    pass_at_k_ci: Interval
    fast_p: dict[float, float]
    fast_p_ci: dict[float, Interval]


@dataclass
class LevelScores:
    """Scores over the problems of one level."""

    n_problems: int
    correct_rate: float
    fast_p: dict[float, float]


@dataclass
class TurnScores:
    """Scores of the best attempt so far after `turn` turns (over all samples)."""

    turn: int
    correct_rate: float
    fast_p: dict[float, float]


@dataclass
class RunMetrics:
    """One leaderboard row and everything the plots need about one run."""

    name: str
    run_dir: str
    agent: str
    model: str
    search: str
    backend: str
    devices: list[str]
    versions: list[dict[str, str]]
    n_problems: int
    samples: int
    turns: int
    attempts: int
    timings_measured: bool  # some correct result has a measured speedup
    timing_available: bool  # False when every result was judged on a CPU, which cannot time (fast_p is 0 there)
    in_progress: bool
    fast_p: dict[float, float]
    fast_p_ci: dict[float, Interval]
    geomean_speedup: float | None
    compile_rate: float
    correct_rate: float
    correct_rate_ci: Interval
    rejected: int
    median_sol_fraction: float | None
    median_own_time_fraction: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None: no attempt reported a cost
    cost_complete: bool  # False: some fresh attempts had no price, so cost_usd is a lower bound
    wall_s: float
    agent_s: float
    eval_s: float
    statuses: dict[Status, int]
    at_k: list[AtK]
    by_turn: list[TurnScores]
    by_level: dict[str, LevelScores]
    per_problem: dict[str, ProblemBest]
    warnings: list[str] = field(default_factory=list)
    preset: str = "default"  # the evaluator preset whose rules judged the run (`eval.preset`)
    host_bound_problems: dict[str, list[str]] = field(default_factory=dict)  # problem -> host-bound sides of its best


    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def device(self) -> str:
        """The device in one phrase (`unknown` before any result, several joined by ` + `)."""
        return " + ".join(self.devices) if self.devices else "unknown"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; p keys become strings (`"1"`, `"0.5"`)."""
        d = _plain(asdict(self))
        for pb in d["per_problem"].values():
            pb["status"] = pb["status"] or MISSING
        d["tokens"] = self.tokens
        d["device"] = self.device
        return d


def compute_metrics(run: RunData, *, n_boot: int = 2000, seed: int = 0, ps: Sequence[float] = DEFAULT_PS) -> RunMetrics:
    """All metrics of one run (bootstrap intervals deterministic under `seed`)."""
    ids = [p.id for p in run.problems]
    levels = {p.id: p.level for p in run.problems}
    n, turns = run.samples, run.turns
    samples = sample_results(run.attempts, ids)
    best = {pid: _best_of(r for r in rs) for pid, rs in samples.items()}
    scores = score(best, ps)

    def ci(values: dict[str, float]) -> Interval:
        return bootstrap_ci(list(values.values()), n_boot=n_boot, seed=seed)

    fresh = [a for a in run.attempts if not a.from_cache]
    known_costs = [a.cost_usd for a in fresh if a.cost_usd is not None]
    results = [a.result for a in run.attempts if a.result is not None]
    per_problem = _per_problem(run.attempts, ids, levels)
    correct_best = [r for r in best.values() if r is not None and r.is_correct]
    warnings = list(run.warnings)
    broken = sorted({a.problem_id for a in run.attempts if a.status is Status.PROBLEM_ERROR})
    if broken:
        warnings.append(f"{len(broken)} problem(s) are broken, not the candidates (problem_error): "
                        f"{', '.join(broken)}; they count as unsolved until fixed or left out of the selection")
    ran = [r for r in results if r.compiled] or results  # where the candidate ran: the device that judged it
    devices = list(dict.fromkeys(r.device for r in ran if r.device))
    versions = [dict(v) for v in dict.fromkeys(tuple(sorted(r.versions.items())) for r in ran if r.versions)]
    timed = any(r.timing_meaningful for r in results)
    if len(devices) > 1:
        warnings.append(f"results come from {len(devices)} devices ({', '.join(devices)}): timings are mixed")
    if len(versions) > 1:
        warnings.append(f"results come from {len(versions)} sets of library versions")
    return RunMetrics(
        name=run.name,
        run_dir=str(run.run_dir),
        agent=str(config_value(run.config, "agent.kind") or "-"),
        model=_model(run),
        search=_search(run.config, turns, n),
        backend=str(run.config.get("backend") or "-"),
        devices=devices,
        versions=versions,
        n_problems=len(ids),
        samples=n,
        turns=turns,
        attempts=len(run.attempts),
        timings_measured=timed,
        timing_available=timing_available(results),
        in_progress=run.in_progress,
        fast_p=scores.fast_p,
        fast_p_ci={p: ci(at_k_per_problem(samples, n, n, p)) for p in ps},
        geomean_speedup=scores.geomean_speedup,
        compile_rate=scores.compile_rate,
        correct_rate=scores.correct_rate,
        correct_rate_ci=ci(at_k_per_problem(samples, n, n, None)),
        rejected=sum(a.status is Status.REJECTED for a in run.attempts),
        median_sol_fraction=_median(r.sol_fraction for r in correct_best),
        median_own_time_fraction=_median(r.kernels.own_time_fraction for r in correct_best if r.kernels),
        input_tokens=sum(a.input_tokens for a in fresh),
        output_tokens=sum(a.output_tokens for a in fresh),
        cost_usd=sum(known_costs) if known_costs or not fresh else None,
        cost_complete=len(known_costs) == len(fresh),
        wall_s=run.wall_s,
        agent_s=sum(a.latency_s for a in run.attempts),
        eval_s=sum(a.eval_s for a in run.attempts),
        statuses=dict(Counter(a.status for a in run.attempts).most_common()),
        at_k=[_at_k(samples, k, n, ps, ci) for k in ks_for(n)] if n > 1 else [],
        by_turn=[_turn_scores(run.attempts, ids, t, ps) for t in range(1, turns + 1)],
        by_level=_level_scores(best, levels, ps),
        per_problem=per_problem,
        warnings=warnings,
        preset=run_preset(run.config, results),
        host_bound_problems={pid: pb.host_bound for pid, pb in per_problem.items() if pb.host_bound},
    )


def run_preset(config: dict[str, Any], results: Sequence[EvalResult]) -> str:
    """The run's evaluator preset: its config's `eval.preset`, else what its results recorded, else `default`.

    Runs recorded before presets existed were judged by the default (strict) rules.
    """
    if name := config_value(config, "eval.preset"):
        return str(name)
    recorded = Counter(r.preset for r in results if getattr(r, "preset", ""))
    return recorded.most_common(1)[0][0] if recorded else "default"


def ks_for(n: int) -> list[int]:
    """The k of pass@k reported for n samples: powers of two below n, and n."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def rank(result: EvalResult | None) -> tuple[int, int, float]:
    """Order of results: correct, then compiled, then (for correct ones) the measured speedup."""
    if result is None:
        return (0, 0, float("-inf"))
    speed = result.speedup if result.is_correct and result.speedup is not None else float("-inf")
    return (int(result.is_correct), int(result.compiled), speed)


def sample_results(
    attempts: Iterable[Attempt], problem_ids: Sequence[str], max_turn: int | None = None
) -> dict[str, list[EvalResult | None]]:
    """Each problem's samples' best results over their turns (up to `max_turn`); [] when none."""
    by_sample: dict[tuple[str, int], list[EvalResult | None]] = {}
    for a in attempts:
        if max_turn is None or a.turn <= max_turn:
            by_sample.setdefault((a.problem_id, a.sample), []).append(a.result)
    out: dict[str, list[EvalResult | None]] = {pid: [] for pid in problem_ids}
    for (pid, _), results in sorted(by_sample.items()):
        if pid in out:
            out[pid].append(_best_of(results))
    return out


def _best_of(results: Iterable[EvalResult | None]) -> EvalResult | None:
    return max(results, key=rank, default=None)


def _at_k(samples: dict[str, list[EvalResult | None]], k: int, n: int, ps: Sequence[float], ci: Any) -> AtK:
    per_p = {p: at_k_per_problem(samples, k, n, p) for p in ps}
    passed = at_k_per_problem(samples, k, n, None)
    return AtK(
        k=k,
        pass_at_k=_mean(passed.values()),
        pass_at_k_ci=ci(passed),
        fast_p={p: _mean(v.values()) for p, v in per_p.items()},
        fast_p_ci={p: ci(v) for p, v in per_p.items()},
    )


def _turn_scores(attempts: list[Attempt], ids: list[str], turn: int, ps: Sequence[float]) -> TurnScores:
    best = {pid: _best_of(rs) for pid, rs in sample_results(attempts, ids, max_turn=turn).items()}
    return TurnScores(turn=turn, correct_rate=score(best, ps).correct_rate, fast_p={p: fast_p(best, p) for p in ps})


def _level_scores(
    best: dict[str, EvalResult | None], levels: dict[str, str], ps: Sequence[float]
) -> dict[str, LevelScores]:
    out = {}
    for level in sorted(set(levels.values())):
        subset = {pid: r for pid, r in best.items() if levels[pid] == level}
        s = score(subset, ps)
        out[level] = LevelScores(n_problems=len(subset), correct_rate=s.correct_rate, fast_p=s.fast_p)
    return out


def _per_problem(attempts: list[Attempt], ids: list[str], levels: dict[str, str]) -> dict[str, ProblemBest]:
    by_problem: dict[str, list[Attempt]] = {pid: [] for pid in ids}
    for a in attempts:
        if a.problem_id in by_problem:
            by_problem[a.problem_id].append(a)
    out = {}
    for pid, items in by_problem.items():
        if not items:
            out[pid] = ProblemBest(level=levels[pid], status=None)
            continue
        a = max(items, key=lambda x: rank(x.result))
        r = a.result
        out[pid] = ProblemBest(
            level=levels[pid],
            status=a.status,
            speedup=r.speedup if r is not None and r.is_correct else None,
            sol_fraction=r.sol_fraction if r is not None and r.is_correct else None,
            own_time_fraction=r.kernels.own_time_fraction if r is not None and r.is_correct and r.kernels else None,
            sample=a.sample,
            turn=a.turn,
            host_bound=list(getattr(r, "host_bound", []) or []) if r is not None and r.is_correct else [],
        )
    return out


def timing_available(results: Sequence[EvalResult]) -> bool:
    """Whether fast_p is a figure for these results (else `n/t`, never a 0 that no timing earned): some speedup was
    measured, or they were neither all judged on a CPU nor correct without a timing. The run's summary table and its
    report both ask here, so every turn of a CPU run reads `n/t`, the turns before anything passed too."""
    if any(r.timing_meaningful for r in results):
        return True
    ran = [r for r in results if r.compiled] or list(results)  # where the candidate ran: the device that judged it
    devices = {r.device for r in ran if r.device}
    on_cpu = bool(devices) and all(_is_cpu(d) for d in devices)
    return not on_cpu and not any(r.is_correct for r in results)


def _is_cpu(device: str) -> bool:
    """The evaluator names a CPU `cpu`, or `cpu (Triton interpreter)` where the interpreter ran."""
    return device == "cpu" or device.startswith("cpu ")


def _model(run: RunData) -> str:
    """The model's name: from the agent config, the model preset, or what the provider answered."""
    for key in ("agent.model", "model.name"):
        if value := config_value(run.config, key):
            return str(value)
    answered = Counter(a.model for a in run.attempts if a.model)
    return answered.most_common(1)[0][0] if answered else "-"


def _search(config: dict[str, Any], turns: int, samples: int) -> str:
    shape = f"{turns} turn{'s' * (turns != 1)} × {samples} sample{'s' * (samples != 1)}"
    name = config_value(config, "search.name")
    return f"{name}: {shape}" if name and name != "none" else shape


def config_value(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """The value at a dotted key of a stored run config (`eval.atol`), or `default` when absent."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _mean(values: Iterable[float]) -> float:
    v = list(values)
    return sum(v) / len(v) if v else 0.0


def _plain(obj: Any) -> Any:
    """JSON-ready: float keys as strings, non-finite floats as None (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {(f"{k:g}" if isinstance(k, float) else str(k)): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
