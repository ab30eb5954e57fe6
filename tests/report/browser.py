"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
NUL-separated JSON on fds 3 and 4): no port, no websocket library. Collects every console
message, uncaught exception and log entry of the page, evaluates expressions, takes screenshots.

Chromium is started as the closed CI network needs it: headless, no sandbox (root in CI), no
GPU, no QUIC, no first-run, background networking, component updates and sync off, a new empty
profile."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="kaudit-chromium-")
        r3, w3 = os.pipe()    # our commands -> chromium's fd 3
        r4, w4 = os.pipe()    # chromium's fd 4 -> our replies and events

        def fds():
            os.dup2(r3, 3)
            os.dup2(w4, 4)

        self.proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(r3)
        os.close(w4)
        self.w = os.fdopen(w3, "wb", buffering=0)
        self.r = os.fdopen(r4, "rb", buffering=0)
        self.buf = b""
        self.n = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = self.r.read(1 << 16)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self.w.write(json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load")
            self.events.append(self._read())

    def evaluate(self, expression: str):
        r = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.evaluate(expression)
            if v:
                return v
            time.sleep(0.1)
        raise TimeoutError(expression)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (network failures too)."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e.get("method") == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, path: str) -> None:
        h = self.evaluate("document.documentElement.scrollHeight")
        data = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": 1280, "height": min(int(h or 900), 8000), "scale": 1})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (EOFError, OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.w, self.r):
            try:
                f.close()
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)
