"""The LMCache remote connector, driven the way LMCache drives it (through
the stand-in in lmcache_upstream.py), against real dfkv nodes."""

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import subprocess
import threading
import time
import types
import unittest
import uuid
from unittest import mock

import dfkv
from dfkv import lmcache as dlm

from . import lmcache_upstream as up
from ._servers import CertAuthority, CredentialsServer, Server, members, new_token

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

RW = ["read", "write", "remove"]
NEEDS_TORCH = "torch is not importable by this interpreter: apt-get install python3-torch, run /usr/bin/python3"
CHUNK = 16


def engine(model=None, serde="naive", extra=None, chunk=CHUNK, kv_shape=(2, 2, CHUNK, 2, 8), dtype=None,
           groups=None, layerwise=False, nodes=None, timeout=10):
    """An LMCache config and metadata using dfkv through remote_storage_plugins."""
    ex = {"remote_storage_plugin.dfkv.module_path": "dfkv.lmcache",
          "remote_storage_plugin.dfkv.class_name": "DfkvConnectorAdapter",
          "remote_storage_plugin.dfkv.members": nodes or ",".join(members()),
          "remote_storage_plugin.dfkv.tenant": "pytest"}
    ex.update(extra or {})
    config = up.LMCacheEngineConfig(chunk_size=chunk, remote_serde=serde, remote_storage_plugins=["dfkv"],
                                    extra_config=ex, use_layerwise=layerwise, blocking_timeout_secs=timeout)
    meta = up.LMCacheMetadata(model_name=model or "test/lmcache-" + uuid.uuid4().hex, world_size=1,
                              local_world_size=1, worker_id=0, local_worker_id=0, kv_dtype=dtype or up.float16,
                              kv_shape=tuple(kv_shape[:2]) + (chunk,) + tuple(kv_shape[3:]), chunk_size=chunk)
    if groups:
        meta.kv_layer_groups_manager.kv_layer_groups = [up.KVLayerGroup(*g) for g in groups]
    return config, meta


class Stand(contextlib.ExitStack):
    """LMCache's side: event-loop thread, CPU backend, one RemoteBackend."""

    def __init__(self, mod, config, meta, capacity=None):
        super().__init__()
        self.mod, self.config, self.meta = mod, config, meta
        self.lt = up.LoopThread()
        self.callback(self.lt.stop)
        self.cpu = up.LocalCPUBackend(config, meta, capacity=capacity)
        backends = up.create_remote_backends(config, meta, self.lt.loop, self.cpu)
        self.backend = backends["RemoteBackend-dfkv"]
        self.callback(self.backend.close)
        self.conn = self.backend.connection._connector

    def chunk(self, fill, tokens=None, key_shapes=None):
        shapes = key_shapes or self.meta.get_shapes(tokens)
        obj = self.cpu.allocate(list(shapes), self.meta.get_dtypes(), up.MemoryFormat.KV_2LTD)
        b = memoryview(obj.byte_array).cast("B")
        b[:] = bytes((fill + j) % 251 for j in range(len(b)))
        return obj

    def key(self, h, tags=None, layer=None):
        rc = {f"lmcache.tag.{k}": v for k, v in (tags or {}).items()}
        if layer is None:
            return up.CacheEngineKey(self.meta.model_name, 1, 0, h, self.meta.kv_dtype, rc)
        return up.LayerCacheEngineKey(self.meta.model_name, 1, 0, h, self.meta.kv_dtype, rc, layer_id=layer)

    def put(self, keys, objs):
        self.backend.batched_submit_put_task(keys, objs)
        self.backend.wait_puts()

    def release(self, objs):
        for o in objs:
            if o is not None:
                o.ref_count_down()

    def run(self, coro):
        return self.lt.run(coro)


def data(obj):
    return bytes(memoryview(obj.byte_array).cast("B")[:obj.get_size()])


