package lease

import (
	"testing"
	"time"
)

// TestOwnerShareBoundsOneOwnerNotTheOthers: an owner that holds
// OwnerMax leases, or leases covering OwnerBytes, is refused further
// grants (counted as OwnerFull, not Full) while another owner is still
// granted; each of its releases, expiries or its end makes room again.
// An owner with no live lease is granted one larger than OwnerBytes.
func TestOwnerShareBoundsOneOwnerNotTheOthers(t *testing.T) {
	l := newLender()
	c := &clock{t: time.Unix(1000, 0)}
	tb, err := New(Options{Lender: l, Capacity: 16, TTL: time.Hour, Now: c.now, OwnerMax: 3, OwnerBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	loans := uint64(0)
	grant := func(owner, n uint64) (ok bool) {
		loans++
		loan := l.lend(loans)
		if _, _, ok = tb.Grant(owner, loan, n); !ok {
			tb.lender.Return(loan)
		}
		return ok
	}
	// By count: three small leases, then a refusal.
	for i := range 3 {
		if !grant(1, 10) {
			t.Fatalf("owner 1's lease %d of 3 refused", i+1)
		}
	}
	if grant(1, 1) {
		t.Fatal("owner 1 was granted a fourth lease past OwnerMax 3")
	}
	if !grant(2, 10) {
		t.Fatal("owner 2 was refused while owner 1 held its share")
	}
	if st := tb.Stats(); st.OwnerFull != 1 || st.Full != 0 {
		t.Fatalf("stats %+v: want 1 owner-full refusal and no full-table one", st)
	}
	// Ending owner 1 makes room for it again.
	tb.ReleaseOwner(1)
	// By bytes: 60 + 40 fit, 1 more does not.
	if !grant(1, 60) || !grant(1, 40) {
		t.Fatal("owner 1 refused within its 100 bytes")
	}
	if grant(1, 1) {
		t.Fatal("owner 1 was granted a lease past its 100 bytes")
	}
	// Expiry makes room.
	c.add(2 * time.Hour)
	tb.Expire(c.now())
	// Alone, a lease larger than the share is granted; then nothing more.
	if !grant(1, 500) {
		t.Fatal("owner 1 with no live lease was refused one value larger than OwnerBytes")
	}
	if grant(1, 1) {
		t.Fatal("owner 1 was granted a lease while one lease already covered more than OwnerBytes")
	}
	if st := tb.Stats(); st.OwnerFull != 3 {
		t.Fatalf("stats %+v: want 3 owner-full refusals", st)
	}
	tb.Close()
	if l.outstanding() != 0 || l.bad.Load() != 0 {
		t.Fatalf("%d loans outstanding, %d bad returns", l.outstanding(), l.bad.Load())
	}
}
