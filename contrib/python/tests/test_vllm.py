"""The vLLM KV connector against real dfkv nodes."""

import types
import unittest
import uuid

from dfkv import vllm as dvl

from ._servers import members

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

NEEDS_TORCH = "torch is not importable by this interpreter: apt-get install python3-torch, run /usr/bin/python3"


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
