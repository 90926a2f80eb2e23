package ramtier

import (
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

// Name is the engine name reported in Stats.
const Name = "ramtier"

// Defaults for the zero values of Options.
const (
	// DefaultExtentBytes is the extent size: 4 MiB values (the largest
	// common KV block) get four per extent, and anything larger goes to a
	// dedicated allocation.
	DefaultExtentBytes = 16 << 20
	// DefaultDirtyWatermark is the fraction of the RAM budget that may be
	// dirty (admitted, not yet flushed) before new keys get CACHE_FULL.
	DefaultDirtyWatermark = 0.8
	// DefaultFlushThreads is the number of flush workers.
	DefaultFlushThreads = 4
	// NoLargeReserve as Options.LargeReserveBytes gives the whole budget to
	// the arena: values larger than one extent bypass RAM.
	NoLargeReserve = -1
	// DefaultShards is the number of metadata lock shards.
	DefaultShards = 8
	// MaxShards bounds Options.Shards.
	MaxShards = 64
	// minShardExtents is the fewest extents a shard should hold: fewer,
	// and one shard's allocator runs out of room for a size class while
	// another has plenty, so the shard count is halved until each holds
	// at least this many (or one shard is left).
	minShardExtents = 32
)

// Arena memory policies (Options.NUMA).
const (
	NUMAInterleave = "interleave"
	NUMAOff        = "off"
)

// Write and acknowledgement modes of the RAM tier.
const (
	ModeWriteBack   = "writeback"
	ModeWriteAround = "writearound"
	AckRAM          = "ram"
	AckDisk         = "disk"
)

// flushAttempts is how often a flush is tried before the tier turns
// unhealthy; flushBackoff is the pause before the first retry, doubled for
// each later one. Variables so tests can shorten them.
var (
	flushAttempts = 4
	flushBackoff  = 5 * time.Millisecond
)

// stripes is the number of foreground key stripes (keyTurns): a fixed
// 1,024, so a request allocates nothing to take its key's turn.
const stripes = 1024

// Options configures Open.
type Options struct {
	// Backing is the engine behind the RAM tier (normally an engine.Group
	// over slab disks). Required. The tier owns it: Close closes it.
	Backing engine.StoreEngine
	// Bytes is the hard RAM budget: the arena plus the large-value
	// reserve. Required.
	Bytes uint64
	// ExtentBytes is the arena extent size (a multiple of 4 KiB); values up
	// to this size live in arena slots. 0 means DefaultExtentBytes.
	ExtentBytes uint64
	// LargeReserveBytes is the part of Bytes kept for dedicated allocations
	// of values larger than one extent. 0 means two extents;
	// NoLargeReserve means none (such values bypass RAM).
	LargeReserveBytes int64
	// MaxValueBytes is the largest value accepted (larger: TOO_LARGE), so
	// a value the backing would refuse is never acknowledged from RAM. 0
	// means the backing's CapacityBytes. The caller must ensure the
	// backing accepts every value up to it (a Group's CapacityBytes is the
	// sum of its disks, so the server passes max_block_bytes): a flush the
	// backing refuses drops the value.
	MaxValueBytes uint64
	// Mode is ModeWriteBack (default) or ModeWriteAround.
	Mode string
	// AckMode is AckRAM (default for write-back: a PUT returns once visible
	// in RAM) or AckDisk (a PUT returns once its flush committed).
	// Write-around always acknowledges from disk.
	AckMode string
	// DirtyWatermark is the fraction of Bytes that may be dirty before a
	// PUT of a new key gets CACHE_FULL (0 means DefaultDirtyWatermark). It
	// applies to AckRAM only. The operator's "watermark 0" means disk
	// acknowledgement; the config layer maps it to AckDisk.
	DirtyWatermark float64
	// FlushThreads is the number of flush workers; 0 means
	// DefaultFlushThreads. The tier runs at least one per flush queue (one
	// queue per disk when DiskOf is set) and reports the actual count in
	// RAMStats.FlushThreads.
	FlushThreads int
	// FlushDelay is how long a write-back value stays dirty before its
	// flush may start, so a key rewritten or removed within it is written
	// to the backing once or not at all (0: at once). It is waived while
	// dirty bytes are past half the watermark, while Flush or Close
	// waits, and with AckDisk (every PUT waits for its flush). The delay
	// runs from a key's first dirty write: a generation that supersedes a
	// queued one takes its place and age, so a key rewritten faster than
	// the delay still reaches the disk once per delay.
	FlushDelay time.Duration
	// Shards is the number of metadata lock shards (1–64; 0 means
	// DefaultShards). Each shard owns a contiguous run of extents and the
	// keys that hash to it; the count is halved while a shard would hold
	// fewer than minShardExtents extents.
	Shards int
	// NUMA is the arena's memory policy: NUMAInterleave (default: pages
	// spread over every online node, so no node's memory bandwidth is the
	// ceiling) or NUMAOff (the kernel's default, local allocation).
	NUMA string
	// ReadCoalesce makes concurrent misses of one key (whole values or
	// ranges) share one backing read (the followers wait for the leader's
	// fill). Off, every miss reads the backing on its own.
	ReadCoalesce bool
	// DiskOf, when set, names the disk index (0 ≤ i < Disks) that holds a
	// key; the tier then keeps one flush queue per disk, so a slow disk
	// backs up only its own flushes. Nil means one queue.
	DiskOf func(wire.BlockKey) int
	// Disks is the number of disks DiskOf returns indexes into.
	Disks int
	// Limited, when set, reports whether a tenant has a byte quota. Such
	// a tenant's PUTs bypass write-back and go to the backing
	// synchronously, so the PUT result is the quota admission itself
	// rather than a flush that could later be refused.
	Limited func(tenant uint64) bool
	// SharedArena maps the arena from a memory file (ArenaFile) that the
	// node shares with clients on its host, instead of anonymous memory.
	SharedArena bool
	// NoDisk says the backing keeps nothing (engine.Discard: an embedded
	// store without a disk), so RAM is the only copy: a PUT RAM cannot
	// take (larger than it holds, every slot pinned, a tenant with a
	// quota) is refused instead of handed to the backing, where it would
	// be acknowledged and lost.
	NoDisk bool
	// WarmWorkers is how many goroutines fault the arena in after Open
	// returns (0: one per core the Go runtime uses).
	WarmWorkers int
	// Logger receives operator events; nil discards them.
	Logger *slog.Logger
}

// Tier is the RAM hot tier: an engine.StoreEngine that serves from a RAM
// arena and keeps Backing as the durable copy. It is safe for concurrent
// use. Accounting (quotas, tenant metrics) is the backing engine's job: the
// tier only moves bytes between RAM and the backing.
//
// Slot lifecycle (the state machine is the allocator's pin refcount):
//
//	RESERVED   cold read in flight into a reserved slot; hidden       (reservation pin)
//	RAM_ONLY   admitted by a write-back PUT, flush pending; visible   (flush-pin)
//	in-flight  a reader copying out of the slot                       (transfer-pin)
//	DURABLE    flushed or filled from the backing, idle               (no pin: evictable)
//
// Only DURABLE idle slots are ever evicted, because the slab allocator's
// CLOCK skips every pinned slot.
type Tier struct {
	backing    engine.StoreEngine
	log        *slog.Logger
	writeBack  bool
	diskAck    bool
	coalesce   bool
	extent     uint64
	maxValue   uint64
	arenaBytes uint64
	dirtyLimit uint64 // 0: no watermark
	flushDelay time.Duration
	eagerBytes uint64 // with a flush delay: dirty bytes past which it is waived
	threads    int
	numa       string // the memory policy applied to the arena
	diskOf     func(wire.BlockKey) int
	limited    func(tenant uint64) bool
	noDisk     bool
	arena      *arena
	seed       maphash.Seed
	turns      [stripes]keyTurns
	shards     []*shard
	large      largeStore
	queues     []*flushQueue // one per disk (DiskOf), or one
	workers    sync.WaitGroup

	// closeMu is held shared by every operation and exclusively by Close,
	// so Close waits for operations in flight before it drains and unmaps.
	closeMu sync.RWMutex
	closed  atomic.Bool
	// warm faults the arena in behind the serving tier (warm.go).
	warm warmer

	// loans counts bytes lent by Lend and not yet returned: Close waits
	// for them before it unmaps the arena a socket write may still read.
	loans sync.WaitGroup
	// receiving is the bytes of arena slots Receive reserved for bodies
	// still arriving (zerocopy.go).
	receiving atomic.Int64

	// beforePublish, set only by tests, runs in cache after the value is
	// in RAM and before it is published, so a test can start a cold read
	// in that window.
	beforePublish func()

	// Dirty accounting summed over the shards, updated under the key's
	// shard lock. The watermark check reads it without the other shards'
	// locks, so concurrent admissions on different shards may pass it
	// together by at most one value each: the watermark is a bound on
	// backlog, not an exact reservation.
	dirtyBytes atomic.Uint64
	dirtyNew   atomic.Int64 // dirty entries whose key the backing did not hold
	dirtyDelta atomic.Int64 // Σ dirty length − the backing's length of the key

	unhealthy     atomic.Bool
	hits          atomic.Uint64
	misses        atomic.Uint64 // RAM misses
	nfMisses      atomic.Uint64 // misses answered without asking the backing
	sharedHits    atomic.Uint64 // RAM misses served another read's backing copy
	puts          atomic.Uint64
	putBypass     atomic.Uint64
	putsUnchanged atomic.Uint64
	putsJoined    atomic.Uint64
	removes       atomic.Uint64
	flushed       atomic.Uint64
	flushDropped  atomic.Uint64
	flushSkipped  atomic.Uint64
	evictions     atomic.Uint64
	backingReads  atomic.Uint64
}

var _ engine.StoreEngine = (*Tier)(nil)

// entry is one write-back generation of a key waiting for, or in, its
// flush. done is closed when it is resolved: committed, failed, or
// canceled (by a Remove, or superseded by a newer generation: then super
// names the generation whose result the waiters inherit).
type entry struct {
	key      wire.BlockKey
	sh       *shard      // the key's shard: its mu guards the fields below
	q        *flushQueue // the key's disk's flush queue
	n        uint64
	ref      slab.SlotRef
	lg       *largeBuf // non-nil: the value is a dedicated allocation
	had      bool      // the backing held key at admission
	shadow   uint64    // its length then
	active   bool
	canceled bool
	next     *entry // a newer generation parked behind this active flush
	super    *entry
	done     sync.WaitGroup // Done once the generation is settled (committed, failed or canceled); no channel to allocate per PUT
	err      error
	at       time.Time // its key's first dirty write (with a flush delay; guarded by q.mu); zero: ready at once
	queued   bool      // in q.items and not canceled (guarded by q.mu)
	qi       int       // its index in q.items while queued (guarded by q.mu)
}

// fill is a cold read of a whole value into RAM in flight: followers of the same key
// wait on done instead of reading the backing again. fenced is set by any
// mutation of the key (PUT, REMOVE): the fill then must not publish what it
// read. A range miss joins a fill only once decided says the value lands
// in an arena slot (slotted): a whole read that no slot takes would hand
// its followers a heap copy of the whole value, where a range needs only
// its own bytes from the backing.
type fill struct {
	done      chan struct{}
	decided   chan struct{} // closed by decide
	slotted   bool          // set before decided closes
	isDecided bool          // guarded by the shard's mu
	fenced    bool
	published bool
	waiters   int
	data      []byte // staging copy for followers when not published
	stored    uint64
	err       error
}

func newFill() *fill { return &fill{done: make(chan struct{}), decided: make(chan struct{})} }

// decide records, once, whether the fill's value lands in an arena slot
// and wakes the range misses waiting to know. The caller holds the
// shard's mu.
func (f *fill) decide(slotted bool) {
	if !f.isDecided {
		f.slotted, f.isDecided = slotted, true
		close(f.decided)
	}
}

// removal is a Remove between hiding its key and the backing's Remove.
type removal struct {
	done chan struct{}
	// cancelled: a PUT of the key, acknowledged, was dropped by publish
	// because this Remove had begun (the PUT happened, then the Remove),
	// so the Remove found a value. Guarded by the shard's mu.
	cancelled bool
}

// Open maps the arena and starts the flush workers. On error nothing is
// left running and the backing is not closed (the caller still owns it).
func Open(opts Options) (*Tier, error) {
	if opts.Backing == nil {
		return nil, fmt.Errorf("ram tier: no backing engine: %w", wire.StatusInvalid)
	}
	opts.setDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	t := &Tier{backing: opts.Backing, log: opts.Logger, extent: opts.ExtentBytes, coalesce: opts.ReadCoalesce,
		limited: opts.Limited, noDisk: opts.NoDisk, seed: maphash.MakeSeed()}
	if err := t.setModes(opts.Mode, opts.AckMode); err != nil {
		return nil, err
	}
	lat, err := slab.NewLattice(opts.ExtentBytes)
	if err != nil {
		return nil, fmt.Errorf("ram tier: %v: %w", err, wire.StatusInvalid)
	}
	extents, reserve, err := opts.arenaSplit()
	if err != nil {
		return nil, err
	}
	if err := t.makeShards(lat, opts.Shards, extents); err != nil {
		return nil, err
	}
	t.setBudgets(&opts, extents, reserve)
	start := time.Now()
	t.arena, t.numa, err = newArena(t.arenaBytes, opts.NUMA, opts.SharedArena)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, wire.StatusInvalid)
	}
	t.startFlushers(&opts)
	t.startWarm(opts.WarmWorkers)
	t.log.Info("ram tier: arena ready", "arena_bytes", t.arenaBytes, "extents", extents, "extent_bytes", t.extent,
		"shards", len(t.shards), "large_reserve_bytes", t.large.budget, "write_back", t.writeBack, "disk_ack", t.diskAck,
		"flush_threads", t.threads, "flush_queues", len(t.queues), "flush_delay", t.flushDelay, "read_coalesce", t.coalesce, "numa", t.numa, "map", time.Since(start).Round(time.Microsecond).String())
	return t, nil
}

