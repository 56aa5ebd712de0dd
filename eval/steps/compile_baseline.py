"""The torch.compile baseline (the setting `eval.compile_baseline`): a problem's eager reference against its
torch.compile, timed in one clean worker that never sees a candidate, the blocks alternating as a candidate's
timing does. GPU only; `Evaluator.baseline` caches the figures per device and versions."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from eval.timing import measure
from eval.crossing import protocol as p
from eval._reference import Reference, encode_args
from eval.config import EvalConfig
from eval.steps.context import trim
from problems import Problem, derive_seed


def timings(pool: Any, config: EvalConfig, problem: Problem) -> dict[str, dict[str, float]]:
    """Eager against torch.compile, both in one clean worker that never sees a candidate, blocks alternating."""
    secret = secrets.randbits(62)
    lease = pool.acquire()
    try:
        weight_seed, input_seed = derive_seed(secret, "weights"), derive_seed(secret, "pool0")
        with lease.gate.hold("shared"):
            spec, tensors = encode_args(Reference(problem, weight_seed, lease.device).inputs(input_seed))
            for subject, compiled in (("eager", False), ("compiled", True)):
                load, _ = lease.worker.request(
                    p.Load(problem_source=problem.source, problem_label=problem.path or problem.id,
                           weight_seed=weight_seed, subject=subject, compiled=compiled),
                    timeout=config.import_timeout_s)
                if not load.ok:
                    raise RuntimeError(f"baseline load failed: {load.error}")
                staged, _ = lease.worker.request(
                    p.Stage(subject=subject, args=spec, n_inputs=len(tensors), sets=1), tensors,
                    timeout=config.call_timeout_s)
                if not staged.ok:
                    raise RuntimeError(f"baseline staging failed: {staged.error}")
        rule = dataclasses.replace(config.timing_rule(), check_outputs=False, warmup_ms=max(config.warmup_ms, 200.0))
        with lease.gate.hold("exclusive"):
            meas = measure.time_pair(measure.Side("eager", lease.worker, "eager"),
                                     measure.Side("compiled", lease.worker, "compiled"), rule, nonce=0,
                                     graphs=False, timeout=config.timing_timeout_s + 600)
    except measure.BlockFailed as exc:
        raise RuntimeError(f"baseline timing failed: {trim(exc.reply.error)}") from None
    finally:
        pool.release(lease)
    return {"eager": meas.summary("eager"), "compiled": meas.summary("compiled")}
