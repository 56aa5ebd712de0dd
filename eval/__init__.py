"""Sandboxed evaluator: compiles, verifies, times and scores Triton and CUDA candidates.

Layout follows the trust boundary: `eval/worker/` is everything that runs inside the
sandboxed, untrusted worker; every other module here is the trusted parent, except
`protocol` and `wire`, the one definition of what crosses between them. Names are imported
lazily so that reading results or configs never loads the evaluator's machinery.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EvalConfig": "eval.config", "Evaluator": "eval.evaluator", "Job": "eval.evaluator",
    "EvalResult": "eval.result", "KernelShare": "eval.result", "Mismatch": "eval.result", "Status": "eval.result",
    "Timing": "eval.result",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'eval' has no attribute {name!r}")
