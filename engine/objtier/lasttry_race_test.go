package objtier

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// lastTryBucket fails the first three PUTs of one name; before the third
// returns it runs onThird (which the test uses to hold the key's stripe,
// so the upload's last-try mark waits). Later PUTs succeed.
type lastTryBucket struct {
	*memBucket
	name    string
	first   chan struct{} // the first PUT waits for it
	onThird func()
	n       atomic.Int64
}

func (b *lastTryBucket) Put(ctx context.Context, name string, body []byte) error {
	if name != b.name {
		return b.memBucket.Put(ctx, name, body)
	}
	switch b.n.Add(1) {
	case 1:
		<-b.first
		return errDown
	case 2:
		return errDown
	case 3:
		b.onThird()
		return errDown
	}
	return b.memBucket.Put(ctx, name, body)
}

// TestNewerPutDuringLastTryMarkIsNotDeleted: V1's upload fails its last
// try while a PUT of V2 is queued between the drop's lastTry and its mark.
// The mark takes V1's generation, so V2's successful upload ends it: the
// key is not left marked (reads missing, the delete retry taking V2's
// object out of the bucket) although the bucket holds its newest value.
func TestNewerPutDuringLastTryMarkIsNotDeleted(t *testing.T) {
	k := enginetest.Key(31337)
	b := &lastTryBucket{memBucket: newMemBucket(), name: ObjectName("p", k), first: make(chan struct{})}
	backing := newMemEngine()
	tr, err := Open(Options{Backing: backing, Bucket: b, Prefix: "p", Timeout: time.Second, Workers: 1,
		MaxValueBytes: 4 << 20, Logger: slog.New(slog.DiscardHandler), Clock: &jumpClock{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	s := tr.stripe(k)
	third := make(chan struct{})
	b.onThird = func() {
		s.mu.Lock() // released by the test once V2 is queued
		close(third)
	}
	v1, v2 := enginetest.Value(1, 4096), enginetest.Value(2, 4096)
	if err := tr.Put(k, v1); err != nil { // V1's upload starts and waits in its first try
		t.Fatal(err)
	}
	// The PUT of V2: past beginPut, its disk write in progress.
	gate := make(chan struct{})
	backing.mu.Lock()
	backing.putGate, backing.gateOnce = gate, true
	backing.mu.Unlock()
	putDone := make(chan error, 1)
	go func() { putDone <- tr.Put(k, v2) }()
	time.Sleep(50 * time.Millisecond)
	close(b.first) // V1 fails try 1, 2, 3
	<-third
	time.Sleep(50 * time.Millisecond) // uploadOne: lastTry true, markStale waits for the stripe
	close(gate)                       // V2 stored and queued (endWrite then waits for the stripe)
	for {
		tr.queue.mu.Lock()
		u := tr.queue.items[k]
		queued := u != nil && u.body != nil
		tr.queue.mu.Unlock()
		if queued {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.mu.Unlock()
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
	// V2's upload lands.
	want := tr.object(k, v2)
	defer tr.pool.Put(want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if o, ok := b.object(b.name); ok && bytes.Equal(o, want.B) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("V2 never uploaded: %+v", tr.TierStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // delete retries run every 500 ms
	s.mu.Lock()
	_, marked := s.tombs[k]
	s.mu.Unlock()
	_, inBucket := b.object(b.name)
	backing.evict(k)
	got, gerr := get(t, tr, k)
	if marked || !inBucket || gerr != nil || !bytes.Equal(got, v2) {
		t.Fatalf("after V2 (the newest value) uploaded: key still marked %v, V2's object in the bucket %v, "+
			"GET after eviction: err %v (status %v), got V2 %v", marked, inBucket, gerr, wire.StatusOf(gerr), bytes.Equal(got, v2))
	}
}
