"""Hydra configs of `harness run` (a package so Hydra finds them as `pkg://harness.conf`).

The `eval` group's schema is `eval.config.EvalConfig` itself, registered here (outside every group, so `--help`
never lists it as an `eval=` option), so its defaults live in one place and `eval/*.yaml` hold only what differs.
"""

from hydra.core.config_store import ConfigStore

from eval.config import EvalConfig

ConfigStore.instance().store(name="eval_schema", node=EvalConfig)  # no group: never listed as an eval option
