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

    def test_nothing_set_names_the_settings(self):
        with self.assertRaises(ValueError) as cm:
            self.resolve({})
        self.assertIn("DFKV_CLIENT_MDS", str(cm.exception))
        self.assertIn("dfkv_members", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
