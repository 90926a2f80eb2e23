// Package lease keeps the leases a node grants on bytes an engine lends in
// place (engine.Lender): a client on the node's host, or across an RDMA
// fabric, reads a resident value out of the RAM arena itself, and the
// lease is what keeps the slot it reads from pinned (not evicted, not
// reused) meanwhile.
//
// A lease ends when its owner releases it, when its owner's connection
// ends (ReleaseOwner), or when it expires (TTL after its grant), so a
// client that dies, hangs or forgets never pins memory for longer than
// the TTL. A lease can only be released by the connection it was granted
// to. An expired or already released id releases nothing (a client whose
// lease expired first is normal); another owner's id, or one the table
// never issued (a forged one), releases nothing and is counted.
//
// Each lease has a word in a region the clients map read-only: the word
// of slot i holds the ID of the live lease of slot i, or 0. The table
// clears the word before it returns the loan, so a client that copied the
// bytes and then still finds its own ID in the word knows that the copy
// finished while the bytes were leased (a seqlock: a client that was
// paused past expiry sees 0 or a later ID, and retries or reports a
// miss instead of returning another key's bytes).
//
// One owner can be held to a share of the table and of the bytes it
// pins (Options.OwnerMax, OwnerBytes): a client that forgets to release,
// or leases far ahead of what it reads, then gets its further values on
// its socket, and takes no more than its share of the leases or of the
// RAM tier's room to evict.
package lease

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// ConnShare sets the share of a node's lease table and of its arena one
// connection's leases may hold: one ConnShare-th of each
// (Options.OwnerMax, OwnerBytes).
const ConnShare = 8

// ErrUnknown is the error of a Release whose lease has already ended
// (released, expired, its slot reused) or never existed.
var ErrUnknown = errors.New("no such lease: released, expired or never granted")

// ErrNotOwner is the error of a Release from a connection the lease was
// not granted to.
var ErrNotOwner = errors.New("lease belongs to another connection")

// Options configures New.
type Options struct {
	Lender   engine.Lender
	Capacity int           // most leases live at once (the lease-word region holds this many words)
	TTL      time.Duration // how long a lease lives unless released
	// Words is the lease-word region, 8 × Capacity bytes, 8-byte
	// aligned, normally a shared mapping the clients map read-only. Nil:
	// the table allocates its own (tests, and transports whose clients
	// validate otherwise).
	Words []byte
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// OwnerMax is the most leases one owner holds live (0: Capacity), and
	// OwnerBytes the most bytes they cover (0: no bound). An owner with
	// no live lease is always granted one, whatever its size, so a value
	// larger than OwnerBytes can still be leased alone.
	OwnerMax   int
	OwnerBytes uint64
}

// Stats are the table's counters.
type Stats struct {
	Live     int    `json:"live"`
	Granted  uint64 `json:"granted"`
	Released uint64 `json:"released"`
	Expired  uint64 `json:"expired"`
	Refused  uint64 `json:"refused"` // releases of leases another connection owns, or out-of-range ids
	Full     uint64 `json:"full"`    // grants refused because every slot was live
	// OwnerFull counts grants refused because their owner already held
	// Options.OwnerMax leases or OwnerBytes bytes.
	OwnerFull uint64 `json:"owner_full"`
}

// Table is the set of live leases. It is safe for concurrent use.
type Table struct {
	lender     engine.Lender
	ttl        time.Duration
	now        func() time.Time
	words      []atomic.Uint64
	ownerMax   int
	ownerBytes uint64

	mu    sync.Mutex
	slots []slot
	free  []uint32 // free slot indexes (a stack)
	order []grant  // grants in expiry order (all share one TTL); head first
	head  int
	// owners holds each owner's list of live slots, from its first grant
	// to its ReleaseOwner (or Close), so ReleaseOwner visits the owner's
	// leases and no other slot: it runs under mu whenever a connection
	// closes, and every grant on the node waits for it.
	owners map[uint64]*owned
	spare  []*owned // lists of owners gone, for new owners

	granted, released, expired, refused, full, ownerFull atomic.Uint64

	stop chan struct{}
	done sync.WaitGroup
}

type slot struct {
	id     wire.LeaseID // 0: free
	loan   engine.Loan
	expiry time.Time
	bytes  uint64 // what the lease covers, counted to its owner
	seq    uint32
	// prev and next link the live slots of one owner (slot indexes, -1 at
	// either end): a list through the slots themselves, so a grant adds
	// no allocation and an end unlinks in place.
	prev, next int32
	by         *owned // the owner's list while live; nil when free
}

// owned heads one owner's list of live slots. It stays in Table.owners
// while the owner has no lease (between a connection's requests), so a
// grant looks its owner up but does not insert it again.
type owned struct {
	owner uint64
	head  int32  // -1: no live lease
	n     int    // live leases
	bytes uint64 // bytes they cover
}

