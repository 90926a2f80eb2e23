package server

import (
	"sync/atomic"
	"testing"
	"time"
)

// waitUntil polls check until it returns nil, and fails the test with
// check's last error once within has passed; it returns how long the
// wait took. What the tests wait for is other goroutines' and sockets'
// state (a node's counters, an MDS's directory, a client's member list)
// with no event to wait on, so it polls: a short sleep between looks,
// never a fixed wait that a slow machine could outrun.
func waitUntil(t *testing.T, within time.Duration, check func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("not within %v: %v", within, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stepClock is a clock a test moves forward by hand: the real time plus
// what the test added, so the socket deadlines a node arms from it only
// move later, while how long a connection has waited on its client
// (max_conns' idle cut) follows the steps.
type stepClock struct{ ahead atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

func (c *stepClock) step(d time.Duration) { c.ahead.Add(int64(d)) }

// countConns is how many of the node's connections satisfy state, read
// under their locks (the server's, then each connection's, as closeIdlest
// takes them).
func countConns(n *testNode, state func(c *conn) bool) int {
	n.srv.mu.Lock()
	defer n.srv.mu.Unlock()
	k := 0
	for c := range n.srv.conns {
		c.mu.Lock()
		if state(c) {
			k++
		}
		c.mu.Unlock()
	}
	return k
}
