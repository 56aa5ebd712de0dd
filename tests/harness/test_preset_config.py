"""The `eval=kernelbench` preset as configuration: what it sets, what stays as before for the default."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import harness.conf  # noqa: F401  registers the eval schema
from eval.steps import timing_steps
from eval.crossing import protocol as p
from eval.config import EvalConfig
from eval.result import EvalResult, Status
from harness.presets import preset_config
from problems import runtime

# what the cache key and the timing rule held before presets existed (the default must not move)
LEGACY_CACHE_FIELDS = {
    "atol", "call_timeout_s", "compile_baseline", "device", "extra_env", "import_timeout_s", "isolate_network",
    "max_output_bytes", "max_reps", "min_reps", "own_kernel_policy", "problem_scale", "rtol", "target_rel_stderr",
    "time_budget_s", "timed_input_sets", "timing_timeout_s", "trials", "warmup_ms",
}


def hydra_eval(preset: str) -> EvalConfig:
    with initialize_config_module("harness.conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"eval={preset}"])
    return EvalConfig(**OmegaConf.to_container(cfg.eval, resolve=True))  # type: ignore[arg-type]


def test_kernelbench_preset_sets_kernelbench_rules() -> None:
    kb = hydra_eval("kernelbench")
    assert kb.preset == "kernelbench"
    assert (kb.atol, kb.rtol, kb.trials) == (0.01, 0.01, 5)
    assert kb.precision == "torch_default" and kb.seeding == "kernelbench" and kb.public_seed == 42
    assert not kb.copy_reference_state and not kb.hidden_shapes and kb.own_kernel_policy == "report"
    assert not kb.hidden_work_check and not kb.timed_output_checks
    assert (kb.timing_method, kb.fixed_warmup_calls, kb.fixed_reps, kb.timing_statistic, kb.l2_flush,
            kb.l2_flush_bytes) == ("fixed", 3, 100, "mean", True, 256 << 20)
    # the bench's own reader of preset files resolves the same thing as Hydra
    assert preset_config("kernelbench") == kb
    # the tolerance ignores dtype defaults and problem overrides, like KernelBench's allclose
    assert kb.tolerance("float32", 1e-5, 1e-5) == (0.01, 0.01) == kb.tolerance("bfloat16", None, None)


def test_default_preset_is_the_strict_rules_unchanged() -> None:
    default = hydra_eval("default")
    assert default == EvalConfig() and default.preset == "default"
    # cached strict results are still found, except that the own-share rule and the trials off the published
    # distribution changed strict verdicts, so they key the cache
    assert set(default.cache_fields()) == LEGACY_CACHE_FIELDS | {"min_own_time_fraction", "distribution_trials"}
    rule = default.timing_rule()
    assert (rule.min_reps, rule.max_reps, rule.target_rel_stderr, rule.budget_s, rule.warmup_ms) == (
        20, 1000, 0.01, 6.0, 25.0)
    assert default.tolerance("float32", None, None) == (1e-4, 1e-4)
    # the default rule is the adaptive, flushed, checked method, compared by medians
    assert (rule.method, rule.flush, rule.check_outputs, rule.statistic) == ("adaptive", True, True, "median")


def test_kernelbench_keys_its_own_cache_entries_and_timing_rule() -> None:
    kb = preset_config("kernelbench")
    fields = kb.cache_fields()
    assert fields["preset"] == "kernelbench" and fields["timing_statistic"] == "mean"
    assert set(fields) > LEGACY_CACHE_FIELDS
    rule = kb.timing_rule()
    assert (rule.method, rule.flush, rule.flush_bytes, rule.reps, rule.warmup_calls, rule.check_outputs,
            rule.statistic) == ("fixed", True, 256 << 20, 100, 3, False, "mean")


@pytest.mark.parametrize("bad, message", [
    ({"precision": "tf32"}, "eval.precision must be one of strict, torch_default"),
    ({"timing_statistic": "max"}, "eval.timing_statistic must be one of median, mean"),
    ({"seeding": "public"}, "eval.seeding must be one of secret, kernelbench"),
    ({"timing_method": "fixed", "timed_input_sets": 3}, "timed_input_sets=1"),
    ({"fixed_reps": 0}, "eval.fixed_reps must be > 0"),
    ({"preset": " "}, "eval.preset must name the preset"),
])
def test_invalid_rules_are_refused(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EvalConfig(**bad)


def test_results_record_their_preset_and_old_results_read_as_default() -> None:
    r = EvalResult(status=Status.CORRECT, preset="kernelbench")
    assert EvalResult.from_dict(r.to_dict()).preset == "kernelbench"
    old = r.to_dict()
    del old["preset"]  # a result stored before presets existed
    assert EvalResult.from_dict(old).preset == "default"


def test_kernelbench_trial_seeds_match_its_global_generator() -> None:
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(42)
        expected = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    finally:
        torch.random.set_rng_state(state)
    before = torch.random.get_rng_state()
    assert runtime.kernelbench_trial_seeds(42, 5) == expected
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's random state is untouched


def test_precision_modes_and_their_restoration() -> None:
    runtime.strict_precision()
    with runtime.precision("torch_default"):
        assert torch.backends.cudnn.allow_tf32 is True and torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cudnn.allow_tf32 is False  # strict again afterwards
    with pytest.raises(ValueError, match="unknown precision mode"):
        runtime.set_precision("tf32")


def test_load_request_carries_precision_and_state_copy() -> None:
    load = p.Load(problem_source="x", precision="torch_default", copy_state=False)
    assert p.decode_request(p.encode(load)) == load
    assert dataclasses.asdict(p.Load())["precision"] == "strict" and p.Load().copy_state is True


def test_timing_note_gives_both_means_precisely_enough_to_recompute_the_speedup() -> None:
    import re

    config = preset_config("kernelbench", device="cpu", cache_dir=None)
    reference, candidate = {"mean_ms": 0.0181234, "median_ms": 0.0180011}, {"mean_ms": 0.0222468, "median_ms": 0.022}
    note = timing_steps.timing_note(config, reference, candidate)
    ref_mean, cand_mean = (float(x) for x in re.findall(r"mean ([0-9.]+) ms", note))
    assert ref_mean / cand_mean == pytest.approx(reference["mean_ms"] / candidate["mean_ms"], rel=1e-4)
    assert "median 0.018001 ms" in note and "100 calls after 3 warm-up calls" in note