// setDefaults fills in the zero values Options documents a default for.
func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ExtentBytes == 0 {
		o.ExtentBytes = DefaultExtentBytes
	}
	if o.FlushThreads <= 0 {
		o.FlushThreads = DefaultFlushThreads
	}
	if o.Shards == 0 {
		o.Shards = DefaultShards
	}
	if o.NUMA == "" {
		o.NUMA = NUMAInterleave
	}
	if o.DirtyWatermark == 0 {
		o.DirtyWatermark = DefaultDirtyWatermark
	}
}

// check refuses options out of range (after setDefaults).
func (o *Options) check() error {
	if o.Shards < 1 || o.Shards > MaxShards {
		return fmt.Errorf("ram tier: %d lock shards: want 1 to %d: %w", o.Shards, MaxShards, wire.StatusInvalid)
	}
	if o.DirtyWatermark < 0 || o.DirtyWatermark > 1 {
		return fmt.Errorf("ram tier: dirty watermark %v: want a fraction in (0, 1]: %w", o.DirtyWatermark, wire.StatusInvalid)
	}
	if o.FlushDelay < 0 {
		return fmt.Errorf("ram tier: flush delay %v: want 0 or more: %w", o.FlushDelay, wire.StatusInvalid)
	}
	if o.DiskOf != nil && o.Disks < 1 {
		return fmt.Errorf("ram tier: DiskOf without a disk count: %w", wire.StatusInvalid)
	}
	return nil
}

