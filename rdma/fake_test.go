package rdma

// Not hardware tests: they check that the Fake keeps the verbs rules the
// transport's tests rely on.

import (
	"bytes"
	"testing"
)

// fakePair is two connected QPs on two devices of one Fake, with a
// region registered on each side.
func fakePair(t *testing.T, remoteAccess Access) (q QP, local, remote []byte, lmr, rmr MR) {
	t.Helper()
	f := NewFake("a", "b")
	da, _ := f.Open("a")
	db, _ := f.Open("b")
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	qa, err := pa.CreateQP(8)
	if err != nil {
		t.Fatal(err)
	}
	qb, _ := pb.CreateQP(8)
	if err := qa.Connect(qb.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(qa.Endpoint()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qa.Close(); qb.Close() })
	local, remote = make([]byte, 64), bytes.Repeat([]byte{7}, 64)
	if lmr, err = pa.Register(local, AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if rmr, err = pb.Register(remote, remoteAccess); err != nil {
		t.Fatal(err)
	}
	return qa, local, remote, lmr, rmr
}

// run posts wrs and returns their completions' statuses, in order.
func run(t *testing.T, q QP, wrs ...WorkRequest) []WCStatus {
	t.Helper()
	for _, wr := range wrs {
		if err := q.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	var out []WCStatus
	var cqe [4]Completion
	for len(out) < len(wrs) {
		n, _ := q.Poll(cqe[:])
		for _, e := range cqe[:n] {
			if e.ID != wrs[len(out)].ID {
				t.Fatalf("completion %d for work request %d: out of order", e.ID, wrs[len(out)].ID)
			}
			out = append(out, e.Status)
		}
	}
	return out
}

// TestFakeRemoteAccess: a READ with a wrong rkey, out of the region, or
// of a deregistered region completes with a remote access error and
// writes nothing; the QP is then in the error state (later requests are
// flushed). A WRITE to a region without remote write is refused too.
func TestFakeRemoteAccess(t *testing.T) {
	f := func(name string, mutate func(wr *WorkRequest, rmr MR), want WCStatus) {
		t.Helper()
		q, local, remote, lmr, rmr := fakePair(t, AccessRemoteRead)
		wr := WorkRequest{ID: 1, Op: OpRead, Local: local[:16], LKey: lmr.LKey(), Remote: rmr.Addr() + 8, RKey: rmr.RKey()}
		mutate(&wr, rmr)
		next := WorkRequest{ID: 2, Op: OpRead, Local: local[16:32], LKey: lmr.LKey(), Remote: rmr.Addr(), RKey: rmr.RKey()}
		got := run(t, q, wr, next)
		if got[0] != want || (want != WCSuccess && got[1] != WCFlushed) {
			t.Errorf("%s: %v, want %v then flushed", name, got, want)
		}
		if want != WCSuccess && (!bytes.Equal(local, make([]byte, 64)) || !bytes.Equal(remote, bytes.Repeat([]byte{7}, 64))) {
			t.Errorf("%s: memory touched", name)
		}
	}
	f("good", func(*WorkRequest, MR) {}, WCSuccess)
	f("wrong rkey", func(wr *WorkRequest, _ MR) { wr.RKey ^= 0x100 }, WCRemoteAccess)
	f("lkey as rkey", func(wr *WorkRequest, rmr MR) { wr.RKey = rmr.LKey() }, WCRemoteAccess)
	f("past the end", func(wr *WorkRequest, rmr MR) { wr.Remote = rmr.Addr() + 56 }, WCRemoteAccess)
	f("before the start", func(wr *WorkRequest, rmr MR) { wr.Remote = rmr.Addr() - 1 }, WCRemoteAccess)
	f("deregistered", func(_ *WorkRequest, rmr MR) { rmr.Deregister() }, WCRemoteAccess)
	f("write to a read-only region", func(wr *WorkRequest, _ MR) { wr.Op = OpWrite }, WCRemoteAccess)
	f("wrong lkey", func(wr *WorkRequest, _ MR) { wr.LKey ^= 0x100 }, WCLocalProtection)
}

// TestFakeOrder: a QP's READs and WRITEs execute in order: a READ posted
// after a WRITE to the same bytes sees the written bytes.
func TestFakeOrder(t *testing.T) {
	q, local, remote, lmr, rmr := fakePair(t, AccessRemoteRead|AccessRemoteWrite)
	copy(local, "hello, remote")
	got := run(t, q,
		WorkRequest{ID: 1, Op: OpWrite, Local: local[:13], LKey: lmr.LKey(), Remote: rmr.Addr(), RKey: rmr.RKey()},
		WorkRequest{ID: 2, Op: OpRead, Local: local[32:45], LKey: lmr.LKey(), Remote: rmr.Addr(), RKey: rmr.RKey()})
	if got[0] != WCSuccess || got[1] != WCSuccess || string(local[32:45]) != "hello, remote" || string(remote[:13]) != "hello, remote" {
		t.Fatalf("%v: local %q remote %q", got, local[32:45], remote[:13])
	}
}
