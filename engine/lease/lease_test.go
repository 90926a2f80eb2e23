package lease

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// lender counts outstanding loans and refuses a double return.
type lender struct {
	mu  sync.Mutex
	out map[engine.Loan]bool
	bad atomic.Int32
}

func newLender() *lender { return &lender{out: map[engine.Loan]bool{}} }

func (l *lender) lend(n uint64) engine.Loan {
	l.mu.Lock()
	defer l.mu.Unlock()
	loan := engine.Loan{A: n, B: n * 7}
	l.out[loan] = true
	return loan
}

func (l *lender) Lend(wire.BlockKey, uint64, uint64) ([]byte, uint64, engine.Loan, bool, error) {
	panic("not used")
}

func (l *lender) Return(loan engine.Loan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.out[loan] {
		l.bad.Add(1)
	}
	delete(l.out, loan)
}

func (l *lender) outstanding() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.out)
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newTable(t *testing.T, l *lender, capacity int, c *clock) *Table {
	t.Helper()
	opts := Options{Lender: l, Capacity: capacity, TTL: time.Second}
	if c != nil {
		opts.Now = c.now
		opts.TTL = time.Hour // the sweeper never fires on its own; tests call Expire
	}
	tb, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Close)
	return tb
}

func TestGrantSetsWordReleaseClearsItAndReturnsLoan(t *testing.T) {
	l := newLender()
	tb := newTable(t, l, 4, nil)
	id, _, ok := tb.Grant(1, l.lend(1))
	if !ok || id == 0 {
		t.Fatalf("Grant: %#x, %v", uint64(id), ok)
	}
	if got := tb.words[id.Index()].Load(); got != uint64(id) {
		t.Fatalf("word %d holds %#x, want the lease id %#x", id.Index(), got, uint64(id))
	}
	if err := tb.Release(1, id); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := tb.words[id.Index()].Load(); got != 0 {
		t.Fatalf("word %d holds %#x after release, want 0", id.Index(), got)
	}
	if l.outstanding() != 0 {
		t.Fatal("the loan was not returned")
	}
	if err := tb.Release(1, id); !errors.Is(err, ErrUnknown) {
		t.Fatalf("second Release: %v, want ErrUnknown", err)
	}
	id2, _, _ := tb.Grant(1, l.lend(2))
	if id2 == id {
		t.Fatalf("a reused slot gave the same id %#x again", uint64(id))
	}
	if err := tb.Release(1, id); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Release of the old id after its slot was reused: %v, want ErrUnknown", err)
	}
	if tb.words[id2.Index()].Load() != uint64(id2) {
		t.Fatal("the release of a stale id cleared the live lease's word")
	}
}

func TestReleaseRefusesOtherOwnersAndForgedIDs(t *testing.T) {
	l := newLender()
	tb := newTable(t, l, 4, nil)
	id, _, _ := tb.Grant(1, l.lend(1))
	if err := tb.Release(2, id); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Release by another owner: %v, want ErrNotOwner", err)
	}
	forged := wire.LeaseID(uint64(99)<<32 | 1)
	if err := tb.Release(1, forged); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Release of an out-of-range slot: %v, want ErrNotOwner", err)
	}
	if err := tb.Release(1, id+1); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Release of a guessed sequence: %v, want ErrUnknown", err)
	}
	if l.outstanding() != 1 || tb.words[id.Index()].Load() != uint64(id) {
		t.Fatal("a refused release ended the lease")
	}
	if s := tb.Stats(); s.Refused != 2 || s.Live != 1 {
		t.Fatalf("stats %+v, want 2 refused and 1 live", s)
	}
}

func TestExpireEndsOnlyExpiredLeasesInOrder(t *testing.T) {
	l := newLender()
	c := &clock{t: time.Unix(1000, 0)}
	tb := newTable(t, l, 8, c)
	a, _, _ := tb.Grant(1, l.lend(1))
	c.add(10 * time.Minute)
	b, _, _ := tb.Grant(1, l.lend(2))
	_ = tb.Release(1, a) // released early: its queue entry is stale
	c.add(10 * time.Minute)
	d, _, _ := tb.Grant(2, l.lend(3))
	c.add(45 * time.Minute) // b is 55 min old, d 45: neither expired
	if n := tb.Expire(c.now()); n != 0 {
		t.Fatalf("Expire ended %d leases before any TTL passed", n)
	}
	c.add(6 * time.Minute) // b: 61 min
	if n := tb.Expire(c.now()); n != 1 {
		t.Fatalf("Expire ended %d, want 1 (b)", n)
	}
	if tb.words[b.Index()].Load() != 0 || tb.words[d.Index()].Load() != uint64(d) {
		t.Fatal("the wrong lease expired")
	}
	if err := tb.Release(1, b); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Release after expiry: %v, want ErrUnknown", err)
	}
	c.add(time.Hour)
	tb.Expire(c.now())
	if l.outstanding() != 0 || l.bad.Load() != 0 {
		t.Fatalf("%d loans outstanding, %d bad returns", l.outstanding(), l.bad.Load())
	}
}

func TestFullTableRefusesAndOwnerCloseReleases(t *testing.T) {
	l := newLender()
	tb := newTable(t, l, 3, nil)
	for i := range 3 {
		if _, _, ok := tb.Grant(uint64(i%2), l.lend(uint64(i))); !ok {
			t.Fatalf("Grant %d refused", i)
		}
	}
	if _, _, ok := tb.Grant(0, engine.Loan{}); ok {
		t.Fatal("Grant into a full table succeeded")
	}
	if n := tb.ReleaseOwner(0); n != 2 {
		t.Fatalf("ReleaseOwner(0) ended %d, want 2", n)
	}
	if l.outstanding() != 1 {
		t.Fatalf("%d loans outstanding, want owner 1's", l.outstanding())
	}
	tb.Close()
	if l.outstanding() != 0 {
		t.Fatal("Close left a loan outstanding")
	}
}

// Many owners granting and releasing while the sweeper expires: every
// loan comes back exactly once.
func TestConcurrentGrantsReleasesAndExpiry(t *testing.T) {
	l := newLender()
	tb, err := New(Options{Lender: l, Capacity: 64, TTL: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var n atomic.Uint64
	for o := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				loan := l.lend(n.Add(1))
				id, _, ok := tb.Grant(uint64(o), loan)
				if !ok {
					l.Return(loan) // the caller keeps a loan the table refused
					continue
				}
				if i%3 != 0 { // leave a third to expire
					_ = tb.Release(uint64(o), id)
				}
				if i%500 == 0 {
					tb.ReleaseOwner(uint64(o))
				}
			}
		}()
	}
	wg.Wait()
	tb.Close()
	if l.outstanding() != 0 || l.bad.Load() != 0 {
		t.Fatalf("%d loans outstanding, %d returned twice or unknown", l.outstanding(), l.bad.Load())
	}
	if s := tb.Stats(); s.Live != 0 {
		t.Fatalf("stats after Close: %+v", s)
	}
}
