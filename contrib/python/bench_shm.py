"""Batch GET of N x SIZE (default 64 x 1 MiB) into one torch tensor through
dfkv.Client, over shared memory and over TCP against the same node,
alternating rounds in one run. The node must run with the RAM tier and
server.shm_socket, on this host.

    PYTHONPATH=contrib/python DFKV_LIBRARY=build/libdfkv.so \\
      /usr/bin/python3 contrib/python/bench_shm.py --members 127.0.0.1:7600

Prints JSON: per round GB/s of each path, the best of each, and their
ratio. scripts/bench-shm.sh runs it with the node it starts.
"""

import argparse
import json
import os
import time

import torch

import dfkv


def rate(c, keys, views, seconds):
    st, _ = c.batch_get_into(keys, views)
    assert all(s == dfkv.Status.OK for s in st), st
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        st, _ = c.batch_get_into(keys, views)
        n += 1
    el = time.perf_counter() - t0
    assert all(s == dfkv.Status.OK for s in st), st
    return n * sum(v.numel() for v in views) / el / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", required=True)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ns = b"dfkv-bench-shm-" + os.urandom(4).hex().encode()
    shm = dfkv.Client(a.members, ns, shm="on")
    tcp = dfkv.Client(a.members, ns, shm="off")
    keys = [f"shm/{i}".encode() for i in range(a.n)]
    vals = [os.urandom(a.size) for _ in keys]
    assert set(tcp.batch_put(keys, vals)) == {dfkv.Status.OK}
    out = torch.empty(a.n * a.size, dtype=torch.uint8)
    views = list(out.split(a.size))
    rounds = []
    for _ in range(a.rounds):
        rounds.append({"shm": rate(shm, keys, views, a.seconds), "tcp": rate(tcp, keys, views, a.seconds)})
    assert bytes(views[-1].numpy()) == vals[-1]
    best = {p: max(r[p] for r in rounds) for p in ("shm", "tcp")}
    print(json.dumps({"n": a.n, "size": a.size, "rounds": rounds, "best_gb_per_s": best,
                      "shm_over_tcp": best["shm"] / best["tcp"]}, indent=1))
    shm.close()
    tcp.close()


if __name__ == "__main__":
    main()
