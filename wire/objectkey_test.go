package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestObjectKeyRender(t *testing.T) {
	want := map[string]string{
		"basic": "dfkv/pool/v2|pool=host|hash=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" +
			"|dp=1:0|tp=4:1|pcp=1:0|dcp=1:0|pp=2:1|group=0|component=kv",
		"replicated-tp": "dfkv/pool/v2|pool=host|hash=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" +
			"|dp=1:0|tp=8:-1|pcp=1:0|dcp=1:0|pp=2:1|group=0|component=kv_latent",
		"scatter": "dfkv/pool/v2|pool=host|hash=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" +
			"|dp=1:0|tp=4:1|pcp=1:0|dcp=1:0|pp=2:1|group=2|component=kv|sg=4:7",
		"verbatim-strings": "dfkv/pool/v2|pool=p/é|hash=0xABCdef|dp=3:2|tp=1:-1|pcp=2:0|dcp=2:-1|pp=16:15|group=12345|component=k\x00v|sg=1:0",
	}
	for _, v := range goldenObjectKeyInputs() {
		got, err := v.k.Render()
		if err != nil || got != want[v.name] {
			t.Errorf("%s: Render =\n %q, %v\nwant\n %q", v.name, got, err, want[v.name])
		}
		g := goldenByName(t, loadGolden(t).ObjectKeys, v.name)
		if g.Rendered != want[v.name] {
			t.Errorf("%s: golden rendered %q, want %q", v.name, g.Rendered, want[v.name])
		}
	}
}

func TestObjectKeyValidate(t *testing.T) {
	wantMsg := map[string]string{
		"pipe-in-pool":          `object key: pool "a|b" contains '|' at byte 1`,
		"equals-in-hash":        `object key: hash "ab=" contains '=' at byte 2`,
		"pipe-in-component":     `component "kv|sg=1:0" contains '|'`,
		"empty-pool":            "object key: pool is empty",
		"empty-hash":            "object key: hash is empty",
		"empty-component":       "object key: component is empty",
		"size-zero":             "object key: dp size 0 is below 1",
		"rank-equals-size":      "object key: tp rank 4 is outside [-1, 4)",
		"rank-below-replicated": "object key: pp rank -2 is outside [-1, 2)",
		"negative-group":        "object key: group -1 is negative",
		"sg-width-zero":         "object key: scatter width 0 is below 1",
		"sg-group-negative":     "object key: scatter group -1 is negative",
	}
	for _, v := range goldenInvalidObjectKeys() {
		pre := []byte("keep")
		out, err := v.k.Append(pre)
		if !errors.Is(err, StatusInvalid) || !strings.Contains(err.Error(), wantMsg[v.name]) {
			t.Errorf("%s: Append err = %v, want INVALID containing %q", v.name, err, wantMsg[v.name])
		}
		if !bytes.Equal(out, pre) {
			t.Errorf("%s: Append on error returned %q, want dst unchanged", v.name, out)
		}
		if s, err := v.k.Render(); err == nil || s != "" {
			t.Errorf("%s: Render = %q, %v; want error", v.name, s, err)
		}
	}
}

func TestObjectKeyTooLong(t *testing.T) {
	k := basicObjectKey()
	k.Hash = strings.Repeat("a", MaxObjectKeyBytes)
	pre := []byte("keep")
	out, err := k.Append(pre)
	if !errors.Is(err, StatusInvalid) || !strings.Contains(err.Error(), "over the 4096-byte limit") || !bytes.Equal(out, pre) {
		t.Fatalf("oversized key: %q, %v", out, err)
	}
	// The largest hash that still fits renders to exactly the limit and maps.
	base, _ := basicObjectKey().Render()
	k.Hash = strings.Repeat("a", MaxObjectKeyBytes-(len(base)-len(basicObjectKey().Hash)))
	s, err := k.Render()
	if err != nil || len(s) != MaxObjectKeyBytes {
		t.Fatalf("key at the limit: len %d, %v", len(s), err)
	}
	if _, err := NewBlockKey([]byte("ns"), []byte(s)); err != nil {
		t.Fatalf("key at the limit does not map: %v", err)
	}
}

// TestObjectKeyDistinct shows that size and rank, replication and the
// scatter suffix all change the rendered key.
func TestObjectKeyDistinct(t *testing.T) {
	variants := []func(k *ObjectKey){
		func(k *ObjectKey) {},
		func(k *ObjectKey) { k.TP = Coord{8, 1} },
		func(k *ObjectKey) { k.TP = Coord{4, ReplicatedRank} },
		func(k *ObjectKey) { k.TP = Coord{4, 2} },
		func(k *ObjectKey) { k.DP = Coord{2, 0} },
		func(k *ObjectKey) { k.PCP = Coord{2, 1} },
		func(k *ObjectKey) { k.DCP = Coord{2, 1} },
		func(k *ObjectKey) { k.PP = Coord{2, 0} },
		func(k *ObjectKey) { k.Group = 1 },
		func(k *ObjectKey) { k.Component = "k" },
		func(k *ObjectKey) { k.SG = &Scatter{1, 0} },
		func(k *ObjectKey) { k.SG = &Scatter{2, 0} },
	}
	seen := map[string]int{}
	for i, f := range variants {
		k := basicObjectKey()
		f(&k)
		s, err := k.Render()
		if err != nil {
			t.Fatalf("variant %d: %v", i, err)
		}
		if j, dup := seen[s]; dup {
			t.Fatalf("variants %d and %d render the same key %q", i, j, s)
		}
		seen[s] = i
	}
}

func TestObjectKeyAppendAllocs(t *testing.T) {
	k := basicObjectKey()
	k.SG = &Scatter{4, 1}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(200, func() { buf, _ = k.Append(buf[:0]) }); n != 0 {
		t.Fatalf("Append into a large enough buffer: %v allocs/op, want 0", n)
	}
}

func BenchmarkIdentObjectKeyAppend(b *testing.B) {
	k := basicObjectKey()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = k.Append(buf[:0])
	}
}
