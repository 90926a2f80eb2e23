package objtier

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

// WriteMode says when a PUT reaches the bucket.
type WriteMode int

const (
	// WriteAsync uploads after the backing stored the value, from a
	// bounded queue; a full queue drops the upload (counted), never the PUT.
	WriteAsync WriteMode = iota
	// WriteSync acknowledges a PUT only once the object is stored.
	WriteSync
	// WriteOff never writes or deletes objects: the bucket is read only,
	// filled by others. PUT and REMOVE change the backing alone, so a
	// later miss of the key reads the bucket's copy, whatever this node
	// wrote or removed since.
	WriteOff
)

// ParseWriteMode maps the setting's words to a WriteMode.
func ParseWriteMode(s string) (WriteMode, error) {
	switch s {
	case "async", "":
		return WriteAsync, nil
	case "sync":
		return WriteSync, nil
	case "off":
		return WriteOff, nil
	}
	return 0, fmt.Errorf("unknown object store write mode %q; valid: async, sync, off", s)
}

func (m WriteMode) String() string { return [...]string{"async", "sync", "off"}[m] }

// ExistMode says whether EXIST (and so a prefix count) asks the bucket
// about keys the node does not hold.
type ExistMode int

const (
	// ExistRemote asks the bucket (one HEAD) for each key missing locally.
	ExistRemote ExistMode = iota
	// ExistLocal answers from RAM and disk only.
	ExistLocal
)

// ParseExistMode maps the setting's words to an ExistMode.
func ParseExistMode(s string) (ExistMode, error) {
	switch s {
	case "remote", "":
		return ExistRemote, nil
	case "local":
		return ExistLocal, nil
	}
	return 0, fmt.Errorf("unknown object store exist mode %q; valid: remote, local", s)
}

func (m ExistMode) String() string { return [...]string{"remote", "local"}[m] }

// Options configure a Tier.
type Options struct {
	Backing engine.StoreEngine // the disks (normally an engine.Group)
	Bucket  Bucket
	Prefix  string // object names start "<Prefix>/v1/"
	Write   WriteMode
	Exist   ExistMode
	// Timeout bounds each bucket call (default 5s).
	Timeout time.Duration
	// Workers upload queued values (default 8).
	Workers int
	// QueueBytes bounds the bytes waiting for upload (default 256MiB).
	QueueBytes int64
	// MaxValueBytes is the largest value; larger objects are misses.
	MaxValueBytes uint64
	// DrainTimeout is how long Close waits for queued uploads (default 10s).
	DrainTimeout time.Duration
	// MarksFile, when set, keeps the keys whose objects must not be read
	// (a REMOVE whose delete failed, a dropped upload) on disk, so they
	// stay unread across a restart. Empty: in memory only.
	MarksFile string
	Logger    *slog.Logger
	Clock     engine.Clock
	// Observe, when set, is told the duration of every bucket call.
	Observe func(op Op, status CallStatus, d time.Duration)
}

// Tier is an engine.StoreEngine that keeps the values of its backing
// engine in an object store too, and reads a backing miss through from it.
type Tier struct {
	opts    Options
	backing engine.StoreEngine
	bucket  Bucket
	log     *slog.Logger
	clock   engine.Clock
	pool    *iobuf.Pool
	// reads and writes are whether the bucket answers GET and HEAD, and
	// PUT and DELETE; outage what they report together.
	reads, writes *health
	outage        *outage
	queue         *uploadQueue
	stripes       [stripeCount]stripe
	tombs         atomic.Int64 // keys with a pending delete, over all stripes
	marks         *marksFile   // nil without Options.MarksFile

	stop    chan struct{}
	workers sync.WaitGroup
	// uploads is the context of the workers' uploads; Close cancels it
	// when its drain time is up, so an upload in flight (a bucket that
	// hangs) does not hold the stop for the whole call timeout.
	uploads       context.Context
	cancelUploads context.CancelFunc
	// promoting holds a token per promotion running behind its reader.
	promoting  chan struct{}
	promotions sync.WaitGroup
	closed     atomic.Bool

	calls                        [opCount][statusCount]atomic.Uint64
	bytesIn, bytesOut            atomic.Uint64
	readHits, readMisses         atomic.Uint64
	queueHits                    atomic.Uint64
	corrupt                      atomic.Uint64
	promoted, promoteSkips       atomic.Uint64
	uploaded, uploadFails        atomic.Uint64
	retriedDeletes, tombOverflow atomic.Uint64
	tombGen                      atomic.Uint64
	corruptWarn                  atomic.Pointer[time.Time] // the last corrupt-object warning; nil: none yet
}

