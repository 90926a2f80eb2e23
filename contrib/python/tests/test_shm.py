"""dfkv.Client over shared memory: a real node of its own with the RAM tier
and a shared-memory socket (server.shm_socket), on this host."""

import os
import tempfile
import unittest
import uuid

import dfkv
from dfkv import Status

from ._servers import Server, members

try:
    import torch
except ImportError:  # the tensor case is skipped; the rest runs
    torch = None


class ShmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sockdir = tempfile.TemporaryDirectory(prefix="dfkv-pytest-shm-")
        sock = os.path.join(cls.sockdir.name, "dfkv.sock")
        cls.node = Server(args=("--ram-tier", "1", "--ram-tier-bytes", "256MiB", "--shm-socket", sock))
        cls.ns = b"pytest-shm-" + uuid.uuid4().hex.encode()
        cls.shm = dfkv.Client(cls.node.addr, cls.ns, shm="on")
        cls.tcp = dfkv.Client(cls.node.addr, cls.ns, shm="off")

    @classmethod
    def tearDownClass(cls):
        cls.shm.close()
        cls.tcp.close()
        cls.node.close()
        cls.sockdir.cleanup()

    def test_round_trip_both_ways(self):
        vals = {f"k{i}": os.urandom(n) for i, n in enumerate([1, 4097, 1 << 20])}
        for i, (k, v) in enumerate(vals.items()):
            (self.shm if i % 2 else self.tcp).put(k, v)
        for k, v in vals.items():
            self.assertEqual(bytes(self.shm.get(k)), v, k)
            self.assertEqual(bytes(self.tcp.get(k)), v, k)
        keys = list(vals) + ["missing"]
        bufs = [bytearray(len(vals.get(k, b"x"))) for k in keys]
        st, n = self.shm.batch_get_into(keys, bufs)
        self.assertEqual(st, [Status.OK] * 3 + [Status.NOT_FOUND])
        for k, b in zip(keys[:3], bufs):
            self.assertEqual(bytes(b), vals[k])

    @unittest.skipIf(torch is None, "torch is not importable")
    def test_batch_into_one_tensor(self):
        n, size = 16, 256 << 10
        keys = [f"t/{i}" for i in range(n)]
        vals = [os.urandom(size) for _ in keys]
        self.assertEqual(set(self.shm.batch_put(keys, vals)), {Status.OK})
        out = torch.zeros(n * size, dtype=torch.uint8)
        st, _ = self.shm.batch_get_into(keys, list(out.split(size)))
        self.assertEqual(set(st), {Status.OK})
        self.assertEqual(bytes(out.numpy()), b"".join(vals))

    def test_pinned_lookup(self):
        # Pins need the RAM tier, which this node has: a pinned lookup
        # answers as the unpinned one and leaves a pin live until a GET.
        self.tcp.put("pin/a", b"A" * 1000)
        self.assertEqual(self.tcp.exist_prefix(["pin/a", "pin/none"], pin=True), 1)
        st, sizes = self.tcp.batch_exist(["pin/a", "pin/none"], pin=True)
        self.assertEqual((st, sizes[0]), ([Status.OK, Status.NOT_FOUND], 1000))
        pins = self.tcp.stats()[self.node.addr]["pins"]
        self.assertEqual(pins["live"], 2, pins)
        self.shm.get("pin/a")
        self.assertEqual(self.tcp.stats()[self.node.addr]["pins"]["live"], 1)

    def test_on_refuses_a_node_without_it(self):
        c = dfkv.Client(members()[0], self.ns, shm="on", timeout_ms=3000)
        try:
            with self.assertRaises(dfkv.DfkvError) as e:
                c.put("k", b"v")
            self.assertIn("shared memory", str(e.exception))
        finally:
            c.close()

    def test_bad_mode(self):
        with self.assertRaises(ValueError):
            dfkv.Client(self.node.addr, self.ns, shm="sometimes")


if __name__ == "__main__":
    unittest.main()