class PluginRouteTest(unittest.TestCase):
    def stand(self, *a, capacity=None, **kw):
        mod = self.enterContext(up.installed())
        return self.enterContext(Stand(mod, *engine(*a, **kw), capacity=capacity))

    def test_built_by_lmcache_plugin_loading(self):
        s = self.stand()
        self.assertIsInstance(s.conn, s.mod.DfkvConnector)
        self.assertIsInstance(s.conn, up.RemoteConnector, "subclasses the (stand-in) upstream base")
        self.assertEqual(s.backend.remote_url, "plugin://dfkv")
        self.assertEqual(s.conn.tenant, "pytest")
        self.assertEqual(s.conn.full_chunk_size_bytes, 2 * 2 * CHUNK * 16 * 2)
        with self.assertRaises(AttributeError, msg="the chunk geometry is read-only upstream"):
            s.conn.full_chunk_size_bytes = 1
        adapter = s.mod.DfkvConnectorAdapter()
        for url, ok in (("plugin://dfkv", True), ("plugin://dfkv.primary", True), ("plugin://fs", False),
                        ("dfkv://a:1", True), ("redis://a:1", False)):
            self.assertEqual(adapter.can_parse(url), ok, url)

    def test_put_lookup_get_as_remote_backend(self):
        s = self.stand()
        keys = [s.key(0x1000 + i) for i in range(4)]
        src = [s.chunk(i) for i in range(4)]
        want = [data(o) for o in src]
        s.put([keys[0], keys[1], keys[3]], [src[0], src[1], src[3]])
        s.backend.submit_put_task(keys[2], src[2]).result(30)
        s.release(src)
        self.assertEqual(s.cpu.live, set())
        self.assertTrue(s.backend.contains(keys[1]))
        self.assertEqual(s.backend.batched_contains(keys), 4)
        self.assertTrue(s.backend.remove(keys[2]))
        self.assertEqual(s.backend.batched_contains(keys), 2, "stop at the first missing chunk")
        self.assertEqual(s.run(s.backend.batched_async_contains("l1", keys, pin=True)), 2)
        got = s.backend.get_blocking(keys[1])
        self.assertEqual(data(got), want[1])
        self.assertEqual(tuple(got.meta.shape), (2, 2, CHUNK, 16))
        objs = s.backend.batched_get_blocking(keys)
        self.assertEqual([o is not None for o in objs], [True, True, False, True])
        self.assertEqual(data(objs[3]), want[3])
        prefix = s.run(s.backend.batched_get_non_blocking("l1", keys))
        self.assertEqual([data(o) for o in prefix], want[:2])
        s.release([got] + objs + prefix)
        self.assertEqual(s.cpu.live, set(), "no MemoryObj is kept by a miss or after the first miss")
        self.assertIsNone(s.backend.get_blocking(s.key(0xdead)))
        self.assertEqual(s.cpu.live, set())

    def test_partial_chunk_single_and_multi_group(self):
        for groups in (None, [(2, 16, up.float16), (1, 8, up.uint8)]):
            with self.subTest(groups=groups):
                s = self.stand(groups=groups)
                k = s.key(0x77)
                src = s.chunk(3, tokens=5)
                want = data(src)
                s.put([k], [src])
                s.release([src])
                got = s.backend.get_blocking(k)
                self.assertEqual(data(got), want)
                self.assertEqual(got.meta.shape[2], 5)
                self.assertEqual([tuple(x) for x in (got.meta.shapes or [got.meta.shape])],
                                 [tuple(x) for x in s.meta.get_shapes(5)])
                s.release([got])
                self.assertEqual(s.cpu.live, set())

    def test_groups_known_only_after_construction(self):
        # LMCache builds the connector before it registers the KV caches
        # that define the layer groups: the namespace must follow.
        s = self.stand()
        s.meta.kv_layer_groups_manager.kv_layer_groups = [up.KVLayerGroup(2, 16, up.float16),
                                                          up.KVLayerGroup(1, 4, up.bfloat16)]
        k = s.key(0x99)
        src = s.chunk(9)
        want = data(src)
        s.put([k], [src])
        s.release([src])
        got = s.backend.get_blocking(k)
        self.assertEqual(data(got), want)
        self.assertEqual(len(got.meta.shapes), 2)
        s.release([got])
        self.assertEqual(s.cpu.live, set())

    def test_layerwise_keys_are_separate_objects(self):
        s = self.stand(layerwise=True)
        layer_shape = up.Size([CHUNK, 2, 16])  # KV_T2D: one layer of a chunk
        keys = [s.key(0x5, layer=i) for i in range(2)]
        src = [s.chunk(40 + i, key_shapes=[layer_shape]) for i in range(2)]
        for o in src:
            o.meta.fmt = up.MemoryFormat.KV_T2D
        want = [data(o) for o in src]
        self.assertNotEqual(s.conn.object_key(keys[0]), s.conn.object_key(keys[1]))
        s.put(keys, src)
        s.release(src)
        for i in range(2):
            got = s.backend.get_blocking(keys[i])
            self.assertEqual(data(got), want[i])
            self.assertEqual(tuple(got.meta.shape), tuple(layer_shape))
            self.assertEqual(got.meta.fmt, up.MemoryFormat.KV_T2D)
            s.release([got])
        self.assertIsNone(s.backend.get_blocking(s.key(0x5)), "the whole-chunk key is another object")
        self.assertEqual(s.cpu.live, set())

    def test_tags_are_part_of_the_key(self):
        s = self.stand()
        a, b = s.key(0x42, tags={"user": "a", "lora": "x"}), s.key(0x42, tags={"user": "b", "lora": "x"})
        same = s.key(0x42, tags={"lora": "x", "user": "a"})
        self.assertNotEqual(s.conn.object_key(a), s.conn.object_key(b))
        self.assertEqual(s.conn.object_key(a), s.conn.object_key(same), "tag order does not matter")
        self.assertNotEqual(s.conn.object_key(a), s.conn.object_key(s.key(0x42)))
        src = s.chunk(1)
        s.put([a], [src])
        s.release([src])
        self.assertTrue(s.backend.contains(same))
        self.assertFalse(s.backend.contains(b))
        self.assertFalse(s.backend.contains(s.key(0x42)))

    def test_cachegen_and_kivi_serde(self):
        model = "test/lmcache-" + uuid.uuid4().hex
        for serde in ("cachegen", "kivi"):
            with self.subTest(serde=serde):
                s = self.stand(model=model + serde, serde=serde)
                k = s.key(0xc0)
                src = s.chunk(0)  # compressible
                want = data(src)
                s.put([k], [src])
                s.release([src])
                got = s.backend.get_blocking(k)
                self.assertEqual(data(got), want)
                s.release([got])
                self.assertEqual(s.cpu.live, set())
        # A naive reader of the cachegen writer's namespace: a miss with one
        # line naming the serde, never compressed bytes taken for KV.
        s = self.stand(model=model + "cachegen")
        with self.assertLogs("dfkv.lmcache", "WARNING") as logs:
            self.assertIsNone(s.backend.get_blocking(s.key(0xc0)))
        self.assertEqual(len(logs.output), 1)
        self.assertIn("serde 'cachegen'", logs.output[0])
        self.assertEqual(s.cpu.live, set())

    def test_corrupt_or_foreign_envelope_is_a_miss(self):
        s = self.stand()
        k = s.key(0xbad)
        src = s.chunk(5)
        s.put([k], [src])
        s.release([src])
        okey = s.conn.object_key(k)
        good = bytes(s.conn.client.get(okey))
        env_n = dlm.envelope_size(1)
        other = dlm.Envelope(1, "naive", [(2, 2, CHUNK, 8)], ["float16"], 2 * 2 * CHUNK * 8 * 2).encode()
        cases = {
            "CRC": good[:10] + bytes([good[10] ^ 1]) + good[11:],
            "magic": b"XXXX" + good[4:],
            "payload": good[:-2],
            "shape": other + good[env_n:env_n + 2 * 2 * CHUNK * 8 * 2],
            "shorter than an envelope": b"raw",
        }
        for what, value in cases.items():
            with self.subTest(what):
                s.conn.client.put(okey, value)
                with self.assertLogs("dfkv.lmcache", "WARNING") as logs:
                    self.assertIsNone(s.backend.get_blocking(k))
                    self.assertEqual(s.run(s.backend.batched_get_non_blocking("l", [k])), [])
                self.assertEqual(len(logs.output), 2, logs.output)
                self.assertIn(what, logs.output[0])
                self.assertEqual(s.cpu.live, set())

    def test_layout_change_between_writer_and_reader_is_a_miss(self):
        model = "test/lmcache-" + uuid.uuid4().hex
        w = self.stand(model=model)
        k = w.key(0x1)
        src = w.chunk(2)
        w.put([k], [src])
        w.release([src])
        for kw in ({"dtype": up.bfloat16}, {"chunk": 8}, {"kv_shape": (2, 2, CHUNK, 2, 4)}):
            with self.subTest(**{k_: str(v) for k_, v in kw.items()}):
                r = self.stand(model=model, **kw)
                self.assertIsNone(r.backend.get_blocking(r.key(0x1)))
                self.assertEqual(r.backend.batched_contains([r.key(0x1)]), 0)
                self.assertEqual(r.cpu.live, set())

    def test_allocation_failure_mid_batch(self):
        s = self.stand(capacity=2)
        keys = [s.key(0x300 + i) for i in range(4)]
        src = [s.chunk(i) for i in range(2)]
        s.put(keys[:2], src)
        s.release(src)
        src = [s.chunk(i) for i in range(2, 4)]
        s.put(keys[2:], src)
        s.release(src)
        got = s.run(s.backend.batched_get_non_blocking("l", keys))
        self.assertEqual(len(got), 2, "the prefix the CPU backend had room for")
        s.release(got)
        self.assertEqual(s.cpu.live, set())

    def test_put_failing_outside_the_node_never_raises(self):
        # A client that cannot be had (here: a namespace the descriptor
        # refuses) loses the write, logged, and raises nothing into
        # LMCache's put path.
        s = self.stand()
        src = [s.chunk(1)]
        broken = mock.PropertyMock(side_effect=ValueError("namespace refused"))
        with mock.patch.object(type(s.conn), "client", broken), \
                self.assertLogs("dfkv.lmcache", "WARNING") as logs:
            s.run(s.conn.put(s.key(0x400), src[0]))
        self.assertIn("namespace refused", "\n".join(logs.output))
        s.release(src)
        self.assertFalse(s.conn.exists_sync(s.key(0x400)))
        self.assertEqual(s.cpu.live, set(), "the chunk's references were all given back")

    def test_cancelled_put_keeps_its_buffer_until_sent(self):
        # LMCache's InstrumentedRemoteConnector releases the MemoryObj when
        # put ends, also when put is cancelled; the send on the connector's
        # thread still reads that buffer, so the connector must keep it.
        s = self.stand()
        k = s.key(0x5e1d)
        started, go, seen = threading.Event(), threading.Event(), []
        self.addCleanup(go.set)
        put_many = s.conn._put_many

        def slow(keys, objs):
            started.set()
            go.wait(30)
            seen.append([id(o) in s.cpu.live for o in objs])
            put_many(keys, objs)

        s.conn._put_many = slow
        src = s.chunk(6)
        want = data(src)
        fut = s.backend.submit_put_task(k, src)
        s.release([src])  # the engine's own reference
        self.assertTrue(started.wait(10))
        fut.cancel()
        deadline = time.monotonic() + 10
        while src.get_ref_count() > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertLessEqual(src.get_ref_count(), 1, "the cancellation reached InstrumentedRemoteConnector.put")
        alive = id(src) in s.cpu.live
        go.set()
        while id(src) in s.cpu.live and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertTrue(alive, "the buffer was freed while the send was still reading it")
        self.assertEqual(seen, [[True]])
        self.assertNotIn(id(src), s.cpu.live, "released once the send is done")
        got = s.backend.get_blocking(k)
        self.assertEqual(data(got), want)
        s.release([got])
        self.assertEqual(s.cpu.live, set())

    def test_event_loop_never_waits_for_a_client_being_opened(self):
        # Opening a client (an MDS lookup, seconds when the MDS is down)
        # holds the connector's lock; LMCache's event-loop thread serves
        # every backend and must not stall behind it.
        s = self.stand()
        k = s.key(0x10)
        gate, opening = threading.Event(), threading.Event()
        self.addCleanup(gate.set)
        open_client = s.conn._open

        def slow_open(ns):
            opening.set()
            gate.wait(30)
            return open_client(ns)

        s.conn._open = slow_open

        def loop_answers():
            try:
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), s.lt.loop).result(2)
                return True
            except concurrent.futures.TimeoutError:
                return False

        # The first call, from an LMCache worker thread, opens the client;
        # the first coroutine on the loop starts the connector's executor.
        t = threading.Thread(target=s.backend.batched_contains, args=([k],))
        t.start()
        self.assertTrue(opening.wait(10))
        exists = asyncio.run_coroutine_threadsafe(s.backend.connection.exists(k), s.lt.loop)
        answered = loop_answers()
        gate.set()
        t.join(30)
        self.assertFalse(exists.result(30))
        self.assertTrue(answered, "the event loop waited for the client to open (first executor use)")

        # close() while a client is being opened again (the layout changed).
        s.meta.kv_layer_groups_manager.kv_layer_groups = [up.KVLayerGroup(2, 8, up.float16)]
        gate.clear()
        opening.clear()
        t = threading.Thread(target=s.backend.batched_contains, args=([k],))
        t.start()
        self.assertTrue(opening.wait(10))
        closing = asyncio.run_coroutine_threadsafe(s.backend.connection.close(), s.lt.loop)
        answered = loop_answers()
        gate.set()
        t.join(30)
        closing.result(30)
        self.assertTrue(answered, "the event loop waited for the client to open (close)")
        self.assertIsNone(s.conn._slot.current, "a client opened while closing is closed too")
        self.assertFalse(s.conn.exists_sync(k), "a closed connector answers a miss")
        self.assertIsNone(s.conn._slot.current, "and opens no client")

    def test_token_setting_reaches_the_client(self):
        # remote_storage_plugin.dfkv.token, against a node that requires
        # credentials; a token of another tenant reads nothing.
        tok, other = new_token("lmcache"), new_token("other-tenant")
        node = CredentialsServer({tok: (["pytest"], ["read", "write", "remove"]),
                                  other: (["someone-else"], ["read"])})
        self.addCleanup(node.close)
        model = "test/lmcache-" + uuid.uuid4().hex
        with mock.patch.dict(os.environ, {"DFKV_CLIENT_TOKEN": "", "DFKV_TOKEN": ""}):
            s = self.stand(model, nodes=node.addr, extra={"remote_storage_plugin.dfkv.token": tok})
            keys = [s.key(0x2000 + i) for i in range(2)]
            src = [s.chunk(i) for i in range(2)]
            want = [data(o) for o in src]
            s.put(keys, src)
            s.release(src)
            self.assertEqual(s.backend.batched_contains(keys), 2)
            got = s.backend.get_blocking(keys[1])
            self.assertEqual(data(got), want[1])
            s.release([got])
            o = self.stand(model, nodes=node.addr, extra={"remote_storage_plugin.dfkv.token": other})
            with self.assertLogs("dfkv", "WARNING") as logs:
                self.assertEqual(o.backend.batched_contains([o.key(0x2000)]), 0)
                self.assertIsNone(o.backend.get_blocking(o.key(0x2000)))
            text = "\n".join(logs.output)
            self.assertIn("FORBIDDEN", text)
            self.assertNotIn(other, text)

    def test_tls_settings_reach_the_client(self):
        # remote_storage_plugin.dfkv.tls and its files, against a node
        # that serves mutual TLS and grants this client certificate's
        # common name the tenant; with the wrong CA nothing is read or
        # written, and the log says why.
        ca, other = CertAuthority("lmcache-ca"), CertAuthority("lmcache-other")
        self.addCleanup(ca.close)
        self.addCleanup(other.close)
        node = CredentialsServer({}, args=ca.server_args(mutual=True), cert_grants={"lmcache": (["pytest"], RW)})
        self.addCleanup(node.close)
        cert, key = ca.client("lmcache", "lmcache")
        model = "test/lmcache-" + uuid.uuid4().hex
        p = "remote_storage_plugin.dfkv."
        tls = {p + "tls": 1, p + "tls_ca": ca.file, p + "tls_cert": cert, p + "tls_key": key,
               p + "tls_server_name": "localhost"}
        env = {k: "" for k in ("DFKV_CLIENT_TLS", "DFKV_CLIENT_TLS_CA", "DFKV_CLIENT_TLS_CERT", "DFKV_CLIENT_TLS_KEY",
                               "DFKV_CLIENT_TLS_SERVER_NAME", "DFKV_CLIENT_TOKEN", "DFKV_TOKEN")}
        with mock.patch.dict(os.environ, env):
            s = self.stand(model, nodes=node.addr, extra=tls)
            keys = [s.key(0x3000 + i) for i in range(2)]
            src = [s.chunk(i) for i in range(2)]
            want = [data(o) for o in src]
            s.put(keys, src)
            s.release(src)
            self.assertEqual(s.backend.batched_contains(keys), 2)
            got = s.backend.get_blocking(keys[1])
            self.assertEqual(data(got), want[1])
            s.release([got])
            # Reads of a node the client cannot reach are misses; a write
            # fails, and the log says why.
            o = self.stand(model, nodes=node.addr, extra=dict(tls, **{p + "tls_ca": other.file}))
            self.assertEqual(o.backend.batched_contains([o.key(0x3000)]), 0)
            self.assertIsNone(o.backend.get_blocking(o.key(0x3000)))
            src = [o.chunk(7)]
            with self.assertLogs("dfkv", "WARNING") as logs:
                o.put([o.key(0x3100)], src)
            o.release(src)
            text = "\n".join(logs.output)
            self.assertIn("certificate", text)
            self.assertIn(other.file, text)

    def test_mds_discovery_and_static_fallback(self):
        mds = Server(role="mds")
        self.addCleanup(mds.close)
        node = Server(args=["--mds", mds.addr])
        self.addCleanup(node.close)
        s = self.stand(extra={"remote_storage_plugin.dfkv.mds": mds.addr,
                              "remote_storage_plugin.dfkv.members": ""}, nodes=" ")
        k = s.key(0x3d5)
        src = s.chunk(8)
        want = data(src)
        for _ in range(100):  # the node registers with the MDS shortly after it starts
            s.put([k], [src])
            if s.backend.contains(k):
                break
            threading.Event().wait(0.1)
        s.release([src])
        got = s.backend.get_blocking(k)
        self.assertEqual(data(got), want)
        s.release([got])
        # An MDS nobody answers at, with static members as well: one warning, then the members.
        dead = f"127.0.0.1:{up_free_port()}"
        with self.assertLogs("dfkv.lmcache", "WARNING") as logs:
            f = self.stand(extra={"remote_storage_plugin.dfkv.mds": dead})
            self.assertFalse(f.backend.contains(f.key(1)))
        self.assertEqual(len(logs.output), 1)
        self.assertIn("static members", logs.output[0])


