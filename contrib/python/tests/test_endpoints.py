"""Where the connectors find their nodes: engine settings first, then the
environment under the names the dfkv binary uses, then the earlier names
it still accepts."""

import os
import unittest
from unittest import mock

from dfkv._common import Endpoints

_CLEAR = {"DFKV_CLIENT_MDS": "", "DFKV_CLIENT_MEMBERS": "", "DFKV_MDS_ADDRS": "", "DFKV_MEMBERS": "", "DFKV_GROUP": ""}


class EndpointsTest(unittest.TestCase):
    def resolve(self, env, extra=None):
        with mock.patch.dict(os.environ, dict(_CLEAR, **env)):
            return Endpoints.from_settings(extra or {}, "test")

    def test_current_names(self):
        e = self.resolve({"DFKV_CLIENT_MDS": "m:7700", "DFKV_CLIENT_MEMBERS": "a:7600"})
        self.assertEqual((e.mds, e.members), ("m:7700", "a:7600"))

    def test_earlier_names_still_count(self):
        e = self.resolve({"DFKV_MDS_ADDRS": "old-m:7700", "DFKV_MEMBERS": "old-a:7600"})
        self.assertEqual((e.mds, e.members), ("old-m:7700", "old-a:7600"))

    def test_current_name_wins(self):
        e = self.resolve({"DFKV_CLIENT_MEMBERS": "new:7600", "DFKV_MEMBERS": "old:7600"})
        self.assertEqual(e.members, "new:7600")

    def test_engine_setting_wins_over_environment(self):
        e = self.resolve({"DFKV_CLIENT_MEMBERS": "env:7600"}, {"dfkv_members": "cfg:7600"})
        self.assertEqual(e.members, "cfg:7600")

    def test_dfkv_token_goes_to_every_client_it_opens_and_never_to_repr(self):
        tok = "endpoints-token-0123456789abcdef"
        opened = []

        class FakeClient:
            def __init__(self, members, namespace, **kw):
                opened.append((members, kw.get("token")))
                if kw.get("mds"):
                    from dfkv.errors import Unavailable
                    raise Unavailable("MDS down")

        with mock.patch("dfkv.client.Client", FakeClient):
            e = self.resolve({}, {"dfkv_mds": "m:7700", "dfkv_members": "a:7600", "dfkv_token": tok})
            with self.assertLogs("dfkv", "WARNING") as logs:
                e.open_client(b"ns", "test")
            self.assertEqual(opened, [(None, tok), ("a:7600", tok)], "the static fallback keeps the token")
            self.assertNotIn(tok, "\n".join(logs.output))
            self.assertNotIn(tok, repr(e) + str(e) + repr(e.static_fallback()))
            opened.clear()
            # No dfkv_token: None, for libdfkv to take the environment's.
            self.resolve({"DFKV_CLIENT_MEMBERS": "a:7600"}).open_client(b"ns", "test")
            self.assertEqual(opened, [("a:7600", None)])

    def test_dfkv_tls_settings_go_to_every_client_it_opens(self):
        opened = []

        class FakeClient:
            def __init__(self, members, namespace, **kw):
                opened.append((members, {k: v for k, v in kw.items() if k.startswith("tls")}))
                if kw.get("mds"):
                    from dfkv.errors import Unavailable
                    raise Unavailable("MDS down")

        files = {"tls_ca": "/etc/dfkv/ca.pem", "tls_cert": "/etc/dfkv/c.pem", "tls_key": "/etc/dfkv/k.pem",
                 "tls_server_name": "dfkv.internal"}
        with mock.patch("dfkv.client.Client", FakeClient):
            e = self.resolve({}, {"dfkv_mds": "m:7700", "dfkv_members": "a:7600", "dfkv_tls": "1",
                                  **{"dfkv_" + k: v for k, v in files.items()}})
            with self.assertLogs("dfkv", "WARNING"):
                e.open_client(b"ns", "test")
            want = dict(files, tls=True)
            self.assertEqual(opened, [(None, want), ("a:7600", want)], "the static fallback keeps the TLS settings")
            # The switch as the dfkv binary reads one; unset settings are
            # left to libdfkv, which reads $DFKV_CLIENT_TLS and the rest.
            for v, on in (("true", True), ("off", False), (0, False), (True, True), ("", None)):
                opened.clear()
                self.resolve({"DFKV_CLIENT_MEMBERS": "a:7600"}, {"dfkv_tls": v}).open_client(b"ns", "test")
                self.assertEqual(opened, [("a:7600", {} if on is None else {"tls": on})], v)
        for bad in ("maybe", 2):
            with self.assertRaises(ValueError) as cm:
                self.resolve({"DFKV_CLIENT_MEMBERS": "a:7600"}, {"dfkv_tls": bad})
            self.assertIn("dfkv_tls", str(cm.exception))
        with self.assertRaises(ValueError):
            self.resolve({"DFKV_CLIENT_MEMBERS": "a:7600"}, {"dfkv_tls_ca": ["/a.pem"]})

    def test_nothing_set_names_the_settings(self):
        with self.assertRaises(ValueError) as cm:
            self.resolve({})
        self.assertIn("DFKV_CLIENT_MDS", str(cm.exception))
        self.assertIn("dfkv_members", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
