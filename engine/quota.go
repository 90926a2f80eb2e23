package engine

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dfkv/dfkv/wire"
)

// quotaStripes is the number of tenant admission locks.
const quotaStripes = 256

// Quotas enforces per-tenant byte quotas on one node. The
// limits are fixed at startup; the committed bytes per tenant are learned
// through the Accounting interface the engines call, so they stay right
// through publish, overwrite, eviction, removal and restart rebuild.
//
// Admission reserves: under one of 256 tenant stripe locks it checks a
// PUT's growth against the tenant's committed bytes plus the growth of
// its writes still in flight, records its own growth as in flight, and
// lets the lock go before the write, so a slow disk delays only the
// writes themselves, never another PUT's admission. Two PUTs of one
// tenant cannot both pass the check and together overshoot. A write that
// has landed is counted twice until its reservation is released, so a
// PUT that would fit if the writes in flight failed waits for them to
// land and is refused only if it still does not fit: a tenant can fill
// its quota to the byte under concurrency. It waits for the writes in
// flight when it began waiting and no later ones, so a tenant whose
// other clients keep writing cannot hold it waiting without end; a PUT
// that does not fit beside the committed bytes alone is refused at once.
//
// The growth of a PUT is its size less the size its key already holds,
// read under the lock; it stays true only while nothing else changes that
// key, so PUTs and REMOVEs of one key of a limited tenant take turns (the
// second waits for the first to land). GETs never touch quotas. Quotas
// are per node by design, not a cluster-wide reservation protocol: a
// tenant with quota Q may hold up to Q on every node.
//
// A listed limit of 0 means unlimited (it exempts that tenant from the
// default). A limit lowered below what a tenant already holds applies to
// new bytes only: the tenant is refused until its own removals or
// evictions bring it under; nothing is evicted to meet it.
type Quotas struct {
	def    uint64            // limit of unlisted tenants; 0 = unlimited
	limits map[uint64]uint64 // per-tenant limits; immutable after NewQuotas
	names  map[uint64]string // tenants listed by name; immutable after SetNames

	stripes [quotaStripes]stripe

	mu   sync.RWMutex
	used map[uint64]*atomic.Int64
}

// NewQuotas returns quotas with limits per tenant hash and def for every
// other tenant (0 = unlimited).
func NewQuotas(def uint64, limits map[uint64]uint64) *Quotas {
	l := make(map[uint64]uint64, len(limits))
	for t, v := range limits {
		l[t] = v
	}
	q := &Quotas{def: def, limits: l, used: make(map[uint64]*atomic.Int64)}
	for i := range q.stripes {
		s := &q.stripes[i]
		s.landed.L = &s.mu
		s.reserved = make(map[uint64]int64)
		s.busy = make(map[wire.BlockKey]struct{})
		s.flying = make(map[uint64]struct{})
	}
	return q
}

// stripe is the admission state of the tenants whose hash falls on it.
// mu is never held across storage I/O.
type stripe struct {
	mu       sync.Mutex
	landed   sync.Cond                  // broadcast when a write or removal of the stripe lands
	lands    uint64                     // how many have landed, so a waiter knows one did
	reserved map[uint64]int64           // tenant → growth of its writes in flight
	busy     map[wire.BlockKey]struct{} // keys with a write or removal in flight
	next     uint64                     // number of the next admission that reserves
	flying   map[uint64]struct{}        // numbers of admissions whose writes have not landed
}

// admit records an admission that reserved bytes and returns its number,
// for land.
func (s *stripe) admit() uint64 {
	n := s.next
	s.next++
	s.flying[n] = struct{}{}
	return n
}

// land ends admission n and wakes the waiters. s.mu must be held.
func (s *stripe) land(n uint64) {
	delete(s.flying, n)
	s.signalLanded()
}

// signalLanded wakes the waiters after a write or removal. s.mu must be
// held.
func (s *stripe) signalLanded() {
	s.lands++
	s.landed.Broadcast()
}

