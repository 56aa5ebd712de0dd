"""leaderboard.html in a real browser: headless Chromium driven over the DevTools protocol.

The page is opened from a file (no server), with background networking off. The test checks
that the leaderboard rows, the plots and a transcript render, that a reply carrying `<script>`
and an `onerror` image is shown as text and never runs, that clicking a heatmap cell opens that
transcript, and that the console stays free of errors (CSP violations included); it saves a
screenshot under the test's temporary directory.

CI installs Debian's `chromium` (`.ci/run`); without it the test is skipped, saying so.
The DevTools client is `harness.devtools` (a minimal WebSocket client on the standard library).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from harness.devtools import CHROMIUM, Browser
from harness.report import build_report, write_report
from tests.report_fixtures import SMOKE, config, write_run

# Transcripts load when a problem is opened (a script beside the page): wait until the view shows its turns.
SHOWN = ("(async () => { for (let i = 0; i < 500 && !document.querySelector('#tx-view article.turn'); i++)"
         " await new Promise(r => setTimeout(r, 10)); })()")
EVIL = 'Look: <script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> & done'

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} not installed (CI installs Debian's chromium in .ci/run)"
)


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
        browser.js(SHOWN)
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
        browser.js(SHOWN)
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
