package objtier

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// offsetClock is the real clock moved forward by a settable offset, so a
// test can let an outage's retry time pass without waiting for it.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// hangBucket is a memBucket whose GETs of some names hang until their
// call's deadline: a request stuck on a connection to a backend that went
// away, while new requests reach one that answers.
type hangBucket struct {
	*memBucket
	mu   sync.Mutex
	hang map[string]bool
}

func (b *hangBucket) Get(ctx context.Context, name string, limit int64, alloc func(int) []byte) ([]byte, error) {
	b.mu.Lock()
	h := b.hang[name]
	b.mu.Unlock()
	if h {
		b.gets.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.memBucket.Get(ctx, name, limit, alloc)
}

// One outage (two GETs stuck on a dead connection) followed by a
// recovery the probe saw: the second stuck GET, which began before the
// outage was even noticed, times out after the recovery. That is old
// news, not a new outage: the tier stays reachable, logs the outage and
// its end once each, and keeps serving valid objects (rather than one
// "unreachable"/"reachable again" pair per call that was in flight).
func TestStaleTimeoutAfterRecoveryIsNotANewOutage(t *testing.T) {
	clk := &offsetClock{}
	hb := &hangBucket{memBucket: newMemBucket(), hang: map[string]bool{}}
	f := &fixture{bucket: hb.memBucket, backing: newMemEngine(), logs: &logBuf{}}
	const timeout = 2 * time.Second
	f.tier = func() *Tier {
		o := Options{Backing: f.backing, Bucket: hb, Prefix: "p", Timeout: timeout, Workers: 2,
			MaxValueBytes: 4 << 20, Logger: slog.New(slog.NewTextHandler(f.logs, nil)), Clock: clk}
		tr, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}()
	kA, kB, kC, kD := enginetest.Key(7001), enginetest.Key(7002), enginetest.Key(7003), enginetest.Key(7004)
	hb.hang[ObjectName("p", kA)] = true
	hb.hang[ObjectName("p", kB)] = true
	// kD's object is valid and in the bucket; kC is nowhere.
	vD := enginetest.Value(7004, 5000)
	buf := f.tier.object(kD, vD)
	hb.setObject(ObjectName("p", kD), bytes.Clone(buf.B))
	f.tier.pool.Put(buf)

	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { _, err := get(t, f.tier, kA); doneA <- err }()
	time.Sleep(timeout / 2)
	go func() { _, err := get(t, f.tier, kB); doneB <- err }()
	for hb.gets.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if st := f.tier.TierStats(); !st.Reachable || st.Outages != 0 {
		t.Fatalf("setup: both stuck GETs must begin while the bucket is up: %+v", st)
	}
	<-doneA // A timed out: the outage begins
	if st := f.tier.TierStats(); st.Reachable || st.Outages != 1 {
		t.Fatalf("after the first timeout: reachable %v outages %d", st.Reachable, st.Outages)
	}
	// The retry time comes; the probe (a miss of kC) finds the bucket answering.
	clk.advance(time.Minute)
	if _, err := get(t, f.tier, kC); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("probe: %v", err)
	}
	if !f.tier.TierStats().Reachable {
		t.Fatal("the probe's answer did not end the outage")
	}
	<-doneB // B, begun before the outage, times out only now
	got, err := get(t, f.tier, kD)
	st := f.tier.TierStats()
	down, up := f.logs.count("object store unreachable"), f.logs.count("object store reachable again")
	if err != nil || !bytes.Equal(got, vD) || !st.Reachable || st.Outages != 1 || down != 1 || up != 1 {
		t.Fatalf("after a stale timeout of a call begun before the outage: GET of a valid object: err %v; "+
			"reachable %v, outages %d, logged unreachable %d times and reachable again %d times "+
			"(want served, reachable, 1 outage, logged once each)", err, st.Reachable, st.Outages, down, up)
	}
}

// jumpClock moves an hour forward at every reading: every outage's retry
// time has always come, so the bucket is asked each time.
type jumpClock struct{ n atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.n.Add(1)) * time.Hour) }

// putFailBucket refuses PUTs (503 SlowDown under a PUT rate limit) while
// answering GETs.
type putFailBucket struct{ *memBucket }

func (b *putFailBucket) Put(ctx context.Context, name string, body []byte) error {
	b.puts.Add(1)
	return errDown
}

// A PUT's value V2 left the disk (evicted) while its upload waited; the
// upload then failed every try and was dropped. The bucket still holds
// the key's older object O1, so the drop marks the key: O1 must never be
// served after the PUT of V2 returned, also to a miss that lands as the
// dropped upload leaves the queue (the key is marked before it does).
// The jumping clock stands in for the bucket being "up" at that moment
// (PUTs throttled while GETs in flight keep ending the outage); without
// it the miss's GET would be skipped by the back-off window.
func TestDroppedUploadNeverServesTheOlderObject(t *testing.T) {
	pb := &putFailBucket{newMemBucket()}
	f := &fixture{bucket: pb.memBucket, backing: newMemEngine(), logs: &logBuf{}}
	tr, err := Open(Options{Backing: f.backing, Bucket: pb, Prefix: "p", Timeout: time.Second, Workers: 2,
		MaxValueBytes: 4 << 20, Logger: slog.New(slog.NewTextHandler(f.logs, nil)), Clock: &jumpClock{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	f.tier = tr
	deadline := time.Now().Add(60 * time.Second)
	for i := range 5000 {
		if time.Now().After(deadline) {
			break
		}
		k := enginetest.Key(20000 + i)
		o1, v2 := enginetest.Value(1, 64), enginetest.Value(2, 64)
		buf := tr.object(k, o1)
		pb.setObject(ObjectName("p", k), bytes.Clone(buf.B))
		tr.pool.Put(buf)
		if err := tr.Put(k, v2); err != nil {
			t.Fatal(err)
		}
		f.backing.evict(k)
		var stale atomic.Bool
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					got, err := get(t, tr, k)
					if err != nil {
						return // the mark: a miss from now on
					}
					if bytes.Equal(got, o1) {
						stale.Store(true)
						return
					}
					if !bytes.Equal(got, v2) {
						t.Errorf("key %d: wrong bytes", i)
						return
					}
				}
			}()
		}
		wg.Wait()
		if stale.Load() {
			t.Fatalf("after %d keys: a GET served the older object O1 of a key whose PUT of V2 had returned (its upload was dropped): %+v", i+1, tr.TierStats())
		}
	}
}
