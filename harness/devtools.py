"""Headless Chromium driven over the DevTools protocol, with a minimal WebSocket client on the standard library
(no extra package). Used by the report's browser test and by `harness bench store` to load pages."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
    "--remote-debugging-port=0",
]


class DevToolsError(RuntimeError):
    """The browser or its DevTools connection failed, or an expression raised in the page."""


class _WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: masked text frames out, frames in."""

    def __init__(self, url: str, timeout: float) -> None:
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        if not m:
            raise DevToolsError(f"not a DevTools WebSocket address: {url}")
        self.sock = socket.create_connection((m[1], int(m[2])), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {m[3]} HTTP/1.1\r\nHost: {m[1]}:{m[2]}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise DevToolsError("connection closed during the WebSocket handshake")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            raise DevToolsError(f"no WebSocket upgrade: {head[:200]!r}")

    def send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        header = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + struct.pack(">H", n)
            if n < 65536
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        )
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise DevToolsError("DevTools connection closed")
            buf += chunk
        return buf

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping: answer, keep reading
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode == 0x8:
                raise DevToolsError("DevTools closed the connection")
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode()


class Browser:
    """Headless Chromium with one page; `call` sends a DevTools command and returns its result."""

    def __init__(self, profile: Path, timeout: float = 300.0) -> None:
        """`timeout` bounds the browser's start and each wait for its answer: it only catches a browser that hangs,
        so it is minutes (Chromium on a loaded 2-core machine takes well over 30 s to start or to render)."""
        self.timeout = timeout
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "DevToolsActivePort").unlink(missing_ok=True)  # only the port of this browser counts
        self.log = profile / "chromium.log"  # a file, not a pipe: a full pipe would stall the browser
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        try:
            port = self._port(profile / "DevToolsActivePort")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
                page = next(t for t in json.load(r) if t["type"] == "page")
            self.ws = _WebSocket(page["webSocketDebuggerUrl"], timeout)
        except BaseException:
            self.close()  # never leave a browser behind
            raise
        self.events: list[dict[str, Any]] = []
        self._id = 0

    def _port(self, active_port: Path) -> int:
        """The DevTools port, from the file Chromium writes once its server listens."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if active_port.exists() and (first := active_port.read_text().split("\n")[0]).isdigit():
                return int(first)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise DevToolsError(f"chromium did not start its DevTools server; its log:\n{self.log.read_text()[-3000:]}")

    def _receive(self, waiting_for: str) -> dict[str, Any]:
        try:
            return json.loads(self.ws.recv())
        except TimeoutError:
            raise DevToolsError(f"chromium hung: no {waiting_for} within {self.timeout:g} s") from None

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        my_id = self._id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = self._receive(f"answer to {method}")
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise DevToolsError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str) -> dict[str, Any]:
        while True:
            for e in self.events:
                if e.get("method") == event:
                    self.events.remove(e)
                    return e
            self.events.append(self._receive(f"{event} event"))

    def js(self, expression: str) -> Any:
        """Evaluate in the page; return the value (an exception in the page raises `DevToolsError`)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise DevToolsError(str(r["exceptionDetails"]))
        return r["result"].get("value")

    def console_errors(self) -> list[str]:
        """Exceptions, console.error/assert calls and error log entries seen so far."""
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def close(self) -> None:
        """End the browser's process group (started in a session of its own)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=10)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue
        self.proc.wait()