class NodeSetTest(unittest.TestCase):
    def test_a_node_joining_through_the_mds_is_used_without_a_restart(self):
        mds = Server(role="mds", args=["--heartbeat-ttl-ms", "2000"])
        self.addCleanup(mds.close)
        a = Server(args=["--mds", mds.addr])
        self.addCleanup(a.close)
        s = self.enterContext(Stand(self.enterContext(up.installed()), *engine(
            extra={"remote_storage_plugin.dfkv.mds": mds.addr, "remote_storage_plugin.dfkv.members": ""},
            nodes=" ")))
        def members():
            try:
                return sorted(s.conn.client.stats())
            except dfkv.DfkvError:  # no member registered yet
                return []

        def wait_members(want):
            for _ in range(150):
                if members() == sorted(want):
                    return
                threading.Event().wait(0.1)
            self.assertEqual(members(), sorted(want), "the connector follows the directory")

        wait_members([a.addr])
        b = Server(args=["--mds", mds.addr])
        self.addCleanup(b.close)
        wait_members([a.addr, b.addr])
        keys = [s.key(0x500 + i) for i in range(16)]
        src = [s.chunk(i) for i in range(16)]
        want = [data(o) for o in src]
        s.put(keys, src)
        s.release(src)
        got = s.backend.batched_get_blocking(keys)
        self.assertEqual([data(o) if o is not None else None for o in got], want)
        s.release(got)
        with dfkv.Client(b.addr, s.conn.namespace()) as only_b:
            on_b = [k for k in keys if only_b.exists(s.conn.object_key(k))]
        self.assertTrue(0 < len(on_b) < 16, f"{len(on_b)} of 16 chunks on the new node")
        b.kill()
        got = s.backend.batched_get_blocking(keys)
        self.assertEqual([o is not None for o in got], [k not in on_b for k in keys],
                         "the killed node's chunks miss, the others still hit")
        s.release(got)
        self.assertEqual(s.cpu.live, set())
        # dfkv.Client.exist raises Unavailable for the killed node; the
        # connector's one-chunk lookup catches it, logs the node, and misses.
        with self.assertLogs("dfkv.lmcache", "WARNING") as logs:
            self.assertIs(s.conn.exists_sync(on_b[0]), False)
        self.assertIn(f"Unavailable: UNAVAILABLE: exist {s.conn.object_key(on_b[0])!r}: dfkv node {b.addr} could not "
                      "be reached", "\n".join(logs.output))
        self.assertIs(s.conn.exists_sync(next(k for k in keys if k not in on_b)), True)


