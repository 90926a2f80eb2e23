package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// TestNamespaceEncodeByHand spells out every byte of one descriptor and its
// tenant hash without the package's encoder, and checks both the encoder and
// the golden file against it.
func TestNamespaceEncodeByHand(t *testing.T) {
	d := NamespaceDescriptor{
		Tenant: "acme", ModelID: "m1", ModelRevision: "", LayoutID: LayoutVLLM, DType: "bf16",
		LayoutFingerprint: 0x0102030405060708, BlockTokens: 16,
		LayerGeometry: LayerGeometry{Layers: 32, KVHeads: 8, HeadDim: 128}, Group: "g",
		TopologySizes: TopologySizes{DP: 1, TP: 2, PCP: 3, DCP: 4, PP: 5},
	}
	var want []byte
	want = append(want, 'D', 'F', 'K', 'V', 'N', 'S', 0x00, 0x02)
	want = append(want, 4, 0, 0, 0, 0, 0, 0, 0, 'a', 'c', 'm', 'e')
	want = append(want, 2, 0, 0, 0, 0, 0, 0, 0, 'm', '1')
	want = append(want, 0, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, 15, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, "vllm-multiwr-v4"...)
	want = append(want, 4, 0, 0, 0, 0, 0, 0, 0, 'b', 'f', '1', '6')
	want = append(want, 8, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01)
	want = append(want, 4, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0)
	want = append(want, 12, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 8, 0, 0, 0, 128, 0, 0, 0)
	want = append(want, 1, 0, 0, 0, 0, 0, 0, 0, 'g')
	want = append(want, 20, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0)
	got, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode:\n got %x\nwant %x", got, want)
	}
	sum := sha256.Sum256([]byte("DFKVTENANT1\x04\x00\x00\x00\x00\x00\x00\x00acme"))
	if th := TenantHash(got); th != binary.BigEndian.Uint64(sum[:8]) {
		t.Fatalf("TenantHash = %016x, want %x", th, sum[:8])
	}

	// The golden vector for "vllm-llama3-8b", checked field by field against
	// an explicit concatenation.
	v := goldenByName(t, loadGolden(t).NamespaceDescriptors, "vllm-llama3-8b")
	gd := goldenDescriptors()[0].d
	var hand []byte
	hand = append(hand, "DFKVNS\x00\x02"...)
	for _, s := range []string{gd.Tenant, gd.ModelID, gd.ModelRevision, gd.LayoutID, gd.DType} {
		hand = append(hand, byte(len(s)), 0, 0, 0, 0, 0, 0, 0)
		hand = append(hand, s...)
	}
	hand = append(hand, 8, 0, 0, 0, 0, 0, 0, 0)
	hand = binary.LittleEndian.AppendUint64(hand, gd.LayoutFingerprint)
	hand = append(hand, 4, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0)
	hand = append(hand, 12, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 8, 0, 0, 0, 128, 0, 0, 0)
	hand = append(hand, 7, 0, 0, 0, 0, 0, 0, 0, 'd', 'e', 'f', 'a', 'u', 'l', 't')
	hand = append(hand, 20, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0)
	if v.EncodingHex != hex.EncodeToString(hand) {
		t.Fatalf("golden vllm-llama3-8b encoding\n got %s\nwant %x", v.EncodingHex, hand)
	}
	tsum := sha256.Sum256([]byte("DFKVTENANT1\x04\x00\x00\x00\x00\x00\x00\x00acme"))
	if v.TenantHash != hex.EncodeToString(tsum[:8]) {
		t.Fatalf("golden vllm-llama3-8b tenant hash %s, want %x", v.TenantHash, tsum[:8])
	}
}