// settledBefore reports whether every admission numbered below n has
// landed: a waiter that began waiting when s.next was n has then waited
// for everything it saw in flight. The set is the stripe's writes in
// flight, a handful.
func (s *stripe) settledBefore(n uint64) bool {
	for f := range s.flying {
		if f < n {
			return false
		}
	}
	return true
}

// waitLanded blocks until a write or removal of s lands after lands was
// read. s.mu must be held; it is held again on return.
func (s *stripe) waitLanded(lands uint64) {
	for s.lands == lands {
		s.landed.Wait()
	}
}

// SetNames gives tenants the names an operator listed them by, for Label.
// Call it before q is used.
func (q *Quotas) SetNames(names map[uint64]string) {
	q.names = make(map[uint64]string, len(names))
	for t, n := range names {
		q.names[t] = n
	}
}

// Label names tenant for operators (metric labels, logs): the name it was
// listed by, else its hash as 0x and 16 hex digits, the form the quotas
// file also accepts.
func (q *Quotas) Label(tenant uint64) string {
	if n, ok := q.names[tenant]; ok {
		return n
	}
	return fmt.Sprintf("0x%016x", tenant)
}

// Limit returns the byte quota of tenant; 0 means unlimited.
func (q *Quotas) Limit(tenant uint64) uint64 {
	if v, ok := q.limits[tenant]; ok {
		return v
	}
	return q.def
}

// Listed returns how many tenants have a limit of their own.
func (q *Quotas) Listed() int { return len(q.limits) }

// Committed implements Accounting.
func (q *Quotas) Committed(tenant uint64, delta int64) {
	q.counter(tenant).Add(delta)
}

