package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// TestPollBackoffSpread: the waits between MDS polls are spread (clients
// do not poll in step), stay within half to one and a half times the
// interval they are drawn around, grow while the MDS fails up to
// mdsRetryMax, and come back to MDSPoll after an answer.
func TestPollBackoffSpread(t *testing.T) {
	const poll = 500 * time.Millisecond
	within := func(d, mid time.Duration) bool { return d >= mid/2 && d <= mid*3/2 }
	first := map[time.Duration]bool{}
	for range 1000 {
		d := pollBackoff(poll).NextBackOff()
		if !within(d, poll) {
			t.Fatalf("first wait %v outside [%v, %v]", d, poll/2, poll*3/2)
		}
		first[d] = true
	}
	if len(first) < 500 {
		t.Fatalf("1000 clients drew only %d distinct first waits", len(first))
	}

	b := pollBackoff(poll)
	mid := poll
	for i := range 10 {
		if d := b.NextBackOff(); !within(d, mid) {
			t.Fatalf("wait %d after failures: %v, want within [%v, %v]", i, d, mid/2, mid*3/2)
		}
		mid = min(2*mid, mdsRetryMax)
	}
	capped := map[time.Duration]bool{}
	for range 100 {
		d := b.NextBackOff()
		if !within(d, mdsRetryMax) {
			t.Fatalf("wait at the cap %v outside [%v, %v]", d, mdsRetryMax/2, mdsRetryMax*3/2)
		}
		capped[d] = true
	}
	if len(capped) < 50 {
		t.Fatalf("100 waits at the cap took only %d values", len(capped))
	}
	b.Reset()
	if d := b.NextBackOff(); !within(d, poll) {
		t.Fatalf("wait after an answer %v, want back within [%v, %v]", d, poll/2, poll*3/2)
	}
	if got := pollBackoff(time.Minute).MaxInterval; got != time.Minute {
		t.Fatalf("a poll interval past mdsRetryMax is capped at %v, want itself", got)
	}
}

// TestFollowBacksOffWhileMDSDown: while no MDS answers, a client polls
// ever less often, up to mdsRetryMax apart, instead of every MDSPoll; once
// one answers it polls every MDSPoll again. In a synctest bubble: the MDS
// is served over net.Pipe and the minutes pass on the fake clock.
func TestFollowBacksOffWhileMDSDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &pipeMDS{}
		d.up.Store(true)
		cl, err := Open(Options{Namespace: []byte("follow"), MDS: []string{"mds.test:7000"}, MDSPoll: 500 * time.Millisecond, Timeout: time.Second, Dialer: d})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		count := func(over time.Duration) int64 {
			before := d.dials.Load()
			time.Sleep(over)
			return d.dials.Load() - before
		}
		if n := count(10 * time.Second); n < 13 || n > 40 {
			t.Fatalf("%d polls in 10 s with the MDS up; want one every 0.25–0.75 s", n)
		}
		d.up.Store(false)
		// Fixed polls would dial 120 times a minute. Waits of 0.5, 1, 2,
		// 4 s and then 5 s, each ±50%, make 10 to 26.
		if n := count(time.Minute); n < 10 || n > 26 {
			t.Fatalf("%d polls in a minute with the MDS down; want 10 to 26", n)
		}
		d.up.Store(true)
		time.Sleep(8 * time.Second) // the longest wait (7.5 s) ends and the poll succeeds
		if n := count(10 * time.Second); n < 13 || n > 40 {
			t.Fatalf("%d polls in 10 s after the MDS came back; want one every 0.25–0.75 s", n)
		}
	})
}

// pipeMDS is a Dialer that plays an MDS with one member over net.Pipe
// while up, and refuses every dial while not.
type pipeMDS struct {
	up    atomic.Bool
	dials atomic.Int64
}

func (p *pipeMDS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	p.dials.Add(1)
	if !p.up.Load() {
		return nil, errors.New("connection refused")
	}
	cli, srv := net.Pipe()
	go func() {
		defer srv.Close()
		var hdr [wire.RequestPrefixLen]byte
		if _, err := io.ReadFull(srv, hdr[:]); err != nil {
			return
		}
		_, known, n, err := wire.DecodeMDSRequest(hdr[:])
		if err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, srv, int64(n)); err != nil {
			return
		}
		const epoch = 7
		var body []byte
		if known != epoch {
			body, _ = json.Marshal(wire.MDSReply{Epoch: epoch, Members: []wire.MemberInfo{{ID: "n1", Addr: "n1.test:1", Weight: 1}}})
		}
		_, _ = srv.Write(append(wire.AppendMDSResponse(nil, wire.StatusOK, epoch, len(body)), body...))
	}()
	return cli, nil
}
