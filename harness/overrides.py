"""Checks command-line overrides of `harness run` before Hydra sees them, for clear messages.

Hydra reports an unknown key as "Key 'x' is not in struct" without saying what would have been
valid, and a value of the wrong type in several lines. Here each override is parsed, each group
choice is checked against the files of its group, each key against the composed config (the
message lists the valid choices) and each value against the key's type in the schemas
(`harness.conf`), in one line.
"""

from __future__ import annotations

import difflib
import itertools
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

import harness.conf  # noqa: F401  registers the config schemas with Hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ValidationError

CONF_DIR = Path(__file__).resolve().parent / "conf"
CONFIG_NAME = "config"
_MISSING = object()
_MAX_COMBINATIONS = 16


class OverrideError(ValueError):
    """An override that cannot work; the message says why and lists the valid choices."""


def groups() -> dict[str, list[str]]:
    """Config group name -> its options (the YAML files in `harness/conf/<group>/`)."""
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in sorted(CONF_DIR.iterdir())
        if d.is_dir() and not d.name.startswith(("_", "."))
    }


def parse(overrides: list[str]) -> list[Override]:
    """Hydra's own parse of the overrides; a syntax error becomes an `OverrideError`."""
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise OverrideError(f"cannot parse the overrides: {exc}") from None


def sweep_keys(overrides: list[str]) -> list[str]:
    """Keys or groups that a multirun sweeps over (`search=serial,parallel` -> `search`)."""
    return [o.key_or_group for o in parse(overrides) if o.is_sweep_override()]


def refuse_sweeps(overrides: list[str]) -> None:
    """Without -m a sweep cannot run; an unquoted comma is the usual cause, so say how to quote it."""
    for o in parse(overrides):
        if o.is_sweep_override():
            text = o.input_line or f"{o.key_or_group}=..."
            value = text.partition("=")[2]
            raise OverrideError(
                f"{text}: an unquoted comma makes a sweep, which needs -m. For one value that contains commas, "
                f"quote it: \"{o.key_or_group}='{value}'\" (so the shell keeps the inner quotes); to sweep, "
                f"run harness run -m ..."
            )


def values_of(overrides: list[str], key: str) -> list[str]:
    """Every value given to `key` (all of a sweep's values)."""
    return [v for o in parse(overrides) if o.key_or_group == key and not o.is_delete() for v in _values(o)]


def validate(overrides: list[str]) -> None:
    """Raise `OverrideError` for an unknown group, group option or config key."""
    parsed = [o for o in parse(overrides) if not o.key_or_group.startswith("hydra")]
    options = groups()
    group_choices: dict[str, list[str]] = {}
    for o in parsed:
        if o.key_or_group in options and not o.is_delete():
            values = _values(o)
            for v in values:
                if v not in options[o.key_or_group]:
                    raise OverrideError(
                        f"unknown {o.key_or_group} {v!r}; valid choices for {o.key_or_group}: "
                        f"{', '.join(options[o.key_or_group])}"
                    )
            group_choices[o.key_or_group] = values
    keys = [o for o in parsed if o.key_or_group not in options and not o.is_delete() and not o.is_add()
            and not o.is_force_add()]  # fmt: skip
    if not keys:
        return
    combos = list(itertools.product(*[[(g, v) for v in vs] for g, vs in group_choices.items()]))
    for combo in combos[:_MAX_COMBINATIONS]:
        cfg = _compose([f"{g}={v}" for g, v in combo])
        for o in keys:
            _check_key(cfg, o.key_or_group, options, dict(combo))
            for value in o.sweep_iterator() if o.is_sweep_override() else [o.value()]:
                _check_type(cfg, o.key_or_group, value)


def compose_config(overrides: list[str]) -> dict[str, Any]:
    """The resolved config `harness run` would get for these overrides (for commands that share it, such as
    `harness serve`); an unknown group, option or key raises `OverrideError` listing the valid ones."""
    validate(overrides)
    refuse_sweeps(overrides)
    try:
        return OmegaConf.to_container(_compose(overrides), resolve=True)  # type: ignore[return-value]
    except Exception as exc:  # noqa: BLE001  an interpolation or type error in a value: the user's to fix
        raise OverrideError(f"config: {exc}") from None


def _values(o: Override) -> list[str]:
    """The value of an override as text, or each value of a sweep."""
    if o.is_sweep_override():
        return [str(v) for v in o.sweep_string_iterator()]
    value = o.value()
    return ["null" if value is None else str(value)]


def _compose(group_overrides: list[str]) -> DictConfig:
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(CONFIG_NAME, overrides=group_overrides)
    except HydraException as exc:
        raise OverrideError(str(exc)) from None


def _check_type(cfg: DictConfig, key: str, value: Any) -> None:
    """Raise `OverrideError` when `value` does not fit the type the schema gives `key` (as Hydra would set it)."""
    trial = cfg.copy()
    try:
        OmegaConf.update(trial, key, value, merge=True)
    except ValidationError:
        shown = "null" if value is None else repr(value)
        raise OverrideError(f"{key} must be {expected_type(cfg, key)}, got {shown}") from None


def expected_type(cfg: DictConfig, key: str) -> str:
    """What the schema lets `key` hold, in words ("an integer or null")."""
    parent_key, _, last = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    node = parent._get_node(last)
    ref = node._metadata.ref_type
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if ref in words:
        what = words[ref]
    elif isinstance(node, ListConfig):
        what = "a list"
    else:
        what = f"a mapping of {getattr(ref, '__name__', 'keys')}'s keys" if isinstance(node, DictConfig) else "a value"
    return what + (" or null" if node._is_optional() else "")


def _check_key(cfg: DictConfig, key: str, options: dict[str, list[str]], combo: dict[str, str]) -> None:
    if OmegaConf.select(cfg, key, default=_MISSING, throw_on_resolution_failure=False) is not _MISSING:
        return
    parts = key.split(".")
    parent_path = ""
    node: Any = cfg
    for i, part in enumerate(parts):
        if isinstance(node, DictConfig) and part in node:
            node = node[part]
            parent_path = ".".join(parts[: i + 1])
        else:
            break
    where = f"under {parent_path!r}" if parent_path else "at the top level"
    if isinstance(node, DictConfig):
        valid = sorted(str(k) for k in node.keys())
        bad = parts[len(parent_path.split(".")) if parent_path else 0]
        close = difflib.get_close_matches(bad, valid + ([] if parent_path else list(options)), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        groups_note = f" Config groups: {', '.join(options)} (e.g. agent=openai)." if not parent_path else ""
        context = f" (with {', '.join(f'{g}={v}' for g, v in combo.items())})" if combo and parent_path else ""
        raise OverrideError(
            f"unknown config key {key!r}{context}; valid keys {where}: {', '.join(valid)}.{hint}{groups_note} "
            f"To add a new key on purpose, write +{key}=..."
        )
    raise OverrideError(f"cannot set {key!r}: {parent_path!r} is a value ({node!r}), not a group of keys")
