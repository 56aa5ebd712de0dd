"""Report metrics against hand-computed values: fast_p (ties at exactly p, missing problems),
pass@k and fast_p@k (unbiased estimator), bootstrap intervals, rates, usage, turns and levels."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from eval.result import EvalResult, Status
from eval.scoring import at_k, at_k_per_problem, bootstrap_ci, pass_at_k
from harness.report.load import load_run
from harness.report.metrics import compute_metrics, ks_for
from tests.report_fixtures import H100, SMOKE, config, write_run


def correct(speedup: float | None) -> EvalResult:
    return EvalResult(status=Status.CORRECT, speedup=speedup, timing_meaningful=speedup is not None)


# ------------------------------------------------------------------------------ pass@k
def test_pass_at_k_matches_the_closed_form() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(5, 2, 4) == 1.0  # fewer than 4 failures: every draw of 4 holds a success
    assert pass_at_k(5, 0, 5) == 0.0 and pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # k = 1 is the plain success rate
    for bad in ((3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_at_k_counts_missing_samples_and_problems_as_failures() -> None:
    samples = {"a": [correct(1.5)], "b": [], "c": [correct(0.5), None, EvalResult(status=Status.INCORRECT)]}
    per = at_k_per_problem(samples, k=1, n=4, p=None)
    assert per == {"a": pytest.approx(1 / 4), "b": 0.0, "c": pytest.approx(1 / 4)}
    assert at_k(samples, k=2, n=4, p=1.0) == pytest.approx((1 - 3 / 6) / 3)  # only a's sample beats 1.0
    with pytest.raises(ValueError, match="more than n"):
        at_k_per_problem({"a": [None, None]}, k=1, n=1)


def test_ks_reported() -> None:
    assert ks_for(1) == [1] and ks_for(3) == [1, 2, 3] and ks_for(8) == [1, 2, 4, 8] and ks_for(10) == [1, 2, 4, 8, 10]


# ------------------------------------------------------------------------------ bootstrap
def test_bootstrap_interval_by_hand() -> None:
    # mean of 4 draws from {0,0,0,1}: P(0) = .316, P(.25) = .422, P(.5) = .211, P(.75) = .047, P(1) = .004
    # so the 2.5% quantile is 0 and the 97.5% quantile is .75 (cumulative .949 below it, .996 with it)
    assert bootstrap_ci([0, 0, 0, 1], n_boot=20000, seed=3) == (0.0, 0.75)
    assert bootstrap_ci([0, 1], n_boot=5000, seed=0) == (0.0, 1.0)
    assert bootstrap_ci([0.4] * 7, seed=5) == pytest.approx((0.4, 0.4))
    assert bootstrap_ci([]) == (0.0, 0.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0], level=1.0)


def test_bootstrap_is_deterministic_under_a_seed() -> None:
    values = [math.sin(i) ** 2 for i in range(23)]
    first = bootstrap_ci(values, seed=11)
    assert bootstrap_ci(values, seed=11) == first
    assert bootstrap_ci(values, seed=12) != first
    lo, hi = first
    assert lo < sum(values) / len(values) < hi


# ------------------------------------------------------------------------------ one run
@pytest.fixture
def ties_run(tmp_path: Path) -> Path:
    """smoke (6 problems): speedups exactly 1.0, 1.5 and 2.0, one incorrect, two never attempted."""
    return write_run(
        tmp_path / "ties",
        config("ties"),
        [
            (SMOKE[0], 1, 1, "correct", 1.0, 0.2),
            (SMOKE[1], 1, 1, "correct", 1.5, 0.4),
            (SMOKE[2], 1, 1, "correct", 2.0, 0.9),
            (SMOKE[3], 1, 1, "incorrect", None, None),
        ],
    )


def test_fast_p_ties_at_p_and_missing_problems(ties_run: Path) -> None:
    m = compute_metrics(load_run(ties_run))
    assert m.n_problems == 6  # the two unattempted problems stay in the denominator
    assert m.fast_p == pytest.approx({0.0: 3 / 6, 0.5: 3 / 6, 0.8: 3 / 6, 1.0: 2 / 6, 1.5: 1 / 6, 2.0: 0.0})
    assert m.geomean_speedup == pytest.approx(3 ** (1 / 3))
    assert (m.compile_rate, m.correct_rate) == pytest.approx((4 / 6, 3 / 6))
    assert m.median_sol_fraction == pytest.approx(0.4) and m.median_own_time_fraction == pytest.approx(0.9)
    assert (m.rejected, m.attempts, m.tokens) == (0, 4, 4 * 120)
    assert m.cost_usd == pytest.approx(0.04) and m.cost_complete
    assert m.timings_measured and m.timing_available and m.devices == [H100] and m.at_k == []
    assert (m.agent, m.model, m.search, m.backend) == ("openai", "gpt-4o", "1 turn × 1 sample", "triton")
    assert [m.per_problem[p].status for p in SMOKE] == ["correct"] * 3 + ["incorrect", None, None]
    levels = {lv: (s.n_problems, s.correct_rate, s.fast_p[1.0]) for lv, s in m.by_level.items()}
    assert levels == {"level1": (2, 1.0, 0.5), "level2": (1, 1.0, 1.0), "level3": (1, 0.0, 0.0), "llm": (2, 0.0, 0.0)}


def test_fast_p_intervals_are_over_problems_and_seeded(ties_run: Path) -> None:
    run = load_run(ties_run)
    m = compute_metrics(run, n_boot=500, seed=4)
    # fast_1 per problem, in selection order: 1.0 is not above 1; 1.5 and 2.0 are; the rest fail
    assert m.fast_p_ci[1.0] == bootstrap_ci([0, 1, 1, 0, 0, 0], n_boot=500, seed=4)
    assert m.fast_p_ci[2.0] == (0.0, 0.0)
    assert compute_metrics(run, n_boot=500, seed=4).fast_p_ci == m.fast_p_ci
    for p, (lo, hi) in m.fast_p_ci.items():
        assert lo <= m.fast_p[p] <= hi


def test_several_samples_pass_at_k_and_fast_p_at_k(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "par",
        config("par", limit=2, samples=3, search="parallel"),
        [
            (SMOKE[0], 1, 1, "correct", 1.2, None),
            (SMOKE[0], 2, 1, "incorrect", None, None),
            (SMOKE[0], 3, 1, "correct", 0.9, None),
            (SMOKE[1], 1, 1, "correct", 2.5, None),
            (SMOKE[1], 3, 1, "agent_error", None, None),  # sample 2 missing
        ],
    )
    m = compute_metrics(load_run(run))
    by_k = {a.k: a for a in m.at_k}
    assert sorted(by_k) == [1, 2, 3] and m.search == "parallel: 1 turn × 3 samples"
    # correct samples: 2 of 3 and 1 of 3; above 1.0: 1 of 3 for each
    assert by_k[1].pass_at_k == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert by_k[2].pass_at_k == pytest.approx((1 + (1 - 1 / 3)) / 2)
    assert by_k[3].pass_at_k == 1.0
    assert by_k[1].fast_p[1.0] == pytest.approx(1 / 3) and by_k[2].fast_p[1.0] == pytest.approx(2 / 3)
    # the headline (best of all samples) is fast_p@n
    assert m.fast_p == pytest.approx(by_k[3].fast_p) and m.fast_p[2.0] == 0.5
    assert by_k[1].pass_at_k_ci[0] <= by_k[1].pass_at_k <= by_k[1].pass_at_k_ci[1]


def test_best_so_far_by_turn(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "ser",
        config("ser", limit=2, turns=3, search="serial"),
        [
            (SMOKE[0], 1, 1, "compile_error", None, None),
            (SMOKE[0], 1, 2, "correct", 0.8, None),
            (SMOKE[0], 1, 3, "correct", 1.6, None),
            (SMOKE[1], 1, 1, "incorrect", None, None),
            (SMOKE[1], 1, 2, "rejected", None, None),
            (SMOKE[1], 1, 3, "correct", 1.1, None),
        ],
    )
    m = compute_metrics(load_run(run))
    got = [(t.turn, t.correct_rate, t.fast_p[0.5], t.fast_p[1.0], t.fast_p[1.5]) for t in m.by_turn]
    assert got == [(1, 0.0, 0.0, 0.0, 0.0), (2, 0.5, 0.5, 0.0, 0.0), (3, 1.0, 1.0, 1.0, 0.5)]
    best = m.per_problem[SMOKE[0]]
    assert (best.turn, best.speedup) == (3, 1.6) and m.rejected == 1 and m.compile_rate == 1.0


def test_cpu_run_has_no_measured_speedups(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "cpu",
        config("cpu", limit=2),
        [
            (SMOKE[0], 1, 1, "correct", None, None),
            (SMOKE[1], 1, 1, "incorrect", None, None),
        ],
        timed=False,
        device="cpu (Triton interpreter)",
    )
    m = compute_metrics(load_run(run))
    assert not m.timings_measured and not m.timing_available and m.correct_rate == 0.5
    assert set(m.fast_p.values()) == {0.0} and m.geomean_speedup is None and m.median_sol_fraction is None
    assert m.per_problem[SMOKE[0]].speedup is None and m.device == "cpu (Triton interpreter)"


def test_costs_unknown_or_partial(tmp_path: Path) -> None:
    unknown = write_run(tmp_path / "u", config("u", limit=1), [(SMOKE[0], 1, 1, "correct", 1.0, None)], cost=None)
    m = compute_metrics(load_run(unknown))
    assert m.cost_usd is None and not m.cost_complete
    write_run(unknown, config("u", limit=1), [(SMOKE[0], 2, 1, "correct", 1.0, None)], cost=0.5)
    m = compute_metrics(load_run(unknown))
    assert m.cost_usd == pytest.approx(0.5) and not m.cost_complete  # a lower bound


def test_wall_time_sums_sessions_and_an_unfinished_one_ends_at_its_last_attempt(tmp_path: Path) -> None:
    cfg = config("w", limit=2)
    run = write_run(tmp_path / "w", cfg, [(SMOKE[0], 1, 1, "correct", 1.0, None)])
    write_run(run, cfg, [(SMOKE[1], 1, 1, "correct", 1.0, None)], finish=False)  # killed mid-run
    conn = sqlite3.connect(run / "attempts.sqlite")
    with conn:
        conn.execute("UPDATE sessions SET started_at = 1000, finished_at = 1100 WHERE id = 1")
        conn.execute("UPDATE sessions SET started_at = 1200 WHERE id = 2")
        conn.execute("UPDATE attempts SET finished_at = 1290 WHERE session_id = 2")
    conn.close()
    data = load_run(run)
    assert data.wall_s == pytest.approx(100 + 90) and data.in_progress
    assert any("has not finished" in w for w in data.warnings)


def test_a_gpu_run_with_nothing_correct_is_timed_and_scores_zero(tmp_path: Path) -> None:
    run = write_run(tmp_path / "gpu0", config("gpu0", limit=2), [(SMOKE[0], 1, 1, "incorrect", None, None)])
    m = compute_metrics(load_run(run))
    assert m.timing_available and not m.timings_measured and m.fast_p[0.0] == 0.0  # a real zero, not "not timed"
