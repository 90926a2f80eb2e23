package slab

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// holdAcct holds, once armed, the first Committed call with delta want
// until open is closed, saying on entered that it got there.
type holdAcct struct {
	armed         atomic.Bool
	want          int64
	once          sync.Once
	entered, open chan struct{}
}

func (h *holdAcct) Committed(_ uint64, delta int64) {
	if !h.armed.Load() || delta != h.want {
		return
	}
	h.once.Do(func() {
		h.entered <- struct{}{}
		<-h.open
	})
}

// TestRemoveAfterDroppedLargeValueSurvivesSIGKILL: a GET that finds a
// piece of a large value gone (evicted by a PUT still in flight) drops the
// value's head (dropValue): it unpublishes it under the lock and clears its
// record after. A REMOVE of the key after a PUT waits for that clear too
// (Store.evicted), so a SIGKILL right after the REMOVE cannot bring the old
// value back whole from the head's record and its pieces'.
func TestRemoveAfterDroppedLargeValueSurvivesSIGKILL(t *testing.T) {
	const ext = 64 << 10
	var headOff atomic.Int64
	headOff.Store(-1)
	tableHeld, tableOpen := make(chan struct{}, 1), make(chan struct{})
	var heldOnce sync.Once
	fs := &vfs.FaultFS{InjectRange: func(op vfs.Op, path string, off, n int64) error {
		if op == vfs.OpWrite && off == headOff.Load() && n == RecordSize {
			heldOnce.Do(func() {
				tableHeld <- struct{}{}
				<-tableOpen
			})
		}
		return nil
	}}
	acct := &holdAcct{want: -ext, entered: make(chan struct{}, 1), open: make(chan struct{})}
	opts := Options{Dir: t.TempDir(), CapacityBytes: 4 * ext, ExtentBytes: ext, MaxValueBytes: 4 * ext, FS: fs, Accounting: acct}
	s := openT(t, opts)

	// K: two pieces (extents 0 and 1) and a 10000-byte head (extent 2,
	// 12 KiB class); one more extent-sized value takes the last extent.
	k := enginetest.Key(1)
	v1 := enginetest.Value(1, 2*ext+10000)
	mustCache(t, s, k, v1)
	mustCache(t, s, enginetest.Key(2), enginetest.Value(2, ext))
	off, ok := recordAt(s, k)
	if !ok {
		t.Fatal("K is not there")
	}

	// Y needs an extent-sized slot: the clock evicts K's first piece. Y is
	// held right after its lock is let go (its accounting of the victim),
	// before it cleans up K's orphaned head.
	acct.armed.Store(true)
	stored := make(chan error, 1)
	go func() { stored <- s.Put(enginetest.Key(3), enginetest.Value(3, ext)) }()
	select {
	case <-acct.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the PUT that evicts never accounted a victim")
	}

	// A GET of K finds the piece gone and drops the value; its clear of
	// the head's record is held.
	headOff.Store(off)
	got := make(chan error, 1)
	go func() { _, err := get(t, s, k); got <- err }()
	select {
	case <-tableHeld:
	case <-time.After(10 * time.Second):
		t.Fatal("the GET never cleared K's head")
	}

	// Meanwhile a PUT of K and a REMOVE of K, both acknowledged; then a
	// SIGKILL the instant the REMOVE returned.
	mustCache(t, s, k, enginetest.Value(9, 5000))
	killed := t.TempDir()
	removed := make(chan error, 1)
	go func() {
		err := s.Remove(k)
		copyDir(t, opts.Dir, killed)
		removed <- err
	}()
	var rerr error
	select {
	case rerr = <-removed: // answered with the old head's record still on disk
	case <-time.After(300 * time.Millisecond): // waits for the clear, as it should
		close(tableOpen)
		rerr = <-removed
	}
	select {
	case <-tableOpen:
	default:
		close(tableOpen)
	}
	close(acct.open)
	if rerr != nil {
		t.Fatalf("REMOVE: %v", rerr)
	}
	if err := <-got; wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("GET of the value missing a piece: %v, want a miss", err)
	}
	if err := <-stored; err != nil {
		t.Fatalf("the PUT that evicted: %v", err)
	}
	mustClose(t, s)

	opts.Dir, opts.FS, opts.Accounting = killed, nil, nil
	s2 := openT(t, opts)
	defer mustClose(t, s2)
	if data, err := get(t, s2, k); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("K, removed (acknowledged) before the SIGKILL, is served after it: %d bytes, the value dropped before the REMOVE: %v, err %v",
			len(data), bytes.Equal(data, v1), err)
	}
}

// TestRemoveDuringAnotherRemoveSurvivesSIGKILL: a REMOVE unpublishes the
// key under the lock and clears its record after. A second REMOVE of the
// key meanwhile, and a PUT and a REMOVE after it, wait for that clear
// (Store.evicted): a SIGKILL after the last REMOVE must not let the next
// Open serve the value the acknowledged REMOVEs deleted.
func TestRemoveDuringAnotherRemoveSurvivesSIGKILL(t *testing.T) {
	var holdOff atomic.Int64
	holdOff.Store(-1)
	held, open := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	fs := &vfs.FaultFS{InjectRange: func(op vfs.Op, path string, off, n int64) error {
		if op == vfs.OpWrite && off == holdOff.Load() && n == RecordSize {
			once.Do(func() {
				held <- struct{}{}
				<-open
			})
		}
		return nil
	}}
	opts := Options{Dir: t.TempDir(), CapacityBytes: 8 * 64 << 10, ExtentBytes: 64 << 10, FS: fs}
	s := openT(t, opts)
	k, v1 := enginetest.Key(1), bytes.Repeat([]byte{1}, 4096)
	mustCache(t, s, k, v1)
	off, _ := recordAt(s, k)
	holdOff.Store(off)

	first := make(chan error, 1)
	go func() { first <- s.Remove(k) }() // its clear of v1's record is held
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first REMOVE never cleared the record")
	}
	// Another client: REMOVE (NOT_FOUND), PUT, REMOVE, all acknowledged,
	// then a SIGKILL the instant the last REMOVE returned.
	killed := t.TempDir()
	removed := make(chan error, 1)
	go func() {
		if err := s.Remove(k); wire.StatusOf(err) != wire.StatusNotFound {
			removed <- fmt.Errorf("second REMOVE: %w", err)
			return
		}
		if err := s.Put(k, bytes.Repeat([]byte{2}, 4096)); err != nil {
			removed <- fmt.Errorf("PUT: %w", err)
			return
		}
		err := s.Remove(k)
		copyDir(t, opts.Dir, killed)
		removed <- err
	}()
	var rerr error
	select {
	case rerr = <-removed: // answered with v1's record still on disk
		close(open)
	case <-time.After(300 * time.Millisecond): // waits for the clear, as it should
		close(open)
		rerr = <-removed
	}
	if rerr != nil {
		t.Fatalf("last REMOVE: %v", rerr)
	}
	if err := <-first; err != nil {
		t.Fatalf("first REMOVE: %v", err)
	}
	mustClose(t, s)
	opts.Dir, opts.FS = killed, nil
	s2 := openT(t, opts)
	defer mustClose(t, s2)
	if data, err := get(t, s2, k); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("a key whose last acknowledged operation was a REMOVE is served after a SIGKILL: %d bytes (the first value: %v), %v",
			len(data), bytes.Equal(data, v1), err)
	}
}
