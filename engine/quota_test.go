package engine_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/file"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

const (
	tenantA = 0xA000000000000001
	tenantB = 0xB000000000000002
)

func tkey(tenant uint64, i int) wire.BlockKey {
	k := wire.BlockKey{Tenant: tenant}
	copy(k.ID[:], fmt.Sprintf("key-%010d", i))
	return k
}

// quotaEngine is the engine the quota tests run over; each test runs
// once per engine (eachEngine), since both must account committed bytes.
var quotaEngine = "file"

func eachEngine(t *testing.T, f func(t *testing.T)) {
	for _, name := range []string{"file", "slab"} {
		t.Run(name, func(t *testing.T) {
			quotaEngine = name
			f(t)
		})
	}
}

// quotaGroup opens engines on two disks under dir, all reporting to q.
func quotaGroup(t *testing.T, dir string, capacity uint64, q *engine.Quotas) *engine.Group {
	t.Helper()
	var engines []engine.StoreEngine
	var names []string
	for _, d := range []string{"d0", "d1"} {
		p := filepath.Join(dir, d)
		var e engine.StoreEngine
		var err error
		if quotaEngine == "slab" {
			// Extents of an eighth of the capacity, so several size
			// classes coexist on a small test disk.
			ext := max(capacity/8/4096*4096, 4096)
			e, err = slab.Open(slab.Options{Dir: p, CapacityBytes: capacity / ext * ext, ExtentBytes: ext, Accounting: q})
		} else {
			e, err = file.Open(file.Options{Dir: p, CapacityBytes: capacity, Accounting: q})
		}
		if err != nil {
			t.Fatal(err)
		}
		engines, names = append(engines, e), append(names, p)
	}
	g, err := engine.NewGroup(engines, names)
	if err != nil {
		t.Fatal(err)
	}
	g.SetQuotas(q)
	return g
}

// storedBytes sums, per tenant, what the group really holds for keys.
func storedBytes(g *engine.Group, keys []wire.BlockKey) map[uint64]int64 {
	out := map[uint64]int64{}
	for _, k := range keys {
		if n, err := g.Exist(k); err == nil {
			out[k.Tenant] += int64(n)
		}
	}
	return out
}

func wantStatus(t *testing.T, err error, want wire.Status, what string) {
	t.Helper()
	if got := wire.StatusOf(err); got != want {
		t.Fatalf("%s: got %v, want %s", what, err, want)
	}
}

func TestQuotaScalar(t *testing.T) { eachEngine(t, testQuotaScalar) }

func testQuotaScalar(t *testing.T) {
	q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 10000})
	g := quotaGroup(t, t.TempDir(), 1<<30, q)
	defer g.Close()
	v := make([]byte, 4000)
	wantStatus(t, g.Put(tkey(tenantA, 1), v), wire.StatusOK, "first 4000")
	wantStatus(t, g.Put(tkey(tenantA, 2), v), wire.StatusOK, "second 4000")
	wantStatus(t, g.Put(tkey(tenantA, 3), v), wire.StatusQuotaExceeded, "third 4000 over 10000")
	// Re-putting a stored key adds nothing and is admitted; growing it by
	// more than what is left is not.
	wantStatus(t, g.Put(tkey(tenantA, 1), v), wire.StatusOK, "overwrite same size")
	wantStatus(t, g.Put(tkey(tenantA, 1), make([]byte, 6001)), wire.StatusQuotaExceeded, "grow past quota")
	wantStatus(t, g.Put(tkey(tenantA, 1), make([]byte, 6000)), wire.StatusOK, "grow to exactly the quota")
	// An unlimited tenant is never refused.
	wantStatus(t, g.Put(tkey(tenantB, 1), make([]byte, 50000)), wire.StatusOK, "unlimited tenant")
	if got := q.Used(tenantA); got != 10000 {
		t.Fatalf("tenant A uses %d, want 10000", got)
	}
	wantStatus(t, g.Remove(tkey(tenantA, 2)), wire.StatusOK, "remove")
	if got := q.Used(tenantA); got != 6000 {
		t.Fatalf("after remove tenant A uses %d, want 6000", got)
	}
	wantStatus(t, g.Put(tkey(tenantA, 3), v), wire.StatusOK, "fits again after remove")
}