def up_free_port():
    from ._servers import free_port
    return free_port()


class FaultTest(unittest.TestCase):
    def start(self, addr=None, disk=None):
        binary = os.environ.get("DFKV_BIN")
        if not binary:
            raise unittest.SkipTest("DFKV_BIN is not set: run scripts/test-contrib.sh")
        if addr is None:
            srv = Server()
            self.addCleanup(srv.close)
            return srv, srv.addr, os.path.join(srv.dir.name, "disk0")
        proc = subprocess.Popen([binary, "server", "--listen", addr, "--http-listen", "", "--disks", disk,
                                 "--disk-capacity-bytes", "1GiB"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={k: v for k, v in os.environ.items() if not k.startswith("DFKV_")})
        if os.environ.get("DFKV_TEST_PIDFILE"):
            with open(os.environ["DFKV_TEST_PIDFILE"], "a") as f:
                f.write(f"{proc.pid}\n")
        self.addCleanup(lambda: (proc.kill(), proc.wait()))
        import socket
        import time
        host, port = addr.rsplit(":", 1)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=0.2).close()
                return proc, addr, disk
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"dfkv server at {addr} did not come back")
                threading.Event().wait(0.05)

    def test_node_killed_then_back(self):
        srv, addr, disk = self.start()
        mod = self.enterContext(up.installed())
        s = self.enterContext(Stand(mod, *engine(nodes=addr, extra={"remote_storage_plugin.dfkv.timeout_ms": 2000},
                                                 timeout=30)))
        keys = [s.key(0x900 + i) for i in range(3)]
        src = [s.chunk(i) for i in range(3)]
        want = [data(o) for o in src]
        s.put(keys, src)
        s.release(src)
        self.assertEqual(s.backend.batched_contains(keys), 3)
        # SIGKILL while reads are in flight: every answer is the chunk or a
        # miss, and nothing escapes into LMCache's threads.
        errors, results, killed = [], [], threading.Event()

        def reader():
            try:
                after = 0
                for _ in range(20000):  # bounded; ends 10 rounds after the kill
                    for o in s.backend.batched_get_blocking(keys):
                        results.append((killed.is_set(), None if o is None else data(o)))
                        s.release([o])
                    if killed.is_set():
                        after += 1
                        if after >= 10:
                            return
            except BaseException as e:  # noqa: BLE001 - the assertion is that none arrive
                errors.append(e)

        t = threading.Thread(target=reader)
        t.start()
        threading.Event().wait(0.05)
        srv.kill()
        killed.set()
        t.join(120)
        self.assertFalse(t.is_alive())
        self.assertEqual(errors, [])
        self.assertTrue(all(r is None or r in want for _, r in results), "every answer is the chunk or a miss")
        self.assertTrue(any(r is not None for _, r in results), "reads before the kill hit")
        self.assertTrue(all(r is None for after, r in results[-3:]), "reads after the kill miss")
        self.assertIsNone(s.backend.get_blocking(keys[0]))
        self.assertEqual(s.backend.batched_contains(keys), 0)
        self.assertFalse(s.backend.contains(keys[0]))
        self.assertEqual(s.run(s.backend.batched_get_non_blocking("l", keys)), [])
        self.assertEqual(s.run(s.backend.batched_async_contains("l", keys)), 0)
        s.put([s.key(0x999)], [s.chunk(1)])  # logged, not raised
        self.assertEqual(s.backend._put_failed_count, 0)
        s.cpu.live.clear()
        # The node returns on the same address and disk: the same connector
        # stores and reads again (what survived a SIGKILL on disk is the
        # node's business, so a fresh chunk is the test).
        self.start(addr, disk)
        k2 = s.key(0x777)
        got = None
        for _ in range(300):
            src = s.chunk(7)
            want2 = data(src)
            s.put([k2], [src])
            s.release([src])
            got = s.backend.get_blocking(k2)
            if got is not None:
                break
            threading.Event().wait(0.1)
        self.assertIsNotNone(got, "the connector recovers when the node is back")
        self.assertEqual(data(got), want2)
        s.release([got])
        self.assertEqual(s.cpu.live, set())