// setModes sets the write mode and the acknowledgement mode.
func (t *Tier) setModes(mode, ack string) error {
	switch mode {
	case "", ModeWriteBack:
		t.writeBack = true
	case ModeWriteAround:
	default:
		return fmt.Errorf("ram tier: write mode %q: want %q or %q: %w", mode, ModeWriteBack, ModeWriteAround, wire.StatusInvalid)
	}
	switch ack {
	case "":
		t.diskAck = !t.writeBack
	case AckRAM:
		t.diskAck = !t.writeBack // write-around has nothing to acknowledge from RAM
	case AckDisk:
		t.diskAck = true
	default:
		return fmt.Errorf("ram tier: ack mode %q: want %q or %q: %w", ack, AckRAM, AckDisk, wire.StatusInvalid)
	}
	return nil
}

// arenaSplit divides the budget into the large-value reserve and whole
// arena extents, refusing a budget that leaves no extent.
func (o *Options) arenaSplit() (extents, reserve uint64, err error) {
	switch {
	case o.LargeReserveBytes == 0:
		reserve = 2 * o.ExtentBytes
	case o.LargeReserveBytes > 0:
		reserve = uint64(o.LargeReserveBytes)
	}
	if o.Bytes < reserve || (o.Bytes-reserve)/o.ExtentBytes == 0 {
		return 0, 0, fmt.Errorf("ram tier: budget of %d bytes leaves no %d-byte extent after the %d-byte large-value reserve; raise the RAM tier bytes or lower the extent size or reserve: %w",
			o.Bytes, o.ExtentBytes, reserve, wire.StatusInvalid)
	}
	extents = (o.Bytes - reserve) / o.ExtentBytes
	if extents > 1<<32-1 {
		return 0, 0, fmt.Errorf("ram tier: %d extents is too many; use larger extents: %w", extents, wire.StatusInvalid)
	}
	return extents, reserve, nil
}

