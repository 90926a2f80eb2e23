package objtier

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// waitNoPendingDeletes waits until the tier has no key marked for a delete.
func waitNoPendingDeletes(t *testing.T, f *fixture) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for f.tier.TierStats().PendingDeletes != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("deletes still pending after 15s: %+v", f.tier.TierStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteFailBucket fails every Delete while failDeletes is set.
type deleteFailBucket struct {
	*memBucket
	failDeletes atomic.Bool
}

func (b *deleteFailBucket) Delete(ctx context.Context, name string) error {
	if b.failDeletes.Load() {
		return errDown
	}
	return b.memBucket.Delete(ctx, name)
}

// putUntilAccepted repeats a PUT that the tier refused while the bucket
// was backing off (a sync PUT's upload is then skipped).
func putUntilAccepted(t *testing.T, f *fixture, k wire.BlockKey, v []byte) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f.tier.Put(k, v)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUT refused for 15s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A PUT after a REMOVE whose delete failed stores a value the REMOVE did
// not cover: once its upload lands, the delete retries must not take it
// out of the bucket, and a miss must read it.
func TestPutAfterFailedRemoveKeepsItsObject(t *testing.T) {
	for _, mode := range []WriteMode{WriteAsync, WriteSync} {
		t.Run(mode.String(), func(t *testing.T) {
			f := open(t, func(o *Options) { o.Write = mode })
			db := &deleteFailBucket{memBucket: f.bucket}
			f.tier.bucket = db
			k := enginetest.Key(9)
			if err := f.tier.Put(k, enginetest.Value(9, 4096)); err != nil {
				t.Fatal(err)
			}
			f.settle(t)
			db.failDeletes.Store(true)
			if err := f.tier.Remove(k); err != nil {
				t.Fatalf("REMOVE during an outage: %v", err)
			}
			// The REMOVE's delete failed: its retries fail too until the
			// newer value's upload has landed.
			newer := enginetest.Value(99, 8192)
			putUntilAccepted(t, f, k, newer)
			f.settle(t)
			if obj, ok := f.bucket.object(ObjectName("p", k)); !ok || !bytes.Equal(obj[HeaderLen:], newer) {
				t.Fatal("test premise: the newer value's upload should have landed")
			}
			db.failDeletes.Store(false)
			waitNoPendingDeletes(t, f)
			obj, ok := f.bucket.object(ObjectName("p", k))
			if !ok || !bytes.Equal(obj[HeaderLen:], newer) {
				t.Fatalf("the bucket lost the PUT that followed the REMOVE (object held: %v)", ok)
			}
			f.backing.evict(k)
			if got, err := get(t, f.tier, k); err != nil || !bytes.Equal(got, newer) {
				t.Fatalf("a miss after eviction: err %v, equal %v", err, bytes.Equal(got, newer))
			}
		})
	}
}

// reopen closes f's tier and opens another over a new, empty backing (a
// node restarted on a replaced disk) and the same bucket and marks file.
func reopen(t *testing.T, f *fixture, marks string) *fixture {
	t.Helper()
	if err := f.tier.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	g := open(t, func(o *Options) { o.MarksFile = marks; o.Bucket = f.bucket })
	g.bucket = f.bucket
	return g
}

// A REMOVE whose delete failed, and an upload dropped while the bucket
// held an older value, stay unread from the bucket after a restart; the
// deletes are made once the bucket answers.
func TestMarksOutliveARestart(t *testing.T) {
	marks := filepath.Join(t.TempDir(), MarksFileName)
	f := open(t, func(o *Options) { o.MarksFile = marks })
	removed, stale := enginetest.Key(21), enginetest.Key(22)
	for _, k := range []wire.BlockKey{removed, stale} {
		if err := f.tier.Put(k, enginetest.Value(uint64(k.ID[0]), 4096)); err != nil {
			t.Fatal(err)
		}
	}
	f.settle(t)
	f.bucket.setFail(errDown)
	if err := f.tier.Remove(removed); err != nil {
		t.Fatalf("REMOVE during an outage: %v", err)
	}
	// An overwrite the bucket never gets: the upload waits in the queue
	// and is still there at close.
	if err := f.tier.Put(stale, enginetest.Value(77, 4096)); err != nil {
		t.Fatal(err)
	}
	f.tier.opts.DrainTimeout = 100 * time.Millisecond
	g := reopen(t, f, marks)
	if n := g.tier.TierStats().PendingDeletes; n != 2 {
		t.Fatalf("pending deletes after the restart: %d, want 2", n)
	}
	if g.logs.count("keys kept from reading the bucket") != 1 {
		t.Fatalf("the restart did not say it kept marks: %s", g.logs.b.String())
	}
	g.bucket.setFail(nil)
	for _, k := range []wire.BlockKey{removed, stale} {
		if _, err := get(t, g.tier, k); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("key %d read from the bucket after the restart: %v", k.ID[0], err)
		}
	}
	waitNoPendingDeletes(t, g)
	for _, k := range []wire.BlockKey{removed, stale} {
		if _, ok := g.bucket.object(ObjectName("p", k)); ok {
			t.Fatalf("key %d: the retried delete was not made", k.ID[0])
		}
	}
	// The ends of the marks are written too: a third start has none.
	h := reopen(t, g, marks)
	if n := h.tier.TierStats().PendingDeletes; n != 0 {
		t.Fatalf("pending deletes after the marks ended: %d", n)
	}
}

