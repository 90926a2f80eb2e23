"""Block-prefix chain keys (dfkv.chain_keys) through libdfkv.so: every
vector of wire/testdata/chain_golden.json, shared with Go, must come out
byte-identical; argument checking; and stored_chain_prefix against the
real servers of scripts/test-contrib.sh."""

import array
import json
import unittest
import uuid

import dfkv
from dfkv import Status

from ._paths import repo_file
from ._servers import members

GOLDEN = repo_file("wire", "testdata", "chain_golden.json")


def load():
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


class GoldenChain(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.g = load()

    def test_sections_are_known(self):
        # A new section in the Go file must get a check here.
        self.assertEqual(set(self.g), {"_schema", "key_prefixes", "cases", "invalid"})

    def test_key_prefixes(self):
        self.assertEqual(self.g["key_prefixes"]["block"].encode(), dfkv.CHAIN_BLOCK_KEY_PREFIX)
        self.assertEqual(self.g["key_prefixes"]["tail"].encode(), dfkv.CHAIN_TAIL_KEY_PREFIX)

    def test_cases(self):
        cases = self.g["cases"]
        self.assertGreaterEqual(len(cases), 7)
        for v in cases:
            with self.subTest(v["name"]):
                ck = dfkv.chain_keys(int(v["fingerprint"], 16), v["tokens"], v["block_tokens"])
                self.assertEqual([b.hex() for b in ck.blocks], v["blocks"])
                self.assertTrue(all(len(b) == dfkv.CHAIN_HASH_BYTES for b in ck.blocks))
                if v["tail"] is None:
                    self.assertIsNone(ck.tail)
                else:
                    self.assertEqual((ck.tail.name.hex(), ck.tail.digest.hex(), ck.tail.tokens),
                                     (v["tail"]["name"], v["tail"]["digest"], v["tail"]["tokens"]))
                self.assertEqual(ck.object_keys(), [k.encode("ascii") for k in v["object_keys"]])
                self.assertEqual(ck.block_keys(), [k.encode("ascii") for k in v["object_keys"][:len(v["blocks"])]])

    def test_invalid(self):
        for v in self.g["invalid"]:
            with self.subTest(v["name"]):
                with self.assertRaises(dfkv.InvalidArgument):
                    dfkv.chain_keys(int(v["fingerprint"], 16), v["tokens"], v["block_tokens"])

    def test_token_containers(self):
        # A list, a tuple, a range, a generator and a uint32 array give one
        # chain.
        v = next(c for c in self.g["cases"] if c["name"] == "large-token-ids")
        fp, toks, bt = int(v["fingerprint"], 16), v["tokens"], v["block_tokens"]
        want = dfkv.chain_keys(fp, toks, bt)
        for given in (tuple(toks), (t for t in toks), array.array("I", toks)):
            with self.subTest(type(given).__name__):
                self.assertEqual(dfkv.chain_keys(fp, given, bt), want)
        self.assertEqual(dfkv.chain_keys(0, range(8), 4), dfkv.chain_keys(0, list(range(8)), 4))


class ChainArguments(unittest.TestCase):
    def test_token_ids_must_fit_uint32(self):
        for bad, idx in (([1, 2, -1], 2), ([2 ** 32], 0), ([0, 0xFFFFFFFF, 2 ** 40], 2)):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError) as cm:
                    dfkv.chain_keys(1, bad, 2)
                self.assertIsInstance(cm.exception, dfkv.InvalidArgument)
                self.assertIn(f"token id {bad[idx]} at index {idx} does not fit in uint32", str(cm.exception))
        with self.assertRaises(ValueError):
            dfkv.chain_keys(1, (t for t in [5, -5]), 2)
        with self.assertRaises(TypeError):
            dfkv.chain_keys(1, [1.5], 2)
        with self.assertRaises(TypeError):
            dfkv.chain_keys(1, b"\x01\x02", 2)

    def test_block_tokens_and_fingerprint(self):
        for bt in (0, -1):
            with self.subTest(block_tokens=bt):
                with self.assertRaisesRegex(dfkv.InvalidArgument, "block_tokens is"):
                    dfkv.chain_keys(1, [1, 2], bt)
        for fp in (-1, 2 ** 64):
            with self.subTest(fingerprint=fp):
                with self.assertRaisesRegex(dfkv.InvalidArgument, "fingerprint"):
                    dfkv.chain_keys(fp, [1, 2], 2)
        with self.assertRaises(TypeError):
            dfkv.chain_keys(1, [1], 2.0)
        # A block longer than the tokens: all of them are the tail.
        ck = dfkv.chain_keys(2 ** 64 - 1, [1, 2, 3], 2 ** 64 - 1)
        self.assertEqual((ck.blocks, ck.tail.tokens), ([], 3))
        self.assertEqual(ck.tail, dfkv.chain_keys(2 ** 64 - 1, [1, 2, 3], 4).tail)

    def test_prefix_sharing(self):
        fp = dfkv.layout_fingerprint([("k_shape", [2, 16, 8, 64])])
        a = dfkv.chain_keys(fp, range(1, 11), 4)
        b = dfkv.chain_keys(fp, list(range(1, 9)) + [99, 100, 101], 4)
        self.assertEqual(a.blocks, b.blocks)
        self.assertEqual(a.tail.name, b.tail.name)
        self.assertNotEqual(a.tail.digest, b.tail.digest)
        self.assertEqual((a.tail.tokens, b.tail.tokens), (2, 3))
        self.assertEqual(dfkv.chain_keys(fp, [], 4), dfkv.ChainKeys([], None))
        self.assertEqual(dfkv.chain_keys(fp, [], 4).object_keys(), [])


