package objtier

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// frozenClock stands still unless advanced: back-off windows never pass
// on their own.
type frozenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *frozenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// While writes are down and reads are answered (a full bucket, read-only
// credentials, a PUT rate limit: the case split health exists for), an
// answered read does not let a PUT through at once: writes keep their
// back-off. Here the clock stands still, so after the first refused PUT
// no retry time ever comes, and every later PUT is skipped.
func TestAnsweredReadsDoNotDefeatTheWriteBackOff(t *testing.T) {
	clk := &frozenClock{t: time.Unix(1_000_000, 0)}
	pb := &putsDownBucket{newMemBucket()}
	tr, err := Open(Options{Backing: newMemEngine(), Bucket: pb, Prefix: "p", Timeout: time.Second,
		Write: WriteSync, MaxValueBytes: 4 << 20, Logger: slog.New(slog.DiscardHandler), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	if err := tr.Put(enginetest.Key(1), enginetest.Value(1, 100)); err == nil {
		t.Fatal("a PUT the bucket refused succeeded")
	}
	const rounds = 10
	for i := range rounds {
		if _, err := get(t, tr, enginetest.Key(9000+i)); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("miss: %v", err)
		}
		_ = tr.Put(enginetest.Key(100+i), enginetest.Value(1, 100))
	}
	if n := pb.puts.Load(); n != 1 {
		t.Fatalf("%d PUTs reached a bucket refusing PUTs, with the clock standing still after the first (want 1): "+
			"every answered read let the next PUT through, so writes never back off while reads work", n)
	}
}

// While writes are down, one call at the retry time is the probe and the
// others are skipped until it ends (a bucket that hangs PUTs would
// otherwise hold one call per attempt for the whole call timeout).
// probeNow, called when reads come back, does not admit a second probe
// while the first is still in flight.
func TestProbeNowDoesNotAdmitASecondProbeWhileOneIsInFlight(t *testing.T) {
	o := newOutage(slog.New(slog.DiscardHandler), "b")
	h := newHealth("writes", o, time.Hour)
	now := time.Now()
	markDown(h, now) // retry time: now
	if ok, probe := h.allow(now); !ok || !probe {
		t.Fatal("no probe allowed at the retry time")
	}
	if ok, _ := h.allow(now); ok {
		t.Fatal("precondition: a second call allowed while the probe is in flight")
	}
	h.probeNow(now) // reads came back meanwhile
	if ok, _ := h.allow(now); ok {
		t.Fatal("a second write probe was let through while the first (up to the 1 h call timeout) is still in flight")
	}
}

// hangDeleteBucket holds every Delete until its context ends or release
// is closed, saying on entered that one arrived.
type hangDeleteBucket struct {
	*memBucket
	entered chan struct{}
	release chan struct{}
}

func (b *hangDeleteBucket) Delete(ctx context.Context, name string) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.release:
	}
	return b.memBucket.Delete(ctx, name)
}

// Close is bounded by DrainTimeout, not by the call timeout: a background
// delete retry in flight when Close begins (a bucket that hangs DELETEs)
// does not hold Close for the whole call timeout, as an upload in flight
// does not.
func TestCloseDoesNotWaitPastItsDrainDeadlineForADeleteRetryInFlight(t *testing.T) {
	f := open(t, func(o *Options) {
		o.Timeout = time.Hour // the call timeout is not what bounds Close
		o.DrainTimeout = 50 * time.Millisecond
	})
	hb := &hangDeleteBucket{memBucket: f.bucket, entered: make(chan struct{}, 1), release: make(chan struct{})}
	f.tier.bucket = hb
	var once sync.Once
	release := func() { once.Do(func() { close(hb.release) }) }
	t.Cleanup(release)
	f.tier.markStale(enginetest.Key(1)) // a dropped upload: its delete is retried in the background
	select {
	case <-hb.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the delete retry never reached the bucket")
	}
	closed := make(chan error, 1)
	go func() { closed <- f.tier.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second): // 600x the drain time
		release()
		<-closed
		t.Fatal("Close still waiting for a hung delete retry 30 s after it began, with DrainTimeout 50ms: " +
			"only the 1 h call timeout would have ended it")
	}
}
