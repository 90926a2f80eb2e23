"""Connector keys and settings: MLA chunks of different LMCache workers,
dfkv:// URL parameters, and settings that must be refused at start. Pure
Python except the SGLang test, which runs on an embedded store (libdfkv
needed, skipped without it)."""

import asyncio
import importlib
import sys
import types
import unittest
import uuid

import dfkv
from dfkv import _lib

from . import lmcache_upstream as lup
from . import sglang_upstream as sup


def _have_lib():
    try:
        _lib.load()
        return True
    except OSError:
        return False


class LMCacheMLAWorkerKeyTest(unittest.TestCase):
    """LMCache itself decides when MLA chunks of different workers are one
    object: its RemoteBackend hands a worker's lookups and reads to worker
    0's key (key.with_new_worker_id(0)) only in its
    remote_enable_mla_worker_id_as0 mode. With that mode and
    save_only_first_rank off (used with pipeline parallelism) every worker
    stores its own key, and workers of different stages hold different
    layers under one namespace: their objects must stay apart, or stage 1
    restores stage 0's layers. In the default mode they still share one."""

    def _conn(self, worker_id, world_size, as0=False):
        # as0: LMCache's defaults (the worker-id-as-0 mode on for MLA);
        # otherwise the mode and save_only_first_rank are off.
        extra = {"remote_storage_plugin.dfkv.members": "127.0.0.1:1"}
        if not as0:
            extra.update({"save_only_first_rank": False, "remote_enable_mla_worker_id_as0": False})
        config = lup.LMCacheEngineConfig(chunk_size=16, remote_storage_plugins=["dfkv"], extra_config=extra)
        meta = lup.LMCacheMetadata(model_name="test/mla-pp", world_size=world_size, local_world_size=world_size,
                                   worker_id=worker_id, local_worker_id=worker_id, kv_dtype=lup.float16,
                                   kv_shape=(4, 1, 16, 1, 8), use_mla=True, chunk_size=16)
        conn = self.mod.DfkvConnector(loop=None, local_cpu_backend=lup.LocalCPUBackend(config, meta),
                                      config=config, metadata=meta, plugin_name="dfkv")
        self.addCleanup(lambda: asyncio.run(conn.close()))
        return conn, meta

    def setUp(self):
        self.mod = self.enterContext(lup.installed())

    def test_mla_keys_of_different_workers_stay_apart_when_lmcache_keeps_them_apart(self):
        # TP 1 x PP 2: worker 0 is stage 0, worker 1 is stage 1 (other layers).
        c0, m0 = self._conn(0, 2)
        c1, m1 = self._conn(1, 2)
        self.assertEqual(c0.namespace().encode(), c1.namespace().encode(),
                         "same model, same per-stage shape: one namespace (precondition)")
        k0 = lup.CacheEngineKey(m0.model_name, 2, 0, 0x1234, m0.kv_dtype)
        k1 = lup.CacheEngineKey(m1.model_name, 2, 1, 0x1234, m1.kv_dtype)
        self.assertNotEqual(c0.object_key(k0), c1.object_key(k1),
                            "two workers' chunks that LMCache keys apart land on one dfkv object")


    def test_default_mode_hands_every_worker_worker_zeros_object(self):
        c0, m0 = self._conn(0, 2)
        c1, m1 = self._conn(1, 2)
        k0 = lup.CacheEngineKey(m0.model_name, 2, 0, 0x1234, m0.kv_dtype)
        k1 = lup.CacheEngineKey(m1.model_name, 2, 1, 0x1234, m1.kv_dtype)
        self.assertEqual(c1.object_key(k1.with_new_worker_id(0)), c0.object_key(k0),
                         "worker 1's lookups in LMCache's worker-id-as-0 mode name another object than worker 0 wrote")

    def test_non_blocking_get_of_worker_1_names_the_object_worker_0_stored(self):
        # LMCache (009eca10) hands batched_async_contains worker 0's keys in
        # its worker-id-as-0 mode, but passes batched_get_non_blocking the
        # worker's own, and worker 0 alone stores: in that mode every
        # worker's key names worker 0's object.
        c0, m0 = self._conn(0, 2, as0=True)
        c1, m1 = self._conn(1, 2, as0=True)
        k0 = lup.CacheEngineKey(m0.model_name, 2, 0, 0x1234, m0.kv_dtype)
        k1 = lup.CacheEngineKey(m1.model_name, 2, 1, 0x1234, m1.kv_dtype)
        # What worker 1's batched_async_contains asks (remapped) and what its
        # batched_get_non_blocking asks (not remapped) must be one object.
        self.assertEqual(c1.object_key(k1.with_new_worker_id(0)), c0.object_key(k0), "precondition")
        self.assertEqual(c1.object_key(k1), c0.object_key(k0),
                         "worker 1's non-blocking read (LMCache passes its own key) names another object than "
                         "the one its async lookup counted and worker 0 stored")