// makeShards splits the arena's extents over the lock shards (want of
// them, fewer when each would hold too few extents).
func (t *Tier) makeShards(lat *slab.Lattice, want int, extents uint64) error {
	n := shardCount(want, extents)
	first := uint64(0)
	for i := range n {
		share := splitExtents(extents, n, i)
		s, err := newShard(lat, first, uint32(share))
		if err != nil {
			return fmt.Errorf("ram tier: %v: %w", err, wire.StatusInvalid)
		}
		t.shards = append(t.shards, s)
		first += share * t.extent
	}
	return nil
}

// setBudgets sizes the arena, the large-value budget and the dirty
// watermark, and sets the flush delay in force and the largest value.
func (t *Tier) setBudgets(opts *Options, extents, reserve uint64) {
	t.arenaBytes = extents * opts.ExtentBytes
	t.large.m = map[wire.BlockKey]*largeBuf{}
	t.large.budget = opts.Bytes - t.arenaBytes
	if reserve == 0 {
		t.large.budget = 0 // the rounding tail is not a reserve anyone asked for
	}
	if opts.FlushDelay > 0 && t.diskAck {
		t.log.Warn("ram tier: the flush delay does not apply: every PUT waits for its flush under disk acknowledgement",
			"flush_delay", opts.FlushDelay.String())
	}
	if !t.diskAck {
		t.dirtyLimit = max(1, uint64(opts.DirtyWatermark*float64(t.arenaBytes+t.large.budget)))
		t.flushDelay = opts.FlushDelay
		t.eagerBytes = t.dirtyLimit / 2
	}
	t.maxValue = opts.MaxValueBytes
	if t.maxValue == 0 {
		t.maxValue = opts.Backing.Stats().CapacityBytes
	}
}

