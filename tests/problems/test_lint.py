"""Lint catches each planted defect (fixtures in KernelBench's layout) and passes sound problems."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from problems.kernelbench import load_kernelbench_dir
from problems.lint import lint_problem_here
from problems.lint_driver import lint_entries
from problems.problem import load_problem_file, problem_from_source
from problems.suite import suite_problem
from tests.paths import KERNELBENCH as FIXTURE

# problem id -> the checks that must fail (and no others)
EXPECTED_FAILURES = {
    "KB/L1/1_Sound_matmul": set(),
    "KB/L1/2_Constant_output": {"input-dependence", "constant-output", "unread-inputs"},
    "KB/L1/3_Zero_output": {"input-dependence", "zero-output", "constant-output", "unread-inputs"},
    "KB/L1/4_Random_forward": {"deterministic"},
    "KB/L1/5_Input_independent": {"input-dependence", "unread-inputs"},
    "KB/L1/6_Too_big_for_memory": {"memory"},
    "KB/L1/7_Missing_get_inputs": {"load"},
    "KB/L1/8_Nan_output": {"finite"},
    "KB/L2/1_Sound_gemm_relu": set(),
    "KB/L2/2_Min_clamp_zero": {"input-dependence", "zero-output", "constant-output", "unread-inputs"},
    "KB/L2/3_Scalar_mean_loss": {"input-dependence", "constant-output", "unread-inputs"},
    "KB/L3/1_Sound_mlp": set(),
    "KB/L3/2_Hangs": {"run"},
}


@pytest.fixture(scope="module")
def fixture_reports():
    """A problem that returns gets a generous bound, so that a busy machine does not fail it; the one that never
    returns is judged with a short one, which it overruns however long the bound. It sleeps through that bound beside
    the others (it takes no CPU), not after them."""
    entries = load_kernelbench_dir(FIXTURE)
    returns = [e for e in entries if e.id != "KB/L3/2_Hangs"]
    hangs = [e for e in entries if e.id == "KB/L3/2_Hangs"]
    with ThreadPoolExecutor(max_workers=1) as beside:
        hung = beside.submit(lint_entries, hangs, timeout_s=20)
        reports = lint_entries(returns, device="cpu", timeout_s=900, jobs=2) + hung.result()
    return {r.problem_id: r for r in reports}


@pytest.mark.slow  # lints twelve problems, each in a fresh subprocess
def test_each_planted_defect_is_caught_and_sound_problems_pass(fixture_reports):
    assert set(fixture_reports) == set(EXPECTED_FAILURES)
    got = {pid: {c.name for c in r.failures} for pid, r in fixture_reports.items()}
    assert got == EXPECTED_FAILURES
    for pid, expected in EXPECTED_FAILURES.items():
        assert fixture_reports[pid].ok == (not expected)


@pytest.mark.slow
def test_failures_say_why(fixture_reports):
    def detail(pid: str, check: str) -> str:
        return next(c.detail for c in fixture_reports[pid].checks if c.name == check)

    assert "all-zero output passes" in detail("KB/L2/2_Min_clamp_zero", "zero-output")
    assert "differ by" in detail("KB/L1/4_Random_forward", "deterministic")
    assert "GB budget" in detail("KB/L1/6_Too_big_for_memory", "memory")
    assert "missing get_inputs" in detail("KB/L1/7_Missing_get_inputs", "load")
    assert "timed out" in detail("KB/L3/2_Hangs", "run")
    # the too-big problem is judged without allocating it, and then not run at all
    too_big = {c.name: c.status for c in fixture_reports["KB/L1/6_Too_big_for_memory"].checks}
    assert too_big == {"memory": "fail", "run": "skip"}


def test_budget_and_scale_options():
    sound = load_problem_file(FIXTURE / "KernelBench/level1/1_Sound_matmul.py")
    tight = lint_problem_here(sound, budget=10_000)
    assert [c.name for c in tight.failures] == ["memory"]
    softmax = suite_problem("L1/13_softmax")
    assert lint_problem_here(softmax, scale="auto").scale == "small"
    assert lint_problem_here(sound, scale="small").scale == "full"  # no reduced sizes declared: full size


def test_a_problem_fitting_the_evaluator_but_not_lint_is_not_run_and_says_so():
    """The memory check judges the evaluation; lint's own larger working set only decides whether lint runs."""
    from problems.cost import estimate_memory, measure_cost
    from problems.lint import _lint_need

    sound = load_problem_file(FIXTURE / "KernelBench/level1/1_Sound_matmul.py")
    cost = measure_cost(sound)
    assert estimate_memory(cost) < _lint_need(cost)
    checks = {c.name: c for c in lint_problem_here(sound, budget=estimate_memory(cost)).checks}
    assert [(name, c.status) for name, c in checks.items()] == [("memory", "pass"), ("run", "skip")]
    assert "lint itself needs" in checks["run"].detail and "raise --budget-gb" in checks["run"].detail
    assert lint_problem_here(sound, budget=_lint_need(cost)).ok


