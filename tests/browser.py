"""browser.py: headless Chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: no port, no npm), for the page's checks
(tests/html_check.py, tests/html_pool_check.py).

Browser(exe, profile, downloads) starts it; .open(path) loads a file,
.js(expr) evaluates (awaiting a promise), .mouse/.click/.key send real input
events, .problems() lists JavaScript errors and any request but the page's
own, .close() ends it.  find_browser() finds the executable, or None.
Tally() is a check function that prints ok or FAIL and counts them.
"""
import json
import os
import shutil
import subprocess
import time


class Tally:
    """check(ok, what, detail): "ok what", or "FAIL what" and the detail; counted"""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print("ok", what)
        else:
            self.failed += 1
            print("FAIL", what)
            if detail:
                print("  " + str(detail).replace("\n", "\n  "))


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    def __init__(self, exe, profile, downloads):
        cmd_r, self.cmd_w = os.pipe()   # we write commands, Chromium reads fd 3
        self.res_r, res_w = os.pipe()   # Chromium writes fd 4, we read
        # the child's ends away from 3 and 4, which the shell below fills
        cmd_r, res_w = self._high(cmd_r), self._high(res_w)

        # the shell puts the two pipes on the fds the protocol wants
        self.proc = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&%d 4>&%d %d<&- %d>&-' % (cmd_r, res_w, cmd_r, res_w),
             exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-default-apps", "--metrics-recording-only",
             "--hide-scrollbars", "--force-device-scale-factor=1", "about:blank"],
            pass_fds=(cmd_r, res_w), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(res_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        t = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": t, "flatten": True})["sessionId"]
        self.call("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads,
                                                  "eventsEnabled": True})
        for d in ("Page.enable", "Runtime.enable", "Network.enable", "Log.enable"):
            self.call(d, session=True)
        self.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 860,
                                                         "deviceScaleFactor": 1, "mobile": False},
                  session=True)

    @staticmethod
    def _high(fd):
        import fcntl
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 5)  # one digit: what sh takes
        os.close(fd)
        return high

    def _read(self, deadline):
        while b"\0" not in self.buf:
            if time.time() > deadline:
                raise TimeoutError("the browser did not answer")
            chunk = os.read(self.res_r, 1 << 20)
            if not chunk:
                raise EOFError("the browser went away")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=False, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._read(deadline))

    def js(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True}, session=True)
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expr[:80], r["exceptionDetails"]))
        return r["result"].get("value")

    def open(self, path):
        self.events = []
        self.call("Page.navigate", {"url": "file://" + path}, session=True)
        self.wait_event("Page.loadEventFired")

    def mouse(self, x, y):
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=True)
        # Chromium hands mouse moves to the page with its next frames
        self.js("new Promise(function (ok) { requestAnimationFrame(function () { "
                "requestAnimationFrame(function () { ok(true); }); }); })")

    def click(self, x, y):
        for t in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": t, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1}, session=True)

    def key(self, name):
        codes = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowDown": 40, "ArrowUp": 38, "Tab": 9}
        for t in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": t, "key": name, "code": name,
                                                 "windowsVirtualKeyCode": codes[name]}, session=True)

    def problems(self):
        """JavaScript errors, console errors and requests for anything but the page"""
        out = []
        for m in self.events:
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.exceptionThrown":
                out.append("exception: %s" % p["exceptionDetails"])
            elif meth == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append("console: %s" % p["entry"]["text"])
            elif meth == "Runtime.consoleAPICalled" and p["type"] == "error":
                out.append("console.error")
            elif meth == "Network.requestWillBeSent":
                url = p["request"]["url"]
                if not url.startswith("file://") or url.split("#")[0] != self.page_url:
                    out.append("request: " + url)
        return out

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
