"""Golden vectors shared with Go: every vector of
wire/testdata/identity_golden.json must come out byte-identical here.
Needs no server and no libdfkv.so."""

import json
import unittest

from dfkv import identity as ident

from ._paths import repo_file

GOLDEN = repo_file("wire", "testdata", "identity_golden.json")


def load():
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


def descriptor(d):
    g, t = d["layer_geometry"], d["topology_sizes"]
    return ident.NamespaceDescriptor(
        tenant=d["tenant"], model_id=d["model_id"], model_revision=d["model_revision"],
        layout_id=d["layout_id"], dtype=d["dtype"],
        layout_fingerprint=int(d["layout_fingerprint"], 16), block_tokens=d["block_tokens"],
        layer_geometry=ident.LayerGeometry(g["layers"], g["kv_heads"], g["head_dim"]),
        group=d["group"],
        topology_sizes=ident.TopologySizes(t["dp"], t["tp"], t["pcp"], t["dcp"], t["pp"]),
    )


def object_key(f):
    return ident.ObjectKey(
        pool=f["pool"], hash=f["hash"], dp=tuple(f["dp"]), tp=tuple(f["tp"]), pcp=tuple(f["pcp"]),
        dcp=tuple(f["dcp"]), pp=tuple(f["pp"]), group=f["group"], component=f["component"],
        sg=tuple(f["sg"]) if f["sg"] is not None else None,
    )


def hex64(v):
    return format(v, "016x")


class GoldenVectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.g = load()
        cls.checked = 0

    def test_every_section_is_known(self):
        # A new section in the Go file must get a Python check here, or the
        # "byte-identical" promise silently stops covering it.
        known = {"_schema", "limits", "namespace_descriptors", "invalid_descriptors", "raw_namespaces",
                 "object_keys", "invalid_object_keys", "block_keys", "invalid_block_keys",
                 "layout_fingerprints", "ring_digests", "ring_lookups"}
        self.assertEqual(set(self.g), known)

    def test_limits(self):
        self.assertEqual(self.g["limits"]["max_namespace_bytes"], ident.MAX_NAMESPACE_BYTES)
        self.assertEqual(self.g["limits"]["max_object_key_bytes"], ident.MAX_OBJECT_KEY_BYTES)

    def test_namespace_descriptors(self):
        vs = self.g["namespace_descriptors"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                d = descriptor(v["descriptor"])
                enc = d.encode()
                self.assertEqual(enc.hex(), v["encoding_hex"])
                self.assertEqual(hex64(ident.tenant_hash(enc)), v["tenant_hash"])
                # decode -> re-encode is the identity
                self.assertEqual(ident.decode_namespace(enc).encode(), enc)
                self.assertEqual(ident.decode_namespace(bytes.fromhex(v["encoding_hex"])), d)

    def test_invalid_descriptors(self):
        vs = self.g["invalid_descriptors"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                with self.assertRaises(ident.IdentityError):
                    descriptor(v["descriptor"]).encode()

    def test_raw_namespaces(self):
        vs = self.g["raw_namespaces"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                ns = bytes.fromhex(v["namespace_hex"])
                try:
                    ident.decode_namespace(ns)
                    decodes = True
                except ident.IdentityError:
                    decodes = False
                self.assertEqual(decodes, v["decodes"])
                t = ident.canonical_tenant(ns)
                self.assertEqual(None if t is None else t.hex(), v["canonical_tenant_hex"])
                self.assertEqual(hex64(ident.tenant_hash(ns)), v["tenant_hash"])

    def test_object_keys(self):
        vs = self.g["object_keys"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                k = object_key(v["fields"])
                self.assertEqual(k.render(), v["rendered"])
                self.assertEqual(k.render_bytes(), v["rendered"].encode("utf-8"))

    def test_invalid_object_keys(self):
        vs = self.g["invalid_object_keys"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                with self.assertRaises(ident.IdentityError):
                    object_key(v["fields"]).render()

    def test_block_keys(self):
        vs = self.g["block_keys"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                ns, k = bytes.fromhex(v["namespace_hex"]), bytes.fromhex(v["object_key_hex"])
                bk = ident.block_key(ns, k)
                self.assertEqual(hex64(bk.tenant), v["tenant_hash"])
                self.assertEqual(bk.id.hex(), v["object_id"])
                self.assertEqual(ident.object_id(ns, k).hex(), v["object_id"])
                self.assertEqual(bk.filename, v["filename"])
                self.assertEqual(hex64(bk.route_hash), v["route_hash"])
                self.assertEqual(hex64(ident.disk_hash(bk)), v["disk_hash"])

    def test_invalid_block_keys(self):
        vs = self.g["invalid_block_keys"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                with self.assertRaises(ident.IdentityError):
                    ident.block_key(bytes.fromhex(v["namespace_hex"]), bytes.fromhex(v["object_key_hex"]))

    def test_layout_fingerprints(self):
        vs = self.g["layout_fingerprints"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(v["name"]):
                fp = ident.layout_fingerprint((f["name"], f["values"]) for f in v["fields"])
                self.assertEqual(hex64(fp), v["fingerprint"])

    def test_ring_digests(self):
        vs = self.g["ring_digests"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            with self.subTest(f'{v["id"]}/{v["digest"]}'):
                pts = ident.Ring.digest(v["id"], v["digest"])
                self.assertEqual([hex64(p) for p in pts], v["points"])

    def test_ring_lookups(self):
        vs = self.g["ring_lookups"]
        self.assertGreater(len(vs), 0)
        for v in vs:
            members = [(m["id"], m["weight"]) for m in v["members"]]
            ring = ident.Ring(members, v["points_per_weight"])
            # Listing order must not matter (equal points tie-break by id).
            rev = ident.Ring(list(reversed(members)), v["points_per_weight"])
            for lk in v["lookups"]:
                with self.subTest(f'{v["name"]}/{lk["hash"]}'):
                    h = int(lk["hash"], 16)
                    self.assertEqual(members[ring.get(h)][0], lk["owner"])
                    self.assertEqual(list(reversed(members))[rev.get(h)][0], lk["owner"])


class DescriptorProperties(unittest.TestCase):
    def test_text_fields_verbatim(self):
        base = dict(tenant="t", model_id="M", model_revision="", layout_id=ident.LAYOUT_VLLM, dtype="bfloat16",
                    layout_fingerprint=0, block_tokens=16, layer_geometry=ident.LayerGeometry(1, 1, 1))
        a = ident.NamespaceDescriptor(**base).encode()
        b = ident.NamespaceDescriptor(**dict(base, model_id="m")).encode()
        self.assertNotEqual(a, b, "model IDs differing in case must be different caches")

    def test_decode_rejects_trailing_bytes(self):
        d = ident.NamespaceDescriptor("t", "m", "", ident.LAYOUT_LMCACHE, "float16", 1, 1, ident.LayerGeometry(1, 1, 1))
        with self.assertRaises(ident.IdentityError):
            ident.decode_namespace(d.encode() + b"\x00")


class PackageExports(unittest.TestCase):
    def test_dfkv_exports_every_identity_name(self):
        # dfkv/__init__.py lists the identity names one by one; a name added
        # to identity.__all__ must be added there too.
        import dfkv
        self.assertEqual([n for n in ident.__all__ if n not in dfkv.__all__], [])
        for n in dfkv.__all__:
            self.assertTrue(hasattr(dfkv, n), n)
        for n in ident.__all__:
            self.assertIs(getattr(dfkv, n), getattr(ident, n), n)


if __name__ == "__main__":
    unittest.main()
