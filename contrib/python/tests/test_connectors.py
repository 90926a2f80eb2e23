"""The engine connectors against the real servers, with stand-ins for the
engine objects they are handed (SGLang's storage config and host pool,
LMCache's engine metadata and CPU allocator, vLLM's config, requests and
scheduler output), shaped like the real ones."""

import asyncio
import ctypes
import types
import unittest
import uuid

from dfkv import sglang as dsg, lmcache as dlm, vllm as dvl

from ._servers import members

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

NEEDS_TORCH = "torch is not importable by this interpreter: apt-get install python3-torch, run /usr/bin/python3"


# ---------------------------------------------------------------- SGLang

class FakeHostPool:
    """page_first MHA host pool: per page a K part and a V part, 2 pointers
    per page from get_page_buffer_meta, flat page = K then V."""

    layout = "page_first"

    def __init__(self, pages=8, page_size=4, layers=2, heads=2, head_dim=4, itemsize=2):
        self.page_size, self.layer_num, self.head_num, self.head_dim = page_size, layers, heads, head_dim
        self.dtype = "bfloat16"
        self.part = page_size * layers * heads * head_dim * itemsize  # bytes of K (or V) of one page
        self.pages = pages
        self.buf = (ctypes.c_char * (2 * pages * self.part))()
        self.base = ctypes.addressof(self.buf)

    def get_size_per_token(self):
        return 2 * self.part // self.page_size

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for first in list(indices)[::self.page_size]:
            page = int(first) // self.page_size
            ptrs += [self.base + page * self.part, self.base + (self.pages + page) * self.part]
            sizes += [self.part, self.part]
        return ptrs, sizes

    def fill(self, page, seed):
        for plane in (0, 1):
            off = (plane * self.pages + page) * self.part
            ctypes.memmove(self.base + off, bytes((seed + plane + j) % 251 for j in range(self.part)), self.part)

    def page_bytes(self, page):
        raw = bytes(self.buf)
        return raw[page * self.part:(page + 1) * self.part] + raw[(self.pages + page) * self.part:(self.pages + page + 1) * self.part]


def sglang_config(extra, **kw):
    base = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
                enable_storage_metrics=False, is_page_first_layout=True, model_name="test/sglang-" + uuid.uuid4().hex,
                dp_rank=0, dp_size=1, extra_config=extra)
    base.update(kw)
    return types.SimpleNamespace(**base)