// TestQuotaRefusalNamesTenant: a refusal names the tenant by the name it
// was listed by (SetNames) and its hash, or by the hash alone.
func TestQuotaRefusalNamesTenant(t *testing.T) {
	quotaEngine = "file"
	q := engine.NewQuotas(100, map[uint64]uint64{tenantA: 100})
	q.SetNames(map[uint64]string{tenantA: "acme"})
	g := quotaGroup(t, t.TempDir(), 1<<30, q)
	defer g.Close()
	err := g.Put(tkey(tenantA, 1), make([]byte, 101))
	if want := fmt.Sprintf(`tenant "acme" (0x%016x)`, uint64(tenantA)); wire.StatusOf(err) != wire.StatusQuotaExceeded || !strings.Contains(err.Error(), want) {
		t.Errorf("refusal of a tenant listed by name: %v; want %s", err, want)
	}
	err = g.Put(tkey(tenantB, 1), make([]byte, 101))
	if want := fmt.Sprintf("tenant 0x%016x:", uint64(tenantB)); wire.StatusOf(err) != wire.StatusQuotaExceeded || !strings.Contains(err.Error(), want) {
		t.Errorf("refusal of an unlisted tenant: %v; want %s", err, want)
	}
	if got := q.Label(tenantA); got != "acme" {
		t.Errorf("Label of a named tenant: %q", got)
	}
}

func TestQuotaDefaultAppliesToUnlisted(t *testing.T) {
	eachEngine(t, testQuotaDefaultAppliesToUnlisted)
}

func testQuotaDefaultAppliesToUnlisted(t *testing.T) {
	q := engine.NewQuotas(5000, map[uint64]uint64{tenantA: 0})
	g := quotaGroup(t, t.TempDir(), 1<<30, q)
	defer g.Close()
	wantStatus(t, g.Put(tkey(tenantB, 1), make([]byte, 5001)), wire.StatusQuotaExceeded, "unlisted tenant over the default")
	wantStatus(t, g.Put(tkey(tenantA, 1), make([]byte, 50000)), wire.StatusOK, "listed tenant with 0 = unlimited")
}

// TestQuotaBatchPerItem: one tenant's items are refused past its quota in
// batch order while another tenant's items in the same batch are stored.
func TestQuotaBatchPerItem(t *testing.T) { eachEngine(t, testQuotaBatchPerItem) }

func testQuotaBatchPerItem(t *testing.T) {
	q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 8000})
	g := quotaGroup(t, t.TempDir(), 1<<30, q)
	defer g.Close()
	keys := []wire.BlockKey{tkey(tenantA, 1), tkey(tenantB, 1), tkey(tenantA, 2), tkey(tenantA, 3), tkey(tenantB, 2), tkey(tenantA, 1)}
	vals := [][]byte{make([]byte, 4000), make([]byte, 90000), make([]byte, 4000), make([]byte, 4000), make([]byte, 10), make([]byte, 4000)}
	errs := make([]error, len(keys))
	g.PutBatch(keys, vals, errs)
	want := []wire.Status{wire.StatusOK, wire.StatusOK, wire.StatusOK, wire.StatusQuotaExceeded, wire.StatusOK, wire.StatusOK}
	for i := range keys {
		wantStatus(t, errs[i], want[i], fmt.Sprintf("item %d", i))
	}
	if got := q.Used(tenantA); got != 8000 {
		t.Fatalf("tenant A uses %d, want 8000", got)
	}
	if _, err := g.Exist(tkey(tenantA, 3)); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatal("a refused batch item was stored")
	}
}

// TestQuotaConcurrentNeverOversubscribes races many PUTs of one tenant.
func TestQuotaConcurrentNeverOversubscribes(t *testing.T) {
	eachEngine(t, testQuotaConcurrentNeverOversubscribes)
}