func TestNamespaceRoundTrip(t *testing.T) {
	for _, v := range goldenDescriptors() {
		enc, err := v.d.Encode()
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if len(enc) != v.d.encodedLen() {
			t.Errorf("%s: encoded %d bytes, encodedLen says %d", v.name, len(enc), v.d.encodedLen())
		}
		got, err := DecodeNamespace(enc)
		if err != nil || got != v.d {
			t.Fatalf("%s: DecodeNamespace = %+v, %v; want %+v", v.name, got, err, v.d)
		}
		tenant, ok := CanonicalTenant(enc)
		if !ok || string(tenant) != v.d.Tenant {
			t.Fatalf("%s: CanonicalTenant = %q, %v; want %q", v.name, tenant, ok, v.d.Tenant)
		}
		// Append must not disturb a prefix already in dst.
		pre := []byte("prefix")
		b, err := v.d.Append(pre)
		if err != nil || !bytes.Equal(b[:6], pre) || !bytes.Equal(b[6:], enc) {
			t.Fatalf("%s: Append(prefix) = %x, %v", v.name, b, err)
		}
	}
}

func TestNamespaceValidate(t *testing.T) {
	for _, v := range goldenInvalidDescriptors() {
		b, err := v.d.Encode()
		if !errors.Is(err, StatusInvalid) || b != nil {
			t.Errorf("%s: Encode = %x, %v; want nil, INVALID", v.name, b, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "namespace descriptor: ") {
			t.Errorf("%s: error %q does not say what failed", v.name, err)
		}
		pre := []byte("keep")
		if out, err := v.d.Append(pre); err == nil || !bytes.Equal(out, pre) {
			t.Errorf("%s: Append on error = %q, %v; want dst unchanged", v.name, out, err)
		}
	}
	d := goldenDescriptors()[0].d
	d.Tenant = strings.Repeat("t", MaxNamespaceBytes)
	if _, err := d.Encode(); !errors.Is(err, StatusInvalid) || !strings.Contains(err.Error(), "namespace limit") {
		t.Errorf("oversized descriptor: %v, want INVALID naming the limit", err)
	}
	// Exactly at the limit is fine.
	d.Tenant = strings.Repeat("t", MaxNamespaceBytes-(d.encodedLen()-len(d.Tenant)))
	if enc, err := d.Encode(); err != nil || len(enc) != MaxNamespaceBytes {
		t.Errorf("descriptor of exactly %d bytes: len %d, %v", MaxNamespaceBytes, len(enc), err)
	}
	for _, id := range []string{LayoutSGLangHiCache, LayoutVLLM, LayoutLMCache, "x-a"} {
		d := goldenDescriptors()[0].d
		d.LayoutID = id
		if _, err := d.Encode(); err != nil {
			t.Errorf("layout ID %q rejected: %v", id, err)
		}
	}
}

func TestNamespaceDecodeRejects(t *testing.T) {
	valid := rawDescriptor(descriptorFields(LayoutVLLM)...)
	if _, err := DecodeNamespace(valid); err != nil {
		t.Fatalf("valid raw descriptor: %v", err)
	}
	// Every proper prefix is truncated somewhere.
	for n := 0; n < len(valid); n++ {
		if _, err := DecodeNamespace(valid[:n]); !errors.Is(err, StatusInvalid) {
			t.Fatalf("prefix of %d/%d bytes: err = %v, want INVALID", n, len(valid), err)
		}
	}
	fields := descriptorFields(LayoutVLLM)
	huge := append([]byte(NamespaceMagic), u64le(^uint64(0))...)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"bad magic", append([]byte("DFKVNS\x00\x01"), valid[8:]...), "magic"},
		{"no magic", []byte("my-namespace"), "magic"},
		{"trailing byte", append(append([]byte{}, valid...), 0), "1 trailing bytes"},
		{"extra field", Frame(append([]byte{}, valid...), []byte("x")), "trailing bytes"},
		{"nine fields", rawDescriptor(fields[:9]...), "field 10 (topology sizes): length word truncated"},
		{"over-long length", append(huge, "acme"...), "field 1 (tenant): length 18446744073709551615"},
		{"length past end", append(append([]byte(NamespaceMagic), u64le(5)...), "acme"...), "exceeds the 4 bytes left"},
		{"fingerprint 7 bytes", rawDescriptor(withField(fields, 5, make([]byte, 7))...), "field 6 (layout fingerprint) is 7 bytes, want 8"},
		{"fingerprint 9 bytes", rawDescriptor(withField(fields, 5, make([]byte, 9))...), "want 8"},
		{"block tokens 8 bytes", rawDescriptor(withField(fields, 6, u64le(16))...), "field 7 (block tokens) is 8 bytes, want 4"},
		{"geometry 8 bytes", rawDescriptor(withField(fields, 7, u32le(1, 2))...), "field 8 (layer geometry) is 8 bytes, want 12"},
		{"topology 16 bytes", rawDescriptor(withField(fields, 9, u32le(1, 1, 1, 1))...), "field 10 (topology sizes) is 16 bytes, want 20"},
		{"unknown layout", rawDescriptor(descriptorFields("lmcache/raw-v2")...), "layout ID \"lmcache/raw-v2\""},
		{"empty tenant", rawDescriptor(withField(fields, 0, nil)...), "tenant is empty"},
		{"zero tp", rawDescriptor(withField(fields, 9, u32le(1, 0, 1, 1, 1))...), "tp size is 0"},
		{"over namespace limit", append(append([]byte{}, valid...), make([]byte, MaxNamespaceBytes)...), "over the 65536-byte namespace limit"},
	}
	for _, c := range cases {
		d, err := DecodeNamespace(c.b)
		if !errors.Is(err, StatusInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DecodeNamespace err = %v, want INVALID containing %q", c.name, err, c.want)
		}
		if d != (NamespaceDescriptor{}) {
			t.Errorf("%s: non-zero descriptor %+v returned with error", c.name, d)
		}
	}
}

