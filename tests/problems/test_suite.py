"""Our problem suite: ids, metadata, coverage of the operator families, and soundness (lint) of every problem."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from problems.cost import measure_cost
from problems.lint import lint_problem_here
from problems.problem import ProblemError, load_problem_file
from problems.runtime import load_module, make_inputs
from problems.suite import LEVELS, SOLUTIONS_DIR, SUITE_DIR, load_suite, solution_path, suite_problem, suite_problem_id
from problems.update_meta import update_file
from tests.paths import KERNELBENCH

SUITE = load_suite()
BY_LEVEL = {level: [p for p in SUITE if p.level == level] for level in LEVELS}


def test_level_sizes():
    assert len(BY_LEVEL["level1"]) >= 30
    assert len(BY_LEVEL["level2"]) >= 25
    assert len(BY_LEVEL["level3"]) >= 10
    assert sum(p.dtype == "bfloat16" for p in BY_LEVEL["llm"]) >= 10


def test_ids_are_stable_unique_and_round_trip():
    ids = [p.id for p in SUITE]
    assert len(ids) == len(set(ids))
    for p in SUITE:
        folder = Path(p.path).parent.name
        assert p.id == f"{LEVELS[folder]}/{Path(p.path).stem}"
        assert re.fullmatch(r"(L1|L2|L3|LLM)/\d\d_[a-z0-9_]+", p.id), p.id
        assert suite_problem(p.id).source == p.source
    assert suite_problem_id("level2", "16_add_rmsnorm") == "L2/16_add_rmsnorm"
    with pytest.raises(ProblemError, match="no suite problem"):
        suite_problem("L1/99_nope")
    with pytest.raises(ProblemError, match="unknown suite level"):
        suite_problem_id("level9", "x")


def test_numbering_is_contiguous_per_level():
    for level, problems in BY_LEVEL.items():
        numbers = sorted(int(Path(p.path).stem[:2]) for p in problems)
        assert numbers == list(range(1, len(numbers) + 1)), level


@pytest.mark.parametrize("problem", SUITE, ids=lambda p: p.id)
def test_metadata_is_complete(problem):
    meta = problem.meta
    assert meta["level"] == Path(problem.path).parent.name
    assert problem.dtype in ("float32", "bfloat16")
    assert problem.tags and all(isinstance(t, str) and t for t in problem.tags)
    assert isinstance(meta["flops"], int) and meta["flops"] >= 0
    assert isinstance(meta["bytes"], int) and meta["bytes"] > 0
    assert meta.get("flops_method", "hand") == "hand"
    assert isinstance(meta.get("small"), dict) and meta["small"]
    # big enough to time on an H100 (eager >= ~50 us): >= 10 GFLOP of matmul work or >= 64 MiB of traffic
    assert meta["flops"] >= 10**10 or meta["bytes"] >= 64 * 2**20
    if "memory-bound" in problem.tags:
        assert meta["bytes"] >= 128 * 10**6
    for key in ("atol", "rtol"):
        if key in meta:
            assert 0 < meta[key] <= 2e-2


def test_operator_families_are_covered():
    def tags(level: str) -> set[str]:
        return {t for p in BY_LEVEL[level] for t in p.tags}

    assert {
        "matmul", "tall-skinny", "batched", "transposed", "gemv", "conv2d", "depthwise", "conv1d", "conv-transpose",
        "pooling", "softmax", "layernorm", "rmsnorm", "groupnorm", "batchnorm", "reduction", "argmax", "cumsum",
        "activation", "cross-entropy", "mse", "kl-divergence", "transpose", "permute", "embedding",
    } <= tags("level1")
    assert any("log_softmax" in p.id for p in BY_LEVEL["level1"])
    assert {"bias", "activation", "batchnorm", "groupnorm", "residual", "attention", "mask", "layernorm", "swiglu", "rope"} <= tags("level2")
    assert {"mlp", "transformer", "causal", "gqa", "resnet", "lstm", "moe", "vit"} <= tags("level3")
    assert {"rmsnorm", "rope", "swiglu", "causal", "moe", "topk", "cross-entropy", "fp8", "quantization", "dequantize"} <= tags("llm")


def test_most_problems_have_hidden_extra_shapes():
    assert sum(p.has_extra_inputs for p in SUITE) >= 0.75 * len(SUITE)


@pytest.mark.parametrize("problem", SUITE, ids=lambda p: p.id)
def test_problem_passes_lint_at_small_size(problem):
    """Loads, runs (at META['small'] sizes on the CPU), is finite, deterministic, input-dependent,
    not solvable by a zero or constant output, fits 24 GB at full size, and its flops/bytes are current."""
    report = lint_problem_here(problem, device="cpu", scale="auto")
    assert report.scale == "small"
    failures = [f"{c.name}: {c.detail}" for c in report.failures]
    assert not failures, failures
    skipped = {c.name for c in report.checks if c.status == "skip"}
    # skipping is allowed only where it cannot be decided: data-dependent forwards (memory) and no extra inputs
    assert skipped <= {"memory", "extra-inputs"}
    if "memory" in skipped:
        assert "moe" in problem.tags


@pytest.mark.parametrize("problem", SUITE, ids=lambda p: p.id)
def test_inputs_are_cpu_tensors(problem):
    module = load_module(problem, small=True)
    inputs = make_inputs(module, seed=0)
    assert all(x.device.type == "cpu" for x in inputs if isinstance(x, torch.Tensor))


def test_solution_paths_mirror_the_suite():
    softmax = suite_problem("L1/13_softmax")
    assert solution_path(softmax) == SOLUTIONS_DIR / "level1" / "13_softmax.py"
    assert solution_path(suite_problem("L1/24_gelu")) is None
    for path in sorted(SOLUTIONS_DIR.glob("*/[0-9]*.py")):
        assert (SUITE_DIR / path.parent.name / path.name).is_file(), f"{path} solves no suite problem"
    outside = load_problem_file(KERNELBENCH / "KernelBench/level1/1_Sound_matmul.py")
    assert solution_path(outside) is None


def test_update_meta_rewrites_measured_fields_and_keeps_hand_flops(tmp_path):
    for pid in ("L1/13_softmax", "L2/06_attention_scores_mask_softmax"):
        original = suite_problem(pid)
        copy = tmp_path / "level" / Path(original.path).name
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(original.path, copy)
        stale = copy.read_text().replace(f'"bytes": {original.meta["bytes"]}', '"bytes": 5')
        copy.write_text(stale)
        problem = load_problem_file(copy, problem_id=pid)
        assert problem.bytes_moved == 5
        line = update_file(problem, write=True)
        assert line.endswith("updated")
        rewritten = load_problem_file(copy, problem_id=pid)
        assert rewritten.bytes_moved == original.bytes_moved
        assert rewritten.flops == original.flops  # the hand-counted causal FLOPs survive
    counted = measure_cost(suite_problem("L2/06_attention_scores_mask_softmax")).flops  # full S x S product
    assert counted / original.flops == pytest.approx(2.0, rel=1e-2)