// stripeCount stripes keys for the fences between a read-through's
// promotion and the writes of its key.
const stripeCount = 1024

// A stripe holds the read-through state of its keys and orders a
// read-through's promotion against the writes of its key. Its lock is
// never held across I/O: a write in progress is counted in writing, a
// promotion in progress announced in promoting, and each side yields to
// the other (a promotion is skipped when a write began since its read
// did or is under way; a write waits for a promotion of its key to
// land, so the write's value is the one left).
type stripe struct {
	mu sync.Mutex
	// epoch counts the starts and ends of writes (Put, Remove) of the
	// stripe's keys; a read-through promotes its object only if none came
	// since it began.
	epoch uint64
	// writing holds the keys with a write (Put, Remove) in progress.
	// Writes of one key take turns, so the order their values reach the
	// backing is the order their uploads are queued (or, in sync mode,
	// made) in: the disk and the bucket end with the same value. A write
	// that waits for another leaves a channel in writeWaits, closed when
	// that write ends (made only then: a write nobody waits for
	// allocates nothing).
	writing    map[wire.BlockKey]struct{}
	writeWaits map[wire.BlockKey]chan struct{}
	// promoting holds, for a key whose promotion is writing, a channel
	// closed when it is done.
	promoting map[wire.BlockKey]chan struct{}
	// tombs are keys whose object must not be read: a delete is pending
	// (REMOVE's, or one a dropped upload left behind) or in progress.
	tombs map[wire.BlockKey]tomb
	// flights are the bucket reads in progress, shared by identical
	// concurrent misses.
	flights map[wire.BlockKey]*flight
}

// A tomb marks a key whose object must not be read. gen tells one
// marking from the next, so that whoever ends a mark (a finished delete)
// ends only its own. A REMOVE's mark ends only with a delete; a mark left
// by a dropped or failed upload (stale) also ends when a newer upload of
// the key succeeds.
type tomb struct {
	gen     uint64
	removed bool
	// noted: the mark is in the marks file (or on its way there).
	noted bool
}

// maxTombs bounds the keys waiting for a delete. Past it the tier stops
// reading through at all (every miss stays a miss) until deletes drain,
// because a key it cannot remember might be read back after its REMOVE.
const maxTombs = 1 << 18

