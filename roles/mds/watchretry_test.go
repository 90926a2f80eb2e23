package mds

import (
	"testing"
	"time"
)

// TestWatchRetrySpread: the watch's waits before reading etcd again are
// spread (MDS processes sharing an etcd do not retry in step), stay within
// half to one and a half times the interval they are drawn around, double
// from 0.5 s up to 5 s while etcd fails, and start over after a read.
func TestWatchRetrySpread(t *testing.T) {
	const first, ceiling = 500 * time.Millisecond, 5 * time.Second
	within := func(d, mid time.Duration) bool { return d >= mid/2 && d <= mid*3/2 }
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := watchRetry().NextBackOff()
		if !within(d, first) {
			t.Fatalf("first wait %v outside [%v, %v]", d, first/2, first*3/2)
		}
		seen[d] = true
	}
	if len(seen) < 500 {
		t.Fatalf("1000 first waits took only %d values", len(seen))
	}
	b := watchRetry()
	mid := first
	for i := range 8 {
		if d := b.NextBackOff(); !within(d, mid) {
			t.Fatalf("wait %d: %v, want within [%v, %v]", i, d, mid/2, mid*3/2)
		}
		mid = min(2*mid, ceiling)
	}
	seen = map[time.Duration]bool{}
	for range 100 {
		d := b.NextBackOff()
		if !within(d, ceiling) {
			t.Fatalf("wait at the cap %v outside [%v, %v]", d, ceiling/2, ceiling*3/2)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("100 waits at the cap took only %d values", len(seen))
	}
	b.Reset()
	if d := b.NextBackOff(); !within(d, first) {
		t.Fatalf("wait after a good read %v, want back within [%v, %v]", d, first/2, first*3/2)
	}
}
