"""leaderboard.html fits a 1400 px wide window and names every column, in headless Chromium.

Two pages: a single run, and a comparison of three runs measured under different settings, made by a sweep (the
page then shows the `setting` column, the notes, the sweep's table and the pass@k table). For each: the document is no wider than the window, no
table is wider than the box that holds it (a table that scrolls sideways hides columns), every column of every
table has a non-empty header, and a screenshot of the whole page (saved under the test's temporary directory) is
a PNG 1400 px wide.

CI installs Debian's `chromium` (`.ci/run`); without it the test is skipped, saying so.
"""

from __future__ import annotations

import base64
import os
import struct
from pathlib import Path

import pytest

from harness.devtools import CHROMIUM, Browser
from harness.report import build_report, write_report
from tests.report_fixtures import SMOKE, config, write_run

WIDTH = 1400

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} not installed (CI installs Debian's chromium in .ci/run)"
)

# per table: its width, its container's inner width, the column count of its widest row and its header texts
TABLES = """Array.from(document.querySelectorAll('table')).map(t => ({
  id: t.id,
  width: t.getBoundingClientRect().width,
  container: t.parentElement.clientWidth,
  columns: Math.max(...Array.from(t.rows).map(r => Array.from(r.cells).reduce((n, c) => n + c.colSpan, 0))),
  headers: Array.from(t.tHead ? t.tHead.rows[0].cells : []).map(c => c.textContent.trim()),
}))"""


def _single(root: Path) -> tuple[list[Path], None]:
    outcomes = [(p, 1, 1, "correct", 1.0 + i / 4, 0.4) for i, p in enumerate(SMOKE[:4])]
    outcomes += [(SMOKE[4], 1, 1, "incorrect", None, None), (SMOKE[5], 1, 1, "compile_error", None, None)]
    return [write_run(root / "gpt-4o-triton-serial-h100", config("gpt-4o-triton-serial-h100", turns=1), outcomes)], None


def _comparison(root: Path) -> tuple[list[Path], list[dict[str, str]]]:
    """Three runs of a sweep that are not comparable (different presets and devices): the widest leaderboard the
    page makes."""
    strict = write_run(
        root / "claude-sonnet-4-5-20250929-best-of-n",
        config("claude-sonnet-4-5-20250929-best-of-n", samples=2, search="best_of_n", model="claude-sonnet-4-5"),
        [(p, s, 1, "correct" if s == 1 else "incorrect", 1.3, 0.5) for p in SMOKE for s in (1, 2)],
    )
    loose = write_run(
        root / "gpt-4o-2024-08-06-kernelbench-preset",
        config("gpt-4o-2024-08-06-kernelbench-preset", eval_overrides={"preset": "kernelbench", "precision": "torch_default",
                                                                     "seeding": "kernelbench"}),
        [(p, 1, 1, "correct", 2.5, 0.7) for p in SMOKE],
    )
    cpu = write_run(
        root / "local-qwen-cpu",
        config("local-qwen-cpu", limit=3, model="qwen2.5-coder-32b-instruct"),
        [(p, 1, 1, "correct", None, None) for p in SMOKE[:3]],
        timed=False,
        device="cpu (Triton interpreter)",
    )
    swept = [{"model": "claude-sonnet-4-5", "eval": "default", "eval.device": "cuda"},
             {"model": "gpt-4o-2024-08-06", "eval": "kernelbench", "eval.device": "cuda"},
             {"model": "qwen2.5-coder-32b-instruct", "eval": "default", "eval.device": "cpu"}]
    return [strict, loose, cpu], swept


@pytest.mark.parametrize("runs", [_single, _comparison], ids=["single-run", "comparison"])
def test_the_page_fits_1400_px_and_names_every_column(runs, tmp_path: Path) -> None:
    out = tmp_path / "report"
    run_dirs, sweep = runs(tmp_path / "runs")
    write_report(build_report(run_dirs, sweep=sweep), out)
    browser = Browser(tmp_path / "chromium-profile")
    try:
        browser.call("Page.enable")
        browser.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=1000, deviceScaleFactor=1,
                     mobile=False)
        browser.call("Page.navigate", url=(out / "leaderboard.html").as_uri())
        browser.wait_for("Page.loadEventFired")

        assert browser.js("window.innerWidth") == WIDTH
        page_width = browser.js("document.documentElement.scrollWidth")
        assert page_width <= WIDTH, f"the page is {page_width} px wide in a {WIDTH} px window"
        tables = browser.js(TABLES)
        assert {t["id"] for t in tables} >= {"leaderboard-table", "runs-table", "level-table", "turn-table"}
        assert ("sweep-table" in {t["id"] for t in tables}) == (sweep is not None)
        for t in tables:
            assert t["width"] <= t["container"], f"table {t['id']} is {t['width']} px wide in {t['container']} px"
            assert len(t["headers"]) == t["columns"] and all(t["headers"]), f"table {t['id']}: {t['headers']}"

        height = browser.js("document.documentElement.scrollHeight")
        whole = {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1}  # the window's width, the page's length
        shot = base64.b64decode(
            browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=whole)["data"]
        )
    finally:
        browser.close()
    path = tmp_path / "leaderboard.png"
    path.write_bytes(shot)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and shot[12:16] == b"IHDR", "not a PNG"
    width, png_height = struct.unpack(">II", shot[16:24])
    assert (width, png_height) == (WIDTH, height), (width, png_height)
