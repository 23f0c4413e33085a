#!/usr/bin/env python3
"""Screenshots of the page of a running `epm-run serve`, mid-conversation: headless
Chromium through chromedriver (Debian's chromium and chromium-driver), loopback only.

    python3 tools/page_screenshot.py --url http://127.0.0.1:8080/ --message "..." \
        --at 20 --at 60 --out validate/page-w1-4g   [--key KEY] [--width 1400 --height 1100]

Sends the message from the page, then saves `<out>-<seconds>s.png` at each --at (seconds
after sending) and `<out>-done.png` when the reply is complete (bounded by --timeout).
"""
import argparse, base64, json, socket, subprocess, tempfile, time, urllib.request


def call(base, method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["value"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--message", required=True)
    ap.add_argument("--key")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--at", type=float, action="append", default=[])
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=1100)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    profile = tempfile.mkdtemp(prefix="epm-chromium-")
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/status", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--window-size={a.width},{a.height}", f"--user-data-dir={profile}"]
        sid = call(base, "POST", "/session", {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                   "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}}}})["sessionId"]
        js = lambda script, *args: call(base, "POST", f"/session/{sid}/execute/sync", {"script": script, "args": list(args)})
        call(base, "POST", f"/session/{sid}/url", {"url": a.url})
        if a.key:
            js("localStorage.setItem('epm.key', JSON.stringify(arguments[0]));", a.key)
            call(base, "POST", f"/session/{sid}/url", {"url": a.url})
        time.sleep(2)
        js("document.getElementById('maxtok').value = String(arguments[1]); document.getElementById('temp').value = '0';"
           "document.getElementById('input').value = arguments[0]; document.getElementById('send').click();",
           a.message, a.max_tokens)
        t0 = time.time()

        def shot(tag):
            png = base64.b64decode(call(base, "GET", f"/session/{sid}/screenshot"))
            path = f"{a.out}-{tag}.png"
            open(path, "wb").write(png)
            print("wrote", path, flush=True)

        for at in sorted(a.at):
            time.sleep(max(0, t0 + at - time.time()))
            shot(f"{int(at)}s")
        while time.time() < t0 + a.timeout:
            if js("return document.body.dataset.busy;") == "0":
                break
            time.sleep(1)
        time.sleep(1)
        shot("done")
        call(base, "DELETE", f"/session/{sid}")
    finally:
        driver.terminate()
        subprocess.run(["rm", "-rf", profile])


if __name__ == "__main__":
    main()
