package objtier

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// health is the tier's view of whether the bucket answers one kind of
// call: reads (GET, HEAD) or writes (PUT, DELETE), kept apart because a
// bucket can refuse one and serve the other (a full bucket, read-only
// credentials, a PUT rate limit), and reads that succeed must not end,
// and so restart, an outage of writes on every retry. After a failed
// call the kind is down: its calls are skipped (a miss, an upload that
// waits) until a backed-off retry time, so an outage costs the serving
// path nothing but a clock read. At that time one call goes through as a
// probe, and the others go on being skipped until it ends (a bucket that
// hangs would otherwise hold every miss arriving then for the whole call
// timeout). The first success of a call begun since ends it. The two
// kinds share one outage record, so an outage of both is logged once
// when it starts and once when both are back.
type health struct {
	kind   string // "reads" or "writes"
	shared *outage
	down   atomic.Bool
	// probing: the call allow let through as the probe has not ended.
	probing atomic.Bool
	// comeBack: the other kind came back while the probe was out; when
	// it ends, the next call probes at once (probed).
	comeBack atomic.Bool
	// retryAt is an instant, not Unix nanoseconds: its monotonic reading
	// keeps a backward step of the wall clock from holding the tier down
	// for as long as the step. Calls before it are skipped while down.
	retryAt atomic.Pointer[time.Time]

	// probeFor is how long a probe holds the others off: the call
	// timeout, after which its failure (or success) has said so.
	probeFor time.Duration

	mu    sync.Mutex
	since time.Time // when the current (or last) outage of this kind began
	upAt  time.Time // when the last one ended
	bo    *backoff.ExponentialBackOff
}

// outage is what the bucket's reads and writes report together: whether
// either is down, the outages counted (a period with either down is one),
// and their logs.
type outage struct {
	log     *slog.Logger
	bucket  string
	mu      sync.Mutex
	kinds   int // kinds down
	since   time.Time
	count   atomic.Uint64
	reached atomic.Bool // no kind down
}

func newHealth(kind string, shared *outage, callTimeout time.Duration) *health {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	return &health{kind: kind, shared: shared, bo: bo, probeFor: callTimeout}
}

func newOutage(log *slog.Logger, bucket string) *outage {
	o := &outage{log: log, bucket: bucket}
	o.reached.Store(true)
	return o
}

func (o *outage) wentDown(now time.Time, kind, op string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kinds++; o.kinds > 1 {
		return
	}
	o.since = now
	o.count.Add(1)
	o.reached.Store(false)
	o.log.Warn("object store unreachable: serving from RAM and disk only, retrying with back-off; uploads wait in their queue and drop when it is full",
		"bucket", o.bucket, "failing", kind, "op", op, "err", err)
}

func (o *outage) cameUp(now time.Time, op Op, st CallStatus) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kinds--; o.kinds > 0 {
		return
	}
	o.reached.Store(true)
	o.log.Info("object store reachable again", "bucket", o.bucket, "op", op.String(), "status", st.String(), "down_for", now.Sub(o.since).Round(time.Millisecond))
}

// allow reports whether a call may go to the bucket now, and whether it
// is the probe. While the bucket is down, the first caller at or after
// the retry time is the probe: it moves the retry time past its own
// call, so the callers after it are skipped until it has ended the
// outage or backed off again (the caller then calls probed).
func (h *health) allow(now time.Time) (ok, probe bool) {
	if !h.down.Load() {
		return true, false
	}
	at := h.retryAt.Load()
	if at == nil {
		return true, false
	}
	if now.Before(*at) {
		return false, false
	}
	next := now.Add(h.probeFor)
	if !h.retryAt.CompareAndSwap(at, &next) {
		return false, false
	}
	h.probing.Store(true)
	return true, true
}

// probed notes that the probe allow let through has ended. If the other
// kind came back meanwhile, a failure of this probe (sent before) does
// not make the next call wait out the back-off.
func (h *health) probed(now time.Time) {
	h.probing.Store(false)
	if h.comeBack.Swap(false) {
		h.probeNow(now)
	}
}

// wait is how long until the next call is allowed; zero when up.
func (h *health) wait(now time.Time) time.Duration {
	if !h.down.Load() {
		return 0
	}
	at := h.retryAt.Load()
	if at == nil {
		return 0
	}
	return max(0, at.Sub(now))
}

// success notes a call begun at start that the bucket answered at now.
// A call begun before the outage did not see the bucket since it failed:
// it does not end the outage.
// It reports whether the call ended an outage.
func (h *health) success(start, now time.Time, op Op, st CallStatus) bool {
	if !h.down.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() || start.Before(h.since) {
		return false
	}
	h.down.Store(false)
	h.upAt = now
	h.bo.Reset()
	h.shared.cameUp(now, op, st)
	return true
}

// probeNow lets the next call probe at once: the bucket came back for
// calls of the other kind. A probe under way is left to end.
func (h *health) probeNow(now time.Time) {
	if !h.down.Load() {
		return
	}
	if h.probing.Load() {
		h.comeBack.Store(true)
		return
	}
	if at := h.retryAt.Load(); at != nil && now.Before(*at) {
		h.retryAt.CompareAndSwap(at, &now)
	}
}

// failure notes a call begun at start that failed at now. A call begun
// before the last outage ended (one that hung through it) says nothing of
// the bucket since: it neither starts a new outage nor moves the retry.
func (h *health) failure(start, now time.Time, op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if start.Before(h.upAt) {
		return
	}
	at := now.Add(h.bo.NextBackOff())
	h.retryAt.Store(&at)
	if !h.down.Load() {
		h.since = now
		h.down.Store(true)
		h.shared.wentDown(now, h.kind, op, err)
	}
}
