package client

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// slowMDS answers every request after lag, as MDS processes sharing a
// slow directory (etcd stalled on fsync) do: all addresses equally slow.
type slowMDS struct {
	*scriptMDS
	lag time.Duration
}

type slowConn struct {
	net.Conn
	lag   time.Duration
	slept bool
}

func (c *slowConn) Read(p []byte) (int, error) {
	if !c.slept {
		c.slept = true
		time.Sleep(c.lag)
	}
	return c.Conn.Read(p)
}

func (s slowMDS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := s.scriptMDS.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: nc, lag: s.lag}, nil
}

// TestOpenWithSlowButHealthyMDSes: two MDS addresses, both healthy, both
// answering in 60% of the call's timeout. Asking the second after the
// first's share of the time does not give up on the first.
func TestOpenWithSlowButHealthyMDSes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := slowMDS{newScriptMDS(7, mfN1), 600 * time.Millisecond}
		cl, err := Open(Options{Namespace: []byte("rv"), MDS: []string{"mds1.test:7000", "mds2.test:7000"},
			MDSPoll: 500 * time.Millisecond, Timeout: time.Second, Dialer: d})
		if err != nil {
			t.Fatalf("Open with two healthy MDS addresses answering in 600ms of a 1s timeout: %v", err)
		}
		cl.Close()
	})
}
