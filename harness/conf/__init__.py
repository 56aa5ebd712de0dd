"""Hydra configs of `harness run` (a package so Hydra finds them as `pkg://harness.conf`).

The `eval` group's schema is `eval.config.EvalConfig` itself, registered here, so its defaults
live in one place and `eval/*.yaml` hold only what differs from them.
"""

from hydra.core.config_store import ConfigStore

from eval.config import EvalConfig

ConfigStore.instance().store(group="eval", name="schema", node=EvalConfig)