class LMCacheURLTest(unittest.TestCase):
    """A dfkv:// URL takes tenant, group, revision and model_revision; a
    misspelt one is refused, not dropped (dfkv://a:1?tenat=team-a would run
    in the default tenant, sharing and overwriting its chunks)."""

    def test_unknown_query_parameter_is_refused(self):
        from dfkv import lmcache as dlm
        with self.assertRaises(ValueError):
            dlm.parse_dfkv_url("dfkv://a:1?tenat=team-a")

    def test_unknown_parameter_error_does_not_repeat_the_url(self):
        from dfkv import lmcache as dlm
        for url in ("dfkv://a:1?password=hunter2-s3cr3t", "dfkv://a:1/?tenant=t&secret=hunter2-s3cr3t",
                    "dfkv://embedded?auth=hunter2-s3cr3t"):
            with self.assertRaises(ValueError) as cm:
                dlm.parse_dfkv_url(url)
            self.assertNotIn("hunter2-s3cr3t", str(cm.exception), f"{url}: the error repeats the parameter's value")


@unittest.skipUnless(_have_lib(), "libdfkv.so not found (scripts/build-lib.sh)")
class SGLangTrackMaxTest(unittest.TestCase):
    """A negative dfkv_clear_track_max is refused when the backend starts.
    Taken as it was, it made every batch_set report its stored pages as
    failed (SGLang's backup thread then stops the batch)."""

    def setUp(self):
        undo = sup.install()
        self.addCleanup(undo)
        sys.modules.pop("dfkv.sglang", None)
        self.addCleanup(sys.modules.pop, "dfkv.sglang", None)
        self.dsg = importlib.import_module("dfkv.sglang")

    def test_negative_track_max_is_refused(self):
        pool = sup.KVHostPool("page_first", pages=4)
        extra = {"backend_name": "dfkv", "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
                 "interface_v1": 1, "dfkv_members": "embedded",
                 "dfkv_embedded_config": {"ram_tier_bytes": "64MiB"}, "dfkv_clear_track_max": -1}
        cfg = sup.HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                       is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                                       model_name="test/sglang-" + uuid.uuid4().hex, extra_config=extra)
        with self.assertRaisesRegex(ValueError, "dfkv_clear_track_max"):
            self.dsg.DfkvHiCacheStorage(cfg, {})
        extra["dfkv_clear_track_max"] = 0  # remember nothing: stores still report stored
        st = self.dsg.DfkvHiCacheStorage(cfg, {})
        self.addCleanup(st.close)
        st.register_mem_pool_host(pool)
        pool.fill(0, 1)
        keys = ["p0-" + uuid.uuid4().hex]
        res = st.batch_set_v1(keys, sup.page_indices([0], pool.page_size))
        self.assertEqual(st.batch_exists(keys), 1, "the page is in dfkv")
        self.assertEqual(res, [True], "a stored page reported as not stored")


class ReopenIntervalTest(unittest.TestCase):
    """dfkv_reopen_interval_s must be a number of seconds, 0 or more: a
    negative or NaN one would retry the open on every call of an outage."""

    def test_negative_and_nan_are_refused(self):
        from dfkv._common import ClientSlot
        for bad in (-1, float("nan"), float("inf")):
            with self.assertRaisesRegex(ValueError, "dfkv_reopen_interval_s"):
                ClientSlot("test connector", bad)
        self.assertEqual(ClientSlot("test connector", 0).reopen_s, 0)


if __name__ == "__main__":
    unittest.main()