// Open starts the tier's upload workers and delete retries over
// opts.Backing. The bucket is not checked here; s3bucket.Open checks it.
func Open(opts Options) (*Tier, error) {
	if opts.Backing == nil || opts.Bucket == nil {
		return nil, errors.New("objtier: Backing and Bucket are required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 256 << 20
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 10 * time.Second
	}
	if opts.MaxValueBytes == 0 {
		opts.MaxValueBytes = 64 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = engine.SystemClock{}
	}
	t := &Tier{
		opts: opts, backing: opts.Backing, bucket: opts.Bucket, log: opts.Logger, clock: opts.Clock,
		pool:      iobuf.NewPool(int(opts.MaxValueBytes) + valueSkew + HeaderLen),
		outage:    newOutage(opts.Logger, opts.Bucket.String()),
		stop:      make(chan struct{}),
		promoting: make(chan struct{}, opts.Workers),
	}
	t.queue = newUploadQueue(opts.QueueBytes, t.pool)
	if opts.MarksFile != "" && opts.Write != WriteOff {
		marks, keys, err := openMarks(opts.MarksFile, opts.Logger)
		if err != nil {
			return nil, err
		}
		t.marks = marks
		for _, k := range keys {
			// Whether it was a REMOVE's is not kept: as a REMOVE's, the
			// mark ends only with a delete, which is right for both.
			s := t.stripe(k)
			t.markLocked(s, k, true, false)
			tb := s.tombs[k]
			tb.noted = true
			s.tombs[k] = tb
		}
		if len(keys) > 0 {
			opts.Logger.Info("object store tier: keys kept from reading the bucket until their objects are deleted",
				"file", opts.MarksFile, "keys", len(keys))
		}
	}
	t.reads, t.writes = newHealth("reads", t.outage, opts.Timeout), newHealth("writes", t.outage, opts.Timeout)
	t.uploads, t.cancelUploads = context.WithCancel(context.Background())
	if opts.Write == WriteAsync {
		for range opts.Workers {
			t.workers.Add(1)
			go t.uploadWorker()
		}
	}
	if opts.Write != WriteOff {
		t.workers.Add(1)
		go t.deleteRetries()
	}
	return t, nil
}

func (t *Tier) stripe(key wire.BlockKey) *stripe {
	return &t.stripes[(key.Tenant^uint64(key.ID[0])|uint64(key.ID[1])<<8)%stripeCount]
}

func (t *Tier) name(key wire.BlockKey) string { return ObjectName(t.opts.Prefix, key) }

// beginWrite starts a write of key in its stripe: it waits for a
// promotion of key that is writing and for another write of key, then
// announces the write, so a promotion whose read began earlier is
// skipped. It returns the stripe locked (the caller may mark the key) for
// the caller to unlock; endWrite ends the write. No lock is held between
// the two; a write of the same key waits meanwhile.
func (t *Tier) beginWrite(key wire.BlockKey) *stripe {
	s := t.stripe(key)
	s.mu.Lock()
	for {
		ch := s.promoting[key]
		if _, busy := s.writing[key]; ch == nil && busy {
			if ch = s.writeWaits[key]; ch == nil {
				if s.writeWaits == nil {
					s.writeWaits = make(map[wire.BlockKey]chan struct{})
				}
				ch = make(chan struct{})
				s.writeWaits[key] = ch
			}
		}
		if ch == nil {
			break
		}
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	s.epoch++
	if s.writing == nil {
		s.writing = make(map[wire.BlockKey]struct{})
	}
	s.writing[key] = struct{}{}
	return s
}

// beginPut is beginWrite for a PUT, which supersedes a REMOVE of key
// made before it: the REMOVE's mark, if its delete has not been made,
// becomes a stale mark (the bucket may hold the removed value, older than
// the one being put), which the upload of this or a newer value ends.
// Left a REMOVE's, the mark would outlive that upload and its delete
// would then take the newer object out of the bucket.
func (t *Tier) beginPut(key wire.BlockKey) *stripe {
	s := t.beginWrite(key)
	if tb, ok := s.tombs[key]; ok && tb.removed {
		tb.removed = false
		s.tombs[key] = tb
	}
	return s
}

// endWrite ends a write beginWrite started.
func (t *Tier) endWrite(s *stripe, key wire.BlockKey) {
	s.mu.Lock()
	delete(s.writing, key)
	if ch := s.writeWaits[key]; ch != nil {
		close(ch)
		delete(s.writeWaits, key)
	}
	s.epoch++
	s.mu.Unlock()
}

// Put stores value in the backing, then in the bucket as the write mode says.
func (t *Tier) Put(key wire.BlockKey, value []byte) error {
	s := t.beginPut(key)
	s.mu.Unlock()
	defer t.endWrite(s, key)
	if err := t.backing.Put(key, value); err != nil {
		return err
	}
	switch t.opts.Write {
	case WriteAsync:
		t.enqueue(key, value)
	case WriteSync:
		return t.putSync(key, value)
	}
	return nil
}

// PutBatch stores the batch in the backing with one PutBatch, each key a
// write in progress meanwhile, then uploads the items it stored.
func (t *Tier) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	// Each distinct key once, in key order: two batches sharing keys
	// then never wait for each other in a cycle.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareKeys(keys[a], keys[b]) })
	order = slices.CompactFunc(order, func(a, b int) bool { return keys[a] == keys[b] })
	for _, i := range order {
		t.beginPut(keys[i]).mu.Unlock()
	}
	defer func() {
		for _, i := range order {
			t.endWrite(t.stripe(keys[i]), keys[i])
		}
	}()
	t.backing.PutBatch(keys, values, errs)
	switch t.opts.Write {
	case WriteAsync:
		for i, k := range keys {
			if errs[i] == nil {
				t.enqueue(k, values[i])
			}
		}
	case WriteSync:
		t.putSyncBatch(keys, values, errs, len(order) < len(keys))
	}
}

// putSync uploads one value, within the caller's write of key; on
// failure it takes the value out of the backing too and marks the key for
// a delete, so the PUT that failed leaves no copy that a later read could
// prefer to the bucket's older one.
func (t *Tier) putSync(key wire.BlockKey, value []byte) error {
	buf := t.object(key, value)
	since := t.tombGen.Load()
	t.queue.claim(key, false) // ordered with the key's deletes
	err := t.call(OpPut, func(ctx context.Context) error { return t.bucket.Put(ctx, t.name(key), buf.B) })
	if err == nil {
		t.bytesOut.Add(uint64(len(buf.B)))
		// The stale marks this object supersedes end while the key is
		// still claimed: a delete retry that claims it after would
		// otherwise find the mark and delete the object just stored.
		t.clearStale(key, since)
	}
	t.queue.unclaim(key)
	t.pool.Put(buf)
	if err == nil {
		return nil
	}
	// The caller's write of key is still in progress: no other write of
	// it comes between this PUT and its undoing.
	s := t.stripe(key)
	s.mu.Lock()
	t.markLocked(s, key, false, true)
	s.mu.Unlock()
	_ = t.backing.Remove(key)
	return fmt.Errorf("object store put of %s: %w: %w", t.bucket, err, wire.StatusIOError)
}

// compareKeys orders keys by tenant, then object id.
func compareKeys(a, b wire.BlockKey) int {
	if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	return bytes.Compare(a.ID[:], b.ID[:])
}

// putSyncBatch uploads the batch's stored items in parallel. A key named
// more than once is uploaded once, with its last stored value (the one
// the backing keeps), and its earlier items share that upload's result.
func (t *Tier) putSyncBatch(keys []wire.BlockKey, values [][]byte, errs []error, repeats bool) {
	var last map[wire.BlockKey]int // only for a batch that repeats a key
	if repeats {
		last = make(map[wire.BlockKey]int, len(keys))
		for i, k := range keys {
			if errs[i] == nil {
				last[k] = i
			}
		}
		defer func() {
			for i, k := range keys {
				if j, ok := last[k]; ok && j != i && errs[i] == nil {
					errs[i] = errs[j]
				}
			}
		}()
	}
	sem := make(chan struct{}, t.opts.Workers)
	var wg sync.WaitGroup
	for i := range keys {
		if errs[i] != nil {
			continue
		}
		if j, ok := last[keys[i]]; ok && j != i {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			errs[i] = t.putSync(keys[i], values[i])
		}(i)
	}
	wg.Wait()
}

// object returns a pooled buffer holding key's object: header and value.
func (t *Tier) object(key wire.BlockKey, value []byte) *iobuf.Buf {
	buf := t.pool.Get(HeaderLen + len(value))
	copy(buf.B[HeaderLen:], value)
	putHeader(buf.B[:HeaderLen], key, buf.B[HeaderLen:])
	return buf
}

// enqueue queues key's upload, or drops it when the queue is full. A
// dropped upload leaves an older object of the key (if any) in the
// bucket, so the key is marked for a delete: a read never prefers it.
func (t *Tier) enqueue(key wire.BlockKey, value []byte) {
	if len(value)+HeaderLen > t.pool.Max() {
		t.markStale(key) // never uploaded: an older object must not be read
		return
	}
	buf := t.object(key, value)
	if !t.queue.add(key, buf, t.tombGen.Load()) {
		t.pool.Put(buf)
		t.markStale(key)
	}
}

// Get reads from the backing and, on a miss, through from the bucket.
func (t *Tier) Get(key wire.BlockKey, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	data, stored, err := t.backing.Get(key, offset, length, alloc)
	if err == nil || wire.StatusOf(err) != wire.StatusNotFound {
		return data, stored, err
	}
	obj, release, ok, promoted := t.readThrough(key)
	if promoted {
		// A read-through of the key finished between our miss and our
		// look at the flights: the backing has it now.
		return t.backing.Get(key, offset, length, alloc)
	}
	if !ok {
		return nil, 0, err
	}
	defer release()
	value := obj[HeaderLen:]
	stored = uint64(len(value))
	if offset > stored {
		return nil, stored, fmt.Errorf("offset %d past the stored length %d: %w", offset, stored, wire.StatusInvalid)
	}
	n := stored - offset
	if length != 0 && length < n {
		n = length
	}
	if n == 0 {
		return nil, stored, nil
	}
	dst := alloc.Alloc(int(n))
	copy(dst, value[offset:offset+n])
	return dst[:n], stored, nil
}

// flight is one bucket read shared by identical concurrent misses.
type flight struct {
	done  chan struct{}
	epoch uint64 // the stripe's epoch when it began
	buf   *iobuf.Buf
	obj   []byte // verified header and value; nil for a miss
	refs  int    // guarded by the stripe's lock
}

// readThrough returns key's verified object (header and value) from the
// upload queue or the bucket and a func that releases it, promoting a
// bucket object into the backing. ok is false for a miss; promoted is
// true (and ok false) when the backing holds the key after all: an
// earlier read-through's promotion finished after the caller's miss.
func (t *Tier) readThrough(key wire.BlockKey) (obj []byte, release func(), ok, promoted bool) {
	if buf := t.queue.copyOf(key, t.pool); buf != nil {
		t.queueHits.Add(1)
		return buf.B, func() { t.pool.Put(buf) }, true, false
	}
	if t.tombs.Load() >= maxTombs {
		return nil, nil, false, false
	}
	s := t.stripe(key)
	s.mu.Lock()
	if _, dead := s.tombs[key]; dead {
		s.mu.Unlock()
		return nil, nil, false, false
	}
	f := s.flights[key]
	if f == nil || f.epoch != s.epoch {
		// About to read the bucket: unless a promotion (which stays
		// joinable in flights until it has written) put the key in the
		// backing since the caller missed it. The backing's Exist is an
		// index look-up.
		if _, err := t.backing.Exist(key); err == nil {
			s.mu.Unlock()
			return nil, nil, false, true
		}
	}
	if f != nil && f.epoch == s.epoch {
		// Join the read in flight, or one done whose promotion into
		// the backing has not finished (its bytes are still here).
		f.refs++
		s.mu.Unlock()
		<-f.done
	} else {
		// One reference for this reader, one for the promotion.
		f = &flight{done: make(chan struct{}), epoch: s.epoch, refs: 2}
		if s.flights == nil {
			s.flights = make(map[wire.BlockKey]*flight)
		}
		s.flights[key] = f
		s.mu.Unlock()
		t.fetch(key, f)
		if f.obj != nil {
			t.readHits.Add(1)
		} else {
			t.readMisses.Add(1)
		}
		close(f.done)
		t.promote(key, f)
	}
	if f.obj == nil {
		t.release(key, f)
		return nil, nil, false, false
	}
	return f.obj, func() { t.release(key, f) }, true, false
}

// release drops one reference to f; the last returns its buffer.
func (t *Tier) release(key wire.BlockKey, f *flight) {
	s := t.stripe(key)
	s.mu.Lock()
	f.refs--
	last := f.refs == 0
	s.mu.Unlock()
	if last && f.buf != nil {
		t.pool.Put(f.buf)
	}
}

// promote writes f's verified object into the backing, off the reader's
// path when a promotion slot is free (the reader returns its bytes while
// the disk write runs), on it when all are busy (back-pressure rather
// than an unbounded pile of writes). Until it is done the flight stays
// joinable, so a GET arriving meanwhile reads these bytes instead of the
// bucket a second time.
func (t *Tier) promote(key wire.BlockKey, f *flight) {
	if f.obj == nil {
		t.finishPromote(key, f)
		return
	}
	select {
	case t.promoting <- struct{}{}:
		t.promotions.Add(1)
		go func() {
			defer t.promotions.Done()
			t.promoteNow(key, f)
			<-t.promoting
		}()
	default:
		t.promoteNow(key, f)
	}
}

// promoteNow writes the value into the backing, unless a write of the key
// began since the read did or is under way: its value (or its absence)
// is newer than this object. Writes of the key that begin meanwhile wait
// for it (beginWrite), so they land after it.
func (t *Tier) promoteNow(key wire.BlockKey, f *flight) {
	s := t.stripe(key)
	s.mu.Lock()
	_, dead := s.tombs[key]
	_, writing := s.writing[key]
	if s.epoch != f.epoch || dead || writing {
		s.mu.Unlock()
		t.promoteSkips.Add(1)
	} else {
		done := make(chan struct{})
		if s.promoting == nil {
			s.promoting = make(map[wire.BlockKey]chan struct{})
		}
		s.promoting[key] = done
		s.mu.Unlock()
		err := t.backing.Put(key, f.obj[HeaderLen:])
		s.mu.Lock()
		delete(s.promoting, key)
		s.mu.Unlock()
		close(done)
		if err == nil {
			t.promoted.Add(1)
		} else {
			t.promoteSkips.Add(1)
		}
	}
	t.finishPromote(key, f)
}

func (t *Tier) finishPromote(key wire.BlockKey, f *flight) {
	s := t.stripe(key)
	s.mu.Lock()
	if s.flights[key] == f {
		delete(s.flights, key)
	}
	s.mu.Unlock()
	t.release(key, f)
}

// valueSkew is where a fetched object starts in its pooled buffer (which
// is 4 KiB-aligned): its value then starts at the next 4 KiB boundary.
const valueSkew = engine.IOAlign - HeaderLen

// fetch reads and verifies key's object into f (f.obj stays nil for a miss).
func (t *Tier) fetch(key wire.BlockKey, f *flight) {
	name := t.name(key)
	limit := int64(t.opts.MaxValueBytes) + HeaderLen
	var obj []byte
	err := t.call(OpGet, func(ctx context.Context) error {
		var err error
		obj, err = t.bucket.Get(ctx, name, limit, func(n int) []byte {
			// The value, after the header, lands 4 KiB-aligned, so the
			// promotion's O_DIRECT write takes it without a bounce copy.
			f.buf = t.pool.Get(valueSkew + n)
			return f.buf.B[valueSkew:]
		})
		return err
	})
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			t.noteCorrupt(name, err)
		}
		return
	}
	t.bytesIn.Add(uint64(len(obj)))
	if _, err := checkObject(obj, key); err != nil {
		t.noteCorrupt(name, err)
		return
	}
	f.obj = obj
}