class ConstructionTest(unittest.TestCase):
    def test_pre_refactor_lmcache_is_refused(self):
        with up.installed(pre_refactor=True) as mod:
            self.assertTrue(mod.LMCACHE_TOO_OLD)
            config, meta = engine()
            ctx = up.ConnectorContext("plugin://dfkv", None, up.LocalCPUBackend(config, meta), config, meta, "dfkv")
            with self.assertRaisesRegex(RuntimeError, r"RemoteConnector.__init__ takes \(config, metadata\)"):
                mod.DfkvConnectorAdapter().create_connector(ctx)

    def test_shim_behaves_like_the_upstream_base(self):
        # Without lmcache installed, dfkv.lmcache's own base stands in.
        self.assertFalse(dlm.LMCACHE_AVAILABLE)
        config, meta = engine()
        with self.assertRaises(AssertionError):
            dlm._RemoteConnectorBase(config, None)
        class Upstream(up.RemoteConnector):
            exists = exists_sync = get = put = list = close = None

        ref, shim = Upstream(config, meta), dlm._RemoteConnectorBase(config, meta)
        for attr in ("full_chunk_size_bytes", "single_token_size", "remote_metadata_bytes", "save_chunk_meta"):
            self.assertEqual(getattr(shim, attr), getattr(ref, attr), attr)
        self.assertEqual(shim.meta_fmt.value, ref.meta_fmt.value)
        with self.assertRaises(AttributeError):
            shim.single_token_size = 3
        token = shim.single_token_size
        for bad in (0, token + 1, shim.full_chunk_size_bytes + token):
            with self.assertRaises(ValueError):
                shim.reshape_partial_chunk(None, bad)
        cpu = up.LocalCPUBackend(config, meta)
        obj = cpu.allocate(meta.get_shapes(), meta.get_dtypes())
        self.assertEqual(shim.reshape_partial_chunk(obj, 3 * token).meta.shape[2], 3)

    def test_connector_without_lmcache_installed(self):
        config, meta = engine()
        cpu = up.LocalCPUBackend(config, meta)
        conn = dlm.DfkvConnectorAdapter().create_connector(
            types.SimpleNamespace(url="plugin://dfkv", loop=None, local_cpu_backend=cpu, config=config,
                                  metadata=meta, plugin_name="dfkv"))
        self.addCleanup(lambda: asyncio.run(conn.close()))
        k = up.CacheEngineKey(meta.model_name, 1, 0, 0xabc, meta.kv_dtype)
        src = cpu.allocate(meta.get_shapes(), meta.get_dtypes())
        memoryview(src.byte_array).cast("B")[:] = bytes(range(256)) * (src.get_size() // 256)
        asyncio.run(conn.put(k, src))
        got = asyncio.run(conn.get(k))
        self.assertEqual(data(got), data(src))
        self.assertEqual(asyncio.run(conn.batched_async_contains("l", [k, up.CacheEngineKey(
            meta.model_name, 1, 0, 0xabd, meta.kv_dtype)], pin=True)), 1)

    def test_metadata_from_the_cpu_backend(self):
        # LMCache's external:// route builds connectors with keywords only;
        # the metadata then comes from the CPU backend, as upstream's own
        # connectors take it.
        config, meta = engine()
        conn = dlm.DfkvConnector(loop=None, local_cpu_backend=up.LocalCPUBackend(config, meta), config=config,
                                 plugin_name="dfkv")
        self.addCleanup(lambda: asyncio.run(conn.close()))
        self.assertIs(conn.metadata, meta)
        with self.assertRaisesRegex(ValueError, "no engine metadata"):
            dlm.DfkvConnector(config=config, local_cpu_backend=None, plugin_name="dfkv")

    def test_url_parsing(self):
        self.assertEqual(dlm.parse_dfkv_url("dfkv://a:1,b:2/?tenant=t"), ("a:1,b:2", {"tenant": "t"}))
        for bad in ("dfkv://", "dfkv://nohost", "redis://a:1"):
            with self.assertRaises(ValueError):
                dlm.parse_dfkv_url(bad)

    def test_a_token_in_the_url_is_refused_without_repeating_it(self):
        secret = new_token("url")
        for url in (f"dfkv://a:1?token={secret}", f"dfkv://a:1/?tenant=t&dfkv_token={secret}",
                    f"dfkv://{secret}@a:1", f"dfkv://embedded?token={secret}", f"dfkv://nohost?token={secret}"):
            with self.subTest(url=url.replace(secret, "SECRET")):
                with self.assertRaises(ValueError) as cm:
                    dlm.parse_dfkv_url(url)
                self.assertIn("dfkv_token", str(cm.exception))
                self.assertNotIn(secret, str(cm.exception))

    def test_envelope_round_trip(self):
        env = dlm.Envelope(1, "naive", [(2, 2, 16, 16), (1, 3, 16, 8)], ["float16", "uint8"], 2 * 2 * 16 * 16 * 2 + 384)
        b = env.encode()
        self.assertEqual(len(b), dlm.envelope_size(2))
        back = dlm.Envelope.decode(b, len(b) + env.payload_len)
        self.assertEqual((back.fmt, back.serde, back.shapes, back.dtypes, back.payload_len),
                         (1, "naive", [(2, 2, 16, 16), (1, 3, 16, 8)], ["float16", "uint8"], env.payload_len))


@unittest.skipIf(torch is None, NEEDS_TORCH)
class TorchTest(unittest.TestCase):
    def test_tensor_view_after_round_trip(self):
        mod = self.enterContext(up.installed())
        s = self.enterContext(Stand(mod, *engine(dtype=torch.bfloat16)))
        k = s.key(0x7)
        src = s.chunk(0)
        src.tensor.copy_(torch.randn(tuple(src.meta.shape)).to(torch.bfloat16))
        want = src.tensor.clone()
        s.put([k], [src])
        s.release([src])
        got = s.backend.get_blocking(k)
        self.assertTrue(torch.equal(got.tensor, want))
        self.assertIsInstance(got.meta.shape, torch.Size)
        s.release([got])
        self.assertEqual(s.cpu.live, set())


if __name__ == "__main__":
    logging.basicConfig()
    unittest.main()
