package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func TestIdentFrame(t *testing.T) {
	got := Frame([]byte("x"), []byte("abc"))
	want := []byte{'x', 3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'}
	if !bytes.Equal(got, want) {
		t.Fatalf("Frame = %x, want %x", got, want)
	}
	if got := Frame(nil, nil); !bytes.Equal(got, make([]byte, 8)) {
		t.Fatalf("Frame(nil) = %x, want eight zero bytes", got)
	}
}

// TestIdentObjectIDByHand recomputes object ids from explicitly spelled-out
// bytes, independent of Frame and of the golden generator, and checks the
// golden file carries the same answers.
func TestIdentObjectIDByHand(t *testing.T) {
	// frame("ns") || frame("key")
	msg := []byte{
		2, 0, 0, 0, 0, 0, 0, 0, 'n', 's',
		3, 0, 0, 0, 0, 0, 0, 0, 'k', 'e', 'y',
	}
	sum := sha256.Sum256(msg)
	want := hex.EncodeToString(sum[:16])
	id := ObjectID([]byte("ns"), []byte("key"))
	if got := hex.EncodeToString(id[:]); got != want {
		t.Fatalf("ObjectID(ns, key) = %s, want %s", got, want)
	}
	// Tenant of a non-canonical namespace: the whole namespace.
	tmsg := append([]byte("DFKVTENANT1"), 2, 0, 0, 0, 0, 0, 0, 0, 'n', 's')
	tsum := sha256.Sum256(tmsg)
	wantTenant := hex.EncodeToString(tsum[:8])
	if got := hex.EncodeToString(binary.BigEndian.AppendUint64(nil, TenantHash([]byte("ns")))); got != wantTenant {
		t.Fatalf("TenantHash(ns) = %s, want %s", got, wantTenant)
	}
	v := goldenByName(t, loadGolden(t).BlockKeys, "ascii")
	if v.ObjectID != want || v.TenantHash != wantTenant || v.Filename != wantTenant+want {
		t.Fatalf("golden ascii vector %+v disagrees with hand computation id=%s tenant=%s", v, want, wantTenant)
	}

	// NUL bytes are identity bytes: frame("a\x00") || frame("\x00b").
	msg = []byte{
		2, 0, 0, 0, 0, 0, 0, 0, 'a', 0,
		2, 0, 0, 0, 0, 0, 0, 0, 0, 'b',
	}
	sum = sha256.Sum256(msg)
	id = ObjectID([]byte("a\x00"), []byte("\x00b"))
	if !bytes.Equal(id[:], sum[:16]) {
		t.Fatalf("ObjectID with NULs = %x, want %x", id, sum[:16])
	}
	if v := goldenByName(t, loadGolden(t).BlockKeys, "nul-bytes"); v.ObjectID != hex.EncodeToString(sum[:16]) {
		t.Fatalf("golden nul-bytes object id %s, want %x", v.ObjectID, sum[:16])
	}
}

func TestIdentFramingSeparatesSpans(t *testing.T) {
	pairs := [][2]string{{"ab", "c"}, {"a", "bc"}, {"a", "b\x00"}, {"a\x00", "b"}, {"a", "b"}}
	seen := map[[16]byte]string{}
	for _, p := range pairs {
		id := ObjectID([]byte(p[0]), []byte(p[1]))
		if prev, dup := seen[id]; dup {
			t.Fatalf("ObjectID(%q, %q) collides with %s", p[0], p[1], prev)
		}
		seen[id] = p[0] + "|" + p[1]
	}
}

func TestIdentTenantSharedAcrossDescriptors(t *testing.T) {
	a := goldenDescriptors()[0].d
	b := a
	b.ModelID = "another/model"
	b.LayoutID = LayoutLMCache
	ea, _ := a.Encode()
	eb, _ := b.Encode()
	if TenantHash(ea) != TenantHash(eb) {
		t.Fatalf("same tenant, different model: tenant hashes differ")
	}
	if TenantHash(ea) != TenantHash([]byte(NamespaceMagic+"\x04\x00\x00\x00\x00\x00\x00\x00acme")) {
		t.Fatalf("tenant hash of a descriptor != tenant hash of a bare tenant frame")
	}
	// The identity is bytes alone, with no marker of where they came from:
	// a raw namespace equal to a descriptor's tenant shares that tenant.
	if TenantHash(ea) != TenantHash([]byte("acme")) {
		t.Fatalf("tenant of descriptor tenant \"acme\" != tenant of raw namespace \"acme\"")
	}
	ka, _ := NewBlockKey(ea, []byte("k"))
	kb, _ := NewBlockKey(eb, []byte("k"))
	if ka.ID == kb.ID {
		t.Fatalf("different namespaces gave the same object id")
	}
}

func TestIdentNewBlockKeyLimits(t *testing.T) {
	okNS := bytes.Repeat([]byte{0}, MaxNamespaceBytes)
	okKey := bytes.Repeat([]byte{0}, MaxObjectKeyBytes)
	if _, err := NewBlockKey(okNS, okKey); err != nil {
		t.Fatalf("spans at the limits: %v", err)
	}
	for _, c := range []struct {
		name    string
		ns, key []byte
		want    string
	}{
		{"nil namespace", nil, []byte("k"), "namespace is empty"},
		{"empty namespace", []byte{}, []byte("k"), "namespace is empty"},
		{"nil key", []byte("n"), nil, "object key is empty"},
		{"empty key", []byte("n"), []byte{}, "object key is empty"},
		{"namespace over limit", append(okNS, 1), []byte("k"), "namespace is 65537 bytes, over the 65536-byte limit"},
		{"key over limit", []byte("n"), append(okKey, 1), "object key is 4097 bytes, over the 4096-byte limit"},
	} {
		k, err := NewBlockKey(c.ns, c.key)
		if !errors.Is(err, StatusInvalid) || StatusOf(err) != StatusInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewBlockKey = %v, %v; want INVALID error containing %q", c.name, k, err, c.want)
		}
		if k != (BlockKey{}) {
			t.Errorf("%s: non-zero key %v returned with error", c.name, k)
		}
	}
	if _, err := NewKeyMapper(nil); !errors.Is(err, StatusInvalid) {
		t.Errorf("NewKeyMapper(nil) = %v, want INVALID", err)
	}
	if _, err := NewKeyMapper(append(okNS, 1)); !errors.Is(err, StatusInvalid) {
		t.Errorf("NewKeyMapper(oversized) = %v, want INVALID", err)
	}
	m, err := NewKeyMapper([]byte("n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]byte{nil, {}, append(okKey, 1)} {
		if _, err := m.BlockKey(key); !errors.Is(err, StatusInvalid) {
			t.Errorf("KeyMapper.BlockKey(%d bytes) = %v, want INVALID", len(key), err)
		}
	}
}

// TestIdentKeyMapperMatches checks the saved-state path against the direct
// one across SHA-256 block boundaries of both spans.
func TestIdentKeyMapperMatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	nsLens := []int{1, 2, 47, 48, 55, 56, 57, 63, 64, 65, 119, 120, 128, 200, 1000, MaxNamespaceBytes}
	keyLens := []int{1, 7, 55, 56, 64, 100, 170, MaxObjectKeyBytes}
	for _, nl := range nsLens {
		ns := randBytes(nl)
		if nl == 200 {
			enc, err := goldenDescriptors()[0].d.Encode()
			if err != nil {
				t.Fatal(err)
			}
			ns = enc
		}
		m, err := NewKeyMapper(ns)
		if err != nil {
			t.Fatal(err)
		}
		if m.state == nil {
			t.Fatalf("SHA-256 state was not saved; the mapper would rehash the namespace every call")
		}
		if m.Tenant() != TenantHash(ns) {
			t.Fatalf("ns len %d: mapper tenant %x, want %x", nl, m.Tenant(), TenantHash(ns))
		}
		saved := append([]byte(nil), ns...)
		for i := range ns { // the mapper must have copied the namespace
			ns[i] ^= 0xff
		}
		for _, kl := range keyLens {
			key := randBytes(kl)
			got, err := m.BlockKey(key)
			want, err2 := NewBlockKey(saved, key)
			if err != nil || err2 != nil || got != want {
				t.Fatalf("ns len %d key len %d: mapper %v %v, direct %v %v", nl, kl, got, err, want, err2)
			}
		}
	}
}

