"""The built HTML report as a reader sees it: Debian's chromium, headless, at 1400 x 1000.

`measure_landing(report, out_dir)` copies the report, appends a measuring script (the
report itself is not changed: the copy only gains a <script> after the report's own) that
waits for the landing page to render, measures the embedded summary and its tables, clicks
the first figure link, and writes what it found into the DOM; chromium's --dump-dom prints
it back. `screenshot(report, png)` saves what the window shows.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

WINDOW = (1400, 1000)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

MEASURE = """
<script>
(function () {
  function measure() {
    var summary = document.querySelector(".prose .lmsat");
    if (!summary) { return setTimeout(measure, 100); }
    var clipped = [];
    var tables = Array.from(summary.querySelectorAll("table")).map(function (table) {
      var rect = table.getBoundingClientRect();
      for (var node = table.parentElement; node && node !== document.body; node = node.parentElement) {
        var style = getComputedStyle(node);
        if (style.overflowX !== "visible" && node.scrollWidth > node.clientWidth + 1) {
          clipped.push({table: table.className, by: node.className, scroll: node.scrollWidth,
                        client: node.clientWidth});
        }
      }
      return {cls: table.className, left: rect.left, right: rect.right, width: rect.width};
    });
    var links = Array.from(summary.querySelectorAll("ul.figures a"));
    var result = {innerWidth: window.innerWidth, summaryWidth: summary.getBoundingClientRect().width,
                  tables: tables, clipped: clipped, links: links.map(function (a) { return a.textContent; })};
    if (links.length) {
      links[0].click();
      setTimeout(function () {
        var img = document.querySelector("img[src^='data:image/png']");
        result.shown = img ? img.getAttribute("src").length : 0;
        result.page = document.body.innerText.slice(0, 20000);
        done(result);
      }, 500);
    } else { done(result); }
  }
  function done(result) {
    var pre = document.createElement("pre");
    pre.id = "lmsat-measure";
    pre.textContent = JSON.stringify(result);
    document.body.appendChild(pre);
  }
  window.addEventListener("load", function () { setTimeout(measure, 200); });
})();
</script>
"""


def _chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}", *args],
            capture_output=True, text=True, timeout=timeout,
        )


def measure_landing(report: Path, out_dir: Path) -> dict:
    """What the landing page of `report` shows at WINDOW (see the module docstring)."""
    text = Path(report).read_text(encoding="utf-8")
    copy = Path(out_dir) / "measured_report.html"
    head, tail = text.rsplit("</body>", 1)
    copy.write_text(head + MEASURE + "</body>" + tail, encoding="utf-8")
    result = _chromium("--virtual-time-budget=20000", "--dump-dom", copy.resolve().as_uri())
    found = re.search(r'<pre id="lmsat-measure">(.*?)</pre>', result.stdout, re.S)
    if not found:
        raise AssertionError(f"no measurement in chromium's DOM: {result.stderr[-2000:]}")
    from html import unescape

    return json.loads(unescape(found.group(1)))


def screenshot(report: Path, png: Path) -> Path:
    result = _chromium("--virtual-time-budget=20000", f"--screenshot={png}", Path(report).resolve().as_uri())
    if not Path(png).exists():
        raise AssertionError(f"chromium wrote no screenshot: {result.stderr[-2000:]}")
    return Path(png)


def png_size(png: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = Path(png).read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", png
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
