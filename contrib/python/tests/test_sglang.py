"""The SGLang HiCache connector, driven the way SGLang drives it (through
the stand-in in sglang_upstream.py: the dynamic-backend factory, pool
registration, the prefetch and backup threads), against real dfkv nodes."""

import importlib
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

from . import _servers
from . import sglang_upstream as up
from ._servers import CredentialsServer, Server, members, new_token

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

NEEDS_TORCH = "torch is not importable by this interpreter: apt-get install python3-torch, run /usr/bin/python3"

dsg = None
_undo = None


def setUpModule():
    # The connector is imported with the stand-in under SGLang's module
    # names, as it would be inside an SGLang process: it must subclass that
    # HiCacheStorage for the factory to accept it.
    global dsg, _undo
    _undo = up.install()
    sys.modules.pop("dfkv.sglang", None)
    dsg = importlib.import_module("dfkv.sglang")


def tearDownModule():
    _undo()
    sys.modules.pop("dfkv.sglang", None)


def wait_for(pred, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run(controller, op, submit):
    submit(op)
    if not op.done.wait(30):
        raise AssertionError(f"no answer from the controller; threads alive: {controller.threads_alive()}")
    return op


def hashes(n, tag=None):
    tag = tag or uuid.uuid4().hex[:8]
    return [f"{tag}{i:056x}" for i in range(n)]


class SGLangCase(unittest.TestCase):
    def extra(self, **kw):
        e = {"backend_name": "dfkv", "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
             "interface_v1": 1, "dfkv_members": ",".join(members()), "dfkv_tenant": "pytest"}
        e.update(kw)
        return e

    def controller(self, pool, extra=None, cls=up.HiCacheController, **kw):
        kw.setdefault("model_name", "test/sglang-" + uuid.uuid4().hex)
        c = cls(pool, extra_config=self.extra() if extra is None else extra, **kw)
        self.addCleanup(c.storage_backend.close)
        self.addCleanup(c.stop)
        return c

    def backup(self, c, keys, pages, **kw):
        return run(c, up.StorageOp(keys, up.page_indices(pages, c.page_size), **kw), c.write_storage)

    def prefetch(self, c, keys, pages, **kw):
        """The hit query, then the transfer into host pages (the
        scheduler's allocation in between is the caller's choice)."""
        q = run(c, up.StorageOp(list(keys), **kw), c.prefetch_query)
        hit = q.hash_value
        load = up.StorageOp(hit, up.page_indices(pages[:len(hit)], c.page_size), **kw)
        return hit, run(c, load, c.prefetch_load)


class ControllerTest(SGLangCase):
    def test_factory_builds_it_and_the_threads_round_trip(self):
        pool = up.KVHostPool("page_first", pages=12)
        c = self.controller(pool)
        st = c.storage_backend
        self.assertIsInstance(st, dsg.DfkvHiCacheStorage)
        self.assertIsInstance(st, up.HiCacheStorage, "the factory requires the SGLang base class")
        self.assertEqual(c.page_get_func, c._page_get_zero_copy, "interface_v1 selects the zero-copy path")
        keys = hashes(6)
        for p in range(6):
            pool.fill(p, seed=p + 1)
        want = [pool.get_data_page(p * pool.page_size) for p in range(6)]
        # Pages 0..2 and 4 are stored; 3 is not, so the prefix stops there.
        self.assertEqual(self.backup(c, keys[:3], [0, 1, 2]).completed_tokens, 3 * pool.page_size)
        self.assertEqual(self.backup(c, keys[4:5], [4]).completed_tokens, pool.page_size)
        hit, load = self.prefetch(c, keys, [6, 7, 8, 9, 10, 11])
        self.assertEqual(hit, keys[:3])
        self.assertEqual(load.completed_tokens, 3 * pool.page_size)
        for i in range(3):
            self.assertEqual(pool.get_data_page((6 + i) * pool.page_size), want[i])
        self.assertEqual(c.threads_alive(), ["prefetch_thread_func", "prefetch_io_aux_func", "backup_thread_func"])

    def test_round_trip_through_an_embedded_store(self):
        # dfkv_members: embedded runs the store inside the engine's process.
        pool = up.KVHostPool("page_first", pages=8)
        c = self.controller(pool, extra=self.extra(dfkv_members="embedded",
                                                   dfkv_embedded_config={"ram_tier_bytes": "64MiB"}))
        keys = hashes(3)
        for p in range(3):
            pool.fill(p, seed=p + 11)
        want = [pool.get_data_page(p * pool.page_size) for p in range(3)]
        self.assertEqual(self.backup(c, keys, [0, 1, 2]).completed_tokens, 3 * pool.page_size)
        hit, load = self.prefetch(c, keys, [4, 5, 6])
        self.assertEqual(hit, keys)
        self.assertEqual(load.completed_tokens, 3 * pool.page_size)
        for i in range(3):
            self.assertEqual(pool.get_data_page((4 + i) * pool.page_size), want[i])
        self.assertTrue(c.storage_backend._slot.current.embedded)

    def test_every_layout_round_trips_the_flat_page(self):
        cases = [(False, "layer_first"), (False, "page_first"), (False, "page_first_direct"), (False, "page_head"),
                 (True, "layer_first"), (True, "page_first"), (True, "page_first_direct"),
                 (True, "page_first_kv_split")]
        for mla, layout in cases:
            with self.subTest(mla=mla, layout=layout):
                pool = up.KVHostPool(layout, pages=6, mla=mla)
                copies = []
                for name in ("get_data_page", "set_from_flat_data_page"):
                    real = getattr(pool, name)

                    def counted(*a, _real=real, _name=name, **k):
                        copies.append(_name)
                        return _real(*a, **k)
                    setattr(pool, name, counted)
                c = self.controller(pool, is_mla=mla)
                keys = hashes(2)
                for p in range(2):
                    pool.fill(p, seed=7 * p + 3)
                stored = [pool.page_bytes(p) for p in range(2)]
                self.assertEqual(self.backup(c, keys, [0, 1]).completed_tokens, 2 * pool.page_size)
                hit, load = self.prefetch(c, keys, [3, 4])
                self.assertEqual(load.completed_tokens, 2 * pool.page_size)
                self.assertEqual([pool.page_bytes(3), pool.page_bytes(4)], stored)
                if layout == "layer_first" and pool.layer_num > 1:
                    self.assertTrue(copies, "layer_first parts are not the flat page: the copy path")
                else:
                    self.assertEqual(copies, [], f"{layout} must move pages zero-copy")
                if layout != "page_first_kv_split":
                    # The stored object is the flat data page, whichever path
                    # wrote it, so SGLang's generic path reads it too.
                    flat = pool.get_data_page(0)
                    self.assertEqual(bytes(c.storage_backend.get(keys[0], bytearray(len(flat)))), bytes(flat))

    def test_generic_path_and_zero_copy_share_pages(self):
        model = "test/sglang-" + uuid.uuid4().hex
        pool = up.KVHostPool("page_head", pages=6)
        extra = self.extra()
        del extra["interface_v1"]
        with self.assertLogs("dfkv.sglang", "WARNING") as logs:
            generic = self.controller(pool, extra=extra, model_name=model)
        self.assertIn("interface_v1", "\n".join(logs.output))
        self.assertEqual(generic.page_set_func, generic._generic_page_set)
        keys = hashes(2)
        pool.fill(0, 1)
        pool.fill(1, 2)
        self.assertEqual(self.backup(generic, keys, [0, 1]).completed_tokens, 2 * pool.page_size)
        reader_pool = up.KVHostPool("page_head", pages=6)
        zc = self.controller(reader_pool, model_name=model)
        hit, load = self.prefetch(zc, keys, [2, 3])
        self.assertEqual(load.completed_tokens, 2 * pool.page_size)
        self.assertEqual(reader_pool.page_bytes(2), pool.page_bytes(0))
        self.assertEqual(reader_pool.page_bytes(3), pool.page_bytes(1))

    def test_unknown_layout_is_refused_at_registration(self):
        pool = up.KVHostPool("page_first")
        pool.layout = "page_sideways"
        with self.assertRaises(ValueError) as cm:
            self.controller(pool)
        self.assertIn("page_sideways", str(cm.exception))
        st = dsg.DfkvHiCacheStorage(up.HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m",
                                                            extra_config=self.extra()), {})
        mamba = up.MambaHostPool()
        mamba.layout = "ring_buffer"
        with self.assertRaises(ValueError) as cm:
            st.register_mem_host_pool_v2(mamba, up.PoolName.MAMBA)
        self.assertIn("ring_buffer", str(cm.exception))
        self.assertIn("mamba", str(cm.exception))

    def test_attention_dp_replicas_share_pages_and_tp_pp_do_not(self):
        model = "test/sglang-" + uuid.uuid4().hex
        p0, p1 = up.KVHostPool("page_first"), up.KVHostPool("page_first")
        dp0 = self.controller(p0, model_name=model, dp_rank=0, dp_size=2)
        dp1 = self.controller(p1, model_name=model, dp_rank=1, dp_size=4)
        a, b = dp0.storage_backend, dp1.storage_backend
        self.assertEqual(a.namespace().encode(), b.namespace().encode())
        self.assertEqual(a.object_key("k"), b.object_key("k"))
        self.assertIn(b"|dp=1:0|", a.object_key("k"))
        keys = hashes(2)
        p0.fill(0, 5)
        p0.fill(1, 6)
        self.backup(dp0, keys, [0, 1])
        hit, load = self.prefetch(dp1, keys, [2, 3])
        self.assertEqual(load.completed_tokens, 2 * p1.page_size, "a DP replica reads its sibling's pages")
        self.assertEqual(p1.page_bytes(2), p0.page_bytes(0))
        tp1 = dsg.DfkvHiCacheStorage(up.HiCacheStorageConfig(1, 2, 0, 1, 0, 1, False, False, True, model,
                                                             extra_config=self.extra()), {})
        pp1 = dsg.DfkvHiCacheStorage(up.HiCacheStorageConfig(0, 1, 1, 2, 0, 1, False, False, True, model,
                                                             extra_config=self.extra()), {})
        self.assertIn(b"|tp=2:1|", tp1.object_key("k"))
        self.assertIn(b"|pp=2:1|", pp1.object_key("k"))