def test_stale_metadata_and_bad_small_sizes_fail(tmp_path):
    softmax = suite_problem("L1/13_softmax")
    stale = problem_from_source(softmax.source.replace(f'"bytes": {softmax.meta["bytes"]}', '"bytes": 1000'),
                                name="stale", problem_id="stale")
    assert [c.name for c in lint_problem_here(stale).failures] == ["metadata"]
    bad_small = problem_from_source(softmax.source.replace('"small": {"ROWS": 16', '"small": {"NOT_A_CONSTANT": 1, "ROWS": 16'),
                                    name="bad", problem_id="bad")
    assert [c.name for c in lint_problem_here(bad_small).failures] == ["load"]


def test_forward_returning_no_tensor_fails(tmp_path):
    path = tmp_path / "1_No_tensor.py"
    shutil.copy(FIXTURE / "KernelBench/level1/1_Sound_matmul.py", path)
    path.write_text(path.read_text().replace("return torch.matmul(A, B)", "return None"))
    report = lint_problem_here(load_problem_file(path))
    assert [(c.name, c.detail) for c in report.failures] == [
        ("run", "output 0 is a NoneType, not a tensor: no candidate could match it")]


def test_nested_outputs_are_flattened_as_the_evaluator_does():
    """Lint and the evaluator share one flattening, so nested tuples and dicts reach the same leaves."""
    from problems.runtime import flatten_outputs, output_tensors

    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    assert [t.numel() for t in output_tensors((a, {"k": (b, [c])}))] == [1, 2, 3]
    assert flatten_outputs((a, None))[1] is None


# A KernelBench-format problem: `{forward}` ends Model.forward, given inputs x, y and `h`, a bmm of x.
_TRIVIAL_SOURCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features))
        self.norm = nn.LayerNorm(1)

    def forward(self, x, y):
        h = torch.bmm(x, self.weight.expand(x.shape[0], -1, -1))
        {forward}


batch, rows, features = 2, 160, 16  # 5120 outputs: past EXPRESSION_SAMPLE, so sampling runs too


def get_inputs():
    return [torch.randn(batch, rows, features), torch.randn(batch, rows, features)]


def get_init_inputs():
    return [features]
