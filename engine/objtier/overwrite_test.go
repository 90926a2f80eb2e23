package objtier

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// gatedBucket holds each Put until gate is closed (when gate is set),
// saying on entered that one arrived, and counts Deletes, each of which
// takes deleteDelay.
type gatedBucket struct {
	*memBucket
	gate        chan struct{}
	entered     chan struct{}
	deleteDelay time.Duration
	deletes     atomic.Int64
}

func (b *gatedBucket) Put(ctx context.Context, name string, body []byte) error {
	if b.gate != nil {
		select {
		case b.entered <- struct{}{}:
		default:
		}
		<-b.gate
	}
	return b.memBucket.Put(ctx, name, body)
}

func (b *gatedBucket) Delete(ctx context.Context, name string) error {
	b.deletes.Add(1)
	time.Sleep(b.deleteDelay)
	return b.memBucket.Delete(ctx, name)
}

// gateUploads holds the tier's uploads until the test calls open (or
// ends: the tier's Close, which runs after, waits for them).
func gateUploads(t *testing.T, f *fixture) (gb *gatedBucket, open func()) {
	gb = &gatedBucket{memBucket: f.bucket, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	f.tier.bucket = gb
	var once sync.Once
	open = func() { once.Do(func() { close(gb.gate) }) }
	t.Cleanup(open)
	return gb, open
}

// notValue fails the test if a read of key served old.
func notValue(t *testing.T, f *fixture, key wire.BlockKey, old []byte, when string) {
	t.Helper()
	if got, err := get(t, f.tier, key); err == nil && bytes.Equal(got, old) {
		t.Fatalf("%s: a read served the value an acknowledged overwrite replaced", when)
	}
}

// A newer PUT whose upload the full queue refuses drops the older object
// of the key that waited in the queue: it is served neither from the
// queue nor, once uploaded, from the bucket.
func TestRefusedOverwriteDropsTheQueuedOlderObject(t *testing.T) {
	f := open(t, func(o *Options) { o.QueueBytes = 64 << 10; o.Workers = 1 })
	gb, openGate := gateUploads(t, f)
	if err := f.tier.Put(enginetest.Key(1), enginetest.Value(1, 1000)); err != nil {
		t.Fatal(err)
	}
	<-gb.entered // the only worker is busy: what follows stays queued
	k := enginetest.Key(6)
	old, newer := enginetest.Value(6, 10000), enginetest.Value(66, 30000)
	for _, put := range []struct {
		k wire.BlockKey
		v []byte
	}{{k, old}, {enginetest.Key(7), enginetest.Value(7, 40000)}, {k, newer}} {
		if err := f.tier.Put(put.k, put.v); err != nil {
			t.Fatal(err)
		}
	}
	if f.tier.TierStats().UploadDrops != 1 {
		t.Fatalf("upload drops %d, want the overwrite's 1", f.tier.TierStats().UploadDrops)
	}
	f.backing.evict(k)
	notValue(t, f, k, old, "with the older object queued")
	openGate()
	f.settle(t)
	notValue(t, f, k, old, "after the queue drained")
}

// The same with the older object's upload in flight when the overwrite
// is refused: its landing does not make the bucket's copy current.
func TestRefusedOverwriteCancelsTheOlderUploadInFlight(t *testing.T) {
	f := open(t, func(o *Options) { o.QueueBytes = 16 << 10 })
	gb, openGate := gateUploads(t, f)
	k := enginetest.Key(8)
	old, newer := enginetest.Value(8, 10000), enginetest.Value(88, 10000)
	if err := f.tier.Put(k, old); err != nil {
		t.Fatal(err)
	}
	<-gb.entered
	if err := f.tier.Put(k, newer); err != nil {
		t.Fatal(err)
	}
	if f.tier.TierStats().UploadDrops != 1 {
		t.Fatalf("upload drops %d, want the overwrite's 1", f.tier.TierStats().UploadDrops)
	}
	f.backing.evict(k)
	notValue(t, f, k, old, "with the older upload in flight")
	openGate()
	f.settle(t)
	notValue(t, f, k, old, "after the older upload landed")
}

// An overwrite whose upload is in flight is the key's value until it
// lands: a miss meanwhile is served it from the queue, and neither
// serves nor promotes the bucket's older object.
func TestOverwriteInFlightIsServedFromTheQueue(t *testing.T) {
	f := open(t, nil)
	k := enginetest.Key(9)
	old, newer := enginetest.Value(9, 5000), enginetest.Value(99, 5000)
	if err := f.tier.Put(k, old); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	gb, openGate := gateUploads(t, f)
	if err := f.tier.Put(k, newer); err != nil {
		t.Fatal(err)
	}
	<-gb.entered
	f.backing.evict(k)
	got, err := get(t, f.tier, k)
	openGate()
	f.settle(t)
	if err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("a miss during the overwrite's upload: %v, or not the newer value", err)
	}
	if held, ok := f.backing.has(k); ok && bytes.Equal(held, old) {
		t.Fatal("the older object was promoted into the backing")
	}
}