// noteCorrupt counts an object that is not this key's value in this
// layout (a miss) and warns at most once a second.
func (t *Tier) noteCorrupt(name string, err error) {
	n := t.corrupt.Add(1)
	now := t.clock.Now()
	last := t.corruptWarn.Load()
	if (last == nil || now.Sub(*last) >= time.Second) && t.corruptWarn.CompareAndSwap(last, &now) {
		t.log.Warn("object store: ignoring an object that is not a value of this layout (served as a miss)",
			"object", name, "err", err, "ignored_total", n)
	}
}

// Exist answers from the backing and, in ExistRemote, from the bucket.
// A key the backing lacks is read through, not merely looked up with a
// HEAD: the object is verified before EXIST claims it (a HEAD would
// vouch for a corrupt one), and it is promoted, so the GET an engine
// sends after its lookup finds it on disk (or joins the read) instead of
// costing the bucket a second request.
func (t *Tier) Exist(key wire.BlockKey) (uint64, error) {
	stored, err := t.backing.Exist(key)
	if err == nil || t.opts.Exist != ExistRemote || wire.StatusOf(err) != wire.StatusNotFound {
		return stored, err
	}
	return t.remoteExist(key, err)
}

// remoteExist answers EXIST for a key the backing lacked (miss is its
// answer) by reading it through.
func (t *Tier) remoteExist(key wire.BlockKey, miss error) (uint64, error) {
	obj, release, ok, promoted := t.readThrough(key)
	if promoted {
		return t.backing.Exist(key)
	}
	if !ok {
		return 0, miss
	}
	n := uint64(len(obj) - HeaderLen)
	release()
	return n, nil
}