// A REMOVE that could neither delete the object nor record that it must
// not be read says so: it is not acknowledged as done.
func TestRemoveFailsWhenItsMarkCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	marks := filepath.Join(dir, MarksFileName)
	f := open(t, func(o *Options) { o.MarksFile = marks })
	k := enginetest.Key(23)
	if err := f.tier.Put(k, enginetest.Value(23, 4096)); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	// bbolt grows its file by mmap; a read-only reopen of the descriptor
	// is not possible, so break the writes by closing the database under
	// the writer.
	_ = f.tier.marks.db.Close()
	f.bucket.setFail(errDown)
	err := f.tier.Remove(k)
	if wire.StatusOf(err) != wire.StatusIOError || !strings.Contains(err.Error(), MarksFileName) {
		t.Fatalf("REMOVE with an unwritable marks file: %v, want an I/O error naming the file", err)
	}
	if f.logs.count("cannot write its marks file") != 1 {
		t.Fatalf("the marks file's failure was not logged once: %s", f.logs.b.String())
	}
	if _, err := get(t, f.tier, k); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("the removed key was read from the bucket: %v", err)
	}
}

// Two PUTs of one key at once leave the disk and the bucket the same
// value: the later write to the backing is the later upload.
func TestConcurrentPutsOfAKeyAgree(t *testing.T) {
	for _, mode := range []WriteMode{WriteAsync, WriteSync} {
		t.Run(mode.String(), func(t *testing.T) {
			f := open(t, func(o *Options) { o.Write = mode })
			k := enginetest.Key(31)
			first, second := enginetest.Value(31, 5000), enginetest.Value(32, 6000)
			held, release := make(chan struct{}), make(chan struct{})
			f.backing.mu.Lock()
			f.backing.afterPut = func() { close(held); <-release }
			f.backing.mu.Unlock()
			done := make(chan error, 2)
			go func() { done <- f.tier.Put(k, first) }()
			<-held // the first PUT has written the backing, not yet the bucket
			go func() { done <- f.tier.Put(k, second) }()
			// Give the second PUT the time to overtake (it must not).
			time.Sleep(100 * time.Millisecond)
			close(release)
			for range 2 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			f.settle(t)
			disk, _ := f.backing.has(k)
			obj, ok := f.bucket.object(ObjectName("p", k))
			if !ok || !bytes.Equal(obj[HeaderLen:], disk) {
				t.Fatalf("disk holds %d bytes, the bucket %d (held %v): they differ", len(disk), len(obj)-HeaderLen, ok)
			}
		})
	}
}

