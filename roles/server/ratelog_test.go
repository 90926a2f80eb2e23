package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRateLimitedWarn: one line per warnEvery, and the next line says how
// many were held back meanwhile.
func TestRateLimitedWarn(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	var r rateLimitedWarn
	t0 := time.Unix(1_000_000, 0)
	for i := range 5 {
		r.warn(log, t0.Add(time.Duration(i)*time.Second), "closing connection", "remote", "10.0.0.1:5")
	}
	if n := strings.Count(out.String(), "closing connection"); n != 1 || strings.Contains(out.String(), "suppressed") {
		t.Fatalf("5 warnings within %v: %d lines, want 1 without a count:\n%s", warnEvery, n, out.String())
	}
	r.warn(log, t0.Add(warnEvery+time.Second), "closing connection", "remote", "10.0.0.2:5")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=4") || !strings.Contains(lines[1], "10.0.0.2") {
		t.Fatalf("after %v: want a second line with suppressed=4:\n%s", warnEvery, out.String())
	}
	r.warn(log, t0.Add(2*warnEvery+2*time.Second), "closing connection")
	if last := strings.TrimSpace(out.String()); strings.Contains(last[strings.LastIndex(last, "\n"):], "suppressed") {
		t.Fatalf("nothing held back, yet the line counts some:\n%s", out.String())
	}
}

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
