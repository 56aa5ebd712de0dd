"""`harness run`: the Hydra app (see `harness.app`); receives its arguments untouched."""

from __future__ import annotations


def run(argv: list[str]) -> int:
    """Run `harness run ARGS...` and return its exit code."""
    from harness.app import main

    return main(argv)
