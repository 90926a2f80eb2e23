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
// so without a bound the node's memory grew with connections times value
// size: 150 clients each sending all but the last byte of a 64 MiB PUT
// took a node to 8 GB of resident memory, and max_conns of them would
// have taken 256 GiB, so the OOM killer, not the node, chose what ended
// (on a GPU host perhaps the inference engine). Past the budget a request
// waits, first come first served (semaphore.Weighted), and its client's
// socket fills and pushes back. A connection never waits while it holds
// budget, so waiting cannot deadlock.
//
// Sizes are buffer sizes (iobuf.SizeFor: what the pool really
// hands out), so the bound is on memory. Values the RAM tier receives into
// or lends from its arena take no budget.
type payloadBudget struct {
	sem      *semaphore.Weighted
	total    int64
	inUse    atomic.Int64
	waits    atomic.Uint64 // requests that found the budget spent and waited
	timeouts atomic.Uint64 // of those, the ones that gave up
}

func newPayloadBudget(total uint64) *payloadBudget {
	return &payloadBudget{sem: semaphore.NewWeighted(int64(total)), total: int64(total)}
}

// tryAcquire takes n bytes if they are free now.
func (b *payloadBudget) tryAcquire(n int64) bool {
	if !b.sem.TryAcquire(n) {
		return false
	}
	b.inUse.Add(n)
	return true
}

// acquire takes n bytes (n ≤ total), waiting up to wait or until stop is
// done; false if it could not.
func (b *payloadBudget) acquire(stop context.Context, n int64, wait time.Duration) bool {
	if b.tryAcquire(n) {
		return true
	}
	b.waits.Add(1)
	ctx, cancel := context.WithTimeout(stop, wait)
	defer cancel()
	if err := b.sem.Acquire(ctx, n); err != nil {
		b.timeouts.Add(1)
		return false
	}
	b.inUse.Add(n)
	return true
}

func (b *payloadBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.inUse.Add(-n)
	b.sem.Release(n)
}
