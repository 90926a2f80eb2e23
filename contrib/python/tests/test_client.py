"""dfkv.Client through libdfkv.so against the real servers of
scripts/test-contrib.sh (three nodes)."""

import array
import os
import subprocess
import threading
import time
import unittest
import uuid

import dfkv
from dfkv import Status

from ._servers import Server, members


def ns(name):
    return dfkv.NamespaceDescriptor(
        tenant="pytest", model_id="test/" + name, model_revision=uuid.uuid4().hex,
        layout_id="x-pytest", dtype="uint8", layout_fingerprint=0, block_tokens=1,
        layer_geometry=dfkv.LayerGeometry(1, 1, 1))


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.members = members()
        cls.c = dfkv.Client(cls.members, ns("client"), timeout_ms=10000)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_round_trip_buffer_kinds(self):
        c = self.c
        for i, value in enumerate([b"bytes value", bytearray(b"bytearray value"), memoryview(b"read-only view"),
                                   memoryview(bytearray(b"writable view")), array.array("I", [1, 2, 3])]):
            with self.subTest(type(value).__name__):
                k = f"kinds/{i}"
                c.put(k, value)
                want = bytes(value)
                self.assertEqual(bytes(c.get(k)), want)
                dst = bytearray(len(want))
                self.assertEqual(c.get_into(k, dst), len(want))
                self.assertEqual(bytes(dst), want)
                self.assertEqual(c.stored_length(k), len(want))

    def test_exist_and_rm_with_their_aliases(self):
        # exist/rm are the C and CLI names; exists/remove the earlier ones.
        c = self.c
        for exist, rm in ((c.exist, c.rm), (c.exists, c.remove), (c.exist, c.remove), (c.exists, c.rm)):
            with self.subTest(f"{exist.__name__}/{rm.__name__}"):
                c.put(b"alias/k", b"v")
                self.assertIs(exist(b"alias/k"), True)
                self.assertIs(rm(b"alias/k"), True)
                self.assertIs(exist(b"alias/k"), False)
                self.assertIs(rm(b"alias/k"), False)
                self.assertIsNone(c.get(b"alias/k"))

    def test_batch_calls_under_their_c_names(self):
        c = self.c
        keys = [b"cname/0", b"cname/1", b"cname/missing"]
        c.rm(keys[2])
        self.assertEqual(c.put_batch(keys[:2], [b"zero", b"one!"]), [Status.OK, Status.OK])
        bufs = [bytearray(8) for _ in keys]
        st, stored = c.get_batch(keys, bufs)
        self.assertEqual((st, stored), ([Status.OK, Status.OK, Status.NOT_FOUND], [4, 4, 0]))
        self.assertEqual([bytes(b[:n]) for b, n in zip(bufs, stored)], [b"zero", b"one!", b""])
        self.assertEqual(c.exist_batch(keys), ([Status.OK, Status.OK, Status.NOT_FOUND], [4, 4, 0]))
        self.assertEqual(c.exist_batch(keys), c.batch_exist(keys))
        self.assertEqual(c.put_batch_sg(keys[:2], [[b"ab", b"cd"], [b"e"]]), [Status.OK, Status.OK])
        x, y, z = bytearray(3), bytearray(1), bytearray(1)
        self.assertEqual(c.get_batch_sg(keys[:2], [[x, y], [z]]), ([Status.OK, Status.OK], [4, 1]))
        self.assertEqual(bytes(x + y + z), b"abcde")
        r = bytearray(2)
        self.assertEqual(c.get_batch_range_sg(keys[:1], [1], [[r]]), ([Status.OK], [4]))
        self.assertEqual(bytes(r), b"bc")
        self.assertEqual(c.remove_batch(keys), [Status.OK, Status.OK, Status.NOT_FOUND])
        self.assertEqual(c.batch_remove(keys), [Status.NOT_FOUND] * 3)

    def test_get_into_memoryview_slice_writes_in_place(self):
        self.c.put(b"slice", b"abcd")
        big = bytearray(b"........")
        self.assertEqual(self.c.get_into(b"slice", memoryview(big)[2:6]), 4)
        self.assertEqual(bytes(big), b"..abcd..")

    def test_get_sizes_its_first_read_per_thread(self):
        # A large value read on one thread must not make another thread's
        # small reads allocate (and zero) the large size.
        c = self.c
        c.put(b"hint/big", bytes(4 << 20))
        c.put(b"hint/small", b"s" * 4096)
        self.assertEqual(len(c.get(b"hint/big")), 4 << 20)
        seen = []

        def reader():
            seen.append(getattr(c._get_hint, "n", None))
            seen.append(bytes(c.get(b"hint/small")))
            seen.append(c._get_hint.n)

        t = threading.Thread(target=reader)
        t.start()
        t.join()
        self.assertEqual(seen, [None, b"s" * 4096, 4096])
        self.assertEqual(c._get_hint.n, 4 << 20)  # this thread's own

    def test_nul_bytes_are_identity(self):
        c = self.c
        keys = [b"n", b"n\x00", b"n\x00a", b"n\x00b", b"\x00"]
        c.batch_remove(keys)
        for i, k in enumerate(keys):
            c.put(k, bytes([i]) * (i + 1))
        for i, k in enumerate(keys):
            self.assertEqual(bytes(c.get(k)), bytes([i]) * (i + 1), k)
        self.assertIsNone(c.get(b"n\x00c"))
        # str keys are UTF-8 bytes, NUL included
        self.assertEqual(bytes(c.get("n\x00a")), bytes([2]) * 3)

    def test_zero_length_rejected_with_invalid(self):
        c = self.c
        cases = [
            ("empty key put", lambda: c.put(b"", b"v")),
            ("empty value put", lambda: c.put(b"k", b"")),
            ("empty bytearray value", lambda: c.put(b"k", bytearray())),
            ("empty key get", lambda: c.get_into(b"", bytearray(4))),
            ("empty destination", lambda: c.get_into(b"k", bytearray())),
            ("empty key exist", lambda: c.exists("")),
            ("oversized key", lambda: c.exists(b"k" * 4097)),
            ("empty sg piece", lambda: c.put_sg(b"k", [b"a", b""])),
        ]
        for name, fn in cases:
            with self.subTest(name):
                with self.assertRaises(dfkv.InvalidArgument) as cm:
                    fn()
                self.assertEqual(cm.exception.status, Status.INVALID)
                self.assertIsInstance(cm.exception, ValueError)
        st = c.batch_put([b"ok", b"", b"ok2"], [b"v", b"v", b""])
        self.assertEqual(st, [Status.OK, Status.INVALID, Status.INVALID])

    def test_error_names_what_failed(self):
        with self.assertRaises(dfkv.InvalidArgument) as cm:
            self.c.put(b"k", b"")
        self.assertIn("zero-byte value", str(cm.exception))
        self.c.put(b"big", b"xyz")
        with self.assertRaises(dfkv.TooLarge) as cm:
            self.c.get_into(b"big", bytearray(2))
        self.assertIn("destination buffer smaller than the stored value (2 bytes for 3)", str(cm.exception))
        self.assertIn("b'big'", str(cm.exception))
        with self.assertRaises(dfkv.NotFound) as cm:
            self.c.get_into(b"never-put", bytearray(2))
        self.assertIn("get_into b'never-put': not stored", str(cm.exception))

    def test_non_contiguous_buffer_rejected(self):
        buf = bytearray(8)
        with self.assertRaises(dfkv.InvalidArgument) as cm:
            self.c.put(b"nc", memoryview(buf)[::2])
        self.assertIn("copy", str(cm.exception))
        with self.assertRaises(TypeError):
            self.c.get_into(b"nc", b"read-only bytes")

    def test_batch_with_some_misses(self):
        c = self.c
        keys = [f"batch/{i}".encode() for i in range(50)]
        c.batch_remove(keys)
        present = [k for i, k in enumerate(keys) if i % 3]
        self.assertTrue(all(s == Status.OK for s in c.batch_put(present, [k * 3 for k in present])))
        bufs = [bytearray(64) for _ in keys]
        st, stored = c.batch_get_into(keys, bufs)
        for i, k in enumerate(keys):
            if i % 3:
                self.assertEqual(st[i], Status.OK)
                self.assertEqual(bytes(bufs[i][:stored[i]]), k * 3)
            else:
                self.assertEqual((st[i], stored[i]), (Status.NOT_FOUND, 0))
        self.assertEqual(c.batch_exists(keys), [bool(i % 3) for i in range(len(keys))])
        got = c.batch_get(keys)
        self.assertEqual([g is not None for g in got], [bool(i % 3) for i in range(len(keys))])
        rm = c.batch_remove(keys)
        self.assertEqual(rm, [Status.OK if i % 3 else Status.NOT_FOUND for i in range(len(keys))])

    def test_prefix_count_across_three_nodes(self):
        self.assertEqual(len(self.members), 3, "the prefix test needs the script's three nodes")
        c = self.c
        keys = [f"prefix/{i}".encode() for i in range(60)]
        # The keys must really spread over all three nodes: route them with
        # the Python Ketama ring (golden-tested against Go) as the client does.
        ring = dfkv.Ring([(m, 1) for m in self.members])
        owners = {self.members[ring.get(dfkv.block_key(c.namespace, k).route_hash)] for k in keys}
        self.assertEqual(owners, set(self.members))
        c.batch_remove(keys)
        self.assertEqual(c.exist_prefix(keys), 0)
        c.batch_put(keys[:40], [b"v"] * 40)
        c.batch_put(keys[41:], [b"v"] * 19)
        self.assertEqual(c.exist_prefix(keys), 40)
        self.assertEqual(c.exist_prefix(keys[:10]), 10)
        self.assertEqual(c.exist_prefix(keys[41:]), 19)
        self.assertEqual(c.exist_prefix([]), 0)
        c.put(keys[40], b"v")
        self.assertEqual(c.exist_prefix(keys), 60)
        # An invalid key cuts the prefix like an error; raise_on_error says why.
        self.assertEqual(c.exist_prefix(keys[:5] + [b""] + keys[5:]), 5)
        with self.assertRaises(dfkv.InvalidArgument) as cm:
            c.exist_prefix(keys[:5] + [b""], raise_on_error=True)
        self.assertIn("item 5", str(cm.exception))
        c.remove(keys[0])
        self.assertEqual(c.exist_prefix(keys), 0)
        # Every node actually holds some of them.
        stats = c.stats()
        self.assertEqual(set(stats), set(self.members))

    def test_scatter_gather(self):
        c = self.c
        c.put_sg(b"sg", [b"head-", bytearray(b"middle-"), memoryview(b"tail")])
        self.assertEqual(bytes(c.get(b"sg")), b"head-middle-tail")
        a, b = bytearray(7), bytearray(9)
        self.assertEqual(c.get_sg(b"sg", [a, b]), 16)
        self.assertEqual(bytes(a + b), b"head-middle-tail")
        keys = [b"bsg/0", b"bsg/1"]
        self.assertEqual(c.batch_put_sg(keys, [[b"ab", b"cd"], [b"e"]]), [Status.OK, Status.OK])
        x, y, z = bytearray(3), bytearray(1), bytearray(1)
        st, stored = c.batch_get_sg(keys + [b"bsg/missing"], [[x, y], [z], [bytearray(1)]])
        self.assertEqual(st, [Status.OK, Status.OK, Status.NOT_FOUND])
        self.assertEqual(stored[:2], [4, 1])
        self.assertEqual(bytes(x + y + z), b"abcde")

    def test_batch_range_scatter_gather(self):
        c = self.c
        keys = [b"brsg/0", b"brsg/1"]
        self.assertEqual(c.batch_put_sg(keys, [[b"0123", b"456789"], [b"abc"]]), [Status.OK, Status.OK])
        mid_a, mid_b = bytearray(2), bytearray(3)
        past = bytearray(b"#" * 4)
        at_end, beyond, missing = bytearray(b"#"), bytearray(1), bytearray(1)
        st, stored = c.batch_get_range_sg(
            keys + [keys[1], keys[1], b"brsg/missing"], [3, 1, 3, 4, 0],
            [[mid_a, mid_b], [past], [at_end], [beyond], [missing]])
        self.assertEqual(st, [Status.OK, Status.OK, Status.OK, Status.INVALID, Status.NOT_FOUND])
        self.assertEqual(stored, [10, 3, 3, 3, 0])
        self.assertEqual(bytes(mid_a + mid_b), b"34567")
        self.assertEqual(bytes(past), b"bc##")   # a prefix, the rest untouched
        self.assertEqual(bytes(at_end), b"#")    # offset == stored: nothing read
        with self.assertRaises(dfkv.InvalidArgument):
            c.batch_get_range_sg(keys, [0], [[bytearray(1)], [bytearray(1)]])
        with self.assertRaises(dfkv.InvalidArgument):
            c.batch_get_range_sg(keys[:1], [-1], [[bytearray(1)]])

    def test_range(self):
        self.c.put(b"range", b"0123456789")
        buf = bytearray(4)
        self.assertEqual(self.c.get_range(b"range", 3, 4, buf), (4, 10))
        self.assertEqual(bytes(buf), b"3456")
        self.assertEqual(self.c.get_range(b"range", 10, 0, buf), (0, 10))
        with self.assertRaises(dfkv.InvalidArgument):
            self.c.get_range(b"range", 11, 0, buf)

    def test_closed_client_and_bad_open(self):
        c = dfkv.Client(self.members, b"closing")
        c.close()
        c.close()
        with self.assertRaises(dfkv.InvalidArgument):
            c.put(b"k", b"v")
        with self.assertRaises(dfkv.DfkvError) as cm:
            dfkv.Client(None, b"ns", mds="127.0.0.1:1", timeout_ms=2000)
        self.assertIn("MDS", str(cm.exception))
        with self.assertRaises(dfkv.InvalidArgument):
            dfkv.Client(self.members, b"ns", mds="127.0.0.1:1")
        with self.assertRaises(dfkv.InvalidArgument):
            dfkv.Client(self.members, b"")
        with self.assertRaises(dfkv.InvalidArgument):
            dfkv.Client("not-an-address", b"ns")

    def test_threads_share_a_client(self):
        errs = []

        def work(t):
            try:
                for i in range(50):
                    k = f"thr/{t}/{i}".encode()
                    self.c.put(k, k)
                    assert bytes(self.c.get(k)) == k
            except Exception as e:  # noqa: BLE001
                errs.append(e)

        ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        self.assertEqual(errs, [])

    def test_threads_get_their_own_error_messages(self):
        # Eight threads share one client and fail the same way with a
        # different number in libdfkv's message: each must read its own
        # failure's message, not the latest of any thread.
        wrong = []

        def work(t):
            key = b"k" * (4097 + t)
            for _ in range(300):
                try:
                    self.c.put(key, b"v")
                except dfkv.InvalidArgument as e:
                    if f"object key is {4097 + t} bytes" not in str(e):
                        wrong.append((t, str(e)))

        ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        self.assertEqual(wrong[:3], [], f"{len(wrong)} of 2,400 messages belonged to another thread")


