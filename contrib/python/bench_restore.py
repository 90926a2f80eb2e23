"""Restore throughput of the three engine connectors, beside the Go client.

A model-shaped KV prefix (default 28 layers, 8 KV heads, head dim 128,
bf16, 64-token pages: 7 MiB a page, 64 pages) is saved through each
connector and then restored, again and again, through the call the engine
makes on a hit, into torch tensors laid out as the engine lays them out:

- SGLang: DfkvHiCacheStorage.batch_get_v1 into a page_first host pool
  (what HiCache's prefetch thread calls with interface_v1);
- LMCache: RemoteBackend.batched_get_blocking, which allocates each chunk
  from the CPU backend and fills it through the connector;
- vLLM: the worker's start_load_kv of an asynchronous load, waited for
  through get_finished, into [2, blocks, block_size, heads, head_dim]
  paged buffers, one per layer;
- vllm-layers (not run unless named in --connectors): a synchronous load,
  which reads each layer's range of every block, waited for layer by
  layer through wait_for_layer_load, as a hybrid model's forward does.

The engines come from the stand-ins the test suite drives the connectors
with (tests/*_upstream.py); the connectors are the real ones. The Go
client's GetBatch of the same number of values of the same size, on the
same node, is measured in alternating rounds (contrib/bench/getbatch, built
here when --go-bench is not given). Each figure is the rate over a whole
round (restores back to back), the best of the rounds; every restore is
checked byte for byte once before it is timed.

    scripts/build-lib.sh
    go build -o /tmp/dfkv . && /tmp/dfkv server --disks /tmp/dfkv-bench --disk-capacity-bytes 4GiB \\
        --ram-tier 1 --ram-tier-bytes 3GiB --put-ack-mode disk &
    /usr/bin/python3 contrib/python/bench_restore.py --members 127.0.0.1:7600

Prints one JSON document: GB/s and tokens restored per second per
connector, the Go figure, and each connector's ratio to it. Start a fresh
node for each run, with a RAM tier that holds everything the run writes
(4 x pages x page size) and PUTs acknowledged from disk, so the figures
are of the wire and the connectors, not of a disk read or of write-back
flushes competing for the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the stand-ins under tests/

import torch  # noqa: E402

import dfkv  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class Shape:
    def __init__(self, a):
        self.layers, self.heads, self.head_dim = a.layers, a.kv_heads, a.head_dim
        self.dtype_name, self.dtype = a.dtype, DTYPES[a.dtype]
        self.itemsize = torch.empty((), dtype=self.dtype).element_size()
        self.page_tokens, self.pages = a.page_tokens, a.pages
        self.page_bytes = self.layers * 2 * self.heads * self.head_dim * self.itemsize * self.page_tokens
        self.tokens = self.pages * self.page_tokens
        self.bytes = self.pages * self.page_bytes


def timed(fn, seconds):
    """Runs fn until seconds have passed (at least once) and returns the
    mean time of a call, as the Go bench reports its rate over its whole
    run."""
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            return el / calls


# ------------------------------------------------------------------ SGLang

class _TorchMemory:
    """The stand-in host pool's memory, as a torch tensor (SGLang's host
    pool is one)."""

    def __init__(self, nbytes):
        self.t = torch.zeros(max(nbytes, 1), dtype=torch.uint8)
        self.base, self.nbytes = self.t.data_ptr(), nbytes


@contextlib.contextmanager
def sglang(members, shape, stack):
    from tests import sglang_upstream as up
    undo = up.install()
    stack.callback(undo)
    sys.modules.pop("dfkv.sglang", None)
    stack.callback(sys.modules.pop, "dfkv.sglang", None)
    importlib.import_module("dfkv.sglang")
    saved, up._Memory = up._Memory, _TorchMemory
    try:
        pool = up.KVHostPool(layout="page_first", pages=shape.pages, page_size=shape.page_tokens,
                             layers=shape.layers, heads=shape.heads, head_dim=shape.head_dim,
                             itemsize=shape.itemsize, dtype=shape.dtype_name)
    finally:
        up._Memory = saved
    extra = {"backend_name": "dfkv", "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
             "interface_v1": 1, "dfkv_members": members, "dfkv_tenant": "bench"}
    config = up.HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                     is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                                     model_name="bench/" + uuid.uuid4().hex, extra_config=extra)
    storage = up.StorageBackendFactory.create_backend("dynamic", config, pool)
    stack.callback(storage.close)
    storage.register_mem_pool_host(pool)
    keys = [f"{uuid.uuid4().hex[:8]}{i:056x}" for i in range(shape.pages)]
    host = up.page_indices(range(shape.pages), shape.page_tokens)
    mem = pool.mem.t
    mem.copy_(torch.randint(0, 256, mem.shape, dtype=torch.uint8))
    want = mem.clone()
    if not all(storage.batch_set_v1(keys, host)):
        raise RuntimeError("SGLang: batch_set_v1 did not store every page")

    def restore():
        if not all(storage.batch_get_v1(keys, host)):
            raise RuntimeError("SGLang: batch_get_v1 missed a page")

    mem.zero_()
    restore()
    if not torch.equal(mem, want):
        raise RuntimeError("SGLang: the restored host pool differs from what was saved")
    yield restore


# ----------------------------------------------------------------- LMCache

@contextlib.contextmanager
def lmcache(members, shape, stack):
    from tests import lmcache_upstream as up

    stack.enter_context(up.installed())
    extra = {"remote_storage_plugin.dfkv.module_path": "dfkv.lmcache",
             "remote_storage_plugin.dfkv.class_name": "DfkvConnectorAdapter",
             "remote_storage_plugin.dfkv.members": members, "remote_storage_plugin.dfkv.tenant": "bench"}
    config = up.LMCacheEngineConfig(chunk_size=shape.page_tokens, remote_serde="naive",
                                    remote_storage_plugins=["dfkv"], extra_config=extra, blocking_timeout_secs=60)
    meta = up.LMCacheMetadata(model_name="bench/" + uuid.uuid4().hex, world_size=1, local_world_size=1, worker_id=0,
                              local_worker_id=0, kv_dtype=shape.dtype,
                              kv_shape=(shape.layers, 2, shape.page_tokens, shape.heads, shape.head_dim),
                              chunk_size=shape.page_tokens)
    lt = up.LoopThread()
    stack.callback(lt.stop)
    cpu = up.LocalCPUBackend(config, meta, reuse=True)  # LMCache allocates from a preallocated pool
    backend = up.create_remote_backends(config, meta, lt.loop, cpu)["RemoteBackend-dfkv"]
    stack.callback(backend.close)
    keys = [up.CacheEngineKey(meta.model_name, 1, 0, uuid.uuid4().int >> 64, shape.dtype, {}) for _ in range(shape.pages)]
    objs, want = [], []
    for _ in keys:
        o = cpu.allocate(meta.get_shapes(), meta.get_dtypes(), up.MemoryFormat.KV_2LTD)
        o.raw_data.copy_(torch.randint(0, 256, o.raw_data.shape, dtype=torch.uint8))
        objs.append(o)
        want.append(o.raw_data.clone())
    backend.batched_submit_put_task(keys, objs)
    backend.wait_puts()
    for o in objs:
        o.ref_count_down()

    def restore(check=False):
        got = backend.batched_get_blocking(keys)
        try:
            if any(o is None for o in got):
                raise RuntimeError("LMCache: batched_get_blocking missed a chunk")
            if check and not all(torch.equal(o.raw_data, w) for o, w in zip(got, want)):
                raise RuntimeError("LMCache: a restored chunk differs from what was saved")
        finally:
            for o in got:
                if o is not None:
                    o.ref_count_down()

    restore(check=True)
    yield restore


# -------------------------------------------------------------------- vLLM

@contextlib.contextmanager
def vllm(members, shape, stack, layerwise=False):
    from tests import vllm_upstream as up
    stack.enter_context(up.installed())
    sys.modules.pop("dfkv.vllm", None)
    dvl = importlib.import_module("dfkv.vllm")
    stack.callback(sys.modules.pop, "dfkv.vllm", None)
    cfg, kvc = up.make_config("bench/" + uuid.uuid4().hex, {"dfkv_members": members, "dfkv_tenant": "bench"},
                              layers=shape.layers, kv_heads=shape.heads, head_size=shape.head_dim,
                              block_size=shape.page_tokens, dtype=shape.dtype_name, num_blocks=shape.pages + 1)
    worker = up.create_connector(cfg, up.KVConnectorRole.WORKER, kvc)
    stack.callback(worker.shutdown)
    kv = {f"model.layers.{i}.self_attn.attn":
          torch.zeros(2, shape.pages + 1, shape.page_tokens, shape.heads, shape.head_dim, dtype=shape.dtype)
          for i in range(shape.layers)}
    worker.register_kv_caches(kv)
    hashes = [uuid.uuid4().hex for _ in range(shape.pages)]
    blocks = list(range(1, shape.pages + 1))  # block 0 is vLLM's null block
    for t in kv.values():
        t.view(torch.uint8).copy_(torch.randint(0, 256, t.view(torch.uint8).shape, dtype=torch.uint8))
    want = {n: t.clone() for n, t in kv.items()}
    step = [0]

    def run(meta):
        step[0] += 1
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        worker.wait_for_save()
        worker.clear_connector_metadata()

    run(dvl.DfkvConnectorMetadata(saves=[dvl.BlockTransfer("save", hashes, blocks)]))
    worker._wait_saves()
    if worker.get_kv_connector_stats().data.get("save_failed_blocks"):
        raise RuntimeError("vLLM: a block save failed")

    def restore():
        rid = f"load-{step[0]}"
        if layerwise:
            # A synchronous load: the forward waits for each layer in turn.
            step[0] += 1
            worker.bind_connector_metadata(dvl.DfkvConnectorMetadata(
                loads=[dvl.BlockTransfer(rid, hashes, blocks, is_async=False)]))
            worker.start_load_kv(None)
            for name in kv:
                worker.wait_for_layer_load(name)
            worker.wait_for_save()
            worker.clear_connector_metadata()
            if worker.get_block_ids_with_load_errors():
                raise RuntimeError("vLLM: a block failed to load")
            return
        run(dvl.DfkvConnectorMetadata(loads=[dvl.BlockTransfer(rid, hashes, blocks, is_async=True)]))
        while True:
            _, recving = worker.get_finished(set())
            if recving and rid in recving:
                break
            time.sleep(0.0002)
        if worker.get_block_ids_with_load_errors():
            raise RuntimeError("vLLM: a block failed to load")

    for t in kv.values():
        t.zero_()
    restore()
    # Bytes, not values (random bf16 bytes hold NaNs); block 0 is not ours.
    if not all(torch.equal(kv[n][:, 1:].contiguous().view(torch.uint8), want[n][:, 1:].contiguous().view(torch.uint8))
               for n in kv):
        raise RuntimeError("vLLM: the restored paged buffers differ from what was saved")
    yield restore


def vllm_layers(members, shape, stack):
    return vllm(members, shape, stack, layerwise=True)


# ---------------------------------------------------------------------- Go

def go_bench_binary(path, stack):
    if path:
        return path
    if shutil.which("go") is None:
        return None
    out = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(prefix="dfkv-bench-")), "getbatch")
    subprocess.run(["go", "build", "-o", out, "./contrib/bench/getbatch"], check=True,
                   cwd=os.path.normpath(os.path.join(HERE, "..", "..")))
    return out


def go_round(binary, members, ns, shape, seconds):
    r = subprocess.run([binary, "-members", members, "-namespace-hex", ns.hex(), "-prefix", "go/",
                        "-n", str(shape.pages), "-size", str(shape.page_bytes), "-seconds", str(seconds)],
                       check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["gb_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", default="127.0.0.1:7600", help="the node(s), host:port,...")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--page-tokens", type=int, default=64)
    ap.add_argument("--pages", type=int, default=64, help="pages (blocks, chunks) in the restored prefix")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2, help="per connector per round")
    ap.add_argument("--connectors", default="sglang,lmcache,vllm", help="any of sglang, lmcache, vllm, vllm-layers")
    ap.add_argument("--go-bench", help="a built contrib/bench/getbatch (built here with go when not given)")
    a = ap.parse_args()
    shape = Shape(a)
    makers = {"sglang": sglang, "lmcache": lmcache, "vllm": vllm, "vllm-layers": vllm_layers}
    names = [n for n in a.connectors.split(",") if n]
    for n in names:
        if n not in makers:
            ap.error(f"--connectors: unknown connector {n!r} (sglang, lmcache, vllm, vllm-layers)")
    best = {n: None for n in names + ["go"]}
    with contextlib.ExitStack() as stack:
        binary = go_bench_binary(a.go_bench, stack)
        ns = b"dfkv-bench-restore-" + uuid.uuid4().hex.encode()
        if binary:
            with dfkv.Client(a.members, ns) as c:
                keys = [f"go/{i}".encode() for i in range(shape.pages)]
                value = os.urandom(shape.page_bytes)
                if set(c.batch_put(keys, [value] * len(keys))) != {dfkv.Status.OK}:
                    raise RuntimeError("could not store the Go client's values")
        restores = {n: stack.enter_context(makers[n](a.members, shape, stack)) for n in names}
        order = (["go"] if binary else []) + names
        for r in range(a.rounds):
            # Each round starts with the next one in line, so none is
            # always measured right after the same neighbour.
            for n in order[r % len(order):] + order[:r % len(order)]:
                if n == "go":
                    gbps = go_round(binary, a.members, ns, shape, a.seconds)
                else:
                    gbps = shape.bytes / timed(restores[n], a.seconds) / 1e9
                best[n] = max(best[n] or 0, gbps)
    out = {"shape": {"layers": shape.layers, "kv_heads": shape.heads, "head_dim": shape.head_dim,
                     "dtype": shape.dtype_name, "page_tokens": shape.page_tokens, "pages": shape.pages,
                     "page_bytes": shape.page_bytes, "restore_bytes": shape.bytes},
           "go_getbatch_gb_per_s": best["go"], "connectors": {}}
    for n in names:
        out["connectors"][n] = {
            "gb_per_s": round(best[n], 3),
            "tokens_per_s": round(best[n] * 1e9 / shape.page_bytes * shape.page_tokens),
            "of_go": round(best[n] / best["go"], 3) if best["go"] else None,
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
