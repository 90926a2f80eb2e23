"""Embedded mode: Client(embedded=...) opens a store inside this process
through libdfkv.so (no server, no port), with the calls and answers of a
connected client; handles of one configuration share it; a disk has one
owning process, and another is told which."""

import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
import uuid
import warnings

import dfkv
from dfkv import Status


def ns():
    return b"embedded-test-" + uuid.uuid4().hex.encode()


RAM = {"ram_tier_bytes": "64MiB"}


class EmbeddedStore(unittest.TestCase):
    def test_calls_and_answers(self):
        with dfkv.Client(None, ns(), embedded=RAM) as c:
            self.assertTrue(c.embedded)
            v = os.urandom(1 << 20)
            c.put(b"k\x00nul", v)
            self.assertEqual(bytes(c.get(b"k\x00nul")), v)
            buf = bytearray(len(v))
            self.assertEqual(c.get_into(b"k\x00nul", buf), len(v))
            self.assertEqual(bytes(buf), v)
            self.assertIsNone(c.get(b"missing"))
            self.assertTrue(c.exist(b"k\x00nul"))
            keys = [b"a", b"b", b"c"]
            self.assertEqual(c.put_batch(keys[:2], [b"x" * 10, b"y" * 20]), [Status.OK, Status.OK])
            self.assertEqual(c.exist_prefix(keys), 2)
            c.remove(b"a")
            self.assertFalse(c.exist(b"a"))
            with self.assertRaises(dfkv.InvalidArgument):
                c.put(b"empty", b"")
            small = bytearray(10)
            with self.assertRaises(dfkv.TooLarge):
                c.get_into(b"k\x00nul", small)

    def test_handles_of_one_configuration_share_the_store(self):
        n = ns()
        cfg = "[server]\nram_tier_bytes = \"64MiB\"\n"
        a = dfkv.Client(None, n, embedded=cfg)
        b = dfkv.Client(None, n, embedded=dfkv.server_toml(RAM))  # the same text
        a.put(b"shared", b"value")
        a.close()
        self.assertEqual(bytes(b.get(b"shared")), b"value")
        b.close()

    def test_equivalent_configurations_share_the_store(self):
        # Compared as resolved: no text, an empty section and the default
        # spelled out are one configuration, so one store.
        old = os.environ.pop("DFKV_EMBEDDED_CONFIG", None)
        try:
            n = ns()
            with dfkv.Client(None, n, embedded={}) as a, dfkv.Client(dfkv.EMBEDDED, n) as b, \
                    dfkv.Client(None, n, embedded={"ram_tier_bytes": "1GiB"}) as c:
                a.put(b"k", b"v")
                self.assertEqual(bytes(b.get(b"k")), b"v")
                self.assertEqual(bytes(c.get(b"k")), b"v")
        finally:
            if old is not None:
                os.environ["DFKV_EMBEDDED_CONFIG"] = old

    def test_values_up_to_the_stores_max_block_bytes(self):
        # A handle that names no max_block_bytes takes the store's, not
        # the 64 MiB a connected client defaults to.
        with dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "512MiB", "max_block_bytes": "128MiB"}) as c:
            v = os.urandom(80 << 20)
            c.put(b"big", v)
            self.assertEqual(bytes(c.get(b"big")), v)
            with self.assertRaises(dfkv.TooLarge):
                c.put(b"bigger", bytes(129 << 20))

    def test_exist_prefix_names_the_bad_key_only_when_it_ends_the_prefix(self):
        with dfkv.Client(None, ns(), embedded=RAM) as c:
            c.put_batch([b"a", b"x"], [b"1", b"2"])
            # A miss ends the prefix before the bad key: no error.
            self.assertEqual(c.exist_prefix([b"a", b"missing", b"x", b""], raise_on_error=True), 1)
            with self.assertRaises(dfkv.InvalidArgument) as cm:
                c.exist_prefix([b"a", b"x", b""], raise_on_error=True)
            self.assertIn("item 2", str(cm.exception))

    def test_members_embedded_reads_the_environment(self):
        old = os.environ.get("DFKV_EMBEDDED_CONFIG")
        os.environ["DFKV_EMBEDDED_CONFIG"] = dfkv.server_toml(RAM)
        try:
            with dfkv.Client(dfkv.EMBEDDED, ns()) as c:
                self.assertTrue(c.embedded)
                c.put(b"k", b"v")
                self.assertEqual(bytes(c.get(b"k")), b"v")
        finally:
            if old is None:
                del os.environ["DFKV_EMBEDDED_CONFIG"]
            else:
                os.environ["DFKV_EMBEDDED_CONFIG"] = old

    def test_bad_configuration_is_refused_clearly(self):
        for cfg, want in (({"ram_tier": 0}, "would keep nothing"), ("[server]\nbogus = 1\n", "bogus"),
                          ("[server", "TOML"), ({"ram_tier_bytes": "lots"}, "ram_tier_bytes")):
            with self.assertRaises(dfkv.DfkvError) as cm:
                dfkv.Client(None, ns(), embedded=cfg)
            self.assertIn(want, str(cm.exception))
        with self.assertRaises(dfkv.InvalidArgument):
            dfkv.Client("127.0.0.1:7600", ns(), embedded=RAM)
        with self.assertRaises(dfkv.InvalidArgument):
            dfkv.server_toml({"disks": ["/a\nb"]})

    def test_disk_survives_and_has_one_owner(self):
        with tempfile.TemporaryDirectory(prefix="dfkv-embedded-") as d:
            cfg = {"ram_tier_bytes": "64MiB", "disks": [os.path.join(d, "disk")], "disk_capacity_bytes": "256MiB"}
            n = ns()
            with dfkv.Client(None, n, embedded=cfg) as c:
                for i in range(20):
                    c.put(f"k{i}".encode(), bytes([i]) * (4096 + i))
            # Another process holds the disk: this one is told which.
            child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
                import sys, dfkv
                c = dfkv.Client(None, {n!r}, embedded={cfg!r})
                print("open", flush=True)
                sys.stdin.read()
                c.close()
                """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=os.environ.copy())
            try:
                self.assertEqual(child.stdout.readline().strip(), b"open")
                with self.assertRaises(dfkv.DfkvError) as cm:
                    dfkv.Client(None, n, embedded=cfg)
                self.assertIn(f"in use by pid {child.pid}", str(cm.exception))
            finally:
                child.stdin.close()
                child.wait(timeout=60)
                child.stdout.close()
            self.assertEqual(child.returncode, 0)
            with dfkv.Client(None, n, embedded=cfg) as c:
                for i in range(20):
                    self.assertEqual(bytes(c.get(f"k{i}".encode())), bytes([i]) * (4096 + i))

    def test_forked_child_does_not_keep_the_disk(self):
        # Engines fork workers without exec. A child shares the parent's
        # open files, and a flock with them; the library closes the
        # child's copies of the disk locks right after fork, so the disk
        # is free for another process once the parent closes its store.
        with tempfile.TemporaryDirectory(prefix="dfkv-embedded-") as d:
            cfg = {"ram_tier_bytes": "64MiB", "disks": [os.path.join(d, "disk")], "disk_capacity_bytes": "256MiB"}
            n = ns()
            c = dfkv.Client(None, n, embedded=cfg)
            c.put(b"k", b"kept")
            r, w = os.pipe()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded process"
                pid = os.fork()
            if pid == 0:  # the worker: lives on, never touches dfkv
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            os.close(r)
            try:
                c.close()
                other = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
                    import dfkv
                    with dfkv.Client(None, {n!r}, embedded={cfg!r}) as c:
                        assert bytes(c.get(b"k")) == b"kept"
                    """)], capture_output=True, text=True, timeout=120, env=os.environ.copy())
                self.assertEqual(other.returncode, 0, other.stderr[-800:])
            finally:
                os.close(w)  # the worker exits
                os.waitpid(pid, 0)


class Connectors(unittest.TestCase):
    def test_endpoints_open_the_embedded_store(self):
        from dfkv._common import Endpoints
        ep = Endpoints.from_settings({"dfkv_members": "embedded", "dfkv_embedded_config": RAM}, "test")
        self.assertEqual(repr(ep), "embedded store")
        with ep.open_client(ns(), "test") as c:
            self.assertTrue(c.embedded)
            c.put(b"k", b"v")
            self.assertEqual(bytes(c.get(b"k")), b"v")
        with self.assertRaises(ValueError):
            Endpoints.from_settings({"dfkv_members": "embedded", "dfkv_mds": "127.0.0.1:7700"}, "test")

    def test_lmcache_url(self):
        from dfkv.lmcache import parse_dfkv_url
        self.assertEqual(parse_dfkv_url("dfkv://embedded?tenant=t"), ("embedded", {"tenant": "t"}))


if __name__ == "__main__":
    unittest.main()