// startFlushers makes the flush queues (one per disk with DiskOf, else
// one) and starts the workers, at least one per queue.
func (t *Tier) startFlushers(opts *Options) {
	nq := 1
	if opts.DiskOf != nil && opts.Disks > 1 {
		nq = opts.Disks
		t.diskOf = opts.DiskOf
	}
	for range nq {
		t.queues = append(t.queues, newFlushQueue(t.flushDelay, t.pastEager))
	}
	t.threads = max(opts.FlushThreads, nq)
	for i := range t.threads {
		q := t.queues[i%nq]
		t.workers.Go(func() { t.flushWorker(q) })
	}
}

// pastEager reports whether dirty bytes have reached the eager threshold,
// where a flush delay no longer holds values back.
func (t *Tier) pastEager() bool { return t.dirtyBytes.Load() >= t.eagerBytes }

func (t *Tier) enter() error {
	t.closeMu.RLock()
	if t.closed.Load() {
		t.closeMu.RUnlock()
		return fmt.Errorf("ram tier: closed: %w", wire.StatusUnavailable)
	}
	return nil
}

func (t *Tier) exit() { t.closeMu.RUnlock() }

// bytesOf is entry e's value; its flush-pin keeps it valid.
func (t *Tier) bytesOf(e *entry) []byte {
	if e.lg != nil {
		return e.lg.mem[:e.n]
	}
	return t.slotBytes(e.sh, e.ref, e.n)
}

