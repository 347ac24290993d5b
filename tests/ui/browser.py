"""A real headless Chromium (Debian's, at /usr/bin/chromium), driven over the DevTools
protocol with the websocket client the Kubernetes client already brings. Nothing is
downloaded: no Playwright, no Selenium, no driver binary."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import websocket

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,900",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


class Browser:
    def __init__(self) -> None:
        self._profile = Path(tempfile.mkdtemp(prefix="pgsched-chromium-"))
        self._process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self._process.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        page = next(item for item in targets if item["type"] == "page")
        self._socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self._next = 0
        self.call("Page.enable")
        self.call("Network.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})

    def _wait_for(self, event: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(self._socket.recv())
            if message.get("method") == event:
                return
        raise TimeoutError(event)

    def headers(self, headers: dict[str, str]) -> None:
        self.call("Network.setExtraHTTPHeaders", headers=headers)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self._wait_for("Page.loadEventFired")

    def submit(self, selector: str, value: str) -> None:
        """Type ``value`` into the input and submit its form, as a person would."""
        self.evaluate(
            f"(() => {{ const input = document.querySelector({json.dumps(selector)});"
            f" input.value = {json.dumps(value)}; input.form.requestSubmit(); }})()"
        )
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def text(self, selector: str = "body") -> str:
        return str(
            self.evaluate(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''")
        )

    def screenshot(self, path: Path) -> None:
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        with contextlib.suppress(AttributeError):  # closed before the socket was opened
            self._socket.close()
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        shutil.rmtree(self._profile, ignore_errors=True)
