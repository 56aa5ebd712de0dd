"""Content-addressed cache of evaluation results (and of baselines).

A key hashes everything that can change an outcome: problem source, candidate source,
backend, evaluator settings, device name and the torch/triton versions. Entries are JSON
files written atomically, so a killed process never leaves a torn entry.

Entries are authenticated: each file holds the value and an HMAC-SHA256 over its key and
value, under a random key that only the parent can read (`<root>/hmac.key`, created 0600 by
the parent; workers run as another user or see the filesystem read-only, see
`eval.process.sandbox`). An entry that is planted, edited, moved to another key or written without
the MAC is ignored, so it is evaluated again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_key(**parts: Any) -> str:
    """Stable SHA-256 of keyword parts (JSON with sorted keys)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


KEY_FILE = "hmac.key"


def _secret(root: Path) -> bytes:
    """The cache's MAC key: created once, 0600, by the first process that needs it (never by a worker).

    The key is written to a private temporary file and then linked into place, so a process that finds the
    key file (another actor starting at the same moment) always reads a whole key, never an empty file."""
    path = root / KEY_FILE
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".hmac-", suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            try:
                os.link(tmp, path)  # atomic and exclusive: of two racing processes, one key wins
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    key = bytes.fromhex(path.read_text().strip())
    if len(key) < 32:
        raise RuntimeError(f"{path} does not hold a usable key; remove it to start a fresh cache")
    return key


class JsonCache:
    """A directory of `<key>.json` entries under one namespace, each authenticated with the root's key."""

    def __init__(self, root: str | Path, namespace: str):
        self.dir = Path(root) / namespace
        self.dir.mkdir(parents=True, exist_ok=True)
        self._secret = _secret(Path(root))
        self.namespace = namespace

    def _mac(self, key: str, blob: str) -> str:
        return hmac.new(self._secret, f"{self.namespace}\0{key}\0{blob}".encode(), hashlib.sha256).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under `key`, or None when absent, torn, or not authenticated."""
        path = self.dir / f"{key}.json"
        try:
            entry = json.loads(path.read_text())
            blob, mac = entry["value"], entry["mac"]
            if not isinstance(blob, str) or not isinstance(mac, str):
                return None
            if not hmac.compare_digest(mac, self._mac(key, blob)):
                return None
            value = json.loads(blob)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        blob = json.dumps(value)
        fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"value": blob, "mac": self._mac(key, blob)}, f)
        os.replace(tmp, self.dir / f"{key}.json")