class StoredChainPrefix(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        m = members()
        cls.ns = dfkv.NamespaceDescriptor(
            tenant="pytest", model_id="test/chain", model_revision=uuid.uuid4().hex,
            layout_id="x-pytest", dtype="uint8", layout_fingerprint=dfkv.layout_fingerprint([("kv", [1])]),
            block_tokens=16, layer_geometry=dfkv.LayerGeometry(1, 1, 1))
        cls.c = dfkv.Client(m, cls.ns, timeout_ms=10000)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_first_k_blocks_stored(self):
        c, d = self.c, self.ns
        tokens = [1000 + i for i in range(5 * d.block_tokens + 7)]
        ck = dfkv.chain_keys(d.layout_fingerprint, tokens, d.block_tokens)
        keys = ck.object_keys()
        self.assertEqual(len(ck.blocks), 5)
        self.assertEqual(len(keys), 6)
        for k in range(len(ck.blocks) + 1):
            with self.subTest(stored=k):
                if k:
                    c.put(keys[k - 1], f"kv of block {k - 1}".encode())
                self.assertEqual(c.stored_chain_prefix(ck.block_keys()), k)
                self.assertEqual(c.stored_chain_prefix(ck), k)
        # The tail, stored with its digest in front, counts once found;
        # a longer prompt after the same blocks finds the same tail key,
        # whose digest tells it the tokens differ.
        c.put(ck.tail.object_key(), ck.tail.digest + b"tail kv")
        self.assertEqual(c.stored_chain_prefix(ck, raise_on_error=True), 6)
        other = dfkv.chain_keys(d.layout_fingerprint, tokens + [1, 2], d.block_tokens)
        self.assertEqual(other.blocks, ck.blocks)
        self.assertEqual(c.stored_chain_prefix(other), 6)
        self.assertNotEqual(bytes(c.get(other.tail.object_key())[:dfkv.CHAIN_HASH_BYTES]), other.tail.digest)
        # A prompt diverging in block 2 shares blocks 0 and 1 only.
        diverging = dfkv.chain_keys(d.layout_fingerprint, tokens[:2 * d.block_tokens] + [7] + tokens[2 * d.block_tokens + 1:],
                                    d.block_tokens)
        self.assertEqual(c.stored_chain_prefix(diverging), 2)
        self.assertEqual(c.remove_batch(keys), [Status.OK] * 6)
        self.assertEqual(c.stored_chain_prefix(ck, pin=True), 0)


if __name__ == "__main__":
    unittest.main()
