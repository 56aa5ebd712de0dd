"""Content-addressed cache of evaluation results (and of baselines).

A key hashes everything that can change an outcome: problem source, candidate source,
backend, evaluator settings, device name and the torch/triton versions. Entries are JSON
files written atomically, so a killed process never leaves a torn entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_key(**parts: Any) -> str:
    """Stable SHA-256 of keyword parts (JSON with sorted keys)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


class JsonCache:
    """A directory of `<key>.json` entries under one namespace."""

    def __init__(self, root: str | Path, namespace: str):
        self.dir = Path(root) / namespace
        self.dir.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> dict[str, Any] | None:
        path = self.dir / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        os.replace(tmp, self.dir / f"{key}.json")