class NamespaceTest(unittest.TestCase):
    """The namespace is bytes, as in the Go client and the C ABI: a plain
    name works, and equal bytes (however given) address the same blocks."""

    @classmethod
    def setUpClass(cls):
        cls.members = members()

    def test_plain_bytes_namespace_and_its_other_spellings(self):
        name = "plain-" + uuid.uuid4().hex
        key = b"ns/key"
        a = dfkv.Client(self.members, name.encode())
        self.addCleanup(a.close)
        self.assertEqual(a.namespace, name.encode())
        a.put(key, b"seen by equal namespace bytes")
        for spelling in (name, bytearray(name.encode()), memoryview(name.encode())):
            with self.subTest(type(spelling).__name__):
                b = dfkv.Client(self.members, spelling)
                self.addCleanup(b.close)
                self.assertEqual(b.namespace, name.encode())
                self.assertEqual(bytes(b.get(key)), b"seen by equal namespace bytes")
        other = dfkv.Client(self.members, name.encode() + b"\x00")  # NUL bytes are namespace bytes
        self.addCleanup(other.close)
        self.assertIsNone(other.get(key))
        desc = ns("namespace")
        d = dfkv.Client(self.members, desc)
        self.addCleanup(d.close)
        self.assertEqual(d.namespace, desc.encode())

    def test_other_types_are_refused(self):
        # bytes(5) is five NUL bytes: an int must not become a namespace.
        for bad in (5, None, [b"ns"]):
            with self.subTest(repr(bad)):
                with self.assertRaises(TypeError) as cm:
                    dfkv.Client(self.members, bad)
                self.assertIn("namespace must be bytes, str or a NamespaceDescriptor", str(cm.exception))

    def test_same_blocks_as_dfkv_ctl(self):
        # `dfkv ctl --namespace NAME` sends NAME's bytes: a Python client on
        # those bytes reads what the CLI wrote, and the CLI what it wrote.
        binary = os.environ.get("DFKV_BIN")
        if not binary:
            self.skipTest("DFKV_BIN is not set: run scripts/test-contrib.sh")
        name = "ctl-" + uuid.uuid4().hex
        ctl = [binary, "ctl", "--members", ",".join(self.members), "--namespace", name]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFKV_")}
        out = subprocess.run(ctl + ["put", "from-cli", "-"], input=b"written by dfkv ctl", env=env,
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        c = dfkv.Client(self.members, name.encode())
        self.addCleanup(c.close)
        self.assertEqual(bytes(c.get(b"from-cli")), b"written by dfkv ctl")
        c.put(b"from-python", b"written by dfkv.Client")
        out = subprocess.run(ctl + ["get", "from-python"], env=env, capture_output=True, timeout=60)
        self.assertEqual((out.returncode, out.stdout), (0, b"written by dfkv.Client"), out.stderr)


class LibraryTest(unittest.TestCase):
    def test_options_struct_matches_the_header(self):
        # libdfkv names the size it expects when struct_size is too small
        # (smaller than the struct as first published, which ended 8 bytes
        # before shm): it must be exactly the ctypes mirror of
        # dfkv_client_options_v2.
        import ctypes
        from dfkv import _lib
        lib = _lib.load()
        o = _lib.ClientOptionsV2()
        size = ctypes.sizeof(o)
        o.struct_size = _lib.ClientOptionsV2.shm.offset - 8
        h = ctypes.c_void_p()
        self.assertEqual(lib.dfkv_open_v2(ctypes.byref(o), ctypes.byref(h)), Status.INVALID)
        buf = ctypes.create_string_buffer(512)
        lib.dfkv_last_error(None, buf, 512)
        self.assertIn(f"dfkv_client_options_v2 ({size} bytes)", buf.value.decode())
        self.assertIsNone(h.value)

    def test_missing_library_is_a_clear_error(self):
        from dfkv import _lib
        with self.assertRaises(OSError) as cm:
            _lib.load("/nonexistent/libdfkv.so")
        self.assertIn("build-lib.sh", str(cm.exception))


class NodeFailureTest(unittest.TestCase):
    """A node SIGKILLed while batches run: per-item failures, no hang, no crash."""

    def setUp(self):
        self.a, self.b = Server(), Server()

    def tearDown(self):
        self.a.close()
        self.b.close()

    def test_kill_mid_batch(self):
        c = dfkv.Client([self.a.addr, self.b.addr], ns("kill"), timeout_ms=5000, dial_timeout_ms=1000)
        self.addCleanup(c.close)
        ring = dfkv.Ring([(self.a.addr, 1), (self.b.addr, 1)])
        keys = [f"kill/{i}".encode() for i in range(64)]
        on_a = [ring.get(dfkv.block_key(c.namespace, k).route_hash) == 0 for k in keys]
        self.assertTrue(any(on_a) and not all(on_a), "keys must span both nodes")
        value = os.urandom(1 << 20)
        self.assertEqual(c.batch_put(keys, [value] * len(keys)), [Status.OK] * len(keys))

        results, stop, spans = [], threading.Event(), []

        def reader():
            bufs = [bytearray(1 << 20) for _ in keys]
            while not stop.is_set():
                t0 = time.monotonic()
                results.append(c.batch_get_into(keys, bufs)[0])
                spans.append((t0, time.monotonic()))

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.3)  # several 64 MiB batches in flight
        t_kill = time.monotonic()
        self.a.kill()
        time.sleep(0.5)
        stop.set()
        t.join(timeout=20)
        self.assertFalse(t.is_alive(), "batch_get hung after a node was killed")
        self.assertTrue(any(s0 < t_kill < s1 for s0, s1 in spans), "no batch was in flight at the kill")
        # Reads of an unreachable node are misses (wire/client), so a
        # killed node's items are NOT_FOUND (or TIMEOUT/UNAVAILABLE while
        # its connection dies); the other node's items never fail.
        failed = [st for st in results if any(s != Status.OK for s in st)]
        self.assertTrue(failed, "no batch saw the killed node")
        for st in results:
            for i, (s, a) in enumerate(zip(st, on_a)):
                if a:
                    self.assertIn(s, (Status.OK, Status.NOT_FOUND, Status.UNAVAILABLE, Status.TIMEOUT), i)
                else:
                    self.assertEqual(s, Status.OK, f"item {i} on the surviving node failed")
        # After the kill: a's items fail fast as misses, b's succeed.
        t0 = time.monotonic()
        bufs = [bytearray(1 << 20) for _ in keys]
        st, stored = c.batch_get_into(keys, bufs)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(st, [Status.NOT_FOUND if a else Status.OK for a in on_a])
        for i, a in enumerate(on_a):
            if not a:
                self.assertEqual(bytes(bufs[i]), value, i)
        first_a = on_a.index(True)
        self.assertEqual(c.exist_prefix(keys), first_a)
        # Writes to the dead node are UNAVAILABLE (or TIMEOUT), per item.
        st = c.batch_put(keys, [b"v"] * len(keys))
        for s, a in zip(st, on_a):
            self.assertIn(s, (Status.UNAVAILABLE, Status.TIMEOUT) if a else (Status.OK,))
        with self.assertRaises((dfkv.Unavailable, dfkv.Timeout)) as cm:
            c.put(keys[first_a], b"v")
        self.assertIn(self.a.addr, str(cm.exception))