// grant is one entry of the expiry queue; stale once its slot's id moved
// on (released early).
type grant struct {
	id     wire.LeaseID
	expiry time.Time
}

// New makes a table and starts its expiry sweeper (Close stops it).
func New(opts Options) (*Table, error) {
	if opts.Lender == nil {
		return nil, fmt.Errorf("lease table: no lender")
	}
	if opts.Capacity <= 0 || opts.Capacity > 1<<24 {
		return nil, fmt.Errorf("lease table: capacity %d: want 1 to %d", opts.Capacity, 1<<24)
	}
	if opts.TTL <= 0 {
		return nil, fmt.Errorf("lease table: lease time %v: want more than 0", opts.TTL)
	}
	if opts.Words == nil {
		opts.Words = make([]byte, 8*opts.Capacity+8)
		for uintptr(unsafe.Pointer(&opts.Words[0]))%8 != 0 {
			opts.Words = opts.Words[1:]
		}
	}
	if len(opts.Words) < 8*opts.Capacity || uintptr(unsafe.Pointer(&opts.Words[0]))%8 != 0 {
		return nil, fmt.Errorf("lease table: the word region must be 8-byte aligned and hold %d words", opts.Capacity)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.OwnerMax <= 0 || opts.OwnerMax > opts.Capacity {
		opts.OwnerMax = opts.Capacity
	}
	if opts.OwnerBytes == 0 {
		opts.OwnerBytes = math.MaxUint64
	}
	t := &Table{
		lender:     opts.Lender,
		ttl:        opts.TTL,
		now:        opts.Now,
		words:      unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&opts.Words[0])), opts.Capacity),
		ownerMax:   opts.OwnerMax,
		ownerBytes: opts.OwnerBytes,
		slots:      make([]slot, opts.Capacity),
		free:       make([]uint32, opts.Capacity),
		owners:     map[uint64]*owned{},
		stop:       make(chan struct{}),
	}
	for i := range t.free {
		t.free[i] = uint32(opts.Capacity - 1 - i) // slot 0 on top
		t.words[i].Store(0)
	}
	t.done.Add(1)
	go t.sweep()
	return t, nil
}

// TTL is how long a lease lives unless released.
func (t *Table) TTL() time.Duration { return t.ttl }

// Capacity is the most leases live at once.
func (t *Table) Capacity() int { return len(t.slots) }

// Grant leases loan, which pins n bytes (the whole value, whatever range
// of it is read), to owner until it releases it or the TTL passes, and returns the lease's ID and its expiry. ok is false
// when every slot is live, or when owner already holds its share
// (Options.OwnerMax, OwnerBytes): the caller keeps the loan (and serves
// the bytes another way). The table keeps a few bytes for each owner
// from its first grant until ReleaseOwner: an owner is a connection,
// which calls it when it ends.
func (t *Table) Grant(owner uint64, loan engine.Loan, n uint64) (id wire.LeaseID, expiry time.Time, ok bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) == 0 {
		t.full.Add(1)
		return 0, time.Time{}, false
	}
	if o := t.owners[owner]; o != nil && o.n > 0 && (o.n >= t.ownerMax || o.bytes >= t.ownerBytes || n > t.ownerBytes-o.bytes) {
		t.ownerFull.Add(1)
		return 0, time.Time{}, false
	}
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	s := &t.slots[i]
	s.seq++
	if s.seq == 0 {
		s.seq = 1 // an ID is never 0
	}
	id = wire.LeaseID(uint64(i)<<32 | uint64(s.seq))
	s.id, s.loan, s.expiry, s.bytes = id, loan, now.Add(t.ttl), n
	t.link(i, owner)
	t.words[i].Store(uint64(id))
	t.order = append(t.order, grant{id: id, expiry: s.expiry})
	t.granted.Add(1)
	return id, s.expiry, true
}

// Release ends owner's lease id. A lease that already ended is
// ErrUnknown (not an error for a client whose lease expired first); one
// granted to another owner is ErrNotOwner and stays live.
func (t *Table) Release(owner uint64, id wire.LeaseID) error {
	t.mu.Lock()
	loan, err := t.endLocked(owner, id, true)
	t.mu.Unlock()
	if err != nil {
		return err
	}
	t.lender.Return(loan)
	t.released.Add(1)
	return nil
}

