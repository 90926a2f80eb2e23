"""Edges of the connectors and the client that engine integrators meet:
an MDS that stops answering, calls after close, a clear() that could not
remove everything, on/off settings spelled as the engines spell them,
negative range arguments."""

import logging
import os
import threading
import types
import unittest
import uuid
from unittest import mock

import dfkv
from dfkv import sglang as dsg

from . import lmcache_upstream as lmup
from . import vllm_upstream as vup
from dfkv._common import ClientSlot, NotConnected

from ._servers import CredentialsServer, members, new_token
from .test_lmcache import Stand, engine
from .test_vllm import NEEDS_TORCH, StandIn, extra as vllm_extra, torch


def storage_config(**extra):
    e = {"backend_name": "dfkv", "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
         "interface_v1": 1, "dfkv_members": ",".join(members()), "dfkv_tenant": "pytest",
         "dfkv_dtype": "uint8", "dfkv_page_size": 4, "dfkv_layers": 2, "dfkv_kv_heads": 2, "dfkv_head_dim": 4}
    e.update(extra)
    return types.SimpleNamespace(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                 is_mla_model=False, enable_storage_metrics=False,
                                 model_name="test/sglang-" + uuid.uuid4().hex, extra_config=e)


def fail_open():
    raise dfkv.DfkvError("MDS did not answer", dfkv.Status.UNAVAILABLE)


class FakeClient:
    def __init__(self, name):
        self.name, self.closed = name, False

    def close(self):
        self.closed = True


class ClientSlotTest(unittest.TestCase):
    """The open-once, retry-later client every connector holds."""

    def opener(self):
        opened = []

        def open_fn():
            c = FakeClient(len(opened))
            opened.append(c)
            return c
        return opened, open_fn

    def test_one_thread_opens_the_others_miss_meanwhile(self):
        slot, opened = ClientSlot("test", 600.0), []
        entered, release = threading.Event(), threading.Event()

        def slow_open():
            entered.set()
            release.wait(30)
            opened.append(FakeClient(0))
            return opened[-1]
        got = []
        t = threading.Thread(target=lambda: got.append(slot.get(slow_open)))
        t.start()
        self.assertTrue(entered.wait(30))
        with self.assertRaises(NotConnected):
            slot.get(slow_open)
        release.set()
        t.join(30)
        self.assertEqual(len(opened), 1)
        self.assertIs(got[0], opened[0])
        self.assertIs(slot.get(slow_open), opened[0], "the open client is shared")
        self.assertIsInstance(NotConnected("x"), dfkv.Unavailable)

    def test_a_failed_open_is_retried_only_after_the_interval(self):
        slot = ClientSlot("test", 600.0)
        with self.assertRaises(dfkv.DfkvError) as first:
            slot.get(fail_open)
        self.assertNotIsInstance(first.exception, NotConnected, "the failed open's own error reaches its caller")
        opened, open_fn = self.opener()
        with self.assertRaises(NotConnected):
            slot.get(open_fn)
        self.assertEqual(opened, [], "opened again within the interval")
        slot.reset()  # a new namespace is worth an open at once
        self.assertIs(slot.get(open_fn), opened[0])
        eager = ClientSlot("test", 0.0)
        with self.assertRaises(dfkv.DfkvError):
            eager.get(fail_open)
        self.assertIsInstance(eager.get(open_fn), FakeClient, "an interval of 0 retries at once")

    def test_another_key_closes_the_client_and_opens_anew(self):
        slot = ClientSlot("test", 600.0)
        opened, open_fn = self.opener()
        a = slot.get(open_fn, "layout-a")
        self.assertIs(slot.get(open_fn, "layout-a"), a)
        b = slot.get(open_fn, "layout-b")
        self.assertIsNot(a, b)
        self.assertTrue(a.closed)
        self.assertFalse(b.closed)
        self.assertIs(slot.current, b)

    def test_reset_or_close_during_an_open_discards_its_client(self):
        for end in ("reset", "close"):
            with self.subTest(end=end):
                slot = ClientSlot("test", 600.0)
                entered, release, opened, errors = threading.Event(), threading.Event(), [], []

                def slow_open():
                    entered.set()
                    release.wait(30)
                    opened.append(FakeClient(0))
                    return opened[-1]

                def call():
                    try:
                        slot.get(slow_open)
                    except NotConnected as e:
                        errors.append(e)
                t = threading.Thread(target=call)
                t.start()
                self.assertTrue(entered.wait(30))
                getattr(slot, end)()
                release.set()
                t.join(30)
                self.assertEqual(len(errors), 1, "a client for a dropped namespace was handed out")
                self.assertTrue(opened[0].closed, "the discarded client was not closed")
                self.assertIsNone(slot.current)
                more, open_fn = self.opener()
                if end == "reset":
                    self.assertIs(slot.get(open_fn), more[0], "after a reset the next call opens")
                else:
                    with self.assertRaises(NotConnected):
                        slot.get(open_fn)
                    self.assertEqual(more, [], "a closed slot opened a client")

    def test_close_closes_the_open_client(self):
        slot = ClientSlot("test", 600.0)
        opened, open_fn = self.opener()
        c = slot.get(open_fn)
        slot.close()
        self.assertTrue(c.closed)
        self.assertTrue(slot.closed)
        with self.assertRaises(NotConnected):
            slot.get(open_fn)