class UnreachableNodeTest(unittest.TestCase):
    """A one-key read of a node that cannot be reached raises Unavailable
    (or Timeout) naming the node; a key the node does not hold is None or
    False. libdfkv answers both as DFKV_NOT_FOUND; the client tells them
    apart."""

    def assert_unreachable(self, fn, addr, what):
        with self.assertRaises((dfkv.Unavailable, dfkv.Timeout)) as cm:
            fn()
        e = cm.exception
        self.assertNotIsInstance(e, dfkv.NotFound)
        self.assertIsInstance(e, dfkv.DfkvError)
        self.assertIn(e.status, (Status.UNAVAILABLE, Status.TIMEOUT))
        self.assertEqual(e.address, addr)
        self.assertIn(f"{what}: dfkv node {addr} could not be reached", str(e))
        self.assertNotIn("answered as a miss", str(e))
        return e

    def one_key_reads(self, c, key):
        """{method: (the call its message names, a call of it on key)}."""
        return {
            "get": ("get", lambda: c.get(key)),
            "exist": ("exist", lambda: c.exist(key)),
            "exists": ("exist", lambda: c.exists(key)),
            "stored_length": ("exist", lambda: c.stored_length(key)),
            "get_into": ("get_into", lambda: c.get_into(key, bytearray(64))),
            "get_range": ("get_range", lambda: c.get_range(key, 0, 1, bytearray(64))),
            "get_sg": ("get_sg", lambda: c.get_sg(key, [bytearray(64)])),
        }

    def test_nothing_listening(self):
        # A bound socket that never listens: connecting is refused, and no
        # other process can take the port during the test.
        import socket
        hold = socket.socket()
        self.addCleanup(hold.close)
        hold.bind(("127.0.0.1", 0))
        addr = "127.0.0.1:%d" % hold.getsockname()[1]
        c = dfkv.Client(addr, b"unreachable", timeout_ms=2000, dial_timeout_ms=500)
        self.addCleanup(c.close)
        # Twice: the first call dials, the second falls in the back-off window.
        for attempt in range(2):
            for name, (call, fn) in self.one_key_reads(c, b"k").items():
                with self.subTest(f"{name} #{attempt}"):
                    e = self.assert_unreachable(fn, addr, f"{call} b'k'")
                    self.assertIsInstance(e, dfkv.Unavailable)
                    self.assertIsInstance(e, ConnectionError)
                    if attempt == 0 and name == "get":
                        self.assertIn("connection refused", str(e))
        # Batch reads and exist_prefix keep libdfkv's miss answer.
        self.assertEqual(c.batch_exist([b"k"]), ([Status.NOT_FOUND], [0]))
        self.assertEqual(c.batch_get([b"k"]), [None])
        self.assertEqual(c.exist_prefix([b"k"], raise_on_error=True), 0)
        # Writes raised Unavailable before and still do.
        with self.assertRaises(dfkv.Unavailable):
            c.put(b"k", b"v")

    def test_stopped_node_versus_missing_key(self):
        a, b = Server(), Server()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        c = dfkv.Client([a.addr, b.addr], ns("unreachable"), timeout_ms=3000, dial_timeout_ms=500)
        self.addCleanup(c.close)
        ring = dfkv.Ring([(a.addr, 1), (b.addr, 1)])
        keys = [f"down/{i}".encode() for i in range(64)]
        owner = [(a.addr, b.addr)[ring.get(dfkv.block_key(c.namespace, k).route_hash)] for k in keys]
        on_a = [k for k, o in zip(keys, owner) if o == a.addr]
        on_b = [k for k, o in zip(keys, owner) if o == b.addr]
        self.assertTrue(len(on_a) >= 2 and len(on_b) >= 2, "keys must span both nodes")
        stored_a, missing_a = on_a[0], on_a[1]
        stored_b, missing_b = on_b[0], on_b[1]
        c.put(stored_a, b"on a")
        c.put(stored_b, b"on b")
        # Both nodes up: a missing key is None/False wherever it lives.
        for k in (missing_a, missing_b):
            self.assertIsNone(c.get(k))
            self.assertIs(c.exist(k), False)
            self.assertIsNone(c.stored_length(k))
            with self.assertRaises(dfkv.NotFound):
                c.get_into(k, bytearray(8))
        self.assertEqual(bytes(c.get(stored_a)), b"on a")
        a.kill()
        # a is down: its keys, stored or not, are unknown, not missing.
        for k in (stored_a, missing_a):
            for name, (call, fn) in self.one_key_reads(c, k).items():
                with self.subTest(f"{name} {k!r}"):
                    self.assert_unreachable(fn, a.addr, f"{call} {k!r}")
        # b is up: the same calls answer as before.
        self.assertEqual(bytes(c.get(stored_b)), b"on b")
        self.assertIs(c.exist(stored_b), True)
        self.assertIsNone(c.get(missing_b))
        self.assertIs(c.exist(missing_b), False)
        with self.assertRaises(dfkv.NotFound) as cm:
            c.get_into(missing_b, bytearray(8))
        self.assertIsNone(cm.exception.address)
        # A real miss right after an unreachable read on this thread is
        # still a miss (the message read is this call's, not the last one).
        with self.assertRaises(dfkv.Unavailable):
            c.get(stored_a)
        self.assertIsNone(c.get(missing_b))
        # The same with threads sharing the client, half reading the down
        # node and half the up node's missing key: no answer is the other's.
        wrong = []

        def work(t):
            for _ in range(200):
                try:
                    got = c.exist(stored_a if t % 2 else missing_b)
                    if t % 2 or got is not False:
                        wrong.append((t, got))
                except dfkv.Unavailable as e:
                    if not t % 2 or e.address != a.addr:
                        wrong.append((t, e))

        ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        self.assertEqual(wrong[:3], [], f"{len(wrong)} of 1,600 answers were wrong")


