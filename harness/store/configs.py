"""Which configs a stored run may resume or grow under: the settings that never change what an attempt means, the
keys added since runs were stored, and the refusal that says what differs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable

from eval import EvalConfig
from harness.store.errors import StoreError
from harness.store.schema import meta

# Settings a resumed run may change: they alter how the run proceeds, never what an attempt means.
# The report's comparison of runs ignores the `eval.` ones for the same reason.
VOLATILE_KEYS = (
    "name", "runs_dir", "quiet", "max_concurrency", "stop_grace_s", "budget", "response_cache",
    "agent.retry", "agent.rate_limit", "agent.timeout_s", "agent.api_key_env",
    "eval.parallel_compiles", "eval.kept_builds_gib", "eval.cache_dir", "eval.log_cap_bytes",
    "eval.share_reference_timing",  # one reference timing for several candidates: the same measurement, cheaper
    # profile (issue 57): hardware counters after the verdict, a diagnostic that changes no verdict or timing
    "eval.profile", "eval.profile_ncu", "eval.profile_timeout_s", "prompt.profile_chars",
)  # fmt: skip

# keys added after runs were stored, each with the value that was the behaviour before it (for `eval.*`, each
# setting's `unkeyed_at`): a stored config without one differs from a new one only where the new value is another
ADDED_KEYS: dict[str, Any] = {f"eval.{name}": value for name, value in EvalConfig.values_before_added().items()}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_differences(old: dict[str, Any], new: dict[str, Any], volatile: Iterable[str] = ()) -> list[str]:
    """Dotted keys whose values differ between two configs, ignoring keys under `volatile` prefixes (a key of
    `ADDED_KEYS` absent from either has its value from before it was added)."""
    prefixes = tuple(volatile)

    def ignored(key: str) -> bool:
        return any(key == p or key.startswith(p + ".") for p in prefixes)

    a, b = {**ADDED_KEYS, **_flatten(old)}, {**ADDED_KEYS, **_flatten(new)}
    return sorted(k for k in set(a) | set(b) if not ignored(k) and a.get(k, "<unset>") != b.get(k, "<unset>"))


# Config keys a finished run may grow along (`harness run` with more turns, samples or problems extends it).
GROWABLE_KEYS = ("turns", "samples", "problems.spec", "problems.limit")


def refuse_a_different_config(run_dir: Path, stored: dict[str, Any], new: dict[str, Any], diff: list[str],
                               conn: sqlite3.Connection, problem_ids: Iterable[str] | None) -> None:
    """Raise `StoreError` unless `new` merely extends the run recorded under `stored`."""
    why = _extension_refusal(stored, new, diff, conn, problem_ids)
    if why:
        raise StoreError(
            f"{run_dir} holds a run with a different config ({', '.join(diff[:8])}{', ...' if len(diff) > 8 else ''}"
            f" differ{why}). Resume it with the same settings, or start a new run with another name=."
        )


def _extension_refusal(stored: dict[str, Any], new: dict[str, Any], diff: list[str], conn: sqlite3.Connection,
                       problem_ids: Iterable[str] | None) -> str:
    """Why `new` does not merely extend the run recorded under `stored` ("" when it does)."""
    if not conn.execute("SELECT 1 FROM attempts LIMIT 1").fetchone():
        diff = [k for k in diff if not _fixes_the_agent(k)]
    if not set(diff) <= set(GROWABLE_KEYS):
        return ("; only turns, samples and the problem selection may change, and only grow; the agent's settings "
                "too while no attempt is recorded")
    for key in ("turns", "samples"):
        if isinstance(new.get(key), int) and isinstance(stored.get(key), int) and new[key] < stored[key]:
            return f"; {key} may grow, not shrink: {stored[key]} -> {new[key]}"
    if any(key.startswith("problems.") for key in diff):
        attempted = {row[0] for row in conn.execute("SELECT DISTINCT problem_id FROM attempts")}
        left_out = sorted(attempted - set(problem_ids or ()))
        if left_out:
            return f"; the new selection leaves out {len(left_out)} attempted problem(s), e.g. {left_out[0]}"
    return ""


def _fixes_the_agent(key: str) -> bool:
    """Whether `key` is one of the agent's settings other than its kind (`agent.model`, `agent.base_url`, `model.*`):
    a run that has recorded nothing yet may change them on resume, so that a model name or endpoint the provider
    refused (exit 6 or 5: "fix it and resume") is fixed in place; nothing recorded was made under the old value."""
    return key.startswith(("agent.", "model.")) and key != "agent.kind"


def recorded_config(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The run's recorded config; None when the database cannot be read (`open` reports it)."""
    try:
        return json.loads(meta(conn)["config"])
    except (sqlite3.Error, OSError, KeyError, ValueError):
        return None