class SGLangTest(unittest.TestCase):
    def setUp(self):
        self.extra = {"backend_name": "dfkv", "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
                      "dfkv_members": ",".join(members()), "dfkv_tenant": "pytest"}

    def test_v1_zero_copy_round_trip_and_prefix(self):
        pool = FakeHostPool()
        st = dsg.DfkvHiCacheStorage(sglang_config(self.extra), {})  # the factory's dynamic-backend call
        self.addCleanup(st.close)
        st.register_mem_pool_host(pool)
        keys = [f"{i:064x}" for i in range(5)]
        for p in range(5):
            pool.fill(p, seed=p * 7)
        want = [pool.page_bytes(p) for p in range(5)]
        idx = [p * pool.page_size + t for p in range(5) for t in range(pool.page_size)]
        self.assertEqual(st.batch_exists(keys), 0)
        self.assertEqual(st.batch_set_v1(keys[:3], idx[:3 * pool.page_size]), [True] * 3)
        self.assertEqual(st.batch_set_v1(keys[4:], idx[4 * pool.page_size:]), [True])
        self.assertEqual(st.batch_exists(keys), 3, "page 3 is missing: the prefix stops there")
        self.assertTrue(st.exists(keys[4]) and not st.exists(keys[3]))
        # Load pages 0..2 into slots 5..7 of the pool, straight from dfkv.
        dst = [(5 + p) * pool.page_size + t for p in range(3) for t in range(pool.page_size)]
        self.assertEqual(st.batch_get_v1(keys[:3], dst), [True] * 3)
        for p in range(3):
            self.assertEqual(pool.page_bytes(5 + p), want[p])
        self.assertEqual(st.batch_get_v1(keys[3:4], dst[:pool.page_size]), [False])
        # The generic path sees the same objects: a flat page is K then V.
        flat = bytearray(2 * pool.part)
        self.assertIs(st.get(keys[1], flat), flat)
        self.assertEqual(bytes(flat), want[1])
        self.assertIsNone(st.get(keys[3], bytearray(2 * pool.part)))
        self.assertIsNone(st.get(keys[1], bytearray(pool.part)), "a wrong-size target is a miss, not a partial page")

    def test_namespace_and_keys(self):
        st = dsg.DfkvHiCacheStorage(sglang_config(self.extra, tp_size=4, tp_rank=2), {})
        st.register_mem_pool_host(FakeHostPool())
        d = st.namespace()
        self.assertEqual(d.layout_id, "sglang-hicache/raw-v1")
        self.assertEqual((d.block_tokens, d.layer_geometry.layers, d.layer_geometry.kv_heads), (4, 2, 8))
        self.assertEqual(d.topology_sizes.tp, 4)
        self.assertIn(b"|tp=4:2|", st.object_key("ab"))
        mla = dsg.DfkvHiCacheStorage(sglang_config(dict(self.extra, dfkv_dtype="float8_e4m3fn", dfkv_page_size=64,
                                                        dfkv_layers=61, dfkv_kv_heads=1, dfkv_head_dim=576),
                                                   tp_size=8, tp_rank=3, is_mla_model=True), {})
        self.assertIn(b"|tp=8:-1|", mla.object_key("ab"), "MLA pages are shared by all TP ranks")
        self.assertEqual(mla.namespace().dtype, "float8_e4m3fn")
        # '|' and '=' in an engine key cannot forge another key.
        self.assertIn(b"hash=a%7Cb%3Dc|", st.object_key("a|b=c"))

    def test_set_takes_target_location_and_never_raises(self):
        st = dsg.DfkvHiCacheStorage(sglang_config(dict(self.extra, dfkv_dtype="uint8", dfkv_page_size=4,
                                                       dfkv_layers=2, dfkv_kv_heads=2, dfkv_head_dim=4)), {})
        self.addCleanup(st.close)
        page = bytearray(b"p" * 256)
        # The page as target_location, value left out: stored.
        self.assertTrue(st.set("tl0", target_location=page))
        self.assertEqual(bytes(st.get("tl0")), bytes(page))
        # Nothing to store, or a page the client cannot read: False and a
        # warning, not an exception into the cache controller.
        with self.assertLogs("dfkv.sglang", "WARNING"):
            self.assertFalse(st.set("tl1"))
        with self.assertLogs("dfkv.sglang", "WARNING"):
            self.assertFalse(st.set("tl2", value=object()))

    def test_missing_members_is_a_clear_error(self):
        with self.assertRaises(ValueError) as cm:
            dsg.DfkvHiCacheStorage(sglang_config({}), {})
        self.assertIn("dfkv_members", str(cm.exception))

    @unittest.skipIf(torch is None, NEEDS_TORCH)
    def test_generic_tensor_path(self):
        st = dsg.DfkvHiCacheStorage(sglang_config(dict(self.extra, dfkv_dtype="bfloat16", dfkv_page_size=4,
                                                       dfkv_layers=2, dfkv_kv_heads=2, dfkv_head_dim=4)), {})
        self.addCleanup(st.close)
        pages = [torch.randn(64, dtype=torch.bfloat16) for _ in range(3)]
        self.assertTrue(st.batch_set(["p0", "p1", "p2"], pages))
        self.assertEqual(st.batch_exists(["p0", "p1", "p2", "p3"]), 3)
        out = st.batch_get(["p0", "p3", "p2"], [torch.empty(64, dtype=torch.bfloat16) for _ in range(3)])
        self.assertTrue(torch.equal(out[0], pages[0]) and out[1] is None and torch.equal(out[2], pages[2]))


# ---------------------------------------------------------------- LMCache

class FakeMemoryObj:
    def __init__(self, nbytes):
        self.byte_array = memoryview(bytearray(nbytes))
        self.raw_data = self.byte_array
        self.meta = types.SimpleNamespace(shape=None)
        self.refs = 1

    def ref_count_down(self):
        self.refs -= 1


