"""leaderboard.html in a real browser: headless Chromium driven over the DevTools protocol.

The page is opened from a file (no server), with background networking off. The test checks
that the leaderboard rows, the plots and a transcript render, that a reply carrying `<script>`
and an `onerror` image is shown as text and never runs, that clicking a heatmap cell opens that
transcript, and that the console stays free of errors (CSP violations included); it saves a
screenshot under the test's temporary directory.

CI installs Debian's `chromium` (`.ci/run`); without it the test is skipped, saying so.
The DevTools client is a minimal WebSocket client on the standard library (no extra package).
"""

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

import pytest

from harness.report import build_report, write_report
from tests.report_fixtures import SMOKE, config, write_run

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
EVIL = 'Look: <script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> & done'

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} not installed (CI installs Debian's chromium in .ci/run)"
)


# ------------------------------------------------------------------------------ DevTools client
class _WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: masked text frames out, frames in."""

    def __init__(self, url: str, timeout: float) -> None:
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        assert m, url
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
            assert chunk, "connection closed during the WebSocket handshake"
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head

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
            assert chunk, "DevTools connection closed"
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
            assert opcode != 0x8, "DevTools closed the connection"
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode()


class Browser:
    """Headless Chromium with one page; `call` sends a DevTools command and returns its result."""

    def __init__(self, profile: Path, timeout: float = 30.0) -> None:
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
        raise AssertionError(f"chromium did not start its DevTools server; its log:\n{self.log.read_text()[-3000:]}")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        my_id = self._id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str) -> dict[str, Any]:
        while True:
            for e in self.events:
                if e.get("method") == event:
                    self.events.remove(e)
                    return e
            self.events.append(json.loads(self.ws.recv()))

    def js(self, expression: str) -> Any:
        """Evaluate in the page; return the value (exceptions fail the test)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
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
        """End the browser's process group (this test started it in a session of its own)."""
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


# -------------------------------------------------------------------------------------- test
@pytest.fixture
def page(tmp_path: Path) -> Path:
    """A two-run report: a GPU-like serial run and a CPU run whose replies try to inject markup."""
    gpu = write_run(
        tmp_path / "runs" / "gpu-serial",
        config("gpu-serial", turns=2, search="serial"),
        [
            (SMOKE[0], 1, 1, "compile_error", None, None),
            (SMOKE[0], 1, 2, "correct", 1.8, 0.6),
            (SMOKE[1], 1, 1, "correct", 0.7, 0.3),
            (SMOKE[2], 1, 1, "incorrect", None, None),
        ],
    )
    cpu = write_run(
        tmp_path / "runs" / "cpu-evil",
        config("cpu-evil", limit=2),
        [
            (SMOKE[0], 1, 1, "correct", None, None),
            (SMOKE[1], 1, 1, "runtime_error", None, None),
        ],
        reply=EVIL,
        timed=False,
        device="cpu (Triton interpreter)",
    )
    out = tmp_path / "report"
    write_report(build_report([gpu, cpu]), out)
    return out / "leaderboard.html"


def test_leaderboard_page_renders_without_console_errors(page: Path, tmp_path: Path) -> None:
    browser = Browser(tmp_path / "chromium-profile")
    try:
        for domain in ("Runtime", "Log", "Page"):
            browser.call(f"{domain}.enable")
        browser.call("Page.navigate", url=page.as_uri())
        browser.wait_for("Page.loadEventFired")

        rows = browser.js(
            "Array.from(document.querySelectorAll('#leaderboard-table tbody tr')).map(r => r.cells[0].textContent)"
        )
        assert rows == ["gpu-serial", "cpu-evil"]
        assert browser.js(
            "document.querySelector('#leaderboard-table tbody tr:nth-child(2)').textContent.includes('n/t')"
        )
        plot = browser.js(
            "(() => { const s = document.querySelector('#plot-fastp svg.plot');"
            " const r = s.getBoundingClientRect();"
            " return [r.width, r.height, s.querySelectorAll('polyline').length]; })()"
        )
        assert plot[0] > 300 and plot[1] > 200 and plot[2] == 2
        assert browser.js("document.querySelectorAll('#plot-heatmap g.cell[data-run]').length") == 5

        # the first run's first problem is shown on load: two turns, the second correct with its code
        turns = browser.js(
            "Array.from(document.querySelectorAll('#tx-view article.turn'))"
            ".map(a => [a.querySelector('.badge').textContent, a.querySelector('pre.code').textContent])"
        )
        assert turns == [["compile_error", "# kernel 1\n"], ["correct", "# kernel 2\n"]]
        assert (
            browser.js("getComputedStyle(document.querySelector('#tx-view .badge.st-correct')).backgroundColor")
            == "rgb(46, 125, 50)"
        )

        # a heatmap click opens that run's transcript; the hostile reply is text, and nothing ran
        browser.js(
            "document.querySelector('#plot-heatmap g.cell[data-run=\"1\"]')"
            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))"
        )
        assert browser.js("document.getElementById('tx-run').value") == "1"
        assert browser.js("document.querySelector('#tx-view pre.reply').textContent") == EVIL
        assert browser.js("document.querySelectorAll('#tx-view img, #tx-view script').length") == 0
        assert browser.js("typeof window.__pwned") == "undefined"

        # switching the by-turn plot to another metric shows that variant only
        browser.js(
            "const s = document.querySelector('select[data-group=\"turns\"]'); s.value = 'correct';"
            "s.dispatchEvent(new Event('change'))"
        )
        shown = browser.js(
            "Array.from(document.querySelectorAll('.variant[data-group=\"turns\"]'))"
            ".filter(v => !v.hidden).map(v => v.dataset.key)"
        )
        assert shown == ["correct"]

        # a click on a column header sorts the leaderboard by it (correct: 0.50 for cpu-evil, 0.33 for gpu-serial)
        browser.js(
            "Array.from(document.querySelectorAll('#leaderboard-table th')).find(th => th.textContent === 'correct')"
            ".click()"
        )
        order = browser.js(
            "Array.from(document.querySelectorAll('#leaderboard-table tbody tr')).map(r => r.cells[0].textContent)"
        )
        assert order == ["cpu-evil", "gpu-serial"]

        shot = base64.b64decode(
            browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        )
        (tmp_path / "leaderboard.png").write_bytes(shot)
        assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
        browser.js("new Promise(r => setTimeout(r, 200))")  # let late console messages arrive
        assert browser.console_errors() == []
    finally:
        browser.close()


def test_a_console_error_is_caught(tmp_path: Path) -> None:
    """The console check itself works: a page whose script throws is reported."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><title>x</title><script>undefinedFunction()</script>")
    browser = Browser(tmp_path / "chromium-profile")
    try:
        browser.call("Runtime.enable")
        browser.call("Log.enable")
        browser.call("Page.enable")
        browser.call("Page.navigate", url=bad.as_uri())
        browser.wait_for("Page.loadEventFired")
        browser.js("new Promise(r => setTimeout(r, 100))")
        errors = browser.console_errors()
        assert errors and "undefinedFunction" in errors[0]
    finally:
        browser.close()
