"""`harness serve` as a child process (for the service's tests and `harness bench serve`): started, its address
read from its first line, its metrics parsed, stopped or `kill -9`ed by its own process group."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent.parent
START_TIMEOUT_S = 900.0  # a hang guard (a cold GPU host compiles the native loop first), not a performance claim


class ServerProcess:
    """`harness serve ARGS` in a new process group; `url` once it listens. No token: `--no-auth` on loopback."""

    def __init__(self, args: list[str], *, token: str | None = None, port: int = 0,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
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
        self.url = ""
        found = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + start_timeout_s
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
        with self.http(60) as c:
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
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(60)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
