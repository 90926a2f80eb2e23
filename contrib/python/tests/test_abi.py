"""The ctypes mirror of dfkv.h must match the header: status numbers and
the options struct's fields, in order. Needs no server or library."""

import re
import unittest

from dfkv import Status
from dfkv._lib import ClientOptionsV2

from ._paths import repo_file

HEADER = repo_file("contrib", "libdfkv", "dfkv.h")


class HeaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(HEADER, encoding="utf-8") as f:
            cls.h = f.read()

    def test_status_codes(self):
        defines = {m[0]: int(m[1]) for m in re.findall(r"^#define DFKV_([A-Z_]+)\s+(\d+)\b", self.h, re.M)}
        self.assertEqual(defines, {s.name: s.value for s in Status})

    def test_options_struct_fields_in_order(self):
        body = re.search(r"typedef struct dfkv_client_options_v2 \{(.*?)\} dfkv_client_options_v2;", self.h, re.S)
        self.assertIsNotNone(body, "dfkv_client_options_v2 not found in dfkv.h")
        fields = re.findall(r"^\s*(?:const\s+)?(\w+)\s*\*?\s*(\w+);", body.group(1), re.M)
        self.assertEqual([name for _, name in fields], [name for name, _ in ClientOptionsV2._fields_])
        ctypes_of = {"uint64_t": "c_ulong", "uint32_t": "c_uint", "char": "c_char_p", "void": "c_void_p"}
        for (ctype, name), (pname, ptype) in zip(fields, ClientOptionsV2._fields_):
            self.assertEqual(ctypes_of[ctype], ptype.__name__, name)


if __name__ == "__main__":
    unittest.main()
