"""A real headless browser for tests: Debian's chromium, driven over the Chrome DevTools Protocol.

Why this way: the page must be checked as a browser renders it (its script run, its CSP enforced),
and CDP needs five commands here (open a tab, navigate, evaluate, screenshot, read the log), which
the small, well-kept `websockets` client carries in a few lines. Playwright and pyppeteer download
a browser build of their own, and Selenium needs chromedriver and its manager; chromium comes from
Debian (`make browser`, part of `make test`).

    with Chromium(workdir) as browser:
        tab = browser.open("http://127.0.0.1:9396/")
        tab.wait_for("document.querySelector('g.segment') !== null")
        png = tab.screenshot()
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Self

from websockets.sync.client import ClientConnection, connect

STEP_TIMEOUT = 30.0  # seconds for one CDP command, and the default for wait_for


class BrowserError(RuntimeError):
    pass


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Tab:
    """One page target, attached with a flat session on the browser's single connection."""

    def __init__(self, browser: Chromium, session: str):
        self._browser, self._session = browser, session
        self.log: list[dict[str, Any]] = []  # Log.entryAdded and console errors: CSP violations land here

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self._browser.send(method, params, session=self._session)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable results only)."""
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} threw: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = STEP_TIMEOUT, what: str = "") -> Any:
        """Poll until the expression is truthy; its value. Bounded: fails naming what it waited for."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise BrowserError(f"waited {timeout:.0f}s for {what or expression}; last value {value!r}")

    def screenshot(self, width: int = 0, height: int = 0) -> bytes:
        """PNG of the viewport, or of its top-left width × height."""
        clip = {"clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}} if width else {}
        return base64.b64decode(self.send("Page.captureScreenshot", format="png", **clip)["data"])


class Chromium:
    """chromium --headless with the DevTools endpoint on a free port, in its own profile dir."""

    def __init__(self, workdir: Path, binary: str | None = None):
        self.binary = binary or chromium_binary()
        if not self.binary:
            raise BrowserError("chromium not found (make browser installs it, as root with apt-get)")
        self.profile = workdir / "chromium-profile"
        self.stderr_path = workdir / "chromium.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._tabs: dict[str, Tab] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = STEP_TIMEOUT) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        argv = [
            self.binary,
            "--headless",
            "--remote-debugging-port=0",  # a free port, written to DevToolsActivePort in the profile
            "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={self.profile}",
            "--no-sandbox",  # tests run as root, where chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",  # offline: no update or safe-browsing fetches
            "--no-first-run",
            "--no-default-browser-check",
            "--window-size=1200,900",
            "about:blank",
        ]
        with self.stderr_path.open("wb") as err:
            # its own process group, so stop() can end the renderers it forks with it
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True
            )
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise BrowserError(f"chromium did not open its DevTools port:\n{self.stderr_tail()}")
            time.sleep(0.05)
        port, path = active.read_text().splitlines()[:2]
        self._ws = self._stack.enter_context(  # websockets' connections are context managers
            connect(f"ws://127.0.0.1:{port}{path}", max_size=64 * 1024 * 1024, open_timeout=timeout)
        )
        return self

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no chromium log)"

    def send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> dict[str, Any]:
        """One CDP command; events that arrive before its reply go to their tab's log."""
        if self._ws is None:
            raise BrowserError("the browser is not running")
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no reply to {method} in {STEP_TIMEOUT:.0f}s")
            reply = json.loads(self._ws.recv(timeout=left))
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result") or {}
            self._event(reply)

    def _event(self, message: dict[str, Any]) -> None:
        tab = self._tabs.get(message.get("sessionId") or "")
        if tab is None:
            return
        method, params = message.get("method"), message.get("params") or {}
        if method == "Log.entryAdded":
            tab.log.append(params.get("entry") or {})
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args") or [])
            tab.log.append({"level": "error", "source": "console", "text": text})
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails") or {}
            tab.log.append({"level": "error", "source": "exception", "text": str(details)[:500]})

    def open(self, url: str, width: int = 1200, height: int = 900) -> Tab:
        """A new tab at `url`, its log recording from the start; returns once the page has loaded."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = self._tabs[session] = Tab(self, session)
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            tab.send(domain)
        tab.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        reply = tab.send("Page.navigate", url=url)
        if reply.get("errorText"):
            raise BrowserError(f"navigating to {url}: {reply['errorText']}")
        tab.wait_for("document.readyState === 'complete'", what=f"{url} to load")
        return tab

    def stop(self) -> None:
        if self._ws is not None:
            # the browser may be gone already; its process group is ended below anyway
            with contextlib.suppress(Exception):
                self._ws.send(json.dumps({"id": next(self._ids), "method": "Browser.close"}))
            self._stack.close()
            self._ws = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)  # the group of the browser we started
            self._process.wait(5)
            self._process = None


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_png(data: bytes) -> bool:
    """A PNG: the signature, then an IHDR chunk with a non-zero width and height."""
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return False
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return width > 0 and height > 0
