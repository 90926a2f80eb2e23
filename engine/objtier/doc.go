// Package objtier is the object-store tier: an engine.StoreEngine that
// keeps every value of its backing (the node's disks) in an S3-compatible
// bucket too, and reads a backing miss through from it. A node that
// crashed, a replacement node, or the node a key moves to after a ring
// change refills from the bucket on demand; an embedded store shares
// blocks with other processes and hosts through it.
//
// # Layout
//
// The bucket is the index: one object per value, named from the key alone
// (ObjectName: "<prefix>/v1/<tenant hex>/<object id hex>"), so no
// metadata service is needed to find a block. Each object is a 64-byte
// header (format.go: magic, key identity, length, LayoutFingerprint, and
// a CRC-32C over header and value) followed by the value. An object that
// fails any check (corrupt, another key's, another layout's) is a counted
// miss, never served.
//
// # Writes
//
// WriteAsync (the default) uploads after the backing stored the value,
// from a per-key queue bounded in bytes (queue.go): a newer PUT replaces
// a queued object, uploads of one key never overlap, and a full queue
// drops the upload rather than block the PUT. Writes of one key take
// turns (Put, PutBatch and Remove hold the key from the backing write to
// the queueing or the sync upload), so the disk and the bucket end with
// the same value when two PUTs of a key race. A dropped upload also drops
// the key's older object waiting in the queue, and makes one in flight no
// longer the key's current object when it lands; until then a miss of the
// key is served the newest object queued or in flight, which the bucket
// may not hold yet. WriteSync acknowledges a
// PUT only once the object is stored. REMOVE deletes the object; eviction
// never does (expiry is the bucket's lifecycle rule).
//
// A key whose object must not be read is marked (a tomb): while a REMOVE's
// delete is pending or failed (retried in the background), and after an
// upload was dropped or failed, since the bucket may then hold an older
// value than the disk. Reads never read a marked key's object. A PUT
// turns a REMOVE's mark into the second kind: its upload, not the
// REMOVE's delete, then decides what the bucket holds. A key's deletes
// and uploads reach the bucket one at a time, in order (they share the
// key's slot in the upload queue).
//
// Marks outlive the process in Options.MarksFile (a bbolt file beside the
// node's first disk; marks.go): a REMOVE whose delete failed returns only
// once its mark is on disk, so neither a restart nor a SIGKILL lets the
// removed value be read back from the bucket; the delete is retried after
// the restart. A REMOVE the bucket answers writes nothing there.
//
// # Reads
//
// A backing miss reads the object through: identical concurrent misses
// share one bucket GET (a flight), the bytes are verified, returned, and
// then promoted into the backing behind the reader. A promotion is
// skipped when a write of the key began since its read did or is under
// way, and a write of the key waits for a promotion that is writing, so
// an older object never replaces a newer value (stripe; no lock is held
// across I/O). The flight stays joinable until its promotion is done.
// ExistRemote answers EXIST by reading through too, so a lookup vouches
// only for verified objects and leaves them promoted for the GET that
// follows; ExistBatch does that for many keys in parallel.
//
// # Outages
//
// Every bucket call has its own timeout. A failed call opens a back-off
// window (health.go) in which calls are skipped: misses stay misses,
// uploads wait in their queue, and the node serves from RAM and disk,
// logging the outage once and its end once. When the window ends one call
// probes the bucket while the others go on being skipped, so a bucket
// that hangs holds up one call per window, not every miss.
package objtier
