"""MLA keys in LMCache's default "worker id as 0" mode on the async
loading path, and the unknown-URL-parameter error. Pure Python."""

import asyncio
import unittest

from . import lmcache_upstream as lup


class LMCacheMLANonBlockingGetTest(unittest.TestCase):
    """Upstream RemoteBackend (009eca10) hands batched_async_contains to
    worker 0's keys in its worker-id-as-0 mode (on by default for MLA with
    world_size > 1), but passes batched_get_non_blocking the worker's own
    keys unchanged, and worker 0 alone stores. So in that mode the
    connector names worker 0's object for every worker's key: worker 1's
    non-blocking read finds what its async lookup counted."""

    def setUp(self):
        self.mod = self.enterContext(lup.installed())

    def _conn(self, worker_id, world_size):
        extra = {"remote_storage_plugin.dfkv.members": "127.0.0.1:1"}  # LMCache's defaults: the mode is on
        config = lup.LMCacheEngineConfig(chunk_size=16, remote_storage_plugins=["dfkv"], extra_config=extra)
        meta = lup.LMCacheMetadata(model_name="test/mla-tp", world_size=world_size, local_world_size=world_size,
                                   worker_id=worker_id, local_worker_id=worker_id, kv_dtype=lup.float16,
                                   kv_shape=(4, 1, 16, 1, 8), use_mla=True, chunk_size=16)
        conn = self.mod.DfkvConnector(loop=None, local_cpu_backend=lup.LocalCPUBackend(config, meta),
                                      config=config, metadata=meta, plugin_name="dfkv")
        self.addCleanup(lambda: asyncio.run(conn.close()))
        return conn, meta

    def test_non_blocking_get_of_worker_1_names_the_object_worker_0_stored(self):
        c0, m0 = self._conn(0, 2)
        c1, m1 = self._conn(1, 2)
        k0 = lup.CacheEngineKey(m0.model_name, 2, 0, 0x1234, m0.kv_dtype)
        k1 = lup.CacheEngineKey(m1.model_name, 2, 1, 0x1234, m1.kv_dtype)
        # What worker 1's batched_async_contains asks (remapped) and what its
        # batched_get_non_blocking asks (not remapped) must be one object.
        self.assertEqual(c1.object_key(k1.with_new_worker_id(0)), c0.object_key(k0), "precondition")
        self.assertEqual(c1.object_key(k1), c0.object_key(k0),
                         "worker 1's non-blocking read (LMCache passes its own key) names another object than "
                         "the one its async lookup counted and worker 0 stored")



class LMCacheURLUnknownParamEchoTest(unittest.TestCase):
    """parse_dfkv_url refuses a token in the URL without repeating it
    (URLs end up in logs), and so an unknown parameter: a credential under
    any other name (password=, secret=, auth=) stays out of the log."""

    def test_unknown_parameter_error_does_not_repeat_the_url(self):
        from dfkv import lmcache as dlm
        for url in ("dfkv://a:1?password=hunter2-s3cr3t", "dfkv://a:1/?tenant=t&secret=hunter2-s3cr3t",
                    "dfkv://embedded?auth=hunter2-s3cr3t"):
            with self.assertRaises(ValueError) as cm:
                dlm.parse_dfkv_url(url)
            self.assertNotIn("hunter2-s3cr3t", str(cm.exception), f"{url}: the error repeats the parameter's value")


if __name__ == "__main__":
    unittest.main()
