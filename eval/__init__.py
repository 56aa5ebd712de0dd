"""Sandboxed evaluator: compiles, verifies, times and scores Triton and CUDA candidates.

Layout follows the trust boundary: `eval/worker/` is everything that runs inside the
sandboxed, untrusted worker; every other module here is the trusted parent, except
`protocol`, `wire` and `_capture`, the crossing: what both sides speak (the architecture
test holds the worker to it). The parent's check steps: `checks` (the step table and its
runner), `context`, `trials`, `staging`, `kernel_evidence`, `timing_steps`. The worker processes'
room, `eval/process/`: the sandbox, the pool and their OS plumbing. Names are imported
lazily so that reading results or configs never loads the evaluator's machinery.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "bytecode_left_out": "eval.process._bytecode",
    "installed_without_bytecode": "eval.process._bytecode",
    "primed_folder": "eval.process._bytecode",
    "BACKENDS": "eval.backends",
    "backend_error": "eval.backends",
    "DEFAULT_BACKEND": "eval.backends",
    "Builder": "eval.builds",
    "PIPELINE": "eval.pipeline.checks",
    "Step": "eval.pipeline.checks",
    "needs_build": "eval.builds",
    "cache_key": "eval.cache",
    "EvalConfig": "eval.config",
    "Evaluator": "eval.evaluator",
    "EvaluatorClosed": "eval.result",
    "Job": "eval.evaluator",
    "render_feedback": "eval.feedback",
    "share_text": "eval.feedback",
    "HOST_SHARE_AT": "eval.timing.host_share",
    "Hello": "eval.crossing.protocol",
    "Integrity": "eval.crossing.protocol",
    "Load": "eval.crossing.protocol",
    "OUTSIDE_PARTS": "eval.crossing.protocol",
    "Sync": "eval.crossing.protocol",
    "EvalResult": "eval.result",
    "KernelShare": "eval.result",
    "Mismatch": "eval.result",
    "Status": "eval.result",
    "Timing": "eval.result",
    "UNFINISHED": "eval.result",
    "PROFILE_PROMPT_CHARS": "eval.profiling.render",  # profile (issue 57)
    "cap_profile": "eval.profiling.render",  # profile (issue 57)
    "Ceilings": "eval.timing.roofline",
    "cached_ceilings": "eval.timing.roofline",
    "probe_and_cache": "eval.timing.roofline",
    "WorkerProcess": "eval.process.sandbox",
    "confine_command": "eval.process.confine",
    "is_secret_name": "eval.process._worker_env",
    "process_limit_plan": "eval.process.sandbox",
    "sandbox_plan": "eval.process.sandbox",
    "visible_device_entry": "eval.process._worker_env",
    "DEFAULT_PS": "eval.scoring",
    "at_k_per_problem": "eval.scoring",
    "bootstrap_ci": "eval.scoring",
    "fast_p": "eval.scoring",
    "score": "eval.scoring",
    "analyze": "eval.static_checks",
    "refusal": "eval.static_checks",
    "Channel": "eval.crossing.wire",
    "new_region_fd": "eval.crossing.wire",
    "lightened": "eval.worker.light_build",
    "CAPTURE_KERNELS": "eval.crossing._native_build",
    "CAPTURE_SOURCE": "eval.crossing._native_build",
    "compile_cubin": "eval.crossing._native_build",
    "prepare_native": "eval.crossing._native_build",
    "NativeLoop": "eval.worker.native_loop",
    "cycles_per_us": "eval.worker.observed",  # observed timing's lead clock, for `harness bench imported-memory`
    "ExportedBuffer": "eval.worker.cuda_ipc",  # observed timing's flags, for `harness bench observed-contexts`
    "ImportedBuffer": "eval.worker.cuda_ipc",
    "bytes_at": "eval.worker.cuda_ipc",
    "wait_flag": "eval.worker.cuda_ipc",
    "write_flag": "eval.worker.cuda_ipc",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load an exported name on first use, so that importing the package loads none of its modules."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'eval' has no attribute {name!r}")