func testQuotaConcurrentNeverOversubscribes(t *testing.T) {
	const limit = 64 * 1000
	q := engine.NewQuotas(0, map[uint64]uint64{tenantA: limit})
	g := quotaGroup(t, t.TempDir(), 1<<30, q)
	defer g.Close()
	var wg sync.WaitGroup
	var keys []wire.BlockKey
	for w := 0; w < 8; w++ {
		for i := 0; i < 20; i++ {
			keys = append(keys, tkey(tenantA, w*100+i))
		}
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				k := tkey(tenantA, w*100+i)
				if i%2 == 0 {
					_ = g.Put(k, make([]byte, 1000))
				} else {
					errs := make([]error, 1)
					g.PutBatch([]wire.BlockKey{k}, [][]byte{make([]byte, 1000)}, errs)
				}
			}
		})
	}
	wg.Wait()
	stored := storedBytes(g, keys)[tenantA]
	if stored != limit || q.Used(tenantA) != stored {
		t.Fatalf("stored %d, accounted %d, limit %d", stored, q.Used(tenantA), limit)
	}
}

// TestQuotaAccountingThroughEvictionAndRestart: committed bytes follow
// eviction, and a restart rebuilds them from what is on disk.
func TestQuotaAccountingThroughEvictionAndRestart(t *testing.T) {
	eachEngine(t, testQuotaAccountingThroughEvictionAndRestart)
}

