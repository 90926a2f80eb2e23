package client

import (
	"testing"
	"time"
)

// TestBreakerStates walks one breaker through its states by name: closed
// until a failure opens it for minBackoff; half-open once the window
// ends, where the first caller becomes the trial and the others are
// refused while it holds the breaker; a failed trial opens it for twice
// as long; a released trial hands over to the next caller; a success
// closes it and forgets the failures.
func TestBreakerStates(t *testing.T) {
	var b breaker
	now := time.Now()
	at := func(d time.Duration) time.Time { return now.Add(d) }
	want := func(when time.Time, s breakerState) {
		t.Helper()
		if got := b.state(when); got != s {
			t.Fatalf("state %v, want %v", got, s)
		}
	}
	want(now, breakerClosed)
	if ok, trial := b.allow(now, at(time.Second)); !ok || trial != 0 || !b.closed() {
		t.Fatalf("closed breaker: allowed %v as trial %d, want a plain call", ok, trial)
	}

	opened, n, window := b.fail(now, 0)
	if !opened || n != 1 || window != minBackoff {
		t.Fatalf("first failure: opened %v, count %d, window %v; want true, 1, %v", opened, n, window, minBackoff)
	}
	want(at(minBackoff/2), breakerOpen)
	if ok, _ := b.allow(at(minBackoff/2), at(time.Second)); ok || !b.refuses(at(minBackoff/2)) || b.closed() {
		t.Fatal("an open breaker let a call through")
	}
	if opened, _, _ := b.fail(at(minBackoff/2), 0); opened {
		t.Fatal("a failure inside the window opened it again (one incident, counted once)")
	}

	after := at(minBackoff + time.Millisecond)
	want(after, breakerHalfOpen)
	ok, trial := b.allow(after, after.Add(time.Second))
	if !ok || trial == 0 || trial%2 == 0 {
		t.Fatalf("half-open: allowed %v as trial %d, want an odd trial token", ok, trial)
	}
	want(after, breakerHalfOpen)
	if ok, _ := b.allow(after, after.Add(time.Second)); ok || !b.refuses(after) {
		t.Fatal("a second caller got through while the trial holds the breaker")
	}

	opened, n, window = b.fail(after, trial)
	if !opened || n != 2 || window != 2*minBackoff {
		t.Fatalf("failed trial: opened %v, count %d, window %v; want true, 2, %v", opened, n, window, 2*minBackoff)
	}
	want(after.Add(minBackoff), breakerOpen)
	b.release(trial) // settled already: nothing happens
	want(after.Add(minBackoff), breakerOpen)

	later := after.Add(2*minBackoff + time.Millisecond)
	_, trial = b.allow(later, later.Add(time.Second))
	b.release(trial) // no verdict: the next caller is the trial at once
	if ok, next := b.allow(time.Now().Add(time.Millisecond), later.Add(time.Second)); !ok || next == 0 || next == trial {
		t.Fatalf("after a released trial: allowed %v as trial %d (old %d), want a new trial", ok, next, trial)
	}

	if !b.succeed() {
		t.Fatal("closing a half-open breaker reported no change")
	}
	want(time.Now(), breakerClosed)
	if b.failures.Load() != 0 || b.succeed() {
		t.Fatal("a closed breaker kept its failures, or closing it again changed something")
	}
}

// TestBackoffWindowDoubles: each counted failure in a row doubles the
// window from minBackoff, up to maxBackoff and no further.
func TestBackoffWindowDoubles(t *testing.T) {
	want := minBackoff
	for n := int32(1); n <= 20; n++ {
		if got := backoffWindow(n); got != want {
			t.Fatalf("failure %d: window %v, want %v", n, got, want)
		}
		want = min(2*want, maxBackoff)
	}
}

// TestBreakerClosedPathAllocates: the check every call makes costs no
// allocation (and, closed, one atomic load).
func TestBreakerClosedPathAllocates(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Timeout: time.Second}}
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() {
		if ok, _ := p.admit(now, now); !ok {
			t.Fatal("closed breaker refused")
		}
	}); n != 0 {
		t.Fatalf("admit on a closed breaker allocates %v times", n)
	}
}

func BenchmarkAdmitClosed(b *testing.B) {
	p := &peer{addr: "node", opts: &Options{Timeout: time.Second}}
	now := time.Now()
	for b.Loop() {
		p.admit(now, now)
	}
}
