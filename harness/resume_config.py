"""The config of a resumed or extended run: the one it was recorded under, with only what the command line changes.

`harness run name=my-run turns=5` must not need the run's original overrides again: every key keeps its recorded
value unless this command line changed it. A key is changed when the command line sets it (`turns=5`, or under a
group it picks: `eval=fast` gives every `eval.*` key its value from `eval/fast.yaml`), or when its composed value
differs from the defaults' (what a group option sets elsewhere, such as `search=serial`'s `turns`, and values
interpolated from a changed key, such as `model=gpt-4o`'s `agent.model`). The run store then judges the result as
it judges any resume: only volatile keys may differ, or the run may grow (`harness.store`).
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.store import config_differences

LOCATION_KEYS = ("name", "runs_dir")  # they find the run: always the command line's
KIND_GROUPS = ("agent", "executor")  # groups whose options each have a schema of their own, named by their `kind`


def kind_overrides(stored: dict[str, Any]) -> list[str]:
    """The group choices (`agent=openai`) whose schemas hold the keys of a run recorded under `stored`."""
    return [f"{g}={stored[g]['kind']}" for g in KIND_GROUPS if isinstance(stored.get(g), dict) and stored[g].get("kind")]


def changed_keys(given: Iterable[str], composed: dict[str, Any], defaults: dict[str, Any]) -> set[str]:
    """The dotted keys (or prefixes) this command line changes: those it gives, and those whose composed value
    differs from the defaults'."""
    return {*given, *LOCATION_KEYS, *config_differences(defaults, composed)}


def resumed(stored: dict[str, Any], composed: dict[str, Any], changed: set[str], prefix: str = "") -> dict[str, Any]:
    """`stored`, with the keys under `changed` as `composed` has them. A key only `composed` has (one the schema
    gained since the run was recorded) is filled from it, except in a mapping of another `kind` (an agent or
    executor the command line did not pick: its keys are not the run's); one only `stored` has stays, for the store
    to report."""
    out: dict[str, Any] = {}
    for key in [*composed, *(k for k in stored if k not in composed)]:
        path = f"{prefix}{key}"
        both_maps = isinstance(stored.get(key), dict) and isinstance(composed.get(key), dict)
        if _under(path, changed) or (not both_maps and _above(path, changed)):
            if key in composed:
                out[key] = composed[key]
        elif key not in stored or key not in composed:
            out[key] = composed[key] if key in composed else stored[key]
        elif both_maps and stored[key].get("kind") == composed[key].get("kind"):
            out[key] = resumed(stored[key], composed[key], changed, f"{path}.")
        else:
            out[key] = stored[key]
    return out


def _under(path: str, keys: set[str]) -> bool:
    """Whether `path` is one of `keys` or lies under one."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in keys for i in range(1, len(parts) + 1))


def _above(path: str, keys: set[str]) -> bool:
    """Whether one of `keys` lies under `path` (`agent.pricing.input` under `agent.pricing`)."""
    return any(k.startswith(f"{path}.") for k in keys)