func (q *Quotas) counter(tenant uint64) *atomic.Int64 {
	q.mu.RLock()
	c := q.used[tenant]
	q.mu.RUnlock()
	if c != nil {
		return c
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if c = q.used[tenant]; c == nil {
		c = new(atomic.Int64)
		q.used[tenant] = c
	}
	return c
}

// Used returns the bytes tenant has committed on this node.
func (q *Quotas) Used(tenant uint64) int64 {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if c := q.used[tenant]; c != nil {
		return c.Load()
	}
	return 0
}

// Usage returns a snapshot of committed bytes per tenant.
func (q *Quotas) Usage() map[uint64]int64 {
	q.mu.RLock()
	defer q.mu.RUnlock()
	out := make(map[uint64]int64, len(q.used))
	for t, c := range q.used {
		out[t] = c.Load()
	}
	return out
}

func (q *Quotas) stripe(tenant uint64) int { return int(tenant % quotaStripes) }

func (q *Quotas) exceeded(tenant uint64, used int64, need, limit uint64) error {
	who := q.Label(tenant)
	if _, named := q.names[tenant]; named {
		who = fmt.Sprintf("%q (0x%016x)", who, tenant) // the name, and the hash metrics of other nodes may show
	}
	return fmt.Errorf("tenant %s: %d bytes committed + %d new exceeds its node quota of %d bytes: %w",
		who, used, need, limit, wire.StatusQuotaExceeded)
}

// SetQuotas makes g enforce q. The engines of g must report to q through
// their Accounting option. Call it before g serves requests.
func (g *Group) SetQuotas(q *Quotas) { g.quotas = q }

// Quotas returns the quotas g enforces, or nil.
func (g *Group) Quotas() *Quotas { return g.quotas }

// cacheWithQuota admits one PUT against its tenant's quota. Only the bytes
// a PUT adds are charged: an overwrite is charged its growth, so re-putting
// a stored key never fails for quota.
func (g *Group) cacheWithQuota(key wire.BlockKey, value []byte) error {
	q := g.quotas
	limit := q.Limit(key.Tenant)
	if limit == 0 {
		return g.of(key).Put(key, value)
	}
	e := g.of(key)
	s := &q.stripes[q.stripe(key.Tenant)]
	s.mu.Lock()
	var (
		need      int64
		waited    bool
		waitUntil uint64 // s.next when it began waiting for writes in flight
	)
	for {
		if _, busy := s.busy[key]; busy {
			s.waitLanded(s.lands)
			continue
		}
		// Committed bytes are read before the key's old size: a value
		// evicted between the two reads then only overstates the need.
		used := q.Used(key.Tenant)
		need = g.growth(e, key, uint64(len(value)))
		inFlight := s.reserved[key.Tenant]
		if need <= 0 || used+inFlight+need <= capOf(limit) {
			break
		}
		if inFlight == 0 || used+need > capOf(limit) || waited && s.settledBefore(waitUntil) {
			s.mu.Unlock()
			return q.exceeded(key.Tenant, used+inFlight, uint64(need), limit)
		}
		if !waited {
			waited, waitUntil = true, s.next
		}
		s.waitLanded(s.lands)
	}
	need = max(need, 0) // bytes a shrinking PUT frees are not free until it lands
	s.reserved[key.Tenant] += need
	s.busy[key] = struct{}{}
	n := s.admit()
	s.mu.Unlock()

	err := e.Put(key, value)

	s.mu.Lock()
	if s.reserved[key.Tenant] -= need; s.reserved[key.Tenant] == 0 {
		delete(s.reserved, key.Tenant)
	}
	delete(s.busy, key)
	s.land(n)
	s.mu.Unlock()
	return err
}

// capOf is a quota as the signed byte counts it is compared with: a limit
// of 2^63 bytes or more (an operator's "16EiB" for "practically
// unlimited") is the largest, not a negative number.
func capOf(limit uint64) int64 { return int64(min(limit, math.MaxInt64)) }

// growth is how many bytes storing n bytes under key adds.
func (g *Group) growth(e StoreEngine, key wire.BlockKey, n uint64) int64 {
	old, err := e.Exist(key)
	if err != nil {
		old = 0
	}
	return int64(n) - int64(old)
}

// cacheBatchWithQuota admits a batch: it locks the unique stripes of the
// limited tenants in ascending order (so two batches never deadlock),
// charges each item's growth against its tenant in batch order, fails the
// items that do not fit with QUOTA_EXCEEDED, reserves the growth of the
// rest, unlocks, and stores them. A batch that meets a key in flight, or
// an item that fits only once its tenant's writes in flight land, lets
// every lock go, waits for a landing and admits afresh.
func (g *Group) cacheBatchWithQuota(keys []wire.BlockKey, values [][]byte, errs []error) {
	q := g.quotas
	var locked []int
	for _, k := range keys {
		if q.Limit(k.Tenant) != 0 {
			locked = append(locked, q.stripe(k.Tenant))
		}
	}
	if len(locked) == 0 {
		g.cacheBatch(keys, values, errs)
		return
	}
	slices.Sort(locked)
	locked = slices.Compact(locked)
	unlockAll := func() {
		for _, s := range locked {
			q.stripes[s].mu.Unlock()
		}
	}
	// waitThenRetry lets every lock go and waits for a landing on stripe
	// s, which the caller saw as lands.
	waitThenRetry := func(s *stripe, lands uint64) {
		unlockAll()
		s.mu.Lock()
		s.waitLanded(lands)
		s.mu.Unlock()
	}

	var (
		pending   map[uint64]int64      // tenant → growth admitted in this batch
		admit     []int                 // indexes of the items to store
		mine      map[wire.BlockKey]int // limited keys of this batch → their stripe
		waitUntil = map[int]uint64{}    // stripe → its next when the batch began waiting on it
	)
admission:
	for {
		for _, si := range locked {
			q.stripes[si].mu.Lock()
		}
		mine = make(map[wire.BlockKey]int)
		for _, k := range keys {
			if q.Limit(k.Tenant) == 0 {
				continue
			}
			s := &q.stripes[q.stripe(k.Tenant)]
			if _, busy := s.busy[k]; busy {
				waitThenRetry(s, s.lands)
				continue admission
			}
			mine[k] = q.stripe(k.Tenant)
		}
		pending = make(map[uint64]int64)
		used := make(map[uint64]int64) // tenant → committed bytes, read before any of its keys' sizes
		// key → the largest size it may end with after this batch's items
		// admitted so far: its stored size or an admitted item's. Any of
		// them may be the one that lands last, so a repeated key is
		// charged its growth above this peak, never above the size an
		// earlier item leaves (a shrink that may fail frees nothing).
		peaks := make(map[wire.BlockKey]int64)
		admit = admit[:0]
		for i, k := range keys {
			errs[i] = nil
			limit := q.Limit(k.Tenant)
			if limit == 0 {
				admit = append(admit, i)
				continue
			}
			s := &q.stripes[q.stripe(k.Tenant)]
			if _, ok := used[k.Tenant]; !ok {
				used[k.Tenant] = q.Used(k.Tenant)
			}
			n := int64(len(values[i]))
			var need int64
			if peak, ok := peaks[k]; ok {
				need = n - peak
			} else {
				need = g.growth(g.of(k), k, uint64(n))
				peaks[k] = n - need // the stored size
			}
			inFlight := s.reserved[k.Tenant]
			total := used[k.Tenant] + inFlight + pending[k.Tenant]
			if need > 0 && total+need > capOf(limit) {
				// Wait as a scalar PUT does: only if the item would fit
				// were the writes in flight to fail, and only for those in
				// flight when the batch began waiting on the stripe.
				si := q.stripe(k.Tenant)
				until, waited := waitUntil[si]
				if inFlight > 0 && used[k.Tenant]+pending[k.Tenant]+need <= capOf(limit) && !(waited && s.settledBefore(until)) {
					if !waited {
						waitUntil[si] = s.next
					}
					waitThenRetry(s, s.lands)
					continue admission
				}
				errs[i] = q.exceeded(k.Tenant, total, uint64(need), limit)
				continue
			}
			// Only growth is counted: bytes a shrinking item frees are not
			// free until its write succeeds, and it may fail while the items
			// admitted on its credit succeed.
			pending[k.Tenant] += max(need, 0)
			peaks[k] = max(peaks[k], n)
			admit = append(admit, i)
		}
		break
	}
	for t, n := range pending {
		q.stripes[q.stripe(t)].reserved[t] += n
	}
	for k, si := range mine {
		q.stripes[si].busy[k] = struct{}{}
	}
	admitted := make(map[int]uint64, len(locked))
	for _, si := range locked {
		admitted[si] = q.stripes[si].admit()
	}
	unlockAll()

	if len(admit) == len(keys) {
		g.cacheBatch(keys, values, errs)
	} else {
		ak := make([]wire.BlockKey, len(admit))
		av := make([][]byte, len(admit))
		ae := make([]error, len(admit))
		for j, i := range admit {
			ak[j], av[j] = keys[i], values[i]
		}
		g.cacheBatch(ak, av, ae)
		for j, i := range admit {
			errs[i] = ae[j]
		}
	}

	for _, si := range locked {
		s := &q.stripes[si]
		s.mu.Lock()
		for t, n := range pending {
			if q.stripe(t) != si {
				continue
			}
			if s.reserved[t] -= n; s.reserved[t] == 0 {
				delete(s.reserved, t)
			}
		}
		for k, ks := range mine {
			if ks == si {
				delete(s.busy, k)
			}
		}
		s.land(admitted[si])
		s.mu.Unlock()
	}
}

// removeWithQuota takes its turn with the PUTs of the same key, so an
// admission never computes growth against a value being removed; it
// holds no lock while the engine removes.
func (g *Group) removeWithQuota(key wire.BlockKey) error {
	q := g.quotas
	if q.Limit(key.Tenant) == 0 {
		return g.of(key).Remove(key)
	}
	s := &q.stripes[q.stripe(key.Tenant)]
	s.mu.Lock()
	for {
		if _, busy := s.busy[key]; !busy {
			break
		}
		s.waitLanded(s.lands)
	}
	s.busy[key] = struct{}{}
	s.mu.Unlock()

	err := g.of(key).Remove(key)

	s.mu.Lock()
	delete(s.busy, key)
	s.signalLanded()
	s.mu.Unlock()
	return err
}
