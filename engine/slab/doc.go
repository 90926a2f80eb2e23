// Package slab is the production storage engine (server.store_engine =
// "slab", the default): per disk a fixed pool of preallocated extent files,
// carved by a deterministic size-class lattice into uniform slots, with one
// CRC-protected 64-byte record per published slot in a preallocated slot
// table, so a restart rebuilds millions of blocks in well under a second.
// Every record carries a checksum of its value's bytes, checked on every
// read, so a restart after a crash keeps what the disk holds (see Crashes
// and power cuts) and a corrupt value is a miss, never wrong bytes.
//
// # Layout
//
//	<Dir>/slab_meta            format and geometry; written once, never rewritten
//	<Dir>/slab_state           running epoch + clean flag; made atomically, then rewritten in place
//	<Dir>/slots.tbl            preallocated; record of slot s of extent e at (e*MaxSlots+s)*64
//	<Dir>/extents/00000.ext    ExtentBytes each, preallocated (fallocate mode 0)
//	<Dir>/extents/00001.ext    ... CapacityBytes/ExtentBytes of them
//
// Open refuses a non-empty directory without slab_meta (for example a file
// engine's blocks/), and a slab_meta whose format or geometry differs from
// the options, naming every differing field (on-disk and configured value)
// and the fix; it writes nothing before these checks pass. A slab_meta that
// is damaged (torn, garbage, cut short) or missing beside the store's own
// files is different: nothing on the disk can be placed without it, so
// Open logs one ERROR naming it, removes the store's files and formats the
// directory anew (the disk starts cold, the node serves). Before it
// preallocates extents it checks the filesystem's free space (statfs
// f_bavail, plus what the extents already hold) against the pool and the
// slot table (64 bytes per possible slot, 1/64 of the pool with 4 KiB
// slots, preallocated too, so a filesystem filled later cannot fail a
// record write) and refuses, again writing nothing, naming
// server.disk_capacity_bytes. If
// Open fails part-way (ENOSPC, EIO), it removes every file and directory it
// created, never one that was there before, so a retry with a smaller
// capacity does not meet a half-formatted store of the old geometry. A
// missing Dir is created, parents included, with a warning: it may be an
// unmounted disk's mount point.
//
// These constants are part of the on-disk format and must not be changed
// without bumping the format version (5). All integers are little-endian;
// CRCs are CRC-32C (Castagnoli).
//
// # slab_meta (64 bytes)
//
//	+--------+------+---------------------------------------------------+
//	| offset | size | field                                             |
//	+--------+------+---------------------------------------------------+
//	|      0 |    8 | magic "DFKVSLAB"                                  |
//	|      8 |    4 | format version (5: values in pieces; 4: CRCs)    |
//	|     12 |    4 | record size (64)                                  |
//	|     16 |    8 | capacity bytes (as configured)                    |
//	|     24 |    8 | extent bytes                                      |
//	|     32 |    4 | extent count = capacity / extent bytes            |
//	|     36 |    4 | MaxSlots = extent bytes / 4096 (table stride)     |
//	|     40 |    4 | lattice min class (4096)                          |
//	|     44 |    4 | lattice growth shift (3: steps of at most 1/8)    |
//	|     48 |    4 | lattice class count                               |
//	|     52 |    8 | zero                                              |
//	|     60 |    4 | CRC-32C of bytes 0..59                            |
//	+--------+------+---------------------------------------------------+
//
// # slab_state (32 bytes)
//
//	+--------+------+---------------------------------------------------+
//	|      0 |    8 | magic "DFKVSTAT"                                  |
//	|      8 |    4 | format version (5)                                |
//	|     12 |    4 | flags: 1 = clean (the epoch ended with Close)     |
//	|     16 |    8 | epoch (incremented at every Open)                 |
//	|     24 |    4 | zero                                              |
//	|     28 |    4 | CRC-32C of bytes 0..27                            |
//	+--------+------+---------------------------------------------------+
//
// Flags: 1 = clean (the epoch ended with Close), 2 = failed closed.
// A new store writes it temp file, fsync, rename, fsync directory; later
// updates rewrite its 32 bytes in place and fdatasync (no new block, so a
// full filesystem cannot keep a graceful stop from marking it clean; a torn
// write fails the CRC and reads as dirty). Open marks the new epoch dirty
// before it returns; Close marks it clean only after every extent and
// slots.tbl are fdatasynced. Open of a dirty, missing or torn slab_state
// says once that the previous run did not shut down cleanly, keeps every
// record that validates, and starts a scrub pass (see Crashes and power
// cuts). A store that failed closed marks its state failed (best effort):
// its slot table may no longer describe the extents (a record clear that
// failed would bring a removed value back), so the next Open is a cold
// reset: slots.tbl is truncated to zero and preallocated again, and the
// cache starts empty.
//
// # slots.tbl records (64 bytes, at a fixed offset per slot)
//
//	 0       2   3   4               8              12              16
//	+-------+---+---+---------------+---------------+---------------+
//	| magic |ver|cls|    extent     |     slot      |  value length |
//	|0xDF5B | 4 |   |     u32       |     u32       |      u32      |
//	+-------+---+---+---------------+---------------+---------------+
//	16                              24
//	+-------------------------------+-------------------------------+
//	|          tenant u64           |     object id [0:8]           |
//	+-------------------------------+-------------------------------+
//	32                              40                              48
//	+-------------------------------+-------------------------------+
//	|        object id [8:16]       |   generation u64 (per store)  |
//	+-------------------------------+-------------------------------+
//	48              52              56              60              64
//	+---------------+---------------+---------------+---------------+
//	|  payload sum  |     span      |     nonce     | CRC-32C 0..59 |
//	+---------------+---------------+---------------+---------------+
//
// Span and nonce are zero for a value of at most one extent. A larger value
// is stored in pieces (span.go): its head, under its own key, holds its
// last bytes (up to one extent) and has span = the number of extent-sized
// pieces before them; each piece is a value of the top class (one slot,
// one whole extent) under a key derived from the head's key, its nonce and
// its index, with span = 1<<31 | index. Open upgrades a format 4 directory
// in place (its records have zeros there), rewriting only slab_meta.
//
// An all-zero record is an empty slot (never written, cleared, or an
// unwritten part of the preallocated file). Extent and slot repeat what
// the offset says, so a record written to the wrong place, or a shifted
// page, is detected. The
// generation is a store-wide sequence number: of two valid records for one
// key, the higher wins at rebuild.
//
// The payload sum is the CRC-32C of the value's bytes, its register seeded
// with the CRC-32C of the value's identity, 36 bytes: tenant u64, object
// id (16 bytes), extent u32, slot u32, value length u32. A payload that is
// intact but in the wrong place (extent files swapped, a file copied from
// another disk) therefore fails like a flipped bit. Open refuses a
// format 3 directory (records without a payload sum) like any other format
// difference, naming it and the fix (empty the directory: a cold start).
//
// Restart walks only the written ranges of slots.tbl (lseek
// SEEK_DATA/SEEK_HOLE, which report preallocated but never written space
// as a hole on ext4, xfs and tmpfs; a bounded chunked scan of the whole
// table where the filesystem cannot say), reading 1 MiB per pread, and validates
// each record: magic, CRC, version, extent/slot against its offset, class
// against the extent's binding (the first valid record of an extent binds
// it), slot index and value length against the class. Invalid records are
// dropped, zeroed and the table fdatasynced, with one warning. The
// allocator is restored in one pass and per-tenant committed bytes are
// reported to Options.Accounting. No file is opened per value and no
// syscall is made per record. Missing files are survivable: an extent file
// that is missing or cut short is made whole again and the records of the
// values it no longer holds are dropped (one warning names the files); a
// slots.tbl of the wrong size keeps the records it still has; a missing
// slots.tbl is made anew, empty (the values cannot be found without it).
// A part of slots.tbl that cannot be read (EIO: a bad sector) is read
// again a 4 KiB page at a time (after 256 pages that failed, a failing
// 1 MiB read is given up whole); the slots recorded in the pages that still
// fail are empty (their values are misses, never served), those pages are
// rewritten with zeros, so records can be written there again and the old
// ones never come back, and one ERROR names the file, the byte ranges and
// the slots dropped; the rest of the disk serves. If the zeroing fails
// too, the store fails closed (see Concurrency): the next start is cold.
//
// # Payload verification
//
// A PUT computes the sum before any payload byte is written: while it
// copies the value into the O_DIRECT bounce buffer, 32 KiB at a time from
// cache, or in one pass before a write that copies nothing (an aligned
// value, or buffered I/O). Every published slot's sum is also kept in
// memory (4 bytes per carved slot), so a read checks without reading its
// record. Every read from the extents verifies what it serves before any
// byte leaves the engine: a whole-value read checks the caller's buffer.
// The first range (offset/length) of a value reads the whole value too (a
// sum covers the value, so a range of it cannot be vouched for alone),
// checks it, copies out only the range, and keeps the sums of the value's
// sections (16 KiB or more, at most 256) in memory, in a cache of the
// newest 16,384 tables per disk; later ranges of it read and check only
// the sections they touch, and ranges asked for while the first is read
// are copied from its checked bytes. A layer-by-layer load, one range per
// layer, thus reads a block about once instead of once per layer
// (sections.go). A section table is only a hint: a section that fails its
// sum sends the read to the whole-value check, which decides. A range
// whose sections pass is served even if another section of the value has
// rotted since; that one fails the read that touches it, or the scrub.
// A value that fails is never served: the
// read is a miss (NOT_FOUND), the value is dropped as a REMOVE drops it
// (unpublished, its record cleared, its slot freed, its tenant credited),
// Stats.ChecksumFailures counts it (dfkv_disk_checksum_failures_total),
// and a warning names the disk, key, extent file and slot, at most one a
// second per disk with a count of those suppressed (swapped extent files
// fail every value they hold). The store stays healthy: the other values
// are verified on their own reads. The RAM tier promotes cold reads
// through Get, so it only ever holds verified bytes. Exist reports a
// length without reading the payload and so does not verify; nor does a
// restart, which would otherwise read the whole disk: each value is
// checked when it is first read, and by the scrub.
//
// The scrub (Options.Scrub, server.scrub_*) walks every live slot in order
// in the background, at a capped byte rate, verifies it like a read (the
// slot pinned, not warmed) and drops what fails, logging a line when a
// pass starts and one (a warning if it found anything) when it ends. It
// runs a pass at once after an unclean stop and then every Interval.
//
// # Crashes and power cuts
//
// A PUT writes the payload (O_DIRECT: on the device, or in its volatile
// write cache, when the write returns), then the record (a buffered pwrite
// into the page cache), then publishes and acknowledges; a REMOVE clears
// the record (buffered) before it returns. Nothing is fsynced per
// operation.
//
//   - SIGKILL, an OOM kill, a panic: the kernel keeps every write the
//     process made, so the next Open finds every acknowledged PUT and
//     REMOVE. A PUT in flight is either there (its record was written) or
//     not; a replaced value's record may still be there beside its
//     successor's, and the higher generation wins. A slot reused for
//     another value whose record was not yet written still carries the old
//     record: its payload checksum (seeded with the key and slot) fails on
//     first read or scrub, and the read is a miss. The RAM tier's
//     put_ack_mode = disk acknowledges after this engine's Put returns,
//     so it too keeps every acknowledged PUT across a SIGKILL.
//   - A power cut or kernel crash: records and clears still in the page
//     cache, and O_DIRECT payloads still in a volatile device cache, may
//     be lost, in any order. A lost record loses its value (a miss); a
//     record that reached the disk without its payload fails its checksum
//     (a miss); a lost clear brings a REMOVEd value back, with its own
//     key's bytes (verified like any other). No key is ever served another
//     key's bytes or torn bytes. After a graceful stop (slab_state clean)
//     everything was synced first.
//
// # Allocator
//
// The Allocator (allocator.go) is media-agnostic: it works on (extent,
// slot) indices and owns no files, so the RAM tier can run it over an
// arena. Its lattice (lattice.go) starts at 4 KiB, grows by at most
// max(4 KiB, 12.5%) per class, includes every power of two, and ends at
// the extent size; a value's internal waste is below max(4096, v/8) bytes.
// Extents are unbound until a class needs one, then carved into
// floor(ExtentBytes/class) slots. The extent size follows the disk
// (ExtentFor: capacity/256, rounded down to a power of two, between 1 MiB
// and 64 MiB) rather than the largest value, so a small disk has as many
// extents as a large one and a mix of value sizes fills it nearly full
// before the first eviction (BenchmarkFirstEviction). Per slot the
// allocator keeps one 32-byte slotMeta (key, length, pins, heat, state; no
// pointers); the key→slot map is an open-addressing table of 4-byte slot
// numbers that compares against the key in the slot, so a live key is
// stored once. The disk store adds a 4-byte payload sum per slot beside
// it: about 45 bytes of heap per block in all (BenchmarkRebuild1M).
//
// When a class has no free slot and no extent is unbound, CLOCK runs over
// the class's slots: read heat (incremented per read, capped at 63) is
// halved as the hand passes, and the first idle slot at zero heat is
// evicted and reused; a run that passes clockBudget slots without one
// takes the coolest it passed, so no PUT walks a whole class. A value
// written into a freed slot (which may lie just ahead of the hand) starts
// at heat 1, so under writes alone the oldest values go first; restored
// values start at 0, older than anything written since. Pinned slots (I/O
// in flight), reserved and dead ones are never taken.
//
// A class with no extent on a full pool borrows: its value takes a free
// slot, or else a CLOCK victim, of the nearest larger class up to twice its
// size, evicting one value instead of a whole extent. Extents move between
// classes (rebalancing) when a class has none and cannot borrow, when
// every slot it has is pinned, or when its eviction pressure reaches a
// whole extent's worth and a class under a quarter of that pressure has
// more than one extent. Pressure is the slot bytes a class evicted
// (borrowed evictions included) since it last grew, less an extent's worth
// per extent it took, halved for every two pool turnovers of bytes evicted
// anywhere; bytes, so a 4 KiB class and a 1 MiB class compare fairly. The
// quarter is hysteresis: two classes evicting at the same rate keep their
// extents. The extent taken is the idle one (no pins, nothing in flight)
// with the lowest score, its useful bytes weighted by read heat; its
// values are evicted, its old records are punched out of slots.tbl, and it
// is carved for the new class.
//
// # Concurrency
//
// One metadata mutex guards the allocator and the in-flight PUT map; no
// payload I/O runs under it. A PUT reserves a slot (pinned) under the lock,
// writes the payload outside it (O_DIRECT from a pooled aligned buffer
// padded to 4 KiB), writes the record (buffered pwrite), then publishes
// under the lock; the replaced slot turns dead, its record is cleared, and
// it is reused only when its last reader unpins. Concurrent PUTs of one key
// have one leader; followers wait and return its result. REMOVE unpublishes
// at once, clears the record before returning, and fences a PUT of the key
// still in flight, which then does not publish and clears the record it
// wrote (a SIGKILL before that clear may bring the fenced value back: it
// was in flight and never acknowledged: as if it landed after the REMOVE).
// An evicted value's record stays in slots.tbl until the PUT that evicted
// it writes over its slot or wipes its extent, after the lock, and a
// replaced value's until the overwrite clears it, after the lock too; a
// REMOVE of that key waits for those before it answers, so a SIGKILL right
// after the REMOVE cannot bring either value back. A
// record write or clear that fails means slots.tbl no longer describes the
// extents: the store fails closed (every operation IO_ERROR, Stats.Healthy
// false, one error log) and marks its state failed, so the next start is
// cold.
//
// # O_DIRECT
//
// With Options.DirectIO the extents are opened once with O_DIRECT and kept
// open. Read alignment comes from statx STATX_DIOALIGN where the kernel
// reports it (else 4096; above 4096 the engine uses buffered I/O). If the
// direct open or a startup probe read is refused (EINVAL/EOPNOTSUPP), the
// engine says so once and uses buffered I/O. tmpfs accepts O_DIRECT without
// doing it; that is harmless here.
//
// # io_uring
//
// With Options.URing, payload reads and writes of up to 256 KiB (pieces of
// larger reads, too) go through one io_uring ring per disk (package
// engine/uring): requests that arrive together share a submitting system
// call, none waits for its I/O in the kernel, and one reaper goroutine,
// parked on the Go runtime's poller, collects the completions, so sixteen
// connections keep sixteen I/Os in flight without sixteen threads blocked
// in pread.
// Above 256 KiB a pread moves as many bytes per system call as the ring
// would, so larger transfers skip it. Where io_uring_setup or a
// probe read through the ring fails (an old kernel, a seccomp profile that
// forbids io_uring), the engine says so once and uses pread/pwrite. Record
// writes to slots.tbl stay pwrites (64 bytes into the page cache).
//
// # Caveats
//
//   - Capacity and extent size are geometry: changing either means an empty
//     directory (a cold cache). CapacityBytes not a multiple of ExtentBytes
//     leaves the remainder unused.
//   - A store with few extents (capacity / extent size) can hold only that
//     many classes at once; rebalancing then evicts whole extents. The
//     automatic extent size (ExtentFor) gives a disk 256 of them down to
//     1 MiB extents (256 MiB disks); smaller disks have fewer.
//   - Each extent file is kept open: a disk costs one descriptor per extent.
//   - A value larger than an extent is evicted as a whole when any of its
//     pieces or its head is chosen: its eviction frees more than the
//     slot that was wanted.
//   - On ext4 mounted with online discard, the first write into each part
//     of a fallocate'd extent converts it under the file's block-map lock
//     with synchronous discards, so PUTs onto a fresh disk can stall for
//     a second or more until every extent has been written once. The node
//     warns about such a mount; trim with fstrim.timer instead.
//   - PutBatch overlaps up to 8 items' writes when its keys are distinct
//     and stores them one after another when a key repeats; it does no
//     grouping beyond that.
package slab
