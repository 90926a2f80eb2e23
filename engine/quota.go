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
// Admission takes one of 256 tenant stripes and holds it through the
// storage write, so two PUTs of one tenant cannot both pass the check and
// together overshoot. GETs never touch quotas. Quotas are per node by
// design, not a cluster-wide reservation protocol: a tenant with quota Q
// may hold up to Q on every node.
//
// A listed limit of 0 means unlimited (it exempts that tenant from the
// default). A limit lowered below what a tenant already holds applies to
// new bytes only: the tenant is refused until its own removals or
// evictions bring it under; nothing is evicted to meet it.
type Quotas struct {
	def    uint64            // limit of unlisted tenants; 0 = unlimited
	limits map[uint64]uint64 // per-tenant limits; immutable after NewQuotas
	names  map[uint64]string // tenants listed by name; immutable after SetNames

	stripes [quotaStripes]sync.Mutex

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
	return &Quotas{def: def, limits: l, used: make(map[uint64]*atomic.Int64)}
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
	mu := &q.stripes[q.stripe(key.Tenant)]
	mu.Lock()
	defer mu.Unlock()
	e := g.of(key)
	need := g.growth(e, key, uint64(len(value)))
	if used := q.Used(key.Tenant); need > 0 && used+need > capOf(limit) {
		return q.exceeded(key.Tenant, used, uint64(need), limit)
	}
	return e.Put(key, value)
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
// items that do not fit with QUOTA_EXCEEDED, stores the rest, and only
// then unlocks.
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
	for _, s := range locked {
		q.stripes[s].Lock()
	}
	defer func() {
		for _, s := range locked {
			q.stripes[s].Unlock()
		}
	}()
	pending := make(map[uint64]int64)      // tenant → bytes admitted in this batch
	sizes := make(map[wire.BlockKey]int64) // key → size admitted earlier in this batch
	admit := make([]int, 0, len(keys))
	for i, k := range keys {
		limit := q.Limit(k.Tenant)
		if limit == 0 {
			admit = append(admit, i)
			continue
		}
		n := int64(len(values[i]))
		var need int64
		if prev, ok := sizes[k]; ok {
			need = n - prev
		} else {
			need = g.growth(g.of(k), k, uint64(n))
		}
		used := q.Used(k.Tenant) + pending[k.Tenant]
		if need > 0 && used+need > capOf(limit) {
			errs[i] = q.exceeded(k.Tenant, used, uint64(need), limit)
			continue
		}
		// Only growth is counted: bytes a shrinking item frees are not
		// free until its write succeeds, and it may fail while the items
		// admitted on its credit succeed.
		pending[k.Tenant] += max(need, 0)
		sizes[k] = n
		admit = append(admit, i)
	}
	if len(admit) == len(keys) {
		g.cacheBatch(keys, values, errs)
		return
	}
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

// removeWithQuota serialises a REMOVE with PUTs of the same tenant stripe,
// so an admission never computes growth against a value being removed.
func (g *Group) removeWithQuota(key wire.BlockKey) error {
	q := g.quotas
	if q.Limit(key.Tenant) == 0 {
		return g.of(key).Remove(key)
	}
	mu := &q.stripes[q.stripe(key.Tenant)]
	mu.Lock()
	defer mu.Unlock()
	return g.of(key).Remove(key)
}
