"""The vLLM KV connector against real dfkv nodes, driven as vLLM drives it.

Most tests run the connector inside tests/vllm_upstream.py, a stand-in for
vLLM's connector factory, scheduler and model runner: the connector is
built through kv_connector_module_path, subclasses the stand-in's base
classes, and its metadata is pickled to the workers, whose "model" checks
every KV slot it reads. A few tests call the connector's methods directly
where a case is easier to set up by hand.
"""

import importlib
import logging
import os
import subprocess
import sys
import threading
import time
import types
import unittest
import uuid
from unittest import mock

import dfkv
import dfkv.vllm

from . import _servers
from . import vllm_upstream as up
from ._servers import Server, members

with up.installed():
    # Under vLLM's module names the stand-in's classes are what the
    # connector subclasses, as the real ones would be.
    dvl = importlib.reload(dfkv.vllm)

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

NEEDS_TORCH = "torch is not importable by this interpreter: apt-get install python3-torch, run /usr/bin/python3"


def extra(**kw):
    e = {"dfkv_members": ",".join(members()), "dfkv_tenant": "pytest"}
    e.update(kw)
    return e


def prompt_of(n, seed):
    return [(seed * 7919 + i * 31) % 30000 + 1 for i in range(n)]


class StandIn(unittest.TestCase):
    def setUp(self):
        cm = up.installed()
        cm.__enter__()
        self.addCleanup(cm.__exit__, None, None, None)

    def engine(self, model, ex=None, **kw):
        cfg, kvc = up.make_config(model, ex if ex is not None else extra(), **kw)
        e = up.Engine(cfg, kvc, torch)
        self.addCleanup(e.shutdown)
        return e

    def run_one(self, e, rid, prompt, max_tokens=2, **kw):
        r = up.Request(rid, prompt, e.bs, max_tokens=max_tokens, **kw)
        e.add_request(r)
        e.run()
        self.assertEqual(e.mismatches(), [], "a forward read KV that no correct run wrote")
        self.assertEqual(e.held_blocks(), 0, "blocks still held after every transfer finished")
        return r


# ---------------------------------------------------------------- through the stand-in

