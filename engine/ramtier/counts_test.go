package ramtier

import (
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// removeGated holds every backing Remove until gate is closed, and says
// when one has entered.
type removeGated struct {
	*memBacking
	gate    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (r *removeGated) Remove(key wire.BlockKey) error {
	r.once.Do(func() { close(r.entered) })
	<-r.gate
	return r.memBacking.Remove(key)
}

var _ engine.StoreEngine = (*removeGated)(nil)

// TestRemoveDuringPutCopyFindsTheAcknowledgedValue: a write-back PUT of a
// key the disk does not hold is copying its value into RAM when a REMOVE
// of the key starts. publish sees the Remove in progress and drops the
// value ("the PUT happened, then the Remove"), and the PUT is
// acknowledged. The Remove must then report that it removed something:
// answering NOT_FOUND, with the PUT acknowledged and the key missing
// afterwards, fits no order of the two operations (the slab engine counts
// a fenced flight as found for exactly this reason).
func TestRemoveDuringPutCopyFindsTheAcknowledgedValue(t *testing.T) {
	m := newMem()
	rg := &removeGated{memBacking: m, gate: make(chan struct{}), entered: make(chan struct{})}
	o := smallOpts(m)
	o.Backing = rg
	tr := openTier(t, o)
	defer tr.Close()
	k, v := key(70), val(70, 30000)

	removed := make(chan error, 1)
	tr.beforePublish = func() {
		go func() { removed <- tr.Remove(k) }()
		<-rg.entered // the Remove has hidden the key and is at the backing
	}
	putErr := tr.Put(k, v)
	tr.beforePublish = nil
	close(rg.gate)
	remErr := <-removed
	if putErr != nil {
		t.Fatalf("Put: %v", putErr)
	}
	_, getErr := get(t, tr, k)
	enginetest.WantStatus(t, getErr, wire.StatusNotFound, "Get after the PUT and the REMOVE")
	// The PUT was acknowledged and its value is gone: the Remove removed it.
	if remErr != nil {
		t.Fatalf("Remove racing an acknowledged PUT that it cancelled: %v; want OK (the PUT was acknowledged, the key is gone afterwards)", remErr)
	}
}

// TestDiskAckFailedPutIsNotCountedAsAcknowledged: Stats' Puts are the
// PUTs the tier acknowledged. Under disk acknowledgement a PUT whose
// flush fails for good returns IO_ERROR and is not among them, as on the
// synchronous path (writeThrough).
func TestDiskAckFailedPutIsNotCountedAsAcknowledged(t *testing.T) {
	defer func(a int, b time.Duration) { flushAttempts, flushBackoff = a, b }(flushAttempts, flushBackoff)
	flushAttempts, flushBackoff = 2, time.Millisecond
	m := newMem()
	m.failCache.Store(true)
	o := smallOpts(m)
	o.AckMode = AckDisk
	tr := openTier(t, o)
	defer tr.Close()
	k := key(71)
	enginetest.WantStatus(t, tr.Put(k, val(71, 100)), wire.StatusIOError, "disk-ack Put with a failing backing")
	if p := tr.Stats().Puts; p != 0 {
		t.Fatalf("Stats().Puts = %d after one PUT that failed with IO_ERROR; want 0 (Puts counts acknowledged PUTs)", p)
	}
}

// TestCoalescedFollowersCountAsHits: every read is a hit or a miss.
// Concurrent whole-value misses of a value no arena slot holds share the
// leader's one backing read: the backing counts one hit, and each
// follower, served the leader's copy, counts one too.
func TestCoalescedFollowersCountAsHits(t *testing.T) {
	m := newMem()
	k, v := key(72), val(72, 200<<10) // larger than the 64 KiB extents, no large reserve
	m.vals[k] = v
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	const readers = 6
	concurrentGets(t, tr, k, v, readers, "all readers on one fill", func() bool {
		sh := tr.shardOf(&k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		f := sh.fills[k]
		return f != nil && f.waiters == readers-1 && m.ranges.Load() == 1
	}, m.gateRange())
	st := tr.Stats()
	// memBacking counts no hits itself; the tier's own share is what it adds.
	backingHits := uint64(1) // the one read the backing served
	if got := st.Hits + backingHits; got != readers || st.Misses != 0 {
		t.Fatalf("%d GETs all served: Stats().Hits+backing hits = %d, Misses = %d; want %d hits, 0 misses", readers, got, st.Misses, readers)
	}
}

// TestNoDiskStatsCountWhatRAMHolds: with NoDisk the backing is
// engine.Discard, so every value the tier serves is held by RAM alone,
// and Stats counts what RAM holds, also after the values' flushes to
// Discard "commit".
func TestNoDiskStatsCountWhatRAMHolds(t *testing.T) {
	tr := openTier(t, Options{Backing: &engine.Discard{}, NoDisk: true, MaxValueBytes: 1 << 20,
		Bytes: 1 << 20, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve, FlushThreads: 2})
	defer tr.Close()
	var want uint64
	for i := range 3 {
		v := val(uint64(80+i), 10000)
		if err := tr.Put(key(80+i), v); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
		want += uint64(len(v))
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustGet(t, tr, key(80+i), val(uint64(80+i), 10000))
	}
	if st := tr.Stats(); st.Objects != 3 || st.UsedBytes != want {
		t.Fatalf("no-disk tier serving 3 values (%d bytes, all in RAM only): Stats() Objects=%d UsedBytes=%d; RAM() Objects=%d",
			want, st.Objects, st.UsedBytes, tr.RAM().Objects)
	}
}
