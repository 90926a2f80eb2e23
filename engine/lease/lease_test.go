package lease

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

// nopLender takes loans back without counting them, so benchmarks
// measure the table alone.
type nopLender struct{}

func (nopLender) Lend(wire.BlockKey, uint64, uint64) ([]byte, uint64, engine.Loan, bool, error) {
	panic("not used")
}
func (nopLender) Return(engine.Loan) {}

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
	id, _, ok := tb.Grant(1, l.lend(1), 1)
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
	id2, _, _ := tb.Grant(1, l.lend(2), 1)
	if id2 == id {
		t.Fatalf("a reused slot gave the same id %#x again", uint64(id))
	}
	if err := tb.Release(1, id); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Release of the old id after its slot was reused: %v, want ErrUnknown", err)
	}
	if tb.words[id2.Index()].Load() != uint64(id2) {
		t.Fatal("the release of a stale id cleared the live lease's word")
	}
	if s := tb.Stats(); s.Refused != 0 {
		t.Fatalf("a stale id (its lease ended, its slot reused) was counted as refused: %+v", s)
	}
}

func TestReleaseRefusesOtherOwnersAndForgedIDs(t *testing.T) {
	l := newLender()
	tb := newTable(t, l, 4, nil)
	id, _, _ := tb.Grant(1, l.lend(1), 1)
	if err := tb.Release(2, id); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Release by another owner: %v, want ErrNotOwner", err)
	}
	forged := wire.LeaseID(uint64(99)<<32 | 1)
	if err := tb.Release(1, forged); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Release of an out-of-range slot: %v, want ErrNotOwner", err)
	}
	// Ids the table never issued: a sequence the live slot has not
	// reached, and a slot never granted.
	for _, f := range []wire.LeaseID{id + 1000, wire.LeaseID(uint64(3)<<32 | 1)} {
		if err := tb.Release(1, f); !errors.Is(err, ErrUnknown) {
			t.Fatalf("Release of never-issued id %#x: %v, want ErrUnknown", uint64(f), err)
		}
	}
	if l.outstanding() != 1 || tb.words[id.Index()].Load() != uint64(id) {
		t.Fatal("a refused release ended the lease")
	}
	if s := tb.Stats(); s.Refused != 4 || s.Live != 1 {
		t.Fatalf("stats %+v, want 4 refused (another owner, past the table, 2 never issued) and 1 live", s)
	}
}

func TestExpireEndsOnlyExpiredLeasesInOrder(t *testing.T) {
	l := newLender()
	c := &clock{t: time.Unix(1000, 0)}
	tb := newTable(t, l, 8, c)
	a, _, _ := tb.Grant(1, l.lend(1), 1)
	c.add(10 * time.Minute)
	b, _, _ := tb.Grant(1, l.lend(2), 1)
	_ = tb.Release(1, a) // released early: its queue entry is stale
	c.add(10 * time.Minute)
	d, _, _ := tb.Grant(2, l.lend(3), 1)
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
		if _, _, ok := tb.Grant(uint64(i%2), l.lend(uint64(i)), 1); !ok {
			t.Fatalf("Grant %d refused", i)
		}
	}
	if _, _, ok := tb.Grant(0, engine.Loan{}, 1); ok {
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
				id, _, ok := tb.Grant(uint64(o), loan, 1)
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

// TestReleaseOwnerEndsExactlyItsLeases: with other owners' leases
// beside, leases released and expired, and their slots granted again to
// other owners, ReleaseOwner ends the owner's live leases and nothing
// else, clearing their words and returning their loans once.
func TestReleaseOwnerEndsExactlyItsLeases(t *testing.T) {
	l := newLender()
	c := &clock{t: time.Unix(1000, 0)}
	tb := newTable(t, l, 16, c)
	var n uint64
	grant := func(owner uint64) wire.LeaseID {
		t.Helper()
		n++
		id, _, ok := tb.Grant(owner, l.lend(n), 1)
		if !ok {
			t.Fatalf("Grant for owner %d refused", owner)
		}
		return id
	}
	live := func(ids ...wire.LeaseID) {
		t.Helper()
		for _, id := range ids {
			if !tb.Held(id) {
				t.Fatalf("lease %#x ended; it should be live", uint64(id))
			}
		}
	}
	ended := func(ids ...wire.LeaseID) {
		t.Helper()
		for _, id := range ids {
			if tb.Held(id) || tb.words[id.Index()].Load() == uint64(id) {
				t.Fatalf("lease %#x is live; it should have ended", uint64(id))
			}
		}
	}

	old1 := grant(1)                   // expires below
	a1, a2 := grant(2), grant(1)       // a1 stays; a2 released below
	b1, b2 := grant(3), grant(1)       // both expire below
	c.add(30 * time.Minute)            // the first five are half-way through their hour
	keep1, keep2 := grant(1), grant(1) // owner 1's live leases at the end, with two below
	if err := tb.Release(1, a2); err != nil {
		t.Fatal(err)
	}
	c.add(31 * time.Minute)
	if got := tb.Expire(c.now()); got != 4 { // old1, a1, b1, b2
		t.Fatalf("Expire ended %d, want 4", got)
	}
	ended(old1, a1, a2, b1, b2)
	// The freed slots go to other owners and to owner 1 again.
	r2, r3 := grant(2), grant(3)
	keep3 := grant(1)
	r4 := grant(2)
	keep4 := grant(1)
	for _, id := range []wire.LeaseID{r2, r3, keep3, r4, keep4} {
		if id.Index() != old1.Index() && id.Index() != a1.Index() && id.Index() != a2.Index() && id.Index() != b1.Index() && id.Index() != b2.Index() {
			t.Fatalf("lease %#x took slot %d, not one of the freed ones: the test no longer covers reuse", uint64(id), id.Index())
		}
	}
	// Owner 1 releases one of its own; another owner's attempt fails.
	if err := tb.Release(2, keep2); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Release of owner 1's lease by owner 2: %v", err)
	}
	if err := tb.Release(1, keep2); err != nil {
		t.Fatal(err)
	}
	before := l.outstanding()
	if got := tb.ReleaseOwner(1); got != 3 { // keep1, keep3, keep4
		t.Fatalf("ReleaseOwner(1) ended %d, want 3", got)
	}
	ended(keep1, keep2, keep3, keep4)
	live(r2, r3, r4)
	if l.outstanding() != before-3 || l.bad.Load() != 0 {
		t.Fatalf("%d loans outstanding (want %d), %d bad returns", l.outstanding(), before-3, l.bad.Load())
	}
	if got := tb.ReleaseOwner(1); got != 0 {
		t.Fatalf("a second ReleaseOwner(1) ended %d", got)
	}
	if got := tb.ReleaseOwner(99); got != 0 {
		t.Fatalf("ReleaseOwner of an owner that never held a lease ended %d", got)
	}
	// An owner granted again after its ReleaseOwner starts afresh.
	again := grant(1)
	if got := tb.ReleaseOwner(1); got != 1 {
		t.Fatalf("ReleaseOwner(1) after a new grant ended %d, want 1", got)
	}
	ended(again)
	if got := tb.ReleaseOwner(2); got != 2 {
		t.Fatalf("ReleaseOwner(2) ended %d, want 2 (r2, r4)", got)
	}
	live(r3)
	if s := tb.Stats(); s.Live != 1 {
		t.Fatalf("stats %+v, want owner 3's one lease live", s)
	}
}