class IdentityTest(SGLangCase):
    def config(self, **kw):
        base = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
                    enable_storage_metrics=False, is_page_first_layout=True,
                    model_name="test/sglang-" + uuid.uuid4().hex, extra_config=self.extra())
        base.update(kw)
        return up.HiCacheStorageConfig(**base)

    def test_namespace_and_keys(self):
        st = dsg.DfkvHiCacheStorage(self.config(tp_size=4, tp_rank=2), {})
        st.register_mem_pool_host(up.KVHostPool("page_first"))
        d = st.namespace()
        self.assertEqual(d.layout_id, "sglang-hicache/raw-v1")
        self.assertEqual((d.block_tokens, d.layer_geometry.layers, d.layer_geometry.kv_heads), (4, 2, 8))
        self.assertEqual((d.topology_sizes.tp, d.topology_sizes.dp), (4, 1))
        self.assertIn(b"|tp=4:2|", st.object_key("ab"))
        mla = dsg.DfkvHiCacheStorage(self.config(extra_config=self.extra(
            dfkv_dtype="float8_e4m3fn", dfkv_page_size=64, dfkv_layers=61, dfkv_kv_heads=1, dfkv_head_dim=576),
            tp_size=8, tp_rank=3, is_mla_model=True), {})
        self.assertIn(b"|tp=8:-1|", mla.object_key("ab"), "MLA pages are shared by all TP ranks")
        self.assertEqual(mla.namespace().dtype, "float8_e4m3fn")
        # '|' and '=' in an engine key cannot forge another key.
        self.assertIn(b"hash=a%7Cb%3Dc|", st.object_key("a|b=c"))
        # Under MLA the sidecars follow the KV pages (replicated), except
        # Mamba state, which every TP rank writes for itself.
        mla.register_mem_host_pool_v2(up.IndexerHostPool(page_size=64), up.PoolName.INDEXER)
        mla.register_mem_host_pool_v2(up.MambaHostPool(), up.PoolName.MAMBA)
        self.assertIn(b"|tp=8:-1|", mla._plan_keys(mla._plans["indexer"], ["ab"])[0])
        self.assertIn(b"|tp=8:3|", mla._plan_keys(mla._plans["mamba"], ["ab"])[0])
        self.assertIn(b"pool=mamba|", mla._plan_keys(mla._plans["mamba"], ["ab"])[0])

    def test_missing_endpoints_is_a_clear_error(self):
        with mock.patch.dict(os.environ, {"DFKV_CLIENT_MEMBERS": "", "DFKV_CLIENT_MDS": "",
                                          "DFKV_MEMBERS": "", "DFKV_MDS_ADDRS": ""}):
            with self.assertRaises(ValueError) as cm:
                dsg.DfkvHiCacheStorage(self.config(extra_config={}), {})
        self.assertIn("dfkv_members", str(cm.exception))
        self.assertIn("dfkv_mds", str(cm.exception))

    def test_no_model_name_is_a_clear_error(self):
        # The model is part of the identity: without one, two models of
        # the same geometry would share pages.
        with self.assertRaises(ValueError) as cm:
            dsg.DfkvHiCacheStorage(self.config(model_name=None), {})
        self.assertIn("dfkv_model_id", str(cm.exception))
        named = dsg.DfkvHiCacheStorage(self.config(model_name=None, extra_config=self.extra(dfkv_model_id="m")), {})
        named.close()

    def test_imports_without_sglang(self):
        code = ("import sys, dfkv.sglang as m; assert 'sglang' not in sys.modules; "
                "assert not m.SGLANG_AVAILABLE; print(m.DfkvStorageMetrics().hits)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "0"), out.stderr)


class HybridPoolsTest(SGLangCase):
    def test_v2_pools_round_trip_through_the_hybrid_controller(self):
        kv, mamba, idx = up.KVHostPool("page_first", pages=8), up.MambaHostPool(slots=4), up.IndexerHostPool(pages=8)
        entries = [up.PoolEntry(up.PoolName.KV, kv), up.PoolEntry(up.PoolName.MAMBA, mamba),
                   up.PoolEntry(up.PoolName.INDEXER, idx)]
        c = self.controller(kv, cls=up.HybridCacheController, entries=entries)
        keys = hashes(3)
        for p in range(3):
            kv.fill(p, p + 11)
            idx.fill(p, p + 21)
        mamba.fill(0, 31)

        def transfers(slot):
            return [up.PoolTransfer(up.PoolName.MAMBA, host_indices=up.indices([slot]), keys=[keys[-1]],
                                    hit_policy=up.PoolHitPolicy.TRAILING_PAGES),
                    up.PoolTransfer(up.PoolName.INDEXER, indices_from_pool=up.PoolName.KV)]
        done = self.backup(c, keys, [0, 1, 2], pool_transfers=transfers(0))
        self.assertEqual(done.completed_tokens, 3 * kv.page_size)
        self.assertEqual(done.pool_hits, {up.PoolName.MAMBA: 1, up.PoolName.INDEXER: 3})
        hit, load = self.prefetch(c, keys, [4, 5, 6], pool_transfers=transfers(2))
        self.assertEqual(hit, keys)
        self.assertEqual(load.completed_tokens, 3 * kv.page_size)
        self.assertEqual(load.pool_hits, {up.PoolName.MAMBA: 1})
        for p in range(3):
            self.assertEqual(kv.page_bytes(4 + p), kv.page_bytes(p))
            self.assertEqual(idx.page_bytes(4 + p), idx.page_bytes(p))
        self.assertEqual(mamba.page_bytes(2), mamba.page_bytes(0))

        st = c.storage_backend
        # Trailing policy: Mamba state exists for page 1 only (the end of a
        # 2-page prefix), so of 3 KV pages only 2 are usable.
        more = hashes(3)
        for p in range(3):
            kv.fill(p, p + 40)
        self.assertEqual(st.batch_set_v1(more, up.page_indices([0, 1, 2], kv.page_size)), [True] * 3)
        self.assertEqual(st.batch_set_v2([up.PoolTransfer(up.PoolName.MAMBA, host_indices=up.indices([0]),
                                                          keys=[more[1]])]), {up.PoolName.MAMBA: [True]})
        trailing = up.PoolTransfer(up.PoolName.MAMBA, keys=[more[2]], hit_policy=up.PoolHitPolicy.TRAILING_PAGES)
        res = st.batch_exists_v2(more, [trailing])
        self.assertIsInstance(res, up.PoolTransferResult)
        self.assertEqual(res.kv_hit_pages, 2)
        # All-pages policy: the indexer has none of these pages.
        res = st.batch_exists_v2(more, [up.PoolTransfer(up.PoolName.INDEXER, indices_from_pool=up.PoolName.KV)])
        self.assertEqual(res.kv_hit_pages, 0)
        # A pool never registered, or indices that do not match the keys:
        # misses, not exceptions.
        self.assertEqual(st.batch_get_v2([up.PoolTransfer(up.PoolName.SWA, host_indices=up.indices([0]),
                                                          keys=["x"])]), {up.PoolName.SWA: [False]})
        self.assertEqual(st.batch_set_v2([up.PoolTransfer(up.PoolName.MAMBA, host_indices=up.indices([0, 1]),
                                                          keys=["x"])]), {up.PoolName.MAMBA: [False]})


    def test_exists_v2_prefix_holds_for_every_pool_at_once(self):
        kv, mamba, idx = up.KVHostPool("page_first", pages=8), up.MambaHostPool(slots=4), up.IndexerHostPool(pages=8)
        entries = [up.PoolEntry(up.PoolName.KV, kv), up.PoolEntry(up.PoolName.MAMBA, mamba),
                   up.PoolEntry(up.PoolName.INDEXER, idx)]
        c = self.controller(kv, cls=up.HybridCacheController, entries=entries)
        st = c.storage_backend
        keys = hashes(3)
        for p in range(3):
            kv.fill(p, p + 1)
        self.assertEqual(st.batch_set_v1(keys, up.page_indices([0, 1, 2], kv.page_size)), [True] * 3)
        idx.fill(0, 4)
        mamba.fill(0, 5)
        # The indexer holds page 0 only; Mamba state exists at the end of
        # page 2 only.
        self.assertEqual(st.batch_set_v2([
            up.PoolTransfer(up.PoolName.INDEXER, host_indices=up.page_indices([0], idx.page_size), keys=keys[:1]),
            up.PoolTransfer(up.PoolName.MAMBA, host_indices=up.indices([0]), keys=[keys[2]])]),
            {up.PoolName.INDEXER: [True], up.PoolName.MAMBA: [True]})

        def query():
            return [up.PoolTransfer(up.PoolName.MAMBA, keys=[keys[2]], hit_policy=up.PoolHitPolicy.TRAILING_PAGES),
                    up.PoolTransfer(up.PoolName.INDEXER, indices_from_pool=up.PoolName.KV)]
        for transfers in (query(), query()[::-1]):
            self.assertEqual(st.batch_exists_v2(keys, transfers).kv_hit_pages, 0,
                             "no prefix has both its indexer pages and Mamba state at its end")
        hit, _ = self.prefetch(c, keys, [4, 5, 6], pool_transfers=query())
        self.assertEqual(hit, [])
        # With Mamba state at the end of page 0 as well, one page is usable.
        self.assertEqual(st.batch_set_v2([up.PoolTransfer(up.PoolName.MAMBA, host_indices=up.indices([0]),
                                                          keys=[keys[0]])]), {up.PoolName.MAMBA: [True]})
        for transfers in (query(), query()[::-1]):
            self.assertEqual(st.batch_exists_v2(keys, transfers).kv_hit_pages, 1)

    def test_mla_ranks_share_kv_and_keep_their_own_mamba_state(self):
        model = "test/sglang-" + uuid.uuid4().hex

        def rank(r):
            kv, mamba, idx = up.KVHostPool("page_first", pages=8, mla=True), up.MambaHostPool(slots=4), \
                up.IndexerHostPool(pages=8)
            entries = [up.PoolEntry(up.PoolName.KV, kv), up.PoolEntry(up.PoolName.MAMBA, mamba),
                       up.PoolEntry(up.PoolName.INDEXER, idx)]
            c = self.controller(kv, cls=up.HybridCacheController, entries=entries, model_name=model, is_mla=True,
                                tp_rank=r, tp_size=2)
            return c, kv, mamba, idx
        c0, kv0, m0, i0 = rank(0)
        c1, kv1, m1, i1 = rank(1)
        keys = hashes(2)
        for p in range(2):
            kv0.fill(p, p + 1)
            i0.fill(p, p + 5)
        m0.fill(0, 50)
        m1.fill(0, 60)  # TP-sharded state: each rank has its own

        def transfers(slot):
            return [up.PoolTransfer(up.PoolName.MAMBA, host_indices=up.indices([slot]), keys=[keys[-1]],
                                    hit_policy=up.PoolHitPolicy.TRAILING_PAGES),
                    up.PoolTransfer(up.PoolName.INDEXER, indices_from_pool=up.PoolName.KV)]
        self.assertEqual(self.backup(c0, keys, [0, 1], pool_transfers=transfers(0)).pool_hits,
                         {up.PoolName.MAMBA: 1, up.PoolName.INDEXER: 2})
        self.assertEqual(self.backup(c1, keys, [0, 1], pool_transfers=transfers(0)).pool_hits,
                         {up.PoolName.MAMBA: 1}, "rank 1 writes its Mamba state, not the replicated pools")
        hit, load = self.prefetch(c1, keys, [4, 5], pool_transfers=transfers(2))
        self.assertEqual((hit, load.completed_tokens), (keys, 2 * kv1.page_size))
        self.assertEqual(load.pool_hits, {up.PoolName.MAMBA: 1})
        for p in range(2):
            self.assertEqual(kv1.page_bytes(4 + p), kv0.page_bytes(p))
            self.assertEqual(i1.page_bytes(4 + p), i0.page_bytes(p))
        self.assertEqual(m1.page_bytes(2), m1.page_bytes(0))
        self.assertNotEqual(m1.page_bytes(2), m0.page_bytes(0))


class ReopenTest(SGLangCase):
    def test_a_slow_failing_open_stalls_no_other_caller(self):
        extra = self.extra(dfkv_mds="127.0.0.1:1", dfkv_reopen_interval_s=0.4, dfkv_dtype="uint8",
                           dfkv_page_size=4, dfkv_layers=2, dfkv_kv_heads=2, dfkv_head_dim=4)
        del extra["dfkv_members"]
        st = dsg.DfkvHiCacheStorage(types.SimpleNamespace(
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
            enable_storage_metrics=False, model_name="test/sglang-" + uuid.uuid4().hex, extra_config=extra), {})
        self.addCleanup(st.close)
        opens = []

        def slow_failing_open():  # an MDS that does not answer within the dial timeout
            opens.append(time.monotonic())
            time.sleep(1.0)
            raise dfkv.DfkvError("MDS did not answer", dfkv.Status.UNAVAILABLE)
        st._open = slow_failing_open
        keys = hashes(2)
        first = threading.Thread(target=st.batch_exists, args=(keys,), daemon=True)
        first.start()
        wait_for(lambda: opens, "the first open")
        t0 = time.monotonic()
        self.assertEqual(st.batch_exists(keys), 0)
        self.assertLess(time.monotonic() - t0, 0.3, "another thread's open holds nobody up")
        first.join(10)
        # Just after the failed open: a miss at once, no new attempt.
        t0 = time.monotonic()
        self.assertEqual(st.batch_exists(keys), 0)
        self.assertLess(time.monotonic() - t0, 0.3)
        self.assertEqual(len(opens), 1)
        time.sleep(0.5)
        st.batch_exists(keys)
        self.assertEqual(len(opens), 2, "retried once dfkv_reopen_interval_s has passed")


class TokenTest(SGLangCase):
    """dfkv_token in the extra config reaches the client: the backend
    works against a node that requires credentials, and with a token that
    does not cover its tenant it misses (never raises) and logs without
    the token."""

    def test_dfkv_token_reaches_the_client(self):
        tok, other = new_token("sglang"), new_token("other-tenant")
        node = CredentialsServer({tok: (["pytest"], ["read", "write", "remove"]),
                                  other: (["someone-else"], ["read", "write", "remove"])})
        self.addCleanup(node.close)
        model = "test/sglang-" + uuid.uuid4().hex
        with mock.patch.dict(os.environ, {"DFKV_CLIENT_TOKEN": "", "DFKV_TOKEN": ""}):
            pool = up.KVHostPool("page_first", pages=6)
            c = self.controller(pool, extra=self.extra(dfkv_members=node.addr, dfkv_token=tok), model_name=model)
            keys = hashes(3)
            for p in range(3):
                pool.fill(p, seed=p + 21)
            want = [pool.get_data_page(p * pool.page_size) for p in range(3)]
            self.assertEqual(self.backup(c, keys, [0, 1, 2]).completed_tokens, 3 * pool.page_size)
            hit, load = self.prefetch(c, keys, [3, 4, 5])
            self.assertEqual(hit, keys)
            for i in range(3):
                self.assertEqual(pool.get_data_page((3 + i) * pool.page_size), want[i])
            self.assertNotIn(tok, repr(c.storage_backend.endpoints))

            # The same pages through a token of another tenant: misses, and
            # a log line that names the refusal, not the token.
            st = self.controller(up.KVHostPool("page_first", pages=6), model_name=model,
                                 extra=self.extra(dfkv_members=node.addr, dfkv_token=other)).storage_backend
            with self.assertLogs("dfkv", "WARNING") as logs:
                self.assertEqual(st.batch_exists(keys), 0)
                self.assertEqual(st.batch_get_v1(keys, up.page_indices([0, 1, 2], 4)), [False] * 3)
            text = "\n".join(logs.output)
            self.assertIn("FORBIDDEN", text)
            self.assertNotIn(other, text)
            self.assertNotIn(tok, text)


class StatsAndClearTest(SGLangCase):
    def test_get_stats_reports_real_counters(self):
        pool = up.KVHostPool("page_first", pages=8)
        c = self.controller(pool, enable_storage_metrics=True)
        st = c.storage_backend
        page = len(pool.get_data_page(0))
        keys = hashes(4)
        self.backup(c, keys[:3], [0, 1, 2])
        self.assertEqual(st.batch_get_v1(keys, up.page_indices([4, 5, 6, 7], pool.page_size)),
                         [True, True, True, False])
        m = st.get_stats()
        self.assertIsInstance(m, up.StorageMetrics)
        collector = up.StorageMetricsCollector()
        collector.log_storage_metrics(m)  # asserts the type, reads the lists
        self.assertEqual((m.backup_pgs, m.prefetch_pgs), ([3], [4]))
        self.assertTrue(m.backup_bandwidth[0] > 0 and m.prefetch_bandwidth[0] > 0)
        self.assertEqual((m.hits, m.misses, m.pages_written), (3, 1, 3))
        self.assertEqual((m.bytes_written, m.bytes_read), (3 * page, 3 * page))
        self.assertTrue(m.get_calls == 1 and m.get_seconds > 0 and m.set_calls == 1 and m.set_seconds > 0)
        again = st.get_stats()
        self.assertEqual((again.prefetch_pgs, again.backup_pgs), ([], []), "lists are handed over once")
        self.assertEqual(again.hits, 3, "counters run on")

    def test_metric_series_stay_bounded_without_get_stats(self):
        pool = up.KVHostPool("page_first", pages=8)
        c = self.controller(pool, enable_storage_metrics=True)
        st = c.storage_backend
        keys = hashes(1)
        with mock.patch.object(dsg, "_MAX_SERIES", 3):
            for _ in range(5):
                self.assertEqual(st.batch_set_v1(keys, up.page_indices([0], pool.page_size)), [True])
                self.assertEqual(st.batch_get_v1(keys, up.page_indices([1], pool.page_size)), [True])
        m = st.get_stats()
        self.assertEqual((len(m.backup_pgs), len(m.prefetch_pgs)), (3, 3), "each series stops at its cap")
        self.assertEqual((m.pages_written, m.hits), (5, 5), "the counters still count every call")

    def test_clear_removes_what_this_backend_wrote(self):
        model = "test/sglang-" + uuid.uuid4().hex
        pool = up.KVHostPool("page_first", pages=4)
        a = self.controller(pool, model_name=model).storage_backend
        b = self.controller(up.KVHostPool("page_first", pages=4), model_name=model).storage_backend
        mine, theirs = hashes(3), hashes(1)
        self.assertEqual(a.batch_set_v1(mine, up.page_indices([0, 1, 2], pool.page_size)), [True] * 3)
        self.assertEqual(b.batch_set_v1(theirs, up.page_indices([0], pool.page_size)), [True])
        self.assertEqual(a.batch_exists(mine), 3)
        self.assertTrue(a.clear())
        self.assertEqual(a.batch_exists(mine), 0)
        self.assertEqual(a.batch_exists(theirs), 1, "another process's pages are not this backend's to clear")


class FaultTest(SGLangCase):
    def test_wrong_size_page_is_a_miss_with_one_log_line(self):
        pool = up.KVHostPool("page_first", pages=4)
        c = self.controller(pool)
        st = c.storage_backend
        keys = hashes(3)
        page = len(pool.get_data_page(0))
        with dfkv.Client(members(), st.namespace()) as raw:  # another writer, same namespace
            raw.put(st.object_key(keys[0]), b"x" * (page - 8))
            raw.put(st.object_key(keys[1]), b"y" * (page + 8))
        pool.fill(2, 9)
        self.assertEqual(st.batch_set_v1(keys[2:], up.page_indices([2], pool.page_size)), [True])
        with self.assertLogs("dfkv.sglang", "WARNING") as logs:
            got = st.batch_get_v1(keys, up.page_indices([0, 1, 3], pool.page_size))
        self.assertEqual(got, [False, False, True])
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("another size", logs.output[0])
        self.assertEqual(pool.page_bytes(3), pool.page_bytes(2))
        self.assertEqual(st.get_stats().refused_pages, 2)
        # The page exists, but the engine never takes it as loaded KV.
        hit, load = self.prefetch(c, keys[:1], [1])
        self.assertEqual((hit, load.completed_tokens), (keys[:1], 0))

    def test_layout_change_between_writer_and_reader_is_a_miss(self):
        model = "test/sglang-" + uuid.uuid4().hex
        w_pool, r_pool = up.KVHostPool("page_first"), up.KVHostPool("page_head")
        writer = self.controller(w_pool, model_name=model)
        reader = self.controller(r_pool, model_name=model)
        keys = hashes(2)
        w_pool.fill(0, 1)
        w_pool.fill(1, 2)
        self.assertEqual(self.backup(writer, keys, [0, 1]).completed_tokens, 2 * w_pool.page_size)
        self.assertEqual(reader.storage_backend.batch_exists(keys), 0)
        self.assertEqual(reader.storage_backend.batch_get_v1(keys, up.page_indices([0, 1], 4)), [False, False])

    def test_node_killed_mid_transfer_then_back(self):
        node = Server()
        self.addCleanup(node.close)
        port = int(node.addr.rsplit(":", 1)[1])
        pool = up.KVHostPool("page_first", pages=64, page_size=16, layers=8, heads=8, head_dim=128)
        c = self.controller(pool, extra=self.extra(dfkv_members=node.addr, dfkv_timeout_ms=3000))
        keys = hashes(64)
        ops, stop = [], threading.Event()

        def writer():
            while not stop.is_set():
                ops.append(self.backup(c, keys, list(range(64))))
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        wait_for(lambda: len(ops) >= 1, "a first backup")
        node.kill()  # SIGKILL, with writes in flight
        time.sleep(0.5)
        stop.set()
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual(ops[0].completed_tokens, 64 * 16)
        self.assertLess(ops[-1].completed_tokens, 64 * 16, "writes after the kill fail")
        self.assertEqual(c.threads_alive(), ["prefetch_thread_func", "prefetch_io_aux_func", "backup_thread_func"])
        hit, load = self.prefetch(c, keys[:4], list(range(4)))
        self.assertEqual((hit, load.completed_tokens), ([], 0))
        self.assertEqual(c.storage_backend.batch_get_v1(keys[:2], up.page_indices([0, 1], 16)), [False, False])
        # The node comes back on its address (empty): pages flow again.
        with mock.patch.object(_servers, "free_port", return_value=port):
            back = Server()
        self.addCleanup(back.close)
        pool.fill(0, 77)
        wait_for(lambda: self.backup(c, keys[:1], [0]).completed_tokens == 16, "writes to the returned node")
        hit, load = self.prefetch(c, keys[:1], [1])
        self.assertEqual(load.completed_tokens, 16)
        self.assertEqual(pool.page_bytes(1), pool.page_bytes(0))
        self.assertEqual(len(c.threads_alive()), 3)


def mds_members(mds_addr):
    """Members the MDS lists now (via a throwaway client's stats)."""
    try:
        with dfkv.Client(None, b"probe", mds=mds_addr) as cl:
            return sorted(cl.stats())
    except dfkv.DfkvError:
        return []


class MDSTest(SGLangCase):
    def test_node_set_changes_without_restart(self):
        mds = Server(role="mds", args=["--heartbeat-ttl-ms", "2000"])
        self.addCleanup(mds.close)
        a = Server(args=["--mds", mds.addr])
        self.addCleanup(a.close)
        wait_for(lambda: mds_members(mds.addr) == [a.addr], "node A registered")
        pool = up.KVHostPool("page_first", pages=32)
        extra = self.extra(dfkv_mds=mds.addr)
        del extra["dfkv_members"]
        c = self.controller(pool, extra=extra)
        st = c.storage_backend
        old = hashes(8)
        for p in range(8):
            pool.fill(p, p)
        self.assertEqual(self.backup(c, old, list(range(8))).completed_tokens, 8 * 4)
        b = Server(args=["--mds", mds.addr])
        self.addCleanup(b.close)
        wait_for(lambda: sorted(st.client.stats()) == sorted([a.addr, b.addr]), "the connector to see node B")
        new = hashes(16)
        for p in range(16):
            pool.fill(p, 100 + p)
        want = [pool.page_bytes(p) for p in range(16)]
        self.assertEqual(self.backup(c, new, list(range(16))).completed_tokens, 16 * 4)
        hit, load = self.prefetch(c, new, list(range(16, 32)))
        self.assertEqual(load.completed_tokens, 16 * 4)
        self.assertEqual([pool.page_bytes(16 + p) for p in range(16)], want)
        with dfkv.Client(b.addr, st.namespace()) as only_b:
            on_b = [k for k in new if only_b.exists(st.object_key(k))]
        self.assertTrue(0 < len(on_b) < 16, f"{len(on_b)} of 16 pages on the new node")
        b.kill()
        got = st.batch_get_v1(new, up.page_indices(range(16, 32), 4))
        self.assertEqual(got, [k not in on_b for k in new], "the dead node's pages miss, the others hit")
        self.assertLessEqual(st.batch_exists(new), 16)
        self.assertEqual(len(c.threads_alive()), 3)
        # Once the directory drops B, every page goes to A again.
        wait_for(lambda: all(st.batch_set_v1(on_b, up.page_indices(range(len(on_b)), 4))), "writes after B left")

    def test_unreachable_mds_falls_back_to_static_members(self):
        dead = f"127.0.0.1:{_servers.free_port()}"
        pool = up.KVHostPool("page_first")
        with self.assertLogs("dfkv.sglang", "WARNING") as logs:
            c = self.controller(pool, extra=self.extra(dfkv_mds=dead))
        self.assertEqual(sum("falling back" in line for line in logs.output), 1, logs.output)
        keys = hashes(2)
        pool.fill(0, 3)
        self.assertEqual(self.backup(c, keys[:1], [0]).completed_tokens, 4)
        self.assertEqual(c.storage_backend.batch_get_v1(keys, up.page_indices([1, 2], 4)), [True, False])
        self.assertEqual(pool.page_bytes(1), pool.page_bytes(0))

    def test_mds_down_gives_misses_until_it_answers(self):
        port = _servers.free_port()
        pool = up.KVHostPool("page_first")
        extra = self.extra(dfkv_mds=f"127.0.0.1:{port}", dfkv_reopen_interval_s=0.2)
        del extra["dfkv_members"]
        with self.assertLogs("dfkv.sglang", "WARNING"):
            c = self.controller(pool, extra=extra)
        st = c.storage_backend
        keys = hashes(2)
        self.assertEqual(st.batch_set_v1(keys, up.page_indices([0, 1], 4)), [False, False])
        self.assertEqual(st.batch_get_v1(keys, up.page_indices([0, 1], 4)), [False, False])
        self.assertEqual(st.batch_exists(keys), 0)
        self.assertEqual(self.prefetch(c, keys, [2, 3])[0], [])
        with mock.patch.object(_servers, "free_port", return_value=port):
            mds = Server(role="mds")
        self.addCleanup(mds.close)
        node = Server(args=["--mds", mds.addr])
        self.addCleanup(node.close)
        wait_for(lambda: st.batch_set_v1(keys, up.page_indices([0, 1], 4)) == [True, True], "the MDS to answer")
        self.assertEqual(st.batch_exists(keys), 2)


class GenericPathTest(SGLangCase):
    def backend(self, **geometry):
        g = dict(dfkv_dtype="uint8", dfkv_page_size=4, dfkv_layers=2, dfkv_kv_heads=2, dfkv_head_dim=4)
        g.update(geometry)
        st = dsg.DfkvHiCacheStorage(types.SimpleNamespace(
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
            enable_storage_metrics=False, model_name="test/sglang-" + uuid.uuid4().hex,
            extra_config=self.extra(**g)), {})
        self.addCleanup(st.close)
        return st

    def test_set_takes_target_location_and_never_raises(self):
        st = self.backend()
        page = bytearray(b"p" * 256)
        # The page as target_location, value left out: stored.
        self.assertTrue(st.set("tl0", target_location=page))
        self.assertEqual(bytes(st.get("tl0")), bytes(page))
        self.assertIsNone(st.get("tl0", bytearray(128)), "a wrong-size target is a miss, not a partial page")
        # Nothing to store, or a page the client cannot read: False and a
        # warning, not an exception into the cache controller.
        with self.assertLogs("dfkv.sglang", "WARNING"):
            self.assertFalse(st.set("tl1"))
        with self.assertLogs("dfkv.sglang", "WARNING"):
            self.assertFalse(st.set("tl2", value=object()))
        # v1 calls without a registered pool: misses, not exceptions.
        self.assertEqual(st.batch_get_v1(["tl0"], up.page_indices([0], 4)), [False])

    @unittest.skipIf(torch is None, NEEDS_TORCH)
    def test_generic_tensor_path(self):
        st = self.backend(dfkv_dtype="bfloat16")
        pages = [torch.randn(64, dtype=torch.bfloat16) for _ in range(3)]
        self.assertTrue(st.batch_set(["p0", "p1", "p2"], pages))
        self.assertEqual(st.batch_exists(["p0", "p1", "p2", "p3"]), 3)
        out = st.batch_get(["p0", "p3", "p2"], [torch.empty(64, dtype=torch.bfloat16) for _ in range(3)])
        self.assertTrue(torch.equal(out[0], pages[0]) and out[1] is None and torch.equal(out[2], pages[2]))