func TestNamespaceCanonicalTenant(t *testing.T) {
	for _, v := range goldenRawInputs() {
		tenant, ok := CanonicalTenant(v.ns)
		want := map[string]string{
			"tenant-frame-only":   "acme",
			"valid-minimal":       "acme",
			"extra-field":         "acme",
			"unknown-layout":      "acme",
			"fingerprint-7-bytes": "acme",
			"zero-block-tokens":   "acme",
			"nine-fields":         "acme",
		}[v.name]
		if ok != (want != "") || string(tenant) != want {
			t.Errorf("%s: CanonicalTenant = %q, %v; want %q, %v", v.name, tenant, ok, want, want != "")
		}
		identity := v.ns
		if ok {
			identity = tenant
		}
		msg := append([]byte("DFKVTENANT1"), u64le(uint64(len(identity)))...)
		sum := sha256.Sum256(append(msg, identity...))
		if got := TenantHash(v.ns); got != binary.BigEndian.Uint64(sum[:]) {
			t.Errorf("%s: TenantHash = %016x, want %x", v.name, got, sum[:8])
		}
	}
	// The returned tenant must not let a caller's append reach into ns.
	ns := rawDescriptor([]byte("acme"), []byte("m"))
	tenant, _ := CanonicalTenant(ns)
	_ = append(tenant, 'X')
	if ns[16+4] != 1 {
		t.Fatalf("append to CanonicalTenant's result overwrote the namespace")
	}
}

