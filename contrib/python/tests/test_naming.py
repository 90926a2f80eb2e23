"""How blocks are named: the engine's real KV format reaches the namespace,
and the identity encoders never map two inputs to one identity (nor
refuse what they encode).

    scripts/test-contrib.sh -k test_naming
"""

import importlib
import sys
import unittest
import uuid

from dfkv import identity as ident

from . import sglang_upstream as up
from ._servers import members

dsg = None
_undo = None


def setUpModule():
    global dsg, _undo
    _undo = up.install()
    sys.modules.pop("dfkv.sglang", None)
    dsg = importlib.import_module("dfkv.sglang")


def tearDownModule():
    _undo()
    sys.modules.pop("dfkv.sglang", None)


class SGLangFp8Test(unittest.TestCase):
    """SGLang's host pools set self.dtype = device_pool.store_dtype
    (pool_host base.py), which is uint8 for both float8_e4m3fn and
    float8_e5m2: the KV's format is on pool.device_pool.dtype."""

    def storage(self, fp8, mla=False):
        extra = {"backend_name": "dfkv", "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
                 "interface_v1": 1, "dfkv_members": ",".join(members()), "dfkv_tenant": "pytest"}
        cfg = up.HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                      is_mla_model=mla, enable_storage_metrics=False, is_page_first_layout=True,
                                      model_name=self.model, extra_config=extra)
        st = dsg.DfkvHiCacheStorage(cfg, {})
        self.addCleanup(st.close)
        # What upstream hands the backend for --kv-cache-dtype fp8_e4m3 / fp8_e5m2:
        # a host pool whose dtype is the store dtype (uint8, 1 byte per element).
        pool = up.KVHostPool("page_first", dtype=fp8, itemsize=1, mla=mla)
        self.assertEqual(pool.dtype, "uint8")
        st.register_mem_pool_host(pool)
        return st

    def setUp(self):
        self.model = "test/naming-fp8-" + uuid.uuid4().hex

    def test_fp8_e4m3_and_e5m2_kv_get_different_namespaces(self):
        e4m3, e5m2 = self.storage("float8_e4m3fn"), self.storage("float8_e5m2")
        self.assertEqual(e4m3.object_key("page-hash"), e5m2.object_key("page-hash"))
        self.assertFalse(e4m3.namespace().encode() == e5m2.namespace().encode(),
                         "an fp8_e5m2 deployment reads the pages an fp8_e4m3 one wrote (same namespace, dtype "
                         f"{e4m3.namespace().dtype!r}, same key): the bytes are decoded in the wrong fp8 format")

    def test_fp8_e4m3_and_e5m2_mla_get_different_namespaces(self):
        e4m3, e5m2 = self.storage("float8_e4m3fn", mla=True), self.storage("float8_e5m2", mla=True)
        self.assertFalse(e4m3.namespace().encode() == e5m2.namespace().encode(),
                         f"MLA: both namespaces have dtype {e4m3.namespace().dtype!r}")


class IdentityEncodingTest(unittest.TestCase):
    def test_decode_namespace_accepts_non_utf8_experimental_layout_like_go(self):
        # wire.DecodeNamespace accepts any "x-" + name layout ID, bytes
        # verbatim (TestDecodeNonUTF8ExperimentalLayout in wire), and what
        # it accepts re-encodes to the same bytes; so does Python.
        d = ident.NamespaceDescriptor("t", "m", "", b"x-\xff", "bfloat16", 1, 16, ident.LayerGeometry(1, 1, 1))
        enc = d.encode()  # Python encodes it ...
        self.assertEqual(ident.decode_namespace(enc).encode(), enc)  # ... but cannot decode it

    def test_layout_fingerprint_does_not_wrap_out_of_range_values(self):
        # Go takes int64 values: 2**64 (which a mask would hash as 0), 2**63
        # (as -2**63) and floats are refused, in-range values still hash.
        fp = ident.layout_fingerprint
        for v in (2 ** 64, 2 ** 63, -(2 ** 63) - 1, 1.5):
            with self.assertRaises(ident.IdentityError, msg=repr(v)):
                fp([("k_shape", [v])])
        self.assertNotEqual(fp([("k_shape", [2 ** 63 - 1])]), fp([("k_shape", [-(2 ** 63)])]))

    def test_object_key_ranks_are_not_truncated(self):
        # A non-integer rank is refused, not rendered as int(rank) (tp rank
        # 1.5 naming rank 1's object).
        with self.assertRaises(ident.IdentityError):
            ident.ObjectKey(pool="p", hash="h", tp=(2, 1.5)).render_bytes()
        self.assertIn(b"|tp=2:1|", ident.ObjectKey(pool="p", hash="h", tp=(2, 1)).render_bytes())

    def test_descriptor_block_tokens_not_truncated(self):
        base = dict(tenant="t", model_id="m", model_revision="", layout_id=ident.LAYOUT_VLLM, dtype="bfloat16",
                    layout_fingerprint=1, layer_geometry=ident.LayerGeometry(1, 1, 1))
        with self.assertRaises(ident.IdentityError):
            ident.NamespaceDescriptor(block_tokens=16.5, **base).encode()
        ident.NamespaceDescriptor(block_tokens=16, **base).encode()


if __name__ == "__main__":
    unittest.main()