class StalledNodeTest(unittest.TestCase):
    """A node that stops answering (SIGSTOP) costs the call its timeout, not a hang."""

    def setUp(self):
        self.a, self.b = Server(), Server()
        self.addCleanup(self.a.close)
        self.addCleanup(self.b.close)

    def test_stopped_node_times_out_per_item(self):
        import signal
        c = dfkv.Client([self.a.addr, self.b.addr], ns("stall"), timeout_ms=1000, dial_timeout_ms=500)
        self.addCleanup(c.close)
        ring = dfkv.Ring([(self.a.addr, 1), (self.b.addr, 1)])
        keys = [f"stall/{i}".encode() for i in range(32)]
        on_a = [ring.get(dfkv.block_key(c.namespace, k).route_hash) == 0 for k in keys]
        self.assertEqual(c.batch_put(keys, keys), [Status.OK] * len(keys))
        self.addCleanup(lambda: self.a.proc.poll() is None and self.a.proc.send_signal(signal.SIGCONT))
        self.a.stop_process()
        t0 = time.monotonic()
        st, _ = c.batch_get_into(keys, [bytearray(64) for _ in keys])
        took = time.monotonic() - t0
        self.assertLess(took, 5, "a stalled node must cost about the 1 s timeout")
        self.assertEqual([s == Status.OK for s in st], [not a for a in on_a])
        for s, a in zip(st, on_a):
            if a:  # a read of an unreachable node is a miss; TIMEOUT if the client says so
                self.assertIn(s, (Status.NOT_FOUND, Status.TIMEOUT))
        st = c.batch_put(keys, keys)
        for s, a in zip(st, on_a):
            self.assertIn(s, (Status.TIMEOUT, Status.UNAVAILABLE) if a else (Status.OK,))
        # A one-key read of the stalled node is an error naming it, not a miss.
        with self.assertRaises((dfkv.Timeout, dfkv.Unavailable)) as cm:
            c.get(keys[on_a.index(True)])
        self.assertEqual(cm.exception.address, self.a.addr)
        # A client that has not yet failed on it waits its timeout: Timeout.
        fresh = dfkv.Client([self.a.addr, self.b.addr], c.namespace, timeout_ms=500, dial_timeout_ms=500)
        self.addCleanup(fresh.close)
        with self.assertRaises(dfkv.Timeout) as cm:
            fresh.exist(keys[on_a.index(True)])
        self.assertEqual(cm.exception.address, self.a.addr)
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertEqual(bytes(c.get(keys[on_a.index(False)])), keys[on_a.index(False)])
        self.a.proc.send_signal(signal.SIGCONT)


