package objtier

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

// The tier with writes off over an empty bucket must behave exactly as
// its backing: every read-through is a miss.
func TestConformanceReadOnlyEmptyBucket(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
		b := newMemBucket()
		inner, err := slab.Open(slab.Options{Dir: dir, CapacityBytes: capacity,
			ExtentBytes: max(slab.MinClass, min((capacity/16)&^(slab.MinClass-1), 8<<20)), DirectIO: true})
		if err != nil {
			t.Fatal(err)
		}
		tier, err := Open(Options{Backing: inner, Bucket: b, Write: WriteOff, Exist: ExistRemote, MaxValueBytes: capacity})
		if err != nil {
			t.Fatal(err)
		}
		return tier
	})
}

func TestObjectFormatRoundTripAndRejects(t *testing.T) {
	k, other := enginetest.Key(1), enginetest.Key(2)
	value := enginetest.Value(7, 5000)
	obj := make([]byte, HeaderLen+len(value))
	copy(obj[HeaderLen:], value)
	putHeader(obj, k, obj[HeaderLen:])
	got, err := checkObject(obj, k)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("checkObject of a good object: %v", err)
	}
	if _, err := checkObject(obj, other); !errors.Is(err, errIdentity) {
		t.Fatalf("object under another key: %v, want %v", err, errIdentity)
	}
	cases := map[string]func([]byte) []byte{
		"payload byte flipped": func(o []byte) []byte { o[HeaderLen+100] ^= 1; return o },
		"length field":         func(o []byte) []byte { o[40]++; return o },
		"truncated":            func(o []byte) []byte { return o[:len(o)-1] },
		"short":                func(o []byte) []byte { return o[:10] },
		"another layout":       func(o []byte) []byte { o[48] ^= 0xff; return o },
		"flags":                func(o []byte) []byte { o[12] = 1; return o },
		"not ours at all":      func(o []byte) []byte { return []byte("<html>hello</html>" + string(make([]byte, 80))) },
	}
	for name, mutate := range cases {
		if _, err := checkObject(mutate(bytes.Clone(obj)), k); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if n := ObjectName("pre/fix", wire.BlockKey{Tenant: 0xab, ID: [16]byte{1}}); n != "pre/fix/v1/00000000000000ab/01000000000000000000000000000000" {
		t.Errorf("ObjectName = %q", n)
	}
}

func TestAsyncUploadThenReadThroughPromotes(t *testing.T) {
	f := open(t, nil)
	k := enginetest.Key(1)
	v := enginetest.Value(1, 300000)
	if err := f.tier.Put(k, v); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	obj, ok := f.bucket.object(ObjectName("p", k))
	if !ok {
		t.Fatal("no object after the async upload")
	}
	if got, err := checkObject(obj, k); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("uploaded object: %v", err)
	}
	f.backing.evict(k)
	misaligned := f.backing.misaligned.Load()
	got, err := get(t, f.tier, k)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("read-through: %v (got %d bytes)", err, len(got))
	}
	f.settle(t)
	if held, ok := f.backing.has(k); !ok || !bytes.Equal(held, v) {
		t.Fatal("read-through did not promote the value into the backing")
	}
	if f.backing.misaligned.Load() != misaligned {
		t.Fatal("the promotion wrote a value not 4 KiB-aligned in memory: the disk's O_DIRECT write copies it")
	}
	gets := f.bucket.gets.Load()
	if _, err := get(t, f.tier, k); err != nil || f.bucket.gets.Load() != gets {
		t.Fatalf("second GET went to the bucket again (%v)", err)
	}
	// A range of a value that only the bucket holds is served as a range.
	f.backing.evict(k)
	a := enginetest.NewAlloc(enginetest.SharedPool())
	defer a.Release()
	data, stored, err := f.tier.Get(k, 1000, 77, a)
	if err != nil || stored != uint64(len(v)) || !bytes.Equal(data, v[1000:1077]) {
		t.Fatalf("range read-through: %v stored %d", err, stored)
	}
	if _, _, err := f.tier.Get(k, uint64(len(v))+1, 0, a); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("offset past the end: %v, want INVALID", err)
	}
	st := f.tier.TierStats()
	if st.Uploaded != 1 || st.Promoted < 1 || st.ReadThroughHits < 2 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestCorruptOrForeignObjectsAreMisses(t *testing.T) {
	f := open(t, nil)
	k1, k2 := enginetest.Key(1), enginetest.Key(2)
	for i, k := range []wire.BlockKey{k1, k2} {
		if err := f.tier.Put(k, enginetest.Value(uint64(i), 9000)); err != nil {
			t.Fatal(err)
		}
	}
	f.settle(t)
	n1, n2 := ObjectName("p", k1), ObjectName("p", k2)
	o1, _ := f.bucket.object(n1)
	bad := bytes.Clone(o1)
	bad[HeaderLen+5] ^= 0x40
	f.bucket.setObject(n1, bad) // a flipped byte
	f.bucket.setObject(n2, o1)  // another key's object
	f.backing.evict(k1)
	f.backing.evict(k2)
	for _, k := range []wire.BlockKey{k1, k2} {
		if _, err := get(t, f.tier, k); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("corrupt object served: %v", err)
		}
	}
	if st := f.tier.TierStats(); st.Ignored != 2 {
		t.Fatalf("ignored = %d, want 2", st.Ignored)
	}
	f.settle(t)
	if _, ok := f.backing.has(k1); ok {
		t.Fatal("a corrupt object was promoted")
	}
}

