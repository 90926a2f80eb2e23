// Package deadline keeps a socket's deadline without re-arming it for
// every request. Setting a deadline on a Go net.Conn updates a runtime
// timer, a visible share of the CPU a small request costs. A deadline at
// most a small slack earlier than the one asked for is kept instead: the
// request may then time out up to slack early, never late.
// The node's writes and the client's exchanges both use it.
package deadline

import "time"

// Slack is how much earlier than asked a kept deadline may be when the
// deadline is timeout from now: 1/64 of it, at most 100 ms.
func Slack(timeout time.Duration) time.Duration {
	return min(timeout/64, 100*time.Millisecond)
}

// Lazy is the deadline a socket was last given; the zero value is none.
// It is not safe for concurrent use (one connection, one owner).
type Lazy struct{ at time.Time }

// Move reports whether the socket must be given deadline d, and records d
// when it must: d is earlier than the kept deadline (always honoured), or
// more than slack later.
func (l *Lazy) Move(d time.Time, slack time.Duration) bool {
	if !d.Before(l.at) && d.Sub(l.at) <= slack {
		return false
	}
	l.at = d
	return true
}
