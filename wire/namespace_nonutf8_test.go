package wire

import (
	"bytes"
	"testing"
)

// TestDecodeNonUTF8ExperimentalLayout: an "x-" layout ID whose name is not
// UTF-8 decodes and round-trips (the Python decoder matches it: see
// contrib/python/tests/test_naming.py).
func TestDecodeNonUTF8ExperimentalLayout(t *testing.T) {
	d := NamespaceDescriptor{Tenant: "t", ModelID: "m", LayoutID: "x-\xff", DType: "bfloat16",
		LayoutFingerprint: 1, BlockTokens: 16, LayerGeometry: LayerGeometry{1, 1, 1},
		TopologySizes: TopologySizes{1, 1, 1, 1, 1}}
	enc, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNamespace(enc)
	if err != nil {
		t.Fatalf("Go refuses it too: %v", err)
	}
	re, _ := got.Encode()
	if !bytes.Equal(re, enc) {
		t.Fatal("no round trip")
	}
}