// TestReleaseOwnerAgainstAModel: random grants, releases, expiries and
// owner releases over a small table, checked step by step against a
// plain record of who holds what.
func TestReleaseOwnerAgainstAModel(t *testing.T) {
	l := newLender()
	c := &clock{t: time.Unix(1000, 0)}
	tb := newTable(t, l, 32, c)
	type held struct {
		owner  uint64
		expiry time.Time
	}
	model := map[wire.LeaseID]held{}
	rng := rand.New(rand.NewPCG(1, 2))
	var n uint64
	for step := range 20000 {
		owner := uint64(rng.IntN(5))
		switch op := rng.IntN(10); {
		case op < 5:
			n++
			loan := l.lend(n)
			id, exp, ok := tb.Grant(owner, loan, 1)
			if !ok {
				if len(model) != tb.Capacity() {
					t.Fatalf("step %d: Grant refused with %d of %d live", step, len(model), tb.Capacity())
				}
				l.Return(loan)
				continue
			}
			model[id] = held{owner, exp}
		case op < 7:
			for id, h := range model {
				if h.owner == owner {
					if err := tb.Release(owner, id); err != nil {
						t.Fatalf("step %d: Release: %v", step, err)
					}
					delete(model, id)
					break
				}
			}
		case op < 8:
			c.add(time.Duration(rng.IntN(40)) * time.Minute)
			now := c.now()
			want := 0
			for id, h := range model {
				if !now.Before(h.expiry) {
					delete(model, id)
					want++
				}
			}
			if got := tb.Expire(now); got != want {
				t.Fatalf("step %d: Expire ended %d, want %d", step, got, want)
			}
		default:
			want := 0
			for id, h := range model {
				if h.owner == owner {
					delete(model, id)
					want++
				}
			}
			if got := tb.ReleaseOwner(owner); got != want {
				t.Fatalf("step %d: ReleaseOwner(%d) ended %d, want %d", step, owner, got, want)
			}
		}
		if l.outstanding() != len(model) || l.bad.Load() != 0 {
			t.Fatalf("step %d: %d loans outstanding, %d live in the model, %d bad returns", step, l.outstanding(), len(model), l.bad.Load())
		}
		for id := range model {
			if !tb.Held(id) {
				t.Fatalf("step %d: lease %#x ended behind the model's back", step, uint64(id))
			}
		}
	}
}

// BenchmarkReleaseOwner: a connection that held a few leases closes, in
// a table sized for a busy node (the default server.lease_max and 16
// times it) where other connections hold leases too. Its cost is what
// every lease grant on the node waits for meanwhile. (The bytes per op
// are mostly the expiry queue's growth: the other connections' leases,
// live for the whole run, keep the sweeper from trimming it.)
func BenchmarkReleaseOwner(b *testing.B) {
	for _, capacity := range []int{65536, 1 << 20} {
		b.Run(fmt.Sprintf("capacity=%d", capacity), func(b *testing.B) {
			tb, err := New(Options{Lender: nopLender{}, Capacity: capacity, TTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer tb.Close()
			loan := engine.Loan{A: 1}
			for o := range uint64(100) { // other connections' leases
				tb.Grant(1000+o, loan, 1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				owner := uint64(i + 1)
				for range 4 {
					tb.Grant(owner, loan, 1)
				}
				tb.ReleaseOwner(owner)
			}
		})
	}
}

// BenchmarkGrantRelease: the hot path, a lease granted and released by
// its connection; it allocates nothing once the expiry queue has grown.
func BenchmarkGrantRelease(b *testing.B) {
	tb, err := New(Options{Lender: nopLender{}, Capacity: 65536, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	loan := engine.Loan{A: 1}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		id, _, _ := tb.Grant(7, loan, 1)
		if err := tb.Release(7, id); err != nil {
			b.Fatal(err)
		}
		if n++; n%4096 == 0 {
			tb.Expire(time.Now()) // the sweeper's part: drop the released grants from the expiry queue
		}
	}
}
