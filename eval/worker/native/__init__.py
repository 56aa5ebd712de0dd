"""The native timing loop: its C extension and the capture kernels it launches."""

from __future__ import annotations


def prepare_native(capability: tuple[int, int]) -> None:
    """Build the loop's extension and compile its capture kernels for `capability`, where the project is writable
    (the trusted parent, before any worker starts): confined workers see the project read-only and only load them."""
    from eval.worker.native import build, kernels

    build.ensure_built()
    kernels.cached_cubin(f"sm_{capability[0]}{capability[1]}")
