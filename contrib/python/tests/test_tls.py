"""TLS against real `dfkv server --tls-cert` nodes, with certificates the
openssl command makes: values travel over TLS both ways, with the settings
from the arguments or the environment; a CA that did not sign the node's
certificate, or a server name it does not carry, fails with a message about
the certificate; a plaintext client of a TLS node and a TLS client of a
plaintext node are told which; under mutual TLS a client certificate whose
common name a credential lists stands in for a token, within that
credential's tenants only; bad settings fail the open naming them."""

import contextlib
import os
import unittest
from unittest import mock

import dfkv
from dfkv import Status
from dfkv._common import Endpoints

from ._servers import CertAuthority, CredentialsServer, Server, new_token

TLS_ENV = ("DFKV_CLIENT_TLS", "DFKV_CLIENT_TLS_CA", "DFKV_CLIENT_TLS_CERT", "DFKV_CLIENT_TLS_KEY",
           "DFKV_CLIENT_TLS_SERVER_NAME", "DFKV_CLIENT_TOKEN", "DFKV_TOKEN")
RW = ["read", "write", "remove"]
BOB = new_token("bob")


@contextlib.contextmanager
def tls_env(**env):
    """os.environ with the client TLS (and token) variables as given, and
    the others unset, as libdfkv sees them when a client opens."""
    with mock.patch.dict(os.environ):
        for name in TLS_ENV:
            os.environ.pop(name, None)
        os.environ.update(env)
        yield


class TLSTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ca = CertAuthority("ca")
        cls.other_ca = CertAuthority("other-ca")
        cls.nodes = []
        try:
            cls.node = cls._start(Server(args=cls.ca.server_args()))
            # Mutual TLS: team-a's certificate is granted tenant acme, bob's
            # token tenant globex.
            cls.mnode = cls._start(CredentialsServer({BOB: (["globex"], RW)}, args=cls.ca.server_args(mutual=True),
                                                     cert_grants={"team-a": (["acme"], RW)}))
            cls.plain = cls._start(Server())
        except BaseException:
            cls.tearDownClass()
            raise
        cls.team_a = cls.ca.client("team-a", "team-a")
        cls.stranger = cls.ca.client("stranger", "nobody")

    @classmethod
    def _start(cls, node):
        cls.nodes.append(node)
        return node

    @classmethod
    def tearDownClass(cls):
        for n in cls.nodes:
            n.close()
        cls.ca.close()
        cls.other_ca.close()

    def client(self, addr, namespace="acme", **kw):
        c = dfkv.Client(addr, namespace, timeout_ms=10000, shm="off", **kw)
        self.addCleanup(c.close)
        return c

    def round_trip(self, c, prefix):
        big = bytes(range(256)) * 4096  # 1 MiB: many TLS records
        c.put(prefix + b"big", big)
        self.assertEqual(c.get(prefix + b"big"), big)
        keys = [prefix + b"k%d" % i for i in range(5)]
        vals = [b"v" * (i + 1) for i in range(5)]
        self.assertEqual(c.batch_put(keys, vals), [Status.OK] * 5)
        self.assertEqual(c.batch_get(keys + [prefix + b"none"]), vals + [None])
        self.assertEqual(c.exist_prefix(keys, raise_on_error=True), 5)
        self.assertEqual(c.batch_remove(keys), [Status.OK] * 5)
        self.assertTrue(c.remove(prefix + b"big"))

    def test_round_trip_from_arguments(self):
        with tls_env():
            self.round_trip(self.client(self.node.addr, tls=True, tls_ca=self.ca.file), b"args-")
            # A path-like CA, and the name to verify given outright.
            import pathlib
            self.round_trip(self.client(self.node.addr, tls=True, tls_ca=pathlib.Path(self.ca.file),
                                        tls_server_name="localhost"), b"name-")

    def test_round_trip_from_the_environment(self):
        for on in ("1", "true", "on"):
            with self.subTest(DFKV_CLIENT_TLS=on), tls_env(DFKV_CLIENT_TLS=on, DFKV_CLIENT_TLS_CA=self.ca.file):
                self.round_trip(self.client(self.node.addr), b"env-")
        # The argument wins over the environment: tls=False is plaintext,
        # which the node refuses.
        with tls_env(DFKV_CLIENT_TLS="1", DFKV_CLIENT_TLS_CA=self.ca.file):
            with self.assertRaises(dfkv.EpochMismatch) as cm:
                self.client(self.node.addr, tls=False).put(b"k", b"v")
            self.assertIn("requires TLS", str(cm.exception))
            self.assertIn("TLS is off (from Client(tls=) / dfkv_tls)", str(cm.exception))
        # And an argument CA wins over the environment's.
        with tls_env(DFKV_CLIENT_TLS="1", DFKV_CLIENT_TLS_CA=self.other_ca.file):
            self.round_trip(self.client(self.node.addr, tls_ca=self.ca.file), b"env-ca-")

    def test_another_ca_fails_naming_the_certificate(self):
        for kw, env, source in (({"tls": True, "tls_ca": self.other_ca.file}, {}, "Client(tls_ca=) / dfkv_tls_ca"),
                                ({}, {"DFKV_CLIENT_TLS": "1", "DFKV_CLIENT_TLS_CA": self.other_ca.file},
                                 "$DFKV_CLIENT_TLS_CA")):
            with self.subTest(source=source), tls_env(**env):
                c = self.client(self.node.addr, **kw)
                # A certificate the client cannot verify is a refusal of
                # configuration (a PermissionError), not an unreachable node.
                with self.assertRaises(dfkv.Unauthenticated) as cm:
                    c.put(b"k", b"v")
                msg = str(cm.exception)
                self.assertIn("certificate", msg)
                self.assertIn(f"the CA file {self.other_ca.file} (from {source})", msg)
                # A one-key read raises too (never a miss), with the cause.
                with self.assertRaises(dfkv.Unauthenticated) as cm:
                    c.get(b"k")
                self.assertIn("certificate", str(cm.exception))
                self.assertIn(self.other_ca.file, str(cm.exception))
                self.assertEqual(c.batch_put([b"a", b"b"], [b"1", b"2"]), [Status.UNAUTHENTICATED] * 2)

    def test_another_server_name_fails_naming_the_certificate(self):
        with tls_env():
            c = self.client(self.node.addr, tls=True, tls_ca=self.ca.file, tls_server_name="node.other.example")
            with self.assertRaises(dfkv.Unauthenticated) as cm:
                c.put(b"k", b"v")
            self.assertIn("certificate", str(cm.exception))
            self.assertIn('"node.other.example"', str(cm.exception))

    def test_plaintext_client_of_a_tls_node(self):
        with tls_env():
            c = self.client(self.node.addr)
            with self.assertRaises(dfkv.EpochMismatch) as cm:
                c.put(b"k", b"v")
            msg = str(cm.exception)
            self.assertIn("requires TLS", msg)
            self.assertIn("set Client(tls=) / dfkv_tls to True and Client(tls_ca=) / dfkv_tls_ca", msg)
            self.assertIn("$DFKV_CLIENT_TLS=1", msg)
            with self.assertRaises(dfkv.EpochMismatch):
                c.get(b"k")

    def test_tls_client_of_a_plaintext_node(self):
        for kw, env in (({"tls": True, "tls_ca": self.ca.file}, {}),
                        ({}, {"DFKV_CLIENT_TLS": "1", "DFKV_CLIENT_TLS_CA": self.ca.file})):
            with self.subTest(env=sorted(env)), tls_env(**env):
                c = self.client(self.plain.addr, **kw)
                with self.assertRaises(dfkv.EpochMismatch) as cm:
                    c.put(b"k", b"v")
                self.assertIn("does not speak TLS", str(cm.exception))
                self.assertIn("TLS is on (from " + ("$DFKV_CLIENT_TLS" if env else "Client(tls=) / dfkv_tls"),
                              str(cm.exception))
                with self.assertRaises(dfkv.EpochMismatch) as cm:
                    c.get(b"k")
                self.assertIn("does not speak TLS", str(cm.exception))

    def test_mutual_tls_certificate_instead_of_token(self):
        cert, key = self.team_a
        with tls_env():
            a = self.client(self.mnode.addr, "acme", tls=True, tls_ca=self.ca.file, tls_cert=cert, tls_key=key)
            self.round_trip(a, b"mtls-")
        with tls_env(DFKV_CLIENT_TLS="1", DFKV_CLIENT_TLS_CA=self.ca.file, DFKV_CLIENT_TLS_CERT=cert,
                     DFKV_CLIENT_TLS_KEY=key):
            self.round_trip(self.client(self.mnode.addr, "acme"), b"mtls-env-")

    def test_mutual_tls_certificate_of_another_tenant_is_forbidden(self):
        cert, key = self.team_a
        with tls_env():
            opts = dict(tls=True, tls_ca=self.ca.file, tls_cert=cert, tls_key=key)
            bob = self.client(self.mnode.addr, "globex", token=BOB, **opts)
            bob.put(b"victim", b"bob's")
            m = self.client(self.mnode.addr, "globex", **opts)
            for fn, args in ((m.put, (b"victim", b"overwritten")), (m.get, (b"victim",)), (m.exists, (b"victim",)),
                             (m.remove, (b"victim",))):
                with self.subTest(call=fn.__name__):
                    with self.assertRaises(dfkv.Forbidden) as cm:
                        fn(*args)
                    self.assertIn(f"the client certificate {cert} (from Client(tls_cert=) / dfkv_tls_cert)",
                                  str(cm.exception))
            self.assertEqual(m.batch_put([b"victim", b"new"], [b"x", b"y"]), [Status.FORBIDDEN] * 2)
            self.assertEqual(bob.get(b"victim"), b"bob's")
            self.assertTrue(bob.remove(b"victim"))

    def test_mutual_tls_without_a_granted_certificate(self):
        cert, key = self.stranger
        with tls_env():
            # A certificate of the CA that no credential names.
            c = self.client(self.mnode.addr, "acme", tls=True, tls_ca=self.ca.file, tls_cert=cert, tls_key=key)
            with self.assertRaises(dfkv.Unauthenticated) as cm:
                c.put(b"k", b"v")
            self.assertIn(f"client certificate {cert}", str(cm.exception))
            # No certificate: the node refuses it with a TLS alert.
            c = self.client(self.mnode.addr, "acme", tls=True, tls_ca=self.ca.file)
            with self.assertRaises(dfkv.Unauthenticated) as cm:
                c.put(b"k", b"v")
            self.assertIn("presenting no client certificate", str(cm.exception))

    def test_bad_settings_fail_the_open(self):
        cert, key = self.team_a
        missing = os.path.join(self.ca.dir, "no-such.pem")
        with tls_env():
            for kw, words in (
                    ({"tls": True, "tls_cert": cert}, ["Client(tls_cert=) / dfkv_tls_cert is set",
                                                        "Client(tls_key=) / dfkv_tls_key"]),
                    ({"tls": True, "tls_key": key}, ["Client(tls_key=) / dfkv_tls_key is set"]),
                    ({"tls": True, "tls_ca": missing}, [missing, "Client(tls_ca=) / dfkv_tls_ca"]),
                    ({"tls": True, "tls_ca": key}, [key, "holds no PEM certificate"]),
                    ({"tls": True, "tls_cert": cert, "tls_key": self.stranger[1]}, [cert, self.stranger[1]]),
                    ({"tls_ca": self.ca.file}, ["Client(tls_ca=) / dfkv_tls_ca is set but TLS is off",
                                                "Client(tls=) / dfkv_tls is None"]),
            ):
                with self.subTest(kw=sorted(kw)):
                    with self.assertRaises(dfkv.InvalidArgument) as cm:
                        dfkv.Client(self.node.addr, "acme", **kw)
                    for w in words:
                        self.assertIn(w, str(cm.exception))
            with self.assertRaises(TypeError):
                dfkv.Client(self.node.addr, "acme", tls="yes")
            with self.assertRaises(TypeError):
                dfkv.Client(self.node.addr, "acme", tls=True, tls_ca=12)
            with self.assertRaises(dfkv.InvalidArgument):
                dfkv.Client(self.node.addr, "acme", tls=True, tls_ca="a\0b")
            # tls=False with a CA is an explicit off.
            dfkv.Client(self.plain.addr, "acme", tls=False, tls_ca=missing).close()
        with tls_env(DFKV_CLIENT_TLS="maybe"):
            with self.assertRaises(dfkv.InvalidArgument) as cm:
                dfkv.Client(self.node.addr, "acme")
            self.assertIn('$DFKV_CLIENT_TLS is "maybe"', str(cm.exception))
        with tls_env(DFKV_CLIENT_TLS="1", DFKV_CLIENT_TLS_CA=missing):
            with self.assertRaises(dfkv.InvalidArgument) as cm:
                dfkv.Client(self.node.addr, "acme")
            self.assertIn(f"{missing} (from $DFKV_CLIENT_TLS_CA)", str(cm.exception))

    def test_endpoints_pass_the_tls_settings(self):
        # The connectors' settings: dfkv_tls and the files in the extra
        # config, each else the environment.
        cert, key = self.team_a
        with tls_env(DFKV_CLIENT_TLS_CA=self.other_ca.file):
            ep = Endpoints.from_settings({"dfkv_members": self.mnode.addr, "dfkv_tls": "1", "dfkv_tls_ca": self.ca.file,
                                          "dfkv_tls_cert": cert, "dfkv_tls_key": key}, "test")
            c = ep.open_client("acme", "test", timeout_ms=10000, shm="off")
            self.addCleanup(c.close)
            self.round_trip(c, b"ep-")
        with tls_env(DFKV_CLIENT_TLS="1", DFKV_CLIENT_TLS_CA=self.ca.file):
            ep = Endpoints.from_settings({"dfkv_members": self.node.addr}, "test")
            c = ep.open_client("acme", "test", timeout_ms=10000, shm="off")
            self.addCleanup(c.close)
            self.round_trip(c, b"ep-env-")
            # dfkv_tls 0 in the extra config turns the environment's off.
            ep = Endpoints.from_settings({"dfkv_members": self.node.addr, "dfkv_tls": 0}, "test")
            c = ep.open_client("acme", "test", timeout_ms=10000, shm="off")
            self.addCleanup(c.close)
            with self.assertRaises(dfkv.EpochMismatch):
                c.put(b"k", b"v")


if __name__ == "__main__":
    unittest.main()
