"""`harness bench eval --part steps` leaves steps out through the evaluator's `pipeline` argument (issue 55 item 3):
no global of the product is rebound while a bench runs."""

from __future__ import annotations

import pytest

from eval import PIPELINE, EvalConfig, Evaluator
from harness.bench.steps import pipeline_without


def test_a_pipeline_without_steps_is_an_argument_refuses_a_name_that_is_no_step_and_is_never_cached(tmp_path):
    """The step list is an evaluator's argument, not a global a bench rebinds: the whole pipeline stays whole,
    and an evaluator given another one (a diagnostic) keeps no result cache, so its verdicts never pass for real
    ones."""
    whole = tuple(PIPELINE)
    fewer = pipeline_without(frozenset({"timing", "host_bound"}))
    assert [s.name for s in fewer] == [s.name for s in whole if s.name not in ("timing", "host_bound")]
    assert tuple(PIPELINE) == whole
    with pytest.raises(ValueError, match=r"no pipeline step named \['tming'\]"):
        pipeline_without(frozenset({"tming"}))
    config = EvalConfig(device="cpu", cache_dir=str(tmp_path / "cache"), workers_per_gpu=1)
    with Evaluator(config, pipeline=fewer) as diagnostic:
        assert diagnostic._cache is None
    with Evaluator(config) as real:
        assert real._cache is not None
