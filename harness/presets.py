"""Evaluator presets outside a run: `harness/conf/eval/NAME.yaml` as an `EvalConfig`.

`harness run` composes a preset through Hydra (`eval=NAME`); tools that judge candidates under a
named preset without a run (`harness presets bench`, the tests of the presets) read it here, with
its `defaults` chain resolved the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from eval import EvalConfig

_CONF = Path(__file__).resolve().parent / "conf" / "eval"


def preset_config(name: str, **overrides: Any) -> EvalConfig:
    """The `EvalConfig` of `harness/conf/eval/NAME.yaml` (its `defaults` chain resolved), plus overrides."""
    values: dict[str, Any] = {}

    def merge(preset: str) -> None:
        path = _CONF / f"{preset}.yaml"
        if not path.exists():
            choices = ", ".join(sorted(p.stem for p in _CONF.glob("*.yaml")))
            raise ValueError(f"unknown evaluator preset {preset!r}; choices: {choices}")
        data = yaml.safe_load(path.read_text()) or {}
        for parent in data.pop("defaults", []) or []:
            if isinstance(parent, str) and parent != "_self_" and not parent.startswith("/"):  # not the schema
                merge(parent)
        values.update(data)

    merge(name)
    values.update(overrides)
    return EvalConfig(**values)