func TestConcurrentMissesShareOneGet(t *testing.T) {
	f := open(t, nil)
	k := enginetest.Key(3)
	v := enginetest.Value(3, 70000)
	if err := f.tier.Put(k, v); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	f.backing.evict(k)
	gate := make(chan struct{})
	f.bucket.mu.Lock()
	f.bucket.gate = gate
	f.bucket.mu.Unlock()
	const readers = 8
	var wg sync.WaitGroup
	errs := make([]error, readers)
	for i := range readers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			got, err := get(t, f.tier, k)
			if err == nil && !bytes.Equal(got, v) {
				err = errors.New("wrong bytes")
			}
			errs[i] = err
		}(i)
	}
	// Wait until the one read is in the bucket and every reader has had
	// time to join it, then let it finish.
	for f.bucket.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
	// A reader that came after the first finished reads the backing, so
	// at most one bucket read either way.
	if n := f.bucket.gets.Load(); n != 1 {
		t.Fatalf("%d bucket reads for %d identical misses, want 1", n, readers)
	}
}

// A PUT of the key while its read-through is in the bucket wins: the
// older object is served to the read that began first, never promoted.
func TestWriteDuringReadThroughIsNotOverwritten(t *testing.T) {
	for _, write := range []string{"put", "remove"} {
		t.Run(write, func(t *testing.T) {
			f := open(t, nil)
			k := enginetest.Key(4)
			old, newer := enginetest.Value(4, 5000), enginetest.Value(44, 6000)
			if err := f.tier.Put(k, old); err != nil {
				t.Fatal(err)
			}
			f.settle(t)
			f.backing.evict(k)
			gate := make(chan struct{})
			f.bucket.mu.Lock()
			f.bucket.gate = gate
			f.bucket.mu.Unlock()
			done := make(chan error)
			go func() { _, err := get(t, f.tier, k); done <- err }()
			for f.bucket.gets.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			if write == "put" {
				if err := f.tier.Put(k, newer); err != nil {
					t.Fatal(err)
				}
			} else {
				// REMOVE deletes the object, so let the read go first
				// (in the bucket it already holds the old object).
				f.bucket.mu.Lock()
				f.bucket.gate = nil
				f.bucket.mu.Unlock()
				go func() { time.Sleep(20 * time.Millisecond); close(gate) }()
				if err := f.tier.Remove(k); err != nil {
					t.Fatal(err)
				}
			}
			if write == "put" {
				close(gate)
			}
			<-done
			f.settle(t)
			held, ok := f.backing.has(k)
			switch {
			case write == "put" && (!ok || !bytes.Equal(held, newer)):
				t.Fatal("the older object overwrote a newer PUT")
			case write == "remove" && ok:
				t.Fatal("a removed value came back into the backing")
			}
			if write == "remove" {
				if _, err := get(t, f.tier, k); wire.StatusOf(err) != wire.StatusNotFound {
					t.Fatalf("GET after REMOVE: %v", err)
				}
			}
		})
	}
}

