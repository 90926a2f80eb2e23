"""The package as pip installs it: the suite imports the installed dfkv,
whose libdfkv.so is inside it."""

import os
import sys
import unittest

import dfkv
from dfkv import _lib


@unittest.skipUnless(os.environ.get("DFKV_TEST_INSTALLED"),
                     "the suite runs against the source tree: scripts/test-contrib.sh installs the package first")
class InstalledPackage(unittest.TestCase):
    def test_imported_from_the_environment_not_the_checkout(self):
        pkg = os.path.dirname(os.path.abspath(dfkv.__file__))
        self.assertTrue(pkg.startswith(os.path.abspath(sys.prefix) + os.sep),
                        f"dfkv was imported from {pkg}, not from the environment at {sys.prefix}")
        self.assertNotIn("DFKV_LIBRARY", os.environ)
        self.assertEqual(_lib.candidates()[0], os.path.join(pkg, "libdfkv.so"))
        self.assertTrue(os.path.isfile(os.path.join(pkg, "libdfkv.so")), "the wheel carries libdfkv.so")
        self.assertTrue(os.path.isfile(os.path.join(pkg, "dfkv.h")), "the wheel carries dfkv.h")

    def test_bundled_library_opens_a_client(self):
        members = os.environ.get("DFKV_TEST_MEMBERS")
        if not members:
            self.skipTest("DFKV_TEST_MEMBERS is not set")
        with dfkv.Client(members, b"install-test") as c:
            c.put(b"k", b"installed")
            self.assertEqual(bytes(c.get(b"k")), b"installed")
        lib = _lib.load(None)
        self.assertEqual(os.path.dirname(lib._name), os.path.dirname(os.path.abspath(dfkv.__file__)))