// largeOf is key's dedicated-allocation owner, or nil.
func (t *Tier) largeOf(key *wire.BlockKey) *largeBuf {
	t.large.mu.Lock()
	lg := t.large.m[*key]
	t.large.mu.Unlock()
	return lg
}

// unrefLarge drops one reference to lg.
func (t *Tier) unrefLarge(lg *largeBuf) {
	t.large.mu.Lock()
	err := t.large.unref(lg)
	t.large.mu.Unlock()
	if err != nil {
		t.log.Error("ram tier: releasing a large value", "err", err)
	}
}

// unpublish hides key's RAM owner, if any. Pins held by others keep the
// memory until they drop. The caller holds s.mu (s is key's shard).
func (t *Tier) unpublish(s *shard, key *wire.BlockKey) bool {
	found := false
	if r, _, ok := s.alloc.Remove(key); ok {
		s.alloc.Release(r)
		found = true
	}
	t.large.mu.Lock()
	var err error
	if lg := t.large.m[*key]; lg != nil {
		delete(t.large.m, *key)
		err = t.large.unref(lg)
		found = true
	}
	t.large.mu.Unlock()
	if err != nil {
		t.log.Error("ram tier: releasing a large value", "err", err)
	}
	return found
}

// ownerLocked reports whether key has a RAM owner. The caller holds s.mu.
func (t *Tier) ownerLocked(s *shard, key *wire.BlockKey) bool {
	if _, _, ok := s.alloc.Exist(key); ok {
		return true
	}
	return t.largeOf(key) != nil
}

// fence stops a cold read of key in flight from publishing what it read.
// The caller holds s.mu.
func fence(s *shard, key *wire.BlockKey) {
	if f := s.fills[*key]; f != nil {
		f.fenced = true
		delete(s.fills, *key)
	}
}

// waitRemoval waits until no Remove of key is between hiding it and the
// backing's Remove. The caller holds s.mu; it is dropped while waiting.
// It reports whether it waited.
func waitRemoval(s *shard, key *wire.BlockKey) (waited bool) {
	for {
		r := s.removing[*key]
		if r == nil {
			return waited
		}
		s.mu.Unlock()
		<-r.done
		s.mu.Lock()
		waited = true
	}
}