class LMCacheEdgesTest(unittest.TestCase):
    def test_an_mds_that_does_not_answer_costs_one_open(self):
        # LMCache asks batched_contains on its lookup path: while one open
        # fails slowly, the other lookups miss at once, and after it fails
        # no lookup opens again for reopen_interval_s.
        mod = self.enterContext(lmup.installed())
        s = self.enterContext(Stand(mod, *engine(extra={"remote_storage_plugin.dfkv.reopen_interval_s": 600})))
        opens, entered, release = [], threading.Event(), threading.Event()

        def slow_failing_open(ns):  # an MDS that does not answer within the timeout
            opens.append(ns)
            entered.set()
            release.wait(30)
            raise dfkv.DfkvError("MDS did not answer", dfkv.Status.UNAVAILABLE)
        s.conn._slot.reset()
        s.conn._open = slow_failing_open
        k = s.key(0x51)
        answers = []
        first = threading.Thread(target=lambda: answers.append(s.backend.batched_contains([k])))
        first.start()
        self.assertTrue(entered.wait(30), "the first lookup did not open")
        others = [s.backend.batched_contains([k]) for _ in range(3)]  # while it opens
        release.set()
        first.join(30)
        after = s.backend.batched_contains([k])  # just after it failed
        self.assertEqual((answers, others, after), ([0], [0, 0, 0], 0))
        self.assertEqual(len(opens), 1, "lookups during and right after a failed open opened again")

    def test_a_call_after_close_starts_no_threads(self):
        mod = self.enterContext(lmup.installed())
        s = self.enterContext(Stand(mod, *engine()))
        k = s.key(0x52)
        self.assertFalse(s.run(s.conn.exists(k)))
        s.run(s.conn.close())
        self.assertIsNone(s.conn._executor)
        self.assertFalse(s.run(s.conn.exists(k)), "a closed connector answers a miss")
        self.assertIsNone(s.conn._executor, "a call after close() built a new executor nothing will shut down")


class SGLangEdgesTest(unittest.TestCase):
    def test_a_call_after_close_does_not_reopen_a_client(self):
        st = dsg.DfkvHiCacheStorage(storage_config(), {})
        self.assertTrue(st.set("k0", value=bytearray(b"p" * 256)))
        st.close()
        self.assertEqual(st.batch_exists(["k0"]), 0, "a closed backend answers misses")
        leaked = st._slot.current
        if leaked is not None:
            self.addCleanup(leaked.close)
        self.assertIsNone(leaked, "a call after close() opened a client nothing will close")

    def test_a_clear_that_failed_is_retried_by_the_next(self):
        # A token without the remove right: clear() fails, and the next
        # clear() tries the same pages again rather than report done.
        tok = new_token("sglang-clear")
        node = CredentialsServer({tok: (["pytest"], ["read", "write"])})
        self.addCleanup(node.close)
        with mock.patch.dict(os.environ, {"DFKV_CLIENT_TOKEN": "", "DFKV_TOKEN": ""}):
            st = dsg.DfkvHiCacheStorage(storage_config(dfkv_members=node.addr, dfkv_token=tok), {})
            self.addCleanup(st.close)
            self.assertTrue(st.set("c0", value=bytearray(b"q" * 256)))
            first, second = st.clear(), st.clear()
            still = st.batch_exists(["c0"])
        self.assertEqual((first, second, still), (False, False, 1))

    def test_interface_v1_is_read_as_sglang_reads_it(self):
        # SGLang: bool(extra_config.get("interface_v1", 0)).
        st = dsg.DfkvHiCacheStorage(storage_config(interface_v1="true"), {})
        st.close()


