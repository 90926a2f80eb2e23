"""GET of one RAM-resident 1 MiB value into a caller buffer through
dfkv.Client: from an embedded store in this process against the same GET
from a node over loopback TCP, alternating rounds in one run. The node
must run with the RAM tier, on this host.

    PYTHONPATH=contrib/python DFKV_LIBRARY=build/libdfkv.so \\
      python3 contrib/python/bench_embedded.py --members 127.0.0.1:7600

Prints JSON: per round GETs per second of each path, the best of each,
and their ratio. scripts/bench-embedded.sh runs it with the node it
starts.
"""

import argparse
import json
import os
import time

import dfkv


def rate(c, key, buf, seconds):
    c.get_into(key, buf)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        c.get_into(key, buf)
        n += 1
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", required=True)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ns = b"dfkv-bench-embedded-" + os.urandom(4).hex().encode()
    emb = dfkv.Client(None, ns, embedded={"ram_tier_bytes": "256MiB"})
    tcp = dfkv.Client(a.members, ns, shm="off")
    value = os.urandom(a.size)
    emb.put(b"v", value)
    tcp.put(b"v", value)
    buf = bytearray(a.size)
    rounds = []
    for _ in range(a.rounds):
        rounds.append({"embedded": rate(emb, b"v", buf, a.seconds), "tcp": rate(tcp, b"v", buf, a.seconds)})
    assert bytes(buf) == value
    best = {p: max(r[p] for r in rounds) for p in ("embedded", "tcp")}
    print(json.dumps({"size": a.size, "rounds": rounds, "best_gets_per_s": best,
                      "best_gb_per_s": {p: best[p] * a.size / 1e9 for p in best},
                      "embedded_over_tcp": best["embedded"] / best["tcp"]}, indent=1))
    emb.close()
    tcp.close()


if __name__ == "__main__":
    main()
