"""What EPM's benchmark and validation scripts share, written once.

- `machine()`: the machine record every report carries.
- `run(cmd)`: run a command, echoed to stderr, failing the script on a non-zero exit.
- `Cgroup(limit)`: a cgroup v1 memory cap (anonymous memory plus page cache), removed on close;
  `Cgroup.available()` says whether the controller is writable here.
- `drop_cache(path)`, `cached_bytes(path)`: the cold-cache drop and the page-cache check.
- `stats_decode(s)`, `stats_total_misses(s)`, `ab_row_ok(row)`: reading stats snapshots
  (schema 2, and schema 1 of older reports) and `epm-run ab` rows.
- `start_server(cmd)`: start `epm-run serve ... --port 0` and wait, bounded, until it answers;
  `request_json(port, method, path, body)`: one JSON request to it, `(status, JSON)`;
  `sse_json(resp)`: the events of a streamed response as they arrive.
- `read_trace(path)`: the one Python reader of routing traces (format in the README,
  "Routing trace"); prefer `epm-run sim` for replays.
"""
import atexit
import http.client
import json
import mmap
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"


def machine():
    """CPU, cores, memory and kernel of this machine, and the order of the free blocks its
    kernel reports to a hypervisor (None without free page reporting); the record
    epm_sys::proc::Machine gives the Rust reports."""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal"))
    try:
        with open("/sys/module/page_reporting/parameters/page_reporting_order") as f:
            reporting = int(f.read().strip())
    except (OSError, ValueError):
        reporting = None
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_total_bytes": mem, "kernel": platform.release(),
            "free_page_reporting_order": reporting}


def run(cmd, check=True, **kw):
    """Run `cmd` (echoed to stderr); a failure ends the script with its stderr when captured."""
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, **kw)
    if check and p.returncode != 0:
        err = p.stderr if isinstance(p.stderr, str) else (p.stderr or b"").decode(errors="replace")
        sys.exit(f"failed ({p.returncode}): {' '.join(str(c) for c in cmd)}\n{err}")
    return p


class Cgroup:
    """A cgroup v1 memory cap of `limit` bytes (memsw too, where the kernel has it), named
    after this process and `tag`; `wrap(cmd)` runs a command inside it. Removed on close."""

    def __init__(self, limit, tag="cap"):
        self.dir = os.path.join(CGROUP_V1_MEMORY, f"epm-{os.getpid()}-{tag}")
        os.mkdir(self.dir)
        self._write("memory.limit_in_bytes", limit)
        if os.path.exists(os.path.join(self.dir, "memory.memsw.limit_in_bytes")):
            self._write("memory.memsw.limit_in_bytes", limit)

    @staticmethod
    def available():
        return os.access(CGROUP_V1_MEMORY, os.W_OK)

    def _write(self, name, value):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(str(value))

    def read(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return f.read()

    def wrap(self, cmd):
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.dir, "cgroup.procs")] + list(cmd)

    def oom_kills(self):
        return int(next((l.split()[1] for l in self.read("memory.oom_control").splitlines()
                         if l.startswith("oom_kill ")), 0))

    def max_usage(self):
        return int(self.read("memory.max_usage_in_bytes"))

    def facts(self):
        return {"cap": "cgroup-v1", "oom_kills": self.oom_kills(), "max_usage_bytes": self.max_usage()}

    def close(self):
        for _ in range(100):
            try:
                os.rmdir(self.dir)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def drop_cache(path):
    """Drop a file from the page cache (a cold start)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_through_cache(path, chunk=16 << 20):
    """Read a file start to end through the page cache, as `cat` does (a warm start for
    unpaged runs; readahead caches what it reads from the disk in large folios)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(chunk):
            pass


