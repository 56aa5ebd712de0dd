"""Hydra configs of `harness run` (a package so Hydra finds them as `pkg://harness.conf`)."""
