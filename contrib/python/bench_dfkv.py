"""Python-layer overhead numbers:

1. batch get of N x SIZE (default 64 x 1 MiB) through dfkv.Client, against
   the Go client's GetBatch (contrib/bench/getbatch) on the same server and
   keys in the same run, alternating rounds;
2. exist calls per second from one Python thread, batches of 128 keys whose
   values are 4 KiB.

    PYTHONPATH=contrib/python DFKV_LIBRARY=build/libdfkv.so \\
      /usr/bin/python3 contrib/python/bench_dfkv.py --members 127.0.0.1:7600 --go-bench /tmp/getbatch
"""

import argparse
import json
import os
import subprocess
import time

import dfkv


def py_get_batch(c, keys, bufs, seconds):
    st, _ = c.batch_get_into(keys, bufs)
    assert all(s == dfkv.Status.OK for s in st), st
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        st, _ = c.batch_get_into(keys, bufs)
        n += 1
    el = time.perf_counter() - t0
    assert all(s == dfkv.Status.OK for s in st), st
    return {"batches": n, "gb_per_s": n * len(keys) * len(bufs[0]) / el / 1e9, "batch_ms": el * 1000 / n}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", required=True)
    ap.add_argument("--go-bench", help="built contrib/bench/getbatch binary")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ns = b"dfkv-bench-" + os.urandom(4).hex().encode()
    c = dfkv.Client(a.members, ns)
    keys = [f"bench/{i}".encode() for i in range(a.n)]
    assert set(c.batch_put(keys, [os.urandom(a.size) for _ in keys])) == {dfkv.Status.OK}
    bufs = [bytearray(a.size) for _ in keys]
    out = {"python": [], "go": []}
    for _ in range(a.rounds):
        if a.go_bench:
            r = subprocess.run([a.go_bench, "-members", a.members, "-namespace-hex", ns.hex(), "-prefix", "bench/",
                                "-n", str(a.n), "-size", str(a.size), "-seconds", str(a.seconds)],
                               check=True, capture_output=True, text=True)
            out["go"].append(json.loads(r.stdout))
        out["python"].append(py_get_batch(c, keys, bufs, a.seconds))

    # exists: 128-key batches over 4 KiB values
    ekeys = [f"exist/{i}".encode() for i in range(128)]
    assert set(c.batch_put(ekeys, [os.urandom(4096) for _ in ekeys])) == {dfkv.Status.OK}
    c.batch_exist(ekeys)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        st, _ = c.batch_exist(ekeys)
        calls += len(ekeys)
    el = time.perf_counter() - t0
    assert all(s == dfkv.Status.OK for s in st)
    calls_p, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        assert c.exist_prefix(ekeys) == 128
        calls_p += len(ekeys)
    el_p = time.perf_counter() - t0
    out["exist_keys_per_sec_batch128"] = calls / el
    out["exist_prefix_keys_per_sec_batch128"] = calls_p / el_p
    best = lambda rs: max(r["gb_per_s"] for r in rs) if rs else None
    out["summary"] = {"python_gb_per_s_best": best(out["python"]), "go_gb_per_s_best": best(out["go"]),
                      "python_over_go": (best(out["python"]) / best(out["go"])) if out["go"] else None}
    print(json.dumps(out, indent=1))
    c.close()


if __name__ == "__main__":
    main()