def disk_read_mb_s(path, mib=64):
    """The disk's read speed now, in MB/s: `mib` MiB of `path` read with O_DIRECT (past the
    page cache, which it leaves alone) from an offset that moves from call to call; None
    where O_DIRECT is refused. A host's rate limit can slow a virtual disk tenfold within a
    session, so alternating sets record it before and after every run: a run whose disk
    speed differs from its neighbours' is not comparable with them."""
    chunk = 1 << 20
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        span = max(size - mib * chunk, 0) // chunk
        start = (int(time.time() * 1e6) % span if span else 0) * chunk
        buf = mmap.mmap(-1, chunk)
        t = time.time()
        done = 0
        for i in range(mib):
            n = os.preadv(fd, [buf], start + i * chunk)
            if n <= 0:
                break
            done += n
        return round(done / 1e6 / max(time.time() - t, 1e-9), 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def disk_steady(speeds, tolerance=0.5):
    """Whether every measured speed is within `tolerance` of the fastest (missing ones
    are left out): the condition for comparing runs of one alternating set by time."""
    xs = [x for x in speeds if x]
    return not xs or min(xs) >= tolerance * max(xs)


def cached_bytes(path):
    """Bytes of `path` in the page cache (util-linux fincore), or None."""
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True, text=True, check=True)
        return int(out.stdout.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def stats_decode(s):
    """Decode-phase figures of a stats snapshot, whatever its schema: demand misses and
    their bytes, decode's speculative reads (bytes routing then selected, bytes issued,
    experts issued), the decode cache hit rate (None in schema 1) and the share resident."""
    e, p = s["experts"], s["prefetch"]
    if s.get("schema_version", 1) >= 2:
        d, pd = e["decode"], p["decode"]
        return {
            "misses": d["misses"],
            "miss_bytes": d["miss_bytes"],
            "spec_useful_bytes": pd["useful_bytes"],
            "spec_issued_bytes": pd["issued_bytes"],
            "spec_issued": pd["issued"],
            "cache_hit_rate": d["cache_hit_rate"],
            "resident_rate": d["resident_rate"],
            "coverage": s["prediction"]["decode"]["coverage"],
        }
    # Schema 1: decode's own speculative counters came late; the oldest reports give bytes
    # from counts (every expert of the W1 model costs the same).
    per_expert = e["miss_bytes"] / max(e["misses"], 1)
    if "decode_issued_bytes" in p:
        useful, issued = p["decode_useful_bytes"], p["decode_issued_bytes"]
    else:
        useful = p.get("useful_bytes", p["useful"] * per_expert)
        issued = p.get("issued_bytes", useful + p["wasted_bytes"])
    return {
        "misses": e["decode_misses"],
        "miss_bytes": e["decode_miss_bytes"],
        "spec_useful_bytes": useful,
        "spec_issued_bytes": issued,
        "spec_issued": issued / max(per_expert, 1),
        "cache_hit_rate": None,
        "resident_rate": e["hit_rate"],
        "coverage": s["prediction"]["accuracy"],
    }


def stats_total_misses(s):
    """(misses, miss bytes) over prompt and decode."""
    e = s["experts"]
    if s.get("schema_version", 1) >= 2:
        return (e["prompt"]["misses"] + e["decode"]["misses"],
                e["prompt"]["miss_bytes"] + e["decode"]["miss_bytes"])
    return e["misses"], e["miss_bytes"]


def ab_row_ok(row):
    """Whether an `ab` report row succeeded (its outcome was a string before schema 2)."""
    o = row["outcome"]
    return o == "ok" or (isinstance(o, dict) and o.get("kind") == "ok")


def fresh_prompt_store():
    """An empty folder for a server's prompt store, on a disk (the store refuses a file
    system held in memory), removed when this script exits."""
    parent = os.path.join(os.path.expanduser("~"), ".cache", "epm")
    os.makedirs(parent, exist_ok=True)
    path = tempfile.mkdtemp(prefix="bench-prompts-", dir=parent)
    atexit.register(shutil.rmtree, path, True)
    return path


def synth_mini(binary, prefix):
    """A scratch folder (`tempfile.mkdtemp(prefix=prefix)`) and the `qwen3-30b-a3b-mini`
    synthesized into it: `(tmp, model path)`."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    model = os.path.join(tmp, "qwen3-30b-a3b-mini.gguf")
    subprocess.run([binary, "synth", "--preset", "qwen3-30b-a3b-mini", "-o", model], check=True,
                   stdout=subprocess.DEVNULL)
    return tmp, model


def start_server(cmd, timeout_s=600):
    """Run `cmd` (an `epm-run serve ... --port 0` command line, possibly wrapped) and return
    `(proc, port)` once `/health` answers 200. The server's log goes to a temporary file,
    `proc.log_path` (a pipe nobody reads would fill up and stall the server). Stops the
    server and exits if it dies or is not ready within `timeout_s` seconds."""
    # The prompt store outlives a server (a restart takes its prefixes up again): a server
    # started here gets a fresh store of its own, so that each run starts cold, unless the
    # command names one (a measurement of the restart itself).
    if not any(f in cmd for f in ("--prompt-cache-dir", "--prompt-cache-mb")):
        cmd = list(cmd) + ["--prompt-cache-dir", fresh_prompt_store()]
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


def sse_json(resp):
    """The JSON of each `data:` event of a streamed HTTP response, as it arrives, up to
    `[DONE]`."""
    for raw in resp:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            return
        if line.startswith("data: "):
            yield json.loads(line[6:])


def request_json(port, method, path, body=None, timeout=300):
    """One request to a local server; returns (HTTP status, the JSON body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, None if body is None else json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


def read_trace(path):
    """A routing trace as (n_expert, n_used, records), each record (step, layer, [ids per
    token]); a layer not above the previous record's starts a new step (ubatch)."""
    data = open(path, "rb").read()
    if data[:8] not in (b"EPMTRC01", b"EPMTRC02"):
        raise ValueError(f"{path} is not an EPM routing trace")
    fixed = 12 if data[:8] == b"EPMTRC02" else 8  # version 2 adds a flags word
    n_expert, n_used = struct.unpack_from("<II", data, 8)
    off, step, prev = 16, -1, None
    records = []
    while off < len(data):
        if off + fixed > len(data):
            raise ValueError(f"{path}: truncated record header at byte {off}")
        layer, n_tok = struct.unpack_from("<II", data, off)
        off += fixed
        need = 2 * n_tok * n_used
        if off + need > len(data):
            raise ValueError(f"{path}: record at byte {off} needs {need} bytes, {len(data) - off} remain")
        ids = struct.unpack_from("<%dH" % (n_tok * n_used), data, off)
        off += need
        if prev is None or layer <= prev:
            step += 1
        prev = layer
        records.append((step, layer, [ids[t * n_used:(t + 1) * n_used] for t in range(n_tok)]))
    return n_expert, n_used, records


def write_report(out, report, tmp=None, summary_keys=None):
    """Write a check's JSON record to `out` (its folder made), print it (or the
    `summary_keys` of it), remove the scratch folder `tmp`, and exit 0 when
    `report["all_passed"]` (or `report["passed"]`), else 1."""
    import shutil
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
    shown = {k: report[k] for k in summary_keys} if summary_keys else report
    print(json.dumps(shown, indent=1))
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if report.get("all_passed", report.get("passed")) else 1)


def add_build_args(ap):
    """The arguments of a script that runs several builds of epm-run side by side on one
    model: `--bin` (repeated), `--label` (one per `--bin`), `-m` and `--budget-mb`."""
    ap.add_argument("--bin", action="append", required=True)
    ap.add_argument("--label", action="append")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--budget-mb", type=int, required=True)


def build_labels(a):
    """The labels of `add_build_args`' builds: as given, else bin0, bin1, ...; exits when
    their count is not the builds'."""
    labels = a.label or [f"bin{i}" for i in range(len(a.bin))]
    if len(labels) != len(a.bin):
        sys.exit("give one --label per --bin")
    return labels