@unittest.skipIf(torch is None, NEEDS_TORCH)
class VLLMEdgesTest(StandIn):
    def connector(self, **kw):
        cfg, kvc = vup.make_config("test/vllm-" + uuid.uuid4().hex, vllm_extra(**kw))
        c = vup.create_connector(cfg, vup.KVConnectorRole.SCHEDULER, kvc)
        self.addCleanup(c.shutdown)
        return c

    def test_an_mds_down_at_start_does_not_stop_vllm(self):
        # Nothing listens on port 1: the open at start fails, vLLM starts,
        # and the open is not tried again within dfkv_reopen_interval_s.
        with mock.patch.dict(os.environ, {"DFKV_CLIENT_MEMBERS": "", "DFKV_CLIENT_MDS": ""}):
            cfg, kvc = vup.make_config("test/vllm-" + uuid.uuid4().hex,
                                       {"dfkv_mds": "127.0.0.1:1", "dfkv_tenant": "pytest",
                                        "dfkv_reopen_interval_s": 600})
            c = vup.create_connector(cfg, vup.KVConnectorRole.SCHEDULER, kvc)
        self.addCleanup(c.shutdown)
        opens = []
        real = c._open_client
        c._open_client = lambda: (opens.append(1), real())[1]
        for _ in range(3):
            with self.assertRaises(dfkv.DfkvError):
                c.client
        self.assertEqual(opens, [], "opened again within dfkv_reopen_interval_s")

    def test_on_off_settings_take_every_spelling_dfkv_takes(self):
        wrong = [f"dfkv_load_async={v}" for v in ("0", "false", "no", "off")
                 if self.connector(dfkv_load_async=v).load_async]
        wrong += [f"dfkv_hybrid_loads={v}" for v in ("1", "true", "yes", "on")
                  if not self.connector(dfkv_hybrid_loads=v).hybrid_loads]
        self.assertEqual(wrong, [], "settings read as the opposite of what they say")
        with self.assertRaises(ValueError):
            self.connector(dfkv_load_async="maybe")


class VLLMOutageLogTest(unittest.TestCase):
    def test_a_save_without_a_client_is_not_a_warning(self):
        # The connector's open failed (an MDS down at start): for
        # dfkv_reopen_interval_s saves are skipped quietly, the failed open
        # having said why once. Built by hand: no torch, no vLLM config.
        from dfkv import vllm as dvl
        c = object.__new__(dvl.DfkvConnector)
        c._slot = ClientSlot("dfkv vLLM connector", 600.0)
        with self.assertRaises(dfkv.DfkvError):
            c._slot.get(fail_open)
        c._pieces = lambda ids: []
        c._stats, c._stats_lock = dvl.DfkvConnectorStats(), threading.Lock()
        tr = dvl.BlockTransfer("r1", ["h0", "h1"], [1, 2])
        with self.assertLogs("dfkv.vllm", logging.DEBUG) as logs:
            bad = c._save(tr)
        self.assertEqual(bad, 2)
        self.assertEqual([m for m in logs.output if m.startswith("WARNING")], [], logs.output)


class ClientEdgesTest(unittest.TestCase):
    def test_get_range_refuses_negative_offset_and_length(self):
        c = dfkv.Client(members(), b"edges-" + uuid.uuid4().hex.encode())
        self.addCleanup(c.close)
        c.put(b"k", bytes(range(100)))
        buf = bytearray(100)
        with self.assertRaises(ValueError):
            c.get_range(b"k", 10, -1, buf)
        with self.assertRaises(ValueError) as cm:
            c.get_range(b"k", -5, 5, buf)
        self.assertNotIn("18446744073709551611", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