// RAMStats are the tier's own counters, beside the engine.Stats it
// reports for the whole (tier + backing).
type RAMStats struct {
	BudgetBytes       uint64  `json:"budget_bytes"` // arena + large reserve
	ArenaBytes        uint64  `json:"arena_bytes"`
	LargeReserveBytes uint64  `json:"large_reserve_bytes"`
	ArenaUsedBytes    uint64  `json:"arena_used_bytes"` // bytes of values resident in arena slots
	LargeUsedBytes    uint64  `json:"large_used_bytes"` // page-rounded dedicated allocations
	Objects           uint64  `json:"objects"`          // values resident in RAM
	DirtyBytes        uint64  `json:"dirty_bytes"`      // admitted, not yet flushed
	DirtyObjects      uint64  `json:"dirty_objects"`
	FlushBacklog      uint64  `json:"flush_backlog"` // queued flushes
	Hits              uint64  `json:"hits"`
	Misses            uint64  `json:"misses"`
	Puts              uint64  `json:"puts"`
	PutsUnchanged     uint64  `json:"puts_unchanged"` // PUTs of the bytes RAM already held durably: nothing admitted or flushed
	PutsJoined        uint64  `json:"puts_joined"`    // PUTs of the bytes a pending flush already holds: they share its write
	PutBypass         uint64  `json:"put_bypass"`     // write-back PUTs that took the synchronous disk path: no RAM for them, or a quota-limited tenant
	Flushed           uint64  `json:"flushed"`
	FlushDropped      uint64  `json:"flush_dropped"`                // flushes given up after every retry
	FlushSkipped      uint64  `json:"flush_skipped"`                // generations superseded or removed before their flush started: disk writes saved
	FlushDelayMS      int64   `json:"flush_delay_ms"`               // the flush delay in force (0 under disk acknowledgement)
	Evictions         uint64  `json:"evictions"`                    // DURABLE values dropped from RAM (still on the backing)
	BackingReads      uint64  `json:"backing_reads"`                // Get calls the tier made on the backing
	FlushThreads      int     `json:"flush_threads"`                // actual workers: at least one per flush queue
	FlushQueues       int     `json:"flush_queues"`                 // one per disk, or one
	Shards            int     `json:"shards"`                       // metadata lock shards after automatic halving
	NUMA              string  `json:"numa"`                         // the arena's memory policy as applied
	ArenaWarmBytes    uint64  `json:"arena_warm_bytes"`             // arena bytes faulted in so far (warmed behind the serving tier)
	ArenaWarmSeconds  float64 `json:"arena_warm_seconds,omitempty"` // how long the whole arena took, once warm
	Healthy           bool    `json:"healthy"`
}

// RAM returns a snapshot of the tier's own counters.
func (t *Tier) RAM() RAMStats {
	var s RAMStats
	for _, sh := range t.shards {
		sh.mu.Lock()
		s.ArenaUsedBytes += sh.alloc.Used()
		s.Objects += sh.alloc.Objects()
		s.DirtyObjects += uint64(len(sh.dirty))
		sh.mu.Unlock()
	}
	t.large.mu.Lock()
	s.LargeUsedBytes = t.large.used
	s.Objects += uint64(len(t.large.m))
	t.large.mu.Unlock()
	for _, q := range t.queues {
		s.FlushBacklog += uint64(q.len())
	}
	s.DirtyBytes = t.dirtyBytes.Load()
	s.BudgetBytes = t.arenaBytes + t.large.budget
	s.ArenaBytes, s.LargeReserveBytes = t.arenaBytes, t.large.budget
	s.Hits, s.Misses, s.Puts, s.PutBypass = t.hits.Load(), t.misses.Load(), t.puts.Load(), t.putBypass.Load()
	s.PutsUnchanged, s.PutsJoined = t.putsUnchanged.Load(), t.putsJoined.Load()
	s.FlushSkipped = t.flushSkipped.Load()
	s.FlushDelayMS = t.flushDelay.Milliseconds()
	s.Flushed, s.FlushDropped, s.Evictions = t.flushed.Load(), t.flushDropped.Load(), t.evictions.Load()
	s.BackingReads = t.backingReads.Load()
	s.FlushThreads = t.threads
	s.FlushQueues = len(t.queues)
	s.Shards = len(t.shards)
	s.NUMA = t.numa
	s.ArenaWarmBytes = t.warm.bytes.Load()
	if t.warm.done.Load() {
		s.ArenaWarmSeconds = time.Duration(t.warm.took.Load()).Seconds()
	}
	s.Healthy = !t.unhealthy.Load()
	return s
}

