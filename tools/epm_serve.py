"""Start `epm-run serve` for a script: shared by the soak, the agent session and the
openai client check."""
import http.client, os, re, subprocess, tempfile, time


def start(cmd, timeout_s=600):
    """Run `cmd` (an `epm-run serve ... --port 0` command line, possibly wrapped) and return
    `(proc, port)` once `/health` answers 200. The server's log goes to a temporary file,
    `proc.log_path` (a pipe nobody reads would fill up and stall the server). Stops the
    server and exits if it dies or is not ready within `timeout_s` seconds."""
    fd, log_path = tempfile.mkstemp(prefix="epm-serve-", suffix=".log")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fd)
    os.close(fd)
    proc.log_path = log_path
    deadline = time.time() + timeout_s
    port = None
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited (code {proc.returncode}); its log: {log_path}")
        if port is None:
            with open(log_path) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            port = int(m.group(1)) if m else None
        if port is not None:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return proc, port
            except OSError:
                pass
        time.sleep(0.1)
    proc.terminate()
    raise SystemExit(f"the server was not ready within {timeout_s} s; its log: {log_path}")
