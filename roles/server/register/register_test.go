package register

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
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