func TestRemoveDuringOutageNeverResurrects(t *testing.T) {
	f := open(t, nil)
	k := enginetest.Key(5)
	if err := f.tier.Put(k, enginetest.Value(5, 4096)); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	f.bucket.setFail(errDown)
	if err := f.tier.Remove(k); err != nil {
		t.Fatalf("REMOVE of a held key during an outage: %v", err)
	}
	f.bucket.setFail(nil)
	// The bucket is back but the delete has not been retried yet: the
	// object is still there, and must not be read.
	if _, ok := f.bucket.object(ObjectName("p", k)); !ok {
		t.Fatal("test premise: the object should still be in the bucket")
	}
	if _, err := get(t, f.tier, k); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("GET after REMOVE read the object back: %v", err)
	}
	if _, err := f.tier.Exist(k); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("EXIST after REMOVE found the object: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, ok := f.bucket.object(ObjectName("p", k)); !ok && f.tier.TierStats().PendingDeletes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delete was not retried: %+v", f.tier.TierStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOutageFailsFastAndIsLoggedOnce(t *testing.T) {
	f := open(t, nil)
	keys := make([]wire.BlockKey, 20)
	for i := range keys {
		keys[i] = enginetest.Key(100 + i)
	}
	f.bucket.setFail(errDown)
	for _, k := range keys {
		if err := f.tier.Put(k, enginetest.Value(1, 100)); err != nil {
			t.Fatalf("PUT during an outage: %v", err)
		}
		if _, err := get(t, f.tier, k); err != nil {
			t.Fatalf("GET of a held key during an outage: %v", err)
		}
	}
	for i := 0; i < 50; i++ {
		_, _ = get(t, f.tier, enginetest.Key(1000+i)) // misses
	}
	st := f.tier.TierStats()
	if st.Reachable || st.Outages != 1 {
		t.Fatalf("after failures: reachable %v outages %d", st.Reachable, st.Outages)
	}
	var skipped, made uint64
	for _, c := range st.Calls {
		switch c.Status {
		case "skipped":
			skipped += c.Count
		case "error":
			made += c.Count
		}
	}
	if skipped < 40 || made > 10 {
		t.Fatalf("calls during the outage: %d made, %d skipped; want most skipped", made, skipped)
	}
	f.bucket.setFail(nil)
	f.settle(t)
	for _, k := range keys {
		if _, ok := f.bucket.object(ObjectName("p", k)); !ok {
			t.Fatalf("upload queued during the outage never made: %+v", f.tier.TierStats())
		}
	}
	if !f.tier.TierStats().Reachable {
		t.Fatal("not reachable after the outage ended")
	}
	if a, b := f.logs.count("object store unreachable"), f.logs.count("object store reachable again"); a != 1 || b != 1 {
		t.Fatalf("outage logged %d times, recovery %d times; want once each", a, b)
	}
}

func TestFullQueueDropsAndNeverServesTheOlderObject(t *testing.T) {
	f := open(t, func(o *Options) { o.QueueBytes = 64 << 10 })
	k := enginetest.Key(6)
	old, newer := enginetest.Value(6, 10000), enginetest.Value(66, 10000)
	if err := f.tier.Put(k, old); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	f.bucket.setFail(errDown) // uploads wait in the queue
	_ = f.tier.Put(enginetest.Key(7), enginetest.Value(7, 60000))
	if err := f.tier.Put(k, newer); err != nil {
		t.Fatalf("PUT with a full queue: %v", err)
	}
	if st := f.tier.TierStats(); st.UploadDrops == 0 {
		t.Fatalf("no drop counted: %+v", st)
	}
	f.backing.evict(k)
	f.bucket.setFail(nil)
	got, err := get(t, f.tier, k)
	if err == nil && bytes.Equal(got, old) {
		t.Fatal("served the object a newer PUT replaced (its upload was dropped)")
	}
}

func TestSyncWrites(t *testing.T) {
	f := open(t, func(o *Options) { o.Write = WriteSync })
	k := enginetest.Key(8)
	v := enginetest.Value(8, 3000)
	if err := f.tier.Put(k, v); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.bucket.object(ObjectName("p", k)); !ok {
		t.Fatal("sync PUT returned before the object was stored")
	}
	keys := []wire.BlockKey{enginetest.Key(9), enginetest.Key(10)}
	errs := make([]error, 2)
	f.tier.PutBatch(keys, [][]byte{v, v}, errs)
	for i, k := range keys {
		if _, ok := f.bucket.object(ObjectName("p", k)); errs[i] != nil || !ok {
			t.Fatalf("sync batch item %d: %v", i, errs[i])
		}
	}
	f.bucket.setFail(errDown)
	k2 := enginetest.Key(11)
	if err := f.tier.Put(k2, v); wire.StatusOf(err) != wire.StatusIOError {
		t.Fatalf("sync PUT with the bucket down: %v, want IO_ERROR", err)
	}
	if _, ok := f.backing.has(k2); ok {
		t.Fatal("a failed sync PUT left its value in the backing")
	}
}

func TestExistModes(t *testing.T) {
	for _, mode := range []ExistMode{ExistRemote, ExistLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			f := open(t, func(o *Options) { o.Exist = mode })
			k := enginetest.Key(12)
			if err := f.tier.Put(k, enginetest.Value(12, 1234)); err != nil {
				t.Fatal(err)
			}
			f.settle(t)
			f.backing.evict(k)
			n, err := f.tier.Exist(k)
			if mode == ExistRemote && (err != nil || n != 1234) {
				t.Fatalf("remote EXIST of a bucket-only key: %d %v", n, err)
			}
			if mode == ExistLocal && wire.StatusOf(err) != wire.StatusNotFound {
				t.Fatalf("local EXIST asked the bucket: %d %v", n, err)
			}
			if _, err := f.tier.Exist(enginetest.Key(13)); wire.StatusOf(err) != wire.StatusNotFound {
				t.Fatalf("EXIST of a missing key: %v", err)
			}
		})
	}
}