func testQuotaAccountingThroughEvictionAndRestart(t *testing.T) {
	dir := t.TempDir()
	q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 1 << 30})
	g := quotaGroup(t, dir, 40000, q) // two disks of 40000 bytes: eviction must happen
	var keys []wire.BlockKey
	for i := 0; i < 60; i++ {
		for _, tn := range []uint64{tenantA, tenantB} {
			k := tkey(tn, i)
			keys = append(keys, k)
			if err := g.Put(k, make([]byte, 1000+i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if g.Stats().Evictions == 0 {
		t.Fatal("no eviction happened; the test proves nothing")
	}
	check := func(when string, q *engine.Quotas, g *engine.Group) {
		t.Helper()
		stored := storedBytes(g, keys)
		for _, tn := range []uint64{tenantA, tenantB} {
			if q.Used(tn) != stored[tn] {
				t.Fatalf("%s: tenant %x accounted %d, stored %d", when, tn, q.Used(tn), stored[tn])
			}
		}
	}
	check("after eviction", q, g)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	q2 := engine.NewQuotas(0, map[uint64]uint64{tenantA: 1 << 30})
	g2 := quotaGroup(t, dir, 40000, q2)
	defer g2.Close()
	check("after restart", q2, g2)
	if q2.Used(tenantA) == 0 {
		t.Fatal("restart rebuilt no usage")
	}
}

// failingEngine fails Put of one key and passes everything else on.
type failingEngine struct {
	engine.StoreEngine
	fail wire.BlockKey
}

func (f *failingEngine) Put(k wire.BlockKey, v []byte) error {
	if k == f.fail {
		return fmt.Errorf("injected write failure: %w", wire.StatusIOError)
	}
	return f.StoreEngine.Put(k, v)
}

func (f *failingEngine) PutBatch(ks []wire.BlockKey, vs [][]byte, errs []error) {
	for i := range ks {
		errs[i] = f.Put(ks[i], vs[i])
	}
}

// TestQuotaBatchShrinkCreditNotSpentBeforeItLands: a batch that shrinks
// one value and adds another that fits only in the bytes freed must not
// store the new one when the shrinking write fails: the tenant would end
// past its quota. Freed bytes count from the next request on.
func TestQuotaBatchShrinkCreditNotSpentBeforeItLands(t *testing.T) {
	q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 10000})
	dir := t.TempDir()
	e, err := file.Open(file.Options{Dir: filepath.Join(dir, "d0"), CapacityBytes: 1 << 30, Accounting: q})
	if err != nil {
		t.Fatal(err)
	}
	a, b := tkey(tenantA, 1), tkey(tenantA, 2)
	fe := &failingEngine{StoreEngine: e, fail: a}
	g, err := engine.NewGroup([]engine.StoreEngine{fe}, []string{"d0"})
	if err != nil {
		t.Fatal(err)
	}
	g.SetQuotas(q)
	defer g.Close()
	if err := e.Put(a, make([]byte, 10000)); err != nil { // stored before the failure
		t.Fatal(err)
	}
	errs := make([]error, 2)
	g.PutBatch([]wire.BlockKey{a, b}, [][]byte{make([]byte, 1000), make([]byte, 9000)}, errs)
	if errs[0] == nil {
		t.Fatal("the injected failure did not fail the shrinking item")
	}
	if used := q.Used(tenantA); used > 10000 {
		t.Fatalf("tenant A uses %d bytes, past its 10000-byte quota (items: %v, %v)", used, errs[0], errs[1])
	}
}

// TestQuotaOfExabytesIsLarge: a quota of 2^63 bytes or more (an operator's
// "16EiB" for practically unlimited) admits PUTs; it refused every one.
func TestQuotaOfExabytesIsLarge(t *testing.T) {
	for _, limit := range []uint64{1 << 63, ^uint64(0)} {
		q := engine.NewQuotas(limit, nil)
		g := quotaGroup(t, t.TempDir(), 1<<30, q)
		if err := g.Put(tkey(tenantA, 1), make([]byte, 100)); err != nil {
			t.Fatalf("quota %d: %v", limit, err)
		}
		errs := make([]error, 1)
		g.PutBatch([]wire.BlockKey{tkey(tenantA, 2)}, [][]byte{make([]byte, 100)}, errs)
		if errs[0] != nil {
			t.Fatalf("quota %d, batch: %v", limit, errs[0])
		}
		g.Close()
	}
}

// gatedEngine holds every Put of one key inside the engine until open is
// closed, as a slow disk would, and says when one has entered.
type gatedEngine struct {
	engine.StoreEngine
	gated   wire.BlockKey
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedEngine) Put(k wire.BlockKey, v []byte) error {
	if k == g.gated {
		g.entered <- struct{}{}
		<-g.open
	}
	return g.StoreEngine.Put(k, v)
}

func (g *gatedEngine) PutBatch(ks []wire.BlockKey, vs [][]byte, errs []error) {
	for i := range ks {
		errs[i] = g.Put(ks[i], vs[i])
	}
}

func gatedGroup(t *testing.T, q *engine.Quotas, gated wire.BlockKey) (*engine.Group, *gatedEngine) {
	t.Helper()
	e, err := file.Open(file.Options{Dir: filepath.Join(t.TempDir(), "d0"), CapacityBytes: 1 << 30, Accounting: q})
	if err != nil {
		t.Fatal(err)
	}
	ge := &gatedEngine{StoreEngine: e, gated: gated, entered: make(chan struct{}, 1), open: make(chan struct{})}
	g, err := engine.NewGroup([]engine.StoreEngine{ge}, []string{"d0"})
	if err != nil {
		t.Fatal(err)
	}
	g.SetQuotas(q)
	t.Cleanup(func() { g.Close() })
	return g, ge
}

// TestQuotaSlowWriteHoldsNoLock: while one PUT of a tenant is stuck in
// its write, the tenant's other PUTs, scalar and batched, are admitted and
// stored (admission used to hold the tenant's lock through the write, so
// this test hung), and what does not fit beside the stuck write is refused
// once it lands, never stored past the quota.
func TestQuotaSlowWriteHoldsNoLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 10000})
		a, b, c, d := tkey(tenantA, 1), tkey(tenantA, 2), tkey(tenantA, 3), tkey(tenantA, 4)
		g, ge := gatedGroup(t, q, a)

		slow := make(chan error, 1)
		go func() { slow <- g.Put(a, make([]byte, 6000)) }()
		<-ge.entered
		if err := g.Put(b, make([]byte, 3000)); err != nil {
			t.Fatalf("PUT beside a stuck write: %v", err)
		}
		errs := make([]error, 1)
		g.PutBatch([]wire.BlockKey{c}, [][]byte{make([]byte, 1000)}, errs)
		if errs[0] != nil {
			t.Fatalf("batch PUT beside a stuck write: %v", errs[0])
		}
		// d fits only if a fails; it must wait for a to land, then be refused.
		late := make(chan error, 1)
		go func() { late <- g.Put(d, make([]byte, 1)) }()
		synctest.Wait() // every goroutine is at its wait: the stuck write, or the turn it waits for
		close(ge.open)
		if err := <-slow; err != nil {
			t.Fatalf("stuck write: %v", err)
		}
		wantStatus(t, <-late, wire.StatusQuotaExceeded, "PUT past the quota once the stuck write landed")
		if used := q.Used(tenantA); used != 10000 {
			t.Fatalf("tenant A uses %d bytes, want its whole quota of 10000", used)
		}
	})
}

