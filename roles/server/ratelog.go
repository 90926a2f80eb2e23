package server

import (
	"log/slog"
	"sync"
	"time"
)

// warnEvery is how often a per-connection warning of one kind may be
// logged: once a port scanner, a health checker that only connects, or a
// misconfigured client fleet hits the data port, the node would otherwise
// write one line per connection.
const warnEvery = 10 * time.Second

// rateLimitedWarn logs a warning of one kind at most once per every
// (warnEvery when zero), adding how many it held back since the last line
// ("suppressed"); the counters in /metrics still count every event.
type rateLimitedWarn struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
	held  int
}

func (r *rateLimitedWarn) warn(log *slog.Logger, now time.Time, msg string, args ...any) {
	every := r.every
	if every == 0 {
		every = warnEvery
	}
	r.mu.Lock()
	if !r.last.IsZero() && now.Sub(r.last) < every {
		r.held++
		r.mu.Unlock()
		return
	}
	held := r.held
	r.last, r.held = now, 0
	r.mu.Unlock()
	if held > 0 {
		args = append(args, "suppressed", held)
	}
	log.Warn(msg, args...)
}

// reset forgets the last line, so the next warning is logged at once.
func (r *rateLimitedWarn) reset() {
	r.mu.Lock()
	r.last, r.held = time.Time{}, 0
	r.mu.Unlock()
}