// Stats implements engine.StoreEngine for the tier and its backing as one
// engine. It is not a plain sum of RAM and backing: a value is
// usually in both, and a RAM miss the backing serves is one read, so
//   - Objects and UsedBytes are the backing's plus what only RAM holds
//     (dirty values of keys the backing lacks, and length changes);
//   - Hits are RAM hits plus backing hits (a RAM miss served by the
//     backing is its hit, and so is one served the copy of a concurrent
//     miss's backing read); Misses are reads neither holds;
//   - Puts and Removes are the client operations the tier acknowledged;
//   - Evictions are the backing's: a RAM eviction loses nothing (RAM()
//     counts those);
//   - Healthy is false once a flush exhausted its retries.
//
// With no disk the backing keeps nothing, so Objects and UsedBytes are
// what RAM holds (RAM's Objects and its values' bytes).
//
// Stats never waits for a flush (a stuck disk must not hang a metrics
// scrape), so a value whose flush commits between the two reads may be
// counted twice for that instant; quiescent, the counts are exact.
func (t *Tier) Stats() engine.Stats {
	dnew, ddelta := t.dirtyNew.Load(), t.dirtyDelta.Load()
	s := t.backing.Stats()
	s.Engine = Name + "+" + s.Engine
	s.Objects = uint64(int64(s.Objects) + dnew)
	s.UsedBytes = uint64(int64(s.UsedBytes) + ddelta)
	if t.noDisk {
		r := t.RAM()
		s.Objects, s.UsedBytes = r.Objects, r.ArenaUsedBytes+r.LargeUsedBytes
	}
	s.Hits += t.hits.Load() + t.sharedHits.Load()
	s.Misses += t.nfMisses.Load()
	s.Puts = t.puts.Load()
	s.Removes = t.removes.Load()
	s.Healthy = s.Healthy && !t.unhealthy.Load() && !t.closed.Load()
	return s
}

// closeProgressEvery is how often a long flush at Close logs its progress.
var closeProgressEvery = 5 * time.Second

// waitFlushed waits for the stopped flush workers to drain their queues,
// logging every closeProgressEvery how much is left, so an operator
// watching a slow stop (gigabytes dirty, a slow disk) sees it advance
// rather than hang.
func (t *Tier) waitFlushed(dirty uint64, start time.Time) {
	done := make(chan struct{})
	go func() { t.workers.Wait(); close(done) }()
	tick := time.NewTicker(closeProgressEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			left := t.dirtyBytes.Load()
			t.log.Info("ram tier: still flushing before close", "dirty_bytes", left,
				"flushed_bytes", dirty-min(dirty, left), "elapsed", time.Since(start).Round(time.Second).String())
		}
	}
}

// Close implements engine.StoreEngine: it waits for operations in flight,
// flushes every dirty value to the backing (graceful shutdown: nothing
// acknowledged from RAM is lost), stops the workers, closes the backing
// and unmaps the arena.
func (t *Tier) Close() error {
	t.closeMu.Lock()
	if t.closed.Load() {
		t.closeMu.Unlock()
		return fmt.Errorf("ram tier: closed: %w", wire.StatusUnavailable)
	}
	t.closed.Store(true)
	t.closeMu.Unlock()

	t.loans.Wait()
	t.stopWarm()
	// Say what the flush will take: with a large arena (or a flush delay)
	// a graceful stop can write gigabytes first.
	dirty, start := t.dirtyBytes.Load(), time.Now()
	if dirty > 0 {
		t.log.Info("ram tier: flushing dirty values before close", "dirty_bytes", dirty)
	}
	for _, q := range t.queues {
		q.stop()
	}
	t.waitFlushed(dirty, start) // the workers drain the queue before they exit
	if dirty > 0 {
		t.log.Info("ram tier: flushed before close", "dirty_bytes", dirty, "took", time.Since(start).Round(time.Millisecond).String())
	}

	var errs []error
	if d := t.flushDropped.Load(); d > 0 {
		errs = append(errs, fmt.Errorf("%d dirty values could not be flushed and were dropped", d))
	}
	if err := t.backing.Close(); err != nil {
		errs = append(errs, fmt.Errorf("backing: %w", err))
	}
	t.large.mu.Lock()
	for k, lg := range t.large.m {
		delete(t.large.m, k)
		if err := t.large.unref(lg); err != nil {
			errs = append(errs, err)
		}
	}
	t.large.mu.Unlock()
	if err := t.arena.close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ram tier: close: %w: %w", err, wire.StatusIOError)
	}
	return nil
}