// ExistBatch implements engine.BatchExister: the keys the backing lacks
// are read through in parallel (up to Options.Workers at once), so a
// prefix count after a restart waits about one bucket round trip, not
// one per key.
func (t *Tier) ExistBatch(keys []wire.BlockKey, stored []uint64, errs []error) {
	engine.ExistBatch(t.backing, keys, stored, errs)
	if t.opts.Exist != ExistRemote {
		return
	}
	sem := make(chan struct{}, t.opts.Workers)
	var wg sync.WaitGroup
	for i, k := range keys {
		if errs[i] == nil || wire.StatusOf(errs[i]) != wire.StatusNotFound {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			stored[i], errs[i] = t.remoteExist(k, errs[i])
		}()
	}
	wg.Wait()
}

// Remove removes key from the backing and deletes its object. Until the
// delete is done the key is marked so that nothing reads its object
// back; a delete that fails is retried in the background.
func (t *Tier) Remove(key wire.BlockKey) error {
	if t.opts.Write == WriteOff {
		return t.backing.Remove(key)
	}
	s := t.beginWrite(key)
	gen := t.markLocked(s, key, true, false)
	s.mu.Unlock()
	err := t.backing.Remove(key)
	t.queue.cancel(key) // waits for an upload of key in flight
	// The key's slot is taken before its write ends: the upload of a PUT
	// that comes after this REMOVE reaches the bucket after its delete.
	t.queue.claim(key, false)
	t.endWrite(s, key)
	if wire.StatusOf(err) == wire.StatusNotFound {
		// The node held no copy; the bucket may (written by another node
		// before the ring changed, or evicted here).
		herr := t.call(OpHead, func(ctx context.Context) error {
			_, e := t.bucket.Head(ctx, t.name(key))
			return e
		})
		if herr == nil {
			err = nil
		}
	}
	derr := t.deleteObject(key)
	t.queue.unclaim(key)
	if derr == nil {
		t.clear(key, gen)
		return err
	}
	if perr := t.persistMark(key); perr != nil {
		return fmt.Errorf("remove: the object store's copy could not be deleted (%v) nor its removal recorded (%w); the value may be read back after a restart: %w", derr, perr, wire.StatusIOError)
	}
	return err
}