// TestQuotaWaitsForWritesInFlightBeforeRefusing: a PUT that fits once a
// write in flight fails is stored, not refused for bytes that never land.
func TestQuotaWaitsForWritesInFlightBeforeRefusing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 10000})
		a, b := tkey(tenantA, 1), tkey(tenantA, 2)
		e, err := file.Open(file.Options{Dir: filepath.Join(t.TempDir(), "d0"), CapacityBytes: 1 << 30, Accounting: q})
		if err != nil {
			t.Fatal(err)
		}
		ge := &gatedEngine{StoreEngine: &failingEngine{StoreEngine: e, fail: a}, gated: a,
			entered: make(chan struct{}, 1), open: make(chan struct{})}
		g, err := engine.NewGroup([]engine.StoreEngine{ge}, []string{"d0"})
		if err != nil {
			t.Fatal(err)
		}
		g.SetQuotas(q)
		defer g.Close()

		failed := make(chan error, 1)
		go func() { failed <- g.Put(a, make([]byte, 8000)) }()
		<-ge.entered
		stored := make(chan error, 1)
		go func() { stored <- g.Put(b, make([]byte, 5000)) }()
		synctest.Wait() // every goroutine is at its wait: the stuck write, or the turn it waits for
		close(ge.open)
		if err := <-failed; err == nil {
			t.Fatal("the injected failure did not fail the first write")
		}
		if err := <-stored; err != nil {
			t.Fatalf("a PUT that fits once the failed write is gone: %v", err)
		}
		if used := q.Used(tenantA); used != 5000 {
			t.Fatalf("tenant A uses %d bytes, want 5000", used)
		}
	})
}

// TestQuotaRemoveTakesItsTurnWithAPut: a REMOVE of a key whose PUT is
// still writing waits for that PUT, so the key ends removed and its bytes
// uncharged (a REMOVE that overtook the PUT would find nothing and the
// PUT would then store the value after all).
func TestQuotaRemoveTakesItsTurnWithAPut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 10000})
		a := tkey(tenantA, 1)
		g, ge := gatedGroup(t, q, a)

		put := make(chan error, 1)
		go func() { put <- g.Put(a, make([]byte, 4000)) }()
		<-ge.entered
		removed := make(chan error, 1)
		go func() { removed <- g.Remove(a) }()
		synctest.Wait() // every goroutine is at its wait: the stuck write, or the turn it waits for
		close(ge.open)
		if err := <-put; err != nil {
			t.Fatal(err)
		}
		if err := <-removed; err != nil {
			t.Fatalf("REMOVE after the PUT it waited for: %v", err)
		}
		if _, err := g.Exist(a); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("the removed key is still there (%v)", err)
		}
		if used := q.Used(tenantA); used != 0 {
			t.Fatalf("tenant A uses %d bytes after its only key was removed", used)
		}
	})
}

