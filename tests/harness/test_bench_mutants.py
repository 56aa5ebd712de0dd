"""`harness bench mutants`: the rules make mutants that differ and compile, the float64 oracle tells an equivalent
edit from a real bug, and one small run on the CPU (the Triton interpreter) has our evaluator reject a mask mutant and
accept its original. KernelBench's side needs a GPU: here only its absence is, as the table states it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.mutants import oracle
from harness.bench.mutants.bench import summarize, table
from harness.bench.mutants.probe import published_values
from harness.bench.mutants.rules import RULES, mutants
from harness.corpus.candidates import cuda_candidate
from problems import select_problems, solution_path
from tests.paths import REPO

CUDA_MORE = '''
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
__global__ void norm_gelu(const float* x, float* out, int n, int cols) {
    int row = blockIdx.x;
    float m = x[row * cols], var = 0.0f;
    for (int c = 0; c < cols; c++) { var += x[row * cols + c] * x[row * cols + c]; }
    float r = 1.0f / sqrtf(var / cols + 1e-5f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = x[row * cols + c] * r;
        out[row * cols + c] = 0.5f * v * (1.0f + tanhf(0.7978845608f * v)) + expf(v - m);
    }
}
"""
ext = load_inline(name="norm_gelu", cpp_sources="", cuda_sources=cuda_src, functions=[])
'''


def _solution(problem_id: str) -> tuple[object, str]:
    (problem,) = select_problems(problem_id)
    path = solution_path(problem)
    assert path is not None
    return problem, path.read_text()


def test_every_rule_makes_mutants_that_differ_and_compile() -> None:
    made = []
    for path in sorted((REPO / "problems" / "solutions").glob("*/[0-9]*.py")):
        made += mutants(path.read_text())
    problem, softmax = _solution("L1/13_softmax")
    published = published_values(problem.source, softmax)  # type: ignore[attr-defined]
    assert published, "the probe learnt no published size"
    made += mutants(softmax, published=published)
    made += mutants(cuda_candidate("t"), "cuda") + mutants(CUDA_MORE, "cuda")
    assert {m.rule for m in made} == {r.name for r in RULES}, {r.name for r in RULES} - {m.rule for m in made}
    originals = {p.read_text() for p in (REPO / "problems" / "solutions").glob("*/[0-9]*.py")}
    for m in made:
        assert m.source not in originals and m.source not in (cuda_candidate("t"), CUDA_MORE), m.key
        compile(m.source, m.key, "exec")
        assert m.before and m.after and m.line > 0, m
    hardcoded = [m for m in made if m.rule == "hardcoded-size"]
    assert "n_cols = 16384" in [m.after for m in hardcoded], [m.after for m in hardcoded]  # COLS, published


@pytest.mark.timeout(900)
def test_the_oracle_marks_a_rename_equivalent_and_a_mask_bug_not() -> None:
    problem, softmax = _solution("L1/13_softmax")
    renamed = softmax.replace("_softmax_row_kernel", "_row_kernel_renamed")
    mask = next(m for m in mutants(softmax) if m.rule == "mask-le" and m.line == 21)  # the row kernel's mask
    broken = softmax.replace("y = torch.empty_like(x2)", "y = torch.empty_like(x2_missing)")
    verdicts = oracle.judge(problem, [softmax, renamed, mask.source, broken], "cpu")
    original, rename, bug, dead = verdicts
    assert original.status == oracle.ORIGINAL and original.draws >= 15 and not original.shown_by, original
    assert rename.status == oracle.EQUIVALENT and rename.draws == original.draws, rename
    assert bug.status == oracle.DIFFERS and bug.shown_by, bug  # one past the row: seen where the row is short
    assert "published draw 0" not in bug.shown_by or len(bug.shown_by) < original.draws
    assert dead.status == oracle.STILLBORN and "x2_missing" in dead.detail, dead


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_oracle_tells_a_downcast_to_fp16_by_values_near_the_dtypes_limits() -> None:
    """RoPE's loads cast to fp16 round within the tolerance on every ordinary draw; values near float32's largest
    magnitudes overflow fp16, so the mutant differs there (the evaluator's own regime rejects it, and an oracle that
    called it equivalent counted that as a false reject)."""
    problem, rope = _solution("LLM/02_rope")
    downcast = next(m for m in mutants(rope) if m.rule == "downcast-fp16")
    original, mutant = oracle.judge(problem, [rope, downcast.source], "cpu")
    assert original.status == oracle.ORIGINAL and "near the dtype's largest magnitudes" not in original.shown_by
    assert mutant.status == oracle.DIFFERS, mutant
    assert "near the dtype's largest magnitudes" in mutant.shown_by, mutant


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_run_on_the_cpu_kills_a_mask_and_a_wide_row_mutant_and_keeps_its_original(tmp_path: Path) -> None:
    out = tmp_path / "mutants"
    args = [sys.executable, "-m", "harness.cli", "bench", "mutants", "L1/13_softmax", "--rules",
            "mask-le,first-block-only,int32-offsets", "--device", "cpu", "--out", str(out)]
    run = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=1400)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["by_status"] == {"differs": 2, "equivalent": 1}, summary["oracle"]
    ours = summary["sides"]["ours"]
    assert ours["originals_judged"] == 1 and ours["originals_rejected"] == [], ours
    assert ours["by_class"]["boundary"] == {"judged": 1, "killed": 1, "kill_rate": 1.0}, ours
    # the kernel's path for rows wider than any published or own hidden shape, stopped after its first block:
    # found by the wide rows past the problem's own shapes (trials.PAST_OWN_SHAPES)
    assert ours["by_class"]["reduction"] == {"judged": 1, "killed": 1, "kill_rate": 1.0}, ours
    # int64 offsets made int32: equivalent at these sizes (no offset reaches 2**31), and judged correct
    assert ours["equivalent_judged"] == 1 and ours["equivalent_rejected"] == [], ours
    assert "kb" not in summary["sides"]
    assert any(n.startswith("KernelBench was not available") for n in summary["notes"]), summary["notes"]
    assert "KernelBench not available" in (out / "table.md").read_text()
    records = [json.loads(line) for line in (out / "ours.jsonl").read_text().splitlines()]
    assert {r["key"]: r["status"] for r in records} == {
        "L1/13_softmax:original": "correct", "L1/13_softmax:mask-le#0": "incorrect",
        "L1/13_softmax:first-block-only#0": "incorrect", "L1/13_softmax:int32-offsets#0": "correct"}, records
    wide = next(r for r in records if r["key"] == "L1/13_softmax:first-block-only#0")
    assert "on a hidden workload with wide rows" in wide["reason"], wide
    again = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)  # resumed: nothing to do
    assert again.returncode == 0 and "ours: 0 to evaluate (4 done before)" in again.stderr, again.stderr[-2000:]


def test_kill_rates_and_false_rejects_come_from_the_records() -> None:
    def o(key: str, status: str, cls: str = "boundary") -> tuple[str, dict[str, object]]:
        return key, {"key": key, "status": status, "rule": "r" if cls else "", "class": cls, "shown_by": [],
                     "after": "x"}

    records = dict([o("P:original", oracle.ORIGINAL, ""), o("P:a#0", oracle.DIFFERS), o("P:b#0", oracle.RAISES),
                    o("P:c#0", oracle.EQUIVALENT), o("P:d#0", oracle.STILLBORN), o("P:e#0", oracle.DIFFERS, "shapes"),
                    o("Q:original", oracle.ORIGINAL, ""), o("Q:a#0", oracle.DIFFERS)])

    def side(accepted: dict[str, bool | None]) -> dict[str, dict[str, object]]:
        return {k: {"key": k, "accepted": v, "reason": "why"} for k, v in accepted.items()}

    ours = side({"P:original": True, "P:a#0": False, "P:b#0": False, "P:c#0": False, "P:e#0": True,
                 "Q:original": False, "Q:a#0": False})
    kb = side({"P:original": True, "P:a#0": True, "P:b#0": None, "P:c#0": True, "P:e#0": False})
    s = summarize(records, {"ours": ours, "kb": kb}, ["a note"], {"device": "d"})
    mine, theirs = s["sides"]["ours"], s["sides"]["kb"]
    # Q's original is rejected by ours: its mutant counts for no kill rate of ours
    assert (mine["killed"], mine["judged"]) == (2, 3) and mine["by_class"]["shapes"]["killed"] == 0
    assert [r["key"] for r in mine["originals_rejected"]] == ["Q:original"]
    assert [r["key"] for r in mine["equivalent_rejected"]] == ["P:c#0"] and mine["equivalent_judged"] == 1
    assert [x["key"] for x in mine["survivors"]] == ["P:e#0"]
    # KernelBench's process failed on P:b#0 (no verdict) and never saw Q's candidates
    assert (theirs["killed"], theirs["judged"], theirs["not_judged_yet"]) == (1, 2, 1)
    text = table(s)
    assert "| boundary | 2/2 (100.0 %) | 0/1 (0.0 %) |" in text and "| **all** | **2/3 (66.7 %)** |" in text, text
    assert "- ours rejects Q:original: why" in text and "| P:e#0 |" in text
