"""The LMCache remote connector against real dfkv nodes."""

import asyncio
import types
import unittest
import uuid

from dfkv import lmcache as dlm

from ._servers import members

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

NEEDS_TORCH = "torch is not importable by this interpreter: apt-get install python3-torch, run /usr/bin/python3"


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
