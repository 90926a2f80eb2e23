package objtier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// Op is a kind of bucket call, a label of the tier's metrics.
type Op int

const (
	OpGet Op = iota
	OpHead
	OpPut
	OpDelete
	opCount
)

func (o Op) String() string { return [...]string{"get", "head", "put", "delete"}[o] }

// CallStatus is how a bucket call ended, a label of the tier's metrics.
type CallStatus int

const (
	CallOK       CallStatus = iota
	CallNotFound            // the object is not there: a miss, not a failure
	CallError               // the bucket answered with an error (5xx, 403, a refused connection)
	CallTimeout             // the call ran past Options.Timeout
	CallSkipped             // not made: the bucket is down and its retry time has not come
	statusCount
)

func (s CallStatus) String() string {
	return [...]string{"ok", "not_found", "error", "timeout", "skipped"}[s]
}

// errSkipped is a call not made while the bucket is down.
var errSkipped = errors.New("object store down: call skipped until its retry time")

// call runs one bucket call under the tier's timeout, counting it and
// keeping the bucket's health.
func (t *Tier) call(op Op, f func(ctx context.Context) error) error {
	return t.callCtx(context.Background(), op, f)
}

func (t *Tier) callCtx(parent context.Context, op Op, f func(ctx context.Context) error) error {
	start := t.clock.Now()
	h := t.reads
	if op == OpPut || op == OpDelete {
		h = t.writes
	}
	ok, probe := h.allow(start)
	if !ok {
		t.calls[op][CallSkipped].Add(1)
		return errSkipped
	}
	if probe {
		defer func() { h.probed(t.clock.Now()) }()
	}
	ctx, cancel := context.WithTimeout(parent, t.opts.Timeout)
	err := f(ctx)
	if err != nil && staleConn(err) && ctx.Err() == nil {
		// A kept-alive connection the service had closed (it restarted,
		// or a load balancer dropped it idle): the request never reached
		// it. net/http retries only GET and HEAD on its own; every call
		// here is idempotent, so try once more, on a new connection,
		// before calling it an outage.
		err = f(ctx)
	}
	timedOut := ctx.Err() == context.DeadlineExceeded
	cancel()
	now := t.clock.Now()
	st := CallOK
	switch {
	case err == nil:
	case errors.Is(err, ErrNotExist):
		st = CallNotFound
	case errors.Is(err, ErrTooLarge):
		st = CallOK // the bucket answered; the object is just not ours
	case timedOut || errors.Is(err, context.DeadlineExceeded):
		st = CallTimeout
	default:
		st = CallError
	}
	t.calls[op][st].Add(1)
	if t.opts.Observe != nil {
		t.opts.Observe(op, st, now.Sub(start))
	}
	if st == CallError || st == CallTimeout {
		if parent.Err() == nil { // a drain cut short at Close is not an outage
			h.failure(start, now, op.String(), err)
		}
	} else {
		ended := h.success(start, now, op, st)
		switch {
		case h == t.writes:
			// A bucket that stores objects serves them too.
			t.reads.success(start, now, op, st)
		case ended:
			// Reads came back: writes may have too; their next call
			// need not wait out its back-off to find out.
			t.writes.probeNow(now)
		}
	}
	return err
}

// Stats is a snapshot of the tier's counters.
type Stats struct {
	Bucket string `json:"bucket"`
	Write  string `json:"write"`
	Exist  string `json:"exist"`
	// Reachable is false during an outage (after a failed call, until a
	// call succeeds again); Outages counts them.
	Reachable bool   `json:"reachable"`
	Outages   uint64 `json:"outages"`
	// Calls counts bucket calls by operation and how they ended.
	Calls []CallCount `json:"calls"`
	// BytesRead and BytesWritten count object bytes (headers included).
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
	// ReadThroughHits counts objects read from the bucket for backing
	// misses (identical misses at once share one) and values served from
	// the upload queue (QueueHits); ReadThroughMisses the reads that found
	// no usable object.
	ReadThroughHits   uint64 `json:"read_through_hits"`
	ReadThroughMisses uint64 `json:"read_through_misses"`
	QueueHits         uint64 `json:"queue_hits"`
	// Promoted counts objects written into the backing after a read
	// through; PromoteSkipped those not written because the key changed
	// meanwhile or the backing refused.
	Promoted       uint64 `json:"promoted"`
	PromoteSkipped uint64 `json:"promote_skipped"`
	// Ignored counts objects that were not the key's value in this
	// layout (checksum, length, identity, header): served as misses.
	Ignored uint64 `json:"ignored"`
	// The upload queue (async writes): what waits or is in flight,
	// uploads done, dropped because the queue was full, and dropped after
	// failing every try.
	QueueItems     int    `json:"queue_items"`
	QueueBytes     int64  `json:"queue_bytes"`
	Uploaded       uint64 `json:"uploaded"`
	UploadDrops    uint64 `json:"upload_drops"`
	UploadFailed   uint64 `json:"upload_failed"`
	PendingDeletes int64  `json:"pending_deletes"`
	RetriedDeletes uint64 `json:"retried_deletes"`
}

