// Package ramtier is the RAM hot tier: an engine.StoreEngine that fronts a
// backing engine (normally an engine.Group over slab disks) with a RAM
// arena, so a warm GET never touches a disk and a write-back PUT returns
// once its block is visible in RAM.
//
// # Memory
//
// One anonymous mmap of Options.Bytes minus the large-value reserve, off
// the Go heap, placed by the NUMA policy (interleaved over the online
// nodes by default), faulted in behind the serving tier by one warm-up
// goroutine per core (warm.go; Open returns at once, so a node with a
// large tier is ready in well under a second), and unmapped only by Close:
// one contiguous region with stable addresses, so a later RDMA
// registration covers it once. The slab package's media-agnostic
// Allocator and Lattice carve it into extents, classes and slots (the
// same code as the disks; the tier maps (extent, slot) to arena bytes).
// Values larger than one extent get dedicated mappings charged to the
// large-value reserve; with no reserve they bypass RAM.
//
// # Locks
//
// The arena is split into lock shards (Options.Shards, default 8, halved
// while a shard would hold fewer than 32 extents): each owns a run of
// extents, its own allocator and the lifecycle maps of the keys hashing to
// it. Foreground PUTs of one key take turns (one of 1,024 key stripes
// records whose turn it is): a PUT's admission and any synchronous disk
// write finish before the next PUT of that key starts, while PUTs of other
// keys go ahead. Dedicated large values share one small store with its
// own lock. No lock is held across backing I/O.
//
// # Slot lifecycle
//
// The states are the allocator's pin counts: RESERVED (a cold read into a
// hidden slot), RAM_ONLY (flush-pin until the flush commits), in-flight (a
// transfer-pin per reader copying out) and DURABLE idle (no pin, the only
// state CLOCK may evict). REMOVE hides a key at once, cancels a queued
// flush, and fences an active flush (the backing's Remove waits for it)
// and a cold-read reservation (it is aborted, never published). A PUT
// fences cold reads of its key where it publishes, so a read of the older
// disk value that started during the PUT's copy cannot publish it later.
// If the backing's Remove fails, the acknowledged value it canceled is
// written back: the key never reads as a value an acknowledged PUT
// replaced.
//
// # Writes
//
// Write-back (default): admission copies the value into a slot, makes it
// visible and queues its flush on its disk's queue (Options.DiskOf), so a
// slow disk backs up only its own flushes. AckRAM returns then; AckDisk
// waits for the commit. A same-key PUT of identical bytes while a flush is
// pending joins that commit; different bytes supersede it (flushes of one
// key never overlap, so the newer value lands last). Options.FlushDelay
// holds a queued flush until its key has been dirty that long, so a
// rewrite or Remove within it saves the disk write; a rewrite takes over
// the queued generation's place and age (the disk is at most one delay
// behind a hot key), the queue stays in order of first dirty write, so
// one timer on its head serves it, and the delay is waived past half the
// watermark, during Flush and Close, and with AckDisk. Past the dirty
// watermark new keys get CACHE_FULL before admission; when every slot is
// pinned the PUT takes the one synchronous disk path, as does every PUT of
// a quota-limited tenant (Options.Limited), so its result is the quota
// verdict. That path first makes a pending generation of the key durable
// (flushing it itself if it is still queued), so a failed synchronous
// write leaves the key at the acknowledged value. A flush failing every
// retry drops the value (and removes the key's older disk value, so the
// key reads as a miss, not as what the dropped PUT replaced) and turns the
// tier unhealthy. Write-around: PUTs go to the backing, a later GET
// (whole or a range) fills RAM.
//
// Every engine's Put replaces (the conformance suite pins it), so a
// new RAM generation of a key the disk already holds replaces the disk
// value when it flushes, and RAM never certifies bytes the disk will not
// hold. (A rule that a committed disk value wins over a new RAM
// generation would fit only a disk store that keeps a key's first value.)
//
// # Reads
//
// RAM first; on a miss the backing reads the whole value straight into a
// reserved slot (no staging copy) that is published DURABLE, and the part
// asked for is copied out. With Options.ReadCoalesce concurrent misses of
// one key, whole or ranges, share that one read; without it each reads
// the backing on its own. A range miss fills like a whole one (the other
// layers of a block loaded layer by layer follow it), unless no slot can
// hold the value: then it reads only its range from the backing.
//
// # Zero copy (zerocopy.go)
//
// Lend (engine.Lender) lends a resident slot's bytes in place under a
// transfer-pin, so the server writes them to the socket from the arena;
// Return drops the pin. Receive (engine.Receiver) reserves a hidden slot
// for a write-back PUT before its payload is read, the server reads the
// socket straight into it, and CommitReceive admits it as Put would.
// Close waits for every loan and reservation before it unmaps the arena.
// Dedicated large values take the copying paths.
//
// # Crashes
//
// Close (SIGTERM on a node) flushes every dirty value before the disks
// are marked clean. After a SIGKILL, AckDisk has lost nothing it
// acknowledged and AckRAM at most the values still dirty (bounded by the
// watermark, and by Options.FlushDelay when one is set); nothing comes
// back with wrong bytes, since the disk engine verifies every value.
//
// # Caveats
//
// Stats approximates Objects/UsedBytes while flushes are committing (see
// Tier.Stats). Accounting and quotas stay with the backing engine.
package ramtier
