package server

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// payloadBudget bounds the bytes of pooled payload buffers all connections
// hold at once: a PUT's body while it is received and stored, a GET's
// value while it is read from disk and sent, a BATCH_PUT's run. Each
// connection holds at most one of these at a time, up to max_block_bytes,
// so without a bound memory grows with connections times value size until
// the OOM killer, not the node, picks what ends. Past the budget a request
// waits, first come first served (semaphore.Weighted), and its client's
// socket fills and pushes back. A connection never waits while it holds
// budget, so waiting cannot deadlock.
//
// Sizes are buffer sizes (iobuf.SizeFor: what the pool really hands out),
// so the bound is on memory. Values the RAM tier receives into or lends
// from its arena take no budget.
//
// A reserve on top of the budget serves only small requests (up to
// smallMax bytes each), and only when the budget cannot serve them at
// once, so clients that stall large transfers cannot queue every small
// PUT and GET behind them.
type payloadBudget struct {
	sem      *semaphore.Weighted
	reserve  *semaphore.Weighted // nil: no reserve
	smallMax int64
	total    int64
	inUse    atomic.Int64
	waits    atomic.Uint64 // requests that found the budget spent and waited
	timeouts atomic.Uint64 // of those, the ones that gave up

	// pressure, when set, is called when a request starts waiting and
	// every recheck while it waits: it frees budget held by connections
	// stalled on their clients (Server.cutStalled).
	pressure func()
	recheck  time.Duration
}

// smallRequest is the largest request the reserve serves: small values
// and pages, not the large blocks whose unread answers can fill the
// budget.
const smallRequest = 256 << 10

// newPayloadBudget makes a budget of total bytes and, on top of it, a
// reserve of total/8 (at most 128 MiB) for requests of at most
// smallRequest bytes (and at most 1/8 of the reserve) each.
func newPayloadBudget(total uint64) *payloadBudget {
	res := min(total/8, 128<<20)
	b := &payloadBudget{sem: semaphore.NewWeighted(int64(total)), total: int64(total)}
	if res > 0 {
		b.reserve = semaphore.NewWeighted(int64(res))
		b.smallMax = min(int64(res/8), smallRequest)
	}
	return b
}

// tryAcquire takes n bytes if they are free now, from the budget or, for
// a small request, from the reserve; fromReserve says which, for release.
func (b *payloadBudget) tryAcquire(n int64) (ok, fromReserve bool) {
	switch {
	case b.sem.TryAcquire(n):
	case b.reserve != nil && n <= b.smallMax && b.reserve.TryAcquire(n):
		fromReserve = true
	default:
		return false, false
	}
	b.inUse.Add(n)
	return true, fromReserve
}

// acquire takes n bytes (n ≤ total) as tryAcquire does, else waits for
// the budget up to wait or until stop is done; false if it could not.
func (b *payloadBudget) acquire(stop context.Context, n int64, wait time.Duration) (ok, fromReserve bool) {
	if ok, fromReserve := b.tryAcquire(n); ok {
		return true, fromReserve
	}
	b.waits.Add(1)
	ctx, cancel := context.WithTimeout(stop, wait)
	defer cancel()
	if b.pressure != nil {
		// Relieved from beside the wait, which keeps its place in line.
		b.pressure()
		done := make(chan struct{})
		defer close(done)
		go func() {
			tick := time.NewTicker(b.recheck)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					b.pressure()
				}
			}
		}()
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		b.timeouts.Add(1)
		return false, false
	}
	b.inUse.Add(n)
	return true, false
}

func (b *payloadBudget) release(n int64, fromReserve bool) {
	if n == 0 {
		return
	}
	b.inUse.Add(-n)
	if fromReserve {
		b.reserve.Release(n)
		return
	}
	b.sem.Release(n)
}