// Batches sharing keys in opposite orders, and a batch naming a key
// twice, finish.
func TestBatchesSharingKeysFinish(t *testing.T) {
	f := open(t, nil)
	a, b := enginetest.Key(41), enginetest.Key(42)
	v := enginetest.Value(41, 3000)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := []wire.BlockKey{a, b, a}
			if i%2 == 1 {
				keys = []wire.BlockKey{b, a}
			}
			values := make([][]byte, len(keys))
			for j := range values {
				values[j] = v
			}
			errs := make([]error, len(keys))
			f.tier.PutBatch(keys, values, errs)
			for _, err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// headGateBucket holds each Head until gate is closed, saying on entered
// that one arrived.
type headGateBucket struct {
	*memBucket
	entered chan struct{}
	gate    chan struct{}
}

func (b *headGateBucket) Head(ctx context.Context, name string) (int64, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.gate
	return b.memBucket.Head(ctx, name)
}

// A PUT that comes while a REMOVE asks the bucket about the key (the
// node held no copy) is uploaded after the REMOVE's delete: the bucket
// keeps the PUT's value.
func TestPutDuringRemoveKeepsItsObject(t *testing.T) {
	f := open(t, func(o *Options) { o.Timeout = 10 * time.Second })
	k := enginetest.Key(501)
	old, newer := enginetest.Value(501, 4096), enginetest.Value(502, 4096)
	if err := f.tier.Put(k, old); err != nil {
		t.Fatal(err)
	}
	f.settle(t)
	f.backing.evict(k) // the node holds no copy: REMOVE asks the bucket (HEAD)
	hb := &headGateBucket{memBucket: f.bucket, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	f.tier.bucket = hb
	done := make(chan error, 1)
	go func() { done <- f.tier.Remove(k) }()
	<-hb.entered // the REMOVE has removed from the backing, not yet deleted
	putDone := make(chan error, 1)
	go func() { putDone <- f.tier.Put(k, newer) }()
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
	close(hb.gate)
	if err := <-done; err != nil {
		t.Fatalf("REMOVE: %v", err)
	}
	f.settle(t)
	if obj, ok := f.bucket.object(ObjectName("p", k)); !ok || !bytes.Equal(obj[HeaderLen:], newer) {
		t.Fatalf("the REMOVE's delete took out the object of the PUT after it (held %v)", ok)
	}
	f.backing.evict(k)
	if got, err := get(t, f.tier, k); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("a miss of the PUT's value after eviction: err %v", err)
	}
}

// failBodyBucket fails the Put of the object holding body.
type failBodyBucket struct {
	*memBucket
	body atomic.Pointer[[]byte]
}

func (b *failBodyBucket) Put(ctx context.Context, name string, obj []byte) error {
	if p := b.body.Load(); p != nil && bytes.Equal(obj[HeaderLen:], *p) {
		return errDown
	}
	return b.memBucket.Put(ctx, name, obj)
}

// A sync batch naming a key twice uploads the value the disk keeps (the
// last), whatever becomes of the earlier one's upload.
func TestSyncBatchWithARepeatedKey(t *testing.T) {
	f := open(t, func(o *Options) { o.Write = WriteSync; o.Workers = 4 })
	fb := &failBodyBucket{memBucket: f.bucket}
	f.tier.bucket = fb
	for i := range 50 {
		k := enginetest.Key(2000 + i)
		first, last := enginetest.Value(uint64(3*i+1), 4096), enginetest.Value(uint64(3*i+2), 4096)
		if i%2 == 1 {
			fb.body.Store(&first) // an upload of the superseded value would fail
		} else {
			fb.body.Store(nil)
		}
		errs := make([]error, 2)
		f.tier.PutBatch([]wire.BlockKey{k, k}, [][]byte{first, last}, errs)
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("batch %d: %v", i, errs)
		}
		disk, _ := f.backing.has(k)
		obj, ok := f.bucket.object(ObjectName("p", k))
		if !bytes.Equal(disk, last) || !ok || !bytes.Equal(obj[HeaderLen:], last) {
			t.Fatalf("batch %d: the disk (last value: %v) and the bucket (held %v) disagree", i, bytes.Equal(disk, last), ok)
		}
	}
}

// An upload that lands as the key's newest does not end a mark made
// after its value was queued: a newer PUT whose upload the full queue
// refused meanwhile. (The worker's steps are taken by hand: the window
// is between the queue's answer and the mark's end.)
func TestLandingUploadLeavesANewerMark(t *testing.T) {
	f := open(t, func(o *Options) { o.QueueBytes = 16 << 10; o.Workers = 1 })
	markDown(f.tier.writes, time.Now().Add(time.Hour)) // the worker waits rather than take
	k := enginetest.Key(601)
	older, newer := enginetest.Value(601, 8000), enginetest.Value(602, 20000) // newer: larger than the queue
	if err := f.tier.Put(k, older); err != nil {
		t.Fatal(err)
	}
	key, body, ok := f.tier.queue.take()
	if !ok || key != k {
		t.Fatal("test premise: the older object should be queued")
	}
	if err := f.bucket.Put(context.Background(), f.tier.name(k), body.B); err != nil {
		t.Fatal(err)
	}
	newest, _, gen := f.tier.queue.finish(k, body, true, true)
	if !newest {
		t.Fatal("test premise: the older object was the newest when it landed")
	}
	if err := f.tier.Put(k, newer); err != nil { // the queue refuses its upload
		t.Fatal(err)
	}
	if n := f.tier.TierStats().PendingDeletes; n != 1 {
		t.Fatalf("test premise: the refused upload should mark the key (pending %d)", n)
	}
	f.tier.clearStale(k, gen) // the worker goes on
	markUp(f.tier.writes)
	f.backing.evict(k)
	if got, err := get(t, f.tier, k); err == nil && bytes.Equal(got, older) {
		t.Fatal("after eviction a miss served the value the acknowledged PUT replaced")
	}
}

// The marks file's lock is reported to engine.LockNotify, which libdfkv
// uses to close it in a child forked without exec: held at open, given
// back at close.
func TestMarksFileLockIsNoted(t *testing.T) {
	var mu sync.Mutex
	var notes []string
	engine.LockNotify = func(fd uintptr, held bool) {
		mu.Lock()
		notes = append(notes, fmt.Sprint(fd, held))
		mu.Unlock()
	}
	defer func() { engine.LockNotify = nil }()
	f := open(t, func(o *Options) { o.MarksFile = filepath.Join(t.TempDir(), MarksFileName) })
	fd := f.tier.marks.file.Fd()
	if err := f.tier.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{fmt.Sprint(fd, true), fmt.Sprint(fd, false)}; fmt.Sprint(notes) != fmt.Sprint(want) {
		t.Fatalf("lock notes %v, want %v", notes, want)
	}
}