func TestCloseDrainsTheQueue(t *testing.T) {
	f := open(t, nil)
	f.bucket.setFail(errDown)
	k := enginetest.Key(14)
	_ = f.tier.Put(k, enginetest.Value(14, 100))
	f.bucket.setFail(nil)
	markUp(f.tier.writes) // the bucket is back: no back-off wait
	if err := f.tier.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.bucket.object(ObjectName("p", k)); !ok {
		t.Fatal("Close did not drain the queued upload")
	}
}

// A bucket that does not answer costs a read one timeout, then nothing
// while the back-off runs: the misses after it are skipped, not waited on.
func TestSlowBucketTimesOutThenIsSkipped(t *testing.T) {
	f := open(t, func(o *Options) { o.Timeout = 50 * time.Millisecond })
	hang := make(chan struct{})
	defer close(hang)
	f.bucket.mu.Lock()
	f.bucket.gate = hang // every Get hangs until the test ends
	f.bucket.mu.Unlock()
	slow := &ctxBucket{memBucket: f.bucket}
	f.tier.bucket = slow
	for i := range 20 {
		if _, err := get(t, f.tier, enginetest.Key(500+i)); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("GET of a key the node lacks while the bucket hangs: %v, want NOT_FOUND", err)
		}
	}
	st := f.tier.TierStats()
	var timeouts, skipped uint64
	for _, c := range st.Calls {
		if c.Op == "get" && c.Status == "timeout" {
			timeouts = c.Count
		}
		if c.Op == "get" && c.Status == "skipped" {
			skipped = c.Count
		}
	}
	if timeouts == 0 || skipped < 15 || st.Reachable {
		t.Fatalf("%d timeouts, %d skipped, reachable %v: want a timeout, then the rest skipped", timeouts, skipped, st.Reachable)
	}
}

// ctxBucket makes memBucket's hanging Get honour its context, as a real
// client's does.
type ctxBucket struct{ *memBucket }

