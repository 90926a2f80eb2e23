package register

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TestFailureLogRepeatsWhileFailing: a registration that keeps failing is
// logged once, then once per stillFailingEvery with how long it has
// failed; after a success the next failure is a new first line.
func TestFailureLogRepeatsWhileFailing(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	var f failureLog
	t0 := time.Unix(1_000_000, 0)
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }
	for s := time.Duration(0); s < stillFailingEvery; s += 5 * time.Second { // retries every 5 s
		f.fail(log, t0.Add(s), "cannot register", "id", "n1")
	}
	if l := lines(); len(l) != 1 || strings.Contains(l[0], "failing_for") {
		t.Fatalf("failures within %v: want one line without failing_for:\n%s", stillFailingEvery, out.String())
	}
	f.fail(log, t0.Add(stillFailingEvery), "cannot register", "id", "n1")
	f.fail(log, t0.Add(stillFailingEvery+5*time.Second), "cannot register", "id", "n1")
	f.fail(log, t0.Add(2*stillFailingEvery+time.Second), "cannot register", "id", "n1")
	l := lines()
	if len(l) != 3 || !strings.Contains(l[1], "failing_for=30s") || !strings.Contains(l[2], "failing_for=1m1s") || !strings.Contains(l[2], "id=n1") {
		t.Fatalf("still failing after %v and %v: want two more lines saying for how long:\n%s", stillFailingEvery, 2*stillFailingEvery, out.String())
	}
	f.failing = false // registered
	f.fail(log, t0.Add(3*stillFailingEvery), "MDS heartbeat failed", "id", "n1")
	if l := lines(); len(l) != 4 || strings.Contains(l[3], "failing_for") {
		t.Fatalf("a failure after a success: want a new first line:\n%s", out.String())
	}
}

// TestRetryWaitsSpread: nodes retrying at the same back-off wait
// different times, spread over [0, back-off): a thousand draws of the
// jitter a node uses land in every quarter of it and none outside.
func TestRetryWaitsSpread(t *testing.T) {
	const n, d = 1000, 2 * time.Second
	for name, r := range map[string]*Registrar{"New": New(nil, wire.MemberInfo{}, nil, nil), "zero Registrar": {}} {
		var quarters [4]int
		for range n {
			w := r.jitter(d)
			if w < 0 || w >= d {
				t.Fatalf("%s: wait %v outside [0, %v)", name, w, d)
			}
			quarters[w*4/d]++
		}
		for i, q := range quarters {
			// 250 expected; under 150 is seven standard deviations off.
			if q < 150 {
				t.Fatalf("%s: %d of %d waits in quarter %d of [0, %v): not spread (%v)", name, q, n, i, d, quarters)
			}
		}
	}
	if w := New(nil, wire.MemberInfo{}, nil, nil).jitter(0); w != 0 {
		t.Fatalf("jitter(0) = %v", w)
	}
}

// refusingDialer fails every dial at once, as a stopped MDS does, and
// calls stop before failing its dial number stopAt.
type refusingDialer struct {
	dials  *int
	stopAt int
	stop   func()
}

func (d refusingDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	if *d.dials++; *d.dials == d.stopAt {
		d.stop()
	}
	return nil, errors.New("connection refused")
}

// TestRegisterRetriesBackOff: a node whose registrations keep failing
// waits a jittered time before each retry, over a back-off that doubles
// from firstRetry up to maxRetry and stays there. The draw here records
// each back-off and waits 0, so the test takes no time; the ninth dial
// ends the run.
func TestRegisterRetriesBackOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dials := 0
	mc, err := client.NewMDSClient([]string{"127.0.0.1:1"}, "g", refusingDialer{dials: &dials, stopAt: 9, stop: cancel}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := New(mc, wire.MemberInfo{ID: "n1", Addr: "127.0.0.1:2"}, nil, slog.New(slog.DiscardHandler))
	var bounds []time.Duration
	r.draw = func(d time.Duration) time.Duration {
		bounds = append(bounds, d)
		return 0
	}
	r.Run(ctx) // returns once ctx ends
	ms := time.Millisecond
	want := []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, maxRetry, maxRetry, maxRetry}
	if !slices.Equal(bounds, want) {
		t.Fatalf("back-offs %v, want %v (after %d dials)", bounds, want, dials)
	}
	if r.current.Load() {
		t.Fatal("registered gauge set though no registration succeeded")
	}
}