func (t *Tier) deleteObject(key wire.BlockKey) error {
	return t.deleteObjectCtx(context.Background(), key)
}

// deleteObjectCtx is deleteObject under parent: a delete retry runs
// under the workers' context, which Close cancels when its drain time is
// up.
func (t *Tier) deleteObjectCtx(parent context.Context, key wire.BlockKey) error {
	return t.callCtx(parent, OpDelete, func(ctx context.Context) error { return t.bucket.Delete(ctx, t.name(key)) })
}

// markStale marks key after an upload of it was dropped or failed.
func (t *Tier) markStale(key wire.BlockKey) {
	s := t.stripe(key)
	s.mu.Lock()
	t.markLocked(s, key, false, true)
	s.mu.Unlock()
}

// markLocked marks key (a REMOVE's mark when removed) and returns the
// mark's generation. persist notes the mark in the marks file; a REMOVE
// does that only if its delete fails (persistMark), so a REMOVE the
// bucket answers costs no disk write.
func (t *Tier) markLocked(s *stripe, key wire.BlockKey, removed, persist bool) uint64 {
	return t.markAtLocked(s, key, removed, persist, t.tombGen.Add(1))
}

// markAtLocked is markLocked with the mark's generation given: gen is the
// generation of the queued value the mark is about (a dropped upload's),
// so the upload of any value queued after it ends the mark when it lands
// (clearStale), however late the mark is made.
func (t *Tier) markAtLocked(s *stripe, key wire.BlockKey, removed, persist bool, gen uint64) uint64 {
	if s.tombs == nil {
		s.tombs = make(map[wire.BlockKey]tomb)
	}
	old, had := s.tombs[key]
	if had && old.gen > gen {
		gen = old.gen // never lower a newer mark's generation
	}
	tb := tomb{gen: gen, removed: removed || old.removed, noted: old.noted}
	if persist && !tb.noted && t.marks != nil {
		t.marks.note(key, true)
		tb.noted = true
	}
	s.tombs[key] = tb
	if !had && t.tombs.Add(1) == maxTombs {
		t.tombOverflow.Add(1)
		t.log.Warn("object store: too many deletes pending; reading through is off until they drain", "pending", maxTombs)
	}
	return gen
}

