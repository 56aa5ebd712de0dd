"""Hydra configs of `harness run` (a package so Hydra finds them as `pkg://harness.conf`).

Every key's type and default lives in a Python schema, registered here with Hydra's ConfigStore
(outside every group, so `--help` never lists a schema as an option): the root (`schema.RunConfig`),
each agent kind (`agents.settings`), each executor (`harness.executor_settings`) and the evaluator
(`eval.config.EvalConfig`). Each YAML file starts from its schema and holds only what differs.
"""

from hydra.core.config_store import ConfigStore

from agents import SETTINGS
from eval import EvalConfig
from harness.conf.schema import RunConfig
from harness.executor_settings import EXECUTORS

_store = ConfigStore.instance()
_store.store(name="run_schema", node=RunConfig)
_store.store(name="eval_schema", node=EvalConfig)
for _kind, _settings in SETTINGS.items():
    _store.store(name=f"agent_{_kind}_schema", node=_settings)
for _kind, _settings in EXECUTORS.items():
    _store.store(name=f"executor_{_kind}_schema", node=_settings)
