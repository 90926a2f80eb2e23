package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLimiter: one line per DefaultEvery, and the next line says how
// many were held back meanwhile.
func TestLimiter(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	var r Limiter
	t0 := time.Unix(1_000_000, 0)
	for i := range 5 {
		r.Warn(log, t0.Add(time.Duration(i)*time.Second), "closing connection", "remote", "10.0.0.1:5")
	}
	if n := strings.Count(out.String(), "closing connection"); n != 1 || strings.Contains(out.String(), "suppressed") {
		t.Fatalf("5 warnings within %v: %d lines, want 1 without a count:\n%s", DefaultEvery, n, out.String())
	}
	r.Warn(log, t0.Add(DefaultEvery+time.Second), "closing connection", "remote", "10.0.0.2:5")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=4") || !strings.Contains(lines[1], "10.0.0.2") {
		t.Fatalf("after %v: want a second line with suppressed=4:\n%s", DefaultEvery, out.String())
	}
	r.Warn(log, t0.Add(2*DefaultEvery+2*time.Second), "closing connection")
	if last := strings.TrimSpace(out.String()); strings.Contains(last[strings.LastIndex(last, "\n"):], "suppressed") {
		t.Fatalf("nothing held back, yet the line counts some:\n%s", out.String())
	}
}
