package objtier

import (
	"bytes"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/file"
)

// The node's dfkv_hits_total and dfkv_misses_total are its front
// engine's Stats().Hits and Misses: a read the object store answers
// counts as one hit, not as the disk's miss.
func TestStatsCountAReadTheBucketAnsweredAsAHit(t *testing.T) {
	disk, err := file.Open(file.Options{Dir: t.TempDir(), CapacityBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	f := open(t, func(o *Options) { o.Backing = disk; o.Write = WriteSync })
	k, v := enginetest.Key(1), enginetest.Value(1, 8192)
	if err := f.tier.Put(k, v); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	if err := disk.Remove(k); err != nil { // evicted from the disk; the bucket keeps it
		t.Fatal(err)
	}
	before := f.tier.Stats()
	got, err := get(t, f.tier, k)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("read through the bucket: %v", err)
	}
	f.settle(t)
	after := f.tier.Stats()
	if hits, misses := after.Hits-before.Hits, after.Misses-before.Misses; hits != 1 || misses != 0 {
		t.Fatalf("one read the object store answered counted %d hits and %d misses, want 1 and 0", hits, misses)
	}
}
