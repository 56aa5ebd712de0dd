"""A real `harness serve` in a subprocess on loopback, for the service's tests (no mocks)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 300  # a hang guard on a busy machine, not a performance claim


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_overrides(tmp: Path, workers: int = 2, cache: bool = True) -> list[str]:
    """A CPU server's settings: its own runs and cache folders, short limits."""
    return [f"runs_dir={tmp / 'runs'}", "eval.device=cpu", f"eval.workers_per_gpu={workers}",
            f"eval.cache_dir={tmp / 'cache'}" if cache else "eval.cache_dir=null",
            "eval.import_timeout_s=60", "eval.call_timeout_s=20"]


class Server:
    """`harness serve ARGS` as a child process; `url` once it listens. Stopped by its own pid."""

    def __init__(self, args: list[str], *, token: str | None = None, port: int = 0) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("HARNESS_SERVE_TOKEN", None)
        if token is not None:
            env["HARNESS_SERVE_TOKEN"] = token
        self.token = token
        cmd = [sys.executable, "-m", "harness.cli", "serve", "--port", str(port), *args]
        if token is None:
            cmd.append("--no-auth")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.output: list[str] = []
        found = threading.Event()
        self.url = ""

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not found.wait(0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("harness serve did not start:\n" + "".join(self.output[-50:]))

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def http(self, timeout: float = 600) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)

    def metrics(self) -> dict[str, float]:
        """`/metrics` as {name{labels}: value}."""
        with self.http(30) as c:
            text = c.get("/metrics").text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def kill9(self) -> None:
        """`kill -9` of the server's process group (the server and its evaluator workers)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def reply(code: str) -> str:
    """A model's reply around the code, as `harness run` would get it."""
    return f"Here is my kernel.\n\n```python\n{code}\n```\nIt fuses the two ops."
