"""Reading `epm-run` stats snapshots, schema 2 and the older schema 1, in one place.

`decode(s)` returns the decode-phase figures benchmarks need, whatever the schema:
demand misses and their bytes, decode's speculative reads (bytes routing then selected,
bytes issued, experts issued), the decode cache hit rate (None in schema 1, which did not
separate it) and the share resident at routing (prefetched included).
"""


def decode(s):
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


def total_misses(s):
    """(misses, miss bytes) over prompt and decode."""
    e = s["experts"]
    if s.get("schema_version", 1) >= 2:
        return (e["prompt"]["misses"] + e["decode"]["misses"],
                e["prompt"]["miss_bytes"] + e["decode"]["miss_bytes"])
    return e["misses"], e["miss_bytes"]


def ok(row):
    """Whether an `ab` report row succeeded (its outcome was a string before schema 2)."""
    o = row["outcome"]
    return o == "ok" or (isinstance(o, dict) and o.get("kind") == "ok")
