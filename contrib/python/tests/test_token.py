"""Tokens for nodes that require credentials (`dfkv server
--credentials-file`), against a real node: the right token works, from the
argument or the environment; a wrong or missing one raises Unauthenticated;
a token of another tenant raises Forbidden on every call (batch calls: every
item's status) and leaves that tenant's blocks alone; no message, exception
or repr ever shows a token."""

import contextlib
import os
import unittest
from unittest import mock

import dfkv
from dfkv import Status
from dfkv._common import Endpoints

from ._servers import CredentialsServer, new_token

ALICE = new_token("alice")        # tenant acme: read, write, remove
BOB = new_token("bob")            # tenant globex: read, write, remove
READER = new_token("reader")      # tenant acme: read only
STRANGER = new_token("stranger")  # in no credential
TOKENS = (ALICE, BOB, READER, STRANGER)
RW = ["read", "write", "remove"]


@contextlib.contextmanager
def token_env(**env):
    """os.environ with DFKV_CLIENT_TOKEN and DFKV_TOKEN as given (unset
    when not given), as libdfkv sees them when a client opens."""
    with mock.patch.dict(os.environ):
        for name in ("DFKV_CLIENT_TOKEN", "DFKV_TOKEN"):
            os.environ.pop(name, None)
        os.environ.update(env)
        yield


def globex_descriptor():
    return dfkv.NamespaceDescriptor(
        tenant="globex", model_id="test/token", model_revision="", layout_id="x-pytest", dtype="uint8",
        layout_fingerprint=0, block_tokens=1, layer_geometry=dfkv.LayerGeometry(1, 1, 1))


class TokenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = CredentialsServer({ALICE: (["acme"], RW), BOB: (["globex"], RW), READER: (["acme"], ["read"])})
        cls.addr = cls.node.addr

    @classmethod
    def tearDownClass(cls):
        cls.node.close()

    def client(self, namespace, **kw):
        c = dfkv.Client(self.addr, namespace, timeout_ms=10000, shm="off", **kw)
        self.addCleanup(c.close)
        return c

    def assertNoToken(self, *texts):
        for text in texts:
            for tok in TOKENS:
                self.assertNotIn(tok, text)
                self.assertNotIn(tok[-16:], text)

    def assertRaisesAuth(self, cls, fn, *args):
        with self.assertRaises(cls) as cm:
            fn(*args)
        e = cm.exception
        self.assertIsInstance(e, PermissionError)
        self.assertIsInstance(e, dfkv.DfkvError)
        self.assertEqual(e.status, cls.status)
        self.assertNoToken(str(e), repr(e), repr(e.args))
        return e

    def test_right_token_works(self):
        with token_env():
            c = self.client("acme", token=ALICE)
            c.put(b"k\x00a", b"alice's value")
            self.assertEqual(c.get(b"k\x00a"), b"alice's value")
            self.assertTrue(c.exists(b"k\x00a"))
            self.assertEqual(c.batch_put([b"b1", b"b2"], [b"one", b"two"]), [Status.OK, Status.OK])
            self.assertEqual(c.batch_get([b"b1", b"b2", b"none"]), [b"one", b"two", None])
            self.assertEqual(c.exist_prefix([b"b1", b"b2"], raise_on_error=True), 2)
            self.assertTrue(c.remove(b"k\x00a"))
            self.assertEqual(c.batch_remove([b"b1", b"b2"]), [Status.OK, Status.OK])
            self.assertNoToken(repr(c), str(c), repr(vars(c)))
            # bytes work as well as str.
            self.assertFalse(self.client("acme", token=ALICE.encode()).exists(b"k\x00a"))

    def test_token_from_the_environment(self):
        # DFKV_CLIENT_TOKEN, else DFKV_TOKEN; the argument comes first.
        for env in ({"DFKV_CLIENT_TOKEN": ALICE}, {"DFKV_TOKEN": ALICE},
                    {"DFKV_CLIENT_TOKEN": ALICE, "DFKV_TOKEN": STRANGER}, {"DFKV_CLIENT_TOKEN": "", "DFKV_TOKEN": ALICE}):
            with self.subTest(env=sorted(k for k, v in env.items() if v)), token_env(**env):
                c = self.client("acme")
                c.put(b"env-key", b"v")
                self.assertTrue(c.remove(b"env-key"))
        with token_env(DFKV_CLIENT_TOKEN=STRANGER):
            self.client("acme", token=ALICE).put(b"arg-key", b"v")

    def test_wrong_token_raises_unauthenticated(self):
        with token_env():
            c = self.client("acme", token=STRANGER)
            e = self.assertRaisesAuth(dfkv.Unauthenticated, c.put, b"k", b"v")
            self.assertIn("token", str(e))
            # A read is refused too, never answered as a miss.
            self.assertRaisesAuth(dfkv.Unauthenticated, c.get, b"k")
            self.assertRaisesAuth(dfkv.Unauthenticated, c.exists, b"k")
            self.assertRaisesAuth(dfkv.Unauthenticated, c.remove, b"k")
            self.assertEqual(c.batch_put([b"k1", b"k2"], [b"a", b"b"]), [Status.UNAUTHENTICATED] * 2)
            self.assertNoToken(repr(c), repr(vars(c)))
        with token_env(DFKV_CLIENT_TOKEN=STRANGER):
            e = self.assertRaisesAuth(dfkv.Unauthenticated, self.client("acme").put, b"k", b"v")
            self.assertIn("DFKV_CLIENT_TOKEN", str(e))

    def test_no_token_raises_unauthenticated_naming_the_settings(self):
        with token_env():
            e = self.assertRaisesAuth(dfkv.Unauthenticated, self.client("acme").get, b"k")
            self.assertIn("no token", str(e))
            self.assertIn("DFKV_CLIENT_TOKEN", str(e))

    def test_malformed_token_is_refused_at_open(self):
        with token_env():
            for bad in ("short", "has a space in it 0123456789", "x" * 257, "nul\x00inside-0123456789"):
                with self.subTest(length=len(bad)):
                    with self.assertRaises(dfkv.InvalidArgument) as cm:
                        dfkv.Client(self.addr, "acme", token=bad)
                    self.assertIn("token", str(cm.exception))
                    self.assertNotIn(bad[:5], str(cm.exception).replace("token", ""))
            with self.assertRaises(TypeError):
                dfkv.Client(self.addr, "acme", token=12345678901234567890)

    def test_read_only_token_cannot_write(self):
        with token_env():
            alice = self.client("acme", token=ALICE)
            alice.put(b"ro-key", b"kept")
            r = self.client("acme", token=READER)
            self.assertEqual(r.get(b"ro-key"), b"kept")
            self.assertRaisesAuth(dfkv.Forbidden, r.put, b"ro-key", b"changed")
            self.assertRaisesAuth(dfkv.Forbidden, r.remove, b"ro-key")
            self.assertEqual(alice.get(b"ro-key"), b"kept")

    def test_token_of_another_tenant_is_forbidden(self):
        for ns in ("globex", globex_descriptor()):
            with self.subTest(namespace=type(ns).__name__), token_env():
                self._cross_tenant(ns)

    def _cross_tenant(self, ns):
        bob = self.client(ns, token=BOB)
        keys = [b"victim-%d" % i for i in range(3)]
        vals = [b"bob's value %d" % i * (i + 1) for i in range(3)]
        self.assertEqual(bob.batch_put(keys, vals), [Status.OK] * 3)
        absent = b"never-written"
        m = self.client(ns, token=ALICE)
        F = dfkv.Forbidden
        buf = bytearray(256)
        for k in (keys[0], absent):
            self.assertRaisesAuth(F, m.get, k)
            self.assertRaisesAuth(F, m.get_into, k, buf)
            self.assertRaisesAuth(F, m.get_range, k, 1, 2, buf)
            self.assertRaisesAuth(F, m.get_sg, k, [bytearray(4), bytearray(300)])
            self.assertRaisesAuth(F, m.exists, k)
            self.assertRaisesAuth(F, m.exist, k)
            self.assertRaisesAuth(F, m.stored_length, k)
            self.assertRaisesAuth(F, m.put, k, b"overwritten")
            self.assertRaisesAuth(F, m.put_sg, k, [b"over", b"written"])
            self.assertRaisesAuth(F, m.remove, k)
        both = keys + [absent]
        forbidden = [Status.FORBIDDEN] * len(both)
        self.assertEqual(m.batch_put(both, [b"x"] * len(both)), forbidden)
        self.assertEqual(m.batch_put_sg(both, [[b"x", b"y"]] * len(both)), forbidden)
        self.assertEqual(m.batch_get_into(both, [bytearray(256) for _ in both])[0], forbidden)
        self.assertEqual(m.batch_get_sg(both, [[bytearray(256)] for _ in both])[0], forbidden)
        self.assertEqual(m.batch_get_range_sg(both, [0] * len(both), [[bytearray(8)] for _ in both])[0], forbidden)
        self.assertEqual(m.batch_exist(both)[0], forbidden)
        self.assertEqual(m.batch_exist(both, pin=True)[0], forbidden)
        self.assertEqual(m.batch_exists(both), [False] * len(both))
        self.assertEqual(m.batch_get(both), [None] * len(both))
        self.assertEqual(m.exist_prefix(both), 0)
        self.assertRaisesAuth(F, lambda: m.exist_prefix(both, raise_on_error=True))
        self.assertEqual(m.batch_remove(both), forbidden)
        # Globex holds exactly what bob wrote.
        self.assertEqual(bob.batch_get(both), vals + [None])
        self.assertEqual(bob.batch_remove(keys), [Status.OK] * 3)

    def test_endpoints_pass_dfkv_token_to_the_client(self):
        # The connectors' shared settings: dfkv_token in the extra config,
        # else the environment; repr() shows neither.
        with token_env(DFKV_CLIENT_TOKEN=STRANGER):
            ep = Endpoints.from_settings({"dfkv_members": self.addr, "dfkv_token": ALICE}, "test")
            c = ep.open_client("acme", "test", timeout_ms=10000, shm="off")
            self.addCleanup(c.close)
            c.put(b"ep-key", b"v")
            self.assertTrue(c.remove(b"ep-key"))
            self.assertNoToken(repr(ep), str(ep))
            # Without dfkv_token, the environment's (a stranger's here).
            ep = Endpoints.from_settings({"dfkv_members": self.addr}, "test")
            c = ep.open_client("acme", "test", timeout_ms=10000, shm="off")
            self.addCleanup(c.close)
            self.assertRaisesAuth(dfkv.Unauthenticated, c.put, b"ep-key", b"v")
        with token_env(DFKV_TOKEN=ALICE):
            ep = Endpoints.from_settings({"dfkv_members": self.addr}, "test")
            c = ep.open_client("acme", "test", timeout_ms=10000, shm="off")
            self.addCleanup(c.close)
            c.put(b"ep-key", b"v")
            self.assertTrue(c.remove(b"ep-key"))


if __name__ == "__main__":
    unittest.main()