// keyGates holds each Put of a gated key inside the engine until its gate
// is closed, and says which key entered.
type keyGates struct {
	engine.StoreEngine
	gate    map[wire.BlockKey]chan struct{}
	entered chan wire.BlockKey
}

func (k *keyGates) Put(key wire.BlockKey, v []byte) error {
	if g, ok := k.gate[key]; ok {
		k.entered <- key
		<-g
	}
	return k.StoreEngine.Put(key, v)
}

// TestQuotaWaiterIsNotStarvedByNewerWrites: a PUT that would fit only if
// the writes in flight failed waits for those, not for the writes other
// clients keep starting after it. Here the tenant always has a write in
// flight (each round starts one, removes an old value and lets the older
// write land), so a waiter that waited for "no write in flight" would
// wait for as long as the churn lasts. The waiter is a scalar PUT, then
// a batch of one.
func TestQuotaWaiterIsNotStarvedByNewerWrites(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "put", true: "batch"}[batch], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testQuotaWaiterIsNotStarved(t, batch) })
		})
	}
}

func testQuotaWaiterIsNotStarved(t *testing.T, batch bool) {
	const rounds = 20
	q := engine.NewQuotas(0, map[uint64]uint64{tenantA: 10000})
	e, err := file.Open(file.Options{Dir: filepath.Join(t.TempDir(), "d0"), CapacityBytes: 1 << 30, Accounting: q})
	if err != nil {
		t.Fatal(err)
	}
	kg := &keyGates{StoreEngine: e, gate: map[wire.BlockKey]chan struct{}{}, entered: make(chan wire.BlockKey, 1)}
	for i := 100; i <= 100+rounds; i++ {
		kg.gate[tkey(tenantA, i)] = make(chan struct{})
	}
	g, err := engine.NewGroup([]engine.StoreEngine{kg}, []string{"d0"})
	if err != nil {
		t.Fatal(err)
	}
	g.SetQuotas(q)
	defer g.Close()
	for i := range 8 {
		if err := g.Put(tkey(tenantA, i), make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	go g.Put(tkey(tenantA, 100), make([]byte, 1000)) // 8000 committed, 1000 in flight
	<-kg.entered
	big := make(chan error, 1)
	go func() {
		if !batch {
			big <- g.Put(tkey(tenantA, 99), make([]byte, 2000))
			return
		}
		errs := make([]error, 1)
		g.PutBatch([]wire.BlockKey{tkey(tenantA, 99)}, [][]byte{make([]byte, 2000)}, errs)
		big <- errs[0]
	}()
	synctest.Wait() // it waits: it would fit if the write in flight failed

	answered := -1
	var bigErr error
	for r := 0; r < rounds && answered < 0; r++ {
		go g.Put(tkey(tenantA, 101+r), make([]byte, 1000)) // a newer write: 2000 in flight
		<-kg.entered
		old := tkey(tenantA, r)
		if r >= 8 {
			old = tkey(tenantA, 100+r-8)
		}
		if err := g.Remove(old); err != nil {
			t.Fatalf("round %d: REMOVE: %v", r, err)
		}
		close(kg.gate[tkey(tenantA, 100+r)]) // the older write lands
		synctest.Wait()
		select {
		case bigErr = <-big:
			answered = r
		default:
		}
		if used := q.Used(tenantA); used > 10000 {
			t.Fatalf("round %d: tenant A uses %d bytes of 10000", r, used)
		}
	}
	for i := 100; i <= 100+rounds; i++ { // let the write still in flight land
		select {
		case <-kg.gate[tkey(tenantA, i)]:
		default:
			close(kg.gate[tkey(tenantA, i)])
		}
	}
	if answered != 0 {
		t.Fatalf("the waiting PUT was answered in round %d of %d (-1: never while the churn lasted), "+
			"want once the one write in flight when it began waiting had landed", answered, rounds)
	}
	wantStatus(t, bigErr, wire.StatusQuotaExceeded, "the waiting PUT")
}