'''


def _trivial_check(forward: str):
    problem = problem_from_source(_TRIVIAL_SOURCE.replace("{forward}", forward), name="t", problem_id="t")
    report = lint_problem_here(problem)
    return report, next(c for c in report.checks if c.name == "trivial-expression")


def test_gemm_collapsing_to_y_times_y_fails_trivial_expression():
    """KB L2-28's shape: a bmm normalised over one element is all zeros, so (0 + y) * y = y*y."""
    report, check = _trivial_check(
        "h = self.norm(h.unsqueeze(-1)).squeeze(-1)\n        h = h + y\n        return h * y")
    assert check.status == "fail"
    assert "`inputs[1] * inputs[1]`" in check.detail and "FLOP" in check.detail
    # the older checks miss it; the per-input check sees that x never reaches the output
    assert [c.name for c in report.failures] == ["trivial-expression", "unread-inputs"]
    assert "input(s) [0]" in next(c for c in report.failures if c.name == "unread-inputs").detail


def test_gemm_collapsing_to_a_sum_of_inputs_fails_trivial_expression():
    _, check = _trivial_check("h = self.norm(h.unsqueeze(-1)).squeeze(-1)\n        return h + x + y")
    assert check.status == "fail"
    assert "`inputs[0] + inputs[1]`" in check.detail


def test_honest_gemm_passes_trivial_expression():
    report, check = _trivial_check("return torch.relu(h) * y")
    assert check.status == "pass" and "no output matches" in check.detail
    assert report.ok


def test_elementwise_problem_matching_its_own_form_passes():
    relu = problem_from_source(_TRIVIAL_SOURCE.replace("{forward}", "return torch.relu(y)").replace(
        "h = torch.bmm(x, self.weight.expand(x.shape[0], -1, -1))", "pass"), name="relu", problem_id="relu")
    check = next(c for c in lint_problem_here(relu).checks if c.name == "trivial-expression")
    assert check.status == "pass"
    assert "`relu(inputs[1])`" in check.detail and "own elementwise form" in check.detail


def test_a_matched_output_beside_real_work_passes():
    """FLOPs are counted for the whole forward: while one output needs them, they are not a shortcut."""
    _, check = _trivial_check("return h, torch.tanh(x)")
    assert check.status == "pass"
    assert "output 1 is matched by `tanh(inputs[0])`" in check.detail


_TWO_INPUTS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x * 2.0 + y[:1].sum() * 0.0{extra}


def get_inputs():
    return [torch.randn(64, 32), torch.randn(16, 32)]


def get_init_inputs():
    return []
{meta}"""


@pytest.mark.parametrize("extra, meta, verdict", [
    ("", "", "fail"),  # y never reaches the output and is not declared: the byte floor would count it
    ("", "META = {'unread_inputs': [1]}", "pass"),  # declared: the floor leaves it out
    (" + y.mean()", "META = {'unread_inputs': [1]}", "fail"),  # declared, yet the output depends on it
])
def test_inputs_the_byte_floor_counts_must_change_the_output(extra, meta, verdict):
    """The evaluator rejects a time under a quarter of the byte floor (every input read once); lint makes sure
    each counted input matters, and that an input declared unread (META['unread_inputs']) truly does not."""
    problem = problem_from_source(_TWO_INPUTS.format(extra=extra, meta=meta), name="two", problem_id="t/two")
    check = next(c for c in lint_problem_here(problem).checks if c.name == "unread-inputs")
    assert check.status == verdict, check
    if verdict == "fail":
        assert "[1]" in check.detail, check.detail



_ELEMENTWISE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {body}


def get_inputs():
    return [{draw}]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("body, draw, verdict, detail", [
    ("torch.log(x)", "torch.rand(1000) + 0.1", "pass",
     "runs: scaled, shifted, heavy-tailed; skipped, the reference not finite: flipped; skipped, ill-conditioned: none"),
    ("torch.asin(x) + torch.log(x)", "torch.rand(1000)", "fail",
     "runs: none; skipped, the reference not finite: scaled, shifted, flipped, heavy-tailed"),
    ("torch.tan(x * 3.0 + 0.1)", "torch.rand(65536) * 0.45", "pass",
     "runs: shifted, flipped; skipped, the reference not finite: none; skipped, ill-conditioned: scaled (the "
     "reference itself misses its float64 result past the tolerance"),
])
def test_lint_records_which_trials_off_the_published_distribution_can_run(body, draw, verdict, detail):
    """The evaluator runs a trial off the published distribution only where the reference stays finite and
    well-conditioned on it (`problems.conditioning`); lint records that decision per problem, and fails a problem on
    which none can run (a shortcut that relies on get_inputs()'s distribution would pass there). log(x) on x > 0.1:
    negated inputs give NaN; asin(x) + log(x) on (0, 1): every move leaves that domain somewhere; tan(3x + 0.1) on
    [0, 0.45): scaled by 4 or heavy-tailed, arguments near a pole make fp32 miss float64 by percents."""
    problem = problem_from_source(_ELEMENTWISE.format(body=body, draw=draw), name="dom", problem_id="t/dom")
    check = next(c for c in lint_problem_here(problem).checks if c.name == "distributions")
    assert (check.status, check.detail[:len(detail)]) == (verdict, detail), check
    if body.startswith("torch.tan"):
        assert "heavy-tailed (the reference itself misses" in check.detail, check.detail

_SIZED = '''
import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow  # four lint subprocesses
def test_a_problem_over_the_per_job_budget_is_linted_again_alone_within_the_jobs_budget():
    """Three jobs at 40 GB on an H200 left 23 of KernelBench's 250 problems unlinted ("raise --budget-gb"). With
    several jobs, a problem over the per-job budget but within jobs x budget is now linted again at the end, alone,
    within that, and reported once; with one job the budget stays the limit."""
    from problems.cost import estimate_memory, measure_cost
    from problems.lint import _lint_need

    small = problem_from_source(_SIZED.format(n=1 << 10), name="small", problem_id="t/small")
    large = problem_from_source(_SIZED.format(n=1 << 16), name="large", problem_id="t/large")
    cost = measure_cost(large)
    need = max(estimate_memory(cost), _lint_need(cost))
    budget = need * 2 // 3  # over it for one job, within it for two
    reported: list[str] = []
    reports = lint_entries([large, small], device="cpu", budget=budget, timeout_s=900, jobs=2,
                           on_report=lambda r: reported.append(r.problem_id))
    assert sorted(reported) == ["t/large", "t/small"] and [r.problem_id for r in reports] == ["t/large", "t/small"]
    checks = {c.name: c.status for c in reports[0].checks}
    assert checks["memory"] == "pass" and checks["run"] == "pass", reports[0].checks
    assert reports[0].needs_bytes is None and reports[0].ok
    (alone,) = lint_entries([large], device="cpu", budget=budget, timeout_s=900, jobs=1)
    assert {c.name: c.status for c in alone.checks}["run"] == "skip" and alone.needs_bytes == need
