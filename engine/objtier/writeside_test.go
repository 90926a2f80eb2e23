package objtier

// The write side under stress: Close's drain deadline, synchronous PUTs
// racing delete retries, their byte counts, outages of one kind of call,
// and what the queue gauge counts.

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

// ctxGateBucket holds every Put until gate is closed or the call's
// context ends, saying on entered that one arrived; it counts the Puts
// begun.
type ctxGateBucket struct {
	*memBucket
	gate    chan struct{}
	entered chan struct{}
	begun   atomic.Int64
}

func (b *ctxGateBucket) Put(ctx context.Context, name string, body []byte) error {
	b.begun.Add(1)
	select {
	case b.entered <- struct{}{}:
	default:
	}
	select {
	case <-b.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.memBucket.Put(ctx, name, body)
}

// waitStopped waits until Close has begun (the tier's stop channel is
// closed).
func waitStopped(t *testing.T, tr *Tier) {
	t.Helper()
	select {
	case <-tr.stop:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not begin within 30 s")
	}
}

// Close gives queued uploads Options.DrainTimeout to finish: the upload
// workers take nothing more once Close began, so a bucket that answers
// slowly does not get the whole queue, however long that takes. With a
// drain time of 1 ns no upload begins once Close has begun.
func TestCloseDoesNotUploadPastItsDrainDeadline(t *testing.T) {
	f := open(t, func(o *Options) {
		o.Workers = 1
		o.Timeout = time.Hour // the call timeout is not what bounds Close
		o.DrainTimeout = time.Nanosecond
	})
	gb := &ctxGateBucket{memBucket: f.bucket, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	f.tier.bucket = gb
	var once sync.Once
	openGate := func() { once.Do(func() { close(gb.gate) }) }
	t.Cleanup(openGate)
	const queued = 20
	for i := range queued {
		if err := f.tier.Put(enginetest.Key(3000+i), enginetest.Value(uint64(i), 2000)); err != nil {
			t.Fatal(err)
		}
	}
	<-gb.entered // the only worker has one upload in flight; the rest wait
	closed := make(chan error, 1)
	go func() { closed <- f.tier.Close() }()
	waitStopped(t, f.tier)
	openGate() // the bucket answers from now on
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := gb.begun.Load(); n > 2 {
		t.Fatalf("%d uploads made after Close began with a 1 ns drain time (want at most the one in flight): "+
			"the workers went on with the queue past Close", n)
	}
}

// The upload in flight when Close begins is bounded by DrainTimeout too,
// counted from Close's start: a bucket that hangs does not hold Close for
// the whole call timeout (s3_timeout_ms), and the key of the upload cut
// short is marked, so the bucket's older object is never read for it.
func TestCloseDoesNotWaitPastItsDrainDeadlineForAnUploadInFlight(t *testing.T) {
	f := open(t, func(o *Options) {
		o.Workers = 1
		o.Timeout = time.Hour
		o.DrainTimeout = 50 * time.Millisecond
	})
	gb := &ctxGateBucket{memBucket: f.bucket, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	f.tier.bucket = gb
	var once sync.Once
	openGate := func() { once.Do(func() { close(gb.gate) }) }
	t.Cleanup(openGate)
	if err := f.tier.Put(enginetest.Key(1), enginetest.Value(1, 2000)); err != nil {
		t.Fatal(err)
	}
	<-gb.entered
	closed := make(chan error, 1)
	go func() { closed <- f.tier.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second): // 600x the drain time
		openGate()
		<-closed
		t.Fatal("Close still waiting for a hung upload 30 s after it began, with DrainTimeout 50ms: " +
			"only the 1 h call timeout would have ended it")
	}
	// The upload was not made: its key is marked so that the bucket's
	// (older, or no) object is never read for it.
	if !f.tier.isMarked(enginetest.Key(1)) {
		t.Fatal("the upload cut short at Close left its key unmarked")
	}
}

// Sync PUTs count the bytes they write, as async uploads do
// (dfkv_s3_bytes_total{direction="written"}).
func TestSyncPutCountsBytesWritten(t *testing.T) {
	f := open(t, func(o *Options) { o.Write = WriteSync })
	v := enginetest.Value(1, 3000)
	if err := f.tier.Put(enginetest.Key(1), v); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	f.tier.PutBatch([]wire.BlockKey{enginetest.Key(2), enginetest.Key(3)}, [][]byte{v, v}, errs)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	want := uint64(3 * (HeaderLen + len(v)))
	if got := f.tier.TierStats().BytesWritten; got != want {
		t.Fatalf("BytesWritten %d after 3 sync PUTs of %d-byte objects, want %d", got, HeaderLen+len(v), want)
	}
}

// A sync PUT ends the stale mark its upload supersedes before it ends its
// claim on the key's queue slot: a background delete retry that claims
// the key as soon as it is idle must not find the mark and delete the
// object the PUT has just stored and acknowledged.
//
// The delete retry's step (claim if idle, still marked, delete, unclaim,
// clear) is played here by the test at the moment the claim ends, with
// the key's stripe held from just before, so the interleaving is forced
// rather than waited for on the 500 ms ticker.
func TestSyncPutObjectIsNotDeletedByADeleteRetry(t *testing.T) {
	k := enginetest.Key(77)
	var tr *Tier
	var armed atomic.Bool
	retried := make(chan bool, 1)
	f := open(t, func(o *Options) {
		o.Write = WriteSync
		o.Observe = func(op Op, st CallStatus, d time.Duration) {
			if op != OpPut || st != CallOK || !armed.CompareAndSwap(true, false) {
				return
			}
			// Runs in putSync, after the upload, before its unclaim.
			tr.queue.mu.Lock()
			done := tr.queue.items[k].done
			tr.queue.mu.Unlock()
			s := tr.stripe(k)
			locked := make(chan struct{})
			go func() {
				s.mu.Lock()
				close(locked)
				deleted := false
				select {
				case <-done:
					// The claim ended with the stripe held: exactly what
					// deleteRetries does next.
					if tr.queue.claim(k, true) {
						tb, marked := s.tombs[k]
						if marked {
							_ = tr.deleteObject(k)
							deleted = true
						}
						tr.queue.unclaim(k)
						s.mu.Unlock()
						if marked {
							tr.clear(k, tb.gen)
						}
					} else {
						s.mu.Unlock()
					}
				case <-time.After(2 * time.Second):
					// putSync needs the stripe before it ends its claim
					// (the fixed order): let it, then look again.
					s.mu.Unlock()
					<-done
					if tr.queue.claim(k, true) {
						if tr.isMarked(k) {
							_ = tr.deleteObject(k)
							deleted = true
						}
						tr.queue.unclaim(k)
					}
				}
				retried <- deleted
			}()
			<-locked
		}
	})
	tr = f.tier
	// An earlier upload of k failed (a sync PUT the bucket refused, or a
	// dropped async one): the key is marked stale, its delete pending.
	tr.markStale(k)
	v := enginetest.Value(2, 1000)
	armed.Store(true)
	if err := tr.Put(k, v); err != nil {
		t.Fatal(err)
	}
	deleted := <-retried
	obj, ok := f.bucket.object(ObjectName("p", k))
	if deleted || !ok {
		t.Fatalf("the object of an acknowledged sync PUT was deleted by a delete retry that found the key "+
			"still marked after the PUT's claim ended (deleted %v, object in bucket %v)", deleted, ok)
	}
	if got, err := checkObject(obj, k); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("bucket holds another value: %v", err)
	}
}

// putsDownBucket refuses every PUT (a full or write-protected bucket, a
// PUT rate limit) while GETs, HEADs and DELETEs are answered.
type putsDownBucket struct{ *memBucket }

func (b *putsDownBucket) Put(ctx context.Context, name string, body []byte) error {
	b.puts.Add(1)
	return errDown
}

// A bucket that refuses every PUT while it answers reads is one lasting
// fault: answered reads do not end it, so it is logged once and counted
// once, not once per back-off window.
func TestPersistentPutFailureIsNotLoggedAsAnOutagePerRetry(t *testing.T) {
	clk := &offsetClock{}
	pb := &putsDownBucket{newMemBucket()}
	logs := &logBuf{}
	tr, err := Open(Options{Backing: newMemEngine(), Bucket: pb, Prefix: "p", Timeout: time.Second,
		Write: WriteSync, MaxValueBytes: 4 << 20, Logger: slog.New(slog.NewTextHandler(logs, nil)), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	const rounds = 10
	for i := range rounds {
		clk.advance(time.Hour) // the retry time has come
		if err := tr.Put(enginetest.Key(5000+i), enginetest.Value(1, 100)); err == nil {
			t.Fatal("a PUT the bucket refused succeeded")
		}
		clk.advance(time.Hour)
		if _, err := get(t, tr, enginetest.Key(9000+i)); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("miss: %v", err)
		}
	}
	down, up := logs.count("object store unreachable"), logs.count("object store reachable again")
	if down > 1 || tr.TierStats().Outages > 1 {
		t.Fatalf("one lasting PUT failure logged as %d outages (and %d recoveries), outages_total %d",
			down, up, tr.TierStats().Outages)
	}
}

// A call that began before an outage and is answered after it began says
// nothing of the bucket since: it does not end the outage (as a failure
// of a call begun before an outage ended does not start one).
func TestSuccessOfACallBegunBeforeTheOutageDoesNotEndIt(t *testing.T) {
	f := open(t, func(o *Options) { o.Write = WriteSync })
	gate := make(chan struct{})
	f.bucket.mu.Lock()
	f.bucket.gate = gate // GETs wait here
	f.bucket.mu.Unlock()
	var released sync.Once
	release := func() { released.Do(func() { close(gate) }) }
	t.Cleanup(release)
	got := make(chan error, 1)
	go func() { // a miss whose GET is on its way when the bucket fails
		_, err := get(t, f.tier, enginetest.Key(1))
		got <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for f.bucket.gets.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the GET never reached the bucket")
		}
		time.Sleep(time.Millisecond)
	}
	// The bucket fails from now on for writes: the PUT opens an outage.
	pb := &putsDownBucket{f.bucket}
	f.tier.bucket = pb
	if err := f.tier.Put(enginetest.Key(2), enginetest.Value(2, 100)); err == nil {
		t.Fatal("PUT succeeded")
	}
	if f.tier.TierStats().Reachable {
		t.Fatal("no outage after a failed PUT")
	}
	release() // the GET begun before the outage is answered now
	if err := <-got; wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("GET: %v", err)
	}
	st := f.tier.TierStats()
	if st.Reachable || f.logs.count("object store reachable again") != 0 {
		t.Fatalf("an answer to a call begun before the outage ended it (reachable %v, logged recovered %d times)",
			st.Reachable, f.logs.count("object store reachable again"))
	}
}

// upload_queue_items counts values waiting for (or in) an async upload,
// not the claims the queue also holds for sync uploads, REMOVEs' deletes
// and delete retries: a node with s3_write = sync shows none while a
// sync upload is in flight.
func TestQueueItemsCountsOnlyUploads(t *testing.T) {
	f := open(t, func(o *Options) { o.Write = WriteSync; o.Timeout = time.Hour })
	gb := &ctxGateBucket{memBucket: f.bucket, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	f.tier.bucket = gb
	var once sync.Once
	openGate := func() { once.Do(func() { close(gb.gate) }) }
	t.Cleanup(openGate)
	done := make(chan error, 1)
	go func() { done <- f.tier.Put(enginetest.Key(1), enginetest.Value(1, 1000)) }()
	<-gb.entered
	items := f.tier.TierStats().QueueItems
	openGate()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if items != 0 {
		t.Fatalf("upload_queue_items %d on a sync node with nothing queued", items)
	}
}
