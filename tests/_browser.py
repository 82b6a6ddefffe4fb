"""Headless Chromium over the DevTools protocol, shared by the browser tests (tests/test_report.py, tests/test_ui_form.py).

Debian's ``chromium`` driven through a websocket (the ``websockets`` package, also a Prefect dependency): no
driver and no downloaded browser. Not a test module (no ``test_`` prefix); loaded with :func:`load` below.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

#: What the report tests read from a rendered report page (tests/test_report.py, tests/test_report_pages.py): its
#: text, every figure (size, images loaded, legend entries with their colours, reading, sentence, tables, body),
#: the figure grid's width, the action cards, the timings table and the run header.
READ_REPORT_JS = """JSON.stringify({
  text: document.body.innerText,
  figures: [...document.querySelectorAll('figure')].map(f => {
    const r = f.getBoundingClientRect();
    return {id: f.id, fact: f.classList.contains('fact'), w: r.width, h: r.height,
      imgs: [...f.querySelectorAll('img')].map(i => i.complete && i.naturalWidth > 0),
      legend: [...f.querySelectorAll('ul.legend li')].map(li => [li.innerText.trim(),
        getComputedStyle(li.querySelector('.swatch')).backgroundColor]),
      reading: f.querySelector('p.reading')?.innerText.trim() || '',
      sentence: f.querySelector('.sentence')?.innerText.trim() || '',
      tables: f.querySelectorAll('table').length,
      body: [...f.children].filter(c => c.tagName !== 'FIGCAPTION').map(c => c.innerText.trim()).join(' ')};
  }),
  grid: document.querySelector('#figures .grid').getBoundingClientRect().width,
  cards: [...document.querySelectorAll('.act')].map(a => ({id: a.id,
    body: [...a.children].filter(c => c.tagName !== 'H3').map(c => c.innerText.trim()).join(' ')})),
  timings: document.getElementById('timings-table')?.innerText || '',
  header: document.getElementById('run-header').innerText,
})"""


def browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


class DevTools:
    """Headless Chromium driven over the DevTools protocol (a websocket; no driver, no downloaded browser)."""

    def __init__(self, browser: str, profile: Path, size: tuple[int, int]) -> None:
        self.log = (profile.parent / "chromium.log").open("w")
        self.proc = subprocess.Popen(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                f"--window-size={size[0]},{size[1]}",
                "about:blank",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 120
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"Chromium did not start: {(profile.parent / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as resp:
            pages = [t for t in json.loads(resp.read()) if t["type"] == "page"]
        from websockets.sync.client import connect

        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=60)
        self.n = 0
        self.events: list[dict] = []

    def call(self, method: str, **params: object) -> dict:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=120))
            if msg.get("id") == self.n:
                assert "error" not in msg, msg["error"]
                return msg["result"]
            self.events.append(msg)

    def wait_for(self, event: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            self.events.append(json.loads(self.ws.recv(timeout=max(deadline - time.monotonic(), 0.1))))

    def screenshot(self, path: Path, clip: dict | None = None) -> bytes:
        params: dict = {"format": "png", "captureBeyondViewport": True}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def evaluate(self, expression: str) -> object:
        """The value of a JavaScript expression in the page (``returnByValue``; a promise is awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout: float = 60) -> object:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not true after {timeout:.0f} s: {expression[:200]}")
            time.sleep(0.25)
