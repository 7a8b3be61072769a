"""Headless Chromium (Debian's `chromium` package) driven over the DevTools protocol.

A test harness: it starts the browser with a private profile on a free debugging port, opens
one page, records every console error, uncaught exception and error log entry (a failed
resource load among them), keeps every HTTP response the page received (its URL, status and body:
`responses()`), evaluates expressions (awaiting promises), types into and clicks the page's
elements, and takes a full-page screenshot. The websocket client is aiohttp's, which corpusgraph
already depends on.

    with Chromium() as browser:
        page = browser.open("file:///.../index.html", width=1400)
        page.evaluate("window.reportRendered", await_promise=True)
        page.screenshot(path)
        page.errors  # [] when the page logged no error
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["find_chromium", "Chromium", "Page"]

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser executable: $CHROMIUM, else the first of the usual names on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return next((p for p in map(shutil.which, _CANDIDATES) if p), None)


class _Loop:
    """An asyncio loop in a thread, so tests call the protocol synchronously."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Page:
    """One page target's websocket: commands by id, events kept in order."""

    def __init__(self, loop: _Loop, ws_url: str, timeout: float):
        self._loop, self._timeout = loop, timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self.events: list[dict] = []
        self._loop.run(self._connect(ws_url), timeout)

    async def _connect(self, url: str) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(url, max_msg_size=0)
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self._ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self._pending:
                self._pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def _send(self, method: str, params: dict | None) -> dict:
        mid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[mid] = fut
        await self._ws.send_str(json.dumps({"id": mid, "method": method, "params": params or {}}))
        reply = await fut
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def send(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        return self._loop.run(self._send(method, params), timeout or self._timeout)

    def wait_event(self, method: str, timeout: float | None = None, since: int = 0) -> dict:
        deadline = time.monotonic() + (timeout or self._timeout)
        while time.monotonic() < deadline:
            for e in self.events[since:]:
                if e["method"] == method:
                    return e
            time.sleep(0.05)
        raise TimeoutError(f"no {method} event within {timeout or self._timeout} s")

    def evaluate(self, expression: str, await_promise: bool = False, timeout: float | None = None):
        res = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": await_promise,
                                             "returnByValue": True}, timeout)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:80]!r} threw: {res['exceptionDetails']}")
        return res["result"].get("value")

    def type(self, selector: str, text: str) -> None:
        """Set an input's value as a user typing it would, with the input event fired."""
        self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); "
                      f"e.value = {json.dumps(text)}; e.dispatchEvent(new Event('input', {{bubbles: true}})); }})()")

    def click(self, selector: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    def text(self, selector: str) -> str | None:
        return self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                             "return e ? e.textContent : null; })()")

    def responses(self) -> list[dict]:
        """Every response the page has finished loading: url, status, mime type and body (text)."""
        seen = {e["params"]["requestId"]: e["params"]["response"] for e in self.events
                if e["method"] == "Network.responseReceived"}
        out = []
        for e in self.events:
            if e["method"] != "Network.loadingFinished" or e["params"]["requestId"] not in seen:
                continue
            response = seen[e["params"]["requestId"]]
            try:
                got = self.send("Network.getResponseBody", {"requestId": e["params"]["requestId"]})
                body = base64.b64decode(got["body"]).decode("utf-8", "replace") if got.get("base64Encoded") \
                    else got["body"]
            except RuntimeError as exc:  # a body the browser did not keep (a redirect): say so
                body = f"<no body: {exc}>"
            out.append({"url": response["url"], "status": response["status"], "mime": response.get("mimeType"),
                        "body": body})
        return out

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries, as text."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description", "")))
                                                                  for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
        return out

    def screenshot(self, path: Path, width: int) -> Path:
        """The whole page, not just the viewport, as a PNG."""
        height = int(self.send("Page.getLayoutMetrics")["cssContentSize"]["height"])
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": width, "height": height,
                                                             "scale": 1}})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        async def _close():
            await self._ws.close()
            await self._session.close()
            self._reader.cancel()

        self._loop.run(_close(), 10)


class Chromium:
    """A headless browser process with its own profile folder; a context manager."""

    def __init__(self, executable: str | None = None, timeout: float = 60.0):
        self.executable = executable or find_chromium()
        if not self.executable:
            raise FileNotFoundError("no chromium on PATH: `make browser` installs Debian's chromium package")
        self.timeout = timeout

    def __enter__(self) -> "Chromium":
        self._profile = tempfile.mkdtemp(prefix="corpusgraph-chromium-")
        # --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start.
        self.proc = subprocess.Popen(
            [self.executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
             # No connections of the browser's own (updates, sync, field trials): a closed network
             # refuses them, and each refusal could end up in the page's log.
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--remote-debugging-port=0", f"--user-data-dir={self._profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while not (port_file.exists() and len(port_file.read_text().split()) >= 2):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: {self.proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise TimeoutError(f"chromium wrote no DevToolsActivePort within {self.timeout} s")
            time.sleep(0.05)
        self.port = int(port_file.read_text().split()[0])
        self._loop = _Loop()
        self._pages: list[Page] = []
        return self

    def _new_target(self) -> str:
        """A fresh tab (its own page, console and log); its websocket URL."""
        import urllib.request

        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)["webSocketDebuggerUrl"]

    def open(self, url: str, width: int = 1400, height: int = 900) -> Page:
        """Load url in a new tab, with console and log recording on, and wait for its load event."""
        page = Page(self._loop, self._new_target(), self.timeout)
        self._pages.append(page)
        for domain in ("Runtime", "Log", "Page", "Network"):
            page.send(f"{domain}.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        mark = len(page.events)
        page.send("Page.navigate", {"url": url})
        page.wait_event("Page.loadEventFired", since=mark)
        return page

    def __exit__(self, *exc) -> None:
        for page in getattr(self, "_pages", []):
            try:
                page.close()
            except Exception:  # the browser may already be gone; the process is ended below
                pass
        if hasattr(self, "_loop"):
            self._loop.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self._profile, ignore_errors=True)