// CallCount is the number of bucket calls of one operation that ended one way.
type CallCount struct {
	Op     string `json:"op"`
	Status string `json:"status"`
	Count  uint64 `json:"count"`
}

// TierStats returns the tier's own counters (Stats is the backing's).
func (t *Tier) TierStats() Stats {
	items, bytes, drops := t.queue.depth()
	st := Stats{
		Bucket: t.bucket.String(), Write: t.opts.Write.String(), Exist: t.opts.Exist.String(),
		Reachable: t.outage.reached.Load(), Outages: t.outage.count.Load(),
		BytesRead: t.bytesIn.Load(), BytesWritten: t.bytesOut.Load(),
		ReadThroughHits: t.readHits.Load() + t.queueHits.Load(), ReadThroughMisses: t.readMisses.Load(), QueueHits: t.queueHits.Load(),
		Promoted: t.promoted.Load(), PromoteSkipped: t.promoteSkips.Load(), Ignored: t.corrupt.Load(),
		QueueItems: items, QueueBytes: bytes, Uploaded: t.uploaded.Load(), UploadDrops: drops, UploadFailed: t.uploadFails.Load(),
		PendingDeletes: t.tombs.Load(), RetriedDeletes: t.retriedDeletes.Load(),
	}
	for op := range opCount {
		for s := range statusCount {
			st.Calls = append(st.Calls, CallCount{Op: op.String(), Status: s.String(), Count: t.calls[op][s].Load()})
		}
	}
	return st
}

// Stats returns the backing's stats (the disks are what the node holds),
// with the reads the bucket or the upload queue answered counted as hits
// rather than as the backing's misses they began as.
func (t *Tier) Stats() engine.Stats {
	s := t.backing.Stats()
	served := t.readHits.Load() + t.queueHits.Load()
	s.Hits += served
	s.Misses -= min(s.Misses, served)
	return s
}

// Pin pins key in the backing, when the backing pins.
func (t *Tier) Pin(key wire.BlockKey) (engine.Loan, bool) {
	if p, ok := t.backing.(engine.Pinner); ok {
		return p.Pin(key)
	}
	return engine.Loan{}, false
}

// Unpin ends a pin Pin took.
func (t *Tier) Unpin(l engine.Loan) { t.backing.(engine.Pinner).Unpin(l) }

// Close stops the workers, gives queued uploads, and the ones in flight,
// up to Options.DrainTimeout from its start to finish, and closes the
// backing.
func (t *Tier) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("object store tier already closed: %w", wire.StatusUnavailable)
	}
	deadline := time.Now().Add(t.opts.DrainTimeout)
	close(t.stop)
	cut := time.AfterFunc(t.opts.DrainTimeout, t.cancelUploads)
	t.workers.Wait()
	t.promotions.Wait()
	if t.opts.Write == WriteAsync {
		ctx, cancel := context.WithDeadline(t.uploads, deadline)
		t.drain(ctx)
		cancel()
		if items, bytes, _ := t.queue.depth(); items > 0 {
			t.log.Warn("object store: uploads still queued at close were not made; those blocks stay on disk only",
				"bucket", t.bucket.String(), "items", items, "bytes", bytes, "drain_timeout", t.opts.DrainTimeout)
			// The bucket may hold older values of these keys: after a
			// restart they must not be read from it.
			for _, k := range t.queue.keys() {
				t.markStale(k)
			}
		}
	}
	cut.Stop()
	t.cancelUploads()
	err := t.backing.Close()
	if t.marks != nil {
		if merr := t.marks.close(); err == nil && merr != nil {
			err = merr
		}
	}
	_ = t.bucket.Close()
	return err
}

var _ engine.StoreEngine = (*Tier)(nil)
var _ engine.Pinner = (*Tier)(nil)

// staleConn reports whether err is a connection that broke under a
// request (reset, closed, cut short), as opposed to one refused or timed
// out.
func staleConn(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}