// isMarked reports whether key has a mark.
func (t *Tier) isMarked(key wire.BlockKey) bool {
	s := t.stripe(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tombs[key]
	return ok
}

// clear ends mark gen of key after its delete succeeded.
func (t *Tier) clear(key wire.BlockKey, gen uint64) {
	s := t.stripe(key)
	s.mu.Lock()
	if tb, ok := s.tombs[key]; ok && tb.gen == gen {
		t.unmarkLocked(s, key, tb)
	}
	s.mu.Unlock()
}

// unmarkLocked ends key's mark tb.
func (t *Tier) unmarkLocked(s *stripe, key wire.BlockKey, tb tomb) {
	delete(s.tombs, key)
	t.tombs.Add(-1)
	if tb.noted {
		t.marks.note(key, false)
	}
}

// persistMark waits until key's mark, if it still has one, is on disk:
// a REMOVE whose delete failed returns only then, so a restart cannot
// read the removed value back from the bucket. Without a marks file it
// returns nil at once.
func (t *Tier) persistMark(key wire.BlockKey) error {
	if t.marks == nil {
		return nil
	}
	s := t.stripe(key)
	s.mu.Lock()
	tb, ok := s.tombs[key]
	if ok && !tb.noted {
		t.marks.note(key, true)
		tb.noted = true
		s.tombs[key] = tb
	}
	s.mu.Unlock()
	if !ok {
		return nil // its delete was retried and made meanwhile
	}
	return t.marks.sync()
}

// clearStale ends a stale mark of key made at or before generation since
// (read when the upload's value was queued): an upload of its newest value
// succeeded, so the object is current again. A mark made after since (a
// newer PUT whose upload the full queue refused while this one landed) is
// not this upload's to end.
func (t *Tier) clearStale(key wire.BlockKey, since uint64) {
	s := t.stripe(key)
	s.mu.Lock()
	if tb, ok := s.tombs[key]; ok && !tb.removed && tb.gen <= since {
		t.unmarkLocked(s, key, tb)
	}
	s.mu.Unlock()
}

// deleteRetries deletes the objects of marked keys while the bucket
// answers: REMOVEs whose delete failed and dropped uploads.
func (t *Tier) deleteRetries() {
	defer t.workers.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	type marked struct {
		key wire.BlockKey
		gen uint64
	}
	var keys []marked
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		if t.tombs.Load() == 0 || t.writes.wait(t.clock.Now()) > 0 {
			continue
		}
		for i := range t.stripes {
			s := &t.stripes[i]
			s.mu.Lock()
			keys = keys[:0]
			for k, tb := range s.tombs {
				keys = append(keys, marked{k, tb.gen})
			}
			s.mu.Unlock()
			for _, m := range keys {
				select {
				case <-t.stop: // Close waits for this goroutine
					return
				default:
				}
				if !t.queue.claim(m.key, true) {
					continue // its upload replaces the object and ends a stale mark
				}
				if !t.isMarked(m.key) {
					// An upload that landed since the look ended the mark:
					// its object is the newest, not one to delete.
					t.queue.unclaim(m.key)
					continue
				}
				t.retriedDeletes.Add(1)
				err := t.deleteObjectCtx(t.uploads, m.key)
				t.queue.unclaim(m.key)
				if err != nil {
					break
				}
				t.clear(m.key, m.gen)
			}
		}
	}
}
