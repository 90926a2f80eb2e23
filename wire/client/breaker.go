package client

import (
	"sync/atomic"
	"time"
)

// breaker is a node's circuit breaker, the client's second layer of
// offline detection (the first is the MDS dropping a node whose heartbeat
// lapsed). It has the three usual states:
//
//   - closed: calls go through. A connection failure opens it.
//   - open: calls fail at once, without dialing, until the window ends.
//     The first failure opens it for minBackoff, each further one
//     (counted in failures) doubles that, up to maxBackoff.
//   - half-open: the window has ended. The first caller becomes the trial
//     call and holds the breaker; the others keep failing at once, instead
//     of all paying a silent node's Timeout at the same moment. The
//     trial's verdict settles the incident: success closes the breaker,
//     failure opens it again for a doubled window, and a trial that ends
//     without a verdict (its caller gave up) is released for the next
//     caller.
//
// The state is one int64, read on every call and changed by
// compare-and-swap, so the closed path costs one atomic load:
//
//	0            closed
//	even, > 0    open until that time (monoNanos); half-open once past it
//	odd          half-open, held by the trial whose token it is; the token
//	             is also the hold's expiry, past which the next caller may
//	             become the trial
type breaker struct {
	word      atomic.Int64
	failures  atomic.Int32 // incidents counted since the breaker last closed
	lastTrial atomic.Int64 // the latest trial token handed out, so the next is unique
}

// breakerState names the state the word encodes, as of some time.
type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func (s breakerState) String() string {
	switch s {
	case breakerClosed:
		return "closed"
	case breakerOpen:
		return "open"
	}
	return "half-open"
}

// state is the breaker's state at now.
func (b *breaker) state(now time.Time) breakerState {
	w := b.word.Load()
	switch {
	case w == 0:
		return breakerClosed
	case w&1 == 0 && monoNanos(now) < w:
		return breakerOpen
	}
	return breakerHalfOpen
}

// closed reports that no failure is on record: calls go through.
func (b *breaker) closed() bool { return b.word.Load() == 0 }

// refuses reports whether a call at now would fail at once: the breaker
// is open, or half-open with a trial holding it.
func (b *breaker) refuses(now time.Time) bool {
	w := b.word.Load()
	return w != 0 && monoNanos(now) < w
}

// allow decides whether a call may go to the node at now. A closed
// breaker allows it (trial 0). An open one, or one a trial holds, does
// not. Otherwise the caller becomes the trial, holding the breaker until
// holdUntil: its token (trial) is odd and larger than every earlier one,
// so no window end (even) and no other trial (calls sharing a deadline
// compute the same holdUntil) can be mistaken for it. Pass it to fail and
// release.
func (b *breaker) allow(now, holdUntil time.Time) (ok bool, trial int64) {
	for {
		w := b.word.Load()
		if w == 0 {
			return true, 0
		}
		if monoNanos(now) < w {
			return false, 0
		}
		t := monoNanos(holdUntil) | 1
		if last := b.lastTrial.Load(); t <= last {
			t = last + 2
		}
		if b.word.CompareAndSwap(w, t) {
			// Trials follow one another (each takes over from an ended
			// window or hold), so this store is seen by the next.
			b.lastTrial.Store(t)
			return true, t
		}
	}
}

// fail records a connection failure at now of a call that was the trial
// (trial, from allow) or not (0). Failures while the breaker is open are
// one incident, not several: the calls in flight when a node pauses (a
// GC, a disk stall) all fail at once, and counting each would double the
// window per call (16 callers: the full 5 s of misses for a 50 ms pause).
// The window grows only when the trial after it fails again; a trial
// whose incident another call settled meanwhile changes nothing. Callers
// failing at the same moment race to open the breaker; the one whose
// compare-and-swap opens it counts the failure (opened, with the count n
// and the window it opened for), the others find it open.
func (b *breaker) fail(now time.Time, trial int64) (opened bool, n int32, window time.Duration) {
	for {
		w := b.word.Load()
		if trial != 0 {
			if w != trial {
				return false, 0, 0 // another call settled this incident meanwhile
			}
		} else if w != 0 && monoNanos(now) < w {
			return false, 0, 0
		}
		n = b.failures.Load() + 1
		window = backoffWindow(n)
		if !b.word.CompareAndSwap(w, windowEnd(now.Add(window))) {
			continue
		}
		b.failures.Store(n)
		return true, n, window
	}
}

// release ends a trial that reached no verdict on the node (its caller
// gave up, or the node answered wrongly): the next caller becomes the
// trial at once. After succeed or fail it does nothing.
func (b *breaker) release(trial int64) {
	b.word.CompareAndSwap(trial, windowEnd(time.Now()))
}

// succeed closes the breaker after a good exchange. It reports whether
// that changed anything (the breaker was not closed already).
func (b *breaker) succeed() (changed bool) {
	if b.failures.Load() == 0 && b.word.Load() == 0 {
		return false
	}
	b.failures.Store(0)
	b.word.Store(0)
	return true
}

// backoffWindow is how long the n-th counted failure in a row keeps the
// breaker open: minBackoff doubled n-1 times, at most maxBackoff.
func backoffWindow(n int32) time.Duration {
	d := minBackoff
	for i := int32(1); i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// windowEnd is t as an open window's end in the breaker's word: even
// (trial tokens are odd) and never 0 (closed).
func windowEnd(t time.Time) int64 { return max(monoNanos(t)&^1, 2) }
