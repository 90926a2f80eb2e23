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
// path nothing but a clock read. The first success after that ends the
// outage. Each outage is logged once when it starts and once when it ends.
type health struct {
	log     *slog.Logger
	bucket  string
	down    atomic.Bool
	retryAt atomic.Int64 // unix nanoseconds; calls before it are skipped while down

	mu      sync.Mutex
	since   time.Time
	bo      *backoff.ExponentialBackOff
	outages atomic.Uint64
}

func newHealth(log *slog.Logger, bucket string) *health {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	return &health{log: log, bucket: bucket, bo: bo}
}

// allow reports whether a call may go to the bucket now.
func (h *health) allow(now time.Time) bool {
	return !h.down.Load() || now.UnixNano() >= h.retryAt.Load()
}

// wait is how long until the next call is allowed; zero when up.
func (h *health) wait(now time.Time) time.Duration {
	if !h.down.Load() {
		return 0
	}
	return max(0, time.Duration(h.retryAt.Load()-now.UnixNano()))
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
	h.bo.Reset()
	h.log.Info("object store reachable again", "bucket", h.bucket, "op", op.String(), "status", st.String(), "down_for", now.Sub(h.since).Round(time.Millisecond))
}

func (h *health) failure(now time.Time, op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		h.since = now
		h.outages.Add(1)
		h.log.Warn("object store unreachable: serving from RAM and disk only, retrying with back-off; uploads wait in their queue and drop when it is full",
			"bucket", h.bucket, "op", op, "err", err)
	}
	h.retryAt.Store(now.Add(h.bo.NextBackOff()).UnixNano())
	h.down.Store(true)
}
