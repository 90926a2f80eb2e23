"""The SGLang HiCache connector against real dfkv nodes."""

import ctypes
import types
import unittest
import uuid

from dfkv import sglang as dsg

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
