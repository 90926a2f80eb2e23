// Package engine holds the storage side of a cache node: the StoreEngine
// interface every engine implements, the per-disk Group that routes
// blocks over a node's disks, and the shared types both need.
//
// Engines report failures as errors wrapping a wire.Status (wire.StatusOf
// recovers it), so the server maps every failure to a status code in one
// place and the engine never needs to know about the wire.
//
// The range contract is the same for every engine and every
// path:
//   - length == 0 reads the whole remainder from offset;
//   - offset == stored length succeeds with zero bytes;
//   - offset > stored length is StatusInvalid;
//   - a length past the end is clamped;
//   - the full stored length is always returned alongside the bytes.
package engine

import (
	"errors"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// ErrFailedClosed is wrapped by every error of an engine that has failed
// closed (a metadata I/O error left it unable to vouch for its contents):
// it will answer so until the node restarts, so retrying is pointless and
// writes meant for it can be refused up front.
var ErrFailedClosed = errors.New("storage engine failed closed")

// StoreEngine stores whole values under BlockKeys on one disk directory.
// Implementations must be safe for concurrent use and must not hold a lock
// across disk I/O that unrelated keys wait on.
type StoreEngine interface {
	// Put stores value (the caller's exact bytes; len(value) > 0) under
	// key, replacing any previous value. The engine may not keep value after
	// Put returns.
	Put(key wire.BlockKey, value []byte) error

	// PutBatch stores values[i] under keys[i] and writes each item's
	// result into errs[i]; len(keys) == len(values) == len(errs).
	PutBatch(keys []wire.BlockKey, values [][]byte, errs []error)

	// Get reads [offset, offset+length) of the value under key, following
	// the package's range contract. It asks alloc for a buffer once it
	// knows how many bytes it needs and returns the bytes read (a sub-slice
	// of that buffer) and the full stored length.
	Get(key wire.BlockKey, offset, length uint64, alloc Allocator) (data []byte, stored uint64, err error)

	// Exist reports the stored length of key, or wire.StatusNotFound.
	// Misses are as common as hits in a cache, so engines return the bare
	// status (callers know the key), which costs no allocation.
	Exist(key wire.BlockKey) (stored uint64, err error)

	// Remove deletes key. Removing a missing key returns
	// wire.StatusNotFound (callers test it with errors.Is or
	// wire.StatusOf; a wrapping engine may wrap it).
	Remove(key wire.BlockKey) error

	// Stats returns a snapshot of counters; it must be cheap enough to call
	// on every metrics scrape.
	Stats() Stats

	// Close flushes and syncs everything acknowledged and releases the disk.
	// After Close every method returns an error wrapping StatusUnavailable.
	Close() error
}

// Allocator hands an engine a destination buffer once the engine knows the
// size of a read. Alloc(n) returns a slice of length n whose first byte is
// aligned to at least IOAlign and whose capacity is a multiple of IOAlign,
// so an engine can read into it with O_DIRECT. The caller owns the buffer
// and releases it after it has used the returned data.
type Allocator interface {
	Alloc(n int) []byte
}

// Lender is implemented by an engine that can lend a value's resident
// bytes in place (the RAM tier): the server writes them to the socket
// straight from the engine's memory instead of Get copying them into a
// connection buffer first: the loan is the transfer-pin of a zero-copy serve.
// A lent value cannot be evicted or reused until its loan is returned, so
// a caller must Return every loan promptly, whatever happens to the write.
type Lender interface {
	// Lend applies the range contract to key's resident value and returns
	// the bytes in place, the stored length and the loan that keeps them
	// valid. ok is false when the value is not resident in lendable memory
	// (the caller uses Get: it may still be on disk); err is a final
	// answer (INVALID offset) with nothing lent. A zero-length result
	// (offset == stored length) lends nothing and needs no Return.
	Lend(key wire.BlockKey, offset, length uint64) (data []byte, stored uint64, loan Loan, ok bool, err error)
	// Return ends a loan Lend made.
	Return(loan Loan)
}

// LeaseLender is a Lender whose loans can back leases: bytes a client on
// the node's host (shared memory) or its network (RDMA) reads in place,
// holding the loan until it releases the lease or the lease expires.
type LeaseLender interface {
	Lender
	// LendLease is Lend for a loan held as a lease. ok is also false when
	// the value's memory has too many loans held to take another without
	// starving reads of it; the caller then serves the bytes another way.
	// hit says whether the loan counts as a GET answered from memory.
	LendLease(key wire.BlockKey, offset, length uint64, hit bool) (data []byte, stored uint64, loan Loan, ok bool, err error)
}

// Receiver is implemented by an engine that can take a PUT's value
// straight into its own memory (the RAM tier's arena): the server reads
// the payload from the socket into the buffer Receive returns, saving the
// copy Put would make out of a connection buffer.
type Receiver interface {
	// Receive reserves room for an n-byte value of key. ok is false when
	// the engine would not keep this value in such memory: the caller
	// reads it into its own buffer and calls Put. After a successful
	// Receive the caller fills all of buf and calls CommitReceive, or
	// calls AbortReceive if the payload did not arrive; exactly one of
	// them, promptly.
	Receive(key wire.BlockKey, n uint64) (buf []byte, loan Loan, ok bool)
	// CommitReceive stores the filled buf as key's value, with Put's
	// semantics and result.
	CommitReceive(key wire.BlockKey, buf []byte, loan Loan) error
	// CommitReceiveBatch commits several received values with
	// PutBatch's semantics: in order, errs[i] for item i, and a disk
	// acknowledgement waits for all of them together.
	CommitReceiveBatch(keys []wire.BlockKey, bufs [][]byte, loans []Loan, errs []error)
	// AbortReceive gives the room back.
	AbortReceive(loan Loan)
}

// Pinner is implemented by an engine that can keep a value from being
// evicted without reading it: a lookup that pins what it finds (the
// server's pinned BATCH_EXIST) keeps a prefix there until the engine that
// looked it up loads it.
type Pinner interface {
	// Pin holds key's value in place until Unpin, as a read in flight
	// holds it: it is not evicted, and REMOVE or a new PUT of the key
	// replace it without reusing its space. ok is false for a miss and
	// for a value the engine does not pin.
	Pin(key wire.BlockKey) (loan Loan, ok bool)
	// Unpin ends a pin Pin took.
	Unpin(loan Loan)
}

// BatchExister is implemented by an engine that answers many EXISTs
// faster together than one at a time: the object-store tier reads the
// keys its disks lack through from the bucket in parallel, where one by
// one a prefix count would wait out a bucket round trip per key.
// stored[i] and errs[i] are Exist's answers for keys[i].
type BatchExister interface {
	ExistBatch(keys []wire.BlockKey, stored []uint64, errs []error)
}

// ExistBatch answers EXIST for every key, through e's BatchExister when it
// has one, else one Exist at a time.
func ExistBatch(e StoreEngine, keys []wire.BlockKey, stored []uint64, errs []error) {
	if b, ok := e.(BatchExister); ok {
		b.ExistBatch(keys, stored, errs)
		return
	}
	for i, k := range keys {
		stored[i], errs[i] = e.Exist(k)
	}
}

// Loan identifies lent bytes to the engine that lent them; its fields
// are the engine's own (no allocation per loan).
type Loan struct{ A, B uint64 }

// IOAlign is the alignment every Allocator guarantees. 4096 covers the
// logical block size of every NVMe and virtio disk dfkv targets.
const IOAlign = 4096

// Stats is a point-in-time snapshot of one engine (one disk).
type Stats struct {
	Engine        string `json:"engine"` // "file", "slab", ...
	Path          string `json:"path"`   // the disk directory
	CapacityBytes uint64 `json:"capacity_bytes"`
	UsedBytes     uint64 `json:"used_bytes"`
	Objects       uint64 `json:"objects"`
	Hits          uint64 `json:"hits"`
	Misses        uint64 `json:"misses"`
	Puts          uint64 `json:"puts"`
	Removes       uint64 `json:"removes"`
	Evictions     uint64 `json:"evictions"`
	// ExtentMoves counts slab extents moved from one size class to
	// another, each evicting the values the extent held (slab engine).
	ExtentMoves uint64 `json:"extent_moves"`
	IOErrors    uint64 `json:"io_errors"`
	// ChecksumFailures counts reads from disk whose value failed its
	// payload checksum; the value was dropped and the read answered as a
	// miss, never served (slab engine). A value is dropped on its first
	// failed read, so this is one per corrupt value, unless reads of it
	// overlapped.
	ChecksumFailures uint64 `json:"checksum_failures"`
	// ScrubbedBytes counts the slot bytes the background scrub read and
	// verified; ScrubPasses its completed passes over the whole disk (slab
	// engine). Values it finds corrupt count in ChecksumFailures.
	ScrubbedBytes uint64 `json:"scrubbed_bytes"`
	ScrubPasses   uint64 `json:"scrub_passes"`
	// Ranged reads (one layer of a block) in the slab engine: a value's
	// first range reads it whole and keeps the checksums of its sections
	// (SectionTables); later ranges read and check only the sections they
	// touch (SectionReads); a range whose sections fail goes back to the
	// whole-value check (SectionMisses: a stale table or a corrupt value).
	SectionTables uint64 `json:"section_tables"`
	SectionReads  uint64 `json:"section_reads"`
	SectionMisses uint64 `json:"section_misses"`
	DirectIO      bool   `json:"direct_io"` // payload I/O uses O_DIRECT (false after a fallback)
	Healthy       bool   `json:"healthy"`   // false once the engine failed closed
	// DiskFull is true while the disk's filesystem refuses writes even
	// after eviction (a filesystem shared with other data filled up).
	DiskFull bool `json:"disk_full"`
}

// Add accumulates o into s; Engine and Path are kept from s, Healthy is the
// conjunction, DirectIO is true only if every part uses it, and DiskFull
// if any part is full.
func (s *Stats) Add(o Stats) {
	s.CapacityBytes += o.CapacityBytes
	s.UsedBytes += o.UsedBytes
	s.Objects += o.Objects
	s.Hits += o.Hits
	s.Misses += o.Misses
	s.Puts += o.Puts
	s.Removes += o.Removes
	s.Evictions += o.Evictions
	s.ExtentMoves += o.ExtentMoves
	s.IOErrors += o.IOErrors
	s.ChecksumFailures += o.ChecksumFailures
	s.ScrubbedBytes += o.ScrubbedBytes
	s.ScrubPasses += o.ScrubPasses
	s.SectionTables += o.SectionTables
	s.SectionReads += o.SectionReads
	s.SectionMisses += o.SectionMisses
	s.DirectIO = s.DirectIO && o.DirectIO
	s.Healthy = s.Healthy && o.Healthy
	s.DiskFull = s.DiskFull || o.DiskFull
}

// Clock is the engine's view of time, passed in so tests and a later
// deterministic simulation can drive it.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Accounting is told every change of committed payload bytes per tenant:
// +n when a value is published, -n when it is replaced, evicted or
// removed, and +n for every value a restart finds again. Quotas
// (engine.Quotas) and per-tenant metrics are built on it, so an engine
// never needs to know about either. Calls may come from any goroutine and
// must not block; an engine calls it after the change is visible.
type Accounting interface {
	Committed(tenant uint64, delta int64)
}

// NoAccounting discards accounting calls.
type NoAccounting struct{}

// Committed does nothing.
func (NoAccounting) Committed(uint64, int64) {}
