"""Helpers of the service's tests: a real `harness serve` subprocess on loopback (no mocks), CPU settings."""

from __future__ import annotations

import socket
from pathlib import Path

from harness.serve.process import ServerProcess

Server = ServerProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_overrides(tmp: Path, workers: int = 2, cache: bool = True) -> list[str]:
    """A CPU server's settings: its own runs and cache folders, short limits."""
    return [f"runs_dir={tmp / 'runs'}", "eval.device=cpu", f"eval.workers_per_gpu={workers}",
            f"eval.cache_dir={tmp / 'cache'}" if cache else "eval.cache_dir=null",
            "eval.import_timeout_s=60", "eval.call_timeout_s=20"]


def reply(code: str) -> str:
    """A model's reply around the code, as `harness run` would get it."""
    return f"Here is my kernel.\n\n```python\n{code}\n```\nIt fuses the two ops."
