"""`harness run`: the Hydra app (see `harness.app`); receives its arguments untouched."""

from __future__ import annotations


def run(argv: list[str]) -> int:
    """Run `harness run ARGS...` and return its exit code. Stop signals are held through start-up (imports,
    config, evaluator) and acted on once it is done (`harness.signals.hold`); a second one quits at once."""
    from harness import signals
    from harness.cli import EXIT_RUN_STOPPED

    signals.hold(quit_code=EXIT_RUN_STOPPED)
    try:
        from harness.app import main

        return main(argv)
    finally:
        signals.release()