@unittest.skipIf(torch is None, NEEDS_TORCH)
class VLLMEngineTest(StandIn):
    def test_factory_builds_both_roles_as_vllm_does(self):
        cfg, kvc = up.make_config("test/vllm-" + uuid.uuid4().hex, extra(), hybrid=True)
        sched = up.create_connector(cfg, up.KVConnectorRole.SCHEDULER, kvc)
        self.addCleanup(sched.shutdown)
        self.assertIsInstance(sched, up.KVConnectorBase_V1)
        self.assertTrue(up.supports_hma(type(sched)), "vLLM refuses a connector without SupportsHMA under HMA")
        self.assertFalse(sched.requires_kv_delivery, "a cache must not make vLLM recompute preempted hand-offs")
        self.assertIsInstance(type(sched).build_kv_connector_stats(data={"loads": 1}), up.KVConnectorStats)

    def test_second_engine_loads_the_prefix_asynchronously(self):
        model = "test/vllm-" + uuid.uuid4().hex
        prompt = prompt_of(14, 1)  # 3 whole blocks of 4, 13 tokens may be skipped
        a = self.engine(model)
        self.run_one(a, "r1", prompt, max_tokens=3)
        self.assertEqual(a.stats.data["save_blocks"], 3)

        b = self.engine(model)
        r = up.Request("r2", prompt, b.bs, max_tokens=3)
        b.add_request(r)
        seen = set()
        while b.busy():
            b.step()
            seen.add(r.status)
        self.assertIn(up.Status.WAITING_FOR_REMOTE_KVS, seen, "the load was not asynchronous")
        self.assertEqual(r.num_external_computed_tokens, 12)
        self.assertEqual(b.computed_tokens["r2"], 2 + 2, "2 prompt tokens and 2 decode steps computed")
        self.assertEqual(b.mismatches(), [])
        self.assertEqual(b.held_blocks(), 0)
        red = b.stats.reduce()
        self.assertEqual((red["loads"], red["load_blocks"], red["load_failed_blocks"]), (1, 3, 0))
        self.assertGreater(red["load_MB"], 0)
        self.assertGreater(red["lookup_hit_rate"], 0)

    def test_synchronous_loads_and_local_prefix(self):
        # Engine b already has block 0 in its own prefix cache: dfkv has
        # 3 blocks, so 8 tokens load, into the blocks after the local one,
        # in the same step (dfkv_load_async off).
        model = "test/vllm-" + uuid.uuid4().hex
        prompt = prompt_of(14, 2)
        self.run_one(self.engine(model), "r1", prompt)
        b = self.engine(model, extra(dfkv_load_async="0"))
        self.run_one(b, "warm", prompt[:4] + prompt_of(6, 99))
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 8)
        self.assertEqual(b.computed_tokens["r2"], 2 + 1)

    def test_lookup_never_blocks_the_scheduler(self):
        model = "test/vllm-" + uuid.uuid4().hex
        e = self.engine(model)
        r = up.Request("r", prompt_of(20, 3), e.bs)
        first = e.connector.get_num_new_matched_tokens(r, 0)
        self.assertEqual(first, (None, False), "the first answer must come from the lookup thread, later")
        for _ in range(2000):
            got = e.connector.get_num_new_matched_tokens(r, 0)
            if got[0] is not None:
                break
            time.sleep(0.001)
        self.assertEqual(got, (0, False))

    def test_hybrid_groups_save_and_load_per_group(self):
        # Full-attention layers in group 0, sliding-window layers (window
        # 8) in group 1, as the hybrid KV cache manager lays them out; a
        # chunked prefill frees window blocks while the request runs.
        model = "test/vllm-hybrid-" + uuid.uuid4().hex
        prompt = prompt_of(30, 4)
        a = self.engine(model, layers=4, hybrid=True, sliding=8, max_batched=8)
        self.run_one(a, "r1", prompt)
        self.assertEqual(a.stats.data["save_blocks"], 7)
        off = self.engine(model, layers=4, hybrid=True, sliding=8)
        self.assertEqual(self.run_one(off, "r0", prompt).num_external_computed_tokens, 0,
                         "hybrid loads are opt-in: vLLM cannot recompute a failed one")
        b = self.engine(model, extra(dfkv_hybrid_loads="1"), layers=4, hybrid=True, sliding=8)
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 28)
        plain = self.engine(model, layers=4)
        r3 = self.run_one(plain, "r3", prompt)
        self.assertEqual(r3.num_external_computed_tokens, 0, "a one-group worker must not read hybrid objects")

    def test_hybrid_load_failure_does_not_stop_the_engine(self):
        # vLLM's scheduler unpacks one block table per request when a
        # worker reports failed blocks: with two KV-cache groups that
        # raises in the engine core. A hybrid model must never get there.
        model = "test/vllm-hybridfail-" + uuid.uuid4().hex
        prompt = prompt_of(30, 16)
        self.run_one(self.engine(model, layers=4, hybrid=True, sliding=8), "r1", prompt)
        b = self.engine(model, layers=4, hybrid=True, sliding=8)
        w = b.workers[0].connector
        w.client.batch_get_sg = lambda keys, items: ([dvl.Status.IO_ERROR] * len(keys), [0] * len(keys))
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 0)

    def test_failed_sync_load_never_stores_kv_computed_on_it(self):
        # dfkv has blocks 0-2 of a 22-token prompt. Engine b loads them in
        # the step (synchronously, layer by layer) and block 1's last layer
        # arrives wrong after its first loaded well: that step's forward
        # computes blocks 3 and 4 on top of it, so they are wrong too,
        # until vLLM recomputes them. Engine c must find correct KV.
        model = "test/vllm-syncfail-" + uuid.uuid4().hex
        prompt = prompt_of(22, 15)
        self.run_one(self.engine(model), "r1", prompt[:14])
        b = self.engine(model, extra(dfkv_load_async="0"))
        w = b.workers[0].connector
        real = w.client.batch_get_range_sg
        last = w._layer_offsets[-1]
        self.assertGreater(last, 0, "two layers: the last one's bytes follow the first's")

        def second_block_broken(keys, offsets, items):
            st, n = real(keys, offsets, items)
            if len(keys) == 3 and offsets[1] == last:
                for p in items[1]:
                    p.fill_(7.0)
                st[1] = dvl.Status.IO_ERROR
            return st, n

        w.client.batch_get_range_sg = second_block_broken
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 4, "only block 0 counts as loaded")
        self.assertEqual(b.computed_tokens["r2"], 22 - 12 + 22 - 4 + 1)
        c = self.engine(model)
        r3 = self.run_one(c, "r3", prompt)  # checks every slot it reads
        self.assertEqual(r3.num_external_computed_tokens, 20, "b stored the recomputed blocks")

    def test_sync_load_feeds_layer_0_while_the_last_layer_is_held_back(self):
        # The read of the last layer's bytes waits until the model has
        # passed wait_for_layer_load of layer 0 (and read its KV, which the
        # stand-in checks slot by slot): a load that waited for every layer
        # first would hold the gate shut until it timed out.
        model = "test/vllm-layers-" + uuid.uuid4().hex
        prompt = prompt_of(14, 21)
        self.run_one(self.engine(model, layers=4), "r1", prompt)
        b = self.engine(model, extra(dfkv_load_async="0"), layers=4)
        w = b.workers[0].connector
        last = w._layer_offsets[-1]
        real_read, real_wait = w.client.batch_get_range_sg, w.wait_for_layer_load
        gate, log, reads = threading.Event(), [], []

        def read(keys, offsets, items):
            reads.append(offsets[0])
            if offsets[0] == last and not gate.wait(30):
                log.append("gate timed out")
            out = real_read(keys, offsets, items)
            if offsets[0] == last:
                log.append("last layer read")
            return out

        def wait(name):
            # Steps without a load (the lookup is pending) wait for no
            # layer: only the step that loads opens the gate.
            loading = w._layer_loads is not None
            real_wait(name)
            if name == "model.layers.0.self_attn.attn" and loading and not gate.is_set():
                log.append("layer 0 ready")
                gate.set()

        w.client.batch_get_range_sg = read
        w.wait_for_layer_load = wait
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 12)
        self.assertEqual(log, ["layer 0 ready", "last layer read"])
        self.assertEqual(sorted(reads), w._layer_offsets, "one ranged read per layer")
        red = b.stats.reduce()
        self.assertEqual((red["loads"], red["load_blocks"], red["load_failed_blocks"]), (1, 3, 0))

    def test_node_killed_between_layers_fails_blocks(self):
        # The node dies once the first layers of every block are in: the
        # last layer's read fails, so every block fails (not raises), and
        # vLLM recomputes the prompt.
        node = Server()
        self.addCleanup(node.close)
        model = "test/vllm-killlayer-" + uuid.uuid4().hex
        ex = extra(dfkv_members=node.addr, dfkv_timeout_ms=2000, dfkv_dial_timeout_ms=300, dfkv_load_async="0")
        prompt = prompt_of(14, 22)
        self.run_one(self.engine(model, ex, layers=3), "r1", prompt)
        b = self.engine(model, ex, layers=3)
        w = b.workers[0].connector
        last = w._layer_offsets[-1]
        real = w.client.batch_get_range_sg
        cv, earlier = threading.Condition(), []

        def read(keys, offsets, items):
            if offsets[0] != last:
                st, n = real(keys, offsets, items)
                with cv:
                    earlier.append(list(st))
                    cv.notify_all()
                return st, n
            with cv:
                self.assertTrue(cv.wait_for(lambda: len(earlier) == 2, 30), "the first layers were never read")
            node.kill()
            return real(keys, offsets, items)

        w.client.batch_get_range_sg = read
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(earlier, [[dvl.Status.OK] * 3] * 2, "the first two layers loaded")
        self.assertEqual(r.num_external_computed_tokens, 0)
        self.assertEqual(b.computed_tokens["r2"], 14 - 12 + 14 + 1, "a forward on the load, then all recomputed")
        self.assertEqual(b.stats.data["load_failed_blocks"], 3)

    def test_block_that_never_loads_is_not_loaded_again(self):
        # Block 0 is stored with the wrong size: every load of it fails.
        # vLLM sends a request whose first block failed back to
        # get_num_new_matched_tokens; answering the same hit again would
        # load and fail for ever, and the request would never run.
        model = "test/vllm-badobj-" + uuid.uuid4().hex
        prompt = prompt_of(14, 17)
        a = self.engine(model)
        self.run_one(a, "r1", prompt)
        h0 = up.Request("x", prompt, a.bs).block_hashes[0].hex()
        a.connector.client.put(a.connector.object_key(h0, 0, 0), b"\x00" * 24)
        b = self.engine(model)
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 0)
        self.assertEqual(b.stats.data["load_failed_blocks"], 1)
        r3 = self.run_one(self.engine(model), "r3", prompt)
        self.assertEqual(r3.num_external_computed_tokens, 12, "the recomputed block replaced the bad object")

    def test_deferred_finalize_holds_blocks_until_saved(self):
        # Under speculative decoding vLLM asks get_finished before
        # wait_for_save. A finished request's last save is in that step's
        # metadata: its blocks must stay held until the save has ended.
        model = "test/vllm-defer-" + uuid.uuid4().hex
        prompt = prompt_of(22, 18)
        self.run_one(self.engine(model), "r1", prompt[:14])
        b = self.engine(model, extra(dfkv_load_async="0"))
        b.defer_finalize = True
        w = b.workers[0].connector
        gate = threading.Event()
        self.addCleanup(gate.set)
        real = w.client.batch_put_sg
        w.client.batch_put_sg = lambda keys, items: (gate.wait(10), real(keys, items))[1]
        r = up.Request("d", prompt, b.bs, max_tokens=1)
        b.add_request(r)
        for _ in range(1000):
            b.step()
            if r.status == up.Status.FINISHED:
                break
        for _ in range(5):
            b.step()
        self.assertEqual(r.status, up.Status.FINISHED)
        self.assertGreater(b.held_blocks(), 0, "blocks were freed before their save started")
        gate.set()
        b.run()
        self.assertEqual(b.mismatches(), [])
        self.assertEqual(b.held_blocks(), 0)
        r3 = self.run_one(self.engine(model), "r3", prompt)
        self.assertEqual(r3.num_external_computed_tokens, 20)

    def test_mamba_groups_are_refused(self):
        cfg, kvc = up.make_config("test/vllm-" + uuid.uuid4().hex, extra(), hybrid=True)
        kvc.kv_cache_groups.append(up.KVCacheGroupSpec(["model.layers.9.mixer"], up.MambaSpec(4)))
        with self.assertRaisesRegex(ValueError, "MambaSpec"):
            up.create_connector(cfg, up.KVConnectorRole.WORKER, kvc)

    def test_prompt_embeds_are_not_cached(self):
        model = "test/vllm-" + uuid.uuid4().hex
        e = self.engine(model)
        r = self.run_one(e, "emb", None, prompt_embeds=[[0.0]] * 12)
        self.assertEqual(r.num_external_computed_tokens, 0)
        self.assertTrue(e.stats is None or e.stats.data["saves"] == 0, "prompt embeddings were stored")

    def test_mla_rank0_writes_every_rank_reads(self):
        model = "test/vllm-mla-" + uuid.uuid4().hex
        prompt = prompt_of(18, 5)
        a = self.engine(model, tp=2, use_mla=True, head_size=16)
        puts = []
        for w in a.workers:
            real = w.connector.client.batch_put_sg
            w.connector.client.batch_put_sg = (lambda real, rank: lambda keys, items: (
                puts.append((rank, len(keys))), real(keys, items))[1])(real, w.tp_rank)
        self.run_one(a, "r1", prompt)
        self.assertEqual(sorted({p[0] for p in puts}), [0], "only TP rank 0 may write MLA blocks")
        self.assertEqual(sum(p[1] for p in puts), 4)
        b = self.engine(model, tp=2, use_mla=True, head_size=16)
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 16)
        self.assertEqual(b.stats.data["load_blocks"], 8, "both ranks load the 4 blocks")

    def test_tensor_parallel_ranks_keep_their_own_heads(self):
        model = "test/vllm-tp-" + uuid.uuid4().hex
        prompt = prompt_of(10, 6)
        self.run_one(self.engine(model, tp=2, kv_heads=4), "r1", prompt)
        b = self.engine(model, tp=2, kv_heads=4)
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 8)

    def test_preempted_request_saves_the_right_blocks(self):
        model = "test/vllm-pre-" + uuid.uuid4().hex
        prompt = prompt_of(33, 7)
        a = self.engine(model, max_batched=8)
        req = up.Request("p1", prompt, a.bs, max_tokens=2)
        a.add_request(req)
        while a.busy() and req.status != up.Status.RUNNING:
            a.step()
        a.step()  # a second chunk computed
        a.preempt("p1")
        a.run()
        self.assertEqual(a.mismatches(), [])
        self.assertEqual(a.held_blocks(), 0)
        b = self.engine(model)
        r = self.run_one(b, "p2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 32)

    def test_finished_request_holds_blocks_until_saved(self):
        # The save of the last prompt blocks is still running when the
        # request finishes: its blocks must stay allocated until a worker
        # reports the save done.
        model = "test/vllm-hold-" + uuid.uuid4().hex
        e = self.engine(model)
        w = e.workers[0].connector
        gate = threading.Event()
        real = w.client.batch_put_sg
        w.client.batch_put_sg = lambda keys, items: (gate.wait(10), real(keys, items))[1]
        r = up.Request("h", prompt_of(9, 8), e.bs, max_tokens=1)
        e.add_request(r)
        for _ in range(1000):
            e.step()
            if r.status == up.Status.FINISHED:
                break
            time.sleep(0.001)
        self.assertEqual(r.status, up.Status.FINISHED)
        self.assertGreater(e.held_blocks(), 0, "blocks were freed under a running save")
        self.assertTrue(e.connector.has_pending_push_work())
        gate.set()
        e.run()
        self.assertEqual(e.held_blocks(), 0)

    def engine_once_registered(self, model, ex):
        """An engine opened through the MDS in ex, retried while the node
        that was just started has not registered with it yet, and returned
        once the scheduler's and every worker's client know a node (each
        asks the MDS on its own, so one may have asked before the node
        registered)."""
        deadline = time.monotonic() + 20
        while True:
            try:
                e = self.engine(model, ex)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        clients = [e.connector.client] + [w.connector.client for w in e.workers]
        while not all(c.stats() for c in clients):
            self.assertLess(time.monotonic(), deadline, "the connectors' clients never learned the node from the MDS")
            time.sleep(0.1)
        return e

    def test_mds_discovery(self):
        mds = Server(role="mds")
        self.addCleanup(mds.close)
        node = Server(args=["--mds", mds.addr])
        self.addCleanup(node.close)
        model = "test/vllm-mds-" + uuid.uuid4().hex
        prompt = prompt_of(10, 9)
        ex = {"dfkv_mds": mds.addr, "dfkv_tenant": "pytest"}
        a = self.engine_once_registered(model, ex)
        self.run_one(a, "r1", prompt)
        self.assertEqual(a.stats.data["save_failed_blocks"], 0)
        r = self.run_one(self.engine(model, ex), "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 8)

    def test_node_joining_through_the_mds_is_used_without_a_restart(self):
        mds = Server(role="mds", args=["--heartbeat-ttl-ms", "2000"])
        self.addCleanup(mds.close)
        a_node = Server(args=["--mds", mds.addr])
        self.addCleanup(a_node.close)
        model = "test/vllm-join-" + uuid.uuid4().hex
        ex = {"dfkv_mds": mds.addr, "dfkv_tenant": "pytest", "dfkv_timeout_ms": 2000}
        a = self.engine_once_registered(model, ex)
        b_node = Server(args=["--mds", mds.addr])
        self.addCleanup(b_node.close)
        clients = [a.connector.client] + [w.connector.client for w in a.workers]
        want = sorted([a_node.addr, b_node.addr])
        deadline = time.monotonic() + 20
        while any(sorted(c.stats()) != want for c in clients):
            self.assertLess(time.monotonic(), deadline, "the connectors did not follow the directory to node B")
            time.sleep(0.1)
        prompts = [prompt_of(18, 40 + i) for i in range(6)]  # 4 whole blocks each
        for i, p in enumerate(prompts):
            self.run_one(a, f"w{i}", p)
        self.assertEqual(a.stats.data["save_failed_blocks"], 0)
        b = self.engine(model, ex)
        worker = b.workers[0].connector
        with dfkv.Client(b_node.addr, worker.namespace()) as only_b:
            hashes = [h.hex() for p in prompts for h in up.Request("h", p, b.bs).block_hashes]
            on_b = sum(only_b.exists(worker.object_key(h, 0, 0)) for h in hashes)
        self.assertTrue(0 < on_b < len(hashes), f"{on_b} of {len(hashes)} blocks on the joined node")
        for i, p in enumerate(prompts):
            r = self.run_one(b, f"r{i}", p)
            self.assertEqual(r.num_external_computed_tokens, 16, "every block loads, from either node")

    def test_mds_unreachable_falls_back_to_static_members(self):
        model = "test/vllm-mdsfb-" + uuid.uuid4().hex
        ex = extra(dfkv_mds=f"127.0.0.1:{_servers.free_port()}", dfkv_dial_timeout_ms=300, dfkv_timeout_ms=1000)
        with self.assertLogs("dfkv.vllm", logging.WARNING) as logs:
            a = self.engine(model, ex)
        # One line per connector: the scheduler's and the worker's.
        self.assertEqual(len([m for m in logs.output if "static members" in m]), 2, logs.output)
        prompt = prompt_of(10, 10)
        self.run_one(a, "r1", prompt)
        r = self.run_one(self.engine(model, extra()), "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 8, "the fallback stored under the same namespace")

    def test_node_killed_mid_transfer_then_back(self):
        node = Server()
        self.addCleanup(node.close)
        port = int(node.addr.rsplit(":", 1)[1])
        model = "test/vllm-kill-" + uuid.uuid4().hex
        ex = extra(dfkv_members=node.addr, dfkv_timeout_ms=2000, dfkv_dial_timeout_ms=300)
        prompt = prompt_of(14, 11)
        self.run_one(self.engine(model, ex), "r1", prompt)

        # The node dies between the lookup (a hit) and the load: the load
        # fails, vLLM is told which blocks, and recomputes them.
        b = self.engine(model, ex)
        w = b.workers[0].connector
        real = w.client.batch_get_sg
        w.client.batch_get_sg = lambda keys, items: (node.kill(), real(keys, items))[1]
        r = self.run_one(b, "r2", prompt)
        self.assertEqual(r.num_external_computed_tokens, 0)
        self.assertEqual(b.computed_tokens["r2"], 14 + 1)
        self.assertEqual(b.stats.data["load_failed_blocks"], 3)

        # With the node down: lookups miss, saves fail, nothing raises.
        c = self.engine(model, ex)
        r3 = self.run_one(c, "r3", prompt_of(14, 12))
        self.assertEqual(r3.num_external_computed_tokens, 0)
        self.assertEqual(c.stats.data["save_failed_blocks"], 3)

        # The node comes back (empty) at the same address: once the
        # client's back-off from the failures ends (seconds), the same
        # clients store blocks again, and another engine finds them.
        with mock.patch.object(_servers, "free_port", lambda: port):
            back = Server()
        self.addCleanup(back.close)
        deadline = time.monotonic() + 20
        seed = 100
        while True:
            failed_before = c.stats.data["save_failed_blocks"]
            seed += 1
            self.run_one(c, f"back-{seed}", prompt_of(14, seed))
            if c.stats.data["save_failed_blocks"] == failed_before:
                break
            self.assertLess(time.monotonic(), deadline, "saves still fail 20 s after the node returned")
            time.sleep(0.5)
        r5 = self.run_one(self.engine(model, ex), "r5", prompt_of(14, seed) + [1, 2])
        self.assertEqual(r5.num_external_computed_tokens, 12)

    def test_layout_change_is_a_miss(self):
        model = "test/vllm-layout-" + uuid.uuid4().hex
        prompt = prompt_of(14, 14)
        self.run_one(self.engine(model), "r1", prompt)
        for kw in ({}, {"kv_heads": 4}, {"dtype": "bfloat16"}, {"block_size": 2}, {"head_size": 4}):
            cfg, kvc = up.make_config(model, extra(dfkv_lookup_wait_ms=5000), **kw)
            sched = up.create_connector(cfg, up.KVConnectorRole.SCHEDULER, kvc)
            self.addCleanup(sched.shutdown)
            r = up.Request("q", prompt, cfg.cache_config.block_size)
            got = sched.get_num_new_matched_tokens(r, 0)
            self.assertEqual(got, (12, True) if not kw else (0, False), kw)


# ---------------------------------------------------------------- direct calls

def vllm_config(model, tp=1, **ex):
    e = extra(dfkv_tp_rank=0, dfkv_pp_rank=0, dfkv_lookup_wait_ms=5000, dfkv_load_async="0")
    e.update(ex)
    return types.SimpleNamespace(
        kv_transfer_config=types.SimpleNamespace(kv_connector_extra_config=e),
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
        self.assertEqual(sched.request_finished(req, [3, 7, 1, 9]), (True, None), "saved blocks must be held")
        m = sched.build_connector_meta(types.SimpleNamespace(scheduled_new_reqs=[], scheduled_cached_reqs=None,
                                                             num_scheduled_tokens={}))
        self.assertEqual(m.finished_sending_wanted, ["r1"])
        worker.bind_connector_metadata(m)
        worker._wait_saves()
        self.assertEqual(worker.get_finished({"r1"}), ({"r1"}, None))
        worker.clear_connector_metadata()

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

    def test_object_of_another_size_is_a_failed_block(self):
        cfg = vllm_config("test/vllm-size-" + uuid.uuid4().hex)
        worker = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)
        self.addCleanup(worker.shutdown)
        kv = {f"model.layers.{i}.self_attn.attn": torch.zeros(2, 10, 4, 2, 8, dtype=torch.bfloat16) for i in range(2)}
        worker.register_kv_caches(kv)
        hashes = dvl.token_chain_hashes(list(range(500, 508)), 4)
        full = 2 * 2 * 4 * 2 * 8 * 2  # layers * K/V * tokens * heads * dims * bytes
        worker.client.put(worker.object_key(hashes[0], 0, 0), b"\x01" * (full // 2))
        worker.client.put(worker.object_key(hashes[1], 0, 0), b"\x02" * (full + 64))
        meta = dvl.DfkvConnectorMetadata(loads=[dvl.BlockTransfer("r", hashes, [3, 4])])
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        self.assertEqual(worker.get_block_ids_with_load_errors(), {3, 4})

    def test_wait_for_layer_load_waits_only_for_its_layer(self):
        cfg = vllm_config("test/vllm-layerwait-" + uuid.uuid4().hex)
        names = [f"model.layers.{i}.self_attn.attn" for i in range(2)]
        kv = {n: torch.randn(2, 10, 4, 2, 8, dtype=torch.bfloat16) for n in names}
        hashes = dvl.token_chain_hashes(list(range(700, 712)), 4)
        saver = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)
        self.addCleanup(saver.shutdown)
        saver.register_kv_caches(kv)
        saver.bind_connector_metadata(dvl.DfkvConnectorMetadata(saves=[dvl.BlockTransfer("s", hashes, [1, 2, 3])]))
        saver.wait_for_save()
        saver._wait_saves()

        w = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)
        self.addCleanup(w.shutdown)
        kv2 = {n: torch.zeros_like(t) for n, t in kv.items()}
        w.register_kv_caches(kv2)
        self.assertEqual(w._layer_offsets, [0, 2 * 4 * 2 * 8 * 2])
        real = w.client.batch_get_range_sg
        gate, held = threading.Event(), threading.Event()

        def read(keys, offsets, items):
            if offsets[0] == w._layer_offsets[1]:
                held.set()
                gate.wait(30)
            return real(keys, offsets, items)

        w.client.batch_get_range_sg = read
        # Block 7 holds an object of another size: it fails at its first
        # read of a layer, whichever that is.
        w.client.put(w.object_key(hashes[2], 0, 0), b"\x01" * 40)
        w.bind_connector_metadata(dvl.DfkvConnectorMetadata(loads=[dvl.BlockTransfer("r", hashes, [4, 6, 7])]))
        w.start_load_kv(None)
        w.wait_for_layer_load("model.layers.9.unknown")  # not a layer of this worker: at once
        waiter = threading.Thread(target=w.wait_for_layer_load, args=(names[0],))
        waiter.start()
        waiter.join(30)
        self.assertFalse(waiter.is_alive(), "layer 0's wait waited for the held-back last layer")
        self.assertTrue(held.wait(30), "the last layer's read never started")
        self.assertTrue(torch.equal(kv2[names[0]][:, 4], kv[names[0]][:, 1]))
        self.assertTrue(torch.equal(kv2[names[0]][:, 6], kv[names[0]][:, 2]))
        self.assertFalse(kv2[names[1]].any(), "the last layer was read while held back: the reads are not per layer")
        gate.set()
        w.wait_for_layer_load(names[1])
        self.assertEqual(w.get_block_ids_with_load_errors(), {7})
        for n in names:
            self.assertTrue(torch.equal(kv2[n][:, 4], kv[n][:, 1]), n)
            self.assertTrue(torch.equal(kv2[n][:, 6], kv[n][:, 2]), n)
        w.wait_for_save()
        w.clear_connector_metadata()

    def test_request_is_not_sent_before_its_save_starts(self):
        # get_finished before wait_for_save (speculative decoding), and a
        # step without a forward that skips wait_for_save (older vLLM):
        # either way the request is reported sent only once its blocks
        # are stored.
        for i, calls_wait in enumerate((True, False)):
            cfg = vllm_config("test/vllm-order-" + uuid.uuid4().hex)
            worker = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.WORKER)
            self.addCleanup(worker.shutdown)
            kv = {f"model.layers.{n}.self_attn.attn": torch.randn(2, 10, 4, 2, 8, dtype=torch.bfloat16)
                  for n in range(2)}
            worker.register_kv_caches(kv)
            hashes = dvl.token_chain_hashes(list(range(700 + i * 50, 708 + i * 50)), 4)
            worker.bind_connector_metadata(dvl.DfkvConnectorMetadata(
                saves=[dvl.BlockTransfer("r", hashes, [3, 4])], finished_sending_wanted=["r"]))
            worker.start_load_kv(None)
            self.assertEqual(worker.get_finished({"r"}), (None, None), "sent before its save started")
            if calls_wait:
                worker.wait_for_save()
            worker.clear_connector_metadata()
            worker._wait_saves()
            self.assertEqual(worker.get_finished(set()), ({"r"}, None))
            st, _ = worker.client.batch_exist(worker._keys(hashes))
            self.assertEqual(st, [dvl.Status.OK] * 2, calls_wait)

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
        sched._reqs["p1"].block_ids = [[10, 11]]
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
            w._wait_saves()
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
        sched._lookups.clear()  # a fresh question, not the last answer
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (4, False))

    def test_multimodal_requests_without_engine_hashes_are_not_cached(self):
        cfg = vllm_config("test/vllm-mm-" + uuid.uuid4().hex)
        sched = dvl.DfkvConnector(cfg, dvl.KVConnectorRole.SCHEDULER)
        self.addCleanup(sched.shutdown)
        req = types.SimpleNamespace(request_id="r", prompt_token_ids=list(range(20)), block_hashes=None,
                                    mm_features=[object()])
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))


class VLLMImportTest(unittest.TestCase):
    def test_imports_without_vllm(self):
        # Outside vLLM (no stand-in installed) the module still imports,
        # with shims of the same names.
        code = ("import dfkv.vllm as v; assert not v.VLLM_AVAILABLE; "
                "assert hasattr(v.DfkvConnector, 'request_finished_all_groups'); "
                "s = v.DfkvConnector.build_kv_connector_stats(data=None); s.record('save', 2, 10, 0.5); "
                "assert s.reduce()['save_blocks'] == 2")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(dvl.__file__))))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)


if __name__ == "__main__":
    unittest.main()
