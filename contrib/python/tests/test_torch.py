"""Tensor round trips through libdfkv.so (Debian's python3-torch, CPU)."""

import unittest
import uuid

import dfkv
from dfkv import Status

from ._servers import members

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


@unittest.skipIf(torch is None, "torch is not importable by this interpreter: apt-get install python3-torch "
                 "and run under /usr/bin/python3")
class TensorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        desc = dfkv.NamespaceDescriptor(
            tenant="pytest", model_id="test/torch", model_revision=uuid.uuid4().hex,
            layout_id=dfkv.LAYOUT_VLLM, dtype="bfloat16",
            layout_fingerprint=dfkv.layout_fingerprint([("kv_block_shape", [2, 16, 8, 128])]),
            block_tokens=16, layer_geometry=dfkv.LayerGeometry(32, 8, 128))
        cls.c = dfkv.Client(members(), desc)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_bf16_and_fp16_round_trip(self):
        for dtype in (torch.bfloat16, torch.float16):
            with self.subTest(str(dtype)):
                src = torch.randn(2, 16, 8, 128, dtype=torch.float32).to(dtype)
                key = f"tensor/{dtype}".encode()
                self.c.put(key, src)
                self.assertEqual(self.c.stored_length(key), src.numel() * src.element_size())
                dst = torch.zeros_like(src)
                self.assertEqual(self.c.get_into(key, dst), src.numel() * 2)
                self.assertTrue(torch.equal(src, dst))
                # Raw bytes are the tensor's bytes exactly, no envelope.
                raw = bytes(self.c.get(key))
                self.assertEqual(raw, src.view(torch.uint8).numpy().tobytes() if dtype != torch.bfloat16
                                 else src.view(torch.int16).numpy().tobytes())

    def test_slices_of_a_paged_buffer_are_written_in_place(self):
        pool = torch.zeros(8, 2, 64, dtype=torch.float16)
        blocks = [torch.randn(2, 64, dtype=torch.float16) for _ in range(3)]
        keys = [f"page/{i}".encode() for i in range(3)]
        self.assertEqual(self.c.batch_put(keys, blocks), [Status.OK] * 3)
        st, stored = self.c.batch_get_into(keys, [pool[5], pool[1], pool[7]])
        self.assertEqual(st, [Status.OK] * 3)
        self.assertTrue(torch.equal(pool[5], blocks[0]) and torch.equal(pool[1], blocks[1]) and torch.equal(pool[7], blocks[2]))
        self.assertTrue(torch.equal(pool[0], torch.zeros(2, 64, dtype=torch.float16)), "a neighbour page was touched")

    def test_scatter_gather_k_and_v_planes(self):
        kv = torch.randn(2, 4, 16, 8, dtype=torch.bfloat16)  # [K/V, blocks, tokens, dim]
        self.c.put_sg(b"sg-block", [kv[0, 2], kv[1, 2]])
        out = torch.zeros(2, 4, 16, 8, dtype=torch.bfloat16)
        self.assertEqual(self.c.get_sg(b"sg-block", [out[0, 1], out[1, 1]]), 2 * 16 * 8 * 2)
        self.assertTrue(torch.equal(out[0, 1], kv[0, 2]) and torch.equal(out[1, 1], kv[1, 2]))

    def test_non_contiguous_rejected_not_copied(self):
        t = torch.randn(16, 8, dtype=torch.float16).t()
        self.assertFalse(t.is_contiguous())
        with self.assertRaises(dfkv.InvalidArgument) as cm:
            self.c.put(b"nc-tensor", t)
        self.assertIn("not contiguous", str(cm.exception))
        with self.assertRaises(dfkv.InvalidArgument):
            self.c.get_into(b"nc-tensor", t)
        self.assertIsNone(self.c.stored_length(b"nc-tensor"))
        # Explicitly contiguous is fine.
        self.c.put(b"nc-tensor", t.contiguous())
        back = torch.empty(8, 16, dtype=torch.float16)
        self.c.get_into(b"nc-tensor", back)
        self.assertTrue(torch.equal(back, t))

    def test_empty_tensor_rejected(self):
        with self.assertRaises(dfkv.InvalidArgument):
            self.c.put(b"empty-tensor", torch.empty(0, dtype=torch.float16))

    def test_destination_too_small(self):
        self.c.put(b"big-tensor", torch.ones(64, dtype=torch.float16))
        with self.assertRaises(dfkv.TooLarge):
            self.c.get_into(b"big-tensor", torch.empty(32, dtype=torch.float16))


if __name__ == "__main__":
    unittest.main()