// endLocked frees id's slot and returns its loan (to be returned outside
// the lock). check: refuse another owner's lease.
func (t *Table) endLocked(owner uint64, id wire.LeaseID, check bool) (engine.Loan, error) {
	i := id.Index()
	if int(i) >= len(t.slots) {
		t.refused.Add(1)
		return engine.Loan{}, fmt.Errorf("lease %#x: slot %d is past the table's %d: %w", uint64(id), i, len(t.slots), ErrNotOwner)
	}
	s := &t.slots[i]
	if s.id != id || id == 0 {
		if id != 0 && (id.Seq() == 0 || id.Seq() > s.seq) {
			// Not yet issued for this slot: forged, not expired.
			t.refused.Add(1)
		}
		return engine.Loan{}, ErrUnknown
	}
	if check && s.by.owner != owner {
		t.refused.Add(1)
		return engine.Loan{}, ErrNotOwner
	}
	// The word goes first: a client that reads it after its copy and
	// still finds its ID copied bytes that were still pinned.
	t.words[i].Store(0)
	loan := s.loan
	s.id, s.loan = 0, engine.Loan{}
	t.unlink(i)
	t.free = append(t.free, i)
	return loan, nil
}

// link puts live slot i at the head of owner's list, starting the list
// at the owner's first grant.
func (t *Table) link(i uint32, owner uint64) {
	o := t.owners[owner]
	if o == nil {
		if n := len(t.spare); n > 0 {
			o = t.spare[n-1]
			t.spare = t.spare[:n-1]
		} else {
			o = new(owned)
		}
		*o = owned{owner: owner, head: -1}
		t.owners[owner] = o
	}
	s := &t.slots[i]
	s.by, s.prev, s.next = o, -1, o.head
	if o.head >= 0 {
		t.slots[o.head].prev = int32(i)
	}
	o.head = int32(i)
	o.n++
	o.bytes += s.bytes
}

// unlink takes slot i, ending, out of its owner's list.
func (t *Table) unlink(i uint32) {
	s := &t.slots[i]
	o := s.by
	if s.prev >= 0 {
		t.slots[s.prev].next = s.next
	} else {
		o.head = s.next
	}
	if s.next >= 0 {
		t.slots[s.next].prev = s.prev
	}
	o.n--
	o.bytes -= s.bytes
	s.by, s.prev, s.next = nil, -1, -1
}

// ReleaseOwner ends every lease of owner (its connection closed) and
// reports how many. It visits the owner's leases alone, whatever the
// table's size, and forgets the owner.
func (t *Table) ReleaseOwner(owner uint64) int {
	var loans []engine.Loan
	t.mu.Lock()
	if o := t.owners[owner]; o != nil {
		if o.n > 0 {
			loans = make([]engine.Loan, 0, o.n)
		}
		for o.head >= 0 {
			loan, _ := t.endLocked(owner, t.slots[o.head].id, false) // unlinks the head
			loans = append(loans, loan)
		}
		delete(t.owners, owner)
		t.spare = append(t.spare, o)
	}
	t.mu.Unlock()
	for _, l := range loans {
		t.lender.Return(l)
	}
	t.released.Add(uint64(len(loans)))
	return len(loans)
}

// Expire ends every lease whose TTL has passed at now and reports how
// many. The sweeper calls it; tests call it with their own clock.
func (t *Table) Expire(now time.Time) int {
	var loans []engine.Loan
	t.mu.Lock()
	for t.head < len(t.order) {
		g := t.order[t.head]
		if s := &t.slots[g.id.Index()]; s.id == g.id {
			if now.Before(g.expiry) {
				break
			}
			loan, _ := t.endLocked(0, g.id, false)
			loans = append(loans, loan)
		}
		t.head++
	}
	if t.head > 1024 && t.head*2 > len(t.order) {
		t.order = append(t.order[:0], t.order[t.head:]...)
		t.head = 0
	}
	t.mu.Unlock()
	for _, l := range loans {
		t.lender.Return(l)
	}
	t.expired.Add(uint64(len(loans)))
	return len(loans)
}

// sweep expires leases a few times per TTL until Close.
func (t *Table) sweep() {
	defer t.done.Done()
	every := max(t.ttl/4, 5*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.Expire(t.now())
		}
	}
}

// Close stops the sweeper and ends every live lease, returning its loan:
// the node is stopping, and the engine waits for its loans before it
// closes.
func (t *Table) Close() {
	select {
	case <-t.stop:
		return
	default:
	}
	close(t.stop)
	t.done.Wait()
	var loans []engine.Loan
	t.mu.Lock()
	for i := range t.slots {
		if s := &t.slots[i]; s.id != 0 {
			loan, _ := t.endLocked(0, s.id, false)
			loans = append(loans, loan)
		}
	}
	t.order, t.head = nil, 0
	clear(t.owners)
	t.mu.Unlock()
	for _, l := range loans {
		t.lender.Return(l)
	}
}

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	live := len(t.slots) - len(t.free)
	t.mu.Unlock()
	return Stats{Live: live, Granted: t.granted.Load(), Released: t.released.Load(), Expired: t.expired.Load(),
		Refused: t.refused.Load(), Full: t.full.Load(), OwnerFull: t.ownerFull.Load()}
}

// Held reports whether lease id is live.
func (t *Table) Held(id wire.LeaseID) bool {
	i := id.Index()
	return int(i) < len(t.words) && id != 0 && t.words[i].Load() == uint64(id)
}
