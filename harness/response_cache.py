"""Opt-in cache of agent responses, keyed by a hash of the request, so replayed runs are free.

The key covers what decides a reply: agent kind, model, sampling parameters, the messages and
the sample index. The sample index is part of the key on purpose: N parallel samples send the
same first prompt, and without it they would all get the first sample's reply.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from agents import AgentResponse, Message, Usage

# Agent config keys that do not change what the model answers (transport, limits, prices, secrets).
_NOT_IN_KEY = frozenset({"api_key_env", "timeout_s", "retry", "rate_limit", "pricing", "path", "cache"})


def request_key(agent_cfg: Mapping[str, Any], messages: list[Message], sample: int) -> str:
    """SHA-256 over the agent's answer-relevant settings, the conversation and the sample index."""
    params = {k: v for k, v in sorted(agent_cfg.items()) if k not in _NOT_IN_KEY}
    payload = {
        "agent": params,
        "messages": [[m.role, m.content] for m in messages],
        "sample": sample,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class ResponseCache:
    """A SQLite (WAL) table of request key -> response; safe to share between threads and runs."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            with self._conn:
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL, "
                    "created_at REAL NOT NULL)"
                )
        except sqlite3.DatabaseError as exc:
            raise RuntimeError(
                f"response cache {self.path} is unusable ({exc}); delete it or disable the cache"
            ) from None

    def get(self, key: str) -> AgentResponse | None:
        """The stored response for `key`, priced at zero (a hit costs nothing), or None."""
        with self._lock:
            row = self._conn.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        d = json.loads(row[0])
        return AgentResponse(
            text=d["text"],
            usage=Usage(**d["usage"]),
            cost_usd=0.0,
            latency_s=0.0,
            model=d["model"],
            raw_id=d.get("raw_id"),
            finish_reason=d.get("finish_reason"),
            attempts=0,
        )

    def put(self, key: str, response: AgentResponse) -> None:
        """Store a successful response (the first one stored for a key is kept)."""
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR IGNORE INTO responses (key, response, created_at) VALUES (?, ?, ?)",
                (key, json.dumps(response.to_dict()), time.time()),
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "ResponseCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
