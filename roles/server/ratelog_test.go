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
