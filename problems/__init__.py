"""Reference problems: our suite, KernelBench (checkout or dataset), single files, and lint.

Configs and other packages select problems with `select_problems("level1,LLM/*")` (see
`problems.select` for the spec grammar); `solution_path(problem)` finds a hand-written Triton
solution of a suite problem.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Mismatch": "problems._compare",
    "compare": "problems._compare",
    "compare_structure": "problems._compare",
    "magnitude": "problems._compare",
    "scaled_atol": "problems._compare",
    "tolerance": "problems._compare",
    "WIDE_CHECK_MAX_BYTES": "problems.conditioning",
    "float64_miss": "problems.conditioning",
    "ill_conditioned": "problems.conditioning",
    "Cost": "problems.cost",
    "describe_bytes": "problems.cost",
    "describe_flops": "problems.cost",
    "estimate_memory": "problems.cost",
    "measure_cost": "problems.cost",
    "LoadFailure": "problems.kernelbench",
    "DEFAULT_BUDGET_BYTES": "problems.lint",
    "LintReport": "problems.lint",
    "degenerate_outputs": "problems.lint",
    "lint_entries": "problems.lint_driver",
    "Problem": "problems.problem",
    "ProblemError": "problems.problem",
    "load_problem_file": "problems.problem",
    "problem_from_source": "problems.problem",
    "public_source": "problems.problem",
    "DISTRIBUTIONS": "problems.runtime",
    "build_model": "problems.runtime",
    "derive_seed": "problems.runtime",
    "derived_workloads": "problems.runtime",
    "draw_inputs": "problems.runtime",
    "extra_input_count": "problems.runtime",
    "flatten_outputs": "problems.runtime",
    "has_small_sizes": "problems.runtime",
    "input_fingerprint": "problems.runtime",
    "input_only_constants": "problems.runtime",
    "kernelbench_trial_seeds": "problems.runtime",
    "load_module": "problems.runtime",
    "load_source": "problems.runtime",
    "make_inputs": "problems.runtime",
    "output_structure": "problems.runtime",
    "output_tensors": "problems.runtime",
    "precision": "problems.runtime",
    "run_forward": "problems.runtime",
    "seed_everything": "problems.runtime",
    "set_precision": "problems.runtime",
    "sizes_varied_by_extras": "problems.runtime",
    "strict_precision": "problems.runtime",
    "transformed": "problems.runtime",
    "select_entries": "problems.select",
    "compile_expression": "problems.syntax",
    "literal_value": "problems.syntax",
    "parse_python": "problems.syntax",
    "select_problems": "problems.select",
    "LEVELS": "problems.suite",
    "solution_path": "problems.suite",
    "suite_problem": "problems.suite",
    "HEADROOM": "problems.variants",
    "LAYOUTS": "problems.variants",
    "REGIMES": "problems.variants",
    "VALUE_SHAPES": "problems.variants",
    "scaled_floats": "problems.variants",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load an exported name on first use, so that importing the package loads none of its modules."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'problems' has no attribute {name!r}")
