"""Which runs can be compared: same device, library versions, evaluator settings and problems.

Runs that agree on all four share a setting letter (A, B, ...). When the report holds more than
one setting, the tables carry a `setting` column and a note lists exactly what differs, so that
numbers measured under different conditions are never mixed silently.

The evaluator settings compared are the run's resolved `eval` config, except keys that do not
change a verdict or a timing (the ones a resumed run may change, `harness.store.VOLATILE_KEYS`)
and `eval.device`, which is compared as the device the results actually came from.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from typing import Any, Sequence

from harness.report.load import RunData
from harness.report.metrics import RunMetrics
from harness.store import VOLATILE_KEYS

_IGNORED_EVAL_KEYS = tuple(k[len("eval.") :] for k in VOLATILE_KEYS if k.startswith("eval.")) + ("device",)


@dataclass
class Comparison:
    """Setting letters per run and what differs between the settings."""

    setting_of: dict[str, str]  # run name -> letter
    differences: list[str] = field(default_factory=list)  # one line per differing aspect

    @property
    def comparable(self) -> bool:
        return len(set(self.setting_of.values())) <= 1

    def to_dict(self) -> dict[str, Any]:
        return {"comparable": self.comparable, "setting_of": self.setting_of, "differences": self.differences}


def compare(runs: Sequence[RunData], metrics: Sequence[RunMetrics]) -> Comparison:
    """Group runs by (device, versions, evaluator settings, problems) and describe the differences."""
    keys = [_key(r, m) for r, m in zip(runs, metrics)]
    letters: dict[str, str] = {}
    setting_of = {}
    for m, key in zip(metrics, keys):
        token = json.dumps(key, sort_keys=True)
        if token not in letters:
            letters[token] = _letter(len(letters))
        setting_of[m.name] = letters[token]
    comparison = Comparison(setting_of=setting_of)
    if comparison.comparable:
        return comparison
    firsts: dict[str, dict[str, Any]] = {}
    for m, key in zip(metrics, keys):
        firsts.setdefault(setting_of[m.name], key)
    comparison.differences = _describe(firsts)
    return comparison


def _key(run: RunData, m: RunMetrics) -> dict[str, Any]:
    eval_cfg = {k: v for k, v in (run.config.get("eval") or {}).items() if k not in _IGNORED_EVAL_KEYS}
    return {
        "device": m.device,
        "versions": m.versions,
        "eval": eval_cfg,
        "problems": [p.id for p in run.problems],
    }


def _describe(settings: dict[str, dict[str, Any]]) -> list[str]:
    """Human-readable lines: for each aspect that differs, which settings have which value."""
    lines = []

    def line(what: str, values: dict[str, Any], show: Any = str) -> None:
        groups: dict[str, list[str]] = {}
        for letter, value in values.items():
            groups.setdefault(json.dumps(value, sort_keys=True), []).append(letter)
        if len(groups) > 1:
            parts = [f"{', '.join(ls)} = {show(values[ls[0]])}" for ls in groups.values()]
            lines.append(f"{what}: " + "; ".join(parts))

    line("device", {s: k["device"] for s, k in settings.items()})
    line("versions", {s: k["versions"] for s, k in settings.items()}, _versions)
    for key in sorted({k for setting in settings.values() for k in _flat_keys(setting["eval"])}):
        line(f"eval.{key}", {s: _lookup(k["eval"], key) for s, k in settings.items()}, json.dumps)
    problem_sets = {s: k["problems"] for s, k in settings.items()}
    common = set.intersection(*(set(v) for v in problem_sets.values()))
    before = len(lines)
    line("problems", problem_sets, lambda ids: f"{len(ids)} problems")
    if len(lines) > before:
        lines[-1] += f" ({len(common)} in all of them)"
    return lines


def _versions(versions: list[dict[str, str]]) -> str:
    if not versions:
        return "unknown"
    return " | ".join(", ".join(f"{k} {v}" for k, v in sorted(vs.items())) for vs in versions)


def _flat_keys(d: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out += _flat_keys(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}")
    return out


def _lookup(d: dict[str, Any], dotted: str) -> Any:
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return "<unset>"
        node = node[part]
    return node


def _letter(i: int) -> str:
    letters = string.ascii_uppercase
    return letters[i] if i < len(letters) else f"{letters[i // len(letters) - 1]}{letters[i % len(letters)]}"