func TestIdentKeyMapperConcurrent(t *testing.T) {
	m, err := NewKeyMapper([]byte("shared-namespace"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			key := []byte{byte(g), 0, 0}
			for i := range 200 {
				key[1], key[2] = byte(i), byte(i>>8)
				got, _ := m.BlockKey(key)
				if want, _ := NewBlockKey([]byte("shared-namespace"), key); got != want {
					t.Errorf("goroutine %d key %x: %v, want %v", g, key, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestIdentAllocs(t *testing.T) {
	d := goldenDescriptors()[0].d
	ns, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewKeyMapper(ns)
	if err != nil {
		t.Fatal(err)
	}
	ok := basicObjectKey()
	var keyBuf [256]byte
	var sink BlockKey
	for name, f := range map[string]func(){
		"ObjectID":             func() { sink.ID = ObjectID(ns, keyBuf[:100]) },
		"TenantHash/canonical": func() { sink.Tenant = TenantHash(ns) },
		"TenantHash/raw":       func() { sink.Tenant = TenantHash(keyBuf[:50]) },
		"NewBlockKey":          func() { sink, _ = NewBlockKey(ns, keyBuf[:100]) },
		"KeyMapper.BlockKey":   func() { sink, _ = m.BlockKey(keyBuf[:100]) },
		"render+map": func() {
			b, _ := ok.Append(keyBuf[:0])
			sink, _ = m.BlockKey(b)
		},
	} {
		if n := testing.AllocsPerRun(200, f); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", name, n)
		}
	}
	_ = sink
}

func benchNamespaceAndKey(b *testing.B) ([]byte, []byte) {
	d := goldenDescriptors()[0].d
	ns, err := d.Encode()
	if err != nil {
		b.Fatal(err)
	}
	k := basicObjectKey()
	s, err := k.Render()
	if err != nil {
		b.Fatal(err)
	}
	return ns, []byte(s)
}

func BenchmarkIdentObjectID(b *testing.B) {
	ns, key := benchNamespaceAndKey(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(ns) + len(key)))
	for b.Loop() {
		ObjectID(ns, key)
	}
}

func BenchmarkIdentTenantHash(b *testing.B) {
	ns, _ := benchNamespaceAndKey(b)
	b.ReportAllocs()
	for b.Loop() {
		TenantHash(ns)
	}
}

func BenchmarkIdentNewBlockKey(b *testing.B) {
	ns, key := benchNamespaceAndKey(b)
	b.ReportAllocs()
	for b.Loop() {
		NewBlockKey(ns, key)
	}
}

func BenchmarkIdentKeyMapper(b *testing.B) {
	ns, key := benchNamespaceAndKey(b)
	m, err := NewKeyMapper(ns)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(key)))
	for b.Loop() {
		m.BlockKey(key)
	}
}

// BenchmarkIdentRenderAndMap is the connector's per-block path: render the
// object key into a reused buffer, then map it.
func BenchmarkIdentRenderAndMap(b *testing.B) {
	ns, _ := benchNamespaceAndKey(b)
	m, err := NewKeyMapper(ns)
	if err != nil {
		b.Fatal(err)
	}
	k := basicObjectKey()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = k.Append(buf[:0])
		m.BlockKey(buf)
	}
}