class MDSTest(unittest.TestCase):
    """Membership from a real `dfkv mds` through dfkv_open_v2's mds_addrs."""

    def setUp(self):
        self.mds = Server("mds")
        self.addCleanup(self.mds.close)
        self.nodes = []
        for _ in range(2):
            n = Server(args=("--mds", self.mds.addr, "--group", "pytest-g"))
            self.addCleanup(n.close)
            self.nodes.append(n)

    def test_discovers_members_and_serves(self):
        want = {n.addr for n in self.nodes}
        deadline = time.monotonic() + 20
        while True:
            c = dfkv.Client(None, ns("mds"), mds=self.mds.addr, group="pytest-g", timeout_ms=5000)
            got = set(c.stats())
            if got == want:
                break
            c.close()
            if time.monotonic() > deadline:
                self.fail(f"MDS group members {got}, want {want}")
            time.sleep(0.2)
        self.addCleanup(c.close)
        keys = [f"mds/{i}".encode() for i in range(20)]
        self.assertEqual(c.batch_put(keys, keys), [Status.OK] * 20)
        self.assertEqual(c.exist_prefix(keys), 20)
        self.assertEqual(bytes(c.get(keys[7])), keys[7])
        # A group nobody registered in has no members: a clear error.
        empty = dfkv.Client(None, ns("mds"), mds=self.mds.addr, group="empty-group", timeout_ms=2000)
        self.addCleanup(empty.close)
        with self.assertRaises(dfkv.Unavailable) as cm:
            empty.put(b"k", b"v")
        self.assertIn("no cache node", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
