// Package file is the diagnostic file engine (server.store_engine =
// "file"): one file per block on one disk directory. It is simple
// enough to check by hand with ls and cmp, which is what it is for; the slab
// engine is the production default.
//
// # Layout
//
//	<Dir>/blocks/<tt>/<oo>/<16-hex tenant><32-hex object id>
//	<Dir>/tmp/    in-progress writes; emptied at startup
//	<Dir>/trash/  removed blocks between rename and unlink; emptied at startup
//
// tt is the first byte of the tenant hash and oo the first byte of the object
// id, each as two lower-case hex digits, i.e. characters [0:2] and [16:18] of
// the filename. Bucketing by tenant at both levels
// ("<tenant-prefix>/<tenant-prefix>") would be the obvious layout; the
// second level uses the object id instead because a node usually serves one
// or a few tenants, and two tenant bytes would put all of one tenant's
// blocks, millions of them, in a single directory. With an object-id byte
// one tenant spreads over 256 directories (about 40,000 entries each at ten
// million blocks), and all of a tenant's blocks still sit under one
// blocks/<tt> directory for du and rm.
//
// Filenames are the strict form of wire.BlockKey.Filename: exactly 48
// lower-case hex digits. Open refuses to start, naming the path, if blocks/
// holds anything else (a malformed name, a file in the wrong bucket, an
// unexpected directory); it never deletes such a file, since it may not be
// ours.
//
// # Values
//
// A file holds the caller's exact bytes: no header, checksum or padding. A
// Put writes a unique temp file in tmp/ (with O_DIRECT, from an aligned
// buffer padded to engine.IOAlign and then truncated to the exact length),
// fdatasyncs it, and renames it into place; the rename is the publish, so a
// reader sees the old value or the new one, never a mix, and a crash leaves
// either no file or a complete one. Remove renames the block into trash/ and
// then unlinks it; a failed rename returns IO_ERROR and changes nothing.
//
// Status decisions:
//   - a zero-byte value is INVALID;
//   - a value larger than CapacityBytes is TOO_LARGE (it can never fit);
//   - CACHE_FULL means "not now": nothing evictable is left because other
//     writes hold the space, or the disk still reports ENOSPC after the one
//     bounded evict-and-retry.
//
// # Index and eviction
//
// The index lives only in memory and is rebuilt at Open from the directory
// walk (filename and size; no file is opened). It is sharded (Options.Shards)
// and each shard keeps a CLOCK ring: Get sets an entry's reference bit,
// and eviction sweeps the shards round-robin, clearing set bits (a second
// chance) and evicting the first entry whose bit is clear. Eviction runs
// before a value is written, so the bytes counted against CapacityBytes (the
// published values plus the reservations of writes in flight) never exceed
// it.
//
// Lock order: a per-key stripe mutex, then a shard mutex. Every change of a
// block's published name (publish rename, remove rename, eviction unlink)
// and the matching index update happen under the key's stripe mutex, so the
// index and the directory agree for every key; data writes, fdatasync and
// reads run under no lock at all.
//
// # O_DIRECT
//
// With Options.DirectIO the engine opens payload files with O_DIRECT. If the
// filesystem refuses (EINVAL, at the startup probe or later) it logs one
// warning and uses buffered I/O from then on; Stats.DirectIO reports which.
// tmpfs accepts O_DIRECT opens and silently buffers; that is harmless here.
//
// # Caveats
//
//   - One open and one fstat per Get, and one inode per block: fine for
//     diagnosis, not for tens of millions of small blocks.
//   - A failed unlink during eviction drops the entry from the index anyway
//     (so eviction can make progress) and counts an IO error; the orphan
//     file is picked up again at the next Open.
package file