func (b *ctxBucket) Get(ctx context.Context, name string, limit int64, alloc func(int) []byte) ([]byte, error) {
	done := make(chan struct{})
	var obj []byte
	var err error
	go func() { obj, err = b.memBucket.Get(ctx, name, limit, alloc); close(done) }()
	select {
	case <-done:
		return obj, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A GET that missed the backing while a promotion of its key was still
// writing, and looks for a read in flight only after the promotion
// finished, reads the backing again rather than the bucket a second time.
func TestMissRacingAFinishingPromotionReadsTheBacking(t *testing.T) {
	f := open(t, nil)
	k := enginetest.Key(21)
	v := enginetest.Value(21, 3000)
	if err := f.tier.Put(k, v); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	f.backing.evict(k)
	gate := make(chan struct{})
	f.backing.mu.Lock()
	f.backing.putGate = gate // the promotion's write waits
	f.backing.mu.Unlock()
	if n, err := f.tier.Exist(k); err != nil || n != uint64(len(v)) {
		t.Fatalf("EXIST through the bucket: %d %v", n, err)
	}
	f.backing.mu.Lock()
	f.backing.afterMiss = func() {
		// The GET has missed: now let the promotion finish, and wait
		// for it to leave, before the GET looks for it.
		f.backing.mu.Lock()
		f.backing.afterMiss = nil
		f.backing.mu.Unlock()
		close(gate)
		f.tier.promotions.Wait()
	}
	f.backing.mu.Unlock()
	got, err := get(t, f.tier, k)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("GET: %v", err)
	}
	if n := f.bucket.gets.Load(); n != 1 {
		t.Fatalf("%d bucket reads, want 1: the GET read the bucket again", n)
	}
}

// A batch of lookups reads the keys the backing lacks through in
// parallel, and answers each as EXIST would.
func TestExistBatchReadsThroughInParallel(t *testing.T) {
	f := open(t, func(o *Options) { o.Workers = 4 })
	keys := make([]wire.BlockKey, 8)
	for i := range keys {
		keys[i] = enginetest.Key(600 + i)
		if i < 6 { // 6 in the bucket, 2 nowhere
			if err := f.tier.Put(keys[i], enginetest.Value(uint64(i), 1000+i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.settle(t)
	for _, k := range keys[1:] {
		f.backing.evict(k) // keys[0] stays on the backing
	}
	gate := make(chan struct{})
	f.bucket.mu.Lock()
	f.bucket.gate = gate
	f.bucket.mu.Unlock()
	stored, errs := make([]uint64, len(keys)), make([]error, len(keys))
	done := make(chan struct{})
	go func() { f.tier.ExistBatch(keys, stored, errs); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.bucket.gets.Load() < 4 { // all four workers in the bucket at once
		if time.Now().After(deadline) {
			t.Fatalf("only %d bucket reads in flight together, want 4", f.bucket.gets.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	<-done
	for i := range keys {
		switch {
		case i < 6 && (errs[i] != nil || stored[i] != uint64(1000+i)):
			t.Errorf("key %d: %d %v, want %d bytes", i, stored[i], errs[i], 1000+i)
		case i >= 6 && wire.StatusOf(errs[i]) != wire.StatusNotFound:
			t.Errorf("key %d: %v, want NOT_FOUND", i, errs[i])
		}
	}
}

// A PUT that begins while a promotion of its key is writing waits for
// it, so the PUT's value is the one the backing keeps.
func TestPutDuringPromotionLandsLast(t *testing.T) {
	f := open(t, nil)
	k := enginetest.Key(31)
	old, newer := enginetest.Value(31, 4000), enginetest.Value(32, 4000)
	if err := f.tier.Put(k, old); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	f.backing.evict(k)
	gate := make(chan struct{})
	f.backing.mu.Lock()
	f.backing.putGate, f.backing.gateOnce = gate, true // the promotion's write waits here, and only it
	f.backing.mu.Unlock()
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open) // a failure below must not leave the promotion waiting (Close waits for it)
	if _, err := get(t, f.tier, k); err != nil {
		t.Fatal(err)
	}
	// The promotion is now writing (held at the gate).
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := f.tier.stripe(k)
		s.mu.Lock()
		writing := s.promoting[k] != nil
		s.mu.Unlock()
		if writing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the promotion never started writing")
		}
		time.Sleep(time.Millisecond)
	}
	putDone := make(chan error)
	go func() { putDone <- f.tier.Put(k, newer) }()
	select {
	case err := <-putDone:
		t.Fatalf("the PUT returned (%v) while the promotion of its key was still writing", err)
	case <-time.After(50 * time.Millisecond):
	}
	open()
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	if held, _ := f.backing.has(k); !bytes.Equal(held, newer) {
		t.Fatal("the promotion's older value overwrote the PUT's")
	}
}
