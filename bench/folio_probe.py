#!/usr/bin/env python3
"""Which page-cache folios the kernel makes for an expert-sized range, by the ways a user
process can ask for it to be read, and what dropping the range then leaves. Root only: the
folio of each page comes from /proc/self/pagemap and /proc/kpageflags.

For each method, --ranges ranges of --range-kib KiB at unaligned offsets spread over the
file (from a page cache emptied of the file first; a shared mapping, as llama.cpp's):
  - willneed:        madvise(MADV_WILLNEED), what the pager uses
  - populate:        madvise(MADV_POPULATE_READ): the fault path and its readahead
  - pread:           pread() of exactly the range: the read path and its readahead
  - pread-sequential: 128 KiB preads over four times the range, so readahead ramps up
  - populate-huge:   MADV_HUGEPAGE on the mapping, then MADV_POPULATE_READ
reports the folio sizes inside the range, the bytes cached outside it (readahead beyond
the asked range: what would count against no expert), and the bytes still cached in the
range after MADV_DONTNEED + POSIX_FADV_DONTNEED of it (the pager's eviction).

    python3 bench/folio_probe.py -m W1.gguf [--ranges 8] [--range-kib 1100] --out validate/folio-probe.json
"""
import argparse, collections, ctypes, json, mmap, os, struct, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from epmlib import machine  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
MADV_POPULATE_READ = 22
KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL = 1 << 15, 1 << 16
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def madvise(addr, length, advice):
    if libc.madvise(addr, length, advice) != 0:
        raise OSError(ctypes.get_errno(), f"madvise({advice})")


class Mapping:
    """The whole file mapped shared and read-only at a known address (as llama.cpp maps it)."""

    def __init__(self, fd, size):
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        self.size = size
        self.addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if self.addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")

    def close(self):
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munmap(self.addr, self.size)

    def cached(self, offset, length):
        """Pages of the range in the page cache (mincore reports the cache for file mappings)."""
        start = offset // PAGE * PAGE
        n = (offset + length - start + PAGE - 1) // PAGE
        vec = ctypes.create_string_buffer(n)
        if libc.mincore(self.addr + start, n * PAGE, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(b & 1 for b in vec.raw)

    def touch(self, offset, length):
        """Read one byte of every page: maps each (cached) page into this process."""
        start = offset // PAGE * PAGE
        for a in range(start, offset + length, PAGE):
            ctypes.c_char.from_address(self.addr + a).value  # noqa: B018

    def folio_sizes(self, offset, length, pagemap, kpageflags):
        """Sizes in pages of the folios the range's mapped pages belong to, each folio counted
        once and whole (one cut by the range's edges too): from a page's physical frame,
        back to its folio's head and forward over its tails."""
        def flags(pfn):
            kpageflags.seek(pfn * 8)
            return struct.unpack("<Q", kpageflags.read(8))[0]

        start = offset // PAGE * PAGE
        heads = {}
        for a in range(start, offset + length, PAGE):
            pagemap.seek((self.addr + a) // PAGE * 8)
            entry, = struct.unpack("<Q", pagemap.read(8))
            if not entry >> 63:
                continue
            pfn = entry & ((1 << 55) - 1)
            head = pfn
            while flags(head) & KPF_COMPOUND_TAIL:
                head -= 1
            if head not in heads:
                n = 1
                if flags(head) & KPF_COMPOUND_HEAD:
                    while flags(head + n) & KPF_COMPOUND_TAIL:
                        n += 1
                heads[head] = n
        return collections.Counter(heads.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--ranges", type=int, default=8)
    ap.add_argument("--range-kib", type=int, default=1100, help="about one expert's tensor slice")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: folio sizes come from /proc/kpageflags")
    fd = os.open(a.model, os.O_RDONLY)
    size = os.fstat(fd).st_size
    length = a.range_kib * 1024
    methods = ["willneed", "populate", "pread", "pread-sequential", "populate-huge"]
    # Disjoint ranges per method, spread over the file, each 8 MiB + 4 KiB + 123 bytes
    # apart from the last so starts are unaligned and the readahead windows do not meet.
    stride = size // (len(methods) * a.ranges + 1)
    report = {"command": "python3 bench/folio_probe.py " + " ".join(sys.argv[1:]), "machine": machine(),
              "model": a.model, "range_bytes": length, "ranges": a.ranges, "methods": {}}
    pagemap, kpageflags = open("/proc/self/pagemap", "rb"), open("/proc/kpageflags", "rb")
    for mi, method in enumerate(methods):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        m = Mapping(fd, size)
        if method == "populate-huge":
            madvise(m.addr, size, mmap.MADV_HUGEPAGE)
        offsets = [((mi * a.ranges + i + 1) * stride) // PAGE * PAGE + 123 + 4096 * i for i in range(a.ranges)]
        t_wall = time.time()
        for off in offsets:
            start = off // PAGE * PAGE
            end = off + length
            if method == "willneed":
                madvise(m.addr + start, end - start, mmap.MADV_WILLNEED)
            elif method in ("populate", "populate-huge"):
                madvise(m.addr + start, end - start, MADV_POPULATE_READ)
            elif method == "pread":
                os.pread(fd, length, off)
            else:
                # Sequential reads ramp the readahead window (and, where the filesystem
                # allows, its folio size) up: 128 KiB at a time over four times the range.
                for o in range(off, off + 4 * length, 128 << 10):
                    os.pread(fd, 128 << 10, o)
        # Wait for asynchronous reads (willneed) to land before looking at the cache.
        deadline = time.time() + 300
        while any(m.cached(o, length) < (o + length - o // PAGE * PAGE + PAGE - 1) // PAGE for o in offsets):
            if time.time() > deadline:
                sys.exit(f"{method}: reads did not complete within 300 s")
            time.sleep(0.05)
        wall = time.time() - t_wall
        sizes = collections.Counter()
        inside = outside = 0
        for off in offsets:
            m.touch(off, length)
            sizes += m.folio_sizes(off, length, pagemap, kpageflags)
            inside += m.cached(off, length)
            window = 8 << 20
            lo = max(0, off // PAGE * PAGE - window)
            outside += m.cached(lo, off // PAGE * PAGE - lo) + m.cached(off + length, window)
        # The pager's eviction of each range: unmap, then drop from the page cache.
        left = 0
        for off in offsets:
            start = off // PAGE * PAGE
            madvise(m.addr + start, off + length - start, mmap.MADV_DONTNEED)
            os.posix_fadvise(fd, off, length, os.POSIX_FADV_DONTNEED)
            left += m.cached(off, length)
        m.close()
        row = {
            "folio_pages_histogram": {str(k * PAGE // 1024) + " KiB": v for k, v in sorted(sizes.items())},
            "cached_inside_bytes": inside * PAGE,
            "cached_outside_within_8mib_bytes": outside * PAGE,
            "wall_s": round(wall, 2),
            "left_cached_after_eviction_bytes": left * PAGE,
        }
        report["methods"][method] = row
        print(method, json.dumps(row), flush=True)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(report, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
