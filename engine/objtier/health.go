package objtier

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// health is the tier's view of whether the bucket answers. After a failed
// call the bucket is down: calls are skipped (a miss, an upload that
// waits) until a backed-off retry time, so an outage costs the serving
// path nothing but a clock read. At that time one call goes through as a
// probe, and the others go on being skipped until it ends (a bucket that
// hangs would otherwise hold every miss arriving then for the whole call
// timeout). The first success ends the outage. Each outage is logged once
// when it starts and once when it ends.
type health struct {
	log    *slog.Logger
	bucket string
	down   atomic.Bool
	// retryAt is an instant, not Unix nanoseconds: its monotonic reading
	// keeps a backward step of the wall clock from holding the tier down
	// for as long as the step. Calls before it are skipped while down.
	retryAt atomic.Pointer[time.Time]

	// probeFor is how long a probe holds the others off: the call
	// timeout, after which its failure (or success) has said so.
	probeFor time.Duration

	mu      sync.Mutex
	since   time.Time // when the current (or last) outage began
	upAt    time.Time // when the last outage ended
	bo      *backoff.ExponentialBackOff
	outages atomic.Uint64
}

func newHealth(log *slog.Logger, bucket string, callTimeout time.Duration) *health {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	return &health{log: log, bucket: bucket, bo: bo, probeFor: callTimeout}
}

// allow reports whether a call may go to the bucket now. While the bucket
// is down, the first caller at or after the retry time is the probe: it
// moves the retry time past its own call, so the callers after it are
// skipped until it has ended the outage or backed off again.
func (h *health) allow(now time.Time) bool {
	if !h.down.Load() {
		return true
	}
	at := h.retryAt.Load()
	if at == nil {
		return true
	}
	if now.Before(*at) {
		return false
	}
	next := now.Add(h.probeFor)
	return h.retryAt.CompareAndSwap(at, &next)
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

func (h *health) success(now time.Time, op Op, st CallStatus) {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		return
	}
	h.down.Store(false)
	h.upAt = now
	h.bo.Reset()
	h.log.Info("object store reachable again", "bucket", h.bucket, "op", op.String(), "status", st.String(), "down_for", now.Sub(h.since).Round(time.Millisecond))
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
	if !h.down.Load() {
		h.since = now
		h.outages.Add(1)
		h.log.Warn("object store unreachable: serving from RAM and disk only, retrying with back-off; uploads wait in their queue and drop when it is full",
			"bucket", h.bucket, "op", op, "err", err)
	}
	at := now.Add(h.bo.NextBackOff())
	h.retryAt.Store(&at)
	h.down.Store(true)
}
