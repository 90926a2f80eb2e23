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

    def test_options_struct_has_no_hidden_padding(self):
        # Every field at its natural alignment with nothing between them,
        # so the layout is the same whatever the C compiler's packing.
        import ctypes
        self.assertEqual(ctypes.sizeof(ClientOptionsV2), sum(ctypes.sizeof(t) for _, t in ClientOptionsV2._fields_))
        self.assertEqual(ClientOptionsV2.tls_ca_file.offset % 8, 0)

    def test_tls_modes_are_the_headers(self):
        from dfkv._lib import TLS_MODES
        m = re.search(r"enum \{ DFKV_TLS_ENV = (\d+), DFKV_TLS_ON = (\d+), DFKV_TLS_OFF = (\d+) \};", self.h)
        self.assertIsNotNone(m, "the DFKV_TLS_* enum of dfkv.h")
        self.assertEqual(tuple(int(g) for g in m.groups()), (TLS_MODES[None], TLS_MODES[True], TLS_MODES[False]))

    def test_every_function_is_a_client_method_of_its_name(self):
        # dfkv_<name> is Client.<name>, so C examples translate word for
        # word; open is the constructor and the error helpers are internal.
        # A function that takes no dfkv_client (it needs no node) is the
        # package's function dfkv.<name> instead.
        import dfkv
        from dfkv import Client
        protos = re.findall(r"^\w[\w ]*?\**\s*\bdfkv_(\w+)\(([^)]*)\)", self.h, re.M)
        functions = [f for f, _ in protos]
        self.assertIn("exist_prefix", functions)
        self.assertIn("chain_keys", functions)
        internal = {"open_v2", "last_error", "status_name"}
        missing = []
        for f, params in protos:
            if f in internal:
                continue
            owner = Client if params.lstrip().startswith("dfkv_client*") else dfkv
            if not callable(getattr(owner, f, None)):
                missing.append(f"{owner.__name__}.{f}")
        self.assertEqual(missing, [], "dfkv.h functions with no Client method or dfkv function of the same name")

    def test_chain_key_prefixes_are_the_headers(self):
        import dfkv
        for name, value in (("DFKV_CHAIN_BLOCK_KEY_PREFIX", dfkv.CHAIN_BLOCK_KEY_PREFIX),
                            ("DFKV_CHAIN_TAIL_KEY_PREFIX", dfkv.CHAIN_TAIL_KEY_PREFIX)):
            m = re.search(r"^#define " + name + r'\s+"([^"]*)"', self.h, re.M)
            self.assertIsNotNone(m, name)
            self.assertEqual(m.group(1).encode(), value, name)
        self.assertIn(f"DFKV_CHAIN_HASH_BYTES = {dfkv.CHAIN_HASH_BYTES} ", self.h)

    def test_cli_verbs_are_client_methods(self):
        # `dfkv ctl` verbs that act on keys (roles/ctl) are methods too.
        from dfkv import Client
        with open(repo_file("roles", "ctl", "ctl.go"), encoding="utf-8") as f:
            verbs = re.search(r'var maxArgs = map\[string\]int\{(.*?)\}', f.read()).group(1)
        key_verbs = [v for v, n in re.findall(r'"(\w+)": (\d+)', verbs) if int(n) > 0]
        self.assertEqual(sorted(key_verbs), ["exist", "get", "put", "rm"])
        for v in key_verbs:
            self.assertTrue(callable(getattr(Client, v, None)), v)

    def test_the_unreachable_read_wording_is_the_headers(self):
        # The client tells an unreachable node from a miss by this phrase
        # of the last error, which dfkv.h documents.
        from dfkv.errors import UNREACHABLE_MARK
        self.assertIn(f'the last error says "{UNREACHABLE_MARK}"', " ".join(self.h.replace("*", " ").split()))


class UnreachableErrorTest(unittest.TestCase):
    """dfkv.errors.unreachable_error on wire/client's wording."""

    def test_a_real_miss_is_none(self):
        from dfkv.errors import unreachable_error
        self.assertIsNone(unreachable_error("get b'k'", "NOT_FOUND"))
        self.assertIsNone(unreachable_error("get b'k'", "item 3: dfkv node 10.0.0.1:7600: not found: NOT_FOUND"))

    def test_refused_is_unavailable_naming_the_node(self):
        import dfkv
        from dfkv.errors import unreachable_error
        e = unreachable_error("get b'k'", "dfkv node 10.0.0.1:7600 unreachable, answered as a miss: connect to dfkv "
                              "node 10.0.0.1:7600: dial tcp 10.0.0.1:7600: connect: connection refused: UNAVAILABLE")
        self.assertIsInstance(e, dfkv.Unavailable)
        self.assertEqual((e.status, e.address), (Status.UNAVAILABLE, "10.0.0.1:7600"))
        self.assertEqual(str(e), "UNAVAILABLE: get b'k': dfkv node 10.0.0.1:7600 could not be reached, so whether "
                                 "the key is stored is unknown: connect to dfkv node 10.0.0.1:7600: dial tcp "
                                 "10.0.0.1:7600: connect: connection refused")

    def test_a_deadline_is_timeout(self):
        import dfkv
        from dfkv.errors import unreachable_error
        e = unreachable_error("exist b'k'", "dfkv node [::1]:7600 unreachable, answered as a miss: dfkv node "
                              "[::1]:7600: read tcp [::1]:5->[::1]:7600: i/o timeout: TIMEOUT")
        self.assertIsInstance(e, dfkv.Timeout)
        self.assertEqual((e.status, e.address), (Status.TIMEOUT, "[::1]:7600"))
        self.assertTrue(str(e).startswith("TIMEOUT: exist b'k': dfkv node [::1]:7600 could not be reached"), str(e))


if __name__ == "__main__":
    unittest.main()
