#!/usr/bin/env python3
"""How much of a range one MADV_WILLNEED call reads, against the block device's
read_ahead_kb and max_sectors_kb. The kernel clamps each call to max(read_ahead_kb,
max_sectors_kb) (force_page_cache_ra), which is why the pager advises ranges in pieces of
that size. Runs on a scratch ext4 on a loop device backed by tmpfs, so the machine's own
disk and its settings are untouched. Needs root, losetup and mkfs.ext4.

    sudo python3 tools/readahead_window.py --out validate/readahead-window.json
"""
import argparse, ctypes, json, os, platform, subprocess, sys, tempfile, time

MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MADV_RANDOM, MADV_WILLNEED = 1, 3


def resident_after_willneed(path, offset, length, chunk):
    """Open the file afresh (its readahead state is taken at open), drop it from the page
    cache, advise [offset, offset+length) in pieces of `chunk`, wait, count resident bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        size = os.fstat(fd).st_size
        base = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        libc.madvise(base, size, MADV_RANDOM)
        calls = 0
        for o in range(offset, offset + length, chunk):
            libc.madvise(base + o, min(chunk, offset + length - o), MADV_WILLNEED)
            calls += 1
        time.sleep(0.3)
        vec = (ctypes.c_ubyte * (size // PAGE))()
        libc.mincore(base, size, vec)
        inside = sum(vec[p] & 1 for p in range(offset // PAGE, (offset + length) // PAGE)) * PAGE
        total = sum(b & 1 for b in vec) * PAGE
        libc.munmap(base, size)
        return {"calls": calls, "resident_in_range_bytes": inside, "resident_total_bytes": total}
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="validate/readahead-window.json")
    ap.add_argument("--range-mib", type=int, default=3, help="advised range (an expert is 1-3 MiB)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (loop device, mount, queue settings)")
    work = tempfile.mkdtemp(prefix="epm-ra-")
    img = "/dev/shm/epm-ra.img" if os.path.isdir("/dev/shm") else os.path.join(work, "img")
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    subprocess.run(["truncate", "-s", "256M", img], check=True)
    loop = subprocess.run(["losetup", "-f", "--show", img], check=True, capture_output=True, text=True).stdout.strip()
    queue = f"/sys/block/{os.path.basename(loop)}/queue"
    rows = []
    try:
        subprocess.run(["mkfs.ext4", "-q", loop], check=True)
        subprocess.run(["mount", loop, mnt], check=True)
        data = os.path.join(mnt, "model.bin")
        with open(data, "wb") as f:
            f.write(os.urandom(64 * MIB))
            os.fsync(f.fileno())
        hw = int(open(f"{queue}/max_hw_sectors_kb").read())
        length, offset = a.range_mib * MIB, 8 * MIB
        for max_sectors_kb in sorted({128, min(1280, hw)}):
            for read_ahead_kb in (128, 8192):
                open(f"{queue}/max_sectors_kb", "w").write(str(max_sectors_kb))
                open(f"{queue}/read_ahead_kb", "w").write(str(read_ahead_kb))
                window = max(read_ahead_kb, max_sectors_kb) * 1024
                one = resident_after_willneed(data, offset, length, length)
                pieces = resident_after_willneed(data, offset, length, window)
                rows.append({"read_ahead_kb": read_ahead_kb, "max_sectors_kb": max_sectors_kb,
                             "range_bytes": length, "one_call": one, "window_pieces": pieces})
                print(rows[-1], flush=True)
    finally:
        subprocess.run(["umount", mnt])
        subprocess.run(["losetup", "-d", loop])
        if img.startswith("/dev/shm/"):
            os.remove(img)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    report = {"command": "python3 tools/readahead_window.py " + " ".join(sys.argv[1:]),
              "machine": {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()},
              "device": "ext4 on a loop device over tmpfs",
              "finding": "one MADV_WILLNEED call reads at most max(read_ahead_kb, max_sectors_kb); "
                         "pieces of that size read the whole range",
              "rows": rows}
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