// Close does not wait for a pass of background deletes to finish: it
// stops the pass between two deletes.
func TestCloseStopsADeletePass(t *testing.T) {
	f := open(t, func(o *Options) { o.QueueBytes = 8 << 10 })
	gb := &gatedBucket{memBucket: f.bucket, deleteDelay: 20 * time.Millisecond}
	f.tier.bucket = gb
	const marked = 200
	for i := range marked { // each upload refused: a mark, and a delete, each
		if err := f.tier.Put(enginetest.Key(1000+i), enginetest.Value(1, 10000)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for gb.deletes.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no background delete began within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := f.tier.Close(); err != nil {
		t.Fatal(err)
	}
	if n := gb.deletes.Load(); n >= marked {
		t.Fatalf("Close returned after all %d deletes of the pass; it should stop the pass", n)
	}
}

// Close during an outage waits out the back-off for its drain rather
// than taking and skipping the queued uploads over and over.
func TestCloseDuringAnOutageDoesNotSpin(t *testing.T) {
	f := open(t, func(o *Options) { o.DrainTimeout = 300 * time.Millisecond })
	f.bucket.setFail(errDown)
	if err := f.tier.Put(enginetest.Key(1), enginetest.Value(1, 100)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.tier.TierStats().Reachable {
		if time.Now().After(deadline) {
			t.Fatal("the failed upload did not open an outage within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	far := time.Now().Add(time.Hour)
	f.tier.writes.retryAt.Store(&far)
	if err := f.tier.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.tier.TierStats().Calls {
		if c.Op == "put" && c.Status == "skipped" && c.Count > 10 {
			t.Fatalf("the drain skipped %d uploads: it spun on the queue", c.Count)
		}
	}
}

// When an outage's retry time comes, one call probes the bucket; the
// misses arriving while it runs are skipped, rather than each waiting
// the call timeout on a bucket that hangs.
func TestOneProbePerRetry(t *testing.T) {
	f := open(t, nil)
	hang := make(chan struct{})
	f.bucket.mu.Lock()
	f.bucket.gate = hang
	f.bucket.mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			close(hang)
		}
	}
	defer release()
	markDown(f.tier.reads, time.Now().Add(-time.Millisecond))
	const misses = 8
	done := make(chan error, misses)
	for i := range misses {
		go func() {
			_, err := get(t, f.tier, enginetest.Key(600+i))
			done <- err
		}()
	}
	deadline := time.After(10 * time.Second)
	for range misses - 1 {
		select {
		case err := <-done:
			if wire.StatusOf(err) != wire.StatusNotFound {
				t.Errorf("a miss during an outage: %v, want NOT_FOUND", err)
			}
		case <-deadline:
			release()
			t.Fatalf("misses still waiting after 10 s; the bucket was asked %d times", f.bucket.gets.Load())
		}
	}
	if n := f.bucket.gets.Load(); n != 1 {
		t.Fatalf("%d misses reached the bucket in one retry window, want 1 probe", n)
	}
	release()
	<-done
}
