package server

import (
	"net"
	"testing"
	"time"
)

type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { return c.t }

// writeDeadlineConn records SetWriteDeadline calls.
type writeDeadlineConn struct {
	net.Conn
	set []time.Time
}

func (w *writeDeadlineConn) SetWriteDeadline(t time.Time) error {
	w.set = append(w.set, t)
	return nil
}

// TestArmWriteSlack: a reply keeps the connection's write deadline while
// WriteTimeout from now is at most writeSlack later, and moves it once
// it is further out (or earlier, as after a clock step back).
func TestArmWriteSlack(t *testing.T) {
	clock := &stepClock{t: time.Unix(1000, 0)}
	s := &Server{opts: Options{Clock: clock, WriteTimeout: time.Minute}, writeSlack: 100 * time.Millisecond}
	wc := &writeDeadlineConn{}
	c := &conn{s: s, nc: wc}
	steps := []struct {
		advance time.Duration
		set     bool
	}{
		{0, true},                       // first reply
		{60 * time.Millisecond, false},  // within the slack: kept
		{40 * time.Millisecond, false},  // exactly the slack
		{1 * time.Millisecond, true},    // past it
		{-time.Second, true},            // clock stepped back: earlier deadline
		{100 * time.Millisecond, false}, // slack again from there
	}
	for i, st := range steps {
		clock.t = clock.t.Add(st.advance)
		n := len(wc.set)
		c.armWrite()
		if got := len(wc.set) > n; got != st.set {
			t.Fatalf("step %d: SetWriteDeadline called %v, want %v", i, got, st.set)
		}
		if want := clock.t.Add(time.Minute); st.set && !wc.set[len(wc.set)-1].Equal(want) {
			t.Fatalf("step %d: deadline %v, want %v", i, wc.set[len(wc.set)-1], want)
		}
	}
}