class FakeCPUBackend:
    def __init__(self, nbytes):
        self.nbytes, self.allocated = nbytes, []

    def allocate(self, shape, dtype, fmt):
        o = FakeMemoryObj(self.nbytes)
        o.meta.shape = tuple(shape)
        self.allocated.append(o)
        return o


class LMCacheTest(unittest.TestCase):
    def setUp(self):
        # kv_shape (layers, 2, chunk tokens, kv heads, head size), fp16
        kv_dtype = torch.float16 if torch is not None else "float16"
        self.meta = types.SimpleNamespace(model_name="test/lmcache-" + uuid.uuid4().hex, world_size=1, worker_id=0,
                                          kv_dtype=kv_dtype, kv_dtype_size=2, kv_shape=(2, 2, 16, 2, 8), use_mla=False)
        self.chunk = 2 * 2 * 16 * 2 * 8 * 2
        self.url = "dfkv://" + ",".join(members()) + "?tenant=pytest"

    def key(self, h):
        return types.SimpleNamespace(chunk_hash=h, world_size=1, worker_id=0, to_string=lambda: f"k@{h}")

    def test_adapter_and_connector(self):
        adapter = dlm.DfkvConnectorAdapter()
        self.assertTrue(adapter.can_parse(self.url) and not adapter.can_parse("redis://x:1"))
        backend = FakeCPUBackend(self.chunk)
        ctx = types.SimpleNamespace(url=self.url, loop=None, local_cpu_backend=backend, config=None, metadata=self.meta)
        conn = adapter.create_connector(ctx)
        self.assertEqual(conn.tenant, "pytest")
        self.assertEqual(conn.namespace().layout_id, "lmcache/raw-v1")

        async def scenario():
            src = FakeMemoryObj(self.chunk)
            src.byte_array[:] = bytes(j % 256 for j in range(self.chunk))
            keys = [self.key(i) for i in range(4)]
            self.assertFalse(await conn.exists(keys[0]))
            await conn.batched_put([keys[0], keys[1], keys[3]], [src, src, src])
            self.assertTrue(conn.exists_sync(keys[1]))
            self.assertEqual(conn.batched_contains(keys), 2, "stop at the first missing chunk")
            self.assertEqual(await conn.batched_async_contains("lookup-1", keys), 2)
            got = await conn.get(keys[1])
            self.assertEqual(bytes(got.byte_array), bytes(src.byte_array))
            miss = await conn.get(keys[2])
            self.assertIsNone(miss)
            self.assertEqual(backend.allocated[-1].refs, 0, "the chunk allocated for a miss is released")
            objs = await conn.batched_get(keys)
            self.assertEqual([o is not None for o in objs], [True, True, False, True])
            self.assertEqual(await conn.list(), [])
            self.assertEqual(await conn.ping(), 0)
            self.assertTrue(conn.remove_sync(keys[0]))
            self.assertEqual(conn.batched_contains(keys), 0)
            await conn.close()

        asyncio.run(scenario())

    def test_external_route_as_lmcache_builds_it(self):
        # LMCache's external:// adapter constructs the class with keywords
        # only (loop, local_cpu_backend, config: no url, no metadata); its
        # connector manager then calls init_chunk_meta(config, metadata)
        # and post_init() before any put or get.
        backend = FakeCPUBackend(self.chunk)
        config = types.SimpleNamespace(extra_config={"dfkv_members": ",".join(members()), "dfkv_tenant": "pytest"})
        conn = dlm.DfkvConnector(loop=None, local_cpu_backend=backend, config=config)
        conn.init_chunk_meta(config, self.meta)
        conn.post_init()
        self.addCleanup(lambda: asyncio.run(conn.close()))
        self.assertEqual(conn.tenant, "pytest")
        src = FakeMemoryObj(self.chunk)
        src.byte_array[:] = bytes(j % 251 for j in range(self.chunk))
        asyncio.run(conn.put(self.key("ext"), src))
        got = asyncio.run(conn.get(self.key("ext")))
        self.assertEqual(bytes(got.byte_array), bytes(src.byte_array))

    def test_partial_chunk(self):
        backend = FakeCPUBackend(self.chunk)
        conn = dlm.DfkvConnector(url=self.url, local_cpu_backend=backend, metadata=self.meta)
        self.addCleanup(lambda: asyncio.run(conn.close()))
        token = self.chunk // 16
        conn.client.put(conn.object_key(self.key("partial")), b"\x01" * (3 * token))
        obj = asyncio.run(conn.get(self.key("partial")))
        self.assertEqual(obj.meta.shape[2], 3)
        self.assertEqual(len(obj.raw_data), 3 * token)
        conn.client.put(conn.object_key(self.key("ragged")), b"\x01" * (token + 1))
        self.assertIsNone(asyncio.run(conn.get(self.key("ragged"))), "a chunk that is not whole tokens is refused")

    def test_url_parsing(self):
        self.assertEqual(dlm.parse_dfkv_url("dfkv://a:1,b:2/?tenant=t"), ("a:1,b:2", {"tenant": "t"}))
        for bad in ("dfkv://", "dfkv://nohost", "redis://a:1"):
            with self.assertRaises(ValueError):
                dlm.parse_dfkv_url(bad)


