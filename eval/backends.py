"""The languages a candidate may be written in. The first is the default wherever a backend is not named.

A module of its own (no imports) so that prompts, clients and the run loop share it without loading the evaluator.
"""

from __future__ import annotations

BACKENDS: tuple[str, ...] = ("triton", "cuda", "gluon", "helion")  # backends: gluon, helion (issue 56)
DEFAULT_BACKEND = BACKENDS[0]
# backends: gluon, helion (issue 56). Languages that compile to Triton kernels: a candidate of one of them must launch
# kernels of that language (docs/backends.md), and Gluon's never run under Triton's interpreter (a CPU skips them).
TRITON_DIALECTS: tuple[str, ...] = ("gluon", "helion")
NEEDS_GPU: tuple[str, ...] = ("cuda", "gluon")


def backend_error(backend: object) -> str:
    """Why `backend` is not one (a line listing the valid ones), or "" when it is one of `BACKENDS`: the one check
    of a backend, which configs, prompts, the run loop and the service each raise as their own error."""
    return "" if backend in BACKENDS else f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}"


def check_backend(backend: str) -> str:
    """`backend` when it is one of `BACKENDS`; else a one-line `ValueError` listing them."""
    if why := backend_error(backend):
        raise ValueError(why)
    return backend
