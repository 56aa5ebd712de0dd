"""The build record: what the build worker's `load_inline` calls built, kept in the candidate's build folder.

The one format both sides read (the crossing): the build worker writes it (`eval.worker.prebuilt`), the evaluating
worker loads what it names, and the parent reads which calls were still building when a build's time ran out
(`eval.builds`). It is written by candidate code's process, so it is trusted only as far as the candidate is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD = "kh_builds.json"


def read_record(folder: Path) -> dict[str, dict[str, Any]]:
    """The build's record in `folder`: fingerprint -> {"name", "library", "failed" or "building"}; empty if none or
    unreadable."""
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    return {k: v for k, v in record.items() if isinstance(k, str) and isinstance(v, dict)}


def write_record(folder: Path, record: dict[str, dict[str, Any]]) -> None:
    """Replace the record whole (a build worker killed at its deadline, mid-write, leaves the last whole one)."""
    partial = folder / f"{RECORD}.partial"
    try:
        partial.write_text(json.dumps(record, indent=1))
        partial.replace(folder / RECORD)
    except OSError:
        pass  # no record: the evaluating worker builds the call itself (slower, same verdict)