// TestNamespaceLayoutFingerprintByHand builds the fingerprint message byte by
// byte, and shows the order of fields and values is part of it.
func TestNamespaceLayoutFingerprintByHand(t *testing.T) {
	fields := []LayoutField{{"k", []int64{2, -1}}, {"st", nil}}
	var msg []byte
	msg = append(msg, "DFKVLAYOUT1"...)
	msg = append(msg, 1, 0, 0, 0, 0, 0, 0, 0, 'k')
	msg = append(msg, 16, 0, 0, 0, 0, 0, 0, 0)
	msg = append(msg, 2, 0, 0, 0, 0, 0, 0, 0)
	msg = append(msg, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	msg = append(msg, 2, 0, 0, 0, 0, 0, 0, 0, 's', 't')
	msg = append(msg, 0, 0, 0, 0, 0, 0, 0, 0)
	sum := sha256.Sum256(msg)
	if got, want := LayoutFingerprint(fields...), binary.BigEndian.Uint64(sum[:8]); got != want {
		t.Fatalf("LayoutFingerprint = %016x, want %016x", got, want)
	}
	empty := sha256.Sum256([]byte("DFKVLAYOUT1"))
	if v := goldenByName(t, loadGolden(t).LayoutFingerprints, "no-fields"); v.Fingerprint != hex.EncodeToString(empty[:8]) {
		t.Fatalf("golden no-fields fingerprint %s, want %x", v.Fingerprint, empty[:8])
	}

	distinct := [][]LayoutField{
		{{"a", []int64{1, 2}}},
		{{"a", []int64{2, 1}}},
		{{"a", []int64{1}}, {"b", []int64{2}}},
		{{"b", []int64{2}}, {"a", []int64{1}}},
		{{"a", []int64{1, 2}}, {"b", nil}},
		{{"ab", nil}},
		{{"a", nil}, {"b", nil}},
	}
	seen := map[uint64]int{}
	for i, f := range distinct {
		fp := LayoutFingerprint(f...)
		if j, dup := seen[fp]; dup {
			t.Fatalf("fingerprints %d and %d collide: %016x", i, j, fp)
		}
		seen[fp] = i
	}
}

func FuzzNamespaceDecode(f *testing.F) {
	for _, v := range goldenDescriptors() {
		b, _ := v.d.Encode()
		f.Add(b)
	}
	for _, v := range goldenRawInputs() {
		f.Add(v.ns)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeNamespace(b)
		tenant, canonical := CanonicalTenant(b)
		if err != nil {
			if !errors.Is(err, StatusInvalid) {
				t.Fatalf("decode error %v does not wrap INVALID", err)
			}
			return
		}
		enc, err := d.Encode()
		if err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("decoded %+v re-encodes to %x, %v; input %x", d, enc, err, b)
		}
		if !canonical || string(tenant) != d.Tenant {
			t.Fatalf("decodable descriptor: CanonicalTenant = %q, %v; want %q", tenant, canonical, d.Tenant)
		}
	})
}

func BenchmarkIdentNamespaceEncode(b *testing.B) {
	d := goldenDescriptors()[0].d
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = d.Append(buf[:0])
	}
}

// TestRefusedDescriptorChargesItsNamedTenant pins CanonicalTenant's
// choice: a descriptor the strict decoder refuses but whose framing holds
// is charged to the tenant it names, exactly where a valid descriptor of
// that tenant and the quotas file's entry for the name are, never to an
// identity of its own outside the tenant's quota; bytes whose framing
// does not hold charge no named tenant.
func TestRefusedDescriptorChargesItsNamedTenant(t *testing.T) {
	acme := TenantHash([]byte("acme")) // how the quotas file hashes a tenant name
	if valid := TenantHash(rawDescriptor(descriptorFields(LayoutVLLM)...)); valid != acme {
		t.Fatalf("a valid descriptor of tenant acme hashes to %016x, the name to %016x", valid, acme)
	}
	charged := map[string]bool{
		"tenant-frame-only": true, "extra-field": true, "unknown-layout": true,
		"fingerprint-7-bytes": true, "zero-block-tokens": true, "nine-fields": true,
	}
	for _, v := range goldenRawInputs() {
		if _, err := DecodeNamespace(v.ns); err == nil {
			continue // valid: charged to its tenant, as TestNamespaceCanonicalTenant shows
		}
		if got := TenantHash(v.ns) == acme; got != charged[v.name] {
			t.Errorf("%s (refused by DecodeNamespace): charged to tenant acme = %v, want %v", v.name, got, charged[v.name])
		}
		delete(charged, v.name)
	}
	for name := range charged {
		t.Errorf("golden input %s is missing or now decodes; this test no longer covers it", name)
	}
}