# ---------------------------------------------------------------- vLLM

def vllm_config(model, tp=1):
    return types.SimpleNamespace(
        kv_transfer_config=types.SimpleNamespace(
            kv_connector_extra_config={"dfkv_members": ",".join(members()), "dfkv_tenant": "pytest",
                                       "dfkv_tp_rank": 0, "dfkv_pp_rank": 0}),
        model_config=types.SimpleNamespace(model=model, revision=None, dtype="bfloat16", use_mla=False,
                                           hf_config=types.SimpleNamespace(num_hidden_layers=2),
                                           get_total_num_kv_heads=lambda: 2, get_head_size=lambda: 8,
                                           get_num_layers=lambda pc: 2),
        cache_config=types.SimpleNamespace(block_size=4, cache_dtype="auto"),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1,
                                              data_parallel_size=1, decode_context_parallel_size=1))


class Blocks:
    def __init__(self, ids):
        self.ids = ids

    def get_block_ids(self):
        return (self.ids,)


@unittest.skipIf(torch is None, NEEDS_TORCH)
class VLLMTest(unittest.TestCase):
    def test_save_then_load_through_both_roles(self):
        cfg = vllm_config("test/vllm-" + uuid.uuid4().hex)
        sched = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.SCHEDULER)
        worker = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)
        self.addCleanup(sched.shutdown)
        self.addCleanup(worker.shutdown)
        self.assertEqual(sched.namespace(), worker.namespace())
        # Paged KV of two layers: [2, num_blocks, block_size, heads, head_size]
        kv = {f"model.layers.{i}.self_attn.attn": torch.randn(2, 10, 4, 2, 8, dtype=torch.bfloat16) for i in range(2)}
        worker.register_kv_caches(kv)
        prompt = list(range(100, 114))  # 14 tokens: 3 whole blocks of 4
        req = types.SimpleNamespace(request_id="r1", prompt_token_ids=prompt, block_hashes=None)
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))
        sched.update_state_after_alloc(req, Blocks([]), 0)
        out = types.SimpleNamespace(
            scheduled_new_reqs=[types.SimpleNamespace(req_id="r1", prompt_token_ids=prompt, block_ids=([3, 7, 1, 9],),
                                                      num_computed_tokens=0)],
            scheduled_cached_reqs=types.SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[]),
            num_scheduled_tokens={"r1": 14})
        meta = sched.build_connector_meta(out)
        self.assertEqual([len(s.hashes) for s in meta.saves], [3])
        self.assertEqual(meta.saves[0].block_ids, [3, 7, 1])
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        for name, t in kv.items():
            worker.save_kv_layer(name, t, None)
        worker.wait_for_save()
        worker.clear_connector_metadata()
        sched.request_finished(req, [3, 7, 1, 9])

        # A second request with the same prompt on a fresh worker whose own
        # prefix cache already has block 0 (4 tokens): dfkv has 3 blocks,
        # all usable (13 tokens may be skipped), so 12 - 4 = 8 tokens load,
        # blocks 1 and 2 into the request's block ids 2 and 5.
        worker2 = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)
        self.addCleanup(worker2.shutdown)
        kv2 = {n: torch.zeros_like(t) for n, t in kv.items()}
        worker2.register_kv_caches(kv2)
        req2 = types.SimpleNamespace(request_id="r2", prompt_token_ids=prompt, block_hashes=None)
        self.assertEqual(sched.get_num_new_matched_tokens(req2, 4), (8, False))
        sched.update_state_after_alloc(req2, Blocks([0, 2, 5, 6]), 8)
        meta2 = sched.build_connector_meta(types.SimpleNamespace(scheduled_new_reqs=[], scheduled_cached_reqs=None,
                                                                 num_scheduled_tokens={}))
        self.assertEqual([(tr.block_ids, len(tr.hashes)) for tr in meta2.loads], [([2, 5], 2)])
        worker2.bind_connector_metadata(meta2)
        worker2.start_load_kv(None)
        worker2.wait_for_layer_load("model.layers.0.self_attn.attn")
        self.assertEqual(worker2.get_block_ids_with_load_errors(), set())
        for n in kv:
            # block 7 (2nd prompt block) -> 2, block 1 (3rd) -> 5
            self.assertTrue(torch.equal(kv2[n][:, 2], kv[n][:, 7]), n)
            self.assertTrue(torch.equal(kv2[n][:, 5], kv[n][:, 1]), n)
            self.assertTrue(torch.equal(kv2[n][:, 0], torch.zeros_like(kv2[n][:, 0])), "block 0 was not to be loaded")

    def test_prefill_context_parallel_refused(self):
        cfg = vllm_config("test/vllm-" + uuid.uuid4().hex)
        cfg.parallel_config.prefill_context_parallel_size = 2
        with self.assertRaisesRegex(ValueError, "prefill context parallel"):
            dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)

    def test_resumed_request_replaces_its_blocks(self):
        # Chunked prefill of an 8-block prompt: the first chunk gets blocks
        # [10, 11]; the request is preempted and resumed with a whole new
        # list [20..23], then gets [24..27]. Each save must name the blocks
        # at the prompt positions it saves (appending the resumed list
        # shifted every later save onto the wrong blocks).
        cfg = vllm_config("test/vllm-" + uuid.uuid4().hex)
        sched = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.SCHEDULER)
        self.addCleanup(sched.shutdown)
        prompt = list(range(200, 233))  # 33 tokens: 8 whole blocks of 4
        req = types.SimpleNamespace(request_id="p1", prompt_token_ids=prompt, block_hashes=None)
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))
        sched.update_state_after_alloc(req, Blocks([]), 0)

        def cached(ids, computed, resumed, **kw):
            return types.SimpleNamespace(req_ids=["p1"], new_block_ids=[(ids,)], num_computed_tokens=[computed],
                                         resumed_from_preemption=[resumed], **kw)

        m1 = sched.build_connector_meta(types.SimpleNamespace(
            scheduled_new_reqs=[types.SimpleNamespace(req_id="p1", prompt_token_ids=prompt, block_ids=([10, 11],),
                                                      num_computed_tokens=0)],
            scheduled_cached_reqs=None, num_scheduled_tokens={"p1": 8}))
        self.assertEqual([s.block_ids for s in m1.saves], [[10, 11]])
        m2 = sched.build_connector_meta(types.SimpleNamespace(
            scheduled_new_reqs=[], scheduled_cached_reqs=cached([20, 21, 22, 23], 0, True),
            num_scheduled_tokens={"p1": 16}))
        self.assertEqual([s.block_ids for s in m2.saves], [[22, 23]])  # blocks 2-3; 0-1 were saved
        m3 = sched.build_connector_meta(types.SimpleNamespace(
            scheduled_new_reqs=[], scheduled_cached_reqs=cached([24, 25, 26, 27], 16, False),
            num_scheduled_tokens={"p1": 17}))
        self.assertEqual([s.block_ids for s in m3.saves], [[24, 25, 26, 27]])
        # Newer vLLM names resumed requests in resumed_req_ids instead.
        sched._reqs["p1"].block_ids = [10, 11]
        sched._reqs["p1"].stored_upto = 2
        m4 = sched.build_connector_meta(types.SimpleNamespace(
            scheduled_new_reqs=[], scheduled_cached_reqs=types.SimpleNamespace(
                req_ids=["p1"], new_block_ids=[([30, 31, 32, 33],)], num_computed_tokens=[0],
                resumed_req_ids={"p1"}),
            num_scheduled_tokens={"p1": 16}))
        self.assertEqual([s.block_ids for s in m4.saves], [[32, 33]])

    def test_layouts_that_differ_physically_share_blocks(self):
        # FlashInfer's HND layout under vLLM: block-first shape [blocks, 2,
        # block_size, heads, head_size] over memory ordered [blocks, 2,
        # heads, block_size, head_size], so a block's piece is not
        # row-major. A worker with that layout saves; a worker with the
        # FlashAttention layout [2, blocks, ...] loads the same tokens, and
        # the reverse: what is stored is the logical order.
        cfg = vllm_config("test/vllm-hnd-" + uuid.uuid4().hex)
        sched = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.SCHEDULER)
        self.addCleanup(sched.shutdown)

        def hnd():
            return torch.randn(10, 2, 2, 4, 8, dtype=torch.bfloat16).permute(0, 1, 3, 2, 4)

        def run(kv, block_ids, loads):
            w = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)
            self.addCleanup(w.shutdown)
            w.register_kv_caches(kv)
            meta = dvl.DfkvConnectorMetadata()
            if loads:
                meta.loads.append(dvl.BlockTransfer("r", hashes, block_ids))
            else:
                meta.saves.append(dvl.BlockTransfer("r", hashes, block_ids))
            w.bind_connector_metadata(meta)
            w.start_load_kv(None)
            w.wait_for_save()
            self.assertEqual(w.get_block_ids_with_load_errors(), set())

        def block(t, b):  # a block's K and V in logical order, either layout
            return t[:, b] if t.shape[0] == 2 else t[b]

        for i, (src, dst) in enumerate([(hnd, lambda: torch.zeros(2, 10, 4, 2, 8, dtype=torch.bfloat16)),
                                        (lambda: torch.randn(2, 10, 4, 2, 8, dtype=torch.bfloat16),
                                         lambda: torch.zeros(10, 2, 2, 4, 8, dtype=torch.bfloat16).permute(0, 1, 3, 2, 4))]):
            hashes = dvl.token_chain_hashes(list(range(1000 * (i + 1), 1000 * (i + 1) + 8)), 4)
            kv = {f"model.layers.{n}.self_attn.attn": src() for n in range(2)}
            if i == 0:
                self.assertFalse(kv["model.layers.0.self_attn.attn"][3].is_contiguous(),
                                 "an HND block must not be row-major, or this tests nothing")
            run(kv, [3, 6], loads=False)
            kv2 = {n: dst() for n in kv}
            run(kv2, [1, 8], loads=True)
            for n in kv:
                self.assertTrue(torch.equal(block(kv2[n], 1), block(kv[n], 3)), (i, n))
                self.assertTrue(torch.equal(block(kv2[n], 8), block(kv[n], 6)), (i, n))
                self.assertTrue(torch.equal(block(kv2[n], 0), torch.zeros_like(block(kv2[n], 0))), (i, n))

    def test_prefix_needs_every_tp_rank(self):
        cfg = vllm_config("test/vllm-tp-" + uuid.uuid4().hex, tp=2)
        sched = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.SCHEDULER)
        self.addCleanup(sched.shutdown)
        prompt = list(range(9))
        hashes = dvl.token_chain_hashes(prompt, 4)
        # Only TP rank 0 stored block 0: not a usable hit.
        sched.client.put(sched.object_key(hashes[0], 0, 0), b"x")
        req = types.SimpleNamespace(request_id="r", prompt_token_ids=prompt, block_hashes=None)
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))
        sched.client.put(sched.object_key(hashes[0], 1, 0), b"x")
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (4, False))

    def test_multimodal_requests_without_engine_hashes_are_not_cached(self):
        cfg = vllm_config("test/vllm-mm-" + uuid.uuid4().hex)
        sched = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.SCHEDULER)
        self.addCleanup(sched.shutdown)
        req = types.SimpleNamespace(request_id="r", prompt_token_ids=list(range(20)), block_hashes=None,
                                    mm_features=[object()])
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))


if __name__ == "__main__":
    unittest.main()
